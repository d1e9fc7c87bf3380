//! The AWS role of an environment's boxes (environments.txt, "AWS
//! permissions inside a box"), against moto standing for AWS in a network
//! namespace on a public test address: the server reaches it by its
//! configured endpoint, boxes through their internet egress. moto's STS
//! checks web identity tokens as AWS does (`tests/aws/moto_sts.py`): it
//! fetches psbx's JWKS from the issuer URL (the server listens on the
//! namespace's link for that), checks the signature, the audience and the
//! role's trust, whose subject is the environment's.
//!
//! One production-image box of environment `dev` shows: its `.env` holds the
//! ECS service's imported values byte for byte with the role's variables;
//! `aws sts get-caller-identity` is `assumed-role/box-dev/psbx-<box id>`;
//! credentials given for 40 s are replaced before they end; a container
//! started with `--env-file` gets them too; a request without the token is
//! refused. A box of environment `other`, whose subject the role does not
//! trust, gets STS's AccessDenied.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::aws::setup;
use psbx_tests::netns::Netns;
use psbx_tests::vm::BoxServer;
use psbx_tests::vm::exec_text as exec;
use psbx_tests::wait;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::process::Stdio;
use std::time::Duration;

/// The role's credentials as the box serves them (`curl` with the token).
fn credentials(s: &BoxServer, id: &str) -> Value {
    let out = exec(
        s,
        id,
        "curl -sS -H \"Authorization: $AWS_CONTAINER_AUTHORIZATION_TOKEN\" \
         \"$AWS_CONTAINER_CREDENTIALS_FULL_URI\"",
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn an_environments_boxes_take_its_aws_role_and_its_imported_settings() {
    let images = psbx_tests::vm::images_dir();
    assert!(
        images.join("debian/manifest.json").is_file(),
        "{}/debian has no production image (the AWS CLI is in it): scripts/test builds it",
        images.display()
    );
    // AWS: moto in a namespace on a public test address.
    let mut aws = Netns::new(&[]);
    let moto_ip = aws.routed([198, 51, 100]);
    let endpoint = format!("http://{moto_ip}:5000");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("aws/moto_sts.py");
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut cmd = aws.command(psbx_tests::python::python().to_str().unwrap());
    cmd.arg(&script)
        .args([&moto_ip.to_string(), "5000"])
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap());
    aws.spawn(cmd);
    wait::until("moto in its namespace", Duration::from_secs(60), || {
        std::net::TcpStream::connect((moto_ip, 5000)).ok()
    });
    let user = setup(&["user", &endpoint]);
    let principal = user["arn"].as_str().unwrap().to_owned();
    let identity = psbx_tests::aws::identity(&user);

    // psbx on the namespace's link, so that moto reaches its JWKS.
    let s = BoxServer::start_with_env(
        &format!("{}:0", aws.host_ip),
        &format!(
            "[aws]\nendpoint_url = \"{endpoint}\"\nprincipal_arn = \"{principal}\"\n\
             box_session_seconds = 40\n"
        ),
        "network = true\nimage = \"debian\"\n\
         unit_vcpus = 2\nunit_memory_mib = 3072\nunit_disk_gb = 8\nboot_timeout = \"300s\"\n\
         [boxes.egress]\nresolvers = [\"127.0.0.1:9\"]\n\
         only = [\"198.51.100.0/24\", \"203.0.113.0/24\"]\n",
        &identity
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect::<Vec<_>>(),
    );
    for name in ["dev", "other"] {
        s.ok("POST", "/v1/environments", Some(json!({ "name": name })));
    }
    // The account's read-only role connected, and the ECS service imported.
    let aws_view = s.ok("GET", "/v1/aws", None);
    let actions: Vec<&str> = aws_view["requiredActions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let roles = setup(&[
        "roles",
        &endpoint,
        &principal,
        aws_view["externalId"].as_str().unwrap(),
        &actions.join(","),
    ]);
    // The boxes' role, trusting dev's subject.
    let dev = s.ok("GET", "/v1/environments/dev", None);
    let subject = dev["awsSubject"].as_str().unwrap();
    let role = setup(&["boxrole", &endpoint, &s.url(), subject])["role"]
        .as_str()
        .unwrap()
        .to_owned();
    s.ok(
        "PUT",
        "/v1/aws",
        Some(json!({"roleArn": roles["readonly"], "region": "us-east-1"})),
    );
    let ecs = setup(&["ecs", &endpoint]);
    s.ok(
        "POST",
        "/v1/environments/dev/services/import",
        Some(json!({"cluster": "prod", "service": "api"})),
    );
    for name in ["dev", "other"] {
        s.ok(
            "PUT",
            &format!("/v1/environments/{name}"),
            Some(json!({"awsRoleArn": role, "awsRegion": "us-east-1"})),
        );
    }

    let started = s.ok(
        "POST",
        "/v1/boxes",
        Some(json!({"name": "aws", "environment": "dev"})),
    );
    let id = started["id"].as_str().unwrap().to_owned();

    // The settings file: the imported values byte for byte, and the role's.
    let token = exec(&s, &id, "printenv AWS_CONTAINER_AUTHORIZATION_TOKEN");
    let token = token.trim();
    assert!(
        token.len() == 32 && token.bytes().all(|b| b.is_ascii_alphanumeric()),
        "{token:?}"
    );
    let mut lines: Vec<String> = ecs["api"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={}\n", v.as_str().unwrap()))
        .chain([
            "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://169.254.170.2/v1/credentials\n".to_owned(),
            format!("AWS_CONTAINER_AUTHORIZATION_TOKEN={token}\n"),
            "AWS_REGION=us-east-1\n".to_owned(),
            "AWS_DEFAULT_REGION=us-east-1\n".to_owned(),
        ])
        .collect();
    lines.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let expected = hex::encode(Sha256::digest(lines.concat().as_bytes()));
    let got = exec(&s, &id, "LC_ALL=C sort /work/.sbx/env/api.env | sha256sum");
    assert!(
        got.starts_with(&expected),
        "{got} (the file, masked: {})",
        exec(&s, &id, "cat /work/.sbx/env/api.env")
    );
    let got = exec(&s, &id, "wc -l < /work/.sbx/env/api.env");
    assert_eq!(got.trim(), lines.len().to_string(), "{got}");

    // The CLI, with no code and no keys: the assumed role and the box's session.
    let who = exec(
        &s,
        &id,
        &format!(
            "export HOME=$(mktemp -d); aws sts get-caller-identity --endpoint-url {endpoint} --output json"
        ),
    );
    let session = format!("assumed-role/box-dev/psbx-{id}");
    assert!(who.contains(&session), "{who}");

    // Credentials for 40 s are replaced with 10 s left: the same ones until then.
    let first = credentials(&s, &id);
    assert_eq!(first["RoleArn"], role.as_str(), "{first}");
    assert!(
        first["SecretAccessKey"].is_string() && first["Token"].is_string(),
        "{first}"
    );
    assert_eq!(credentials(&s, &id)["AccessKeyId"], first["AccessKeyId"]);
    let expires = chrono::DateTime::parse_from_rfc3339(first["Expiration"].as_str().unwrap())
        .unwrap()
        .with_timezone(&chrono::Utc);
    let until = expires - chrono::Duration::seconds(9);
    if let Ok(wait) = (until - chrono::Utc::now()).to_std() {
        std::thread::sleep(wait);
    }
    let second = credentials(&s, &id);
    assert_ne!(second["AccessKeyId"], first["AccessKeyId"], "{second}");
    assert_ne!(second["Expiration"], first["Expiration"], "{second}");
    let who = exec(
        &s,
        &id,
        &format!("export HOME=$(mktemp -d); aws sts get-caller-identity --endpoint-url {endpoint}"),
    );
    assert!(who.contains(&session), "after the refresh: {who}");

    // Without the token: refused, saying what to send.
    let out = exec(
        &s,
        &id,
        "curl -sS -w ' %{http_code}' http://169.254.170.2/v1/credentials",
    );
    assert!(
        out.ends_with(" 401") && out.contains("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
        "{out}"
    );

    // A container started with the settings file reaches them too.
    let out = exec(
        &s,
        &id,
        &format!(
            "{} && docker run --rm --env-file /work/.sbx/env/api.env bb sh -c \
           'wget -qO- --header \"Authorization: $AWS_CONTAINER_AUTHORIZATION_TOKEN\" \
              \"$AWS_CONTAINER_CREDENTIALS_FULL_URI\"; echo; echo region=$AWS_REGION'",
            psbx_tests::vm::BUSYBOX_IMAGE
        ),
    );
    assert!(
        out.contains("\"AccessKeyId\"") && out.contains("region=us-east-1"),
        "{out}"
    );
    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);

    // A box of another environment: the role trusts dev's subject only.
    let started = s.ok(
        "POST",
        "/v1/boxes",
        Some(json!({"name": "aws-other", "environment": "other"})),
    );
    let other = started["id"].as_str().unwrap().to_owned();
    let out = exec(
        &s,
        &other,
        "curl -sS -w ' %{http_code}' -H \"Authorization: $AWS_CONTAINER_AUTHORIZATION_TOKEN\" \
         \"$AWS_CONTAINER_CREDENTIALS_FULL_URI\"",
    );
    assert!(
        out.ends_with(" 502")
            && out.contains("AccessDenied")
            && out.contains("Not authorized to perform sts:AssumeRoleWithWebIdentity"),
        "{out}\nmoto: {}",
        std::fs::read_to_string(log.path()).unwrap_or_default()
    );
    s.ok("DELETE", &format!("/v1/boxes/{other}"), None);
}
