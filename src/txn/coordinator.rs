//! The transaction coordinator's entry points: which `__transaction_state` partitions this
//! broker coordinates (a runtime shard each, hosted like the group coordinator's), producer
//! id allocation around the shard's decisions, the marker sender, and the answers clients get.
//! What a request does to a transactional id is an operation of `TxnShard`; the rules are the
//! state machine's (`state.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::shard::{End, Init, MarkerJob, TxnShard};
use super::state::{ProducerIdAndEpoch, TxnMetadata, TxnResult};
use super::{ProducerIdManager, TxnConfig};
use crate::controller::client::{ControllerClient, ImageWatch};
use crate::coordinator::host::{Host, InternalTopic};
use crate::coordinator::{Runtime, RuntimeConfig, ShardHandle, SystemClock};
use crate::inter_broker::InterBrokerClient;
use crate::protocol::TopicPartition;
use crate::protocol::errors::{ApiError, KafkaError};
use crate::replica::ReplicaManager;

pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The transaction version the coordinator's own aborts follow (a timed-out or fenced
/// transaction): 0 until the cluster advertises `transaction.version` 2 (KIP-890 part 2).
pub const CLUSTER_TRANSACTION_VERSION: i16 = 0;

/// How long a write of `__transaction_state` waits for its in-sync replicas (Kafka:
/// `request.timeout.ms` for the transaction log append).
const COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Producer ids asked for before a decision gives up (the state moved each time).
const PRODUCER_ID_TRIES: usize = 3;

type Handle = Arc<ShardHandle<TxnShard>>;

pub struct TxnCoordinator {
    host: Arc<Host<TxnShard>>,
    producer_ids: Arc<ProducerIdManager>,
    controller: ControllerClient,
    /// How markers reach the other brokers (the inter-broker listener, as its clients).
    inter_broker: InterBrokerClient,
    jobs: mpsc::UnboundedSender<MarkerJob>,
    jobs_rx: Mutex<Option<mpsc::UnboundedReceiver<MarkerJob>>>,
}

impl TxnCoordinator {
    pub fn new(
        config: TxnConfig,
        replicas: Arc<ReplicaManager>,
        images: ImageWatch,
        controller: ControllerClient,
        producer_ids: Arc<ProducerIdManager>,
        inter_broker: InterBrokerClient,
    ) -> Arc<TxnCoordinator> {
        let config = Arc::new(config);
        let runtime = Runtime::new(
            RuntimeConfig {
                name: "transaction coordinator",
                commit_timeout: COMMIT_TIMEOUT,
                timer_retry: Duration::from_secs(1),
                run_timers: true,
            },
            Arc::new(SystemClock),
        );
        let topic = InternalTopic {
            name: TRANSACTION_STATE_TOPIC,
            partitions: config.state_log_num_partitions,
            replication_factor: config.state_log_replication_factor,
            configs: BTreeMap::from([
                ("cleanup.policy".to_owned(), "compact".to_owned()),
                ("compression.type".to_owned(), "uncompressed".to_owned()),
                (
                    "min.insync.replicas".to_owned(),
                    config.state_log_min_isr.to_string(),
                ),
                (
                    "segment.bytes".to_owned(),
                    config.state_log_segment_bytes.to_string(),
                ),
                (
                    "unclean.leader.election.enable".to_owned(),
                    "false".to_owned(),
                ),
            ]),
            replication_factor_key: "transaction.state.log.replication.factor",
        };
        let (jobs, jobs_rx) = mpsc::unbounded_channel();
        let empty = {
            let (config, jobs) = (Arc::clone(&config), jobs.clone());
            Arc::new(move || {
                TxnShard::new(
                    Arc::clone(&config),
                    CLUSTER_TRANSACTION_VERSION,
                    jobs.clone(),
                )
            })
        };
        let host = Arc::new(Host::new(
            runtime,
            topic,
            replicas,
            images,
            controller.clone(),
            empty,
            TxnShard::len,
            "transactional ids",
        ));
        Arc::new(TxnCoordinator {
            host,
            producer_ids,
            controller,
            inter_broker,
            jobs,
            jobs_rx: Mutex::new(Some(jobs_rx)),
        })
    }

    /// Follows leadership of `__transaction_state` and runs the marker sender.
    pub fn start(self: &Arc<Self>) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = vec![self.host.start()];
        let jobs = self
            .jobs_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(jobs) = jobs {
            tasks.push(super::markers::start(
                Arc::downgrade(self),
                jobs,
                self.inter_broker.clone(),
            ));
        }
        tasks
    }

    pub fn images(&self) -> &ImageWatch {
        self.host.images()
    }

    /// Creates `__transaction_state` when missing (the first FindCoordinator for a
    /// transactional id does); its partition count.
    pub async fn ensure_topic(&self) -> Result<i32, ApiError> {
        self.host.ensure_topic().await
    }

    /// The `__transaction_state` partition of `transactional_id`, when the topic exists.
    pub fn partition_of(&self, transactional_id: &str) -> Option<i32> {
        self.host.partition_of(transactional_id)
    }

    fn shard_of(&self, transactional_id: &str) -> Result<Handle, KafkaError> {
        if transactional_id.len() > i16::MAX as usize {
            return Err(KafkaError::InvalidRequest);
        }
        self.host.shard_of(transactional_id)
    }

    /// The leader epoch of the shard holding `transactional_id` (the markers' coordinator
    /// epoch), while this broker serves it.
    pub fn coordinator_epoch(&self, transactional_id: &str) -> Option<i32> {
        let index = self.partition_of(transactional_id)?;
        let shard = self.host.runtime.shard(index)?;
        (!shard.is_unloaded()).then_some(shard.leader_epoch)
    }

    /// Where `broker` serves `listener_name`, from the image.
    pub fn broker_address(&self, broker: i32, listener_name: &str) -> Option<String> {
        let image = self.images().image();
        let registration = &image.brokers.get(&broker)?.registration;
        let endpoint = registration
            .endpoints
            .iter()
            .find(|e| e.name == listener_name)?;
        Some(format!("{}:{}", endpoint.host, endpoint.port))
    }

    async fn new_producer_id(&self) -> Result<i64, KafkaError> {
        self.producer_ids.next(&self.controller).await
    }

    // ---- the client's APIs ----

    /// InitProducerId with a transactional id: the producer's id and (bumped) epoch.
    pub async fn init_producer_id(
        &self,
        transactional_id: &str,
        transaction_timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
    ) -> Result<ProducerIdAndEpoch, KafkaError> {
        let shard = self.shard_of(transactional_id)?;
        let mut new_producer_id = None;
        for _ in 0..PRODUCER_ID_TRIES {
            let outcome = shard
                .write(|s, ctx| {
                    s.init_producer_id(
                        ctx,
                        transactional_id,
                        transaction_timeout_ms,
                        expected,
                        new_producer_id,
                    )
                })
                .await
                .map_err(map_append_error)??;
            match outcome {
                Init::Ready(producer) => return Ok(producer),
                Init::Aborting => return Err(KafkaError::ConcurrentTransactions),
                Init::NeedProducerId => new_producer_id = Some(self.new_producer_id().await?),
            }
        }
        Err(KafkaError::ConcurrentTransactions)
    }

    /// AddPartitionsToTxn (v0-3, from the producer): the partitions join its transaction.
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[TopicPartition],
    ) -> Result<(), KafkaError> {
        let shard = self.shard_of(transactional_id)?;
        shard
            .write(|s, ctx| s.add_partitions(ctx, transactional_id, producer, partitions))
            .await
            .map_err(map_append_error)?
    }

    /// Transaction version 2 (KIP-890 part 2): a partition leader (or the group coordinator
    /// for offsets) adds partitions the producer did not add itself; the transaction is
    /// version 2 from then on (its EndTxn bumps the epoch).
    pub async fn add_partitions_v2(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[TopicPartition],
    ) -> Result<(), KafkaError> {
        let shard = self.shard_of(transactional_id)?;
        shard
            .write(|s, ctx| {
                s.add_partitions_with_version(
                    ctx,
                    transactional_id,
                    producer,
                    partitions,
                    Some(super::state::TRANSACTION_VERSION_2),
                )
            })
            .await
            .map_err(map_append_error)?
    }

    /// AddPartitionsToTxn v4+ `verify_only`: whether each partition is in the transaction.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[TopicPartition],
    ) -> Result<Vec<bool>, KafkaError> {
        let shard = self.shard_of(transactional_id)?;
        shard.read(|s| s.verify_partitions(transactional_id, producer, partitions))?
    }

    /// EndTxn: the producer id and epoch to answer (TV2: the bumped epoch; before, -1).
    pub async fn end_txn(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        result: TxnResult,
        transaction_version: i16,
    ) -> Result<ProducerIdAndEpoch, KafkaError> {
        let shard = self.shard_of(transactional_id)?;
        let mut new_producer_id = None;
        for _ in 0..PRODUCER_ID_TRIES {
            let outcome = shard
                .write(|s, ctx| {
                    s.end_txn(
                        ctx,
                        transactional_id,
                        producer,
                        result,
                        transaction_version,
                        new_producer_id,
                    )
                })
                .await
                .map_err(map_append_error)??;
            match outcome {
                End::Done(answer) => return Ok(answer),
                End::NeedProducerId => new_producer_id = Some(self.new_producer_id().await?),
            }
        }
        Err(KafkaError::ConcurrentTransactions)
    }

    /// Every marker of `job` is written: complete the transaction, if this broker still
    /// coordinates it at `coordinator_epoch`. A failed write sends the job again later
    /// (markers are idempotent), so a transaction never stays prepared while its coordinator
    /// lives.
    pub async fn complete(&self, job: MarkerJob, coordinator_epoch: i32) {
        let Some(index) = self.partition_of(&job.transactional_id) else {
            return;
        };
        let Some(shard) = self.host.runtime.shard(index) else {
            return;
        };
        if shard.leader_epoch != coordinator_epoch {
            return;
        }
        match shard.write(|s, ctx| s.complete(ctx, &job)).await {
            Ok(true) => {
                tracing::debug!(transactional_id = %job.transactional_id, result = ?job.result, "transaction complete")
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(transactional_id = %job.transactional_id, %error, "completing a transaction failed; writing its markers again");
                let jobs = self.jobs.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let _ = jobs.send(job);
                });
            }
        }
    }

    // ---- admin ----

    /// Prometheus text: coordinator partitions (loading ones too), transactional ids by
    /// state, and the oldest open transaction's age (a hung producer shows here long before
    /// its timeout aborts it).
    pub fn collect_metrics(&self, out: &mut crate::metrics::Exposition) {
        use crate::metrics::Kind;
        let shards = self.host.runtime.shards();
        let loading = shards.iter().filter(|s| !s.is_loaded()).count();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut by_state: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut oldest_open_ms = 0i64;
        for shard in shards.iter().filter(|s| s.is_loaded()) {
            let _ = shard.read(|s| {
                for metadata in s.all() {
                    *by_state.entry(metadata.state.name()).or_default() += 1;
                    if metadata.state == super::state::TxnState::Ongoing
                        && metadata.start_timestamp_ms >= 0
                    {
                        oldest_open_ms =
                            oldest_open_ms.max(now_ms.saturating_sub(metadata.start_timestamp_ms));
                    }
                }
            });
        }
        out.family(
            "sluice_txn_coordinator_partitions",
            Kind::Gauge,
            "__transaction_state partitions this broker coordinates, by load state.",
        )
        .sample(&[("state", "loaded")], shards.len() - loading)
        .sample(&[("state", "loading")], loading);
        let mut family = out.family(
            "sluice_transactional_ids",
            Kind::Gauge,
            "Transactional ids this broker coordinates, by state.",
        );
        for state in super::state::TxnState::ALL {
            let count = by_state.get(state.name()).copied().unwrap_or(0);
            family.sample(&[("state", state.name())], count);
        }
        out.single(
            "sluice_transaction_oldest_open_seconds",
            Kind::Gauge,
            "Age of the oldest open transaction this broker coordinates.",
            oldest_open_ms as f64 / 1000.0,
        );
    }

    /// DescribeTransactions of one id: its metadata, TRANSACTIONAL_ID_NOT_FOUND, or a
    /// coordinator error.
    pub fn describe(&self, transactional_id: &str) -> Result<TxnMetadata, KafkaError> {
        let shard = self.shard_of(transactional_id)?;
        shard
            .read(|s| s.get(transactional_id).cloned())?
            .ok_or(KafkaError::TransactionalIdNotFound)
    }

    /// Every transactional id this broker coordinates, and COORDINATOR_LOAD_IN_PROGRESS while
    /// a partition is loading.
    pub fn list(&self) -> (Vec<TxnMetadata>, Result<(), KafkaError>) {
        let mut all = Vec::new();
        let mut outcome = Ok(());
        for shard in self.host.runtime.shards() {
            match shard.read(|s| s.all().cloned().collect::<Vec<_>>()) {
                Ok(listed) => all.extend(listed),
                Err(error @ KafkaError::CoordinatorLoadInProgress) => outcome = Err(error),
                Err(_) => {}
            }
        }
        (all, outcome)
    }
}

/// Kafka's mapping of a failed `__transaction_state` write to what the client is told.
fn map_append_error(error: KafkaError) -> KafkaError {
    match error {
        KafkaError::NotLeaderOrFollower | KafkaError::KafkaStorageError => {
            KafkaError::NotCoordinator
        }
        KafkaError::UnknownTopicOrPartition
        | KafkaError::NotEnoughReplicas
        | KafkaError::NotEnoughReplicasAfterAppend
        | KafkaError::RequestTimedOut => KafkaError::CoordinatorNotAvailable,
        KafkaError::MessageTooLarge | KafkaError::RecordListTooLarge => {
            KafkaError::UnknownServerError
        }
        other => other,
    }
}
