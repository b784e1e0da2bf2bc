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
//! transition; every decision below goes through it.
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

    /// Every decision's result passes here: the transition is in the table and the result
    /// keeps the invariants (a failure is a bug in this module).
    fn checked(&self, next: TxnMetadata) -> TxnMetadata {
        debug_assert_eq!(
            check_transition(self.state, next.state, next.client_transaction_version),
            Ok(()),
            "{self:?} -> {next:?}"
        );
        debug_assert_eq!(next.check(), Ok(()), "{self:?} -> {next:?}");
        next
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
            next.client_transaction_version = transaction_version;
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
    next.client_transaction_version = transaction_version;
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
mod tests {}
