//! Prometheus metrics: requests by route pattern, method and status, request
//! latency histograms, and the database pool's use, rendered in the text format
//! at `GET /metrics`. Each app has its own registry (tests build several).

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use psbx_actors::store::PoolUse;
use std::time::Instant;

/// What the log says for the path of a box URL's request.
pub const BOX_URL_PATH: &str = "[box URL]";

pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    pool_max: IntGauge,
    pool_connections: IntGaugeVec,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("psbx".to_owned()), None)?;
        let requests = IntCounterVec::new(
            Opts::new("http_requests_total", "HTTP requests answered"),
            &["method", "route", "status"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "http_request_duration_seconds",
                "Time from receiving a request to its response head",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["method", "route"],
        )?;
        let pool_max = IntGauge::new("db_pool_max_connections", "Size limit of the database pool")?;
        let pool_connections = IntGaugeVec::new(
            Opts::new("db_pool_connections", "Database connections by state"),
            &["state"],
        )?;
        let build = IntGaugeVec::new(
            Opts::new("build_info", "Version of this server"),
            &["version"],
        )?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(pool_max.clone()))?;
        registry.register(Box::new(pool_connections.clone()))?;
        registry.register(Box::new(build))?;
        Ok(Self {
            registry,
            requests,
            latency,
            pool_max,
            pool_connections,
        })
    }

    /// Everything in the Prometheus text format, the pool read just now.
    pub fn render(&self, pool: PoolUse) -> Result<String, prometheus::Error> {
        self.pool_max.set(i64::from(pool.max_size));
        self.pool_connections
            .with_label_values(&["idle"])
            .set(i64::from(pool.idle));
        self.pool_connections
            .with_label_values(&["in_use"])
            .set(i64::from(pool.connections.saturating_sub(pool.idle)));
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

/// Counts, times and logs every request. Routes are labelled by their pattern
/// (`/v1/api-keys/{id}`), never the raw path, so label values stay few; the log
/// line carries the path without its query string (which may hold codes). A
/// box URL's request line carries `[box URL]` instead of its path: the paths
/// of a box's app are its own (a reset link's token, say), not psbx's log's.
pub async fn track(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let metrics = req.app_data::<web::Data<Metrics>>().cloned();
    let method = req.method().to_string();
    let path = if crate::box_urls::is_box_request(&req) {
        BOX_URL_PATH.to_owned()
    } else {
        crate::request_span::loggable_path(req.path()).into_owned()
    };
    let started = Instant::now();
    let result = next.call(req).await;
    let elapsed = started.elapsed();
    let (route, status) = match &result {
        Ok(res) => (
            res.request()
                .match_pattern()
                .unwrap_or_else(|| "unmatched".to_owned()),
            res.status().as_u16(),
        ),
        Err(e) => (
            "unmatched".to_owned(),
            e.as_response_error().status_code().as_u16(),
        ),
    };
    tracing::info!(
        %method,
        %path,
        status,
        latency_ms = elapsed.as_secs_f64() * 1000.0,
        "request"
    );
    if let Some(metrics) = metrics {
        metrics
            .latency
            .with_label_values(&[method.as_str(), route.as_str()])
            .observe(elapsed.as_secs_f64());
        metrics
            .requests
            .with_label_values(&[method.as_str(), route.as_str(), &status.to_string()])
            .inc();
    }
    result
}
