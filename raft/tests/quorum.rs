//! Three quorum members in one process, talking gRPC over loopback: election on bootstrap,
//! commits reach every member, the leader's loss elects another that keeps committing, and a
//! restarted member catches up. (Multi-process tests with `sluice server` come with the node.)

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use sluice_raft::records::Uuid;
use sluice_raft::{MetadataRecord, NodeInfo, Quorum, QuorumConfig};

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn config(id: u64, dir: &std::path::Path, voters: &BTreeMap<u64, NodeInfo>) -> QuorumConfig {
    let listen = voters[&id].addr.parse().unwrap();
    let mut config = QuorumConfig::new(id, dir.join(format!("node-{id}")), listen, voters.clone());
    config.heartbeat_interval_ms = 100;
    config.election_timeout_min_ms = 400;
    config.election_timeout_max_ms = 800;
    config
}

fn topic(n: u128) -> MetadataRecord {
    MetadataRecord::Topic {
        topic_id: Uuid(n),
        name: format!("topic-{n}"),
    }
}

async fn wait_for_topics(quorum: &Quorum, count: usize) {
    let mut images = quorum.images();
    tokio::time::timeout(Duration::from_secs(10), async {
        while images.borrow().topics.len() < count {
            images.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("node {} did not see {count} topics", quorum.node_id()));
}

/// The leader that one of `members` reports, once it is one of them.
async fn leader_of(members: &[&Quorum]) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < deadline {
        for member in members {
            if let Some(leader) = member.metrics().current_leader {
                if members.iter().any(|m| m.node_id() == leader) {
                    return leader;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no leader among {:?}",
        members.iter().map(|m| m.node_id()).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_elect_commit_fail_over_and_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let voters: BTreeMap<u64, NodeInfo> = (1..=3)
        .map(|id| {
            (
                id,
                NodeInfo {
                    addr: free_addr().to_string(),
                },
            )
        })
        .collect();
    let (a, b, c) = tokio::join!(
        Quorum::start(config(1, dir.path(), &voters)),
        Quorum::start(config(2, dir.path(), &voters)),
        Quorum::start(config(3, dir.path(), &voters)),
    );
    let mut members: BTreeMap<u64, Quorum> = [a.unwrap(), b.unwrap(), c.unwrap()]
        .into_iter()
        .map(|q| (q.node_id(), q))
        .collect();

    let all: Vec<&Quorum> = members.values().collect();
    let leader = leader_of(&all).await;
    members[&leader].propose(vec![topic(1)]).await.unwrap();
    for member in members.values() {
        wait_for_topics(member, 1).await;
    }
    // A follower refuses proposals and names the leader.
    let follower = *members.keys().find(|id| **id != leader).unwrap();
    match members[&follower].propose(vec![topic(9)]).await {
        Err(sluice_raft::ProposeError::NotLeader {
            leader: Some(named),
            ..
        }) => assert_eq!(named, leader),
        other => panic!("expected NotLeader, got {other:?}"),
    }

    // The leader goes; the other two elect one of themselves and keep committing.
    let old = members.remove(&leader).unwrap();
    old.shutdown().await;
    let remaining: Vec<&Quorum> = members.values().collect();
    let started = std::time::Instant::now();
    let new_leader = leader_of(&remaining).await;
    assert_ne!(new_leader, leader);
    let mut committed = false;
    while !committed && started.elapsed() < Duration::from_secs(15) {
        committed = members[&new_leader].propose(vec![topic(2)]).await.is_ok();
        if !committed {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(committed, "no commit after the leader's loss");
    eprintln!(
        "metadata writes resumed {} ms after the leader stopped",
        started.elapsed().as_millis()
    );
    for member in members.values() {
        wait_for_topics(member, 2).await;
    }

    // The old leader restarts from its data and catches up.
    let restarted = Quorum::start(config(leader, dir.path(), &voters))
        .await
        .unwrap();
    wait_for_topics(&restarted, 2).await;
    restarted.shutdown().await;
    for (_, member) in members {
        member.shutdown().await;
    }
}
