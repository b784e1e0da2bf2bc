//! Kafka's error codes, declared once (`org.apache.kafka.common.protocol.Errors`).
//!
//! [`KafkaError`] is what the broker's layers pass around: every error but NONE (success is
//! `Ok`), so a `match` over errors is checked by the compiler. The wire code (`i16`) appears
//! only where a response is encoded or decoded: [`KafkaError::code`], [`KafkaError::from_code`],
//! [`code_of`]. The `i16` constants name codes for that encoding and decoding.

macro_rules! kafka_errors {
    ($( $name:ident / $variant:ident = $code:expr, )*) => {
        /// The code of success.
        pub const NONE: i16 = 0;
        $( pub const $name: i16 = $code; )*

        /// A Kafka error (any code but NONE).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum KafkaError {
            $( $variant, )*
            /// A code this table does not declare, as it was received.
            Unknown(i16),
        }

        impl KafkaError {
            /// The wire code.
            pub const fn code(self) -> i16 {
                match self {
                    $( KafkaError::$variant => $code, )*
                    KafkaError::Unknown(code) => code,
                }
            }

            /// The error a wire code names; `None` for NONE.
            pub const fn from_code(code: i16) -> Option<KafkaError> {
                match code {
                    NONE => None,
                    $( $code => Some(KafkaError::$variant), )*
                    other => Some(KafkaError::Unknown(other)),
                }
            }

            /// Kafka's name (`UNKNOWN` for a code not declared here).
            pub const fn name(self) -> &'static str {
                match self {
                    $( KafkaError::$variant => stringify!($name), )*
                    KafkaError::Unknown(_) => "UNKNOWN",
                }
            }
        }

        /// Kafka's name of an error code (`UNKNOWN(<code>)` for one not declared here).
        pub fn name(code: i16) -> std::borrow::Cow<'static, str> {
            match code {
                NONE => std::borrow::Cow::Borrowed("NONE"),
                $( $code => std::borrow::Cow::Borrowed(stringify!($name)), )*
                other => std::borrow::Cow::Owned(format!("UNKNOWN({other})")),
            }
        }
    };
}

kafka_errors! {
    UNKNOWN_SERVER_ERROR / UnknownServerError = -1,
    OFFSET_OUT_OF_RANGE / OffsetOutOfRange = 1,
    CORRUPT_MESSAGE / CorruptMessage = 2,
    UNKNOWN_TOPIC_OR_PARTITION / UnknownTopicOrPartition = 3,
    LEADER_NOT_AVAILABLE / LeaderNotAvailable = 5,
    NOT_LEADER_OR_FOLLOWER / NotLeaderOrFollower = 6,
    REQUEST_TIMED_OUT / RequestTimedOut = 7,
    BROKER_NOT_AVAILABLE / BrokerNotAvailable = 8,
    MESSAGE_TOO_LARGE / MessageTooLarge = 10,
    OFFSET_METADATA_TOO_LARGE / OffsetMetadataTooLarge = 12,
    NETWORK_EXCEPTION / NetworkException = 13,
    COORDINATOR_LOAD_IN_PROGRESS / CoordinatorLoadInProgress = 14,
    COORDINATOR_NOT_AVAILABLE / CoordinatorNotAvailable = 15,
    NOT_COORDINATOR / NotCoordinator = 16,
    INVALID_TOPIC_EXCEPTION / InvalidTopicException = 17,
    RECORD_LIST_TOO_LARGE / RecordListTooLarge = 18,
    NOT_ENOUGH_REPLICAS / NotEnoughReplicas = 19,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND / NotEnoughReplicasAfterAppend = 20,
    INVALID_REQUIRED_ACKS / InvalidRequiredAcks = 21,
    ILLEGAL_GENERATION / IllegalGeneration = 22,
    INCONSISTENT_GROUP_PROTOCOL / InconsistentGroupProtocol = 23,
    INVALID_GROUP_ID / InvalidGroupId = 24,
    UNKNOWN_MEMBER_ID / UnknownMemberId = 25,
    INVALID_SESSION_TIMEOUT / InvalidSessionTimeout = 26,
    REBALANCE_IN_PROGRESS / RebalanceInProgress = 27,
    INVALID_COMMIT_OFFSET_SIZE / InvalidCommitOffsetSize = 28,
    TOPIC_AUTHORIZATION_FAILED / TopicAuthorizationFailed = 29,
    GROUP_AUTHORIZATION_FAILED / GroupAuthorizationFailed = 30,
    CLUSTER_AUTHORIZATION_FAILED / ClusterAuthorizationFailed = 31,
    INVALID_TIMESTAMP / InvalidTimestamp = 32,
    UNSUPPORTED_SASL_MECHANISM / UnsupportedSaslMechanism = 33,
    ILLEGAL_SASL_STATE / IllegalSaslState = 34,
    UNSUPPORTED_VERSION / UnsupportedVersion = 35,
    TOPIC_ALREADY_EXISTS / TopicAlreadyExists = 36,
    INVALID_PARTITIONS / InvalidPartitions = 37,
    INVALID_REPLICATION_FACTOR / InvalidReplicationFactor = 38,
    INVALID_REPLICA_ASSIGNMENT / InvalidReplicaAssignment = 39,
    INVALID_CONFIG / InvalidConfig = 40,
    NOT_CONTROLLER / NotController = 41,
    INVALID_REQUEST / InvalidRequest = 42,
    POLICY_VIOLATION / PolicyViolation = 44,
    OUT_OF_ORDER_SEQUENCE_NUMBER / OutOfOrderSequenceNumber = 45,
    DUPLICATE_SEQUENCE_NUMBER / DuplicateSequenceNumber = 46,
    INVALID_PRODUCER_EPOCH / InvalidProducerEpoch = 47,
    INVALID_TXN_STATE / InvalidTxnState = 48,
    INVALID_PRODUCER_ID_MAPPING / InvalidProducerIdMapping = 49,
    INVALID_TRANSACTION_TIMEOUT / InvalidTransactionTimeout = 50,
    CONCURRENT_TRANSACTIONS / ConcurrentTransactions = 51,
    TRANSACTION_COORDINATOR_FENCED / TransactionCoordinatorFenced = 52,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED / TransactionalIdAuthorizationFailed = 53,
    SECURITY_DISABLED / SecurityDisabled = 54,
    OPERATION_NOT_ATTEMPTED / OperationNotAttempted = 55,
    KAFKA_STORAGE_ERROR / KafkaStorageError = 56,
    SASL_AUTHENTICATION_FAILED / SaslAuthenticationFailed = 58,
    UNKNOWN_PRODUCER_ID / UnknownProducerId = 59,
    NON_EMPTY_GROUP / NonEmptyGroup = 68,
    GROUP_ID_NOT_FOUND / GroupIdNotFound = 69,
    FETCH_SESSION_ID_NOT_FOUND / FetchSessionIdNotFound = 70,
    INVALID_FETCH_SESSION_EPOCH / InvalidFetchSessionEpoch = 71,
    FENCED_LEADER_EPOCH / FencedLeaderEpoch = 74,
    UNKNOWN_LEADER_EPOCH / UnknownLeaderEpoch = 75,
    STALE_BROKER_EPOCH / StaleBrokerEpoch = 77,
    OFFSET_NOT_AVAILABLE / OffsetNotAvailable = 78,
    MEMBER_ID_REQUIRED / MemberIdRequired = 79,
    PREFERRED_LEADER_NOT_AVAILABLE / PreferredLeaderNotAvailable = 80,
    GROUP_MAX_SIZE_REACHED / GroupMaxSizeReached = 81,
    FENCED_INSTANCE_ID / FencedInstanceId = 82,
    ELIGIBLE_LEADERS_NOT_AVAILABLE / EligibleLeadersNotAvailable = 83,
    ELECTION_NOT_NEEDED / ElectionNotNeeded = 84,
    NO_REASSIGNMENT_IN_PROGRESS / NoReassignmentInProgress = 85,
    GROUP_SUBSCRIBED_TO_TOPIC / GroupSubscribedToTopic = 86,
    INVALID_RECORD / InvalidRecord = 87,
    UNSTABLE_OFFSET_COMMIT / UnstableOffsetCommit = 88,
    THROTTLING_QUOTA_EXCEEDED / ThrottlingQuotaExceeded = 89,
    PRODUCER_FENCED / ProducerFenced = 90,
    RESOURCE_NOT_FOUND / ResourceNotFound = 91,
    DUPLICATE_RESOURCE / DuplicateResource = 92,
    UNACCEPTABLE_CREDENTIAL / UnacceptableCredential = 93,
    INVALID_UPDATE_VERSION / InvalidUpdateVersion = 95,
    UNKNOWN_TOPIC_ID / UnknownTopicId = 100,
    INCONSISTENT_TOPIC_ID / InconsistentTopicId = 103,
    TRANSACTIONAL_ID_NOT_FOUND / TransactionalIdNotFound = 105,
    INELIGIBLE_REPLICA / IneligibleReplica = 107,
    FENCED_MEMBER_EPOCH / FencedMemberEpoch = 110,
    UNRELEASED_INSTANCE_ID / UnreleasedInstanceId = 111,
    UNSUPPORTED_ASSIGNOR / UnsupportedAssignor = 112,
    STALE_MEMBER_EPOCH / StaleMemberEpoch = 113,
    UNSUPPORTED_ENDPOINT_TYPE / UnsupportedEndpointType = 115,
    TRANSACTION_ABORTABLE / TransactionAbortable = 120,
    INVALID_REGULAR_EXPRESSION / InvalidRegularExpression = 128,
}

impl KafkaError {
    /// The outcome a wire code reports: `Ok` for NONE.
    pub const fn check(code: i16) -> Result<(), KafkaError> {
        match KafkaError::from_code(code) {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }
}

impl std::fmt::Display for KafkaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KafkaError::Unknown(code) => write!(f, "UNKNOWN({code})"),
            known => f.write_str(known.name()),
        }
    }
}

impl std::error::Error for KafkaError {}

/// The wire code of an outcome: NONE for `Ok`.
pub fn code_of<T>(result: &Result<T, KafkaError>) -> i16 {
    match result {
        Ok(_) => NONE,
        Err(error) => error.code(),
    }
}

/// A Kafka error with the message the response carries (`error_message` fields), or the log
/// line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub error: KafkaError,
    pub message: String,
}

impl ApiError {
    pub fn new(error: KafkaError, message: impl Into<String>) -> ApiError {
        ApiError {
            error,
            message: message.into(),
        }
    }
}

impl From<KafkaError> for ApiError {
    fn from(error: KafkaError) -> ApiError {
        ApiError {
            error,
            message: String::new(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.error)
        } else {
            write!(f, "{}: {}", self.error, self.message)
        }
    }
}

impl std::error::Error for ApiError {}

/// `NAME (code)`, as messages show an error.
pub fn describe(code: i16) -> String {
    format!("{} ({code})", name(code))
}

#[cfg(test)]
mod tests {
    /// Every code here is the one Kafka's table gives its name (two were wrong once: a
    /// client saw UNSUPPORTED_ENDPOINT_TYPE as TRANSACTION_ABORTABLE).
    #[test]
    fn codes_are_kafkas() {
        for code in -1..200i16 {
            let Some(ours) = super::KafkaError::from_code(code) else {
                continue;
            };
            if let super::KafkaError::Unknown(_) = ours {
                continue;
            }
            let theirs =
                kafka_protocol::ResponseError::try_from_code(code).map(|e| format!("{e:?}"));
            assert_eq!(
                theirs.as_deref(),
                Some(format!("{ours:?}").as_str()),
                "code {code}"
            );
        }
    }

    #[test]
    fn codes_have_their_kafka_names() {
        assert_eq!(
            super::name(super::NOT_LEADER_OR_FOLLOWER),
            "NOT_LEADER_OR_FOLLOWER"
        );
        assert_eq!(super::name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(super::name(9999), "UNKNOWN(9999)");
        assert_eq!(super::describe(7), "REQUEST_TIMED_OUT (7)");
    }

    #[test]
    fn the_enum_round_trips_every_code() {
        use super::KafkaError;
        for code in -1..=200i16 {
            match KafkaError::from_code(code) {
                None => assert_eq!(code, super::NONE),
                Some(error) => {
                    assert_eq!(error.code(), code);
                    assert_eq!(error.to_string(), super::name(code));
                }
            }
        }
        assert_eq!(
            KafkaError::check(super::NOT_COORDINATOR),
            Err(KafkaError::NotCoordinator)
        );
        assert_eq!(KafkaError::check(super::NONE), Ok(()));
        assert_eq!(KafkaError::from_code(9999), Some(KafkaError::Unknown(9999)));
        assert_eq!(
            super::code_of(&Err::<(), _>(KafkaError::RequestTimedOut)),
            7
        );
    }
}
