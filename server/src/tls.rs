//! HTTPS: the rustls server configuration from the configured PEM files, or from
//! a self-signed certificate made with rcgen and kept under `data_dir/tls/`
//! (so clients that pinned it keep working across restarts).
//!
//! Box URLs (`<id>-<key>.<box_domain>`) need a certificate for
//! `*.<box_domain>`: the self-signed one covers it (and `box_domain` itself);
//! with operator certificates, `tls.box_cert`/`tls.box_key` may name a
//! wildcard pair of its own, which [`BoxSni`] serves to every SNI name under
//! `box_domain` (everything else gets the main pair). Without them the main
//! pair serves every name.
//!
//! ALPN: actix-web's rustls listener offers `h2` and `http/1.1` (its `http2`
//! feature is on), so browsers speak HTTP/2; this configuration adds none of
//! its own.

use crate::config::Config;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
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
    #[error("{cert} and {key} do not go together: {reason}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

/// The rustls configuration for the server, or `None` for plain HTTP.
pub fn server_config(config: &Config) -> Result<Option<ServerConfig>, TlsError> {
    let (cert, key) = match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        _ if config.tls.self_signed => self_signed(&config.data_dir.join("tls"), config)?,
        _ => return Ok(None),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let main = Arc::new(certified(&cert, &key, &provider)?);
    let resolver = BoxSni {
        main,
        boxes: match (&config.tls.box_cert, &config.tls.box_key) {
            (Some(cert), Some(key)) => Some(Arc::new(certified(cert, key, &provider)?)),
            _ => None,
        },
        box_domain: config.box_domain.trim_end_matches('.').to_ascii_lowercase(),
    };
    Ok(Some(
        ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver)),
    ))
}

/// A certificate chain and its key from PEM files, checked to belong together.
fn certified(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let read = |path: &Path| {
        fs::read(path).map_err(|e| TlsError::Read {
            path: path.to_owned(),
            reason: e.to_string(),
        })
    };
    let cert_pem = read(cert)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Read {
            path: cert.to_owned(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Empty {
            path: cert.to_owned(),
            what: "certificate",
        });
    }
    let key_der = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|_| TlsError::Empty {
        path: key.to_owned(),
        what: "private key",
    })?;
    CertifiedKey::from_der(chain, key_der, provider).map_err(|e| TlsError::Pair {
        cert: cert.to_owned(),
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

/// Chooses the certificate by the name the client asked for (SNI): names
/// under `box_domain` (and `box_domain` itself) get the box pair when there
/// is one; everything else, and clients that send no name, the main pair.
#[derive(Debug)]
pub struct BoxSni {
    main: Arc<CertifiedKey>,
    boxes: Option<Arc<CertifiedKey>>,
    /// Lowercase, without a trailing dot.
    box_domain: String,
}

impl BoxSni {
    /// Whether `name` (an SNI host name) is `box_domain` or under it.
    fn is_box_name(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        name == self.box_domain
            || name
                .strip_suffix(&self.box_domain)
                .is_some_and(|head| head.ends_with('.'))
    }
}

impl ResolvesServerCert for BoxSni {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match (&self.boxes, client_hello.server_name()) {
            (Some(boxes), Some(name)) if self.is_box_name(name) => Some(boxes.clone()),
            _ => Some(self.main.clone()),
        }
    }
}

/// The names the self-signed certificate covers: localhost, the loopback
/// addresses, the public URL's host, and the box URLs' `*.<box_domain>`
/// with `box_domain` itself.
fn self_signed_names(config: &Config) -> Vec<String> {
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let public = config.public_url_for(config.listen);
    let host = url::Url::parse(&public)
        .ok()
        .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_owned()));
    let domain = config.box_domain.trim_end_matches('.').to_ascii_lowercase();
    for name in host
        .into_iter()
        .chain([format!("*.{domain}"), domain.clone()])
    {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The kept self-signed pair, made on first use for [`self_signed_names`].
/// The names it was made for are kept beside it (`self-signed.names`, one a
/// line): a pair made for other names (another `box_domain` or public URL,
/// or by a psbx from before box URLs, which kept no list) is made again.
fn self_signed(dir: &Path, config: &Config) -> Result<(PathBuf, PathBuf), TlsError> {
    let cert = dir.join("self-signed.crt");
    let key = dir.join("self-signed.key");
    let listed = dir.join("self-signed.names");
    let names = self_signed_names(config);
    let wanted = names.join("\n") + "\n";
    if cert.is_file()
        && key.is_file()
        && fs::read_to_string(&listed).is_ok_and(|kept| kept == wanted)
    {
        return Ok((cert, key));
    }
    let made = rcgen::generate_simple_self_signed(names.clone())
        .map_err(|e| TlsError::Generate(e.to_string()))?;
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
    // Last: a pair cut short by a crash is made again at the next start.
    write(&listed, &wanted, 0o644)?;
    tracing::info!(cert = %cert.display(), names = ?names, "generated a self-signed TLS certificate");
    Ok((cert, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sni(domain: &str) -> BoxSni {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let provider = rustls::crypto::ring::default_provider();
        let key =
            PrivateKeyDer::from_pem_slice(made.signing_key.serialize_pem().as_bytes()).unwrap();
        let pair = Arc::new(
            CertifiedKey::from_der(vec![made.cert.der().clone()], key, &provider).unwrap(),
        );
        BoxSni {
            main: pair.clone(),
            boxes: Some(pair),
            box_domain: domain.to_owned(),
        }
    }

    #[test]
    fn names_under_the_box_domain_are_box_names_and_lookalikes_are_not() {
        let s = sni("box.example.com");
        for name in [
            "box.example.com",
            "box_1-k.box.example.com",
            "A.BOX.EXAMPLE.COM",
            "x.box.example.com.",
        ] {
            assert!(s.is_box_name(name), "{name}");
        }
        for name in [
            "example.com",
            "psbx.example.com",
            "evilbox.example.com",
            "box.example.com.evil.test",
            "",
        ] {
            assert!(!s.is_box_name(name), "{name}");
        }
    }

    #[test]
    fn the_self_signed_names_cover_the_box_domain() {
        let config = Config {
            box_domain: "Box.Localhost".to_owned(),
            ..Config::default()
        };
        let names = self_signed_names(&config);
        assert_eq!(
            names,
            [
                "localhost",
                "127.0.0.1",
                "::1",
                "*.box.localhost",
                "box.localhost"
            ]
        );
    }

    #[test]
    fn a_kept_pair_is_reused_and_one_for_other_names_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        config.tls.self_signed = true;
        let tls = dir.path().join("tls");
        let (cert, _) = self_signed(&tls, &config).unwrap();
        let first = fs::read(&cert).unwrap();
        self_signed(&tls, &config).unwrap();
        assert_eq!(fs::read(&cert).unwrap(), first, "a kept pair was remade");
        // A pair kept by a psbx from before box URLs: no names file.
        fs::remove_file(tls.join("self-signed.names")).unwrap();
        self_signed(&tls, &config).unwrap();
        let second = fs::read(&cert).unwrap();
        assert_ne!(second, first, "a pair without its names was kept");
        config.box_domain = "box.example.com".to_owned();
        self_signed(&tls, &config).unwrap();
        assert_ne!(fs::read(&cert).unwrap(), second);
        assert!(
            fs::read_to_string(tls.join("self-signed.names"))
                .unwrap()
                .contains("*.box.example.com\n")
        );
        assert!(server_config(&config).unwrap().is_some());
    }
}
