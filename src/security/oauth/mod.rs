//! The broker's OAUTHBEARER validators (KIP-255, KIP-768), chosen per listener as Kafka
//! chooses them by `listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`:
//!
//! - unset: Kafka's default, `OAuthBearerUnsecuredValidatorCallbackHandler` (`unsecured`):
//!   unsigned tokens, for tests; anyone can claim any identity, so the broker warns at start.
//! - `org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler`
//!   (`jwks`): signed JWTs verified against a JWKS file, with the issuer, audience, time and
//!   subject checks of Kafka's `ValidatorAccessTokenValidator`.
//!
//! A validator answers a token with its principal and expiry ([`BearerToken`]), which the
//! SASL exchange (`security::sasl`) turns into the session's principal and lifetime, or with
//! a [`TokenRejection`] (the client's error challenge and the log's reason).
//!
//! # Layout
//! - `jwt`: the compact serialization and typed claim reads, shared by both validators.
//! - `unsecured`: Kafka's unsecured validator.
//! - `jwks`: the key set (parsing, ring verification), the signed-token checks, and the
//!   watched file.

pub mod jwks;
mod jwt;
pub mod unsecured;

use std::fmt;
use std::time::Instant;

pub use jwks::{JwksError, JwksFile, JwksSettings, KeySet, SignedRefusal, validate_signed};
pub use unsecured::UnsecuredSettings;

use crate::security::sasl::{BearerToken, TokenRejection};

/// Kafka's default OAUTHBEARER server callback handler (unsigned tokens).
pub const UNSECURED_VALIDATOR_CLASS: &str = "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler";
/// Kafka's JWKS-checking server callback handler (KIP-768), as Kafka 3.4+ names it.
pub const JWKS_VALIDATOR_CLASS: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler";
/// The same handler by its Kafka 3.1-3.3 name (still accepted by Kafka, deprecated).
pub const JWKS_VALIDATOR_CLASS_OLD: &str =
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler";

/// Which validator a listener uses, with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValidatorSettings {
    Unsecured(UnsecuredSettings),
    Jwks(JwksSettings),
}

/// A listener's OAUTHBEARER validator, shared by its connections. Compared by its settings
/// (the keys it has read are state, not configuration).
pub struct BearerValidator {
    settings: ValidatorSettings,
    /// The JWKS validator's key file.
    jwks: Option<JwksFile>,
}

impl BearerValidator {
    pub fn new(settings: ValidatorSettings) -> BearerValidator {
        let jwks = match &settings {
            ValidatorSettings::Jwks(jwks) => Some(JwksFile::new(jwks.path.clone())),
            ValidatorSettings::Unsecured(_) => None,
        };
        BearerValidator { settings, jwks }
    }

    pub fn settings(&self) -> &ValidatorSettings {
        &self.settings
    }

    /// At the broker's start: reads the JWKS (an error stops the node: a listener that would
    /// refuse every token must not start), or warns once that the listener takes unsecured
    /// tokens.
    pub fn start(&self, listener: &str) -> Result<(), JwksError> {
        match (&self.settings, &self.jwks) {
            (ValidatorSettings::Unsecured(_), _) => {
                tracing::warn!(
                    %listener,
                    "OAUTHBEARER on listener {listener} accepts unsecured tokens (alg none, Kafka's \
                     default validator, for tests): any client can claim any identity. For \
                     production set listener.name.{}.oauthbearer.sasl.server.callback.handler.class={JWKS_VALIDATOR_CLASS} \
                     and sasl.oauthbearer.jwks.endpoint.url=file:///path/to/jwks.json",
                    listener.to_ascii_lowercase()
                );
                Ok(())
            }
            (ValidatorSettings::Jwks(settings), Some(file)) => {
                let keys = file.load()?;
                for skipped in &keys.skipped {
                    tracing::warn!(%listener, url = %settings.url, "OAUTHBEARER JWKS key skipped: {skipped}");
                }
                tracing::info!(
                    %listener,
                    url = %settings.url,
                    keys = keys.len(),
                    "OAUTHBEARER tokens are checked against the JWKS (re-read when the file changes)"
                );
                Ok(())
            }
            (ValidatorSettings::Jwks(_), None) => Ok(()),
        }
    }

    /// Validates `token` at `now_ms` (UNIX milliseconds).
    pub fn validate(&self, token: &str, now_ms: u64) -> Result<BearerToken, TokenRejection> {
        match (&self.settings, &self.jwks) {
            (ValidatorSettings::Unsecured(settings), _) => {
                unsecured::validate(token, settings, now_ms)
            }
            (ValidatorSettings::Jwks(settings), Some(file)) => {
                let now = Instant::now();
                let keys = file.keys(now).map_err(|error| {
                    TokenRejection::invalid_token(format!("no usable JWKS: {error}"))
                })?;
                match validate_signed(token, settings, &keys, now_ms) {
                    Ok(token) => Ok(token),
                    // A key rotated in since the file was read: look again (rate-limited).
                    Err(SignedRefusal::NoKey(reason)) => match file.refresh_after_miss(now) {
                        Some(fresh) => validate_signed(token, settings, &fresh, now_ms)
                            .map_err(|refusal| TokenRejection::invalid_token(refusal.reason())),
                        None => Err(TokenRejection::invalid_token(reason)),
                    },
                    Err(refusal) => Err(TokenRejection::invalid_token(refusal.reason())),
                }
            }
            (ValidatorSettings::Jwks(_), None) => Err(TokenRejection::invalid_token(
                "the JWKS validator has no key file".into(),
            )),
        }
    }
}

impl PartialEq for BearerValidator {
    fn eq(&self, other: &Self) -> bool {
        self.settings == other.settings
    }
}

impl Eq for BearerValidator {}

impl fmt::Debug for BearerValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerValidator")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::jwks::tests::{ec_signer, jwks};
    use super::*;

    #[test]
    fn a_jwks_validator_finds_a_key_rotated_in_after_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        let old = ec_signer("P-256");
        std::fs::write(&path, jwks(&[old.jwk("old")])).unwrap();
        let validator = BearerValidator::new(ValidatorSettings::Jwks(JwksSettings {
            url: format!("file://{}", path.display()),
            path: path.clone(),
            expected_audience: Vec::new(),
            expected_issuer: None,
            sub_claim: "sub".into(),
            scope_claim: "scope".into(),
            clock_skew_seconds: 30,
        }));
        validator.start("SASL_PLAINTEXT").expect("loads");
        let now_ms = 1_700_000_000_000;
        let claims = r#"{"sub":"alice","iat":1700000000,"exp":1700000600}"#;
        let token = old.sign("ES256", Some("old"), claims);
        assert_eq!(
            validator.validate(&token, now_ms).unwrap().principal,
            "alice"
        );
        let new = ec_signer("P-256");
        std::fs::write(&path, jwks(&[old.jwk("old"), new.jwk("new")])).unwrap();
        std::thread::sleep(jwks::JWKS_MISS_RELOAD_INTERVAL);
        let token = new.sign("ES256", Some("new"), claims);
        assert_eq!(
            validator.validate(&token, now_ms).unwrap().principal,
            "alice",
            "the new kid made the broker re-read the file"
        );
        let refusal = validator
            .validate(&old.sign("ES256", Some("gone"), claims), now_ms)
            .unwrap_err();
        assert_eq!(refusal.challenge(), r#"{"status":"invalid_token"}"#);
        // Compared by settings.
        assert_eq!(
            validator,
            BearerValidator::new(validator.settings().clone())
        );
    }
}
