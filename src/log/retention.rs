//! Retention: deleting the oldest segments by time (`retention.ms`, against each segment's
//! largest timestamp), by size (`retention.bytes`) and below the log start offset
//! (DeleteRecords). The active segment is never deleted. Deleted segments are renamed to
//! `.deleted` under the log's lock (a rename is quick) and removed later by the log manager,
//! so appends never wait on file removal.

use std::time::UNIX_EPOCH;

use super::error::Result;
use super::partition_log::Log;
use super::segment::Segment;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
    pub log_start_offset: u64,
}

/// A segment's age for `retention.ms`: its largest record timestamp, or the file's
/// modification time when it holds no timestamps (Kafka's rule).
fn largest_timestamp_ms(segment: &Segment) -> i64 {
    if segment.max_timestamp() >= 0 {
        return segment.max_timestamp();
    }
    std::fs::metadata(segment.path())
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(i64::MAX, |d| d.as_millis() as i64)
}

impl Log {
    /// Deletes the prefix of segments that retention allows to go.
    pub fn delete_retention_breached_segments(&self) -> Result<RetentionOutcome> {
        self.check_online()?;
        let config = self.config();
        let now = self.clock().now_ms();
        let mut state = self.write_state();
        let total_bytes: u64 = state.segments.values().map(Segment::size).sum();
        let mut excess_bytes = if config.cleanup_policy.delete && config.retention_bytes >= 0 {
            total_bytes.saturating_sub(config.retention_bytes as u64)
        } else {
            0
        };
        let bases: Vec<u64> = state.segments.keys().copied().collect();
        let mut doomed = Vec::new();
        for window in bases.windows(2) {
            // `window[1]` exists, so `window[0]` is not the active segment.
            let (base, next_base) = (window[0], window[1]);
            // As in Kafka: never delete what is not yet committed (above the high watermark).
            if next_base > state.high_watermark {
                break;
            }
            let segment = &state.segments[&base];
            let below_log_start = next_base <= state.log_start_offset;
            let expired = config.cleanup_policy.delete
                && config.retention_ms >= 0
                && now.saturating_sub(largest_timestamp_ms(segment)) > config.retention_ms;
            let over_size = excess_bytes >= segment.size() && excess_bytes > 0;
            if !(below_log_start || expired || over_size) {
                break;
            }
            excess_bytes = excess_bytes.saturating_sub(segment.size());
            doomed.push((base, next_base));
        }
        let mut outcome = RetentionOutcome {
            log_start_offset: state.log_start_offset,
            ..Default::default()
        };
        let mut renamed = Vec::new();
        let result = (|| {
            for (base, next_base) in doomed {
                let segment = state.segments.remove(&base).expect("listed above");
                outcome.segments_deleted += 1;
                outcome.bytes_deleted += segment.size();
                renamed.extend(segment.rename_to_deleted()?);
                state.log_start_offset = state.log_start_offset.max(next_base);
            }
            debug_assert!(state.log_start_offset <= state.high_watermark);
            let start = state.log_start_offset;
            state.epochs.truncate_from_start(start)
        })();
        self.add_pending_deletes(renamed);
        self.mark_offline_on(result)?;
        outcome.log_start_offset = state.log_start_offset;
        if outcome.segments_deleted > 0 {
            tracing::info!(
                topic_partition = %self.topic_partition(),
                segments = outcome.segments_deleted,
                bytes = outcome.bytes_deleted,
                log_start_offset = outcome.log_start_offset,
                "retention deleted segments"
            );
        }
        Ok(outcome)
    }
}
