//! TLS for Kafka's `SSL` and `SASL_SSL` listeners and for the SDK's connections, on rustls with
//! the ring provider. Kafka's semantics throughout: PEM keystores and truststores (KIP-651),
//! `ssl.client.auth` none/requested/required, `ssl.enabled.protocols`, the principal of a
//! client certificate as `X500Principal.getName()` prints its subject, mapped through
//! `ssl.principal.mapping.rules` (KIP-371), and `ssl.endpoint.identification.algorithm`
//! empty meaning "check the chain, not the host name".
//!
//! # Layout
//! - this file: the error type, the size bound on PEM material, reading a PEM keystore and
//!   truststore (shared by both sides).
//! - `server`: [`ServerTls`], a listener's rustls server config, rebuilt when its files change
//!   on disk (new connections get the new config, open ones keep theirs), and
//!   [`client_principal`], the Kafka principal of a connection's client certificate.
//! - `client`: [`client_config`], the SDK's and CLI's rustls client config.
//! - `principal`: [`PrincipalMapper`], `ssl.principal.mapping.rules`.
//! - `dn`: [`subject_dn`], a certificate's subject in RFC 2253 form, read by a small bounded DER
//!   reader.
//!
//! # Why the ring provider is named everywhere
//! rustls picks a process-wide default provider from its crate features unless told otherwise;
//! Sluice passes `rustls::crypto::ring::default_provider()` to every builder so that another
//! crate in the process enabling aws-lc-rs can neither change our cipher suites nor make the
//! default ambiguous (which rustls answers with a panic).

mod client;
mod dn;
mod principal;
mod server;
pub mod settings;

pub use client::client_config;
pub use dn::subject_dn;
pub use principal::PrincipalMapper;
pub use server::{ServerTls, client_principal};

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::{PemObject, SectionKind};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use self::settings::{KeyStore, KeyStorePem, PemSource};

/// The largest PEM file (or PEM-in-config value) read. A keystore is a key and a few
/// certificates, a truststore a few CAs: a few KiB each. The bound is checked against the file's
/// length before it is read, and again while reading (the file may grow in between).
pub const PEM_BYTES_MAX: u64 = 1024 * 1024;

/// Why TLS material could not be loaded, a rule not parsed, or a certificate not read. Every
/// message names the file or config value and what is wrong with it, for the operator.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the {what} {} is {bytes} bytes, more than the {max} a PEM file may have", path.display())]
    FileTooLarge {
        what: &'static str,
        path: PathBuf,
        bytes: u64,
        max: u64,
    },
    #[error("the {origin} is {bytes} bytes, more than the {max} PEM text may have")]
    InlineTooLarge {
        origin: String,
        bytes: usize,
        max: u64,
    },
    #[error("the {origin} is not valid PEM: {detail}")]
    Pem { origin: String, detail: String },
    #[error("the {origin} holds an encrypted private key: set ssl.key.password to its password")]
    EncryptedKey { origin: String },
    #[error(
        "the {origin} holds a private key in OpenSSL's legacy encrypted form (Proc-Type: \
         4,ENCRYPTED), which Kafka does not read either: convert it to encrypted PKCS#8 \
         (`openssl pkcs8 -topk8 -v2 aes-256-cbc -in <key> -out <new key>`)"
    )]
    LegacyEncryptedKey { origin: String },
    #[error(
        "ssl.key.password is set but the private key in the {origin} is not encrypted: remove \
         ssl.key.password (or encrypt the key with `openssl pkcs8 -topk8 -v2 aes-256-cbc`)"
    )]
    KeyPasswordUnused { origin: String },
    #[error(
        "cannot decrypt the private key in the {origin} with ssl.key.password: {detail} (a wrong \
         password, or a scheme other than PKCS#5 v2 with PBKDF2 or scrypt and AES-CBC)"
    )]
    KeyDecryption { origin: String, detail: String },
    #[error(
        "the {origin} holds no private key (PEM \"PRIVATE KEY\", \"RSA PRIVATE KEY\" or \
         \"EC PRIVATE KEY\")"
    )]
    NoPrivateKey { origin: String },
    #[error("the {origin} holds {count} private keys; a keystore holds exactly one")]
    SeveralPrivateKeys { origin: String, count: usize },
    #[error("the {origin} holds no certificate (PEM \"CERTIFICATE\")")]
    NoCertificate { origin: String },
    #[error("the {origin} holds a CA certificate that cannot be used: {detail}")]
    InvalidCaCertificate { origin: String, detail: String },
    #[error(
        "ssl.client.auth={client_auth} needs a truststore (ssl.truststore.location or ssl.truststore.certificates) to check client certificates against"
    )]
    ClientAuthWithoutTruststore { client_auth: &'static str },
    #[error(
        "a truststore (ssl.truststore.location or ssl.truststore.certificates) is needed to \
         connect over TLS: Sluice bundles no public CA certificates"
    )]
    TruststoreRequired,
    #[error("ssl.enabled.protocols names no protocol Sluice serves (TLSv1.2, TLSv1.3)")]
    NoProtocols,
    #[error("the {origin} cannot be used: {source}")]
    Rustls {
        origin: String,
        source: rustls::Error,
    },
    #[error("cannot check certificates against the {origin}: {detail}")]
    Verifier { origin: String, detail: String },
    #[error("ssl.principal.mapping.rules is {bytes} bytes, more than {max}")]
    PrincipalMappingRulesTooLong { bytes: usize, max: usize },
    #[error("ssl.principal.mapping.rules: invalid rule `{rule}`: {detail}")]
    InvalidPrincipalMappingRule { rule: String, detail: String },
    /// Kafka's `NoMatchingRule`: the connection is refused.
    #[error("No rules apply to {distinguished_name}, rules [{rules}]")]
    NoMatchingPrincipalMappingRule {
        distinguished_name: String,
        rules: String,
    },
    #[error("the principal mapping rule `{rule}` gives a name longer than {max} bytes")]
    PrincipalNameTooLong { rule: String, max: usize },
    #[error("malformed certificate: {detail}")]
    MalformedCertificate { detail: String },
}

/// The one crypto provider every config is built with (see the module doc).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a PEM file of at most [`PEM_BYTES_MAX`] bytes. `what` names it in errors
/// ("keystore", "truststore").
fn read_pem_file(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let read_error = |source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let bytes = file.metadata().map_err(read_error)?.len();
    let too_large = |bytes| TlsError::FileTooLarge {
        what,
        path: path.to_path_buf(),
        bytes,
        max: PEM_BYTES_MAX,
    };
    if bytes > PEM_BYTES_MAX {
        return Err(too_large(bytes));
    }
    let mut contents = Vec::with_capacity(bytes as usize);
    file.take(PEM_BYTES_MAX + 1)
        .read_to_end(&mut contents)
        .map_err(read_error)?;
    if contents.len() as u64 > PEM_BYTES_MAX {
        return Err(too_large(contents.len() as u64));
    }
    Ok(contents)
}

/// PEM text given in the config itself, bounded like a file.
fn inline_pem<'a>(origin: &str, text: &'a str) -> Result<&'a [u8], TlsError> {
    if text.len() as u64 > PEM_BYTES_MAX {
        return Err(TlsError::InlineTooLarge {
            origin: origin.to_string(),
            bytes: text.len(),
            max: PEM_BYTES_MAX,
        });
    }
    Ok(text.as_bytes())
}

/// The certificates and private keys found in PEM text, in order. Other sections (public keys,
/// CRLs, parameters) are skipped, as Kafka's PEM loader skips them.
struct PemContents {
    certificates: Vec<CertificateDer<'static>>,
    keys: Vec<PrivateKeyDer<'static>>,
    /// The "ENCRYPTED PRIVATE KEY" sections (PKCS#8 `EncryptedPrivateKeyInfo`), as PEM text.
    encrypted_keys: Vec<String>,
}

const ENCRYPTED_KEY_BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
const ENCRYPTED_KEY_END: &str = "-----END ENCRYPTED PRIVATE KEY-----";

/// Parses PEM text. OpenSSL's legacy encrypted keys (`Proc-Type: 4,ENCRYPTED`) are refused by
/// name rather than skipped, so the operator reads "encrypted" and not "no private key".
fn parse_pem(origin: &str, pem: &[u8]) -> Result<PemContents, TlsError> {
    if find(pem, b"Proc-Type: 4,ENCRYPTED").is_some() {
        return Err(TlsError::LegacyEncryptedKey {
            origin: origin.to_string(),
        });
    }
    let mut contents = PemContents {
        certificates: Vec::new(),
        keys: Vec::new(),
        encrypted_keys: encrypted_key_sections(origin, pem)?,
    };
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem) {
        let (kind, der) = section.map_err(|error| TlsError::Pem {
            origin: origin.to_string(),
            detail: error.to_string(),
        })?;
        match kind {
            SectionKind::Certificate => contents.certificates.push(CertificateDer::from(der)),
            SectionKind::PrivateKey => contents.keys.push(PrivateKeyDer::Pkcs8(der.into())),
            SectionKind::RsaPrivateKey => contents.keys.push(PrivateKeyDer::Pkcs1(der.into())),
            SectionKind::EcPrivateKey => contents.keys.push(PrivateKeyDer::Sec1(der.into())),
            _ => {}
        }
    }
    Ok(contents)
}

/// The "ENCRYPTED PRIVATE KEY" sections of PEM text (the PEM reader skips them as unknown).
fn encrypted_key_sections(origin: &str, pem: &[u8]) -> Result<Vec<String>, TlsError> {
    let not_pem = |detail: &str| TlsError::Pem {
        origin: origin.to_string(),
        detail: detail.to_string(),
    };
    let mut sections = Vec::new();
    let mut rest = pem;
    while let Some(start) = find(rest, ENCRYPTED_KEY_BEGIN.as_bytes()) {
        let section = &rest[start..];
        let end = find(section, ENCRYPTED_KEY_END.as_bytes())
            .ok_or_else(|| not_pem("an ENCRYPTED PRIVATE KEY section has no END line"))?
            + ENCRYPTED_KEY_END.len();
        let text = std::str::from_utf8(&section[..end])
            .map_err(|_| not_pem("an ENCRYPTED PRIVATE KEY section is not ASCII text"))?;
        sections.push(text.to_string());
        rest = &section[end..];
    }
    Ok(sections)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The most memory a key's scrypt parameters may ask for (128 * r * N * p bytes): OpenSSL's
/// own limit, so every key OpenSSL writes is read (its default, N=16384 and r=8, asks for
/// 16 MiB). A key file is the operator's, but its parameters are bounded before anything is
/// allocated all the same.
const SCRYPT_BYTES_MAX: u64 = 32 * 1024 * 1024;
/// The most PBKDF2 iterations a key may ask for (OpenSSL's default is 2048): decryption
/// happens at start and on every certificate reload, and must not take minutes.
const PBKDF2_ITERATIONS_MAX: u32 = 10_000_000;

/// Decrypts an encrypted PKCS#8 key (PKCS#5 v2: PBKDF2 or scrypt, AES-CBC), as Kafka reads
/// `ssl.key.password`.
fn decrypt_key(
    origin: &str,
    section: &str,
    password: &str,
) -> Result<PrivateKeyDer<'static>, TlsError> {
    use pkcs8::pkcs5::pbes2::Kdf;
    let refused = |detail: String| TlsError::KeyDecryption {
        origin: origin.to_string(),
        detail,
    };
    let (_, der) =
        pkcs8::der::pem::decode_vec(section.as_bytes()).map_err(|error| TlsError::Pem {
            origin: origin.to_string(),
            detail: format!("the ENCRYPTED PRIVATE KEY section: {error}"),
        })?;
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice())
        .map_err(|error| refused(format!("not a PKCS#8 encrypted key: {error}")))?;
    let Some(parameters) = info.encryption_algorithm.pbes2() else {
        return Err(refused(
            "the key is not encrypted with PKCS#5 v2 (PBES2)".into(),
        ));
    };
    match &parameters.kdf {
        Kdf::Pbkdf2(kdf) if kdf.iteration_count > PBKDF2_ITERATIONS_MAX => {
            return Err(refused(format!(
                "PBKDF2 with {} iterations, more than the {PBKDF2_ITERATIONS_MAX} read",
                kdf.iteration_count
            )));
        }
        Kdf::Scrypt(kdf) => {
            let bytes = 128u64
                .saturating_mul(u64::from(kdf.block_size))
                .saturating_mul(kdf.cost_parameter)
                .saturating_mul(u64::from(kdf.parallelization));
            if bytes > SCRYPT_BYTES_MAX {
                return Err(refused(format!(
                    "scrypt parameters asking for {bytes} bytes, more than the \
                     {SCRYPT_BYTES_MAX} allowed"
                )));
            }
        }
        _ => {}
    }
    let document = info
        .decrypt(password)
        .map_err(|error| refused(error.to_string()))?;
    // A wrong password passes the padding check now and then: the plaintext must be a key.
    pkcs8::PrivateKeyInfo::try_from(document.as_bytes())
        .map_err(|_| refused("the decrypted bytes are not a private key".into()))?;
    Ok(PrivateKeyDer::Pkcs8(document.as_bytes().to_vec().into()))
}

/// A PEM text's private keys: the plain ones, and the encrypted ones decrypted with
/// `password`. A password with no encrypted key, or an encrypted key without one, is refused.
fn private_keys(
    origin: &str,
    contents: PemContents,
    password: Option<&str>,
) -> Result<Vec<PrivateKeyDer<'static>>, TlsError> {
    let PemContents {
        keys,
        encrypted_keys,
        ..
    } = contents;
    match password {
        None if !encrypted_keys.is_empty() => Err(TlsError::EncryptedKey {
            origin: origin.to_string(),
        }),
        None => Ok(keys),
        Some(_) if encrypted_keys.is_empty() => Err(TlsError::KeyPasswordUnused {
            origin: origin.to_string(),
        }),
        Some(password) => {
            let mut all = keys;
            for section in &encrypted_keys {
                all.push(decrypt_key(origin, section, password)?);
            }
            Ok(all)
        }
    }
}

/// A certificate chain (the end-entity certificate first) and its private key.
struct CertifiedKeyPem {
    /// What names the keystore in errors.
    origin: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// Reads a PEM keystore (Kafka's `ssl.keystore.type=PEM`): one private key and the
/// certificate chain, from one file or from the two PEM-in-config values.
fn load_keystore(keystore: &KeyStore) -> Result<CertifiedKeyPem, TlsError> {
    let password = keystore.key_password.as_deref();
    let (origin, key_origin, chain_origin, keys, certificates) = match &keystore.pem {
        KeyStorePem::File(path) => {
            let origin = format!("keystore {}", path.display());
            let mut contents = parse_pem(&origin, &read_pem_file("keystore", path)?)?;
            let certificates = std::mem::take(&mut contents.certificates);
            let keys = private_keys(&origin, contents, password)?;
            (origin.clone(), origin.clone(), origin, keys, certificates)
        }
        KeyStorePem::Inline {
            certificate_chain,
            key,
        } => {
            let key_origin = "ssl.keystore.key".to_string();
            let chain_origin = "ssl.keystore.certificate.chain".to_string();
            let keys = private_keys(
                &key_origin,
                parse_pem(&key_origin, inline_pem(&key_origin, key)?)?,
                password,
            )?;
            let certificates =
                parse_pem(&chain_origin, inline_pem(&chain_origin, certificate_chain)?)?
                    .certificates;
            let origin = format!("keystore ({key_origin} and {chain_origin})");
            (origin, key_origin, chain_origin, keys, certificates)
        }
    };
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate {
            origin: chain_origin,
        });
    }
    let count = keys.len();
    let mut keys = keys.into_iter();
    match (keys.next(), count) {
        (Some(key), 1) => Ok(CertifiedKeyPem {
            origin,
            chain: certificates,
            key,
        }),
        (None, _) => Err(TlsError::NoPrivateKey { origin: key_origin }),
        (Some(_), count) => Err(TlsError::SeveralPrivateKeys {
            origin: key_origin,
            count,
        }),
    }
}

/// What names a PEM source in errors: "truststore /etc/ca.pem" or the config key.
fn truststore_origin(truststore: &PemSource) -> String {
    match truststore {
        PemSource::File(path) => format!("truststore {}", path.display()),
        PemSource::Inline(_) => "ssl.truststore.certificates".to_string(),
    }
}

/// Reads a PEM truststore: the CA certificates that vouch for the peer. At least one, each
/// usable as a trust anchor.
fn load_truststore(truststore: &PemSource) -> Result<rustls::RootCertStore, TlsError> {
    let origin = truststore_origin(truststore);
    let certificates = match truststore {
        PemSource::File(path) => parse_pem(&origin, &read_pem_file("truststore", path)?)?,
        PemSource::Inline(text) => parse_pem(&origin, inline_pem(&origin, text)?)?,
    }
    .certificates;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate { origin });
    }
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates {
        roots
            .add(certificate)
            .map_err(|error| TlsError::InvalidCaCertificate {
                origin: origin.clone(),
                detail: error.to_string(),
            })?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests;
