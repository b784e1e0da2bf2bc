//! The SDK's one error type. Each variant says its cause once (no `source` chain that would
//! repeat it) and, for Kafka's errors, names the error as Kafka does and what to do about it.

use std::time::Duration;

use crate::protocol::errors;

/// Every failure of the SDK.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A client configuration value is missing or invalid.
    #[error("configuration {key}: {reason}")]
    Config {
        /// The config key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// No connection could be made to an address.
    #[error("cannot connect to {addr}: {reason}; is a broker listening there?")]
    Connect {
        /// The `host:port` tried.
        addr: String,
        /// Why it failed.
        reason: String,
    },

    /// None of the bootstrap servers (or known brokers) answered.
    #[error("no broker reachable (tried {tried}): {last}")]
    NoBrokerReachable {
        /// The addresses tried, comma-separated.
        tried: String,
        /// The last failure.
        last: Box<Error>,
    },

    /// The connection failed after it was made.
    #[error("connection to {addr} lost: {reason}")]
    Disconnected {
        /// The broker's `host:port`.
        addr: String,
        /// Why the connection ended.
        reason: String,
    },

    /// A request got no answer in time.
    #[error("{what}: no answer within {after:?}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        after: Duration,
    },

    /// The broker does not serve an API (or any version this client speaks).
    #[error(
        "{api} is not supported by broker {addr} (versions {broker_versions}, this client speaks {client_versions})"
    )]
    UnsupportedVersion {
        /// The API asked for.
        api: String,
        /// The broker's `host:port`.
        addr: String,
        /// The versions the broker serves.
        broker_versions: String,
        /// The versions this client speaks.
        client_versions: String,
    },

    /// The broker answered with a Kafka error code.
    #[error("{}", kafka_message(*code, context, message.as_deref()))]
    Kafka {
        /// Kafka's error code.
        code: i16,
        /// What was asked: "topic orders", "partition orders-3", "group g1".
        context: String,
        /// The broker's error message, when it sent one.
        message: Option<String>,
    },

    /// A request or response that could not be encoded or decoded, or an answer that does not
    /// fit the request.
    #[error("protocol: {0}")]
    Protocol(String),

    /// A partition has no committed offset and `auto.offset.reset` is `none`.
    #[error(
        "partition {partition} has no committed offset and auto.offset.reset is none; seek to an offset, or set auto.offset.reset to earliest or latest"
    )]
    NoOffset {
        /// The partition, as `topic-partition`.
        partition: String,
    },

    /// The producer, consumer or admin client was closed.
    #[error("the client is closed")]
    Closed,

    /// A transactional producer's call failed, and [`TransactionErrorKind`] says what may
    /// follow: after an abortable error only `abort_transaction` (then a new transaction);
    /// after a fatal one nothing: every later call fails with this same error.
    #[error("{cause} ({})", kind.advice())]
    Transaction {
        /// Whether the producer can go on after an abort, or not at all.
        kind: TransactionErrorKind,
        /// What failed.
        cause: Box<Error>,
    },

    /// A call the transactional producer's state does not allow (Kafka's
    /// `IllegalStateException`): a send before `begin_transaction`, a commit with no
    /// transaction, `init_transactions` twice.
    #[error(
        "cannot {operation} in transaction state {state}{}",
        state_hint(operation, state)
    )]
    TransactionState {
        /// What was asked: "send", "commit_transaction", ...
        operation: String,
        /// The producer's state then (Kafka's names: Ready, InTransaction, ...).
        state: String,
    },

    /// The record's transaction was aborted before the record was sent (Kafka's
    /// `TransactionAbortedException`).
    #[error("the record's transaction was aborted before it was sent")]
    TransactionAborted,
}

/// What a transactional producer can do after an [`Error::Transaction`] (Kafka's classes of
/// transactional errors).
///
/// - `Fatal`: the producer is unusable (PRODUCER_FENCED: another instance with the same
///   `transactional.id` took over; INVALID_PRODUCER_EPOCH from the coordinator;
///   TRANSACTIONAL_ID_AUTHORIZATION_FAILED; UNSUPPORTED_VERSION; ...). Close it; a new
///   producer with the same `transactional.id` fences what is left and goes on.
/// - `Abortable`: the current transaction cannot commit (a record failed, the coordinator
///   answered TRANSACTION_ABORTABLE or INVALID_TXN_STATE, the group refused the offsets...).
///   Call `abort_transaction`, then begin a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionErrorKind {
    /// The producer cannot go on.
    Fatal,
    /// The transaction must be aborted; the producer then goes on.
    Abortable,
}

impl TransactionErrorKind {
    fn advice(self) -> &'static str {
        match self {
            TransactionErrorKind::Fatal => {
                "fatal: the producer cannot be used any more; close it and create another"
            }
            TransactionErrorKind::Abortable => {
                "abortable: call abort_transaction, then begin a new transaction"
            }
        }
    }
}

fn state_hint(operation: &str, state: &str) -> &'static str {
    match (operation, state) {
        (_, "Uninitialized") => "; call init_transactions first",
        ("send" | "send_offsets_to_transaction" | "commit_transaction", "Ready") => {
            "; call begin_transaction first"
        }
        ("begin_transaction", "InTransaction") => "; commit or abort the current transaction first",
        _ => "",
    }
}

/// A result with the SDK's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub use crate::protocol::topic_partition::io_reason;

impl Error {
    /// A Kafka error code with what it was about; `None` for code 0.
    pub fn kafka(code: i16, context: impl Into<String>, message: Option<&str>) -> Option<Error> {
        (code != errors::NONE).then(|| Error::from_code(code, context, message))
    }

    /// A code the caller knows is an error (not NONE), with what it was about.
    pub(crate) fn from_code(code: i16, context: impl Into<String>, message: Option<&str>) -> Error {
        Error::Kafka {
            code,
            context: context.into(),
            message: message.filter(|m| !m.is_empty()).map(str::to_owned),
        }
    }

    /// The Kafka error code, for `Kafka` errors.
    pub fn code(&self) -> Option<i16> {
        match self {
            Error::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether a transactional producer cannot go on after this error (see
    /// [`TransactionErrorKind::Fatal`]): close it.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Error::Transaction {
                kind: TransactionErrorKind::Fatal,
                ..
            }
        )
    }

    /// Whether a transactional producer must abort its transaction after this error (see
    /// [`TransactionErrorKind::Abortable`]), then may begin another.
    pub fn is_abortable(&self) -> bool {
        matches!(
            self,
            Error::Transaction {
                kind: TransactionErrorKind::Abortable,
                ..
            }
        )
    }

    /// Whether authentication failed (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
    /// ILLEGAL_SASL_STATE): Kafka's `AuthenticationException`s. The credentials or the
    /// mechanism are wrong, so no retry mends it; clients say it at once instead of retrying
    /// until a timeout. Not [`Error::is_retriable`].
    pub fn is_authentication(&self) -> bool {
        matches!(
            self.code(),
            Some(
                errors::SASL_AUTHENTICATION_FAILED
                    | errors::UNSUPPORTED_SASL_MECHANISM
                    | errors::ILLEGAL_SASL_STATE
            )
        )
    }

    /// Whether trying again (after refreshing metadata or reconnecting) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Kafka { code, .. } => is_retriable_code(*code),
            Error::Connect { .. }
            | Error::NoBrokerReachable { .. }
            | Error::Disconnected { .. }
            | Error::Timeout { .. } => true,
            _ => false,
        }
    }
}

/// Kafka's retriable errors (`RetriableException` subclasses) that the SDK meets.
pub fn is_retriable_code(code: i16) -> bool {
    matches!(
        code,
        errors::CORRUPT_MESSAGE
            | errors::UNKNOWN_TOPIC_OR_PARTITION
            | errors::LEADER_NOT_AVAILABLE
            | errors::NOT_LEADER_OR_FOLLOWER
            | errors::REQUEST_TIMED_OUT
            | errors::COORDINATOR_LOAD_IN_PROGRESS
            | errors::COORDINATOR_NOT_AVAILABLE
            | errors::NOT_COORDINATOR
            | errors::NOT_ENOUGH_REPLICAS
            | errors::NOT_ENOUGH_REPLICAS_AFTER_APPEND
            | errors::NOT_CONTROLLER
            | errors::KAFKA_STORAGE_ERROR
            | errors::FETCH_SESSION_ID_NOT_FOUND
            | errors::INVALID_FETCH_SESSION_EPOCH
            | errors::FENCED_LEADER_EPOCH
            | errors::UNKNOWN_LEADER_EPOCH
            | errors::OFFSET_NOT_AVAILABLE
            | errors::ELIGIBLE_LEADERS_NOT_AVAILABLE
            | errors::UNSTABLE_OFFSET_COMMIT
            | errors::THROTTLING_QUOTA_EXCEEDED
    )
}

/// `NAME: context: broker message. what to do`, e.g. "UNKNOWN_TOPIC_OR_PARTITION: topic nope:
/// the topic does not exist; create it (sluice topics create) or check its name".
fn kafka_message(code: i16, context: &str, message: Option<&str>) -> String {
    let mut text = errors::name(code).into_owned();
    // A broker's message may open with the error's name in words ("invalid partitions: ..."),
    // which the name before it already says.
    let spoken = format!("{}: ", text.to_lowercase().replace('_', " "));
    let message = message.map(|m| m.strip_prefix(spoken.as_str()).unwrap_or(m));
    for part in [Some(context), message, hint(code)].into_iter().flatten() {
        if !part.is_empty() && !text.contains(part) {
            text.push_str(": ");
            text.push_str(part);
        }
    }
    text
}

/// What a user can do about the errors people meet most.
fn hint(code: i16) -> Option<&'static str> {
    Some(match code {
        errors::UNKNOWN_TOPIC_OR_PARTITION => {
            "the topic or partition does not exist; create it (sluice topics create) or check the name"
        }
        errors::TOPIC_ALREADY_EXISTS => "choose another name, or delete the topic first",
        errors::MESSAGE_TOO_LARGE | errors::RECORD_LIST_TOO_LARGE => {
            "send smaller records, or raise the topic's max.message.bytes (and the producer's max.request.size)"
        }
        errors::TOPIC_AUTHORIZATION_FAILED
        | errors::GROUP_AUTHORIZATION_FAILED
        | errors::CLUSTER_AUTHORIZATION_FAILED => {
            "the principal is not allowed to do this; ask an administrator for an ACL"
        }
        errors::NOT_ENOUGH_REPLICAS => {
            "fewer in-sync replicas than min.insync.replicas; bring the replicas' brokers back or use fewer acks"
        }
        errors::INVALID_REPLICATION_FACTOR => {
            "the replication factor must be at least 1 and at most the number of brokers"
        }
        errors::INVALID_PARTITIONS => {
            "a partition count out of range, or brokers at their max.broker.partitions \
             (`sluice cluster status --bootstrap-controller` shows partitions/max)"
        }
        errors::POLICY_VIOLATION | errors::INVALID_CONFIG => {
            "see `sluice configs keys` for the keys and their ranges"
        }
        errors::NON_EMPTY_GROUP => "stop the group's consumers first",
        errors::GROUP_ID_NOT_FOUND => "no such group; `sluice groups list` shows the groups",
        errors::PRODUCER_FENCED => {
            "a newer producer with the same transactional.id has started (or the transaction timed out)"
        }
        errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => {
            "the principal may not use this transactional.id; ask an administrator for an ACL"
        }
        errors::TRANSACTIONAL_ID_NOT_FOUND => {
            "no such transactional id; `sluice transactions list` shows them"
        }
        errors::SASL_AUTHENTICATION_FAILED => {
            "check the credentials (sasl.jaas.config, or sasl.username and sasl.password) and sasl.mechanism"
        }
        errors::ILLEGAL_SASL_STATE => {
            "the listener does not expect SASL here; check security.protocol against the listener's port"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_errors_are_named_with_their_context_and_a_hint() {
        let error =
            Error::kafka(errors::UNKNOWN_TOPIC_OR_PARTITION, "topic nope", None).expect("an error");
        assert_eq!(
            error.to_string(),
            "UNKNOWN_TOPIC_OR_PARTITION: topic nope: the topic or partition does not exist; \
             create it (sluice topics create) or check the name"
        );
        assert!(error.is_retriable());
        let error = Error::kafka(
            errors::INVALID_REPLICA_ASSIGNMENT,
            "topic t",
            Some("replica 1 appears twice"),
        )
        .expect("an error");
        assert_eq!(
            error.to_string(),
            "INVALID_REPLICA_ASSIGNMENT: topic t: replica 1 appears twice"
        );
        assert!(!error.is_retriable());
        assert!(Error::kafka(errors::NONE, "topic t", None).is_none());
        // The broker's message naming the error again in words is said once.
        let error = Error::kafka(
            errors::INVALID_PARTITIONS,
            "topic t",
            Some("invalid partitions: broker 1 is full"),
        )
        .expect("an error");
        assert!(
            error
                .to_string()
                .starts_with("INVALID_PARTITIONS: topic t: broker 1 is full"),
            "{error}"
        );
    }

    #[test]
    fn authentication_failures_are_named_once_and_not_retriable() {
        let error = Error::from_code(
            errors::SASL_AUTHENTICATION_FAILED,
            "SASL PLAIN authentication as alice to b:1",
            Some("Authentication failed: Invalid username or password"),
        );
        let text = error.to_string();
        assert!(
            text.starts_with(
                "SASL_AUTHENTICATION_FAILED: SASL PLAIN authentication as alice to b:1: \
                 Authentication failed: Invalid username or password: check the credentials"
            ),
            "{text}"
        );
        assert_eq!(text.matches("SASL_AUTHENTICATION_FAILED").count(), 1);
        assert!(error.is_authentication());
        assert!(!error.is_retriable());
        for code in [
            errors::UNSUPPORTED_SASL_MECHANISM,
            errors::ILLEGAL_SASL_STATE,
        ] {
            let error = Error::from_code(code, "SASL", None);
            assert!(
                error.is_authentication() && !error.is_retriable(),
                "{error}"
            );
        }
        assert!(!Error::from_code(errors::NOT_COORDINATOR, "group g", None).is_authentication());
        let lost = Error::Disconnected {
            addr: "b:1".into(),
            reason: "closed".into(),
        };
        assert!(!lost.is_authentication());
    }
}
