//! What a consumer's user sees and sets: the records poll returns, the settings read from a
//! [`ClientConfig`], the listener told of rebalances; and [`Context`], what every other part
//! of the consumer reads. Imports nothing else of the consumer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::client::assignor::Assignor;
use crate::client::cluster::Cluster;
use crate::client::config::ClientConfig;
use crate::client::error::{Error, Result};

pub use crate::protocol::topic_partition::TopicPartition;

/// What a record's timestamp means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker when it appended the record (`message.timestamp.type=LogAppendTime`).
    LogAppendTime,
}

/// One record as the consumer returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its timestamp, in milliseconds since the epoch.
    pub timestamp: i64,
    /// Whether the timestamp is the producer's or the broker's.
    pub timestamp_type: TimestampType,
    /// The key, if any.
    pub key: Option<Bytes>,
    /// The value (`None` for a tombstone).
    pub value: Option<Bytes>,
    /// The headers, in order.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// The leader epoch of the batch it came in.
    pub leader_epoch: Option<i32>,
}

/// A consumer's place in its group, for a transactional producer's
/// `send_offsets_to_transaction` (Kafka's `ConsumerGroupMetadata`): the group coordinator
/// takes the offsets only from the member of the current generation, so a zombie that lost
/// its partitions cannot commit them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    /// The group's id.
    pub group_id: String,
    /// The generation (KIP-848: the member epoch), or -1 outside a generation.
    pub generation_id: i32,
    /// The member id, or empty outside a generation.
    pub member_id: String,
    /// The static member's `group.instance.id`.
    pub group_instance_id: Option<String>,
}

impl ConsumerGroupMetadata {
    /// A group's metadata without a member (generation -1): the coordinator then checks no
    /// membership, as for Kafka's `sendOffsetsToTransaction(offsets, groupId)`.
    pub fn new(group_id: &str) -> Self {
        ConsumerGroupMetadata {
            group_id: group_id.to_owned(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

/// Where to start a partition that has no committed offset (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// The oldest record still in the log.
    Earliest,
    /// The end of the log: only records produced from now on.
    Latest,
    /// Fail the poll ([`Error::NoOffset`]): the application must seek.
    None,
}

/// Which records a fetch may return (`isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    /// Everything up to the high watermark.
    ReadUncommitted,
    /// Only committed transactional records, up to the last stable offset.
    ReadCommitted,
}

/// Told about partitions as a group moves them: in `on_partitions_revoked` the consumer still
/// owns them (commit there to keep exactly what was processed); `on_partitions_lost` means
/// the group already gave them to others (the member was fenced or timed out).
pub trait RebalanceListener: Send + Sync {
    /// Partitions given to this consumer.
    fn on_partitions_assigned(&self, _partitions: &[TopicPartition]) {}
    /// Partitions this consumer gives up.
    fn on_partitions_revoked(&self, _partitions: &[TopicPartition]) {}
    /// Partitions this consumer lost without giving them up.
    fn on_partitions_lost(&self, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(partitions);
    }
}

/// `group.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupProtocol {
    /// JoinGroup and SyncGroup; the group leader assigns.
    Classic,
    /// KIP-848: the coordinator assigns through ConsumerGroupHeartbeat.
    Consumer,
}

/// The consumer settings, read from a [`ClientConfig`].
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub group_id: Option<String>,
    pub group_instance_id: Option<String>,
    pub group_protocol: GroupProtocol,
    pub assignors: Vec<Assignor>,
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub max_poll_interval: Duration,
    pub auto_offset_reset: OffsetReset,
    pub enable_auto_commit: bool,
    pub auto_commit_interval: Duration,
    pub fetch_min_bytes: i32,
    pub fetch_max_bytes: i32,
    pub fetch_max_wait: Duration,
    pub max_partition_fetch_bytes: i32,
    pub max_poll_records: usize,
    pub isolation_level: IsolationLevel,
    pub check_crcs: bool,
    pub retry_backoff: Duration,
    pub metadata_max_age: Duration,
    /// `client.rack`: sent with each Fetch, so a broker with a rack-aware
    /// `replica.selector.class` can point this consumer at a replica in its rack (KIP-392).
    pub client_rack: String,
}

pub(crate) const KNOWN_KEYS: &[&str] = &[
    "group.id",
    "group.instance.id",
    "group.protocol",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "auto.offset.reset",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "fetch.max.wait.ms",
    "max.partition.fetch.bytes",
    "max.poll.records",
    "isolation.level",
    "check.crcs",
    "client.rack",
    "key.deserializer",
    "value.deserializer",
];

impl Settings {
    pub(crate) fn from_config(config: &ClientConfig) -> Result<Settings> {
        let invalid = |key: &str, reason: String| Error::Config {
            key: key.to_owned(),
            reason,
        };
        let group_id = config
            .get("group.id")
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_owned);
        let group_protocol = match config.get("group.protocol").map(str::trim) {
            None => GroupProtocol::Classic,
            Some(p) if p.eq_ignore_ascii_case("classic") => GroupProtocol::Classic,
            Some(p) if p.eq_ignore_ascii_case("consumer") => GroupProtocol::Consumer,
            Some(other) => {
                return Err(invalid(
                    "group.protocol",
                    format!("{other:?} is not classic or consumer"),
                ));
            }
        };
        let assignors = match config.get("partition.assignment.strategy") {
            None => vec![Assignor::Range, Assignor::CooperativeSticky],
            Some(list) => {
                let mut assignors = Vec::new();
                for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    let assignor = Assignor::parse(name).ok_or_else(|| {
                        invalid(
                            "partition.assignment.strategy",
                            format!("{name:?} is not range, roundrobin or cooperative-sticky"),
                        )
                    })?;
                    assignors.push(assignor);
                }
                if assignors.is_empty() {
                    return Err(invalid(
                        "partition.assignment.strategy",
                        "names no assignor".into(),
                    ));
                }
                assignors
            }
        };
        let auto_offset_reset = match config.get("auto.offset.reset").map(str::trim) {
            None | Some("latest") | Some("largest") | Some("end") => OffsetReset::Latest,
            Some("earliest") | Some("smallest") | Some("beginning") => OffsetReset::Earliest,
            Some("none") | Some("error") => OffsetReset::None,
            Some(other) => {
                return Err(invalid(
                    "auto.offset.reset",
                    format!("{other:?} is not earliest, latest or none"),
                ));
            }
        };
        let isolation_level = match config.get("isolation.level").map(str::trim) {
            None | Some("read_uncommitted") => IsolationLevel::ReadUncommitted,
            Some("read_committed") => IsolationLevel::ReadCommitted,
            Some(other) => {
                return Err(invalid(
                    "isolation.level",
                    format!("{other:?} is not read_uncommitted or read_committed"),
                ));
            }
        };
        let session_timeout = config.millis("session.timeout.ms", 45_000, 1, 3_600_000)?;
        let heartbeat_interval = config.millis("heartbeat.interval.ms", 3_000, 1, 3_600_000)?;
        if heartbeat_interval >= session_timeout {
            return Err(invalid(
                "heartbeat.interval.ms",
                "must be lower than session.timeout.ms".into(),
            ));
        }
        Ok(Settings {
            enable_auto_commit: config.parse("enable.auto.commit", group_id.is_some())?,
            group_id,
            group_instance_id: config
                .get("group.instance.id")
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .map(str::to_owned),
            group_protocol,
            assignors,
            session_timeout,
            heartbeat_interval,
            max_poll_interval: config.millis(
                "max.poll.interval.ms",
                300_000,
                1,
                i32::MAX as u64,
            )?,
            auto_offset_reset,
            auto_commit_interval: config.millis("auto.commit.interval.ms", 5_000, 0, 86_400_000)?,
            fetch_min_bytes: config.number("fetch.min.bytes", 1, 0, i32::MAX as u64)? as i32,
            fetch_max_bytes: config.number("fetch.max.bytes", 52_428_800, 1, 1 << 30)? as i32,
            fetch_max_wait: config.millis("fetch.max.wait.ms", 500, 0, 60_000)?,
            max_partition_fetch_bytes: config.number(
                "max.partition.fetch.bytes",
                1_048_576,
                1,
                1 << 30,
            )? as i32,
            max_poll_records: config.number("max.poll.records", 500, 1, 1 << 24)? as usize,
            isolation_level,
            check_crcs: config.parse("check.crcs", true)?,
            retry_backoff: config.millis("retry.backoff.ms", 100, 0, 60_000)?,
            metadata_max_age: config.millis("metadata.max.age.ms", 300_000, 0, 86_400_000)?,
            client_rack: config
                .get("client.rack")
                .unwrap_or_default()
                .trim()
                .to_owned(),
        })
    }
}

/// What every part of a consumer reads: the cluster, the settings and the application's
/// rebalance listener. The facade, the group membership and the offset requests each hold
/// it and it holds none of them, so none imports another to reach these.
pub(crate) struct Context {
    pub cluster: Arc<Cluster>,
    pub settings: Settings,
    listener: Mutex<Option<Arc<dyn RebalanceListener>>>,
}

impl Context {
    pub fn new(cluster: Cluster, settings: Settings) -> Context {
        let cluster = Arc::new(cluster);
        cluster.watch_stalls();
        Context {
            cluster,
            settings,
            listener: Mutex::new(None),
        }
    }

    pub fn listener(&self) -> Option<Arc<dyn RebalanceListener>> {
        self.listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_listener(&self, listener: Arc<dyn RebalanceListener>) {
        *self.listener.lock().unwrap_or_else(|p| p.into_inner()) = Some(listener);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_naming_the_key() {
        let bad = ClientConfig::new("a:1").set("auto.offset.reset", "middle");
        let error = Settings::from_config(&bad).expect_err("refused");
        assert!(
            error
                .to_string()
                .starts_with("configuration auto.offset.reset")
        );
        let bad = ClientConfig::new("a:1").set("partition.assignment.strategy", "sticky");
        assert!(Settings::from_config(&bad).is_err());
        let ok = Settings::from_config(&ClientConfig::new("a:1").set("group.id", "g")).expect("ok");
        assert!(ok.enable_auto_commit);
        assert_eq!(ok.assignors, [Assignor::Range, Assignor::CooperativeSticky]);
        let ok = Settings::from_config(&ClientConfig::new("a:1")).expect("ok");
        assert!(!ok.enable_auto_commit, "no group, nothing to commit to");
    }
}
