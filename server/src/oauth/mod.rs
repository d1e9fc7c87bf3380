//! OAuth 2.1 sign-in for MCP clients, per the MCP authorization specification:
//! psbx is both the protected resource (`/mcp`, and the REST API `/v1`) and
//! their authorization server. An access token works on both: a token issued
//! for the resource `<issuer>/mcp`, `<issuer>/v1` or `<issuer>` is accepted on
//! `/mcp` and `/v1` alike (one server, one account scoping); a token for any
//! other resource is refused.
//!
//! * [`metadata`] — RFC 9728 protected resource metadata and RFC 8414
//!   authorization server metadata;
//! * [`register`] — dynamic client registration (RFC 7591);
//! * [`clients`] — who a `client_id` is: a registered client, or a client ID
//!   metadata document fetched from its URL; [`redirect_uris`] — which redirect
//!   URIs are acceptable;
//! * [`authorize`] and [`page`] — the sign-in and approval page; [`login`] —
//!   one-time sign-in links and the browser session; [`throttle`] — the
//!   sign-in and registration rate limits (the cookies, origin checks and
//!   return-path policy the app shares are in [`crate::signin`]);
//! * [`token`] and [`revoke`] — the token endpoint (codes with PKCE S256,
//!   rotating refresh tokens) and revocation (RFC 7009); [`errors`] — their
//!   RFC 6749 error bodies.
//!
//! The bearer check of `/mcp` is in [`crate::auth`].

pub mod authorize;
pub mod clients;
pub mod errors;
pub mod login;
pub mod metadata;
pub mod page;
pub mod public_address;
pub mod redirect_uris;
pub mod register;
pub mod revoke;
pub mod throttle;
pub mod token;

use crate::signin::cookies::Cookies;
use actix_web::web;
use clients::DocumentCache;
use throttle::Throttles;

/// The one scope psbx grants: use of the `sandbox_*` tools.
pub const SCOPE: &str = "mcp";

/// What the OAuth routes need to know about this server.
pub struct OAuth {
    /// The public URL, which is also the issuer identifier (no trailing slash).
    pub issuer: String,
    /// The default protected resource: `<public URL>/mcp`.
    pub resource: String,
    /// Every resource a token of this server may be issued for (and is then
    /// accepted on `/mcp` and `/v1`): `/mcp`, `/v1` and the issuer itself.
    pub resources: Vec<String>,
    /// `__Host-` cookies when the public URL is https.
    pub cookies: Cookies,
    /// The origins the sign-in forms may be posted from.
    pub origins: Vec<String>,
    /// Which client ID metadata documents are accepted.
    pub documents_accepted: Documents,
    pub documents: DocumentCache,
    pub throttles: Throttles,
}

/// Which clients may name themselves by a client ID metadata document URL
/// (`oauth.client_metadata_documents`, `oauth.loopback_client_metadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Documents {
    /// None: the server cannot fetch them (no internet); clients register.
    Off,
    /// Documents at public https URLs.
    Public,
    /// Also at `http://` loopback URLs (tests and local development only).
    PublicAndLoopback,
}

impl Documents {
    pub fn from_config(config: &crate::config::OAuthConfig) -> Self {
        match (
            config.client_metadata_documents,
            config.loopback_client_metadata,
        ) {
            (false, _) => Self::Off,
            (true, false) => Self::Public,
            (true, true) => Self::PublicAndLoopback,
        }
    }

    /// Whether documents at loopback URLs are fetched.
    pub fn loopback(self) -> bool {
        self == Self::PublicAndLoopback
    }
}

impl OAuth {
    pub fn new(public_url: &str, documents_accepted: Documents) -> Self {
        let issuer = public_url.trim_end_matches('/').to_owned();
        Self {
            resource: format!("{issuer}/mcp"),
            resources: vec![
                format!("{issuer}/mcp"),
                format!("{issuer}/v1"),
                issuer.clone(),
            ],
            cookies: Cookies {
                secure: issuer.starts_with("https://"),
            },
            origins: crate::signin::origin::allowed_origins(&issuer),
            documents_accepted,
            documents: DocumentCache::default(),
            throttles: Throttles::default(),
            issuer,
        }
    }

    /// Where `/mcp`'s 401 points clients: the path-inserted metadata URL.
    pub fn resource_metadata_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource/mcp", self.issuer)
    }

    /// Where `/v1`'s 401 points clients.
    pub fn v1_resource_metadata_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource/v1", self.issuer)
    }

    /// The resource a request names, as stored: one of [`OAuth::resources`]
    /// (a trailing slash aside), `None` for any other.
    pub fn known_resource(&self, asked: &str) -> Option<String> {
        let asked = asked.trim_end_matches('/');
        self.resources.iter().find(|r| *r == asked).cloned()
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
        "/.well-known/oauth-protected-resource/v1",
        web::get().to(metadata::protected_resource_v1),
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
    .route("/oauth/login/{token}", web::get().to(login::confirm_link))
    .route("/oauth/login/{token}", web::post().to(login::use_link))
    .route("/oauth/signed-in", web::get().to(login::signed_in));
}
