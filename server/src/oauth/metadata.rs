//! Discovery documents: protected resource metadata (RFC 9728) for `/mcp`,
//! served at `/.well-known/oauth-protected-resource` and its path-inserted form
//! `/.well-known/oauth-protected-resource/mcp`, and for the REST API at
//! `/.well-known/oauth-protected-resource/v1`; and authorization server
//! metadata (RFC 8414) at `/.well-known/oauth-authorization-server`, whose
//! `issuer` is the public URL these documents are fetched from.

use super::{OAuth, SCOPE};
use actix_web::{HttpResponse, web};
use serde_json::json;

fn resource_document(oauth: &OAuth, resource: &str, name: &str) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "resource": resource,
        "authorization_servers": [oauth.issuer],
        "bearer_methods_supported": ["header"],
        "scopes_supported": [SCOPE],
        "resource_name": name,
    }))
}

pub async fn protected_resource(oauth: web::Data<OAuth>) -> HttpResponse {
    resource_document(&oauth, &oauth.resource, "psbx sandboxes (MCP)")
}

pub async fn protected_resource_v1(oauth: web::Data<OAuth>) -> HttpResponse {
    resource_document(
        &oauth,
        &format!("{}/v1", oauth.issuer),
        "psbx sandboxes (REST API)",
    )
}

pub async fn authorization_server(oauth: web::Data<OAuth>) -> HttpResponse {
    HttpResponse::Ok().json(authorization_server_metadata(&oauth))
}

/// RFC 8414's document (the OIDC discovery document adds to it).
pub fn authorization_server_metadata(oauth: &OAuth) -> serde_json::Value {
    json!({
        "issuer": oauth.issuer,
        "authorization_endpoint": oauth.endpoint("/oauth/authorize"),
        "token_endpoint": oauth.endpoint("/oauth/token"),
        "registration_endpoint": oauth.endpoint("/oauth/register"),
        "revocation_endpoint": oauth.endpoint("/oauth/revoke"),
        "scopes_supported": [SCOPE],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "authorization_response_iss_parameter_supported": true,
        "client_id_metadata_document_supported": oauth.documents_accepted != super::Documents::Off,
    })
}
