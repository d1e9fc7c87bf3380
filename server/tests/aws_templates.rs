//! psbx's CloudFormation templates, served from the binary at
//! `/aws/templates/` with no credential (compared here with the files in
//! `deploy/aws/` as written), and the commands that create stacks from them:
//! `GET /v1/aws` with and without `aws.principal_arn`, and an environment's
//! box-role fields; all of it in the OpenAPI document. That the commands
//! really create the stacks is `tests/tests/aws.rs`'s (the AWS CLI against
//! moto).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{URL, bearer, fixture, state_with};

use actix_web::http::{StatusCode, header};
use actix_web::test::{self, TestRequest};
use psbx_server::app;
use psbx_server::config::Config;
use serde_json::{Value, json};

/// `deploy/aws/<file>` as written in the repository.
fn written(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/aws")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[actix_rt::test]
async fn the_templates_are_served_as_written_without_a_credential() {
    let f = fixture();
    let app = test::init_service(app::build(state_with(&f, &Config::default()).await)).await;
    for file in ["readonly-role.yaml", "box-role.yaml", "connector-ecs.yaml"] {
        let res = test::call_service(
            &app,
            TestRequest::get()
                .uri(&format!("/aws/templates/{file}"))
                .to_request(),
        )
        .await;
        assert_eq!(res.status(), StatusCode::OK, "{file}");
        let headers = res.headers().clone();
        assert_eq!(
            headers.get(header::CONTENT_TYPE).unwrap(),
            "application/yaml",
            "{file}"
        );
        assert_eq!(
            headers.get(header::CACHE_CONTROL).unwrap(),
            "no-cache",
            "{file}"
        );
        let body = test::read_body(res).await;
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            written(file),
            "{file} is not served as written"
        );
    }
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/aws/templates/other.yaml")
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);

    // The OpenAPI document lists them, open, as YAML.
    let res = test::call_service(
        &app,
        TestRequest::get().uri("/v1/openapi.json").to_request(),
    )
    .await;
    let doc: Value = test::read_body_json(res).await;
    for file in ["readonly-role.yaml", "box-role.yaml", "connector-ecs.yaml"] {
        let get = &doc["paths"][format!("/aws/templates/{file}")]["get"];
        assert!(
            get["responses"]["200"]["content"]["application/yaml"].is_object(),
            "{file}: {get}"
        );
        assert!(get.get("security").is_none(), "{file}: {get}");
        assert!(
            get["responses"]["503"]["description"]
                .as_str()
                .is_some_and(|d| !d.contains("database_unavailable")),
            "{file}: {get}"
        );
    }
    let view = &doc["components"]["schemas"]["AwsView"]["properties"];
    for field in [
        "templateUrl",
        "createStackCommand",
        "roleArnCommand",
        "hint",
    ] {
        assert!(
            view[field]["description"].is_string(),
            "AwsView.{field}: {view}"
        );
    }
    let env = &doc["components"]["schemas"]["EnvironmentView"]["properties"];
    for field in [
        "awsBoxRoleTemplateUrl",
        "awsBoxRoleCreateStackCommand",
        "awsBoxRoleArnCommand",
    ] {
        assert!(
            env[field]["description"].is_string(),
            "EnvironmentView.{field}: {env}"
        );
    }
}

#[actix_rt::test]
async fn the_connector_template_defaults_to_the_configured_image() {
    let f = fixture();
    let config = Config {
        connector_image: "registry.example.com/psbx/connector:7".into(),
        ..Config::default()
    };
    let app = test::init_service(app::build(state_with(&f, &config).await)).await;
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/aws/templates/connector-ecs.yaml")
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let body = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
    let expected = written("connector-ecs.yaml").replace(
        "Default: \"psbx-connector:latest\"",
        "Default: \"registry.example.com/psbx/connector:7\"",
    );
    assert_ne!(expected, written("connector-ecs.yaml"));
    assert_eq!(body, expected);
}

/// `GET /v1/aws` and `GET /v1/environments/dev` with `config`.
async fn views(config: &Config) -> (Value, Value) {
    let f = fixture();
    let app = test::init_service(app::build(state_with(&f, config).await)).await;
    let key = f.key();
    let aws = test::call_service(
        &app,
        TestRequest::get()
            .uri("/v1/aws")
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    assert_eq!(aws.status(), StatusCode::OK);
    let aws: Value = test::read_body_json(aws).await;
    let made = test::call_service(
        &app,
        TestRequest::post()
            .uri("/v1/environments")
            .insert_header(bearer(&key))
            .set_json(json!({"name": "dev"}))
            .to_request(),
    )
    .await;
    assert_eq!(made.status(), StatusCode::CREATED);
    let env = test::call_service(
        &app,
        TestRequest::get()
            .uri("/v1/environments/dev")
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    assert_eq!(env.status(), StatusCode::OK);
    (aws, test::read_body_json(env).await)
}

#[actix_rt::test]
async fn a_fresh_installation_says_what_the_operator_sets_instead_of_a_broken_command() {
    let (aws, env) = views(&Config::default()).await;
    assert_eq!(aws["principalArn"], Value::Null, "{aws}");
    assert_eq!(aws["quickCreateUrl"], Value::Null, "{aws}");
    assert_eq!(aws["createStackCommand"], Value::Null, "{aws}");
    assert_eq!(aws["roleArnCommand"], Value::Null, "{aws}");
    assert_eq!(
        aws["templateUrl"],
        format!("{URL}/aws/templates/readonly-role.yaml"),
        "{aws}"
    );
    let hint = aws["hint"].as_str().unwrap();
    assert!(
        hint.contains("aws.principal_arn") && hint.contains("PSBX_AWS__PRINCIPAL_ARN"),
        "{hint}"
    );
    // The box role trusts psbx as an OIDC issuer: no principal needed.
    let create = env["awsBoxRoleCreateStackCommand"].as_str().unwrap();
    let subject = env["awsSubject"].as_str().unwrap();
    assert!(
        create.starts_with(&format!(
            "curl -fsSL {URL}/aws/templates/box-role.yaml -o /tmp/psbx-box-role.yaml && "
        )),
        "{create}"
    );
    for part in [
        "aws cloudformation create-stack --stack-name psbx-box-role-dev --region us-east-1",
        "--template-body file:///tmp/psbx-box-role.yaml",
        "ParameterKey=OidcProvider,ParameterValue=localhost:8080",
        &format!("ParameterKey=Subject,ParameterValue={subject}"),
        "ParameterKey=CreateProvider,ParameterValue=true",
    ] {
        assert!(create.contains(part), "{part:?} not in {create}");
    }
    assert!(
        env["awsBoxRoleArnCommand"]
            .as_str()
            .unwrap()
            .contains("describe-stacks --stack-name psbx-box-role-dev"),
        "{env}"
    );
    assert_eq!(
        env["awsBoxRoleTemplateUrl"],
        format!("{URL}/aws/templates/box-role.yaml"),
        "{env}"
    );
}

#[actix_rt::test]
async fn with_a_principal_the_read_only_role_has_its_command() {
    let mut config = Config::default();
    config.aws.principal_arn = Some("arn:aws:iam::111122223333:role/psbx".into());
    let (aws, _) = views(&config).await;
    let external_id = aws["externalId"].as_str().unwrap();
    let create = aws["createStackCommand"].as_str().unwrap();
    for part in [
        &format!(
            "curl -fsSL {URL}/aws/templates/readonly-role.yaml -o /tmp/psbx-readonly-role.yaml && "
        ),
        "aws cloudformation create-stack --stack-name psbx-readonly --region us-east-1",
        "--capabilities CAPABILITY_NAMED_IAM",
        "ParameterKey=TrustedPrincipal,ParameterValue=arn:aws:iam::111122223333:role/psbx",
        &format!("ParameterKey=ExternalId,ParameterValue={external_id}"),
    ] {
        assert!(create.contains(part), "{part:?} not in {create}");
    }
    assert!(
        aws["roleArnCommand"].as_str().unwrap().contains(
            "--query 'Stacks[0].Outputs[?OutputKey==`RoleArn`].OutputValue' --output text"
        ),
        "{aws}"
    );
    assert_eq!(aws["hint"], Value::Null, "{aws}");
    // No template published to S3: no console link, the command all the same.
    assert_eq!(aws["quickCreateUrl"], Value::Null, "{aws}");
}
