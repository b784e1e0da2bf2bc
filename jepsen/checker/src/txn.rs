//! The checks of the transactional workload: Jepsen's Kafka queue workload with transactions
//! (Kingsbury's 2022 Redpanda analysis, and `jepsen.tests.kafka`). Every client process has a
//! transactional producer and a read_committed consumer; an operation is one transaction of
//! micro-ops (`send` a unique value to a key, `poll` what the consumer returns), committed or
//! aborted. Consume-transform-produce transactions read from a consumer group, write one
//! derived value per record read and commit the group's offsets in the transaction.
//!
//! # History format (transactional events)
//! ```text
//! {"process":4,"type":"ok","f":"txn-init","value":"jepsen-txn-2"}
//! {"process":4,"type":"invoke","f":"txn","txn":{"transactional_id":"jepsen-txn-2","seq":7,
//!   "mops":[{"f":"send","key":"txn-a-1","value":4000000012},{"f":"poll"}]}}
//! {"process":4,"type":"invoke","f":"txn-commit","txn":{"transactional_id":"jepsen-txn-2",
//!   "seq":7,"commit_ns":90,"mops":[{"f":"send","key":"txn-a-1","value":4000000012,
//!   "offset":41,"invoked_ns":50}]}}
//! {"process":4,"type":"ok","f":"txn","txn":{"transactional_id":"jepsen-txn-2","seq":7,
//!   "commit_ns":90,"mops":[{"f":"send","key":"txn-a-1","value":4000000012,"offset":41,
//!   "invoked_ns":50},{"f":"poll","reads":{"txn-b-0":[[3,1000000001]]},"completed_ns":70}]}}
//! {"process":5,"type":"ok","f":"txn","txn":{..."mops":[{"f":"poll",...},{"f":"send",...},
//!   {"f":"send-offsets","group":"jepsen-txn","offsets":{"txn-a-0":12}}]}}
//! {"process":4,"type":"info","f":"txn-fenced","value":"..."}
//! {"process":6,"type":"ok","f":"assign","partitions":["txn-a-0"],"value":"rebalance"}
//! {"process":9,"type":"ok","f":"assign","value":"final"}
//! ```
//! - A transaction is invoked (`invoke`, `f: txn`) with the micro-ops it will run: the sends
//!   with their values (a consume-transform-produce transaction logs its invocation after its
//!   poll, when it knows what it will send). Right before `commit_transaction` the client logs
//!   `txn-commit` with the sends and their offsets and `commit_ns`, the time the commit
//!   began. The completion carries every micro-op: sends with the offset their delivery
//!   report gave (`null` if none came) and the time the send was invoked; polls with what they
//!   returned and the time they returned; `send-offsets` with the group offsets committed.
//! - `ok`: committed. `fail`: definitely not committed: aborted, or failed (fenced, an
//!   abortable error) before `commit_transaction` was ever invoked. A transaction commits only
//!   when its producer asks it to, so one that never asked cannot. `info`: the commit was
//!   invoked and did not succeed (a timeout, a fatal error): unknown.
//! - A transaction with an invocation but no completion was cut short by a crash (os._exit
//!   or kill -9): `info` if its `txn-commit` was logged, else `fail`; its micro-ops are the
//!   polls of its invocation and the sends and `send-offsets` of its `txn-commit`.
//! - An `assign` starts a new read epoch for its process: the consumer was (re)assigned, or
//!   rewound to the group's committed offsets after an abort, and may jump. The final reader
//!   logs an `assign` with value `final`, then `poll` events taking every key to its end.
//! - `txn-init` (a producer's `init_transactions`), `txn-fenced` (a producer learned it was
//!   fenced by a newer one with its transactional id), `txn-crash` and `txn-fence` (the
//!   harness killed a client, or started one with a live client's transactional id) are
//!   counted, not checked.
//!
//! A transaction is committed when it is `ok`, or `info` and some read saw one of its values.
//! Reads are those of every transaction (committed or not: a consumer's reads happen whatever
//! becomes of its transaction) and of the final reader's polls.
//!
//! # Anomalies
//! - `G1a` (aborted read): a read saw a value whose transaction is `fail`.
//! - `G1b` (intermediate read): a read saw a value that its transaction later followed with
//!   another send to the same key, and the read returned before that later send was even
//!   invoked: it saw the transaction's intermediate state of the key. (Jepsen's structural form,
//!   a poll ending between two of a transaction's records in a key, is allowed: a poll returns
//!   a bounded number of records and read_committed promises no more than that a record is
//!   read only once its transaction committed.)
//! - `precommitted-read`: a read saw a value before its transaction committed: the read
//!   returned before the writer's `commit_transaction` was invoked (read_committed consumers
//!   never see uncommitted records); a transaction reading its own write is one.
//! - `G1c` (cyclic information flow): a cycle of write-read dependencies (T1 wrote a value T2
//!   read) between committed transactions; `G1c-realtime`: a cycle of write-read dependencies
//!   and real-time order (T1 was acknowledged before T2 was invoked), with no cycle of
//!   write-read dependencies alone. Under read_committed, each such edge orders the two
//!   commits, so no cycle can exist.
//! - `torn-transaction`: a reader (one process's reads between two `assign`s) saw some of a
//!   committed transaction's values, and not another of its sends though it read the key on
//!   both sides of that send's offset (or, for the final reader, which reads every key from
//!   its start, at all).
//! - `double-consume` (exactly-once): one input record was consumed by two committed
//!   consume-transform-produce transactions of the group (each commits the group's offsets
//!   past the records it read).
//! - `consume-skip` (exactly-once): a committed input record below the group's highest
//!   committed offset of its key was consumed by no committed transaction.
//! - `lost-write`, `unseen`, `duplicate`, `inconsistent-offsets`, skips and backward polls are
//!   the queue checks of the crate root, run over the transactions' sends and reads.
//!
//! # Allowed (reported, not anomalies)
//! As Jepsen's Kafka checker does, write-write dependencies (T1's value precedes T2's in a
//! key's offset order) are inferred but their cycles allowed: Kafka's transactions do not
//! isolate writes, so two transactions writing two keys in opposite orders form a write cycle.
//! `G0` counts cycles of write-write dependencies, `G1c-with-ww` cycles of write-write and
//! write-read dependencies through a write-read one.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{EXAMPLES_MAX, Event, Found};

/// A transaction as a client logged it.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct Txn {
    pub transactional_id: String,
    /// The transaction's number within its process.
    pub seq: u64,
    #[serde(default)]
    pub mops: Vec<Mop>,
    /// When `commit_transaction` was invoked; `None` if it never was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The checker's own: the transaction was cut short by a crash (no completion was logged;
    /// see `with_effects`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_short: bool,
}

/// A micro-op of a transaction.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "f", rename_all = "kebab-case")]
pub enum Mop {
    /// A record sent: its offset from the delivery report (`None` before or without one), and
    /// when the send was invoked (0 in an invocation).
    Send {
        key: String,
        value: i64,
        #[serde(default)]
        offset: Option<i64>,
        #[serde(default)]
        invoked_ns: u64,
    },
    /// What one poll of the consumer returned, per key `(offset, value)`, and when it returned.
    Poll {
        #[serde(default)]
        reads: BTreeMap<String, Vec<(i64, i64)>>,
        #[serde(default)]
        completed_ns: u64,
    },
    /// The group offsets committed in the transaction (the next offset to read, per key).
    SendOffsets {
        group: String,
        offsets: BTreeMap<String, i64>,
    },
}

/// What a history shows of its transactions, for the report.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TxnReport {
    /// Transactions by outcome: `ok`, `fail`, `info`.
    pub committed: usize,
    pub aborted: usize,
    pub unknown: usize,
    /// `info` transactions that reads show committed.
    pub unknown_found_committed: usize,
    /// Transactions cut short by a crash (counted among `aborted` or `unknown` as well).
    pub crashed: usize,
    /// Committed consume-transform-produce transactions.
    pub consume_transform_produce_committed: usize,
    pub producer_inits: usize,
    pub producers_fenced: usize,
    /// Fencings the harness caused (a client started with a live client's transactional id).
    pub fencings_started: usize,
    pub reads_checked: usize,
    /// Dependency cycles Kafka's transactions allow (see the module's documentation).
    pub allowed: BTreeMap<String, usize>,
    pub allowed_examples: BTreeMap<String, Vec<Value>>,
}

/// The history as the checks read it: a transaction cut short by a crash (an invocation with
/// no completion) is given one, `info` if its `txn-commit` was logged, else `fail`, with the
/// micro-ops it logged (the polls of its invocation, the sends and offsets of its
/// `txn-commit`), placed after its process's last event; and every transaction's completion
/// is given `sends` and `reads` (the fields the queue checks read), derived from its
/// micro-ops. Borrowed as is without transactions.
pub(crate) fn with_effects(history: &[Event]) -> Cow<'_, [Event]> {
    if !history.iter().any(|e| e.txn.is_some()) {
        return Cow::Borrowed(history);
    }
    // Completions for the transactions cut short, by the index of the event they follow.
    let mut completions: HashMap<usize, Vec<Event>> = HashMap::new();
    let mut last_of: HashMap<i64, usize> = HashMap::new();
    let mut pending: HashMap<i64, (&Event, Option<&Event>)> = HashMap::new();
    for (index, event) in history.iter().enumerate() {
        match (event.f.as_str(), event.kind.as_str()) {
            ("txn", "invoke") => {
                if let Some((invoke, commit)) = pending.remove(&event.process) {
                    let after = last_of.get(&event.process).copied().unwrap_or(index);
                    completions.entry(after).or_default().push(cut_short(
                        invoke,
                        commit,
                        history[after].time_ns,
                    ));
                }
                pending.insert(event.process, (event, None));
            }
            ("txn-commit", "invoke") => {
                if let Some((_, commit)) = pending.get_mut(&event.process) {
                    *commit = Some(event);
                }
            }
            ("txn", _) => {
                pending.remove(&event.process);
            }
            _ => {}
        }
        last_of.insert(event.process, index);
    }
    for (process, (invoke, commit)) in pending {
        let after = last_of[&process];
        let completion = cut_short(invoke, commit, history[after].time_ns);
        completions.entry(after).or_default().push(completion);
    }
    let mut events = Vec::with_capacity(history.len() + completions.len());
    for (index, event) in history.iter().enumerate() {
        events.push(with_sends_and_reads(event.clone()));
        for completion in completions.remove(&index).into_iter().flatten() {
            events.push(with_sends_and_reads(completion));
        }
    }
    Cow::Owned(events)
}

/// The completion of a transaction cut short by a crash.
fn cut_short(invoke: &Event, commit: Option<&Event>, time_ns: u64) -> Event {
    let planned = invoke.txn.clone().unwrap_or_default();
    let committing = commit.and_then(|c| c.txn.as_ref());
    // The sends as `txn-commit` logged them (with offsets), in the order planned; then the
    // offsets sent.
    let logged: HashMap<(&str, i64), &Mop> = committing
        .iter()
        .flat_map(|txn| &txn.mops)
        .filter_map(|mop| match mop {
            Mop::Send { key, value, .. } => Some(((key.as_str(), *value), mop)),
            _ => None,
        })
        .collect();
    let mut mops: Vec<Mop> = planned
        .mops
        .iter()
        .map(|mop| match mop {
            Mop::Send { key, value, .. } => logged
                .get(&(key.as_str(), *value))
                .map_or_else(|| mop.clone(), |m| (*m).clone()),
            _ => mop.clone(),
        })
        .collect();
    mops.extend(
        committing
            .iter()
            .flat_map(|txn| &txn.mops)
            .filter(|m| matches!(m, Mop::SendOffsets { .. }))
            .cloned(),
    );
    Event {
        time_ns,
        process: invoke.process,
        kind: if committing.is_some() { "info" } else { "fail" }.into(),
        f: "txn".into(),
        txn: Some(Txn {
            mops,
            commit_ns: committing.and_then(|txn| txn.commit_ns),
            error: Some("cut short by a crash".into()),
            cut_short: true,
            ..planned
        }),
        ..Event::default()
    }
}

/// A transaction's completion with `sends` and `reads` from its micro-ops.
fn with_sends_and_reads(mut event: Event) -> Event {
    if event.f != "txn" || event.kind == "invoke" {
        return event;
    }
    let Some(txn) = &event.txn else {
        return event;
    };
    let mut sends: super::Sends = BTreeMap::new();
    let mut reads: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for mop in &txn.mops {
        match mop {
            Mop::Send {
                key, value, offset, ..
            } => sends
                .entry(key.clone())
                .or_default()
                .push((*offset, *value)),
            Mop::Poll { reads: polled, .. } => {
                for (key, records) in polled {
                    reads.entry(key.clone()).or_default().extend(records);
                }
            }
            Mop::SendOffsets { .. } => {}
        }
    }
    event.sends = Some(sends);
    event.reads = Some(reads);
    event
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Fail,
    Info,
}

/// One transaction: the most complete record of it the history has.
struct TxnOp<'a> {
    process: i64,
    txn: &'a Txn,
    outcome: Outcome,
    invoked_ns: u64,
    /// The completion's time; `None` when it crashed.
    completed_ns: Option<u64>,
    /// The process's read epoch its reads belong to.
    epoch: usize,
}

impl<'a> TxnOp<'a> {
    fn describe(&self) -> Value {
        json!({"transactional_id": self.txn.transactional_id, "seq": self.txn.seq,
               "process": self.process, "outcome": self.outcome.name(),
               "invoked_ns": self.invoked_ns, "commit_ns": self.txn.commit_ns,
               "completed_ns": self.completed_ns, "error": self.txn.error})
    }

    fn sends(&self) -> impl Iterator<Item = (usize, &'a str, i64, Option<i64>, u64)> + 'a {
        let txn: &'a Txn = self.txn;
        txn.mops
            .iter()
            .enumerate()
            .filter_map(|(i, mop)| match mop {
                Mop::Send {
                    key,
                    value,
                    offset,
                    invoked_ns,
                } => Some((i, key.as_str(), *value, *offset, *invoked_ns)),
                _ => None,
            })
    }
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Info => "info",
        }
    }
}

/// Who read: a transaction (its index) or a plain poll of a process (the final reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Reader {
    Txn(usize),
    Poll { event: usize },
}

/// One record a read returned.
struct Read<'a> {
    reader: Reader,
    key: &'a str,
    offset: i64,
    value: i64,
    completed_ns: u64,
    epoch: usize,
}

/// The transactions, reads and read epochs of a history.
struct Analysis<'a> {
    txns: Vec<TxnOp<'a>>,
    reads: Vec<Read<'a>>,
    /// Whether each epoch is the final reader's.
    final_epochs: Vec<bool>,
    /// (key, value) -> (the writing transaction, the index of the send among its micro-ops).
    writers: HashMap<(&'a str, i64), (usize, usize)>,
    committed: Vec<bool>,
}

/// Checks the transactional events of a history; `None` when it has none.
pub(crate) fn check(history: &[Event], found: &mut Found) -> Option<TxnReport> {
    if !history.iter().any(|e| e.txn.is_some()) {
        return None;
    }
    let mut report = TxnReport::default();
    let analysis = analyze(history, &mut report);
    aborted_and_early_reads(&analysis, found);
    torn_transactions(&analysis, found);
    exactly_once(&analysis, found);
    cycles(&analysis, found, &mut report);
    for (i, op) in analysis.txns.iter().enumerate() {
        match op.outcome {
            Outcome::Ok => report.committed += 1,
            Outcome::Fail => report.aborted += 1,
            Outcome::Info => {
                report.unknown += 1;
                report.unknown_found_committed += usize::from(analysis.committed[i]);
            }
        }
        report.crashed += usize::from(op.completed_ns.is_none());
        let consume_transform_produce = op
            .txn
            .mops
            .iter()
            .any(|m| matches!(m, Mop::SendOffsets { .. }));
        report.consume_transform_produce_committed +=
            usize::from(consume_transform_produce && analysis.committed[i]);
    }
    report.reads_checked = analysis.reads.len();
    Some(report)
}

/// A summary line of the report.
pub(crate) fn summary(report: &TxnReport) -> String {
    let allowed: Vec<String> = report
        .allowed
        .iter()
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect();
    format!(
        "  transactions: {} committed ({} consume-transform-produce), {} aborted, {} unknown \
         ({} found committed), {} cut short by crashes; {} producer inits, {} fenced \
         ({} fencings started); {} records read; allowed: {}\n",
        report.committed,
        report.consume_transform_produce_committed,
        report.aborted,
        report.unknown,
        report.unknown_found_committed,
        report.crashed,
        report.producer_inits,
        report.producers_fenced,
        report.fencings_started,
        report.reads_checked,
        if allowed.is_empty() {
            "none".to_owned()
        } else {
            allowed.join(", ")
        }
    )
}

/// The read epochs of processes: a process's reads from one `assign` to the next.
#[derive(Default)]
struct Epochs {
    current: HashMap<i64, usize>,
    /// Whether each epoch is the final reader's.
    finals: Vec<bool>,
}

impl Epochs {
    fn of(&mut self, process: i64) -> usize {
        *self.current.entry(process).or_insert_with(|| {
            self.finals.push(false);
            self.finals.len() - 1
        })
    }

    fn start(&mut self, process: i64, is_final: bool) {
        self.finals.push(is_final);
        self.current.insert(process, self.finals.len() - 1);
    }
}

/// Pairs the transactions' events, numbers the read epochs, and collects the reads.
fn analyze<'a>(history: &'a [Event], report: &mut TxnReport) -> Analysis<'a> {
    let mut epochs = Epochs::default();
    // process -> when its transaction under way was invoked
    let mut invoked: HashMap<i64, u64> = HashMap::new();
    let mut txns: Vec<TxnOp> = Vec::new();
    let mut poll_events: Vec<(usize, &Event, usize)> = Vec::new();
    for (index, event) in history.iter().enumerate() {
        match (event.f.as_str(), event.kind.as_str()) {
            ("txn", "invoke") => {
                invoked.insert(event.process, event.time_ns);
            }
            ("txn", kind) => {
                let invoked_ns = invoked.remove(&event.process).unwrap_or(event.time_ns);
                let Some(txn) = &event.txn else { continue };
                let outcome = match kind {
                    "ok" => Outcome::Ok,
                    "fail" => Outcome::Fail,
                    _ => Outcome::Info,
                };
                txns.push(TxnOp {
                    process: event.process,
                    txn,
                    outcome,
                    invoked_ns,
                    completed_ns: (!txn.cut_short).then_some(event.time_ns),
                    epoch: epochs.of(event.process),
                });
            }
            ("assign", "ok") => {
                let is_final = event.value.as_ref().and_then(Value::as_str) == Some("final");
                epochs.start(event.process, is_final);
            }
            ("poll", "ok") => poll_events.push((index, event, epochs.of(event.process))),
            ("txn-init", "ok") => report.producer_inits += 1,
            ("txn-fenced", _) => report.producers_fenced += 1,
            ("txn-fence", _) => report.fencings_started += 1,
            _ => {}
        }
    }

    let mut writers = HashMap::new();
    for (t, op) in txns.iter().enumerate() {
        for (m, key, value, _, _) in op.sends() {
            writers.insert((key, value), (t, m));
        }
    }
    let mut reads = Vec::new();
    for (t, op) in txns.iter().enumerate() {
        for mop in &op.txn.mops {
            if let Mop::Poll {
                reads: polled,
                completed_ns,
            } = mop
            {
                push_reads(&mut reads, Reader::Txn(t), polled, *completed_ns, op.epoch);
            }
        }
    }
    for (index, event, e) in poll_events {
        if let Some(polled) = &event.reads {
            let reader = Reader::Poll { event: index };
            push_reads(&mut reads, reader, polled, event.time_ns, e);
        }
    }
    let mut committed: Vec<bool> = txns.iter().map(|op| op.outcome == Outcome::Ok).collect();
    for read in &reads {
        if let Some((t, _)) = writers.get(&(read.key, read.value)) {
            if txns[*t].outcome == Outcome::Info {
                committed[*t] = true;
            }
        }
    }
    Analysis {
        txns,
        reads,
        final_epochs: epochs.finals,
        writers,
        committed,
    }
}

fn push_reads<'a>(
    reads: &mut Vec<Read<'a>>,
    reader: Reader,
    polled: &'a BTreeMap<String, Vec<(i64, i64)>>,
    completed_ns: u64,
    epoch: usize,
) {
    for (key, records) in polled {
        for (offset, value) in records {
            reads.push(Read {
                reader,
                key,
                offset: *offset,
                value: *value,
                completed_ns,
                epoch,
            });
        }
    }
}

impl Analysis<'_> {
    fn describe_reader(&self, reader: Reader) -> Value {
        match reader {
            Reader::Txn(t) => self.txns[t].describe(),
            Reader::Poll { event } => json!({"poll_event": event}),
        }
    }
}

/// G1a, G1b and precommitted reads: each read against its writer. Counted once per reader
/// and writing transaction.
fn aborted_and_early_reads(analysis: &Analysis, found: &mut Found) {
    let mut seen: HashSet<(&str, Reader, usize)> = HashSet::new();
    let mut add = |found: &mut Found, kind: &'static str, read: &Read, t: usize, extra: Value| {
        if seen.insert((kind, read.reader, t)) {
            let mut example = json!({"key": read.key, "offset": read.offset,
                "value": read.value, "read_ns": read.completed_ns,
                "reader": analysis.describe_reader(read.reader),
                "writer": analysis.txns[t].describe()});
            if let (Some(map), Value::Object(more)) = (example.as_object_mut(), extra) {
                map.extend(more);
            }
            found.add(kind, example);
        }
    };
    for read in &analysis.reads {
        let Some(&(t, m)) = analysis.writers.get(&(read.key, read.value)) else {
            continue;
        };
        let writer = &analysis.txns[t];
        if writer.outcome == Outcome::Fail {
            add(found, "G1a", read, t, json!({}));
            continue;
        }
        if let Some(commit_ns) = writer.txn.commit_ns {
            if read.completed_ns < commit_ns {
                let reason = if read.reader == Reader::Txn(t) {
                    "a transaction read its own write"
                } else {
                    "the read returned before the writer's commit began"
                };
                add(
                    found,
                    "precommitted-read",
                    read,
                    t,
                    json!({"reason": reason}),
                );
            }
        }
        let later = writer.sends().find(|(i, key, _, _, invoked_ns)| {
            *i > m && *key == read.key && read.completed_ns < *invoked_ns
        });
        if let Some((_, _, later_value, _, later_invoked_ns)) = later {
            add(
                found,
                "G1b",
                read,
                t,
                json!({"later_value": later_value, "later_send_invoked_ns": later_invoked_ns}),
            );
        }
    }
}

/// Per read epoch and key: the lowest and highest offsets read, and the values read.
#[derive(Default)]
struct EpochReads<'a> {
    span: HashMap<&'a str, (i64, i64)>,
    values: HashSet<(&'a str, i64)>,
    /// The transactions whose values the epoch read.
    writers: Vec<usize>,
}

/// Torn transactions: per read epoch, every committed transaction it read a value of.
fn torn_transactions(analysis: &Analysis, found: &mut Found) {
    let mut epochs: Vec<EpochReads> = Vec::new();
    epochs.resize_with(analysis.final_epochs.len(), EpochReads::default);
    for read in &analysis.reads {
        let epoch = &mut epochs[read.epoch];
        let span = epoch
            .span
            .entry(read.key)
            .or_insert((read.offset, read.offset));
        *span = (span.0.min(read.offset), span.1.max(read.offset));
        epoch.values.insert((read.key, read.value));
        if let Some((t, _)) = analysis.writers.get(&(read.key, read.value)) {
            epoch.writers.push(*t);
        }
    }
    for (e, epoch) in epochs.iter_mut().enumerate() {
        let complete = analysis.final_epochs[e];
        epoch.writers.sort_unstable();
        epoch.writers.dedup();
        for &t in &epoch.writers {
            if !analysis.committed[t] {
                continue;
            }
            let missing: Vec<Value> = analysis.txns[t]
                .sends()
                .filter(|(_, key, value, offset, _)| {
                    if epoch.values.contains(&(*key, *value)) {
                        return false;
                    }
                    let read_past = offset.zip(epoch.span.get(key)).is_some_and(
                        |(offset, (low, high))| *low < offset && offset < *high,
                    );
                    read_past || complete
                })
                .map(|(_, key, value, offset, _)| json!({"key": key, "value": value, "offset": offset}))
                .collect();
            if !missing.is_empty() {
                found.add(
                    "torn-transaction",
                    json!({"writer": analysis.txns[t].describe(), "reader_epoch": e,
                           "final_reader": complete, "missing": missing}),
                );
            }
        }
    }
}

/// Exactly-once processing by the consume-transform-produce transactions of each group.
fn exactly_once(analysis: &Analysis, found: &mut Found) {
    // (group, key, offset) -> the committed transactions that consumed the record there.
    let mut consumed: BTreeMap<(&str, &str, i64), Vec<usize>> = BTreeMap::new();
    // (group, key) -> the highest offset the group committed.
    let mut highest: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for (t, op) in analysis.txns.iter().enumerate() {
        if !analysis.committed[t] {
            continue;
        }
        for mop in &op.txn.mops {
            let Mop::SendOffsets { group, offsets } = mop else {
                continue;
            };
            for (key, next) in offsets {
                let entry = highest.entry((group, key)).or_insert(*next);
                *entry = (*entry).max(*next);
            }
            for polled in op.txn.mops.iter().filter_map(|m| match m {
                Mop::Poll { reads, .. } => Some(reads),
                _ => None,
            }) {
                for (key, records) in polled {
                    let Some(next) = offsets.get(key) else {
                        continue;
                    };
                    for (offset, _) in records.iter().filter(|(o, _)| o < next) {
                        consumed.entry((group, key, *offset)).or_default().push(t);
                    }
                }
            }
        }
    }
    for ((group, key, offset), txns) in &consumed {
        if txns.len() > 1 {
            let by: Vec<Value> = txns.iter().map(|t| analysis.txns[*t].describe()).collect();
            found.add(
                "double-consume",
                json!({"group": group, "key": key, "offset": offset, "transactions": by}),
            );
        }
    }
    // The committed records of each key: from committed sends and from reads of values whose
    // writer did not fail (those are G1a).
    let mut records: HashMap<&str, BTreeMap<i64, i64>> = HashMap::new();
    for (t, op) in analysis.txns.iter().enumerate() {
        if analysis.committed[t] {
            for (_, key, value, offset, _) in op.sends() {
                if let Some(offset) = offset {
                    records.entry(key).or_default().insert(offset, value);
                }
            }
        }
    }
    for read in &analysis.reads {
        let writer = analysis.writers.get(&(read.key, read.value));
        if writer.is_none_or(|(t, _)| analysis.txns[*t].outcome != Outcome::Fail) {
            records
                .entry(read.key)
                .or_default()
                .insert(read.offset, read.value);
        }
    }
    for ((group, key), next) in &highest {
        let Some(in_key) = records.get(key) else {
            continue;
        };
        for (offset, value) in in_key.range(..*next) {
            if !consumed.contains_key(&(*group, *key, *offset)) {
                found.add(
                    "consume-skip",
                    json!({"group": group, "key": key, "offset": offset, "value": value,
                           "group_committed_offset": next}),
                );
            }
        }
    }
}

/// A dependency between two transactions (or, for real-time order, through time points).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edge<'a> {
    /// The first wrote `value` to `key` right before the second's value in the key's order.
    Ww { key: &'a str, value: i64 },
    /// The second read `value` of `key`, which the first wrote.
    Wr { key: &'a str, value: i64 },
    /// Real-time order, through the time points between the two.
    Realtime,
}

/// A dependency graph over the transactions, then time points (`txns..`).
struct Graph<'a> {
    txns: usize,
    out: Vec<Vec<(usize, Edge<'a>)>>,
}

impl<'a> Graph<'a> {
    fn new(txns: usize) -> Graph<'a> {
        Graph {
            txns,
            out: vec![Vec::new(); txns],
        }
    }

    fn link(&mut self, from: usize, to: usize, edge: Edge<'a>) {
        if from != to && !self.out[from].iter().any(|(n, e)| *n == to && *e == edge) {
            self.out[from].push((to, edge));
        }
    }

    /// Strongly connected components of more than one node (iterative Tarjan).
    fn components(&self) -> Vec<Vec<usize>> {
        let n = self.out.len();
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut next = 0;
        let mut components = Vec::new();
        for root in 0..n {
            if index[root] != usize::MAX {
                continue;
            }
            let mut call: Vec<(usize, usize)> = vec![(root, 0)];
            index[root] = next;
            low[root] = next;
            next += 1;
            stack.push(root);
            on_stack[root] = true;
            while let Some(&mut (node, ref mut child)) = call.last_mut() {
                if let Some(&(to, _)) = self.out[node].get(*child) {
                    *child += 1;
                    if index[to] == usize::MAX {
                        index[to] = next;
                        low[to] = next;
                        next += 1;
                        stack.push(to);
                        on_stack[to] = true;
                        call.push((to, 0));
                    } else if on_stack[to] {
                        low[node] = low[node].min(index[to]);
                    }
                    continue;
                }
                call.pop();
                if let Some(&(parent, _)) = call.last() {
                    low[parent] = low[parent].min(low[node]);
                }
                if low[node] == index[node] {
                    let mut component = Vec::new();
                    while let Some(member) = stack.pop() {
                        on_stack[member] = false;
                        component.push(member);
                        if member == node {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        component.sort_unstable();
                        components.push(component);
                    }
                }
            }
        }
        components
    }

    /// A cycle through `edge` (from `from` to `to`) within `component`: the steps from `from`
    /// back to itself.
    fn cycle_through(
        &self,
        component: &HashSet<usize>,
        from: usize,
        to: usize,
        edge: Edge<'a>,
    ) -> Vec<(usize, usize, Edge<'a>)> {
        let mut came_from: HashMap<usize, (usize, Edge)> = HashMap::new();
        let mut queue = VecDeque::from([to]);
        while let Some(node) = queue.pop_front() {
            if node == from {
                break;
            }
            for &(next, e) in &self.out[node] {
                if component.contains(&next) && next != to && !came_from.contains_key(&next) {
                    came_from.insert(next, (node, e));
                    queue.push_back(next);
                }
            }
        }
        let mut path = Vec::new();
        let mut node = from;
        while node != to {
            let Some(&(previous, e)) = came_from.get(&node) else {
                break;
            };
            path.push((previous, node, e));
            node = previous;
        }
        path.reverse();
        let mut steps = vec![(from, to, edge)];
        steps.extend(path);
        steps
    }
}

/// Writes `steps` of a cycle as transactions and the dependencies between them (runs of
/// real-time steps through time points become one step).
fn describe_cycle(analysis: &Analysis, graph: &Graph, steps: &[(usize, usize, Edge)]) -> Value {
    let mut out = Vec::new();
    let mut from: Option<usize> = None;
    for &(a, b, edge) in steps {
        if a < graph.txns {
            from = Some(a);
        }
        if b >= graph.txns {
            continue;
        }
        let Some(start) = from else { continue };
        let (kind, key, value) = match edge {
            Edge::Ww { key, value } => ("ww", Some(key), Some(value)),
            Edge::Wr { key, value } => ("wr", Some(key), Some(value)),
            Edge::Realtime => ("realtime", None, None),
        };
        out.push(
            json!({"from": analysis.txns[start].describe(), "to": analysis.txns[b].describe(),
                        "dependency": kind, "key": key, "value": value}),
        );
    }
    json!({"steps": out})
}

/// G1c and G1c-realtime (anomalies), G0 and G1c-with-ww (allowed).
fn cycles(analysis: &Analysis, found: &mut Found, report: &mut TxnReport) {
    let n = analysis.txns.len();
    let mut ww = Graph::new(n);
    let mut wr = Graph::new(n);
    // Write-read: from a value's writer to every committed transaction that read it.
    for read in &analysis.reads {
        let (Reader::Txn(reader), Some(&(writer, _))) =
            (read.reader, analysis.writers.get(&(read.key, read.value)))
        else {
            continue;
        };
        if analysis.committed[reader] && analysis.committed[writer] {
            let edge = Edge::Wr {
                key: read.key,
                value: read.value,
            };
            wr.link(writer, reader, edge);
        }
    }
    // Write-write: between the writers of successive committed values of a key.
    let mut order: HashMap<&str, BTreeMap<i64, i64>> = HashMap::new();
    for (t, op) in analysis.txns.iter().enumerate() {
        if analysis.committed[t] {
            for (_, key, value, offset, _) in op.sends() {
                if let Some(offset) = offset {
                    order.entry(key).or_default().insert(offset, value);
                }
            }
        }
    }
    for read in &analysis.reads {
        order
            .entry(read.key)
            .or_default()
            .insert(read.offset, read.value);
    }
    for (key, values) in &order {
        let writers: Vec<(usize, i64)> = values
            .values()
            .filter_map(|v| analysis.writers.get(&(*key, *v)).map(|(t, _)| (*t, *v)))
            .filter(|(t, _)| analysis.committed[*t])
            .collect();
        for pair in writers.windows(2) {
            let ((a, value), (b, _)) = (pair[0], pair[1]);
            ww.link(a, b, Edge::Ww { key, value });
        }
    }
    let wr_cycles = report_cycles(analysis, &wr, |e| matches!(e, Edge::Wr { .. }));
    let in_wr_cycle: HashSet<usize> = wr_cycles.iter().flat_map(|(c, _)| c.clone()).collect();
    for (_, example) in &wr_cycles {
        found.add("G1c", example.clone());
    }
    let mut wr_realtime = realtime(analysis, wr);
    for (component, example) in
        report_cycles(analysis, &wr_realtime, |e| matches!(e, Edge::Wr { .. }))
    {
        if !component.iter().any(|t| in_wr_cycle.contains(t)) {
            found.add("G1c-realtime", example);
        }
    }
    let mut allowed = |kind: &str, cycles: Vec<(Vec<usize>, Value)>| {
        if cycles.is_empty() {
            return;
        }
        report.allowed.insert(kind.to_owned(), cycles.len());
        let examples = cycles.into_iter().take(EXAMPLES_MAX).map(|(_, e)| e);
        report
            .allowed_examples
            .insert(kind.to_owned(), examples.collect());
    };
    allowed("G0", report_cycles(analysis, &ww, |_| true));
    // Write-read edges onto the write-write graph (the time points are dropped).
    wr_realtime.out.truncate(n);
    for (from, edges) in wr_realtime.out.iter().enumerate() {
        for &(to, edge) in edges {
            if matches!(edge, Edge::Wr { .. }) {
                ww.link(from, to, edge);
            }
        }
    }
    allowed(
        "G1c-with-ww",
        report_cycles(analysis, &ww, |e| matches!(e, Edge::Wr { .. })),
    );
}

/// Adds real-time order to `graph`: a time point per acknowledged transaction's completion,
/// each linked to the next; a transaction to the point of its completion, and the latest
/// point before a committed transaction's invocation to it. A path from T1 to T2 then exists
/// through the points exactly when T1 completed before T2 was invoked.
fn realtime<'a>(analysis: &Analysis, mut graph: Graph<'a>) -> Graph<'a> {
    let n = analysis.txns.len();
    let mut completions: Vec<(u64, usize)> = analysis
        .txns
        .iter()
        .enumerate()
        .filter(|(_, op)| op.outcome == Outcome::Ok)
        .filter_map(|(t, op)| op.completed_ns.map(|c| (c, t)))
        .collect();
    completions.sort_unstable();
    graph.out.resize(n + completions.len(), Vec::new());
    for (i, &(_, t)) in completions.iter().enumerate() {
        graph.link(t, n + i, Edge::Realtime);
        if i + 1 < completions.len() {
            graph.link(n + i, n + i + 1, Edge::Realtime);
        }
    }
    for (t, op) in analysis.txns.iter().enumerate() {
        if !analysis.committed[t] {
            continue;
        }
        let before = completions.partition_point(|(c, _)| *c < op.invoked_ns);
        if let Some(point) = before.checked_sub(1) {
            graph.link(n + point, t, Edge::Realtime);
        }
    }
    graph
}

/// Every component of `graph` with an internal edge that `through` accepts, with an example
/// cycle through that edge.
fn report_cycles(
    analysis: &Analysis,
    graph: &Graph,
    through: impl Fn(&Edge) -> bool,
) -> Vec<(Vec<usize>, Value)> {
    let mut cycles = Vec::new();
    for component in graph.components() {
        let members: HashSet<usize> = component.iter().copied().collect();
        let edge = component.iter().find_map(|&from| {
            graph.out[from]
                .iter()
                .find(|(to, e)| members.contains(to) && through(e))
                .map(|&(to, e)| (from, to, e))
        });
        let Some((from, to, edge)) = edge else {
            continue;
        };
        let steps = graph.cycle_through(&members, from, to, edge);
        let txns: Vec<usize> = component.into_iter().filter(|t| *t < graph.txns).collect();
        let mut example = describe_cycle(analysis, graph, &steps);
        if let Some(map) = example.as_object_mut() {
            map.insert("transactions_in_component".into(), json!(txns.len()));
        }
        cycles.push((txns, example));
    }
    cycles
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check;

    /// A transaction's micro-ops, built in order; times are the caller's.
    #[derive(Clone, Default)]
    struct Ops(Vec<Mop>);

    impl Ops {
        fn send(mut self, key: &str, value: i64, offset: i64, invoked_ns: u64) -> Ops {
            self.0.push(Mop::Send {
                key: key.into(),
                value,
                offset: Some(offset),
                invoked_ns,
            });
            self
        }

        fn poll(mut self, key: &str, records: &[(i64, i64)], completed_ns: u64) -> Ops {
            self.0.push(Mop::Poll {
                reads: BTreeMap::from([(key.to_owned(), records.to_vec())]),
                completed_ns,
            });
            self
        }

        fn offsets(mut self, key: &str, next: i64) -> Ops {
            self.0.push(Mop::SendOffsets {
                group: "g".into(),
                offsets: BTreeMap::from([(key.to_owned(), next)]),
            });
            self
        }
    }

    fn txn_event(time_ns: u64, process: i64, kind: &str, f: &str, txn: Txn) -> Event {
        Event {
            time_ns,
            process,
            kind: kind.into(),
            f: f.into(),
            txn: Some(txn),
            ..Event::default()
        }
    }

    /// A whole transaction: invoked at `invoked_ns`, committing at `commit_ns` (None: never
    /// asked to), completed with `kind` at `done_ns` (None: the process crashed).
    fn transaction(
        process: i64,
        seq: u64,
        ops: Ops,
        invoked_ns: u64,
        commit_ns: Option<u64>,
        done: Option<(&str, u64)>,
    ) -> Vec<Event> {
        let txn = Txn {
            transactional_id: format!("t{process}"),
            seq,
            mops: ops.0,
            commit_ns,
            ..Txn::default()
        };
        let mut events = vec![txn_event(invoked_ns, process, "invoke", "txn", txn.clone())];
        if let Some(commit_ns) = commit_ns {
            events.push(txn_event(
                commit_ns,
                process,
                "invoke",
                "txn-commit",
                txn.clone(),
            ));
        }
        if let Some((kind, done_ns)) = done {
            events.push(txn_event(done_ns, process, kind, "txn", txn));
        }
        events
    }

    /// A transaction committed between `at` and `at + 10`, its commit beginning at `at + 5`.
    fn committed(process: i64, seq: u64, ops: Ops, at: u64) -> Vec<Event> {
        transaction(process, seq, ops, at, Some(at + 5), Some(("ok", at + 10)))
    }

    fn aborted(process: i64, seq: u64, ops: Ops, at: u64) -> Vec<Event> {
        transaction(process, seq, ops, at, None, Some(("fail", at + 10)))
    }

    fn assign(time_ns: u64, process: i64, value: &str) -> Event {
        Event {
            time_ns,
            process,
            kind: "ok".into(),
            f: "assign".into(),
            value: Some(json!(value)),
            ..Event::default()
        }
    }

    fn final_poll(time_ns: u64, process: i64, key: &str, records: &[(i64, i64)]) -> Event {
        Event {
            time_ns,
            process,
            kind: "ok".into(),
            f: "poll".into(),
            reads: Some(BTreeMap::from([(key.to_owned(), records.to_vec())])),
            ..Event::default()
        }
    }

    /// The final reader (process 9) reading `keys` at time 1000 and on.
    fn with_final(mut history: Vec<Event>, keys: &[(&str, &[(i64, i64)])]) -> Vec<Event> {
        history.push(assign(1000, 9, "final"));
        for (i, (key, records)) in keys.iter().enumerate() {
            history.push(final_poll(1001 + i as u64, 9, key, records));
        }
        history
    }

    fn sorted(mut history: Vec<Event>) -> Vec<Event> {
        history.sort_by_key(|e| e.time_ns);
        history
    }

    fn kinds(history: &[Event]) -> Vec<String> {
        check(history).bad_error_types
    }

    /// T1 (process 1) writes 10, 11 to a and 20 to b; T2 (process 2) reads them after T1
    /// committed and writes 12 to a; an aborted T3 writes 13 to a; the final reader reads
    /// everything committed.
    fn clean() -> Vec<Event> {
        let mut history = Vec::new();
        let t1 = Ops::default()
            .send("a", 10, 0, 101)
            .send("a", 11, 1, 102)
            .send("b", 20, 0, 103);
        history.extend(committed(1, 1, t1, 100));
        let t2 = Ops::default()
            .poll("a", &[(0, 10), (1, 11)], 205)
            .send("a", 12, 3, 206);
        history.extend(committed(2, 1, t2, 200));
        history.extend(aborted(1, 2, Ops::default().send("a", 13, 5, 301), 300));
        history.push(assign(1000, 9, "final"));
        history.push(final_poll(1001, 9, "a", &[(0, 10), (1, 11), (3, 12)]));
        history.push(final_poll(1002, 9, "b", &[(0, 20)]));
        sorted(history)
    }

    #[test]
    fn a_clean_transactional_history_is_valid() {
        let report = check(&clean());
        assert!(report.valid, "{report:?}");
        let txn = report.txn.expect("a txn report");
        assert_eq!(
            (txn.committed, txn.aborted, txn.unknown, txn.crashed),
            (2, 1, 0, 0)
        );
        // Committed sends count as acknowledged; the aborted one does not.
        assert_eq!(report.acknowledged_sends, 4);
        assert!(summary(&txn).contains("2 committed"));
        // A queue history has no txn report.
        assert!(check(&[final_poll(1, 1, "a", &[(0, 1)])]).txn.is_none());
    }

    #[test]
    fn histories_with_transactions_round_trip_through_jsonl() {
        let text = "\
{\"time_ns\":1,\"process\":4,\"type\":\"invoke\",\"f\":\"txn\",\"txn\":{\"transactional_id\":\"t\",\"seq\":1,\"mops\":[{\"f\":\"send\",\"key\":\"a\",\"value\":7},{\"f\":\"poll\"}]}}
{\"time_ns\":5,\"process\":4,\"type\":\"invoke\",\"f\":\"txn-commit\",\"txn\":{\"transactional_id\":\"t\",\"seq\":1,\"commit_ns\":5,\"mops\":[{\"f\":\"send\",\"key\":\"a\",\"value\":7,\"offset\":0,\"invoked_ns\":2}]}}
{\"time_ns\":6,\"process\":4,\"type\":\"ok\",\"f\":\"txn\",\"txn\":{\"transactional_id\":\"t\",\"seq\":1,\"commit_ns\":5,\"mops\":[{\"f\":\"send\",\"key\":\"a\",\"value\":7,\"offset\":0,\"invoked_ns\":2},{\"f\":\"poll\",\"reads\":{},\"completed_ns\":3},{\"f\":\"send-offsets\",\"group\":\"g\",\"offsets\":{}}]}}
{\"time_ns\":7,\"process\":9,\"type\":\"ok\",\"f\":\"poll\",\"reads\":{\"a\":[[0,7]]}}
";
        let history = crate::parse(text).expect("parse");
        let report = check(&history);
        assert!(report.valid, "{report:?}");
        assert_eq!(report.acknowledged_sends, 1);
        let again = serde_json::to_string(&history[2]).expect("serialize");
        assert_eq!(crate::parse(&again).expect("parse")[0], history[2]);
    }

    #[test]
    fn aborted_reads_are_g1a() {
        let mut history = clean();
        // A transaction reads 13, which the aborted T3 wrote.
        let reader = Ops::default().poll("a", &[(5, 13)], 405);
        history.extend(committed(3, 1, reader, 400));
        assert_eq!(kinds(&sorted(history)), vec!["G1a"]);
        // So does the final reader; and a transaction cut short before it began to commit
        // is not committed either.
        let mut history = clean();
        let crashed = Ops::default().send("b", 21, 2, 501);
        history.extend(transaction(4, 1, crashed, 500, None, None));
        history.push(final_poll(1003, 9, "b", &[(2, 21)]));
        let report = check(&sorted(history));
        assert_eq!(report.bad_error_types, vec!["G1a"]);
        assert_eq!(report.txn.expect("txn").crashed, 1);
        // A transaction cut short while committing may have committed: reading it is fine.
        let mut history = clean();
        let crashed = Ops::default().send("b", 21, 2, 501);
        history.extend(transaction(4, 1, crashed, 500, Some(505), None));
        history.push(final_poll(1003, 9, "b", &[(2, 21)]));
        let report = check(&sorted(history));
        assert!(report.valid, "{report:?}");
        assert_eq!(report.txn.expect("txn").unknown_found_committed, 1);
    }

    #[test]
    fn reads_before_the_commit_began_are_precommitted() {
        // T2 read T1's 10 at 104, before T1 began to commit (105).
        let mut history = Vec::new();
        history.extend(committed(1, 1, Ops::default().send("a", 10, 0, 101), 100));
        history.extend(committed(
            2,
            1,
            Ops::default().poll("a", &[(0, 10)], 104),
            102,
        ));
        let report = check(&sorted(history.clone()));
        assert_eq!(report.bad_error_types, vec!["precommitted-read"]);
        // A transaction reading its own write.
        let own = Ops::default()
            .send("a", 10, 0, 101)
            .poll("a", &[(0, 10)], 103);
        let report = check(&committed(1, 1, own, 100));
        assert_eq!(report.bad_error_types, vec!["precommitted-read"]);
        assert_eq!(
            report.anomalies["precommitted-read"][0]["reason"],
            json!("a transaction read its own write")
        );
        // The same read after the commit began is fine.
        let mut history = Vec::new();
        history.extend(committed(1, 1, Ops::default().send("a", 10, 0, 101), 100));
        history.extend(committed(
            2,
            1,
            Ops::default().poll("a", &[(0, 10)], 106),
            102,
        ));
        assert!(check(&sorted(history)).valid);
    }

    #[test]
    fn reads_of_an_intermediate_state_are_g1b() {
        // T1 sends 10 then (at 150) 11 to a; T2's poll returned 10 at 120.
        let t1 = Ops::default().send("a", 10, 0, 101).send("a", 11, 1, 150);
        let mut history = transaction(1, 1, t1.clone(), 100, Some(160), Some(("ok", 170)));
        history.extend(committed(
            2,
            1,
            Ops::default().poll("a", &[(0, 10)], 120),
            110,
        ));
        let report = check(&sorted(history));
        assert!(
            report.bad_error_types.contains(&"G1b".to_owned()),
            "{report:?}"
        );
        assert_eq!(report.anomalies["G1b"][0]["later_value"], json!(11));
        // Returned after the later send was invoked (but before the commit): precommitted
        // only.
        let mut history = transaction(1, 1, t1.clone(), 100, Some(160), Some(("ok", 170)));
        history.extend(committed(
            2,
            1,
            Ops::default().poll("a", &[(0, 10)], 155),
            110,
        ));
        let history = with_final(history, &[("a", &[(0, 10), (1, 11)])]);
        assert_eq!(kinds(&sorted(history)), vec!["precommitted-read"]);
        // A later send to another key is no later state of this one.
        let t1 = Ops::default().send("a", 10, 0, 101).send("b", 11, 0, 150);
        let mut history = transaction(1, 1, t1, 100, Some(160), Some(("ok", 170)));
        history.extend(committed(
            2,
            1,
            Ops::default().poll("a", &[(0, 10)], 120),
            110,
        ));
        let history = with_final(history, &[("a", &[(0, 10)]), ("b", &[(0, 11)])]);
        assert_eq!(kinds(&sorted(history)), vec!["precommitted-read"]);
    }

    #[test]
    fn cycles_of_write_read_dependencies_are_g1c() {
        // T1 reads T2's 20 and T2 reads T1's 10: each read the other's write.
        let t1 = Ops::default()
            .send("a", 10, 0, 101)
            .poll("b", &[(0, 20)], 140);
        let t2 = Ops::default()
            .send("b", 20, 0, 111)
            .poll("a", &[(0, 10)], 141);
        let mut history = transaction(1, 1, t1, 100, Some(150), Some(("ok", 160)));
        history.extend(transaction(2, 1, t2, 110, Some(150), Some(("ok", 160))));
        let report = check(&sorted(history));
        // The reads also returned before the writers began to commit.
        assert_eq!(report.bad_error_types, vec!["G1c", "precommitted-read"]);
        let steps = report.anomalies["G1c"][0]["steps"]
            .as_array()
            .expect("steps")
            .clone();
        assert_eq!(steps.len(), 2);
        assert!(steps.iter().all(|s| s["dependency"] == json!("wr")));
        // One direction only is no cycle.
        let mut history = committed(1, 1, Ops::default().send("a", 10, 0, 101), 100);
        history.extend(committed(
            2,
            1,
            Ops::default().poll("a", &[(0, 10)], 206),
            200,
        ));
        assert!(check(&sorted(history)).valid);
    }

    #[test]
    fn cycles_through_real_time_order_are_g1c_realtime() {
        // T1 completed (at 110) before T2 was invoked (200), yet read T2's 20.
        let t1 = Ops::default().poll("b", &[(0, 20)], 104);
        let t2 = Ops::default().send("b", 20, 0, 201);
        let mut history = committed(1, 1, t1, 100);
        history.extend(committed(2, 1, t2, 200));
        let report = check(&sorted(history));
        assert!(
            report.bad_error_types.contains(&"G1c-realtime".to_owned()),
            "{report:?}"
        );
        assert!(!report.bad_error_types.contains(&"G1c".to_owned()));
        let steps = &report.anomalies["G1c-realtime"][0]["steps"];
        assert_eq!(steps[0]["dependency"], json!("wr"));
        assert_eq!(steps[1]["dependency"], json!("realtime"));
        // Concurrent transactions have no real-time order.
        let t1 = Ops::default().poll("b", &[(0, 20)], 300);
        let t2 = Ops::default().send("b", 20, 0, 201);
        let mut history = transaction(1, 1, t1, 100, Some(305), Some(("ok", 310)));
        history.extend(committed(2, 1, t2, 200));
        assert!(check(&sorted(history)).valid);
    }

    #[test]
    fn write_cycles_are_allowed_and_reported() {
        // T1 writes a then b, T2 writes b then a; their offsets interleave both ways.
        let t1 = Ops::default().send("a", 10, 0, 101).send("b", 11, 1, 102);
        let t2 = Ops::default().send("b", 20, 0, 103).send("a", 21, 1, 104);
        let mut history = committed(1, 1, t1, 100);
        history.extend(committed(2, 1, t2, 100));
        history.push(assign(1000, 9, "final"));
        history.push(final_poll(1001, 9, "a", &[(0, 10), (1, 21)]));
        history.push(final_poll(1002, 9, "b", &[(0, 20), (1, 11)]));
        let report = check(&sorted(history));
        assert!(report.valid, "{report:?}");
        let txn = report.txn.expect("txn");
        assert_eq!(txn.allowed.get("G0"), Some(&1));
        assert!(summary(&txn).contains("G0 1"));
        // Writes in one order only: no cycle.
        let report = check(&clean());
        assert!(report.txn.expect("txn").allowed.is_empty());
    }

    #[test]
    fn a_reader_missing_part_of_a_transaction_sees_it_torn() {
        // The final reader read T1's 10 and 11 in a but not its 20 in b.
        let mut history = clean();
        history
            .retain(|e| !(e.f == "poll" && e.reads.as_ref().is_some_and(|r| r.contains_key("b"))));
        history.push(final_poll(1002, 9, "b", &[]));
        let report = check(&sorted(history));
        assert!(
            report
                .bad_error_types
                .contains(&"torn-transaction".to_owned()),
            "{report:?}"
        );
        // 20 was acknowledged and never read: the queue checks call it unseen as well.
        assert!(report.bad_error_types.contains(&"unseen".to_owned()));
        // A reader that read a past 11's offset without it, in one epoch.
        let mut history = clean();
        let t = Ops::default().poll("a", &[(0, 10), (3, 12)], 405);
        history.extend(committed(3, 1, t, 400));
        let report = check(&sorted(history));
        assert!(
            report
                .bad_error_types
                .contains(&"torn-transaction".to_owned())
        );
        // A reader that stopped before 11's offset, or jumped there by an assign, did not.
        let mut history = clean();
        history.extend(committed(
            3,
            1,
            Ops::default().poll("a", &[(0, 10)], 405),
            400,
        ));
        history.push(assign(450, 3, "rewind"));
        history.extend(committed(
            3,
            2,
            Ops::default().poll("a", &[(3, 12)], 505),
            500,
        ));
        let report = check(&sorted(history));
        assert!(report.valid, "{report:?}");
    }

    #[test]
    fn records_consumed_twice_or_never_break_exactly_once() {
        // Input: 10, 11, 12 at a's offsets 0..2. T1 consumes 0..1 and commits 2; T2 consumes
        // 2 and commits 3. Each writes a derived value to out.
        let mut base = Vec::new();
        let input = Ops::default()
            .send("a", 10, 0, 11)
            .send("a", 11, 1, 12)
            .send("a", 12, 2, 13);
        base.extend(committed(1, 1, input, 10));
        let t1 = Ops::default()
            .poll("a", &[(0, 10), (1, 11)], 105)
            .send("out", 100, 0, 106)
            .offsets("a", 2);
        let good_t2 = Ops::default()
            .poll("a", &[(2, 12)], 205)
            .send("out", 101, 1, 206)
            .offsets("a", 3);
        let inputs: &[(i64, i64)] = &[(0, 10), (1, 11), (2, 12)];
        let mut history = base.clone();
        history.extend(committed(2, 1, t1.clone(), 100));
        history.extend(committed(2, 2, good_t2, 200));
        let history = with_final(history, &[("a", inputs), ("out", &[(0, 100), (1, 101)])]);
        let report = check(&sorted(history));
        assert!(report.valid, "{report:?}");
        assert_eq!(
            report.txn.expect("txn").consume_transform_produce_committed,
            2
        );
        // T2 consumed 1 again.
        let twice = Ops::default()
            .poll("a", &[(1, 11), (2, 12)], 205)
            .send("out", 101, 1, 206)
            .offsets("a", 3);
        let mut history = base.clone();
        history.extend(committed(2, 1, t1.clone(), 100));
        history.push(assign(150, 2, "rebalance"));
        history.extend(committed(2, 2, twice, 200));
        let history = with_final(history, &[("a", inputs), ("out", &[(0, 100), (1, 101)])]);
        assert_eq!(kinds(&sorted(history)), vec!["double-consume"]);
        // An aborted T2 that consumed 1 again is no double consumption.
        let again = Ops::default().poll("a", &[(1, 11)], 205).offsets("a", 2);
        let mut history = base.clone();
        history.extend(committed(2, 1, t1.clone(), 100));
        history.push(assign(150, 2, "rebalance"));
        history.extend(aborted(2, 2, again, 200));
        let history = with_final(history, &[("a", inputs), ("out", &[(0, 100)])]);
        let report = check(&sorted(history));
        assert!(report.valid, "{report:?}");
        // T2 committed offset 3 having consumed nothing below it after T1.
        let skipping = Ops::default()
            .poll("a", &[], 205)
            .send("out", 101, 1, 206)
            .offsets("a", 3);
        let mut history = base;
        history.extend(committed(2, 1, t1, 100));
        history.extend(committed(2, 2, skipping, 200));
        let history = with_final(history, &[("a", inputs), ("out", &[(0, 100), (1, 101)])]);
        let report = check(&sorted(history));
        assert_eq!(report.bad_error_types, vec!["consume-skip"]);
        assert_eq!(report.anomalies["consume-skip"][0]["offset"], json!(2));
    }

    #[test]
    fn a_consume_transform_produce_transaction_cut_short_while_committing_counts_once_seen() {
        // T1 consumed 0..1 and began to commit offset 2, then its process died: its
        // invocation has its poll, its txn-commit its sends and offsets.
        let mut history = committed(
            1,
            1,
            Ops::default().send("a", 10, 0, 11).send("a", 11, 1, 12),
            10,
        );
        let consumed = Ops::default().poll("a", &[(0, 10), (1, 11)], 105);
        let mut invoke = consumed.clone();
        invoke.0.push(Mop::Send {
            key: "out".into(),
            value: 100,
            offset: None,
            invoked_ns: 0,
        });
        let commit = Ops::default().send("out", 100, 0, 106).offsets("a", 2);
        let txn = |ops: Ops, commit_ns| Txn {
            transactional_id: "t2".into(),
            seq: 1,
            mops: ops.0,
            commit_ns,
            ..Txn::default()
        };
        history.push(txn_event(100, 2, "invoke", "txn", txn(invoke, None)));
        history.push(txn_event(
            110,
            2,
            "invoke",
            "txn-commit",
            txn(commit, Some(110)),
        ));
        // Its successor consumed from 2 on.
        let t3 = Ops::default()
            .poll("a", &[(2, 12)], 205)
            .send("out", 101, 1, 206)
            .offsets("a", 3);
        history.extend(committed(3, 1, Ops::default().send("a", 12, 2, 101), 100));
        history.extend(committed(4, 1, t3, 200));
        let history = with_final(
            history,
            &[
                ("a", &[(0, 10), (1, 11), (2, 12)]),
                ("out", &[(0, 100), (1, 101)]),
            ],
        );
        let report = check(&sorted(history.clone()));
        assert!(report.valid, "{report:?}");
        let txn = report.txn.expect("txn");
        assert_eq!((txn.crashed, txn.unknown_found_committed), (1, 1));
        assert_eq!(txn.consume_transform_produce_committed, 2);
        // Had its derived value not been read, it would not be known to have committed.
        let mut unread = history;
        unread.retain(|e| {
            !(e.f == "poll" && e.reads.as_ref().is_some_and(|r| r.contains_key("out")))
        });
        unread.push(final_poll(1003, 9, "out", &[(1, 101)]));
        let report = check(&sorted(unread));
        assert!(
            report.bad_error_types.contains(&"consume-skip".to_owned()),
            "{report:?}"
        );
    }

    #[test]
    fn transactional_sends_are_checked_by_the_queue_checks() {
        // A committed send never read though the final reader went past it: lost (and the
        // final reader saw its transaction torn).
        let t1 = Ops::default().send("a", 10, 0, 101).send("a", 11, 1, 102);
        let mut history = committed(1, 1, t1, 100);
        history.extend(committed(2, 1, Ops::default().send("a", 12, 2, 201), 200));
        let history = with_final(history, &[("a", &[(0, 10), (2, 12)])]);
        let report = check(&sorted(history));
        assert!(report.bad_error_types.contains(&"lost-write".to_owned()));
        assert!(
            report
                .bad_error_types
                .contains(&"torn-transaction".to_owned())
        );
        // One value at two offsets.
        let mut history = clean();
        history.push(final_poll(1003, 9, "a", &[(4, 10)]));
        assert!(kinds(&sorted(history)).contains(&"duplicate".to_owned()));
        // Two concurrent transactions interleaving in a key is no int-send-skip.
        let t1 = Ops::default().send("a", 10, 0, 101).send("a", 11, 2, 103);
        let t2 = Ops::default().send("a", 20, 1, 102);
        let mut history = committed(1, 1, t1, 100);
        history.extend(committed(2, 1, t2, 100));
        history.push(assign(1000, 9, "final"));
        history.push(final_poll(1001, 9, "a", &[(0, 10), (1, 20), (2, 11)]));
        let report = check(&sorted(history));
        assert!(report.valid, "{report:?}");
        assert_eq!(report.acknowledged_sends, 3);
    }
}
