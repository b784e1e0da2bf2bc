//! Kafka's error codes, declared once (`org.apache.kafka.common.protocol.Errors`): every code
//! the broker, the controller, the storage engine and the CLI use comes from here, with its
//! name for messages (`name`).

macro_rules! kafka_errors {
    ($( $name:ident = $code:expr, )*) => {
        $( pub const $name: i16 = $code; )*

        /// Kafka's name of an error code (`UNKNOWN(<code>)` for one not declared here).
        pub fn name(code: i16) -> std::borrow::Cow<'static, str> {
            match code {
                $( $code => std::borrow::Cow::Borrowed(stringify!($name)), )*
                other => std::borrow::Cow::Owned(format!("UNKNOWN({other})")),
            }
        }
    };
}

kafka_errors! {
    UNKNOWN_SERVER_ERROR = -1,
    NONE = 0,
    OFFSET_OUT_OF_RANGE = 1,
    CORRUPT_MESSAGE = 2,
    UNKNOWN_TOPIC_OR_PARTITION = 3,
    LEADER_NOT_AVAILABLE = 5,
    NOT_LEADER_OR_FOLLOWER = 6,
    REQUEST_TIMED_OUT = 7,
    MESSAGE_TOO_LARGE = 10,
    OFFSET_METADATA_TOO_LARGE = 12,
    COORDINATOR_LOAD_IN_PROGRESS = 14,
    COORDINATOR_NOT_AVAILABLE = 15,
    NOT_COORDINATOR = 16,
    INVALID_TOPIC_EXCEPTION = 17,
    RECORD_LIST_TOO_LARGE = 18,
    NOT_ENOUGH_REPLICAS = 19,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20,
    INVALID_REQUIRED_ACKS = 21,
    ILLEGAL_GENERATION = 22,
    INCONSISTENT_GROUP_PROTOCOL = 23,
    INVALID_GROUP_ID = 24,
    UNKNOWN_MEMBER_ID = 25,
    INVALID_SESSION_TIMEOUT = 26,
    REBALANCE_IN_PROGRESS = 27,
    INVALID_COMMIT_OFFSET_SIZE = 28,
    TOPIC_AUTHORIZATION_FAILED = 29,
    GROUP_AUTHORIZATION_FAILED = 30,
    CLUSTER_AUTHORIZATION_FAILED = 31,
    INVALID_TIMESTAMP = 32,
    UNSUPPORTED_VERSION = 35,
    TOPIC_ALREADY_EXISTS = 36,
    INVALID_PARTITIONS = 37,
    INVALID_REPLICATION_FACTOR = 38,
    INVALID_REPLICA_ASSIGNMENT = 39,
    INVALID_CONFIG = 40,
    NOT_CONTROLLER = 41,
    INVALID_REQUEST = 42,
    POLICY_VIOLATION = 44,
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45,
    DUPLICATE_SEQUENCE_NUMBER = 46,
    INVALID_PRODUCER_EPOCH = 47,
    KAFKA_STORAGE_ERROR = 56,
    UNKNOWN_PRODUCER_ID = 59,
    NON_EMPTY_GROUP = 68,
    GROUP_ID_NOT_FOUND = 69,
    FETCH_SESSION_ID_NOT_FOUND = 70,
    INVALID_FETCH_SESSION_EPOCH = 71,
    FENCED_LEADER_EPOCH = 74,
    UNKNOWN_LEADER_EPOCH = 75,
    STALE_BROKER_EPOCH = 77,
    OFFSET_NOT_AVAILABLE = 78,
    MEMBER_ID_REQUIRED = 79,
    PREFERRED_LEADER_NOT_AVAILABLE = 80,
    GROUP_MAX_SIZE_REACHED = 81,
    FENCED_INSTANCE_ID = 82,
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83,
    ELECTION_NOT_NEEDED = 84,
    NO_REASSIGNMENT_IN_PROGRESS = 85,
    GROUP_SUBSCRIBED_TO_TOPIC = 86,
    INVALID_RECORD = 87,
    UNSTABLE_OFFSET_COMMIT = 88,
    THROTTLING_QUOTA_EXCEEDED = 89,
    INVALID_UPDATE_VERSION = 95,
    UNKNOWN_TOPIC_ID = 100,
    INCONSISTENT_TOPIC_ID = 103,
    INELIGIBLE_REPLICA = 107,
    FENCED_MEMBER_EPOCH = 110,
    UNRELEASED_INSTANCE_ID = 111,
    UNSUPPORTED_ASSIGNOR = 112,
    STALE_MEMBER_EPOCH = 113,
    INVALID_REGULAR_EXPRESSION = 119,
    UNSUPPORTED_ENDPOINT_TYPE = 120,
}

/// `NAME (code)`, as messages show an error.
pub fn describe(code: i16) -> String {
    format!("{} ({code})", name(code))
}

#[cfg(test)]
mod tests {
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
}
