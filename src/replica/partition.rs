//! One partition replica on this broker: its log, what the committed metadata says of it
//! (leader, leader epoch, ISR), and, as leader, the producer state that makes appends
//! idempotent.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use sluice_raft::records::{BrokerId, Uuid};

use super::clock::Clock;
use super::purgatory::Watchers;
use crate::file_slice::FileSlice;
use crate::log::batch::{BatchHeader, BatchIter, TxnMarker};
use crate::log::txn_index::AbortedTxn;
use crate::log::{AppendInfo, AppendOrigin, Log, LogConfig, LogError, ValidatedBatches};
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;
use crate::txn::producer_state::{
    BatchMetadata, Check, CompletedTxn, MarkerBatch, ProducerBatch, ProducerStateManager,
    SnapshotError,
};

/// What the metadata image says of this partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub topic_id: Uuid,
    pub leader: BrokerId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
}

/// A leader append's outcome.
#[derive(Debug, Clone)]
pub struct Appended {
    pub info: AppendInfo,
    /// The batch was a producer's retry of one already appended: nothing was written and
    /// `info` gives the offsets it first got.
    pub duplicate: bool,
    /// What an `acks=all` answer waits for: the high watermark passing these records while
    /// they are still the ones this append wrote (or found).
    pub pending: PendingAck,
}

/// An `acks=all` append waiting for the high watermark: its last offset, and the leader epoch
/// the log says that record was written under (`None` when it is before the log start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingAck {
    pub last_offset: u64,
    pub records_epoch: Option<i32>,
}

/// Where an `acks=all` append stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckState {
    /// The high watermark passed the records, and they are still in the log as written:
    /// every in-sync replica has them.
    Acknowledged,
    /// Leading (or offline, with no leader), the records are in the log, the high watermark
    /// is still below them.
    Waiting,
    /// The high watermark passed them, but the ISR is smaller than `min.insync.replicas`
    /// (it shrank while waiting, or a new leadership has not re-admitted its followers yet).
    /// Still waiting: failing now (NOT_ENOUGH_REPLICAS_AFTER_APPEND, as Kafka does at once)
    /// has the producer re-send records already in the log, which is safe only as long as the
    /// producer does not bump its epoch meanwhile. It is the answer at the deadline.
    UnderMinIsr,
    /// Another broker leads before they were acknowledged, or the records were truncated
    /// away (and their offsets possibly reused). The producer retries, and the new leader's
    /// producer state recognises a batch it already has.
    NotLeader,
}

/// How far a read may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBound {
    /// Consumers: committed records only, below the high watermark their response reports
    /// (read once for the answer; it is never passed).
    HighWatermark(u64),
    /// Followers: everything the leader has.
    LogEnd,
}

/// What a follower's fetch gets before any records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerFetch {
    /// Read from the fetch offset.
    Read,
    /// KIP-320: its log diverges from ours; it truncates to `end_offset` of `epoch` first
    /// (-1, -1 when we know no epoch that old).
    Diverging { epoch: i32, end_offset: i64 },
}

/// Why an append was refused: a Kafka error, a message, and for records refused one by one
/// (INVALID_RECORD) each record's index and why (Produce's `record_errors`).
#[derive(Debug, Clone)]
pub struct AppendError {
    pub error: KafkaError,
    pub message: String,
    pub record_errors: Vec<(i32, String)>,
}

impl AppendError {
    fn new(error: KafkaError, message: String) -> Self {
        AppendError {
            error,
            message,
            record_errors: Vec::new(),
        }
    }
}

impl From<LogError> for AppendError {
    fn from(error: LogError) -> Self {
        let kafka_error = error.kafka_error();
        match error {
            LogError::RecordErrors { errors, message } => AppendError {
                error: kafka_error,
                message,
                record_errors: errors,
            },
            other => AppendError::new(kafka_error, other.to_string()),
        }
    }
}

/// How long an ISR change may stay unanswered before it is sent again.
const PENDING_ISR_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes read at once while replaying the log into producer state.
const REPLAY_READ_BYTES: u64 = 1 << 20;

/// Debug builds check a reload of producer state against a full rebuild up to this log size.
const DEBUG_REBUILD_CHECK_BYTES: u64 = 16 << 20;

pub struct Partition {
    pub topic_partition: TopicPartition,
    /// Private to the replica layer: handlers ask the partition in Kafka's terms.
    log: Arc<Log>,
    /// Requests waiting for this partition to move (the purgatory).
    watchers: Watchers,
    broker_id: BrokerId,
    state: RwLock<PartitionState>,
    /// Serializes leader appends, so producer checks and the append they allow are atomic.
    producers: Mutex<ProducerStateManager>,
    /// KIP-890: per producer, the guard of a transactional write being verified with the
    /// transaction coordinator (lock order: `producers`, then this). A marker for the producer
    /// clears it, so a write verified before the marker cannot land after it.
    verification_guards: Mutex<HashMap<i64, u64>>,
    /// What bounds the last stable offset, copied out of producer state after every change
    /// (lock order: `producers`, then this), so read_committed fetches never wait for an
    /// append.
    unstable: Mutex<Unstable>,
    /// Segments when producer state was last snapshotted: a roll triggers a new snapshot.
    snapshot_segments: Mutex<usize>,
    /// As leader: what each follower's fetches told us.
    followers: Mutex<HashMap<BrokerId, FollowerState>>,
    /// As follower: the log must be checked against the leader's (OffsetForLeaderEpoch) and
    /// truncated to where they diverge before fetching. Set on every leader change.
    needs_truncation: AtomicBool,
    /// An ISR change sent to the controller and not yet seen committed: (ISR, when sent).
    pending_isr: Mutex<Option<(Vec<BrokerId>, Instant)>>,
    clock: Arc<dyn Clock>,
    /// Debug builds: (leader epoch, high watermark) last seen as leader, for the invariants.
    leader_high_watermark: Mutex<(i32, u64)>,
    /// The leader epoch while this broker leads, -1 otherwise: a copy of the state the
    /// invariant checks read without the state lock (they run under it, in `while_following`,
    /// and a second read lock can deadlock behind a waiting writer).
    leading_epoch: std::sync::atomic::AtomicI64,
    /// Records and bytes producers appended here, and bytes consumers fetched (not
    /// followers), for the per-topic rates on `/metrics` and the console.
    pub traffic: Traffic,
}

/// A partition replica's client traffic since it was opened here.
#[derive(Default)]
pub struct Traffic {
    pub messages_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
}

/// The transactions that keep the last stable offset back: open ones, and closed ones whose
/// marker the high watermark has not passed yet (Kafka's `unreplicatedTxns`): their records
/// are decided only once the marker is committed.
#[derive(Debug, Default)]
struct Unstable {
    first_open: Option<u64>,
    /// (first offset, marker offset), in marker order.
    closed: VecDeque<(u64, u64)>,
    /// The log end before an append in flight that opens a transaction: its records are in
    /// the log (a follower may fetch them and move the high watermark past them) before
    /// producer state knows their transaction. Set before the log append, cleared with
    /// `first_open` once producer state is updated.
    appending: Option<u64>,
}

impl Unstable {
    fn of(producers: &ProducerStateManager) -> Unstable {
        Unstable {
            first_open: producers.first_unstable_offset().map(|o| o as u64),
            closed: VecDeque::new(),
            appending: None,
        }
    }

    fn last_stable_offset(&mut self, high_watermark: u64) -> u64 {
        while self
            .closed
            .front()
            .is_some_and(|(_, marker)| *marker < high_watermark)
        {
            self.closed.pop_front();
        }
        let closed = self.closed.iter().map(|(first, _)| *first).min();
        [
            Some(high_watermark),
            self.first_open,
            closed,
            self.appending,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(high_watermark)
    }
}

/// A follower as its leader sees it.
#[derive(Debug, Clone, Copy)]
pub struct FollowerState {
    /// The offset of its last fetch: everything below is on the follower.
    pub log_end_offset: Option<u64>,
    /// When it was last fully caught up (fetched at or past the leader's log end).
    pub last_caught_up: Instant,
    /// The leader's log end at the follower's previous fetch, and when that fetch came.
    previous_fetch: Option<(u64, Instant)>,
    /// When this leadership began (what a follower that never fetched is measured from).
    since: Instant,
}

impl FollowerState {
    fn new(now: Instant) -> Self {
        FollowerState {
            log_end_offset: None,
            last_caught_up: now,
            previous_fetch: None,
            since: now,
        }
    }

    /// When the follower was last heard from: its last fetch, or the leadership's start.
    pub fn last_heard(&self) -> Instant {
        self.previous_fetch.map_or(self.since, |(_, at)| at)
    }
}

impl Partition {
    /// A replica over an open log; producer state is loaded from its snapshot and the log.
    pub fn open(
        topic_partition: TopicPartition,
        log: Arc<Log>,
        broker_id: BrokerId,
        state: PartitionState,
        clock: Arc<dyn Clock>,
    ) -> Result<Partition, LogError> {
        let producers = load_producer_state(&log)?;
        let unstable = Unstable::of(&producers);
        log.set_first_unstable_offset(unstable.first_open.unwrap_or(u64::MAX));
        let segments = log.segment_count();
        let followers = if state.leader == broker_id {
            fresh_followers(&state, broker_id, clock.now())
        } else {
            HashMap::new()
        };
        let leading_epoch = leading_epoch(&state, broker_id);
        Ok(Partition {
            topic_partition,
            log,
            watchers: Watchers::default(),
            broker_id,
            state: RwLock::new(state),
            producers: Mutex::new(producers),
            unstable: Mutex::new(unstable),
            verification_guards: Mutex::new(HashMap::new()),
            snapshot_segments: Mutex::new(segments),
            followers: Mutex::new(followers),
            needs_truncation: AtomicBool::new(true),
            pending_isr: Mutex::new(None),
            clock,
            leader_high_watermark: Mutex::new((-1, 0)),
            leading_epoch: std::sync::atomic::AtomicI64::new(leading_epoch),
            traffic: Traffic::default(),
        })
    }

    pub fn state(&self) -> PartitionState {
        self.state.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The leader alone, without copying the replica set and ISR (scans of every partition).
    /// Whether this replica's log went offline after a storage error.
    pub fn is_offline(&self) -> bool {
        self.log.is_offline()
    }

    pub fn leader(&self) -> BrokerId {
        self.state.read().unwrap_or_else(|p| p.into_inner()).leader
    }

    /// Adopts what the committed image says. A new leader epoch starts leadership afresh
    /// (followers unknown, caught up as of now) or, as follower, asks for a truncation check.
    pub fn set_state(&self, state: PartitionState) {
        let mut current = self.state.write().unwrap_or_else(|p| p.into_inner());
        // Images are applied in order and a replica re-created gets a new Partition.
        debug_assert!(
            state.leader_epoch >= current.leader_epoch,
            "{}: leader epoch went back from {} to {}",
            self.topic_partition,
            current.leader_epoch,
            state.leader_epoch
        );
        let new_epoch =
            current.leader_epoch != state.leader_epoch || current.leader != state.leader;
        if new_epoch {
            if state.leader == self.broker_id {
                *self.followers.lock().unwrap_or_else(|p| p.into_inner()) =
                    fresh_followers(&state, self.broker_id, self.clock.now());
            } else {
                self.needs_truncation.store(true, Ordering::Release);
            }
        }
        let pending = self
            .pending_isr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((isr, sent)) = pending {
            // Still waiting for our change, unless the image moved on or it is too old.
            if state.isr != isr
                && current.partition_epoch == state.partition_epoch
                && self.clock.now().saturating_duration_since(sent) < PENDING_ISR_TIMEOUT
            {
                *self.pending_isr.lock().unwrap_or_else(|p| p.into_inner()) = Some((isr, sent));
            }
        }
        self.leading_epoch
            .store(leading_epoch(&state, self.broker_id), Ordering::Release);
        *current = state;
        drop(current);
        self.maybe_advance_high_watermark();
        // Waiting requests re-check: a produce whose leadership moved, a fetch now refused.
        self.watchers.wake();
        self.check_invariants();
    }

    /// What must always hold, checked after every change, release builds too: the high
    /// watermark never passes the log end, and as leader it never moves back within a leader
    /// epoch, and no follower's recorded log end passes ours. Takes no state lock (callers
    /// may hold it). A broken one panics in debug builds (tests); in release builds it logs at
    /// ERROR and fences the replica (its log goes offline, as after a storage error: the
    /// controller moves leadership away and clients are told KAFKA_STORAGE_ERROR).
    fn check_invariants(&self) {
        let Err(message) = self.invariants() else {
            return;
        };
        if cfg!(debug_assertions) {
            panic!("{}: {message}", self.topic_partition);
        }
        self.log.fence(&message);
    }

    fn invariants(&self) -> Result<(), String> {
        let leading_epoch = self.leading_epoch.load(Ordering::Acquire);
        let (high_watermark, log_end) = (self.log.high_watermark(), self.log.log_end_offset());
        if high_watermark > log_end {
            return Err(format!(
                "high watermark {high_watermark} past the log end {log_end}"
            ));
        }
        let Ok(leader_epoch) = i32::try_from(leading_epoch) else {
            return Ok(());
        };
        if leader_epoch < 0 {
            return Ok(());
        }
        let mut seen = self
            .leader_high_watermark
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Read again under the lock: two checks running at once could otherwise record a
        // newer high watermark before comparing an older one read earlier (a false alarm).
        let high_watermark = self.log.high_watermark();
        if seen.0 == leader_epoch && high_watermark < seen.1 {
            return Err(format!(
                "the leader's high watermark moved back from {} to {high_watermark} at epoch {leader_epoch}",
                seen.1,
            ));
        }
        *seen = (leader_epoch, high_watermark);
        drop(seen);
        for (replica, follower) in self.followers() {
            if let Some(follower_end) = follower.log_end_offset
                && follower_end > log_end
            {
                return Err(format!(
                    "follower {replica} recorded at {follower_end}, past the leader's log end {log_end}"
                ));
            }
        }
        Ok(())
    }

    pub fn broker_id(&self) -> BrokerId {
        self.broker_id
    }

    /// Runs `work` only while this replica still follows `leader` at `leader_epoch`, holding
    /// leadership changes off until it is done; `None` when it no longer does. A fetch or
    /// OffsetForLeaderEpoch answer can arrive long after it was asked for (a partition, a
    /// pause): applied after this broker became leader, or under a newer epoch, it would write
    /// a deposed leader's records into the log. `work` must not read the partition state.
    pub fn while_following<T>(
        &self,
        leader: BrokerId,
        leader_epoch: i32,
        work: impl FnOnce() -> T,
    ) -> Option<T> {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        if state.leader != leader || state.leader_epoch != leader_epoch || leader == self.broker_id
        {
            return None;
        }
        let result = work();
        drop(state);
        Some(result)
    }

    pub fn needs_truncation(&self) -> bool {
        self.needs_truncation.load(Ordering::Acquire)
    }

    pub fn request_truncation(&self) {
        self.needs_truncation.store(true, Ordering::Release);
    }

    pub fn truncation_done(&self) {
        self.needs_truncation.store(false, Ordering::Release);
    }

    /// As leader, a follower's fetch from `fetch_offset` whose last fetched batch was written
    /// under `last_fetched_epoch` (-1 when unknown). Refused with NOT_LEADER_OR_FOLLOWER when
    /// `replica` is not one of this partition's followers (Kafka's answer), changing nothing.
    /// KIP-320: when the follower's last epoch ends earlier in our log than its fetch offset,
    /// it holds records we do not (a deposed leader's): the answer is where to truncate, and
    /// its fetch offset does not count toward the high watermark. Otherwise the follower holds
    /// everything below its fetch offset, and the high watermark may move.
    pub fn follower_fetch(
        &self,
        replica: BrokerId,
        fetch_offset: i64,
        last_fetched_epoch: i32,
    ) -> Result<FollowerFetch, KafkaError> {
        {
            let state = self.state.read().unwrap_or_else(|p| p.into_inner());
            if state.leader != self.broker_id
                || replica == self.broker_id
                || !state.replicas.contains(&replica)
            {
                return Err(KafkaError::NotLeaderOrFollower);
            }
        }
        if fetch_offset < 0 {
            return Ok(FollowerFetch::Read);
        }
        if last_fetched_epoch >= 0 {
            let diverging = match self.log.end_offset_for_epoch(last_fetched_epoch) {
                Some((epoch, end)) if epoch == last_fetched_epoch && end >= fetch_offset as u64 => {
                    None
                }
                Some((epoch, end)) => Some((epoch, end as i64)),
                None => Some((-1, -1)),
            };
            if let Some((epoch, end_offset)) = diverging {
                return Ok(FollowerFetch::Diverging { epoch, end_offset });
            }
        }
        self.update_follower(replica, fetch_offset as u64);
        self.check_invariants();
        Ok(FollowerFetch::Read)
    }

    /// As leader: a follower fetched from `fetch_offset` (so holds everything below it).
    /// Returns whether the high watermark moved. Offsets of brokers that are not followers of
    /// this partition are ignored.
    fn update_follower(&self, replica: BrokerId, fetch_offset: u64) -> bool {
        let now = self.clock.now();
        let leader_log_end = self.log.log_end_offset();
        {
            let mut followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
            let Some(follower) = followers.get_mut(&replica) else {
                return false;
            };
            follower.log_end_offset = Some(fetch_offset.min(leader_log_end));
            // Kafka's rule: caught up now if it fetched our log end; caught up as of its
            // previous fetch if it fetched what our log end was then.
            if fetch_offset >= leader_log_end {
                follower.last_caught_up = now;
            } else if let Some((previous_end, at)) = follower.previous_fetch {
                if fetch_offset >= previous_end && at > follower.last_caught_up {
                    follower.last_caught_up = at;
                }
            }
            follower.previous_fetch = Some((leader_log_end, now));
        }
        self.maybe_advance_high_watermark()
    }

    pub fn followers(&self) -> HashMap<BrokerId, FollowerState> {
        self.followers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// As leader: the ISR this partition should have (laggards out, caught-up replicas in),
    /// when it differs from the committed one and no change is already pending. A member
    /// leaves when it was last caught up more than `lag_max` ago (Kafka's rule, for a
    /// follower that fetches but falls behind), or when it has sent no fetch at all for
    /// `silence_max` (a hung process, disk or network: a live follower long-polls without
    /// pause, so silence says it is stuck long before it could fall `lag_max` behind). Only
    /// replicas `may_join` accepts join: the controller refuses a fenced broker (KIP-841),
    /// which a stopped follower is while it still looks caught up for `lag_max`; members
    /// already in are the controller's to remove.
    pub fn wanted_isr(
        &self,
        lag_max: Duration,
        silence_max: Duration,
        may_join: impl Fn(BrokerId) -> bool,
    ) -> Option<(PartitionState, Vec<BrokerId>)> {
        let state = self.state();
        if state.leader != self.broker_id {
            return None;
        }
        if self
            .pending_isr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|(_, sent)| {
                self.clock.now().saturating_duration_since(*sent) < PENDING_ISR_TIMEOUT
            })
        {
            return None;
        }
        let followers = self.followers();
        let high_watermark = self.log.high_watermark();
        let now = self.clock.now();
        let mut isr: Vec<BrokerId> = state
            .isr
            .iter()
            .copied()
            .filter(|r| {
                *r == self.broker_id
                    || followers.get(r).is_some_and(|f| {
                        now.duration_since(f.last_caught_up) <= lag_max
                            && now.duration_since(f.last_heard()) <= silence_max
                    })
            })
            .collect();
        for replica in &state.replicas {
            if isr.contains(replica) {
                continue;
            }
            let caught_up = followers.get(replica).is_some_and(|f| {
                f.log_end_offset.is_some_and(|leo| leo >= high_watermark)
                    && now.duration_since(f.last_caught_up) <= lag_max
                    && now.duration_since(f.last_heard()) <= silence_max
            });
            if caught_up && may_join(*replica) {
                isr.push(*replica);
            }
        }
        // Kafka's order: the assignment's.
        isr.sort_by_key(|r| state.replicas.iter().position(|x| x == r));
        let mut current = state.isr.clone();
        current.sort_by_key(|r| state.replicas.iter().position(|x| x == r));
        (isr != current).then_some((state, isr))
    }

    pub fn isr_change_sent(&self, isr: Vec<BrokerId>) {
        *self.pending_isr.lock().unwrap_or_else(|p| p.into_inner()) = Some((isr, self.clock.now()));
    }

    pub fn isr_change_failed(&self) {
        *self.pending_isr.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// As follower: appends batches fetched from the leader, unchanged, and keeps producer
    /// state (a follower may become leader).
    pub fn append_as_follower(&self, records: &[u8]) -> Result<Option<AppendInfo>, LogError> {
        if records.is_empty() {
            return Ok(None);
        }
        let mut producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        let opens_txn = BatchIter::new(records)
            .filter_map(Result::ok)
            .any(|(_, header, bytes)| opens_txn(&producers, &batch_kind(&header, bytes)));
        if opens_txn {
            self.hold_unstable_from_log_end();
        }
        let info = match self.log.append_as_follower(records) {
            Ok(info) => info,
            Err(error) => {
                self.sync_unstable(&producers);
                return Err(error);
            }
        };
        for (_, header, bytes) in BatchIter::new(records).filter_map(Result::ok) {
            if let Some(completed) = record_batch(&mut producers, &header, bytes) {
                self.txn_closed(&producers, completed);
            }
        }
        self.sync_unstable(&producers);
        self.maybe_snapshot(&producers);
        drop(producers);
        self.watchers.wake();
        self.check_invariants();
        Ok(Some(info))
    }

    /// As follower: takes the leader's high watermark, bounded by our log end; it only moves
    /// forward. Returns whether it moved.
    pub fn follow_high_watermark(&self, leader_high_watermark: i64) -> bool {
        let high_watermark = (leader_high_watermark.max(0) as u64).min(self.log.log_end_offset());
        let moved = self.raise_high_watermark(high_watermark);
        self.check_invariants();
        moved
    }

    /// Moves the high watermark up to `candidate` (never down), waking waiting requests;
    /// whether it moved.
    fn raise_high_watermark(&self, candidate: u64) -> bool {
        // Compared and raised in one step under the log's lock: a read here and a set after
        // let a concurrent append's older candidate move the high watermark back.
        let (before, after) = self.log.raise_high_watermark(candidate);
        let moved = after > before;
        if moved {
            let mut unstable = self.unstable.lock().unwrap_or_else(|p| p.into_inner());
            if !unstable.closed.is_empty() {
                self.publish_unstable(&mut unstable);
            }
            drop(unstable);
            self.watchers.wake();
        }
        moved
    }

    /// Truncates the log with `truncate` and rebuilds producer state from the snapshot and
    /// what is left, holding producer state throughout: a snapshot written meanwhile (at a
    /// segment roll, at shutdown) would otherwise store state from before the truncation
    /// under an offset after it, and a restarted broker would then answer a retry of a
    /// truncated batch as a duplicate, losing it (a SIGTERM racing a follower's truncation).
    pub fn truncate_with<T>(
        &self,
        truncate: impl FnOnce() -> Result<T, LogError>,
    ) -> Result<T, LogError> {
        let mut producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        let truncated = truncate();
        // Reloaded even when the truncation failed part way: state follows the log as it is.
        let reloaded = self.reload_locked(&mut producers);
        drop(producers);
        self.watchers.wake();
        self.check_invariants();
        let truncated = truncated?;
        reloaded?;
        Ok(truncated)
    }

    /// After a truncation: producer state is rebuilt from the snapshot and the log. It must
    /// equal a rebuild from the remaining log alone (checked in debug builds on small logs): a
    /// follower promoted later deduplicates from it.
    fn reload_locked(&self, producers: &mut ProducerStateManager) -> Result<(), LogError> {
        *producers = load_producer_state(&self.log)?;
        let mut unstable = self.unstable.lock().unwrap_or_else(|p| p.into_inner());
        *unstable = Unstable::of(producers);
        self.publish_unstable(&mut unstable);
        if cfg!(debug_assertions) && self.log.size_bytes() <= DEBUG_REBUILD_CHECK_BYTES {
            debug_assert_eq!(
                *producers,
                rebuild_producer_state(&self.log)?,
                "{}: producer state from snapshot and log differs from the log's",
                self.topic_partition
            );
        }
        Ok(())
    }

    #[cfg(test)]
    fn producer_state(&self) -> ProducerStateManager {
        self.producers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn is_leader(&self) -> bool {
        self.state.read().unwrap_or_else(|p| p.into_inner()).leader == self.broker_id
    }

    /// Where an `acks=all` append stands. A change of leader epoch alone does not fail it:
    /// this broker may lead again at a newer epoch with the records still in its log (the
    /// controller moved leadership away and back, or took the partition offline and gave it
    /// back), and they are acknowledged once the high watermark passes them. Answering
    /// NOT_LEADER_OR_FOLLOWER there made librdkafka re-send records already in the log; after a
    /// local epoch bump (its other messages had timed out) the re-send carried a new producer
    /// epoch and sequence, so no broker could recognise it, and the records were stored twice
    /// (a 300 s five-node jepsen run).
    ///
    /// The records are still the ones appended when the log says the last of them was written
    /// under the same leader epoch: a truncation that removed them and records appended again
    /// at those offsets carry a newer epoch (an epoch has one leader, and a leader never
    /// truncates its own epoch). The high watermark is read first; the records intact after it
    /// means they were intact when it was read (an epoch, once replaced at an offset, never
    /// comes back).
    pub fn ack_state(&self, pending: &PendingAck, min_insync_replicas: usize) -> AckState {
        let high_watermark = self.log.high_watermark();
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        let intact = pending.last_offset < self.log.log_start_offset()
            || self.log.epoch_at(pending.last_offset) == pending.records_epoch;
        // Offline (no leader) is not deposed: the ISR keeps its last member, and this broker
        // leads again once it is back.
        let led_elsewhere = state.leader >= 0 && state.leader != self.broker_id;
        if !intact {
            AckState::NotLeader
        } else if high_watermark > pending.last_offset {
            if led_elsewhere || state.isr.len() >= min_insync_replicas {
                // A follower's high watermark is its leader's: committed there.
                AckState::Acknowledged
            } else {
                AckState::UnderMinIsr
            }
        } else if led_elsewhere {
            AckState::NotLeader
        } else {
            AckState::Waiting
        }
    }

    /// What an `acks=all` answer for records already in the log, ending at `last_offset`,
    /// waits for (a duplicate's original batch).
    fn pending_ack(&self, last_offset: u64) -> PendingAck {
        PendingAck {
            last_offset,
            records_epoch: self.log.epoch_at(last_offset),
        }
    }

    /// The leader's high watermark: the smallest log end offset in the ISR (followers' from
    /// their fetches). It never moves backwards on a leader. Returns whether it moved.
    pub fn maybe_advance_high_watermark(&self) -> bool {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        if state.leader != self.broker_id {
            return false;
        }
        let mut candidate = self.log.log_end_offset();
        {
            let followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
            for replica in state.isr.iter().filter(|r| **r != self.broker_id) {
                match followers.get(replica).and_then(|f| f.log_end_offset) {
                    Some(leo) => candidate = candidate.min(leo),
                    // Not heard from since this leadership began: it holds the HW back.
                    None => return false,
                }
            }
        }
        drop(state);
        self.raise_high_watermark(candidate)
    }

    /// Whether an append here may wait for an fsync (see [`LogConfig::appends_may_sync`]).
    pub fn appends_may_sync(&self) -> bool {
        self.log.config().appends_may_sync()
    }

    /// Appends a producer's batches as leader. `min_insync_replicas` applies to `acks=all`.
    /// Transactional batches are not verified (see [`Partition::append_verified`]).
    pub fn append_as_leader(
        &self,
        records: &[u8],
        acks: i16,
        min_insync_replicas: usize,
    ) -> Result<Appended, AppendError> {
        self.append_leading(
            records,
            acks,
            min_insync_replicas,
            None,
            Writer::Client(Verification::Off),
        )
    }

    /// [`Partition::append_as_leader`] with KIP-890's check: a transactional batch that would
    /// open the producer's transaction here is appended only under the guard its verification
    /// with the coordinator took (`None`: not verified), still current under the
    /// producer-state lock.
    pub fn append_verified(
        &self,
        records: &[u8],
        acks: i16,
        min_insync_replicas: usize,
        guard: Option<u64>,
    ) -> Result<Appended, AppendError> {
        self.append_leading(
            records,
            acks,
            min_insync_replicas,
            None,
            Writer::Client(Verification::Guard(guard)),
        )
    }

    /// Whether a transactional write of `producer_id` must be verified with the coordinator
    /// first: it has no transaction open here (KIP-890).
    pub fn needs_verification(&self, producer_id: i64) -> bool {
        self.producers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .producer(producer_id)
            .is_none_or(|entry| entry.current_txn_first_offset.is_none())
    }

    /// Starts verifying a transactional write of `producer_id`: the guard to append under.
    pub fn start_verification(&self, producer_id: i64) -> u64 {
        static NEXT_GUARD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let guard = NEXT_GUARD.fetch_add(1, Ordering::Relaxed);
        let _producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        // Verifications under way share one guard (Kafka's verification state entry): one
        // does not void another's; only a marker does.
        *self
            .verification_guards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(producer_id)
            .or_insert(guard)
    }

    /// Appends an internal writer's batches (a coordinator's) with `acks=all` semantics, only
    /// while this replica still leads at `leader_epoch` (checked under the same lock as the
    /// append): records built from state loaded under one epoch never land under another.
    pub fn append_as_leader_at_epoch(
        &self,
        records: &[u8],
        leader_epoch: i32,
        min_insync_replicas: usize,
    ) -> Result<Appended, AppendError> {
        self.append_leading(
            records,
            -1,
            min_insync_replicas,
            Some(leader_epoch),
            Writer::Internal,
        )
    }

    /// Writes a transaction marker (WriteTxnMarkers, from the transaction coordinator) as
    /// leader, with `acks=all` semantics: it closes the producer's open transaction here. A
    /// marker from an older producer epoch is INVALID_PRODUCER_EPOCH, from an older
    /// coordinator epoch TRANSACTION_COORDINATOR_FENCED.
    pub fn append_txn_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: TxnMarker,
        min_insync_replicas: usize,
        expected_leader_epoch: Option<i32>,
    ) -> Result<Appended, AppendError> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let records = marker.batch(producer_id, producer_epoch, now_ms);
        self.append_leading(
            &records,
            -1,
            min_insync_replicas,
            expected_leader_epoch,
            Writer::Internal,
        )
    }

    fn append_leading(
        &self,
        records: &[u8],
        acks: i16,
        min_insync_replicas: usize,
        expected_leader_epoch: Option<i32>,
        writer: Writer,
    ) -> Result<Appended, AppendError> {
        let origin = match writer {
            Writer::Client(_) => AppendOrigin::Client,
            Writer::Internal => AppendOrigin::Internal,
        };
        // Held until the batches are in the log: a leadership change waits for the append, so
        // nothing is appended under an epoch this replica no longer leads (Kafka holds its
        // leader-ISR lock the same way). Released before the high watermark is looked at,
        // which reads the state again.
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        if state.leader != self.broker_id {
            return Err(AppendError::new(
                KafkaError::NotLeaderOrFollower,
                format!(
                    "broker {} is not the leader of {}",
                    self.broker_id, self.topic_partition
                ),
            ));
        }
        let (leader_epoch, isr_size) = (state.leader_epoch, state.isr.len());
        if expected_leader_epoch.is_some_and(|expected| expected != leader_epoch) {
            return Err(AppendError::new(
                KafkaError::NotLeaderOrFollower,
                format!(
                    "broker {} leads {} at epoch {leader_epoch}, not {expected_leader_epoch:?}",
                    self.broker_id, self.topic_partition
                ),
            ));
        }
        if acks == -1 && isr_size < min_insync_replicas {
            return Err(AppendError::new(
                KafkaError::NotEnoughReplicas,
                format!(
                    "the ISR has {isr_size} replicas, min.insync.replicas is {min_insync_replicas}"
                ),
            ));
        }
        // Checked once, CRC included, before the producer fields are trusted.
        let validated = self.log.validate_leader_append(records, origin)?;
        let batches = producer_batches(&validated, records);
        let mut producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        for (_, kind) in &batches {
            let refused = |error: KafkaError, what: String| {
                Err(AppendError::new(error, format!("{what}: refused")))
            };
            match kind {
                BatchKind::Plain => {}
                BatchKind::Producer(batch) if writer == Writer::Internal => {
                    if let Err(error) = producers.check_internal(batch) {
                        return refused(
                            error,
                            format!("producer {} epoch {}", batch.producer_id, batch.epoch),
                        );
                    }
                }
                BatchKind::Producer(batch) => match producers.check(batch) {
                    Ok(Check::Append) => {
                        if let Writer::Client(Verification::Guard(guard)) = writer
                            && opens_txn(&producers, kind)
                            && (guard.is_none()
                                || self
                                    .verification_guards
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .get(&batch.producer_id)
                                    != guard.as_ref())
                        {
                            return refused(
                                KafkaError::InvalidTxnState,
                                format!(
                                    "producer {} epoch {}: the transaction coordinator has not \
                                     added {} to its transaction",
                                    batch.producer_id, batch.epoch, self.topic_partition
                                ),
                            );
                        }
                    }
                    Ok(Check::Duplicate(original)) => {
                        let pending = self.pending_ack(original.last_offset as u64);
                        return Ok(Appended {
                            info: AppendInfo {
                                first_offset: original.first_offset as u64,
                                last_offset: original.last_offset as u64,
                                max_timestamp: original.max_timestamp,
                                log_append_time_ms: None,
                                log_start_offset: self.log.log_start_offset(),
                                record_count: 0,
                                bytes: 0,
                            },
                            duplicate: true,
                            pending,
                        });
                    }
                    Err(error) => {
                        return refused(
                            error,
                            format!(
                                "producer {} epoch {} sequence {}",
                                batch.producer_id, batch.epoch, batch.first_sequence
                            ),
                        );
                    }
                },
                BatchKind::Marker {
                    producer_id,
                    epoch,
                    marker,
                } => {
                    if let Err(error) =
                        producers.check_marker(*producer_id, *epoch, marker.coordinator_epoch)
                    {
                        return refused(
                            error,
                            format!(
                                "marker for producer {producer_id} epoch {epoch} from coordinator epoch {}",
                                marker.coordinator_epoch
                            ),
                        );
                    }
                }
            }
        }
        if batches.iter().any(|(_, kind)| opens_txn(&producers, kind)) {
            self.hold_unstable_from_log_end();
        }
        let info = match self
            .log
            .append_validated_as_leader(records, validated, leader_epoch)
        {
            Ok(info) => info,
            Err(error) => {
                self.sync_unstable(&producers);
                return Err(error.into());
            }
        };
        let mut next_offset = info.first_offset as i64;
        for (header, kind) in &batches {
            let first_offset = next_offset;
            let last_offset = first_offset + i64::from(header.last_offset_delta);
            next_offset = last_offset + 1;
            let timestamp = info.log_append_time_ms.unwrap_or(header.max_timestamp);
            match kind {
                BatchKind::Plain => {}
                BatchKind::Producer(batch) => {
                    producers.update(
                        batch,
                        BatchMetadata {
                            first_sequence: batch.first_sequence,
                            last_sequence: batch.last_sequence,
                            first_offset,
                            last_offset,
                            max_timestamp: timestamp,
                        },
                    );
                    if batch.transactional {
                        // Its transaction is open here now: no more verification until the
                        // marker, so the guard has done its work.
                        self.verification_guards
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&batch.producer_id);
                    }
                }
                BatchKind::Marker {
                    producer_id,
                    epoch,
                    marker,
                } => {
                    self.verification_guards
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(producer_id);
                    let completed = producers.complete_txn(&MarkerBatch {
                        producer_id: *producer_id,
                        epoch: *epoch,
                        coordinator_epoch: marker.coordinator_epoch,
                        commit: marker.commit,
                        offset: first_offset,
                        timestamp,
                    });
                    if let Some(completed) = completed {
                        self.txn_closed(&producers, completed);
                    }
                }
            }
        }
        self.sync_unstable(&producers);
        self.maybe_snapshot(&producers);
        // The log just stamped the batches with this epoch (no lookup on the append path).
        let pending = PendingAck {
            last_offset: info.last_offset,
            records_epoch: Some(leader_epoch),
        };
        debug_assert_eq!(self.log.epoch_at(info.last_offset), Some(leader_epoch));
        drop(producers);
        drop(state);
        if !self.maybe_advance_high_watermark() {
            // The log end moved: followers' long polls read it.
            self.watchers.wake();
        }
        self.check_invariants();
        Ok(Appended {
            info,
            duplicate: false,
            pending,
        })
    }

    /// A marker closed a transaction (as leader, follower or in a replay): an aborted one
    /// enters the aborted-transaction index; either holds the last stable offset until the
    /// high watermark passes its marker.
    fn txn_closed(&self, producers: &ProducerStateManager, completed: CompletedTxn) {
        if let Err(error) = index_aborted(&self.log, producers, &completed) {
            tracing::warn!(topic_partition = %self.topic_partition, %error, "could not index an aborted transaction");
        }
        self.unstable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .closed
            .push_back((
                completed.first_offset.max(0) as u64,
                completed.last_offset.max(0) as u64,
            ));
    }

    /// Before an append that opens a transaction (producer state held by the caller, so the
    /// log end is where the append starts): the last stable offset stays below the log end
    /// until producer state has the transaction.
    fn hold_unstable_from_log_end(&self) {
        let mut unstable = self.unstable.lock().unwrap_or_else(|p| p.into_inner());
        unstable.appending = Some(self.log.log_end_offset());
        self.publish_unstable(&mut unstable);
    }

    /// Copies the oldest open transaction out of producer state (held by the caller), which
    /// now knows what an append in flight opened.
    fn sync_unstable(&self, producers: &ProducerStateManager) {
        let mut unstable = self.unstable.lock().unwrap_or_else(|p| p.into_inner());
        unstable.first_open = producers.first_unstable_offset().map(|o| o.max(0) as u64);
        unstable.appending = None;
        self.publish_unstable(&mut unstable);
    }

    /// Tells the log where undecided transactions start (the cleaner never compacts past it).
    fn publish_unstable(&self, unstable: &mut Unstable) {
        let high_watermark = self.log.high_watermark();
        let last_stable = unstable.last_stable_offset(high_watermark);
        let first_unstable = if last_stable < high_watermark {
            last_stable
        } else {
            u64::MAX
        };
        self.log.set_first_unstable_offset(first_unstable);
    }

    /// The last stable offset (LSO): the high watermark, or the first offset of the oldest
    /// transaction still undecided (open, or closed by a marker the high watermark has not
    /// passed), when that is lower. read_committed consumers read below it.
    /// Never below the log start: retention may delete the start of an open transaction
    /// (as in Kafka, where the LSO then is the log start).
    pub fn last_stable_offset(&self) -> u64 {
        let high_watermark = self.log.high_watermark();
        let last_stable = self
            .unstable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_stable_offset(high_watermark);
        last_stable.max(self.log.log_start_offset().min(high_watermark))
    }

    /// A read_committed read: whole batches below `last_stable_offset` (as
    /// [`Partition::read_with`]), with the aborted transactions that overlap them.
    pub fn read_committed(
        &self,
        fetch_offset: u64,
        max_bytes: u64,
        last_stable_offset: u64,
        min_one_message: bool,
    ) -> Result<(Option<FileSlice>, Vec<AbortedTxn>), LogError> {
        let bound = last_stable_offset.min(self.log.high_watermark());
        let read = self
            .log
            .read_with(fetch_offset, max_bytes, Some(bound), min_one_message)?;
        let aborted = match &read.slice {
            Some(_) => self.log.collect_aborted(fetch_offset, read.upper_bound),
            None => Vec::new(),
        };
        Ok((read.slice, aborted))
    }

    /// Producer state, for DescribeProducers: each producer's id, epoch, last sequence, last
    /// timestamp, coordinator epoch and open transaction's first offset.
    pub fn producer_states(&self) -> Vec<(i64, crate::txn::producer_state::ProducerEntry)> {
        self.producers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .producers()
            .map(|(id, entry)| (id, entry.clone()))
            .collect()
    }

    /// Requests waiting on this partition (the purgatory).
    pub fn watchers(&self) -> &Watchers {
        &self.watchers
    }

    pub fn high_watermark(&self) -> u64 {
        self.log.high_watermark()
    }

    pub fn log_end_offset(&self) -> u64 {
        self.log.log_end_offset()
    }

    pub fn log_start_offset(&self) -> u64 {
        self.log.log_start_offset()
    }

    /// Bytes of this replica's log on disk.
    pub fn size_bytes(&self) -> u64 {
        self.log.size_bytes()
    }

    /// The epoch of the last batch in the log (a follower's `last_fetched_epoch`).
    pub fn latest_epoch(&self) -> Option<i32> {
        self.log.latest_epoch()
    }

    /// OffsetForLeaderEpoch: the largest epoch at most `leader_epoch` this log knows, and the
    /// offset where it ends (the next epoch's start, or the log end).
    pub fn end_offset_for_epoch(&self, leader_epoch: i32) -> Option<(i32, u64)> {
        self.log.end_offset_for_epoch(leader_epoch)
    }

    /// Whole batches from `fetch_offset`, at most `max_bytes` (the first batch always, when
    /// anything is there). Consumers read below the high watermark only; followers to the log
    /// end.
    pub fn read(
        &self,
        fetch_offset: u64,
        max_bytes: u64,
        isolation: ReadBound,
    ) -> Result<Option<FileSlice>, LogError> {
        self.read_with(fetch_offset, max_bytes, isolation, true)
    }

    /// As [`Partition::read`], for a Fetch: the first batch may exceed `max_bytes` only with
    /// `min_one_message`, which Kafka's `ReplicaManager.readFromLocalLog` grants until a
    /// partition of the response has returned records (KIP-74). Without it a batch that does
    /// not fit gives `None`, and the client fetches it later, first in some response.
    pub fn read_with(
        &self,
        fetch_offset: u64,
        max_bytes: u64,
        isolation: ReadBound,
        min_one_message: bool,
    ) -> Result<Option<FileSlice>, LogError> {
        let bound = match isolation {
            ReadBound::HighWatermark(reported) => Some(reported.min(self.log.high_watermark())),
            ReadBound::LogEnd => None,
        };
        let slice = self
            .log
            .read_with(fetch_offset, max_bytes, bound, min_one_message)?
            .slice;
        debug_assert!(
            min_one_message || slice.as_ref().is_none_or(|s| s.len <= max_bytes),
            "a read without min_one_message exceeds its max_bytes"
        );
        Ok(slice)
    }

    /// ListOffsets by timestamp: the first offset whose timestamp is at or after `timestamp`,
    /// with that timestamp, among committed records.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(u64, i64)>, LogError> {
        let high_watermark = self.log.high_watermark();
        Ok(self
            .log
            .offset_for_timestamp(timestamp)?
            .filter(|(offset, _)| *offset < high_watermark))
    }

    /// ListOffsets MAX_TIMESTAMP: the offset of the record with the largest timestamp, among
    /// committed records.
    pub fn max_timestamp_offset(&self) -> Result<Option<(u64, i64)>, LogError> {
        let high_watermark = self.log.high_watermark();
        Ok(self
            .log
            .max_timestamp_offset()?
            .filter(|(offset, _)| *offset < high_watermark))
    }

    /// DeleteRecords' target: `before` (-1 for the high watermark), refused with
    /// OFFSET_OUT_OF_RANGE past the high watermark.
    pub fn delete_records_target(&self, before: i64) -> Result<u64, KafkaError> {
        let high_watermark = self.log.high_watermark();
        match before {
            -1 => Ok(high_watermark),
            offset if offset >= 0 && offset as u64 <= high_watermark => Ok(offset as u64),
            _ => Err(KafkaError::OffsetOutOfRange),
        }
    }

    /// Applies a topic's config (from a new image) when it changed.
    pub(super) fn update_config(&self, config: LogConfig) {
        if *self.log.config() != config {
            self.log.update_config(config);
        }
    }

    /// After the log end or start moved outside an append (truncation, DeleteRecords).
    pub(super) fn log_moved(&self) {
        self.watchers.wake();
    }

    /// After a segment roll, snapshots producer state at the log end, so a restart replays
    /// at most the active segment.
    fn maybe_snapshot(&self, producers: &ProducerStateManager) {
        let segments = self.log.segment_count();
        let mut last = self
            .snapshot_segments
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if segments != *last {
            *last = segments;
            if let Err(error) = producers.write_snapshot(self.log.dir(), self.log.log_end_offset())
            {
                tracing::warn!(topic_partition = %self.topic_partition, %error, "producer snapshot failed");
            }
        }
    }

    /// Writes a producer snapshot at the log end (at shutdown).
    pub fn snapshot_producer_state(&self) -> Result<(), SnapshotError> {
        let producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        if producers.is_empty() {
            return Ok(());
        }
        producers.write_snapshot(self.log.dir(), self.log.log_end_offset())
    }
}

/// The leader epoch when `me` leads, -1 otherwise.
fn leading_epoch(state: &PartitionState, me: BrokerId) -> i64 {
    if state.leader == me {
        i64::from(state.leader_epoch)
    } else {
        -1
    }
}

/// A new leadership's view of its followers: offsets unknown, caught up as of now (so none is
/// dropped from the ISR before it had the time to fetch).
fn fresh_followers(
    state: &PartitionState,
    me: BrokerId,
    now: Instant,
) -> HashMap<BrokerId, FollowerState> {
    state
        .replicas
        .iter()
        .filter(|r| **r != me)
        .map(|r| (*r, FollowerState::new(now)))
        .collect()
}

/// Who appends as leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    /// A producer (Produce).
    Client(Verification),
    /// The broker itself: a coordinator's records, a transaction marker.
    Internal,
}

/// KIP-890's check of a transactional write that opens its transaction in this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verification {
    /// Not checked (`transaction.partition.verification.enable=false`).
    Off,
    /// The guard its verification took (`None`: the coordinator did not confirm).
    Guard(Option<u64>),
}

/// What producer state makes of a batch.
#[derive(Debug, Clone, Copy)]
enum BatchKind {
    /// No producer id.
    Plain,
    /// An idempotent or transactional producer's batch.
    Producer(ProducerBatch),
    /// A transaction marker.
    Marker {
        producer_id: i64,
        epoch: i16,
        marker: TxnMarker,
    },
}

/// The producer fields of each validated batch (trusted: their CRC held).
fn producer_batches(validated: &ValidatedBatches, records: &[u8]) -> Vec<(BatchHeader, BatchKind)> {
    validated
        .batches(records)
        .map(|(header, bytes)| (*header, batch_kind(header, bytes)))
        .collect()
}

fn batch_kind(header: &BatchHeader, bytes: &[u8]) -> BatchKind {
    if header.producer_id < 0 {
        return BatchKind::Plain;
    }
    if header.is_control() {
        return match TxnMarker::parse(header, bytes) {
            Some(marker) => BatchKind::Marker {
                producer_id: header.producer_id,
                epoch: header.producer_epoch,
                marker,
            },
            // Another kind of control record: nothing for producer state.
            None => BatchKind::Plain,
        };
    }
    BatchKind::Producer(ProducerBatch {
        producer_id: header.producer_id,
        epoch: header.producer_epoch,
        first_sequence: header.base_sequence,
        last_sequence: last_sequence(header.base_sequence, header.last_offset_delta),
        transactional: header.is_transactional(),
    })
}

fn last_sequence(base_sequence: i32, last_offset_delta: i32) -> i32 {
    // Sequences wrap at i32::MAX back to 0.
    let last = i64::from(base_sequence) + i64::from(last_offset_delta);
    if last > i64::from(i32::MAX) {
        (last - i64::from(i32::MAX) - 1) as i32
    } else {
        last as i32
    }
}

/// Records a batch already in the log (a follower's append, or replay) in producer state;
/// the transaction a marker closed.
fn record_batch(
    producers: &mut ProducerStateManager,
    header: &BatchHeader,
    bytes: &[u8],
) -> Option<CompletedTxn> {
    match batch_kind(header, bytes) {
        BatchKind::Plain => None,
        BatchKind::Producer(batch) => {
            producers.update(
                &batch,
                BatchMetadata {
                    first_sequence: batch.first_sequence,
                    last_sequence: batch.last_sequence,
                    first_offset: header.base_offset,
                    last_offset: header.last_offset(),
                    max_timestamp: header.max_timestamp,
                },
            );
            None
        }
        BatchKind::Marker {
            producer_id,
            epoch,
            marker,
        } => producers.complete_txn(&MarkerBatch {
            producer_id,
            epoch,
            coordinator_epoch: marker.coordinator_epoch,
            commit: marker.commit,
            offset: header.base_offset,
            timestamp: header.max_timestamp,
        }),
    }
}

/// Whether appending a batch of `kind` opens a transaction: a transactional batch of a
/// producer with none open.
fn opens_txn(producers: &ProducerStateManager, kind: &BatchKind) -> bool {
    match kind {
        BatchKind::Producer(batch) => {
            batch.transactional
                && producers
                    .producer(batch.producer_id)
                    .is_none_or(|e| e.current_txn_first_offset.is_none())
        }
        _ => false,
    }
}

/// Enters an aborted transaction in the log's index, with the last stable offset once it
/// closed (the oldest transaction still open, else the offset after the marker).
fn index_aborted(
    log: &Log,
    producers: &ProducerStateManager,
    completed: &CompletedTxn,
) -> Result<(), LogError> {
    if !completed.aborted {
        return Ok(());
    }
    let last_stable_offset = producers
        .first_unstable_offset()
        .unwrap_or(completed.last_offset + 1);
    log.add_aborted(AbortedTxn {
        producer_id: completed.producer_id,
        first_offset: completed.first_offset.max(0) as u64,
        last_offset: completed.last_offset.max(0) as u64,
        last_stable_offset: last_stable_offset.max(0) as u64,
    })
}

/// The newest snapshot, then the log after it, replayed batch by batch (headers only).
/// A log whose aborted-transaction index was lost at open replays from a snapshot before it,
/// which rebuilds it. (Recovery keeps an index's entries for the data it keeps: each was
/// synced before the snapshot after its marker was written.)
fn load_producer_state(log: &Log) -> Result<ProducerStateManager, LogError> {
    let limit = log
        .reindex_from()
        .map_or(log.log_end_offset(), |base| base.min(log.log_end_offset()));
    let (state, from) = ProducerStateManager::load_snapshot(log.dir(), limit);
    replay(log, state, from)
}

/// Producer state from the log alone, replayed from its start (no snapshot).
fn rebuild_producer_state(log: &Log) -> Result<ProducerStateManager, LogError> {
    replay(log, ProducerStateManager::default(), None)
}

/// `state` with the log's batches from `from` (default: the log start) to its end recorded.
fn replay(
    log: &Log,
    mut state: ProducerStateManager,
    from: Option<u64>,
) -> Result<ProducerStateManager, LogError> {
    let log_end_offset = log.log_end_offset();
    let mut offset = from
        .unwrap_or_else(|| log.log_start_offset())
        .max(log.log_start_offset());
    let mut buffer = Vec::new();
    while offset < log_end_offset {
        let read = log.read(offset, REPLAY_READ_BYTES, None)?;
        let Some(slice) = read.slice else { break };
        buffer.clear();
        slice
            .read_into(&mut buffer)
            .map_err(|e| LogError::io(log.dir(), e))?;
        let mut advanced = false;
        for (_, header, bytes) in BatchIter::new(&buffer).filter_map(Result::ok) {
            let last_offset = header.last_offset();
            if last_offset < offset as i64 {
                continue;
            }
            if let Some(completed) = record_batch(&mut state, &header, bytes) {
                index_aborted(log, &state, &completed)?;
            }
            offset = last_offset as u64 + 1;
            advanced = true;
        }
        if !advanced {
            break;
        }
    }
    Ok(state)
}

#[cfg(test)]
mod tests;
