//! One authentication exchange on the client's side, for the SDK: the messages to put in
//! SaslAuthenticate requests after SaslHandshake, and the check that a SCRAM server knew the
//! credential (its signature), so a client never trusts an impostor that merely said yes.

use std::fmt;

use super::scram::{
    self, ScramHash, format_client_final_without_proof, parse_server_final, parse_server_first,
    salted_password,
};
use super::{
    KVSEP, Mechanism, PASSWORD_BYTES_MAX, SASL_MESSAGE_BYTES_MAX, SCRAM_ITERATIONS_MAX,
    SCRAM_ITERATIONS_MIN, SaslError, USERNAME_BYTES_MAX, constant_time_eq, oauthbearer, plain,
};

/// How many random bytes make the client's nonce (32 characters of base64).
const CLIENT_NONCE_RANDOM_BYTES: usize = 24;

/// The client side of one SASL exchange: [`SaslClient::first_message`], then
/// [`SaslClient::step`] with each server answer until it returns `None`.
pub struct SaslClient {
    mechanism: Mechanism,
    password: String,
    /// The first message, built once: PLAIN's only message or SCRAM's client-first.
    first_message: Vec<u8>,
    /// SCRAM's nonce (empty for PLAIN).
    client_nonce: String,
    /// SCRAM's client-first-message-bare, part of the AuthMessage (empty for PLAIN).
    client_first_bare: String,
    state: ClientState,
}

/// Where the exchange stands. The transitions, made by `first_message` and `step`:
/// ```text
/// PLAIN  Initial --first_message--> AwaitOutcome --empty answer--> Complete
/// SCRAM  Initial --first_message--> AwaitServerFirst --server-first--> AwaitServerFinal
///                --server-final with the expected signature--> Complete
/// OAUTHBEARER  Initial --first_message--> AwaitOutcome --empty answer--> Complete
///              AwaitOutcome --error challenge, answered %x01--> Refused
///              (the broker's SASL_AUTHENTICATION_FAILED comes next; any answer is an error)
/// any step that returns an error --> Failed
/// Complete and Failed are final: a step there is an error and changes nothing.
/// ```
#[derive(Debug)]
enum ClientState {
    Initial,
    AwaitOutcome,
    AwaitServerFirst,
    AwaitServerFinal {
        server_signature: Vec<u8>,
    },
    /// OAUTHBEARER: the server refused the token with this error challenge.
    Refused {
        challenge: String,
    },
    Complete,
    Failed,
}

// The password stays out of logs.
impl fmt::Debug for SaslClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslClient")
            .field("mechanism", &self.mechanism)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl SaslClient {
    /// An OAUTHBEARER client that sends `token` with the SASL `extensions`. The token is
    /// checked against Kafka's grammar and bound, the extensions against RFC 7628's.
    pub fn oauthbearer(token: &str, extensions: &[(String, String)]) -> Result<Self, SaslError> {
        let message = oauthbearer::format_client_initial_response(token, extensions);
        // The message is checked as the server will parse it: a token or an extension that
        // does not fit is said here, before anything is sent.
        oauthbearer::parse_client_initial_response(&message).map_err(|error| {
            SaslError::BadConfig {
                what: match error {
                    SaslError::Malformed { what, .. } => format!("OAUTHBEARER token: {what}"),
                    other => other.to_string(),
                },
            }
        })?;
        Ok(SaslClient {
            mechanism: Mechanism::OAuthBearer,
            password: String::new(),
            first_message: message,
            client_nonce: String::new(),
            client_first_bare: String::new(),
            state: ClientState::Initial,
        })
    }

    /// A client that authenticates `username` with `password`. Refuses an empty or oversized
    /// user name or password, and a NUL in PLAIN's (it separates PLAIN's fields).
    pub fn new(mechanism: Mechanism, username: &str, password: &str) -> Result<Self, SaslError> {
        let nonce = if mechanism.is_scram() {
            scram::new_nonce(CLIENT_NONCE_RANDOM_BYTES)?
        } else {
            String::new()
        };
        Self::build(mechanism, username, password, nonce)
    }

    /// A client whose SCRAM nonce is `client_nonce`, for tests that replay a known exchange
    /// (RFC 7677's example).
    #[cfg(test)]
    pub(crate) fn with_client_nonce(
        mechanism: Mechanism,
        username: &str,
        password: &str,
        client_nonce: &str,
    ) -> Result<Self, SaslError> {
        Self::build(mechanism, username, password, client_nonce.to_owned())
    }

    fn build(
        mechanism: Mechanism,
        username: &str,
        password: &str,
        client_nonce: String,
    ) -> Result<Self, SaslError> {
        let bad = |what: String| Err(SaslError::BadConfig { what });
        if mechanism == Mechanism::OAuthBearer {
            return bad("OAUTHBEARER sends a token, not a user name and password".into());
        }
        if username.is_empty() || username.len() > USERNAME_BYTES_MAX {
            return bad(format!(
                "user name of {} bytes, expected 1 to {USERNAME_BYTES_MAX}",
                username.len()
            ));
        }
        if password.is_empty() || password.len() > PASSWORD_BYTES_MAX {
            return bad(format!(
                "password of {} bytes, expected 1 to {PASSWORD_BYTES_MAX}",
                password.len()
            ));
        }
        if username.contains('\0') || (mechanism == Mechanism::Plain && password.contains('\0')) {
            return bad("NUL in the user name or PLAIN password".into());
        }
        let mut client_first_bare = String::new();
        let first_message = if mechanism.is_scram() {
            scram::check_nonce(
                mechanism,
                &client_nonce,
                super::SCRAM_NONCE_BYTES_MAX,
                "nonce",
            )?;
            client_first_bare = scram::format_client_first_bare(username, &client_nonce);
            format!("{}{client_first_bare}", scram::CLIENT_GS2_HEADER).into_bytes()
        } else {
            plain::client_message(username, password)
        };
        Ok(SaslClient {
            mechanism,
            password: password.to_owned(),
            first_message,
            client_nonce,
            client_first_bare,
            state: ClientState::Initial,
        })
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The first SaslAuthenticate `auth_bytes`: PLAIN's or OAUTHBEARER's only message or
    /// SCRAM's client-first. The same bytes if asked again.
    pub fn first_message(&mut self) -> Vec<u8> {
        if matches!(self.state, ClientState::Initial) {
            self.state = if self.mechanism.is_scram() {
                ClientState::AwaitServerFirst
            } else {
                ClientState::AwaitOutcome
            };
        }
        self.first_message.clone()
    }

    /// Whether the exchange completed (for SCRAM: the server proved it knows the credential).
    pub fn is_complete(&self) -> bool {
        matches!(self.state, ClientState::Complete)
    }

    /// Takes the server's answer (SaslAuthenticate response's `auth_bytes`, sent without an
    /// error code) and returns the next message to send, or `None` once the exchange is
    /// complete. An error ends the exchange.
    pub fn step(&mut self, server_message: &[u8]) -> Result<Option<Vec<u8>>, SaslError> {
        match self.state {
            ClientState::Initial => {
                return Err(SaslError::OutOfOrder {
                    what: "a server message before the client's first message",
                });
            }
            ClientState::Complete => {
                return Err(SaslError::OutOfOrder {
                    what: "the exchange is complete (a SaslClient is single use)",
                });
            }
            ClientState::Failed => {
                return Err(SaslError::OutOfOrder {
                    what: "the exchange failed (a SaslClient is single use)",
                });
            }
            _ => {}
        }
        // Failed until the step succeeds, so an error anywhere below ends the exchange.
        let state = std::mem::replace(&mut self.state, ClientState::Failed);
        let (next, reply) = self.advance(state, server_message)?;
        self.state = next;
        Ok(reply)
    }

    fn advance(
        &self,
        state: ClientState,
        server_message: &[u8],
    ) -> Result<(ClientState, Option<Vec<u8>>), SaslError> {
        let mechanism = self.mechanism;
        let malformed = |what: String| SaslError::Malformed { mechanism, what };
        if server_message.len() > SASL_MESSAGE_BYTES_MAX {
            return Err(malformed(format!(
                "server message of {} bytes, more than {SASL_MESSAGE_BYTES_MAX}",
                server_message.len()
            )));
        }
        let text = std::str::from_utf8(server_message)
            .map_err(|_| malformed("server message is not UTF-8".into()))?;
        match state {
            // Kafka's broker answers a successful PLAIN or OAUTHBEARER exchange with empty
            // bytes.
            ClientState::AwaitOutcome if text.is_empty() => Ok((ClientState::Complete, None)),
            // OAUTHBEARER's error challenge: acknowledged, and the broker's failure follows.
            ClientState::AwaitOutcome if mechanism == Mechanism::OAuthBearer => {
                let challenge = text.to_owned();
                Ok((ClientState::Refused { challenge }, Some(vec![KVSEP])))
            }
            ClientState::AwaitOutcome => Err(malformed(
                "PLAIN server answered with bytes, expected none".into(),
            )),
            ClientState::AwaitServerFirst => {
                let (client_final, server_signature) = self.client_final(text)?;
                let next = ClientState::AwaitServerFinal { server_signature };
                Ok((next, Some(client_final.into_bytes())))
            }
            ClientState::AwaitServerFinal { server_signature } => {
                let hash = ScramHash::of(mechanism)?;
                let signature = parse_server_final(mechanism, hash, text)?;
                if !constant_time_eq(&signature, &server_signature) {
                    return Err(SaslError::ServerNotVerified {
                        mechanism,
                        what: "invalid server signature in the server-final message".into(),
                    });
                }
                Ok((ClientState::Complete, None))
            }
            // The broker must fail the exchange after the challenge: an answer without an
            // error is no authentication.
            ClientState::Refused { challenge } => Err(SaslError::ServerError {
                mechanism,
                message: format!(
                    "the broker refused the token ({challenge}) and then answered without an error"
                ),
            }),
            ClientState::Initial | ClientState::Complete | ClientState::Failed => {
                Err(SaslError::OutOfOrder {
                    what: "the exchange is not awaiting a server message",
                })
            }
        }
    }

    /// SCRAM's client-final message answering `server_first`, and the server signature the
    /// server-final message must carry.
    fn client_final(&self, server_first: &str) -> Result<(String, Vec<u8>), SaslError> {
        let mechanism = self.mechanism;
        let hash = ScramHash::of(mechanism)?;
        let parsed = parse_server_first(mechanism, server_first)?;
        let not_verified = |what: String| SaslError::ServerNotVerified { mechanism, what };
        // The server must extend our nonce: otherwise it may be replaying an old exchange.
        if parsed.nonce.len() <= self.client_nonce.len()
            || !parsed.nonce.starts_with(&self.client_nonce)
        {
            return Err(not_verified(
                "server nonce does not extend the client's nonce".into(),
            ));
        }
        if !(SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&parsed.iterations) {
            return Err(not_verified(format!(
                "server asked for {} iterations, expected {SCRAM_ITERATIONS_MIN} to \
                 {SCRAM_ITERATIONS_MAX}",
                parsed.iterations
            )));
        }
        let salted = salted_password(
            mechanism,
            self.password.as_bytes(),
            &parsed.salt,
            parsed.iterations,
        )?;
        let without_proof = format_client_final_without_proof(parsed.nonce);
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let (proof, server_signature) = hash.client_proof(&salted, auth_message.as_bytes())?;
        let client_final = format!("{without_proof},p={}", scram::encode_base64(&proof));
        Ok((client_final, server_signature))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RFC_CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                    s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                    p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_client() -> SaslClient {
        SaslClient::with_client_nonce(Mechanism::ScramSha256, "user", "pencil", RFC_CLIENT_NONCE)
            .unwrap()
    }

    /// A client that has sent its first message and answered the RFC's server-first.
    fn rfc_client_awaiting_server_final() -> SaslClient {
        let mut client = rfc_client();
        client.first_message();
        client.step(RFC_SERVER_FIRST.as_bytes()).unwrap();
        client
    }

    #[test]
    fn rfc_7677_example_is_sent_byte_for_byte() {
        let mut client = rfc_client();
        assert_eq!(client.first_message(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let client_final = client.step(RFC_SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(client_final, Some(RFC_CLIENT_FINAL.as_bytes().to_vec()));
        assert!(!client.is_complete());
        assert_eq!(client.step(RFC_SERVER_FINAL.as_bytes()).unwrap(), None);
        assert!(client.is_complete());
        assert!(matches!(
            client.step(RFC_SERVER_FINAL.as_bytes()),
            Err(SaslError::OutOfOrder { .. })
        ));
        assert!(client.is_complete());
    }

    #[test]
    fn a_wrong_server_signature_fails() {
        let mut client = rfc_client_awaiting_server_final();
        let wrong = "v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
        assert!(matches!(
            client.step(wrong.as_bytes()),
            Err(SaslError::ServerNotVerified { .. })
        ));
        assert!(!client.is_complete());
        // Failed for good: the right signature afterwards does not complete it.
        assert!(client.step(RFC_SERVER_FINAL.as_bytes()).is_err());
        assert!(!client.is_complete());
    }

    #[test]
    fn a_server_error_attribute_fails_with_the_servers_text() {
        let mut client = rfc_client_awaiting_server_final();
        let error = client.step(b"e=invalid-proof").unwrap_err();
        assert_eq!(
            error,
            SaslError::ServerError {
                mechanism: Mechanism::ScramSha256,
                message: "invalid-proof".into()
            }
        );
        assert!(error.to_string().contains("invalid-proof"));
    }

    #[test]
    fn a_server_nonce_that_does_not_extend_ours_fails() {
        for server_first in [
            "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "r=XOprNGfwEbeRWgbNEkqO%hvY,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "r=rOprNGfwEbeRWgbNEkq,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        ] {
            let mut client = rfc_client();
            client.first_message();
            assert!(
                matches!(
                    client.step(server_first.as_bytes()),
                    Err(SaslError::ServerNotVerified { .. })
                ),
                "{server_first}"
            );
        }
    }

    #[test]
    fn iterations_outside_kafkas_bounds_are_refused() {
        for iterations in [1, 4095, 16385, 1_000_000] {
            let mut client = rfc_client();
            client.first_message();
            let server_first =
                format!("r={RFC_CLIENT_NONCE}abc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i={iterations}");
            assert!(
                matches!(
                    client.step(server_first.as_bytes()),
                    Err(SaslError::ServerNotVerified { .. })
                ),
                "{iterations}"
            );
        }
    }

    #[test]
    fn steps_out_of_order_are_refused() {
        let mut client = rfc_client();
        assert!(matches!(
            client.step(RFC_SERVER_FIRST.as_bytes()),
            Err(SaslError::OutOfOrder { .. })
        ));
        // first_message is idempotent.
        assert_eq!(client.first_message(), client.first_message());
        let mut plain = SaslClient::new(Mechanism::Plain, "alice", "pw").unwrap();
        assert_eq!(plain.first_message(), b"\0alice\0pw");
        assert!(matches!(
            plain.step(b"unexpected"),
            Err(SaslError::Malformed { .. })
        ));
        assert!(!plain.is_complete());
    }

    #[test]
    fn bad_client_configuration_is_refused() {
        for (mechanism, username, password) in [
            (Mechanism::Plain, "", "pw"),
            (Mechanism::Plain, "alice", ""),
            (Mechanism::Plain, "al\0ice", "pw"),
            (Mechanism::Plain, "alice", "p\0w"),
            (Mechanism::ScramSha256, "al\0ice", "pw"),
            (Mechanism::ScramSha512, "", "pw"),
        ] {
            assert!(
                matches!(
                    SaslClient::new(mechanism, username, password),
                    Err(SaslError::BadConfig { .. })
                ),
                "{mechanism} {username:?} {password:?}"
            );
        }
        let long = "x".repeat(USERNAME_BYTES_MAX + 1);
        assert!(SaslClient::new(Mechanism::ScramSha256, &long, "pw").is_err());
        assert!(SaslClient::new(Mechanism::ScramSha256, "u", &long).is_err());
    }

    #[test]
    fn scram_user_names_are_escaped_and_nonces_random() {
        let mut client = SaslClient::new(Mechanism::ScramSha512, "a,b=c", "pw").unwrap();
        let first = String::from_utf8(client.first_message()).unwrap();
        assert!(first.starts_with("n,,n=a=2Cb=3Dc,r="), "{first}");
        let mut other = SaslClient::new(Mechanism::ScramSha512, "a,b=c", "pw").unwrap();
        assert_ne!(client.first_message(), other.first_message());
    }

    #[test]
    fn debug_output_shows_no_password() {
        let client = SaslClient::new(Mechanism::Plain, "alice", "hunter2").unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn oauthbearer_sends_its_token_and_acknowledges_an_error_challenge() {
        let extensions = vec![("traceId".to_owned(), "7".to_owned())];
        let mut client = SaslClient::oauthbearer("a.b.", &extensions).expect("valid");
        assert_eq!(
            client.first_message(),
            b"n,,\x01auth=Bearer a.b.\x01traceId=7\x01\x01"
        );
        assert_eq!(client.step(b"").unwrap(), None);
        assert!(client.is_complete());

        let mut client = SaslClient::oauthbearer("a.b.", &[]).expect("valid");
        client.first_message();
        let ack = client.step(br#"{"status":"invalid_token"}"#).unwrap();
        assert_eq!(ack, Some(vec![KVSEP]));
        assert!(!client.is_complete());
        // The broker must fail now; an answer without an error is not a login.
        let error = client.step(b"").unwrap_err();
        assert!(error.to_string().contains("invalid_token"), "{error}");
        assert!(!client.is_complete());
    }

    #[test]
    fn oauthbearer_refuses_tokens_and_extensions_it_could_not_send() {
        for (token, extensions) in [
            ("", vec![]),
            ("has space", vec![]),
            ("a\x01b", vec![]),
            ("ok", vec![("auth".to_owned(), "x".to_owned())]),
            ("ok", vec![("n1".to_owned(), "x".to_owned())]),
        ] {
            let result = SaslClient::oauthbearer(token, &extensions);
            assert!(
                matches!(result, Err(SaslError::BadConfig { .. })),
                "{token:?} {extensions:?}: {result:?}"
            );
        }
        assert!(matches!(
            SaslClient::new(Mechanism::OAuthBearer, "alice", "pw"),
            Err(SaslError::BadConfig { .. })
        ));
    }
}
