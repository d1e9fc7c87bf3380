//! Who a `client_id` is. Either a client registered with `POST /oauth/register`
//! (kept in the database), or an `https://` URL naming a client ID metadata
//! document: the JSON document is fetched (5 s timeout, 64 KiB at most, no
//! redirects), its `client_id` must equal the URL, its redirect URIs follow the
//! same rules as registered ones, and it is cached for five minutes.
//!
//! Documents are fetched from public addresses only
//! ([`super::public_address`]): an IP literal is checked as it is, a host name
//! is resolved first and every address it resolves to must be public, and the
//! fetch connects to exactly those checked addresses (no second lookup, no
//! proxy), so a name cannot point inside the network, now or by rebinding.
//! `localhost` names are refused without a lookup. `http://` document URLs on
//! a loopback host are accepted only when the configuration says so
//! (`oauth.loopback_client_metadata`, off by default): that is for tests and
//! local development.
//!
//! The sign-in page is open to anyone, so fetches are rate-limited per client
//! address ([`super::throttle`]; cached documents do not count), and a failed
//! fetch shows one generic message whatever the cause (refused address, no DNS answer, connection
//! refused, TLS, status): the page is no port scanner of the server's network.
//! The log has the cause.

use super::OAuth;
use super::public_address::is_public;
use super::redirect_uris;
use crate::error::{ApiError, blocking};
use crate::limits::rate::Exceeded;
use psbx_actors::store::Store;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use url::{Host, Url};

/// How long a fetched document is trusted.
const CACHE_TTL: Duration = Duration::from_secs(300);
/// Documents kept at most (the cache is emptied when full).
const CACHE_MAX: usize = 256;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_DOCUMENT: usize = 64 * 1024;

/// A client as the authorization flow sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    pub id: String,
    pub name: Option<String>,
    pub redirect_uris: Vec<String>,
}

/// Why a `client_id` could not be resolved.
#[derive(Debug)]
pub enum ClientError {
    /// Unknown, or a document that is missing or not acceptable: the message
    /// says which, for the person on the page or the client's developer.
    Invalid(String),
    /// Too many documents fetched for this client address lately.
    Throttled(Exceeded),
    Internal(ApiError),
}

/// Client ID metadata documents fetched recently.
#[derive(Default)]
pub struct DocumentCache {
    entries: Mutex<HashMap<String, (Instant, Client)>>,
}

impl DocumentCache {
    fn get(&self, url: &str) -> Option<Client> {
        let entries = self.entries.lock().ok()?;
        entries
            .get(url)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, client)| client.clone())
    }

    fn put(&self, client: Client) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= CACHE_MAX {
                entries.clear();
            }
            entries.insert(client.id.clone(), (Instant::now(), client));
        }
    }
}

/// Whether `client_id` names a metadata document (a URL) rather than a registered client.
pub fn is_document_url(client_id: &str) -> bool {
    client_id.starts_with("https://") || client_id.starts_with("http://")
}

/// Whether `name` is `localhost` or under `.localhost` (RFC 6761), which
/// resolvers answer with loopback addresses without asking anyone.
fn is_localhost_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// Checks a document URL: https with a path, no fragment or credentials, not
/// an internal IP literal nor a `localhost` name; or, when `accepted` allows
/// loopback documents, http or https to a loopback host; none when it is `Off`. Names are resolved at fetch time
/// ([`resolve_public`]).
pub fn check_document_url(client_id: &str, accepted: super::Documents) -> Result<Url, String> {
    if accepted == super::Documents::Off {
        return Err(format!(
            "client_id {client_id:?}: this server does not fetch client ID metadata documents \
             (oauth.client_metadata_documents is off: it cannot reach the internet); register \
             the client at /oauth/register instead"
        ));
    }
    let loopback = accepted.loopback();
    let url = Url::parse(client_id)
        .map_err(|e| format!("client_id {client_id:?} is not a valid URL: {e}"))?;
    let literal: Option<IpAddr> = match url.host() {
        Some(Host::Ipv4(ip)) => Some(ip.into()),
        Some(Host::Ipv6(ip)) => Some(ip.into()),
        _ => None,
    };
    let is_loopback = match url.host() {
        Some(Host::Domain(name)) => is_localhost_name(name),
        _ => literal.is_some_and(|ip| ip.to_canonical().is_loopback()),
    };
    let internal = match url.host() {
        Some(Host::Domain(name)) => is_localhost_name(name),
        _ => literal.is_some_and(|ip| !is_public(ip)),
    };
    if internal && !(loopback && is_loopback) {
        return Err(format!(
            "client_id {client_id:?}: psbx only fetches client metadata documents from \
             public internet addresses (not loopback, private, link-local or other internal ones)"
        ));
    }
    match url.scheme() {
        "https" => {}
        "http" if loopback && is_loopback => {}
        _ => {
            return Err(format!(
                "client_id {client_id:?}: a client ID metadata document must be served over https://"
            ));
        }
    }
    if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "client_id {client_id:?}: a document URL has no fragment and no credentials"
        ));
    }
    if url.path() == "/" || url.path().is_empty() {
        return Err(format!(
            "client_id {client_id:?}: a document URL needs a path (e.g. /oauth/client.json)"
        ));
    }
    Ok(url)
}

/// Whether documents may be fetched from `ip`: a public address, or with
/// `loopback` (tests) a loopback one.
fn fetchable(ip: IpAddr, loopback: bool) -> bool {
    is_public(ip) || (loopback && ip.to_canonical().is_loopback())
}

/// The addresses `host` resolves to, if every one of them is public (with
/// `loopback`, loopback ones are accepted too); the error is for the log.
pub async fn resolve_public(
    host: &str,
    port: u16,
    loopback: bool,
) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{host} has no address"));
    }
    let refused: Vec<IpAddr> = addrs
        .iter()
        .map(SocketAddr::ip)
        .filter(|ip| !fetchable(*ip, loopback))
        .collect();
    if !refused.is_empty() {
        return Err(format!("{host} resolves to internal addresses {refused:?}"));
    }
    Ok(addrs)
}

#[derive(Deserialize)]
struct Document {
    client_id: String,
    #[serde(default)]
    client_name: Option<String>,
    redirect_uris: Vec<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
}

/// Reads a fetched document: valid JSON naming itself, with acceptable redirect URIs.
pub fn parse_document(url: &str, body: &[u8]) -> Result<Client, String> {
    let doc: Document = serde_json::from_slice(body)
        .map_err(|e| format!("the client metadata document at {url} is not valid: {e}"))?;
    if doc.client_id != url {
        return Err(format!(
            "the client metadata document at {url} names another client_id ({:?}); it must \
             be the document's own URL",
            doc.client_id
        ));
    }
    if let Some(method) = doc
        .token_endpoint_auth_method
        .as_deref()
        .filter(|m| *m != "none")
    {
        return Err(format!(
            "the client metadata document at {url} asks for token_endpoint_auth_method \
             {method:?}; psbx only serves public clients (\"none\")"
        ));
    }
    redirect_uris::check_all(&doc.redirect_uris)
        .map_err(|e| format!("the client metadata document at {url}: {e}"))?;
    Ok(Client {
        id: doc.client_id,
        name: doc
            .client_name
            .map(|n| n.chars().filter(|c| !c.is_control()).take(200).collect()),
        redirect_uris: doc.redirect_uris,
    })
}

/// What the page says when a fetch failed, whatever the cause.
fn not_fetched(url: &Url) -> String {
    format!(
        "the client metadata document at {url} could not be fetched: psbx fetches it from \
         public addresses only, over https, without redirects, within {} s and up to {} KiB; \
         check that the URL serves the document",
        FETCH_TIMEOUT.as_secs(),
        MAX_DOCUMENT / 1024
    )
}

/// Fetches and reads a document; a failure to fetch is logged with its cause
/// and answered with [`not_fetched`].
async fn fetch_document(url: Url, loopback: bool) -> Result<Client, String> {
    let body = fetch_body(&url, loopback).await.map_err(|cause| {
        tracing::info!(%url, %cause, "a client metadata document could not be fetched");
        not_fetched(&url)
    })?;
    parse_document(url.as_str(), &body)
}

async fn fetch_body(url: &Url, loopback: bool) -> Result<Vec<u8>, String> {
    let failed = |e: &dyn std::fmt::Display| e.to_string();
    let mut http = reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        // A proxy would resolve the name itself, past the check below.
        .no_proxy();
    let literal: Option<IpAddr> = match url.host() {
        Some(Host::Domain(name)) => {
            let port = url.port_or_known_default().unwrap_or(443);
            let addrs = resolve_public(name, port, loopback).await?;
            // Connect to the addresses just checked, not to a second lookup's.
            http = http.resolve_to_addrs(name, &addrs);
            None
        }
        Some(Host::Ipv4(ip)) => Some(ip.into()),
        Some(Host::Ipv6(ip)) => Some(ip.into()),
        None => return Err("the URL has no host".to_owned()),
    };
    if let Some(ip) = literal.filter(|ip| !fetchable(*ip, loopback)) {
        return Err(format!("{ip} is an internal address"));
    }
    let http = http.build().map_err(|e| failed(&e))?;
    let mut response = http
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| failed(&e))?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(&e))? {
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(format!("it is larger than {MAX_DOCUMENT} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl OAuth {
    /// Resolves a `client_id`; a document not in the cache is fetched if the
    /// client `address` has not fetched too many lately.
    pub async fn client(
        &self,
        store: &Store,
        client_id: &str,
        address: &str,
    ) -> Result<Client, ClientError> {
        if client_id.is_empty() {
            return Err(ClientError::Invalid("client_id is missing".to_owned()));
        }
        if is_document_url(client_id) {
            let url = check_document_url(client_id, self.documents_accepted)
                .map_err(ClientError::Invalid)?;
            if url.as_str() != client_id {
                return Err(ClientError::Invalid(format!(
                    "client_id {client_id:?} is not in normal form (expected {url})"
                )));
            }
            if let Some(client) = self.documents.get(client_id) {
                return Ok(client);
            }
            if let Err(exceeded) = self.throttles.documents_by_address.hit(address) {
                tracing::info!(%address, "a client metadata document fetch was refused: too many");
                return Err(ClientError::Throttled(exceeded));
            }
            let client = fetch_document(url, self.documents_accepted.loopback())
                .await
                .map_err(ClientError::Invalid)?;
            self.documents.put(client.clone());
            return Ok(client);
        }
        let store = store.clone();
        let id = client_id.to_owned();
        let found = blocking(move || store.oauth_client(&id))
            .await
            .map_err(ClientError::Internal)?;
        found
            .map(|c| Client {
                id: c.id.to_string(),
                name: c.name,
                redirect_uris: c.redirect_uris,
            })
            .ok_or_else(|| {
                ClientError::Invalid(format!(
                    "client_id {client_id:?} is not registered with this server"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Documents::{Off, Public, PublicAndLoopback};
    use super::*;

    const URL: &str = "https://app.example.com/oauth/client.json";

    #[test]
    fn document_urls_must_be_https_with_a_path() {
        assert!(check_document_url(URL, Public).is_ok());
        assert!(check_document_url("https://app.example.com/", Public).is_err());
        assert!(check_document_url("https://app.example.com/c#x", Public).is_err());
        assert!(check_document_url("http://app.example.com/c.json", Public).is_err());
        assert!(check_document_url("http://127.0.0.1:9/c.json", Public).is_err());
        assert!(check_document_url("http://127.0.0.1:9/c.json", PublicAndLoopback).is_ok());
        assert!(check_document_url("http://app.example.com/c.json", PublicAndLoopback).is_err());
        for internal in [
            "https://127.0.0.1/c.json",
            "https://10.1.2.3/c.json",
            "https://192.168.0.1/c.json",
            "https://169.254.169.254/latest",
            "https://[::1]/c.json",
            "https://[fd00::1]/c.json",
            "https://[::ffff:7f00:1]/c.json",
            "https://[::ffff:169.254.169.254]/c.json",
            "https://0.0.0.0/c.json",
            "https://0.1.2.3/c.json",
            "https://100.64.0.1/c.json",
            "https://224.0.0.1/c.json",
            "https://localhost/c.json",
            "https://LOCALHOST./c.json",
            "https://api.localhost/c.json",
        ] {
            assert!(check_document_url(internal, Public).is_err(), "{internal}");
        }
        assert!(check_document_url("http://localhost:9/c.json", PublicAndLoopback).is_ok());
        // A server that cannot reach the internet takes none, and says what instead.
        let off = check_document_url(URL, Off).unwrap_err();
        assert!(off.contains("/oauth/register"), "{off}");
    }

    #[actix_rt::test]
    async fn names_are_resolved_and_must_resolve_to_public_addresses() {
        // `localhost` resolves (from the hosts file, no DNS traffic) to loopback.
        let refused = resolve_public("localhost", 443, false).await.unwrap_err();
        assert!(refused.contains("internal"), "{refused}");
        assert!(resolve_public("localhost", 443, true).await.is_ok());
        // A refused fetch says nothing about why (no port-scan oracle).
        let url = Url::parse("https://[::ffff:7f00:1]/c.json").unwrap();
        let answer = fetch_document(url.clone(), false).await.unwrap_err();
        assert_eq!(answer, not_fetched(&url));
    }

    #[test]
    fn documents_must_name_themselves_and_redirect_safely() {
        let ok = format!(
            r#"{{"client_id":"{URL}","client_name":"App","redirect_uris":["http://localhost:3000/cb"]}}"#
        );
        let client = parse_document(URL, ok.as_bytes()).unwrap();
        assert_eq!(client.name.as_deref(), Some("App"));
        assert_eq!(client.redirect_uris, vec!["http://localhost:3000/cb"]);

        let other = r#"{"client_id":"https://evil.example/c.json","redirect_uris":["http://localhost/cb"]}"#;
        assert!(
            parse_document(URL, other.as_bytes())
                .unwrap_err()
                .contains("another client_id")
        );
        let bad_redirect =
            format!(r#"{{"client_id":"{URL}","redirect_uris":["http://evil.example/cb"]}}"#);
        assert!(
            parse_document(URL, bad_redirect.as_bytes())
                .unwrap_err()
                .contains("only accepted for localhost")
        );
        let secret = format!(
            r#"{{"client_id":"{URL}","redirect_uris":["http://localhost/cb"],"token_endpoint_auth_method":"private_key_jwt"}}"#
        );
        assert!(parse_document(URL, secret.as_bytes()).is_err());
        assert!(parse_document(URL, b"not json").is_err());
        assert!(parse_document(URL, br#"{"client_id":"x"}"#).is_err());
    }
}
