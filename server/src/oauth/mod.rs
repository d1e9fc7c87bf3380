//! OAuth 2.1 sign-in for MCP clients, per the MCP authorization specification:
//! psbx is both the protected resource (`/mcp`) and its authorization server.
//!
//! * [`metadata`] — RFC 9728 protected resource metadata and RFC 8414
//!   authorization server metadata;
//! * [`register`] — dynamic client registration (RFC 7591);
//! * [`clients`] — who a `client_id` is: a registered client, or a client ID
//!   metadata document fetched from its URL; [`redirect_uris`] — which redirect
//!   URIs are acceptable;
//! * [`authorize`] and [`page`] — the sign-in and approval page; [`login`] —
//!   one-time sign-in links and the browser session; [`cookies`];
//! * [`token`] and [`revoke`] — the token endpoint (codes with PKCE S256,
//!   rotating refresh tokens) and revocation (RFC 7009); [`errors`] — their
//!   RFC 6749 error bodies.
//!
//! The bearer check of `/mcp` is in [`crate::auth`].

pub mod authorize;
pub mod clients;
pub mod cookies;
pub mod errors;
pub mod login;
pub mod metadata;
pub mod page;
pub mod redirect_uris;
pub mod register;
pub mod revoke;
pub mod token;

use actix_web::web;
use clients::DocumentCache;

/// The one scope psbx grants: use of the `sandbox_*` tools.
pub const SCOPE: &str = "mcp";

/// What the OAuth routes need to know about this server.
pub struct OAuth {
    /// The public URL, which is also the issuer identifier (no trailing slash).
    pub issuer: String,
    /// The protected resource: `<public URL>/mcp`.
    pub resource: String,
    /// Cookies get `Secure` when the public URL is https.
    pub secure_cookies: bool,
    /// Accept client metadata documents at `http://` loopback URLs (tests only).
    pub loopback_documents: bool,
    pub documents: DocumentCache,
}

impl OAuth {
    pub fn new(public_url: &str, loopback_documents: bool) -> Self {
        let issuer = public_url.trim_end_matches('/').to_owned();
        Self {
            resource: format!("{issuer}/mcp"),
            secure_cookies: issuer.starts_with("https://"),
            loopback_documents,
            documents: DocumentCache::default(),
            issuer,
        }
    }

    /// Where `/mcp`'s 401 points clients: the path-inserted metadata URL.
    pub fn resource_metadata_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource/mcp", self.issuer)
    }

    pub fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.issuer)
    }
}

/// Bodies the token and revocation endpoints cannot read are refused in RFC
/// 6749's shape.
fn form_errors() -> web::FormConfig {
    web::FormConfig::default().error_handler(|err, _| {
        errors::OAuthError::invalid_request(format!(
            "send the parameters form-encoded (application/x-www-form-urlencoded): {err}"
        ))
        .into()
    })
}

/// The OAuth routes (none of them needs a credential).
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/.well-known/oauth-protected-resource",
        web::get().to(metadata::protected_resource),
    )
    .route(
        "/.well-known/oauth-protected-resource/mcp",
        web::get().to(metadata::protected_resource),
    )
    .route(
        "/.well-known/oauth-authorization-server",
        web::get().to(metadata::authorization_server),
    )
    .route("/oauth/register", web::post().to(register::register))
    .route("/oauth/authorize", web::get().to(authorize::show))
    .route("/oauth/authorize", web::post().to(authorize::decide))
    .service(
        web::resource("/oauth/token")
            .app_data(form_errors())
            .route(web::post().to(token::token)),
    )
    .service(
        web::resource("/oauth/revoke")
            .app_data(form_errors())
            .route(web::post().to(revoke::revoke)),
    )
    .route("/oauth/login/{token}", web::get().to(login::open_link))
    .route("/oauth/signed-in", web::get().to(login::signed_in));
}
