//! HTTPS: the rustls server configuration from the configured PEM files, or from
//! a self-signed certificate made with rcgen once and kept under `data_dir/tls/`
//! (so clients that pinned it keep working across restarts).

use crate::config::Config;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path} holds no {what} in PEM form")]
    Empty { path: PathBuf, what: &'static str },
    #[error("generating a self-signed certificate: {0}")]
    Generate(String),
    #[error("the certificate and key do not make a usable TLS configuration: {0}")]
    Config(String),
}

/// The rustls configuration for the server, or `None` for plain HTTP.
pub fn server_config(config: &Config) -> Result<Option<ServerConfig>, TlsError> {
    let (cert, key) = match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        _ if config.tls.self_signed => self_signed(&config.data_dir.join("tls"), config)?,
        _ => return Ok(None),
    };
    let read = |path: &Path| {
        fs::read(path).map_err(|e| TlsError::Read {
            path: path.to_owned(),
            reason: e.to_string(),
        })
    };
    let cert_pem = read(&cert)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Read {
            path: cert.clone(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Empty {
            path: cert,
            what: "certificate",
        });
    }
    let key_der = PrivateKeyDer::from_pem_slice(&read(&key)?).map_err(|_| TlsError::Empty {
        path: key.clone(),
        what: "private key",
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map(Some)
        .map_err(|e| TlsError::Config(e.to_string()))
}

/// The kept self-signed pair, made on first use for localhost, the loopback
/// addresses and the public URL's host.
fn self_signed(dir: &Path, config: &Config) -> Result<(PathBuf, PathBuf), TlsError> {
    let cert = dir.join("self-signed.crt");
    let key = dir.join("self-signed.key");
    if cert.is_file() && key.is_file() {
        return Ok((cert, key));
    }
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let public = config.public_url_for(config.listen);
    if let Some(host) = url::Url::parse(&public)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
    {
        let host = host.trim_matches(['[', ']']).to_owned();
        if !names.contains(&host) {
            names.push(host);
        }
    }
    let made =
        rcgen::generate_simple_self_signed(names).map_err(|e| TlsError::Generate(e.to_string()))?;
    let write = |path: &Path, text: &str, mode: u32| {
        fs::create_dir_all(dir)
            .and_then(|()| {
                fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(mode)
                    .open(path)
            })
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| TlsError::Generate(format!("writing {}: {e}", path.display())))
    };
    write(&key, &made.signing_key.serialize_pem(), 0o600)?;
    write(&cert, &made.cert.pem(), 0o644)?;
    tracing::info!(cert = %cert.display(), "generated a self-signed TLS certificate");
    Ok((cert, key))
}
