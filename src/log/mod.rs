//! # The storage engine
//!
//! The log each broker keeps for each partition replica, in Kafka's on-disk format. It knows
//! record batches, offsets, positions and timestamps; nothing of sockets or requests.
//!
//! - `batch`: validation of producers' v2 record batches (the format itself is
//!   `protocol::batch`, shared with the client SDK; codecs are `protocol::codec`).
//! - `segment`: one `.log` file with its sparse `.index` and `.timeindex` (`index`); the
//!   `.log` descriptors and the sealed indexes' mappings are bounded sets (`handles`), opened
//!   on use.
//! - `partition_log`: [`Log`], a partition's segments: append (leader and follower paths),
//!   read, roll, flush with group commit, recovery, truncation, log start offset.
//! - `epoch`: the leader epoch cache and its `leader-epoch-checkpoint`.
//! - `retention` and `cleaner`: deleting old segments, compacting by key.
//! - `manager`: [`LogManager`], all logs of the log dirs, checkpoints and background work.
//! - `checkpoint`, `config`, `error`, `topic_partition`: file formats, settings, errors.
//! - `writeback`: appended data written back incrementally, off the request path.
//! - `fault`: a storage fault hook for the fault-injection suite (off unless asked for).

pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod config;
pub mod epoch;
pub mod error;
pub mod fault;
pub mod handles;
pub mod index;
pub mod manager;
pub mod partition_log;
pub mod retention;
pub mod segment;
pub mod topic_partition;
pub mod txn_index;
pub mod writeback;

pub use config::{
    CleanupPolicy, Clock, FlushPolicy, LogConfig, ManualClock, SystemClock, TimestampType,
};
pub use error::LogError;
pub use manager::{LogManager, LogManagerConfig};
pub use partition_log::{AppendInfo, AppendOrigin, LoadState, Log, ReadInfo, ValidatedBatches};
pub use topic_partition::TopicPartition;

#[cfg(test)]
mod tests;
