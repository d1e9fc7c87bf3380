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
//!
//! Issue 31: the `createStackCommand`s psbx prints, run as printed with the
//! AWS CLI against moto, create the roles (and the connector's ECS service)
//! from the templates psbx serves itself, and the role read back connects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::aws::Moto;
use psbx_tests::{ServerProcess, TestDatabase};
use serde_json::{Value, json};
use std::process::Command;

/// psbx without boxes whose AWS identity is a moto IAM user (its key in the
/// server's environment, as the SDK's default chain finds it) and whose
/// `aws.principal_arn` is that user, with `settings` beside. Dropped in field
/// order: the server, then its database and data directory.
struct Served {
    server: ServerProcess,
    key: String,
    principal: String,
    db: TestDatabase,
    dir: tempfile::TempDir,
}

impl Served {
    fn start(moto: &Moto, settings: &[(&str, &str)]) -> Self {
        let user = moto.setup(&["user", &moto.url]);
        let identity = psbx_tests::aws::identity(&user);
        let principal = user["arn"].as_str().unwrap().to_owned();
        let db = TestDatabase::new();
        let dir = tempfile::tempdir().unwrap();
        let envs: Vec<(&str, &str)> = [
            ("PSBX_AWS__ENDPOINT_URL", moto.url.as_str()),
            ("PSBX_AWS__PRINCIPAL_ARN", principal.as_str()),
        ]
        .into_iter()
        .chain(settings.iter().copied())
        .chain(identity.iter().map(|(k, v)| (*k, v.as_str())))
        .collect();
        let server = ServerProcess::without_boxes(dir.path(), &db, &envs);
        let key = server.first_key().expect("a first key");
        Self {
            server,
            key,
            principal,
            db,
            dir,
        }
    }
}

#[test]
fn an_account_connects_its_role_then_imports_ecs_settings_and_syncs_them() {
    let moto = Moto::start();
    let served = Served::start(
        &moto,
        &[(
            "PSBX_AWS__READONLY_ROLE_TEMPLATE_URL",
            "https://psbx-test-templates.s3.amazonaws.com/readonly-role.yaml",
        )],
    );
    let Served {
        server,
        key,
        principal,
        db,
        dir,
    } = &served;
    let call = |key: &str, method: &str, body: Option<Value>| {
        psbx_tests::api::call(&server.url, key, method, "/v1/aws", body)
    };

    let (status, before) = call(key, "GET", None);
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
    assert_eq!(call(key, "GET", None).1["externalId"], external_id.as_str());

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
        principal,
        &external_id,
        &actions.join(","),
    ]);
    let put = |role: &Value| {
        call(
            key,
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
    assert_eq!(call(key, "GET", None).1["roleArn"], Value::Null);

    // The right one connects.
    let (status, connected) = put(&roles["readonly"]);
    assert_eq!(status, 200, "{connected}");
    assert_eq!(connected["roleArn"], roles["readonly"], "{connected}");
    assert_eq!(connected["region"], "us-east-1", "{connected}");
    assert!(connected["connectedAt"].is_string(), "{connected}");
    assert_eq!(call(key, "GET", None).1["roleArn"], roles["readonly"]);

    // Not a role ARN or region: said before AWS is asked.
    let (status, bad) = call(
        key,
        "PUT",
        Some(json!({"roleArn": "arn:aws:iam::123:user/x", "region": "us-east-1"})),
    );
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!("invalid_request")),
        "{bad}"
    );
    let (status, bad) = call(
        key,
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
        psbx_tests::api::call(&server.url, key, method, path, body)
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

/// The AWS CLI (`scripts/requirements.txt` puts it in the venv), run as
/// `bash -c <script>` the way a user pastes a printed command: acting in the
/// customer's account with `keys` (what `moto.py customer` printed), every
/// AWS call sent to moto, nothing read from this machine's AWS setup, and
/// no proxy between it and the loopback servers. Its status, stdout, stderr.
fn shell(
    moto: &Moto,
    keys: &Value,
    home: &std::path::Path,
    script: &str,
) -> (bool, String, String) {
    let venv_bin = psbx_tests::python::python().parent().unwrap().to_path_buf();
    assert!(
        venv_bin.join("aws").is_file(),
        "{} has no aws: run scripts/setup (scripts/requirements.txt installs awscli)",
        venv_bin.display()
    );
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let key = |k: &str| keys[k].as_str().unwrap().to_owned();
    let out = Command::new("bash")
        .args(["-c", script])
        .env("PATH", path)
        .env("HOME", home)
        .env("AWS_ENDPOINT_URL", &moto.url)
        .env("AWS_ACCESS_KEY_ID", key("accessKeyId"))
        .env("AWS_SECRET_ACCESS_KEY", key("secretAccessKey"))
        .env("AWS_SESSION_TOKEN", key("sessionToken"))
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_REGION")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .env("NO_PROXY", "*")
        .env("no_proxy", "*")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 31: a fresh installation (no template published to S3) offers the
/// commands that create the roles from the templates psbx serves itself.
/// Each printed command is run as printed, with the AWS CLI against moto:
/// the read-only role's stack is made in the customer's account, its RoleArn
/// read back with the printed query connects (`PUT /v1/aws`, moto's IAM
/// checks on, so the template's trust policy — psbx's principal, this
/// account's ExternalId — is what lets psbx in); the box role's stack makes a
/// role trusting psbx's OIDC subject for the environment, which the
/// environment takes. moto's CloudFormation cannot make an
/// AWS::IAM::OIDCProvider (it skips the resource), so the provider is not
/// checked here. And the connector's ECS stack, made from psbx's served
/// template as its comments say, runs the configured image with the token
/// read from a Secrets Manager secret, never in the task definition.
#[test]
fn the_printed_commands_create_the_roles_from_the_templates_psbx_serves() {
    let moto = Moto::start();
    let image = "registry.example.com/psbx/connector:7";
    let served = Served::start(&moto, &[("PSBX_CONNECTOR_IMAGE", image)]);
    let Served { server, key, .. } = &served;
    let api = |method: &str, path: &str, body: Option<Value>| {
        psbx_tests::api::call(&server.url, key, method, path, body)
    };
    let keys = moto.setup(&["customer", &moto.url]);
    let customer = keys["account"].as_str().unwrap().to_owned();
    let home = tempfile::tempdir().unwrap();
    let run = |script: &str| {
        let (ok, stdout, stderr) = shell(&moto, &keys, home.path(), script);
        assert!(ok, "{script}\nfailed:\n{stderr}\n{stdout}");
        stdout
    };

    // The read-only role.
    let (status, view) = api("GET", "/v1/aws", None);
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["quickCreateUrl"], Value::Null, "{view}");
    assert_eq!(view["hint"], Value::Null, "{view}");
    let create = view["createStackCommand"].as_str().unwrap();
    assert!(
        create.contains(&format!("{}/aws/templates/readonly-role.yaml", server.url)),
        "{create}"
    );
    run(create);
    let role = run(view["roleArnCommand"].as_str().unwrap())
        .trim()
        .to_owned();
    assert!(
        role.starts_with(&format!("arn:aws:iam::{customer}:role/psbx-readonly-")),
        "{role}"
    );

    // The box role, for an environment.
    assert_eq!(
        api("POST", "/v1/environments", Some(json!({"name": "dev"}))).0,
        201
    );
    let (_, env) = api("GET", "/v1/environments/dev", None);
    run(env["awsBoxRoleCreateStackCommand"].as_str().unwrap());
    let box_role = run(env["awsBoxRoleArnCommand"].as_str().unwrap())
        .trim()
        .to_owned();
    assert!(
        box_role.starts_with(&format!("arn:aws:iam::{customer}:role/psbx-box-role-dev-")),
        "{box_role}"
    );
    let name = box_role.rsplit('/').next().unwrap();
    let trust = run(&format!(
        "aws iam get-role --region us-east-1 --role-name {name} --query Role.AssumeRolePolicyDocument --output json"
    ));
    let trust: Value = serde_json::from_str(&trust).unwrap();
    let issuer = server.url.split_once("://").unwrap().1;
    let statement = &trust["Statement"][0];
    assert_eq!(
        statement["Principal"]["Federated"],
        format!("arn:aws:iam::{customer}:oidc-provider/{issuer}"),
        "{trust}"
    );
    assert_eq!(
        statement["Action"], "sts:AssumeRoleWithWebIdentity",
        "{trust}"
    );
    assert_eq!(
        statement["Condition"]["StringEquals"][format!("{issuer}:sub")],
        env["awsSubject"],
        "{trust}"
    );
    let (status, updated) = api(
        "PUT",
        "/v1/environments/dev",
        Some(json!({"awsRoleArn": box_role, "awsRegion": "us-east-1"})),
    );
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["awsRoleArn"], box_role.as_str(), "{updated}");

    // The connector on ECS, its token in Secrets Manager.
    let (status, made) = api(
        "POST",
        "/v1/environments/dev/connections",
        Some(json!({"name": "vpc"})),
    );
    assert_eq!(status, 201, "{made}");
    let token = made["token"].as_str().unwrap().to_owned();
    let secret = run(&format!(
        "aws secretsmanager create-secret --region us-east-1 --name psbx/connector/dev \
         --secret-string '{token}' --query ARN --output text"
    ))
    .trim()
    .to_owned();
    let network = run(
        "aws ec2 describe-subnets --region us-east-1 --query 'Subnets[0].SubnetId' --output text && \
         aws ec2 describe-security-groups --region us-east-1 --query 'SecurityGroups[0].GroupId' --output text",
    );
    let (subnet, group) = network.trim().split_once('\n').unwrap();
    let template = home.path().join("psbx-connector-ecs.yaml");
    run(&format!(
        "curl -fsSL {url}/aws/templates/connector-ecs.yaml -o {template} && \
         aws cloudformation create-stack --stack-name psbx-connector-dev --region us-east-1 \
         --template-body file://{template} --capabilities CAPABILITY_NAMED_IAM \
         --parameters ParameterKey=TokenSecretArn,ParameterValue={secret} \
         ParameterKey=Subnets,ParameterValue={subnet} ParameterKey=SecurityGroups,ParameterValue={group}",
        url = server.url,
        template = template.display(),
    ));
    let outputs = run(
        "aws cloudformation wait stack-create-complete --stack-name psbx-connector-dev --region us-east-1 && \
         aws cloudformation describe-stacks --stack-name psbx-connector-dev --region us-east-1 \
         --query 'Stacks[0].Outputs' --output json",
    );
    let outputs: Value = serde_json::from_str(&outputs).unwrap();
    let output = |k: &str| {
        outputs
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["OutputKey"] == k)
            .unwrap_or_else(|| panic!("no {k} in {outputs}"))["OutputValue"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (service, cluster) = (output("ServiceName"), output("ClusterName"));
    let described = run(&format!(
        "aws ecs describe-services --region us-east-1 --cluster {cluster} --services {service} \
         --query 'services[0].[desiredCount,taskDefinition]' --output json"
    ));
    let described: Value = serde_json::from_str(&described).unwrap();
    assert_eq!(described[0], 1, "{described}");
    let task = run(&format!(
        "aws ecs describe-task-definition --region us-east-1 --task-definition {} \
         --query taskDefinition --output json",
        described[1].as_str().unwrap()
    ));
    assert!(
        !task.contains(&token),
        "the token is in the task definition: {task}"
    );
    let task: Value = serde_json::from_str(&task).unwrap();
    let container = &task["containerDefinitions"][0];
    assert_eq!(container["image"], image, "{task}");
    assert_eq!(
        container["secrets"],
        json!([{"name": "PSBX_CONNECTOR_TOKEN", "valueFrom": secret}]),
        "{task}"
    );

    // With moto's IAM checks on, the read-only role psbx's template made lets
    // psbx in: its trust names psbx's principal and this account's ExternalId.
    moto.setup(&["auth", &moto.url, "on"]);
    let (status, connected) = api(
        "PUT",
        "/v1/aws",
        Some(json!({"roleArn": role, "region": "us-east-1"})),
    );
    assert_eq!(status, 200, "{connected}");
    assert_eq!(connected["roleArn"], role.as_str(), "{connected}");
    let assumed = moto.setup(&["assumed", &moto.url]);
    assert!(
        assumed["roleArns"]
            .as_array()
            .unwrap()
            .contains(&json!(role)),
        "{assumed}"
    );
}
