//! Per-log configuration, with Kafka's topic-level names and defaults, and the broker-level
//! `log.*` names that supply the defaults.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::registry;
pub use crate::config::registry::ConfigError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: false,
    };
    pub const COMPACT: CleanupPolicy = CleanupPolicy {
        delete: false,
        compact: true,
    };
}

/// When appends are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushPolicy {
    /// Kafka's behaviour: fsync by `flush.messages` / `flush.ms` (by default never; durability
    /// comes from replication) and on segment roll.
    #[default]
    Interval,
    /// An append returns only after fdatasync; concurrent appends share one (group commit).
    Always,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    #[default]
    CreateTime,
    LogAppendTime,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`
    pub segment_bytes: u64,
    /// `segment.ms`
    pub segment_ms: i64,
    /// `segment.index.bytes`
    pub segment_index_bytes: usize,
    /// `index.interval.bytes`
    pub index_interval_bytes: u64,
    /// `max.message.bytes`: the largest batch accepted from a producer.
    pub max_message_bytes: usize,
    /// `retention.ms`, negative for no limit.
    pub retention_ms: i64,
    /// `retention.bytes`, negative for no limit.
    pub retention_bytes: i64,
    /// `cleanup.policy`
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms`: how long tombstones stay readable after compaction first sees them.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`
    pub min_compaction_lag_ms: i64,
    /// `flush.messages`
    pub flush_messages: u64,
    /// `flush.ms`
    pub flush_ms: i64,
    /// `flush.policy` (ours; broker key `log.flush.policy`): `interval` or `always`.
    pub flush_policy: FlushPolicy,
    /// `file.delete.delay.ms`
    pub file_delete_delay_ms: i64,
    /// `message.timestamp.type`
    pub message_timestamp_type: TimestampType,
}

impl LogConfig {
    /// Whether an append may wait for an fsync on the append path: `flush.policy=always`, or a
    /// `flush.messages` count that an append can reach.
    pub fn appends_may_sync(&self) -> bool {
        self.flush_policy == FlushPolicy::Always || self.flush_messages < i64::MAX as u64
    }
}

impl Default for LogConfig {
    /// Every topic key's default, from the config registry.
    fn default() -> Self {
        let mut config = LogConfig {
            segment_bytes: 0,
            segment_ms: 0,
            segment_index_bytes: 0,
            index_interval_bytes: 0,
            max_message_bytes: 0,
            retention_ms: 0,
            retention_bytes: 0,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: 0,
            min_cleanable_dirty_ratio: 0.0,
            min_compaction_lag_ms: 0,
            flush_messages: 0,
            flush_ms: 0,
            flush_policy: FlushPolicy::Interval,
            file_delete_delay_ms: 0,
            message_timestamp_type: TimestampType::CreateTime,
        };
        for key in registry::topic_keys() {
            if let Err(error) = config.set(key.name, key.default) {
                // The registry's tests check every default.
                debug_assert!(false, "{error}");
            }
        }
        config
    }
}

impl LogConfig {
    /// Sets one topic-level config by its Kafka name, checked against the config registry.
    /// Topic keys the log does not use (`min.insync.replicas`, ...) are checked and ignored.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let parsed = registry::validate_topic(key, value)?;
        let number = parsed.as_i64();
        match key {
            "segment.bytes" => self.segment_bytes = number as u64,
            "segment.ms" => self.segment_ms = number,
            "segment.index.bytes" => self.segment_index_bytes = number as usize,
            "index.interval.bytes" => self.index_interval_bytes = number as u64,
            "max.message.bytes" => self.max_message_bytes = number as usize,
            "retention.ms" => self.retention_ms = number,
            "retention.bytes" => self.retention_bytes = number,
            "cleanup.policy" => {
                let parts = parsed.as_list();
                self.cleanup_policy = CleanupPolicy {
                    delete: parts.iter().any(|p| p == "delete"),
                    compact: parts.iter().any(|p| p == "compact"),
                };
            }
            "delete.retention.ms" => self.delete_retention_ms = number,
            "min.cleanable.dirty.ratio" => self.min_cleanable_dirty_ratio = parsed.as_f64(),
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = number,
            "flush.messages" => self.flush_messages = number as u64,
            "flush.ms" => self.flush_ms = number,
            "flush.policy" => {
                self.flush_policy = match parsed.as_str() {
                    "always" => FlushPolicy::Always,
                    _ => FlushPolicy::Interval,
                }
            }
            "file.delete.delay.ms" => self.file_delete_delay_ms = number,
            "message.timestamp.type" => {
                self.message_timestamp_type = match parsed.as_str() {
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => TimestampType::CreateTime,
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The broker-wide defaults from broker properties: each topic key's broker fallback
    /// (`log.segment.bytes`, ...), unit synonyms resolved as Kafka does (`log.retention.ms`
    /// over `.minutes` over `.hours`). Errors name the broker key.
    pub fn from_broker_properties(
        props: &BTreeMap<String, String>,
    ) -> Result<LogConfig, ConfigError> {
        let mut config = LogConfig::default();
        for key in registry::topic_keys() {
            let broker_key = key.broker_name();
            if let Some(value) = registry::broker_value(props, broker_key)? {
                config.set(key.name, &value).map_err(|e| ConfigError {
                    key: broker_key.into(),
                    ..e
                })?;
            }
        }
        Ok(config)
    }
}

/// Wall-clock milliseconds, behind a trait so tests can move time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> i64;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

/// A clock that moves only when told, for tests of rolls, retention and compaction lag.
#[derive(Debug, Default)]
pub struct ManualClock(std::sync::atomic::AtomicI64);

impl ManualClock {
    pub fn new(now_ms: i64) -> Self {
        ManualClock(std::sync::atomic::AtomicI64::new(now_ms))
    }
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_keys_parse_and_bad_values_name_the_key() {
        let mut config = LogConfig::default();
        config.set("cleanup.policy", "compact,delete").unwrap();
        assert_eq!(
            config.cleanup_policy,
            CleanupPolicy {
                delete: true,
                compact: true
            }
        );
        config.set("retention.ms", "-1").unwrap();
        assert_eq!(config.retention_ms, -1);
        let error = config.set("segment.bytes", "10").unwrap_err();
        assert_eq!(error.key, "segment.bytes");
        assert!(config.set("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(config.set("flush.policy", "sometimes").is_err());
        assert!(config.set("no.such.key", "1").is_err());
        assert_eq!(LogConfig::default().segment_bytes, 1 << 30);
        assert_eq!(LogConfig::default().flush_ms, i64::MAX);
    }

    #[test]
    fn broker_retention_precedence_is_ms_then_minutes_then_hours() {
        let props = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let hours =
            LogConfig::from_broker_properties(&props(&[("log.retention.hours", "2")])).unwrap();
        assert_eq!(hours.retention_ms, 7_200_000);
        let minutes = LogConfig::from_broker_properties(&props(&[
            ("log.retention.hours", "2"),
            ("log.retention.minutes", "3"),
        ]))
        .unwrap();
        assert_eq!(minutes.retention_ms, 180_000);
        let ms = LogConfig::from_broker_properties(&props(&[
            ("log.retention.minutes", "3"),
            ("log.retention.ms", "5"),
            ("log.flush.policy", "always"),
        ]))
        .unwrap();
        assert_eq!((ms.retention_ms, ms.flush_policy), (5, FlushPolicy::Always));
        let error =
            LogConfig::from_broker_properties(&props(&[("log.segment.bytes", "x")])).unwrap_err();
        assert_eq!(error.key, "log.segment.bytes");
    }
}
