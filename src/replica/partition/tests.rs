//! The replica layer's leader and follower paths on real logs in a temporary directory: when an
//! `acks=all` append is acknowledged, what a promoted follower knows of producers, and producer
//! state after truncation.

use std::sync::Arc;

use super::*;
use crate::log::batch::BatchBuilder;
use crate::log::config::ManualClock;
use crate::log::{LoadState, LogConfig};
use crate::replica::clock::{ManualClock as ManualInstantClock, SystemClock};

const ME: BrokerId = 1;
const PRODUCER: i64 = 7;

struct Replica {
    _dir: tempfile::TempDir,
    partition: Partition,
}

fn state(leader: BrokerId, leader_epoch: i32, isr: &[BrokerId]) -> PartitionState {
    PartitionState {
        topic_id: Uuid(42),
        leader,
        leader_epoch,
        partition_epoch: leader_epoch,
        replicas: vec![1, 2, 3],
        isr: isr.to_vec(),
    }
}

fn replica(broker_id: BrokerId, initial: PartitionState, segment_bytes: u64) -> Replica {
    replica_with_clock(broker_id, initial, segment_bytes, Arc::new(SystemClock))
}

fn replica_with_clock(
    broker_id: BrokerId,
    initial: PartitionState,
    segment_bytes: u64,
    clock: Arc<dyn crate::replica::clock::Clock>,
) -> Replica {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(
        &dir.path().join("topic-0"),
        TopicPartition::new("topic", 0),
        config,
        LoadState::default(),
        Arc::new(ManualClock::new(1_000)),
    )
    .expect("open log");
    let partition = Partition::open(
        TopicPartition::new("topic", 0),
        Arc::new(log),
        broker_id,
        initial,
        clock,
    )
    .expect("open partition");
    Replica {
        _dir: dir,
        partition,
    }
}

/// An idempotent batch of `count` records starting at `sequence`.
fn batch(producer_id: i64, producer_epoch: i16, sequence: i32, count: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 1_000).producer(producer_id, producer_epoch, sequence);
    for n in 0..count {
        let value = format!("{producer_id}-{producer_epoch}-{}", sequence as usize + n);
        builder.push(1_000, None, Some(value.as_bytes()), &[]);
    }
    builder.build()
}

fn append(partition: &Partition, records: Vec<u8>) -> Appended {
    partition
        .append_as_leader(&records, -1, 1)
        .expect("append as leader")
}

/// Replicates everything `leader` has past `follower`'s log end, as a fetch would.
fn replicate(leader: &Partition, follower: &Partition) {
    loop {
        let from = follower.log.log_end_offset();
        let read = leader.log.read(from, 1 << 20, None).expect("read");
        let Some(slice) = read.slice else { return };
        let mut records = Vec::new();
        slice.read_into(&mut records).expect("read slice");
        if records.is_empty() {
            return;
        }
        follower
            .append_as_follower(&records)
            .expect("append as follower");
        leader.update_follower(follower.broker_id(), follower.log.log_end_offset());
    }
}

fn values(log: &Log) -> Vec<String> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, None).expect("read");
        let Some(slice) = read.slice else { break };
        let mut bytes = Vec::new();
        slice.read_into(&mut bytes).expect("read slice");
        for (_, header, body) in BatchIter::new(&bytes).filter_map(Result::ok) {
            for record in crate::log::batch::RecordIter::new(&header, body) {
                let record = record.expect("record");
                out.push(String::from_utf8_lossy(record.value.unwrap_or_default()).into_owned());
            }
            offset = header.last_offset() as u64 + 1;
        }
    }
    out
}

/// The regression of the 300 s five-node jepsen run (seed 4242): the controller fenced the
/// leader (it had lost its quorum for a moment and then fenced every broker), the partition
/// went offline with the leader alone in its ISR, and came back to the same broker at a new
/// leader epoch. The `acks=all` append waiting meanwhile was answered NOT_LEADER_OR_FOLLOWER
/// although its records stayed in the log and were committed a moment later; librdkafka had
/// bumped its producer epoch meanwhile (other messages had timed out) and re-sent them under
/// new sequence numbers, which stored them twice. Now the wait goes on across the epoch change
/// and is acknowledged once the ISR holds them; a plain retry is answered as a duplicate.
#[test]
fn an_acks_all_append_outlives_the_leader_going_offline_and_back() {
    let leader = replica(ME, state(ME, 5, &[1, 2, 3]), 1 << 30);
    let follower = replica(2, state(ME, 5, &[1, 2, 3]), 1 << 30);
    let partition = &leader.partition;
    let first = append(partition, batch(PRODUCER, 0, 0, 10));
    replicate(partition, &follower.partition);
    leader.partition.update_follower(3, 10);
    assert_eq!(
        partition.ack_state(&first.pending, 2),
        AckState::Acknowledged
    );

    // Followers cut off: the next batch waits.
    let waiting = append(partition, batch(PRODUCER, 0, 10, 5));
    assert_eq!(waiting.info.first_offset, 10);
    assert_eq!(partition.ack_state(&waiting.pending, 2), AckState::Waiting);
    // Fenced: followers out of the ISR (the high watermark follows the leader alone), then
    // the leader itself, the partition offline.
    partition.set_state(state(ME, 5, &[1]));
    assert_eq!(
        partition.ack_state(&waiting.pending, 2),
        AckState::UnderMinIsr,
        "committed by an ISR of one, below min.insync.replicas: keep waiting"
    );
    partition.set_state(state(-1, 6, &[1]));
    assert_eq!(
        partition.ack_state(&waiting.pending, 2),
        AckState::UnderMinIsr,
        "offline is not deposed: no other broker can take the records' offsets"
    );
    // Unfenced: the same broker leads at a new epoch, alone in the ISR.
    partition.set_state(state(ME, 7, &[1]));
    assert_eq!(
        partition.ack_state(&waiting.pending, 2),
        AckState::UnderMinIsr
    );
    // A follower catches up and the ISR grows back: acknowledged, with its first offsets.
    replicate(partition, &follower.partition);
    partition.set_state(state(ME, 7, &[1, 2]));
    assert_eq!(
        partition.ack_state(&waiting.pending, 2),
        AckState::Acknowledged
    );
    // A producer retry of the same batch is a duplicate, never appended again.
    let retry = append(partition, batch(PRODUCER, 0, 10, 5));
    assert!(retry.duplicate);
    assert_eq!((retry.info.first_offset, retry.info.last_offset), (10, 14));
    assert_eq!(
        partition.ack_state(&retry.pending, 2),
        AckState::Acknowledged
    );
    assert_eq!(partition.log.log_end_offset(), 15);
    assert_eq!(values(&partition.log), values(&follower.partition.log));
}

/// Records truncated away (a deposed leader follows the new one) are never acknowledged, even
/// when the broker leads again later and its high watermark passes their offsets, which now
/// hold other records.
#[test]
fn records_truncated_away_are_not_acknowledged_when_leading_again() {
    let old = replica(ME, state(ME, 5, &[1, 2]), 1 << 30);
    let new = replica(2, state(ME, 5, &[1, 2]), 1 << 30);
    append(&old.partition, batch(PRODUCER, 0, 0, 4));
    replicate(&old.partition, &new.partition);
    let lost = append(&old.partition, batch(PRODUCER, 0, 4, 4));
    assert_eq!(old.partition.ack_state(&lost.pending, 1), AckState::Waiting);

    // Broker 2 takes over at epoch 6 and writes other records at offsets 4..; broker 1 follows.
    new.partition.set_state(state(2, 6, &[2]));
    old.partition.set_state(state(2, 6, &[2]));
    assert_eq!(
        old.partition.ack_state(&lost.pending, 1),
        AckState::NotLeader,
        "another broker leads before the records were acknowledged"
    );
    append(&new.partition, batch(99, 0, 0, 6));
    old.partition
        .truncate_with(|| old.partition.log.truncate_to(4))
        .expect("truncate");
    replicate(&new.partition, &old.partition);
    old.partition
        .log
        .set_high_watermark(new.partition.log.log_end_offset());

    // Broker 1 leads again at epoch 7 with every offset committed.
    old.partition.set_state(state(ME, 7, &[1, 2]));
    assert!(old.partition.log.high_watermark() > lost.pending.last_offset);
    assert_eq!(
        old.partition.ack_state(&lost.pending, 1),
        AckState::NotLeader,
        "the offsets hold another leader's records"
    );
}

/// A follower keeps the producer state of every batch it replicated: promoted, it answers a
/// retry of any of the producer's last five batches with the offsets they first got, refuses
/// an older one as out of order, and takes the next sequence.
#[test]
fn a_promoted_follower_deduplicates_like_its_leader() {
    let leader = replica(ME, state(ME, 3, &[1, 2]), 1 << 30);
    let follower = replica(2, state(ME, 3, &[1, 2]), 1 << 30);
    let mut firsts = Vec::new();
    for n in 0..7 {
        let appended = append(&leader.partition, batch(PRODUCER, 2, n * 3, 3));
        firsts.push(appended.info.first_offset);
        replicate(&leader.partition, &follower.partition);
    }
    assert_eq!(
        follower.partition.producer_state(),
        leader.partition.producer_state()
    );

    follower.partition.set_state(state(2, 4, &[2]));
    for n in 2..7 {
        let retry = append(&follower.partition, batch(PRODUCER, 2, n * 3, 3));
        assert!(retry.duplicate, "batch {n} is one of the last five");
        assert_eq!(retry.info.first_offset, firsts[n as usize]);
    }
    let old = batch(PRODUCER, 2, 3, 3);
    let refused = follower
        .partition
        .append_as_leader(&old, -1, 1)
        .expect_err("older than the last five");
    assert_eq!(refused.error, KafkaError::OutOfOrderSequenceNumber);
    let next = append(&follower.partition, batch(PRODUCER, 2, 21, 3));
    assert!(!next.duplicate);
    assert_eq!(next.info.first_offset, 21);
}

/// Producer state after a truncation equals a rebuild from the remaining log alone, whatever
/// snapshots (written at segment rolls) were on disk and wherever the cut falls.
#[test]
fn producer_state_after_truncation_equals_a_rebuild_from_the_log() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    println!("seed {seed}");
    let mut rng = crate::rng::SmallRng::new(seed);
    let mut next = move |bound: u64| rng.below(bound);
    let leader = replica(ME, state(ME, 1, &[1, 2]), 2048);
    let follower = replica(2, state(ME, 1, &[1, 2]), 2048);
    let mut sequences = [0i32; 4];
    let mut epochs = [0i16; 4];
    for _ in 0..120 {
        let producer = next(4) as usize;
        if next(20) == 0 {
            epochs[producer] += 1;
            sequences[producer] = 0;
        }
        let count = 1 + next(4) as usize;
        append(
            &leader.partition,
            batch(
                producer as i64,
                epochs[producer],
                sequences[producer],
                count,
            ),
        );
        sequences[producer] += count as i32;
        if next(3) == 0 {
            replicate(&leader.partition, &follower.partition);
        }
    }
    replicate(&leader.partition, &follower.partition);
    assert!(
        follower.partition.log.segment_count() > 3,
        "snapshots at rolls"
    );
    let mut end = follower.partition.log.log_end_offset();
    for _ in 0..6 {
        let cut = next(end + 1);
        follower
            .partition
            .truncate_with(|| follower.partition.log.truncate_to(cut))
            .expect("truncate");
        end = follower.partition.log.log_end_offset();
        assert_eq!(
            follower.partition.producer_state(),
            rebuild_producer_state(&follower.partition.log).expect("rebuild"),
            "seed {seed}: cut at {cut}"
        );
    }
}

/// A fetch naming a broker that is not a follower of the partition (Kafka's answer:
/// NOT_LEADER_OR_FOLLOWER) changes nothing: the high watermark does not move on its offset and
/// it gains no follower state; a follower's fetch moves the high watermark.
#[test]
fn a_fetch_from_a_broker_that_is_not_a_follower_is_refused_and_changes_nothing() {
    let leader = replica(ME, state(ME, 5, &[1, 2]), 1 << 30);
    let partition = &leader.partition;
    append(partition, batch(PRODUCER, 0, 0, 10));
    assert_eq!(partition.high_watermark(), 0, "follower 2 has not fetched");
    let before = partition.followers();

    for stranger in [9, ME] {
        assert_eq!(
            partition.follower_fetch(stranger, 10, 5),
            Err(KafkaError::NotLeaderOrFollower),
            "broker {stranger}"
        );
    }
    assert_eq!(partition.high_watermark(), 0);
    assert_eq!(partition.followers().len(), before.len());
    assert!(!partition.followers().contains_key(&9));

    // Broker 3 is a replica outside the ISR: its fetch is served, the HW waits for 2 still.
    assert_eq!(partition.follower_fetch(3, 10, 5), Ok(FollowerFetch::Read));
    assert_eq!(partition.high_watermark(), 0);
    assert_eq!(partition.follower_fetch(2, 10, 5), Ok(FollowerFetch::Read));
    assert_eq!(partition.high_watermark(), 10);

    // A follower claiming records of an epoch older than this log's first learns where to
    // truncate (Kafka's answer: that epoch, ending where the log's first epoch starts), and
    // its offset does not count.
    assert_eq!(
        partition.follower_fetch(2, 12, 4),
        Ok(FollowerFetch::Diverging {
            epoch: 4,
            end_offset: 0
        })
    );
    assert_eq!(partition.followers()[&2].log_end_offset, Some(10));

    // Not leading any more: every follower fetch is refused.
    partition.set_state(state(2, 6, &[2]));
    assert_eq!(
        partition.follower_fetch(2, 10, 5),
        Err(KafkaError::NotLeaderOrFollower)
    );
}

/// The high watermark never moves back on a leader, even when a follower's fetch offset does
/// (a follower truncated, or a stale fetch arrived late), and never passes the log end.
#[test]
fn the_high_watermark_never_moves_back_nor_past_the_log_end() {
    let leader = replica(ME, state(ME, 5, &[1, 2]), 1 << 30);
    let partition = &leader.partition;
    append(partition, batch(PRODUCER, 0, 0, 10));
    assert_eq!(partition.follower_fetch(2, 8, 5), Ok(FollowerFetch::Read));
    assert_eq!(partition.high_watermark(), 8);
    assert_eq!(partition.follower_fetch(2, 3, 5), Ok(FollowerFetch::Read));
    assert_eq!(partition.high_watermark(), 8);
    // An offset past our log end with no epoch known counts as our log end.
    assert_eq!(partition.follower_fetch(2, 50, -1), Ok(FollowerFetch::Read));
    assert_eq!(partition.high_watermark(), 10);
    assert_eq!(partition.followers()[&2].log_end_offset, Some(10));

    let follower = replica(2, state(ME, 5, &[1, 2]), 1 << 30);
    assert!(!follower.partition.follow_high_watermark(7), "empty log");
    assert_eq!(follower.partition.high_watermark(), 0);
}

/// A silence bound the lag tests never reach.
const QUIET: std::time::Duration = std::time::Duration::from_secs(3600);

/// Kafka's ISR rules on the leader, with time moved by hand: a follower not caught up for
/// longer than replica.lag.time.max.ms leaves; one that reaches the high watermark and is
/// caught up joins; a change waits for its commit (or a timeout) before another is asked for.
#[test]
fn followers_leave_and_join_the_isr_by_lag_time() {
    let lag = std::time::Duration::from_secs(10);
    let second = std::time::Duration::from_secs(1);
    let clock = Arc::new(ManualInstantClock::default());
    let leader = replica_with_clock(ME, state(ME, 5, &[1, 2, 3]), 1 << 30, clock.clone());
    let partition = &leader.partition;
    assert!(
        partition.wanted_isr(lag, QUIET, |_| true).is_none(),
        "a new leadership drops nobody at once"
    );

    append(partition, batch(PRODUCER, 0, 0, 10));
    clock.advance(5 * second);
    assert_eq!(partition.follower_fetch(2, 10, 5), Ok(FollowerFetch::Read));
    clock.advance(6 * second);
    // 11 s without broker 3 caught up; broker 2 was 6 s ago.
    let (_, wanted) = partition
        .wanted_isr(lag, QUIET, |_| true)
        .expect("a shrink");
    assert_eq!(wanted, vec![1, 2]);
    // Who may join does not hold back a shrink.
    let (_, wanted) = partition
        .wanted_isr(lag, QUIET, |_| false)
        .expect("a shrink");
    assert_eq!(wanted, vec![1, 2]);
    partition.isr_change_sent(wanted.clone());
    assert!(
        partition.wanted_isr(lag, QUIET, |_| true).is_none(),
        "one change at a time"
    );
    partition.set_state(state(ME, 5, &[1, 2]));
    assert!(partition.wanted_isr(lag, QUIET, |_| true).is_none());

    // Broker 3 fetches behind the log end: not caught up, not back yet.
    assert_eq!(partition.follower_fetch(3, 4, 5), Ok(FollowerFetch::Read));
    assert!(partition.wanted_isr(lag, QUIET, |_| true).is_none());
    // At the log end: caught up and past the high watermark, it rejoins.
    assert_eq!(partition.follower_fetch(3, 10, 5), Ok(FollowerFetch::Read));
    // Not while it may not join (fenced): the controller would refuse it.
    assert!(partition.wanted_isr(lag, QUIET, |b| b != 3).is_none());
    let (_, wanted) = partition
        .wanted_isr(lag, QUIET, |_| true)
        .expect("an expansion");
    assert_eq!(wanted, vec![1, 2, 3]);
    partition.isr_change_sent(wanted);
    // Unanswered for longer than the pending timeout: asked again.
    clock.advance(PENDING_ISR_TIMEOUT + second);
    assert!(partition.wanted_isr(lag, QUIET, |_| true).is_some());
}

/// A follower that keeps up with a leader taking writes stays caught up although each fetch
/// is behind the log end by then (Kafka: caught up to the log end of its previous fetch).
#[test]
fn a_follower_keeping_up_with_writes_stays_in_the_isr() {
    let lag = std::time::Duration::from_secs(10);
    let clock = Arc::new(ManualInstantClock::default());
    let leader = replica_with_clock(ME, state(ME, 5, &[1, 2]), 1 << 30, clock.clone());
    let partition = &leader.partition;
    let mut end = 0;
    for sequence in 0..30 {
        append(partition, batch(PRODUCER, 0, sequence * 2, 2));
        // It fetches what the log end was at its previous fetch, never the current end.
        assert_eq!(partition.follower_fetch(2, end, 5), Ok(FollowerFetch::Read));
        end = partition.log_end_offset() as i64;
        clock.advance(std::time::Duration::from_secs(1));
        assert!(
            partition.wanted_isr(lag, QUIET, |_| true).is_none(),
            "after {sequence} s"
        );
    }
}

/// A follower that sends no fetch at all for `silence_max` leaves the ISR although it was
/// caught up well within `lag_max` (a hung process: no fetch, no lag seen); one that keeps
/// fetching stays, and a follower that never fetched is measured from the leadership's start.
#[test]
fn a_silent_follower_leaves_the_isr_long_before_the_lag_time() {
    let lag = std::time::Duration::from_secs(30);
    let silence = std::time::Duration::from_millis(2500);
    let clock = Arc::new(ManualInstantClock::default());
    let leader = replica_with_clock(ME, state(ME, 5, &[1, 2, 3]), 1 << 30, clock.clone());
    let partition = &leader.partition;
    // Both fetch, caught up on an idle log, every 500 ms for 5 s: nobody leaves.
    for _ in 0..10 {
        assert_eq!(partition.follower_fetch(2, 0, -1), Ok(FollowerFetch::Read));
        assert_eq!(partition.follower_fetch(3, 0, -1), Ok(FollowerFetch::Read));
        clock.advance(std::time::Duration::from_millis(500));
        assert!(partition.wanted_isr(lag, silence, |_| true).is_none());
    }
    // Broker 3 stops fetching (its last fetch 500 ms ago); broker 2 goes on. After 2.5 s of
    // silence 3 leaves.
    for _ in 0..4 {
        assert_eq!(partition.follower_fetch(2, 0, -1), Ok(FollowerFetch::Read));
        clock.advance(std::time::Duration::from_millis(500));
        assert!(partition.wanted_isr(lag, silence, |_| true).is_none());
    }
    assert_eq!(partition.follower_fetch(2, 0, -1), Ok(FollowerFetch::Read));
    clock.advance(std::time::Duration::from_millis(100));
    let (_, wanted) = partition
        .wanted_isr(lag, silence, |_| true)
        .expect("a shrink");
    assert_eq!(wanted, vec![1, 2]);

    // A new leadership: a follower that never fetches leaves once the bound has passed.
    let fresh = replica_with_clock(ME, state(ME, 6, &[1, 2]), 1 << 30, clock.clone());
    clock.advance(std::time::Duration::from_millis(2000));
    assert!(fresh.partition.wanted_isr(lag, silence, |_| true).is_none());
    clock.advance(std::time::Duration::from_millis(600));
    let (_, wanted) = fresh
        .partition
        .wanted_isr(lag, silence, |_| true)
        .expect("a shrink");
    assert_eq!(wanted, vec![1]);
}

/// The invariants are checked where they live: a leader epoch going back is a bug that stops
/// a debug build at once.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "leader epoch went back")]
fn a_leader_epoch_going_back_trips_the_invariant() {
    let follower = replica(2, state(ME, 5, &[1, 2]), 1 << 30);
    follower.partition.set_state(state(ME, 4, &[1, 2]));
}

/// A transactional batch of `count` records.
fn txn_batch(producer_id: i64, producer_epoch: i16, sequence: i32, count: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 1_000)
        .producer(producer_id, producer_epoch, sequence)
        .transactional();
    for n in 0..count {
        let value = format!("txn-{producer_id}-{}", sequence as usize + n);
        builder.push(1_000, None, Some(value.as_bytes()), &[]);
    }
    builder.build()
}

fn marker(partition: &Partition, producer_id: i64, commit: bool) -> Result<Appended, AppendError> {
    partition.append_txn_marker(
        producer_id,
        0,
        TxnMarker {
            commit,
            coordinator_epoch: 3,
        },
        1,
        None,
    )
}

fn reopen(dir: &std::path::Path, broker_id: BrokerId) -> Partition {
    let (log, _) = Log::open(
        &dir.join("topic-0"),
        TopicPartition::new("topic", 0),
        LogConfig::default(),
        LoadState::default(),
        Arc::new(ManualClock::new(1_000)),
    )
    .expect("open log");
    Partition::open(
        TopicPartition::new("topic", 0),
        Arc::new(log),
        broker_id,
        state(1, 1, &[1]),
        Arc::new(SystemClock),
    )
    .expect("open partition")
}

#[test]
fn transactions_hold_the_last_stable_offset_and_aborts_are_indexed_everywhere() {
    let leader = replica(ME, state(ME, 1, &[1]), 1 << 20);
    let follower = replica(2, state(ME, 1, &[1]), 1 << 20);
    let p = &leader.partition;
    append(p, txn_batch(7, 0, 0, 3)); // 0..=2, producer 7's transaction
    append(p, batch(9, 0, 0, 1)); // 3, not transactional
    assert_eq!((p.high_watermark(), p.last_stable_offset()), (4, 0));
    // Producer 7 may not write outside its transaction while it is open.
    let plain = batch(7, 0, 3, 1);
    let refused = p.append_as_leader(&plain, -1, 1).expect_err("refused");
    assert_eq!(refused.error, KafkaError::InvalidTxnState);
    append(p, txn_batch(8, 0, 0, 2)); // 4..=5, producer 8's transaction
    marker(p, 7, false).expect("abort"); // 6
    assert_eq!(
        p.last_stable_offset(),
        4,
        "producer 8's transaction is open"
    );
    marker(p, 8, true).expect("commit"); // 7
    assert_eq!(p.last_stable_offset(), 8);
    // Fenced markers: an older producer epoch, an older coordinator.
    append(p, txn_batch(7, 1, 0, 1)); // 8, epoch 1
    let old_epoch = marker(p, 7, true).expect_err("old producer epoch");
    assert_eq!(old_epoch.error, KafkaError::InvalidProducerEpoch);
    let old_coordinator = p
        .append_txn_marker(
            7,
            1,
            TxnMarker {
                commit: true,
                coordinator_epoch: 2,
            },
            1,
            None,
        )
        .expect_err("old coordinator");
    assert_eq!(
        old_coordinator.error,
        KafkaError::TransactionCoordinatorFenced
    );
    assert_eq!(
        p.last_stable_offset(),
        8,
        "producer 7's new transaction is open"
    );

    let expected = vec![AbortedTxn {
        producer_id: 7,
        first_offset: 0,
        last_offset: 6,
        last_stable_offset: 4,
    }];
    let (slice, aborted) = p.read_committed(0, 1 << 20, 8, true).expect("read");
    assert!(slice.is_some());
    assert_eq!(aborted, expected);
    // Nothing after the last stable offset, and no aborted transaction past the read.
    let (slice, aborted) = p.read_committed(8, 1 << 20, 8, true).expect("read");
    assert!(slice.is_none() && aborted.is_empty());

    // A follower indexes the same abort and knows the open transaction.
    replicate(p, &follower.partition);
    assert_eq!(follower.partition.log.collect_aborted(0, 100), expected);
    assert_eq!(
        follower.partition.producer_state().first_unstable_offset(),
        Some(8)
    );

    // After a restart (unclean: no snapshot), the index and the open transaction are back.
    let dir = leader._dir.path().to_path_buf();
    drop(leader.partition);
    let reopened = reopen(&dir, ME);
    assert_eq!(reopened.log.collect_aborted(0, 100), expected);
    assert_eq!(reopened.producer_state().first_unstable_offset(), Some(8));
    // Truncating the abort marker away drops its entry.
    reopened
        .truncate_with(|| reopened.log.truncate_to(6))
        .expect("truncate");
    assert!(reopened.log.collect_aborted(0, 100).is_empty());
    assert_eq!(reopened.producer_state().first_unstable_offset(), Some(0));
}

/// KIP-890: a marker written between a write's verification and its append voids the
/// verification, so the write cannot open a transaction after its transaction ended.
#[test]
fn a_marker_between_verification_and_append_refuses_the_write() {
    let leader = replica(ME, state(ME, 1, &[1]), 1 << 20);
    let p = &leader.partition;
    assert!(p.needs_verification(7));
    let guard = p.start_verification(7);
    // A second verification under way shares the guard.
    assert_eq!(p.start_verification(7), guard);
    marker(p, 7, false).expect("abort marker");
    let late = txn_batch(7, 0, 0, 1);
    let refused = p
        .append_verified(&late, -1, 1, Some(guard))
        .expect_err("voided by the marker");
    assert_eq!(refused.error, KafkaError::InvalidTxnState);
    // Not verified at all: refused too.
    let unverified = txn_batch(7, 0, 0, 1);
    let refused = p
        .append_verified(&unverified, -1, 1, None)
        .expect_err("not verified");
    assert_eq!(refused.error, KafkaError::InvalidTxnState);
    // Verified after the marker: appended, the transaction opens, and later writes of it
    // need no verification.
    let guard = p.start_verification(7);
    let write = txn_batch(7, 0, 0, 1);
    p.append_verified(&write, -1, 1, Some(guard))
        .expect("verified");
    assert!(!p.needs_verification(7));
    let next = txn_batch(7, 0, 1, 1);
    p.append_verified(&next, -1, 1, None)
        .expect("inside its open transaction");
}

/// The jepsen txn smoke run's precommitted read (CI, stop 33): a follower fetched a
/// transactional batch the moment it was in the log, before the leader had entered its
/// transaction in producer state, and its next fetch moved the high watermark past it; a
/// read_committed fetch in that moment got a last stable offset past the open transaction and
/// returned its records. One thread opens and commits transactions while another plays a
/// caught-up follower and reads the last stable offset, which must never pass an open
/// transaction nor go back.
#[test]
fn the_last_stable_offset_never_passes_a_transaction_being_appended() {
    let leader = replica(ME, state(ME, 1, &[1, 2]), 1 << 30);
    let p = &leader.partition;
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for producer_id in 100..3_100 {
                append(p, txn_batch(producer_id, 0, 0, 1));
                marker(p, producer_id, true).expect("commit");
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut previous = 0;
        let mut reads = 0u64;
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            p.follower_fetch(2, p.log.log_end_offset() as i64, -1)
                .expect("follower fetch");
            let last_stable = p.last_stable_offset();
            assert!(
                last_stable >= previous,
                "the last stable offset went back from {previous} to {last_stable} after {reads} reads"
            );
            if let Some(open) = p.producer_state().first_unstable_offset() {
                assert!(
                    last_stable <= open as u64,
                    "the last stable offset {last_stable} passed the transaction open at {open}"
                );
            }
            previous = last_stable;
            reads += 1;
        }
    });
}
