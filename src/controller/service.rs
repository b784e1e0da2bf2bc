//! The active controller at work: requests from brokers (registration, heartbeats) and from
//! admin paths (topics), answered by the quorum leader, and the broker session timer.
//!
//! Every node runs a [`ControllerService`] behind its quorum member's internal listener. Only
//! the quorum leader acts; another node answers `NotController` naming the leader, and the
//! caller ([`call_controller`]) retries there. Decisions come from the pure functions in
//! `controller`, on the leader's current image, and take effect when the quorum commits them.
//!
//! Broker sessions live in the leader's memory: a broker unheard for
//! `broker.session.timeout.ms` is fenced and its leaderships move. A new leader starts every
//! session afresh, so a change of controller fences nobody by itself.
//!
//! A broker whose process died is found sooner: the leader holds an idle connection to each
//! unfenced broker's listener ([`ControllerService::run_liveness_watch`]); when the kernel
//! closes it, or a heartbeat is missed, the listeners are probed, and a broker whose every
//! listener refuses connections is fenced at once. A paused or partitioned broker neither
//! closes the connection nor refuses one: it waits out its session.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_raft::calls::{CallFuture, CallHandler};
use sluice_raft::openraft;
use sluice_raft::records::{BrokerId, MetadataRecord, RegisterBroker, Uuid};
use sluice_raft::{ProposeError, Quorum};

use super::{ControllerError, Defaults, NewTopic};
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, ApiError, KafkaError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControllerRequest {
    RegisterBroker(RegisterBroker),
    Heartbeat {
        broker_id: BrokerId,
        broker_epoch: i64,
        caught_up: bool,
    },
    CreateTopic(NewTopic),
    DeleteTopic(String),
    /// CreatePartitions: grow a topic to `total` partitions.
    CreatePartitions {
        topic: String,
        total: i32,
        /// Replicas of each new partition, in order; empty: the controller places them.
        assignments: Vec<Vec<BrokerId>>,
    },
    /// AlterPartition from a partition leader (an ISR change).
    AlterPartition(super::AlterPartition),
    /// A node that is not a voter (`process.roles=broker`) asks to follow the metadata log.
    AddLearner {
        node_id: u64,
        addr: String,
    },
    /// `sluice cluster add-voter`: a learner becomes a voter (joint consensus, one at a time).
    AddVoter {
        node_id: u64,
    },
    /// `sluice cluster remove-voter`: a voter becomes a learner.
    RemoveVoter {
        node_id: u64,
    },
    /// `sluice cluster status`.
    DescribeQuorum,
    /// A broker stopping on SIGTERM: fence it now, moving its leaderships to other ISR
    /// members (and out of ISRs), before it goes.
    ControlledShutdown {
        broker_id: BrokerId,
        broker_epoch: i64,
    },
    /// AlterPartitionReassignments: per partition, a target replica list or `None` (cancel).
    Reassign(Vec<(String, i32, Option<Vec<BrokerId>>)>),
    /// ElectLeaders: `partitions` by topic name, `None` for every partition.
    ElectLeaders {
        election_type: i8,
        partitions: Option<Vec<TopicPartition>>,
    },
    /// A block of producer ids for a broker's InitProducerId answers.
    AllocateProducerIds {
        broker_id: BrokerId,
        broker_epoch: i64,
    },
    /// IncrementalAlterConfigs of one resource: set (`Some`) or delete (`None`) keys.
    AlterConfigs {
        resource: sluice_raft::records::ConfigResource,
        changes: Vec<(String, Option<String>)>,
    },
    /// A broker registers with the most partition replicas it can host
    /// (`max.broker.partitions`). `RegisterBroker` above is the same without a limit.
    RegisterBrokerWithCapacity {
        registration: RegisterBroker,
        partitions_max: u32,
    },
    /// A broker's logs of these partitions (topic id, partition) failed: it leaves their ISRs
    /// and leaderships (`replicas_offline`).
    ReplicasOffline {
        broker_id: BrokerId,
        broker_epoch: i64,
        partitions: Vec<(Uuid, i32)>,
    },
    /// AlterUserScramCredentials.
    AlterScramCredentials {
        deletions: Vec<super::ScramDeletion>,
        upsertions: Vec<super::ScramUpsertion>,
    },
    /// `sluice server --add-scram`: the credentials that do not exist yet are created, the
    /// others kept (`node::scram_bootstrap`).
    BootstrapScramCredentials(Vec<super::ScramUpsertion>),
    /// CreateAcls.
    CreateAcls(Vec<sluice_raft::records::AclRecord>),
    /// DeleteAcls.
    DeleteAcls(Vec<super::AclFilterRecord>),
    /// AlterClientQuotas; with `validate_only` decided but not committed.
    AlterClientQuotas {
        alterations: Vec<super::client_quotas::QuotaAlteration>,
        validate_only: bool,
    },
}

impl ControllerRequest {
    /// The operation on the cluster a caller needs for this call, as Kafka's controllers
    /// authorize them: voter changes ALTER, the quorum's status DESCRIBE, and what brokers
    /// send (for requests their listeners authorized) CLUSTER_ACTION.
    pub fn cluster_operation(&self) -> crate::security::acl::Operation {
        use crate::security::acl::Operation;
        match self {
            ControllerRequest::AddVoter { .. } | ControllerRequest::RemoveVoter { .. } => {
                Operation::Alter
            }
            ControllerRequest::DescribeQuorum => Operation::Describe,
            _ => Operation::ClusterAction,
        }
    }
}

/// What `sluice cluster status` shows: the quorum as its leader sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuorumDescription {
    pub leader: u64,
    pub term: u64,
    /// The leader's last applied (committed) index.
    pub commit_index: u64,
    pub members: Vec<MemberDescription>,
    pub brokers: Vec<BrokerDescription>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberDescription {
    pub node_id: u64,
    pub addr: String,
    pub voter: bool,
    /// The last log index known replicated to it (the leader's own for itself).
    pub matched_index: Option<u64>,
    /// Entries behind the leader's log.
    pub lag: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokerDescription {
    pub broker_id: BrokerId,
    pub broker_epoch: i64,
    pub fenced: bool,
    pub rack: Option<String>,
    pub endpoints: Vec<String>,
    /// Partition replicas it hosts.
    pub partitions: u32,
    /// The most it hosts (`max.broker.partitions`); `None` when it did not say.
    pub partitions_max: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControllerResponse {
    /// Done (committed). `broker_epoch` answers a registration.
    Ok {
        broker_epoch: Option<i64>,
        fenced: Option<bool>,
    },
    NotController {
        leader_addr: Option<String>,
    },
    Quorum(QuorumDescription),
    /// ElectLeaders results: (topic, partition, error code), committed. (Codes, not
    /// `KafkaError`: responses cross the network between brokers.)
    Elections(Vec<(String, i32, i16)>),
    /// A block of producer ids, committed to this broker.
    ProducerIds {
        first: i64,
        count: i32,
    },
    /// A Kafka error code and message.
    Error {
        code: i16,
        message: String,
    },
    /// AlterPartitionReassignments results: (topic, partition, error code, message), the moves
    /// committed. (A controller before this variant answers `Elections`, without messages.)
    Reassignments(Vec<(String, i32, i16, String)>),
    /// Per name (a user): error code and message, the successes committed.
    Named(Vec<super::NamedResult>),
    /// CreateAcls results, the new ACLs committed.
    AclsCreated(Vec<super::AclCreation>),
    /// DeleteAcls results, the removals committed.
    AclsDeleted(Vec<super::AclDeletion>),
    /// AlterClientQuotas results, one per entry, the changes committed (unless validate_only).
    ClientQuotasAltered(Vec<super::client_quotas::QuotaAlterationResult>),
}

/// A controller's errors on the wire between brokers: the one place they are encoded and decoded.
impl From<ApiError> for ControllerResponse {
    fn from(error: ApiError) -> ControllerResponse {
        ControllerResponse::Error {
            code: error.error.code(),
            message: error.message,
        }
    }
}

impl From<ControllerError> for ControllerResponse {
    fn from(error: ControllerError) -> ControllerResponse {
        ControllerResponse::from(ApiError::from(error))
    }
}

impl ControllerResponse {
    /// The error an `Error` answer carries. A controller never answers `Error` with NONE;
    /// should one, it is UNKNOWN_SERVER_ERROR rather than success.
    pub fn decode_error(code: i16, message: String) -> ApiError {
        ApiError::new(
            KafkaError::from_code(code).unwrap_or(KafkaError::UnknownServerError),
            message,
        )
    }

    /// The answer in words for a log line: a Kafka error by name and code with its message,
    /// otherwise what kind of answer it was (never a debug dump of the struct).
    pub fn summary(&self) -> String {
        match self {
            ControllerResponse::Ok { .. } => "ok".to_owned(),
            ControllerResponse::NotController {
                leader_addr: Some(addr),
            } => format!("not the controller (the controller is at {addr})"),
            ControllerResponse::NotController { leader_addr: None } => {
                "not the controller (no controller known)".to_owned()
            }
            ControllerResponse::Error { code, message } if message.is_empty() => {
                errors::describe(*code)
            }
            ControllerResponse::Error { code, message } => {
                format!("{}: {message}", errors::describe(*code))
            }
            ControllerResponse::Quorum(_) => "a quorum description".to_owned(),
            ControllerResponse::Elections(_) => "election results".to_owned(),
            ControllerResponse::ProducerIds { .. } => "a producer id block".to_owned(),
            ControllerResponse::Reassignments(_) => "reassignment results".to_owned(),
            ControllerResponse::Named(_) => "results by name".to_owned(),
            ControllerResponse::AclsCreated(_) => "ACL creation results".to_owned(),
            ControllerResponse::AclsDeleted(_) => "ACL deletion results".to_owned(),
            ControllerResponse::ClientQuotasAltered(_) => "client quota results".to_owned(),
        }
    }
}

/// Records to commit, and what the response reports: a broker epoch, the fenced state.
type Decision = (Vec<MetadataRecord>, Option<i64>, Option<bool>);

/// The registration of `broker_id` when `broker_epoch` is its current incarnation's; a
/// request from an earlier incarnation is refused.
fn current_incarnation(
    image: &sluice_raft::MetadataImage,
    broker_id: BrokerId,
    broker_epoch: i64,
) -> Result<&sluice_raft::image::BrokerRegistration, ControllerError> {
    image
        .brokers
        .get(&broker_id)
        .filter(|b| b.registration.broker_epoch == broker_epoch)
        .ok_or(ControllerError::StaleBrokerEpoch(broker_id))
}

/// Proposes a decision's records (none: nothing to do); the answer when they did not commit.
async fn commit(quorum: &Quorum, records: Vec<MetadataRecord>) -> Result<(), ControllerResponse> {
    if records.is_empty() {
        return Ok(());
    }
    quorum
        .propose(records)
        .await
        .map(|_| ())
        .map_err(|error| match error {
            ProposeError::NotLeader { leader_addr, .. } => {
                ControllerResponse::NotController { leader_addr }
            }
            other => ApiError::new(KafkaError::RequestTimedOut, other.to_string()).into(),
        })
}

/// `auto.leader.rebalance.enable`'s settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderRebalance {
    /// `leader.imbalance.check.interval.seconds`.
    pub interval: Duration,
    /// `leader.imbalance.per.broker.percentage`.
    pub imbalance_percentage_max: u32,
}

pub struct ControllerService {
    quorum: Weak<Quorum>,
    defaults: Defaults,
    session_timeout: Duration,
    sessions: Mutex<Sessions>,
    /// One decision at a time, from reading the image to the commit of its records (Kafka's
    /// controller is single-threaded for the same reason): two decisions made on the same
    /// image could each be valid and together wrong.
    deciding: tokio::sync::Mutex<()>,
    /// When and how silent brokers are probed (see [`ControllerService::probe_silent_brokers`]).
    probe: Mutex<Option<ProbePolicy>>,
    /// Brokers whose watched listener connection ended: probed on the session timer's next
    /// round, which `suspected` wakes.
    suspects: Mutex<HashSet<BrokerId>>,
    suspected: tokio::sync::Notify,
    /// Who may make which call (the node's quorum access); unset: everyone.
    caller_check: std::sync::OnceLock<CallerCheck>,
}

/// Whether a caller may do an operation on the cluster; why not, for the caller.
pub type CallerCheck = Arc<
    dyn Fn(&sluice_raft::transport::Peer, crate::security::acl::Operation) -> Result<(), String>
        + Send
        + Sync,
>;

#[derive(Default)]
struct Sessions {
    /// The quorum term these sessions belong to: a new leader (term) starts them afresh.
    term: u64,
    last_heard: HashMap<BrokerId, Instant>,
}

impl ControllerService {
    pub fn new(
        quorum: &Arc<Quorum>,
        defaults: Defaults,
        session_timeout: Duration,
    ) -> Arc<ControllerService> {
        Arc::new(ControllerService {
            quorum: Arc::downgrade(quorum),
            defaults,
            session_timeout,
            sessions: Mutex::new(Sessions::default()),
            deciding: tokio::sync::Mutex::new(()),
            probe: Mutex::new(None),
            suspects: Mutex::new(HashSet::new()),
            suspected: tokio::sync::Notify::new(),
            caller_check: std::sync::OnceLock::new(),
        })
    }

    /// Installs who may make which call (once; later calls are ignored).
    pub fn set_caller_check(&self, check: CallerCheck) {
        let _ = self.caller_check.set(check);
    }

    /// Turns on probing: a broker that missed its heartbeat (`policy.after`) has its
    /// listeners probed. When every one refuses the connection its process is gone; when none
    /// answers an ApiVersions request within `policy.answer_timeout` (a hung process, disk or
    /// network: no FIN, no RST), it is silent. Either is fenced without waiting for
    /// `broker.session.timeout.ms`; a broker that answers keeps its session.
    pub fn probe_silent_brokers(&self, policy: ProbePolicy) {
        *self.probe.lock().unwrap_or_else(|p| p.into_inner()) = Some(policy);
    }

    /// Keeps, while this node leads the quorum, an idle connection to one listener of each
    /// unfenced broker. A broker's listener sends nothing unasked, so the connection ends
    /// only when the broker's process does (the kernel closes its sockets at once, even
    /// after kill -9), when the broker closes it (`connections.max.idle.ms`, a shutdown), or
    /// when a network error breaks it. Each end makes the broker a suspect, probed at once;
    /// only a refused probe fences. Runs until the quorum is gone.
    pub async fn run_liveness_watch(self: Arc<Self>) {
        let mut watches: HashMap<BrokerId, (i64, tokio::task::JoinHandle<()>)> = HashMap::new();
        loop {
            let wanted: HashMap<BrokerId, (i64, String, u16)> = match self.quorum.upgrade() {
                None => break,
                Some(quorum) if !quorum.is_leader() => HashMap::new(),
                Some(quorum) => quorum
                    .image()
                    .unfenced_brokers()
                    .filter_map(|broker| {
                        let registration = &broker.registration;
                        let endpoint = registration.endpoints.first()?;
                        Some((
                            registration.broker_id,
                            (
                                registration.broker_epoch,
                                endpoint.host.clone(),
                                endpoint.port,
                            ),
                        ))
                    })
                    .collect(),
            };
            watches.retain(|broker, (epoch, task)| {
                let keep = wanted.get(broker).is_some_and(|(e, ..)| e == epoch);
                if !keep {
                    task.abort();
                }
                keep
            });
            for (broker, (epoch, host, port)) in wanted {
                watches.entry(broker).or_insert_with(|| {
                    let service = Arc::downgrade(&self);
                    (
                        epoch,
                        tokio::spawn(watch_listener(service, broker, host, port)),
                    )
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        for (_, task) in watches.into_values() {
            task.abort();
        }
    }

    fn suspect(&self, broker: BrokerId) {
        self.suspects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(broker);
        self.suspected.notify_one();
    }

    fn take_suspects(&self) -> HashSet<BrokerId> {
        std::mem::take(&mut *self.suspects.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Finishes reassignments whose target replicas all joined the ISR; runs until the
    /// quorum is gone.
    pub async fn run_reassignments(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let Some(quorum) = self.quorum.upgrade() else {
                return;
            };
            if !quorum.is_leader() || quorum.image().reassignments.is_empty() {
                continue;
            }
            let _deciding = self.deciding.lock().await;
            if quorum.raft().ensure_linearizable().await.is_err() {
                continue;
            }
            let records = super::complete_reassignments(&quorum.image());
            if records.is_empty() {
                continue;
            }
            tracing::info!(
                partitions = records.len() / 2,
                "reassignment complete: dropping the replicas that left"
            );
            if let Err(error) = quorum.propose(records).await {
                tracing::warn!(%error, "completing reassignments failed");
            }
        }
    }

    /// Runs leader rebalancing (`auto.leader.rebalance.enable`) until the quorum is gone:
    /// every `settings.interval` the active controller gives leaderships back to their
    /// preferred replicas, by Kafka's per-broker threshold (`super::preferred_leader_changes`).
    ///
    /// Leaderships come back only at these checks, as in Kafka: with the default interval
    /// (300 s) a broker restarted a minute ago may still lead nothing. The first check that
    /// finds a broker over the threshold says when the next one comes and why its leaderships
    /// wait, so an operator knows it will move (or runs `ElectLeaders` to move it now).
    ///
    /// A check decides every leadership to give back, then proposes them in rounds of at most
    /// `LEADER_REBALANCE_ELECTIONS_PER_ROUND_MAX`, one after another, as KRaft's controller
    /// does; between rounds other decisions (heartbeats, fencing) go ahead.
    pub async fn run_leader_rebalance(self: Arc<Self>, settings: LeaderRebalance) {
        // Brokers over the threshold at the last check, as judged then, so a lasting
        // imbalance (its preferred replica not back in the ISR yet) is said once, not at
        // every check; said again when the reason changes.
        let mut waiting: BTreeMap<BrokerId, super::LeaderImbalance> = BTreeMap::new();
        loop {
            tokio::time::sleep(settings.interval).await;
            let Some(quorum) = self.quorum.upgrade() else {
                return;
            };
            if !quorum.is_leader() {
                waiting.clear();
                continue;
            }
            let (imbalances, records) = {
                let _deciding = self.deciding.lock().await;
                if quorum.raft().ensure_linearizable().await.is_err() {
                    continue;
                }
                super::preferred_leader_changes(&quorum.image(), settings.imbalance_percentage_max)
            };
            for imbalance in &imbalances {
                let reasons = imbalance.waiting_reasons();
                let unchanged = waiting.get(&imbalance.broker).is_some_and(|before| {
                    (before.reassigning, before.not_alive, before.not_in_isr)
                        == (
                            imbalance.reassigning,
                            imbalance.not_alive,
                            imbalance.not_in_isr,
                        )
                });
                if imbalance.elected > 0 {
                    tracing::info!(
                        broker_id = imbalance.broker,
                        preferred_partitions = imbalance.preferred,
                        led_elsewhere = imbalance.led_elsewhere,
                        imbalance_percentage = imbalance.percentage(),
                        threshold_percentage = settings.imbalance_percentage_max,
                        elected = imbalance.elected,
                        waiting = (!reasons.is_empty()).then_some(reasons.as_str()),
                        "leader rebalance: giving the broker back the leaderships it is preferred for"
                    );
                } else if !unchanged {
                    tracing::info!(
                        broker_id = imbalance.broker,
                        preferred_partitions = imbalance.preferred,
                        led_elsewhere = imbalance.led_elsewhere,
                        imbalance_percentage = imbalance.percentage(),
                        threshold_percentage = settings.imbalance_percentage_max,
                        next_check_s = settings.interval.as_secs(),
                        "leader rebalance: none of the broker's leaderships can come back yet: \
                         {reasons}; checking again later"
                    );
                }
            }
            waiting = imbalances
                .into_iter()
                .map(|imbalance| (imbalance.broker, imbalance))
                .collect();
            let mut pending: Vec<(Uuid, i32)> = records
                .iter()
                .filter_map(|record| match record {
                    MetadataRecord::PartitionChange(change) => {
                        Some((change.topic_id, change.partition))
                    }
                    _ => None,
                })
                .collect();
            let mut rounds = 0usize;
            while !pending.is_empty() {
                rounds += 1;
                let _deciding = self.deciding.lock().await;
                if !quorum.is_leader() || quorum.raft().ensure_linearizable().await.is_err() {
                    break;
                }
                let round = super::preferred_elections(&quorum.image(), &mut pending);
                if round.is_empty() {
                    continue;
                }
                let elections = round.len();
                if let Err(error) = quorum.propose(round).await {
                    tracing::warn!(%error, "leader rebalance failed; retrying at the next check");
                    break;
                }
                if rounds > 1 || !pending.is_empty() {
                    tracing::info!(
                        round = rounds,
                        elections,
                        remaining = pending.len(),
                        "leader rebalance: round committed"
                    );
                }
            }
        }
    }

    fn sessions(&self, term: u64) -> std::sync::MutexGuard<'_, Sessions> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.term != term {
            sessions.term = term;
            sessions.last_heard.clear();
        }
        sessions
    }

    async fn handle_request(&self, request: ControllerRequest) -> ControllerResponse {
        let Some(quorum) = self.quorum.upgrade() else {
            return ControllerResponse::NotController { leader_addr: None };
        };
        let metrics = quorum.metrics();
        if metrics.current_leader != Some(quorum.node_id()) {
            let leader_addr = metrics.current_leader.and_then(|l| quorum.node_addr(l));
            return ControllerResponse::NotController { leader_addr };
        }
        let _deciding = self.deciding.lock().await;
        // A new leader's image may miss what the previous one committed: decide only on an
        // image that has applied everything committed so far.
        if quorum.raft().ensure_linearizable().await.is_err() {
            let leader_addr = quorum
                .metrics()
                .current_leader
                .and_then(|l| quorum.node_addr(l));
            return ControllerResponse::NotController { leader_addr };
        }
        let image = quorum.image();
        let membership_change = match &request {
            ControllerRequest::AddVoter { node_id } => Some((*node_id, true)),
            ControllerRequest::RemoveVoter { node_id } => Some((*node_id, false)),
            ControllerRequest::DescribeQuorum => {
                return ControllerResponse::Quorum(describe(&quorum, &metrics, &image));
            }
            _ => None,
        };
        if let Some((node_id, adding)) = membership_change {
            return change_voters(&quorum, &metrics, node_id, adding).await;
        }
        if let ControllerRequest::Reassign(moves) = &request {
            let mut results = Vec::with_capacity(moves.len());
            let mut records = Vec::new();
            let mut adding = BTreeMap::new();
            for (topic, partition, target) in moves {
                match super::reassign(&image, topic, *partition, target.clone(), &mut adding) {
                    Ok(mut decided) => {
                        records.append(&mut decided);
                        results.push((topic.clone(), *partition, errors::NONE, String::new()));
                    }
                    Err(refused) => results.push((
                        topic.clone(),
                        *partition,
                        refused.error.code(),
                        refused.message,
                    )),
                }
            }
            if let Err(refused) = commit(&quorum, records).await {
                return refused;
            }
            return ControllerResponse::Reassignments(results);
        }
        match &request {
            ControllerRequest::AlterScramCredentials {
                deletions,
                upsertions,
            } => {
                let (results, records) =
                    super::alter_scram_credentials(&image, deletions, upsertions);
                return match commit(&quorum, records).await {
                    Ok(()) => ControllerResponse::Named(results),
                    Err(refused) => refused,
                };
            }
            ControllerRequest::BootstrapScramCredentials(upsertions) => {
                let exists = |upsertion: &super::ScramUpsertion| {
                    sluice_raft::records::ScramMechanism::from_code(upsertion.mechanism)
                        .is_some_and(|mechanism| {
                            image
                                .scram_credentials
                                .get(&upsertion.user)
                                .is_some_and(|credentials| credentials.contains_key(&mechanism))
                        })
                };
                let (kept, absent): (Vec<_>, Vec<_>) =
                    upsertions.iter().cloned().partition(|u| exists(u));
                let (mut results, records) = super::alter_scram_credentials(&image, &[], &absent);
                for result in &mut results {
                    if result.1 == crate::protocol::errors::NONE {
                        result.2 = "created".to_owned();
                    }
                }
                results.extend(kept.into_iter().map(|upsertion| {
                    (
                        upsertion.user,
                        crate::protocol::errors::NONE,
                        "exists: kept as it is".to_owned(),
                    )
                }));
                return match commit(&quorum, records).await {
                    Ok(()) => ControllerResponse::Named(results),
                    Err(refused) => refused,
                };
            }
            ControllerRequest::CreateAcls(acls) => {
                let (results, records) =
                    super::create_acls(&image, acls, || Uuid(crate::protocol::random_u128()));
                return match commit(&quorum, records).await {
                    Ok(()) => ControllerResponse::AclsCreated(results),
                    Err(refused) => refused,
                };
            }
            ControllerRequest::DeleteAcls(filters) => {
                let (results, records) = super::delete_acls(&image, filters);
                return match commit(&quorum, records).await {
                    Ok(()) => ControllerResponse::AclsDeleted(results),
                    Err(refused) => refused,
                };
            }
            ControllerRequest::AlterClientQuotas {
                alterations,
                validate_only,
            } => {
                let (results, records) =
                    super::client_quotas::alter_client_quotas(&image, alterations);
                if *validate_only {
                    return ControllerResponse::ClientQuotasAltered(results);
                }
                return match commit(&quorum, records).await {
                    Ok(()) => ControllerResponse::ClientQuotasAltered(results),
                    Err(refused) => refused,
                };
            }
            _ => {}
        }
        if let ControllerRequest::ElectLeaders {
            election_type,
            partitions,
        } = &request
        {
            let (results, records) =
                super::elect_leaders(&image, *election_type, partitions.as_deref());
            if let Err(refused) = commit(&quorum, records).await {
                return refused;
            }
            return ControllerResponse::Elections(
                results
                    .into_iter()
                    .map(|(topic, partition, outcome)| {
                        (topic, partition, errors::code_of(&outcome))
                    })
                    .collect(),
            );
        }
        if let ControllerRequest::AllocateProducerIds {
            broker_id,
            broker_epoch,
        } = request
        {
            let (records, first) =
                match super::allocate_producer_ids(&image, broker_id, broker_epoch) {
                    Ok(decided) => decided,
                    Err(error) => return error.into(),
                };
            return match commit(&quorum, records).await {
                Ok(()) => ControllerResponse::ProducerIds {
                    first,
                    count: super::PRODUCER_ID_BLOCK_SIZE,
                },
                Err(refused) => refused,
            };
        }
        let partitions_max = match &request {
            ControllerRequest::RegisterBrokerWithCapacity { partitions_max, .. } => {
                Some(*partitions_max)
            }
            _ => None,
        };
        let decided: Result<Decision, ControllerError> = match request {
            ControllerRequest::RegisterBroker(mut registration)
            | ControllerRequest::RegisterBrokerWithCapacity {
                mut registration, ..
            } => {
                // The epoch only grows: past any this broker had, and past the log's end.
                registration.broker_epoch = metrics.last_log_index.unwrap_or(0) as i64 + 1;
                let records = super::register_broker(
                    &image,
                    registration.clone(),
                    partitions_max,
                    &self.defaults,
                );
                let epoch = records
                    .iter()
                    .find_map(|record| match record {
                        MetadataRecord::RegisterBroker(r) => Some(r.broker_epoch),
                        _ => None,
                    })
                    .unwrap_or(registration.broker_epoch);
                // An earlier incarnation ended in the same commit (see `register_broker`).
                if records.iter().any(|r| {
                    matches!(
                        r,
                        MetadataRecord::FenceBroker { .. } | MetadataRecord::PartitionChange(_)
                    )
                }) {
                    tracing::info!(
                        broker_id = registration.broker_id,
                        "a restarted broker registered: its earlier incarnation's leaderships move and it leaves the ISRs"
                    );
                }
                self.sessions(metrics.current_term)
                    .last_heard
                    .insert(registration.broker_id, Instant::now());
                Ok((records, Some(epoch), Some(true)))
            }
            ControllerRequest::Heartbeat {
                broker_id,
                broker_epoch,
                caught_up,
            } => current_incarnation(&image, broker_id, broker_epoch).and_then(|broker| {
                self.sessions(metrics.current_term)
                    .last_heard
                    .insert(broker_id, Instant::now());
                if broker.fenced && caught_up {
                    super::unfence_broker(&image, broker_id, broker_epoch)
                        .map(|r| (r, None, Some(false)))
                } else {
                    Ok((Vec::new(), None, Some(broker.fenced)))
                }
            }),
            ControllerRequest::CreateTopic(topic) => super::create_topic(
                &image,
                &topic,
                Uuid(crate::protocol::random_u128()),
                &self.defaults,
            )
            .map(|r| (r, None, None)),
            ControllerRequest::DeleteTopic(name) => {
                super::delete_topic(&image, &name).map(|r| (r, None, None))
            }
            ControllerRequest::CreatePartitions {
                topic,
                total,
                assignments,
            } => super::create_partitions(&image, &topic, total, &assignments)
                .map(|r| (r, None, None)),
            ControllerRequest::AlterPartition(change) => {
                super::alter_partition(&image, &change).map(|r| (r, None, None))
            }
            ControllerRequest::ControlledShutdown {
                broker_id,
                broker_epoch,
            } => current_incarnation(&image, broker_id, broker_epoch).and_then(|_| {
                self.sessions(metrics.current_term)
                    .last_heard
                    .remove(&broker_id);
                tracing::info!(
                    broker_id,
                    "controlled shutdown: moving the broker's leaderships"
                );
                super::fence_broker(&image, broker_id, &self.defaults)
                    .map(|r| (r, None, Some(true)))
            }),
            ControllerRequest::ReplicasOffline {
                broker_id,
                broker_epoch,
                partitions,
            } => current_incarnation(&image, broker_id, broker_epoch).map(|_| {
                let records =
                    super::replicas_offline(&image, broker_id, &partitions, &self.defaults);
                // A broker repeats its report while a failed replica leads: said once, when
                // something moves.
                if records.is_empty() {
                    tracing::debug!(
                        broker_id,
                        partitions = partitions.len(),
                        "replicas offline after storage errors: nothing can move yet"
                    );
                } else {
                    tracing::info!(
                        broker_id,
                        partitions = partitions.len(),
                        changes = records.len(),
                        "replicas offline after storage errors: moving their leaderships and out of the ISRs"
                    );
                }
                (records, None, None)
            }),
            ControllerRequest::AlterConfigs { resource, changes } => {
                super::alter_configs(&image, &resource, &changes).map(|r| (r, None, None))
            }
            ControllerRequest::AddVoter { .. }
            | ControllerRequest::RemoveVoter { .. }
            | ControllerRequest::AllocateProducerIds { .. }
            | ControllerRequest::ElectLeaders { .. }
            | ControllerRequest::Reassign(_)
            | ControllerRequest::AlterScramCredentials { .. }
            | ControllerRequest::BootstrapScramCredentials(_)
            | ControllerRequest::CreateAcls(_)
            | ControllerRequest::DeleteAcls(_)
            | ControllerRequest::AlterClientQuotas { .. }
            | ControllerRequest::DescribeQuorum => unreachable!("answered above"),
            ControllerRequest::AddLearner { node_id, addr } => {
                let known = metrics
                    .membership_config
                    .membership()
                    .get_node(&node_id)
                    .is_some();
                if !known {
                    let node = sluice_raft::NodeInfo { addr };
                    if let Err(error) = quorum.raft().add_learner(node_id, node, false).await {
                        return ApiError::new(KafkaError::RequestTimedOut, error.to_string())
                            .into();
                    }
                    tracing::info!(node_id, "added a learner to the metadata quorum");
                }
                Ok((Vec::new(), None, None))
            }
        };
        let (records, broker_epoch, fenced) = match decided {
            Ok(decided) => decided,
            Err(error) => return error.into(),
        };
        if let Err(refused) = commit(&quorum, records).await {
            return refused;
        }
        ControllerResponse::Ok {
            broker_epoch,
            fenced,
        }
    }

    /// On the leader: fences brokers whose session expired. Runs until the quorum is gone.
    ///
    /// Sessions are judged only while this controller can confirm its leadership with a
    /// quorum. A controller cut off from its quorum (a partition, or a stop) reads no
    /// heartbeats and commits nothing; judging sessions after it is back would fence every
    /// broker, itself included, as if they had died (a five-node jepsen run did: the leader
    /// went offline and came back at a new epoch on the same broker). After such a gap, as
    /// after a stall of the timer itself, every session starts afresh.
    pub async fn run_session_timer(self: Arc<Self>) {
        let tick = (self.session_timeout / 4)
            .clamp(Duration::from_millis(100), Duration::from_millis(250));
        let probe = *self.probe.lock().unwrap_or_else(|p| p.into_inner());
        // When this leader last confirmed its leadership with a quorum.
        let mut confirmed_at = Instant::now();
        let mut unconfirmed_warned = false;
        // A follower looks often for its election: a new controller probes the brokers it
        // has not heard from (the old quorum leader may have hung with its broker) at once.
        let mut wait = tick;
        loop {
            let slept_from = Instant::now();
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.suspected.notified() => {}
            }
            let stalled = slept_from.elapsed().saturating_sub(wait);
            let Some(quorum) = self.quorum.upgrade() else {
                return;
            };
            let metrics = quorum.metrics();
            if metrics.current_leader != Some(quorum.node_id()) {
                confirmed_at = Instant::now();
                wait = FOLLOWER_TICK.min(tick);
                continue;
            }
            wait = tick;
            let confirmed =
                tokio::time::timeout(self.session_timeout, quorum.raft().ensure_linearizable())
                    .await
                    .is_ok_and(|r| r.is_ok());
            if !confirmed {
                if !unconfirmed_warned {
                    unconfirmed_warned = true;
                    tracing::warn!(
                        "the controller cannot confirm its leadership with a quorum: broker sessions are not judged until it can"
                    );
                }
                continue;
            }
            unconfirmed_warned = false;
            // Normally a tick and one heartbeat round since the last confirmation.
            let unconfirmed = confirmed_at.elapsed().saturating_sub(tick);
            confirmed_at = Instant::now();
            let image = quorum.image();
            let suspects = self.take_suspects();
            let (mut expired, overdue): (Vec<BrokerId>, Vec<BrokerId>) = {
                let mut sessions = self.sessions(metrics.current_term);
                let now = Instant::now();
                if stalled > self.session_timeout / 2 || unconfirmed > self.session_timeout / 2 {
                    // This controller was stopped or starved (SIGSTOP, a VM pause), or cut off
                    // from its quorum: the heartbeats brokers sent meanwhile are unread or
                    // were refused. Judging sessions now would fence every broker, itself
                    // included; they get a full session from now instead.
                    tracing::warn!(
                        stalled_ms = stalled.as_millis() as u64,
                        without_quorum_ms = unconfirmed.as_millis() as u64,
                        "the controller was stalled or without a quorum: broker sessions restart"
                    );
                    for heard in sessions.last_heard.values_mut() {
                        *heard = now;
                    }
                }
                let mut expired = Vec::new();
                let mut overdue = Vec::new();
                for id in image.unfenced_brokers().map(|b| b.registration.broker_id) {
                    // A broker first seen by this leader gets a full session from now; it
                    // is probed at once (a quorum leader that died may have taken a broker
                    // with it, and this controller has not heard from anyone yet).
                    let first_seen = !sessions.last_heard.contains_key(&id);
                    let silent = now.duration_since(*sessions.last_heard.entry(id).or_insert(now));
                    if silent > self.session_timeout {
                        expired.push(id);
                    } else if probe.is_some_and(|probe| {
                        first_seen || silent > probe.after || suspects.contains(&id)
                    }) {
                        overdue.push(id);
                    }
                }
                (expired, overdue)
            };
            // Probed together: a silent broker takes the whole answer timeout.
            let answer_timeout = probe.and_then(|probe| probe.answer_timeout);
            let probed_at = Instant::now();
            let mut probes = tokio::task::JoinSet::new();
            for broker in overdue {
                let image = Arc::clone(&image);
                probes.spawn(async move {
                    (
                        broker,
                        probe_listeners(&image, broker, answer_timeout).await,
                    )
                });
            }
            let mut probed: HashMap<BrokerId, Liveness> = probes
                .join_all()
                .await
                .into_iter()
                .filter(|(_, liveness)| *liveness != Liveness::Answered)
                .collect();
            if !probed.is_empty() {
                // A heartbeat that came while the probe waited (late, as on a lossy network)
                // answers for the broker as well.
                let sessions = self.sessions(metrics.current_term);
                probed.retain(|broker, _| {
                    sessions
                        .last_heard
                        .get(broker)
                        .is_none_or(|heard| *heard < probed_at)
                });
            }
            expired.extend(probed.keys().copied());
            for broker in expired {
                // Each fencing is decided on the image that includes the previous one.
                let _deciding = self.deciding.lock().await;
                if quorum.raft().ensure_linearizable().await.is_err() {
                    break;
                }
                confirmed_at = Instant::now();
                let image = quorum.image();
                if image.brokers.get(&broker).is_none_or(|b| b.fenced) {
                    continue;
                }
                match probed.get(&broker) {
                    Some(Liveness::Gone) => tracing::warn!(
                        broker,
                        "broker missed its heartbeat and its listeners refuse connections (its process is gone): fencing it"
                    ),
                    Some(_) => tracing::warn!(
                        broker,
                        answer_timeout_ms =
                            answer_timeout.map_or(0, |timeout| timeout.as_millis() as u64),
                        "broker missed its heartbeat and answers on none of its listeners (a hung process, disk or network): fencing it"
                    ),
                    None => tracing::warn!(
                        broker,
                        timeout_ms = self.session_timeout.as_millis() as u64,
                        "broker session expired: fencing it"
                    ),
                }
                match super::fence_broker(&image, broker, &self.defaults) {
                    Ok(records) => {
                        if let Err(error) = quorum.propose(records).await {
                            tracing::warn!(broker, %error, "fencing did not commit");
                        }
                    }
                    Err(error) => tracing::warn!(broker, %error, "cannot fence"),
                }
            }
        }
    }
}

/// One broker's watched connection (see [`ControllerService::run_liveness_watch`]): each
/// time it ends, or cannot be made, the broker becomes a suspect. Reconnects after a pause
/// so a live broker is watched again; aborted when the broker is fenced or this node no
/// longer leads.
async fn watch_listener(
    service: Weak<ControllerService>,
    broker: BrokerId,
    host: String,
    port: u16,
) {
    use tokio::io::AsyncReadExt;
    // Connections the broker closed at once, in a row (see `watch_pause`).
    let mut closed_at_once = 0u32;
    loop {
        let connect = tokio::net::TcpStream::connect((host.as_str(), port));
        let connected = match tokio::time::timeout(Duration::from_secs(1), connect).await {
            Ok(Ok(mut stream)) => {
                let opened = tokio::time::Instant::now();
                let mut discard = [0u8; 64];
                // Nothing is ever sent, so nothing is answered: any read ends the watch.
                while let Ok(read @ 1..) = stream.read(&mut discard).await {
                    tracing::debug!(broker, read, "unexpected bytes on a liveness watch");
                }
                closed_at_once = if opened.elapsed() < WATCH_HELD_MIN {
                    closed_at_once.saturating_add(1)
                } else {
                    0
                };
                true
            }
            _ => false,
        };
        let Some(service) = service.upgrade() else {
            return;
        };
        tracing::debug!(
            broker,
            "liveness watch ended: probing the broker's listeners"
        );
        service.suspect(broker);
        drop(service);
        tokio::time::sleep(watch_pause(connected, closed_at_once)).await;
    }
}

/// A watch connection closed sooner than this was closed at once: not held (the broker's
/// process dying, or its `max.connections` or `max.connections.per.ip` reached).
const WATCH_HELD_MIN: Duration = Duration::from_secs(1);

/// How long a liveness watch waits before it connects again. A dying process may close its
/// connections a moment before its listening socket, so the first probe can still connect:
/// the watch tries again soon, and a refused reconnect makes the broker a suspect again. A
/// broker that accepts the watch and closes it at once, again and again, is alive but full
/// (its connection limits; a dead one refuses instead): the watch backs off, doubling up to
/// 5 s, instead of taking a refused slot, a probe and a WARN on the broker ten times a second.
fn watch_pause(connected: bool, closed_at_once: u32) -> Duration {
    if !connected {
        return Duration::from_millis(500);
    }
    let doublings = closed_at_once.saturating_sub(1).min(6);
    Duration::from_millis(100 << doublings).min(Duration::from_secs(5))
}

/// How often a controller that does not lead looks whether it does now.
const FOLLOWER_TICK: Duration = Duration::from_millis(50);

/// How the active controller probes a broker that missed its heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbePolicy {
    /// Silence after which a broker is probed: one missed `broker.heartbeat.interval.ms`.
    pub after: Duration,
    /// How long a listener has to answer an ApiVersions request
    /// (`broker.liveness.probe.timeout.ms`); `None`: only a refused connection counts.
    pub answer_timeout: Option<Duration>,
}

/// What probing a broker's listeners found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    /// A listener reacted (an answer, a close, a reset): its process runs.
    Answered,
    /// Every listener refused the connection: nothing listens, the process is gone.
    Gone,
    /// No listener reacted in time (a stopped process, a hung disk, a cut network), or
    /// answers are not waited for and some listener did not refuse.
    Silent,
}

/// The client id of a probe's ApiVersions request; a TLS listener closes such a plaintext
/// request quietly instead of counting a failed handshake.
pub(crate) const PROBE_CLIENT_ID: &str = "sluice-liveness-probe";

/// Probes every listener `broker` registered at once (see [`Liveness`]). With no
/// `answer_timeout` only connections are tried (a paused or unreachable broker's connect
/// succeeds, the kernel accepting it, or times out; neither fences).
async fn probe_listeners(
    image: &sluice_raft::MetadataImage,
    broker: BrokerId,
    answer_timeout: Option<Duration>,
) -> Liveness {
    let Some(registration) = image.brokers.get(&broker) else {
        return Liveness::Answered;
    };
    let endpoints = &registration.registration.endpoints;
    if endpoints.is_empty() {
        return Liveness::Answered;
    }
    let mut probes = tokio::task::JoinSet::new();
    for endpoint in endpoints {
        let (host, port) = (endpoint.host.clone(), endpoint.port);
        probes.spawn(async move {
            let addr = (host.as_str(), port);
            match answer_timeout {
                None if refuses_connection(addr, Duration::from_millis(300)).await => {
                    Liveness::Gone
                }
                None => Liveness::Answered,
                Some(timeout) => probe_listener(addr, timeout).await,
            }
        });
    }
    let found = probes.join_all().await;
    liveness_of(&found)
}

/// What a broker's listeners found together: alive when any answered, gone when every one
/// refused, silent otherwise.
fn liveness_of(found: &[Liveness]) -> Liveness {
    if found.contains(&Liveness::Answered) {
        Liveness::Answered
    } else if !found.is_empty() && found.iter().all(|liveness| *liveness == Liveness::Gone) {
        Liveness::Gone
    } else {
        Liveness::Silent
    }
}

/// Probes a listener on [`PROBE_ATTEMPTS`] connections, each started a quarter of `timeout`
/// after the one before and all ending at `timeout`: a lost SYN or request (a lossy network)
/// would cost one attempt its whole time, as TCP retransmits only after a second.
async fn probe_listener(addr: (&str, u16), timeout: Duration) -> Liveness {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut attempts = tokio::task::JoinSet::new();
    for attempt in 0..PROBE_ATTEMPTS {
        let (host, port) = (addr.0.to_owned(), addr.1);
        let start = tokio::time::Instant::now() + timeout / 4 * attempt;
        attempts.spawn(async move {
            tokio::time::sleep_until(start).await;
            probe_once((host.as_str(), port), deadline).await
        });
    }
    // The first answer or refusal decides (a refusal: nothing listens, the process is gone).
    while let Some(result) = attempts.join_next().await {
        match result {
            Ok(Liveness::Silent) | Err(_) => {}
            Ok(decided) => return decided,
        }
    }
    Liveness::Silent
}

/// Connections a listener probe makes (see [`probe_listener`]).
const PROBE_ATTEMPTS: u32 = 3;

/// Sends one ApiVersions v0 request to a listener and waits until `deadline` for any
/// reaction: bytes, a close or a reset all come from a running process (a TLS or SASL
/// listener closes the plaintext request, which says as much). A stopped process's kernel
/// accepts the connection and buffers the request, but nothing answers.
async fn probe_once(addr: (&str, u16), deadline: tokio::time::Instant) -> Liveness {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream =
        match tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Liveness::Gone;
            }
            // Unreachable, or no SYN-ACK in time: a cut network.
            Ok(Err(_)) | Err(_) => return Liveness::Silent,
        };
    let request = api_versions_probe();
    let mut reaction = [0u8; 64];
    let reacted = tokio::time::timeout_at(deadline, async {
        if stream.write_all(&request).await.is_err() {
            return;
        }
        let _ = stream.read(&mut reaction).await;
    })
    .await;
    match reacted {
        Ok(()) => Liveness::Answered,
        Err(_) => Liveness::Silent,
    }
}

/// An ApiVersions v0 request frame (key 18; v0 has no body), client id [`PROBE_CLIENT_ID`].
fn api_versions_probe() -> Vec<u8> {
    let client_id = PROBE_CLIENT_ID.as_bytes();
    let mut body = Vec::with_capacity(10 + client_id.len());
    body.extend_from_slice(&18i16.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    body.extend_from_slice(client_id);
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Whether a TCP connect to `addr` is refused within `timeout`: nothing listens there, so
/// the process is gone (the kernel refuses at once, even after kill -9). A connect that
/// succeeds or times out (a paused or cut-off process) does not count.
pub(crate) async fn refuses_connection(
    addr: impl tokio::net::ToSocketAddrs,
    timeout: Duration,
) -> bool {
    matches!(
        tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await,
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

impl CallHandler for ControllerService {
    fn handle(&self, peer: sluice_raft::transport::Peer, payload: Vec<u8>) -> CallFuture<'_> {
        Box::pin(async move {
            let response = match bincode::deserialize::<ControllerRequest>(&payload) {
                Ok(request) => {
                    let allowed = match self.caller_check.get() {
                        Some(check) => check(&peer, request.cluster_operation()),
                        None => Ok(()),
                    };
                    match allowed {
                        Ok(()) => self.handle_request(request).await,
                        Err(message) => {
                            ApiError::new(KafkaError::ClusterAuthorizationFailed, message).into()
                        }
                    }
                }
                Err(error) => ApiError::new(
                    KafkaError::InvalidRequest,
                    format!("undecodable controller request: {error}"),
                )
                .into(),
            };
            bincode::serialize(&response).unwrap_or_default()
        })
    }
}

/// Adds (a learner) or removes a voter; openraft changes membership by joint consensus, so the
/// quorum is kept throughout. A removed voter stays a learner: its node still follows the log.
async fn change_voters(
    quorum: &Quorum,
    metrics: &openraft::RaftMetrics<u64, sluice_raft::NodeInfo>,
    node_id: u64,
    adding: bool,
) -> ControllerResponse {
    let ok = ControllerResponse::Ok {
        broker_epoch: None,
        fenced: None,
    };
    let voters: std::collections::BTreeSet<u64> =
        metrics.membership_config.membership().voter_ids().collect();
    let change = match (adding, voters.contains(&node_id)) {
        (true, true) | (false, false) => return ok,
        (true, false) => openraft::ChangeMembers::AddVoterIds([node_id].into()),
        (false, true) if voters.len() == 1 => {
            return ApiError::new(KafkaError::InvalidRequest, "cannot remove the last voter")
                .into();
        }
        (false, true) => openraft::ChangeMembers::RemoveVoters([node_id].into()),
    };
    match quorum.raft().change_membership(change, true).await {
        Ok(_) => {
            tracing::info!(node_id, adding, "changed the quorum's voters");
            ok
        }
        // With openraft's reason (e.g. the node is not a learner yet).
        Err(error) => ApiError::new(KafkaError::InvalidRequest, error.to_string()).into(),
    }
}

fn describe(
    quorum: &Quorum,
    metrics: &openraft::RaftMetrics<u64, sluice_raft::NodeInfo>,
    image: &sluice_raft::MetadataImage,
) -> QuorumDescription {
    let membership = metrics.membership_config.membership();
    let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
    let last_index = metrics.last_log_index.unwrap_or(0);
    let members = membership
        .nodes()
        .map(|(id, node)| {
            let matched = if *id == quorum.node_id() {
                Some(last_index)
            } else {
                metrics
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(id).cloned().flatten())
                    .map(|log_id| log_id.index)
            };
            MemberDescription {
                node_id: *id,
                addr: node.addr.clone(),
                voter: voters.contains(id),
                matched_index: matched,
                lag: matched.map(|m| last_index.saturating_sub(m)),
            }
        })
        .collect();
    let brokers = image
        .brokers
        .values()
        .map(|b| BrokerDescription {
            broker_id: b.registration.broker_id,
            broker_epoch: b.registration.broker_epoch,
            fenced: b.fenced,
            rack: b.registration.rack.clone(),
            endpoints: b
                .registration
                .endpoints
                .iter()
                .map(|e| format!("{}://{}:{}", e.name, e.host, e.port))
                .collect(),
            partitions: image.replica_count(b.registration.broker_id),
            partitions_max: image.partitions_max(b.registration.broker_id),
        })
        .collect();
    QuorumDescription {
        leader: quorum.node_id(),
        term: metrics.current_term,
        commit_index: metrics.last_applied.map_or(0, |l| l.index),
        members,
        brokers,
    }
}

/// One call from a command-line tool: sends `request` to `addr` (a node's internal listener)
/// and follows `NotController` to the leader.
pub async fn call_at(
    addr: &str,
    request: &ControllerRequest,
    timeout: Duration,
) -> Result<ControllerResponse, String> {
    let payload = bincode::serialize(request).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    let mut target = addr.to_owned();
    loop {
        let reply = match sluice_raft::calls::call(&target, payload.clone(), Duration::from_secs(5))
            .await
        {
            Ok(reply) => reply,
            // The leader `addr` named is down: ask `addr` again until the quorum elects
            // another (or the time is up).
            Err(error) if target != addr && error.is_unreachable() => {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "the quorum leader {target} (named by {addr}) is not reachable and no \
                         other leader was elected within {timeout:?}; is a majority of the \
                         voters running?"
                    ));
                }
                tracing::debug!(leader = target, %error, "quorum leader unreachable; asking again");
                target = addr.to_owned();
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(error) => return Err(error.to_string()),
        };
        match bincode::deserialize::<ControllerResponse>(&reply).map_err(|e| e.to_string())? {
            ControllerResponse::NotController {
                leader_addr: Some(leader),
            } if Instant::now() < deadline => {
                target = leader;
            }
            ControllerResponse::NotController { .. } if Instant::now() < deadline => {
                target = addr.to_owned();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            ControllerResponse::NotController { .. } => {
                return Err(format!(
                    "the quorum has no leader yet (asked {addr} for {timeout:?}); is a \
                     majority of the voters running?"
                ));
            }
            response => return Ok(response),
        }
    }
}

/// The least time worth a controller call: less and the try could only time out.
const CALL_TRY_MIN: Duration = Duration::from_millis(20);

/// Sends `request` to the active controller, following `NotController` to the leader, until
/// it is answered or `timeout` passes.
/// `voters` (internal addresses from `controller.quorum.voters`) are tried in turn while this
/// node knows no leader: a learner that has not joined yet learns it from them.
pub async fn call_controller(
    quorum: &Quorum,
    voters: &[String],
    request: &ControllerRequest,
    timeout: Duration,
) -> Result<ControllerResponse, String> {
    let deadline = Instant::now() + timeout;
    let payload = bincode::serialize(request).map_err(|e| e.to_string())?;
    let mut target: Option<String> = None;
    let mut last_error = String::from("no controller known yet");
    let mut next_voter = 0usize;
    let mut tried = false;
    while Instant::now() < deadline {
        let known_leader = || {
            quorum
                .metrics()
                .current_leader
                .and_then(|l| quorum.node_addr(l))
        };
        let addr = match target.take().or_else(known_leader) {
            Some(addr) => addr,
            None if !voters.is_empty() => {
                next_voter += 1;
                voters[next_voter % voters.len()].clone()
            }
            None => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Each try within what is left of the caller's bound: a try begun just before the
        // deadline must not run a full call timeout past it. Too little left for a call to
        // answer after a first try: stop, keeping the cause seen so far rather than a bare
        // "timed out".
        let left = deadline.saturating_duration_since(Instant::now());
        if left < CALL_TRY_MIN && tried {
            break;
        }
        tried = true;
        let call_timeout = left.min(Duration::from_secs(5));
        match sluice_raft::calls::call(&addr, payload.clone(), call_timeout).await {
            Ok(reply) => match bincode::deserialize::<ControllerResponse>(&reply) {
                Ok(ControllerResponse::NotController { leader_addr }) => {
                    last_error = format!("{addr} is not the controller");
                    target = leader_addr;
                }
                Ok(response) => return Ok(response),
                Err(error) => return Err(format!("undecodable reply from {addr}: {error}")),
            },
            Err(error) => last_error = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(last_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener whose process is stopped: the kernel completes connections into the
    /// backlog and buffers what is sent, but nothing is read or answered.
    #[tokio::test]
    async fn a_listener_that_accepts_but_never_answers_is_silent() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let started = Instant::now();
        let found = probe_listener(("127.0.0.1", port), Duration::from_millis(300)).await;
        assert_eq!(found, Liveness::Silent);
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    /// A running listener reacts: an answer, or a close (a TLS listener closes a plaintext
    /// request) is enough.
    #[tokio::test]
    async fn a_listener_that_reads_and_closes_answers() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let serve = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut request = vec![0u8; api_versions_probe().len()];
            stream.read_exact(&mut request).await.expect("read");
            request
        });
        let found = probe_listener(("127.0.0.1", port), Duration::from_secs(5)).await;
        assert_eq!(found, Liveness::Answered);
        let request = serve.await.expect("served");
        // A Kafka frame: ApiVersions (18) v0, naming the probe.
        assert_eq!(&request[4..6], &18i16.to_be_bytes());
        assert!(
            request
                .windows(PROBE_CLIENT_ID.len())
                .any(|w| w == PROBE_CLIENT_ID.as_bytes())
        );
    }

    /// A watch reconnects soon after its first end (a dying process) and backs off while the
    /// broker keeps closing it at once (full), never past 5 s.
    #[test]
    fn a_watch_closed_at_once_again_and_again_backs_off() {
        assert_eq!(watch_pause(true, 0), Duration::from_millis(100));
        assert_eq!(watch_pause(true, 1), Duration::from_millis(100));
        let pauses: Vec<u64> = (2..=12)
            .map(|n| watch_pause(true, n).as_millis() as u64)
            .collect();
        assert_eq!(
            pauses,
            [
                200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000, 5000, 5000
            ]
        );
        assert_eq!(watch_pause(true, u32::MAX), Duration::from_secs(5));
        assert_eq!(watch_pause(false, 7), Duration::from_millis(500));
    }

    /// Nothing listens: the process is gone, said at once rather than after the timeout.
    #[tokio::test]
    async fn a_port_nothing_listens_on_is_gone_at_once() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr").port()
        };
        let started = Instant::now();
        let found = probe_listener(("127.0.0.1", port), Duration::from_secs(5)).await;
        assert_eq!(found, Liveness::Gone);
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
