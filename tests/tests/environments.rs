//! Environments over REST against the real binary (boxes disabled; the box
//! side is in `environment_boxes.rs`): the spec's own curl example as written,
//! validation messages naming the offending entry, limits, tokens stored as
//! hashes and rotated, suggested endpoints from a settings file covering every
//! rule, and account scoping (another account's environment is a 404).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use diesel::{Connection, PgConnection, RunQueryDsl};
use psbx_tests::{ServerProcess, TestDatabase};
use serde_json::{Value, json};
use std::process::Command;

/// Dropped in field order: the server, then its database and data directory.
struct Setup {
    server: ServerProcess,
    key: String,
    db: TestDatabase,
    dir: tempfile::TempDir,
}

impl Setup {
    fn start() -> Self {
        let db = TestDatabase::new();
        let dir = tempfile::tempdir().unwrap();
        let server = ServerProcess::without_boxes(
            dir.path(),
            &db,
            &[(
                "PSBX_CONNECTOR_IMAGE",
                "registry.example.com/psbx/connector:7",
            )],
        );
        let key = server.first_key().expect("a first key");
        Self {
            server,
            key,
            db,
            dir,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_as(&self.key, method, path, body)
    }

    fn call_as(&self, key: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        psbx_tests::api::call(&self.server.url, key, method, &format!("/v1{path}"), body)
    }

    /// A key of a second account.
    fn other_key(&self) -> String {
        let other = self.db.add_account("acct_other");
        let out = Command::new(psbx_tests::binary("psbx"))
            .args(["--data-dir", self.dir.path().to_str().unwrap()])
            .args(["keys", "create", "--name", "other", "--account", &other])
            .env("DATABASE_URL", self.db.url())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace()
            .find(|w| w.starts_with("psbx_") && w.len() == 45)
            .unwrap_or_else(|| panic!("no key in {text}"))
            .to_owned()
    }

    /// How many connections have this token's SHA-256 (never the token itself).
    fn connections_with_token(&self, token: &str) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let mut conn = PgConnection::establish(self.db.url()).unwrap();
        diesel::sql_query(
            "SELECT count(*) AS n FROM connections WHERE token_sha256 = sha256(convert_to($1, 'UTF8'))",
        )
        .bind::<diesel::sql_types::Text, _>(token)
        .get_result::<Count>(&mut conn)
        .unwrap()
        .n
    }

    /// Whether any column of the environment tables holds `text` in clear.
    fn stored_in_clear(&self, text: &str) -> bool {
        #[derive(diesel::QueryableByName)]
        struct Found {
            #[diesel(sql_type = diesel::sql_types::Bool)]
            found: bool,
        }
        let mut conn = PgConnection::establish(self.db.url()).unwrap();
        diesel::sql_query(
            "SELECT EXISTS (SELECT 1 FROM connections c WHERE c::text LIKE '%' || $1 || '%') \
             OR EXISTS (SELECT 1 FROM environment_services s WHERE s::text LIKE '%' || $1 || '%') \
             OR EXISTS (SELECT 1 FROM environment_services s WHERE position(convert_to($1, 'UTF8') in s.ciphertext) > 0) \
             AS found",
        )
        .bind::<diesel::sql_types::Text, _>(text)
        .get_result::<Found>(&mut conn)
        .unwrap()
        .found
    }
}

#[test]
fn the_specs_rest_example_runs_as_written() {
    let s = Setup::start();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("api.env"),
        "# api on dev\nexport DATABASE_URL=postgres://api:s3cretpass@mydb.internal:5432/api\n\
         STAGE=dev\nGREETING=\"hello\\nworld\"\n",
    )
    .unwrap();
    // The example of environments.txt ("Set it up over REST"), with only the
    // base URL, the token and the connection's id filled in.
    let script = r#"
set -e
A=$BASE/v1; H="Authorization: Bearer $PSBX_TOKEN"   # an API key or an OAuth access token
curl -s -H "$H" -X POST $A/environments -d '{"name":"dev"}' > env.json
curl -s -H "$H" -X POST $A/environments/dev/connections -d '{"name":"aws"}' > conn.json   # token and runCommand, shown once
id=$(jq -r .id conn.json)
curl -s -H "$H" -X PUT $A/environments/dev/connections/$id/endpoints -d '{"endpoints":[{"host":"mydb.internal","port":5432}]}' > endpoints.json
jq -Rs '{dotenv: .}' api.env | curl -s -H "$H" -X PUT $A/environments/dev/services/api --data-binary @- > service.json
"#;
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(work.path())
        .env("BASE", &s.server.url)
        .env("PSBX_TOKEN", &s.key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(work.path().join(name)).unwrap()).unwrap()
    };
    assert_eq!(read("env.json")["name"], "dev");
    let conn = read("conn.json");
    let token = conn["token"].as_str().unwrap();
    // psbx_conn_<issuer>.<40 random characters>
    let secret = token.rsplit_once('.').map(|(_, s)| s).unwrap_or_default();
    assert!(
        token.starts_with("psbx_conn_") && secret.len() == 40,
        "{conn}"
    );
    let run = conn["runCommand"].as_str().unwrap();
    assert!(
        run.starts_with("docker run -d --name parallelsandbox-connector --restart=always"),
        "{run}"
    );
    assert!(
        run.contains(&format!("PSBX_CONNECTOR_TOKEN={token}")),
        "{run}"
    );
    // The token names the server: the spec's command has no PSBX_URL.
    assert!(!run.contains("PSBX_URL"), "{run}");
    let issuer = token
        .strip_prefix("psbx_conn_")
        .and_then(|t| t.split_once('.'))
        .map(|(issuer, _)| issuer)
        .unwrap();
    assert_eq!(
        base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, issuer).unwrap(),
        s.server.url.as_bytes(),
        "{token}"
    );
    assert!(
        run.ends_with("registry.example.com/psbx/connector:7"),
        "{run}"
    );
    assert_eq!(
        read("endpoints.json")["endpoints"],
        json!([{"host": "mydb.internal", "port": 5432}])
    );
    let service = read("service.json");
    assert_eq!(
        service["keys"],
        json!(["DATABASE_URL", "STAGE", "GREETING"]),
        "{service}"
    );
    assert_eq!(service["keysCount"], 3);

    // Reads: names, never values or tokens.
    let (status, env) = s.call("GET", "/environments/dev", None);
    assert_eq!(status, 200, "{env}");
    let text = env.to_string();
    assert!(
        !text.contains("s3cretpass") && !text.contains(token),
        "{text}"
    );
    assert_eq!(env["connections"][0]["name"], "aws");
    assert_eq!(env["connections"][0]["online"], false);
    assert_eq!(
        env["connections"][0]["endpoints"][0]["host"],
        "mydb.internal"
    );
    assert_eq!(
        env["services"][0]["keys"],
        json!(["DATABASE_URL", "STAGE", "GREETING"])
    );
    assert_eq!(env["connectorOnline"], false);
    assert_eq!(env["reachable"], json!([]));
    let subject = env["awsSubject"].as_str().unwrap();
    assert!(
        subject.starts_with("tenant:acct_") && subject.ends_with(":env:dev"),
        "{subject}"
    );
    let (_, list) = s.call("GET", "/environments", None);
    assert_eq!(list["environments"][0]["name"], "dev");
    assert_eq!(list["environments"][0]["connections"][0]["sessions"], 0);

    // Stored as a hash, and values sealed.
    assert_eq!(s.connections_with_token(token), 1);
    assert!(!s.stored_in_clear(token));
    assert!(!s.stored_in_clear("s3cretpass"));

    // Rotation: a new token; the old one no longer matches anything.
    let id = conn["id"].as_str().unwrap();
    let (status, rotated) = s.call(
        "POST",
        &format!("/environments/dev/connections/{id}/token"),
        None,
    );
    assert_eq!(status, 200, "{rotated}");
    let new_token = rotated["token"].as_str().unwrap();
    assert_ne!(new_token, token);
    assert!(rotated["runCommand"].as_str().unwrap().contains(new_token));
    assert_eq!(s.connections_with_token(token), 0);
    assert_eq!(s.connections_with_token(new_token), 1);

    // AWS fields.
    let (status, env) = s.call(
        "PUT",
        "/environments/dev",
        Some(json!({"awsRoleArn": "arn:aws:iam::123456789012:role/psbx-boxes", "awsRegion": "ap-northeast-1",
                    "externalBaseUrl": "https://dev.example.com"})),
    );
    assert_eq!(status, 200, "{env}");
    assert_eq!(
        env["awsRoleArn"],
        "arn:aws:iam::123456789012:role/psbx-boxes"
    );
    assert_eq!(env["externalBaseUrl"], "https://dev.example.com");
    let (_, env) = s.call(
        "PUT",
        "/environments/dev",
        Some(json!({"externalBaseUrl": null})),
    );
    assert_eq!(env["externalBaseUrl"], Value::Null);
    assert_eq!(env["awsRegion"], "ap-northeast-1");

    // Deleting: the service, the connection, the environment.
    assert_eq!(
        s.call("DELETE", "/environments/dev/services/api", None).0,
        204
    );
    assert_eq!(
        s.call("DELETE", "/environments/dev/services/api", None).0,
        404
    );
    assert_eq!(
        s.call(
            "DELETE",
            &format!("/environments/dev/connections/{id}"),
            None
        )
        .0,
        204
    );
    assert_eq!(s.connections_with_token(new_token), 0);
    assert_eq!(s.call("DELETE", "/environments/dev", None).0, 204);
    assert_eq!(s.call("GET", "/environments/dev", None).0, 404);
}

/// The error's message, asserting the status.
fn refused(s: &Setup, method: &str, path: &str, body: Value, status: u16) -> String {
    let (got, answer) = s.call(method, path, Some(body));
    assert_eq!(got, status, "{method} {path}: {answer}");
    answer["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn bad_input_is_refused_naming_the_entry_and_why() {
    let s = Setup::start();
    assert_eq!(
        s.call("POST", "/environments", Some(json!({"name": "dev"})))
            .0,
        201
    );
    assert!(refused(&s, "POST", "/environments", json!({"name": "dev"}), 409).contains("already"));
    for bad in ["", "dev env", "-dev", "dev/x"] {
        let m = refused(&s, "POST", "/environments", json!({"name": bad}), 400);
        assert!(m.contains("not valid"), "{bad:?}: {m}");
    }
    let (_, conn) = s.call(
        "POST",
        "/environments/dev/connections",
        Some(json!({"name": "office"})),
    );
    let id = conn["id"].as_str().unwrap().to_owned();
    let endpoints = format!("/environments/dev/connections/{id}/endpoints");
    for (entries, expect) in [
        (
            json!([{"host": "db.internal", "port": 5432}, {"host": "*.internal", "port": 5432}]),
            "endpoints[1] (*.internal:5432): wildcards",
        ),
        (json!([{"host": "10.0.0.0/16", "port": 80}]), "endpoints[0]"),
        (json!([{"host": "10.0.0.1-10.0.0.9", "port": 80}]), "ranges"),
        (json!([{"host": "https://db.internal", "port": 443}]), "URL"),
        (json!([{"host": "fd00::1", "port": 5432}]), "IPv6"),
        (json!([{"host": "db.internal", "port": 0}]), "1 to 65535"),
        (
            json!([{"host": "db.internal", "port": 70000}]),
            "1 to 65535",
        ),
        (
            json!([{"host": "db.internal", "port": 5432}, {"host": "DB.internal", "port": 5432}]),
            "listed twice",
        ),
    ] {
        let m = refused(&s, "PUT", &endpoints, json!({ "endpoints": entries }), 400);
        assert!(m.contains(expect), "{entries}: {m}");
    }
    let many: Vec<Value> = (1..=101)
        .map(|p| json!({"host": "db.internal", "port": p}))
        .collect();
    let m = refused(&s, "PUT", &endpoints, json!({ "endpoints": many }), 400);
    assert!(m.contains("at most 100"), "{m}");
    let hundred: Vec<Value> = (1..=100)
        .map(|p| json!({"host": "db.internal", "port": p}))
        .collect();
    assert_eq!(
        s.call("PUT", &endpoints, Some(json!({ "endpoints": hundred })))
            .0,
        200
    );

    let m = refused(
        &s,
        "PUT",
        "/environments/dev/services/api",
        json!({"dotenv": "A=1\nB=\"open\n\nC=3\n"}),
        400,
    );
    assert!(m.contains("line 2"), "{m}");
    let m = refused(
        &s,
        "PUT",
        "/environments/dev/services/api",
        json!({"dotenv": "A=1\n1BAD=2\n"}),
        400,
    );
    assert!(m.contains("line 2"), "{m}");
    let m = refused(
        &s,
        "PUT",
        "/environments/dev",
        json!({"awsRoleArn": "role/x"}),
        400,
    );
    assert!(m.contains("awsRoleArn"), "{m}");
    let m = refused(
        &s,
        "PUT",
        "/environments/dev",
        json!({"externalBaseUrl": "dev.example.com"}),
        400,
    );
    assert!(m.contains("externalBaseUrl"), "{m}");
    let m = refused(
        &s,
        "PUT",
        "/environments/nope/services/api",
        json!({"dotenv": "A=1"}),
        404,
    );
    assert!(m.contains("nope"), "{m}");

    // Another account sees none of it: 404, not 403.
    let other = s.other_key();
    for (method, path) in [
        ("GET", "/environments/dev".to_owned()),
        ("DELETE", "/environments/dev".to_owned()),
        ("POST", format!("/environments/dev/connections/{id}/token")),
        ("GET", "/environments/dev/suggested-endpoints".to_owned()),
    ] {
        let (status, body) = s.call_as(&other, method, &path, None);
        assert_eq!(status, 404, "{method} {path}: {body}");
    }
    let (_, list) = s.call_as(&other, "GET", "/environments", None);
    assert_eq!(list["environments"], json!([]));
    // The other account may have its own "dev".
    assert_eq!(
        s.call_as(
            &other,
            "POST",
            "/environments",
            Some(json!({"name": "dev"}))
        )
        .0,
        201
    );
}

#[test]
fn suggested_endpoints_follow_every_rule_of_the_spec() {
    let s = Setup::start();
    let fixture =
        include_str!("../../actors/src/environments/service_settings/testdata/suggest.env");
    let (api, worker) = fixture.split_once("# --- service worker").unwrap();
    assert_eq!(
        s.call("POST", "/environments", Some(json!({"name": "dev"})))
            .0,
        201
    );
    for (name, text) in [("api", api), ("worker", worker)] {
        let (status, body) = s.call(
            "PUT",
            &format!("/environments/dev/services/{name}"),
            Some(json!({"dotenv": text})),
        );
        assert_eq!(status, 201, "{body}");
    }
    let (_, conn) = s.call(
        "POST",
        "/environments/dev/connections",
        Some(json!({"name": "aws"})),
    );
    let id = conn["id"].as_str().unwrap();
    let listed = json!({"endpoints": [{"host": "mydb.xxxx.ap-northeast-1.rds.amazonaws.com", "port": 5432}]});
    assert_eq!(
        s.call(
            "PUT",
            &format!("/environments/dev/connections/{id}/endpoints"),
            Some(listed)
        )
        .0,
        200
    );

    let (status, found) = s.call("GET", "/environments/dev/suggested-endpoints", None);
    assert_eq!(status, 200, "{found}");
    let found = found["endpoints"].as_array().unwrap();
    let get = |host: &str, port: u16| {
        found
            .iter()
            .find(|e| e["host"] == host && e["port"] == port)
            .unwrap_or_else(|| panic!("{host}:{port} not suggested: {found:?}"))
    };
    // One of each rule.
    let rds = get("mydb.xxxx.ap-northeast-1.rds.amazonaws.com", 5432);
    assert_eq!(
        rds["sources"],
        json!([
            {"service": "api", "variable": "DATABASE_URL"},
            {"service": "api", "variable": "READ_REPLICA_URL"},
            {"service": "worker", "variable": "DATABASE_URL"}
        ])
    );
    assert_eq!(rds["listedOn"], "aws");
    for (host, port) in [
        ("shop.mysql.internal", 3306),
        ("cache.abc123.0001.apne1.cache.amazonaws.com", 6379),
        ("sessions.internal", 6379),
        ("billing.svc.cluster.local", 80),
        ("172.16.0.10", 80),
        ("10.0.3.9", 5432),
        ("users.svc", 8443),
        ("10.0.1.5", 8080),
        ("192.168.10.20", 25),
        ("printer.lan", 631),
        ("orders-db.internal", 3306),
        ("a.mongo.internal", 27017),
        ("b.mongo.internal", 27018),
        ("rabbit.local", 5672),
        ("search-logs-abc.ap-northeast-1.es.amazonaws.com", 443),
        ("pg.internal", 5433),
        ("172.31.255.254", 9200),
        ("mysql.corp", 3306),
    ] {
        assert_eq!(get(host, port)["listedOn"], Value::Null, "{host}");
    }
    assert_eq!(
        get("pg.internal", 5433)["sources"],
        json!([{"service": "worker", "variable": "PG_HOST"}])
    );
    assert_eq!(found.len(), 26, "{found:?}");
    // Nothing from a variable that must not give one (public hosts, an
    // internal ELB name, a private zone of its own domain, ...).
    for e in found {
        for src in e["sources"].as_array().unwrap() {
            assert!(
                !src["variable"].as_str().unwrap().starts_with("NOT_"),
                "{e}"
            );
        }
        let host = e["host"].as_str().unwrap();
        assert!(
            !host.contains("elb.amazonaws.com")
                && !host.contains("acme-private.net")
                && !host.contains("stripe"),
            "{e}"
        );
    }
}
