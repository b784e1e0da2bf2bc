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

/// A certificate chain and its private key (`ssl.keystore.type=PEM`), and the password of
/// the key when it is encrypted (`ssl.key.password`).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyStore {
    pub pem: KeyStorePem,
    /// `ssl.key.password`: the key is an encrypted PKCS#8 key ("ENCRYPTED PRIVATE KEY").
    pub key_password: Option<String>,
}

impl KeyStore {
    /// `ssl.keystore.location`, the key not encrypted.
    pub fn file(path: impl Into<PathBuf>) -> KeyStore {
        KeyStore {
            pem: KeyStorePem::File(path.into()),
            key_password: None,
        }
    }

    /// `ssl.keystore.certificate.chain` and `ssl.keystore.key`, the key not encrypted.
    pub fn inline(certificate_chain: String, key: String) -> KeyStore {
        KeyStore {
            pem: KeyStorePem::Inline {
                certificate_chain,
                key,
            },
            key_password: None,
        }
    }

    /// The same store, its key encrypted with `password` (or not, for `None`).
    pub fn with_key_password(self, password: Option<String>) -> KeyStore {
        KeyStore {
            key_password: password,
            ..self
        }
    }
}

// The key and its password stay out of logs.
impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyStore")
            .field("pem", &self.pem)
            .field(
                "key_password",
                &self.key_password.as_ref().map(|_| "(hidden)"),
            )
            .finish()
    }
}

/// Where a keystore's PEM text is.
#[derive(Clone, PartialEq, Eq)]
pub enum KeyStorePem {
    /// `ssl.keystore.location`: one PEM file with the private key and the certificate chain
    /// (the listener's certificate first).
    File(PathBuf),
    /// `ssl.keystore.certificate.chain` and `ssl.keystore.key`.
    Inline {
        certificate_chain: String,
        key: String,
    },
}

impl std::fmt::Debug for KeyStorePem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyStorePem::File(path) => f.debug_tuple("File").field(path).finish(),
            KeyStorePem::Inline { .. } => f.write_str("Inline { .. }"),
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
