//! The configuration's small sections, each the typed settings of one part of the
//! server (box URLs, reviews, takeover, metrics, connectors, quotas, OAuth, AWS,
//! OIDC, file storage) with its defaults and the checks that turn it into that part's values,
//! and the duration bounds every section checks with ([`bounded`], [`between`]).

use super::ConfigError;
use serde::{Deserialize, Serialize};

/// What box URLs may hold of a box (`server::box_urls`): past a cap a
/// request is answered 503 at once, and quiet connections are cut, so that
/// whoever holds a box URL cannot take the box's channel from its owner.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BoxUrlsConfig {
    /// Box-URL requests (and WebSockets) open at once to one box (1 to 192:
    /// the box's channel carries 256 streams, the rest stay for exec, shots,
    /// DNS and the environment).
    pub max_requests_per_box: usize,
    /// Of those, from one client address (an IPv6 client counts per /64).
    pub max_requests_per_client: usize,
    /// A request body that sends nothing for this long is cut (`"60s"`; 1s
    /// to 1h).
    pub body_idle_timeout: String,
    /// A WebSocket (any upgraded connection) with no byte either way for
    /// this long is closed (`"10m"`; 1s to 24h).
    pub websocket_idle_timeout: String,
}

impl Default for BoxUrlsConfig {
    fn default() -> Self {
        let limits = psbx_actors::box_urls::UrlLimits::default();
        Self {
            max_requests_per_box: limits.per_box,
            max_requests_per_client: limits.per_client,
            body_idle_timeout: "60s".to_owned(),
            websocket_idle_timeout: "10m".to_owned(),
        }
    }
}

impl BoxUrlsConfig {
    /// The limits, checked.
    pub fn limits(&self) -> Result<psbx_actors::box_urls::UrlLimits, ConfigError> {
        if !(1..=192).contains(&self.max_requests_per_box) {
            return Err(ConfigError::Invalid(format!(
                "box_urls.max_requests_per_box {} must be between 1 and 192",
                self.max_requests_per_box
            )));
        }
        if !(1..=self.max_requests_per_box).contains(&self.max_requests_per_client) {
            return Err(ConfigError::Invalid(format!(
                "box_urls.max_requests_per_client {} must be between 1 and \
                 box_urls.max_requests_per_box ({})",
                self.max_requests_per_client, self.max_requests_per_box
            )));
        }
        Ok(psbx_actors::box_urls::UrlLimits {
            per_box: self.max_requests_per_box,
            per_client: self.max_requests_per_client,
            body_idle: bounded(
                "box_urls.body_idle_timeout",
                &self.body_idle_timeout,
                3600,
                "1h",
            )?,
            websocket_idle: bounded(
                "box_urls.websocket_idle_timeout",
                &self.websocket_idle_timeout,
                24 * 3600,
                "24h",
            )?,
        })
    }
}

/// Reviews (`sandbox_review`, the app's "Ready for you").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ReviewsConfig {
    /// How long an answered or approved review keeps its screenshots,
    /// recordings and reviewers' images (`"30d"`; 1h to 3650d); then they
    /// are deleted, and the review too once its box is over.
    pub retention: String,
}

impl Default for ReviewsConfig {
    fn default() -> Self {
        Self {
            retention: "30d".to_owned(),
        }
    }
}

impl ReviewsConfig {
    /// The retention, checked.
    pub fn retention(&self) -> Result<std::time::Duration, ConfigError> {
        between(
            "reviews.retention",
            &self.retention,
            (3600, "1h"),
            (3650 * 86_400, "3650d"),
        )
    }
}

/// Where psbx keeps files (`psbx_actors::storage`: shots, recordings, their
/// previews and posters, reviewers' images): a directory on this machine
/// (`shots_dir`), or with `s3` a bucket every node of an installation reads.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    pub s3: Option<S3Config>,
}

/// A bucket of S3-compatible object storage. Its credentials come from the
/// AWS SDK's default chain (`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`,
/// `AWS_PROFILE`, the instance's role), never from this file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// The bucket's name (it must exist: psbx checks it at start).
    pub bucket: String,
    /// Its region, such as `eu-west-1` (what an S3-compatible server expects
    /// otherwise, often `us-east-1`).
    pub region: String,
    /// An S3-compatible server (MinIO, Ceph, ...): every call goes there,
    /// with path-style addressing. Unset: AWS's S3.
    pub endpoint_url: Option<String>,
    /// A folder of the bucket psbx's objects go under, such as `psbx/prod`.
    pub prefix: Option<String>,
}

impl StorageConfig {
    /// The bucket's settings, checked; `None` without `s3`.
    pub fn s3_settings(&self) -> Result<Option<psbx_actors::storage::S3Settings>, ConfigError> {
        let Some(s3) = &self.s3 else {
            return Ok(None);
        };
        let bucket = &s3.bucket;
        let named = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b))
            && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
            && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !named {
            return Err(ConfigError::Invalid(format!(
                "storage.s3.bucket {bucket:?} is not a bucket name (3 to 63 lowercase letters, \
                 digits, dots and hyphens)"
            )));
        }
        let region = &s3.region;
        if region.is_empty()
            || !region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(ConfigError::Invalid(format!(
                "storage.s3.region {region:?} is not a region name, such as eu-west-1"
            )));
        }
        if let Some(url) = &s3.endpoint_url {
            let parsed = url::Url::parse(url).map_err(|e| {
                ConfigError::Invalid(format!("storage.s3.endpoint_url {url:?}: {e}"))
            })?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(ConfigError::Invalid(format!(
                    "storage.s3.endpoint_url {url:?} must start with https:// or http://"
                )));
            }
        }
        let prefix = s3
            .prefix
            .as_deref()
            .map(|p| p.trim_matches('/'))
            .filter(|p| !p.is_empty());
        if let Some(prefix) = prefix {
            psbx_actors::storage::check_key(prefix).map_err(|_| {
                ConfigError::Invalid(format!(
                    "storage.s3.prefix {prefix:?} must be folder names of letters, digits, \
                     '_', '-' and '.' joined by '/' (none starting with a dot), such as psbx/prod"
                ))
            })?;
        }
        Ok(Some(psbx_actors::storage::S3Settings {
            bucket: bucket.clone(),
            region: region.clone(),
            endpoint_url: s3.endpoint_url.clone(),
            prefix: prefix.map(str::to_owned),
        }))
    }
}

/// Takeover links (`POST /v1/boxes/{id}/takeover`): one-time links to a web
/// terminal in a box.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TakeoverConfig {
    /// How long a link works if unused (`"15m"`; 10s to 24h).
    pub link_ttl: String,
    /// An open terminal closes after this long without input (`"30m"`; 1s to 24h).
    pub idle_timeout: String,
    /// An open terminal closes after this long whatever it does (`"8h"`; 1s to 7d).
    pub max_lifetime: String,
}

impl Default for TakeoverConfig {
    fn default() -> Self {
        Self {
            link_ttl: "15m".to_owned(),
            idle_timeout: "30m".to_owned(),
            max_lifetime: "8h".to_owned(),
        }
    }
}

impl TakeoverConfig {
    /// The links' lifetime, checked.
    pub fn link_ttl(&self) -> Result<std::time::Duration, ConfigError> {
        bounded("takeover.link_ttl", &self.link_ttl, 24 * 3600, "24h")
    }

    /// How long a terminal stays open without input, checked.
    pub fn idle_timeout(&self) -> Result<std::time::Duration, ConfigError> {
        bounded(
            "takeover.idle_timeout",
            &self.idle_timeout,
            24 * 3600,
            "24h",
        )
    }

    /// How long a terminal stays open at most, checked.
    pub fn max_lifetime(&self) -> Result<std::time::Duration, ConfigError> {
        bounded(
            "takeover.max_lifetime",
            &self.max_lifetime,
            7 * 24 * 3600,
            "7d",
        )
    }
}

/// The duration `value` of setting `name`, between 1 s and `max_s` (`max`).
pub(super) fn bounded(
    name: &str,
    value: &str,
    max_s: u64,
    max: &str,
) -> Result<std::time::Duration, ConfigError> {
    between(name, value, (1, "1s"), (max_s, max))
}

/// The duration `value` of setting `name`, between `min` and `max` (each in
/// seconds, and as the message writes it).
pub(super) fn between(
    name: &str,
    value: &str,
    (min_s, min): (u64, &str),
    (max_s, max): (u64, &str),
) -> Result<std::time::Duration, ConfigError> {
    let d = psbx_actors::duration::parse(value)
        .map_err(|e| ConfigError::Invalid(format!("{name}: {e}")))?;
    let range = std::time::Duration::from_secs(min_s)..=std::time::Duration::from_secs(max_s);
    if !range.contains(&d) {
        return Err(ConfigError::Invalid(format!(
            "{name} {value:?} must be between {min} and {max}"
        )));
    }
    Ok(d)
}

/// Who may read `GET /metrics`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// The networks scrapers connect from (CIDR, e.g. `10.0.0.0/8`); default
    /// loopback only. `["0.0.0.0/0", "::/0"]` for everyone (then set `token`).
    pub allow: Vec<String>,
    /// When set, scrapers must also send `Authorization: Bearer <token>`.
    /// Redacted in `config show`.
    pub token: Option<String>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            allow: vec!["127.0.0.0/8".to_owned(), "::1/128".to_owned()],
            token: None,
        }
    }
}

/// Connector sessions (`GET /v1/connect`) this server holds; above a limit
/// the upgrade is answered 429 `too_many_sessions`. A session counts from
/// its upgrade to its end.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectorsConfig {
    /// Sessions of one connection (its connector copies × their
    /// PSBX_SESSIONS, at most 8 each).
    pub max_sessions_per_connection: usize,
    /// Sessions of all the connections of one account.
    pub max_sessions_per_account: usize,
}

impl Default for ConnectorsConfig {
    fn default() -> Self {
        let limits = psbx_actors::connectors::HubLimits::default();
        Self {
            max_sessions_per_connection: limits.sessions_per_connection,
            max_sessions_per_account: limits.sessions_per_account,
        }
    }
}

impl ConnectorsConfig {
    /// The hub's limits; a zero is taken as 1.
    pub fn limits(&self) -> psbx_actors::connectors::HubLimits {
        psbx_actors::connectors::HubLimits {
            sessions_per_connection: self.max_sessions_per_connection.max(1),
            sessions_per_account: self.max_sessions_per_account.max(1),
        }
    }
}

/// What one account may hold (README "Account quotas"); a request past a
/// limit is answered 429 `quota_exceeded`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct QuotasConfig {
    /// Boxes not stopped (creating, running or frozen).
    pub max_boxes: u32,
    /// The sum of those boxes' sizes, in units.
    pub max_units: u32,
    /// Connections, over all of the account's environments.
    pub max_connections: u32,
    /// Secrets.
    pub max_secrets: u32,
    /// Bytes of sealed secret values and environment settings stored.
    pub max_stored_bytes: u64,
    /// Bytes of stored shots (screenshots, recordings, reviewers' images,
    /// with their previews and posters).
    pub max_shot_bytes: u64,
}

impl Default for QuotasConfig {
    fn default() -> Self {
        let q = psbx_actors::quota::Quotas::default();
        Self {
            max_boxes: q.max_boxes,
            max_units: q.max_units,
            max_connections: q.max_connections,
            max_secrets: q.max_secrets,
            max_stored_bytes: q.max_stored_bytes,
            max_shot_bytes: q.max_shot_bytes,
        }
    }
}

impl QuotasConfig {
    /// The limits the store checks.
    pub fn quotas(&self) -> psbx_actors::quota::Quotas {
        psbx_actors::quota::Quotas {
            max_boxes: self.max_boxes,
            max_units: self.max_units,
            max_connections: self.max_connections,
            max_secrets: self.max_secrets,
            max_stored_bytes: self.max_stored_bytes,
            max_shot_bytes: self.max_shot_bytes,
        }
    }
}

/// OAuth sign-in for MCP clients.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OAuthConfig {
    /// Accept clients that name themselves by the https URL of a client ID
    /// metadata document (Claude Code does), which psbx fetches from the
    /// internet. A server that cannot reach the internet sets it to false: its
    /// metadata then says it does not support them, and such clients register
    /// at `/oauth/register` instead.
    pub client_metadata_documents: bool,
    /// Also accept client ID metadata documents at `http://` URLs on a loopback
    /// host (localhost, 127.0.0.1, [::1]). For tests and local development only:
    /// real clients publish their documents over https.
    pub loopback_client_metadata: bool,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        Self {
            client_metadata_documents: true,
            loopback_client_metadata: false,
        }
    }
}

/// The AWS accounts psbx reads ECS services from (`server/src/aws/`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AwsConfig {
    /// The principal accounts' read-only roles trust: this server's own AWS
    /// identity (`arn:aws:iam::<account>:root`, or its role), whose
    /// credentials the SDK's default chain finds.
    pub principal_arn: Option<String>,
    /// Where `deploy/aws/readonly-role.yaml` is published (an S3 URL the
    /// CloudFormation console can read): `GET /v1/aws` then offers a
    /// quick-create link.
    pub readonly_role_template_url: Option<String>,
    /// One endpoint for every AWS call instead of AWS's own (a local
    /// emulator; never set in production): the server's, and the STS calls
    /// boxes make for their environment's role.
    pub endpoint_url: Option<String>,
    /// How long the credentials of a box's AWS role last, in seconds (what
    /// boxd asks STS for; AWS takes 900 up to the role's
    /// `MaxSessionDuration`). Default 3600.
    pub box_session_seconds: Option<u32>,
    /// AWS account ids (12 digits) whose roles no account may connect or
    /// give its boxes (the operator's own accounts), beside the account of
    /// `principal_arn`, which is always refused (review-2 M5).
    #[serde(deserialize_with = "account_ids")]
    pub denied_accounts: Vec<String>,
}

/// AWS account ids as strings, also when TOML or the environment gave them
/// as numbers (`[111122223333]`); a number loses leading zeros, so one of
/// fewer than 12 digits is padded back.
fn account_ids<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(u64),
    }
    Ok(Vec::<Id>::deserialize(d)?
        .into_iter()
        .map(|id| match id {
            Id::Text(text) => text.trim().to_owned(),
            Id::Number(n) => format!("{n:012}"),
        })
        .collect())
}

impl AwsConfig {
    /// `denied_accounts` are account ids, and `principal_arn` names its
    /// account (the one whose roles are refused).
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if let Some(id) = self
            .denied_accounts
            .iter()
            .find(|id| !crate::aws::is_account_id(id))
        {
            return Err(ConfigError::Invalid(format!(
                "aws.denied_accounts: {id:?} is not an AWS account id (12 digits, such as 111122223333)"
            )));
        }
        if let Some(arn) = &self.principal_arn
            && crate::aws::account_of(arn).is_none()
        {
            return Err(ConfigError::Invalid(format!(
                "aws.principal_arn {arn:?} is not an ARN with an account id, such as \
                 arn:aws:iam::111122223333:role/psbx"
            )));
        }
        Ok(())
    }

    /// [`AwsConfig::box_session_seconds`], checked.
    pub fn box_session_seconds(&self) -> Result<u32, ConfigError> {
        match self.box_session_seconds {
            None => Ok(psbx_actors::box_role::DEFAULT_SESSION_SECONDS),
            Some(s) if (1..=43_200).contains(&s) => Ok(s),
            Some(s) => Err(ConfigError::Invalid(format!(
                "aws.box_session_seconds = {s}: give 1 to 43200 seconds (AWS itself takes 900 or more)"
            ))),
        }
    }
}

/// psbx as the OIDC issuer boxes' AWS roles trust (`/.well-known/jwks.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OidcConfig {
    /// Replace the signing key once it is this old (`"30d"`); the old key
    /// stays published for an hour, longer than its tokens live.
    pub rotate_after: String,
}

impl Default for OidcConfig {
    fn default() -> Self {
        Self {
            rotate_after: "30d".into(),
        }
    }
}

impl OidcConfig {
    /// The rotation period, parsed.
    pub fn rotate_after(&self) -> Result<std::time::Duration, ConfigError> {
        let d = psbx_actors::duration::parse(&self.rotate_after)
            .map_err(|e| ConfigError::Invalid(format!("oidc.rotate_after: {e}")))?;
        if d < std::time::Duration::from_secs(1) {
            return Err(ConfigError::Invalid(
                "oidc.rotate_after must be at least 1s".into(),
            ));
        }
        Ok(d)
    }
}
