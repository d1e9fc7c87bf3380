//! Assembles the application's state from the configuration and its parts
//! ([`AppState::assemble`], used by `psbx serve`, the tunnel benchmark and the
//! HTTP and browser tests alike; it starts the box host the parts choose,
//! [`HostChoice`]) and builds the actix-web application: middleware (request
//! logging, metrics), the open routes, the authenticated `/v1` scope, JSON
//! error handling, and the OpenAPI document collected from the routes by
//! utoipa-actix-web. The web app's pages (`/app`) are in [`crate::web`]
//! (`web::pages` is their route table).

use crate::auth::{require_api_key, require_mcp_credential};
use crate::config::Config;
use crate::error::ApiError;
use crate::host::HostChoice;
use crate::metrics::{self, Metrics};
use crate::routes::{self, docs::ApiDocument};
use crate::server_info::ServerInfo;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::middleware::from_fn;
use actix_web::{App, HttpRequest, HttpResponse, web};
use psbx_actors::boxes::Boxes;
use psbx_actors::connectors::Hub;
use psbx_actors::environments::Environments;
use psbx_actors::ids::ServerId;
use psbx_actors::reviews::Reviews;
use psbx_actors::secrets::Secrets;
use psbx_actors::shots::Shots;
use psbx_actors::storage::{DirStorage, S3Storage, Storage};
use psbx_actors::store::Store;
use std::sync::Arc;
use tracing_actix_web::TracingLogger;
use utoipa::OpenApi;
use utoipa_actix_web::{AppExt, scope};

/// What every worker's app shares.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub boxes: Arc<Boxes>,
    pub secrets: Secrets,
    /// The MCP service, built once for all workers.
    pub mcp: crate::mcp::McpService,
    pub environments: Environments,
    pub info: ServerInfo,
    /// The OAuth authorization server's settings and caches.
    pub oauth: Arc<crate::oauth::OAuth>,
    /// Who may read `/metrics`.
    pub metrics_access: routes::metrics::MetricsAccess,
    /// The accounts' box-URL allowlists (one cache per replica).
    pub box_access: psbx_actors::box_access::BoxAccess,
    /// Whose `X-Forwarded-For` names the client (`client_addr`).
    pub trusted_proxies: crate::client_addr::TrustedProxies,
    /// The boxes' screenshots and recordings, and their storage.
    pub shots: Shots,
    /// Boxes handed to a person, and their feedback.
    pub reviews: Reviews,
    /// psbx as an OIDC issuer: its signing keys and tokens.
    pub issuer: psbx_actors::oidc::Issuer,
    /// The AWS calls made for accounts.
    pub aws: crate::aws::Aws,
    /// The links to the other nodes (none: one node).
    pub peers: Option<Arc<crate::cluster::peers::Peers>>,
}

/// What the application is made of besides its configuration.
pub struct Parts {
    pub store: Store,
    pub secrets: Secrets,
    /// The connector sessions of this replica.
    pub hub: Hub,
    /// How clients reach this server.
    pub url: String,
    /// This replica (`srv_...`).
    pub server_id: ServerId,
    /// Where boxes run; none unless the caller chose a host.
    pub host: HostChoice,
    /// The links to the other nodes (none: one node).
    pub peers: Option<Arc<crate::cluster::peers::Peers>>,
}

impl Parts {
    pub fn new(store: Store, secrets: Secrets, hub: Hub, url: &str, server_id: ServerId) -> Self {
        Self {
            store,
            secrets,
            hub,
            url: url.to_owned(),
            server_id,
            host: HostChoice::Off("this server was started without a box host".to_owned()),
            peers: None,
        }
    }

    /// With links to other nodes.
    pub fn with_peers(self, peers: Arc<crate::cluster::peers::Peers>) -> Self {
        Self {
            peers: Some(peers),
            ..self
        }
    }

    /// With the box host to start.
    pub fn with_host(self, host: HostChoice) -> Self {
        Self { host, ..self }
    }
}

/// The OIDC issuer of this server: its public URL, keys sealed by the vault.
fn issuer_for(
    config: &Config,
    store: &Store,
    secrets: &Secrets,
    url: &str,
) -> anyhow::Result<psbx_actors::oidc::Issuer> {
    Ok(psbx_actors::oidc::Issuer::new(
        store.clone(),
        secrets.vault(),
        url,
        config.oidc.rotate_after()?,
    ))
}

impl AppState {
    /// The state every worker shares, from the configuration and the parts
    /// the caller opened (database, vault, hub); starts the box host the
    /// parts choose, or keeps why this server has none (box calls answer 503
    /// with it).
    pub async fn assemble(config: &Config, parts: Parts) -> anyhow::Result<Self> {
        let Parts {
            store,
            secrets,
            hub,
            url,
            server_id,
            host,
            peers,
        } = parts;
        // First: a bucket that does not work stops the server before it
        // starts the host or takes a request.
        let storage = storage(config).await?;
        // The host's box role signs with it too.
        let issuer = issuer_for(config, &store, &secrets, &url)?;
        let services = crate::host::services(config, &store, &secrets, &hub, &issuer)?;
        let host = crate::host::start(config, host, store.clone(), &server_id, services).await?;
        let environments = Environments::new(store.clone(), secrets.vault(), hub, &url);
        let urls = psbx_actors::box_urls::BoxUrls::new(&url, &config.box_domain, secrets.vault());
        crate::box_urls::warn_if_shared_site(&config.box_domain);
        let boxes = Arc::new(
            Boxes::new(
                store.clone(),
                config.boxes.settings(config.shared_dir())?,
                host,
                secrets.clone(),
                environments.clone(),
            )
            .with_takeover_ttl(config.takeover.link_ttl()?)
            .with_terminal_limits(
                config.takeover.idle_timeout()?,
                config.takeover.max_lifetime()?,
            )
            .with_urls(urls)
            .with_url_limits(config.box_urls.limits()?)
            .placing_starts(peers.is_some()),
        );
        let info = ServerInfo {
            public_url: url.clone(),
            server_id,
            connector_image: config.connector_image.clone(),
            aws_box_role_template_url: config.aws_box_role_template_url.clone(),
        };
        let shots = Shots::new(store.clone(), boxes.clone(), storage)
            .with_review_retention(config.reviews.retention()?);
        let reviews = Reviews::new(store.clone(), boxes.clone(), shots.clone());
        let (hosts, origins) = mcp_hosts(&url);
        Ok(Self {
            metrics: Arc::new(Metrics::new()?),
            metrics_access: routes::metrics::MetricsAccess::from_config(&config.metrics)?,
            mcp: crate::mcp::service(
                boxes.clone(),
                (shots.clone(), reviews.clone()),
                store.clone(),
                environments.clone(),
                info.clone(),
                hosts,
                origins,
            ),
            oauth: Arc::new(crate::oauth::OAuth::new(
                &url,
                crate::oauth::Documents::from_config(&config.oauth),
            )),
            box_access: psbx_actors::box_access::BoxAccess::new(store.clone()),
            issuer,
            aws: crate::aws::Aws::new(&config.aws),
            peers,
            trusted_proxies: crate::client_addr::TrustedProxies::parse(&config.trusted_proxies)?,
            shots,
            reviews,
            store,
            boxes,
            secrets,
            environments,
            info,
        })
    }
}

/// Where files go: the bucket of `storage.s3`, checked (a test object
/// written, read and deleted), or the directory `shots_dir`.
async fn storage(config: &Config) -> anyhow::Result<Arc<dyn Storage>> {
    let Some(settings) = config.storage.s3_settings()? else {
        return Ok(Arc::new(DirStorage::new(config.shots_dir())));
    };
    let place = settings.describe();
    let s3 = S3Storage::connect(settings, config.spool_dir()).await?;
    s3.check()
        .await
        .map_err(|e| anyhow::anyhow!("storage.s3 does not work: {e}"))?;
    tracing::info!(storage = %place, "files are kept in object storage");
    Ok(Arc::new(s3))
}

/// The Host names and Origins `/mcp` accepts: the public URL's host, and the
/// loopback names on the same port. Origins are listed with their port, which
/// rmcp compares normalised (an `Origin` without a port has the scheme's
/// default): `https://h:443` admits the `https://h` browsers send, and a
/// portless entry would admit every port.
fn mcp_hosts(url: &str) -> (Vec<String>, Vec<String>) {
    let parsed = url::Url::parse(url).ok();
    let scheme = parsed.as_ref().map_or("http", |u| u.scheme()).to_owned();
    let port = parsed
        .as_ref()
        .and_then(url::Url::port_or_known_default)
        .unwrap_or(80);
    let mut hosts: Vec<String> = parsed
        .as_ref()
        .and_then(|u| u.host_str().map(str::to_owned))
        .into_iter()
        .collect();
    for loopback in ["127.0.0.1", "localhost"] {
        if !hosts.iter().any(|h| h == loopback) {
            hosts.push(loopback.to_owned());
        }
    }
    let origins = hosts
        .iter()
        .map(|h| format!("{scheme}://{h}:{port}"))
        .collect();
    (hosts, origins)
}

/// The whole application, as the server runs it and as the HTTP tests call it.
pub fn build(
    state: AppState,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let (app, document) = App::new()
        .into_utoipa_app()
        .openapi(routes::docs::BaseDocument::openapi())
        .service(routes::health::health)
        .service(routes::docs::document)
        .service(routes::published::skill_file)
        .service(routes::published::tools_reference)
        .service(routes::published::readonly_role_template)
        .service(routes::published::box_role_template)
        .service(routes::published::connector_ecs_template)
        .service(routes::uploads::upload_put)
        .service(routes::connect::connect)
        .service(routes::uploads::upload_post)
        .service(
            scope("/v1")
                .wrap(from_fn(require_api_key))
                .configure(routes::v1),
        )
        .split_for_parts();
    app.service(
        state
            .mcp
            .clone()
            .scope_with_path("/mcp")
            .wrap(from_fn(require_mcp_credential)),
    )
    .configure(crate::oauth::routes)
    .configure(routes::oidc::routes)
    .configure(routes::takeover::routes)
    .configure(crate::web::pages::routes)
    .app_data(web::Data::new(ApiDocument::new(
        &document,
        state.boxes.settings().max_keep,
    )))
    .app_data(web::Data::from(state.oauth))
    .app_data(web::Data::new(state.store))
    .app_data(web::Data::from(state.metrics))
    .app_data(web::Data::new(state.metrics_access))
    .app_data(web::Data::from(state.boxes))
    .app_data(web::Data::new(state.secrets))
    .app_data(web::Data::new(state.environments))
    .app_data(web::Data::new(state.info))
    .app_data(web::Data::new(state.box_access))
    .app_data(web::Data::new(state.trusted_proxies))
    .app_data(web::Data::new(state.shots))
    .app_data(web::Data::new(state.reviews))
    .app_data(web::Data::new(state.issuer))
    .app_data(web::Data::new(state.aws))
    .app_data(web::Data::new(state.peers))
    // Every body has a limit; past it, 413 `payload_too_large`
    // (`limits::body`; the streamed uploads count their own).
    .app_data(crate::limits::body::json_config())
    .app_data(crate::limits::body::form_config())
    .app_data(crate::limits::body::payload_config())
    .app_data(web::QueryConfig::default().error_handler(|err, _| {
        ApiError::bad_request(
            "invalid_query",
            format!("the query string was refused: {err}"),
        )
        .into()
    }))
    .app_data(web::PathConfig::default().error_handler(|err, _| {
        ApiError::bad_request("invalid_path", format!("the path was refused: {err}")).into()
    }))
    .route("/metrics", web::get().to(routes::metrics::scrape))
    .default_service(web::to(not_found))
    // Box hosts first: no request for a box URL reaches psbx's own routes.
    .wrap(from_fn(crate::box_urls::route))
    // Before them, a request for a box another node holds goes there.
    .wrap(from_fn(crate::cluster::forward::route))
    .wrap(from_fn(metrics::track))
    .wrap(TracingLogger::<crate::request_span::RedactedSpan>::new())
    // Outermost: a connection past its requests in flight costs nothing more.
    .wrap(from_fn(crate::limits::streams::cap))
}

/// No route took the request: 405 with `Allow` when the document lists the
/// path with other methods, else 404.
async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let allowed = req
        .app_data::<web::Data<ApiDocument>>()
        .map(|doc| doc.methods_of(req.path()))
        .unwrap_or_default();
    if !allowed.is_empty() {
        let allow = allowed.join(", ");
        let mut response = actix_web::ResponseError::error_response(
            &ApiError::new(
                actix_web::http::StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("{} takes {allow}, not {}", req.path(), req.method()),
            )
            .hint("the API is described at /v1/openapi.json"),
        );
        if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&allow) {
            response
                .headers_mut()
                .insert(actix_web::http::header::ALLOW, value);
        }
        return Ok(response);
    }
    Err(ApiError::not_found(
        "route_not_found",
        format!("no route for {} {}", req.method(), req.path()),
    )
    .hint("the API is described at /v1/openapi.json"))
}
