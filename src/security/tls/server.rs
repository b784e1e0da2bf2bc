//! A TLS listener's server side: its rustls config built from Kafka's `ssl.*` settings,
//! rebuilt when the keystore or truststore files change, and the Kafka principal of a client
//! certificate.
//!
//! # Reloading
//! Kafka reloads a listener's keystore and truststore when they are altered dynamically; Sluice
//! watches the files instead: [`ServerTls::reload_if_changed`], called periodically by the
//! listener, compares each file's modification time and length with what was loaded and, when
//! either moved, builds a new config and swaps it in. A connection takes the config current
//! when it is accepted and keeps it to the end, so open connections are untouched. A rebuild
//! that fails (a half-written file, a key that does not match its certificate) leaves the old
//! config serving and is reported once per change of the files: the stamps seen are recorded
//! whether or not the rebuild succeeded, so the next call reports nothing until the files move
//! again. Inline PEM (PEM-in-config) never changes.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::SystemTime;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls::version::{TLS12, TLS13};

use super::settings::{ClientAuth, KeyStorePem, PemSource, TlsSettings, TlsVersion};
use super::{
    PrincipalMapper, TlsError, load_keystore, load_truststore, provider, subject_dn,
    truststore_origin,
};

/// A TLS listener's server config, reloadable while the listener runs.
pub struct ServerTls {
    settings: TlsSettings,
    /// The config new connections are accepted with.
    current: RwLock<Arc<ServerConfig>>,
    /// The files' stamps when they were last read, whether or not the rebuild succeeded. The
    /// mutex also keeps two reloads from running at once.
    seen: Mutex<Vec<FileStamp>>,
}

/// What says a watched file changed: its modification time and length, or that it could not
/// be examined (missing, unreadable).
#[derive(Debug, Clone, PartialEq, Eq)]
enum FileStamp {
    Present {
        modified: Option<SystemTime>,
        length: u64,
    },
    Missing,
}

impl ServerTls {
    /// Reads the keystore and truststore and builds the listener's config.
    pub fn load(settings: &TlsSettings) -> Result<ServerTls, TlsError> {
        // Stamped before reading: a file changed while it is read is read again next time.
        let stamps = stamp_files(settings);
        let config = build_config(settings)?;
        Ok(ServerTls {
            settings: settings.clone(),
            current: RwLock::new(config),
            seen: Mutex::new(stamps),
        })
    }

    /// An acceptor for the next connection, with the current config.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.server_config())
    }

    /// The current config, for callers that drive a `rustls::ServerConnection` themselves.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        // Nothing panics while the lock is held (an `Arc` is cloned or replaced), so a poisoned
        // lock still holds a whole config.
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Rebuilds the config if the keystore or truststore file changed since it was last read.
    /// `Ok(true)`: the new config serves new connections. `Ok(false)`: nothing changed. An
    /// error: the files changed but could not be used; the old config keeps serving, and the
    /// same change is not reported again (see the module doc).
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let stamps = stamp_files(&self.settings);
        if stamps == *seen {
            return Ok(false);
        }
        *seen = stamps;
        let config = build_config(&self.settings)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = config;
        Ok(true)
    }
}

// The settings' Debug already hides an inline key; the config holds key material.
impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The files a listener's TLS material is read from, in a fixed order.
fn watched_files(settings: &TlsSettings) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let KeyStorePem::File(path) = &settings.keystore.pem {
        files.push(path.clone());
    }
    if let Some(PemSource::File(path)) = &settings.truststore {
        files.push(path.clone());
    }
    files
}

fn stamp_files(settings: &TlsSettings) -> Vec<FileStamp> {
    watched_files(settings)
        .iter()
        // `metadata` follows symbolic links, so a Kubernetes secret volume's swap of its
        // `..data` link is seen as the files changing.
        .map(|path| match std::fs::metadata(path) {
            Ok(metadata) => FileStamp::Present {
                modified: metadata.modified().ok(),
                length: metadata.len(),
            },
            Err(_) => FileStamp::Missing,
        })
        .collect()
}

fn client_auth_name(client_auth: ClientAuth) -> &'static str {
    match client_auth {
        ClientAuth::None => "none",
        ClientAuth::Requested => "requested",
        ClientAuth::Required => "required",
    }
}

/// Builds a server config from the settings, reading every file.
fn build_config(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let keystore = load_keystore(&settings.keystore)?;
    // A truststore that is configured is read even when no client certificate is asked for,
    // so a broken one is found at start and not when ssl.client.auth changes.
    let roots = match &settings.truststore {
        Some(truststore) => Some((truststore_origin(truststore), load_truststore(truststore)?)),
        None => None,
    };
    let mut versions = Vec::new();
    for protocol in &settings.protocols {
        let version = match protocol {
            TlsVersion::Tls12 => &TLS12,
            TlsVersion::Tls13 => &TLS13,
        };
        if !versions.contains(&version) {
            versions.push(version);
        }
    }
    if versions.is_empty() {
        return Err(TlsError::NoProtocols);
    }
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|source| TlsError::Rustls {
            origin: "ssl.enabled.protocols".to_string(),
            source,
        })?;
    let builder = match (settings.client_auth, roots) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (client_auth, None) => {
            return Err(TlsError::ClientAuthWithoutTruststore {
                client_auth: client_auth_name(client_auth),
            });
        }
        (client_auth, Some((origin, roots))) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match client_auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier.build().map_err(|error| TlsError::Verifier {
                origin,
                detail: error.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(keystore.chain, keystore.key)
        .map_err(|source| TlsError::Rustls {
            origin: keystore.origin,
            source,
        })?;
    // No ALPN: Kafka's protocol is not negotiated.
    debug_assert!(config.alpn_protocols.is_empty());
    Ok(Arc::new(config))
}

/// The Kafka principal of a TLS connection's client: `User:` and the subject of its
/// certificate through the mapping rules, or `None` when the client presented no certificate
/// (the caller names it `User:ANONYMOUS`, as Kafka does). Call it once the handshake is done;
/// the certificate was verified against the truststore by then.
pub fn client_principal(
    connection: &rustls::ServerConnection,
    mapper: &PrincipalMapper,
) -> Result<Option<String>, TlsError> {
    let Some(end_entity) = connection
        .peer_certificates()
        .and_then(|certificates| certificates.first())
    else {
        return Ok(None);
    };
    let distinguished_name = subject_dn(end_entity)?;
    Ok(Some(format!("User:{}", mapper.name(&distinguished_name)?)))
}
