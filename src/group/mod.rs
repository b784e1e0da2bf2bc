//! The group coordinator: consumer groups and their committed offsets, kept as records in the
//! internal compacted topic `__consumer_offsets` (Kafka's design and record formats).
//!
//! The coordinator of a group is the leader of partition `abs(java_hash(group)) % partitions`
//! of `__consumer_offsets`, so Kafka's tools agree on it. This broker follows the replica
//! layer's leadership events: when it becomes leader of such a partition at epoch E it replays
//! the partition into memory (requests for its groups get COORDINATOR_LOAD_IN_PROGRESS until
//! then); when it stops leading, it drops them (NOT_COORDINATOR, and waiting members are told
//! to find the coordinator again).
//!
//! Every change that must survive (a commit, a rebalance's assignment, a group becoming empty
//! or deleted) is a record, replayed into memory as it is written and appended to the
//! partition with `acks=all` semantics (rolled back if the append fails), answered only once
//! the in-sync replicas hold it; the append is refused unless this broker still leads at the
//! epoch it loaded under.
//!
//! - `classic`: one group's state machine (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), with
//!   its transition table.
//! - `consumer`: one KIP-848 consumer group (ConsumerGroupHeartbeat), with the server-side
//!   `uniform` and `range` assignors.
//! - `state`: a group of either kind, and what both answer alike (offsets, fencing, expiry).
//! - `records`: the key and value formats of `__consumer_offsets`.
//! - `shard`: one partition's groups as a coordinator runtime shard (`crate::coordinator`):
//!   every request an operation, every durable change a record replayed, timers per group.
//! - `coordinator`: which partitions this broker coordinates, the request entry points.

pub mod classic;
pub mod consumer;
mod coordinator;
pub mod lag;
pub mod records;
pub mod shard;
#[cfg(test)]
mod shard_tests;
pub mod state;

pub use coordinator::{CommitOutcome, GroupCoordinator, ListedGroup, OffsetCommit};

/// Kafka's name for the offsets topic.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The coordinator's settings (`offsets.*`, `group.*` keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    pub offsets_topic_num_partitions: i32,
    pub offsets_topic_replication_factor: i16,
    pub offsets_topic_segment_bytes: i64,
    pub offsets_retention_ms: u64,
    pub offsets_retention_check_interval_ms: u64,
    pub offsets_commit_timeout_ms: u64,
    pub offset_metadata_max_bytes: usize,
    pub initial_rebalance_delay_ms: u64,
    pub min_session_timeout_ms: u64,
    pub max_session_timeout_ms: u64,
    pub max_size: usize,
    pub consumer_session_timeout_ms: u64,
    pub consumer_heartbeat_interval_ms: u64,
    pub consumer_max_size: usize,
    pub consumer_protocol_enabled: bool,
}

/// A committed offset, as OffsetFetch returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// Settings for unit tests: no initial delay, short retention, generous bounds.
#[cfg(test)]
pub(crate) fn test_config() -> GroupConfig {
    GroupConfig {
        offsets_topic_num_partitions: 1,
        offsets_topic_replication_factor: 1,
        offsets_topic_segment_bytes: 1 << 20,
        offsets_retention_ms: 60_000,
        offsets_retention_check_interval_ms: 1_000,
        offsets_commit_timeout_ms: 5_000,
        offset_metadata_max_bytes: 4096,
        initial_rebalance_delay_ms: 0,
        min_session_timeout_ms: 0,
        max_session_timeout_ms: 1_000_000,
        max_size: 100,
        consumer_session_timeout_ms: 45_000,
        consumer_heartbeat_interval_ms: 5_000,
        consumer_max_size: 100,
        consumer_protocol_enabled: true,
    }
}

pub use crate::coordinator::host::{java_string_hash, partition_for};
