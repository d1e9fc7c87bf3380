//! The server's configuration: defaults that work on one machine, then the file
//! (`psbx.toml`, or `--config`), then `PSBX_*` environment variables (nested keys
//! with `__`: `PSBX_TLS__CERT`; a list is a TOML array:
//! `PSBX_BOXES__EGRESS__ONLY='["198.51.100.0/24"]'`), `DATABASE_URL`, and last
//! the command-line flags.
//!
//! figment does the layering; this module holds the shape, the defaults, the
//! derived values (public URL) and the redacted view `psbx config show` prints.

mod boxes;
mod cluster;
mod sections;

pub use boxes::{BoxesConfig, EgressConfig};
pub use cluster::ClusterConfig;
pub use sections::{
    AwsConfig, BoxUrlsConfig, ConnectorsConfig, MetricsConfig, OAuthConfig, OidcConfig,
    QuotasConfig, ReviewsConfig, S3Config, StorageConfig, TakeoverConfig,
};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
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
    /// directory storage); default `<data_dir>/shots`. Not with `storage.s3`.
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
    pub cluster: ClusterConfig,
    pub storage: StorageConfig,
}

impl Config {
    /// Where the cluster, images and box disks live (see `shared_dir`).
    pub fn shared_dir(&self) -> &Path {
        self.shared_dir.as_deref().unwrap_or(&self.data_dir)
    }

    /// What the shared directory's checks need (`shared_dir::prepare`).
    pub fn layout(&self) -> crate::shared_dir::Layout<'_> {
        crate::shared_dir::Layout {
            data_dir: &self.data_dir,
            shared_dir: self.shared_dir(),
            boxes: self.boxes.enabled,
            embedded_pg: self.database_url.is_none(),
            disk_margin_gb: self.boxes.disk_margin_gb,
        }
    }

    /// Where the directory storage keeps its files.
    pub fn shots_dir(&self) -> PathBuf {
        self.shots_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("shots"))
    }

    /// Where files on their way into object storage wait, on this machine
    /// (with `storage.s3`; the directory storage's spool is under its root).
    pub fn spool_dir(&self) -> PathBuf {
        self.data_dir.join("spool")
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
            cluster: ClusterConfig::default(),
            storage: StorageConfig::default(),
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
        if self.storage.s3_settings()?.is_some() && self.shots_dir.is_some() {
            return Err(ConfigError::Invalid(
                "shots_dir and storage.s3 exclude each other: with storage.s3 files go to the \
                 bucket; remove shots_dir"
                    .to_owned(),
            ));
        }
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
    use psbx_actors::hypervisor::AccelChoice;

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
    fn storage_s3_is_read_and_checked() {
        figment::Jail::expect_with(|jail| {
            let c = Config::load(None, &Overrides::default()).unwrap();
            assert_eq!(c.storage.s3_settings().unwrap(), None);
            jail.create_file(
                "psbx.toml",
                "[storage.s3]\nbucket = \"psbx-files\"\nregion = \"eu-west-1\"\n\
                 endpoint_url = \"http://10.1.2.3:9000\"\nprefix = \"/psbx/prod/\"\n",
            )?;
            let c = Config::load(None, &Overrides::default()).unwrap();
            let s3 = c.storage.s3_settings().unwrap().unwrap();
            assert_eq!(
                (s3.bucket.as_str(), s3.region.as_str(), s3.prefix.as_deref()),
                ("psbx-files", "eu-west-1", Some("psbx/prod"))
            );
            assert_eq!(s3.endpoint_url.as_deref(), Some("http://10.1.2.3:9000"));
            assert!(c.redacted_toml().unwrap().contains("[storage.s3]"));
            for (toml, said) in [
                (
                    "bucket = \"Psbx_Files\"\nregion = \"us-east-1\"",
                    "storage.s3.bucket",
                ),
                (
                    "bucket = \"psbx\"\nregion = \"EU west\"",
                    "storage.s3.region",
                ),
                ("bucket = \"psbx\"", "region"),
                (
                    "bucket = \"psbx\"\nregion = \"us-east-1\"\nendpoint_url = \"minio:9000\"",
                    "storage.s3.endpoint_url",
                ),
                (
                    "bucket = \"psbx\"\nregion = \"us-east-1\"\nprefix = \"a/../b\"",
                    "storage.s3.prefix",
                ),
                // Credentials are never read from the file.
                (
                    "bucket = \"psbx\"\nregion = \"us-east-1\"\naccess_key_id = \"AKIA\"",
                    "access_key_id",
                ),
            ] {
                jail.create_file("psbx.toml", &format!("[storage.s3]\n{toml}\n"))?;
                let err = Config::load(None, &Overrides::default()).unwrap_err();
                assert!(err.to_string().contains(said), "{toml}: {err}");
            }
            jail.create_file(
                "psbx.toml",
                "shots_dir = \"/srv/shots\"\n[storage.s3]\nbucket = \"psbx\"\nregion = \"us-east-1\"\n",
            )?;
            let err = Config::load(None, &Overrides::default()).unwrap_err();
            assert!(err.to_string().contains("exclude each other"), "{err}");
            // From the environment too; the endpoint and prefix are optional.
            jail.create_file("psbx.toml", "")?;
            jail.set_env("PSBX_STORAGE__S3__BUCKET", "other-bucket");
            jail.set_env("PSBX_STORAGE__S3__REGION", "us-east-1");
            let c = Config::load(None, &Overrides::default()).unwrap();
            let s3 = c.storage.s3_settings().unwrap().unwrap();
            assert_eq!((s3.bucket.as_str(), s3.prefix), ("other-bucket", None));
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
