//! Errors of the storage engine, and their one mapping to Kafka errors.
//!
//! Two kinds live here, and the difference matters to callers:
//! - *request errors* (a bad batch, an offset out of range): the request is answered with the
//!   Kafka error from [`LogError::kafka_error`] and the log is untouched;
//! - *storage errors* (`Io`, `Offline`): the disk failed under us. The log marks itself offline
//!   and answers KAFKA_STORAGE_ERROR from then on, as Kafka does for a failed log directory.

use std::io;
use std::path::PathBuf;

use crate::protocol::errors::KafkaError;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The bytes are not a well-formed v2 batch: truncated, lying length, bad CRC.
    #[error("corrupt record batch at byte {position}: {reason}")]
    Corrupt { position: usize, reason: String },

    /// A batch is larger than the topic's `max.message.bytes`.
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    TooLarge { size: usize, max: usize },

    /// Well-formed framing but content Kafka rejects (wrong magic, count vs offsets, no key in
    /// a compacted topic, control batch from a client).
    #[error("invalid record batch at byte {position}: {reason}")]
    InvalidRecord { position: usize, reason: String },

    /// Records a leader refuses one by one (Kafka's RecordValidationException): each as its
    /// index among the request's records for the partition, with why.
    #[error("{message}")]
    RecordErrors {
        errors: Vec<(i32, String)>,
        message: String,
    },

    /// The follower path got batches whose offsets do not continue the log.
    #[error("offsets out of order: {0}")]
    OffsetsOutOfOrder(String),

    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: u64,
        log_start_offset: u64,
        log_end_offset: u64,
    },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },

    /// A previous I/O failure left the log in an unknown state; it refuses all work.
    #[error("log {0} is offline after an I/O error")]
    Offline(String),

    /// The log could not be opened at start; the broker serves the others.
    #[error(
        "log {topic_partition} could not be opened at start, so it is offline on this broker ({reason}); repair or remove {dir} and restart"
    )]
    OpenFailed {
        topic_partition: String,
        dir: PathBuf,
        reason: String,
    },

    /// A `log.dirs` entry this broker cannot use: locked by another process, or not
    /// creatable or writable.
    #[error("log.dirs entry {dir} cannot be used: {reason}")]
    LogDirUnusable { dir: PathBuf, reason: String },

    /// Files on disk that cannot be what this engine wrote, found while loading.
    #[error("corrupt log file {path}: {reason}")]
    CorruptFile { path: PathBuf, reason: String },
}

impl LogError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        LogError::Io {
            path: path.into(),
            source,
        }
    }

    /// The Kafka error a broker answers with for this error.
    pub fn kafka_error(&self) -> KafkaError {
        match self {
            LogError::Corrupt { .. } => KafkaError::CorruptMessage,
            LogError::TooLarge { .. } => KafkaError::MessageTooLarge,
            LogError::InvalidRecord { .. } | LogError::RecordErrors { .. } => {
                KafkaError::InvalidRecord
            }
            LogError::OffsetsOutOfOrder(_) => KafkaError::CorruptMessage,
            LogError::OffsetOutOfRange { .. } => KafkaError::OffsetOutOfRange,
            LogError::InvalidArgument(_) => KafkaError::InvalidRequest,
            LogError::Io { .. }
            | LogError::Offline(_)
            | LogError::OpenFailed { .. }
            | LogError::CorruptFile { .. }
            | LogError::LogDirUnusable { .. } => KafkaError::KafkaStorageError,
        }
    }

    /// True for errors that mean the disk, not the request, is at fault.
    pub fn is_storage_error(&self) -> bool {
        self.kafka_error() == KafkaError::KafkaStorageError
    }
}

pub type Result<T, E = LogError> = std::result::Result<T, E>;
