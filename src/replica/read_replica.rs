//! Fetch from follower (KIP-392): which replica a consumer should read a partition from.
//!
//! `replica.selector.class` names the rule, as Kafka's `ReplicaSelector` plug-in does; the two
//! Kafka ships are served: `LeaderSelector` (Kafka's default when the key is empty: consumers
//! read from the leader) and `RackAwareReplicaSelector` (a replica in the consumer's
//! `client.rack`). Only the leader decides, for consumers that send a rack (Fetch v11+); the
//! candidates are the leader and the in-sync followers that hold the fetch offset, as Kafka's
//! `ReplicaManager.findPreferredReadReplica` gathers them.

use std::time::Duration;

use sluice_raft::records::BrokerId;

pub const LEADER_SELECTOR: &str = "org.apache.kafka.common.replica.LeaderSelector";
pub const RACK_AWARE_SELECTOR: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";

/// `replica.selector.class`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplicaSelector {
    /// Consumers read from the leader (also the empty value, Kafka's default).
    #[default]
    Leader,
    /// Consumers read from a replica in their rack when the leader is not in it.
    RackAware,
}

impl ReplicaSelector {
    /// The selector a `replica.selector.class` value names; `None` for a class Sluice has not
    /// (the registry refuses it before this is asked).
    pub fn from_class_name(name: &str) -> Option<ReplicaSelector> {
        match name {
            "" | LEADER_SELECTOR => Some(ReplicaSelector::Leader),
            RACK_AWARE_SELECTOR => Some(ReplicaSelector::RackAware),
            _ => None,
        }
    }
}

/// A replica the consumer could read from, as the leader sees it.
#[derive(Debug, Clone)]
pub struct ReplicaView<'a> {
    pub broker_id: BrokerId,
    pub rack: Option<&'a str>,
    pub log_end_offset: u64,
    /// How long ago it was last fully caught up (zero for the leader).
    pub since_caught_up: Duration,
}

/// Kafka's `RackAwareReplicaSelector.select`, then `findPreferredReadReplica`'s rule that the
/// leader itself is never named: the replica to send the consumer to, or `None` to read here.
/// With no client rack, or no replica in it, or the leader in it, the leader serves; among
/// several in the rack, the most caught up (highest log end, then the most recently caught up).
pub fn preferred_read_replica(
    selector: ReplicaSelector,
    client_rack: &str,
    leader: &ReplicaView<'_>,
    followers: &[ReplicaView<'_>],
) -> Option<BrokerId> {
    if selector != ReplicaSelector::RackAware || client_rack.is_empty() {
        return None;
    }
    if leader.rack == Some(client_rack) {
        return None;
    }
    followers
        .iter()
        .filter(|f| f.rack == Some(client_rack))
        .max_by(|a, b| {
            a.log_end_offset
                .cmp(&b.log_end_offset)
                .then(b.since_caught_up.cmp(&a.since_caught_up))
        })
        .map(|f| f.broker_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: i32, rack: Option<&str>, log_end_offset: u64, since_ms: u64) -> ReplicaView<'_> {
        ReplicaView {
            broker_id: id,
            rack,
            log_end_offset,
            since_caught_up: Duration::from_millis(since_ms),
        }
    }

    #[test]
    fn the_leader_serves_unless_a_follower_shares_the_clients_rack() {
        let leader = view(1, Some("a"), 100, 0);
        let followers = [view(2, Some("b"), 100, 0), view(3, Some("c"), 100, 0)];
        let rack_aware = ReplicaSelector::RackAware;
        assert_eq!(
            preferred_read_replica(rack_aware, "b", &leader, &followers),
            Some(2)
        );
        assert_eq!(
            preferred_read_replica(rack_aware, "c", &leader, &followers),
            Some(3)
        );
        // The leader's own rack, an unknown rack, no rack: the leader.
        assert_eq!(
            preferred_read_replica(rack_aware, "a", &leader, &followers),
            None
        );
        assert_eq!(
            preferred_read_replica(rack_aware, "z", &leader, &followers),
            None
        );
        assert_eq!(
            preferred_read_replica(rack_aware, "", &leader, &followers),
            None
        );
        // Kafka's default selector never sends a consumer elsewhere.
        let leader_only = ReplicaSelector::Leader;
        assert_eq!(
            preferred_read_replica(leader_only, "b", &leader, &followers),
            None
        );
    }

    #[test]
    fn the_most_caught_up_follower_in_the_rack_is_chosen() {
        let leader = view(1, Some("a"), 100, 0);
        let followers = [
            view(2, Some("b"), 90, 0),
            view(3, Some("b"), 100, 50),
            view(4, Some("b"), 100, 10),
            view(5, None, 100, 0),
        ];
        assert_eq!(
            preferred_read_replica(ReplicaSelector::RackAware, "b", &leader, &followers),
            Some(4)
        );
    }

    #[test]
    fn class_names_are_kafkas() {
        assert_eq!(
            ReplicaSelector::from_class_name(""),
            Some(ReplicaSelector::Leader)
        );
        assert_eq!(
            ReplicaSelector::from_class_name(LEADER_SELECTOR),
            Some(ReplicaSelector::Leader)
        );
        assert_eq!(
            ReplicaSelector::from_class_name(RACK_AWARE_SELECTOR),
            Some(ReplicaSelector::RackAware)
        );
        assert_eq!(ReplicaSelector::from_class_name("com.example.Mine"), None);
    }
}
