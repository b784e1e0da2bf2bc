//! The group shard driven through the coordinator runtime on an in-memory partition and a
//! manual clock: every write path's failed append, commit visibility, and a property test
//! that replaying the records written yields the live shard's state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::CommittedOffset;
use super::classic::{JoinRequest, Leaving, Reply};
use super::consumer::{Heartbeat, TopicsView};
use super::shard::{GroupShard, OffsetCommit, TopicsSource};
use super::state::{DurableGroup, Group};
use crate::coordinator::{
    Clock, ManualClock, MemoryWriter, PartitionWriter, Runtime, RuntimeConfig, ShardHandle,
};
use crate::protocol::errors::KafkaError;
use crate::protocol::{TopicIdPartition, TopicPartition};
use crate::rng::SmallRng as Rng;

const TOPIC_ID: u128 = 7;

struct OneTopic;

impl TopicsSource for OneTopic {
    fn view(&self, names: &BTreeSet<String>) -> TopicsView {
        names
            .iter()
            .filter(|n| *n == "t")
            .map(|n| (n.clone(), (TOPIC_ID, 6)))
            .collect()
    }
}

struct Fixture {
    clock: Arc<ManualClock>,
    writer: Arc<MemoryWriter>,
    runtime: Runtime<GroupShard>,
    shard: Arc<ShardHandle<GroupShard>>,
    epoch: i32,
}

fn empty_shard() -> Arc<dyn Fn() -> GroupShard + Send + Sync> {
    let config = Arc::new(crate::group::test_config());
    Arc::new(move || {
        GroupShard::new(
            Arc::clone(&config),
            Arc::new(OneTopic),
            Arc::new(super::lag::CommittedIndex::default()),
        )
    })
}

fn fixture() -> Fixture {
    let clock = Arc::new(ManualClock::new());
    let writer = MemoryWriter::new();
    let runtime = Runtime::new(
        RuntimeConfig::for_tests("group coordinator"),
        Arc::clone(&clock) as Arc<dyn Clock>,
    );
    let shard = runtime
        .start_shard(
            0,
            0,
            Arc::clone(&writer) as Arc<dyn PartitionWriter>,
            empty_shard(),
        )
        .expect("a new shard");
    shard.load().expect("load");
    Fixture {
        clock,
        writer,
        runtime,
        shard,
        epoch: 0,
    }
}

impl Fixture {
    /// What the records say of every group (groups the records hold nothing of left out).
    fn durable(&self) -> BTreeMap<String, DurableGroup> {
        durable_of(&self.shard)
    }

    /// A new shard at the next epoch, loaded from the log: what a coordinator move gives.
    fn reload(&mut self) -> Arc<ShardHandle<GroupShard>> {
        self.epoch += 1;
        self.writer.set_leader_epoch(self.epoch);
        let shard = self
            .runtime
            .start_shard(
                0,
                self.epoch,
                Arc::clone(&self.writer) as Arc<dyn PartitionWriter>,
                empty_shard(),
            )
            .expect("a new epoch");
        shard.load().expect("reload");
        self.shard = Arc::clone(&shard);
        shard
    }

    async fn commit(
        &self,
        group: &str,
        member: &str,
        generation: i32,
        offset: i64,
    ) -> Result<(), KafkaError> {
        let commits = vec![OffsetCommit {
            topic_partition: TopicPartition::new("t", 0),
            offset: CommittedOffset {
                offset,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: 0,
            },
        }];
        self.shard
            .write(|s, ctx| s.commit(ctx, group, member, None, generation, &commits))
            .await?
    }

    async fn consumer_heartbeat(
        &self,
        group: &str,
        request: Heartbeat,
    ) -> Result<(Result<(), KafkaError>, i32, Vec<TopicIdPartition>), KafkaError> {
        let result = self
            .shard
            .write(|s, ctx| s.consumer_heartbeat(ctx, group, request))
            .await?;
        Ok((
            result.error,
            result.member_epoch,
            result.assignment.unwrap_or_default(),
        ))
    }

    /// A classic member joins (no KIP-394 round trip) and, when it leads, syncs: the group's
    /// metadata record is written. Its member id.
    fn classic_join(&self, group: &str) -> Result<Option<String>, KafkaError> {
        let reply = self
            .shard
            .write_detached(|s, ctx| s.join(ctx, group, join_request("")))?;
        Ok(match reply {
            Reply::Now(result) if result.error.is_ok() => Some(result.member_id),
            Reply::Now(_) => None,
            Reply::Later(mut receiver) => receiver
                .try_recv()
                .ok()
                .filter(|r| r.error.is_ok())
                .map(|r| r.member_id),
        })
    }

    fn classic_sync(&self, group: &str, member: &str) -> Result<(), KafkaError> {
        let generation = self.classic_generation(group);
        let reply = self.shard.write_detached(|s, ctx| {
            s.sync(
                ctx,
                group,
                member,
                None,
                generation,
                None,
                None,
                vec![(member.to_owned(), b"assignment".to_vec())],
            )
        })?;
        drop(reply);
        Ok(())
    }

    fn classic_generation(&self, group: &str) -> i32 {
        self.shard.inspect(|s| match s.group(group) {
            Some(Group::Classic(g)) => g.generation(),
            _ => -1,
        })
    }

    fn member_epoch(&self, group: &str, member: &str) -> Option<i32> {
        self.shard.inspect(|s| match s.group(group) {
            Some(Group::Consumer(g)) => g.members.get(member).map(|m| m.epoch),
            _ => None,
        })
    }

    fn assigned(&self, group: &str, member: &str) -> Vec<TopicIdPartition> {
        self.shard.inspect(|s| match s.group(group) {
            Some(Group::Consumer(g)) => g
                .members
                .get(member)
                .map(|m| m.assigned.iter().copied().collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        })
    }
}

fn durable_of(shard: &ShardHandle<GroupShard>) -> BTreeMap<String, DurableGroup> {
    shard.inspect(|s| {
        s.groups()
            .map(|g| (g.group_id().to_owned(), g.durable()))
            .filter(|(_, d)| {
                !matches!(d, DurableGroup::Classic { stored: None, offsets } if offsets.is_empty())
            })
            .collect()
    })
}

fn join_request(member_id: &str) -> JoinRequest {
    JoinRequest {
        member_id: member_id.into(),
        group_instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), b"metadata".to_vec())],
        require_known_member_id: false,
        supports_skip_assignment: false,
    }
}

fn consumer_request(
    member_id: &str,
    epoch: i32,
    owned: Option<Vec<TopicIdPartition>>,
) -> Heartbeat {
    Heartbeat {
        member_id: member_id.into(),
        member_epoch: epoch,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: (epoch == 0).then(|| vec!["t".to_owned()]),
        server_assignor: None,
        owned,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
    }
}

#[tokio::test]
async fn a_failed_append_of_any_write_path_leaves_memory_as_the_log() {
    let f = fixture();
    let refused = Some(KafkaError::NotLeaderOrFollower);

    // An offset commit.
    f.commit("g", "", -1, 5).await.unwrap();
    let before = f.durable();
    f.writer.fail_appends(refused);
    assert_eq!(
        f.commit("g", "", -1, 9).await,
        Err(KafkaError::NotLeaderOrFollower)
    );
    assert_eq!(f.durable(), before);

    // OffsetDelete and DeleteGroups.
    let deleted = f
        .shard
        .write(|s, ctx| s.delete_offsets(ctx, "g", &[TopicPartition::new("t", 0)]))
        .await;
    assert_eq!(deleted.err(), Some(KafkaError::NotLeaderOrFollower));
    assert_eq!(
        f.shard.write(|s, ctx| s.delete_group(ctx, "g")).await,
        Err(KafkaError::NotLeaderOrFollower)
    );
    assert_eq!(f.durable(), before);

    // A KIP-848 join converting the offsets-only classic group: nothing of it stays.
    assert_eq!(
        f.consumer_heartbeat("g", consumer_request("m1", 0, Some(vec![])))
            .await
            .err(),
        Some(KafkaError::NotLeaderOrFollower)
    );
    assert_eq!(f.durable(), before);
    assert!(matches!(
        f.shard.inspect(|s| s.group("g").map(Group::group_type)),
        Some("classic")
    ));

    // A KIP-848 member's heartbeats and its leave.
    f.writer.fail_appends(None);
    let (_, epoch, _) = f
        .consumer_heartbeat("g", consumer_request("m1", 0, Some(vec![])))
        .await
        .unwrap();
    let before = f.durable();
    f.writer.fail_appends(refused);
    assert!(
        f.consumer_heartbeat("g", consumer_request("m2", 0, Some(vec![])))
            .await
            .is_err()
    );
    assert!(
        f.consumer_heartbeat("g", consumer_request("m1", -1, None))
            .await
            .is_err()
    );
    assert_eq!(f.durable(), before);
    assert_eq!(f.member_epoch("g", "m1"), Some(epoch));

    // The session timer's removal is rolled back and retried.
    f.clock.advance_ms(46_000);
    f.shard.fire_timers();
    assert_eq!(f.durable(), before, "the expiry's records were refused");
    f.writer.fail_appends(None);
    f.clock.advance_ms(1_000);
    f.shard.fire_timers();
    assert_eq!(f.member_epoch("g", "m1"), None, "expired on the retry");

    // A classic group's stored assignment: the failure sends the members to rejoin and the
    // metadata record never reaches memory.
    let member = f.classic_join("c").unwrap().expect("joined");
    let before = f.durable();
    f.writer.fail_appends(refused);
    assert_eq!(
        f.classic_sync("c", &member),
        Err(KafkaError::NotLeaderOrFollower)
    );
    assert_eq!(f.durable(), before);
    assert_eq!(
        f.shard.inspect(|s| s.group("c").map(Group::state_name)),
        Some("PreparingRebalance")
    );
    f.writer.fail_appends(None);

    // Whatever happened, a reload from the log sees what memory holds.
    let live = f.durable();
    let mut f = f;
    let reloaded = f.reload();
    assert_eq!(durable_of(&reloaded), live);
}

#[tokio::test]
async fn a_commit_is_answered_and_fetched_only_once_stored() {
    let f = fixture();
    f.writer.set_manual_commit(true);
    let shard = Arc::clone(&f.shard);
    let commit = tokio::spawn(async move {
        let commits = vec![OffsetCommit {
            topic_partition: TopicPartition::new("t", 0),
            offset: CommittedOffset {
                offset: 42,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: 0,
            },
        }];
        shard
            .write(|s, ctx| s.commit(ctx, "g", "", None, -1, &commits))
            .await
    });
    tokio::task::yield_now().await;
    let shard = Arc::clone(&f.shard);
    let fetch =
        tokio::spawn(async move { shard.read_committed("g", |s| s.offsets("g", None)).await });
    tokio::task::yield_now().await;
    assert!(!commit.is_finished() && !fetch.is_finished());
    f.writer.commit_all();
    assert_eq!(commit.await.unwrap(), Ok(Ok(())));
    let fetched = fetch.await.unwrap().unwrap();
    assert_eq!(fetched[&TopicPartition::new("t", 0)].offset, 42);
}

#[tokio::test]
async fn a_reloaded_kip848_group_keeps_its_members_epochs_and_partitions() {
    let mut f = fixture();
    let (_, epoch_a, assigned_a) = f
        .consumer_heartbeat("g", consumer_request("a", 0, Some(vec![])))
        .await
        .unwrap();
    assert_eq!(assigned_a.len(), 6);
    assert_eq!(
        f.consumer_heartbeat("g", consumer_request("b", 0, Some(vec![])))
            .await
            .unwrap()
            .0,
        Ok(())
    );
    // a gives up half, b takes it.
    let (_, _, kept) = f
        .consumer_heartbeat("g", consumer_request("a", epoch_a, Some(assigned_a)))
        .await
        .unwrap();
    assert_eq!(
        f.consumer_heartbeat("g", consumer_request("a", epoch_a, Some(kept.clone())))
            .await
            .unwrap()
            .0,
        Ok(())
    );
    let epoch_b = f.member_epoch("g", "b").unwrap();
    assert_eq!(
        f.consumer_heartbeat("g", consumer_request("b", epoch_b, Some(vec![])))
            .await
            .unwrap()
            .0,
        Ok(())
    );
    let live = f.durable();
    let (a, b) = (f.assigned("g", "a"), f.assigned("g", "b"));
    assert_eq!(a.len() + b.len(), 6);
    f.reload();
    assert_eq!(f.durable(), live);
    assert_eq!(
        f.shard.inspect(|s| s.group("g").map(Group::state_name)),
        Some("Stable")
    );
    assert_eq!(f.assigned("g", "a"), a);
}

#[tokio::test]
async fn replaying_the_records_from_scratch_gives_the_live_state() {
    let seed = std::env::var("GROUP_SHARD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    println!("seed {seed} (GROUP_SHARD_SEED={seed} repeats this run)");
    let mut rng = Rng::new(seed);
    for round in 0..20 {
        let mut f = fixture();
        let groups = ["g0", "g1", "g2"];
        let members = ["m0", "m1", "m2", "m3"];
        let mut classic_members: Vec<(String, String)> = Vec::new();
        for step in 0..120 {
            let group = groups[rng.below(groups.len() as u64) as usize];
            let member = members[rng.below(members.len() as u64) as usize];
            f.writer
                .fail_appends((rng.below(6) == 0).then_some(KafkaError::NotLeaderOrFollower));
            let op = rng.below(11);
            let last = (op, group, member);
            match op {
                0 => {
                    let _ = f.commit(group, "", -1, rng.below(100) as i64).await;
                }
                1 => {
                    let epoch = f.member_epoch(group, member).unwrap_or(-1);
                    let _ = f.commit(group, member, epoch, rng.below(100) as i64).await;
                }
                2 | 3 => {
                    let _ = f
                        .consumer_heartbeat(group, consumer_request(member, 0, Some(vec![])))
                        .await;
                }
                4 | 5 => {
                    if let Some(epoch) = f.member_epoch(group, member) {
                        let owned = f.assigned(group, member);
                        let _ = f
                            .consumer_heartbeat(group, consumer_request(member, epoch, Some(owned)))
                            .await;
                    }
                }
                6 => {
                    let _ = f
                        .consumer_heartbeat(group, consumer_request(member, -1, None))
                        .await;
                }
                7 => {
                    if let Ok(Some(id)) = f.classic_join(group) {
                        let _ = f.classic_sync(group, &id);
                        classic_members.push((group.to_owned(), id));
                    }
                }
                8 => {
                    if let Some((group, id)) = classic_members.pop() {
                        let leaving = [Leaving {
                            member_id: id,
                            group_instance_id: None,
                        }];
                        let _ = f
                            .shard
                            .write_detached(|s, ctx| s.leave(ctx, &group, &leaving));
                    }
                }
                9 => {
                    let _ = f
                        .shard
                        .write(|s, ctx| {
                            s.delete_offsets(ctx, group, &[TopicPartition::new("t", 0)])
                        })
                        .await;
                    let _ = f.shard.write(|s, ctx| s.delete_group(ctx, group)).await;
                }
                _ => {
                    f.clock.advance_ms(rng.below(50_000));
                    f.shard.fire_timers();
                }
            }
            // Continuations of appended writes run on spawned tasks.
            tokio::task::yield_now().await;
            if std::env::var("GROUP_SHARD_DEBUG").is_ok() {
                let other: Runtime<GroupShard> = Runtime::new(
                    RuntimeConfig::for_tests("replay"),
                    Arc::clone(&f.clock) as Arc<dyn Clock>,
                );
                let replayed = other
                    .start_shard(
                        0,
                        0,
                        Arc::clone(&f.writer) as Arc<dyn PartitionWriter>,
                        empty_shard(),
                    )
                    .unwrap();
                replayed.load().unwrap();
                if durable_of(&replayed) != f.durable() {
                    panic!(
                        "step {step}: {last:?}\nlive {:#?}\nreplayed {:#?}",
                        f.durable(),
                        durable_of(&replayed)
                    );
                }
            }
            assert!(
                f.shard.is_loaded(),
                "seed {seed} round {round}: an invariant fenced the shard"
            );
        }
        f.writer.fail_appends(None);
        let live = f.durable();
        let reloaded = f.reload();
        assert_eq!(
            durable_of(&reloaded),
            live,
            "seed {seed} round {round}: the replayed state differs from the live one"
        );
    }
}

fn txn_offset(offset: i64) -> Vec<OffsetCommit> {
    vec![OffsetCommit {
        topic_partition: TopicPartition::new("t", 0),
        offset: CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        },
    }]
}

#[tokio::test]
async fn transactional_offsets_count_only_once_their_commit_marker_is_written() {
    use crate::coordinator::TxnProducer;
    use crate::protocol::batch::TxnMarker;
    let mut f = fixture();
    let tp = TopicPartition::new("t", 0);
    let producer = |producer_id| TxnProducer {
        producer_id,
        producer_epoch: 0,
    };
    let marker = |commit| TxnMarker {
        commit,
        coordinator_epoch: 0,
    };
    f.commit("g", "", -1, 5).await.expect("plain commit");
    for (producer_id, offset) in [(1, 10), (2, 20)] {
        f.shard
            .write(|s, ctx| {
                s.txn_commit(
                    ctx,
                    producer(producer_id),
                    "g",
                    "",
                    None,
                    -1,
                    &txn_offset(offset),
                )
            })
            .await
            .expect("stored")
            .expect("accepted");
    }
    // Pending: the committed offset is the plain one, and the partition is unstable.
    let read = |shard: &ShardHandle<GroupShard>| {
        shard
            .read(|s| {
                (
                    s.offsets("g", None)[&tp].offset,
                    s.has_pending_offset("g", &tp),
                )
            })
            .expect("loaded")
    };
    assert_eq!(read(&f.shard), (5, true));
    // A refused append rolls the pending offset back.
    f.writer.fail_appends(Some(KafkaError::NotEnoughReplicas));
    let refused = f
        .shard
        .write(|s, ctx| s.txn_commit(ctx, producer(3), "g", "", None, -1, &txn_offset(30)))
        .await;
    assert_eq!(refused.err(), Some(KafkaError::NotEnoughReplicas));
    f.writer.fail_appends(None);
    assert_eq!(f.shard.read(|s| s.pending_offsets("g").len()).ok(), Some(1));
    // Producer 1 aborts, producer 2 commits.
    f.shard
        .write_marker(producer(1), marker(false))
        .await
        .expect("abort");
    assert_eq!(read(&f.shard), (5, true));
    f.shard
        .write_marker(producer(2), marker(true))
        .await
        .expect("commit");
    assert_eq!(read(&f.shard), (20, false));
    // A new coordinator loads the same from the log, markers included.
    f.shard
        .write(|s, ctx| s.txn_commit(ctx, producer(4), "g", "", None, -1, &txn_offset(40)))
        .await
        .expect("stored")
        .expect("accepted");
    let reloaded = f.reload();
    assert_eq!(read(&reloaded), (20, true));
    reloaded
        .write_marker(producer(4), marker(true))
        .await
        .expect("commit");
    assert_eq!(read(&reloaded), (40, false));
}
