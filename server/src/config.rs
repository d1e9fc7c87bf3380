//! The server's configuration: defaults that work on one machine, then the file
//! (`psbx.toml`, or `--config`), then `PSBX_*` environment variables (nested keys
//! with `__`: `PSBX_TLS__CERT`; a list is a TOML array:
//! `PSBX_BOXES__EGRESS__ONLY='["198.51.100.0/24"]'`), `DATABASE_URL`, and last
//! the command-line flags.
//!
//! figment does the layering; this module holds the shape, the defaults, the
//! derived values (public URL) and the redacted view `psbx config show` prints.

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use psbx_actors::boxnet::policy::EgressPolicy;
use psbx_actors::settings::{BoxSettings, SIZES, Unit};
use psbx_libvirt::AccelChoice;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The file read when `--config` is not given (only if it exists).
pub const DEFAULT_FILE: &str = "psbx.toml";

/// Everything `psbx serve` and the operator commands need to know.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address and port the HTTP(S) server binds.
    pub listen: SocketAddr,
    /// The URL clients use to reach this server; derived from `listen` when unset.
    pub public_url: Option<String>,
    /// Box URLs are `box-<id>-<key>[-<port>].<box_domain>` (`actors::box_urls`).
    pub box_domain: String,
    /// Reverse proxies (addresses or CIDR networks) whose `X-Forwarded-For`
    /// names the client: for the box-URL allowlist and the per-address
    /// rate limits. Empty: the TCP peer is the client.
    pub trusted_proxies: Vec<String>,
    /// The connector's container image, as a connection's `runCommand` names it
    /// (build it from `connector/Dockerfile` and publish it where your
    /// networks can pull it).
    pub connector_image: String,
    /// Where the CloudFormation template of the boxes' AWS role is published
    /// (`deploy/aws/box-role.yaml`, uploaded to S3); environments then offer a
    /// quick-create link.
    pub aws_box_role_template_url: Option<String>,
    /// Where psbx keeps its state: the master key, TLS files, shots, and
    /// (unless `shared_dir` says otherwise) the embedded PostgreSQL cluster,
    /// images and box disks.
    pub data_dir: PathBuf,
    /// Where the state other users must reach lives: the embedded cluster
    /// (`pg/`, run as `postgres.user`), images (`images/`) and box disks
    /// (`boxes/`, opened by libvirt's QEMU). Default: the data directory, or
    /// as root `/var/lib/psbx/data-<hash>` when a directory above the data
    /// directory is closed to other users (a clone under `/root`).
    pub shared_dir: Option<PathBuf>,
    /// Where screenshots, recordings and reviewers' images are kept (the
    /// directory shot storage); default `<data_dir>/shots`.
    pub shots_dir: Option<PathBuf>,
    /// An external PostgreSQL database; when unset, psbx runs its own cluster under
    /// `data_dir/pg`. Also read from `DATABASE_URL`. Redacted in `config show`.
    pub database_url: Option<String>,
    /// Largest number of connections to the database.
    pub database_pool_size: u32,
    /// HTTP worker threads; default one per CPU. Long calls (a command
    /// followed for minutes, a stream) hold none: they are tasks.
    pub http_workers: Option<usize>,
    /// The libvirt host boxes run on.
    pub libvirt_uri: String,
    /// The 32-byte key that seals secrets (created, mode 0600, when missing);
    /// default `<data_dir>/master.key`. Every replica needs the same file.
    pub master_key_file: Option<PathBuf>,
    /// `info`, `debug`, or a tracing filter such as `psbx_server=debug,info`
    /// (`RUST_LOG` wins when set).
    pub log_level: String,
    pub log_format: LogFormat,
    pub tls: TlsConfig,
    pub postgres: EmbeddedPostgresConfig,
    pub boxes: BoxesConfig,
    pub quotas: QuotasConfig,
    pub oauth: OAuthConfig,
    pub oidc: OidcConfig,
    pub aws: AwsConfig,
    pub metrics: MetricsConfig,
    pub connectors: ConnectorsConfig,
    pub takeover: TakeoverConfig,
    pub reviews: ReviewsConfig,
    pub box_urls: BoxUrlsConfig,
}

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

impl Config {
    /// Where the cluster, images and box disks live (see `shared_dir`).
    pub fn shared_dir(&self) -> &Path {
        self.shared_dir.as_deref().unwrap_or(&self.data_dir)
    }

    /// Where the shot storage keeps its files.
    pub fn shots_dir(&self) -> PathBuf {
        self.shots_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("shots"))
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
fn bounded(
    name: &str,
    value: &str,
    max_s: u64,
    max: &str,
) -> Result<std::time::Duration, ConfigError> {
    between(name, value, (1, "1s"), (max_s, max))
}

/// The duration `value` of setting `name`, between `min` and `max` (each in
/// seconds, and as the message writes it).
fn between(
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
    fn check(&self) -> Result<(), ConfigError> {
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

/// Boxes: the image, sizes, timers, the pool and the host's limits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BoxesConfig {
    /// Run boxes on `libvirt_uri`; false serves the API without boxes.
    pub enabled: bool,
    /// `auto` (prove KVM with a short boot, else TCG), `kvm` or `tcg`.
    pub accel: AccelChoice,
    /// Images: `<images_dir>/<image>/manifest.json`; default `<shared_dir>/images`.
    pub images_dir: Option<PathBuf>,
    /// The image boxes start from (`scripts/image/<name>` builds it).
    pub image: String,
    /// One size unit; boxes are 1, 2, 4 or 8 units.
    pub unit_vcpus: u32,
    pub unit_memory_mib: u64,
    pub unit_disk_gb: u64,
    /// Freeze after this long without activity.
    pub idle_freeze: String,
    /// Stop this long after the last activity unless `keep` says otherwise...
    pub default_keep: String,
    /// ...up to this (at most 7d, the spec's longest keep).
    pub max_keep: String,
    /// A frozen box is stopped after this long frozen, whatever its keep
    /// (at most 10d, the spec's safety net for saved memory).
    pub max_frozen: String,
    /// Pre-booted boxes kept ready per pooled size, and which sizes have a pool.
    pub pool_size: usize,
    pub pool_unit_sizes: Vec<u32>,
    /// vCPUs promised to boxes holding host memory (pooled, booting,
    /// running; frozen ones give theirs back) may reach this multiple of the
    /// host's CPUs. 16.0: idle boxes take little CPU, and on a 2-core host
    /// that is 16 boxes of the default 2-vCPU unit.
    pub cpu_overcommit: f64,
    /// Memory promised to those boxes may reach this multiple of the host's
    /// memory (the kernel's MemTotal). 8.0: boxes are admitted by what they
    /// use (below), which caps them first; this only bounds the promises
    /// (24 boxes of the default 8 GiB unit on a 24 GiB host).
    pub memory_overcommit: f64,
    /// Memory (MiB) a new box must leave available (MemAvailable) once it has
    /// its full unit, after what booting boxes may still take: running boxes
    /// count what their QEMU processes use, booting ones their full unit.
    pub memory_margin_mib: u64,
    /// When the host's MemAvailable falls under this (MiB), the idlest running
    /// boxes are frozen (their memory saved to disk) until it is back above;
    /// 0 never freezes for pressure. Keep it under `memory_margin_mib`, or
    /// admitting a box may freeze another.
    pub pressure_available_mib: u64,
    /// Disk (GiB) under `<shared_dir>/boxes` never promised to boxes: room for the
    /// embedded PostgreSQL and logs on the same file system.
    pub disk_margin_gb: u64,
    /// Disk boxes may still write (each up to `unit_disk_gb` × size plus its
    /// memory for a freeze) may reach this multiple of the free space above
    /// the margin. 1.0 (the default) never promises more than exists: every
    /// box can fill its disk. Overlays stay thin (a box starts in
    /// milliseconds whatever its size); a higher figure fits more boxes on a
    /// small disk, and then boxes filling their overlays are caught by the
    /// disk-pressure check, which freezes the ones writing most before the
    /// free space falls under `disk_margin_gb`. A start is also refused when
    /// the managed saves of the boxes holding memory (what each uses) and its
    /// own would not fit in the free space above the margin, so freezes
    /// always have room.
    pub disk_overcommit: f64,
    /// The most one size unit may write to its disk per second, in MiB (a
    /// size-4 box: 4×); 0: unthrottled. Bounds how fast a box can fill the
    /// host's disk between two checks of the disk-pressure loop.
    pub unit_write_mib_per_sec: u64,
    /// The most write operations one size unit may make per second; 0:
    /// unthrottled.
    pub unit_write_iops: u64,
    /// Longest time from starting a box to boxd's hello.
    pub boot_timeout: String,
    /// Give boxes a network card: QEMU's user networking, filtered on the
    /// host by nftables so that boxes reach the public internet and nothing
    /// of the host's (loopback, its addresses and networks, private and
    /// link-local ranges, metadata services, other boxes).
    pub network: bool,
    pub egress: EgressConfig,
    /// Encrypt each box's disk with LUKS under a key of its own, sealed by
    /// the master key and deleted when the box stops (its disk is then
    /// unreadable, even before the file is deleted). Off only to measure
    /// what it costs.
    pub encrypt_disks: bool,
    /// Refuse to start unless the volume under the boxes' files (their
    /// disks, and frozen boxes' memory) is encrypted: dm-crypt (LUKS),
    /// directly or under LVM, or an fscrypt directory.
    pub require_encryption: bool,
}

/// What boxes with a network card may reach, and who answers their names.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EgressConfig {
    /// The resolvers boxes' names are asked of (`1.1.1.1`, `1.1.1.1:53`);
    /// empty: this host's, from /etc/resolv.conf. Name public resolvers when
    /// the host's also answer private zones.
    pub resolvers: Vec<String>,
    /// IPv4 ranges boxes never reach, on top of the built-in list.
    pub deny: Vec<String>,
    /// Ranges boxes may reach although the built-in list covers them (an
    /// internal package mirror, say).
    pub allow: Vec<String>,
    /// The allow-list mode: when set, boxes reach these ranges (and `allow`)
    /// and nothing else.
    pub only: Vec<String>,
    /// An IPv4 address of this host that boxes' traffic leaves from (source
    /// NAT of the boxes' QEMU uid), so that what trusts the host's own
    /// address (an IP allowlist, a cloud agent) does not trust every box;
    /// unset: boxes' connections leave with the address the host's route
    /// picks.
    pub snat: Option<String>,
}

impl Default for BoxesConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            accel: AccelChoice::Auto,
            images_dir: None,
            image: "debian".to_owned(),
            unit_vcpus: 2,
            unit_memory_mib: 8192,
            unit_disk_gb: 40,
            idle_freeze: "10m".to_owned(),
            default_keep: "24h".to_owned(),
            max_keep: "7d".to_owned(),
            max_frozen: "10d".to_owned(),
            pool_size: 1,
            pool_unit_sizes: vec![1],
            cpu_overcommit: 16.0,
            memory_overcommit: 8.0,
            memory_margin_mib: 2048,
            pressure_available_mib: 1024,
            disk_margin_gb: 5,
            disk_overcommit: 1.0,
            unit_write_mib_per_sec: 100,
            unit_write_iops: 2000,
            boot_timeout: "120s".to_owned(),
            network: true,
            egress: EgressConfig::default(),
            encrypt_disks: true,
            require_encryption: false,
        }
    }
}

impl BoxesConfig {
    /// The settings the actors use, durations parsed.
    /// `shared_dir` holds `boxes/` and, by default, `images/`.
    pub fn settings(&self, shared_dir: &Path) -> Result<BoxSettings, ConfigError> {
        let duration = |key: &str, text: &str| {
            psbx_actors::duration::parse(text)
                .map_err(|e| ConfigError::Invalid(format!("boxes.{key}: {e}")))
        };
        let settings = BoxSettings {
            boxes_dir: shared_dir.join("boxes"),
            images_dir: self
                .images_dir
                .clone()
                .unwrap_or_else(|| shared_dir.join("images")),
            image: self.image.clone(),
            unit: Unit {
                vcpus: self.unit_vcpus,
                memory_mib: self.unit_memory_mib,
                disk_gb: self.unit_disk_gb,
            },
            idle_freeze: duration("idle_freeze", &self.idle_freeze)?,
            default_keep: duration("default_keep", &self.default_keep)?,
            // The spec keeps a box at most 7 days after its last use.
            max_keep: bounded("boxes.max_keep", &self.max_keep, 7 * 86_400, "7d")?,
            // The spec keeps frozen memory at most 10 days, as a safety net.
            max_frozen: bounded("boxes.max_frozen", &self.max_frozen, 10 * 86_400, "10d")?,
            pool_size: self.pool_size,
            pool_unit_sizes: self.pool_unit_sizes.clone(),
            cpu_overcommit: self.cpu_overcommit,
            memory_overcommit: self.memory_overcommit,
            memory_margin_mib: self.memory_margin_mib,
            pressure_available_mib: self.pressure_available_mib,
            disk_margin_gb: self.disk_margin_gb,
            disk_overcommit: self.disk_overcommit,
            unit_write_mib_per_sec: self.unit_write_mib_per_sec,
            unit_write_iops: self.unit_write_iops,
            boot_timeout: duration("boot_timeout", &self.boot_timeout)?,
            encrypt_disks: self.encrypt_disks,
            network: self.network,
            egress: EgressPolicy::parse(
                "boxes.egress",
                &self.egress.deny,
                &self.egress.allow,
                &self.egress.only,
            )
            .and_then(|p| p.with_snat("boxes.egress.snat", self.egress.snat.as_deref()))
            .map_err(ConfigError::Invalid)?,
            resolvers: psbx_actors::boxnet::resolver::configured(
                "boxes.egress.resolvers",
                &self.egress.resolvers,
            )
            .map_err(ConfigError::Invalid)?,
        };
        if settings.default_keep > settings.max_keep {
            return Err(ConfigError::Invalid(
                "boxes.default_keep is longer than boxes.max_keep".into(),
            ));
        }
        if let Some(bad) = self.pool_unit_sizes.iter().find(|s| !SIZES.contains(s)) {
            return Err(ConfigError::Invalid(format!(
                "boxes.pool_unit_sizes: {bad} is not a box size (1, 2, 4 or 8)"
            )));
        }
        if !(self.cpu_overcommit > 0.0
            && self.memory_overcommit > 0.0
            && self.disk_overcommit > 0.0)
        {
            return Err(ConfigError::Invalid(
                "boxes.cpu_overcommit, boxes.memory_overcommit and boxes.disk_overcommit must be above 0"
                    .into(),
            ));
        }
        if self.unit_vcpus == 0 || self.unit_memory_mib < 128 || self.unit_disk_gb == 0 {
            return Err(ConfigError::Invalid(
                "a box unit needs at least 1 vCPU, 128 MiB and 1 GB".into(),
            ));
        }
        Ok(settings)
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// HTTPS: a certificate and key in PEM files, or a self-signed pair psbx makes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Generate (once, kept under `data_dir/tls/`) a self-signed certificate;
    /// it covers `*.<box_domain>` too.
    pub self_signed: bool,
    /// A certificate (and its key) for `*.<box_domain>`, served to clients
    /// asking for a name under `box_domain` (SNI); unset: the main pair
    /// serves those names too.
    pub box_cert: Option<PathBuf>,
    pub box_key: Option<PathBuf>,
}

/// How psbx runs its own PostgreSQL cluster when no database URL is given.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddedPostgresConfig {
    /// Directory holding `initdb` and `pg_ctl`; searched on PATH and under
    /// /usr/lib/postgresql/*/bin when unset.
    pub bin_dir: Option<PathBuf>,
    /// PostgreSQL refuses to run as root: when psbx runs as root, the cluster runs
    /// as this user.
    pub user: String,
}

impl Default for EmbeddedPostgresConfig {
    fn default() -> Self {
        Self {
            bin_dir: None,
            user: "postgres".to_owned(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            box_domain: "box.localhost".to_owned(),
            trusted_proxies: Vec::new(),
            connector_image: "psbx-connector:latest".to_owned(),
            aws_box_role_template_url: None,
            data_dir: PathBuf::from(".psbx"),
            shared_dir: None,
            shots_dir: None,
            database_url: None,
            database_pool_size: 10,
            http_workers: None,
            libvirt_uri: "qemu:///system".to_owned(),
            master_key_file: None,
            log_level: "info".to_owned(),
            log_format: LogFormat::Text,
            tls: TlsConfig::default(),
            postgres: EmbeddedPostgresConfig::default(),
            boxes: BoxesConfig::default(),
            quotas: QuotasConfig::default(),
            oauth: OAuthConfig::default(),
            oidc: OidcConfig::default(),
            aws: AwsConfig::default(),
            metrics: MetricsConfig::default(),
            connectors: ConnectorsConfig::default(),
            takeover: TakeoverConfig::default(),
            reviews: ReviewsConfig::default(),
            box_urls: BoxUrlsConfig::default(),
        }
    }
}

/// The configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("the configuration file {0} does not exist")]
    MissingFile(PathBuf),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Values given on the command line; they override every other source.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub data_dir: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub tls_self_signed: bool,
}

impl Config {
    /// Reads the layered configuration. `file` is the `--config` path: it must
    /// exist; without it `psbx.toml` in the working directory is read if present.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        match file {
            Some(path) if !path.is_file() => {
                return Err(ConfigError::MissingFile(path.to_owned()));
            }
            Some(path) => figment = figment.merge(Toml::file_exact(path)),
            None if Path::new(DEFAULT_FILE).is_file() => {
                figment = figment.merge(Toml::file_exact(DEFAULT_FILE));
            }
            None => {}
        }
        let known = top_level_keys();
        figment = figment.merge(Env::raw().only(&["DATABASE_URL"])).merge(
            Env::prefixed("PSBX_").split("__").filter(move |key| {
                let first = key.as_str().split("__").next().unwrap_or_default();
                let first = first.split('.').next().unwrap_or_default();
                known.iter().any(|k| k.eq_ignore_ascii_case(first))
            }),
        );
        let mut config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Invalid(explained(e)))?;
        if let Some(dir) = &overrides.data_dir {
            config.data_dir = dir.clone();
        }
        if let Some(listen) = overrides.listen {
            config.listen = listen;
        }
        if overrides.tls_self_signed {
            config.tls.self_signed = true;
        }
        // Child processes (PostgreSQL) and libvirt run elsewhere: paths are absolute.
        config.data_dir = std::path::absolute(&config.data_dir).map_err(|e| {
            ConfigError::Invalid(format!("data_dir {}: {e}", config.data_dir.display()))
        })?;
        config.shared_dir = Some(match &config.shared_dir {
            Some(dir) => std::path::absolute(dir)
                .map_err(|e| ConfigError::Invalid(format!("shared_dir {}: {e}", dir.display())))?,
            None => crate::shared_dir::default_for(
                &config.data_dir,
                config.boxes.enabled || config.database_url.is_none(),
            ),
        });
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.aws.check()?;
        if let Some(url) = &self.public_url {
            let parsed = url::Url::parse(url)
                .map_err(|e| ConfigError::Invalid(format!("public_url {url:?}: {e}")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(ConfigError::Invalid(format!(
                    "public_url {url:?} must start with http:// or https://"
                )));
            }
        }
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return Err(ConfigError::Invalid(
                "tls.cert and tls.key go together: set both or neither".to_owned(),
            ));
        }
        if self.tls.self_signed && self.tls.cert.is_some() {
            return Err(ConfigError::Invalid(
                "tls.self_signed and tls.cert/tls.key exclude each other: choose one".to_owned(),
            ));
        }
        if self.tls.box_cert.is_some() != self.tls.box_key.is_some() {
            return Err(ConfigError::Invalid(
                "tls.box_cert and tls.box_key go together: set both or neither".to_owned(),
            ));
        }
        if self.tls.box_cert.is_some() && !self.tls_enabled() {
            return Err(ConfigError::Invalid(
                "tls.box_cert is for a server that serves HTTPS: set tls.cert/tls.key or \
                 tls.self_signed too"
                    .to_owned(),
            ));
        }
        self.boxes.settings(self.shared_dir())?;
        self.takeover.link_ttl()?;
        self.box_urls.limits()?;
        self.reviews.retention()?;
        crate::client_addr::TrustedProxies::parse(&self.trusted_proxies)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if self.database_pool_size == 0 {
            return Err(ConfigError::Invalid(
                "database_pool_size must be at least 1".to_owned(),
            ));
        }
        if self.box_domain.is_empty() || self.box_domain.contains(['/', ':', ' ']) {
            return Err(ConfigError::Invalid(format!(
                "box_domain {:?} must be a plain DNS name such as box.example.com",
                self.box_domain
            )));
        }
        Ok(())
    }

    pub fn master_key_path(&self) -> PathBuf {
        self.master_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("master.key"))
    }

    pub fn tls_enabled(&self) -> bool {
        self.tls.self_signed || self.tls.cert.is_some()
    }

    /// The URL clients reach this server at, for a server bound to `bound`:
    /// `public_url` when set, else derived from the bound address (an unspecified
    /// address such as 0.0.0.0 becomes `localhost`).
    pub fn public_url_for(&self, bound: SocketAddr) -> String {
        if let Some(url) = &self.public_url {
            return url.trim_end_matches('/').to_owned();
        }
        let scheme = if self.tls_enabled() { "https" } else { "http" };
        let host = match bound.ip() {
            ip if ip.is_unspecified() => "localhost".to_owned(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        format!("{scheme}://{host}:{}", bound.port())
    }

    /// The configuration as TOML with every secret replaced by `****`.
    pub fn redacted_toml(&self) -> Result<String, ConfigError> {
        let mut shown = self.clone();
        shown.database_url = shown.database_url.as_deref().map(redact_url);
        if shown.metrics.token.is_some() {
            shown.metrics.token = Some("****".to_owned());
        }
        toml::to_string_pretty(&shown).map_err(|e| ConfigError::Invalid(e.to_string()))
    }
}

/// figment's message, and the rule it broke when a list setting came from an
/// environment variable as a bare value (`PSBX_BOXES__EGRESS__ONLY=10.0.0.0/8`
/// instead of a TOML array).
fn explained(error: figment::Error) -> String {
    let text = error.to_string();
    let bare_list_in_env = error.into_iter().any(|e| {
        matches!(&e.kind, figment::error::Kind::InvalidType(_, expected) if expected.contains("sequence"))
            && e.metadata
                .as_ref()
                .is_some_and(|m| m.name.contains("environment"))
    });
    if bare_list_in_env {
        format!(
            "{text}; a list setting in an environment variable is a TOML array, quotes \
             included: PSBX_BOXES__EGRESS__ONLY='[\"198.51.100.0/24\"]'"
        )
    } else {
        text
    }
}

/// Top-level keys of [`Config`]: the only `PSBX_*` variables read as settings, so
/// variables of other tools (`PSBX_TEST_*`, `PSBX_CONNECTOR_TOKEN`) are left alone.
fn top_level_keys() -> Vec<String> {
    match toml::Value::try_from(Config::default()) {
        Ok(toml::Value::Table(table)) => table.keys().cloned().collect(),
        _ => Vec::new(),
    }
    .into_iter()
    .chain(["public_url", "database_url", "master_key_file"].map(str::to_owned))
    .collect()
}

/// Hides the password (and any query string, which may carry one) of a URL.
pub fn redact_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut url) => {
            if url.password().is_some() {
                let _ = url.set_password(Some("****"));
            }
            if url.query().is_some() {
                url.set_query(Some("****"));
            }
            url.to_string()
        }
        Err(_) => "****".to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment::Jail's closures return figment::Error
mod tests {
    use super::*;

    #[test]
    fn by_default_no_box_is_promised_more_disk_than_is_free() {
        use psbx_actors::machine::ledger::{DiskRoom, check_disk};
        let settings = BoxesConfig::default()
            .settings(Path::new("/nonexistent/shared"))
            .unwrap();
        const GIB: u64 = 1 << 30;
        let size_1 = settings.resources(1);
        let virtual_size = size_1.disk_gb * GIB + size_1.memory_mib * (1 << 20);
        let margin = settings.disk_margin_gb * GIB;
        let empty = |free| DiskRoom {
            free,
            unwritten: 0,
            saves_mib: 0,
        };
        // Its full virtual size, above the margin, is free: admitted.
        check_disk(&settings, &empty(margin + virtual_size), size_1).unwrap();
        // One GiB short: refused, although the thin overlay writes little at first.
        let err = check_disk(&settings, &empty(margin + virtual_size - GIB), size_1).unwrap_err();
        assert!(err.to_string().contains("boxes.disk_overcommit"), "{err}");
        // What boxes already there may still write counts against it.
        let taken = DiskRoom {
            unwritten: GIB,
            ..empty(margin + virtual_size)
        };
        assert!(check_disk(&settings, &taken, size_1).is_err());
    }

    #[test]
    fn defaults_work_on_one_machine() {
        let c = Config::default();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.public_url_for(c.listen), "http://127.0.0.1:8080");
        assert_eq!(c.libvirt_uri, "qemu:///system");
        assert_eq!(c.data_dir, PathBuf::from(".psbx"));
        assert!(c.database_url.is_none());
    }

    #[test]
    fn public_url_follows_bind_and_tls() {
        let mut c = Config::default();
        c.tls.self_signed = true;
        assert_eq!(
            c.public_url_for("0.0.0.0:443".parse().unwrap()),
            "https://localhost:443"
        );
        c.public_url = Some("https://psbx.example.com/".into());
        assert_eq!(
            c.public_url_for("0.0.0.0:443".parse().unwrap()),
            "https://psbx.example.com"
        );
    }

    #[test]
    fn layers_apply_in_order() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "custom.toml",
                "listen = \"127.0.0.1:9000\"\nbox_domain = \"b.example\"\n[tls]\nself_signed = true\n",
            )?;
            jail.set_env("PSBX_BOX_DOMAIN", "env.example");
            jail.set_env("PSBX_POSTGRES__USER", "pguser");
            jail.set_env("PSBX_TEST_DATABASE_URL", "ignored");
            jail.set_env("DATABASE_URL", "postgres://u:hunter2@db/psbx");
            let overrides = Overrides {
                data_dir: Some("/srv/psbx".into()),
                ..Overrides::default()
            };
            let c = Config::load(Some(Path::new("custom.toml")), &overrides).unwrap();
            assert_eq!(c.listen.port(), 9000);
            assert_eq!(c.box_domain, "env.example");
            assert_eq!(c.postgres.user, "pguser");
            assert_eq!(c.data_dir, PathBuf::from("/srv/psbx"));
            let relative = Config::load(None, &Overrides::default()).unwrap();
            assert!(relative.data_dir.is_absolute());
            assert!(relative.data_dir.ends_with(".psbx"));
            assert!(c.tls.self_signed);
            let shown = c.redacted_toml().unwrap();
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("postgres://u:****@db/psbx"), "{shown}");
            Ok(())
        });
    }

    #[test]
    fn a_list_setting_in_the_environment_is_a_toml_array() {
        figment::Jail::expect_with(|jail| {
            jail.set_env(
                "PSBX_BOXES__EGRESS__ONLY",
                r#"["198.51.100.0/24", "203.0.113.7"]"#,
            );
            jail.set_env("PSBX_BOXES__POOL_UNIT_SIZES", "[1, 2]");
            let c = Config::load(None, &Overrides::default()).unwrap();
            assert_eq!(c.boxes.egress.only, ["198.51.100.0/24", "203.0.113.7"]);
            assert_eq!(c.boxes.pool_unit_sizes, [1, 2]);
            // A bare value is not a list: refused, naming the setting.
            jail.set_env("PSBX_BOXES__EGRESS__ONLY", "198.51.100.0/24");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("BOXES.EGRESS.ONLY"), "{err}");
            assert!(err.contains("is a TOML array"), "{err}");
            // Another kind of mistake gets no such advice.
            jail.set_env("PSBX_BOXES__EGRESS__ONLY", "[]");
            jail.set_env("PSBX_BOXES__UNIT_VCPUS", "two");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(!err.contains("TOML array"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn the_accelerator_is_named_in_lowercase() {
        figment::Jail::expect_with(|jail| {
            for (name, choice) in [
                ("auto", AccelChoice::Auto),
                ("kvm", AccelChoice::Kvm),
                ("tcg", AccelChoice::Tcg),
            ] {
                jail.create_file("psbx.toml", &format!("[boxes]\naccel = \"{name}\"\n"))?;
                let c = Config::load(None, &Overrides::default()).unwrap();
                assert_eq!(c.boxes.accel, choice);
                let shown = c.redacted_toml().unwrap();
                assert!(shown.contains(&format!("accel = \"{name}\"")), "{shown}");
            }
            jail.create_file("psbx.toml", "[boxes]\naccel = \"KVM\"\n")?;
            let err = Config::load(None, &Overrides::default()).unwrap_err();
            assert!(err.to_string().contains("KVM"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn quotas_are_read_from_their_section() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "q.toml",
                "[quotas]\nmax_boxes = 3\nmax_stored_bytes = 1024\n",
            )?;
            let config = Config::load(Some(Path::new("q.toml")), &Overrides::default()).unwrap();
            let quotas = config.quotas.quotas();
            assert_eq!((quotas.max_boxes, quotas.max_stored_bytes), (3, 1024));
            assert_eq!(
                quotas.max_units,
                psbx_actors::quota::Quotas::default().max_units
            );
            Ok(())
        });
    }

    #[test]
    fn trusted_proxies_are_read_and_checked() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "psbx.toml",
                "trusted_proxies = [\"10.0.0.5\", \"10.1.0.0/16\"]\n",
            )?;
            let c = Config::load(None, &Overrides::default()).unwrap();
            assert_eq!(c.trusted_proxies, ["10.0.0.5", "10.1.0.0/16"]);
            jail.create_file("psbx.toml", "trusted_proxies = [\"10.1.2.3/16\"]\n")?;
            let err = Config::load(None, &Overrides::default()).unwrap_err();
            assert!(
                err.to_string().contains("did you mean 10.1.0.0/16?"),
                "{err}"
            );
            jail.create_file("psbx.toml", "trusted_proxies = [\"lb.internal\"]\n")?;
            let err = Config::load(None, &Overrides::default()).unwrap_err();
            assert!(err.to_string().contains("trusted_proxies"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn bad_input_is_explained() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("psbx.toml", "lisen = \"127.0.0.1:1\"\n")?;
            let err = Config::load(None, &Overrides::default()).unwrap_err();
            assert!(err.to_string().contains("lisen"), "{err}");
            let err =
                Config::load(Some(Path::new("nope.toml")), &Overrides::default()).unwrap_err();
            assert!(matches!(err, ConfigError::MissingFile(_)));
            jail.create_file("psbx.toml", "[tls]\ncert = \"/c.pem\"\n")?;
            let err = Config::load(None, &Overrides::default()).unwrap_err();
            assert!(err.to_string().contains("tls.key"), "{err}");
            jail.create_file("psbx.toml", "[takeover]\nlink_ttl = \"0s\"\n")?;
            let err = Config::load(None, &Overrides::default()).unwrap_err();
            assert!(err.to_string().contains("takeover.link_ttl"), "{err}");
            jail.create_file("psbx.toml", "[boxes.egress]\nallow = [\"fd00::/8\"]\n")?;
            let err = Config::load(None, &Overrides::default()).unwrap_err();
            assert!(err.to_string().contains("boxes.egress.allow"), "{err}");
            assert!(err.to_string().contains("IPv6"), "{err}");
            jail.create_file("psbx.toml", "[boxes]\nmax_keep = \"8d\"\n")?;
            let err = Config::load(None, &Overrides::default()).unwrap_err();
            assert!(
                err.to_string().contains("boxes.max_keep") && err.to_string().contains("7d"),
                "{err}"
            );
            jail.create_file("psbx.toml", "[boxes]\nmax_frozen = \"11d\"\n")?;
            let err = Config::load(None, &Overrides::default()).unwrap_err();
            assert!(
                err.to_string().contains("boxes.max_frozen") && err.to_string().contains("10d"),
                "{err}"
            );
            Ok(())
        });
    }
}
