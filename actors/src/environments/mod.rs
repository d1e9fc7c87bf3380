//! The environments of an account, as the API sees them: names validated and
//! unique per account, connections with their connector tokens (shown when
//! made or rotated, stored as a hash) and address lists, and services'
//! settings (parsed from dotenv, sealed under the master key; reads give names
//! only). Another account's environment is "not found", never "forbidden".

pub mod address;
pub mod claim;
pub mod service_settings;

use crate::blocking::blocking;
use crate::connectors::{ConnectionStatus, Hub};
use crate::ids::{AccountId, BoxId, ConnectionId, ConnectorToken, EnvironmentId};
use crate::secrets::vault::{Vault, VaultError};
use crate::spec::{ClaimedAws, ClaimedConnection};
use crate::store::{
    ConnectionRecord, EnvironmentChange, EnvironmentRecord, NewService, ServiceRecord, Store,
    StoreError,
};
use address::RawEndpoint;
use psbx_wire::Endpoint;
use psbx_wire::boxd::BoxAws;
use service_settings::Suggestion;
use std::sync::Arc;

/// Longest environment, connection or service name.
const MAX_NAME: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// No such environment (or connection, or service) in this account.
    #[error("{0}")]
    NotFound(String),
    /// The name is taken.
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A value could not be sealed under the master key.
    #[error(transparent)]
    Vault(#[from] VaultError),
    /// A service's stored settings do not open or read back.
    #[error("the settings of service {service} are unreadable")]
    Settings {
        service: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("the operating system's random generator failed")]
    Random(#[from] getrandom::Error),
    #[error("a service's settings could not be encoded")]
    Encode(#[from] serde_json::Error),
}

/// An environment with what hangs off it.
#[derive(Debug, Clone)]
pub struct Environment {
    pub record: EnvironmentRecord,
    pub connections: Vec<Connection>,
    pub services: Vec<ServiceRecord>,
}

/// A connection and how its connectors are.
#[derive(Debug, Clone)]
pub struct Connection {
    pub record: ConnectionRecord,
    pub status: ConnectionStatus,
}

impl From<ConnectionRecord> for Connection {
    fn from(record: ConnectionRecord) -> Self {
        Self {
            record,
            status: ConnectionStatus::default(),
        }
    }
}

/// Checks an environment, connection or service name: it appears in URLs,
/// file names (`/work/.sbx/env/<service>.env`) and shell lines.
pub fn check_name(what: &str, name: &str) -> Result<(), EnvError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(EnvError::Invalid(format!(
            "{what} name {name:?} is not valid: use 1 to {MAX_NAME} letters, digits, '-', '_' or '.', \
             starting with a letter or digit (for example \"dev\")"
        )))
    }
}

#[derive(Clone)]
pub struct Environments {
    store: Store,
    vault: Arc<Vault>,
    hub: Hub,
    /// The server's public URL, carried in the connector tokens it issues.
    issuer: String,
}

impl Environments {
    /// `hub` holds this replica's connector sessions: reads show their status,
    /// and rotations, deletions and address changes act on them at once.
    pub fn new(store: Store, vault: Arc<Vault>, hub: Hub, issuer: &str) -> Self {
        Self {
            store,
            vault,
            hub,
            issuer: issuer.to_owned(),
        }
    }

    /// This replica's connector sessions.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    fn connection(&self, record: ConnectionRecord) -> Connection {
        let mut c = Connection::from(record);
        c.status = self.hub.status(&c.record.id);
        c
    }

    /// Closes the box streams of `env` whose address no connection lists now.
    async fn streams_follow_addresses(&self, env_id: &EnvironmentId) -> Result<(), EnvError> {
        let (store, id) = (self.store.clone(), env_id.clone());
        let connections = blocking(move || store.connections(&id)).await?;
        let listed: Vec<Endpoint> = connections.into_iter().flat_map(|c| c.endpoints).collect();
        self.hub.unlisted(env_id, &listed);
        Ok(())
    }

    async fn record(&self, account: &AccountId, name: &str) -> Result<EnvironmentRecord, EnvError> {
        let (store, a, n) = (self.store.clone(), account.clone(), name.to_owned());
        blocking(move || store.environment(&a, &n))
            .await?
            .ok_or_else(|| not_found(name))
    }

    pub async fn create(&self, account: &AccountId, name: &str) -> Result<Environment, EnvError> {
        check_name("the environment", name)?;
        let id = EnvironmentId::generate()?;
        let (store, a, n) = (self.store.clone(), account.clone(), name.to_owned());
        let record = blocking(move || store.insert_environment(&a, &id, &n))
            .await?
            .ok_or_else(|| {
                EnvError::Conflict(format!(
                    "this account already has an environment {name:?}: pick another name, or use it"
                ))
            })?;
        Ok(Environment {
            record,
            connections: Vec::new(),
            services: Vec::new(),
        })
    }

    /// One environment with its connections and services.
    pub async fn get(&self, account: &AccountId, name: &str) -> Result<Environment, EnvError> {
        let record = self.record(account, name).await?;
        self.detail(record).await
    }

    /// An environment's connections with their status now (no services read).
    pub async fn connections(
        &self,
        account: &AccountId,
        name: &str,
    ) -> Result<Vec<Connection>, EnvError> {
        let record = self.record(account, name).await?;
        let store = self.store.clone();
        let rows = blocking(move || store.connections(&record.id)).await?;
        Ok(rows.into_iter().map(|c| self.connection(c)).collect())
    }

    /// Bytes a box sent, both kinds `box_egress` holds: through connections
    /// (what is stored and what this replica counted since its last flush),
    /// and to the internet from its own card (as last stored).
    pub async fn egress_bytes(&self, box_id: &BoxId) -> Result<(u64, u64), EnvError> {
        let (store, id) = (self.store.clone(), box_id.clone());
        let (connections, internet) = blocking(move || {
            Ok::<_, StoreError>((store.box_egress(&id)?, store.box_internet_egress(&id)?))
        })
        .await?;
        Ok((connections + self.hub.egress().pending(box_id), internet))
    }

    async fn detail(&self, record: EnvironmentRecord) -> Result<Environment, EnvError> {
        let (store, id) = (self.store.clone(), record.id.clone());
        let (connections, services) =
            blocking(move || Ok::<_, StoreError>((store.connections(&id)?, store.services(&id)?)))
                .await?;
        Ok(Environment {
            record,
            connections: connections
                .into_iter()
                .map(|c| self.connection(c))
                .collect(),
            services,
        })
    }

    pub async fn list(&self, account: &AccountId) -> Result<Vec<Environment>, EnvError> {
        let (store, a) = (self.store.clone(), account.clone());
        let records = blocking(move || store.list_environments(&a)).await?;
        let mut out = Vec::with_capacity(records.len());
        for record in records {
            out.push(self.detail(record).await?);
        }
        Ok(out)
    }

    pub async fn update(
        &self,
        account: &AccountId,
        name: &str,
        change: EnvironmentChange,
    ) -> Result<Environment, EnvError> {
        let (store, a, n) = (self.store.clone(), account.clone(), name.to_owned());
        let record = blocking(move || store.update_environment(&a, &n, &change))
            .await?
            .ok_or_else(|| not_found(name))?;
        self.detail(record).await
    }

    pub async fn delete(&self, account: &AccountId, name: &str) -> Result<(), EnvError> {
        let detail = self.get(account, name).await?;
        let (store, a, n) = (self.store.clone(), account.clone(), name.to_owned());
        if !blocking(move || store.delete_environment(&a, &n)).await? {
            return Err(not_found(name));
        }
        for c in &detail.connections {
            self.hub.kick(&c.record.id);
        }
        self.hub.unlisted(&detail.record.id, &[]);
        Ok(())
    }

    /// Adds a connection; its token is in the answer and nowhere else.
    pub async fn add_connection(
        &self,
        account: &AccountId,
        env: &str,
        name: &str,
    ) -> Result<(Connection, ConnectorToken), EnvError> {
        check_name("the connection", name)?;
        let record = self.record(account, env).await?;
        let id = ConnectionId::generate()?;
        crate::public_url::warn_if_insecure(&self.issuer, "issuing a connector token");
        let token = ConnectorToken::generate(&self.issuer)?;
        let (store, t, n) = (self.store.clone(), token.clone(), name.to_owned());
        let made = blocking(move || store.insert_connection(&record.id, &id, &n, t.expose()))
            .await?
            .ok_or_else(|| {
                EnvError::Conflict(format!(
                    "environment {env:?} already has a connection {name:?}: pick another name"
                ))
            })?;
        Ok((Connection::from(made), token))
    }

    /// Replaces a connection's whole address list.
    pub async fn set_endpoints(
        &self,
        account: &AccountId,
        env: &str,
        id: &str,
        endpoints: &[RawEndpoint],
    ) -> Result<Connection, EnvError> {
        let checked = address::check_list(endpoints).map_err(EnvError::Invalid)?;
        let record = self.record(account, env).await?;
        let i = connection_id(env, id)?;
        let (store, env_id) = (self.store.clone(), record.id.clone());
        let updated = blocking(move || store.set_connection_endpoints(&env_id, &i, &checked))
            .await?
            .ok_or_else(|| connection_not_found(env, id))?;
        self.streams_follow_addresses(&record.id).await?;
        Ok(self.connection(updated))
    }

    /// A new token for a connection: the old one stops working at once.
    pub async fn rotate_token(
        &self,
        account: &AccountId,
        env: &str,
        id: &str,
    ) -> Result<(Connection, ConnectorToken), EnvError> {
        let record = self.record(account, env).await?;
        crate::public_url::warn_if_insecure(&self.issuer, "issuing a connector token");
        let token = ConnectorToken::generate(&self.issuer)?;
        let i = connection_id(env, id)?;
        let (store, t) = (self.store.clone(), token.clone());
        let updated = blocking(move || store.rotate_connection_token(&record.id, &i, t.expose()))
            .await?
            .ok_or_else(|| connection_not_found(env, id))?;
        self.hub.kick(&updated.id);
        Ok((self.connection(updated), token))
    }

    pub async fn delete_connection(
        &self,
        account: &AccountId,
        env: &str,
        id: &str,
    ) -> Result<(), EnvError> {
        let record = self.record(account, env).await?;
        let i = connection_id(env, id)?;
        let (store, env_id, gone) = (self.store.clone(), record.id.clone(), i.clone());
        if !blocking(move || store.delete_connection(&env_id, &gone)).await? {
            return Err(connection_not_found(env, id));
        }
        self.hub.kick(&i);
        self.streams_follow_addresses(&record.id).await
    }

    /// The connection a connector token belongs to, if any (the connector
    /// endpoint authenticates with this).
    pub async fn connection_for_token(
        &self,
        token: &str,
    ) -> Result<Option<(Connection, EnvironmentRecord)>, EnvError> {
        let (store, t) = (self.store.clone(), token.to_owned());
        Ok(blocking(move || store.connection_by_token(&t))
            .await?
            .map(|(c, e)| (Connection::from(c), e)))
    }

    /// Stores a service's settings from an uploaded `.env` (replacing any
    /// before); true when the service is new. Values are sealed; the record
    /// keeps names only.
    pub async fn put_service(
        &self,
        account: &AccountId,
        env: &str,
        name: &str,
        dotenv: &str,
    ) -> Result<(bool, ServiceRecord), EnvError> {
        check_name("the service", name)?;
        if dotenv.len() > MAX_DOTENV {
            return Err(EnvError::Invalid(format!(
                "the settings are {} bytes: at most {MAX_DOTENV} are accepted",
                dotenv.len()
            )));
        }
        let vars = service_settings::dotenv::parse(dotenv)
            .map_err(|e| EnvError::Invalid(format!("dotenv {e}; nothing was stored")))?;
        self.store_service(account, env, name, vars, None).await
    }

    /// Stores settings read from elsewhere (an ECS task definition) under
    /// `name`, with where they came from; as an upload would, it replaces
    /// what the name held. True when the name is new.
    pub async fn put_imported_service(
        &self,
        account: &AccountId,
        env: &str,
        name: &str,
        vars: Vec<(String, String)>,
        source: &service_settings::SourceRef,
    ) -> Result<(bool, ServiceRecord), EnvError> {
        check_name("the service", name)?;
        self.store_service(account, env, name, vars, Some(source))
            .await
    }

    async fn store_service(
        &self,
        account: &AccountId,
        env: &str,
        name: &str,
        vars: Vec<(String, String)>,
        source: Option<&service_settings::SourceRef>,
    ) -> Result<(bool, ServiceRecord), EnvError> {
        if vars.len() > MAX_KEYS {
            return Err(EnvError::Invalid(format!(
                "{} variables given: a service has at most {MAX_KEYS}",
                vars.len()
            )));
        }
        let record = self.record(account, env).await?;
        // psbx's own credentials are not settings a box needs.
        let text: String = vars.iter().map(|(_, v)| format!("{v}\n")).collect();
        let store = self.store.clone();
        blocking(move || store.refuse_credentials(&text)).await?;
        let names: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
        let names = serde_json::to_value(names)?;
        let plain = serde_json::to_vec(&vars)?;
        let sealed = self.vault.seal(&service_owner(&record.id, name), &plain)?;
        let (kind, source_ref) = match source {
            Some(source) => (source.kind.clone(), Some(source.to_value())),
            None => ("dotenv".to_owned(), None),
        };
        let (store, n) = (self.store.clone(), name.to_owned());
        Ok(blocking(move || {
            store.put_service(
                &record.id,
                &NewService {
                    name: &n,
                    names: &names,
                    nonce: &sealed.nonce,
                    ciphertext: &sealed.ciphertext,
                    source: &kind,
                    source_ref: source_ref.as_ref(),
                },
            )
        })
        .await?)
    }

    /// One service's settings as listed (names only).
    pub async fn service(
        &self,
        account: &AccountId,
        env: &str,
        name: &str,
    ) -> Result<ServiceRecord, EnvError> {
        let record = self.record(account, env).await?;
        let (store, n) = (self.store.clone(), name.to_owned());
        blocking(move || store.service(&record.id, &n))
            .await?
            .ok_or_else(|| no_service(env, name))
    }

    pub async fn delete_service(
        &self,
        account: &AccountId,
        env: &str,
        name: &str,
    ) -> Result<(), EnvError> {
        let record = self.record(account, env).await?;
        let (store, n) = (self.store.clone(), name.to_owned());
        if blocking(move || store.delete_service(&record.id, &n)).await? {
            Ok(())
        } else {
            Err(no_service(env, name))
        }
    }

    /// Every service's settings, opened (for a box being claimed and for the
    /// suggestions; never for an answer).
    async fn settings_of(
        &self,
        env_id: &EnvironmentId,
    ) -> Result<Vec<(String, Vec<(String, String)>)>, EnvError> {
        let (store, id) = (self.store.clone(), env_id.clone());
        let sealed = blocking(move || store.sealed_services(&id)).await?;
        sealed
            .into_iter()
            .map(|s| {
                let plain = self
                    .vault
                    .open(&service_owner(env_id, &s.name), &s.nonce, &s.ciphertext)
                    .map_err(|e| EnvError::Settings {
                        service: s.name.clone(),
                        source: e.into(),
                    })?;
                let vars = serde_json::from_slice(&plain).map_err(|e| EnvError::Settings {
                    service: s.name.clone(),
                    source: e.into(),
                })?;
                Ok((s.name, vars))
            })
            .collect()
    }

    /// The addresses found in the services' settings that look like the
    /// environment's network, each with the connection already listing it.
    pub async fn suggested_endpoints(
        &self,
        account: &AccountId,
        env: &str,
    ) -> Result<Vec<(Suggestion, Option<String>)>, EnvError> {
        let detail = self.get(account, env).await?;
        let services = self.settings_of(&detail.record.id).await?;
        Ok(service_settings::suggest::suggest(&services)
            .into_iter()
            .map(|s| {
                let listed = detail
                    .connections
                    .iter()
                    .find(|c| {
                        c.record
                            .endpoints
                            .iter()
                            .any(|e| e.host.as_str() == s.host && e.port == s.port)
                    })
                    .map(|c| c.record.name.clone());
                (s, listed)
            })
            .collect())
    }

    /// What a box started in `env` takes at claim time: the addresses of every
    /// connection (at most [`address::MAX_PER_BOX`]), and each service's
    /// settings files.
    pub async fn for_box(
        &self,
        account: &AccountId,
        env: &str,
    ) -> Result<BoxEnvironment, EnvError> {
        let detail = self.get(account, env).await.map_err(|e| match e {
            EnvError::NotFound(_) => EnvError::NotFound(format!(
                "there is no environment {env:?} in this account: sandbox_environments (or GET \
                 /v1/environments) lists them"
            )),
            other => other,
        })?;
        // Connections come by name: an address listed twice goes through the
        // one whose name sorts first.
        let mut seen: Vec<&Endpoint> = Vec::new();
        let mut connections = Vec::new();
        for c in &detail.connections {
            let mut addresses = Vec::new();
            for e in &c.record.endpoints {
                if !seen.contains(&e) {
                    seen.push(e);
                    addresses.push(e.clone());
                }
            }
            connections.push(ClaimedConnection {
                name: c.record.name.clone(),
                addresses,
            });
        }
        if seen.len() > address::MAX_PER_BOX {
            return Err(EnvError::Conflict(format!(
                "environment {env:?} lists {} addresses across its connections: a box takes at most {}; \
                 remove addresses the box does not need from its connections",
                seen.len(),
                address::MAX_PER_BOX
            )));
        }
        let services = self
            .settings_of(&detail.record.id)
            .await?
            .into_iter()
            .map(|(name, vars)| BoxService::new(name, vars))
            .collect();
        let aws = detail.record.aws_role_arn.map(|role_arn| ClaimedAws {
            role_arn,
            region: detail.record.aws_region,
            environment_id: Some(detail.record.id.to_string()),
        });
        Ok(BoxEnvironment {
            name: detail.record.name,
            external_base_url: detail.record.external_base_url,
            connections,
            services,
            aws,
        })
    }
}

/// Largest `.env` upload, and most variables in one service.
fn no_service(env: &str, name: &str) -> EnvError {
    EnvError::NotFound(format!(
        "environment {env:?} has no service {name:?}: GET /v1/environments/{env} lists its services"
    ))
}

const MAX_DOTENV: usize = 512 * 1024;
const MAX_KEYS: usize = 2000;

/// The associated data binding a service's sealed settings to its row.
fn service_owner(env_id: &EnvironmentId, service: &str) -> String {
    format!("{env_id}\0service\0{service}")
}

/// Where a box's settings files live.
pub const SETTINGS_DIR: &str = "/work/.sbx/env";

/// What a box takes from its environment when it is claimed.
#[derive(Debug, Clone)]
pub struct BoxEnvironment {
    pub name: String,
    pub external_base_url: Option<String>,
    pub connections: Vec<ClaimedConnection>,
    pub services: Vec<BoxService>,
    pub aws: Option<ClaimedAws>,
}

/// One service's settings as a box receives them.
#[derive(Debug, Clone)]
pub struct BoxService {
    pub name: String,
    pub vars: Vec<(String, String)>,
}

impl BoxService {
    fn new(name: String, vars: Vec<(String, String)>) -> Self {
        Self { name, vars }
    }

    /// Its settings with the AWS role's variables: the credentials' always,
    /// the region's where the service sets none of its own.
    fn with_aws(&self, aws: &BoxAws) -> Self {
        let mut vars = self.vars.clone();
        aws.add_to(&mut vars);
        Self::new(self.name.clone(), vars)
    }

    /// `(path, contents)` of its `.env` and `.sh` files.
    pub fn files(&self) -> [(String, String); 2] {
        [
            (
                format!("{SETTINGS_DIR}/{}.env", self.name),
                service_settings::files::env_file(&self.name, &self.vars),
            ),
            (
                format!("{SETTINGS_DIR}/{}.sh", self.name),
                service_settings::files::sh_file(&self.vars),
            ),
        ]
    }

    /// The settings worth pointing out (no secret values).
    pub fn notable(&self) -> service_settings::Notable {
        service_settings::notable::notable(&self.vars)
    }
}

fn not_found(name: &str) -> EnvError {
    EnvError::NotFound(format!(
        "there is no environment {name:?} in this account: GET /v1/environments lists them"
    ))
}

/// A connection id from a path; one that cannot be an id names no connection.
fn connection_id(env: &str, id: &str) -> Result<ConnectionId, EnvError> {
    ConnectionId::parse(id).map_err(|_| connection_not_found(env, id))
}

fn connection_not_found(env: &str, id: &str) -> EnvError {
    EnvError::NotFound(format!(
        "environment {env:?} has no connection {id:?}: GET /v1/environments/{env} lists its connections"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in ["dev", "staging-2", "a", "api.v2", "my_env"] {
            check_name("x", ok).unwrap();
        }
        for bad in ["", "-dev", "dev env", "dev/x", "ü", &"a".repeat(65)] {
            assert!(check_name("x", bad).is_err(), "{bad}");
        }
    }
}
