//! The transaction coordinator's shard: the transactional ids of one `__transaction_state`
//! partition, driven by the state machine in `state.rs` on the coordinator runtime.
//!
//! Every decision writes the id's new metadata as one record (replayed at once, appended,
//! answered once committed). What follows a Prepare* record is the markers: once it is
//! committed the shard hands a [`MarkerJob`] to the marker sender (`markers.rs`), which
//! writes them to every partition of the transaction and then asks the shard to
//! [`TxnShard::complete`] it. A shard loaded with Prepare* ids hands their jobs over at once.
//! Timers, one per id: an Ongoing transaction is aborted at its timeout (the producer fenced),
//! an idle id expires at `transactional.id.expiration.ms` (a tombstone).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::TxnConfig;
use super::records::{self, TxnLogRecord};
use super::state::{
    self, AddOutcome, EndOutcome, InitOutcome, ProducerIdAndEpoch, TxnMetadata, TxnResult,
    TxnSettings, TxnState,
};
use crate::coordinator::{Ctx, Now, Shard};
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;

/// Markers to write for a transaction whose Prepare* record is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJob {
    pub transactional_id: String,
    /// The producer id and epoch the markers carry (the Prepare* metadata's).
    pub producer: ProducerIdAndEpoch,
    pub result: TxnResult,
    pub partitions: BTreeSet<TopicPartition>,
}

/// What InitProducerId got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// Stored: the producer's id and epoch.
    Ready(ProducerIdAndEpoch),
    /// A producer id must be allocated first.
    NeedProducerId,
    /// An ongoing transaction is being aborted first (CONCURRENT_TRANSACTIONS: retry).
    Aborting,
}

/// What EndTxn got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The transaction is prepared (or was already complete): the producer id and epoch to
    /// answer.
    Done(ProducerIdAndEpoch),
    NeedProducerId,
}

pub struct TxnShard {
    config: Arc<TxnConfig>,
    /// The cluster's transaction version for the coordinator's own aborts.
    transaction_version: i16,
    ids: HashMap<String, TxnMetadata>,
    jobs: mpsc::UnboundedSender<MarkerJob>,
}

impl TxnShard {
    pub fn new(
        config: Arc<TxnConfig>,
        transaction_version: i16,
        jobs: mpsc::UnboundedSender<MarkerJob>,
    ) -> TxnShard {
        TxnShard {
            config,
            transaction_version,
            ids: HashMap::new(),
            jobs,
        }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn get(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.ids.get(transactional_id)
    }

    pub fn all(&self) -> impl Iterator<Item = &TxnMetadata> {
        self.ids.values()
    }

    fn settings(&self) -> TxnSettings {
        TxnSettings {
            transaction_max_timeout_ms: i32::try_from(self.config.max_timeout_ms)
                .unwrap_or(i32::MAX),
            transaction_version: self.transaction_version,
        }
    }

    /// Writes `metadata` as the id's record (replayed now, appended when the operation
    /// ends), keeping what it holds in memory only (the last epoch, for retries).
    fn apply(&mut self, ctx: &mut Ctx<TxnShard>, metadata: TxnMetadata) {
        let id = metadata.transactional_id.clone();
        let undo = match self.ids.get(&id) {
            Some(current) => current.to_record(),
            None => TxnLogRecord::tombstone(id.clone()),
        };
        let record = metadata.to_record();
        self.replay(&record, ctx.now);
        if let Some(stored) = self.ids.get_mut(&id) {
            stored.last_producer_epoch = metadata.last_producer_epoch;
        }
        ctx.written(record, undo);
        self.schedule(ctx, &id);
    }

    /// A Prepare* was written: once committed, its markers go to the sender.
    fn markers_after_commit(ctx: &mut Ctx<TxnShard>, metadata: &TxnMetadata) {
        let Some(job) = job_of(metadata) else {
            return;
        };
        ctx.after_commit(move |shard, _ctx, stored| {
            if stored.is_ok() {
                shard.send(job);
            }
            // Not stored: the client's request failed and it retries; a new coordinator
            // that loads the record (if it was appended) sends the markers itself.
        });
    }

    fn send(&self, job: MarkerJob) {
        if self.jobs.send(job).is_err() {
            tracing::debug!("the marker sender has stopped");
        }
    }

    /// The id's timer: its transaction's timeout while Ongoing, its expiration while idle.
    fn schedule(&self, ctx: &mut Ctx<TxnShard>, transactional_id: &str) {
        let deadline_ms = self.ids.get(transactional_id).and_then(|m| {
            m.transaction_deadline_ms().or_else(|| {
                m.expiration_deadline_ms(
                    i64::try_from(self.config.id_expiration_ms).unwrap_or(i64::MAX),
                )
            })
        });
        let deadline = deadline_ms.map(|ms| instant_at(ctx.now, ms));
        ctx.schedule(transactional_id, deadline);
    }

    // ---- operations ----

    /// InitProducerId with a transactional id.
    pub fn init_producer_id(
        &mut self,
        ctx: &mut Ctx<TxnShard>,
        transactional_id: &str,
        transaction_timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
        new_producer_id: Option<i64>,
    ) -> Result<Init, KafkaError> {
        let outcome = state::init_producer_id(
            self.ids.get(transactional_id),
            transactional_id,
            transaction_timeout_ms,
            expected,
            new_producer_id,
            self.settings(),
            ctx.now.wall_ms,
        )?;
        Ok(match outcome {
            InitOutcome::NeedProducerId => Init::NeedProducerId,
            InitOutcome::Write(metadata) => {
                let producer = metadata.producer();
                self.apply(ctx, metadata);
                Init::Ready(producer)
            }
            InitOutcome::AbortFirst(metadata) => {
                Self::markers_after_commit(ctx, &metadata);
                self.apply(ctx, metadata);
                Init::Aborting
            }
        })
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition).
    pub fn add_partitions(
        &mut self,
        ctx: &mut Ctx<TxnShard>,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[TopicPartition],
    ) -> Result<(), KafkaError> {
        self.add_partitions_with_version(ctx, transactional_id, producer, partitions, None)
    }

    /// [`TxnShard::add_partitions`] at transaction version `version` (`None`: the id's
    /// own).
    pub fn add_partitions_with_version(
        &mut self,
        ctx: &mut Ctx<TxnShard>,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[TopicPartition],
        version: Option<i16>,
    ) -> Result<(), KafkaError> {
        let current = self.ids.get(transactional_id);
        let version =
            version.unwrap_or_else(|| current.map_or(0, |m| m.client_transaction_version));
        match state::add_partitions(
            current,
            producer.producer_id,
            producer.producer_epoch,
            partitions,
            version,
            ctx.now.wall_ms,
        )? {
            AddOutcome::AlreadyIncluded => {}
            AddOutcome::Write(metadata) => self.apply(ctx, metadata),
        }
        Ok(())
    }

    /// AddPartitionsToTxn v4+ `verify_only` (a partition leader checking a transactional
    /// write, KIP-890): whether each partition is in the producer's ongoing transaction.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[TopicPartition],
    ) -> Result<Vec<bool>, KafkaError> {
        state::verify_partitions(
            self.ids.get(transactional_id),
            producer.producer_id,
            producer.producer_epoch,
            partitions,
        )
    }

    /// EndTxn.
    pub fn end_txn(
        &mut self,
        ctx: &mut Ctx<TxnShard>,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        result: TxnResult,
        transaction_version: i16,
        new_producer_id: Option<i64>,
    ) -> Result<End, KafkaError> {
        let outcome = state::end_txn(
            self.ids.get(transactional_id),
            producer.producer_id,
            producer.producer_epoch,
            result,
            transaction_version,
            new_producer_id,
            ctx.now.wall_ms,
        )?;
        Ok(match outcome {
            EndOutcome::NeedProducerId => End::NeedProducerId,
            EndOutcome::AlreadyComplete {
                producer_id,
                producer_epoch,
            } => End::Done(ProducerIdAndEpoch {
                producer_id,
                producer_epoch,
            }),
            EndOutcome::Prepare {
                metadata,
                producer_id,
                producer_epoch,
            } => {
                Self::markers_after_commit(ctx, &metadata);
                self.apply(ctx, metadata);
                End::Done(ProducerIdAndEpoch {
                    producer_id,
                    producer_epoch,
                })
            }
        })
    }

    /// Every marker of `job` is written: the transaction completes, if it is still the one
    /// the job was for.
    pub fn complete(&mut self, ctx: &mut Ctx<TxnShard>, job: &MarkerJob) -> bool {
        let Some(current) = self.ids.get(&job.transactional_id) else {
            return false;
        };
        if job_of(current).as_ref() != Some(job) {
            return false;
        }
        match state::complete(current, ctx.now.wall_ms) {
            Some(completed) => {
                self.apply(ctx, completed);
                true
            }
            None => false,
        }
    }

    /// Jobs of every transaction waiting for its markers (after a load).
    pub fn pending_jobs(&self) -> Vec<MarkerJob> {
        self.ids.values().filter_map(job_of).collect()
    }
}

/// The markers a Prepare* metadata needs.
fn job_of(metadata: &TxnMetadata) -> Option<MarkerJob> {
    let result = match metadata.state {
        TxnState::PrepareCommit => TxnResult::Commit,
        TxnState::PrepareAbort => TxnResult::Abort,
        _ => return None,
    };
    Some(MarkerJob {
        transactional_id: metadata.transactional_id.clone(),
        producer: metadata.producer(),
        result,
        partitions: metadata.partitions.clone(),
    })
}

/// The instant of wall-clock time `ms`, as seen from `now`.
fn instant_at(now: Now, ms: i64) -> Instant {
    let ahead = ms.saturating_sub(now.wall_ms);
    if ahead <= 0 {
        now.instant
    } else {
        now.instant + Duration::from_millis(ahead as u64)
    }
}

impl Shard for TxnShard {
    type Record = TxnLogRecord;

    fn replay(&mut self, record: &TxnLogRecord, _now: Now) {
        match &record.value {
            Some(value) => {
                let metadata =
                    TxnMetadata::from_value(record.transactional_id.clone(), value.clone());
                self.ids.insert(record.transactional_id.clone(), metadata);
            }
            None => {
                self.ids.remove(&record.transactional_id);
            }
        }
    }

    fn replay_owned(&mut self, record: TxnLogRecord, _now: Now) {
        let id = record.transactional_id.clone();
        match TxnMetadata::from_record(record) {
            Some(metadata) => {
                self.ids.insert(id, metadata);
            }
            None => {
                self.ids.remove(&id);
            }
        }
    }

    fn key_of(record: &TxnLogRecord) -> &str {
        &record.transactional_id
    }

    fn encode(record: &TxnLogRecord) -> (Vec<u8>, Option<Vec<u8>>) {
        record.encode()
    }

    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<TxnLogRecord>, String> {
        records::decode(key, value).map_err(|e| e.to_string())
    }

    fn loaded(&mut self, ctx: &mut Ctx<Self>) {
        let ids: Vec<String> = self.ids.keys().cloned().collect();
        for id in &ids {
            self.schedule(ctx, id);
        }
        for job in self.pending_jobs() {
            self.send(job);
        }
    }

    fn timer(&mut self, key: &str, ctx: &mut Ctx<Self>) {
        let Some(current) = self.ids.get(key) else {
            return;
        };
        let now_ms = ctx.now.wall_ms;
        if let Some(aborting) = state::abort_timed_out(current, self.transaction_version, now_ms) {
            tracing::info!(
                transactional_id = key,
                producer_id = aborting.producer_id,
                producer_epoch = aborting.producer_epoch,
                timeout_ms = aborting.transaction_timeout_ms,
                "aborting a transaction past its timeout"
            );
            Self::markers_after_commit(ctx, &aborting);
            self.apply(ctx, aborting);
            return;
        }
        let expiration_ms = i64::try_from(self.config.id_expiration_ms).unwrap_or(i64::MAX);
        if state::expired(current, now_ms, expiration_ms) {
            tracing::debug!(transactional_id = key, "transactional id expired");
            let undo = current.to_record();
            let tombstone = TxnLogRecord::tombstone(key);
            self.replay(&tombstone, ctx.now);
            ctx.written(tombstone, undo);
            ctx.schedule(key, None);
            return;
        }
        // Not due yet (the clock moved back, or a retry): set it again.
        self.schedule(ctx, key);
    }

    fn unload(&mut self) {
        self.ids.clear();
    }

    fn check(&self, key: &str) -> Result<(), String> {
        match self.ids.get(key) {
            Some(metadata) => metadata.check(),
            None => Ok(()),
        }
    }

    fn rolled_back(&mut self, key: &str, ctx: &mut Ctx<Self>) {
        self.schedule(ctx, key);
    }
}
