//! Who a node is to its peers: mutual TLS under a cluster certificate
//! derived from the master key (issue 33: "a cluster certificate derived
//! from or sealed under the master key").
//!
//! Every node holds the same master key, so every node derives the same
//! Ed25519 key for the cluster's CA (`Vault::derive`, the seed put in a
//! PKCS#8 document by hand: ring reads a seed only that way) and builds the
//! same CA subject and key from it; nothing about the CA is stored, so there
//! is nothing to race over or leak from the database. Each node then makes
//! itself a certificate with a fresh key, signed by that CA, naming it
//! `<id>.node.psbx.internal`: a server certificate its peers check by that
//! name, and a client certificate the listener requires. A process without
//! the master key cannot join, and no certificate outlives the process that
//! made it.

use psbx_actors::ids::ServerId;
use psbx_actors::secrets::vault::Vault;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ED25519,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::sync::Arc;

/// The domain under which nodes are named in their certificates.
const NODE_DOMAIN: &str = "node.psbx.internal";
/// The purpose the CA's key is derived for.
const CA_PURPOSE: &str = "psbx cluster ca v1";
/// PKCS#8 v1 of an Ed25519 key (RFC 8410 §7), before its 32-byte seed.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("making the cluster's certificates: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("the cluster's TLS settings: {0}")]
    Tls(String),
}

/// This node's certificates and the TLS settings both ends of a peer link use.
#[derive(Clone)]
pub struct ClusterIdentity {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl ClusterIdentity {
    /// The identity of node `me` under the cluster CA `vault` derives.
    pub fn new(vault: &Vault, me: &ServerId) -> Result<Self, IdentityError> {
        let seed = vault.derive(CA_PURPOSE, b"");
        let mut pkcs8 = ED25519_PKCS8_PREFIX.to_vec();
        pkcs8.extend_from_slice(&seed);
        let ca_key =
            KeyPair::from_pkcs8_der_and_sign_algo(&PrivatePkcs8KeyDer::from(pkcs8), &PKCS_ED25519)?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name = DistinguishedName::new();
        ca.distinguished_name
            .push(DnType::CommonName, "psbx cluster CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key)?;

        let key = KeyPair::generate_for(&PKCS_ED25519)?;
        let mut node = CertificateParams::new(vec![name_of(me)])?;
        node.distinguished_name = DistinguishedName::new();
        node.distinguished_name
            .push(DnType::CommonName, me.as_str());
        node.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        node.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let issuer = Issuer::new(ca, ca_key);
        let cert = node.signed_by(&key, &issuer)?;

        let chain = vec![cert.der().clone(), ca_cert.der().clone()];
        let private = || PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut roots = RootCertStore::empty();
        roots
            .add(ca_cert.der().clone())
            .map_err(|e| IdentityError::Tls(e.to_string()))?;
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = |e: rustls::Error| IdentityError::Tls(e.to_string());
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| IdentityError::Tls(e.to_string()))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), private())
            .map_err(tls)?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, private())
            .map_err(tls)?;
        Ok(Self {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The listener's side: a client certificate of the cluster required.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.clone()
    }

    /// The dialing side: its certificate presented, the peer's checked.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }

    /// The name node `peer`'s certificate must carry.
    pub fn server_name(peer: &ServerId) -> Result<ServerName<'static>, IdentityError> {
        ServerName::try_from(name_of(peer)).map_err(|e| IdentityError::Tls(e.to_string()))
    }
}

/// A node's name in its certificate.
fn name_of(id: &ServerId) -> String {
    let suffix = id
        .as_str()
        .strip_prefix(ServerId::PREFIX)
        .unwrap_or(id.as_str());
    format!("{suffix}.{NODE_DOMAIN}")
}
