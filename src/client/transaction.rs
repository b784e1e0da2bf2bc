//! A transactional producer's state machine and its requests to the coordinators, beneath
//! [`Producer`](super::Producer)'s `init_transactions`, `begin_transaction`,
//! `send_offsets_to_transaction`, `commit_transaction` and `abort_transaction`.
//!
//! [`TransactionManager`] is plain state (no I/O): Kafka's `TransactionManager` states, the
//! partitions of the current transaction and the error that stopped it; every change of
//! state goes through [`TransactionManager::transition`]. The request functions below it
//! speak to the transaction coordinator (found with FindCoordinator key type 1) and the group
//! coordinator (TxnOffsetCommit), retrying what Kafka's clients retry (a coordinator that
//! moved or is loading, CONCURRENT_TRANSACTIONS) until a deadline, and return every other
//! error classified by [`classify`] as fatal or abortable.
//!
//! The transaction protocol spoken is Kafka's first (transaction version 1): partitions are
//! added with AddPartitionsToTxn before the first batch to each, and EndTxn (at most v4)
//! keeps the producer epoch, so each partition's sequences go on from one transaction to the
//! next. A batch that failed leaves a hole in its partition's sequences: after the abort the
//! producer bumps its epoch (KIP-360: InitProducerId with its current producer id and epoch),
//! which starts every sequence again from 0.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest,
    GroupId, InitProducerIdRequest, ProducerId, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::cluster::Cluster;
use super::connection::Connection;
use super::consumer::{ConsumerGroupMetadata, TopicPartition};
use super::error::{Error, Result, TransactionErrorKind};
use crate::protocol::errors;

/// FindCoordinator's key type of a group.
pub(crate) const KEY_TYPE_GROUP: i8 = 0;
/// FindCoordinator's key type of a transactional id.
pub(crate) const KEY_TYPE_TRANSACTION: i8 = 1;

/// v4 and up batch keys in another field; v3 carries one key with its type.
const FIND_COORDINATOR_VERSION_MAX: i16 = 3;
/// v3 added KIP-360's producer id and epoch; v4 PRODUCER_FENCED; v5 TRANSACTION_ABORTABLE.
const INIT_PRODUCER_ID_VERSION_MAX: i16 = 5;
/// v4 and up are the brokers' batched form (one request for many transactional ids).
const ADD_PARTITIONS_TO_TXN_VERSION_MAX: i16 = 3;
const ADD_OFFSETS_TO_TXN_VERSION_MAX: i16 = 4;
/// v3 added the generation, member id and instance id the group checks.
const TXN_OFFSET_COMMIT_VERSION_MAX: i16 = 4;
/// v5 is transaction version 2 (an epoch bump at every EndTxn), not spoken here.
const END_TXN_VERSION_MAX: i16 = 4;
/// Kafka's UNSUPPORTED_FOR_MESSAGE_FORMAT (not in the broker's table: it never sends it).
const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
/// The longest pause between two attempts of a coordinator request.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A partition as the producer keys its queues.
pub(crate) type PartitionKey = (String, i32);

/// A transactional producer's state (Kafka's `TransactionManager.State`).
///
/// ```text
/// Uninitialized ──init_transactions──▶ Initializing ──▶ Ready ◀─────────────────────┐
///       ▲                               │   ▲             │ begin_transaction      │
///       └───── init timed out ──────────┘   │             ▼                        │
///                                           │       InTransaction ──commit──▶ CommittingTransaction
///                       epoch bump after    │        │        │                    │
///                       a failed batch      │   abort│        │a failure  a failure│
///                                           │        ▼        ▼                    ▼
///                                  AbortingTransaction ◀──abort── AbortableError ◀─┘
///
/// any state ──a fatal error──▶ FatalError (final: every call fails with that error)
/// ```
///
/// AbortingTransaction goes to Ready, or through Initializing when the epoch must be
/// bumped; a commit or abort that timed out stays where it was and is resumed by calling it
/// again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionState {
    /// `init_transactions` has not completed.
    Uninitialized,
    /// Taking a producer id and epoch from the coordinator.
    Initializing,
    /// No transaction open: `begin_transaction` may start one.
    Ready,
    /// A transaction is open: sends and `send_offsets_to_transaction` join it.
    InTransaction,
    /// `commit_transaction` is flushing and ending the transaction.
    CommittingTransaction,
    /// `abort_transaction` is dropping what is unsent and ending the transaction.
    AbortingTransaction,
    /// The transaction cannot commit; only `abort_transaction` is allowed.
    AbortableError,
    /// The producer cannot go on.
    FatalError,
}

impl TransactionState {
    /// Whether the producer may move from `self` to `to`: the one table of legal moves.
    pub fn can_move_to(self, to: TransactionState) -> bool {
        use TransactionState::*;
        match to {
            Uninitialized => self == Initializing,
            Initializing => matches!(self, Uninitialized | AbortingTransaction),
            Ready => matches!(
                self,
                Initializing | CommittingTransaction | AbortingTransaction
            ),
            InTransaction => self == Ready,
            // Committing and Aborting again: a call that timed out, resumed.
            CommittingTransaction => matches!(self, InTransaction | CommittingTransaction),
            AbortingTransaction => {
                matches!(self, InTransaction | AbortableError | AbortingTransaction)
            }
            AbortableError => matches!(
                self,
                InTransaction | CommittingTransaction | AbortableError | Initializing
            ),
            FatalError => true,
        }
    }

    /// Kafka's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            TransactionState::Uninitialized => "Uninitialized",
            TransactionState::Initializing => "Initializing",
            TransactionState::Ready => "Ready",
            TransactionState::InTransaction => "InTransaction",
            TransactionState::CommittingTransaction => "CommittingTransaction",
            TransactionState::AbortingTransaction => "AbortingTransaction",
            TransactionState::AbortableError => "AbortableError",
            TransactionState::FatalError => "FatalError",
        }
    }
}

impl std::fmt::Display for TransactionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A transactional producer's state: where it is, what its transaction holds, and the error
/// that stopped it. Lives under the producer's lock; the sender reads which partitions may be
/// sent to, sends and completions tell it of partitions and failures.
#[derive(Debug)]
pub(crate) struct TransactionManager {
    state: TransactionState,
    /// The error of AbortableError or FatalError, as every refused call returns it.
    error: Option<Error>,
    /// Partitions the coordinator has added to the current transaction.
    added: BTreeSet<PartitionKey>,
    /// Partitions with records in the current transaction, not yet added.
    pending: BTreeSet<PartitionKey>,
    /// The coordinator holds something of this transaction (a partition or the group's
    /// offsets): ending it takes an EndTxn. An empty transaction ends without one.
    started: bool,
    /// A batch failed after it took a sequence number: its partition's sequences have a hole,
    /// so the epoch is bumped after the abort.
    epoch_bump_required: bool,
    /// No AddPartitionsToTxn before this (a retriable answer came).
    add_partitions_backoff_until: Option<Instant>,
    /// Since when the pending partitions wait to be added (they fail after the bound).
    add_partitions_waiting_since: Option<Instant>,
    /// The sender's AddPartitionsToTxn is under way: an abort waits for its answer, which
    /// may have put partitions in the transaction.
    adding: bool,
}

impl TransactionManager {
    pub fn new() -> TransactionManager {
        TransactionManager {
            state: TransactionState::Uninitialized,
            error: None,
            added: BTreeSet::new(),
            pending: BTreeSet::new(),
            started: false,
            epoch_bump_required: false,
            add_partitions_backoff_until: None,
            add_partitions_waiting_since: None,
            adding: false,
        }
    }

    pub fn state(&self) -> TransactionState {
        self.state
    }

    /// Moves to `to`, the only place the state changes. A move the table refuses fails with
    /// the producer's stored error when it has one (so a refused call in AbortableError or
    /// FatalError says why the producer stopped), else with [`Error::TransactionState`]
    /// naming `operation`. Entering AbortableError or FatalError stores `error` (classified
    /// as such); FatalError keeps its first error.
    pub fn transition(
        &mut self,
        to: TransactionState,
        operation: &str,
        error: Option<Error>,
    ) -> Result<()> {
        if self.state == TransactionState::FatalError {
            return Err(self.stored_error());
        }
        if !self.state.can_move_to(to) {
            return Err(self.refusal(operation));
        }
        match to {
            TransactionState::FatalError | TransactionState::AbortableError => {
                let kind = if to == TransactionState::FatalError {
                    TransactionErrorKind::Fatal
                } else {
                    TransactionErrorKind::Abortable
                };
                let cause = error.unwrap_or_else(|| Error::Protocol(format!("{operation} failed")));
                // A second abortable error keeps the first: it is the cause of the rest.
                if !(to == TransactionState::AbortableError && self.error.is_some()) {
                    self.error = Some(classified(kind, cause));
                }
                // Nothing more is added to a transaction that can only abort.
                self.pending.clear();
            }
            TransactionState::InTransaction => {
                debug_assert!(self.pending.is_empty() && self.added.is_empty());
                self.started = false;
            }
            TransactionState::Ready | TransactionState::Uninitialized => {
                self.error = None;
                self.added.clear();
                self.pending.clear();
                self.started = false;
                self.add_partitions_backoff_until = None;
                self.add_partitions_waiting_since = None;
            }
            // An abort (and the epoch bump after it) clears the error it mends; what was
            // waiting to be added is dropped with its batches.
            TransactionState::Initializing | TransactionState::AbortingTransaction => {
                self.error = None;
                self.pending.clear();
                self.add_partitions_waiting_since = None;
            }
            TransactionState::CommittingTransaction => {}
        }
        tracing::debug!(from = %self.state, to = %to, operation, "transaction state");
        self.state = to;
        Ok(())
    }

    /// The error a call refused in this state returns.
    fn refusal(&self, operation: &str) -> Error {
        match self.state {
            TransactionState::AbortableError | TransactionState::FatalError => self.stored_error(),
            state => Error::TransactionState {
                operation: operation.to_owned(),
                state: state.name().to_owned(),
            },
        }
    }

    fn stored_error(&self) -> Error {
        self.error
            .clone()
            .unwrap_or_else(|| Error::TransactionState {
                operation: "continue".into(),
                state: self.state.name().to_owned(),
            })
    }

    /// A send (or offsets) may join the transaction only while it is open.
    pub fn check_open(&self, operation: &str) -> Result<()> {
        if self.state == TransactionState::InTransaction {
            Ok(())
        } else {
            Err(self.refusal(operation))
        }
    }

    /// Whether the sender may send the transaction's batches: while it is open or
    /// committing (an abort drops them, a failed transaction fails them).
    pub fn sending(&self) -> bool {
        matches!(
            self.state,
            TransactionState::InTransaction | TransactionState::CommittingTransaction
        )
    }

    /// The sender's AddPartitionsToTxn starts (`true`) or has its answer (`false`).
    pub fn set_adding(&mut self, adding: bool) {
        self.adding = adding;
    }

    /// Whether an AddPartitionsToTxn is under way.
    pub fn adding(&self) -> bool {
        self.adding
    }

    /// The coordinator ended the transaction (EndTxn answered): nothing of it is left.
    pub fn transaction_ended(&mut self) {
        self.added.clear();
        self.pending.clear();
        self.started = false;
    }

    /// A record for `partition` joins the transaction: the partition is added before its
    /// first batch goes.
    pub fn record_for(&mut self, partition: &PartitionKey) {
        if !self.added.contains(partition) && !self.pending.contains(partition) {
            self.pending.insert(partition.clone());
            self.add_partitions_waiting_since
                .get_or_insert_with(Instant::now);
        }
    }

    /// Whether `partition`'s batches may be sent (it is in the transaction).
    pub fn is_added(&self, partition: &PartitionKey) -> bool {
        self.added.contains(partition)
    }

    /// The partitions to add now, if it is time for an AddPartitionsToTxn: some wait, the
    /// transaction is still going, and no backoff holds.
    pub fn partitions_to_add(&self, now: Instant) -> Option<Vec<PartitionKey>> {
        let going = matches!(
            self.state,
            TransactionState::InTransaction | TransactionState::CommittingTransaction
        );
        let waiting = self
            .add_partitions_backoff_until
            .is_some_and(|until| until > now);
        (going && !waiting && !self.pending.is_empty())
            .then(|| self.pending.iter().cloned().collect())
    }

    /// When the next AddPartitionsToTxn is due, while one waits for its backoff.
    pub fn add_partitions_due(&self) -> Option<Instant> {
        self.add_partitions_backoff_until
            .filter(|_| !self.pending.is_empty())
    }

    /// Since when partitions wait to be added.
    pub fn add_partitions_waiting_since(&self) -> Option<Instant> {
        self.add_partitions_waiting_since
    }

    /// The coordinator added `partitions` to the transaction.
    pub fn partitions_added(&mut self, partitions: &[PartitionKey]) {
        for partition in partitions {
            self.pending.remove(partition);
            self.added.insert(partition.clone());
        }
        self.started = true;
        self.add_partitions_backoff_until = None;
        if self.pending.is_empty() {
            self.add_partitions_waiting_since = None;
        }
    }

    /// AddPartitionsToTxn will be tried again at `until`.
    pub fn add_partitions_later(&mut self, until: Instant) {
        self.add_partitions_backoff_until = Some(until);
    }

    /// The coordinator added the group's offsets partition (AddOffsetsToTxn).
    pub fn offsets_added(&mut self) {
        self.started = true;
    }

    /// Whether ending the transaction takes an EndTxn.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Whether the producer epoch must be bumped before the next transaction.
    pub fn epoch_bump_required(&self) -> bool {
        self.epoch_bump_required
    }

    /// A batch that had taken a sequence number will never be stored.
    pub fn sequence_hole(&mut self) {
        self.epoch_bump_required = true;
    }

    /// The epoch was bumped: sequences start again.
    pub fn epoch_bumped(&mut self) {
        self.epoch_bump_required = false;
    }

    /// A batch of the transaction failed for good with `error`: the transaction cannot
    /// commit (or, for a fatal error, the producer cannot go on). While aborting, the failure
    /// changes nothing but the epoch bump.
    pub fn batch_failed(&mut self, error: &Error, took_sequence: bool) {
        if took_sequence {
            self.epoch_bump_required = true;
        }
        let to = match classify(TxnApi::Produce, error) {
            ErrorClass::Fatal => TransactionState::FatalError,
            _ => TransactionState::AbortableError,
        };
        if to == TransactionState::AbortableError
            && matches!(
                self.state,
                TransactionState::AbortingTransaction | TransactionState::AbortableError
            )
        {
            return;
        }
        // A refused move (Ready, Uninitialized: a batch of no transaction) changes nothing.
        let _ = self.transition(to, "send", Some(error.clone()));
    }

    /// A coordinator request of the transaction failed with `error` (already classified by
    /// the request functions, or a timeout): fatal and abortable errors move the state and
    /// are returned as stored; others are returned as they are.
    pub fn request_failed(&mut self, operation: &str, error: Error) -> Error {
        let to = match &error {
            Error::Transaction {
                kind: TransactionErrorKind::Fatal,
                ..
            } => TransactionState::FatalError,
            Error::Transaction {
                kind: TransactionErrorKind::Abortable,
                ..
            } => TransactionState::AbortableError,
            _ => return error,
        };
        let cause = match error {
            Error::Transaction { cause, .. } => *cause,
            other => other,
        };
        match self.transition(to, operation, Some(cause.clone())) {
            Ok(()) => self.stored_error(),
            // Not a state that can take it (an abortable error while aborting): said as is.
            Err(_) => classified(TransactionErrorKind::Abortable, cause),
        }
    }

    /// The error of AbortableError or FatalError, when the producer is in one.
    pub fn error(&self) -> Option<Error> {
        matches!(
            self.state,
            TransactionState::AbortableError | TransactionState::FatalError
        )
        .then(|| self.stored_error())
    }
}

/// `cause` as a transactional error of `kind` (kept as it is when already classified).
pub(crate) fn classified(kind: TransactionErrorKind, cause: Error) -> Error {
    match cause {
        already @ Error::Transaction { .. } => already,
        cause => Error::Transaction {
            kind,
            cause: Box::new(cause),
        },
    }
}

/// The requests a transactional producer makes, for [`classify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnApi {
    InitProducerId,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    TxnOffsetCommit,
    EndTxnCommit,
    EndTxnAbort,
    /// A batch that failed for good (after the producer's own retries).
    Produce,
}

/// What an error asks of a transactional producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// Try the same request again after a pause.
    Retry,
    /// Find the coordinator again, then retry.
    FindCoordinator,
    /// The transaction must abort.
    Abortable,
    /// The producer cannot go on.
    Fatal,
}

/// How a transactional producer treats `error` from `api`: the one table, after Kafka's
/// producer (its `TransactionManager` handlers, KIP-360, KIP-588, KIP-890).
pub(crate) fn classify(api: TxnApi, error: &Error) -> ErrorClass {
    use ErrorClass::*;
    let coordinator_request = api != TxnApi::Produce;
    let code = match error {
        Error::Transaction {
            kind: TransactionErrorKind::Fatal,
            ..
        } => return Fatal,
        Error::Transaction {
            kind: TransactionErrorKind::Abortable,
            ..
        } => return Abortable,
        Error::UnsupportedVersion { .. } => return Fatal,
        // The coordinator's connection failed or did not answer: find it again.
        Error::Connect { .. }
        | Error::NoBrokerReachable { .. }
        | Error::Disconnected { .. }
        | Error::Timeout { .. }
            if coordinator_request =>
        {
            return FindCoordinator;
        }
        Error::Kafka { code, .. } => *code,
        _ if coordinator_request && api != TxnApi::EndTxnAbort => return Abortable,
        _ if api == TxnApi::Produce => return Abortable,
        _ => return Fatal,
    };
    match code {
        errors::PRODUCER_FENCED
        | errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        | errors::CLUSTER_AUTHORIZATION_FAILED
        | errors::UNSUPPORTED_VERSION
        | UNSUPPORTED_FOR_MESSAGE_FORMAT
        | errors::INVALID_TRANSACTION_TIMEOUT
        | errors::TRANSACTION_COORDINATOR_FENCED => Fatal,
        // KIP-588: a Produce answer's INVALID_PRODUCER_EPOCH may follow a timeout's epoch
        // bump by the coordinator; the abort then tells whether the producer is fenced.
        errors::INVALID_PRODUCER_EPOCH if api == TxnApi::Produce => Abortable,
        errors::INVALID_PRODUCER_EPOCH => Fatal,
        _ if api == TxnApi::Produce => Abortable,
        errors::NOT_COORDINATOR | errors::COORDINATOR_NOT_AVAILABLE => FindCoordinator,
        errors::COORDINATOR_LOAD_IN_PROGRESS
        | errors::CONCURRENT_TRANSACTIONS
        | errors::REQUEST_TIMED_OUT
        | errors::NETWORK_EXCEPTION
        | errors::UNKNOWN_TOPIC_OR_PARTITION
        | errors::UNSTABLE_OFFSET_COMMIT => Retry,
        // An abort the coordinator cannot make is not one the producer can retry.
        errors::INVALID_TXN_STATE if api == TxnApi::EndTxnAbort => Fatal,
        _ => match api {
            // The producer id is the first thing: nothing to abort yet.
            TxnApi::InitProducerId | TxnApi::EndTxnAbort => Fatal,
            // TRANSACTION_ABORTABLE, INVALID_TXN_STATE, a refused topic or group, a member
            // of an older generation, OPERATION_NOT_ATTEMPTED, INVALID_PRODUCER_ID_MAPPING...
            _ => Abortable,
        },
    }
}

/// A coordinator (a transactional id's or a group's), found with FindCoordinator when first
/// needed and again after it moved.
pub(crate) struct Coordinator {
    key_type: i8,
    key: String,
    addr: Mutex<Option<String>>,
}

impl Coordinator {
    pub fn new(key_type: i8, key: &str) -> Coordinator {
        Coordinator {
            key_type,
            key: key.to_owned(),
            addr: Mutex::new(None),
        }
    }

    /// The coordinator's connection, finding it first when unknown.
    pub async fn connection(&self, cluster: &Cluster) -> Result<Arc<Connection>> {
        let known = self.addr.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let addr = match known {
            Some(addr) => addr,
            None => {
                let (_, addr) = find_coordinator(cluster, self.key_type, &self.key).await?;
                *self.addr.lock().unwrap_or_else(|p| p.into_inner()) = Some(addr.clone());
                addr
            }
        };
        match cluster.connection_to(&addr).await {
            Ok(connection) => Ok(connection),
            Err(error) => {
                self.forget(cluster);
                Err(error)
            }
        }
    }

    /// The coordinator moved or failed: find it again next time.
    pub fn forget(&self, cluster: &Cluster) {
        if let Some(addr) = self.addr.lock().unwrap_or_else(|p| p.into_inner()).take() {
            cluster.forget(&addr);
        }
    }
}

/// FindCoordinator for `key` of `key_type` (0 a group, 1 a transactional id): the
/// coordinator's node id and `host:port`.
pub(crate) async fn find_coordinator(
    cluster: &Cluster,
    key_type: i8,
    key: &str,
) -> Result<(i32, String)> {
    let request = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(key.to_owned()))
        .with_key_type(key_type);
    let connection = cluster.any().await?;
    let response = match connection
        .send_at_most(&request, FIND_COORDINATOR_VERSION_MAX)
        .await
    {
        Ok(response) => response,
        Err(error) => {
            cluster.forget(connection.addr());
            return Err(error);
        }
    };
    let what = if key_type == KEY_TYPE_TRANSACTION {
        format!("coordinator of transactional id {key}")
    } else {
        format!("coordinator of group {key}")
    };
    if let Some(error) = Error::kafka(response.error_code, what, response.error_message.as_deref())
    {
        return Err(error);
    }
    Ok((
        response.node_id.0,
        format!("{}:{}", response.host.as_str(), response.port),
    ))
}

/// The attempts of one coordinator request: retried as [`classify`] says until `deadline`.
pub(crate) struct Attempts {
    api: TxnApi,
    what: String,
    started: Instant,
    deadline: Instant,
    backoff: Duration,
}

impl Attempts {
    /// Attempts of `api` (said as `what` in a timeout) for at most `bound`, pausing from
    /// `backoff` (doubling up to a second) between them.
    pub fn new(api: TxnApi, what: String, bound: Duration, backoff: Duration) -> Attempts {
        let started = Instant::now();
        Attempts {
            api,
            what,
            started,
            deadline: started + bound,
            backoff: backoff.max(Duration::from_millis(10)),
        }
    }

    /// After an attempt failed with `error`: `Ok` to try again (after a pause, having
    /// forgotten the coordinator when it moved), or the error to return — classified as
    /// fatal or abortable, or a timeout naming the last error.
    pub async fn after_failure(
        &mut self,
        error: Error,
        coordinator: &Coordinator,
        cluster: &Cluster,
    ) -> Result<()> {
        let class = classify(self.api, &error);
        match class {
            ErrorClass::Fatal => return Err(classified(TransactionErrorKind::Fatal, error)),
            ErrorClass::Abortable => {
                return Err(classified(TransactionErrorKind::Abortable, error));
            }
            ErrorClass::FindCoordinator => coordinator.forget(cluster),
            ErrorClass::Retry => {}
        }
        if Instant::now() + self.backoff >= self.deadline {
            return Err(Error::Timeout {
                what: format!("{} (last error: {error})", self.what),
                after: self.started.elapsed(),
            });
        }
        tracing::debug!(api = ?self.api, %error, "retrying a transaction request");
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(RETRY_BACKOFF_MAX);
        Ok(())
    }
}

/// A producer id and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// What every transaction request names.
pub(crate) struct TxnIdentity<'a> {
    pub cluster: &'a Cluster,
    pub coordinator: &'a Coordinator,
    pub transactional_id: &'a str,
    pub bound: Duration,
    pub backoff: Duration,
}

impl TxnIdentity<'_> {
    fn transactional_id(&self) -> TransactionalId {
        TransactionalId(StrBytes::from_string(self.transactional_id.to_owned()))
    }

    fn attempts(&self, api: TxnApi, what: &str) -> Attempts {
        Attempts::new(
            api,
            format!("{what} for transactional id {}", self.transactional_id),
            self.bound,
            self.backoff,
        )
    }

    /// InitProducerId with the transactional id: the producer id and its (bumped) epoch.
    /// `current` is the producer's id and epoch when it has them (KIP-360: the coordinator
    /// then bumps that epoch rather than fencing it).
    pub async fn init_producer_id(
        &self,
        transaction_timeout_ms: i32,
        current: Option<ProducerIdAndEpoch>,
    ) -> Result<ProducerIdAndEpoch> {
        let current = current.unwrap_or(ProducerIdAndEpoch {
            producer_id: -1,
            producer_epoch: -1,
        });
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(self.transactional_id()))
            .with_transaction_timeout_ms(transaction_timeout_ms)
            .with_producer_id(ProducerId(current.producer_id))
            .with_producer_epoch(current.producer_epoch);
        let mut attempts = self.attempts(TxnApi::InitProducerId, "InitProducerId");
        loop {
            let outcome = async {
                let connection = self.coordinator.connection(self.cluster).await?;
                let response = connection
                    .send_at_most(&request, INIT_PRODUCER_ID_VERSION_MAX)
                    .await?;
                check(
                    response.error_code,
                    format!(
                        "InitProducerId of transactional id {}",
                        self.transactional_id
                    ),
                )?;
                Ok(ProducerIdAndEpoch {
                    producer_id: response.producer_id.0,
                    producer_epoch: response.producer_epoch,
                })
            }
            .await;
            match outcome {
                Ok(producer) => return Ok(producer),
                Err(error) => {
                    attempts
                        .after_failure(error, self.coordinator, self.cluster)
                        .await?
                }
            }
        }
    }

    /// AddPartitionsToTxn: `partitions` join the transaction (all or none, as Kafka's
    /// coordinator answers OPERATION_NOT_ATTEMPTED for the rest when one fails). One attempt:
    /// the sender retries at its own pace.
    pub async fn add_partitions(
        &self,
        producer: ProducerIdAndEpoch,
        partitions: &[PartitionKey],
    ) -> Result<()> {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (topic, partition) in partitions {
            topics.entry(topic.as_str()).or_default().push(*partition);
        }
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(self.transactional_id())
            .with_v3_and_below_producer_id(ProducerId(producer.producer_id))
            .with_v3_and_below_producer_epoch(producer.producer_epoch)
            .with_v3_and_below_topics(
                topics
                    .into_iter()
                    .map(|(topic, partitions)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(topic_name(topic))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let connection = self.coordinator.connection(self.cluster).await?;
        let response = connection
            .send_at_most(&request, ADD_PARTITIONS_TO_TXN_VERSION_MAX)
            .await?;
        check(
            response.error_code,
            format!(
                "AddPartitionsToTxn of transactional id {}",
                self.transactional_id
            ),
        )?;
        let mut deciding: Option<(i16, String)> = None;
        for topic in &response.results_by_topic_v3_and_below {
            for result in &topic.results_by_partition {
                let code = result.partition_error_code;
                let weaker = match &deciding {
                    None => true,
                    // OPERATION_NOT_ATTEMPTED only says another partition failed.
                    Some((held, _)) => {
                        *held == errors::OPERATION_NOT_ATTEMPTED
                            && code != errors::OPERATION_NOT_ATTEMPTED
                    }
                };
                if code != errors::NONE && weaker {
                    deciding = Some((
                        code,
                        format!("{}-{}", topic.name.as_str(), result.partition_index),
                    ));
                }
            }
        }
        match deciding {
            Some((code, partition)) => Err(Error::from_code(
                code,
                format!(
                    "adding partition {partition} to the transaction of {}",
                    self.transactional_id
                ),
                None,
            )),
            None => Ok(()),
        }
    }

    /// AddOffsetsToTxn: the group's offsets partition joins the transaction.
    pub async fn add_offsets(&self, producer: ProducerIdAndEpoch, group_id: &str) -> Result<()> {
        let request = AddOffsetsToTxnRequest::default()
            .with_transactional_id(self.transactional_id())
            .with_producer_id(ProducerId(producer.producer_id))
            .with_producer_epoch(producer.producer_epoch)
            .with_group_id(GroupId(StrBytes::from_string(group_id.to_owned())));
        let mut attempts = self.attempts(TxnApi::AddOffsetsToTxn, "AddOffsetsToTxn");
        loop {
            let outcome = async {
                let connection = self.coordinator.connection(self.cluster).await?;
                let response = connection
                    .send_at_most(&request, ADD_OFFSETS_TO_TXN_VERSION_MAX)
                    .await?;
                check(
                    response.error_code,
                    format!(
                        "adding the offsets of group {group_id} to the transaction of {}",
                        self.transactional_id
                    ),
                )
            }
            .await;
            match outcome {
                Ok(()) => return Ok(()),
                Err(error) => {
                    attempts
                        .after_failure(error, self.coordinator, self.cluster)
                        .await?
                }
            }
        }
    }

    /// TxnOffsetCommit to the group's coordinator: the offsets, committed with the
    /// transaction, as the member `group` describes.
    pub async fn txn_offset_commit(
        &self,
        producer: ProducerIdAndEpoch,
        group: &ConsumerGroupMetadata,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<()> {
        let mut topics: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
        for (tp, offset) in offsets {
            topics.entry(tp.topic.as_str()).or_default().push(
                TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(tp.partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(StrBytes::from_static_str(""))),
            );
        }
        let request = TxnOffsetCommitRequest::default()
            .with_transactional_id(self.transactional_id())
            .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())))
            .with_producer_id(ProducerId(producer.producer_id))
            .with_producer_epoch(producer.producer_epoch)
            .with_generation_id(group.generation_id)
            .with_member_id(StrBytes::from_string(group.member_id.clone()))
            .with_group_instance_id(group.group_instance_id.clone().map(StrBytes::from_string))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(topic, partitions)| {
                        TxnOffsetCommitRequestTopic::default()
                            .with_name(topic_name(topic))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let group_coordinator = Coordinator::new(KEY_TYPE_GROUP, &group.group_id);
        let mut attempts = Attempts::new(
            TxnApi::TxnOffsetCommit,
            format!(
                "TxnOffsetCommit of group {} for transactional id {}",
                group.group_id, self.transactional_id
            ),
            self.bound,
            self.backoff,
        );
        loop {
            let outcome = async {
                let connection = group_coordinator.connection(self.cluster).await?;
                let response = connection
                    .send_at_most(&request, TXN_OFFSET_COMMIT_VERSION_MAX)
                    .await?;
                for topic in &response.topics {
                    for partition in &topic.partitions {
                        check(
                            partition.error_code,
                            format!(
                                "transactional commit of {}-{} for group {}",
                                topic.name.as_str(),
                                partition.partition_index,
                                group.group_id
                            ),
                        )?;
                    }
                }
                Ok(())
            }
            .await;
            match outcome {
                Ok(()) => return Ok(()),
                Err(error) => {
                    attempts
                        .after_failure(error, &group_coordinator, self.cluster)
                        .await?
                }
            }
        }
    }

    /// EndTxn: commits (`commit`) or aborts the transaction; the coordinator then writes the
    /// markers.
    pub async fn end_txn(&self, producer: ProducerIdAndEpoch, commit: bool) -> Result<()> {
        let request = EndTxnRequest::default()
            .with_transactional_id(self.transactional_id())
            .with_producer_id(ProducerId(producer.producer_id))
            .with_producer_epoch(producer.producer_epoch)
            .with_committed(commit);
        let (api, what) = if commit {
            (TxnApi::EndTxnCommit, "EndTxn (commit)")
        } else {
            (TxnApi::EndTxnAbort, "EndTxn (abort)")
        };
        let mut attempts = self.attempts(api, what);
        loop {
            let outcome = async {
                let connection = self.coordinator.connection(self.cluster).await?;
                let response = connection
                    .send_at_most(&request, END_TXN_VERSION_MAX)
                    .await?;
                check(
                    response.error_code,
                    format!("{what} of transactional id {}", self.transactional_id),
                )
            }
            .await;
            match outcome {
                Ok(()) => return Ok(()),
                Err(error) => {
                    attempts
                        .after_failure(error, self.coordinator, self.cluster)
                        .await?
                }
            }
        }
    }
}

fn check(code: i16, context: String) -> Result<()> {
    match Error::kafka(code, context, None) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use TransactionState::*;

    const ALL: [TransactionState; 8] = [
        Uninitialized,
        Initializing,
        Ready,
        InTransaction,
        CommittingTransaction,
        AbortingTransaction,
        AbortableError,
        FatalError,
    ];

    fn kafka(code: i16) -> Error {
        Error::from_code(code, "test", None)
    }

    fn in_state(state: TransactionState) -> TransactionManager {
        let mut manager = TransactionManager::new();
        manager.state = state;
        if matches!(state, AbortableError | FatalError) {
            let kind = if state == FatalError {
                TransactionErrorKind::Fatal
            } else {
                TransactionErrorKind::Abortable
            };
            manager.error = Some(classified(kind, kafka(errors::INVALID_TXN_STATE)));
        }
        manager
    }

    /// The table of legal moves, written out: Kafka's, plus the resumptions of a commit or
    /// abort that timed out and the return to Uninitialized of an init that did.
    #[test]
    fn only_the_moves_of_the_table_are_allowed() {
        let allowed: &[(TransactionState, TransactionState)] = &[
            (Uninitialized, Initializing),
            (Initializing, Uninitialized),
            (Initializing, Ready),
            (Initializing, AbortableError),
            (Ready, InTransaction),
            (InTransaction, CommittingTransaction),
            (InTransaction, AbortingTransaction),
            (InTransaction, AbortableError),
            (CommittingTransaction, CommittingTransaction),
            (CommittingTransaction, Ready),
            (CommittingTransaction, AbortableError),
            (AbortingTransaction, AbortingTransaction),
            (AbortingTransaction, Ready),
            (AbortingTransaction, Initializing),
            (AbortableError, AbortingTransaction),
            (AbortableError, AbortableError),
        ];
        for from in ALL {
            for to in ALL {
                let expected = to == FatalError || allowed.contains(&(from, to));
                assert_eq!(from.can_move_to(to), expected, "{from} -> {to}");
                let mut manager = in_state(from);
                let moved = manager
                    .transition(to, "test", Some(kafka(errors::PRODUCER_FENCED)))
                    .is_ok();
                // FatalError is final, whatever the table says of it.
                assert_eq!(moved, expected && from != FatalError, "{from} -> {to}");
                assert_eq!(manager.state(), if moved { to } else { from });
            }
        }
    }

    #[test]
    fn a_fatal_error_is_returned_by_every_later_call() {
        let mut manager = in_state(InTransaction);
        manager
            .transition(FatalError, "send", Some(kafka(errors::PRODUCER_FENCED)))
            .expect("any state may become fatal");
        for (to, operation) in [
            (Ready, "init_transactions"),
            (InTransaction, "begin_transaction"),
            (CommittingTransaction, "commit_transaction"),
            (AbortingTransaction, "abort_transaction"),
        ] {
            let error = manager
                .transition(to, operation, None)
                .expect_err("fatal is final");
            assert!(error.is_fatal(), "{operation}: {error}");
            assert_eq!(
                match &error {
                    Error::Transaction { cause, .. } => cause.code(),
                    _ => None,
                },
                Some(errors::PRODUCER_FENCED)
            );
        }
        let error = manager.check_open("send").expect_err("no sends");
        assert!(error.is_fatal() && error.to_string().starts_with("PRODUCER_FENCED"));
        // A later fatal error does not replace the first.
        let _ = manager.transition(FatalError, "x", Some(kafka(errors::UNSUPPORTED_VERSION)));
        assert!(
            manager
                .error()
                .is_some_and(|e| e.to_string().contains("PRODUCER_FENCED"))
        );
    }

    #[test]
    fn an_abortable_error_allows_only_abort_and_keeps_its_first_cause() {
        let mut manager = in_state(InTransaction);
        manager.record_for(&("t".into(), 0));
        manager.batch_failed(&kafka(errors::TOPIC_AUTHORIZATION_FAILED), true);
        assert_eq!(manager.state(), AbortableError);
        assert!(manager.epoch_bump_required());
        assert!(manager.partitions_to_add(Instant::now()).is_none());
        manager.batch_failed(&kafka(errors::REQUEST_TIMED_OUT), false);
        let error = manager.check_open("send").expect_err("refused");
        assert!(error.is_abortable(), "{error}");
        assert!(
            error.to_string().starts_with("TOPIC_AUTHORIZATION_FAILED"),
            "{error}"
        );
        let commit = manager
            .transition(CommittingTransaction, "commit_transaction", None)
            .expect_err("no commit");
        assert!(commit.is_abortable());
        manager
            .transition(AbortingTransaction, "abort_transaction", None)
            .expect("abort");
        // A batch failing while the abort drops the rest changes nothing.
        manager.batch_failed(&kafka(errors::NOT_ENOUGH_REPLICAS), true);
        assert_eq!(manager.state(), AbortingTransaction);
        manager
            .transition(Initializing, "abort_transaction", None)
            .expect("epoch bump");
        manager.epoch_bumped();
        manager
            .transition(Ready, "abort_transaction", None)
            .expect("ready");
        assert!(manager.error().is_none() && !manager.epoch_bump_required());
    }

    #[test]
    fn calls_out_of_order_name_the_state_and_what_to_do() {
        let manager = in_state(Ready);
        let error = manager.check_open("send").expect_err("no transaction");
        assert!(!error.is_fatal() && !error.is_abortable());
        assert_eq!(
            error.to_string(),
            "cannot send in transaction state Ready; call begin_transaction first"
        );
        let mut manager = in_state(Uninitialized);
        let error = manager
            .transition(InTransaction, "begin_transaction", None)
            .expect_err("not initialized");
        assert_eq!(
            error.to_string(),
            "cannot begin_transaction in transaction state Uninitialized; call init_transactions first"
        );
    }

    #[test]
    fn partitions_are_added_once_and_a_backoff_holds_the_next_attempt() {
        let mut manager = in_state(Ready);
        manager
            .transition(InTransaction, "begin", None)
            .expect("begin");
        assert!(!manager.started());
        let (a, b) = (("t".to_string(), 0), ("t".to_string(), 1));
        manager.record_for(&a);
        manager.record_for(&a);
        manager.record_for(&b);
        let now = Instant::now();
        assert_eq!(
            manager.partitions_to_add(now),
            Some(vec![a.clone(), b.clone()])
        );
        manager.add_partitions_later(now + Duration::from_millis(50));
        assert_eq!(manager.partitions_to_add(now), None);
        assert_eq!(
            manager.add_partitions_due(),
            Some(now + Duration::from_millis(50))
        );
        manager.partitions_added(&[a.clone(), b.clone()]);
        assert!(manager.is_added(&a) && manager.is_added(&b) && manager.started());
        manager.record_for(&a);
        assert_eq!(manager.partitions_to_add(now), None, "already added");
        assert!(manager.add_partitions_waiting_since().is_none());
        manager
            .transition(CommittingTransaction, "commit", None)
            .expect("commit");
        manager.transition(Ready, "commit", None).expect("done");
        assert!(!manager.is_added(&a) && !manager.started());
    }

    #[test]
    fn errors_are_classified_as_kafkas_producer_does() {
        use ErrorClass::*;
        let cases: &[(TxnApi, i16, ErrorClass)] = &[
            (
                TxnApi::InitProducerId,
                errors::COORDINATOR_LOAD_IN_PROGRESS,
                Retry,
            ),
            (
                TxnApi::InitProducerId,
                errors::CONCURRENT_TRANSACTIONS,
                Retry,
            ),
            (
                TxnApi::InitProducerId,
                errors::NOT_COORDINATOR,
                FindCoordinator,
            ),
            (
                TxnApi::InitProducerId,
                errors::COORDINATOR_NOT_AVAILABLE,
                FindCoordinator,
            ),
            (TxnApi::InitProducerId, errors::PRODUCER_FENCED, Fatal),
            (
                TxnApi::InitProducerId,
                errors::INVALID_PRODUCER_EPOCH,
                Fatal,
            ),
            (
                TxnApi::InitProducerId,
                errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                Fatal,
            ),
            (
                TxnApi::InitProducerId,
                errors::INVALID_TRANSACTION_TIMEOUT,
                Fatal,
            ),
            (TxnApi::InitProducerId, errors::INVALID_REQUEST, Fatal),
            (
                TxnApi::AddPartitionsToTxn,
                errors::CONCURRENT_TRANSACTIONS,
                Retry,
            ),
            (
                TxnApi::AddPartitionsToTxn,
                errors::UNKNOWN_TOPIC_OR_PARTITION,
                Retry,
            ),
            (
                TxnApi::AddPartitionsToTxn,
                errors::TOPIC_AUTHORIZATION_FAILED,
                Abortable,
            ),
            (
                TxnApi::AddPartitionsToTxn,
                errors::INVALID_TXN_STATE,
                Abortable,
            ),
            (
                TxnApi::AddPartitionsToTxn,
                errors::OPERATION_NOT_ATTEMPTED,
                Abortable,
            ),
            (TxnApi::AddPartitionsToTxn, errors::PRODUCER_FENCED, Fatal),
            (
                TxnApi::AddOffsetsToTxn,
                errors::GROUP_AUTHORIZATION_FAILED,
                Abortable,
            ),
            (
                TxnApi::AddOffsetsToTxn,
                errors::TRANSACTION_ABORTABLE,
                Abortable,
            ),
            (
                TxnApi::TxnOffsetCommit,
                errors::ILLEGAL_GENERATION,
                Abortable,
            ),
            (
                TxnApi::TxnOffsetCommit,
                errors::UNKNOWN_MEMBER_ID,
                Abortable,
            ),
            (
                TxnApi::TxnOffsetCommit,
                errors::FENCED_INSTANCE_ID,
                Abortable,
            ),
            (
                TxnApi::TxnOffsetCommit,
                errors::NOT_COORDINATOR,
                FindCoordinator,
            ),
            (
                TxnApi::EndTxnCommit,
                errors::TRANSACTION_ABORTABLE,
                Abortable,
            ),
            (TxnApi::EndTxnCommit, errors::INVALID_TXN_STATE, Abortable),
            (TxnApi::EndTxnCommit, errors::CONCURRENT_TRANSACTIONS, Retry),
            (TxnApi::EndTxnCommit, errors::INVALID_PRODUCER_EPOCH, Fatal),
            (TxnApi::EndTxnAbort, errors::INVALID_TXN_STATE, Fatal),
            (TxnApi::EndTxnAbort, errors::UNKNOWN_SERVER_ERROR, Fatal),
            (TxnApi::Produce, errors::INVALID_PRODUCER_EPOCH, Abortable),
            (TxnApi::Produce, errors::NOT_COORDINATOR, Abortable),
            (
                TxnApi::Produce,
                errors::OUT_OF_ORDER_SEQUENCE_NUMBER,
                Abortable,
            ),
            (TxnApi::Produce, errors::PRODUCER_FENCED, Fatal),
            (
                TxnApi::Produce,
                errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                Fatal,
            ),
        ];
        for &(api, code, expected) in cases {
            assert_eq!(
                classify(api, &kafka(code)),
                expected,
                "{api:?} {}",
                errors::name(code)
            );
        }
        let lost = Error::Disconnected {
            addr: "a:1".into(),
            reason: "reset".into(),
        };
        assert_eq!(classify(TxnApi::EndTxnCommit, &lost), FindCoordinator);
        assert_eq!(classify(TxnApi::Produce, &lost), Abortable);
        assert_eq!(
            classify(TxnApi::Produce, &Error::TransactionAborted),
            Abortable
        );
    }

    #[test]
    fn a_coordinator_error_moves_the_state_once_classified() {
        let mut manager = in_state(InTransaction);
        let error = manager.request_failed(
            "send_offsets_to_transaction",
            classified(
                TransactionErrorKind::Abortable,
                kafka(errors::ILLEGAL_GENERATION),
            ),
        );
        assert!(error.is_abortable());
        assert_eq!(manager.state(), AbortableError);
        let timeout = Error::Timeout {
            what: "x".into(),
            after: Duration::from_secs(1),
        };
        let mut manager = in_state(CommittingTransaction);
        let error = manager.request_failed("commit_transaction", timeout);
        assert!(matches!(error, Error::Timeout { .. }));
        assert_eq!(manager.state(), CommittingTransaction, "resumed by a retry");
        let error = manager.request_failed(
            "commit_transaction",
            classified(TransactionErrorKind::Fatal, kafka(errors::PRODUCER_FENCED)),
        );
        assert!(error.is_fatal());
        assert_eq!(manager.state(), FatalError);
    }
}
