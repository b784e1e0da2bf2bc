//! Per-log configuration, with Kafka's topic-level names and defaults, and the broker-level
//! `log.*` names that supply the defaults.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// Configuration errors name the key, so start-up and AlterConfigs can say what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value '{value}' for {key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

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

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3_600_000,
            segment_index_bytes: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            retention_ms: 7 * 24 * 3_600_000,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: 24 * 3_600_000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            flush_messages: i64::MAX as u64,
            flush_ms: i64::MAX,
            flush_policy: FlushPolicy::Interval,
            file_delete_delay_ms: 60_000,
            message_timestamp_type: TimestampType::CreateTime,
        }
    }
}

/// The smallest segment Kafka accepts (`segment.bytes` has `atLeast(14)`); we ask for room for
/// at least one header.
const SEGMENT_BYTES_MIN: u64 = 64;
/// Offsets and positions in index entries are 32-bit.
const SEGMENT_BYTES_MAX: u64 = i32::MAX as u64;
const INDEX_BYTES_MIN: usize = 4 * 12;

impl LogConfig {
    /// Topic-level keys this config understands.
    pub const TOPIC_KEYS: &'static [&'static str] = &[
        "segment.bytes",
        "segment.ms",
        "segment.index.bytes",
        "index.interval.bytes",
        "max.message.bytes",
        "retention.ms",
        "retention.bytes",
        "cleanup.policy",
        "delete.retention.ms",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "flush.messages",
        "flush.ms",
        "flush.policy",
        "file.delete.delay.ms",
        "message.timestamp.type",
    ];

    /// Sets one topic-level config by its Kafka name.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let error = |reason: &str| ConfigError {
            key: key.into(),
            value: value.into(),
            reason: reason.into(),
        };
        let int = |min: i64| -> Result<i64, ConfigError> {
            let v: i64 = value.trim().parse().map_err(|_| error("not an integer"))?;
            if v < min {
                Err(error(&format!("must be at least {min}")))
            } else {
                Ok(v)
            }
        };
        match key {
            "segment.bytes" => {
                let v = int(SEGMENT_BYTES_MIN as i64)? as u64;
                if v > SEGMENT_BYTES_MAX {
                    return Err(error("must be at most 2147483647"));
                }
                self.segment_bytes = v;
            }
            "segment.ms" => self.segment_ms = int(1)?,
            "segment.index.bytes" => {
                self.segment_index_bytes =
                    int(INDEX_BYTES_MIN as i64)?.min(i32::MAX as i64) as usize
            }
            "index.interval.bytes" => self.index_interval_bytes = int(0)? as u64,
            "max.message.bytes" => self.max_message_bytes = int(0)?.min(i32::MAX as i64) as usize,
            "retention.ms" => self.retention_ms = int(-1)?,
            "retention.bytes" => self.retention_bytes = int(-1)?,
            "cleanup.policy" => {
                let mut policy = CleanupPolicy::default();
                for part in value.split(',').map(str::trim) {
                    match part {
                        "delete" => policy.delete = true,
                        "compact" => policy.compact = true,
                        _ => return Err(error("expected delete, compact or both")),
                    }
                }
                self.cleanup_policy = policy;
            }
            "delete.retention.ms" => self.delete_retention_ms = int(0)?,
            "min.cleanable.dirty.ratio" => {
                let v: f64 = value.trim().parse().map_err(|_| error("not a number"))?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(error("must be between 0 and 1"));
                }
                self.min_cleanable_dirty_ratio = v;
            }
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = int(0)?,
            "flush.messages" => self.flush_messages = int(1)? as u64,
            "flush.ms" => self.flush_ms = int(0)?,
            "flush.policy" => {
                self.flush_policy = match value.trim() {
                    "interval" => FlushPolicy::Interval,
                    "always" => FlushPolicy::Always,
                    _ => return Err(error("expected interval or always")),
                }
            }
            "file.delete.delay.ms" => self.file_delete_delay_ms = int(0)?,
            "message.timestamp.type" => {
                self.message_timestamp_type = match value.trim() {
                    "CreateTime" => TimestampType::CreateTime,
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => return Err(error("expected CreateTime or LogAppendTime")),
                }
            }
            _ => return Err(error("unknown topic config")),
        }
        Ok(())
    }

    /// Builds the broker-wide defaults from server properties (`log.segment.bytes`, ...),
    /// ignoring keys that are not about logs. `log.retention.ms` wins over `.minutes`, which
    /// wins over `.hours`, as in Kafka; likewise `log.roll.ms` over `log.roll.hours`.
    pub fn from_broker_properties(
        props: &BTreeMap<String, String>,
    ) -> Result<LogConfig, ConfigError> {
        let mut config = LogConfig::default();
        let scaled = |key: &str, factor: i64| -> Result<Option<String>, ConfigError> {
            let Some(value) = props.get(key) else {
                return Ok(None);
            };
            let v: i64 = value.trim().parse().map_err(|_| ConfigError {
                key: key.into(),
                value: value.clone(),
                reason: "not an integer".into(),
            })?;
            Ok(Some(if v < 0 {
                "-1".into()
            } else {
                v.saturating_mul(factor).to_string()
            }))
        };
        let retention = match props.get("log.retention.ms") {
            Some(v) => Some(v.clone()),
            None => match scaled("log.retention.minutes", 60_000)? {
                Some(v) => Some(v),
                None => scaled("log.retention.hours", 3_600_000)?,
            },
        };
        if let Some(v) = retention {
            config.set("retention.ms", &v).map_err(|e| ConfigError {
                key: "log.retention.ms".into(),
                ..e
            })?;
        }
        let roll = match props.get("log.roll.ms") {
            Some(v) => Some(v.clone()),
            None => scaled("log.roll.hours", 3_600_000)?,
        };
        if let Some(v) = roll {
            config.set("segment.ms", &v).map_err(|e| ConfigError {
                key: "log.roll.ms".into(),
                ..e
            })?;
        }
        for (broker_key, topic_key) in BROKER_TO_TOPIC_KEYS {
            if let Some(value) = props.get(*broker_key) {
                config.set(topic_key, value).map_err(|e| ConfigError {
                    key: (*broker_key).into(),
                    ..e
                })?;
            }
        }
        Ok(config)
    }
}

/// Broker keys that set a topic key's default directly.
pub const BROKER_TO_TOPIC_KEYS: &[(&str, &str)] = &[
    ("log.segment.bytes", "segment.bytes"),
    ("log.index.size.max.bytes", "segment.index.bytes"),
    ("log.index.interval.bytes", "index.interval.bytes"),
    ("message.max.bytes", "max.message.bytes"),
    ("log.retention.bytes", "retention.bytes"),
    ("log.cleanup.policy", "cleanup.policy"),
    ("log.cleaner.delete.retention.ms", "delete.retention.ms"),
    (
        "log.cleaner.min.cleanable.ratio",
        "min.cleanable.dirty.ratio",
    ),
    ("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
    ("log.flush.interval.messages", "flush.messages"),
    ("log.flush.interval.ms", "flush.ms"),
    ("log.flush.policy", "flush.policy"),
    ("log.segment.delete.delay.ms", "file.delete.delay.ms"),
    ("log.message.timestamp.type", "message.timestamp.type"),
];

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
        for key in LogConfig::TOPIC_KEYS {
            assert!(
                !matches!(config.set(key, "x"), Err(ConfigError { ref reason, .. }) if reason == "unknown topic config")
            );
        }
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
