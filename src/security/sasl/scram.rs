//! SCRAM's keys and wire format (RFC 5802, with RFC 7677's SHA-256 and Kafka's SHA-512), the
//! parts both sides share.
//!
//! # Keys
//! ```text
//! SaltedPassword  = Hi(password, salt, iterations)          PBKDF2-HMAC-H, output one digest
//! ClientKey       = HMAC(SaltedPassword, "Client Key")
//! StoredKey       = H(ClientKey)                             stored by the server
//! ServerKey       = HMAC(SaltedPassword, "Server Key")       stored by the server
//! AuthMessage     = client-first-message-bare "," server-first-message ","
//!                   client-final-message-without-proof
//! ClientSignature = HMAC(StoredKey, AuthMessage)
//! ClientProof     = ClientKey XOR ClientSignature            sent by the client
//! ServerSignature = HMAC(ServerKey, AuthMessage)             sent by the server
//! ```
//! The server recovers ClientKey as ClientProof XOR ClientSignature and accepts when
//! H(ClientKey) is its StoredKey: it never holds the password nor anything that logs in.
//! Like Kafka, the password is used as its UTF-8 bytes (no SASLprep).
//!
//! # Messages
//! ```text
//! client-first  gs2-header client-first-bare
//!   gs2-header          "n," ["a=" saslname] ","     ("y" and "p=" channel binding refused)
//!   client-first-bare   "n=" saslname ",r=" c-nonce *("," key "=" value)
//! server-first  "r=" c-nonce s-nonce ",s=" base64(salt) ",i=" iterations *("," extension)
//! client-final  "c=" base64(gs2-header) ",r=" c-nonce s-nonce *("," extension) ",p=" base64(proof)
//! server-final  "v=" base64(ServerSignature) | "e=" error
//! ```
//! A saslname writes `,` as `=2C` and `=` as `=3D`; any other `=` is invalid. A nonce is
//! printable ASCII without `,`. Kafka's one extension is `tokenauth=true` (the user name is a
//! delegation token id), which Sluice refuses: it does not serve delegation tokens.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use super::{
    Mechanism, PASSWORD_BYTES_MAX, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN,
    SCRAM_NONCE_BYTES_MAX, SCRAM_SALT_BYTES_MAX, SaslError, USERNAME_BYTES_MAX, constant_time_eq,
};

/// The longest salted password [`ScramCredential::from_salted_password`] accepts. Kafka takes
/// any non-empty length (HMAC takes any key); Hi's output is one digest (32 or 64 bytes).
const SALTED_PASSWORD_BYTES_MAX: usize = 1024;
/// The most extensions a client-first message may carry (Kafka knows one).
const EXTENSIONS_MAX: usize = 16;

/// A user's SCRAM credential as the server stores it (Kafka's `ScramCredential`, carried by
/// `UserScramCredentialRecord`): enough to verify a client and to prove the server knows it,
/// not enough to log in as the user.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

// The keys stay out of logs: the server key lets its holder pose as the server.
impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("salt_bytes", &self.salt.len())
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// The credential of `password` with `salt` and `iterations` (within Kafka's bounds).
    pub fn derive(
        mechanism: Mechanism,
        password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, SaslError> {
        let salted = salted_password(mechanism, password, salt, iterations)?;
        Self::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// The credential from what AlterUserScramCredentials carries: the salt, the salted
    /// password the client computed with [`salted_password`], and the iterations.
    pub fn from_salted_password(
        mechanism: Mechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, SaslError> {
        let hash = ScramHash::of(mechanism)?;
        check_credential_parameters(salt, iterations)?;
        if salted_password.is_empty() || salted_password.len() > SALTED_PASSWORD_BYTES_MAX {
            return Err(SaslError::BadConfig {
                what: format!(
                    "salted password of {} bytes, expected 1 to {SALTED_PASSWORD_BYTES_MAX}",
                    salted_password.len()
                ),
            });
        }
        let client_key = hash.hmac(salted_password, b"Client Key")?;
        Ok(ScramCredential {
            salt: salt.to_vec(),
            stored_key: hash.digest(&client_key),
            server_key: hash.hmac(salted_password, b"Server Key")?,
            iterations,
        })
    }
}

/// SCRAM's `Hi(password, salt, iterations)`: PBKDF2 with HMAC over the mechanism's hash, one
/// digest long. A client sends it in AlterUserScramCredentials, so the broker never sees the
/// password.
pub fn salted_password(
    mechanism: Mechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Result<Vec<u8>, SaslError> {
    let hash = ScramHash::of(mechanism)?;
    check_credential_parameters(salt, iterations)?;
    if password.len() > PASSWORD_BYTES_MAX {
        return Err(SaslError::BadConfig {
            what: format!("password longer than {PASSWORD_BYTES_MAX} bytes"),
        });
    }
    Ok(hash.hi(password, salt, iterations))
}

/// Kafka's bounds on a credential that is being created: a salt and iterations within
/// [`SCRAM_ITERATIONS_MIN`]..=[`SCRAM_ITERATIONS_MAX`].
fn check_credential_parameters(salt: &[u8], iterations: u32) -> Result<(), SaslError> {
    if salt.is_empty() || salt.len() > SCRAM_SALT_BYTES_MAX {
        return Err(SaslError::BadConfig {
            what: format!(
                "salt of {} bytes, expected 1 to {SCRAM_SALT_BYTES_MAX}",
                salt.len()
            ),
        });
    }
    if !(SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&iterations) {
        return Err(SaslError::BadConfig {
            what: format!(
                "{iterations} iterations, expected {SCRAM_ITERATIONS_MIN} to {SCRAM_ITERATIONS_MAX}"
            ),
        });
    }
    Ok(())
}

/// The hash a SCRAM mechanism is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    pub(super) fn of(mechanism: Mechanism) -> Result<Self, SaslError> {
        match mechanism {
            Mechanism::ScramSha256 => Ok(ScramHash::Sha256),
            Mechanism::ScramSha512 => Ok(ScramHash::Sha512),
            Mechanism::Plain | Mechanism::OAuthBearer => Err(SaslError::BadConfig {
                what: format!("{mechanism} is not a SCRAM mechanism"),
            }),
        }
    }

    /// The digest's length in bytes: the length of every key, proof and signature.
    pub(super) fn output_len(self) -> usize {
        match self {
            ScramHash::Sha256 => 32,
            ScramHash::Sha512 => 64,
        }
    }

    pub(super) fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    pub(super) fn hmac(self, key: &[u8], data: &[u8]) -> Result<Vec<u8>, SaslError> {
        // HMAC takes keys of any length; the error exists only in the trait's signature.
        let invalid_key = |_| SaslError::BadConfig {
            what: "HMAC refused the key".into(),
        };
        Ok(match self {
            ScramHash::Sha256 => {
                let mut mac = Hmac::<Sha256>::new_from_slice(key).map_err(invalid_key)?;
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            ScramHash::Sha512 => {
                let mut mac = Hmac::<Sha512>::new_from_slice(key).map_err(invalid_key)?;
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        })
    }

    fn hi(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        debug_assert!(iterations >= 1);
        let mut salted = vec![0u8; self.output_len()];
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut salted)
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut salted)
            }
        }
        salted
    }

    /// Client side: the proof to send and the server signature to expect, from the salted
    /// password and the AuthMessage.
    pub(super) fn client_proof(
        self,
        salted_password: &[u8],
        auth_message: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>), SaslError> {
        let client_key = self.hmac(salted_password, b"Client Key")?;
        let stored_key = self.digest(&client_key);
        let client_signature = self.hmac(&stored_key, auth_message)?;
        let proof = xor(&client_key, &client_signature);
        let server_key = self.hmac(salted_password, b"Server Key")?;
        let server_signature = self.hmac(&server_key, auth_message)?;
        Ok((proof, server_signature))
    }

    /// Server side: whether `proof` proves knowledge of the ClientKey behind `stored_key`.
    /// Compared in constant time.
    pub(super) fn verify_proof(
        self,
        stored_key: &[u8],
        auth_message: &[u8],
        proof: &[u8],
    ) -> Result<bool, SaslError> {
        let client_signature = self.hmac(stored_key, auth_message)?;
        if proof.len() != client_signature.len() {
            return Ok(false);
        }
        let client_key = xor(proof, &client_signature);
        Ok(constant_time_eq(&self.digest(&client_key), stored_key))
    }
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    debug_assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// A user name as a saslname: `,` becomes `=2C` and `=` becomes `=3D`.
pub(super) fn escape_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// The user name a saslname field stands for. Refuses an empty name, NUL, any `=` not starting
/// `=2C` or `=3D`, and names longer than [`USERNAME_BYTES_MAX`] (checked on the escaped field
/// before anything is built).
pub(super) fn unescape_saslname(
    mechanism: Mechanism,
    field: &str,
    what: &str,
) -> Result<String, SaslError> {
    let malformed = |detail: String| SaslError::Malformed {
        mechanism,
        what: format!("{what}: {detail}"),
    };
    if field.is_empty() {
        return Err(malformed("empty".into()));
    }
    if field.len() > 3 * USERNAME_BYTES_MAX {
        return Err(malformed(format!("longer than {USERNAME_BYTES_MAX} bytes")));
    }
    let mut name = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find(['=', '\0']) {
        name.push_str(&rest[..at]);
        let escape = &rest[at..];
        if escape.starts_with("=2C") {
            name.push(',');
        } else if escape.starts_with("=3D") {
            name.push('=');
        } else if escape.starts_with('\0') {
            return Err(malformed("NUL character".into()));
        } else {
            return Err(malformed(format!(
                "invalid escape at byte {}: '=' must start =2C or =3D",
                field.len() - escape.len()
            )));
        }
        rest = &escape[3..];
    }
    name.push_str(rest);
    if name.len() > USERNAME_BYTES_MAX {
        return Err(malformed(format!("longer than {USERNAME_BYTES_MAX} bytes")));
    }
    Ok(name)
}

/// Refuses a nonce that is empty, longer than `max` bytes, or holds anything but printable
/// ASCII other than `,`.
pub(super) fn check_nonce(
    mechanism: Mechanism,
    nonce: &str,
    max: usize,
    what: &str,
) -> Result<(), SaslError> {
    let malformed = |detail: String| SaslError::Malformed {
        mechanism,
        what: format!("{what}: {detail}"),
    };
    if nonce.is_empty() {
        return Err(malformed("empty".into()));
    }
    if nonce.len() > max {
        return Err(malformed(format!("longer than {max} bytes")));
    }
    if let Some(at) = nonce
        .bytes()
        .position(|b| !(0x21..=0x7e).contains(&b) || b == b',')
    {
        return Err(malformed(format!(
            "byte {at} is not printable ASCII other than ','"
        )));
    }
    Ok(())
}

/// The value of attribute `name` (`name=value`) in `field`, or a malformed-message error.
fn attribute<'a>(
    mechanism: Mechanism,
    field: Option<&'a str>,
    name: &str,
    message: &str,
) -> Result<&'a str, SaslError> {
    match field.and_then(|field| field.strip_prefix(name)?.strip_prefix('=')) {
        Some(value) => Ok(value),
        None => Err(SaslError::Malformed {
            mechanism,
            what: format!(
                "{message}: expected attribute '{name}=', found {}",
                describe(field)
            ),
        }),
    }
}

fn describe(field: Option<&str>) -> String {
    match field {
        None => "the end of the message".into(),
        Some(field) => {
            let shown: String = field.chars().take(16).collect();
            format!("'{}'", shown.escape_default())
        }
    }
}

/// Decodes base64 `value`, refusing it before decoding if it would exceed `max` bytes.
fn decode_base64(
    mechanism: Mechanism,
    value: &str,
    max: usize,
    what: &str,
) -> Result<Vec<u8>, SaslError> {
    let too_long = || SaslError::Malformed {
        mechanism,
        what: format!("{what}: longer than {max} bytes"),
    };
    // Checked on the encoded length before decoding (so nothing larger is allocated), then
    // exactly on the decoded bytes.
    if value.len() > max.div_ceil(3) * 4 {
        return Err(too_long());
    }
    let decoded = BASE64.decode(value).map_err(|error| SaslError::Malformed {
        mechanism,
        what: format!("{what}: invalid base64 ({error})"),
    })?;
    if decoded.len() > max {
        return Err(too_long());
    }
    Ok(decoded)
}

pub(super) fn encode_base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// A fresh nonce part: `random_bytes` bytes from the random source, as base64 (printable, no
/// `,`, so a valid SCRAM nonce).
pub(super) fn new_nonce(random_bytes: usize) -> Result<String, SaslError> {
    Ok(encode_base64(&super::random_bytes(random_bytes)?))
}

/// A parsed client-first message. Borrowed fields point into the message.
#[derive(Debug)]
pub(super) struct ClientFirst<'a> {
    /// The gs2 header as received, including its final `,` (what `c=` must carry back).
    pub gs2_header: &'a str,
    /// The authorization id, unescaped, if the client gave one.
    pub authorization_id: Option<String>,
    pub username: String,
    pub nonce: &'a str,
    /// client-first-message-bare: the message after the gs2 header (part of AuthMessage).
    pub bare: &'a str,
    /// Kafka's `tokenauth=true` extension: the user name is a delegation token id.
    pub token_auth: bool,
}

pub(super) fn parse_client_first(
    mechanism: Mechanism,
    message: &str,
) -> Result<ClientFirst<'_>, SaslError> {
    const WHAT: &str = "client-first message";
    let malformed = |what: String| SaslError::Malformed { mechanism, what };
    let (flag, rest) = message
        .split_once(',')
        .ok_or_else(|| malformed(format!("{WHAT}: no gs2 header")))?;
    match flag {
        "n" => {}
        "y" => {
            return Err(SaslError::Unsupported {
                what: "SCRAM gs2 flag 'y' (the client supports channel binding); Sluice's \
                       mechanisms have none, so it is refused as a possible downgrade"
                    .into(),
            });
        }
        _ if flag.starts_with("p=") => {
            return Err(SaslError::Unsupported {
                what: format!("SCRAM channel binding ({flag})"),
            });
        }
        _ => {
            return Err(malformed(format!(
                "{WHAT}: invalid gs2 flag {}",
                describe(Some(flag))
            )));
        }
    }
    let (authzid_field, bare) = rest
        .split_once(',')
        .ok_or_else(|| malformed(format!("{WHAT}: gs2 header not closed by ','")))?;
    let authorization_id = if authzid_field.is_empty() {
        None
    } else {
        let saslname = attribute(mechanism, Some(authzid_field), "a", WHAT)?;
        Some(unescape_saslname(mechanism, saslname, "authorization id")?)
    };
    let gs2_header = &message[..message.len() - bare.len()];

    let mut fields = bare.split(',');
    let first = fields.next();
    if first.is_some_and(|field| field.starts_with("m=")) {
        return Err(SaslError::Unsupported {
            what: "SCRAM mandatory extension (m=)".into(),
        });
    }
    let saslname = attribute(mechanism, first, "n", WHAT)?;
    let username = unescape_saslname(mechanism, saslname, "user name")?;
    let nonce = attribute(mechanism, fields.next(), "r", WHAT)?;
    check_nonce(mechanism, nonce, SCRAM_NONCE_BYTES_MAX, "client nonce")?;
    let mut token_auth = false;
    for (index, extension) in fields.enumerate() {
        if index >= EXTENSIONS_MAX {
            return Err(malformed(format!(
                "{WHAT}: more than {EXTENSIONS_MAX} extensions"
            )));
        }
        let (key, value) = extension
            .split_once('=')
            .filter(|(key, _)| !key.is_empty())
            .ok_or_else(|| {
                malformed(format!(
                    "{WHAT}: extension {} is not key=value",
                    describe(Some(extension))
                ))
            })?;
        // Kafka reads the flag with Boolean.parseBoolean; unknown extensions are ignored.
        if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
            token_auth = true;
        }
    }
    Ok(ClientFirst {
        gs2_header,
        authorization_id,
        username,
        nonce,
        bare,
        token_auth,
    })
}

/// The gs2 header a client sends: no channel binding, no authorization id (as Kafka's Java
/// client and librdkafka send).
pub(super) const CLIENT_GS2_HEADER: &str = "n,,";

/// client-first-message-bare, to follow [`CLIENT_GS2_HEADER`].
pub(super) fn format_client_first_bare(username: &str, nonce: &str) -> String {
    format!("n={},r={nonce}", escape_saslname(username))
}

/// A parsed server-first message.
#[derive(Debug)]
pub(super) struct ServerFirst<'a> {
    /// The client's nonce followed by the server's.
    pub nonce: &'a str,
    pub salt: Vec<u8>,
    pub iterations: u32,
}

pub(super) fn parse_server_first(
    mechanism: Mechanism,
    message: &str,
) -> Result<ServerFirst<'_>, SaslError> {
    const WHAT: &str = "server-first message";
    check_server_error(mechanism, message)?;
    let mut fields = message.split(',');
    let first = fields.next();
    if first.is_some_and(|field| field.starts_with("m=")) {
        return Err(SaslError::Unsupported {
            what: "SCRAM mandatory extension (m=)".into(),
        });
    }
    let nonce = attribute(mechanism, first, "r", WHAT)?;
    check_nonce(mechanism, nonce, 2 * SCRAM_NONCE_BYTES_MAX, "nonce")?;
    let salt = decode_base64(
        mechanism,
        attribute(mechanism, fields.next(), "s", WHAT)?,
        SCRAM_SALT_BYTES_MAX,
        "salt",
    )?;
    if salt.is_empty() {
        return Err(SaslError::Malformed {
            mechanism,
            what: format!("{WHAT}: empty salt"),
        });
    }
    let iterations_field = attribute(mechanism, fields.next(), "i", WHAT)?;
    let iterations = parse_iterations(iterations_field).ok_or_else(|| SaslError::Malformed {
        mechanism,
        what: format!(
            "{WHAT}: iterations {} are not a number",
            describe(Some(iterations_field))
        ),
    })?;
    // Extensions after i= are allowed by RFC 5802 and ignored.
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

/// A decimal count without sign or leading zero, as RFC 5802's `posit-number`.
fn parse_iterations(field: &str) -> Option<u32> {
    let canonical = !field.is_empty()
        && !field.starts_with('0')
        && field.len() <= 10
        && field.bytes().all(|b| b.is_ascii_digit());
    canonical.then(|| field.parse().ok()).flatten()
}

pub(super) fn format_server_first(nonce: &str, salt: &[u8], iterations: u32) -> String {
    format!("r={nonce},s={},i={iterations}", encode_base64(salt))
}

/// A parsed client-final message.
#[derive(Debug)]
pub(super) struct ClientFinal<'a> {
    /// The decoded `c=`: the gs2 header (no channel binding data: Sluice has none).
    pub channel_binding: Vec<u8>,
    pub nonce: &'a str,
    pub proof: Vec<u8>,
    /// client-final-message-without-proof (part of AuthMessage).
    pub without_proof: &'a str,
}

pub(super) fn parse_client_final(
    mechanism: Mechanism,
    hash: ScramHash,
    message: &str,
) -> Result<ClientFinal<'_>, SaslError> {
    const WHAT: &str = "client-final message";
    // The proof is the last attribute; base64 holds no ',', so the last ',' starts it.
    let (without_proof, proof_field) =
        message
            .rsplit_once(',')
            .ok_or_else(|| SaslError::Malformed {
                mechanism,
                what: format!("{WHAT}: no proof"),
            })?;
    let proof = decode_base64(
        mechanism,
        attribute(mechanism, Some(proof_field), "p", WHAT)?,
        hash.output_len(),
        "proof",
    )?;
    let mut fields = without_proof.split(',');
    let channel_binding = decode_base64(
        mechanism,
        attribute(mechanism, fields.next(), "c", WHAT)?,
        3 * USERNAME_BYTES_MAX + 8,
        "channel binding",
    )?;
    let nonce = attribute(mechanism, fields.next(), "r", WHAT)?;
    check_nonce(mechanism, nonce, 2 * SCRAM_NONCE_BYTES_MAX, "nonce")?;
    // Extensions between r= and p= are allowed by RFC 5802 and ignored.
    Ok(ClientFinal {
        channel_binding,
        nonce,
        proof,
        without_proof,
    })
}

/// The client-final message without its proof: `c=` carries back [`CLIENT_GS2_HEADER`].
pub(super) fn format_client_final_without_proof(nonce: &str) -> String {
    format!(
        "c={},r={nonce}",
        encode_base64(CLIENT_GS2_HEADER.as_bytes())
    )
}

/// The server signature a server-final message carries, or the server's `e=` error.
pub(super) fn parse_server_final(
    mechanism: Mechanism,
    hash: ScramHash,
    message: &str,
) -> Result<Vec<u8>, SaslError> {
    check_server_error(mechanism, message)?;
    let field = message.split(',').next();
    decode_base64(
        mechanism,
        attribute(mechanism, field, "v", "server-final message")?,
        hash.output_len(),
        "server signature",
    )
}

/// A server message that is SCRAM's `e=` error attribute becomes [`SaslError::ServerError`].
fn check_server_error(mechanism: Mechanism, message: &str) -> Result<(), SaslError> {
    match message.strip_prefix("e=") {
        Some(error) => Err(SaslError::ServerError {
            mechanism,
            message: error.split(',').next().unwrap_or(error).to_owned(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(text: &str) -> Vec<u8> {
        BASE64.decode(text).unwrap()
    }

    #[test]
    fn from_salted_password_gives_the_credential_derive_gives() {
        for mechanism in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            let salt = b"a salt of some bytes";
            let derived = ScramCredential::derive(mechanism, b"secret", salt, 4096).unwrap();
            let salted = salted_password(mechanism, b"secret", salt, 4096).unwrap();
            assert_eq!(salted.len(), ScramHash::of(mechanism).unwrap().output_len());
            let from_salted =
                ScramCredential::from_salted_password(mechanism, &salted, salt, 4096).unwrap();
            assert_eq!(derived, from_salted);
            assert_eq!(derived.salt, salt);
            assert_eq!(derived.iterations, 4096);
            let other = ScramCredential::derive(mechanism, b"secret!", salt, 4096).unwrap();
            assert_ne!(derived.stored_key, other.stored_key);
        }
    }

    #[test]
    fn derive_matches_rfc_7677_keys() {
        // From RFC 7677's example: the server signature it gives is HMAC(ServerKey, AuthMessage),
        // so reproducing it checks Hi, ServerKey and the AuthMessage at once (see the server's
        // and client's tests); here, that the salted password is Hi's.
        let salt = b64("W22ZaJ0SNY7soEsUEjb6gQ==");
        let credential =
            ScramCredential::derive(Mechanism::ScramSha256, b"pencil", &salt, 4096).unwrap();
        let hash = ScramHash::Sha256;
        let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,\
             r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,\
             i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let proof = b64("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
        assert!(
            hash.verify_proof(&credential.stored_key, auth_message.as_bytes(), &proof)
                .unwrap()
        );
        assert_eq!(
            hash.hmac(&credential.server_key, auth_message.as_bytes())
                .unwrap(),
            b64("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
        );
    }

    #[test]
    fn credential_parameters_are_bounded() {
        let bad = |result: Result<ScramCredential, SaslError>| {
            assert!(
                matches!(result, Err(SaslError::BadConfig { .. })),
                "{result:?}"
            );
        };
        bad(ScramCredential::derive(
            Mechanism::ScramSha256,
            b"p",
            b"salt",
            4095,
        ));
        bad(ScramCredential::derive(
            Mechanism::ScramSha256,
            b"p",
            b"salt",
            16385,
        ));
        bad(ScramCredential::derive(
            Mechanism::ScramSha256,
            b"p",
            b"",
            4096,
        ));
        bad(ScramCredential::derive(
            Mechanism::Plain,
            b"p",
            b"salt",
            4096,
        ));
        bad(ScramCredential::from_salted_password(
            Mechanism::ScramSha512,
            b"",
            b"salt",
            4096,
        ));
        bad(ScramCredential::from_salted_password(
            Mechanism::ScramSha512,
            &[1; SALTED_PASSWORD_BYTES_MAX + 1],
            b"salt",
            4096,
        ));
        assert!(salted_password(Mechanism::ScramSha256, &[b'x'; 1025], b"salt", 4096).is_err());
    }

    #[test]
    fn credential_debug_shows_no_keys() {
        let credential =
            ScramCredential::derive(Mechanism::ScramSha256, b"p", b"salt", 4096).unwrap();
        let shown = format!("{credential:?}");
        assert!(shown.contains("iterations: 4096"), "{shown}");
        assert!(!shown.contains("key"), "{shown}");
    }

    #[test]
    fn saslnames_escape_and_unescape() {
        assert_eq!(escape_saslname("a,b=c"), "a=2Cb=3Dc");
        let name = unescape_saslname(Mechanism::ScramSha256, "a=2Cb=3Dc=3D", "user").unwrap();
        assert_eq!(name, "a,b=c=");
        assert_eq!(
            unescape_saslname(Mechanism::ScramSha256, &escape_saslname("x=2C,"), "u").unwrap(),
            "x=2C,"
        );
        for bad in ["", "a=", "a=2", "a=2c", "a=3d", "a=41", "=", "a\0b", "==3D"] {
            assert!(
                matches!(
                    unescape_saslname(Mechanism::ScramSha256, bad, "user"),
                    Err(SaslError::Malformed { .. })
                ),
                "{bad:?} accepted"
            );
        }
        let longest = "u".repeat(USERNAME_BYTES_MAX);
        assert!(unescape_saslname(Mechanism::ScramSha256, &longest, "user").is_ok());
        let too_long = "u".repeat(USERNAME_BYTES_MAX + 1);
        assert!(unescape_saslname(Mechanism::ScramSha256, &too_long, "user").is_err());
        let escaped_too_long = "=2C".repeat(USERNAME_BYTES_MAX + 1);
        assert!(unescape_saslname(Mechanism::ScramSha256, &escaped_too_long, "user").is_err());
    }

    #[test]
    fn nonces_are_printable_without_commas_and_bounded() {
        let check = |nonce: &str| check_nonce(Mechanism::ScramSha256, nonce, 8, "nonce");
        assert!(check("abc!~%$").is_ok());
        for bad in ["", "a b", "a,b", "a\tb", "é", "123456789"] {
            assert!(check(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn client_first_parses_header_name_nonce_and_extensions() {
        let message = "n,a=bob,n=bob,r=abc,tokenauth=false,other=x";
        let parsed = parse_client_first(Mechanism::ScramSha256, message).unwrap();
        assert_eq!(parsed.gs2_header, "n,a=bob,");
        assert_eq!(parsed.authorization_id.as_deref(), Some("bob"));
        assert_eq!(parsed.username, "bob");
        assert_eq!(parsed.nonce, "abc");
        assert_eq!(parsed.bare, "n=bob,r=abc,tokenauth=false,other=x");
        assert!(!parsed.token_auth);
        let token =
            parse_client_first(Mechanism::ScramSha256, "n,,n=id,r=abc,tokenauth=TRUE").unwrap();
        assert!(token.token_auth);
        assert_eq!(token.authorization_id, None);
    }

    #[test]
    fn client_first_refuses_channel_binding_and_malformed_headers() {
        fn parse(message: &str) -> Result<ClientFirst<'_>, SaslError> {
            parse_client_first(Mechanism::ScramSha512, message)
        }
        for unsupported in [
            "y,,n=u,r=abc",
            "p=tls-unique,,n=u,r=abc",
            "n,,m=x,n=u,r=abc",
        ] {
            assert!(
                matches!(parse(unsupported), Err(SaslError::Unsupported { .. })),
                "{unsupported}"
            );
        }
        for malformed in [
            "",
            "n",
            "n,",
            "x,,n=u,r=abc",
            "n,b=u,n=u,r=abc",
            "n,a=,n=u,r=abc",
            "n,,n=u",
            "n,,r=abc,n=u",
            "n,,n=,r=abc",
            "n,,n=u=,r=abc",
            "n,,n=u,r=",
            "n,,n=u,r=a b",
            "n,,n=u,r=abc,=x",
            "n,,n=u,r=abc,novalue",
        ] {
            assert!(
                matches!(parse(malformed), Err(SaslError::Malformed { .. })),
                "{malformed:?} not refused as malformed: {:?}",
                parse(malformed)
            );
        }
        let many = format!("n,,n=u,r=abc{}", ",k=v".repeat(EXTENSIONS_MAX + 1));
        assert!(matches!(parse(&many), Err(SaslError::Malformed { .. })));
        let long_nonce = format!("n,,n=u,r={}", "x".repeat(SCRAM_NONCE_BYTES_MAX + 1));
        assert!(matches!(
            parse(&long_nonce),
            Err(SaslError::Malformed { .. })
        ));
    }

    #[test]
    fn server_first_parses_and_refuses_bad_fields() {
        let parsed =
            parse_server_first(Mechanism::ScramSha256, "r=abcdef,s=c2FsdA==,i=4096,x=1").unwrap();
        assert_eq!(parsed.nonce, "abcdef");
        assert_eq!(parsed.salt, b"salt");
        assert_eq!(parsed.iterations, 4096);
        for bad in [
            "r=abc,s=c2FsdA==",
            "r=abc,s=c2FsdA==,i=",
            "r=abc,s=c2FsdA==,i=04096",
            "r=abc,s=c2FsdA==,i=-1",
            "r=abc,s=c2FsdA==,i=99999999999",
            "r=abc,s=,i=4096",
            "r=abc,s=!!,i=4096",
            "s=c2FsdA==,r=abc,i=4096",
        ] {
            assert!(
                matches!(
                    parse_server_first(Mechanism::ScramSha256, bad),
                    Err(SaslError::Malformed { .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            parse_server_first(Mechanism::ScramSha256, "e=unknown-user").unwrap_err(),
            SaslError::ServerError {
                mechanism: Mechanism::ScramSha256,
                message: "unknown-user".into()
            }
        );
        let long_salt = format!(
            "r=abc,s={},i=4096",
            encode_base64(&[0; SCRAM_SALT_BYTES_MAX + 3])
        );
        assert!(parse_server_first(Mechanism::ScramSha256, &long_salt).is_err());
    }

    #[test]
    fn client_final_splits_off_the_proof() {
        let proof = encode_base64(&[7; 32]);
        let message = format!("c=biws,r=abcdef,ext=1,p={proof}");
        let parsed =
            parse_client_final(Mechanism::ScramSha256, ScramHash::Sha256, &message).unwrap();
        assert_eq!(parsed.channel_binding, b"n,,");
        assert_eq!(parsed.nonce, "abcdef");
        assert_eq!(parsed.proof, [7; 32]);
        assert_eq!(parsed.without_proof, "c=biws,r=abcdef,ext=1");
        let too_long = format!("c=biws,r=abcdef,p={}", encode_base64(&[7; 33]));
        assert!(parse_client_final(Mechanism::ScramSha256, ScramHash::Sha256, &too_long).is_err());
        for bad in [
            "c=biws,r=abc",
            "c=biws,p=AAAA",
            "r=abc,c=biws,p=AAAA",
            "c=biws,r=abc,p=@@",
        ] {
            assert!(
                parse_client_final(Mechanism::ScramSha256, ScramHash::Sha256, bad).is_err(),
                "{bad}"
            );
        }
    }
}
