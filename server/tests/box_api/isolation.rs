//! Tenant isolation, in-process (was `tests/tests/isolation.rs`'s VM story):
//! a second account calls every REST route that takes an id (taken from
//! `/v1/openapi.json`, so a new route cannot be left out) and every MCP tool
//! that takes one, with the first account's ids: each answers 404 (an MCP
//! error saying it is not found), and nothing of the first account changed.
//! The app on the fake host with boxd's real services, and a real MCP client
//! (the Python SDK). The same path on a real box: `tests/tests/boxes.rs`'s
//! `a_box_runs_freezes_thaws_and_stops` (another account's exec and logs).

use crate::world::World;
use psbx_tests::python::run_json;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The routes that take an id, with a body that would be valid for the
/// owner. `PUT /v1/secrets/{name}` is not here: a secret's name is the
/// caller's own to use, so it stores the caller's secret (checked below).
fn routes() -> Vec<(&'static str, &'static str, Option<Value>)> {
    vec![
        ("GET", "/v1/boxes/{id}", None),
        ("DELETE", "/v1/boxes/{id}", None),
        (
            "POST",
            "/v1/boxes/{id}/exec",
            Some(json!({"cmd": "touch b-was-here"})),
        ),
        ("POST", "/v1/boxes/{id}/keep", Some(json!({"keep": "1d"}))),
        (
            "POST",
            "/v1/boxes/{id}/wire",
            Some(json!({"service": "api.svc.local", "port": 8080})),
        ),
        ("POST", "/v1/boxes/{id}/sync", None),
        ("POST", "/v1/boxes/{id}/takeover", None),
        ("GET", "/v1/boxes/{id}/terminals", None),
        ("DELETE", "/v1/boxes/{id}/terminals", None),
        ("DELETE", "/v1/boxes/{id}/terminals/{terminal}", None),
        ("POST", "/v1/boxes/{id}/url-key", None),
        ("POST", "/v1/boxes/{id}/shots", Some(json!({}))),
        ("GET", "/v1/boxes/{id}/shots", None),
        ("DELETE", "/v1/boxes/{id}/shots", None),
        ("GET", "/v1/boxes/{id}/shots/{shot}", None),
        ("GET", "/v1/boxes/{id}/shots/{shot}/file", None),
        ("DELETE", "/v1/boxes/{id}/shots/{shot}", None),
        (
            "POST",
            "/v1/boxes/{id}/reviews",
            Some(json!({"title": "theirs"})),
        ),
        ("GET", "/v1/reviews/{id}", None),
        (
            "POST",
            "/v1/reviews/{id}/answer",
            Some(json!({"approved": true})),
        ),
        ("GET", "/v1/boxes/{id}/processes", None),
        ("DELETE", "/v1/boxes/{id}/processes/{pid}", None),
        ("GET", "/v1/boxes/{id}/processes/{pid}/logs", None),
        ("DELETE", "/v1/api-keys/{id}", None),
        ("DELETE", "/v1/secrets/{name}", None),
        ("GET", "/v1/environments/{env}", None),
        (
            "PUT",
            "/v1/environments/{env}",
            Some(json!({"externalBaseUrl": "https://b.example.com"})),
        ),
        ("DELETE", "/v1/environments/{env}", None),
        ("GET", "/v1/environments/{env}/suggested-endpoints", None),
        (
            "POST",
            "/v1/environments/{env}/connections",
            Some(json!({"name": "b-conn"})),
        ),
        ("DELETE", "/v1/environments/{env}/connections/{id}", None),
        (
            "POST",
            "/v1/environments/{env}/connections/{id}/token",
            None,
        ),
        (
            "PUT",
            "/v1/environments/{env}/connections/{id}/endpoints",
            Some(json!({"endpoints": [{"host": "db.internal", "port": 5432}]})),
        ),
        (
            "PUT",
            "/v1/environments/{env}/services/{name}",
            Some(json!({"dotenv": "B=1"})),
        ),
        (
            "POST",
            "/v1/environments/{env}/services/import",
            Some(json!({"cluster": "prod", "service": "api"})),
        ),
        ("POST", "/v1/environments/{env}/services/{name}/sync", None),
        ("DELETE", "/v1/environments/{env}/services/{name}", None),
    ]
}

/// A 1x1 PNG, in base64.
const ONE_PIXEL_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// Routes with an id that are not the account's to scope: an upload URL's
/// token is its own credential, and the connector's route takes none.
const NOT_SCOPED: [&str; 1] = ["/v1/uploads/{token}"];

/// Everything of account A another account could have changed.
fn state_of(s: &World, key: &str, id: &str, conn: &str) -> Value {
    let get = |path: &str| psbx_tests::api::ok(&s.url, key, "GET", path, None);
    let mut one = get(&format!("/v1/boxes/{id}"));
    // A's own reads count as its activity; the rest must stay as it was.
    for moves in ["health", "lastActivityAt", "freezesAt", "expiresAt"] {
        one.as_object_mut().unwrap().remove(moves);
    }
    json!({
        "box": one,
        "processes": get(&format!("/v1/boxes/{id}/processes")),
        "secrets": get("/v1/secrets"),
        "environment": get("/v1/environments/dev"),
        "keys": get("/v1/api-keys"),
        "boxAccess": get("/v1/box-access"),
        "reviews": get("/v1/reviews"),
        "shots": get(&format!("/v1/boxes/{id}/shots")),
        "token": s.db_query(&format!(
            "SELECT encode(token_sha256, 'hex') AS v FROM connections WHERE id = '{conn}'"
        )),
    })
}

#[test]
fn another_accounts_ids_are_not_found_anywhere_and_change_nothing() {
    let s = World::start();
    let url = s.url.clone();
    // Account A: a box with a background command, a secret, an environment
    // with a service and a connection, a second API key.
    let made = s.ok("POST", "/v1/boxes", Some(json!({"name": "mine"})));
    let id = made["id"].as_str().unwrap().to_owned();
    let ran = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": "sleep 600", "background": true})),
    );
    let pid = ran["pid"].as_u64().unwrap().to_string();
    s.ok(
        "PUT",
        "/v1/secrets/MINE_TOKEN",
        Some(json!({"value": "a-value-of-a"})),
    );
    s.ok("POST", "/v1/environments", Some(json!({"name": "dev"})));
    s.ok(
        "PUT",
        "/v1/environments/dev/services/api",
        Some(json!({"dotenv": "A=1"})),
    );
    let conn = s.ok(
        "POST",
        "/v1/environments/dev/connections",
        Some(json!({"name": "office"})),
    );
    let conn = conn["id"].as_str().unwrap().to_owned();
    let key = s.ok("POST", "/v1/api-keys", Some(json!({"name": "second"})));
    let key_id = key["id"].as_str().unwrap().to_owned();
    // A review of the box, answered with an image drawn on (a stored shot).
    let review = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/reviews"),
        Some(json!({"title": "mine"})),
    );
    let rid = review["id"].as_str().unwrap().to_owned();
    let answered = s.ok(
        "POST",
        &format!("/v1/reviews/{rid}/answer"),
        Some(json!({"items": [{"text": "mine", "image": ONE_PIXEL_PNG}]})),
    );
    let shot = answered["feedback"][0]["image"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = state_of(&s, &s.key, &id, &conn);

    let other = s.key_of_new_account("acct_other");
    let fill = |template: &str| {
        let with_box = template.starts_with("/v1/boxes/");
        template
            .replace(
                "{id}",
                if with_box {
                    &id
                } else if template.starts_with("/v1/reviews/") {
                    &rid
                } else if template.contains("/connections/") {
                    &conn
                } else {
                    &key_id
                },
            )
            .replace("{pid}", &pid)
            .replace("{terminal}", "term_none")
            .replace("{shot}", &shot)
            .replace("{env}", "dev")
            .replace(
                "{name}",
                if template.starts_with("/v1/secrets/") {
                    "MINE_TOKEN"
                } else {
                    "api"
                },
            )
    };

    // Every route of the API document that takes an id is in the table.
    let (_, doc) = psbx_tests::api::call(&url, &other, "GET", "/v1/openapi.json", None);
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("the API document's paths") {
        if !path.contains('{') || NOT_SCOPED.contains(&path.as_str()) {
            continue;
        }
        for method in item.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let mut tested: BTreeSet<(String, String)> = routes()
        .iter()
        .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    tested.insert(("PUT".into(), "/v1/secrets/{name}".into()));
    let untested: Vec<_> = documented.difference(&tested).collect();
    assert!(
        untested.is_empty(),
        "routes with an id this test does not call: {untested:?}"
    );

    for (method, template, body) in routes() {
        let path = fill(template);
        let (status, answer) = psbx_tests::api::call(&url, &other, method, &path, body);
        assert_eq!(status, 404, "{method} {path} as another account: {answer}");
        assert!(
            answer["error"]["code"].is_string(),
            "{method} {path}: {answer}"
        );
    }
    // A secret's name is the caller's own: the other account stores its own.
    let (status, answer) = psbx_tests::api::call(
        &url,
        &other,
        "PUT",
        "/v1/secrets/MINE_TOKEN",
        Some(json!({"value": "a-value-of-b"})),
    );
    assert!((200..300).contains(&status), "{status} {answer}");
    // The other account's lists hold none of A's things.
    for (path, field) in [
        ("/v1/boxes", "boxes"),
        ("/v1/environments", "environments"),
        ("/v1/reviews", "reviews"),
    ] {
        let list = psbx_tests::api::ok(&url, &other, "GET", path, None);
        assert_eq!(list[field], json!([]), "{path}: {list}");
    }
    let keys = psbx_tests::api::ok(&url, &other, "GET", "/v1/api-keys", None);
    assert!(!keys.to_string().contains(&key_id), "{keys}");

    // MCP: the same ids through the tools.
    let calls = json!([
        ["sandbox_status", {"id": id}],
        ["sandbox_exec", {"id": id, "cmd": "touch b-was-here"}],
        ["sandbox_exec", {"id": id, "pid": pid.parse::<u64>().unwrap()}],
        ["sandbox_sync", {"id": id}],
        ["sandbox_shot", {"id": id}],
        ["sandbox_review", {"id": id}],
        ["sandbox_review", {"id": id, "title": "theirs"}],
        ["sandbox_wire", {"id": id, "service": "api.svc.local", "port": 8080}],
        ["sandbox_stop", {"id": id}],
        ["sandbox_start", {"name": "b", "environment": "dev"}],
        ["sandbox_start", {"name": "b", "links": [{"name": "api.svc.local", "port": 8080, "box": id}]}],
    ]);
    let seen = run_json(
        "calls_client.py",
        &[&format!("{url}/mcp"), &other, &calls.to_string()],
    );
    for result in seen.as_array().unwrap() {
        assert_eq!(result["is_error"], true, "{result}");
        let text = result["text"].as_str().unwrap().to_lowercase();
        assert!(
            text.contains("no box")
                || text.contains("not found")
                || text.contains("no environment"),
            "{result}"
        );
    }
    let (_, list) = psbx_tests::api::call(&url, &other, "GET", "/v1/boxes", None);
    assert_eq!(
        list["boxes"],
        json!([]),
        "sandbox_start made a box anyway: {list}"
    );

    // The box-URL allowlist is one per account: B's is its own.
    psbx_tests::api::ok(
        &url,
        &other,
        "PUT",
        "/v1/box-access",
        Some(json!({"entries": ["203.0.113.0/24"]})),
    );

    // Nothing of A changed: the box runs on with its command, nothing was
    // written into it, its environment, secret, keys, token and allowlist are
    // as they were.
    let after = state_of(&s, &s.key, &id, &conn);
    assert_eq!(after, before, "another account changed account A's things");
    // (Commands run in the box's /work: its directory here.)
    let check = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": "test -e b-was-here; echo $?"})),
    );
    assert_eq!(
        check["stdout"]["text"].as_str().map(str::trim),
        Some("1"),
        "{check}"
    );
    assert!(!s.work_of(&id).join("b-was-here").exists());
    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
}
