//! The consumer-group checks of the groups workload: members of a group subscribe to a topic,
//! are assigned its partitions by rebalances, poll, commit what they read, crash and are
//! replaced; the coordinator that runs the group is faulted like every other node.
//!
//! # History format (group events)
//! ```text
//! {"process":5,"type":"ok","f":"assign","group":"g","partitions":["q-0","q-3"]}
//! {"process":5,"type":"invoke","f":"committed","group":"g","partitions":["q-0","q-3"]}
//! {"process":5,"type":"ok","f":"committed","group":"g","partitions":["q-0","q-3"],"offsets":{"q-0":17}}
//! {"process":5,"type":"ok","f":"poll","reads":{"q-0":[[17,1000000004]]}}
//! {"process":5,"type":"invoke","f":"commit","group":"g","offsets":{"q-0":18}}
//! {"process":5,"type":"ok","f":"commit","group":"g","offsets":{"q-0":18}}
//! {"process":5,"type":"ok","f":"revoke","group":"g","partitions":["q-0","q-3"]}
//! {"process":6,"type":"info","f":"crash","value":"kill -9 by the harness"}
//! {"process":-1,"type":"info","f":"group-metadata","value":{"group":"g","partition":21,
//!   "offset":4,"generation":3,"members":[{"member_id":"m1","client_id":"c5","assignment":["q-0"]}]}}
//! ```
//! - `assign` and `revoke` are a member's rebalance callbacks: the partitions it was given,
//!   and those it gave up (`"value":"lost"` when the group had already gone on without it).
//!   An assignment lasts from its `assign` to the `revoke` of the partition or the process's
//!   end; the polls of a process between the two are what the assignment delivered.
//! - `committed` reads the group's committed offsets (OffsetFetch) for `partitions`;
//!   `offsets` holds those that had one, so an answered partition missing from it had none.
//! - `commit` commits `offsets` (the next offset to read, Kafka's convention). Only an `ok`
//!   commit is acknowledged; one that errs or gets no answer may or may not be stored.
//! - `crash`: the process died (os._exit, or kill -9 by the harness). Not an operation.
//! - `group-metadata`: one group metadata record of `__consumer_offsets` as the coordinator
//!   stored it (read back after the run): the generation and each member's assignment, or
//!   `"deleted":true` (a tombstone), or `"error"` (a value that did not decode).
//!
//! # Anomalies
//! - `committed-offset-regression`: for a group-partition, a committed offset observed (by an
//!   acknowledged commit, or a `committed` read) lower than that of a commit acknowledged
//!   before the observation was invoked (real-time order; a read finding no offset at all
//!   counts as lower). Kafka lets a member commit any offset, so the workload commits only what
//!   it read from partitions it owns, and only while it owns them: a lower commit then means a
//!   fenced member's commit was taken, or an acknowledged one was lost.
//! - `redelivered-beyond-commit`: a process read a record at an offset below N from a
//!   partition whose assignment to it began after a commit of N to that partition was
//!   acknowledged. At-least-once lets a successor re-read what was read but not yet
//!   committed; what was committed before it started is past.
//! - `double-ownership`: two members own one partition in one generation, as the group's
//!   metadata records say: one record assigns a partition to two members, or two records of
//!   one generation disagree about a partition's owner. The clients cannot see generations;
//!   the coordinator's records name them. A member is known by its static instance id when it
//!   has one (a static member rejoining keeps its assignment under a new member id), else by
//!   its member id.
//! - `group-metadata-unreadable`: a group metadata record that did not decode, so the
//!   generations it holds went unchecked.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Event, Found};

/// What a history shows of its consumer group, for the report.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct GroupReport {
    /// Commits acknowledged, and those invoked that were not (an error or no answer).
    pub commits_ok: usize,
    pub commits_unknown: usize,
    /// Acknowledged commits that completed after the last `healed` event.
    pub commits_ok_after_healing: usize,
    /// `committed` reads answered.
    pub committed_reads: usize,
    /// Assignments of at least one partition, and revocations.
    pub assignments: usize,
    pub revocations: usize,
    pub consumer_crashes: usize,
    pub group_metadata_records: usize,
    /// Distinct (group, generation) among the group metadata records.
    pub generations_seen: usize,
}

/// Events that only a groups history has.
const GROUP_EVENTS: [&str; 5] = ["commit", "committed", "revoke", "crash", "group-metadata"];

/// An acknowledged commit of one partition.
#[derive(Debug, Clone, Copy)]
struct Acked {
    offset: i64,
    process: i64,
    acked_ns: u64,
}

/// Per (group, key), the acknowledged commits in the order they were acknowledged, each
/// paired with the highest commit acknowledged up to it.
#[derive(Default)]
struct CommitLog {
    by_partition: HashMap<(String, String), Vec<(Acked, Acked)>>,
}

impl CommitLog {
    fn new(mut commits: Vec<(String, String, Acked)>) -> CommitLog {
        commits.sort_by_key(|(_, _, acked)| acked.acked_ns);
        let mut log = CommitLog::default();
        for (group, key, acked) in commits {
            let entries = log.by_partition.entry((group, key)).or_default();
            let highest = match entries.last() {
                Some((_, highest)) if highest.offset >= acked.offset => *highest,
                _ => acked,
            };
            entries.push((acked, highest));
        }
        log
    }

    /// The highest commit of the partition acknowledged strictly before `time_ns`.
    fn highest_before(&self, group: &str, key: &str, time_ns: u64) -> Option<Acked> {
        let entries = self.by_partition.get(&(group.to_owned(), key.to_owned()))?;
        let before = entries.partition_point(|(acked, _)| acked.acked_ns < time_ns);
        before.checked_sub(1).map(|i| entries[i].1)
    }
}

/// Checks the group events of a history; `None` when it has none (a queue history).
pub(crate) fn check(history: &[Event], found: &mut Found) -> Option<GroupReport> {
    let is_group_event =
        |e: &Event| GROUP_EVENTS.contains(&e.f.as_str()) || (e.f == "assign" && e.group.is_some());
    if !history.iter().any(is_group_event) {
        return None;
    }
    let mut report = GroupReport::default();
    let ops = pair_invocations(history, &mut report);
    let commits = CommitLog::new(
        ops.iter()
            .filter(|op| op.event.f == "commit" && op.event.kind == "ok")
            .flat_map(|op| {
                let group = op.event.group.clone().unwrap_or_default();
                op.event.offsets.iter().flatten().map(move |(key, offset)| {
                    let acked = Acked {
                        offset: *offset,
                        process: op.event.process,
                        acked_ns: op.event.time_ns,
                    };
                    (group.clone(), key.clone(), acked)
                })
            })
            .collect(),
    );
    committed_offset_regressions(&ops, &commits, found);
    redeliveries(history, &commits, found);
    double_ownership(history, found, &mut report);
    let healed_ns = history
        .iter()
        .filter(|e| e.f == "healed")
        .map(|e| e.time_ns)
        .max();
    report.commits_ok_after_healing = healed_ns.map_or(0, |healed| {
        ops.iter()
            .filter(|op| op.event.f == "commit" && op.event.kind == "ok")
            .filter(|op| op.event.time_ns >= healed)
            .count()
    });
    Some(report)
}

/// A completed `commit` or `committed` op with the time it was invoked (0 when the history
/// has no invocation: nothing is then known to precede it, which can only hide anomalies).
struct Op<'a> {
    event: &'a Event,
    invoked_ns: u64,
}

/// Pairs every completion of a commit or committed read with its process's invocation, and
/// counts the group events.
fn pair_invocations<'a>(history: &'a [Event], report: &mut GroupReport) -> Vec<Op<'a>> {
    let mut invoked: HashMap<(i64, &str), u64> = HashMap::new();
    let mut ops = Vec::new();
    let mut commits_invoked = 0;
    for event in history {
        let f = event.f.as_str();
        match (f, event.kind.as_str()) {
            ("commit" | "committed", "invoke") => {
                commits_invoked += usize::from(f == "commit");
                invoked.insert((event.process, f), event.time_ns);
            }
            ("commit" | "committed", _) => {
                let invoked_ns = invoked.remove(&(event.process, f)).unwrap_or(0);
                ops.push(Op { event, invoked_ns });
                if event.kind == "ok" {
                    report.commits_ok += usize::from(f == "commit");
                    report.committed_reads += usize::from(f == "committed");
                }
            }
            ("assign", "ok") if event.partitions.as_ref().is_some_and(|p| !p.is_empty()) => {
                report.assignments += 1;
            }
            ("revoke", "ok") => report.revocations += 1,
            ("crash", _) => report.consumer_crashes += 1,
            _ => {}
        }
    }
    report.commits_unknown = commits_invoked.saturating_sub(report.commits_ok);
    ops
}

/// Committed offsets observed (acknowledged commits, answered `committed` reads) against the
/// commits acknowledged before each observation began.
fn committed_offset_regressions(ops: &[Op], commits: &CommitLog, found: &mut Found) {
    for op in ops.iter().filter(|op| op.event.kind == "ok") {
        let event = op.event;
        let group = event.group.as_deref().unwrap_or_default();
        let offsets = event.offsets.clone().unwrap_or_default();
        // A commit observes the offsets it stored; a read, every partition it was answered
        // for (None: nothing committed).
        let observed: Vec<(&str, Option<i64>)> = if event.f == "commit" {
            offsets
                .iter()
                .map(|(k, o)| (k.as_str(), Some(*o)))
                .collect()
        } else {
            event
                .partitions
                .iter()
                .flatten()
                .map(|k| (k.as_str(), offsets.get(k).copied()))
                .collect()
        };
        for (key, offset) in observed {
            let Some(before) = commits.highest_before(group, key, op.invoked_ns) else {
                continue;
            };
            if offset.is_none_or(|o| o < before.offset) {
                found.add(
                    "committed-offset-regression",
                    json!({"group": group, "key": key, "f": event.f, "process": event.process,
                           "observed": offset, "invoked_ns": op.invoked_ns,
                           "completed_ns": event.time_ns,
                           "acknowledged_before": {"offset": before.offset,
                               "process": before.process, "acked_ns": before.acked_ns}}),
                );
            }
        }
    }
}

/// Reads of each process against the commits acknowledged before the assignment that
/// delivered them began.
fn redeliveries(history: &[Event], commits: &CommitLog, found: &mut Found) {
    // (process, key) -> (group, the time the assignment began)
    let mut owned: HashMap<(i64, &str), (&str, u64)> = HashMap::new();
    for event in history.iter().filter(|e| e.kind == "ok") {
        let group = event.group.as_deref().unwrap_or_default();
        match event.f.as_str() {
            "assign" if event.group.is_some() => {
                for key in event.partitions.iter().flatten() {
                    owned.insert((event.process, key), (group, event.time_ns));
                }
            }
            "revoke" => {
                for key in event.partitions.iter().flatten() {
                    owned.remove(&(event.process, key.as_str()));
                }
            }
            "poll" => {
                for (key, records) in event.reads.iter().flatten() {
                    let Some((group, assigned_ns)) = owned.get(&(event.process, key.as_str()))
                    else {
                        continue;
                    };
                    let Some(before) = commits.highest_before(group, key, *assigned_ns) else {
                        continue;
                    };
                    let below: Vec<i64> = records
                        .iter()
                        .map(|(offset, _)| *offset)
                        .filter(|offset| *offset < before.offset)
                        .collect();
                    if let (Some(first), Some(last)) = (below.first(), below.last()) {
                        found.add(
                            "redelivered-beyond-commit",
                            json!({"group": group, "key": key, "process": event.process,
                                   "assigned_ns": assigned_ns, "read_ns": event.time_ns,
                                   "offsets": [first, last], "count": below.len(),
                                   "committed_before": {"offset": before.offset,
                                       "process": before.process, "acked_ns": before.acked_ns}}),
                        );
                    }
                }
            }
            _ => {}
        }
    }
}

/// A group metadata record as the harness puts it in the history.
#[derive(Debug, Deserialize)]
struct GroupMetadata {
    group: Option<String>,
    #[serde(default)]
    partition: Option<i32>,
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    generation: Option<i32>,
    #[serde(default)]
    members: Vec<MetadataMember>,
    #[serde(default)]
    deleted: bool,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct MetadataMember {
    member_id: String,
    #[serde(default)]
    group_instance_id: Option<String>,
    #[serde(default)]
    client_id: String,
    #[serde(default)]
    assignment: Vec<String>,
}

impl MetadataMember {
    fn identity(&self) -> &str {
        self.group_instance_id.as_deref().unwrap_or(&self.member_id)
    }
}

/// Key -> the identity of the member a record assigns it to.
type Owners = BTreeMap<String, String>;

/// Each generation's assignments, within one record and across the records of a generation.
fn double_ownership(history: &[Event], found: &mut Found, report: &mut GroupReport) {
    // (group, generation) -> (the first record's offset, key -> owner)
    let mut generations: BTreeMap<(String, i32), (Option<i64>, Owners)> = BTreeMap::new();
    for event in history.iter().filter(|e| e.f == "group-metadata") {
        report.group_metadata_records += 1;
        let record = event
            .value
            .clone()
            .map(serde_json::from_value::<GroupMetadata>);
        let record = match record {
            Some(Ok(record)) if record.error.is_none() => record,
            Some(Ok(GroupMetadata { error, .. })) => {
                found.add(
                    "group-metadata-unreadable",
                    json!({"value": event.value, "error": error}),
                );
                continue;
            }
            Some(Err(error)) => {
                found.add(
                    "group-metadata-unreadable",
                    json!({"value": event.value, "error": error.to_string()}),
                );
                continue;
            }
            None => {
                found.add(
                    "group-metadata-unreadable",
                    json!({"value": null, "error": "no value"}),
                );
                continue;
            }
        };
        if record.deleted {
            continue;
        }
        let (Some(group), Some(generation)) = (record.group.clone(), record.generation) else {
            found.add(
                "group-metadata-unreadable",
                json!({"value": event.value, "error": "no group or generation"}),
            );
            continue;
        };
        let owners = owners_in_record(&group, generation, &record, found);
        match generations.get(&(group.clone(), generation)) {
            None => {
                generations.insert((group, generation), (record.offset, owners));
            }
            Some((first_offset, first)) => {
                let keys: BTreeSet<&String> = first.keys().chain(owners.keys()).collect();
                for key in keys {
                    let (a, b) = (first.get(key), owners.get(key));
                    if a != b {
                        found.add(
                            "double-ownership",
                            json!({"group": group, "generation": generation, "key": key,
                                   "owners": [a, b], "records": [first_offset, record.offset],
                                   "offsets_partition": record.partition,
                                   "reason": "two records of one generation disagree"}),
                        );
                    }
                }
            }
        }
    }
    report.generations_seen = generations.len();
}

/// The owner of every partition a record assigns (reporting partitions assigned twice).
fn owners_in_record(
    group: &str,
    generation: i32,
    record: &GroupMetadata,
    found: &mut Found,
) -> Owners {
    let mut owners: BTreeMap<String, &MetadataMember> = BTreeMap::new();
    for member in &record.members {
        for key in member.assignment.iter().collect::<BTreeSet<_>>() {
            match owners.get(key) {
                Some(other) if other.identity() != member.identity() => found.add(
                    "double-ownership",
                    json!({"group": group, "generation": generation, "key": key,
                           "owners": [other.identity(), member.identity()],
                           "clients": [other.client_id, member.client_id],
                           "records": [record.offset], "offsets_partition": record.partition,
                           "reason": "one record assigns the partition to two members"}),
                ),
                Some(_) => {}
                None => {
                    owners.insert(key.clone(), member);
                }
            }
        }
    }
    owners
        .into_iter()
        .map(|(key, member)| (key, member.identity().to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check;

    const GROUP: &str = "g";

    fn event(time_ns: u64, process: i64, kind: &str, f: &str) -> Event {
        Event {
            time_ns,
            process,
            kind: kind.into(),
            f: f.into(),
            group: Some(GROUP.into()),
            ..Event::default()
        }
    }

    fn keys(partitions: &[&str]) -> Option<Vec<String>> {
        Some(partitions.iter().map(|k| (*k).to_owned()).collect())
    }

    fn offsets(offsets: &[(&str, i64)]) -> Option<BTreeMap<String, i64>> {
        Some(offsets.iter().map(|(k, o)| ((*k).to_owned(), *o)).collect())
    }

    fn assign(time_ns: u64, process: i64, partitions: &[&str]) -> Event {
        Event {
            partitions: keys(partitions),
            ..event(time_ns, process, "ok", "assign")
        }
    }

    fn revoke(time_ns: u64, process: i64, partitions: &[&str]) -> Event {
        Event {
            partitions: keys(partitions),
            ..event(time_ns, process, "ok", "revoke")
        }
    }

    /// A commit invoked at `invoked_ns` and completed (`kind`) at `time_ns`.
    fn commit(
        invoked_ns: u64,
        time_ns: u64,
        process: i64,
        kind: &str,
        key: &str,
        offset: i64,
    ) -> [Event; 2] {
        let commit = |time_ns, kind| Event {
            offsets: offsets(&[(key, offset)]),
            ..event(time_ns, process, kind, "commit")
        };
        [commit(invoked_ns, "invoke"), commit(time_ns, kind)]
    }

    /// A `committed` read of `partitions` that found `found`.
    fn committed(
        invoked_ns: u64,
        time_ns: u64,
        process: i64,
        partitions: &[&str],
        found: &[(&str, i64)],
    ) -> [Event; 2] {
        [
            Event {
                partitions: keys(partitions),
                ..event(invoked_ns, process, "invoke", "committed")
            },
            Event {
                partitions: keys(partitions),
                offsets: offsets(found),
                ..event(time_ns, process, "ok", "committed")
            },
        ]
    }

    fn poll(time_ns: u64, process: i64, key: &str, records: &[(i64, i64)]) -> Event {
        Event {
            group: None,
            reads: Some(BTreeMap::from([(key.to_owned(), records.to_vec())])),
            ..event(time_ns, process, "ok", "poll")
        }
    }

    fn send(time_ns: u64, key: &str, value: i64, offset: i64) -> Event {
        Event {
            group: None,
            key: Some(key.into()),
            value: Some(json!(value)),
            offset: Some(offset),
            ..event(time_ns, 1, "ok", "send")
        }
    }

    fn metadata(generation: i32, offset: i64, members: &[(&str, &[&str])]) -> Event {
        let members: Vec<_> = members
            .iter()
            .map(|(id, assignment)| {
                json!({"member_id": id, "client_id": format!("client-{id}"),
                       "assignment": assignment})
            })
            .collect();
        Event {
            group: None,
            value: Some(json!({"group": GROUP, "partition": 7, "offset": offset,
                               "generation": generation, "members": members})),
            ..event(1_000, -1, "info", "group-metadata")
        }
    }

    fn kinds(history: &[Event]) -> Vec<String> {
        check(history).bad_error_types
    }

    /// Ten records of "k", sent before anyone reads.
    fn sends() -> Vec<Event> {
        (0..10).map(|i| send(1, "k", 100 + i, i)).collect()
    }

    /// Member 5 reads 0..4 and commits 5; it crashes before committing what it read next (5..7);
    /// member 6 takes the partition, finds 5 committed and re-reads 5..7 (at-least-once),
    /// commits 10. The metadata has one owner per generation.
    fn handover() -> Vec<Event> {
        let mut history = sends();
        history.push(assign(10, 5, &["k"]));
        history.extend(committed(11, 12, 5, &["k"], &[]));
        history.push(poll(
            20,
            5,
            "k",
            &[(0, 100), (1, 101), (2, 102), (3, 103), (4, 104)],
        ));
        history.extend(commit(21, 22, 5, "ok", "k", 5));
        history.push(poll(30, 5, "k", &[(5, 105), (6, 106), (7, 107)]));
        history.push(event(31, 5, "info", "crash"));
        history.push(assign(40, 6, &["k"]));
        history.extend(committed(41, 42, 6, &["k"], &[("k", 5)]));
        history.push(poll(
            50,
            6,
            "k",
            &[(5, 105), (6, 106), (7, 107), (8, 108), (9, 109)],
        ));
        history.extend(commit(51, 52, 6, "ok", "k", 10));
        history.push(metadata(1, 0, &[("m5", &["k"])]));
        history.push(metadata(2, 1, &[("m6", &["k"]), ("m7", &[])]));
        history
    }

    #[test]
    fn a_handover_within_at_least_once_is_valid() {
        let report = check(&handover());
        assert!(report.valid, "{report:?}");
        let groups = report.groups.expect("a groups report");
        assert_eq!(
            groups,
            GroupReport {
                commits_ok: 2,
                commits_unknown: 0,
                commits_ok_after_healing: 0,
                committed_reads: 2,
                assignments: 2,
                revocations: 0,
                consumer_crashes: 1,
                group_metadata_records: 2,
                generations_seen: 2,
            }
        );
        // A queue history has no groups report.
        assert_eq!(check(&sends()).groups, None);
    }

    #[test]
    fn committed_offset_regressions_are_found() {
        // A read after the commit of 10 was acknowledged finds 5.
        let mut history = handover();
        history.extend(committed(60, 61, 7, &["k"], &[("k", 5)]));
        assert_eq!(kinds(&history), vec!["committed-offset-regression"]);
        // Or nothing at all.
        let mut history = handover();
        history.extend(committed(60, 61, 7, &["k"], &[]));
        assert_eq!(kinds(&history), vec!["committed-offset-regression"]);
        // A commit of a lower offset acknowledged after it.
        let mut history = handover();
        history.extend(commit(60, 61, 5, "ok", "k", 8));
        let report = check(&history);
        assert_eq!(report.bad_error_types, vec!["committed-offset-regression"]);
        assert_eq!(
            report.anomalies["committed-offset-regression"][0]["acknowledged_before"]["offset"],
            json!(10)
        );
    }

    #[test]
    fn concurrent_or_unacknowledged_commits_do_not_order_observations() {
        // A read invoked before the commit of 10 was acknowledged may find 5.
        let mut history = handover();
        history.extend(committed(51, 53, 7, &["k"], &[("k", 5)]));
        assert!(check(&history).valid);
        // A commit of 20 that erred (unknown outcome) orders nothing; a later read finding 10
        // is fine, and so is one that finds 20.
        let mut history = handover();
        history.extend(commit(60, 61, 6, "info", "k", 20));
        history.extend(committed(70, 71, 7, &["k"], &[("k", 10)]));
        history.extend(committed(72, 73, 8, &["k"], &[("k", 20)]));
        let report = check(&history);
        assert!(report.valid, "{report:?}");
        assert_eq!(
            report.groups.map(|g| (g.commits_ok, g.commits_unknown)),
            Some((2, 1))
        );
        // Other partitions and groups are apart.
        let mut history = handover();
        history.extend(committed(60, 61, 7, &["j"], &[("j", 1)]));
        let mut other = committed(62, 63, 7, &["k"], &[("k", 1)]);
        for e in &mut other {
            e.group = Some("other".into());
        }
        history.extend(other);
        assert!(check(&history).valid);
    }

    #[test]
    fn redelivery_below_a_commit_acknowledged_before_the_assignment_is_found() {
        // Member 7 is assigned "k" after the commit of 10 and reads 8 and 9 again.
        let mut history = handover();
        history.push(assign(60, 7, &["k"]));
        history.push(poll(70, 7, "k", &[(8, 108), (9, 109)]));
        let report = check(&history);
        assert_eq!(report.bad_error_types, vec!["redelivered-beyond-commit"]);
        assert_eq!(
            report.anomalies["redelivered-beyond-commit"][0]["offsets"],
            json!([8, 9])
        );
        // Assigned before the commit was acknowledged: it may start at 5.
        let mut history = handover();
        history.push(assign(51, 7, &["k"]));
        history.push(poll(70, 7, "k", &[(8, 108), (9, 109)]));
        assert!(check(&history).valid);
        // Reads after the partition was revoked belong to no assignment of this check, and a
        // process that never joined (the final reader, assigning every partition) is not judged.
        let mut history = handover();
        history.push(assign(60, 7, &["k"]));
        history.push(revoke(65, 7, &["k"]));
        history.push(poll(70, 7, "k", &[(8, 108), (9, 109)]));
        history.push(Event {
            group: None,
            ..event(80, 9, "ok", "assign")
        });
        history.push(poll(90, 9, "k", &[(0, 100)]));
        assert!(check(&history).valid);
    }

    #[test]
    fn double_ownership_in_a_record_or_across_records_is_found() {
        // One record gives "k" to two members.
        let mut history = handover();
        history.push(metadata(3, 2, &[("m6", &["k"]), ("m8", &["k"])]));
        let report = check(&history);
        assert_eq!(report.bad_error_types, vec!["double-ownership"]);
        assert_eq!(
            report.anomalies["double-ownership"][0]["owners"],
            json!(["m6", "m8"])
        );
        // Two records of generation 2 with different owners of "k".
        let mut history = handover();
        history.push(metadata(2, 2, &[("m7", &["k"]), ("m6", &[])]));
        let report = check(&history);
        assert_eq!(report.bad_error_types, vec!["double-ownership"]);
        assert_eq!(
            report.anomalies["double-ownership"][0]["records"],
            json!([1, 2])
        );
        // The same assignment stored twice, a tombstone, and an empty group are fine.
        let mut history = handover();
        history.push(metadata(2, 2, &[("m6", &["k"]), ("m7", &[])]));
        let mut tombstone = metadata(2, 3, &[]);
        tombstone.value =
            Some(json!({"group": GROUP, "partition": 7, "offset": 3, "deleted": true}));
        history.push(tombstone);
        history.push(metadata(3, 4, &[]));
        let report = check(&history);
        assert!(report.valid, "{report:?}");
        assert_eq!(report.groups.map(|g| g.generations_seen), Some(3));
    }

    #[test]
    fn a_static_member_rejoining_under_a_new_member_id_owns_what_it_owned() {
        let member =
            |id: &str| json!({"member_id": id, "group_instance_id": "i1", "assignment": ["k"]});
        let mut history = handover();
        for (offset, id) in [(2, "m1"), (3, "m2")] {
            let mut record = metadata(4, offset, &[]);
            record.value = Some(json!({"group": GROUP, "offset": offset, "generation": 4,
                                       "members": [member(id)]}));
            history.push(record);
        }
        assert!(check(&history).valid);
    }

    #[test]
    fn unreadable_group_metadata_is_reported() {
        let mut history = handover();
        let mut bad = metadata(3, 2, &[]);
        bad.value = Some(json!({"group": GROUP, "offset": 2, "error": "version 4 is not read"}));
        history.push(bad);
        let mut garbled = metadata(3, 3, &[]);
        garbled.value = Some(json!({"group": GROUP, "members": "nope"}));
        history.push(garbled);
        let report = check(&history);
        assert_eq!(report.bad_error_types, vec!["group-metadata-unreadable"]);
        assert_eq!(report.anomaly_counts["group-metadata-unreadable"], 2);
    }

    #[test]
    fn group_events_parse_from_jsonl() {
        let text = "\
{\"time_ns\":1,\"process\":5,\"type\":\"ok\",\"f\":\"assign\",\"group\":\"g\",\"partitions\":[\"q-0\"]}
{\"time_ns\":2,\"process\":5,\"type\":\"invoke\",\"f\":\"committed\",\"group\":\"g\",\"partitions\":[\"q-0\"]}
{\"time_ns\":3,\"process\":5,\"type\":\"ok\",\"f\":\"committed\",\"group\":\"g\",\"partitions\":[\"q-0\"],\"offsets\":{}}
{\"time_ns\":4,\"process\":1,\"type\":\"ok\",\"f\":\"send\",\"key\":\"q-0\",\"value\":7,\"offset\":0}
{\"time_ns\":5,\"process\":5,\"type\":\"ok\",\"f\":\"poll\",\"reads\":{\"q-0\":[[0,7]]}}
{\"time_ns\":6,\"process\":5,\"type\":\"invoke\",\"f\":\"commit\",\"group\":\"g\",\"offsets\":{\"q-0\":1}}
{\"time_ns\":7,\"process\":5,\"type\":\"ok\",\"f\":\"commit\",\"group\":\"g\",\"offsets\":{\"q-0\":1}}
{\"time_ns\":8,\"process\":5,\"type\":\"ok\",\"f\":\"revoke\",\"group\":\"g\",\"partitions\":[\"q-0\"],\"value\":\"lost\"}
{\"time_ns\":9,\"process\":-1,\"type\":\"info\",\"f\":\"group-metadata\",\"value\":{\"group\":\"g\",\"partition\":1,\"offset\":0,\"generation\":1,\"protocol\":\"range\",\"members\":[{\"member_id\":\"m\",\"group_instance_id\":null,\"client_id\":\"c\",\"client_host\":\"/h\",\"assignment\":[\"q-0\"]}]}}
";
        let history = crate::parse(text).expect("parse");
        let report = check(&history);
        assert!(report.valid, "{report:?}");
        // assign, committed, send, poll, commit, revoke
        assert_eq!(report.ops_checked, 6);
        let groups = report.groups.as_ref().expect("groups");
        assert_eq!(
            (
                groups.commits_ok,
                groups.revocations,
                groups.generations_seen
            ),
            (1, 1, 1)
        );
        assert!(crate::summary(&report).contains("1 commits acknowledged"));
    }
}
