//! TLS settings as Kafka names them (`ssl.*`, or `listener.name.<l>.ssl.*`): a listener's,
//! parsed by `config::security`, which `security::tls` turns into a rustls server; and the
//! stores a client names (the SDK's `ssl.*` client keys).

use std::path::PathBuf;

/// PEM text: from a file, or in the config itself (Kafka's PEM-in-config keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    File(PathBuf),
    Inline(String),
}

/// The listener's certificate chain and private key (`ssl.keystore.type=PEM`).
#[derive(Clone, PartialEq, Eq)]
pub enum KeyStore {
    /// `ssl.keystore.location`: one PEM file with the private key and the certificate chain
    /// (the listener's certificate first).
    File(PathBuf),
    /// `ssl.keystore.certificate.chain` and `ssl.keystore.key`.
    Inline {
        certificate_chain: String,
        key: String,
    },
}

// The key stays out of logs.
impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyStore::File(path) => f.debug_tuple("File").field(path).finish(),
            KeyStore::Inline { .. } => f.write_str("Inline { .. }"),
        }
    }
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// Asked for; a client without one is served (as `User:ANONYMOUS` on SSL).
    Requested,
    /// A client without a certificate the truststore vouches for is refused.
    Required,
}

/// `ssl.enabled.protocols` entries Sluice serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// One TLS listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub keystore: KeyStore,
    /// `ssl.truststore.location` or `ssl.truststore.certificates`: the CAs that vouch for
    /// client certificates (needed when `client_auth` is not `None`).
    pub truststore: Option<PemSource>,
    pub client_auth: ClientAuth,
    /// `ssl.enabled.protocols` (default TLSv1.2,TLSv1.3).
    pub protocols: Vec<TlsVersion>,
    /// `ssl.principal.mapping.rules` as written (default `DEFAULT`).
    pub principal_mapping_rules: String,
}
