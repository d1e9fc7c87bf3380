//! Connecting an account's AWS (`/v1/aws`) against moto's server on
//! loopback standing for AWS, with its IAM checks on so that trust policies
//! are enforced: `GET` gives the account's stable ExternalId, psbx's principal
//! and the quick-create link; `PUT` with a role that trusts psbx with that
//! ExternalId connects it; a role expecting another ExternalId, or trusting
//! another principal, is refused with AWS's own code and message and a hint
//! naming the ExternalId; another account has another ExternalId. psbx's own
//! identity is a moto IAM user whose key the server gets from its
//! environment, as the SDK's default chain finds it anywhere; the roles and
//! services are in another account, the customer's (moto's trust checks
//! across accounts are `tests/aws/moto_sts.py`'s).
//!
//! review-2 M5: a role in psbx's own account (that of `aws.principal_arn`)
//! or in `aws.denied_accounts` is refused with 400 before AWS is asked (moto
//! records no AssumeRole of it), for `PUT /v1/aws` and an environment's
//! `awsRoleArn`.
//!
//! Then the ECS import: the connected role lists the services, imports one
//! container's settings (SSM SecureStrings, Secrets Manager JSON keys, an S3
//! environment file skipped), another container on request, and `sync`
//! picks up a new task definition revision; a role without
//! ecs:DescribeTaskDefinition gets AWS's refusal naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::{ServerProcess, TestDatabase, wait};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// moto's server, stopped when dropped.
struct Moto {
    child: Child,
    url: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// moto's server as `tests/aws/moto_sts.py` runs it (its trust checks
    /// hold across accounts).
    fn start() -> Self {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("aws/moto_sts.py");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(psbx_tests::python::python())
            .arg(&script)
            .args(["127.0.0.1", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let moto = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        wait::until("moto's server", Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        moto
    }

    /// `tests/aws/moto.py <args>`: what it printed.
    fn setup(&self, args: &[&str]) -> Value {
        psbx_tests::aws::setup(args)
    }
}

#[test]
fn an_account_connects_its_role_then_imports_ecs_settings_and_syncs_them() {
    let moto = Moto::start();
    let user = moto.setup(&["user", &moto.url]);
    let identity = psbx_tests::aws::identity(&user);
    let principal = user["arn"].as_str().unwrap().to_owned();
    let db = TestDatabase::new();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::without_boxes(
        dir.path(),
        &db,
        &[
            ("PSBX_AWS__ENDPOINT_URL", moto.url.as_str()),
            ("PSBX_AWS__PRINCIPAL_ARN", principal.as_str()),
            (
                "PSBX_AWS__READONLY_ROLE_TEMPLATE_URL",
                "https://psbx-test-templates.s3.amazonaws.com/readonly-role.yaml",
            ),
        ]
        .into_iter()
        .chain(identity.iter().map(|(k, v)| (*k, v.as_str())))
        .collect::<Vec<_>>(),
    );
    let key = server.first_key().expect("a first key");
    let call = |key: &str, method: &str, body: Option<Value>| {
        psbx_tests::api::call(&server.url, key, method, "/v1/aws", body)
    };

    let (status, before) = call(&key, "GET", None);
    assert_eq!(status, 200, "{before}");
    let external_id = before["externalId"].as_str().unwrap().to_owned();
    assert!(external_id.starts_with("psbx-"), "{before}");
    assert_eq!(before["principalArn"], principal.as_str(), "{before}");
    assert_eq!(before["roleArn"], Value::Null, "{before}");
    let link = before["quickCreateUrl"].as_str().unwrap();
    assert!(
        link.contains(&format!("param_ExternalId={external_id}")),
        "{link}"
    );
    assert!(
        before["requiredActions"]
            .as_array()
            .unwrap()
            .contains(&json!("ecs:DescribeTaskDefinition")),
        "{before}"
    );
    // Stable: asked again, the same.
    assert_eq!(
        call(&key, "GET", None).1["externalId"],
        external_id.as_str()
    );

    // The roles may do what psbx says it needs.
    let actions: Vec<&str> = before["requiredActions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let roles = moto.setup(&[
        "roles",
        &moto.url,
        &principal,
        &external_id,
        &actions.join(","),
    ]);
    let put = |role: &Value| {
        call(
            &key,
            "PUT",
            Some(json!({"roleArn": role, "region": "us-east-1"})),
        )
    };

    // Roles that do not trust psbx with this account's ExternalId.
    for (role, what) in [
        (&roles["wrongExternalId"], "another ExternalId"),
        (&roles["otherPrincipal"], "another principal"),
    ] {
        let (status, refused) = put(role);
        assert_eq!(status, 400, "{what}: {refused}");
        assert_eq!(refused["error"]["code"], "aws_refused", "{what}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("AWS refused sts:AssumeRole: AccessDenied"),
            "{what}: {refused}"
        );
        assert!(
            refused["error"]["hint"]
                .as_str()
                .unwrap()
                .contains(&external_id),
            "{what}: {refused}"
        );
    }
    assert_eq!(call(&key, "GET", None).1["roleArn"], Value::Null);

    // The right one connects.
    let (status, connected) = put(&roles["readonly"]);
    assert_eq!(status, 200, "{connected}");
    assert_eq!(connected["roleArn"], roles["readonly"], "{connected}");
    assert_eq!(connected["region"], "us-east-1", "{connected}");
    assert!(connected["connectedAt"].is_string(), "{connected}");
    assert_eq!(call(&key, "GET", None).1["roleArn"], roles["readonly"]);

    // Not a role ARN or region: said before AWS is asked.
    let (status, bad) = call(
        &key,
        "PUT",
        Some(json!({"roleArn": "arn:aws:iam::123:user/x", "region": "us-east-1"})),
    );
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!("invalid_request")),
        "{bad}"
    );
    let (status, bad) = call(
        &key,
        "PUT",
        Some(json!({"roleArn": roles["readonly"], "region": "Tokyo"})),
    );
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!("invalid_request")),
        "{bad}"
    );

    // ECS: what the role sees, and one service's settings imported.
    let ecs = moto.setup(&["ecs", &moto.url]);
    let api = |method: &str, path: &str, body: Option<Value>| {
        psbx_tests::api::call(&server.url, &key, method, path, body)
    };
    let (status, listed) = api("GET", "/v1/aws/ecs/services?region=us-east-1", None);
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["region"], "us-east-1", "{listed}");
    let found = &listed["services"][0];
    assert_eq!(
        (&found["cluster"], &found["service"], &found["status"]),
        (&json!("prod"), &json!("api"), &json!("ACTIVE")),
        "{listed}"
    );
    assert!(
        found["taskDefinition"]
            .as_str()
            .unwrap()
            .ends_with("task-definition/api:1"),
        "{listed}"
    );
    assert_eq!(
        api("POST", "/v1/environments", Some(json!({"name": "dev"}))).0,
        201
    );
    let import = |body: Value| api("POST", "/v1/environments/dev/services/import", Some(body));
    let (status, imported) = import(json!({"cluster": "prod", "service": "api"}));
    assert_eq!(status, 201, "{imported}");
    assert_eq!(imported["name"], "api", "{imported}");
    assert_eq!(imported["source"], "ecs", "{imported}");
    let mut keys: Vec<&str> = ecs["api"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut got: Vec<&str> = imported["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    got.sort_unstable();
    assert_eq!(got, keys, "{imported}");
    let source = &imported["sourceRef"];
    assert_eq!(
        (
            &source["region"],
            &source["cluster"],
            &source["service"],
            &source["container"]
        ),
        (
            &json!("us-east-1"),
            &json!("prod"),
            &json!("api"),
            &json!("api")
        ),
        "{imported}"
    );
    assert_eq!(source["containers"], json!(["envoy", "api"]), "{imported}");
    assert!(
        source["taskDefinition"]
            .as_str()
            .unwrap()
            .ends_with("task-definition/api:1"),
        "{imported}"
    );
    assert_eq!(
        source["skipped"][0]["kind"], "environmentFile",
        "{imported}"
    );
    assert_eq!(source["skipped"][0]["source"], ecs["s3File"], "{imported}");
    // The values were read (the one holding an address is suggested).
    let (_, suggested) = api("GET", "/v1/environments/dev/suggested-endpoints", None);
    assert_eq!(
        suggested["endpoints"][0]["host"], "db.internal",
        "{suggested}"
    );
    assert_eq!(
        suggested["endpoints"][0]["sources"][0]["variable"], "DB_URL",
        "{suggested}"
    );

    // Another container, under another name; one that is not there.
    let (status, envoy) = import(
        json!({"cluster": "prod", "service": "api", "container": "envoy", "name": "api-envoy", "region": "us-east-1"}),
    );
    assert_eq!(status, 201, "{envoy}");
    assert_eq!(envoy["keys"], json!(["ENVOY_UID"]), "{envoy}");
    assert_eq!(envoy["sourceRef"]["skipped"], json!([]), "{envoy}");
    let (status, none) = import(json!({"cluster": "prod", "service": "api", "container": "nope"}));
    assert_eq!(status, 422, "{none}");
    let message = none["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("envoy, api") && message.contains("nothing was stored"),
        "{none}"
    );
    let (status, missing) = import(json!({"cluster": "prod", "service": "zzz"}));
    assert_eq!(
        (status, &missing["error"]["code"]),
        (404, &json!("ecs_service_not_found")),
        "{missing}"
    );
    let (status, missing) = import(json!({"cluster": "nope", "service": "api"}));
    assert_eq!(
        (status, &missing["error"]["code"]),
        (404, &json!("ecs_service_not_found")),
        "{missing}"
    );
    let (status, missing) = api(
        "POST",
        "/v1/environments/nope/services/import",
        Some(json!({"cluster": "prod", "service": "api"})),
    );
    assert_eq!(
        (status, &missing["error"]["code"]),
        (404, &json!("environment_not_found")),
        "{missing}"
    );

    // A new revision: sync reads it.
    let revised = moto.setup(&["revise", &moto.url]);
    let (status, synced) = api("POST", "/v1/environments/dev/services/api/sync", None);
    assert_eq!(status, 200, "{synced}");
    assert_eq!(
        synced["sourceRef"]["taskDefinition"], revised["taskDefinition"],
        "{synced}"
    );
    assert!(
        synced["keys"].as_array().unwrap().contains(&json!("NEW")),
        "{synced}"
    );
    assert_eq!(synced["keysCount"], keys.len() + 1, "{synced}");
    // An upload has no sync.
    assert_eq!(
        api(
            "PUT",
            "/v1/environments/dev/services/web",
            Some(json!({"dotenv": "A=1\n"}))
        )
        .0,
        201
    );
    let (status, uploaded) = api("POST", "/v1/environments/dev/services/web/sync", None);
    assert_eq!(
        (status, &uploaded["error"]["code"]),
        (409, &json!("not_imported")),
        "{uploaded}"
    );

    // A role that may not read task definitions: AWS's refusal names the action.
    assert_eq!(put(&roles["noTaskDefinitions"]).0, 200);
    let (status, refused) = import(json!({"cluster": "prod", "service": "api"}));
    assert_eq!(
        (status, &refused["error"]["code"]),
        (400, &json!("aws_refused")),
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("AWS refused ecs:DescribeTaskDefinition: AccessDenied")
            && message.contains("not authorized to perform: ecs:DescribeTaskDefinition"),
        "{refused}"
    );
    assert!(
        refused["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("must allow ecs:DescribeTaskDefinition"),
        "{refused}"
    );
    // What was imported before is still there, unchanged.
    let (_, env) = api("GET", "/v1/environments/dev", None);
    let stored = env["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "api")
        .unwrap();
    assert_eq!(
        stored["sourceRef"]["taskDefinition"], revised["taskDefinition"],
        "{env}"
    );

    // Another account has its own ExternalId, and nothing connected.
    let account = db.add_account("acct_awsother");
    let made = Command::new(psbx_tests::binary("psbx"))
        .args(["--data-dir", dir.path().to_str().unwrap()])
        .args(["keys", "create", "--name", "other", "--account", &account])
        .env("DATABASE_URL", db.url())
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let other = String::from_utf8_lossy(&made.stdout)
        .split_whitespace()
        .find(|w| w.starts_with("psbx_") && w.len() == 45)
        .unwrap()
        .to_owned();
    let (_, theirs) = call(&other, "GET", None);
    assert_ne!(theirs["externalId"], external_id.as_str(), "{theirs}");
    assert_eq!(theirs["roleArn"], Value::Null, "{theirs}");
}

/// review-2 M5: psbx is a deputy with AWS credentials of its own; a role in
/// its own account (or one the operator denies) might trust it without an
/// ExternalId, so it is never assumed: 400 `aws_role_denied`, before any
/// call to AWS.
#[test]
fn roles_in_psbx_s_own_or_denied_accounts_are_refused_before_aws_is_asked() {
    let moto = Moto::start();
    let db = TestDatabase::new();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::without_boxes(
        dir.path(),
        &db,
        &[
            ("PSBX_AWS__ENDPOINT_URL", moto.url.as_str()),
            (
                "PSBX_AWS__PRINCIPAL_ARN",
                "arn:aws:iam::111122223333:role/psbx",
            ),
            ("PSBX_AWS__DENIED_ACCOUNTS", "[\"444455556666\"]"),
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("AWS_CONFIG_FILE", "/dev/null"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        ],
    );
    let key = server.first_key().expect("a first key");
    let call = |method: &str, path: &str, body: Value| {
        psbx_tests::api::call(&server.url, &key, method, path, Some(body))
    };
    for (role, says) in [
        ("arn:aws:iam::111122223333:role/x", "psbx's own"),
        ("arn:aws:iam::444455556666:role/x", "aws.denied_accounts"),
    ] {
        let (status, refused) = call(
            "PUT",
            "/v1/aws",
            json!({"roleArn": role, "region": "us-east-1"}),
        );
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"]["code"], "aws_role_denied", "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(role) && message.contains(says),
            "{refused}"
        );
        assert!(refused["error"]["hint"].is_string(), "{refused}");
    }
    // An environment's box role too.
    let (status, made) = call("POST", "/v1/environments", json!({"name": "dev"}));
    assert_eq!(status, 201, "{made}");
    let (status, refused) = call(
        "PUT",
        "/v1/environments/dev",
        json!({"awsRoleArn": "arn:aws:iam::111122223333:role/box"}),
    );
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "aws_role_denied", "{refused}");
    // A role elsewhere is asked of AWS (moto, its IAM checks off here, lets
    // psbx in): the AssumeRole calls moto records show.
    let (status, asked) = call(
        "PUT",
        "/v1/aws",
        json!({"roleArn": "arn:aws:iam::777788889999:role/x", "region": "us-east-1"}),
    );
    assert_eq!(status, 200, "{asked}");
    let assumed = moto.setup(&["assumed", &moto.url]);
    let arns: Vec<&str> = assumed["roleArns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        arns.contains(&"arn:aws:iam::777788889999:role/x"),
        "{arns:?}"
    );
    assert!(
        arns.iter()
            .all(|a| !a.contains("111122223333") && !a.contains("444455556666")),
        "moto was asked to assume a refused role: {arns:?}"
    );
}
