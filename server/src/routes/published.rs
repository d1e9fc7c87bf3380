//! What psbx publishes at its public URL for anyone to fetch, with no credential:
//! the agent's skill and its tool reference (`/skills/psbx/`, [`crate::skill`]),
//! which the one-line client setup downloads into the client's skills directory.
//! Served from the binary, so they always match the running version; never
//! cached for long, so an upgrade reaches the next download.

use crate::server_info::ServerInfo;
use crate::skill;
use actix_web::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use actix_web::{HttpResponse, get, web};

const MARKDOWN: &str = "text/markdown; charset=utf-8";

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
