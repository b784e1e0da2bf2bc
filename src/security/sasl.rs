//! The SASL mechanisms Kafka's brokers and clients speak, as pure state machines: no I/O, no
//! clock, no async. The broker feeds a [`SaslServer`] the `auth_bytes` of each SaslAuthenticate
//! request and answers with what it returns; the SDK does the mirror with a [`SaslClient`].
//!
//! # Layout
//! - this file: the [`Mechanism`] names, the error type, the [`CredentialStore`] a server reads,
//!   the bounds every message and field is checked against, and the shared helpers (random
//!   bytes, constant-time comparison).
//! - `scram`: SCRAM's key derivation and wire format (RFC 5802, RFC 7677; Kafka's
//!   `ScramFormatter` and `ScramMessages`): [`ScramCredential`], [`salted_password`], the
//!   saslname escaping and the parsing of each of the four messages.
//! - `plain`: PLAIN's single message (RFC 4616) and its check (Kafka's `PlainSaslServer`).
//! - `oauthbearer`: OAUTHBEARER's client message (RFC 7628, Kafka's
//!   `OAuthBearerClientInitialResponse`), the error challenge a refused token gets, and the
//!   unsecured tokens a client makes for tests (Kafka's `OAuthBearerUnsecuredLoginCallbackHandler`,
//!   librdkafka's `sasl.oauthbearer.config`). Tokens are validated by the broker's
//!   [`CredentialStore`] (`security::oauth`).
//! - `server`: [`SaslServer`], one authentication exchange on the broker's side.
//! - `client`: [`SaslClient`], the same exchange on the client's side.
//! - `jaas`: Kafka's `sasl.jaas.config` values ([`parse_jaas`]), where PLAIN's users and a
//!   client's username and password are configured.
//!
//! # What a client is told
//! Kafka's broker tells a client why authentication failed only for two PLAIN failures (wrong
//! username or password; an authorization id that is not the username): its
//! `SaslAuthenticationException`s. Every other failure (an unknown SCRAM user, a wrong proof, a
//! malformed message) is answered with one sentence naming the mechanism, because a detail
//! such as "unknown user" would tell a prober which users exist. OAUTHBEARER is the third
//! exception, as in Kafka: a refused token is answered with RFC 7628's error challenge
//! (`{"status":"invalid_token"}`), and that JSON is the message of the failure that follows.
//! [`SaslError::response_message`] is that rule in one place; the error's `Debug` keeps the
//! detail for the broker's log.

mod client;
mod jaas;
mod oauthbearer;
mod plain;
mod scram;
mod server;

pub use client::SaslClient;
pub use jaas::{JAAS_FILE_BYTES_MAX, JaasConfig, parse_jaas, parse_jaas_file};
pub use oauthbearer::{
    ClientInitialResponse, KVSEP, OAUTHBEARER_TOKEN_BYTES_MAX, UnsecuredLogin, check_extension,
    parse_client_initial_response,
};
pub use scram::{ScramCredential, salted_password};
pub use server::SaslServer;

use std::fmt;

/// The fewest PBKDF2 iterations Kafka accepts for a SCRAM credential (`ScramMechanism`'s
/// minimum, RFC 7677's recommendation). A server refuses a stored credential with fewer and a
/// client refuses a server asking for fewer.
pub const SCRAM_ITERATIONS_MIN: u32 = 4096;
/// The most PBKDF2 iterations Kafka's AlterUserScramCredentials accepts. A client refuses a
/// server asking for more: iterations cost the client CPU, so a hostile server must not pick
/// them freely.
pub const SCRAM_ITERATIONS_MAX: u32 = 16384;

/// The largest SASL message either side accepts, checked before anything is parsed. Real
/// messages are a few hundred bytes; the bound keeps a hostile peer from making us allocate.
pub const SASL_MESSAGE_BYTES_MAX: usize = 64 * 1024;
/// The longest user name (after SCRAM's `=2C`/`=3D` unescaping) either side accepts.
pub const USERNAME_BYTES_MAX: usize = 1024;
/// The longest password PLAIN accepts, and the longest a client is configured with.
pub const PASSWORD_BYTES_MAX: usize = 1024;
/// The longest SCRAM nonce part either side accepts (the client's part, and the server's part
/// appended to it).
pub const SCRAM_NONCE_BYTES_MAX: usize = 256;
/// The longest SCRAM salt (decoded) either side accepts.
pub const SCRAM_SALT_BYTES_MAX: usize = 1024;
/// The most bytes [`random_bytes`] hands out at once.
pub const RANDOM_BYTES_MAX: usize = 1024;

/// A SASL mechanism Sluice serves, by the name Kafka's `sasl.enabled.mechanisms` and
/// SaslHandshake use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// RFC 4616: the password in clear, inside one message (so only over TLS in production).
    Plain,
    /// RFC 7677: SCRAM with SHA-256; the server stores only derived keys.
    ScramSha256,
    /// SCRAM with SHA-512, as Kafka defines it by analogy with RFC 7677.
    ScramSha512,
    /// RFC 7628: an OAuth 2 bearer token (a JWT), checked by the broker's validator
    /// (KIP-255, KIP-768); the token's expiry bounds the session.
    OAuthBearer,
}

impl Mechanism {
    /// Every mechanism, in the order Kafka lists them.
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
        Mechanism::OAuthBearer,
    ];

    /// The mechanism's name on the wire and in configuration.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// The mechanism named `name`. Exact match, as Kafka's broker compares SaslHandshake's
    /// mechanism with `sasl.enabled.mechanisms`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|mechanism| mechanism.name() == name)
    }

    /// Whether this is one of the SCRAM mechanisms (whose credentials are metadata records).
    pub fn is_scram(self) -> bool {
        matches!(self, Mechanism::ScramSha256 | Mechanism::ScramSha512)
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a SASL step, a credential derivation or a JAAS value failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    /// The server refused the credentials and Kafka tells the client exactly why (its
    /// `SaslAuthenticationException`): `message` is Kafka's sentence, sent as it is.
    #[error("{message}")]
    AuthenticationFailed { message: String },
    /// The server refused the credentials (unknown user, wrong proof, unusable stored
    /// credential). The client is told only the sentence below; `reason` is for the log.
    #[error(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    )]
    InvalidCredentials {
        mechanism: Mechanism,
        reason: String,
    },
    /// OAUTHBEARER: the token was refused, the client was sent the error challenge and
    /// acknowledged it (RFC 7628's `%x01`). `challenge` (the JSON, e.g.
    /// `{"status":"invalid_token"}`) is what Kafka tells the client; `reason` is for the log.
    #[error("{challenge}")]
    InvalidToken { challenge: String, reason: String },
    /// A message did not follow the mechanism's grammar or exceeded a bound.
    #[error("malformed {mechanism} message: {what}")]
    Malformed { mechanism: Mechanism, what: String },
    /// A well-formed request for something Sluice does not serve (delegation tokens, SCRAM's
    /// mandatory extensions, channel binding).
    #[error("unsupported: {what}")]
    Unsupported { what: String },
    /// A configuration value or a credential's parameters are unusable.
    #[error("bad SASL configuration: {what}")]
    BadConfig { what: String },
    /// Client side: the server answered with SCRAM's `e=` error attribute.
    #[error("SASL authentication using {mechanism} failed with error: {message}")]
    ServerError {
        mechanism: Mechanism,
        message: String,
    },
    /// Client side: the server could not be trusted (its nonce does not extend ours, it asked
    /// for iterations outside Kafka's bounds, or its signature does not prove it knows the key).
    #[error("{mechanism} server verification failed: {what}")]
    ServerNotVerified { mechanism: Mechanism, what: String },
    /// A step out of order: after the exchange completed or failed (an exchange is single use),
    /// or before the client's first message.
    #[error("SASL exchange out of order: {what}")]
    OutOfOrder { what: &'static str },
    /// The operating system's random source failed.
    #[error("random source failed: {what}")]
    Random { what: String },
}

impl SaslError {
    /// The `error_message` a broker puts in SaslAuthenticate's response for this error, worded
    /// as Kafka's broker words it: an [`SaslError::AuthenticationFailed`] verbatim, every other
    /// error as the one sentence naming `mechanism` (see the module's opening).
    pub fn response_message(&self, mechanism: Mechanism) -> String {
        match self {
            SaslError::AuthenticationFailed { message } => message.clone(),
            SaslError::InvalidToken { challenge, .. } => challenge.clone(),
            _ => format!(
                "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
            ),
        }
    }
}

/// Where a [`SaslServer`] looks credentials up. The broker implements it over its
/// configuration (PLAIN's `user_<name>` JAAS options, the listener's OAUTHBEARER validator)
/// and the metadata image (SCRAM credentials, from `UserScramCredentialRecord`s).
pub trait CredentialStore {
    /// The PLAIN password of `username`, if the user exists.
    fn plain_password(&self, username: &str) -> Option<Vec<u8>>;
    /// The stored SCRAM credential of `username` for `mechanism`, if there is one.
    fn scram_credential(&self, mechanism: Mechanism, username: &str) -> Option<ScramCredential>;
    /// OAUTHBEARER: the token's principal and expiry if the listener's validator accepts
    /// `token` at `now_ms` (UNIX milliseconds). A store without a validator refuses every
    /// token.
    fn validate_bearer_token(
        &self,
        token: &str,
        now_ms: u64,
    ) -> Result<BearerToken, TokenRejection> {
        let _ = (token, now_ms);
        Err(TokenRejection::invalid_token(
            "no OAUTHBEARER validator is configured".into(),
        ))
    }
}

/// A bearer token a validator accepted (Kafka's `OAuthBearerToken`, what Sluice uses of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BearerToken {
    /// The principal's name (the `sub` claim, or the one configured): `User:<principal>`.
    pub principal: String,
    /// The token's `exp`, in UNIX milliseconds: the session ends there at the latest.
    pub expires_at_ms: u64,
}

/// Why a validator refused a token: RFC 7628's error status (`invalid_token`, or
/// `insufficient_scope` with the scope that was required) for the client, the reason for the
/// broker's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRejection {
    pub status: &'static str,
    /// `insufficient_scope`: the required scope, as Kafka writes it (`[a, b]`).
    pub scope: Option<String>,
    pub reason: String,
}

impl TokenRejection {
    pub fn invalid_token(reason: String) -> TokenRejection {
        TokenRejection {
            status: "invalid_token",
            scope: None,
            reason,
        }
    }

    pub fn insufficient_scope(scope: String, reason: String) -> TokenRejection {
        TokenRejection {
            status: "insufficient_scope",
            scope: Some(scope),
            reason,
        }
    }

    /// The error challenge the server sends (RFC 7628 section 3.2.2), worded as Kafka's
    /// `OAuthBearerSaslServer.jsonErrorResponse` words it: `{"status":"invalid_token"}`, with
    /// `, "scope":"..."` when a scope was missing.
    pub fn challenge(&self) -> String {
        let mut json = format!("{{\"status\":{}", oauthbearer::json_string(self.status));
        if let Some(scope) = &self.scope {
            json.push_str(&format!(", \"scope\":{}", oauthbearer::json_string(scope)));
        }
        json.push('}');
        json
    }
}

/// What a [`SaslServer`] step produced. The bytes go in SaslAuthenticate's `auth_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exchange {
    /// Send `0` and wait for the client's next message.
    Continue(Vec<u8>),
    /// Authenticated as `username`: send `response` (empty for PLAIN and OAUTHBEARER, SCRAM's
    /// server-final message) and the session's principal is `User:<username>`.
    /// `expires_at_ms` (UNIX milliseconds): when the credential expires (an OAUTHBEARER
    /// token's `exp`), which bounds the session as Kafka's `SaslServerAuthenticator` bounds it.
    Done {
        response: Vec<u8>,
        username: String,
        expires_at_ms: Option<u64>,
    },
}

/// `len` bytes from the operating system's random source, for salts and nonces.
pub fn random_bytes(len: usize) -> Result<Vec<u8>, SaslError> {
    if len > RANDOM_BYTES_MAX {
        return Err(SaslError::BadConfig {
            what: format!("{len} random bytes asked for, at most {RANDOM_BYTES_MAX}"),
        });
    }
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes).map_err(|error| SaslError::Random {
        what: error.to_string(),
    })?;
    Ok(bytes)
}

/// Whether `a` and `b` are equal, in time that depends on their lengths only (never on where
/// they differ), so a prober cannot learn a key or a password byte by byte from timing.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanism_names_round_trip_and_are_exact() {
        for mechanism in Mechanism::ALL {
            assert_eq!(Mechanism::from_name(mechanism.name()), Some(mechanism));
            assert_eq!(mechanism.to_string(), mechanism.name());
        }
        assert_eq!(Mechanism::from_name("plain"), None);
        assert_eq!(Mechanism::from_name("SCRAM-SHA-1"), None);
        assert_eq!(Mechanism::from_name("GSSAPI"), None);
        assert_eq!(Mechanism::from_name("oauthbearer"), None);
        assert_eq!(
            Mechanism::from_name("OAUTHBEARER"),
            Some(Mechanism::OAuthBearer)
        );
        assert!(!Mechanism::OAuthBearer.is_scram());
        assert!(!Mechanism::Plain.is_scram());
        assert!(Mechanism::ScramSha256.is_scram());
        assert!(Mechanism::ScramSha512.is_scram());
    }

    #[test]
    fn response_message_hides_everything_but_kafkas_told_failures() {
        let told = SaslError::AuthenticationFailed {
            message: "Authentication failed: Invalid username or password".into(),
        };
        assert_eq!(
            told.response_message(Mechanism::Plain),
            "Authentication failed: Invalid username or password"
        );
        let hidden = SaslError::InvalidCredentials {
            mechanism: Mechanism::ScramSha256,
            reason: "unknown user alice".into(),
        };
        let generic = "Authentication failed during authentication due to invalid credentials \
                       with SASL mechanism SCRAM-SHA-256";
        assert_eq!(hidden.response_message(Mechanism::ScramSha256), generic);
        assert_eq!(hidden.to_string(), generic);
        let malformed = SaslError::Malformed {
            mechanism: Mechanism::ScramSha256,
            what: "no nonce".into(),
        };
        assert_eq!(malformed.response_message(Mechanism::ScramSha256), generic);
        // OAUTHBEARER's refused token: the client is told the error challenge, as in Kafka.
        let refused = SaslError::InvalidToken {
            challenge: TokenRejection::invalid_token("expired".into()).challenge(),
            reason: "expired".into(),
        };
        assert_eq!(
            refused.response_message(Mechanism::OAuthBearer),
            r#"{"status":"invalid_token"}"#
        );
        assert_eq!(
            TokenRejection::insufficient_scope("[write]".into(), "no write".into()).challenge(),
            r#"{"status":"insufficient_scope", "scope":"[write]"}"#
        );
    }

    #[test]
    fn random_bytes_are_bounded_and_vary() {
        let a = random_bytes(32).unwrap();
        let b = random_bytes(32).unwrap();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(random_bytes(0).unwrap().is_empty());
        assert!(matches!(
            random_bytes(RANDOM_BYTES_MAX + 1),
            Err(SaslError::BadConfig { .. })
        ));
    }

    #[test]
    fn constant_time_eq_compares_content_and_length() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
