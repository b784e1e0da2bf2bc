//! PLAIN (RFC 4616): one client message, `authzid NUL authcid NUL passwd`, checked against the
//! configured password (Kafka's `PlainSaslServer` with its `PlainServerCallbackHandler`). The
//! authorization id must be empty or the user name: Sluice, like Kafka, has no proxy users.

use sha2::{Digest, Sha256};

use super::{
    CredentialStore, Mechanism, PASSWORD_BYTES_MAX, SaslError, USERNAME_BYTES_MAX, constant_time_eq,
};

/// Kafka's answer to an unknown user and to a wrong password alike, so neither tells a prober
/// which users exist.
pub(super) const INVALID_USERNAME_OR_PASSWORD: &str =
    "Authentication failed: Invalid username or password";
/// Kafka's answer to an authorization id other than the user name.
pub(super) const AUTHORIZATION_ID_MISMATCH: &str =
    "Authentication failed: Client requested an authorization id that is different from username";

/// The user a PLAIN message authenticates, or why it does not.
pub(super) fn authenticate(
    message: &[u8],
    store: &dyn CredentialStore,
) -> Result<String, SaslError> {
    let malformed = |what: String| SaslError::Malformed {
        mechanism: Mechanism::Plain,
        what,
    };
    let mut tokens = message.split(|&byte| byte == 0);
    let (Some(authorization_id), Some(username), Some(password), None) =
        (tokens.next(), tokens.next(), tokens.next(), tokens.next())
    else {
        let count = message.iter().filter(|&&byte| byte == 0).count() + 1;
        return Err(malformed(format!(
            "expected 3 tokens separated by NUL (authzid, username, password), got {count}"
        )));
    };
    if username.is_empty() {
        return Err(malformed("username not specified".into()));
    }
    if password.is_empty() {
        return Err(malformed("password not specified".into()));
    }
    if username.len() > USERNAME_BYTES_MAX || authorization_id.len() > USERNAME_BYTES_MAX {
        return Err(malformed(format!(
            "username or authorization id longer than {USERNAME_BYTES_MAX} bytes"
        )));
    }
    if password.len() > PASSWORD_BYTES_MAX {
        return Err(malformed(format!(
            "password longer than {PASSWORD_BYTES_MAX} bytes"
        )));
    }
    let username =
        std::str::from_utf8(username).map_err(|_| malformed("username is not UTF-8".into()))?;
    let authorization_id = std::str::from_utf8(authorization_id)
        .map_err(|_| malformed("authorization id is not UTF-8".into()))?;

    // Digests of equal length, compared in constant time: the time taken tells nothing of the
    // expected password, not even its length, and an unknown user costs the same comparison.
    let given = Sha256::digest(password);
    let expected = store.plain_password(username);
    let expected_digest = Sha256::digest(expected.as_deref().unwrap_or_default());
    let matches = constant_time_eq(&given, &expected_digest);
    if expected.is_none() || !matches {
        return Err(SaslError::AuthenticationFailed {
            message: INVALID_USERNAME_OR_PASSWORD.into(),
        });
    }
    // Checked after the password, as Kafka does: a client learns nothing before proving it
    // holds the password.
    if !authorization_id.is_empty() && authorization_id != username {
        return Err(SaslError::AuthenticationFailed {
            message: AUTHORIZATION_ID_MISMATCH.into(),
        });
    }
    Ok(username.to_owned())
}

/// The PLAIN message a client sends: no authorization id, then the user name and password.
pub(super) fn client_message(username: &str, password: &str) -> Vec<u8> {
    debug_assert!(!username.contains('\0') && !password.contains('\0'));
    let mut message = Vec::with_capacity(username.len() + password.len() + 2);
    message.push(0);
    message.extend_from_slice(username.as_bytes());
    message.push(0);
    message.extend_from_slice(password.as_bytes());
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::sasl::ScramCredential;

    struct Users;

    impl CredentialStore for Users {
        fn plain_password(&self, username: &str) -> Option<Vec<u8>> {
            (username == "alice").then(|| b"alice-secret".to_vec())
        }
        fn scram_credential(&self, _: Mechanism, _: &str) -> Option<ScramCredential> {
            None
        }
    }

    fn failure_message(message: &[u8]) -> String {
        match authenticate(message, &Users) {
            Err(SaslError::AuthenticationFailed { message }) => message,
            other => panic!("expected an authentication failure, got {other:?}"),
        }
    }

    #[test]
    fn right_password_authenticates_with_or_without_authzid() {
        assert_eq!(
            authenticate(b"\0alice\0alice-secret", &Users).unwrap(),
            "alice"
        );
        assert_eq!(
            authenticate(b"alice\0alice\0alice-secret", &Users).unwrap(),
            "alice"
        );
        assert_eq!(
            authenticate(&client_message("alice", "alice-secret"), &Users).unwrap(),
            "alice"
        );
    }

    #[test]
    fn wrong_password_and_unknown_user_fail_alike() {
        let wrong = failure_message(b"\0alice\0alice-secreT");
        let prefix = failure_message(b"\0alice\0alice-secre");
        let unknown = failure_message(b"\0mallory\0alice-secret");
        assert_eq!(wrong, INVALID_USERNAME_OR_PASSWORD);
        assert_eq!(prefix, INVALID_USERNAME_OR_PASSWORD);
        assert_eq!(unknown, INVALID_USERNAME_OR_PASSWORD);
    }

    #[test]
    fn authzid_other_than_the_username_fails_as_kafka_words_it() {
        assert_eq!(
            failure_message(b"bob\0alice\0alice-secret"),
            AUTHORIZATION_ID_MISMATCH
        );
        // The password is checked first: a wrong one says nothing about the authzid.
        assert_eq!(
            failure_message(b"bob\0alice\0wrong"),
            INVALID_USERNAME_OR_PASSWORD
        );
    }

    #[test]
    fn missing_nuls_empty_fields_and_oversized_fields_are_malformed() {
        let long_name = format!("\0{}\0pw", "a".repeat(USERNAME_BYTES_MAX + 1));
        let long_password = format!("\0alice\0{}", "p".repeat(PASSWORD_BYTES_MAX + 1));
        for message in [
            &b""[..],
            b"alice",
            b"alice\0alice-secret",
            b"\0alice\0alice-secret\0",
            b"\0\0alice-secret",
            b"\0alice\0",
            b"\0al\xffice\0pw",
            long_name.as_bytes(),
            long_password.as_bytes(),
        ] {
            assert!(
                matches!(
                    authenticate(message, &Users),
                    Err(SaslError::Malformed {
                        mechanism: Mechanism::Plain,
                        ..
                    })
                ),
                "{message:?} not refused as malformed"
            );
        }
    }
}
