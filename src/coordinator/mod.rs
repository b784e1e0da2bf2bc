//! The coordinator runtime: what every coordinator over an internal compacted topic shares
//! (the group coordinator now, the transaction coordinator next). Kafka's `CoordinatorRuntime`
//! is the model.
//!
//! - One **shard** per partition of the internal topic this broker leads, loaded by replaying
//!   the partition from its start, dropped when leadership moves.
//! - Every change is an **operation** on the shard: it reads the shard, and changes its durable
//!   state only by writing records, which the shard replays at once (`Shard::replay`, the same
//!   function loading uses) so the rest of the operation, and the next one, see them. Each
//!   written record comes with the record that puts back what it replaced.
//! - The runtime then appends the operation's records (fenced by the leader epoch the shard was
//!   loaded at). A failed append **rolls back**: the undo records are replayed in reverse, so
//!   memory never holds what the log does not. An appended write is answered once its records
//!   are **committed** (the in-sync replicas hold them); if that fails, the client gets the
//!   error and the state keeps the records, which are in this leader's log (a leadership change
//!   reloads the shard from whatever log wins).
//! - Work to do once committed (or failed) is an `after_commit` continuation, itself run as an
//!   operation under the shard's lock.
//! - **Reads** that must see a key's writes wait until its last write is committed.
//! - **Timers** are keyed by deadline (one per key, a group id): firing costs O(expired).
//! - The time is an injected `Clock`, and the partition a `PartitionWriter`, so shards run in
//!   unit tests on a `MemoryWriter` and a `ManualClock`.
//! - Cheap **invariants** of every key an operation touched are checked after it, in release
//!   builds too; a broken one logs at ERROR and fences the shard (NOT_COORDINATOR), which is
//!   reloaded from the log, instead of serving or panicking.

pub mod clock;
pub mod host;
pub mod timer;
pub mod writer;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

pub use clock::{Clock, ManualClock, Now, SystemClock};
use timer::Timers;
pub use writer::{LoadItem, MemoryWriter, PartitionWriter, TxnProducer, Written};

use crate::protocol::errors::KafkaError;

/// The state machine of one shard.
pub trait Shard: Send + Sized + 'static {
    type Record: Clone + Send + Sync + std::fmt::Debug + 'static;

    /// The ONLY way durable state changes: loading and live writes both come here. Records
    /// are replayed in log order; the latest record of a key wins.
    fn replay(&mut self, record: &Self::Record, now: Now);

    /// `replay` of a record the caller no longer needs (loading): a shard may move its
    /// contents instead of copying them. The same state change as `replay`.
    fn replay_owned(&mut self, record: Self::Record, now: Now) {
        self.replay(&record, now);
    }

    /// `replay` of a record written in `producer_id`'s transaction: it takes effect only if
    /// that producer's commit marker follows ([`Shard::replay_end_txn`]). An operation's
    /// undo records of a transactional write come back here too. Shards without
    /// transactional records treat it as `replay`.
    fn replay_transactional(&mut self, producer_id: i64, record: &Self::Record, now: Now) {
        let _ = producer_id;
        self.replay(record, now);
    }

    /// `producer_id`'s transaction ended: its records take effect (`commit`) or are dropped.
    /// Returns the keys it changed.
    fn replay_end_txn(&mut self, producer_id: i64, commit: bool, now: Now) -> Vec<String> {
        let _ = (producer_id, commit, now);
        Vec::new()
    }

    /// The key (a group id) a record belongs to: reads wait for a key's writes, invariants
    /// are checked per key.
    fn key_of(record: &Self::Record) -> &str;

    fn encode(record: &Self::Record) -> writer::EncodedRecord;

    /// `Ok(None)` for a record of no interest (another coordinator's, a future version).
    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<Self::Record>, String>;

    /// Loading is done: schedule what the loaded state needs.
    fn loaded(&mut self, ctx: &mut Ctx<Self>);

    /// `key`'s deadline passed.
    fn timer(&mut self, key: &str, ctx: &mut Ctx<Self>);

    /// The shard is dropped (leadership moved): answer whoever waits.
    fn unload(&mut self);

    /// Cheap checks of one key's state, run after every operation that touched it.
    fn check(&self, key: &str) -> Result<(), String>;

    /// An operation that touched `key` was rolled back: the timers it set were computed
    /// from state that is gone; set them again from the state as it is now.
    fn rolled_back(&mut self, key: &str, ctx: &mut Ctx<Self>);
}

type AfterCommit<S> = Box<dyn FnOnce(&mut S, &mut Ctx<S>, Result<(), KafkaError>) + Send>;

/// What an operation writes and schedules.
pub struct Ctx<S: Shard> {
    pub now: Now,
    /// The producer whose transaction the records are part of.
    producer: Option<TxnProducer>,
    records: Vec<S::Record>,
    undo: Vec<S::Record>,
    timers: Vec<(String, Option<Instant>)>,
    touched: BTreeSet<String>,
    after_commit: Vec<AfterCommit<S>>,
}

impl<S: Shard> Ctx<S> {
    fn new(now: Now) -> Ctx<S> {
        Ctx {
            now,
            producer: None,
            records: Vec::new(),
            undo: Vec::new(),
            timers: Vec::new(),
            touched: BTreeSet::new(),
            after_commit: Vec::new(),
        }
    }

    /// `record` was just replayed into the shard; `undo` replayed puts back what it
    /// replaced. The record is appended when the operation ends.
    pub fn written(&mut self, record: S::Record, undo: S::Record) {
        self.touch(S::key_of(&record));
        self.records.push(record);
        self.undo.push(undo);
    }

    /// The operation's records are part of `producer`'s transaction (written in one
    /// transactional batch; replayed and undone through `Shard::replay_transactional`).
    pub fn transactional(&mut self, producer: TxnProducer) {
        self.producer = Some(producer);
    }

    /// Sets (moves, or with `None` cancels) the timer `key`.
    pub fn schedule(&mut self, key: impl Into<String>, deadline: Option<Instant>) {
        self.timers.push((key.into(), deadline));
    }

    /// The operation changed `key` (its invariants are checked when the operation ends).
    pub fn touch(&mut self, key: &str) {
        if !self.touched.contains(key) {
            self.touched.insert(key.to_owned());
        }
    }

    /// Runs `then` under the shard's lock once this operation's records are committed
    /// (`Ok`), or failed to be (`Err`, also for a failed append). With no records, at once.
    pub fn after_commit(
        &mut self,
        then: impl FnOnce(&mut S, &mut Ctx<S>, Result<(), KafkaError>) + Send + 'static,
    ) {
        self.after_commit.push(Box::new(then));
    }
}

/// The runtime's settings.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// What the logs call it ("group coordinator").
    pub name: &'static str,
    /// How long a write waits for the in-sync replicas (`offsets.commit.timeout.ms`).
    pub commit_timeout: Duration,
    /// A timer whose write failed fires again this much later.
    pub timer_retry: Duration,
    /// Run each shard's timers on a task (off in unit tests, which call `fire_timers`).
    pub run_timers: bool,
}

#[cfg(test)]
impl RuntimeConfig {
    /// Unit tests: a short commit wait, timers fired by the test (`fire_timers`).
    pub(crate) fn for_tests(name: &'static str) -> RuntimeConfig {
        RuntimeConfig {
            name,
            commit_timeout: Duration::from_millis(100),
            timer_retry: Duration::from_millis(1_000),
            run_timers: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Loading,
    Loaded,
    /// An invariant failed: refused until reloaded.
    Fenced,
    Unloaded,
}

/// An appended write waiting to be committed.
struct Pending<S: Shard> {
    written: Written,
    keys: Vec<String>,
    after_commit: Vec<AfterCommit<S>>,
}

struct Cell<S: Shard> {
    phase: Phase,
    shard: S,
    timers: Timers,
    /// Per key, the last offset written and not yet known committed.
    uncommitted: HashMap<String, Written>,
}

/// One shard: a partition this broker leads, at the epoch it was loaded.
pub struct ShardHandle<S: Shard> {
    pub index: i32,
    pub leader_epoch: i32,
    config: RuntimeConfig,
    clock: Arc<dyn Clock>,
    writer: Arc<dyn PartitionWriter>,
    empty: Arc<dyn Fn() -> S + Send + Sync>,
    cell: Mutex<Cell<S>>,
    wake: Notify,
    unloaded: AtomicBool,
    timers_running: AtomicBool,
}

/// The shards of one coordinator, by partition.
pub struct Runtime<S: Shard> {
    config: RuntimeConfig,
    clock: Arc<dyn Clock>,
    shards: RwLock<HashMap<i32, Arc<ShardHandle<S>>>>,
}

impl<S: Shard> Runtime<S> {
    pub fn new(config: RuntimeConfig, clock: Arc<dyn Clock>) -> Runtime<S> {
        Runtime {
            config,
            clock,
            shards: RwLock::new(HashMap::new()),
        }
    }

    /// What the logs call this coordinator.
    pub fn name(&self) -> &'static str {
        self.config.name
    }

    /// The shard of `index`, loaded or not.
    pub fn shard(&self, index: i32) -> Option<Arc<ShardHandle<S>>> {
        self.read_shards().get(&index).cloned()
    }

    pub fn shards(&self) -> Vec<Arc<ShardHandle<S>>> {
        self.read_shards().values().cloned().collect()
    }

    fn read_shards(&self) -> std::sync::RwLockReadGuard<'_, HashMap<i32, Arc<ShardHandle<S>>>> {
        self.shards.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_shards(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<i32, Arc<ShardHandle<S>>>> {
        self.shards.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Became leader of `index` at `leader_epoch`: a new shard, to be loaded
    /// (`ShardHandle::load`). `None` when that shard exists already (a rescan and the event).
    pub fn start_shard(
        &self,
        index: i32,
        leader_epoch: i32,
        writer: Arc<dyn PartitionWriter>,
        empty: Arc<dyn Fn() -> S + Send + Sync>,
    ) -> Option<Arc<ShardHandle<S>>> {
        let handle = {
            let mut shards = self.write_shards();
            if shards
                .get(&index)
                .is_some_and(|s| s.leader_epoch == leader_epoch)
            {
                return None;
            }
            let handle = Arc::new(ShardHandle {
                index,
                leader_epoch,
                config: self.config.clone(),
                clock: Arc::clone(&self.clock),
                writer,
                cell: Mutex::new(Cell {
                    phase: Phase::Loading,
                    shard: empty(),
                    timers: Timers::default(),
                    uncommitted: HashMap::new(),
                }),
                empty,
                wake: Notify::new(),
                unloaded: AtomicBool::new(false),
                timers_running: AtomicBool::new(false),
            });
            if let Some(previous) = shards.insert(index, Arc::clone(&handle)) {
                previous.unload();
            }
            handle
        };
        Some(handle)
    }

    /// Stops serving `index` (leadership moved); whether it was served.
    pub fn stop_shard(&self, index: i32) -> bool {
        match self.write_shards().remove(&index) {
            Some(previous) => {
                previous.unload();
                true
            }
            None => false,
        }
    }
}

/// How a load went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    pub records: u64,
    pub elapsed: Duration,
}

impl<S: Shard> ShardHandle<S> {
    fn lock(&self) -> MutexGuard<'_, Cell<S>> {
        self.cell.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_loaded(&self) -> bool {
        self.lock().phase == Phase::Loaded
    }

    pub fn is_unloaded(&self) -> bool {
        self.unloaded.load(Ordering::Acquire)
    }

    /// Replays the partition into an empty shard, then serves it (blocking: call from a
    /// blocking task). Records that do not decode are skipped with a warning, so one bad
    /// record never keeps a coordinator unloaded.
    pub fn load(self: &Arc<Self>) -> Result<Loaded, String> {
        let started = Instant::now();
        let mut shard = (self.empty)();
        let now = self.clock.now();
        let mut skipped = 0u64;
        let records = self
            .writer
            .read_all(&mut |item| match item {
                LoadItem::Marker {
                    producer_id,
                    commit,
                } => {
                    shard.replay_end_txn(producer_id, commit, now);
                }
                LoadItem::Record {
                    key,
                    value,
                    producer_id,
                } => match (S::decode(key, value), producer_id) {
                    (Ok(Some(record)), None) => shard.replay_owned(record, now),
                    (Ok(Some(record)), Some(producer_id)) => {
                        shard.replay_transactional(producer_id, &record, now)
                    }
                    (Ok(None), _) => {}
                    (Err(error), _) => {
                        skipped += 1;
                        if skipped <= 10 {
                            tracing::warn!(coordinator = self.config.name, partition = self.index, %error, "skipping a record that does not decode");
                        }
                    }
                },
            })?;
        let mut cell = self.lock();
        if cell.phase == Phase::Unloaded {
            return Err("unloaded while loading".into());
        }
        cell.shard = shard;
        cell.timers = Timers::default();
        cell.uncommitted.clear();
        cell.phase = Phase::Loaded;
        let mut ctx = Ctx::new(now);
        cell.shard.loaded(&mut ctx);
        if let Err(error) = self.append(&mut cell, ctx, "load") {
            tracing::warn!(coordinator = self.config.name, partition = self.index, %error, "a write after loading failed");
        }
        drop(cell);
        if self.config.run_timers && !self.timers_running.swap(true, Ordering::AcqRel) {
            tokio::spawn(Arc::clone(self).run_timers());
        }
        Ok(Loaded {
            records,
            elapsed: started.elapsed(),
        })
    }

    fn unload(&self) {
        self.unloaded.store(true, Ordering::Release);
        let mut cell = self.lock();
        cell.phase = Phase::Unloaded;
        cell.shard.unload();
        cell.timers = Timers::default();
        drop(cell);
        self.wake.notify_one();
    }

    fn refusal(phase: Phase) -> KafkaError {
        match phase {
            Phase::Loading => KafkaError::CoordinatorLoadInProgress,
            Phase::Loaded | Phase::Fenced | Phase::Unloaded => KafkaError::NotCoordinator,
        }
    }

    /// Reads the shard as it is now.
    pub fn read<R>(&self, read: impl FnOnce(&S) -> R) -> Result<R, KafkaError> {
        let cell = self.lock();
        if cell.phase != Phase::Loaded {
            return Err(Self::refusal(cell.phase));
        }
        Ok(read(&cell.shard))
    }

    /// Reads the shard once every write of `key` so far is committed.
    pub async fn read_committed<R>(
        self: &Arc<Self>,
        key: &str,
        read: impl FnOnce(&S) -> R,
    ) -> Result<R, KafkaError> {
        let waiting = {
            let cell = self.lock();
            if cell.phase != Phase::Loaded {
                return Err(Self::refusal(cell.phase));
            }
            cell.uncommitted.get(key).copied()
        };
        if let Some(written) = waiting {
            let outcome = Arc::clone(&self.writer)
                .committed(written, self.config.commit_timeout)
                .await;
            // Visible once the high watermark passed it, whether or not enough replicas
            // acknowledged (that is the writer's answer, not the reader's).
            if let Err(error) = outcome
                && self.writer.high_watermark() <= written.last_offset
            {
                return Err(match error {
                    // Led elsewhere now: the client finds the new coordinator.
                    KafkaError::NotLeaderOrFollower => KafkaError::NotCoordinator,
                    _ => KafkaError::CoordinatorLoadInProgress,
                });
            }
            self.mark_committed(key, written);
        }
        self.read(read)
    }

    /// Runs `op` on the shard and answers once its records are committed. `Err` is the
    /// runtime's: not loaded here, or the records not stored (rolled back when the append
    /// failed).
    pub async fn write<R>(
        self: &Arc<Self>,
        op: impl FnOnce(&mut S, &mut Ctx<S>) -> R,
    ) -> Result<R, KafkaError> {
        let (response, pending) = {
            let mut cell = self.lock();
            if cell.phase != Phase::Loaded {
                return Err(Self::refusal(cell.phase));
            }
            let mut ctx = Ctx::new(self.clock.now());
            let response = op(&mut cell.shard, &mut ctx);
            (response, self.append(&mut cell, ctx, "request")?)
        };
        if let Some(pending) = pending {
            self.wait(pending).await?;
        }
        Ok(response)
    }

    /// Writes `producer`'s transaction marker (WriteTxnMarkers on a partition this runtime
    /// serves) and replays it (`Shard::replay_end_txn`); answers once it is committed. The
    /// marker is appended before the shard changes: a refused append changes nothing.
    pub async fn write_marker(
        self: &Arc<Self>,
        producer: TxnProducer,
        marker: crate::protocol::batch::TxnMarker,
    ) -> Result<(), KafkaError> {
        let written = {
            let mut cell = self.lock();
            if cell.phase != Phase::Loaded {
                return Err(Self::refusal(cell.phase));
            }
            let written = self
                .writer
                .append_marker(self.leader_epoch, producer, marker)?;
            let now = self.clock.now();
            let keys = cell
                .shard
                .replay_end_txn(producer.producer_id, marker.commit, now);
            let mut ctx = Ctx::new(now);
            for key in &keys {
                cell.uncommitted.insert(key.clone(), written);
                ctx.touch(key);
                // What the transaction's records set up (an offset's expiry) is recomputed.
                cell.shard.rolled_back(key, &mut ctx);
            }
            self.apply_timers(&mut cell, &mut ctx);
            Pending {
                written,
                keys,
                after_commit: Vec::new(),
            }
        };
        self.wait(written).await
    }

    /// Runs `op` and answers at once: its records are appended (rolled back, and `Err`, if
    /// that fails) and committed in the background. For requests whose answer does not
    /// depend on their records being stored (a heartbeat, a leave).
    pub fn write_detached<R>(
        self: &Arc<Self>,
        op: impl FnOnce(&mut S, &mut Ctx<S>) -> R,
    ) -> Result<R, KafkaError> {
        let mut cell = self.lock();
        if cell.phase != Phase::Loaded {
            return Err(Self::refusal(cell.phase));
        }
        let mut ctx = Ctx::new(self.clock.now());
        let response = op(&mut cell.shard, &mut ctx);
        if let Some(pending) = self.append(&mut cell, ctx, "request")? {
            drop(cell);
            self.spawn_wait(pending);
        }
        Ok(response)
    }

    /// Appends `ctx`'s records (rolling back on failure), applies its timers, checks the keys
    /// it touched and runs continuations that need no commit. With the lock held.
    fn append(
        self: &Arc<Self>,
        cell: &mut Cell<S>,
        mut ctx: Ctx<S>,
        what: &'static str,
    ) -> Result<Option<Pending<S>>, KafkaError> {
        if ctx.records.is_empty() {
            self.apply_timers(cell, &mut ctx);
            if ctx.after_commit.is_empty() {
                return Ok(None);
            }
            let mut next = Ctx::new(ctx.now);
            for then in ctx.after_commit.drain(..) {
                then(&mut cell.shard, &mut next, Ok(()));
            }
            return self.append(cell, next, what);
        }
        let encoded: Vec<writer::EncodedRecord> = ctx.records.iter().map(S::encode).collect();
        match self
            .writer
            .append(self.leader_epoch, &encoded, ctx.producer, ctx.now.wall_ms)
        {
            Ok(written) => {
                let keys: Vec<String> = ctx
                    .records
                    .iter()
                    .map(|r| S::key_of(r).to_owned())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                for key in &keys {
                    cell.uncommitted.insert(key.clone(), written);
                }
                self.apply_timers(cell, &mut ctx);
                Ok(Some(Pending {
                    written,
                    keys,
                    after_commit: std::mem::take(&mut ctx.after_commit),
                }))
            }
            Err(error) => {
                // Nothing was written: the records go back out of memory too.
                for undo in ctx.undo.drain(..).rev() {
                    match ctx.producer {
                        Some(producer) => {
                            cell.shard
                                .replay_transactional(producer.producer_id, &undo, ctx.now)
                        }
                        None => cell.shard.replay(&undo, ctx.now),
                    }
                }
                tracing::debug!(coordinator = self.config.name, partition = self.index, what, %error, "append refused; rolled back");
                ctx.timers.clear();
                let mut timers = Ctx::new(ctx.now);
                for key in std::mem::take(&mut ctx.touched) {
                    cell.shard.rolled_back(&key, &mut timers);
                    timers.touch(&key);
                }
                self.apply_timers(cell, &mut timers);
                // The continuations learn of the failure; what they write (a recovery) is
                // appended in turn.
                let mut next = Ctx::new(ctx.now);
                for then in ctx.after_commit.drain(..) {
                    then(&mut cell.shard, &mut next, Err(error));
                }
                if let Ok(Some(pending)) = self.append(cell, next, "recovery") {
                    self.spawn_wait(pending);
                }
                Err(error)
            }
        }
    }

    fn apply_timers(&self, cell: &mut Cell<S>, ctx: &mut Ctx<S>) {
        let next = cell.timers.next();
        let mut earlier = false;
        for (key, deadline) in ctx.timers.drain(..) {
            if deadline.is_some_and(|d| next.is_none_or(|n| d < n)) {
                earlier = true;
            }
            cell.timers.set(&key, deadline);
        }
        for key in std::mem::take(&mut ctx.touched) {
            if let Err(message) = cell.shard.check(&key) {
                tracing::error!(coordinator = self.config.name, partition = self.index, key, %message, "invariant broken: the shard is fenced and reloads from its log");
                cell.phase = Phase::Fenced;
                earlier = true;
            }
        }
        if earlier {
            self.wake.notify_one();
        }
    }

    /// Waits for an appended write, then runs its continuations.
    async fn wait(self: &Arc<Self>, pending: Pending<S>) -> Result<(), KafkaError> {
        let outcome = Arc::clone(&self.writer)
            .committed(pending.written, self.config.commit_timeout)
            .await;
        if outcome.is_ok() {
            for key in &pending.keys {
                self.mark_committed(key, pending.written);
            }
        }
        if !pending.after_commit.is_empty() {
            let mut cell = self.lock();
            if cell.phase == Phase::Loaded {
                let mut ctx = Ctx::new(self.clock.now());
                for then in pending.after_commit {
                    then(&mut cell.shard, &mut ctx, outcome);
                }
                if let Ok(Some(next)) = self.append(&mut cell, ctx, "continuation") {
                    drop(cell);
                    self.spawn_wait(next);
                }
            }
        }
        outcome
    }

    fn spawn_wait(self: &Arc<Self>, pending: Pending<S>) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(error) = this.wait(pending).await {
                tracing::warn!(coordinator = this.config.name, partition = this.index, %error, "a write no request waits for was not committed");
            }
        });
    }

    /// `key`'s writes up to `written` are committed.
    fn mark_committed(&self, key: &str, written: Written) {
        let mut cell = self.lock();
        if cell
            .uncommitted
            .get(key)
            .is_some_and(|w| w.last_offset <= written.last_offset)
        {
            cell.uncommitted.remove(key);
        }
    }

    /// Fires the timers due at the clock's now; the next deadline.
    pub fn fire_timers(self: &Arc<Self>) -> Option<Instant> {
        let mut cell = self.lock();
        if cell.phase != Phase::Loaded {
            return None;
        }
        let now = self.clock.now();
        for key in cell.timers.expired(now.instant) {
            if cell.phase != Phase::Loaded {
                // A timer's operation broke an invariant: the reload sets every timer again.
                break;
            }
            let mut ctx = Ctx::new(now);
            cell.shard.timer(&key, &mut ctx);
            match self.append(&mut cell, ctx, "timer") {
                Ok(Some(pending)) => self.spawn_wait(pending),
                Ok(None) => {}
                Err(error) => {
                    // Rolled back: the same deadline comes again a little later.
                    tracing::warn!(coordinator = self.config.name, partition = self.index, key, %error, "a timer's write failed; retrying");
                    let retry = now.instant + self.config.timer_retry;
                    if cell.timers.deadline(&key).is_none_or(|d| d > retry) {
                        cell.timers.set(&key, Some(retry));
                    }
                }
            }
        }
        cell.timers.next()
    }

    async fn run_timers(self: Arc<Self>) {
        const IDLE: Duration = Duration::from_secs(60);
        loop {
            if self.is_unloaded() {
                return;
            }
            let next = self.fire_timers();
            if self.fence_to_reload() {
                let this = Arc::clone(&self);
                match tokio::task::spawn_blocking(move || this.load()).await {
                    Ok(Ok(loaded)) => tracing::warn!(
                        coordinator = self.config.name,
                        partition = self.index,
                        records = loaded.records,
                        "reloaded a fenced shard"
                    ),
                    Ok(Err(message)) => {
                        tracing::error!(coordinator = self.config.name, partition = self.index, %message, "reloading a fenced shard failed")
                    }
                    Err(_) => return,
                }
                continue;
            }
            let sleep_until = next.unwrap_or_else(|| Instant::now() + IDLE);
            tokio::select! {
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(sleep_until)) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// A fenced shard goes back to loading; whether it was fenced.
    fn fence_to_reload(&self) -> bool {
        let mut cell = self.lock();
        if cell.phase == Phase::Fenced {
            cell.phase = Phase::Loading;
            cell.shard.unload();
            true
        } else {
            false
        }
    }

    /// Timers scheduled (metrics and tests).
    pub fn timer_count(&self) -> usize {
        self.lock().timers.len()
    }

    /// Runs `f` on the shard whatever its phase (metrics and tests).
    pub fn inspect<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.lock().shard)
    }
}

#[cfg(test)]
mod tests;
