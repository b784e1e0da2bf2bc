//! The leader epoch cache: for each leader epoch, the first offset written in it
//! (KIP-101/KIP-279), persisted in the partition's `leader-epoch-checkpoint`.
//!
//! Replication asks it "where does epoch E end?" to find where a follower diverges from a new
//! leader. Entries have strictly increasing epochs and non-decreasing start offsets.

use std::path::{Path, PathBuf};

use super::checkpoint;
use super::error::{LogError, Result};

pub const UNDEFINED_EPOCH: i32 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: u64,
}

#[derive(Debug)]
pub struct LeaderEpochCache {
    path: PathBuf,
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    /// Loads the checkpoint in `dir`, if any.
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(checkpoint::LEADER_EPOCH_CHECKPOINT);
        let mut entries = Vec::new();
        for line in checkpoint::read_lines(&path)? {
            let parsed = line
                .split_once(' ')
                .and_then(|(e, o)| Some((e.parse().ok()?, o.parse().ok()?)));
            let Some((epoch, start_offset)) = parsed else {
                return Err(LogError::CorruptFile {
                    path,
                    reason: format!("malformed entry '{line}'"),
                });
            };
            entries.push(EpochEntry {
                epoch,
                start_offset,
            });
        }
        let ordered = entries
            .windows(2)
            .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset <= w[1].start_offset);
        if !ordered {
            return Err(LogError::CorruptFile {
                path,
                reason: "entries are not in order".into(),
            });
        }
        Ok(LeaderEpochCache { path, entries })
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Records that `epoch` starts at `start_offset`. Entries that conflict (a same or later
    /// epoch, or a start at or after this one) are replaced, as Kafka does. Returns whether the
    /// cache changed; the checkpoint is written when it did.
    pub fn assign(&mut self, epoch: i32, start_offset: u64) -> Result<bool> {
        if epoch < 0 {
            return Ok(false);
        }
        if let Some(latest) = self.latest() {
            if latest.epoch == epoch && latest.start_offset <= start_offset {
                return Ok(false);
            }
            if latest.epoch > epoch && latest.start_offset <= start_offset {
                // An older epoch after a newer one: a stale batch; the newer entry stands.
                return Ok(false);
            }
        }
        self.entries
            .retain(|e| e.epoch < epoch && e.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        self.persist()?;
        Ok(true)
    }

    /// Recovery's rule: an epoch read back from the log is recorded only when it is newer than
    /// every epoch known, so replaying old batches never disturbs the cache.
    pub fn assign_if_newer(&mut self, epoch: i32, start_offset: u64) -> Result<bool> {
        if epoch < 0 || self.latest().is_some_and(|l| l.epoch >= epoch) {
            return Ok(false);
        }
        self.assign(epoch, start_offset)
    }

    /// Kafka's `endOffsetFor`: the largest epoch `<= requested` this log knows and the offset
    /// where it ended (the next epoch's start, or `log_end_offset` for the latest). `None` when
    /// the requested epoch is later than any known (UNDEFINED in the protocol).
    pub fn end_offset_for(&self, requested: i32, log_end_offset: u64) -> Option<(i32, u64)> {
        if requested < 0 {
            return None;
        }
        let latest = self.latest()?;
        if requested >= latest.epoch {
            return (requested == latest.epoch).then_some((latest.epoch, log_end_offset));
        }
        let higher = self.entries.partition_point(|e| e.epoch <= requested);
        let next_start = self.entries[higher].start_offset;
        match higher.checked_sub(1) {
            Some(floor) => Some((self.entries[floor].epoch, next_start)),
            // Older than anything we know: the requested epoch ended where our first began.
            None => Some((requested, next_start)),
        }
    }

    /// The epoch the record at `offset` was written under: the latest entry starting at or
    /// before it. `None` before the first entry. The caller bounds `offset` by the log end.
    pub fn epoch_at(&self, offset: u64) -> Option<i32> {
        let after = self.entries.partition_point(|e| e.start_offset <= offset);
        after.checked_sub(1).map(|i| self.entries[i].epoch)
    }

    /// Drops entries that start at or after `end_offset` (the log was truncated there).
    pub fn truncate_from_end(&mut self, end_offset: u64) -> Result<()> {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        if self.entries.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    /// The log now starts at `start_offset`: entries wholly before it go, and the first kept
    /// entry starts no earlier than it.
    pub fn truncate_from_start(&mut self, start_offset: u64) -> Result<()> {
        let keep_from = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset)
            .saturating_sub(1);
        let mut changed = keep_from > 0;
        self.entries.drain(..keep_from);
        if let Some(first) = self.entries.first_mut() {
            if first.start_offset < start_offset {
                first.start_offset = start_offset;
                changed = true;
            }
        }
        if changed {
            self.persist()?;
        }
        Ok(())
    }

    pub fn clear(&mut self) -> Result<()> {
        self.entries.clear();
        self.persist()
    }

    fn persist(&self) -> Result<()> {
        let lines: Vec<String> = self
            .entries
            .iter()
            .map(|e| format!("{} {}", e.epoch, e.start_offset))
            .collect();
        checkpoint::write_lines(&self.path, &lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, u64)]) -> (tempfile::TempDir, LeaderEpochCache) {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = LeaderEpochCache::open(dir.path()).unwrap();
        for (epoch, offset) in entries {
            cache.assign(*epoch, *offset).unwrap();
        }
        (dir, cache)
    }

    #[test]
    fn end_offset_for_follows_kafka() {
        let (_dir, cache) = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert_eq!(cache.end_offset_for(5, 30), Some((5, 30)));
        assert_eq!(cache.end_offset_for(3, 30), Some((3, 20)));
        assert_eq!(
            cache.end_offset_for(4, 30),
            Some((3, 20)),
            "unknown epoch: the floor epoch's end"
        );
        assert_eq!(
            cache.end_offset_for(0, 30),
            Some((0, 0)),
            "older than all: where the first began"
        );
        assert_eq!(cache.end_offset_for(6, 30), None);
        assert_eq!(cache.end_offset_for(-1, 30), None);
    }

    #[test]
    fn epoch_at_is_the_epoch_an_offset_was_written_under() {
        let (_dir, cache) = cache(&[(1, 5), (3, 10), (5, 20)]);
        assert_eq!(cache.epoch_at(4), None, "before the first entry");
        assert_eq!(cache.epoch_at(5), Some(1));
        assert_eq!(cache.epoch_at(9), Some(1));
        assert_eq!(cache.epoch_at(10), Some(3));
        assert_eq!(cache.epoch_at(19), Some(3));
        assert_eq!(cache.epoch_at(20), Some(5));
        assert_eq!(cache.epoch_at(1_000), Some(5));
    }

    #[test]
    fn assign_replaces_conflicting_entries_and_persists() {
        let (dir, mut cache) = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(
            !cache.assign(5, 25).unwrap(),
            "same epoch later offset: no change"
        );
        // A new leader's epoch 6 starting at 12 removes everything from offset 12 on.
        assert!(cache.assign(6, 12).unwrap());
        assert_eq!(
            cache.entries(),
            &[
                EpochEntry {
                    epoch: 1,
                    start_offset: 0
                },
                EpochEntry {
                    epoch: 3,
                    start_offset: 10
                },
                EpochEntry {
                    epoch: 6,
                    start_offset: 12
                }
            ]
        );
        let reopened = LeaderEpochCache::open(dir.path()).unwrap();
        assert_eq!(reopened.entries(), cache.entries());
    }

    #[test]
    fn truncation_from_both_ends() {
        let (_dir, mut cache) = cache(&[(1, 0), (3, 10), (5, 20)]);
        cache.truncate_from_end(20).unwrap();
        assert_eq!(
            cache.latest(),
            Some(EpochEntry {
                epoch: 3,
                start_offset: 10
            })
        );
        cache.truncate_from_start(12).unwrap();
        assert_eq!(
            cache.entries(),
            &[EpochEntry {
                epoch: 3,
                start_offset: 12
            }]
        );
        cache.truncate_from_start(5).unwrap();
        assert_eq!(
            cache.entries(),
            &[EpochEntry {
                epoch: 3,
                start_offset: 12
            }]
        );
    }
}
