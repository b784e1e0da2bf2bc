//! Checkpoint files in Kafka's text format, written atomically.
//!
//! ```text
//! 0                  version
//! 2                  number of entries
//! orders 0 1200      one entry a line, fields separated by one space
//! orders 1 977
//! ```
//!
//! Per log dir: `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
//! `replication-offset-checkpoint` and `cleaner-offset-checkpoint`, entries
//! `topic partition offset`. Per partition: `leader-epoch-checkpoint`, entries
//! `epoch start_offset`. A write goes to `<name>.tmp`, is fsynced, renamed over the old file,
//! and the directory is fsynced, so a crash leaves the old or the new file, never a mix.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use super::error::{LogError, Result};
use super::topic_partition::TopicPartition;

pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
pub const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
pub const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";
pub const CLEANER_OFFSET_CHECKPOINT: &str = "cleaner-offset-checkpoint";
pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";

const VERSION: u32 = 0;
/// A checkpoint larger than this is not one we wrote; refuse it before reading it whole.
const CHECKPOINT_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Writes `lines` as a checkpoint at `path`, atomically and durably.
pub fn write_lines(path: &Path, lines: &[String]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut text = format!("{VERSION}\n{}\n", lines.len());
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    result.map_err(|e| LogError::io(path, e))
}

/// Reads the entry lines of a checkpoint; a missing file is an empty checkpoint.
pub fn read_lines(path: &Path) -> Result<Vec<String>> {
    let corrupt = |reason: String| LogError::CorruptFile {
        path: path.to_path_buf(),
        reason,
    };
    let length = match fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(LogError::io(path, e)),
    };
    if length > CHECKPOINT_BYTES_MAX {
        return Err(corrupt(format!(
            "{length} bytes is larger than any checkpoint"
        )));
    }
    let text = fs::read_to_string(path).map_err(|e| LogError::io(path, e))?;
    let mut lines = text.lines();
    match lines.next().map(str::parse::<u32>) {
        Some(Ok(VERSION)) => {}
        other => return Err(corrupt(format!("unsupported version line {other:?}"))),
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| corrupt("missing entry count".into()))?;
    let entries: Vec<String> = lines.map(str::to_owned).collect();
    if entries.len() != count {
        return Err(corrupt(format!(
            "header says {count} entries, found {}",
            entries.len()
        )));
    }
    Ok(entries)
}

/// Reads a per-log-dir offsets checkpoint (`topic partition offset`).
pub fn read_offsets(path: &Path) -> Result<BTreeMap<TopicPartition, u64>> {
    let mut offsets = BTreeMap::new();
    for line in read_lines(path)? {
        let mut fields = line.split(' ');
        let parsed = (|| {
            let topic = fields.next()?;
            let partition = fields.next()?.parse().ok()?;
            let offset = fields.next()?.parse().ok()?;
            fields
                .next()
                .is_none()
                .then(|| (TopicPartition::new(topic, partition), offset))
        })();
        let (tp, offset) = parsed.ok_or_else(|| LogError::CorruptFile {
            path: path.to_path_buf(),
            reason: format!("malformed entry '{line}'"),
        })?;
        offsets.insert(tp, offset);
    }
    Ok(offsets)
}

pub fn write_offsets(path: &Path, offsets: &BTreeMap<TopicPartition, u64>) -> Result<()> {
    let lines: Vec<String> = offsets
        .iter()
        .map(|(tp, offset)| format!("{} {} {offset}", tp.topic, tp.partition))
        .collect();
    write_lines(path, &lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip_and_missing_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(RECOVERY_POINT_CHECKPOINT);
        assert!(read_offsets(&path).unwrap().is_empty());
        let mut offsets = BTreeMap::new();
        offsets.insert(TopicPartition::new("a-b", 3), 17);
        offsets.insert(TopicPartition::new("c", 0), 0);
        write_offsets(&path, &offsets).unwrap();
        assert_eq!(read_offsets(&path).unwrap(), offsets);
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text, "0\n2\na-b 3 17\nc 0 0\n");
    }

    #[test]
    fn malformed_checkpoints_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        for text in [
            "1\n0\n",
            "0\n2\na 0 1\n",
            "0\n1\na zero 1\n",
            "0\n1\na 0 1 2\n",
            "",
        ] {
            fs::write(&path, text).unwrap();
            assert!(read_offsets(&path).is_err(), "{text:?} was accepted");
        }
    }
}
