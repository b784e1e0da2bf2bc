//! Replica placement for new partitions: Kafka's round-robin assignment, rack-aware when the
//! brokers declare racks.
//!
//! Brokers are ordered by id (or alternating across racks, so consecutive brokers sit in
//! different racks). Partition `p`'s first replica is broker `(start + p) mod n`; followers are
//! shifted by an amount that changes every `n` partitions, so the followers of one broker's
//! leaders spread over the others (Kafka's `assignReplicasToBrokersRackUnaware`). With racks,
//! a follower whose rack already holds a replica is swapped for the next broker in a rack not
//! yet used, while one remains.

use std::collections::{BTreeMap, BTreeSet};

use sluice_raft::records::BrokerId;

/// A broker as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: BrokerId,
    pub rack: Option<String>,
}

/// Orders brokers so that consecutive ones are in different racks when racks are known:
/// `[a1, b1, c1, a2, b2, c2, ...]` for racks a, b, c (Kafka's rack-alternated list).
fn rack_alternated(candidates: &[Candidate]) -> Vec<Candidate> {
    let mut by_rack: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for candidate in candidates {
        by_rack
            .entry(candidate.rack.as_deref().unwrap_or(""))
            .or_default()
            .push(candidate);
    }
    for brokers in by_rack.values_mut() {
        brokers.sort_by_key(|c| c.id);
    }
    let longest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    let mut ordered = Vec::with_capacity(candidates.len());
    for round in 0..longest {
        for brokers in by_rack.values() {
            if let Some(candidate) = brokers.get(round) {
                ordered.push((*candidate).clone());
            }
        }
    }
    ordered
}

/// Assigns `replication_factor` distinct brokers to each of `partitions` partitions numbered
/// from `first_partition`. `start` spreads leadership between topics (callers derive it from
/// the topic id). The caller has checked `1 <= replication_factor <= candidates.len()`.
pub fn assign(
    candidates: &[Candidate],
    first_partition: i32,
    partitions: i32,
    replication_factor: usize,
    start: usize,
) -> BTreeMap<i32, Vec<BrokerId>> {
    assert!(
        replication_factor >= 1 && replication_factor <= candidates.len(),
        "checked by the caller"
    );
    let racks_known = candidates.iter().any(|c| c.rack.is_some());
    let brokers = if racks_known {
        rack_alternated(candidates)
    } else {
        let mut sorted = candidates.to_vec();
        sorted.sort_by_key(|c| c.id);
        sorted
    };
    let n = brokers.len();
    let rack_count = brokers
        .iter()
        .map(|b| b.rack.as_deref())
        .collect::<BTreeSet<_>>()
        .len();
    let mut shift = start % n;
    let mut assignment = BTreeMap::new();
    for offset in 0..partitions {
        let partition = first_partition + offset;
        let index = partition.max(0) as usize;
        if index > 0 && index % n == 0 {
            shift += 1;
        }
        let first = (index + start) % n;
        let mut chosen = vec![first];
        for j in 0..replication_factor - 1 {
            let follower_shift = if n > 1 { 1 + (shift + j) % (n - 1) } else { 0 };
            let mut candidate = (first + follower_shift) % n;
            // Never the same broker twice; with racks, prefer an unused rack while one remains.
            let used_racks: BTreeSet<_> =
                chosen.iter().map(|i| brokers[*i].rack.as_deref()).collect();
            let wants_new_rack = racks_known && used_racks.len() < rack_count;
            for step in 0..n {
                let probe = (candidate + step) % n;
                let fresh_rack = !used_racks.contains(&brokers[probe].rack.as_deref());
                if !chosen.contains(&probe) && (!wants_new_rack || fresh_rack) {
                    candidate = probe;
                    break;
                }
            }
            chosen.push(candidate);
        }
        assignment.insert(
            partition,
            chosen.into_iter().map(|i| brokers[i].id).collect(),
        );
    }
    assignment
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(racks: &[Option<&str>]) -> Vec<Candidate> {
        racks
            .iter()
            .enumerate()
            .map(|(i, rack)| Candidate {
                id: i as i32 + 1,
                rack: rack.map(str::to_owned),
            })
            .collect()
    }

    #[test]
    fn replicas_are_distinct_and_leaders_spread_evenly() {
        let candidates = brokers(&[None, None, None, None]);
        let assignment = assign(&candidates, 0, 12, 3, 0);
        let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
        let mut replicas: BTreeMap<i32, usize> = BTreeMap::new();
        for set in assignment.values() {
            let distinct: BTreeSet<_> = set.iter().collect();
            assert_eq!(distinct.len(), 3, "{set:?}");
            *leaders.entry(set[0]).or_default() += 1;
            for broker in set {
                *replicas.entry(*broker).or_default() += 1;
            }
        }
        assert!(leaders.values().all(|count| *count == 3), "{leaders:?}");
        assert!(replicas.values().all(|count| *count == 9), "{replicas:?}");
    }

    #[test]
    fn racks_are_spread_when_declared() {
        let candidates = brokers(&[
            Some("a"),
            Some("a"),
            Some("b"),
            Some("b"),
            Some("c"),
            Some("c"),
        ]);
        let by_id: BTreeMap<i32, String> = candidates
            .iter()
            .map(|c| (c.id, c.rack.clone().unwrap()))
            .collect();
        for start in 0..6 {
            for set in assign(&candidates, 0, 12, 3, start).values() {
                let racks: BTreeSet<_> = set.iter().map(|id| &by_id[id]).collect();
                assert_eq!(racks.len(), 3, "replicas {set:?} share a rack");
            }
        }
        // More replicas than racks: every rack used, brokers still distinct.
        for set in assign(&candidates, 0, 6, 4, 1).values() {
            assert_eq!(set.iter().collect::<BTreeSet<_>>().len(), 4);
            assert_eq!(
                set.iter()
                    .map(|id| &by_id[id])
                    .collect::<BTreeSet<_>>()
                    .len(),
                3
            );
        }
    }

    #[test]
    fn added_partitions_continue_the_pattern() {
        let candidates = brokers(&[None, None, None]);
        let all = assign(&candidates, 0, 6, 2, 1);
        let later = assign(&candidates, 3, 3, 2, 1);
        for partition in 3..6 {
            assert_eq!(all[&partition], later[&partition]);
        }
    }
}
