//! The API document is the truth: schemathesis (from the venv `scripts/setup`
//! makes) runs against `/v1/openapi.json` of a real server with boxes enabled
//! and real resources behind the id paths, and finds no server error, no
//! undocumented status code or content type, no answer outside its schema, no
//! schema-valid request refused (400) and no schema-invalid one accepted, no
//! undeclared method answered but with 405 and `Allow`; its stateful phase
//! chains operations over the links it infers (issue 29, item 11).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;

/// The schemathesis command line interface in the project's venv.
fn st() -> PathBuf {
    let st = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/st");
    assert!(
        st.is_file(),
        "{} is missing: run scripts/setup (it installs schemathesis from scripts/requirements.txt)",
        st.display()
    );
    st
}

/// Loaded by schemathesis as a hook module:
/// * `only_documented_unavailability` checks a 5xx against what the document
///   allows: only `host_full` from `POST /v1/boxes` (the test's capacity fits
///   one box, so further starts are refused that way), `shot_unavailable`
///   from `POST /v1/boxes/{id}/shots` (the test image has no browser) and 501
///   `aws_not_configured` from the AWS routes (the server has no AWS identity);
/// * the text of a settings file and a tar stream are formats no JSON Schema
///   spells out: a positive case (which the server must accept) carries a
///   real `.env` text or tar made from the generated data, and a review's
///   answer a real PNG; negative cases keep theirs, which the server must
///   refuse. A wire change and a box start get valid names for what depends
///   on the box or the account (declared services, other boxes).
const HOOKS: &str = r#"
import io
import tarfile

import schemathesis

ONE_PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@schemathesis.check
def only_documented_unavailability(ctx, response, case):
    if response.status_code < 500:
        return None
    try:
        code = response.json()["error"]["code"]
    except Exception:
        code = None
    documented = {
        ("POST", "/v1/boxes", 503, "host_full"),
        # The test image has no Chromium, Xvfb or ffmpeg.
        ("POST", "/v1/boxes/{id}/shots", 503, "shot_unavailable"),
        # This server has no AWS identity: it offers no AWS (501, documented),
        # and nothing is sent to AWS.
        ("PUT", "/v1/aws", 501, "aws_not_configured"),
        ("GET", "/v1/aws/ecs/services", 501, "aws_not_configured"),
        ("POST", "/v1/environments/{env}/services/import", 501, "aws_not_configured"),
        ("POST", "/v1/environments/{env}/services/{name}/sync", 501, "aws_not_configured"),
    }
    if (case.method, case.path, response.status_code, code) not in documented:
        raise AssertionError(
            f"a server error: {response.status_code} {code} from {case.method} {case.path}"
        )
    return None


def _text(value):
    return "".join(
        ch for ch in str(value)
        if ch.isprintable() and ch not in "'\"\\#" and not 0xD800 <= ord(ch) <= 0xDFFF
    )[:2000].strip()


def _tar(value):
    data = _text(value).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("fuzzed/file.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@schemathesis.serializer("application/x-tar")
def tar_serializer(ctx, value):
    if value is None or isinstance(value, bytes):
        return value
    text = str(value)
    if all(ord(ch) < 256 for ch in text):
        return text.encode("latin-1")
    return text.encode("utf-8", "surrogatepass")


@schemathesis.hook
def filter_failure(ctx, failure, case, response):
    # Schemathesis (4.32) labels some coverage cases positive whose JSON body
    # is not an object at all (seen: `0` for `PUT .../services/{name}`, while
    # the document requires an object there): such a request is not
    # schema-valid, so its refusal is not a "schema-valid request rejected".
    rejected_positive = type(failure).__name__ == "RejectedPositiveData"
    not_an_object = case.media_type == "application/json" and not isinstance(case.body, dict)
    return not (rejected_positive and not_an_object)


@schemathesis.hook
def map_case(ctx, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return case
    if case.media_type == "application/x-tar":
        # As text (one character per byte), so that it still reads as the
        # schema's string; the serializer sends those bytes.
        case.body = _tar(case.body).decode("latin-1")
    elif case.path == "/v1/reviews/{id}/answer" and isinstance(case.body, dict):
        # An image is a PNG (the document says so, as contentMediaType, which
        # no generator follows); that an answer which does not approve says
        # something, the document says itself.
        items = case.body.get("items")
        if isinstance(items, list):
            case.body = {**case.body, "items": [
                {**item, "image": ONE_PIXEL_PNG}
                if isinstance(item, dict) and isinstance(item.get("image"), str) else item
                for item in items
            ]}
    elif case.path == "/v1/boxes" and case.method.upper() == "POST" and isinstance(case.body, dict):
        # What the document cannot say: a declared name is a host name or a
        # private range, a link names another box of the account, external
        # mode needs a base URL. Valid ones, then (ports as integers).
        body = {k: v for k, v in case.body.items() if k not in ("links", "externalBaseUrl")}
        services = body.get("services")
        if isinstance(services, list):
            body["services"] = [
                {"name": f"svc{i}.fuzz.internal", "port": 8000 + i, "mode": "box"}
                for i in range(min(len(services), 5))
            ]
        case.body = body
    elif case.path == "/v1/boxes/{id}/wire" and isinstance(case.body, dict):
        # The document says what a change needs by itself (a service for mode,
        # port, targetPort and version; something to change); what depends on
        # the box (which services it declares, its external base URL) it
        # cannot: a change that declares a new service in box mode, then.
        case.body = {"service": "fuzzed.svc.local", "port": 8080}
    elif case.path == "/v1/environments/{env}/services/import" and isinstance(case.body, dict):
        # The ECS service's name is the stored name only when it is one.
        case.body = {**case.body, "name": "fuzzed-import"}
    elif case.path == "/v1/environments/{env}/services/{name}" and isinstance(case.body, dict):
        case.body = {**case.body, "dotenv": f"FUZZED_VALUE={_text(case.body.get('dotenv', ''))}\n"}
    return case
"#;

/// Costs about 95 s on two TCG cores (48 s with the earlier 12 examples, five
/// checks and no stateful phase): one test-image box boots (a few seconds),
/// then schemathesis runs 25 examples an operation, every check, and its
/// stateful phase (~86 s: coverage ~28 s, fuzzing ~46 s, stateful ~12 s).
#[test]
fn schemathesis_finds_the_document_true() {
    // One vCPU of room (2 host CPUs x 0.5) and no pool: one box runs, every
    // further start is a quick 503 `host_full`.
    let s = BoxServer::start("cpu_overcommit = 0.5");
    let url = s.url();

    // Real resources, so that id paths reach real objects as well as missing ones.
    let started = s.ok(
        "POST",
        "/v1/boxes",
        Some(json!({"name": "fuzzed", "goal": "schemathesis"})),
    );
    let box_id = started["id"].as_str().unwrap().to_owned();
    s.ok("POST", "/v1/environments", Some(json!({"name": "dev"})));
    let connection = s.ok(
        "POST",
        "/v1/environments/dev/connections",
        Some(json!({"name": "office"})),
    );
    let connection_id = connection["id"].as_str().unwrap().to_owned();
    s.ok(
        "PUT",
        "/v1/environments/dev/services/api",
        Some(json!({"dotenv": "DATABASE_URL=postgres://db.internal:5432/app\n"})),
    );
    s.ok(
        "PUT",
        "/v1/secrets/API_TOKEN",
        Some(json!({"value": "schemathesis-secret-value"})),
    );
    // A key schemathesis may revoke (its path parameter is drawn from this id
    // sometimes); the run itself authenticates with the server's first key,
    // whose id it is never given.
    let spare = s.ok("POST", "/v1/api-keys", Some(json!({"name": "spare"})));
    let spare_id = spare["id"].as_str().unwrap().to_owned();
    let proc = s.ok(
        "POST",
        &format!("/v1/boxes/{box_id}/exec"),
        Some(json!({"cmd": "sleep 600", "background": true})),
    );
    let pid = proc["pid"].as_u64().unwrap();
    // A cursor is opaque: only one the server gave out is valid, which no
    // generator can draw. The cursors here continue after real items (the
    // server's own form: base64url of `<time>|<id>`).
    use base64::Engine;
    let cursor_of = |id: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(format!("2026-12-01T00:00:00+00:00|{id}"))
    };
    let (box_cursor, key_cursor) = (cursor_of(&box_id), cursor_of(&spare_id));

    let work = tempfile::tempdir().expect("tempdir");
    let hooks = work.path().join("psbx_hooks.py");
    std::fs::write(&hooks, HOOKS).expect("hooks");
    let config = work.path().join("schemathesis.toml");
    let toml = format!(
        r#"
seed = 20261203
workers = 1
request-timeout = 120
max-failures = 50
continue-on-failure = true
hooks = "{hooks}"
headers = {{ Authorization = "Bearer {key}" }}

[generation]
max-examples = 25
mode = "all"

[phases.examples]
enabled = true
[phases.coverage]
enabled = true
[phases.fuzzing]
enabled = true
# Chains operations over the links schemathesis infers from the document
# (a start's `id` into the box routes, a list's items into their paths).
[phases.stateful]
enabled = true

# All checks: besides the ones below, undeclared methods (405 with Allow),
# missing required headers, ignored auth, use after free and resource
# availability (the stateful phase's).
[checks]
enabled = true
[checks.not_a_server_error]
enabled = true
# 503 `host_full` is the documented answer of a start that does not fit, 501
# `aws_not_configured` of the AWS routes on a server without an AWS identity;
# `only_documented_unavailability` (the hook) refuses every other 5xx.
expected-statuses = ["2xx", "3xx", "4xx", "501", "503"]
[checks.status_code_conformance]
enabled = true
[checks.content_type_conformance]
enabled = true
[checks.response_schema_conformance]
enabled = true
[checks.positive_data_acceptance]
enabled = true
[checks.negative_data_rejection]
enabled = true
[checks.only_documented_unavailability]
enabled = true

[dictionaries.box]
values = ["{box_id}"]
[dictionaries.env]
values = ["dev"]
[dictionaries.connection]
values = ["{connection_id}"]
[dictionaries.service]
values = ["api"]
[dictionaries.secret]
values = ["API_TOKEN"]
[dictionaries.key]
values = ["{spare_id}"]
[dictionaries.pid]
values = [{pid}]

[[operations]]
include-operation-id = "listBoxes"
parameters = {{ "query.cursor" = "{box_cursor}" }}

[[operations]]
include-operation-id = "listApiKeys"
parameters = {{ "query.cursor" = "{key_cursor}" }}

[[operations]]
include-path-regex = "^/v1/boxes/\\{{id\\}}"
parameters = {{ "path.id" = {{ dictionary = "box", probability = 0.7 }}, "path.pid" = {{ dictionary = "pid", probability = 0.5 }} }}

[[operations]]
include-path-regex = "^/v1/environments/\\{{env\\}}"
parameters = {{ "path.env" = {{ dictionary = "env", probability = 0.7 }}, "path.id" = {{ dictionary = "connection", probability = 0.7 }}, "path.name" = {{ dictionary = "service", probability = 0.5 }} }}

[[operations]]
include-path-regex = "^/v1/secrets/"
parameters = {{ "path.name" = {{ dictionary = "secret", probability = 0.5 }} }}

[[operations]]
include-path-regex = "^/v1/api-keys/"
parameters = {{ "path.id" = {{ dictionary = "key", probability = 0.3 }} }}

# DELETE /v1/boxes/{{id}} stops a box, and a stopped box stays readable (its
# state `stopped`, its times and why; the spec keeps a box's record after its
# end): a GET after the DELETE answers 200 by design, not a use after free.
[[operations]]
include-operation-id = "getBox"
checks = {{ use_after_free = {{ enabled = false }} }}

# A WebSocket upgrade for connectors: its exchange is wire frames, which the
# connector tests drive (tests/tests/connector.rs); an HTTP fuzzer only sees
# the refusals before the upgrade.
[[operations]]
include-operation-id = "connect"
enabled = false
"#,
        hooks = hooks.display(),
        key = s.key,
    );
    std::fs::write(&config, toml).expect("config");

    let out = Command::new(st())
        .arg("--config-file")
        .arg(&config)
        .arg("--no-color")
        .arg("run")
        .arg(format!("{url}/v1/openapi.json"))
        .current_dir(work.path())
        .output()
        .expect("running schemathesis");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    psbx_tests::witness::assert_unseen("the schemathesis report", &report);
    assert!(
        out.status.success(),
        "schemathesis found the document untrue:\n{report}\nthe server's warnings and errors:\n{}",
        s.warnings()
    );
    // The run did exercise the API (not an empty selection), statefully too.
    assert!(report.contains("passed"), "{report}");
    assert!(
        report.contains("Scenarios:"),
        "the stateful phase did not run:\n{report}"
    );
}
