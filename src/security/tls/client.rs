//! The client side, for the SDK and the CLI: a rustls client config from Kafka's client
//! settings (`ssl.truststore.*`, `ssl.keystore.*` for mutual TLS,
//! `ssl.endpoint.identification.algorithm`).

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};

use super::settings::{KeyStore, PemSource};
use super::{TlsError, load_keystore, load_truststore, provider, truststore_origin};

/// A client config that trusts the truststore's CAs (required: Sluice bundles no public CA
/// certificates), presents the keystore's certificate when one is given (mutual TLS), and
/// checks the server's name against its certificate unless `verify_hostname` is false
/// (Kafka's `ssl.endpoint.identification.algorithm=` empty), in which case the chain is still
/// checked against the CAs. TLS 1.2 and 1.3, like Kafka's client default.
pub fn client_config(
    truststore: Option<&PemSource>,
    keystore: Option<&KeyStore>,
    verify_hostname: bool,
) -> Result<Arc<ClientConfig>, TlsError> {
    let truststore = truststore.ok_or(TlsError::TruststoreRequired)?;
    let roots = Arc::new(load_truststore(truststore)?);
    let provider = provider();
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|error| TlsError::Verifier {
            origin: truststore_origin(truststore),
            detail: error.to_string(),
        })?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            origin: "the TLS protocol versions".to_string(),
            source,
        })?;
    let builder = if verify_hostname {
        builder.with_webpki_verifier(verifier)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnlyVerifier { inner: verifier }))
    };
    let config = match keystore {
        None => builder.with_no_client_auth(),
        Some(keystore) => {
            let keystore = load_keystore(keystore)?;
            builder
                .with_client_auth_cert(keystore.chain, keystore.key)
                .map_err(|source| TlsError::Rustls {
                    origin: keystore.origin,
                    source,
                })?
        }
    };
    Ok(Arc::new(config))
}

/// Checks the server's certificate chain against the CAs like the WebPKI verifier, but not
/// the name the client connected to (Kafka's empty `ssl.endpoint.identification.algorithm`).
/// The WebPKI verifier checks the chain first and the name last, so a name error means the
/// chain, validity and usage already passed; only that error is forgiven.
#[derive(Debug)]
struct ChainOnlyVerifier {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .verify_tls12_signature(message, certificate, signature)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .verify_tls13_signature(message, certificate, signature)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
