//! The transaction state machine of one transactional id, pure: no I/O, no clock, no locks.
//! Each decision takes the id's current [`TxnMetadata`] (or none yet), the request and the
//! time, and says what to write and what to answer; the caller writes the new metadata as a
//! `__transaction_state` record, replays it, and answers once it is committed. Kafka's
//! `TransactionCoordinator` and `TransactionMetadata` are the model (their rules and error
//! codes; the code is ours).
//!
//! # States and transitions
//!
//! Codes are those of Kafka's log; names are what DescribeTransactions, ListTransactions and
//! `kafka-transactions.sh` print. [`check_transition`] is the one function that checks a
//! transition; every decision's result is checked by it in debug builds, and
//! [`TxnMetadata::check_successor`] offers it (with the invariants) to a caller checking every
//! live write in release builds too.
//!
//! | to                    | from                                | on                                               | record written                                            |
//! |-----------------------|-------------------------------------|--------------------------------------------------|-----------------------------------------------------------|
//! | Empty (0)             | none                                | InitProducerId of a new transactional id         | Empty, new producer id, epoch 0                           |
//! | Empty                 | Empty, CompleteCommit, CompleteAbort| InitProducerId                                   | Empty, epoch + 1 (or a new producer id at epoch 0 once the epoch reaches `i16::MAX - 1`); no partitions, start -1 |
//! | Ongoing (1)           | Empty, CompleteCommit, CompleteAbort| AddPartitionsToTxn / AddOffsetsToTxn             | Ongoing, the partitions, start = now                      |
//! | Ongoing               | Ongoing                             | AddPartitionsToTxn adding a partition            | Ongoing, the union (none new: nothing written)            |
//! | PrepareCommit (2)     | Ongoing                             | EndTxn(commit)                                   | PrepareCommit (TV2: epoch + 1)                            |
//! | PrepareAbort (3)      | Ongoing                             | EndTxn(abort)                                    | PrepareAbort (TV2: epoch + 1)                             |
//! | PrepareAbort          | Ongoing, via PrepareEpochFence      | InitProducerId while Ongoing; transaction timeout| PrepareAbort, epoch + 1 (TV2: + 2) to fence the producer  |
//! | PrepareAbort          | Empty, CompleteCommit, CompleteAbort| TV2 only: EndTxn(abort) with no transaction      | PrepareAbort, no partitions, epoch + 1, start = now       |
//! | CompleteCommit (4)    | PrepareCommit                       | every partition has its commit marker            | CompleteCommit, no partitions (TV2 past the last epoch: the next producer id, epoch 0) |
//! | CompleteAbort (5)     | PrepareAbort                        | every partition has its abort marker             | CompleteAbort, likewise                                   |
//! | Dead (6)              | Empty, CompleteCommit, CompleteAbort| idle for `transactional.id.expiration.ms`        | a tombstone (Dead itself is never written)                |
//! | PrepareEpochFence (7) | Ongoing                             | (never written: the fence is the PrepareAbort it leads to) | —                                               |
//!
//! "TV2" is transaction version 2 (KIP-890 part 2): the client's EndTxn v5+, where every
//! EndTxn bumps the epoch and answers the new one.
//!
//! # What the caller does with an outcome
//!
//! - `Write(m)` / `Prepare { metadata: m, .. }` / `AbortFirst(m)`: write `m.to_record()`;
//!   once committed, answer (InitProducerId with `m`'s producer id and epoch; EndTxn with the
//!   ids of `Prepare`; AbortFirst with CONCURRENT_TRANSACTIONS, the client retries).
//! - After a Prepare* is committed: write the markers (producer id and epoch of the Prepare*
//!   metadata, commit or abort from its state) to every partition in it, then write
//!   [`complete`] of it.
//! - `NeedProducerId`: allocate a producer id (asynchronously) and call again with it; the
//!   state may have changed meanwhile, so the new call decides afresh (the id may go unused).
//!
//! # Differences from Kafka
//!
//! - Kafka keeps a pending transition in memory and answers CONCURRENT_TRANSACTIONS while a
//!   write is in flight; here the write is replayed at once and the next request sees it. A
//!   Prepare* state is, in Kafka, always paired with its pending Complete* (markers are being
//!   written), so its answers here are Kafka's effective ones: CONCURRENT_TRANSACTIONS to
//!   InitProducerId, AddPartitionsToTxn and to EndTxn of either result (Kafka's code would say
//!   INVALID_TXN_STATE to the other result, a branch it never reaches).
//! - Kafka's failed-fence flag (`hasFailedEpochFence`) is not needed: a failed write rolls the
//!   state back, so the next fence bumps from the same epoch.
//! - InitProducerId with an exhausted epoch and an expected epoch equal to the last one (a
//!   retry of the bump that reached it) answers the current epoch; Kafka throws and answers
//!   UNKNOWN_SERVER_ERROR there.
//! - AddPartitionsToTxn with no partitions writes nothing (Kafka would write an Ongoing
//!   transaction with none).
//! - `last_producer_epoch` is not in Kafka's record: it is kept in memory (so the caller must
//!   keep the metadata an outcome gives, not only the record) and is -1 after a load, as in
//!   Kafka.
//! - No two-phase commit (KIP-939): `next_producer_epoch` is carried, never set.

use std::collections::BTreeSet;

use thiserror::Error;

use super::records::{TxnLogRecord, TxnLogValue};
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;

pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// The first transaction version whose EndTxn bumps the epoch (KIP-890 part 2).
pub const TRANSACTION_VERSION_2: i16 = 2;

/// Kafka never hands out `i16::MAX`, so the coordinator can always fence: at `i16::MAX - 1`
/// the next InitProducerId (or TV2 EndTxn) moves to a new producer id.
pub fn epoch_exhausted(producer_epoch: i16) -> bool {
    producer_epoch >= i16::MAX - 1
}

/// Transaction version 2 (or later): EndTxn bumps the epoch.
pub fn supports_epoch_bump(transaction_version: i16) -> bool {
    transaction_version >= TRANSACTION_VERSION_2
}

/// Kafka's `TransactionState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// The code in `TransactionLogValue.TransactionStatus`.
    pub const fn code(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub const fn from_code(code: i8) -> Option<TxnState> {
        Some(match code {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Kafka's name, as DescribeTransactions and ListTransactions carry it.
    pub const fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state a name (a ListTransactions state filter) names.
    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|state| state.name() == name)
    }

    /// The states this one may follow (Kafka's `validPreviousStates`; the table above).
    pub const fn valid_previous_states(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// No transaction in progress: the transactional id may expire.
    pub const fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }

    /// Markers are being written.
    pub const fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

impl std::fmt::Display for TxnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A transition the table does not have: a bug in a decision, or a corrupt log.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "invalid transaction state transition {from} -> {to} (transaction version {transaction_version})"
)]
pub struct InvalidTransition {
    pub from: TxnState,
    pub to: TxnState,
    pub transaction_version: i16,
}

/// THE transition check: `to` may follow `from` (the table in the module doc).
/// `transaction_version` is the new metadata's client transaction version: PrepareAbort
/// follows Empty or Complete* only in transaction version 2.
pub fn check_transition(
    from: TxnState,
    to: TxnState,
    transaction_version: i16,
) -> Result<(), InvalidTransition> {
    let listed = to.valid_previous_states().contains(&from);
    let tv2_only = to == TxnState::PrepareAbort && from.expiration_allowed();
    if listed && (!tv2_only || supports_epoch_bump(transaction_version)) {
        Ok(())
    } else {
        Err(InvalidTransition {
            from,
            to,
            transaction_version,
        })
    }
}

/// Commit or abort (Kafka's `TransactionResult`; the marker's `committed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnResult {
    Abort,
    Commit,
}

/// A producer id and one of its epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// The broker settings a decision depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnSettings {
    /// `transaction.max.timeout.ms`.
    pub transaction_max_timeout_ms: i32,
    /// The cluster's `transaction.version`: the coordinator's own aborts (fencing an ongoing
    /// transaction) follow it, as Kafka's do.
    pub transaction_version: i16,
}

/// One transactional id's state: the record's fields plus what Kafka keeps in memory only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id before the last transition (Kafka sets it on every transition: it
    /// differs from `producer_id` only after a move to a new producer id).
    pub previous_producer_id: i64,
    /// TV2, Prepare* only: the producer id the transaction moves to on completion because its
    /// epoch is exhausted; -1 otherwise.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, for retries (KIP-360; TV2 EndTxn). In memory only:
    /// -1 after a load.
    pub last_producer_epoch: i16,
    /// KIP-939: carried as read, never set here.
    pub next_producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the transaction started (its first partition, or a TV2 abort of none); -1 when
    /// Empty.
    pub start_timestamp_ms: i64,
    pub last_update_timestamp_ms: i64,
    pub client_transaction_version: i16,
}

/// What InitProducerId does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// Allocate a producer id and call again with it.
    NeedProducerId,
    /// Write this (Empty); once committed, answer NONE with its producer id and epoch.
    Write(TxnMetadata),
    /// An ongoing transaction is fenced: write this PrepareAbort (its epoch bumped), then its
    /// markers and completion as for any abort; answer CONCURRENT_TRANSACTIONS once written
    /// (the client retries and gets its epoch after the abort completes).
    AbortFirst(TxnMetadata),
}

/// What AddPartitionsToTxn (and AddOffsetsToTxn) does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddOutcome {
    /// Every partition is in the ongoing transaction already: answer NONE, write nothing.
    AlreadyIncluded,
    /// Write this (Ongoing); answer NONE once committed.
    Write(TxnMetadata),
}

/// What EndTxn does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndOutcome {
    /// TV2 past the last epoch: allocate a producer id and call again with it.
    NeedProducerId,
    /// Write `metadata` (PrepareCommit or PrepareAbort); once committed answer NONE with
    /// `producer_id` and `producer_epoch` (TV2: what the producer uses next; -1 and -1 before
    /// TV2, as Kafka), then write the markers and [`complete`].
    Prepare {
        metadata: TxnMetadata,
        producer_id: i64,
        producer_epoch: i16,
    },
    /// A retry of an EndTxn that completed: answer NONE with these, write nothing.
    AlreadyComplete {
        producer_id: i64,
        producer_epoch: i16,
    },
}

/// The Kafka APIs whose old versions do not know PRODUCER_FENCED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnApi {
    InitProducerId,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    EndTxn,
}

/// The error a response of `api` at `version` carries: clients older than PRODUCER_FENCED
/// (InitProducerId v0-3, the others v0-1) get INVALID_PRODUCER_EPOCH, as Kafka answers them.
pub fn error_for_version(error: KafkaError, api: TxnApi, version: i16) -> KafkaError {
    let first_with_fenced = match api {
        TxnApi::InitProducerId => 4,
        TxnApi::AddPartitionsToTxn | TxnApi::AddOffsetsToTxn | TxnApi::EndTxn => 2,
    };
    if error == KafkaError::ProducerFenced && version < first_with_fenced {
        KafkaError::InvalidProducerEpoch
    } else {
        error
    }
}

impl TxnMetadata {
    /// A transactional id's first metadata (InitProducerId of an id never seen): Empty at
    /// epoch 0. Kafka records the new producer id as the previous one too.
    fn new_empty(
        transactional_id: &str,
        producer_id: i64,
        transaction_timeout_ms: i32,
        now_ms: i64,
    ) -> TxnMetadata {
        TxnMetadata {
            transactional_id: transactional_id.to_owned(),
            producer_id,
            previous_producer_id: producer_id,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: 0,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            next_producer_epoch: NO_PRODUCER_EPOCH,
            transaction_timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_timestamp_ms: -1,
            last_update_timestamp_ms: now_ms,
            client_transaction_version: 0,
        }
    }

    /// A copy moving to `to`: the previous producer id is this one's, as Kafka records it on
    /// every transition.
    fn transition(&self, to: TxnState, now_ms: i64) -> TxnMetadata {
        TxnMetadata {
            previous_producer_id: self.producer_id,
            state: to,
            last_update_timestamp_ms: now_ms,
            ..self.clone()
        }
    }

    /// Every decision's result passes here (a failure is a bug in this module).
    fn checked(&self, next: TxnMetadata) -> TxnMetadata {
        debug_assert_eq!(self.check_successor(&next), Ok(()));
        next
    }

    /// A live write may replace this metadata with `next`: the transition is in the table,
    /// `next` keeps the invariants, and the producer epoch does not go back (a new producer
    /// id starts at epoch 0). Not for loading: a compacted log skips states.
    pub fn check_successor(&self, next: &TxnMetadata) -> Result<(), String> {
        check_transition(self.state, next.state, next.client_transaction_version)
            .map_err(|e| format!("{}: {e}", self.transactional_id))?;
        next.check()?;
        let moved = next.producer_id != self.producer_id;
        if (moved && next.producer_epoch != 0)
            || (!moved && next.producer_epoch < self.producer_epoch)
        {
            return Err(format!(
                "{}: producer {}/{} -> {}/{}",
                self.transactional_id,
                self.producer_id,
                self.producer_epoch,
                next.producer_id,
                next.producer_epoch
            ));
        }
        Ok(())
    }

    /// The record of this metadata.
    pub fn to_value(&self) -> TxnLogValue {
        TxnLogValue {
            producer_id: self.producer_id,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            next_producer_epoch: self.next_producer_epoch,
            transaction_timeout_ms: self.transaction_timeout_ms,
            state: self.state,
            partitions: self.partitions.iter().cloned().collect(),
            last_update_timestamp_ms: self.last_update_timestamp_ms,
            start_timestamp_ms: self.start_timestamp_ms,
            client_transaction_version: self.client_transaction_version,
        }
    }

    pub fn to_record(&self) -> TxnLogRecord {
        TxnLogRecord {
            transactional_id: self.transactional_id.clone(),
            value: Some(self.to_value()),
        }
    }

    /// The metadata a loaded record holds; `last_producer_epoch` is not stored (-1).
    pub fn from_value(transactional_id: String, value: TxnLogValue) -> TxnMetadata {
        TxnMetadata {
            transactional_id,
            producer_id: value.producer_id,
            previous_producer_id: value.previous_producer_id,
            next_producer_id: value.next_producer_id,
            producer_epoch: value.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            next_producer_epoch: value.next_producer_epoch,
            transaction_timeout_ms: value.transaction_timeout_ms,
            state: value.state,
            partitions: value.partitions.into_iter().collect(),
            start_timestamp_ms: value.start_timestamp_ms,
            last_update_timestamp_ms: value.last_update_timestamp_ms,
            client_transaction_version: value.client_transaction_version,
        }
    }

    /// `None` for a tombstone.
    pub fn from_record(record: TxnLogRecord) -> Option<TxnMetadata> {
        let value = record.value?;
        Some(TxnMetadata::from_value(record.transactional_id, value))
    }

    /// The producer id and epoch.
    pub fn producer(&self) -> ProducerIdAndEpoch {
        ProducerIdAndEpoch {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
        }
    }

    /// The first time at which [`timed_out`] holds (Ongoing only).
    pub fn transaction_deadline_ms(&self) -> Option<i64> {
        (self.state == TxnState::Ongoing).then(|| {
            self.start_timestamp_ms
                .saturating_add(i64::from(self.transaction_timeout_ms))
                .saturating_add(1)
        })
    }

    /// The first time at which [`expired`] holds (Empty and Complete* only).
    pub fn expiration_deadline_ms(&self, transactional_id_expiration_ms: i64) -> Option<i64> {
        self.state.expiration_allowed().then(|| {
            self.last_update_timestamp_ms
                .saturating_add(transactional_id_expiration_ms)
        })
    }

    /// The invariants of stored metadata, for the runtime's per-key check (and the tests).
    pub fn check(&self) -> Result<(), String> {
        let fail = |what: &str| Err(format!("{}: {what}: {self:?}", self.transactional_id));
        if self.producer_id < 0 {
            return fail("no producer id");
        }
        if self.producer_epoch < 0 {
            return fail("a negative producer epoch");
        }
        if self.transaction_timeout_ms <= 0 {
            return fail("a transaction timeout of none");
        }
        if !(0..=TRANSACTION_VERSION_2).contains(&self.client_transaction_version) {
            return fail("an unknown client transaction version");
        }
        if self.next_producer_id != NO_PRODUCER_ID
            && !(self.state.is_prepare() && supports_epoch_bump(self.client_transaction_version))
        {
            return fail("a next producer id outside a TV2 Prepare*");
        }
        let started = self.start_timestamp_ms >= 0;
        let none = self.partitions.is_empty();
        let state = self.state;
        if matches!(state, TxnState::Dead | TxnState::PrepareEpochFence) {
            return fail("a state never stored");
        }
        if matches!(state, TxnState::Empty | TxnState::Ongoing) && self.producer_epoch == i16::MAX {
            // Kafka keeps i16::MAX for fencing: no producer ever holds it.
            return fail("a producer holding epoch i16::MAX");
        }
        if state.expiration_allowed() && !none {
            return fail("partitions with no transaction");
        }
        if state == TxnState::Empty && self.start_timestamp_ms != -1 {
            return fail("Empty with a start");
        }
        if state != TxnState::Empty && !started {
            return fail("a transaction with no start");
        }
        if state == TxnState::Ongoing
            && none
            && !supports_epoch_bump(self.client_transaction_version)
        {
            return fail("Ongoing with no partitions");
        }
        Ok(())
    }

    /// KIP-360: may a producer that had `expected` re-initialize? (Kafka's
    /// `isValidProducerId`; the epoch is checked when it is bumped.)
    fn may_be_reinitialized_by(&self, expected: ProducerIdAndEpoch) -> bool {
        self.producer_epoch == NO_PRODUCER_EPOCH
            || expected.producer_id == self.producer_id
            || (expected.producer_id == self.previous_producer_id
                && epoch_exhausted(expected.producer_epoch))
    }

    /// InitProducerId on Empty or Complete*, epoch not exhausted (or exhausted and a retry):
    /// Kafka's `prepareIncrementProducerEpoch`.
    fn increment_epoch(
        &self,
        expected_epoch: Option<i16>,
        transaction_timeout_ms: i32,
        now_ms: i64,
    ) -> Result<TxnMetadata, KafkaError> {
        let bump = !epoch_exhausted(self.producer_epoch);
        let (producer_epoch, last_producer_epoch) = match expected_epoch {
            // A new producer: the last epoch is forgotten, so no retry can claim it.
            None if bump => (self.producer_epoch + 1, NO_PRODUCER_EPOCH),
            // The producer recovers from an error with the current epoch.
            Some(epoch) if bump && epoch == self.producer_epoch => {
                (self.producer_epoch + 1, self.producer_epoch)
            }
            // A retry of a bump that succeeded: the same answer again.
            Some(epoch)
                if epoch >= 0
                    && epoch == self.last_producer_epoch
                    && self.producer_epoch < i16::MAX =>
            {
                (self.producer_epoch, self.last_producer_epoch)
            }
            _ => return Err(KafkaError::ProducerFenced),
        };
        let mut next = self.transition(TxnState::Empty, now_ms);
        next.producer_epoch = producer_epoch;
        next.last_producer_epoch = last_producer_epoch;
        next.transaction_timeout_ms = transaction_timeout_ms;
        next.partitions.clear();
        next.start_timestamp_ms = -1;
        Ok(self.checked(next))
    }

    /// InitProducerId past the last epoch: a new producer id at epoch 0 (Kafka's
    /// `prepareProducerIdRotation`). The last epoch is kept when the producer said which it
    /// had, so its retry is recognised.
    fn rotate_producer_id(
        &self,
        producer_id: i64,
        record_last_epoch: bool,
        transaction_timeout_ms: i32,
        now_ms: i64,
    ) -> TxnMetadata {
        let mut next = self.transition(TxnState::Empty, now_ms);
        next.producer_id = producer_id;
        next.producer_epoch = 0;
        next.last_producer_epoch = if record_last_epoch {
            self.producer_epoch
        } else {
            NO_PRODUCER_EPOCH
        };
        next.transaction_timeout_ms = transaction_timeout_ms;
        next.partitions.clear();
        next.start_timestamp_ms = -1;
        self.checked(next)
    }

    /// Fence the producer of an ongoing transaction and abort it (Kafka's
    /// `prepareFenceProducerEpoch` then its abort "not from the client"): the epoch goes up
    /// by one, and by one more in transaction version 2, never past `i16::MAX`.
    fn fence_and_abort(&self, transaction_version: i16, now_ms: i64) -> TxnMetadata {
        debug_assert_eq!(self.state, TxnState::Ongoing);
        let fence_epoch = self.producer_epoch.saturating_add(1);
        let mut next = self.transition(TxnState::PrepareAbort, now_ms);
        next.next_producer_id = NO_PRODUCER_ID;
        if supports_epoch_bump(transaction_version) {
            next.producer_epoch = fence_epoch.saturating_add(1);
            next.last_producer_epoch = fence_epoch;
            next.client_transaction_version = TRANSACTION_VERSION_2;
        } else {
            next.producer_epoch = fence_epoch;
            next.last_producer_epoch = NO_PRODUCER_EPOCH;
            next.client_transaction_version = 0;
        }
        self.checked(next)
    }

    /// EndTxn's Prepare* (Kafka's `prepareAbortOrCommit`).
    fn prepare_end(
        &self,
        to: TxnState,
        transaction_version: i16,
        next_producer_id: i64,
        now_ms: i64,
    ) -> TxnMetadata {
        let mut next = self.transition(to, now_ms);
        if supports_epoch_bump(transaction_version) {
            // Only an abort can find the epoch at i16::MAX (after a fence): it goes through
            // unbumped so the producer can recover.
            debug_assert!(self.producer_epoch < i16::MAX || to == TxnState::PrepareAbort);
            next.producer_epoch = self.producer_epoch.saturating_add(1);
            next.last_producer_epoch = self.producer_epoch;
        }
        // TV2 may abort with no transaction: it starts now.
        if self.state != TxnState::Ongoing {
            next.start_timestamp_ms = now_ms;
        }
        next.next_producer_id = next_producer_id;
        next.client_transaction_version = transaction_version;
        self.checked(next)
    }

    /// The producer id and epoch this metadata will have once complete: what a TV2 EndTxn
    /// answers.
    fn completed_producer(&self) -> ProducerIdAndEpoch {
        if supports_epoch_bump(self.client_transaction_version)
            && self.next_producer_id != NO_PRODUCER_ID
        {
            ProducerIdAndEpoch {
                producer_id: self.next_producer_id,
                producer_epoch: 0,
            }
        } else {
            self.producer()
        }
    }
}

/// InitProducerId with a transactional id. `current` is the id's metadata (none: never seen,
/// or expired); `expected` the producer id and epoch the producer has (KIP-360; none when it
/// sent -1 and -1); `new_producer_id` one the caller allocated after `NeedProducerId`.
pub fn init_producer_id(
    current: Option<&TxnMetadata>,
    transactional_id: &str,
    transaction_timeout_ms: i32,
    expected: Option<ProducerIdAndEpoch>,
    new_producer_id: Option<i64>,
    settings: TxnSettings,
    now_ms: i64,
) -> Result<InitOutcome, KafkaError> {
    if transactional_id.is_empty() {
        return Err(KafkaError::InvalidRequest);
    }
    if transaction_timeout_ms <= 0 || transaction_timeout_ms > settings.transaction_max_timeout_ms {
        return Err(KafkaError::InvalidTransactionTimeout);
    }
    let Some(meta) = current else {
        // Kafka accepts any expected producer here (one recovering from UNKNOWN_PRODUCER_ID).
        return Ok(match new_producer_id {
            None => InitOutcome::NeedProducerId,
            Some(producer_id) => InitOutcome::Write(TxnMetadata::new_empty(
                transactional_id,
                producer_id,
                transaction_timeout_ms,
                now_ms,
            )),
        });
    };
    debug_assert_eq!(meta.transactional_id, transactional_id);
    // Markers are being written (Kafka: a pending transition): the client backs off first.
    if meta.state.is_prepare() || matches!(meta.state, TxnState::Dead | TxnState::PrepareEpochFence)
    {
        return Err(KafkaError::ConcurrentTransactions);
    }
    if let Some(expected) = expected
        && !meta.may_be_reinitialized_by(expected)
    {
        return Err(KafkaError::ProducerFenced);
    }
    if meta.state == TxnState::Ongoing {
        // The fenced epoch is never answered: the client retries after the abort and gets
        // one more bump (a new producer id if this one exhausts the epochs).
        return Ok(InitOutcome::AbortFirst(
            meta.fence_and_abort(settings.transaction_version, now_ms),
        ));
    }
    let expected_epoch = expected.map(|e| e.producer_epoch);
    if epoch_exhausted(meta.producer_epoch)
        && expected_epoch.is_none_or(|epoch| epoch == meta.producer_epoch)
    {
        return Ok(match new_producer_id {
            None => InitOutcome::NeedProducerId,
            Some(producer_id) => InitOutcome::Write(meta.rotate_producer_id(
                producer_id,
                expected.is_some(),
                transaction_timeout_ms,
                now_ms,
            )),
        });
    }
    meta.increment_epoch(expected_epoch, transaction_timeout_ms, now_ms)
        .map(InitOutcome::Write)
}

/// AddPartitionsToTxn (and AddOffsetsToTxn, with the group's `__consumer_offsets`
/// partition). `transaction_version` is the request's (it becomes the metadata's).
pub fn add_partitions(
    current: Option<&TxnMetadata>,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[TopicPartition],
    transaction_version: i16,
    now_ms: i64,
) -> Result<AddOutcome, KafkaError> {
    let meta = current.ok_or(KafkaError::InvalidProducerIdMapping)?;
    // Markers are being written (Kafka: a pending transition). With TV2 past the last epoch
    // the producer already uses the next producer id, so this comes before the id check.
    if meta.state.is_prepare() || matches!(meta.state, TxnState::Dead | TxnState::PrepareEpochFence)
    {
        return Err(KafkaError::ConcurrentTransactions);
    }
    if meta.producer_id != producer_id {
        return Err(KafkaError::InvalidProducerIdMapping);
    }
    if meta.producer_epoch != producer_epoch {
        return Err(KafkaError::ProducerFenced);
    }
    let new: Vec<&TopicPartition> = partitions
        .iter()
        .filter(|tp| !meta.partitions.contains(*tp))
        .collect();
    if new.is_empty() && (meta.state == TxnState::Ongoing || partitions.is_empty()) {
        return Ok(AddOutcome::AlreadyIncluded);
    }
    let mut next = meta.transition(TxnState::Ongoing, now_ms);
    if meta.state != TxnState::Ongoing {
        next.start_timestamp_ms = now_ms;
    }
    next.partitions.extend(new.into_iter().cloned());
    next.client_transaction_version = transaction_version.clamp(0, TRANSACTION_VERSION_2);
    Ok(AddOutcome::Write(meta.checked(next)))
}

/// AddPartitionsToTxn v4+ `verify_only` (a partition leader asking before it appends a
/// transactional batch): per partition in `partitions`' order, whether it is in the
/// transaction. Kafka answers TRANSACTION_ABORTABLE for one that is not.
pub fn verify_partitions(
    current: Option<&TxnMetadata>,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[TopicPartition],
) -> Result<Vec<bool>, KafkaError> {
    let meta = current.ok_or(KafkaError::InvalidProducerIdMapping)?;
    if meta.producer_id != producer_id {
        return Err(KafkaError::InvalidProducerIdMapping);
    }
    if meta.producer_epoch != producer_epoch {
        return Err(KafkaError::ProducerFenced);
    }
    if meta.state.is_prepare() {
        return Err(KafkaError::ConcurrentTransactions);
    }
    Ok(partitions
        .iter()
        .map(|tp| meta.partitions.contains(tp))
        .collect())
}

/// EndTxn from the client. `transaction_version` is the request's (2 for EndTxn v5+);
/// `new_producer_id` one the caller allocated after `NeedProducerId`.
pub fn end_txn(
    current: Option<&TxnMetadata>,
    producer_id: i64,
    producer_epoch: i16,
    result: TxnResult,
    transaction_version: i16,
    new_producer_id: Option<i64>,
    now_ms: i64,
) -> Result<EndOutcome, KafkaError> {
    let meta = current.ok_or(KafkaError::InvalidProducerIdMapping)?;
    if supports_epoch_bump(transaction_version) {
        end_txn_v2(
            meta,
            producer_id,
            producer_epoch,
            result,
            new_producer_id,
            now_ms,
        )
    } else {
        end_txn_v1(meta, producer_id, producer_epoch, result, now_ms)
    }
}

fn prepare_state(result: TxnResult) -> TxnState {
    match result {
        TxnResult::Commit => TxnState::PrepareCommit,
        TxnResult::Abort => TxnState::PrepareAbort,
    }
}

fn complete_state(result: TxnResult) -> TxnState {
    match result {
        TxnResult::Commit => TxnState::CompleteCommit,
        TxnResult::Abort => TxnState::CompleteAbort,
    }
}

/// Before transaction version 2: the epoch must be the current one and is not bumped.
fn end_txn_v1(
    meta: &TxnMetadata,
    producer_id: i64,
    producer_epoch: i16,
    result: TxnResult,
    now_ms: i64,
) -> Result<EndOutcome, KafkaError> {
    if meta.producer_id != producer_id {
        return Err(KafkaError::InvalidProducerIdMapping);
    }
    if meta.producer_epoch != producer_epoch {
        return Err(KafkaError::ProducerFenced);
    }
    match meta.state {
        TxnState::Ongoing => Ok(EndOutcome::Prepare {
            metadata: meta.prepare_end(prepare_state(result), 0, NO_PRODUCER_ID, now_ms),
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
        }),
        state if state == complete_state(result) => Ok(EndOutcome::AlreadyComplete {
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
        }),
        TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Empty => {
            Err(KafkaError::InvalidTxnState)
        }
        TxnState::PrepareCommit
        | TxnState::PrepareAbort
        | TxnState::Dead
        | TxnState::PrepareEpochFence => Err(KafkaError::ConcurrentTransactions),
    }
}

/// Transaction version 2: every EndTxn bumps the epoch and answers the new one, so a retry
/// is recognised by the epoch below the current one (or, past the last epoch, by the
/// previous producer id).
///
/// | state          | abort, retry | abort, current | commit, retry | commit, current |
/// |----------------|--------------|----------------|---------------|-----------------|
/// | Empty          | FENCED       | bump, abort    | FENCED        | INVALID_TXN_STATE |
/// | CompleteAbort  | NONE         | bump, abort    | INVALID_TXN_STATE | INVALID_TXN_STATE |
/// | CompleteCommit | INVALID_TXN_STATE | bump, abort | NONE        | INVALID_TXN_STATE |
fn end_txn_v2(
    meta: &TxnMetadata,
    producer_id: i64,
    producer_epoch: i16,
    result: TxnResult,
    new_producer_id: Option<i64>,
    now_ms: i64,
) -> Result<EndOutcome, KafkaError> {
    let epoch = i32::from(producer_epoch);
    let current = i32::from(meta.producer_epoch);
    // The completed transaction moved to a new producer id; this is the old id's retry.
    let retry_on_overflow = meta.previous_producer_id == producer_id
        && producer_epoch == i16::MAX - 1
        && meta.producer_epoch == 0;
    let retry_on_epoch_bump = current == epoch + 1;
    let valid_epoch = match meta.state {
        TxnState::Ongoing | TxnState::Empty | TxnState::Dead | TxnState::PrepareEpochFence => {
            epoch == current
        }
        TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_epoch_bump,
        TxnState::CompleteCommit | TxnState::CompleteAbort => {
            retry_on_epoch_bump || retry_on_overflow || epoch == current
        }
    };
    let retry = retry_on_epoch_bump || retry_on_overflow;
    if meta.producer_id != producer_id && !retry_on_overflow {
        return Err(KafkaError::InvalidProducerIdMapping);
    }
    if !valid_epoch {
        return Err(KafkaError::ProducerFenced);
    }
    let prepare = |to: TxnState| -> Result<EndOutcome, KafkaError> {
        let next_producer_id = if epoch_exhausted(meta.producer_epoch) {
            match new_producer_id {
                Some(producer_id) => producer_id,
                None => return Ok(EndOutcome::NeedProducerId),
            }
        } else {
            NO_PRODUCER_ID
        };
        let metadata = meta.prepare_end(to, TRANSACTION_VERSION_2, next_producer_id, now_ms);
        let answer = metadata.completed_producer();
        Ok(EndOutcome::Prepare {
            metadata,
            producer_id: answer.producer_id,
            producer_epoch: answer.producer_epoch,
        })
    };
    let already_complete = Ok(EndOutcome::AlreadyComplete {
        producer_id: meta.producer_id,
        producer_epoch: meta.producer_epoch,
    });
    match (meta.state, result) {
        (TxnState::Ongoing, _) => prepare(prepare_state(result)),
        (TxnState::CompleteCommit, TxnResult::Commit)
        | (TxnState::CompleteAbort, TxnResult::Abort)
            if retry =>
        {
            already_complete
        }
        (TxnState::CompleteCommit, TxnResult::Abort) if retry => Err(KafkaError::InvalidTxnState),
        (
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort,
            TxnResult::Abort,
        ) => prepare(TxnState::PrepareAbort),
        (
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort,
            TxnResult::Commit,
        ) => Err(KafkaError::InvalidTxnState),
        (
            TxnState::PrepareCommit
            | TxnState::PrepareAbort
            | TxnState::Dead
            | TxnState::PrepareEpochFence,
            _,
        ) => Err(KafkaError::ConcurrentTransactions),
    }
}

/// Every marker of a Prepare* transaction is written: its Complete* (no partitions; TV2 past
/// the last epoch moves to the next producer id at epoch 0). `None` unless Prepare*.
pub fn complete(meta: &TxnMetadata, now_ms: i64) -> Option<TxnMetadata> {
    let to = match meta.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        _ => return None,
    };
    let producer = meta.completed_producer();
    let mut next = meta.transition(to, now_ms);
    next.producer_id = producer.producer_id;
    next.producer_epoch = producer.producer_epoch;
    next.next_producer_id = NO_PRODUCER_ID;
    next.partitions.clear();
    Some(meta.checked(next))
}

/// The transaction has been Ongoing longer than its timeout (Kafka's rule: start + timeout
/// is before now).
pub fn timed_out(meta: &TxnMetadata, now_ms: i64) -> bool {
    meta.transaction_deadline_ms()
        .is_some_and(|deadline_ms| now_ms >= deadline_ms)
}

/// A timed-out transaction's abort: the producer is fenced (epoch bumped) and the abort
/// prepared, to be written and completed like any other. `None` unless [`timed_out`].
/// `transaction_version` is the cluster's, as for Kafka's own aborts.
pub fn abort_timed_out(
    meta: &TxnMetadata,
    transaction_version: i16,
    now_ms: i64,
) -> Option<TxnMetadata> {
    timed_out(meta, now_ms).then(|| meta.fence_and_abort(transaction_version, now_ms))
}

/// No transaction and idle for `transactional_id_expiration_ms` (Kafka's rule): the caller
/// writes a tombstone and forgets the id.
pub fn expired(meta: &TxnMetadata, now_ms: i64, transactional_id_expiration_ms: i64) -> bool {
    meta.expiration_deadline_ms(transactional_id_expiration_ms)
        .is_some_and(|deadline_ms| now_ms >= deadline_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::records;

    const NOW: i64 = 1_700_000_000_000;
    const TIMEOUT_MS: i32 = 60_000;
    const MAX_EPOCH: i16 = i16::MAX;

    fn settings(transaction_version: i16) -> TxnSettings {
        TxnSettings {
            transaction_max_timeout_ms: 900_000,
            transaction_version,
        }
    }

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    /// Metadata in `state` at `producer_epoch`, consistent with the invariants.
    fn meta(state: TxnState, producer_epoch: i16) -> TxnMetadata {
        let in_transaction = matches!(
            state,
            TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
        );
        TxnMetadata {
            transactional_id: "tx".into(),
            producer_id: 1000,
            previous_producer_id: 1000,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            next_producer_epoch: NO_PRODUCER_EPOCH,
            transaction_timeout_ms: TIMEOUT_MS,
            state,
            partitions: if in_transaction {
                [tp("a", 0), tp("b", 1)].into_iter().collect()
            } else {
                BTreeSet::new()
            },
            start_timestamp_ms: if state == TxnState::Empty {
                -1
            } else {
                NOW - 10
            },
            last_update_timestamp_ms: NOW - 5,
            client_transaction_version: 0,
        }
    }

    fn tv2(mut meta: TxnMetadata) -> TxnMetadata {
        meta.client_transaction_version = TRANSACTION_VERSION_2;
        meta
    }

    fn init(
        current: Option<&TxnMetadata>,
        expected: Option<(i64, i16)>,
        new_producer_id: Option<i64>,
    ) -> Result<InitOutcome, KafkaError> {
        let expected = expected.map(|(producer_id, producer_epoch)| ProducerIdAndEpoch {
            producer_id,
            producer_epoch,
        });
        init_producer_id(
            current,
            "tx",
            TIMEOUT_MS + 1,
            expected,
            new_producer_id,
            settings(0),
            NOW,
        )
    }

    fn written(outcome: Result<InitOutcome, KafkaError>) -> TxnMetadata {
        match outcome {
            Ok(InitOutcome::Write(meta)) => meta,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    fn end(
        meta: &TxnMetadata,
        producer_epoch: i16,
        result: TxnResult,
        transaction_version: i16,
    ) -> Result<EndOutcome, KafkaError> {
        end_txn(
            Some(meta),
            meta.producer_id,
            producer_epoch,
            result,
            transaction_version,
            Some(7777),
            NOW,
        )
    }

    fn prepared(outcome: Result<EndOutcome, KafkaError>) -> (TxnMetadata, i64, i16) {
        match outcome {
            Ok(EndOutcome::Prepare {
                metadata,
                producer_id,
                producer_epoch,
            }) => (metadata, producer_id, producer_epoch),
            other => panic!("expected a Prepare*, got {other:?}"),
        }
    }

    #[test]
    fn states_have_kafkas_codes_and_names() {
        let names = [
            "Empty",
            "Ongoing",
            "PrepareCommit",
            "PrepareAbort",
            "CompleteCommit",
            "CompleteAbort",
            "Dead",
            "PrepareEpochFence",
        ];
        for (code, state) in TxnState::ALL.into_iter().enumerate() {
            assert_eq!(state.code(), code as i8);
            assert_eq!(TxnState::from_code(code as i8), Some(state));
            assert_eq!(state.name(), names[code]);
            assert_eq!(TxnState::from_name(names[code]), Some(state));
        }
        assert_eq!(TxnState::from_code(8), None);
        assert_eq!(TxnState::from_code(-1), None);
        assert_eq!(TxnState::from_name("ongoing"), None);
    }

    /// Kafka's `validPreviousStates`, pair by pair, with PrepareAbort after no transaction
    /// in transaction version 2 only.
    #[test]
    fn the_transition_table_is_kafkas() {
        use TxnState::*;
        let valid: &[(TxnState, TxnState)] = &[
            (Empty, Empty),
            (CompleteCommit, Empty),
            (CompleteAbort, Empty),
            (Ongoing, Ongoing),
            (Empty, Ongoing),
            (CompleteCommit, Ongoing),
            (CompleteAbort, Ongoing),
            (Ongoing, PrepareCommit),
            (Ongoing, PrepareAbort),
            (PrepareEpochFence, PrepareAbort),
            (PrepareCommit, CompleteCommit),
            (PrepareAbort, CompleteAbort),
            (Empty, Dead),
            (CompleteCommit, Dead),
            (CompleteAbort, Dead),
            (Ongoing, PrepareEpochFence),
        ];
        let tv2_only: &[(TxnState, TxnState)] = &[
            (Empty, PrepareAbort),
            (CompleteCommit, PrepareAbort),
            (CompleteAbort, PrepareAbort),
        ];
        for from in TxnState::ALL {
            for to in TxnState::ALL {
                let pair = (from, to);
                let before_tv2 = valid.contains(&pair);
                let with_tv2 = before_tv2 || tv2_only.contains(&pair);
                assert_eq!(
                    check_transition(from, to, 0).is_ok(),
                    before_tv2,
                    "{pair:?}"
                );
                assert_eq!(
                    check_transition(from, to, 1).is_ok(),
                    before_tv2,
                    "{pair:?}"
                );
                assert_eq!(check_transition(from, to, 2).is_ok(), with_tv2, "{pair:?}");
            }
        }
    }

    #[test]
    fn a_new_transactional_id_gets_a_producer_id_at_epoch_0() {
        assert_eq!(init(None, None, None), Ok(InitOutcome::NeedProducerId));
        let first = written(init(None, None, Some(42)));
        assert_eq!(first.check(), Ok(()));
        assert_eq!((first.producer_id, first.producer_epoch), (42, 0));
        assert_eq!(first.state, TxnState::Empty);
        assert_eq!(first.transaction_timeout_ms, TIMEOUT_MS + 1);
        assert_eq!(
            (first.start_timestamp_ms, first.last_update_timestamp_ms),
            (-1, NOW)
        );
        // Kafka records the new id as the previous one as well.
        assert_eq!(first.previous_producer_id, 42);
        // A producer recovering with an id this coordinator never saw is accepted.
        let recovered = written(init(None, Some((5, 3)), Some(43)));
        assert_eq!((recovered.producer_id, recovered.producer_epoch), (43, 0));
    }

    #[test]
    fn bad_timeouts_and_empty_ids_are_refused() {
        for timeout_ms in [0, -1, 900_001, i32::MIN] {
            let outcome = init_producer_id(None, "tx", timeout_ms, None, Some(1), settings(0), NOW);
            assert_eq!(
                outcome,
                Err(KafkaError::InvalidTransactionTimeout),
                "{timeout_ms}"
            );
        }
        let outcome = init_producer_id(None, "", TIMEOUT_MS, None, Some(1), settings(0), NOW);
        assert_eq!(outcome, Err(KafkaError::InvalidRequest));
        let max = init_producer_id(None, "tx", 900_000, None, Some(1), settings(0), NOW);
        assert!(matches!(max, Ok(InitOutcome::Write(_))));
    }

    #[test]
    fn init_bumps_the_epoch_after_no_transaction() {
        for state in [
            TxnState::Empty,
            TxnState::CompleteCommit,
            TxnState::CompleteAbort,
        ] {
            let current = meta(state, 5);
            let next = written(init(Some(&current), None, None));
            assert_eq!(next.state, TxnState::Empty, "{state}");
            assert_eq!((next.producer_id, next.producer_epoch), (1000, 6));
            assert_eq!(next.last_producer_epoch, NO_PRODUCER_EPOCH);
            assert_eq!(next.transaction_timeout_ms, TIMEOUT_MS + 1);
            assert_eq!(
                (next.start_timestamp_ms, next.last_update_timestamp_ms),
                (-1, NOW)
            );
            assert!(next.partitions.is_empty());
            assert_eq!(next.check(), Ok(()));
        }
    }

    #[test]
    fn init_while_ongoing_fences_the_producer_and_aborts_first() {
        let current = meta(TxnState::Ongoing, 5);
        // Before TV2: the fence epoch is the abort's.
        let outcome = init(Some(&current), None, None);
        let Ok(InitOutcome::AbortFirst(abort)) = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(abort.state, TxnState::PrepareAbort);
        assert_eq!((abort.producer_epoch, abort.last_producer_epoch), (6, -1));
        assert_eq!(abort.partitions, current.partitions);
        assert_eq!(abort.start_timestamp_ms, current.start_timestamp_ms);
        assert_eq!(abort.client_transaction_version, 0);
        // A TV2 cluster bumps once to fence and once more for the abort.
        let outcome = init_producer_id(
            Some(&current),
            "tx",
            TIMEOUT_MS,
            None,
            None,
            settings(2),
            NOW,
        );
        let Ok(InitOutcome::AbortFirst(abort)) = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!((abort.producer_epoch, abort.last_producer_epoch), (7, 6));
        assert_eq!(abort.client_transaction_version, 2);
        // Never past i16::MAX.
        let at_limit = meta(TxnState::Ongoing, MAX_EPOCH - 1);
        let outcome = init_producer_id(Some(&at_limit), "tx", 1, None, None, settings(2), NOW);
        let Ok(InitOutcome::AbortFirst(abort)) = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(abort.producer_epoch, MAX_EPOCH);
        assert_eq!(abort.check(), Ok(()));
        // Once the abort completes, the retry gets a new producer id.
        let completed = complete(&abort, NOW).unwrap();
        assert_eq!(completed.producer_epoch, MAX_EPOCH);
        assert_eq!(
            init(Some(&completed), None, None),
            Ok(InitOutcome::NeedProducerId)
        );
    }

    #[test]
    fn init_while_markers_are_written_is_concurrent() {
        for state in [
            TxnState::PrepareCommit,
            TxnState::PrepareAbort,
            TxnState::Dead,
            TxnState::PrepareEpochFence,
        ] {
            let current = meta(state, 5);
            assert_eq!(
                init(Some(&current), None, None),
                Err(KafkaError::ConcurrentTransactions),
                "{state}"
            );
            // Before the fencing check, as Kafka's pending transition comes first.
            assert_eq!(
                init(Some(&current), Some((1, 1)), None),
                Err(KafkaError::ConcurrentTransactions)
            );
        }
    }

    #[test]
    fn kip360_reinitialization_bumps_retries_and_fences() {
        let current = meta(TxnState::CompleteAbort, 5);
        // The producer with the current epoch recovers: bump, remember the old epoch.
        let bumped = written(init(Some(&current), Some((1000, 5)), None));
        assert_eq!((bumped.producer_epoch, bumped.last_producer_epoch), (6, 5));
        // Its retry (the answer was lost) gets the same epoch again.
        let retried = written(init(Some(&bumped), Some((1000, 5)), None));
        assert_eq!(
            (retried.producer_epoch, retried.last_producer_epoch),
            (6, 5)
        );
        // Any other epoch, or another producer id, is fenced.
        for expected in [(1000, 4), (1000, 7), (999, 6), (1001, 6)] {
            assert_eq!(
                init(Some(&bumped), Some(expected), None),
                Err(KafkaError::ProducerFenced),
                "{expected:?}"
            );
        }
        // A new producer (no expected epoch) forgets the last epoch: the old retry is fenced.
        let fresh = written(init(Some(&bumped), None, None));
        assert_eq!((fresh.producer_epoch, fresh.last_producer_epoch), (7, -1));
        assert_eq!(
            init(Some(&fresh), Some((1000, 5)), None),
            Err(KafkaError::ProducerFenced)
        );
        // An expected producer on an ongoing transaction fences it too.
        let ongoing = meta(TxnState::Ongoing, 5);
        assert!(matches!(
            init(Some(&ongoing), Some((1000, 5)), None),
            Ok(InitOutcome::AbortFirst(_))
        ));
        assert_eq!(
            init(Some(&ongoing), Some((1001, 5)), None),
            Err(KafkaError::ProducerFenced)
        );
    }

    #[test]
    fn an_exhausted_epoch_moves_to_a_new_producer_id() {
        let current = meta(TxnState::CompleteCommit, MAX_EPOCH - 1);
        assert!(epoch_exhausted(current.producer_epoch));
        assert_eq!(
            init(Some(&current), None, None),
            Ok(InitOutcome::NeedProducerId)
        );
        let rotated = written(init(Some(&current), None, Some(2000)));
        assert_eq!((rotated.producer_id, rotated.producer_epoch), (2000, 0));
        assert_eq!(rotated.previous_producer_id, 1000);
        assert_eq!(rotated.last_producer_epoch, NO_PRODUCER_EPOCH);
        assert_eq!(rotated.check(), Ok(()));
        // With the expected epoch, the last one is kept, so a retry by the old id is
        // recognised and answered with the new id.
        let expected = Some((1000, MAX_EPOCH - 1));
        assert_eq!(
            init(Some(&current), expected, None),
            Ok(InitOutcome::NeedProducerId)
        );
        let rotated = written(init(Some(&current), expected, Some(2000)));
        assert_eq!(rotated.last_producer_epoch, MAX_EPOCH - 1);
        let retried = written(init(Some(&rotated), expected, Some(3000)));
        assert_eq!((retried.producer_id, retried.producer_epoch), (2000, 0));
        // The old id with an epoch that is not exhausted is fenced.
        assert_eq!(
            init(Some(&rotated), Some((1000, 5)), None),
            Err(KafkaError::ProducerFenced)
        );
        // An exhausted epoch and a stale expected epoch: fenced; the retry of the bump that
        // reached it: the current epoch (Kafka fails this one with UNKNOWN_SERVER_ERROR).
        let mut reached = meta(TxnState::Empty, MAX_EPOCH - 1);
        reached.last_producer_epoch = MAX_EPOCH - 2;
        assert_eq!(
            init(Some(&reached), Some((1000, 3)), None),
            Err(KafkaError::ProducerFenced)
        );
        let retried = written(init(Some(&reached), Some((1000, MAX_EPOCH - 2)), None));
        assert_eq!(retried.producer_epoch, MAX_EPOCH - 1);
        // The epoch below i16::MAX is the last one handed out: bumping to it is allowed.
        let below = meta(TxnState::Empty, MAX_EPOCH - 2);
        assert_eq!(
            written(init(Some(&below), None, None)).producer_epoch,
            MAX_EPOCH - 1
        );
    }

    #[test]
    fn add_partitions_starts_or_extends_the_transaction() {
        for state in [
            TxnState::Empty,
            TxnState::CompleteCommit,
            TxnState::CompleteAbort,
        ] {
            let current = meta(state, 3);
            let outcome = add_partitions(Some(&current), 1000, 3, &[tp("a", 0)], 0, NOW);
            let Ok(AddOutcome::Write(next)) = outcome else {
                panic!("{outcome:?}");
            };
            assert_eq!(next.state, TxnState::Ongoing);
            assert_eq!(next.start_timestamp_ms, NOW, "the transaction starts now");
            assert_eq!(next.partitions, [tp("a", 0)].into_iter().collect());
            assert_eq!(next.producer_epoch, 3);
            assert_eq!(next.check(), Ok(()));
        }
        let ongoing = meta(TxnState::Ongoing, 3);
        let outcome = add_partitions(Some(&ongoing), 1000, 3, &[tp("a", 0), tp("c", 2)], 2, NOW);
        let Ok(AddOutcome::Write(next)) = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(next.start_timestamp_ms, ongoing.start_timestamp_ms);
        assert_eq!(next.partitions.len(), 3);
        assert_eq!(next.client_transaction_version, 2);
        assert_eq!(
            add_partitions(Some(&ongoing), 1000, 3, &[tp("b", 1), tp("a", 0)], 0, NOW),
            Ok(AddOutcome::AlreadyIncluded)
        );
        assert_eq!(
            add_partitions(Some(&meta(TxnState::Empty, 3)), 1000, 3, &[], 0, NOW),
            Ok(AddOutcome::AlreadyIncluded)
        );
    }

    #[test]
    fn add_partitions_errors_are_kafkas() {
        let ongoing = meta(TxnState::Ongoing, 3);
        let add = |meta: Option<&TxnMetadata>, producer_id, producer_epoch| {
            add_partitions(meta, producer_id, producer_epoch, &[tp("z", 0)], 0, NOW)
        };
        assert_eq!(
            add(None, 1000, 3),
            Err(KafkaError::InvalidProducerIdMapping)
        );
        assert_eq!(
            add(Some(&ongoing), 999, 3),
            Err(KafkaError::InvalidProducerIdMapping)
        );
        assert_eq!(
            add(Some(&ongoing), 1000, 2),
            Err(KafkaError::ProducerFenced)
        );
        assert_eq!(
            add(Some(&ongoing), 1000, 4),
            Err(KafkaError::ProducerFenced)
        );
        for state in [
            TxnState::PrepareCommit,
            TxnState::PrepareAbort,
            TxnState::Dead,
            TxnState::PrepareEpochFence,
        ] {
            let current = meta(state, 3);
            assert_eq!(
                add(Some(&current), 1000, 3),
                Err(KafkaError::ConcurrentTransactions)
            );
            // Even for the next producer id of a TV2 move, not yet complete.
            assert_eq!(
                add(Some(&current), 7777, 0),
                Err(KafkaError::ConcurrentTransactions)
            );
        }
    }

    #[test]
    fn old_clients_get_invalid_producer_epoch_for_fenced() {
        use TxnApi::*;
        let fenced = KafkaError::ProducerFenced;
        for (api, first) in [
            (InitProducerId, 4),
            (AddPartitionsToTxn, 2),
            (AddOffsetsToTxn, 2),
            (EndTxn, 2),
        ] {
            for version in 0..first {
                assert_eq!(
                    error_for_version(fenced, api, version),
                    KafkaError::InvalidProducerEpoch
                );
            }
            assert_eq!(error_for_version(fenced, api, first), fenced);
            let other = KafkaError::ConcurrentTransactions;
            assert_eq!(error_for_version(other, api, 0), other);
        }
    }

    #[test]
    fn verify_only_answers_per_partition() {
        let ongoing = meta(TxnState::Ongoing, 3);
        let asked = [tp("a", 0), tp("z", 9), tp("b", 1)];
        assert_eq!(
            verify_partitions(Some(&ongoing), 1000, 3, &asked),
            Ok(vec![true, false, true])
        );
        let complete = meta(TxnState::CompleteCommit, 3);
        assert_eq!(
            verify_partitions(Some(&complete), 1000, 3, &asked),
            Ok(vec![false, false, false])
        );
        assert_eq!(
            verify_partitions(None, 1000, 3, &asked),
            Err(KafkaError::InvalidProducerIdMapping)
        );
        assert_eq!(
            verify_partitions(Some(&ongoing), 1, 3, &asked),
            Err(KafkaError::InvalidProducerIdMapping)
        );
        assert_eq!(
            verify_partitions(Some(&ongoing), 1000, 2, &asked),
            Err(KafkaError::ProducerFenced)
        );
        assert_eq!(
            verify_partitions(Some(&meta(TxnState::PrepareAbort, 3)), 1000, 3, &asked),
            Err(KafkaError::ConcurrentTransactions)
        );
    }

    #[test]
    fn end_txn_before_tv2_keeps_the_epoch() {
        use TxnResult::*;
        let ongoing = meta(TxnState::Ongoing, 3);
        for (result, to) in [
            (Commit, TxnState::PrepareCommit),
            (Abort, TxnState::PrepareAbort),
        ] {
            let (next, producer_id, producer_epoch) = prepared(end(&ongoing, 3, result, 0));
            assert_eq!(next.state, to);
            assert_eq!(next.producer_epoch, 3);
            assert_eq!(next.partitions, ongoing.partitions);
            assert_eq!(next.start_timestamp_ms, ongoing.start_timestamp_ms);
            assert_eq!((producer_id, producer_epoch), (-1, -1));
            assert_eq!(next.check(), Ok(()));
        }
        let retried = Ok(EndOutcome::AlreadyComplete {
            producer_id: -1,
            producer_epoch: -1,
        });
        let its = Err(KafkaError::InvalidTxnState);
        let concurrent = Err(KafkaError::ConcurrentTransactions);
        let cases = [
            (TxnState::CompleteCommit, Commit, retried.clone()),
            (TxnState::CompleteCommit, Abort, its.clone()),
            (TxnState::CompleteAbort, Abort, retried),
            (TxnState::CompleteAbort, Commit, its.clone()),
            (TxnState::Empty, Abort, its.clone()),
            (TxnState::Empty, Commit, its),
            (TxnState::PrepareCommit, Commit, concurrent.clone()),
            (TxnState::PrepareCommit, Abort, concurrent.clone()),
            (TxnState::PrepareAbort, Abort, concurrent.clone()),
            (TxnState::PrepareAbort, Commit, concurrent),
        ];
        for (state, result, expected) in cases {
            assert_eq!(
                end(&meta(state, 3), 3, result, 0),
                expected,
                "{state} {result:?}"
            );
        }
        assert_eq!(end(&ongoing, 2, Commit, 0), Err(KafkaError::ProducerFenced));
        assert_eq!(end(&ongoing, 4, Commit, 0), Err(KafkaError::ProducerFenced));
        assert_eq!(
            end_txn(Some(&ongoing), 1, 3, Commit, 0, None, NOW),
            Err(KafkaError::InvalidProducerIdMapping)
        );
        assert_eq!(
            end_txn(None, 1000, 3, Commit, 0, None, NOW),
            Err(KafkaError::InvalidProducerIdMapping)
        );
    }

    #[test]
    fn end_txn_in_tv2_bumps_the_epoch_and_answers_it() {
        use TxnResult::*;
        let ongoing = tv2(meta(TxnState::Ongoing, 3));
        for (result, to) in [
            (Commit, TxnState::PrepareCommit),
            (Abort, TxnState::PrepareAbort),
        ] {
            let (next, producer_id, producer_epoch) = prepared(end(&ongoing, 3, result, 2));
            assert_eq!(next.state, to);
            assert_eq!((next.producer_epoch, next.last_producer_epoch), (4, 3));
            assert_eq!((producer_id, producer_epoch), (1000, 4));
            assert_eq!(next.client_transaction_version, 2);
            assert_eq!(next.check(), Ok(()));
            // Its retry while the markers are written: CONCURRENT; the new epoch: fenced.
            assert_eq!(
                end(&next, 3, result, 2),
                Err(KafkaError::ConcurrentTransactions)
            );
            assert_eq!(end(&next, 4, result, 2), Err(KafkaError::ProducerFenced));
            // Once complete, the retry is answered with the current id and epoch.
            let done = complete(&next, NOW).unwrap();
            assert_eq!(
                end(&done, 3, result, 2),
                Ok(EndOutcome::AlreadyComplete {
                    producer_id: 1000,
                    producer_epoch: 4
                })
            );
        }
        // The Ongoing transaction with a stale or future epoch is fenced.
        assert_eq!(end(&ongoing, 2, Commit, 2), Err(KafkaError::ProducerFenced));
        assert_eq!(end(&ongoing, 4, Commit, 2), Err(KafkaError::ProducerFenced));
    }

    /// Kafka's table for transaction version 2 (TransactionCoordinator's comment): a retry
    /// is the epoch below the current one, "current" the current epoch.
    #[test]
    fn end_txn_in_tv2_after_no_transaction_follows_kafkas_table() {
        use TxnResult::*;
        #[derive(Debug, PartialEq)]
        enum Answer {
            Fenced,
            Invalid,
            Done,
            Bump,
        }
        use Answer::*;
        let cases = [
            (TxnState::Empty, Abort, [Fenced, Bump]),
            (TxnState::Empty, Commit, [Fenced, Invalid]),
            (TxnState::CompleteAbort, Abort, [Done, Bump]),
            (TxnState::CompleteAbort, Commit, [Invalid, Invalid]),
            (TxnState::CompleteCommit, Abort, [Invalid, Bump]),
            (TxnState::CompleteCommit, Commit, [Done, Invalid]),
        ];
        for (state, result, [on_retry, on_current]) in cases {
            let current = tv2(meta(state, 5));
            for (epoch, expected) in [(4, on_retry), (5, on_current)] {
                let answer = match end(&current, epoch, result, 2) {
                    Err(KafkaError::ProducerFenced) => Fenced,
                    Err(KafkaError::InvalidTxnState) => Invalid,
                    Ok(EndOutcome::AlreadyComplete {
                        producer_id: 1000,
                        producer_epoch: 5,
                    }) => Done,
                    Ok(EndOutcome::Prepare {
                        metadata,
                        producer_id: 1000,
                        producer_epoch: 6,
                    }) => {
                        assert_eq!(metadata.state, TxnState::PrepareAbort);
                        assert_eq!(metadata.start_timestamp_ms, NOW, "it starts now");
                        assert!(metadata.partitions.is_empty());
                        assert_eq!(metadata.check(), Ok(()));
                        Bump
                    }
                    other => panic!("{state} {result:?} {epoch}: {other:?}"),
                };
                assert_eq!(answer, expected, "{state} {result:?} at epoch {epoch}");
            }
        }
        // Before TV2, an abort with no transaction is INVALID_TXN_STATE.
        assert_eq!(
            end(&meta(TxnState::Empty, 5), 5, Abort, 0),
            Err(KafkaError::InvalidTxnState)
        );
    }

    #[test]
    fn tv2_past_the_last_epoch_moves_to_a_new_producer_id_on_completion() {
        let ongoing = tv2(meta(TxnState::Ongoing, MAX_EPOCH - 1));
        let commit = |new_producer_id| {
            end_txn(
                Some(&ongoing),
                1000,
                MAX_EPOCH - 1,
                TxnResult::Commit,
                2,
                new_producer_id,
                NOW,
            )
        };
        assert_eq!(commit(None), Ok(EndOutcome::NeedProducerId));
        let (prepare, producer_id, producer_epoch) = prepared(commit(Some(2000)));
        assert_eq!(
            (prepare.producer_id, prepare.producer_epoch),
            (1000, MAX_EPOCH)
        );
        assert_eq!(prepare.next_producer_id, 2000);
        assert_eq!(
            (producer_id, producer_epoch),
            (2000, 0),
            "the producer moves on"
        );
        assert_eq!(prepare.check(), Ok(()));
        let done = complete(&prepare, NOW + 1).unwrap();
        assert_eq!((done.producer_id, done.producer_epoch), (2000, 0));
        assert_eq!(done.previous_producer_id, 1000);
        assert_eq!(done.next_producer_id, NO_PRODUCER_ID);
        assert_eq!(done.check(), Ok(()));
        // The old id's retry is recognised.
        let retry = end_txn(
            Some(&done),
            1000,
            MAX_EPOCH - 1,
            TxnResult::Commit,
            2,
            None,
            NOW,
        );
        assert_eq!(
            retry,
            Ok(EndOutcome::AlreadyComplete {
                producer_id: 2000,
                producer_epoch: 0
            })
        );
        // The new id carries on.
        let next = add_partitions(Some(&done), 2000, 0, &[tp("a", 0)], 2, NOW + 2);
        assert!(matches!(next, Ok(AddOutcome::Write(_))));
        // The record keeps the next producer id (v1 tagged field) across a load.
        let loaded = reload(&prepare);
        assert_eq!(loaded.next_producer_id, 2000);
        assert_eq!(
            complete(&loaded, NOW + 1).map(|m| m.producer_id),
            Some(2000)
        );
    }

    fn reload(meta: &TxnMetadata) -> TxnMetadata {
        let (key, value) = meta.to_record().encode();
        let record = records::decode(&key, value.as_deref()).unwrap().unwrap();
        TxnMetadata::from_record(record).unwrap()
    }

    #[test]
    fn complete_clears_the_partitions() {
        for (from, to) in [
            (TxnState::PrepareCommit, TxnState::CompleteCommit),
            (TxnState::PrepareAbort, TxnState::CompleteAbort),
        ] {
            let prepare = meta(from, 3);
            let done = complete(&prepare, NOW + 9).unwrap();
            assert_eq!(done.state, to);
            assert!(done.partitions.is_empty());
            assert_eq!(done.producer_epoch, 3);
            assert_eq!(done.start_timestamp_ms, prepare.start_timestamp_ms);
            assert_eq!(done.last_update_timestamp_ms, NOW + 9);
            assert_eq!(done.check(), Ok(()));
        }
        for state in [
            TxnState::Empty,
            TxnState::Ongoing,
            TxnState::CompleteCommit,
            TxnState::CompleteAbort,
        ] {
            assert_eq!(complete(&meta(state, 3), NOW), None, "{state}");
        }
    }

    #[test]
    fn a_timed_out_transaction_is_fenced_and_aborted() {
        let ongoing = meta(TxnState::Ongoing, 3);
        let deadline_ms = ongoing.start_timestamp_ms + i64::from(TIMEOUT_MS);
        assert!(
            !timed_out(&ongoing, deadline_ms),
            "Kafka: start + timeout < now"
        );
        assert!(timed_out(&ongoing, deadline_ms + 1));
        assert_eq!(ongoing.transaction_deadline_ms(), Some(deadline_ms + 1));
        assert_eq!(abort_timed_out(&ongoing, 0, deadline_ms), None);
        let abort = abort_timed_out(&ongoing, 0, deadline_ms + 1).unwrap();
        assert_eq!(abort.state, TxnState::PrepareAbort);
        assert_eq!(abort.producer_epoch, 4);
        assert_eq!(abort.partitions, ongoing.partitions);
        assert_eq!(abort.check(), Ok(()));
        let abort = abort_timed_out(&ongoing, 2, deadline_ms + 1).unwrap();
        assert_eq!(abort.producer_epoch, 5);
        // The fenced producer's next request is refused.
        assert_eq!(
            end(&abort, 3, TxnResult::Commit, 0),
            Err(KafkaError::ProducerFenced)
        );
        for state in [
            TxnState::Empty,
            TxnState::PrepareCommit,
            TxnState::CompleteAbort,
        ] {
            let current = meta(state, 3);
            assert!(!timed_out(&current, i64::MAX));
            assert_eq!(current.transaction_deadline_ms(), None);
        }
    }

    #[test]
    fn only_an_idle_id_with_no_transaction_expires() {
        const EXPIRATION_MS: i64 = 604_800_000;
        for state in TxnState::ALL {
            let current = meta(state, 3);
            let deadline_ms = current.last_update_timestamp_ms + EXPIRATION_MS;
            assert!(
                !expired(&current, deadline_ms - 1, EXPIRATION_MS),
                "{state}"
            );
            assert_eq!(
                expired(&current, deadline_ms, EXPIRATION_MS),
                state.expiration_allowed(),
                "{state}"
            );
        }
        assert_eq!(
            meta(TxnState::CompleteCommit, 1).expiration_deadline_ms(10),
            Some(NOW - 5 + 10)
        );
        assert_eq!(meta(TxnState::Ongoing, 1).expiration_deadline_ms(10), None);
    }

    #[test]
    fn check_finds_broken_invariants() {
        for state in [
            TxnState::Empty,
            TxnState::Ongoing,
            TxnState::PrepareCommit,
            TxnState::PrepareAbort,
            TxnState::CompleteCommit,
            TxnState::CompleteAbort,
        ] {
            assert_eq!(meta(state, 0).check(), Ok(()), "{state}");
        }
        let broken: Vec<(&str, TxnMetadata)> = vec![
            ("dead stored", meta(TxnState::Dead, 1)),
            ("fence stored", meta(TxnState::PrepareEpochFence, 1)),
            ("negative epoch", meta(TxnState::Empty, -1)),
            ("ongoing at max", meta(TxnState::Ongoing, MAX_EPOCH)),
            ("empty at max", meta(TxnState::Empty, MAX_EPOCH)),
            ("no producer id", {
                let mut m = meta(TxnState::Empty, 1);
                m.producer_id = -1;
                m
            }),
            ("no timeout", {
                let mut m = meta(TxnState::Empty, 1);
                m.transaction_timeout_ms = 0;
                m
            }),
            ("unknown version", {
                let mut m = meta(TxnState::Empty, 1);
                m.client_transaction_version = 3;
                m
            }),
            ("empty with partitions", {
                let mut m = meta(TxnState::Empty, 1);
                m.partitions.insert(tp("a", 0));
                m
            }),
            ("complete with partitions", {
                let mut m = meta(TxnState::CompleteAbort, 1);
                m.partitions.insert(tp("a", 0));
                m
            }),
            ("empty with a start", {
                let mut m = meta(TxnState::Empty, 1);
                m.start_timestamp_ms = NOW;
                m
            }),
            ("ongoing with no start", {
                let mut m = meta(TxnState::Ongoing, 1);
                m.start_timestamp_ms = -1;
                m
            }),
            ("ongoing with nothing", {
                let mut m = meta(TxnState::Ongoing, 1);
                m.partitions.clear();
                m
            }),
            ("next producer id before TV2", {
                let mut m = meta(TxnState::PrepareCommit, 1);
                m.next_producer_id = 5;
                m
            }),
            ("next producer id when complete", {
                let mut m = tv2(meta(TxnState::CompleteCommit, 1));
                m.next_producer_id = 5;
                m
            }),
        ];
        for (what, metadata) in broken {
            assert!(metadata.check().is_err(), "{what}");
        }
        // A live write's successor: a transition of the table, epochs never back.
        let ongoing = meta(TxnState::Ongoing, 5);
        assert_eq!(
            ongoing.check_successor(&meta(TxnState::PrepareCommit, 5)),
            Ok(())
        );
        assert!(ongoing.check_successor(&meta(TxnState::Empty, 6)).is_err());
        assert!(
            ongoing
                .check_successor(&meta(TxnState::PrepareAbort, 4))
                .is_err()
        );
        let mut moved = meta(TxnState::Empty, 1);
        moved.producer_id = 2000;
        let complete = meta(TxnState::CompleteCommit, MAX_EPOCH - 1);
        assert!(
            complete.check_successor(&moved).is_err(),
            "a new id starts at 0"
        );
        moved.producer_epoch = 0;
        assert_eq!(complete.check_successor(&moved), Ok(()));
        let mut tv2_empty_ongoing = tv2(meta(TxnState::Ongoing, 1));
        tv2_empty_ongoing.partitions.clear();
        assert_eq!(tv2_empty_ongoing.check(), Ok(()));
    }

    #[test]
    fn metadata_survives_its_record_but_the_last_epoch() {
        for state in [
            TxnState::Empty,
            TxnState::Ongoing,
            TxnState::PrepareCommit,
            TxnState::PrepareAbort,
            TxnState::CompleteCommit,
            TxnState::CompleteAbort,
        ] {
            let mut original = tv2(meta(state, 9));
            original.last_producer_epoch = 8;
            original.previous_producer_id = 999;
            let loaded = reload(&original);
            assert_eq!(loaded.last_producer_epoch, NO_PRODUCER_EPOCH);
            assert_eq!(
                loaded,
                TxnMetadata {
                    last_producer_epoch: NO_PRODUCER_EPOCH,
                    ..original
                }
            );
        }
        assert_eq!(
            TxnMetadata::from_record(TxnLogRecord::tombstone("tx")),
            None
        );
    }

    /// A seeded random walk of one transactional id through every decision: producers come
    /// and go (new, KIP-360 recovering, zombies with old credentials), transactions are
    /// added to, ended (before and with TV2), completed, timed out and expired.
    ///
    /// After every write: the new metadata keeps its invariants, the transition is in the
    /// table, it survives its record, and (producer id, epoch) never goes back. After every
    /// step: only the latest credential handed out may extend a transaction (every older
    /// one is fenced), and not even that one once the coordinator fenced it.
    ///
    /// `SLUICE_TEST_SEED=<n>` replays one seed; `SLUICE_TEST_RUNS=<n>` runs more seeds.
    #[test]
    fn randomized_operations_keep_the_invariants_and_fence_every_old_producer() {
        let seeds: Vec<u64> = match std::env::var("SLUICE_TEST_SEED") {
            Ok(seed) => vec![seed.parse().expect("SLUICE_TEST_SEED is a number")],
            Err(_) => {
                let runs: u64 = std::env::var("SLUICE_TEST_RUNS")
                    .ok()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(64);
                let base = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                (0..runs)
                    .map(|i| base.wrapping_add(i.wrapping_mul(0x9e37_79b9)))
                    .collect()
            }
        };
        let mut seen = BTreeSet::new();
        let mut moves = BTreeSet::new();
        let runs = seeds.len();
        eprintln!(
            "randomized transaction state test: {runs} seeds from {:?} (replay one with \
             SLUICE_TEST_SEED=<seed>)",
            seeds.first()
        );
        for seed in seeds {
            match std::panic::catch_unwind(|| walk(seed)) {
                Ok(walk) => {
                    seen.extend(walk.seen);
                    moves.extend(walk.moves);
                }
                Err(panic) => {
                    eprintln!(
                        "randomized transaction state test FAILED with seed {seed}: replay with \
                         SLUICE_TEST_SEED={seed}"
                    );
                    std::panic::resume_unwind(panic);
                }
            }
        }
        // Enough walks cover every row (one walk in four moves to a new id by TV2 EndTxn).
        if runs >= 64 {
            // Every row of the table was walked (Dead and PrepareEpochFence are never written).
            for (to, from) in TxnState::ALL.iter().flat_map(|to| {
                to.valid_previous_states()
                    .iter()
                    .map(move |from| (*to, *from))
            }) {
                if matches!(to, TxnState::Dead | TxnState::PrepareEpochFence)
                    || from == TxnState::PrepareEpochFence
                {
                    continue;
                }
                assert!(
                    seen.contains(&(Some(from), to)),
                    "never walked {from} -> {to}"
                );
            }
            assert!(seen.contains(&(None, TxnState::Empty)));
            assert_eq!(moves.len(), 2, "moves to a new producer id: {moves:?}");
        }
    }

    use crate::rng::SmallRng as Rng;

    struct Walk {
        rng: Rng,
        now_ms: i64,
        meta: Option<TxnMetadata>,
        next_producer_id: i64,
        /// Every credential ever handed out, the latest last.
        credentials: Vec<ProducerIdAndEpoch>,
        /// The first this many were fenced by the coordinator (InitProducerId of an ongoing
        /// transaction, or its timeout).
        revoked: usize,
        /// The live producer's transaction version.
        transaction_version: i16,
        /// The cluster's.
        cluster_version: i16,
        writes: usize,
        /// Every (from, to) written, and what moved to a new producer id.
        seen: BTreeSet<(Option<TxnState>, TxnState)>,
        moves: BTreeSet<&'static str>,
    }

    const EXPIRATION_MS: i64 = 1_000_000;

    impl Walk {
        fn allocate(&mut self) -> i64 {
            self.next_producer_id += 1 + self.rng.below(3) as i64;
            self.next_producer_id
        }

        fn hand_out(&mut self, producer: ProducerIdAndEpoch) {
            self.credentials.push(producer);
        }

        /// The credential a request carries: mostly the latest, sometimes an old one or
        /// one never handed out.
        fn credential(&mut self) -> ProducerIdAndEpoch {
            let roll = self.rng.below(100);
            match self.credentials.last() {
                Some(latest) if roll < 75 => *latest,
                Some(_) if roll < 90 => {
                    let index = self.rng.below(self.credentials.len() as u64) as usize;
                    self.credentials[index]
                }
                _ => {
                    let made_up = ProducerIdAndEpoch {
                        producer_id: self.rng.below(self.next_producer_id as u64 + 2) as i64,
                        producer_epoch: self.rng.below(8) as i16,
                    };
                    // No client can hold an epoch the coordinator never handed out (one a
                    // fence bumped to): a made-up credential that guessed it is no test.
                    let current = self.meta.as_ref().map(TxnMetadata::producer);
                    if current == Some(made_up) && !self.credentials.contains(&made_up) {
                        ProducerIdAndEpoch {
                            producer_epoch: made_up.producer_epoch.saturating_add(8),
                            ..made_up
                        }
                    } else {
                        made_up
                    }
                }
            }
        }

        /// Write `next` over the current metadata, checking what every write must keep.
        fn write(&mut self, next: TxnMetadata) {
            assert_eq!(next.check(), Ok(()), "{next:?}");
            self.seen
                .insert((self.meta.as_ref().map(|m| m.state), next.state));
            match &self.meta {
                None => assert_eq!(next.state, TxnState::Empty),
                Some(previous) => {
                    assert_eq!(previous.check_successor(&next), Ok(()));
                    let before = (previous.producer_id, previous.producer_epoch);
                    let after = (next.producer_id, next.producer_epoch);
                    assert!(
                        after >= before,
                        "(producer id, epoch) went back: {before:?} -> {after:?}"
                    );
                    if after.0 != before.0 {
                        self.moves.insert(if next.state == TxnState::Empty {
                            "InitProducerId"
                        } else {
                            "TV2 EndTxn"
                        });
                    }
                }
            }
            assert_eq!(
                reload(&next),
                TxnMetadata {
                    last_producer_epoch: NO_PRODUCER_EPOCH,
                    ..next.clone()
                }
            );
            self.meta = Some(next);
            self.writes += 1;
        }

        fn init(&mut self) {
            let expected = if self.rng.chance(40) {
                Some(self.credential())
            } else {
                None
            };
            let timeout_ms = if self.rng.chance(5) {
                *self.rng.pick(&[0, -5, 900_001])
            } else {
                1 + self.rng.below(20_000) as i32
            };
            let settings = TxnSettings {
                transaction_max_timeout_ms: 900_000,
                transaction_version: self.cluster_version,
            };
            let mut new_producer_id = None;
            loop {
                let outcome = init_producer_id(
                    self.meta.as_ref(),
                    "tx",
                    timeout_ms,
                    expected,
                    new_producer_id,
                    settings,
                    self.now_ms,
                );
                match outcome {
                    Ok(InitOutcome::NeedProducerId) => {
                        assert_eq!(new_producer_id, None, "asked twice");
                        new_producer_id = Some(self.allocate());
                    }
                    Ok(InitOutcome::Write(next)) => {
                        assert_eq!(next.state, TxnState::Empty);
                        assert!(timeout_ms > 0 && timeout_ms <= 900_000);
                        let producer = next.producer();
                        self.write(next);
                        self.hand_out(producer);
                        self.transaction_version = *self.rng.pick(&[0, 2]);
                        return;
                    }
                    Ok(InitOutcome::AbortFirst(next)) => {
                        assert_eq!(self.meta.as_ref().map(|m| m.state), Some(TxnState::Ongoing));
                        assert_eq!(next.state, TxnState::PrepareAbort);
                        self.write(next);
                        self.revoked = self.credentials.len();
                        return;
                    }
                    Err(KafkaError::InvalidTransactionTimeout) => {
                        assert!(timeout_ms <= 0 || timeout_ms > 900_000);
                        return;
                    }
                    Err(KafkaError::ConcurrentTransactions) => {
                        let state = self.meta.as_ref().map(|m| m.state);
                        assert!(state.is_some_and(TxnState::is_prepare), "{state:?}");
                        return;
                    }
                    Err(KafkaError::ProducerFenced) => {
                        assert!(expected.is_some());
                        return;
                    }
                    Err(other) => panic!("InitProducerId answered {other}"),
                }
            }
        }

        fn add(&mut self) {
            let producer = self.credential();
            let count = self.rng.below(3) as usize;
            let partitions: Vec<TopicPartition> = (0..count)
                .map(|_| tp(["a", "b"][self.rng.index(2)], self.rng.below(3) as i32))
                .collect();
            let outcome = add_partitions(
                self.meta.as_ref(),
                producer.producer_id,
                producer.producer_epoch,
                &partitions,
                self.transaction_version,
                self.now_ms,
            );
            match outcome {
                Ok(AddOutcome::Write(next)) => {
                    assert!(partitions.iter().all(|tp| next.partitions.contains(tp)));
                    self.write(next);
                }
                Ok(AddOutcome::AlreadyIncluded) => {}
                Err(
                    KafkaError::InvalidProducerIdMapping
                    | KafkaError::ProducerFenced
                    | KafkaError::ConcurrentTransactions,
                ) => {}
                Err(other) => panic!("AddPartitionsToTxn answered {other}"),
            }
        }

        fn end(&mut self) {
            let mut producer = self.credential();
            // A TV2 retry: the epoch below the one handed out.
            if self.rng.chance(10) && producer.producer_epoch > 0 {
                producer.producer_epoch -= 1;
            }
            let result = *self.rng.pick(&[TxnResult::Commit, TxnResult::Abort]);
            let mut new_producer_id = None;
            loop {
                let outcome = end_txn(
                    self.meta.as_ref(),
                    producer.producer_id,
                    producer.producer_epoch,
                    result,
                    self.transaction_version,
                    new_producer_id,
                    self.now_ms,
                );
                match outcome {
                    Ok(EndOutcome::NeedProducerId) => {
                        assert_eq!(new_producer_id, None, "asked twice");
                        new_producer_id = Some(self.allocate());
                    }
                    Ok(EndOutcome::Prepare {
                        metadata,
                        producer_id,
                        producer_epoch,
                    }) => {
                        assert_eq!(metadata.state, prepare_state(result));
                        assert_eq!(Some(producer), self.credentials.last().copied());
                        assert!(!self.credentials[..self.revoked].contains(&producer));
                        self.write(metadata);
                        if supports_epoch_bump(self.transaction_version) {
                            self.hand_out(ProducerIdAndEpoch {
                                producer_id,
                                producer_epoch,
                            });
                        }
                        return;
                    }
                    Ok(EndOutcome::AlreadyComplete { .. }) => {
                        let state = self.meta.as_ref().map(|m| m.state);
                        assert_eq!(state, Some(complete_state(result)));
                        // The latest producer, or (TV2) its retry with the epoch before.
                        let recent = self.credentials.iter().rev().take(2);
                        assert!(
                            recent.clone().any(|c| *c == producer),
                            "an old producer's EndTxn was answered: {producer:?}"
                        );
                        return;
                    }
                    Err(
                        KafkaError::InvalidProducerIdMapping
                        | KafkaError::ProducerFenced
                        | KafkaError::ConcurrentTransactions
                        | KafkaError::InvalidTxnState,
                    ) => return,
                    Err(other) => panic!("EndTxn answered {other}"),
                }
            }
        }

        fn step(&mut self) {
            match self.rng.below(100) {
                0..10 => self.init(),
                10..45 => self.add(),
                45..70 => self.end(),
                70..85 => {
                    if let Some(done) = self.meta.as_ref().and_then(|m| complete(m, self.now_ms)) {
                        self.write(done);
                    }
                }
                85..92 => {
                    self.now_ms += self.rng.below(30_000) as i64;
                    let aborted = self
                        .meta
                        .as_ref()
                        .and_then(|m| abort_timed_out(m, self.cluster_version, self.now_ms));
                    if let Some(abort) = aborted {
                        self.write(abort);
                        self.revoked = self.credentials.len();
                    }
                }
                _ => {
                    self.now_ms += self.rng.below(2 * EXPIRATION_MS as u64) as i64;
                    if self
                        .meta
                        .as_ref()
                        .is_some_and(|m| expired(m, self.now_ms, EXPIRATION_MS))
                    {
                        // The tombstone: the id is forgotten, its producers with it.
                        self.meta = None;
                    }
                }
            }
            self.now_ms += self.rng.below(50) as i64;
            self.check_only_the_latest_credential_is_accepted();
        }

        fn check_only_the_latest_credential_is_accepted(&self) {
            let Some(meta) = &self.meta else {
                return;
            };
            let latest = self.credentials.last().copied();
            for credential in &self.credentials {
                let accepted = add_partitions(
                    Some(meta),
                    credential.producer_id,
                    credential.producer_epoch,
                    &[tp("z", 0)],
                    self.transaction_version,
                    self.now_ms,
                )
                .is_ok();
                if accepted {
                    assert_eq!(Some(*credential), latest, "an old producer got through");
                    assert!(
                        !self.credentials[..self.revoked].contains(credential),
                        "a fenced producer got through: {credential:?}"
                    );
                }
            }
        }
    }

    fn walk(seed: u64) -> Walk {
        let mut rng = Rng::new(seed);
        let cluster_version = *rng.pick(&[0, 1, 2]);
        let mut walk = Walk {
            rng,
            now_ms: NOW,
            meta: None,
            next_producer_id: 1000,
            credentials: Vec::new(),
            revoked: 0,
            transaction_version: 0,
            cluster_version,
            writes: 0,
            seen: BTreeSet::new(),
            moves: BTreeSet::new(),
        };
        // Start close to the end of the epochs in most walks, so moves to new producer ids
        // (InitProducerId's, and TV2 EndTxn's) happen.
        match walk.rng.below(3) {
            0 => {}
            1 => {
                let start = meta(
                    TxnState::CompleteCommit,
                    MAX_EPOCH - 1 - walk.rng.below(6) as i16,
                );
                // As if a TV2 EndTxn of the epoch before completed it: its retry is valid.
                walk.hand_out(ProducerIdAndEpoch {
                    producer_epoch: start.producer_epoch - 1,
                    ..start.producer()
                });
                walk.hand_out(start.producer());
                walk.transaction_version = *walk.rng.pick(&[0, 2]);
                walk.meta = Some(start);
            }
            _ => {
                let start = tv2(meta(
                    TxnState::Ongoing,
                    MAX_EPOCH - 1 - walk.rng.below(2) as i16,
                ));
                walk.hand_out(start.producer());
                walk.transaction_version = TRANSACTION_VERSION_2;
                walk.meta = Some(start);
            }
        }
        for _ in 0..2_000 {
            walk.step();
        }
        assert!(
            walk.writes > 100,
            "the walk wrote too little: {}",
            walk.writes
        );
        walk
    }
}
