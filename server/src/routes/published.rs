//! What psbx publishes at its public URL for anyone to fetch, with no credential:
//! the agent's skill and its tool reference (`/skills/psbx/`, [`crate::skill`]),
//! which the one-line client setup downloads into the client's skills directory;
//! and psbx's CloudFormation templates (`/aws/templates/`,
//! [`crate::aws::templates`]), which the `createStackCommand`s of `GET /v1/aws`
//! and of an environment download, so that no operator has to publish them
//! first. None holds a secret. Served from the binary, so they always match the
//! running version; never cached for long, so an upgrade reaches the next
//! download.

use crate::aws::templates;
use crate::server_info::ServerInfo;
use crate::skill;
use actix_web::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use actix_web::{HttpResponse, get, web};

const MARKDOWN: &str = "text/markdown; charset=utf-8";
/// RFC 9512's type (it takes no charset parameter; YAML is UTF-8 here).
const YAML: &str = "application/yaml";

fn text(body: impl Into<String>, content_type: &str) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, content_type))
        .insert_header((CACHE_CONTROL, "no-cache"))
        .body(body.into())
}

#[utoipa::path(
    tag = "server",
    operation_id = "getSkill",
    responses((
        status = 200,
        description = "The psbx skill for AI agents (Agent Skills format: YAML front matter with name and description, then the guide), naming this server's public URL",
        content_type = "text/markdown",
        body = String
    ))
)]
#[get("/skills/psbx/SKILL.md")]
pub async fn skill_file(info: web::Data<ServerInfo>) -> HttpResponse {
    text(skill::skill(&info.public_url), MARKDOWN)
}

#[utoipa::path(
    tag = "server",
    operation_id = "getSkillToolReference",
    responses((
        status = 200,
        description = "The skill's tool reference: every sandbox_* MCP tool, its fields and results",
        content_type = "text/markdown",
        body = String
    ))
)]
#[get("/skills/psbx/tools.md")]
pub async fn tools_reference() -> HttpResponse {
    text(skill::TOOLS_REFERENCE, MARKDOWN)
}

#[utoipa::path(
    tag = "server",
    operation_id = "getReadonlyRoleTemplate",
    responses((
        status = 200,
        description = "The CloudFormation template of the read-only role an account creates for psbx to import its ECS settings (deploy/aws/readonly-role.yaml as written; parameters TrustedPrincipal and ExternalId, output RoleArn). `GET /v1/aws`'s `createStackCommand` downloads it from here",
        content_type = "application/yaml",
        body = String
    ))
)]
#[get("/aws/templates/readonly-role.yaml")]
pub async fn readonly_role_template() -> HttpResponse {
    text(templates::READONLY_ROLE, YAML)
}

#[utoipa::path(
    tag = "server",
    operation_id = "getBoxRoleTemplate",
    responses((
        status = 200,
        description = "The CloudFormation template of an environment's box role, which trusts psbx as an OIDC issuer for one environment's boxes (deploy/aws/box-role.yaml as written; parameters OidcProvider, Subject and CreateProvider, output RoleArn). An environment's `awsBoxRoleCreateStackCommand` downloads it from here",
        content_type = "application/yaml",
        body = String
    ))
)]
#[get("/aws/templates/box-role.yaml")]
pub async fn box_role_template() -> HttpResponse {
    text(templates::BOX_ROLE, YAML)
}

#[utoipa::path(
    tag = "server",
    operation_id = "getConnectorEcsTemplate",
    responses((
        status = 200,
        description = "The CloudFormation template that runs the connector as an ECS service on Fargate in the user's VPC (deploy/aws/connector-ecs.yaml, its Image parameter defaulting to this server's connector image; the token comes from a Secrets Manager secret or SSM SecureString parameter named by TokenSecretArn, never a parameter in clear; output ServiceName)",
        content_type = "application/yaml",
        body = String
    ))
)]
#[get("/aws/templates/connector-ecs.yaml")]
pub async fn connector_ecs_template(info: web::Data<ServerInfo>) -> HttpResponse {
    text(templates::connector_ecs(&info.connector_image), YAML)
}
