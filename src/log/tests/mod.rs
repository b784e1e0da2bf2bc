//! Tests of the storage engine as a whole: a `Log` on a real directory, driven through its
//! public API, with crashes simulated by dropping it without closing and tearing its files.

use std::fs;
use std::sync::Arc;

use super::batch::{BatchBuilder, BatchHeader, BatchIter, RecordIter};
use super::config::{CleanupPolicy, Clock, FlushPolicy, LogConfig, ManualClock, TimestampType};
use super::error::LogError;
use super::partition_log::{AppendOrigin, LoadState, Log};
use super::topic_partition::TopicPartition;
use crate::protocol::errors::KafkaError;

mod randomized;

pub(super) const T0: i64 = 1_700_000_000_000;

pub(super) use crate::rng::SmallRng as Rng;

/// A batch of `count` records with keys `key-<n>`, values `value-<tag>-<n>`.
pub(super) fn make_batch(count: usize, tag: &str, timestamp: i64) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, timestamp);
    for n in 0..count {
        builder.push(
            timestamp + n as i64,
            Some(format!("key-{n}").as_bytes()),
            Some(format!("value-{tag}-{n}-{:-<48}", "").as_bytes()),
            &[],
        );
    }
    builder.build()
}

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(ManualClock::new(T0)),
        }
    }
    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("topic-0")
    }
    fn open(&self, config: LogConfig, load: LoadState) -> Log {
        Log::open(
            &self.path(),
            TopicPartition::new("topic", 0),
            config,
            load,
            self.clock.clone(),
        )
        .unwrap()
        .0
    }
}

fn append(log: &Log, count: usize, tag: &str, timestamp: i64) -> (u64, u64) {
    let batch = make_batch(count, tag, timestamp);
    let info = log
        .append_as_leader(&batch, 3, AppendOrigin::Client)
        .unwrap();
    (info.first_offset, info.last_offset)
}

/// Every batch readable from the log start, via repeated reads with a small byte limit.
fn read_all(log: &Log) -> Vec<Vec<u8>> {
    let mut batches = Vec::new();
    let mut offset = log.log_start_offset();
    loop {
        let info = log.read(offset, 1000, None).unwrap();
        let Some(slice) = info.slice else { break };
        let bytes = slice.to_vec().unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, header, batch) = item.unwrap();
            offset = header.last_offset() as u64 + 1;
            batches.push(batch.to_vec());
        }
    }
    batches
}

/// Compares batch lists without printing megabytes of bytes on failure.
pub(super) fn assert_same_batches(actual: &[Vec<u8>], expected: &[Vec<u8>], context: &str) {
    let offsets = |batches: &[Vec<u8>]| {
        batches
            .iter()
            .map(|b| header(b).base_offset)
            .collect::<Vec<_>>()
    };
    assert!(
        actual == expected,
        "{context}: batches differ; actual base offsets {:?}, expected {:?}",
        offsets(actual),
        offsets(expected)
    );
}

fn header(batch: &[u8]) -> BatchHeader {
    BatchHeader::parse(batch).unwrap()
}

#[test]
fn append_assigns_offsets_stamps_epoch_and_reads_back_the_same_bytes() {
    let fixture = Fixture::new();
    let log = fixture.open(small_config(), LoadState::default());
    let first = make_batch(3, "a", T0);
    let info = log
        .append_as_leader(&first, 7, AppendOrigin::Client)
        .unwrap();
    assert_eq!(
        (info.first_offset, info.last_offset, info.record_count),
        (0, 2, 3)
    );
    let second = make_batch(2, "b", T0 + 10);
    let info = log
        .append_as_leader(&second, 7, AppendOrigin::Client)
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (3, 4));
    assert_eq!(log.log_end_offset(), 5);

    let read = log.read(0, 1 << 20, None).unwrap();
    let bytes = read.slice.unwrap().to_vec().unwrap();
    // What was sent, with the leader's offsets and epoch (outside the CRC).
    let stamped = |batch: &[u8], base_offset| {
        let mut batch = batch.to_vec();
        super::batch::set_base_offset_and_epoch(&mut batch, base_offset, 7);
        batch
    };
    assert_eq!(
        bytes,
        [stamped(&first, 0), stamped(&second, 3)].concat(),
        "disk bytes are the served bytes"
    );
    let h = header(&bytes[first.len()..]);
    assert_eq!((h.base_offset, h.partition_leader_epoch), (3, 7));
    assert_eq!(log.latest_epoch(), Some(7));

    // An offset inside a batch returns the whole batch.
    let read = log.read(4, 1 << 20, None).unwrap();
    assert_eq!(read.first_batch_offset, Some(3));
    // The first batch comes back even when it is larger than the limit, and only it.
    let read = log.read(0, 10, None).unwrap();
    assert_eq!(read.slice.unwrap().len as usize, first.len());
    // Without min_one_message (a Fetch's partitions after one returned records) a first
    // batch that does not fit reads nothing, and otherwise only whole batches that fit.
    let read = log.read_with(0, 10, None, false).unwrap();
    assert!(read.slice.is_none());
    assert_eq!(read.first_batch_offset, Some(0));
    let read = log
        .read_with(0, first.len() as u64 + 10, None, false)
        .unwrap();
    assert_eq!(read.slice.unwrap().len as usize, first.len());
    // A bound (the high watermark) hides batches at or past it.
    assert!(log.read(3, 1 << 20, Some(3)).unwrap().slice.is_none());
    assert_eq!(
        log.read(0, 1 << 20, Some(3)).unwrap().slice.unwrap().len as usize,
        first.len()
    );
    // At the log end: nothing, no error. Past it or below the start: OFFSET_OUT_OF_RANGE.
    assert!(log.read(5, 100, None).unwrap().slice.is_none());
    assert_eq!(
        log.read(6, 100, None).unwrap_err().kafka_error(),
        KafkaError::OffsetOutOfRange
    );
}

#[test]
fn invalid_batches_are_rejected_whole_with_kafka_codes() {
    let fixture = Fixture::new();
    let mut config = small_config();
    config.max_message_bytes = 300;
    let log = fixture.open(config, LoadState::default());
    append(&log, 1, "ok", T0);
    let size_before = log.size_bytes();

    // A good batch followed by a corrupt one: nothing is written.
    let good = make_batch(1, "x", T0);
    let mut corrupt = make_batch(1, "y", T0);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let both = [good.clone(), corrupt].concat();
    let error = log
        .append_as_leader(&both, 0, AppendOrigin::Client)
        .unwrap_err();
    assert_eq!(error.kafka_error(), KafkaError::CorruptMessage);

    let large = make_batch(20, "large", T0);
    let error = log
        .append_as_leader(&large, 0, AppendOrigin::Client)
        .unwrap_err();
    assert_eq!(error.kafka_error(), KafkaError::MessageTooLarge);

    let truncated = good[..good.len() - 3].to_vec();
    let error = log
        .append_as_leader(&truncated, 0, AppendOrigin::Client)
        .unwrap_err();
    assert_eq!(error.kafka_error(), KafkaError::CorruptMessage);

    let error = log
        .append_as_leader(&[], 0, AppendOrigin::Client)
        .unwrap_err();
    assert_eq!(error.kafka_error(), KafkaError::InvalidRecord);

    // A control batch from a client.
    let mut control = good.clone();
    control[21..23].copy_from_slice(&0x20i16.to_be_bytes());
    let crc = super::batch::compute_crc(&control);
    control[17..21].copy_from_slice(&crc.to_be_bytes());
    let error = log
        .append_as_leader(&control, 0, AppendOrigin::Client)
        .unwrap_err();
    assert_eq!(error.kafka_error(), KafkaError::InvalidRecord);

    assert_eq!(log.size_bytes(), size_before, "no partial append");
    assert_eq!(log.log_end_offset(), 1);
}

#[test]
fn compacted_topics_refuse_records_without_keys() {
    let fixture = Fixture::new();
    let mut config = small_config();
    config.cleanup_policy = CleanupPolicy::COMPACT;
    let log = fixture.open(config, LoadState::default());
    let mut builder = BatchBuilder::new(0, T0);
    builder.push(T0, None, Some(b"v"), &[]);
    let keyless = builder.build();
    let error = log
        .append_as_leader(&keyless, 0, AppendOrigin::Client)
        .unwrap_err();
    assert_eq!(error.kafka_error(), KafkaError::InvalidRecord);
}

/// Kafka's LogValidator checks every record, compressed or not: 10 keyless records among 100
/// on a compacted topic are refused one by one (INVALID_RECORD with their indexes), whatever
/// the batch's codec; they used to pass when compressed. Nothing is appended.
#[test]
fn keyless_records_are_refused_by_index_in_batches_of_every_codec() {
    let fixture = Fixture::new();
    let mut config = small_config();
    config.cleanup_policy = CleanupPolicy::COMPACT;
    config.max_message_bytes = 1 << 20;
    let log = fixture.open(config, LoadState::default());
    let mut builder = BatchBuilder::new(0, T0);
    for i in 0..100u8 {
        let key = [i];
        builder.push(T0, (i % 10 != 3).then_some(&key[..]), Some(b"v"), &[]);
    }
    let plain = builder.build();
    for codec in 0..=4 {
        let batch = crate::replica::compression::recompress(&plain, codec)
            .expect("compress")
            .unwrap_or_else(|| plain.clone());
        let error = log
            .append_as_leader(&batch, 0, AppendOrigin::Client)
            .unwrap_err();
        assert_eq!(
            error.kafka_error(),
            KafkaError::InvalidRecord,
            "codec {codec}"
        );
        let LogError::RecordErrors { errors, message } = error else {
            panic!("codec {codec}: {error}");
        };
        let indexes: Vec<i32> = errors.iter().map(|(i, _)| *i).collect();
        assert_eq!(
            indexes,
            (0..10).map(|n| n * 10 + 3).collect::<Vec<_>>(),
            "codec {codec}"
        );
        assert!(message.contains("10 record errors"), "{message}");
    }
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn segments_roll_by_size_time_and_full_index() {
    let fixture = Fixture::new();
    let mut config = small_config();
    config.segment_ms = 60_000;
    let log = fixture.open(config, LoadState::default());
    for n in 0..40 {
        append(&log, 4, &n.to_string(), T0);
    }
    let by_size = log.segment_count();
    assert!(by_size > 3, "4 KiB segments roll: {by_size}");
    for base in log.segment_base_offsets() {
        let path = fixture.path().join(format!("{base:020}.log"));
        assert!(fs::metadata(&path).unwrap().len() <= 4096);
    }
    fixture.clock.advance(60_000);
    append(&log, 1, "late", T0);
    assert_eq!(log.segment_count(), by_size + 1, "segment.ms rolls");

    // A tiny index fills up and forces a roll.
    let fixture = Fixture::new();
    let config = LogConfig {
        segment_index_bytes: 48,
        index_interval_bytes: 0,
        ..LogConfig::default()
    };
    let log = fixture.open(config, LoadState::default());
    for n in 0..20 {
        append(&log, 1, &n.to_string(), T0);
    }
    assert!(
        log.segment_count() >= 3,
        "index-full rolls: {}",
        log.segment_count()
    );
    assert_eq!(read_all(&log).len(), 20);
}

#[test]
fn follower_appends_must_continue_the_log() {
    let leader_fixture = Fixture::new();
    let leader = leader_fixture.open(small_config(), LoadState::default());
    append(&leader, 2, "a", T0);
    append(&leader, 3, "b", T0);
    let bytes = leader
        .read(0, 1 << 20, None)
        .unwrap()
        .slice
        .unwrap()
        .to_vec()
        .unwrap();

    let fixture = Fixture::new();
    let follower = fixture.open(small_config(), LoadState::default());
    let info = follower.append_as_follower(&bytes).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 4));
    assert_eq!(follower.latest_epoch(), Some(3));
    assert_eq!(
        follower
            .read(0, 1 << 20, None)
            .unwrap()
            .slice
            .unwrap()
            .to_vec()
            .unwrap(),
        bytes
    );
    // The same batches again do not continue the log.
    let error = follower.append_as_follower(&bytes).unwrap_err();
    assert!(
        matches!(error, super::LogError::OffsetsOutOfOrder(_)),
        "{error}"
    );
    assert_eq!(follower.log_end_offset(), 5);
}

#[test]
fn torn_write_at_every_byte_recovers_exactly_the_whole_batches() {
    let fixture = Fixture::new();
    let log = fixture.open(LogConfig::default(), LoadState::default());
    append(&log, 2, "a", T0);
    append(&log, 2, "b", T0);
    log.flush().unwrap();
    let durable = log.size_bytes();
    append(&log, 3, "c", T0);
    let full = log.size_bytes();
    let expected_prefix = read_all(&log);
    drop(log);
    let segment = fixture.path().join(format!("{:020}.log", 0));
    let original = fs::read(&segment).unwrap();
    for cut in durable..=full {
        fs::write(&segment, &original[..cut as usize]).unwrap();
        let log = fixture.open(
            LogConfig::default(),
            LoadState {
                recovery_point: 0,
                ..Default::default()
            },
        );
        let batches = read_all(&log);
        let whole = if cut == full { 3 } else { 2 };
        assert_same_batches(
            &batches,
            &expected_prefix[..whole],
            &format!("cut at byte {cut}"),
        );
        assert_eq!(log.log_end_offset(), if whole == 3 { 7 } else { 4 });
        drop(log);
    }
    // Garbage after the last whole batch is cut off, and the file is made whole again.
    let mut garbage = original.clone();
    garbage.extend_from_slice(&[0xab; 100]);
    fs::write(&segment, &garbage).unwrap();
    let log = fixture.open(LogConfig::default(), LoadState::default());
    assert_same_batches(&read_all(&log), &expected_prefix, "garbage tail");
    assert_eq!(fs::metadata(&segment).unwrap().len(), full);
}

#[test]
fn recovery_rescans_only_from_the_recovery_point() {
    let fixture = Fixture::new();
    let log = fixture.open(small_config(), LoadState::default());
    for n in 0..100 {
        append(&log, 4, &n.to_string(), T0);
    }
    let segments = log.segment_count();
    assert!(segments > 5, "{segments}");
    log.flush().unwrap();
    let recovery_point = log.recovery_point();
    let expected = read_all(&log);
    drop(log);
    let load = LoadState {
        recovery_point,
        ..Default::default()
    };
    let (log, stats) = Log::open(
        &fixture.path(),
        TopicPartition::new("topic", 0),
        small_config(),
        load,
        fixture.clock.clone(),
    )
    .unwrap();
    assert_eq!(
        stats.segments_recovered, 1,
        "only the active segment is rescanned"
    );
    assert_same_batches(&read_all(&log), &expected, "reopened");
    drop(log);
    let load = LoadState {
        clean_shutdown: true,
        recovery_point,
        ..Default::default()
    };
    let (log, stats) = Log::open(
        &fixture.path(),
        TopicPartition::new("topic", 0),
        small_config(),
        load,
        fixture.clock.clone(),
    )
    .unwrap();
    assert_eq!(
        stats.segments_recovered, 0,
        "a clean shutdown needs no rescan"
    );
    assert_same_batches(&read_all(&log), &expected, "reopened");
}

#[test]
fn truncation_cuts_batches_segments_and_epochs() {
    let fixture = Fixture::new();
    let log = fixture.open(small_config(), LoadState::default());
    let mut boundaries = Vec::new();
    for n in 0..30u64 {
        let batch = make_batch(3, &n.to_string(), T0);
        let epoch = (n / 10) as i32;
        let info = log
            .append_as_leader(&batch, epoch, AppendOrigin::Client)
            .unwrap();
        boundaries.push(info.first_offset);
    }
    assert_eq!(log.end_offset_for_epoch(1), Some((1, 60)));
    let segments = log.segment_count();
    // Truncating inside a batch removes the whole batch.
    assert_eq!(log.truncate_to(40).unwrap(), 39);
    assert_eq!(log.log_end_offset(), 39);
    assert!(log.segment_count() < segments);
    assert_eq!(log.latest_epoch(), Some(1));
    assert_eq!(log.end_offset_for_epoch(1), Some((1, 39)));
    assert_eq!(log.end_offset_for_epoch(2), None);
    assert_eq!(read_all(&log).len(), 13);
    // Appends continue from the cut, and the truncated segment is active again.
    let (first, _) = append(&log, 2, "after", T0);
    assert_eq!(first, 39);
    assert_eq!(log.truncate_to(0).unwrap(), 0);
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.segment_count(), 1);
    let (first, _) = append(&log, 1, "fresh", T0);
    assert_eq!(first, 0);
}

#[test]
fn the_high_watermark_is_raised_never_lowered_by_a_late_candidate() {
    let fixture = Fixture::new();
    let log = fixture.open(small_config(), LoadState::default());
    append(&log, 10, "a", T0);
    assert_eq!(log.raise_high_watermark(8), (0, 8));
    // An append that completed earlier raises with its older, smaller candidate: kept at 8.
    assert_eq!(log.raise_high_watermark(5), (8, 8));
    // Past the log end: clamped to it.
    assert_eq!(log.raise_high_watermark(99), (8, 10));
    // Many raisers at once, in any order: the high watermark ends at the largest.
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let log = &log;
            scope.spawn(move || {
                for candidate in (0..=10).rev().chain(0..=10) {
                    let (before, after) = log.raise_high_watermark(candidate + thread % 2);
                    assert!(after >= before, "moved back from {before} to {after}");
                }
            });
        }
    });
    assert_eq!(log.high_watermark(), 10);
}

#[test]
fn log_start_offset_and_retention_delete_old_segments() {
    let fixture = Fixture::new();
    let mut config = small_config();
    config.retention_ms = 10_000;
    let log = fixture.open(config.clone(), LoadState::default());
    for n in 0..40 {
        append(&log, 4, &n.to_string(), T0 + n);
    }
    let segments = log.segment_count();
    // DeleteRecords: not past the high watermark.
    log.set_high_watermark(40);
    assert_eq!(
        log.advance_log_start_offset(50).unwrap_err().kafka_error(),
        KafkaError::OffsetOutOfRange
    );
    log.set_high_watermark(log.log_end_offset());
    assert_eq!(log.advance_log_start_offset(50).unwrap(), 50);
    assert_eq!(
        log.read(49, 100, None).unwrap_err().kafka_error(),
        KafkaError::OffsetOutOfRange
    );
    assert!(log.read(50, 100, None).unwrap().slice.is_some());
    assert_eq!(
        log.advance_log_start_offset(10).unwrap(),
        50,
        "never backwards"
    );
    assert!(log.advance_log_start_offset(1_000).is_err());
    let outcome = log.delete_retention_breached_segments().unwrap();
    assert!(outcome.segments_deleted > 0);
    assert_eq!(outcome.log_start_offset, 50);
    assert!(log.segment_base_offsets()[0] <= 50);
    let deleted = log.take_pending_deletes();
    assert!(
        deleted
            .iter()
            .all(|p| p.to_string_lossy().ends_with(".deleted") && p.exists())
    );

    // Time: everything is older than retention.ms now, except the active segment stays.
    fixture.clock.advance(20_000);
    log.delete_retention_breached_segments().unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
    assert!(segments > 1);

    // Size: keep at most ~3 segments' worth.
    let fixture = Fixture::new();
    let mut config = small_config();
    config.retention_bytes = 3 * 4096;
    let log = fixture.open(config, LoadState::default());
    for n in 0..80 {
        append(&log, 4, &n.to_string(), T0);
    }
    // Nothing above the high watermark is deleted, whatever retention says.
    log.set_high_watermark(4);
    assert_eq!(
        log.delete_retention_breached_segments()
            .unwrap()
            .segments_deleted,
        0
    );
    log.set_high_watermark(log.log_end_offset());
    log.delete_retention_breached_segments().unwrap();
    assert!(log.size_bytes() <= 3 * 4096 + 4096, "{}", log.size_bytes());
    assert!(log.size_bytes() >= 3 * 4096 - 4096);
}

#[test]
fn timestamp_lookups_find_the_first_record_at_or_after() {
    let fixture = Fixture::new();
    let log = fixture.open(small_config(), LoadState::default());
    // Records at T0 + 10*n for offsets n = 0..200, one record a batch.
    for n in 0..200i64 {
        let mut builder = BatchBuilder::new(0, T0 + 10 * n);
        builder.push(T0 + 10 * n, Some(b"k"), Some(b"v"), &[]);
        log.append_as_leader(&builder.build(), 0, AppendOrigin::Client)
            .unwrap();
    }
    assert_eq!(log.offset_for_timestamp(T0).unwrap(), Some((0, T0)));
    assert_eq!(
        log.offset_for_timestamp(T0 + 555).unwrap(),
        Some((56, T0 + 560))
    );
    assert_eq!(
        log.offset_for_timestamp(T0 + 1990).unwrap(),
        Some((199, T0 + 1990))
    );
    assert_eq!(log.offset_for_timestamp(T0 + 1991).unwrap(), None);
    assert_eq!(log.max_timestamp_offset().unwrap(), Some((199, T0 + 1990)));
    // Within a multi-record batch, the exact record.
    let mut builder = BatchBuilder::new(0, T0 + 5000);
    for n in 0..5 {
        builder.push(T0 + 5000 + n * 100, Some(b"k"), Some(b"v"), &[]);
    }
    log.append_as_leader(&builder.build(), 0, AppendOrigin::Client)
        .unwrap();
    assert_eq!(
        log.offset_for_timestamp(T0 + 5150).unwrap(),
        Some((202, T0 + 5200))
    );
    // After a restart the answers are the same (indexes rebuilt or reloaded).
    log.flush().unwrap();
    let rp = log.recovery_point();
    drop(log);
    let log = fixture.open(
        small_config(),
        LoadState {
            recovery_point: rp,
            ..Default::default()
        },
    );
    assert_eq!(
        log.offset_for_timestamp(T0 + 555).unwrap(),
        Some((56, T0 + 560))
    );
    assert_eq!(log.max_timestamp_offset().unwrap(), Some((204, T0 + 5400)));
}

#[test]
fn log_append_time_replaces_timestamps() {
    let fixture = Fixture::new();
    let config = LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        ..small_config()
    };
    let log = fixture.open(config, LoadState::default());
    let batch = make_batch(2, "a", 5);
    let info = log
        .append_as_leader(&batch, 0, AppendOrigin::Client)
        .unwrap();
    assert_eq!(info.log_append_time_ms, Some(T0));
    let stored = log
        .read(0, 1000, None)
        .unwrap()
        .slice
        .unwrap()
        .to_vec()
        .unwrap();
    let h = header(&stored);
    assert!(h.is_log_append_time());
    assert_eq!(h.max_timestamp, T0);
    super::batch::validate_batch(0, &h, &stored).unwrap();
}

#[test]
fn flush_policy_always_acknowledges_only_durable_appends_with_concurrent_appenders() {
    let fixture = Fixture::new();
    let config = LogConfig {
        flush_policy: FlushPolicy::Always,
        ..LogConfig::default()
    };
    let log = Arc::new(fixture.open(config, LoadState::default()));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for n in 0..50 {
                    let batch = make_batch(2, &format!("{t}-{n}"), T0);
                    let info = log
                        .append_as_leader(&batch, 0, AppendOrigin::Client)
                        .unwrap();
                    assert!(
                        log.recovery_point() > info.last_offset,
                        "acknowledged before durable"
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(log.log_end_offset(), 800);
    assert_eq!(log.recovery_point(), 800);
}

#[test]
fn flush_messages_interval_flushes() {
    let fixture = Fixture::new();
    let config = LogConfig {
        flush_messages: 10,
        ..LogConfig::default()
    };
    let log = fixture.open(config, LoadState::default());
    append(&log, 4, "a", T0);
    assert_eq!(log.recovery_point(), 0);
    append(&log, 4, "b", T0);
    append(&log, 4, "c", T0);
    assert_eq!(log.recovery_point(), 12);
}

/// Offsets -> (key, value) of every record in `batches`.
pub(super) fn records_of(batches: &[Vec<u8>]) -> Vec<(u64, Vec<u8>, Option<Vec<u8>>)> {
    let mut records = Vec::new();
    for batch in batches {
        let h = header(batch);
        for record in RecordIter::new(&h, batch) {
            let record = record.unwrap();
            records.push((
                record.offset(&h) as u64,
                record.key.unwrap().to_vec(),
                record.value.map(<[u8]>::to_vec),
            ));
        }
    }
    records
}

#[test]
fn compaction_keeps_the_latest_value_per_key_and_drops_tombstones_after_the_horizon() {
    let fixture = Fixture::new();
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        delete_retention_ms: 1_000,
        min_cleanable_dirty_ratio: 0.01,
        ..small_config()
    };
    let log = fixture.open(config, LoadState::default());
    // 10 keys overwritten 20 times; then key-3 deleted with a tombstone.
    for round in 0..20 {
        let mut builder = BatchBuilder::new(0, T0);
        for key in 0..10 {
            builder.push(
                T0,
                Some(format!("key-{key}").as_bytes()),
                Some(format!("v{round}").as_bytes()),
                &[],
            );
        }
        log.append_as_leader(&builder.build(), 0, AppendOrigin::Client)
            .unwrap();
    }
    let mut tombstone = BatchBuilder::new(0, T0);
    tombstone.push(T0, Some(b"key-3"), None, &[]);
    log.append_as_leader(&tombstone.build(), 0, AppendOrigin::Client)
        .unwrap();
    log.roll_now().unwrap();
    append(&log, 1, "tail", T0);
    log.set_high_watermark(log.log_end_offset());
    let before = log.size_bytes();
    let end = log.log_end_offset();

    let outcome = log.clean(0, 1 << 20).unwrap();
    assert!(outcome.records_removed >= 190, "{outcome:?}");
    assert!(log.size_bytes() < before / 4);
    let records = records_of(&read_all(&log));
    for key in 0..10 {
        let name = format!("key-{key}").into_bytes();
        let of_key: Vec<_> = records.iter().filter(|r| r.1 == name).collect();
        if key == 3 {
            assert_eq!(of_key.len(), 1, "only the tombstone remains");
            assert_eq!(of_key[0].2, None);
        } else if key == 0 {
            // key-0 also appears in the active segment ("tail" batch), which is never cleaned.
            assert!(of_key.iter().any(|r| r.2.as_deref() == Some(&b"v19"[..])));
        } else {
            assert_eq!(of_key.len(), 1, "key-{key}");
            assert_eq!(of_key[0].2.as_deref(), Some(&b"v19"[..]));
        }
    }
    assert_eq!(log.log_end_offset(), end, "offsets are kept");
    let pending = log.take_pending_deletes();
    assert!(!pending.is_empty());

    // Before the horizon the tombstone stays; after it, it goes.
    let plan = log.cleanable(outcome.first_dirty_offset).unwrap();
    assert!(!plan.due);
    fixture.clock.advance(1_001);
    let plan = log.cleanable(outcome.first_dirty_offset).unwrap();
    assert!(plan.due, "a passed delete horizon makes the log due");
    let outcome = log.clean(outcome.first_dirty_offset, 1 << 20).unwrap();
    assert_eq!(outcome.tombstones_removed, 1);
    let records = records_of(&read_all(&log));
    assert!(records.iter().all(|r| r.1 != b"key-3"));

    // The compacted log survives a crash and restart unchanged.
    let expected = read_all(&log);
    drop(log);
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        ..small_config()
    };
    let log = fixture.open(config, LoadState::default());
    assert_same_batches(&read_all(&log), &expected, "reopened");
}

#[test]
fn an_interrupted_swap_is_completed_on_open() {
    let fixture = Fixture::new();
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        min_cleanable_dirty_ratio: 0.01,
        ..small_config()
    };
    let log = fixture.open(config.clone(), LoadState::default());
    for round in 0..100 {
        let mut builder = BatchBuilder::new(0, T0);
        for key in 0..5 {
            builder.push(
                T0,
                Some(format!("key-{key}").as_bytes()),
                Some(format!("v{round}").as_bytes()),
                &[],
            );
        }
        log.append_as_leader(&builder.build(), 0, AppendOrigin::Client)
            .unwrap();
    }
    log.roll_now().unwrap();
    log.set_high_watermark(log.log_end_offset());
    let segments_before = log.segment_base_offsets();
    assert!(segments_before.len() > 3);
    log.flush().unwrap();
    drop(log);

    // Simulate a crash right after the commit point: the swap exists, the old segments too.
    // Build the swap as the cleaner would, in a scratch copy of the log.
    let scratch = tempfile::tempdir().unwrap();
    let scratch_dir = scratch.path().join("topic-0");
    fs::create_dir_all(&scratch_dir).unwrap();
    for entry in fs::read_dir(fixture.path()).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), scratch_dir.join(entry.file_name())).unwrap();
    }
    let (copy, _) = Log::open(
        &scratch_dir,
        TopicPartition::new("topic", 0),
        config.clone(),
        LoadState::default(),
        fixture.clock.clone(),
    )
    .unwrap();
    copy.set_high_watermark(copy.log_end_offset());
    copy.clean(0, 1 << 20).unwrap();
    let expected = read_all(&copy);
    let cleaned_bases = copy.segment_base_offsets();
    drop(copy);
    for base in &cleaned_bases[..cleaned_bases.len() - 1] {
        let cleaned = fs::read(scratch_dir.join(format!("{base:020}.log"))).unwrap();
        fs::write(fixture.path().join(format!("{base:020}.log.swap")), cleaned).unwrap();
    }
    fs::write(
        fixture
            .path()
            .join(format!("{:020}.log.cleaned", cleaned_bases[0])),
        b"partial",
    )
    .unwrap();

    let (log, stats) = Log::open(
        &fixture.path(),
        TopicPartition::new("topic", 0),
        config,
        LoadState::default(),
        fixture.clock.clone(),
    )
    .unwrap();
    assert_eq!(stats.swaps_completed, cleaned_bases.len() - 1);
    assert_same_batches(&read_all(&log), &expected, "after completing swaps");
    let names: Vec<String> = fs::read_dir(fixture.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.ends_with(".swap") && !n.ends_with(".cleaned")),
        "{names:?}"
    );
}

#[test]
fn log_manager_checkpoints_locks_and_restarts_cleanly() {
    use super::manager::{CLEAN_SHUTDOWN_FILE, LogManager, LogManagerConfig};
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let config = LogManagerConfig {
        log_dirs: vec![dir.path().join("a"), dir.path().join("b")],
        default_log_config: small_config(),
        ..LogManagerConfig::default()
    };
    let manager = LogManager::open(config.clone(), clock.clone()).unwrap();
    let error = LogManager::open(config.clone(), clock.clone()).unwrap_err();
    assert!(
        error.to_string().contains("another process holds its lock"),
        "{error}"
    );
    let tps: Vec<_> = (0..4).map(|p| TopicPartition::new("orders", p)).collect();
    for tp in &tps {
        let log = manager.get_or_create(tp, small_config()).unwrap();
        append(&log, 3, "x", T0);
    }
    // Logs spread over both dirs.
    assert!(dir.path().join("a/orders-0").exists() != dir.path().join("b/orders-0").exists());
    assert_eq!(
        fs::read_dir(dir.path().join("a"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().is_dir())
            .count(),
        2
    );
    manager.shutdown().unwrap();
    assert!(dir.path().join("a").join(CLEAN_SHUTDOWN_FILE).exists());
    let text = fs::read_to_string(dir.path().join("a/recovery-point-offset-checkpoint")).unwrap();
    assert!(
        text.starts_with("0\n2\n") && text.contains(" 3\n"),
        "{text}"
    );
    drop(manager);

    let manager = LogManager::open(config.clone(), clock.clone()).unwrap();
    assert!(
        !dir.path().join("a").join(CLEAN_SHUTDOWN_FILE).exists(),
        "marker consumed at start"
    );
    for tp in &tps {
        assert_eq!(manager.get(tp).unwrap().log_end_offset(), 3);
    }
    // Topic deletion renames at once and removes after the delay.
    assert!(manager.delete(&tps[0]).unwrap());
    assert!(manager.get(&tps[0]).is_none());
    clock.advance(60_001);
    manager.maintain(false).unwrap();
    let leftovers = fs::read_dir(dir.path().join("a"))
        .unwrap()
        .chain(fs::read_dir(dir.path().join("b")).unwrap())
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("orders-0")
        })
        .count();
    assert_eq!(leftovers, 0);
}

#[test]
fn each_log_dir_is_described_with_its_online_logs_and_its_filesystem() {
    use super::manager::{LogManager, LogManagerConfig};
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let config = LogManagerConfig {
        log_dirs: vec![dir.path().join("a"), dir.path().join("b")],
        default_log_config: small_config(),
        ..LogManagerConfig::default()
    };
    let manager = LogManager::open(config, clock).unwrap();
    let tps: Vec<_> = (0..4).map(|p| TopicPartition::new("orders", p)).collect();
    for (n, tp) in tps.iter().enumerate() {
        let log = manager.get_or_create(tp, small_config()).unwrap();
        append(&log, n + 1, "x", T0);
    }
    let described = manager.describe_dirs(|_| true);
    let paths: Vec<_> = described.iter().map(|d| d.path.clone()).collect();
    assert_eq!(paths, [dir.path().join("a"), dir.path().join("b")]);
    let mut seen = Vec::new();
    for described_dir in &described {
        let space = described_dir
            .space
            .as_ref()
            .expect("a tempdir's filesystem");
        assert!(space.total_bytes > 0 && space.usable_bytes <= space.total_bytes);
        for log in &described_dir.logs {
            let on_disk = described_dir
                .path
                .join(format!("orders-{}", log.topic_partition.partition));
            assert!(
                on_disk.is_dir(),
                "{} is not where its dir says",
                log.topic_partition
            );
            let real = manager.get(&log.topic_partition).unwrap();
            assert_eq!(log.size_bytes, real.size_bytes());
            assert!(log.size_bytes > 0);
            assert_eq!(log.log_end_offset, log.topic_partition.partition as u64 + 1);
            seen.push(log.topic_partition.clone());
        }
    }
    seen.sort();
    assert_eq!(seen, tps, "every log once, in the dir that holds it");

    // The filter selects; an offline log is left out; every dir is still listed.
    manager.get(&tps[1]).unwrap().fence("test");
    let described = manager.describe_dirs(|tp| tp.partition <= 1);
    assert_eq!(described.len(), 2);
    let listed: Vec<_> = described
        .iter()
        .flat_map(|d| d.logs.iter().map(|l| l.topic_partition.clone()))
        .collect();
    assert_eq!(listed, [tps[0].clone()]);

    // A dir gone from under the broker cannot be asked about.
    fs::remove_dir_all(dir.path().join("b")).unwrap();
    let described = manager.describe_dirs(|_| true);
    assert!(described[0].space.is_ok());
    assert!(described[1].space.is_err(), "{:?}", described[1].space);
}

#[test]
fn flush_ms_and_rolled_segments_are_flushed_by_housekeeping() {
    let fixture = Fixture::new();
    let config = LogConfig {
        flush_ms: 1_000,
        ..small_config()
    };
    let log = fixture.open(config, LoadState::default());
    for n in 0..20 {
        append(&log, 4, &n.to_string(), T0);
    }
    assert_eq!(log.recovery_point(), 0);
    let active_base = *log.segment_base_offsets().last().unwrap();
    // Not due yet, but segments rolled: they are flushed (with whatever follows them).
    log.flush_if_due().unwrap();
    assert!(log.recovery_point() >= active_base);
    append(&log, 1, "more", T0);
    let before = log.recovery_point();
    log.flush_if_due().unwrap();
    assert_eq!(log.recovery_point(), before, "no roll, not due: no flush");
    fixture.clock.advance(1_000);
    log.flush_if_due().unwrap();
    assert_eq!(log.recovery_point(), log.log_end_offset());
}

#[test]
fn compaction_honours_dirty_ratio_and_compaction_lag() {
    let fixture = Fixture::new();
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        min_cleanable_dirty_ratio: 0.75,
        min_compaction_lag_ms: 10_000,
        ..small_config()
    };
    let log = fixture.open(config, LoadState::default());
    let write_round = |round: usize, timestamp: i64| {
        let mut builder = BatchBuilder::new(0, timestamp);
        for key in 0..8 {
            builder.push(
                timestamp,
                Some(format!("key-{key}").as_bytes()),
                Some(format!("v{round}-{:-<40}", "").as_bytes()),
                &[],
            );
        }
        log.append_as_leader(&builder.build(), 0, AppendOrigin::Client)
            .unwrap();
    };
    for round in 0..40 {
        write_round(round, T0);
    }
    log.roll_now().unwrap();
    log.set_high_watermark(log.log_end_offset());
    // Every record is younger than min.compaction.lag.ms: nothing is cleanable.
    assert!(log.cleanable(0).is_none());
    assert_eq!(log.clean(0, 1 << 20).unwrap().segments_cleaned, 0);
    fixture.clock.advance(10_001);
    let plan = log.cleanable(0).unwrap();
    assert!(plan.due && plan.dirty_ratio == 1.0, "{plan:?}");
    let outcome = log.clean(0, 1 << 20).unwrap();
    assert!(outcome.segments_cleaned > 0);
    // A little new dirt on a clean log stays below the ratio.
    write_round(99, fixture.clock.now_ms() - 20_000);
    log.roll_now().unwrap();
    log.set_high_watermark(log.log_end_offset());
    let plan = log.cleanable(outcome.first_dirty_offset).unwrap();
    assert!(plan.dirty_bytes > 0 && !plan.due, "{plan:?}");
}

/// A leader checks the records inside a compressed batch too (Kafka's LogValidator): good
/// ones are appended, a batch whose header claims a record more than it holds is refused
/// with INVALID_RECORD, naming what is wrong.
#[test]
fn a_leader_checks_the_records_of_compressed_batches() {
    let fixture = Fixture::new();
    let log = fixture.open(small_config(), LoadState::default());
    let compressed = |claimed: Option<i32>| {
        let mut builder = BatchBuilder::new(0, T0);
        for n in 0..3 {
            builder.push(T0 + n, Some(b"k"), Some(b"value"), &[]);
        }
        let mut batch = builder.build_compressed(1).unwrap();
        if let Some(count) = claimed {
            batch[23..27].copy_from_slice(&(count - 1).to_be_bytes());
            batch[57..61].copy_from_slice(&count.to_be_bytes());
            let crc = super::batch::compute_crc(&batch);
            batch[17..21].copy_from_slice(&crc.to_be_bytes());
        }
        batch
    };
    let info = log
        .append_as_leader(&compressed(None), 0, AppendOrigin::Client)
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 2));
    let error = log
        .append_as_leader(&compressed(Some(4)), 0, AppendOrigin::Client)
        .unwrap_err();
    assert!(
        matches!(&error, LogError::InvalidRecord { reason, .. } if reason.contains("truncated")),
        "{error}"
    );
    assert_eq!(log.log_end_offset(), 3);
}

/// A "compressed" batch claiming `count` records (a follower appends it without decompressing;
/// a leader would refuse it).
fn compressed_batch_claiming(count: i32) -> Vec<u8> {
    let mut batch = make_batch(1, "c", T0);
    batch[21..23].copy_from_slice(&1i16.to_be_bytes()); // gzip
    batch[23..27].copy_from_slice(&(count - 1).to_be_bytes());
    batch[57..61].copy_from_slice(&count.to_be_bytes());
    let crc = super::batch::compute_crc(&batch);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    batch
}

#[test]
fn appends_spanning_more_offsets_than_an_index_holds_roll_between_batches() {
    let fixture = Fixture::new();
    let log = fixture.open(LogConfig::default(), LoadState::default());
    let batches: Vec<Vec<u8>> = (0..3)
        .map(|n| {
            let mut batch = compressed_batch_claiming(i32::MAX);
            super::batch::set_base_offset_and_epoch(&mut batch, n * i64::from(i32::MAX), 0);
            batch
        })
        .collect();
    let info = log.append_as_follower(&batches.concat()).unwrap();
    assert_eq!(info.last_offset + 1, 3 * i32::MAX as u64);
    assert!(
        log.segment_count() >= 2,
        "offsets beyond u32 from a segment base need a new segment"
    );
    append(&log, 1, "after", T0);
    let expected = read_all(&log);
    drop(log);
    let log = fixture.open(LogConfig::default(), LoadState::default());
    assert_same_batches(&read_all(&log), &expected, "after recovery");
}

#[test]
fn follower_appends_accept_gaps_far_beyond_the_segment_base() {
    let leader_fixture = Fixture::new();
    let leader = leader_fixture.open(small_config(), LoadState::default());
    append(&leader, 2, "a", T0);
    let mut bytes = leader
        .read(0, 1 << 20, None)
        .unwrap()
        .slice
        .unwrap()
        .to_vec()
        .unwrap();
    let far = 10_000_000_000i64;
    bytes[0..8].copy_from_slice(&far.to_be_bytes());
    let fixture = Fixture::new();
    let follower = fixture.open(small_config(), LoadState::default());
    let info = follower.append_as_follower(&bytes).unwrap();
    assert_eq!(info.first_offset, far as u64);
    assert_eq!(follower.log_end_offset(), far as u64 + 2);
    // Offsets that overflow are refused, not wrapped.
    let mut overflow = bytes.clone();
    overflow[0..8].copy_from_slice(&(i64::MAX - 1).to_be_bytes());
    assert!(follower.append_as_follower(&overflow).is_err());
    drop(follower);
    let follower = fixture.open(small_config(), LoadState::default());
    assert_eq!(follower.log_end_offset(), far as u64 + 2);
    assert_eq!(read_all(&follower).len(), 1);
}

#[test]
fn the_records_not_the_producer_set_the_batch_max_timestamp() {
    let fixture = Fixture::new();
    let log = fixture.open(small_config(), LoadState::default());
    let mut batch = make_batch(3, "a", T0);
    super::batch::set_max_timestamp(&mut batch, 5);
    log.append_as_leader(&batch, 0, AppendOrigin::Client)
        .unwrap();
    let stored = read_all(&log);
    assert_eq!(header(&stored[0]).max_timestamp, T0 + 2);
    assert_eq!(log.offset_for_timestamp(T0 + 1).unwrap(), Some((1, T0 + 1)));
}

/// A leader append writes its offsets, epoch and timestamp fixes over the producer's batches
/// as the log is written, without changing the buffer they came in (a Produce request's,
/// shared by its partitions): several batches in one append, one of them rewritten for its
/// max timestamp, across a segment roll.
#[test]
fn a_leader_append_stamps_what_it_writes_and_leaves_the_producers_buffer_as_it_was() {
    let fixture = Fixture::new();
    let log = fixture.open(small_config(), LoadState::default());
    // Most of a 4 KiB segment, so the append below rolls to a new one partway.
    let (_, last) = append(&log, 80, "first", T0);
    let mut lying = make_batch(3, "lying", T0);
    super::batch::set_max_timestamp(&mut lying, 5);
    let batches = [
        make_batch(4, "a", T0),
        lying,
        make_batch(60, "big", T0),
        make_batch(1, "b", T0),
    ];
    let buffer: Vec<u8> = batches.concat();
    let before = buffer.clone();
    let info = log
        .append_as_leader(&buffer, 9, AppendOrigin::Client)
        .unwrap();
    assert_eq!(buffer, before, "the producer's buffer changed");
    assert_eq!((info.first_offset, info.last_offset), (last + 1, last + 68));
    assert!(
        log.segment_base_offsets().len() > 1,
        "no roll inside the append"
    );
    let stored = read_all(&log);
    assert_eq!(stored.len(), 5);
    let mut offset = last as i64 + 1;
    for (written, sent) in stored[1..].iter().zip(&batches) {
        let (written_header, sent_header) = (header(written), header(sent));
        assert_eq!(written_header.base_offset, offset);
        assert_eq!(written_header.partition_leader_epoch, 9);
        assert_eq!(super::batch::compute_crc(written), written_header.crc);
        // Past the stamped prefix, a batch is the producer's byte for byte unless its max
        // timestamp was wrong.
        if sent_header.max_timestamp == 5 {
            assert_eq!(written_header.max_timestamp, T0 + 2);
        } else {
            assert_eq!(written[16..], sent[16..]);
        }
        offset += i64::from(sent_header.records_count);
    }
}

#[test]
fn overlapping_segments_refuse_to_open_rather_than_drop_data() {
    let fixture = Fixture::new();
    let log = fixture.open(small_config(), LoadState::default());
    for n in 0..30 {
        append(&log, 4, &n.to_string(), T0);
    }
    let bases = log.segment_base_offsets();
    drop(log);
    // A second segment renamed to start inside the first.
    let second = fixture.path().join(format!("{:020}.log", bases[1]));
    fs::rename(
        &second,
        fixture.path().join(format!("{:020}.log", bases[1] - 1)),
    )
    .unwrap();
    let result = Log::open(
        &fixture.path(),
        TopicPartition::new("topic", 0),
        small_config(),
        LoadState::default(),
        fixture.clock.clone(),
    );
    assert!(result.is_err());
    assert!(
        fixture
            .path()
            .join(format!("{:020}.log", bases[2]))
            .exists(),
        "nothing deleted"
    );
}

#[test]
fn a_cleaner_checkpoint_past_the_recovered_log_end_is_lowered() {
    use super::checkpoint::CLEANER_OFFSET_CHECKPOINT;
    use super::manager::{LogManager, LogManagerConfig};
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let config = LogManagerConfig {
        log_dirs: vec![dir.path().to_path_buf()],
        default_log_config: small_config(),
        ..LogManagerConfig::default()
    };
    let tp = TopicPartition::new("compacted", 0);
    let manager = LogManager::open(config.clone(), clock.clone()).unwrap();
    let log = manager.get_or_create(&tp, small_config()).unwrap();
    append(&log, 5, "x", T0);
    drop(log);
    manager.shutdown().unwrap();
    drop(manager);
    // A checkpoint written before a crash cut the log back to offset 5.
    let checkpoint = dir.path().join(CLEANER_OFFSET_CHECKPOINT);
    fs::write(&checkpoint, "0\n1\ncompacted 0 40\n").unwrap();
    let manager = LogManager::open(config, clock).unwrap();
    let text = fs::read_to_string(&checkpoint).unwrap();
    assert_eq!(text, "0\n1\ncompacted 0 5\n");
    // And the cleaner itself treats a checkpoint past the end as stale: all is dirty again.
    let log = manager.get(&tp).unwrap();
    let compact = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        ..small_config()
    };
    log.update_config(compact);
    log.roll_now().unwrap();
    log.set_high_watermark(log.log_end_offset());
    let plan = log.cleanable(40).unwrap();
    assert_eq!(plan.first_dirty_offset, 0, "{plan:?}");
}

#[test]
fn a_fenced_log_refuses_appends_and_counts_as_gone_offline() {
    let fixture = Fixture::new();
    let log = fixture.open(small_config(), LoadState::default());
    append(&log, 1, "a", T0);
    let before = super::partition_log::LOGS_GONE_OFFLINE.load(std::sync::atomic::Ordering::Acquire);
    log.fence("a test's broken invariant");
    log.fence("once is enough");
    assert!(log.is_offline());
    let after = super::partition_log::LOGS_GONE_OFFLINE.load(std::sync::atomic::Ordering::Acquire);
    assert!(after > before, "the offline reporter is woken");
    let batch = make_batch(1, "b", T0);
    let error = log
        .append_as_leader(&batch, 0, AppendOrigin::Client)
        .unwrap_err();
    assert_eq!(
        error.kafka_error(),
        crate::protocol::errors::KafkaError::KafkaStorageError
    );
}

/// Compaction with transactions: an aborted record neither supersedes a committed one nor
/// survives; nothing at or past the first undecided transaction is compacted; a marker whose
/// transaction kept no record goes once its delete horizon passed, the others stay.
#[test]
fn compaction_drops_aborted_records_and_empty_markers_and_stops_at_undecided_transactions() {
    use crate::log::batch::TxnMarker;
    use crate::log::txn_index::AbortedTxn;
    let fixture = Fixture::new();
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        min_cleanable_dirty_ratio: 0.01,
        delete_retention_ms: 1_000,
        ..small_config()
    };
    let log = fixture.open(config, LoadState::default());
    let keyed = |key: &str, value: &str| {
        let mut builder = BatchBuilder::new(0, T0);
        builder.push(T0, Some(key.as_bytes()), Some(value.as_bytes()), &[]);
        builder
    };
    let write = |batch: Vec<u8>, origin| log.append_as_leader(&batch, 0, origin).unwrap();
    let marker = |commit| TxnMarker {
        commit,
        coordinator_epoch: 0,
    };
    write(keyed("a", "committed").build(), AppendOrigin::Client); // 0
    let aborted = write(
        keyed("a", "aborted")
            .producer(5, 0, 0)
            .transactional()
            .build(),
        AppendOrigin::Client,
    ); // 1
    let abort_at = write(marker(false).batch(5, 0, T0), AppendOrigin::Internal); // 2
    log.add_aborted(AbortedTxn {
        producer_id: 5,
        first_offset: aborted.first_offset,
        last_offset: abort_at.first_offset,
        last_stable_offset: abort_at.first_offset + 1,
    })
    .unwrap();
    write(keyed("b", "one").build(), AppendOrigin::Client); // 3
    write(
        keyed("c", "kept").producer(7, 0, 0).transactional().build(),
        AppendOrigin::Client,
    ); // 4
    write(marker(true).batch(7, 0, T0), AppendOrigin::Internal); // 5
    log.roll_now().unwrap();
    // An undecided transaction from offset 6 on: the cleaner stops before it.
    write(
        keyed("b", "open").producer(6, 0, 0).transactional().build(),
        AppendOrigin::Client,
    ); // 6
    write(keyed("b", "two").build(), AppendOrigin::Client); // 7
    log.roll_now().unwrap();
    append(&log, 1, "tail", T0);
    log.set_high_watermark(log.log_end_offset());
    log.set_first_unstable_offset(6);

    let markers = |log: &Log| -> Vec<i64> {
        read_all(log)
            .iter()
            .map(|b| header(b))
            .filter(|h| h.is_control())
            .map(|h| h.producer_id)
            .collect()
    };
    let outcome = log.clean(0, 1 << 20).unwrap();
    assert_eq!(
        outcome.records_removed, 1,
        "only the aborted record: {outcome:?}"
    );
    assert!(
        outcome.first_dirty_offset <= 6,
        "cleaned past the undecided transaction: {outcome:?}"
    );
    let records = records_of(&read_all(&log));
    let values = |key: &[u8]| -> Vec<Option<Vec<u8>>> {
        records
            .iter()
            .filter(|r| r.1 == key)
            .map(|r| r.2.clone())
            .collect()
    };
    // The committed value of `a` is kept: the later aborted one did not supersede it.
    assert_eq!(values(b"a"), vec![Some(b"committed".to_vec())]);
    // `b` past the undecided transaction is not compacted yet.
    assert_eq!(values(b"b").len(), 3);
    // Both markers stay until the abort marker's horizon (its transaction kept nothing).
    assert_eq!(markers(&log), vec![5, 7]);
    assert_eq!(outcome.next_delete_horizon_ms, Some(T0 + 1_000));

    // Decided, and past the horizon: `b` compacts to its latest value, the empty
    // transaction's marker goes, the committed one whose record stays keeps its marker.
    log.set_first_unstable_offset(u64::MAX);
    fixture.clock.advance(1_001);
    log.clean(outcome.first_dirty_offset, 1 << 20).unwrap();
    let records = records_of(&read_all(&log));
    let b: Vec<_> = records.iter().filter(|r| r.1 == b"b").collect();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].2.as_deref(), Some(&b"two"[..]));
    assert_eq!(markers(&log), vec![7]);
    assert!(records.iter().any(|r| r.1 == b"c"));
}
