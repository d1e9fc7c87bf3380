//! TLS to the server: rustls with the system's trust roots
//! (rustls-native-certs: the distribution bundle, `SSL_CERT_FILE`,
//! `SSL_CERT_DIR`) plus, for self-hosted servers with their own CA, the
//! certificates in `PSBX_CA_FILE`.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

/// Why no TLS configuration could be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read PSBX_CA_FILE {0}: {1}")]
    CaFile(String, String),
    #[error("PSBX_CA_FILE {0} holds no certificate")]
    EmptyCaFile(String),
    #[error("no trusted root certificates: the system has none and PSBX_CA_FILE is not set")]
    NoRoots,
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The client configuration for the server connection.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::debug!(%error, "skipping a system certificate source");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(added, ignored, "system trust roots");
    if let Some(path) = ca_file {
        let shown = path.display().to_string();
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| TlsError::CaFile(shown.clone(), e.to_string()))?;
        if certs.is_empty() {
            return Err(TlsError::EmptyCaFile(shown));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| TlsError::CaFile(shown.clone(), e.to_string()))?;
        }
    }
    if roots.is_empty() {
        return Err(TlsError::NoRoots);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_extra_ca_file_is_added_and_checked() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(cert.cert.pem().as_bytes()).unwrap();
        client_config(Some(file.path())).unwrap();

        let mut empty = tempfile::NamedTempFile::new().unwrap();
        empty.write_all(b"not a certificate\n").unwrap();
        assert!(matches!(
            client_config(Some(empty.path())),
            Err(TlsError::EmptyCaFile(_))
        ));
        assert!(matches!(
            client_config(Some(Path::new("/nonexistent/ca.pem"))),
            Err(TlsError::CaFile(..))
        ));
    }
}
