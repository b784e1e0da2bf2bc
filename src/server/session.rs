//! A connection's session: its listener, who the client is (its principal) and, on a SASL
//! listener, where its authentication stands. Kafka's model (`SaslServerAuthenticator`): on a
//! SASL listener a client may send ApiVersions, then SaslHandshake (naming a mechanism the
//! listener enables), then SaslAuthenticate until the mechanism is done; anything else before
//! that closes the connection, and a failed authentication is answered
//! SASL_AUTHENTICATION_FAILED and then closed. Until authenticated, frames are bounded by
//! `sasl.server.max.receive.size`, not `socket.request.max.bytes`.
//!
//! With `connections.max.reauth.ms` (KIP-368) a session lasts that long, and an OAUTHBEARER
//! session no longer than its token (Kafka's `SaslServerAuthenticator`: the lifetime is the
//! shorter of the two, the token's alone when the key is unset): the client renews it on the
//! same connection (SaslHandshake v1 and SaslAuthenticate, same principal and mechanism)
//! while the old session goes on serving; past its end any other request closes the
//! connection. Otherwise SaslHandshake and SaslAuthenticate of an authenticated client, or on
//! a PLAINTEXT listener, reach their handlers, which answer ILLEGAL_SASL_STATE as Kafka's do.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::security::ListenerSecurity;
use crate::controller::sasl_mechanism;
use crate::metrics::Metrics;
use crate::protocol::errors::KafkaError;
use crate::security::sasl::{
    BearerToken, CredentialStore, Exchange, Mechanism, SaslServer, ScramCredential, TokenRejection,
};
use sluice_raft::image::MetadataImage;

/// The principal of a client that did not authenticate (PLAINTEXT listeners).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// Where a connection's authentication stands.
enum Authentication {
    /// PLAINTEXT: nothing to do.
    NotRequired,
    /// SASL: waiting for SaslHandshake.
    AwaitingHandshake,
    /// SASL: the mechanism chosen, waiting for its first SaslAuthenticate.
    Handshaken(Mechanism),
    /// SASL: an exchange under way.
    Exchanging(Box<SaslServer>),
    /// SaslHandshake v0: the exchange goes on in raw tokens, size-prefixed frames without a
    /// request header, until the mechanism is done.
    RawTokens(Box<SaslServer>),
    Authenticated,
}

pub struct Session {
    security: Arc<ListenerSecurity>,
    principal: Arc<str>,
    authentication: Authentication,
    /// The mechanism the client authenticated with (re-authentication must use it again).
    mechanism: Option<Mechanism>,
    /// When the authenticated session ends (`connections.max.reauth.ms`, an OAUTHBEARER
    /// token's expiry); past it, a request other than a re-authentication closes the
    /// connection (KIP-368). A session that ends can be renewed.
    expires_at: Option<Instant>,
    /// The lifetime given the client in SaslAuthenticate (0: no end).
    session_lifetime_ms: u64,
    /// A re-authentication under way: the session it renews, still serving until it expires.
    renewing: bool,
}

impl Session {
    pub fn new(security: Arc<ListenerSecurity>) -> Session {
        let authentication = if security.protocol.is_sasl() {
            Authentication::AwaitingHandshake
        } else {
            Authentication::NotRequired
        };
        Session {
            security,
            principal: Arc::from(ANONYMOUS),
            authentication,
            mechanism: None,
            expires_at: None,
            session_lifetime_ms: 0,
            renewing: false,
        }
    }

    /// On an SSL listener, the principal the client's certificate names (`User:<mapped
    /// subject>`). On SASL_SSL the SASL login names it instead, as in Kafka.
    pub fn set_certificate_principal(&mut self, principal: String) {
        if !self.security.protocol.is_sasl() {
            self.principal = Arc::from(principal);
        }
    }

    /// The client's principal: `User:<name>` once authenticated, `User:ANONYMOUS` on a
    /// PLAINTEXT listener.
    pub fn principal(&self) -> &Arc<str> {
        &self.principal
    }

    /// Whether requests other than the handshake's may be served (a session being
    /// re-authenticated goes on serving until it expires).
    pub fn is_authenticated(&self) -> bool {
        self.renewing
            || matches!(
                self.authentication,
                Authentication::NotRequired | Authentication::Authenticated
            )
    }

    /// `connections.max.reauth.ms` of this listener, when re-authentication is on.
    fn reauth_ms(&self) -> Option<u64> {
        (self.security.protocol.is_sasl() && self.security.connections_max_reauth_ms > 0)
            .then_some(self.security.connections_max_reauth_ms)
    }

    /// Before a frame is decoded: `Ok(true)` when the session answers it (SASL requests of
    /// a client authenticating or re-authenticating: `handshake`, `authenticate`),
    /// `Ok(false)` when its handler does, `Err` when the connection must close (a request
    /// before authentication, or after the session expired).
    pub fn admits(&self, api_key: ApiKey, now: Instant) -> Result<bool, String> {
        let sasl = matches!(api_key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate);
        if self.is_authenticated() {
            if let Some(expires_at) = self.expires_at
                && now >= expires_at
                && !sasl
            {
                return Err(format!(
                    "a {api_key:?} request after the SASL session expired \
                     (connections.max.reauth.ms, or its OAUTHBEARER token expired) without \
                     re-authentication"
                ));
            }
            // KIP-368: an authenticated client renews a session that ends on the same
            // connection.
            let renewal = self.expires_at.is_some()
                && (matches!(self.authentication, Authentication::Authenticated) || self.renewing);
            return Ok(sasl && renewal);
        }
        match api_key {
            ApiKey::ApiVersions => Ok(false),
            ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => Ok(true),
            other => Err(format!(
                "a {other:?} request before SASL authentication completed"
            )),
        }
    }

    /// Whether the next frame is a raw SASL token (after SaslHandshake v0).
    pub fn expects_raw_token(&self) -> bool {
        matches!(self.authentication, Authentication::RawTokens(_))
    }

    /// One raw token after SaslHandshake v0: the token to send back (size-prefixed by the
    /// caller), or `Err` to close the connection, as Kafka does on a failure in this mode.
    pub fn raw_token(
        &mut self,
        token: &[u8],
        metrics: &Metrics,
        image: &MetadataImage,
    ) -> Result<Vec<u8>, String> {
        let Authentication::RawTokens(server) =
            std::mem::replace(&mut self.authentication, Authentication::AwaitingHandshake)
        else {
            return Err("a raw SASL token outside SaslHandshake v0".into());
        };
        match self.step(server, token, metrics, image, Authentication::RawTokens) {
            Step::Continue(token) | Step::Done(token) => Ok(token),
            Step::Failed(message) => Err(format!("SASL authentication failed: {message}")),
        }
    }

    /// One step of the mechanism with the listener's PLAIN users and the quorum's SCRAM
    /// credentials (as of `image`): `waiting` keeps the server for the next step. The outcome
    /// is counted and logged here, once for both framings.
    fn step(
        &mut self,
        mut server: Box<SaslServer>,
        token: &[u8],
        metrics: &Metrics,
        image: &MetadataImage,
        waiting: fn(Box<SaslServer>) -> Authentication,
    ) -> Step {
        let credentials = Credentials {
            listener: &self.security,
            image,
        };
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        match server.step(token, &credentials, now_ms) {
            Ok(Exchange::Continue(challenge)) => {
                self.authentication = waiting(server);
                Step::Continue(challenge)
            }
            Ok(Exchange::Done {
                response,
                username,
                expires_at_ms,
            }) => {
                let principal: Arc<str> = Arc::from(format!("User:{username}"));
                let mechanism = server.mechanism();
                if self.renewing
                    && (principal != self.principal || Some(mechanism) != self.mechanism)
                {
                    tracing::info!(
                        principal = %self.principal,
                        renewed_as = %principal,
                        "SASL re-authentication refused: the principal or mechanism changed"
                    );
                    metrics
                        .sasl_authentication_failures
                        .fetch_add(1, Ordering::Relaxed);
                    return Step::Failed(
                        "re-authentication must keep the principal and the SASL mechanism".into(),
                    );
                }
                if self.renewing {
                    metrics
                        .sasl_reauthentications
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%principal, "SASL re-authentication succeeded");
                } else {
                    metrics.sasl_authentications.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%principal, "SASL authentication succeeded");
                }
                self.principal = principal;
                self.mechanism = Some(mechanism);
                self.authentication = Authentication::Authenticated;
                self.renewing = false;
                let lifetime_ms = session_lifetime_ms(self.reauth_ms(), expires_at_ms, now_ms);
                self.expires_at = lifetime_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
                self.session_lifetime_ms = lifetime_ms.unwrap_or(0);
                Step::Done(response)
            }
            Err(error) => {
                // The log keeps the detail; the client is told only what Kafka tells it.
                tracing::info!(?error, "SASL authentication failed");
                metrics
                    .sasl_authentication_failures
                    .fetch_add(1, Ordering::Relaxed);
                Step::Failed(error.response_message(server.mechanism()))
            }
        }
    }

    /// Answers SaslHandshake (of `version`) and SaslAuthenticate of a client authenticating.
    pub fn handshake(
        &mut self,
        request: &SaslHandshakeRequest,
        version: i16,
    ) -> (SaslHandshakeResponse, bool) {
        let enabled: Vec<StrBytes> = self
            .security
            .mechanisms
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect();
        let mut response = SaslHandshakeResponse::default().with_mechanisms(enabled);
        // KIP-368: an authenticated client (v1 handshakes only: v0's raw tokens cannot share
        // the connection with requests) starts renewing a session that ends.
        if matches!(self.authentication, Authentication::Authenticated)
            && self.expires_at.is_some()
            && version >= 1
        {
            self.renewing = true;
            self.authentication = Authentication::AwaitingHandshake;
        }
        if !matches!(self.authentication, Authentication::AwaitingHandshake) {
            response.error_code = KafkaError::IllegalSaslState.code();
            return (response, true);
        }
        let asked = request.mechanism.as_str();
        match Mechanism::from_name(asked).filter(|m| self.security.mechanisms.contains(m)) {
            Some(mechanism) if version == 0 => {
                self.authentication =
                    Authentication::RawTokens(Box::new(SaslServer::new(mechanism)));
                (response, false)
            }
            Some(mechanism) => {
                self.authentication = Authentication::Handshaken(mechanism);
                (response, false)
            }
            None => {
                tracing::info!(
                    mechanism = asked,
                    "SASL handshake with a mechanism this listener does not enable"
                );
                response.error_code = KafkaError::UnsupportedSaslMechanism.code();
                (response, true)
            }
        }
    }

    /// One SaslAuthenticate step; on failure the answer is SASL_AUTHENTICATION_FAILED with
    /// the mechanism's message, and the connection closes after it.
    pub fn authenticate(
        &mut self,
        request: &SaslAuthenticateRequest,
        metrics: &Metrics,
        image: &MetadataImage,
    ) -> (SaslAuthenticateResponse, bool) {
        let mut response = SaslAuthenticateResponse::default();
        let server =
            match std::mem::replace(&mut self.authentication, Authentication::AwaitingHandshake) {
                Authentication::Handshaken(mechanism) => Box::new(SaslServer::new(mechanism)),
                Authentication::Exchanging(server) => server,
                other => {
                    self.authentication = other;
                    response.error_code = KafkaError::IllegalSaslState.code();
                    response.error_message = Some(StrBytes::from_static_str(
                        "SaslAuthenticate before SaslHandshake",
                    ));
                    return (response, true);
                }
            };
        match self.step(
            server,
            &request.auth_bytes,
            metrics,
            image,
            Authentication::Exchanging,
        ) {
            Step::Continue(token) => {
                response.auth_bytes = token.into();
                (response, false)
            }
            Step::Done(token) => {
                response.auth_bytes = token.into();
                // v1+: how long the session lasts, so the client renews it in time.
                response.session_lifetime_ms =
                    i64::try_from(self.session_lifetime_ms).unwrap_or(i64::MAX);
                (response, false)
            }
            Step::Failed(message) => {
                response.error_code = KafkaError::SaslAuthenticationFailed.code();
                response.error_message = Some(StrBytes::from_string(message));
                (response, true)
            }
        }
    }
}

/// How long a session lasts, as Kafka's `SaslServerAuthenticator` computes it: the shorter of
/// `connections.max.reauth.ms` and the credential's remaining life (an OAUTHBEARER token's
/// `exp`), either alone when the other is absent, none when both are. A credential already
/// expired (within the validator's clock skew) gives a session of 0 ms: over at once.
fn session_lifetime_ms(
    reauth_ms: Option<u64>,
    credential_expires_at_ms: Option<u64>,
    now_ms: u64,
) -> Option<u64> {
    let credential_ms = credential_expires_at_ms.map(|expires| expires.saturating_sub(now_ms));
    match (reauth_ms, credential_ms) {
        (Some(reauth), Some(credential)) => Some(reauth.min(credential)),
        (reauth, credential) => reauth.or(credential),
    }
}

/// What one step of a SASL exchange came to.
enum Step {
    Continue(Vec<u8>),
    Done(Vec<u8>),
    /// What the client may be told.
    Failed(String),
}

/// The credentials SASL mechanisms look up: PLAIN's users from the listener's JAAS config,
/// SCRAM's from the metadata quorum (so a user created on any broker logs in on all).
struct Credentials<'a> {
    listener: &'a ListenerSecurity,
    image: &'a MetadataImage,
}

impl CredentialStore for Credentials<'_> {
    fn validate_bearer_token(
        &self,
        token: &str,
        now_ms: u64,
    ) -> Result<BearerToken, TokenRejection> {
        match &self.listener.oauthbearer {
            Some(validator) => validator.validate(token, now_ms),
            None => Err(TokenRejection::invalid_token(
                "the listener has no OAUTHBEARER validator".into(),
            )),
        }
    }

    fn plain_password(&self, username: &str) -> Option<Vec<u8>> {
        self.listener
            .plain_users
            .get(username)
            .map(|password| password.as_bytes().to_vec())
    }

    fn scram_credential(&self, mechanism: Mechanism, username: &str) -> Option<ScramCredential> {
        let (_, credential) = self
            .image
            .scram_credentials
            .get(username)?
            .iter()
            .find(|(stored, _)| sasl_mechanism(**stored) == mechanism)?;
        Some(ScramCredential {
            salt: credential.salt.clone(),
            stored_key: credential.stored_key.clone(),
            server_key: credential.server_key.clone(),
            iterations: credential.iterations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::session_lifetime_ms;

    #[test]
    fn a_session_lasts_the_shorter_of_reauth_and_the_token() {
        let now = 1_000_000;
        assert_eq!(session_lifetime_ms(None, None, now), None);
        assert_eq!(session_lifetime_ms(Some(60_000), None, now), Some(60_000));
        // connections.max.reauth.ms unset: the token alone bounds the session (Kafka).
        assert_eq!(
            session_lifetime_ms(None, Some(now + 3_000), now),
            Some(3_000)
        );
        assert_eq!(
            session_lifetime_ms(Some(60_000), Some(now + 3_000), now),
            Some(3_000)
        );
        assert_eq!(
            session_lifetime_ms(Some(2_000), Some(now + 3_000), now),
            Some(2_000)
        );
        // Expired within the clock skew: over at once.
        assert_eq!(session_lifetime_ms(None, Some(now - 5), now), Some(0));
    }
}
