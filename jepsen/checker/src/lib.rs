//! The checker of Sluice's fault-injection suite: reads a history of queue operations (sends
//! and polls against topic-partitions, as Jepsen's Kafka queue workload records them) and finds
//! the anomalies Jepsen looks for in Kafka-compatible systems.
//!
//! # History format
//! JSON lines, one event each: an operation's invocation and its completion are two events.
//! ```text
//! {"time_ns":1,"process":3,"type":"invoke","f":"send","key":"q-0","value":17}
//! {"time_ns":2,"process":3,"type":"ok","f":"send","key":"q-0","value":17,"offset":41}
//! {"time_ns":3,"process":4,"type":"ok","f":"poll","reads":{"q-0":[[40,16],[41,17]]}}
//! {"time_ns":4,"process":4,"type":"ok","f":"assign"}
//! {"time_ns":5,"process":-1,"type":"info","f":"nemesis","value":"kill n2"}
//! {"time_ns":6,"process":-1,"type":"info","f":"heal","value":"restart n2"}
//! ```
//! `type` is `invoke`, `ok`, `fail` (did not happen) or `info` (unknown). An `assign` by a
//! process restarts its polling (seeks are allowed to jump). A replaced client gets a new
//! process number. Values are unique per key.
//!
//! # Anomalies (Jepsen's definitions, for single-message sends)
//! - `inconsistent-offsets`: one offset of a key holds different values in different reads.
//! - `duplicate`: one value of a key appears at more than one offset.
//! - `lost-write`: an acknowledged send was never read, though reads went past its offset.
//! - `unseen`: an acknowledged send was never read, and no read went past its offset (with
//!   final reads to the end of every key, a lost write by another name).
//! - `nonmonotonic-send`: a process's acknowledged sends to a key got decreasing offsets.
//! - `poll-skip` / `nonmonotonic-poll`: between two polls of a key by one process, the
//!   consumer skipped records that exist in the version order, or went backwards.
//! - `int-poll-skip` / `int-nonmonotonic-poll`: the same within a single poll.
//!
//! Skips are judged on the version order: every offset known to hold a value, from all reads
//! and acknowledged sends. Offsets may have gaps (aborted or compacted records); only values
//! present in the version order can be skipped.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One line of a history. `nemesis` events are faults injected; `heal` events end them.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
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
    pub ops_checked: usize,
    pub acknowledged_sends: usize,
    pub keys: usize,
}

const EXAMPLES_MAX: usize = 8;

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

/// Checks a history.
pub fn check(history: &[Event]) -> Report {
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
    let mut acknowledged: Vec<(String, i64, i64, i64)> = Vec::new();
    let mut read: BTreeSet<(String, i64)> = BTreeSet::new();
    for event in &completions {
        match (event.f.as_str(), event.kind.as_str()) {
            ("send", "ok") => {
                let (Some(key), Some(value), Some(offset)) =
                    (event.key.as_ref(), int_value(event), event.offset)
                else {
                    continue;
                };
                note(&mut found, key, offset, value);
                acknowledged.push((key.clone(), value, offset, event.process));
            }
            ("poll", "ok") => {
                for (key, records) in event.reads.iter().flatten() {
                    for (offset, value) in records {
                        note(&mut found, key, *offset, *value);
                        read.insert((key.clone(), *value));
                    }
                }
            }
            _ => {}
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
            if event.f == "poll" && event.kind == "ok" {
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
    for (key, value, offset, process) in &acknowledged {
        if read.contains(&(key.clone(), *value)) {
            continue;
        }
        let example = json!({"key": key, "value": value, "offset": offset, "process": process});
        if highest_read.get(key.as_str()).is_some_and(|h| h > offset) {
            found.add("lost-write", example);
        } else {
            found.add("unseen", example);
        }
    }
    // Sends of one process to one key get increasing offsets.
    let mut last_send: HashMap<(i64, &str), (i64, i64)> = HashMap::new();
    for (key, value, offset, process) in &acknowledged {
        if let Some((previous_offset, previous_value)) =
            last_send.insert((*process, key.as_str()), (*offset, *value))
        {
            if *offset <= previous_offset {
                found.add(
                    "nonmonotonic-send",
                    json!({"key": key, "process": process,
                           "values": [previous_value, value], "offsets": [previous_offset, offset]}),
                );
            }
        }
    }
    // Polls: within one poll, and between a process's successive polls of a key.
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
    let mut position: HashMap<(i64, String), i64> = HashMap::new();
    for event in &completions {
        if event.f == "assign" && event.kind == "ok" {
            position.retain(|(p, _), _| *p != event.process);
            continue;
        }
        if event.f != "poll" || event.kind != "ok" {
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
    let bad_error_types: Vec<String> = found.counts.keys().cloned().collect();
    Report {
        valid: bad_error_types.is_empty(),
        bad_error_types,
        anomalies: found.anomalies,
        anomaly_counts: found.counts,
        faults_injected,
        ops_checked: completions.iter().filter(|e| e.f != "nemesis").count(),
        acknowledged_sends: acknowledged.len(),
        keys: versions.len(),
    }
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
        }
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
}
