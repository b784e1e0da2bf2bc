//! The controller's rules on plain images.

use sluice_raft::MetadataDelta;
use sluice_raft::records::{Endpoint, MetadataRequest};

use super::*;

const DEFAULTS: Defaults = Defaults {
    partitions: 3,
    replication_factor: 3,
    unclean_leader_election: false,
};

fn apply(image: &MetadataImage, records: Vec<MetadataRecord>) -> MetadataImage {
    let mut delta = MetadataDelta::new(image);
    delta
        .replay_all(&MetadataRequest::new(records).records)
        .expect("controller records replay");
    delta.apply(image.index + 1)
}

fn cluster(brokers: i32) -> MetadataImage {
    cluster_with_capacity(brokers, |_| None)
}

/// A cluster whose broker `id` registered with `capacity(id)` as its
/// `max.broker.partitions`.
fn cluster_with_capacity(brokers: i32, capacity: impl Fn(i32) -> Option<u32>) -> MetadataImage {
    let mut image = MetadataImage::default();
    for id in 1..=brokers {
        let registration = RegisterBroker {
            broker_id: id,
            incarnation_id: Uuid(id as u128),
            broker_epoch: 10,
            endpoints: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092,
                security_protocol: "PLAINTEXT".into(),
            }],
            rack: None,
            fenced: true,
        };
        image = apply(
            &image,
            register_broker(&image, registration, capacity(id), &DEFAULTS),
        );
        image = apply(&image, unfence_broker(&image, id, 10).unwrap());
    }
    image
}

/// The partitions of `topic` that `broker` leads.
fn led_by(image: &MetadataImage, topic: &str, broker: BrokerId) -> Vec<i32> {
    image
        .topic_by_name(topic)
        .unwrap()
        .partitions
        .iter()
        .filter(|(_, p)| p.leader == broker)
        .map(|(n, _)| *n)
        .collect()
}

fn topic(name: &str) -> NewTopic {
    NewTopic {
        name: name.into(),
        partitions: -1,
        replication_factor: -1,
        ..Default::default()
    }
}

#[test]
fn create_topic_validates_like_kafka() {
    let image = cluster(3);
    let image = apply(
        &image,
        create_topic(&image, &topic("orders"), Uuid(1), &DEFAULTS).unwrap(),
    );
    let orders = image.topic_by_name("orders").unwrap();
    assert_eq!(orders.partitions.len(), 3);
    assert!(
        orders
            .partitions
            .values()
            .all(|p| p.replicas.len() == 3 && p.isr == p.replicas && p.leader == p.replicas[0])
    );
    let code = |t: &NewTopic| {
        create_topic(&image, t, Uuid(2), &DEFAULTS)
            .unwrap_err()
            .kafka_error()
            .code()
    };
    assert_eq!(code(&topic("orders")), 36, "TOPIC_ALREADY_EXISTS");
    assert_eq!(
        code(&NewTopic {
            partitions: 0,
            ..topic("a")
        }),
        37,
        "INVALID_PARTITIONS"
    );
    assert_eq!(
        code(&NewTopic {
            replication_factor: 4,
            ..topic("a")
        }),
        38,
        "INVALID_REPLICATION_FACTOR"
    );
    assert_eq!(
        code(&NewTopic {
            replication_factor: 0,
            ..topic("a")
        }),
        38
    );
    assert_eq!(code(&topic("bad name")), 17, "INVALID_TOPIC_EXCEPTION");
    let bad_assignment = NewTopic {
        assignments: [(0, vec![1, 1])].into(),
        ..topic("a")
    };
    assert_eq!(code(&bad_assignment), 39, "INVALID_REPLICA_ASSIGNMENT");
    let bad_config = NewTopic {
        configs: [("retention.ms".into(), "soon".into())].into(),
        ..topic("a")
    };
    assert_eq!(code(&bad_config), 40, "INVALID_CONFIG");
    let unknown_config = NewTopic {
        configs: [("retention.forever".into(), "1".into())].into(),
        ..topic("a")
    };
    assert_eq!(code(&unknown_config), 40, "INVALID_CONFIG");
    let fine = NewTopic {
        configs: [
            ("min.insync.replicas".into(), "2".into()),
            ("cleanup.policy".into(), "compact".into()),
        ]
        .into(),
        ..topic("a")
    };
    assert!(create_topic(&image, &fine, Uuid(3), &DEFAULTS).is_ok());
}

#[test]
fn fencing_moves_leaderships_to_the_isr_and_never_empties_it() {
    let image = cluster(3);
    let image = apply(
        &image,
        create_topic(&image, &topic("orders"), Uuid(1), &DEFAULTS).unwrap(),
    );
    let led_by_1 = led_by(&image, "orders", 1);
    assert!(!led_by_1.is_empty());
    let image = apply(&image, fence_broker(&image, 1, &DEFAULTS).unwrap());
    for partition in image.topic_by_name("orders").unwrap().partitions.values() {
        assert_ne!(partition.leader, 1);
        assert!(!partition.isr.contains(&1));
        assert!(partition.isr.contains(&partition.leader));
    }
    for number in led_by_1 {
        assert_eq!(
            image.partition(Uuid(1), number).unwrap().leader_epoch,
            1,
            "a new leader bumps the epoch"
        );
    }
    // Fence the other two: the ISR keeps its last member and the partition goes offline.
    let image = apply(&image, fence_broker(&image, 2, &DEFAULTS).unwrap());
    let image = apply(&image, fence_broker(&image, 3, &DEFAULTS).unwrap());
    for partition in image.topic_by_name("orders").unwrap().partitions.values() {
        assert_eq!(partition.leader, NO_LEADER);
        assert_eq!(partition.isr.len(), 1, "the last ISR member stays");
    }
    // Broker 1 comes back: it is not in any ISR, so without unclean election nothing changes.
    let image = apply(&image, unfence_broker(&image, 1, 10).unwrap());
    assert!(
        image
            .topic_by_name("orders")
            .unwrap()
            .partitions
            .values()
            .all(|p| p.leader == NO_LEADER)
    );
    // The last ISR member comes back: it leads again.
    let last = image.partition(Uuid(1), 0).unwrap().isr[0];
    let image = apply(&image, unfence_broker(&image, last, 10).unwrap());
    assert_eq!(image.partition(Uuid(1), 0).unwrap().leader, last);
}

/// A broker that restarts (kill -9) and registers again never keeps the leaderships of its
/// earlier incarnation: in the same commit as its registration they move to live ISR
/// members and it leaves the ISRs; where it is the last ISR member the partition waits
/// offline and it leads again, at a new leader epoch, once unfenced.
#[test]
fn a_restarted_broker_registering_again_gives_up_its_leaderships() {
    let image = cluster(3);
    let image = apply(
        &image,
        create_topic(&image, &topic("orders"), Uuid(1), &DEFAULTS).unwrap(),
    );
    let mut single = topic("single");
    single.replication_factor = 1;
    let image = apply(
        &image,
        create_topic(&image, &single, Uuid(2), &DEFAULTS).unwrap(),
    );
    let before = image.clone();
    let again = RegisterBroker {
        broker_id: 1,
        incarnation_id: Uuid(99),
        broker_epoch: 20,
        endpoints: before.brokers[&1].registration.endpoints.clone(),
        rack: None,
        fenced: true,
    };
    let image = apply(&image, register_broker(&image, again, None, &DEFAULTS));
    assert!(image.brokers[&1].fenced);
    assert_eq!(image.brokers[&1].registration.broker_epoch, 20);
    for (number, partition) in &image.topic_by_name("orders").unwrap().partitions {
        let was = before.partition(Uuid(1), *number).unwrap();
        assert_ne!(partition.leader, 1, "partition {number}");
        assert!(!partition.isr.contains(&1));
        if was.leader == 1 {
            assert!(partition.leader_epoch > was.leader_epoch);
        }
    }
    let single_led_by_1 = led_by(&before, "single", 1);
    assert!(!single_led_by_1.is_empty());
    for number in &single_led_by_1 {
        let partition = image.partition(Uuid(2), *number).unwrap();
        assert_eq!(
            (partition.leader, partition.isr.clone()),
            (NO_LEADER, vec![1])
        );
    }
    // Caught up and unfenced: it leads its single-replica partitions again, at new epochs.
    let image = apply(&image, unfence_broker(&image, 1, 20).unwrap());
    for number in &single_led_by_1 {
        let was = before.partition(Uuid(2), *number).unwrap();
        let partition = image.partition(Uuid(2), *number).unwrap();
        assert_eq!(partition.leader, 1);
        assert!(partition.leader_epoch > was.leader_epoch);
    }
    // Registering again at once (a retried registration) moves nothing more.
    let retry = RegisterBroker {
        broker_id: 2,
        incarnation_id: Uuid(98),
        broker_epoch: 30,
        endpoints: before.brokers[&2].registration.endpoints.clone(),
        rack: None,
        fenced: true,
    };
    let image = apply(
        &image,
        register_broker(&image, retry.clone(), None, &DEFAULTS),
    );
    let records = register_broker(&image, retry, None, &DEFAULTS);
    assert_eq!(records.len(), 1, "{records:?}");
}

#[test]
fn unclean_election_only_when_the_topic_allows_it() {
    let replicas = [1, 2, 3];
    assert_eq!(
        elect_leader(&replicas, &[3], |b| b != 3, false),
        Election::None
    );
    assert_eq!(
        elect_leader(&replicas, &[3], |b| b != 3, true),
        Election::Unclean(1)
    );
    assert_eq!(
        elect_leader(&replicas, &[2, 3], |_| true, false),
        Election::Clean(2)
    );

    let image = cluster(2);
    let mut spec = NewTopic {
        replication_factor: 2,
        partitions: 1,
        ..topic("t")
    };
    spec.configs
        .insert("unclean.leader.election.enable".into(), "true".into());
    let image = apply(
        &image,
        create_topic(&image, &spec, Uuid(5), &DEFAULTS).unwrap(),
    );
    let leader = image.partition(Uuid(5), 0).unwrap().leader;
    let follower = 3 - leader;
    // The follower drops out of the ISR, then the leader is fenced: only unclean election
    // gives the partition a leader again.
    let current = image.partition(Uuid(5), 0).unwrap().clone();
    let shrink = AlterPartition {
        broker: leader,
        topic_id: Uuid(5),
        partition: 0,
        leader_epoch: current.leader_epoch,
        partition_epoch: current.partition_epoch,
        new_isr: vec![leader],
    };
    let image = apply(&image, alter_partition(&image, &shrink).unwrap());
    let image = apply(&image, fence_broker(&image, leader, &DEFAULTS).unwrap());
    let partition = image.partition(Uuid(5), 0).unwrap();
    assert_eq!(
        (partition.leader, partition.isr.clone()),
        (follower, vec![follower])
    );
}

#[test]
fn alter_partition_checks_epochs_and_eligibility() {
    let image = cluster(3);
    let spec = NewTopic {
        partitions: 1,
        ..topic("t")
    };
    let image = apply(
        &image,
        create_topic(&image, &spec, Uuid(9), &DEFAULTS).unwrap(),
    );
    let current = image.partition(Uuid(9), 0).unwrap().clone();
    let leader = current.leader;
    let others: Vec<i32> = current
        .replicas
        .iter()
        .copied()
        .filter(|b| *b != leader)
        .collect();
    let request = AlterPartition {
        broker: leader,
        topic_id: Uuid(9),
        partition: 0,
        leader_epoch: current.leader_epoch,
        partition_epoch: current.partition_epoch,
        new_isr: vec![leader, others[0]],
    };
    let code = |r: &AlterPartition| alter_partition(&image, r).unwrap_err().kafka_error().code();
    assert_eq!(
        code(&AlterPartition {
            broker: others[0],
            ..request.clone()
        }),
        6,
        "NOT_LEADER_OR_FOLLOWER"
    );
    assert_eq!(
        code(&AlterPartition {
            leader_epoch: 7,
            ..request.clone()
        }),
        74,
        "FENCED_LEADER_EPOCH"
    );
    assert_eq!(
        code(&AlterPartition {
            partition_epoch: 7,
            ..request.clone()
        }),
        95,
        "INVALID_UPDATE_VERSION"
    );
    assert_eq!(
        code(&AlterPartition {
            new_isr: vec![others[0]],
            ..request.clone()
        }),
        107,
        "leader must stay"
    );
    assert_eq!(
        code(&AlterPartition {
            new_isr: vec![leader, 42],
            ..request.clone()
        }),
        107,
        "not a replica"
    );
    let shrunk = apply(&image, alter_partition(&image, &request).unwrap());
    let after = shrunk.partition(Uuid(9), 0).unwrap();
    assert_eq!(after.isr, vec![leader, others[0]]);
    assert_eq!(
        (after.leader_epoch, after.partition_epoch),
        (current.leader_epoch, current.partition_epoch + 1)
    );
    // The same request again is stale now.
    assert_eq!(
        alter_partition(&shrunk, &request)
            .unwrap_err()
            .kafka_error()
            .code(),
        95
    );
    // A fenced replica may not join.
    let fenced = apply(
        &shrunk,
        vec![MetadataRecord::FenceBroker {
            broker_id: others[1],
            broker_epoch: 10,
        }],
    );
    let after = fenced.partition(Uuid(9), 0).unwrap();
    let join = AlterPartition {
        leader_epoch: after.leader_epoch,
        partition_epoch: after.partition_epoch,
        new_isr: vec![leader, others[0], others[1]],
        ..request
    };
    assert_eq!(
        alter_partition(&fenced, &join)
            .unwrap_err()
            .kafka_error()
            .code(),
        107
    );
}

#[test]
fn partitions_are_added_and_topics_deleted() {
    let image = cluster(3);
    let image = apply(
        &image,
        create_topic(
            &image,
            &NewTopic {
                partitions: 2,
                replication_factor: 2,
                ..topic("t")
            },
            Uuid(3),
            &DEFAULTS,
        )
        .unwrap(),
    );
    assert_eq!(
        create_partitions(&image, "t", 2, &[])
            .unwrap_err()
            .kafka_error()
            .code(),
        37
    );
    assert_eq!(
        create_partitions(&image, "nope", 5, &[])
            .unwrap_err()
            .kafka_error()
            .code(),
        3
    );
    let image = apply(&image, create_partitions(&image, "t", 5, &[]).unwrap());
    let topic = image.topic_by_name("t").unwrap();
    assert_eq!(
        topic.partitions.keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert!(topic.partitions.values().all(|p| p.replicas.len() == 2));

    // Explicit assignments, one per new partition, with the topic's replication factor and
    // registered brokers only (INVALID_REPLICA_ASSIGNMENT otherwise).
    for bad in [
        vec![vec![3, 1]],
        vec![vec![3, 1], vec![2]],
        vec![vec![3, 1], vec![2, 9]],
        vec![vec![3, 3], vec![1, 2]],
    ] {
        assert_eq!(
            create_partitions(&image, "t", 7, &bad)
                .unwrap_err()
                .kafka_error(),
            KafkaError::InvalidReplicaAssignment,
            "{bad:?}"
        );
    }
    let image = apply(
        &image,
        create_partitions(&image, "t", 7, &[vec![3, 1], vec![2, 3]]).unwrap(),
    );
    let topic = image.topic_by_name("t").unwrap();
    assert_eq!(topic.partitions[&5].replicas, vec![3, 1]);
    assert_eq!(
        (topic.partitions[&5].leader, topic.partitions[&6].leader),
        (3, 2)
    );
    assert_eq!(topic.partitions[&6].isr, vec![2, 3]);
    let image = apply(&image, delete_topic(&image, "t").unwrap());
    assert!(image.topic_by_name("t").is_none());
    assert_eq!(
        delete_topic(&image, "t").unwrap_err().kafka_error().code(),
        3
    );
}

#[test]
fn duplicate_isr_members_and_unservable_assignments_are_refused() {
    let image = cluster(3);
    let spec = NewTopic {
        partitions: 1,
        ..topic("t")
    };
    let image = apply(
        &image,
        create_topic(&image, &spec, Uuid(4), &DEFAULTS).unwrap(),
    );
    let current = image.partition(Uuid(4), 0).unwrap().clone();
    let other = *current
        .replicas
        .iter()
        .find(|b| **b != current.leader)
        .unwrap();
    let duplicate = AlterPartition {
        broker: current.leader,
        topic_id: Uuid(4),
        partition: 0,
        leader_epoch: current.leader_epoch,
        partition_epoch: current.partition_epoch,
        new_isr: vec![current.leader, other, other],
    };
    assert_eq!(
        alter_partition(&image, &duplicate)
            .unwrap_err()
            .kafka_error()
            .code(),
        107
    );
    // Replay refuses a duplicate ISR whatever proposes it.
    let mut delta = sluice_raft::MetadataDelta::new(&image);
    let change = MetadataRecord::PartitionChange(PartitionChange {
        topic_id: Uuid(4),
        partition: 0,
        isr: Some(vec![current.leader, current.leader]),
        ..Default::default()
    });
    assert!(delta.replay(&change).is_err());
    // Explicit assignments with no unfenced replica would never come online.
    let fenced = apply(
        &image,
        vec![MetadataRecord::FenceBroker {
            broker_id: 3,
            broker_epoch: 10,
        }],
    );
    let offline = NewTopic {
        assignments: [(0, vec![3])].into(),
        ..topic("u")
    };
    assert_eq!(
        create_topic(&fenced, &offline, Uuid(5), &DEFAULTS)
            .unwrap_err()
            .kafka_error()
            .code(),
        39
    );
}

#[test]
fn reassignments_elect_the_first_live_in_sync_target_in_replica_order() {
    let image = cluster(5);
    let image = apply(
        &image,
        create_topic(&image, &topic("moving"), Uuid(9), &DEFAULTS).unwrap(),
    );
    let start = image.partition(Uuid(9), 0).unwrap().clone();
    let outside: Vec<BrokerId> = (1..=5).filter(|b| !start.replicas.contains(b)).collect();
    // Move to the two brokers outside the set plus one follower; the leader leaves.
    let follower = *start.replicas.iter().find(|b| **b != start.leader).unwrap();
    let target = vec![outside[1], outside[0], follower];
    let image = apply(
        &image,
        reassign(
            &image,
            "moving",
            0,
            Some(target.clone()),
            &mut BTreeMap::new(),
        )
        .unwrap(),
    );
    // Every replica caught up: the ISR lists them in another order than the target.
    let mut everyone = image.partition(Uuid(9), 0).unwrap().replicas.clone();
    everyone.sort_unstable();
    let caught_up = MetadataRecord::PartitionChange(PartitionChange {
        topic_id: Uuid(9),
        partition: 0,
        isr: Some(everyone),
        ..Default::default()
    });
    let image = apply(&image, vec![caught_up]);
    let done = apply(&image, complete_reassignments(&image));
    let moved = done.partition(Uuid(9), 0).unwrap();
    assert_eq!(moved.replicas, target);
    // The preferred (first) target replica leads, not the lowest id in the ISR.
    assert_eq!(moved.leader, outside[1]);

    // Cancelling instead goes back to the original replicas; when the leader is not among
    // them, the first original replica in the ISR and alive leads.
    let led_by_newcomer = apply(
        &image,
        vec![MetadataRecord::PartitionChange(PartitionChange {
            topic_id: Uuid(9),
            partition: 0,
            leader: Some(outside[0]),
            ..Default::default()
        })],
    );
    let cancelled = apply(
        &led_by_newcomer,
        reassign(&led_by_newcomer, "moving", 0, None, &mut BTreeMap::new()).unwrap(),
    );
    let back = cancelled.partition(Uuid(9), 0).unwrap();
    assert_eq!(back.replicas, start.replicas);
    assert_eq!(back.leader, start.replicas[0]);
}

#[test]
fn creates_past_a_brokers_partition_limit_are_refused_and_placement_avoids_full_brokers() {
    // Broker 1 hosts at most 4 replicas; brokers 2 and 3 did not say (no limit).
    let image = cluster_with_capacity(3, |id| (id == 1).then_some(4));
    let one = |partitions: i32| NewTopic {
        name: format!("t{partitions}"),
        partitions,
        replication_factor: 1,
        ..Default::default()
    };
    let refused = |result: Result<Vec<MetadataRecord>, ControllerError>| match result {
        Err(error @ ControllerError::InvalidPartitions(_)) => {
            assert_eq!(error.kafka_error(), KafkaError::InvalidPartitions);
            error.to_string()
        }
        other => panic!("expected INVALID_PARTITIONS, got {other:?}"),
    };

    // Three replicas on broker 1 fit; its count follows the image.
    let assigned = NewTopic {
        assignments: (0..3).map(|p| (p, vec![1])).collect(),
        ..one(3)
    };
    let image = apply(
        &image,
        create_topic(&image, &assigned, Uuid(1), &DEFAULTS).unwrap(),
    );
    assert_eq!(image.replica_count(1), 3);

    // Two more named on broker 1 do not, and the message says why and what to do.
    let past = NewTopic {
        name: "past".into(),
        assignments: (0..2).map(|p| (p, vec![1])).collect(),
        ..one(2)
    };
    let message = refused(create_topic(&image, &past, Uuid(2), &DEFAULTS));
    assert!(
        message.contains("broker 1 hosts 3 partition replicas and this would add 2")
            && message.contains("max.broker.partitions of 4"),
        "{message}"
    );
    let message = refused(create_partitions(&image, "t3", 5, &[vec![1], vec![1]]));
    assert!(message.contains("broker 1"), "{message}");

    // Placed by the controller, new replicas go where there is room: broker 1 takes one
    // more and is then full, so 30 RF=3 partitions would need it and are refused, while
    // RF=2 partitions fit on brokers 2 and 3.
    let image = apply(
        &image,
        create_partitions(&image, "t3", 4, &[vec![1]]).unwrap(),
    );
    assert_eq!(image.replica_count(1), 4);
    let wide = NewTopic {
        replication_factor: 3,
        ..one(30)
    };
    refused(create_topic(&image, &wide, Uuid(3), &DEFAULTS));
    let two = NewTopic {
        replication_factor: 2,
        ..one(30)
    };
    let image = apply(
        &image,
        create_topic(&image, &two, Uuid(4), &DEFAULTS).unwrap(),
    );
    assert_eq!(
        [1, 2, 3].map(|b| image.replica_count(b)),
        [4, 30, 30],
        "the full broker got none"
    );

    // Deleting a topic frees its replicas' room.
    let image = apply(&image, delete_topic(&image, "t3").unwrap());
    assert_eq!(image.replica_count(1), 0);
    apply(
        &image,
        create_topic(&image, &past, Uuid(5), &DEFAULTS).unwrap(),
    );
}

#[test]
fn moves_past_a_brokers_partition_limit_are_refused() {
    // Broker 3 hosts at most 2 replicas; brokers 1 and 2 did not say.
    let image = cluster_with_capacity(3, |id| (id == 3).then_some(2));
    let on_one = NewTopic {
        name: "m".into(),
        partitions: 3,
        replication_factor: 1,
        assignments: (0..3).map(|p| (p, vec![1])).collect(),
        ..Default::default()
    };
    let image = apply(
        &image,
        create_topic(&image, &on_one, Uuid(1), &DEFAULTS).unwrap(),
    );
    let refused = |result: Result<Vec<MetadataRecord>, Refusal>| match result {
        Err(refused) => {
            assert_eq!(refused.error, KafkaError::InvalidReplicaAssignment);
            refused.message
        }
        Ok(records) => panic!("expected INVALID_REPLICA_ASSIGNMENT, got {records:?}"),
    };

    // In one request, two moves onto broker 3 fit and the third does not: the count
    // includes the moves decided before it.
    let mut adding = BTreeMap::new();
    let mut records = Vec::new();
    for partition in 0..2 {
        records.extend(reassign(&image, "m", partition, Some(vec![3]), &mut adding).unwrap());
    }
    let message = refused(reassign(&image, "m", 2, Some(vec![3]), &mut adding));
    assert!(
        message.contains("broker 3 hosts 2 partition replicas")
            && message.contains("max.broker.partitions is 2"),
        "{message}"
    );
    // Broker 3 hosts the moving replicas from the start.
    let image = apply(&image, records);
    assert_eq!(image.replica_count(3), 2);
    refused(reassign(
        &image,
        "m",
        2,
        Some(vec![3]),
        &mut BTreeMap::new(),
    ));
    // A move that keeps broker 3 where it is, or onto a broker without a limit, is not
    // counted against it; cancelling frees its room.
    reassign(&image, "m", 0, Some(vec![3]), &mut BTreeMap::new()).unwrap();
    reassign(&image, "m", 2, Some(vec![2]), &mut BTreeMap::new()).unwrap();
    let image = apply(
        &image,
        reassign(&image, "m", 0, None, &mut BTreeMap::new()).unwrap(),
    );
    assert_eq!(image.replica_count(3), 1);
    reassign(&image, "m", 2, Some(vec![3]), &mut BTreeMap::new()).unwrap();
}

#[test]
fn replicas_whose_log_failed_leave_the_isr_and_hand_over_leadership() {
    let image = cluster(3);
    let replicated = NewTopic {
        name: "r".into(),
        partitions: 2,
        replication_factor: 3,
        assignments: [(0, vec![1, 2, 3]), (1, vec![2, 3, 1])].into(),
        ..Default::default()
    };
    let single = NewTopic {
        name: "s".into(),
        partitions: 1,
        replication_factor: 1,
        assignments: [(0, vec![1])].into(),
        ..Default::default()
    };
    let image = apply(
        &image,
        create_topic(&image, &replicated, Uuid(1), &DEFAULTS).unwrap(),
    );
    let image = apply(
        &image,
        create_topic(&image, &single, Uuid(2), &DEFAULTS).unwrap(),
    );
    // Broker 1's logs of r-0 (it leads), r-1 (it follows) and s-0 (alone) failed; r-0 of a
    // topic it does not host is skipped.
    let failed = [(Uuid(1), 0), (Uuid(1), 1), (Uuid(2), 0), (Uuid(9), 0)];
    let records = replicas_offline(&image, 1, &failed, &DEFAULTS);
    let image = apply(&image, records);
    let r0 = image.partition(Uuid(1), 0).unwrap();
    assert_eq!((r0.leader, r0.isr.clone()), (2, vec![2, 3]));
    let r1 = image.partition(Uuid(1), 1).unwrap();
    assert_eq!((r1.leader, r1.isr.clone()), (2, vec![2, 3]));
    // The last ISR member keeps leading: no one else holds its records.
    let s0 = image.partition(Uuid(2), 0).unwrap();
    assert_eq!((s0.leader, s0.isr.clone()), (1, vec![1]));
    // Said again, nothing changes.
    assert!(replicas_offline(&image, 1, &failed, &DEFAULTS).is_empty());
}

#[test]
fn a_failed_replica_an_unclean_election_made_leader_hands_over_where_the_topic_allows_it() {
    let image = cluster(3);
    let mut spec = NewTopic {
        name: "u".into(),
        partitions: 1,
        replication_factor: 3,
        assignments: [(0, vec![1, 2, 3])].into(),
        ..Default::default()
    };
    spec.configs
        .insert("unclean.leader.election.enable".into(), "true".into());
    let image = apply(
        &image,
        create_topic(&image, &spec, Uuid(3), &DEFAULTS).unwrap(),
    );
    // Broker 1 failed (its log) and an unclean election left it leading alone: reported by
    // its broker, the leadership moves to a live replica, uncleanly as the topic allows.
    let mut unclean = image.clone();
    let topic = std::sync::Arc::make_mut(unclean.topics.get_mut(&Uuid(3)).unwrap());
    let current = topic.partitions.get_mut(&0).unwrap();
    current.isr = vec![1];
    current.leader_epoch += 1;
    let records = replicas_offline(&unclean, 1, &[(Uuid(3), 0)], &DEFAULTS);
    let moved = apply(&unclean, records);
    let u0 = moved.partition(Uuid(3), 0).unwrap();
    assert_eq!((u0.leader, u0.isr.clone()), (2, vec![2]));
    // Where the topic does not allow it, the failed replica keeps the partition (and answers
    // KAFKA_STORAGE_ERROR): no one else holds its records.
    let mut clean_only = unclean.clone();
    clean_only.configs.clear();
    assert!(replicas_offline(&clean_only, 1, &[(Uuid(3), 0)], &DEFAULTS).is_empty());
}

/// Kafka's `leader.imbalance.per.broker.percentage`: a broker's leaderships come back only
/// when the share of its preferred partitions led elsewhere is above the threshold, and then
/// only those whose preferred replica is alive and in the ISR.
#[test]
fn leaderships_come_back_only_past_the_per_broker_imbalance_percentage() {
    let image = cluster(3);
    // Twenty partitions preferring broker 1, four preferring broker 2.
    let assignments: BTreeMap<i32, Vec<BrokerId>> = (0..24)
        .map(|p| (p, if p < 20 { vec![1, 2, 3] } else { vec![2, 3, 1] }))
        .collect();
    let new_topic = NewTopic {
        name: "leaning".into(),
        partitions: -1,
        replication_factor: -1,
        assignments,
        ..Default::default()
    };
    let image = apply(
        &image,
        create_topic(&image, &new_topic, Uuid(3), &DEFAULTS).unwrap(),
    );
    let lead = |image: &MetadataImage, partitions: &[i32], leader: BrokerId| {
        let changes = partitions
            .iter()
            .map(|p| {
                MetadataRecord::PartitionChange(PartitionChange {
                    topic_id: Uuid(3),
                    partition: *p,
                    leader: Some(leader),
                    ..Default::default()
                })
            })
            .collect();
        apply(image, changes)
    };
    let elected = |records: &[MetadataRecord]| -> Vec<(i32, BrokerId)> {
        records
            .iter()
            .filter_map(|r| match r {
                MetadataRecord::PartitionChange(c) => Some((c.partition, c.leader?)),
                _ => None,
            })
            .collect()
    };

    // Balanced: nothing to say, nothing to do.
    let (imbalances, records) = preferred_leader_changes(&image, 10);
    assert!(imbalances.is_empty() && records.is_empty());

    // Two of broker 1's twenty (10%) led by broker 2: not above 10%, they stay.
    let two = lead(&image, &[0, 1], 2);
    let (imbalances, records) = preferred_leader_changes(&two, 10);
    assert!(imbalances.is_empty(), "{imbalances:?}");
    assert!(records.is_empty());
    // With a threshold of 0 any imbalance counts.
    let (_, records) = preferred_leader_changes(&two, 0);
    assert_eq!(elected(&records), vec![(0, 1), (1, 1)]);

    // Three (15%): all three come back to broker 1, and nothing else moves.
    let three = lead(&two, &[2], 3);
    let (imbalances, records) = preferred_leader_changes(&three, 10);
    assert_eq!(
        imbalances,
        vec![LeaderImbalance {
            broker: 1,
            preferred: 20,
            led_elsewhere: 3,
            elected: 3,
            reassigning: 0,
            not_alive: 0,
            not_in_isr: 0,
        }]
    );
    assert_eq!(elected(&records), vec![(0, 1), (1, 1), (2, 1)]);
    let back = apply(&three, records);
    assert_eq!(led_by(&back, "leaning", 1).len(), 20);

    // One of them without broker 1 in its ISR: the other two come back; it waits.
    let out_of_isr = apply(
        &three,
        vec![MetadataRecord::PartitionChange(PartitionChange {
            topic_id: Uuid(3),
            partition: 1,
            isr: Some(vec![2, 3]),
            ..Default::default()
        })],
    );
    let (imbalances, records) = preferred_leader_changes(&out_of_isr, 10);
    assert_eq!(imbalances[0].elected, 2);
    assert_eq!(imbalances[0].not_in_isr, 1);
    assert_eq!(elected(&records), vec![(0, 1), (2, 1)]);
    assert!(
        imbalances[0]
            .waiting_reasons()
            .starts_with("1 wait for the broker to join their ISR"),
        "{}",
        imbalances[0].waiting_reasons()
    );

    // One of them being reassigned: the reassignment decides its leader, and the log says so
    // rather than blaming the ISR.
    let moving = apply(
        &three,
        reassign(&three, "leaning", 2, Some(vec![1, 3]), &mut BTreeMap::new()).unwrap(),
    );
    let (imbalances, records) = preferred_leader_changes(&moving, 10);
    assert_eq!(
        (imbalances[0].elected, imbalances[0].reassigning),
        (2, 1),
        "{imbalances:?}"
    );
    assert_eq!(elected(&records), vec![(0, 1), (1, 1)]);
    assert_eq!(
        imbalances[0].waiting_reasons(),
        "1 are being reassigned (the reassignment decides their leader)"
    );

    // Broker 2 is imbalanced on its own count (one of four, 25%), whatever broker 1's is.
    let second = lead(&image, &[20], 3);
    let (imbalances, records) = preferred_leader_changes(&second, 10);
    assert_eq!(imbalances.len(), 1);
    assert_eq!((imbalances[0].broker, imbalances[0].percentage()), (2, 25));
    assert_eq!(elected(&records), vec![(20, 2)]);
    assert!(preferred_leader_changes(&second, 25).1.is_empty());

    // A fenced preferred replica gets nothing back, however imbalanced it is.
    let fenced = apply(&three, fence_broker(&three, 1, &DEFAULTS).unwrap());
    let (imbalances, records) = preferred_leader_changes(&fenced, 10);
    assert!(records.is_empty());
    assert_eq!(imbalances[0].led_elsewhere, 20);
    assert_eq!(imbalances[0].elected, 0);
    assert_eq!(imbalances[0].not_alive, 20);
    assert!(
        imbalances[0]
            .waiting_reasons()
            .starts_with("20 wait for the broker to be alive"),
        "{}",
        imbalances[0].waiting_reasons()
    );
}

/// As KRaft's controller bounds a rebalance round (`MAX_ELECTIONS_PER_IMBALANCE`): 2,500
/// leaderships to give back go in rounds of 1,000, 1,000 and 500, each re-checked on the
/// image of its own round.
#[test]
fn leader_rebalance_proposes_at_most_1000_elections_per_round() {
    let image = cluster(3);
    let count = 2_500;
    let assignments: BTreeMap<i32, Vec<BrokerId>> =
        (0..count).map(|p| (p, vec![1, 2, 3])).collect();
    let new_topic = NewTopic {
        name: "wide".into(),
        partitions: -1,
        replication_factor: -1,
        assignments,
        ..Default::default()
    };
    let image = apply(
        &image,
        create_topic(&image, &new_topic, Uuid(4), &DEFAULTS).unwrap(),
    );
    let mut image = apply(
        &image,
        (0..count)
            .map(|p| {
                MetadataRecord::PartitionChange(PartitionChange {
                    topic_id: Uuid(4),
                    partition: p,
                    leader: Some(2),
                    ..Default::default()
                })
            })
            .collect(),
    );
    let (imbalances, records) = preferred_leader_changes(&image, 10);
    assert_eq!(imbalances[0].elected, count as usize);
    let mut pending: Vec<(Uuid, i32)> = records
        .iter()
        .filter_map(|r| match r {
            MetadataRecord::PartitionChange(c) => Some((c.topic_id, c.partition)),
            _ => None,
        })
        .collect();
    let mut rounds = Vec::new();
    while !pending.is_empty() {
        let round = preferred_elections(&image, &mut pending);
        rounds.push(round.len());
        image = apply(&image, round);
    }
    assert_eq!(rounds, vec![1000, 1000, 500]);
    assert_eq!(led_by(&image, "wide", 1).len(), count as usize);

    // A partition whose preferred replica left the ISR between the check and its round is
    // skipped, not forced.
    let mut pending = vec![(Uuid(4), 0), (Uuid(4), 1)];
    let moved = apply(
        &image,
        vec![
            MetadataRecord::PartitionChange(PartitionChange {
                topic_id: Uuid(4),
                partition: 0,
                leader: Some(2),
                ..Default::default()
            }),
            MetadataRecord::PartitionChange(PartitionChange {
                topic_id: Uuid(4),
                partition: 1,
                leader: Some(2),
                isr: Some(vec![2, 3]),
                ..Default::default()
            }),
        ],
    );
    let round = preferred_elections(&moved, &mut pending);
    assert!(pending.is_empty());
    assert_eq!(round.len(), 1);
}

/// Kafka's `ReplicationControlManager.electLeaders`: asked for every partition, it answers
/// only those it elected or failed to, so `--all-topic-partitions` on a balanced cluster
/// prints nothing; a partition named explicitly hears ELECTION_NOT_NEEDED.
#[test]
fn elect_leaders_for_every_partition_leaves_out_those_already_led_by_their_preferred_replica() {
    let image = cluster(3);
    let image = apply(
        &image,
        create_topic(&image, &topic("calm"), Uuid(5), &DEFAULTS).unwrap(),
    );
    let (results, records) = elect_leaders(&image, ELECTION_PREFERRED, None);
    assert!(results.is_empty() && records.is_empty(), "{results:?}");

    let named = [
        TopicPartition::new("calm", 0),
        TopicPartition::new("calm", 1),
    ];
    let (results, records) = elect_leaders(&image, ELECTION_PREFERRED, Some(&named));
    assert_eq!(
        results,
        vec![
            ("calm".to_owned(), 0, Err(KafkaError::ElectionNotNeeded)),
            ("calm".to_owned(), 1, Err(KafkaError::ElectionNotNeeded)),
        ]
    );
    assert!(records.is_empty());

    // One partition led elsewhere: asked for everything, that partition alone is answered.
    let preferred = image.partition(Uuid(5), 1).unwrap().replicas[0];
    let other = image.partition(Uuid(5), 1).unwrap().replicas[1];
    let moved = apply(
        &image,
        vec![MetadataRecord::PartitionChange(PartitionChange {
            topic_id: Uuid(5),
            partition: 1,
            leader: Some(other),
            ..Default::default()
        })],
    );
    let (results, records) = elect_leaders(&moved, ELECTION_PREFERRED, None);
    assert_eq!(results, vec![("calm".to_owned(), 1, Ok(()))]);
    let back = apply(&moved, records);
    assert_eq!(back.partition(Uuid(5), 1).unwrap().leader, preferred);
    // Failures are answered too: an unknown partition named explicitly.
    let unknown = [TopicPartition::new("calm", 9)];
    let (results, _) = elect_leaders(&image, ELECTION_PREFERRED, Some(&unknown));
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].2, Err(KafkaError::UnknownTopicOrPartition));
}
