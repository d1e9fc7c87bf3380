//! A real box started in an environment: its settings files in
//! `/work/.sbx/env/`, sourced back to the exact bytes uploaded (quotes, `$`,
//! backslashes, spaces, newlines, non-ASCII); the `.env` file read by docker's
//! env-file rules; the box result's `environment` block; secret-looking
//! settings masked in output; the 200-address limit at start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Tricky values and how they are written in the uploaded `.env`.
const TRICKY: &[(&str, &str, &str)] = &[
    (
        "SINGLE",
        r#"SINGLE='it "is" $HOME \n'"#,
        r#"it "is" $HOME \n"#,
    ),
    (
        "DOUBLE",
        r#"DOUBLE="say \"hi\" it's \\ done""#,
        r#"say "hi" it's \ done"#,
    ),
    ("DOLLAR", "DOLLAR=$HOME/x", "$HOME/x"),
    ("BACKSLASH", r"BACKSLASH=C:\path\to", r"C:\path\to"),
    (
        "TRAILING",
        "TRAILING='ends with space '",
        "ends with space ",
    ),
    ("EMPTY", "EMPTY=", ""),
    ("UNICODE", "UNICODE=héllo wörld ✓", "héllo wörld ✓"),
    ("QUOTE_ONLY", r#"QUOTE_ONLY="'""#, "'"),
    (
        "TLS_KEY",
        "TLS_KEY=\"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n\"",
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n",
    ),
];

fn sha(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

struct Api<'a> {
    s: &'a BoxServer,
}

impl Api<'_> {
    fn call(&self, method: &str, path: &str, body: Value) -> (u16, Value) {
        self.s.call(
            method,
            &format!("/v1{path}"),
            Some(body).filter(|b| !b.is_null()),
        )
    }

    fn ok(&self, method: &str, path: &str, body: Value) -> Value {
        self.s.ok(
            method,
            &format!("/v1{path}"),
            Some(body).filter(|b| !b.is_null()),
        )
    }

    fn exec(&self, id: &str, cmd: &str) -> String {
        let answer = self.ok("POST", &format!("/boxes/{id}/exec"), json!({ "cmd": cmd }));
        assert_eq!(answer["exitCode"], 0, "{cmd}: {answer}");
        answer["stdout"]["text"].as_str().unwrap().to_owned()
    }
}

#[test]
fn a_box_in_an_environment_gets_its_settings_files_exactly() {
    let s = BoxServer::start("");
    let api = Api { s: &s };
    api.ok("POST", "/environments", json!({"name": "dev"}));
    let conn = api.ok(
        "POST",
        "/environments/dev/connections",
        json!({"name": "aws"}),
    );
    let id = conn["id"].as_str().unwrap();
    api.ok(
        "PUT",
        &format!("/environments/dev/connections/{id}/endpoints"),
        json!({"endpoints": [{"host": "db.internal", "port": 5432}, {"host": "10.0.1.5", "port": 8080}]}),
    );
    let office = api.ok(
        "POST",
        "/environments/dev/connections",
        json!({"name": "office"}),
    );
    api.ok(
        "PUT",
        &format!("/environments/dev/connections/{}/endpoints", office["id"].as_str().unwrap()),
        json!({"endpoints": [{"host": "db.internal", "port": 5432}, {"host": "printer.lan", "port": 631}]}),
    );
    let mut dotenv = String::from(
        "# the api on dev\nexport DATABASE_URL=postgres://api:s3cretpass@db.internal:5432/api\nSTAGE=dev\nADMIN_EMAILS=a@example.com\n",
    );
    for (_, line, _) in TRICKY {
        dotenv.push_str(line);
        dotenv.push('\n');
    }
    api.ok(
        "PUT",
        "/environments/dev/services/api",
        json!({ "dotenv": dotenv }),
    );

    let started = api.ok(
        "POST",
        "/boxes",
        json!({"name": "env", "environment": "dev"}),
    );
    let box_id = started["id"].as_str().unwrap().to_owned();
    let env = &started["environment"];
    assert_eq!(env["name"], "dev", "{started}");
    assert_eq!(env["connectorOnline"], false);
    // An address on two connections goes through the one whose name sorts first.
    assert_eq!(env["connections"][0]["name"], "aws");
    assert_eq!(
        env["connections"][0]["reachable"],
        json!([{"host": "db.internal", "port": 5432}, {"host": "10.0.1.5", "port": 8080}])
    );
    assert_eq!(
        env["connections"][1]["reachable"],
        json!([{"host": "printer.lan", "port": 631}])
    );
    assert!(
        env["next"]
            .as_str()
            .unwrap()
            .contains("\"office\" is offline"),
        "{env}"
    );
    let service = &env["services"][0];
    assert_eq!(service["name"], "api");
    assert_eq!(service["keysCount"], 3 + TRICKY.len());
    assert_eq!(service["files"]["env"], "/work/.sbx/env/api.env");
    assert_eq!(service["files"]["sh"], "/work/.sbx/env/api.sh");
    assert_eq!(
        service["notable"]["connection"],
        json!(["DATABASE_URL"]),
        "{service}"
    );
    assert_eq!(
        service["notable"]["mode"],
        json!([{"name": "STAGE", "value": "dev"}]),
        "{service}"
    );
    assert_eq!(
        service["notable"]["permission"],
        json!(["ADMIN_EMAILS"]),
        "{service}"
    );
    assert!(!started.to_string().contains("s3cretpass"));
    // Read again, the same.
    let again = api.ok("GET", &format!("/boxes/{box_id}"), json!(null));
    assert_eq!(again["environment"]["services"], env["services"]);

    // .sh sourced back: the exact bytes of every value.
    for (key, _, value) in TRICKY {
        let got = api.exec(
            &box_id,
            &format!(". /work/.sbx/env/api.sh && printf %s \"${key}\" | sha256sum"),
        );
        assert_eq!(&got[..64], sha(value), "{key}: sourced value differs");
    }
    // .env read by docker's env-file rules (KEY=VALUE, everything after the
    // first '=', no quote processing, '#' lines are comments): every
    // single-line value as is; the multi-line one only in .sh, named in a comment.
    let read = api.exec(
        &box_id,
        "while IFS= read -r line; do case \"$line\" in '#'*|'') continue;; esac; \
         k=${line%%=*}; v=${line#*=}; printf '%s %s\\n' \"$k\" \"$(printf %s \"$v\" | sha256sum | cut -c1-64)\"; \
         done < /work/.sbx/env/api.env; grep -c TLS_KEY /work/.sbx/env/api.env; stat -c %a /work/.sbx/env/api.env",
    );
    for (key, _, value) in TRICKY {
        if value.contains('\n') {
            assert!(!read.contains(&format!("{key} ")), "{key} in .env: {read}");
        } else {
            assert!(
                read.contains(&format!("{key} {}", sha(value))),
                "{key}: {read}"
            );
        }
    }
    assert!(
        read.ends_with("1\n600\n"),
        "the multi-line value is named once, in a comment; mode 0600: {read}"
    );

    // Secret-looking settings are masked in what comes back; others are not.
    let shown = api.exec(
        &box_id,
        ". /work/.sbx/env/api.sh && echo \"$DATABASE_URL $STAGE\"",
    );
    assert_eq!(shown, "postgres://api:****@db.internal:5432/api dev\n");
    api.ok("DELETE", &format!("/boxes/{box_id}"), json!(null));

    // 200 addresses per box across connections: the 201st is refused at start.
    for (name, base) in [("many1", 0), ("many2", 100), ("many3", 200)] {
        let c = api.ok(
            "POST",
            "/environments/dev/connections",
            json!({ "name": name }),
        );
        let count = if name == "many3" { 1 } else { 100 };
        let list: Vec<Value> = (1..=count)
            .map(|p| json!({"host": "big.internal", "port": base + p}))
            .collect();
        api.ok(
            "PUT",
            &format!(
                "/environments/dev/connections/{}/endpoints",
                c["id"].as_str().unwrap()
            ),
            json!({ "endpoints": list }),
        );
    }
    let (status, refused) = api.call("POST", "/boxes", json!({"environment": "dev"}));
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        refused["error"]["code"], "environment_too_large",
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("at most 200"), "{message}");
    let (status, refused) = api.call("POST", "/boxes", json!({"environment": "nope"}));
    assert_eq!(status, 404, "{refused}");
    assert_eq!(
        refused["error"]["code"], "environment_not_found",
        "{refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no environment \"nope\""),
        "{refused}"
    );
}
