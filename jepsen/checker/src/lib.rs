//! The checker of Sluice's fault-injection suite: reads a history of queue operations (sends
//! and polls against topic-partitions, as Jepsen's Kafka queue workload records them) and finds
//! the anomalies Jepsen looks for in Kafka-compatible systems.
//!
//! # History format
//! JSON lines, one event each: an operation's invocation and its completion are two events.
//! ```text
//! {"time_ns":1,"process":3,"type":"invoke","f":"send","key":"q-0","value":17}
//! {"time_ns":2,"process":3,"type":"ok","f":"send","key":"q-0","value":17,"offset":41}
//! {"time_ns":3,"process":5,"type":"ok","f":"send","sends":{"q-0":[[42,18],[43,19]],"q-1":[[7,20]]}}
//! {"time_ns":4,"process":4,"type":"ok","f":"poll","reads":{"q-0":[[40,16],[41,17]]}}
//! {"time_ns":5,"process":4,"type":"ok","f":"assign"}
//! {"time_ns":6,"process":-1,"type":"info","f":"nemesis","value":"kill n2"}
//! {"time_ns":7,"process":-1,"type":"info","f":"heal","value":"restart n2"}
//! {"time_ns":8,"process":-1,"type":"info","f":"healed"}
//! ```
//! `type` is `invoke`, `ok`, `fail` (did not happen) or `info` (unknown). An `assign` by a
//! process restarts its polling (seeks are allowed to jump). A replaced client gets a new
//! process number. Values are unique per key.
//!
//! A send op carries one message in `key`/`value`/`offset`, or several (e.g. a transaction)
//! in `sends`: per key, `[offset, value]` pairs in the order the op sent them (`offset` may be
//! `null` where it is not known, as in an invocation). Every `(key, offset, value)` of an
//! acknowledged op counts as one acknowledged send; an op with both forms counts both, the
//! single send first.
//!
//! `healed` is logged once, when every fault has been healed at the end of a run; it is neither
//! a fault nor an operation.
//!
//! A history of the groups workload also has consumer-group events (`assign` and `revoke`
//! with a `group` and `partitions`, `commit` and `committed` with `offsets`, `crash`,
//! `group-metadata`): see the `groups` module for them and for the anomalies they are checked
//! for. Their polls are judged like any other as well.
//!
//! # Anomalies (Jepsen's definitions)
//! - `inconsistent-offsets`: one offset of a key holds different values in different reads.
//! - `duplicate`: one value of a key appears at more than one offset.
//! - `lost-write`: an acknowledged send was never read, though reads went past its offset.
//! - `unseen`: an acknowledged send was never read, and no read went past its offset (with
//!   final reads to the end of every key, a lost write by another name).
//! - `nonmonotonic-send`: a process's acknowledged sends to a key got decreasing offsets from
//!   one op to its next (the last send of an op to the key against the first of the next).
//! - `int-send-skip` / `int-nonmonotonic-send`: within one op, two successive sends to a key
//!   are not adjacent in the version order (another value sits between them), or the later one
//!   got an offset at or below the earlier one.
//! - `poll-skip` / `nonmonotonic-poll`: between two polls of a key by one process, the
//!   consumer skipped records that exist in the version order, or went backwards.
//! - `int-poll-skip` / `int-nonmonotonic-poll`: the same within a single poll.
//! - `slow-write-recovery` (not Jepsen's; a liveness check of this suite): after the last
//!   `healed` event, no send was acknowledged within `WRITE_RECOVERY_MAX_MS`, or none at all.
//!
//! Skips are judged on the version order: every offset known to hold a value, from all reads
//! and acknowledged sends. Offsets may have gaps (aborted or compacted records); only values
//! present in the version order can be skipped.
//!
//! A history of the transactional workload has `txn` events instead of sends (see the `txn`
//! module): a committed transaction's sends count as acknowledged sends, and the reads of every
//! transaction, committed or not, as polls, so the anomalies above are checked for them too,
//! but for `int-send-skip` (Kafka's transactions do not isolate writes: concurrent
//! transactions interleave in a partition). The transactional anomalies (G1a, G1b, G1c,
//! precommitted reads, torn transactions, ...) are the `txn` module's.

mod groups;
mod txn;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use groups::GroupReport;
pub use txn::{Mop, Txn, TxnReport};

/// The messages of a multi-send op: per key, `(offset, value)` in the order sent; the offset
/// is `None` where it is not known (an invocation).
pub type Sends = BTreeMap<String, Vec<(Option<i64>, i64)>>;

/// One line of a history. `nemesis` events are faults injected; `heal` events end them;
/// `healed` says every fault is over.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct Event {
    #[serde(default)]
    pub time_ns: u64,
    pub process: i64,
    #[serde(rename = "type")]
    pub kind: String,
    pub f: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<BTreeMap<String, Vec<(i64, i64)>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sends: Option<Sends>,
    /// Group events: the consumer group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Group events: the keys an `assign` gives, a `revoke` takes, a `committed` read asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<String>>,
    /// Group events: per key, the offset a `commit` commits or a `committed` read found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offsets: Option<BTreeMap<String, i64>>,
    /// Transactional events: the transaction (see the `txn` module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txn: Option<Txn>,
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("line {line}: {reason}")]
    Parse { line: usize, reason: String },
}

/// Parses a JSONL history (blank lines ignored).
pub fn parse(text: &str) -> Result<Vec<Event>, HistoryError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| HistoryError::Parse {
                line: i + 1,
                reason: e.to_string(),
            })
        })
        .collect()
}

/// What the checker found.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub valid: bool,
    pub bad_error_types: Vec<String>,
    /// Up to `EXAMPLES_MAX` examples per anomaly type.
    pub anomalies: BTreeMap<String, Vec<Value>>,
    pub anomaly_counts: BTreeMap<String, usize>,
    pub faults_injected: usize,
    /// Completions of client operations (send, poll, assign, and a group's revoke, commit and
    /// committed).
    pub ops_checked: usize,
    pub acknowledged_sends: usize,
    pub keys: usize,
    /// Milliseconds from the last `healed` event to the first send acknowledged after it; `None`
    /// without a `healed` event or without such a send.
    pub write_recovery_ms: Option<u64>,
    /// What the consumer group did; `None` for a history without group events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<GroupReport>,
    /// What the transactions did; `None` for a history without transactions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub txn: Option<TxnReport>,
}

const EXAMPLES_MAX: usize = 8;

/// How long writes may take to succeed again once every fault is healed. The harness keeps a
/// producer running this long after healing, so a longer wait means writes did not come back.
pub const WRITE_RECOVERY_MAX_MS: u64 = 15_000;

const NS_PER_MS: u64 = 1_000_000;

/// The operations of clients; everything else in a history (faults, heals, crashes, the group
/// metadata read after the run) is the harness's.
const CLIENT_OPS: [&str; 7] = [
    "send",
    "poll",
    "assign",
    "revoke",
    "commit",
    "committed",
    "txn",
];

#[derive(Default)]
struct Found {
    anomalies: BTreeMap<String, Vec<Value>>,
    counts: BTreeMap<String, usize>,
}

impl Found {
    fn add(&mut self, kind: &str, example: Value) {
        *self.counts.entry(kind.to_owned()).or_default() += 1;
        let examples = self.anomalies.entry(kind.to_owned()).or_default();
        if examples.len() < EXAMPLES_MAX {
            examples.push(example);
        }
    }
}

fn int_value(event: &Event) -> Option<i64> {
    event.value.as_ref().and_then(Value::as_i64)
}

/// An acknowledged op's sends: per key, `(offset, value)` in the order sent.
type OpSends<'a> = BTreeMap<&'a str, Vec<(i64, i64)>>;

/// The sends an op reports with known offsets, per key as `(offset, value)` in the order sent:
/// the single-send fields first, then `sends`. A send without an offset cannot be placed in
/// the version order, so it is left out.
fn sends_of(event: &Event) -> OpSends<'_> {
    let mut sends = OpSends::new();
    if let (Some(key), Some(value), Some(offset)) =
        (event.key.as_deref(), int_value(event), event.offset)
    {
        sends.entry(key).or_default().push((offset, value));
    }
    for (key, records) in event.sends.iter().flatten() {
        let known = records
            .iter()
            .filter_map(|(offset, value)| offset.map(|o| (o, *value)));
        sends.entry(key.as_str()).or_default().extend(known);
    }
    sends.retain(|_, records| !records.is_empty());
    sends
}

/// One acknowledged send. `op` (the index of its completion) tells sends of one op from those
/// of successive ops, which are judged by different anomalies.
struct Ack<'a> {
    key: &'a str,
    value: i64,
    offset: i64,
    process: i64,
    op: usize,
    time_ns: u64,
}

/// Whether a completion reports records read: an acknowledged poll, or a transaction whatever
/// its outcome (a consumer's reads happen whether or not its transaction commits).
fn reads_records(event: &Event) -> bool {
    (event.f == "poll" && event.kind == "ok") || (event.f == "txn" && event.kind != "invoke")
}

/// Checks a history.
pub fn check(history: &[Event]) -> Report {
    let history = &*txn::with_effects(history);
    let mut found = Found::default();
    let completions: Vec<&Event> = history.iter().filter(|e| e.kind != "invoke").collect();
    let faults_injected = history
        .iter()
        .filter(|e| e.f == "nemesis" && e.kind != "invoke")
        .count();

    // The version order of every key: offset -> value, from reads and acknowledged sends.
    let mut versions: BTreeMap<String, BTreeMap<i64, i64>> = BTreeMap::new();
    let mut offsets_of: BTreeMap<(String, i64), BTreeSet<i64>> = BTreeMap::new();
    let mut note = |found: &mut Found, key: &str, offset: i64, value: i64| {
        let order = versions.entry(key.to_owned()).or_default();
        match order.get(&offset) {
            Some(existing) if *existing != value => found.add(
                "inconsistent-offsets",
                json!({"key": key, "offset": offset, "values": [existing, value]}),
            ),
            Some(_) => {}
            None => {
                order.insert(offset, value);
            }
        }
        offsets_of
            .entry((key.to_owned(), value))
            .or_default()
            .insert(offset);
    };
    let mut acknowledged: Vec<Ack> = Vec::new();
    // The acknowledged ops' sends, kept for the checks within an op, which need the whole
    // version order.
    let mut sent_ops: Vec<(&Event, OpSends)> = Vec::new();
    let mut read: BTreeSet<(String, i64)> = BTreeSet::new();
    for (op, event) in completions.iter().enumerate() {
        if event.kind == "ok" && matches!(event.f.as_str(), "send" | "txn") {
            let sends = sends_of(event);
            for (key, records) in &sends {
                for (offset, value) in records {
                    note(&mut found, key, *offset, *value);
                    acknowledged.push(Ack {
                        key,
                        value: *value,
                        offset: *offset,
                        process: event.process,
                        op,
                        time_ns: event.time_ns,
                    });
                }
            }
            sent_ops.push((event, sends));
        }
        if reads_records(event) {
            for (key, records) in event.reads.iter().flatten() {
                for (offset, value) in records {
                    note(&mut found, key, *offset, *value);
                    read.insert((key.clone(), *value));
                }
            }
        }
    }
    for ((key, value), offsets) in &offsets_of {
        if offsets.len() > 1 {
            found.add(
                "duplicate",
                json!({"key": key, "value": value, "offsets": offsets}),
            );
        }
    }
    // Lost and unseen writes.
    let highest_read: HashMap<&str, i64> = {
        let mut highest = HashMap::new();
        for event in &completions {
            if reads_records(event) {
                for (key, records) in event.reads.iter().flatten() {
                    if let Some(max) = records.iter().map(|(o, _)| *o).max() {
                        let entry = highest.entry(key.as_str()).or_insert(max);
                        *entry = (*entry).max(max);
                    }
                }
            }
        }
        highest
    };
    for ack in &acknowledged {
        if read.contains(&(ack.key.to_owned(), ack.value)) {
            continue;
        }
        let example = json!({"key": ack.key, "value": ack.value, "offset": ack.offset,
                             "process": ack.process});
        if highest_read.get(ack.key).is_some_and(|h| *h > ack.offset) {
            found.add("lost-write", example);
        } else {
            found.add("unseen", example);
        }
    }
    // Sends of one process to one key get increasing offsets from op to op. Within an op the
    // entries follow one another in the order sent, so the one kept for a key when the next op
    // comes is the op's last send to it; pairs within an op are int-nonmonotonic-send's.
    let mut last_send: HashMap<(i64, &str), &Ack> = HashMap::new();
    for ack in &acknowledged {
        if let Some(previous) = last_send.insert((ack.process, ack.key), ack) {
            if previous.op != ack.op && ack.offset <= previous.offset {
                found.add(
                    "nonmonotonic-send",
                    json!({"key": ack.key, "process": ack.process,
                           "values": [previous.value, ack.value],
                           "offsets": [previous.offset, ack.offset]}),
                );
            }
        }
    }
    let index_of: BTreeMap<&str, HashMap<i64, usize>> = versions
        .iter()
        .map(|(key, order)| {
            (
                key.as_str(),
                order.keys().enumerate().map(|(i, o)| (*o, i)).collect(),
            )
        })
        .collect();
    let index = |key: &str, offset: i64| index_of.get(key).and_then(|m| m.get(&offset)).copied();
    // Sends within one op: successive sends to a key go forward, to adjacent versions.
    for (event, sends) in &sent_ops {
        let process = event.process;
        // Concurrent transactions interleave their writes to a partition (Kafka's transactions
        // isolate reads from uncommitted writes, not writes from each other).
        let interleaving_allowed = event.f == "txn";
        for (key, records) in sends {
            for pair in records.windows(2) {
                let ((a, value_a), (b, value_b)) = (pair[0], pair[1]);
                if b <= a {
                    found.add(
                        "int-nonmonotonic-send",
                        json!({"key": key, "process": process,
                               "values": [value_a, value_b], "offsets": [a, b]}),
                    );
                } else if let (Some(ia), Some(ib)) = (index(key, a), index(key, b)) {
                    if ib > ia + 1 && !interleaving_allowed {
                        found.add(
                            "int-send-skip",
                            json!({"key": key, "process": process, "values": [value_a, value_b],
                                   "offsets": [a, b], "skipped": ib - ia - 1}),
                        );
                    }
                }
            }
        }
    }
    // Polls: within one poll, and between a process's successive polls of a key.
    let mut position: HashMap<(i64, String), i64> = HashMap::new();
    for event in &completions {
        if event.f == "assign" && event.kind == "ok" {
            position.retain(|(p, _), _| *p != event.process);
            continue;
        }
        if !reads_records(event) {
            continue;
        }
        for (key, records) in event.reads.iter().flatten() {
            for pair in records.windows(2) {
                let ((a, _), (b, _)) = (pair[0], pair[1]);
                if b <= a {
                    found.add(
                        "int-nonmonotonic-poll",
                        json!({"key": key, "process": event.process, "offsets": [a, b]}),
                    );
                } else if let (Some(ia), Some(ib)) = (index(key, a), index(key, b)) {
                    if ib > ia + 1 {
                        found.add(
                            "int-poll-skip",
                            json!({"key": key, "process": event.process, "offsets": [a, b], "skipped": ib - ia - 1}),
                        );
                    }
                }
            }
            let (Some(first), Some(last)) = (records.first(), records.last()) else {
                continue;
            };
            if let Some(previous) = position.get(&(event.process, key.clone())) {
                if first.0 <= *previous {
                    found.add(
                        "nonmonotonic-poll",
                        json!({"key": key, "process": event.process, "offsets": [previous, first.0]}),
                    );
                } else if let (Some(ia), Some(ib)) = (index(key, *previous), index(key, first.0)) {
                    if ib > ia + 1 {
                        found.add(
                            "poll-skip",
                            json!({"key": key, "process": event.process, "offsets": [previous, first.0], "skipped": ib - ia - 1}),
                        );
                    }
                }
            }
            position.insert((event.process, key.clone()), last.0);
        }
    }
    let write_recovery_ms = write_recovery(history, &acknowledged, &mut found);
    let groups = groups::check(history, &mut found);
    let txn = txn::check(history, &mut found);
    let bad_error_types: Vec<String> = found.counts.keys().cloned().collect();
    Report {
        valid: bad_error_types.is_empty(),
        bad_error_types,
        anomalies: found.anomalies,
        anomaly_counts: found.counts,
        faults_injected,
        ops_checked: completions
            .iter()
            .filter(|e| CLIENT_OPS.contains(&e.f.as_str()))
            .count(),
        acknowledged_sends: acknowledged.len(),
        keys: versions.len(),
        write_recovery_ms,
        groups,
        txn,
    }
}

/// Measures how long writes took to succeed again after the last `healed` event, and reports
/// `slow-write-recovery` when they did not within `WRITE_RECOVERY_MAX_MS`. Judged on time_ns
/// rather than line order so that a history need not be sorted; the harness sorts it anyway.
fn write_recovery(history: &[Event], acknowledged: &[Ack], found: &mut Found) -> Option<u64> {
    let healed_ns = history
        .iter()
        .filter(|e| e.f == "healed")
        .map(|e| e.time_ns)
        .max()?;
    // An ok event completing at the heal's very nanosecond is taken as after it: the two
    // cannot be ordered, and the send did succeed with every fault healed.
    let first_ok_send_ns = acknowledged
        .iter()
        .map(|ack| ack.time_ns)
        .filter(|t| *t >= healed_ns)
        .min();
    let elapsed_ns = first_ok_send_ns.map(|t| t - healed_ns);
    // Compared in nanoseconds, so that 15000.4 ms does not pass as 15000.
    if elapsed_ns.is_none_or(|ns| ns > WRITE_RECOVERY_MAX_MS * NS_PER_MS) {
        found.add(
            "slow-write-recovery",
            json!({"healed_ns": healed_ns, "first_ok_send_ns": first_ok_send_ns,
                   "limit_ms": WRITE_RECOVERY_MAX_MS}),
        );
    }
    elapsed_ns.map(|ns| ns / NS_PER_MS)
}

/// A human summary of a report.
pub fn summary(report: &Report) -> String {
    let mut out = format!(
        "{}: {} operations checked, {} acknowledged sends over {} keys, {} faults injected\n",
        if report.valid { "VALID" } else { "INVALID" },
        report.ops_checked,
        report.acknowledged_sends,
        report.keys,
        report.faults_injected
    );
    if let Some(ms) = report.write_recovery_ms {
        out.push_str(&format!(
            "  writes recovered {ms} ms after healing (limit {WRITE_RECOVERY_MAX_MS} ms)\n"
        ));
    }
    if let Some(g) = &report.groups {
        out.push_str(&format!(
            "  groups: {} commits acknowledged ({} after healing), {} not; {} committed reads; \
             {} assignments, {} revocations, {} consumer crashes; {} generations in {} group \
             metadata records\n",
            g.commits_ok,
            g.commits_ok_after_healing,
            g.commits_unknown,
            g.committed_reads,
            g.assignments,
            g.revocations,
            g.consumer_crashes,
            g.generations_seen,
            g.group_metadata_records
        ));
    }
    if let Some(t) = &report.txn {
        out.push_str(&txn::summary(t));
    }
    for (kind, count) in &report.anomaly_counts {
        out.push_str(&format!("  {kind}: {count}\n"));
        if let Some(example) = report.anomalies.get(kind).and_then(|e| e.first()) {
            out.push_str(&format!("    e.g. {example}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(process: i64, key: &str, value: i64, offset: i64) -> Event {
        Event {
            time_ns: 0,
            process,
            kind: "ok".into(),
            f: "send".into(),
            key: Some(key.into()),
            value: Some(json!(value)),
            offset: Some(offset),
            reads: None,
            sends: None,
            ..Event::default()
        }
    }

    fn poll(process: i64, key: &str, records: &[(i64, i64)]) -> Event {
        Event {
            time_ns: 0,
            process,
            kind: "ok".into(),
            f: "poll".into(),
            key: None,
            value: None,
            offset: None,
            reads: Some(BTreeMap::from([(key.to_owned(), records.to_vec())])),
            sends: None,
            ..Event::default()
        }
    }

    fn assign(process: i64) -> Event {
        Event {
            time_ns: 0,
            process,
            kind: "ok".into(),
            f: "assign".into(),
            key: None,
            value: None,
            offset: None,
            reads: None,
            sends: None,
            ..Event::default()
        }
    }

    /// An acknowledged op that sent several messages: `(key, offset, value)` in the order sent.
    fn multi_send(process: i64, sends: &[(&str, i64, i64)]) -> Event {
        let mut by_key = Sends::new();
        for (key, offset, value) in sends {
            by_key
                .entry((*key).to_owned())
                .or_default()
                .push((Some(*offset), *value));
        }
        Event {
            time_ns: 0,
            process,
            kind: "ok".into(),
            f: "send".into(),
            key: None,
            value: None,
            offset: None,
            reads: None,
            sends: Some(by_key),
            ..Event::default()
        }
    }

    fn harness(f: &str) -> Event {
        Event {
            time_ns: 0,
            process: -1,
            kind: "info".into(),
            f: f.into(),
            key: None,
            value: None,
            offset: None,
            reads: None,
            sends: None,
            ..Event::default()
        }
    }

    fn at(time_ns: u64, mut event: Event) -> Event {
        event.time_ns = time_ns;
        event
    }

    fn only(report: &Report) -> Vec<&str> {
        report.bad_error_types.iter().map(String::as_str).collect()
    }

    /// Three sends read back in order by two pollers: nothing to report.
    fn clean() -> Vec<Event> {
        vec![
            send(1, "k", 10, 0),
            send(1, "k", 11, 1),
            send(2, "k", 12, 2),
            poll(3, "k", &[(0, 10), (1, 11)]),
            poll(3, "k", &[(2, 12)]),
            poll(4, "k", &[(0, 10), (1, 11), (2, 12)]),
        ]
    }

    #[test]
    fn a_clean_history_is_valid() {
        let report = check(&clean());
        assert!(report.valid, "{report:?}");
        assert_eq!((report.ops_checked, report.acknowledged_sends), (6, 3));
    }

    #[test]
    fn inconsistent_offsets_are_found() {
        let mut history = clean();
        history.push(poll(5, "k", &[(1, 99)]));
        assert!(only(&check(&history)).contains(&"inconsistent-offsets"));
    }

    #[test]
    fn duplicates_are_found() {
        let mut history = clean();
        history.push(poll(5, "k", &[(3, 11)]));
        assert_eq!(only(&check(&history)), vec!["duplicate"]);
    }

    #[test]
    fn lost_and_unseen_writes_are_told_apart() {
        // 11 was acknowledged at offset 1, but reads went past it to 2 without it.
        let lost = vec![
            send(1, "k", 10, 0),
            send(1, "k", 11, 1),
            send(2, "k", 12, 2),
            poll(3, "k", &[(0, 10), (2, 12)]),
        ];
        let report = check(&lost);
        assert!(only(&report).contains(&"lost-write"), "{report:?}");
        assert_eq!(report.anomaly_counts.get("lost-write"), Some(&1));
        // 12 acknowledged, never read, and no read reached offset 2.
        let unseen = vec![
            send(1, "k", 10, 0),
            send(1, "k", 12, 2),
            poll(3, "k", &[(0, 10)]),
        ];
        assert_eq!(only(&check(&unseen)), vec!["unseen"]);
        // A send whose outcome is unknown (info) may or may not be there.
        let mut info = send(1, "k", 13, 3);
        info.kind = "info".into();
        info.offset = None;
        let mut history = clean();
        history.push(info);
        assert!(check(&history).valid);
    }

    #[test]
    fn nonmonotonic_sends_are_found() {
        let history = vec![
            send(1, "k", 10, 5),
            send(1, "k", 11, 4),
            poll(3, "k", &[(4, 11), (5, 10)]),
        ];
        assert_eq!(only(&check(&history)), vec!["nonmonotonic-send"]);
        // Different processes may interleave.
        let history = vec![
            send(1, "k", 10, 5),
            send(2, "k", 11, 4),
            poll(3, "k", &[(4, 11), (5, 10)]),
        ];
        assert!(check(&history).valid);
    }

    #[test]
    fn skips_and_backward_polls_are_found_between_and_within_polls() {
        let base = vec![
            send(1, "k", 10, 0),
            send(1, "k", 11, 1),
            send(1, "k", 12, 2),
            send(1, "k", 13, 3),
            poll(9, "k", &[(0, 10), (1, 11), (2, 12), (3, 13)]),
        ];
        let mut skip = base.clone();
        skip.extend([poll(3, "k", &[(0, 10)]), poll(3, "k", &[(2, 12), (3, 13)])]);
        assert_eq!(only(&check(&skip)), vec!["poll-skip"]);
        let mut backward = base.clone();
        backward.extend([poll(3, "k", &[(0, 10), (1, 11)]), poll(3, "k", &[(1, 11)])]);
        assert_eq!(only(&check(&backward)), vec!["nonmonotonic-poll"]);
        let mut internal_skip = base.clone();
        internal_skip.push(poll(3, "k", &[(0, 10), (2, 12)]));
        assert_eq!(only(&check(&internal_skip)), vec!["int-poll-skip"]);
        let mut internal_backward = base.clone();
        internal_backward.push(poll(3, "k", &[(1, 11), (0, 10)]));
        assert_eq!(
            only(&check(&internal_backward)),
            vec!["int-nonmonotonic-poll"]
        );
        // An assign (seek) lets a consumer jump.
        let mut seek = base.clone();
        seek.extend([
            poll(3, "k", &[(0, 10)]),
            assign(3),
            poll(3, "k", &[(3, 13)]),
        ]);
        assert!(check(&seek).valid);
        // Offset gaps with no known value (compaction, aborted batches) are not skips.
        let gaps = vec![
            send(1, "k", 10, 0),
            send(1, "k", 11, 5),
            poll(3, "k", &[(0, 10)]),
            poll(3, "k", &[(5, 11)]),
        ];
        assert!(check(&gaps).valid);
    }

    #[test]
    fn histories_round_trip_through_jsonl_and_count_faults() {
        let text = "\
{\"time_ns\":1,\"process\":3,\"type\":\"invoke\",\"f\":\"send\",\"key\":\"q-0\",\"value\":17}
{\"time_ns\":2,\"process\":3,\"type\":\"ok\",\"f\":\"send\",\"key\":\"q-0\",\"value\":17,\"offset\":0}
{\"time_ns\":3,\"process\":-1,\"type\":\"info\",\"f\":\"nemesis\",\"value\":\"kill n2\"}

{\"time_ns\":4,\"process\":4,\"type\":\"ok\",\"f\":\"poll\",\"reads\":{\"q-0\":[[0,17]]}}
";
        let history = parse(text).expect("parse");
        let report = check(&history);
        assert!(report.valid);
        assert_eq!(
            (report.faults_injected, report.ops_checked, report.keys),
            (1, 2, 1)
        );
        assert!(summary(&report).starts_with("VALID"));
        assert!(parse("{not json").is_err());
    }

    #[test]
    fn multi_sends_count_like_single_sends() {
        let history = vec![
            multi_send(1, &[("k", 0, 10), ("k", 1, 11), ("j", 0, 20)]),
            send(2, "k", 12, 2),
            poll(3, "k", &[(0, 10), (1, 11), (2, 12)]),
            poll(3, "j", &[(0, 20)]),
        ];
        let report = check(&history);
        assert!(report.valid, "{report:?}");
        assert_eq!(
            (report.acknowledged_sends, report.keys, report.ops_checked),
            (4, 2, 4)
        );
        // 11 never read, though a read went past it.
        let lost = vec![
            multi_send(1, &[("k", 0, 10), ("k", 1, 11)]),
            send(2, "k", 12, 2),
            poll(3, "k", &[(0, 10), (2, 12)]),
        ];
        let report = check(&lost);
        assert_eq!(
            report.anomaly_counts.get("lost-write"),
            Some(&1),
            "{report:?}"
        );
        // 11 never read, and nothing read past it.
        let unseen = vec![
            multi_send(1, &[("k", 0, 10), ("k", 1, 11)]),
            poll(3, "k", &[(0, 10)]),
        ];
        assert_eq!(only(&check(&unseen)), vec!["unseen"]);
        // One value at two offsets, from two ops or within one.
        let duplicate = vec![
            multi_send(1, &[("k", 0, 10)]),
            multi_send(2, &[("k", 1, 10)]),
            poll(3, "k", &[(0, 10), (1, 10)]),
        ];
        assert_eq!(only(&check(&duplicate)), vec!["duplicate"]);
        let duplicate = vec![
            multi_send(1, &[("k", 0, 10), ("k", 1, 10)]),
            poll(3, "k", &[(0, 10), (1, 10)]),
        ];
        assert_eq!(only(&check(&duplicate)), vec!["duplicate"]);
        // A process's next op went backwards: nonmonotonic-send, not an in-op anomaly.
        let backward = vec![
            multi_send(1, &[("k", 2, 12), ("k", 3, 13)]),
            multi_send(1, &[("k", 0, 10), ("k", 1, 11)]),
            poll(3, "k", &[(0, 10), (1, 11), (2, 12), (3, 13)]),
        ];
        let report = check(&backward);
        assert_eq!(only(&report), vec!["nonmonotonic-send"]);
        assert_eq!(report.anomaly_counts.get("nonmonotonic-send"), Some(&1));
        // A single send then a multi-send of the same process, going forward.
        let forward = vec![
            send(1, "k", 10, 0),
            multi_send(1, &[("k", 1, 11), ("k", 2, 12)]),
            poll(3, "k", &[(0, 10), (1, 11), (2, 12)]),
        ];
        assert!(check(&forward).valid);
    }

    #[test]
    fn int_send_skips_are_found() {
        // Another process's send landed between the op's two sends.
        let skip = vec![
            multi_send(1, &[("k", 0, 10), ("k", 2, 12)]),
            send(2, "k", 11, 1),
            poll(3, "k", &[(0, 10), (1, 11), (2, 12)]),
        ];
        let report = check(&skip);
        assert_eq!(only(&report), vec!["int-send-skip"]);
        assert_eq!(report.anomalies["int-send-skip"][0]["skipped"], json!(1));
        // Adjacent versions pass.
        let adjacent = vec![
            multi_send(1, &[("k", 0, 10), ("k", 1, 11)]),
            send(2, "k", 12, 2),
            poll(3, "k", &[(0, 10), (1, 11), (2, 12)]),
        ];
        assert!(check(&adjacent).valid);
        // So does an offset gap with no known value (e.g. a transaction marker).
        let gap = vec![
            multi_send(1, &[("k", 0, 10), ("k", 2, 12)]),
            poll(3, "k", &[(0, 10), (2, 12)]),
        ];
        assert!(check(&gap).valid);
    }

    #[test]
    fn int_nonmonotonic_sends_are_found() {
        let backward = vec![
            multi_send(1, &[("k", 3, 13), ("k", 2, 12)]),
            poll(3, "k", &[(2, 12), (3, 13)]),
        ];
        assert_eq!(only(&check(&backward)), vec!["int-nonmonotonic-send"]);
        let forward = vec![
            multi_send(1, &[("k", 2, 12), ("k", 3, 13)]),
            poll(3, "k", &[(2, 12), (3, 13)]),
        ];
        assert!(check(&forward).valid);
        // Sends to different keys in one op are not ordered against each other.
        let two_keys = vec![
            multi_send(1, &[("k", 3, 13), ("j", 0, 20)]),
            poll(3, "k", &[(3, 13)]),
            poll(3, "j", &[(0, 20)]),
        ];
        assert!(check(&two_keys).valid);
    }

    #[test]
    fn multi_sends_parse_from_jsonl_beside_single_sends() {
        let text = "\
{\"time_ns\":1,\"process\":5,\"type\":\"invoke\",\"f\":\"send\",\"sends\":{\"q-0\":[[null,18],[null,19]]}}
{\"time_ns\":2,\"process\":5,\"type\":\"ok\",\"f\":\"send\",\"sends\":{\"q-0\":[[1,18],[2,19]],\"q-1\":[[0,20]]}}
{\"time_ns\":3,\"process\":3,\"type\":\"ok\",\"f\":\"send\",\"key\":\"q-0\",\"value\":17,\"offset\":0}
{\"time_ns\":4,\"process\":4,\"type\":\"ok\",\"f\":\"poll\",\"reads\":{\"q-0\":[[0,17],[1,18],[2,19]],\"q-1\":[[0,20]]}}
";
        let history = parse(text).expect("parse");
        let report = check(&history);
        assert!(report.valid, "{report:?}");
        assert_eq!((report.acknowledged_sends, report.keys), (4, 2));
        // Events written back read the same.
        let again = serde_json::to_string(&history[1]).expect("serialize");
        assert_eq!(parse(&again).expect("parse").first(), Some(&history[1]));
        assert!(
            parse("{\"process\":1,\"type\":\"ok\",\"f\":\"send\",\"sends\":{\"k\":[1]}}").is_err()
        );
    }

    #[test]
    fn write_recovery_is_measured_from_the_last_heal() {
        const S: u64 = 1_000_000_000;
        let mut failed = at(21 * S, send(2, "k", 13, 3));
        failed.kind = "fail".into();
        failed.offset = None;
        let history = vec![
            at(5 * S, harness("nemesis")),
            at(10 * S, harness("healed")),
            at(11 * S, send(1, "k", 10, 0)),
            at(12 * S, harness("nemesis")),
            at(20 * S, harness("healed")),
            failed,
            at(22 * S + 500_000_000, multi_send(1, &[("k", 1, 11)])),
            at(23 * S, send(2, "k", 12, 2)),
            at(30 * S, poll(3, "k", &[(0, 10), (1, 11), (2, 12)])),
        ];
        let report = check(&history);
        assert!(report.valid, "{report:?}");
        assert_eq!(report.write_recovery_ms, Some(2_500));
        assert_eq!(report.faults_injected, 2);
        assert!(summary(&report).contains("writes recovered 2500 ms after healing"));
        // Without a healed event there is nothing to measure.
        let report = check(&clean());
        assert_eq!((report.valid, report.write_recovery_ms), (true, None));
    }

    #[test]
    fn slow_write_recovery_is_found() {
        const S: u64 = 1_000_000_000;
        let after = |ns: u64| {
            vec![
                at(S, send(1, "k", 10, 0)),
                at(20 * S, harness("healed")),
                at(20 * S + ns, send(1, "k", 11, 1)),
                at(60 * S, poll(3, "k", &[(0, 10), (1, 11)])),
            ]
        };
        // Exactly the limit passes; a nanosecond more does not, though it rounds to the limit.
        let report = check(&after(15 * S));
        assert_eq!(
            (report.valid, report.write_recovery_ms),
            (true, Some(15_000))
        );
        let report = check(&after(15 * S + 1));
        assert_eq!(only(&report), vec!["slow-write-recovery"]);
        assert_eq!(report.write_recovery_ms, Some(15_000));
        assert_eq!(report.anomaly_counts.get("slow-write-recovery"), Some(&1));
        // No send acknowledged after healing at all.
        let never = vec![
            at(S, send(1, "k", 10, 0)),
            at(20 * S, harness("healed")),
            at(60 * S, poll(3, "k", &[(0, 10)])),
        ];
        let report = check(&never);
        assert_eq!(only(&report), vec!["slow-write-recovery"]);
        assert_eq!(report.write_recovery_ms, None);
        assert_eq!(
            report.anomalies["slow-write-recovery"][0],
            json!({"healed_ns": 20 * S, "first_ok_send_ns": null, "limit_ms": 15_000})
        );
        let text = summary(&report);
        assert!(text.starts_with("INVALID") && text.contains("slow-write-recovery: 1"));
    }

    #[test]
    fn ops_checked_counts_client_operations_only() {
        let mut invoke = send(1, "k", 10, 0);
        invoke.kind = "invoke".into();
        invoke.offset = None;
        let mut failed = send(2, "k", 11, 0);
        failed.kind = "fail".into();
        failed.offset = None;
        let history = vec![
            invoke,
            send(1, "k", 10, 0),
            failed,
            harness("nemesis"),
            harness("heal"),
            assign(3),
            poll(3, "k", &[(0, 10)]),
            at(10, harness("healed")),
        ];
        let report = check(&history);
        assert_eq!(
            (
                report.ops_checked,
                report.faults_injected,
                report.acknowledged_sends
            ),
            (4, 1, 1)
        );
        // The healed event has no send after it (the others are at time 0), hence invalid.
        assert_eq!(only(&report), vec!["slow-write-recovery"]);
    }
}
