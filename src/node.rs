//! A running node: what `sluice server` starts. Today: the data directories (checked against
//! `meta.properties`), the log manager, the metadata quorum member and the HTTP listener
//! (`/health`, `/metrics`). The Kafka listener, the controller and replication join it as they
//! are built.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use sluice_raft::{NodeInfo, Quorum, QuorumConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::broker::{Broker, FetchSessionCache};
use crate::config::ServerConfig;
use crate::controller::Defaults;
use crate::controller::service::{
    ControllerRequest, ControllerResponse, ControllerService, call_controller,
};
use crate::log::{LogManager, SystemClock};
use crate::meta_properties::{self, MetaProperties};
use crate::metrics::Metrics;
use crate::protocol::errors;
use crate::replica::ReplicaManager;
use crate::server::{ListenerSettings, Server};
use crate::txn::ProducerIdManager;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// The quorum's RocksDB lives here, inside `metadata.log.dir`. The name has no `-<n>`
/// suffix, so the log manager never mistakes it for a partition.
pub const METADATA_DIR_NAME: &str = "__cluster_metadata";
/// The largest HTTP request head the listener reads.
const HTTP_REQUEST_BYTES_MAX: usize = 8 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    MetaProperties(#[from] meta_properties::MetaPropertiesError),
    #[error("log manager: {0}")]
    Log(#[from] crate::log::LogError),
    #[error("metadata quorum: {0}")]
    Quorum(#[from] sluice_raft::QuorumError),
    #[error("{0}")]
    Config(String),
    #[error("binding the Kafka listener {addr}: {source}")]
    Kafka {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("binding the HTTP listener {addr}: {source}")]
    Http {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

pub struct Node {
    config: ServerConfig,
    logs: Arc<LogManager>,
    quorum: Arc<Quorum>,
    replicas: Arc<ReplicaManager>,
    server: Option<Server>,
    /// Registration and heartbeats; stopped first at a controlled shutdown.
    lifecycle: Option<tokio::task::JoinHandle<()>>,
    broker_epoch: Arc<AtomicI64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How long shutdown waits for requests already read to be answered.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

impl Node {
    pub async fn start(config: ServerConfig) -> Result<Node, NodeError> {
        let identity = MetaProperties {
            cluster_id: config.cluster_id.clone(),
            node_id: config.node_id,
        };
        let mut dirs = config.log_dirs.clone();
        if !dirs.contains(&config.metadata_log_dir) {
            dirs.push(config.metadata_log_dir.clone());
        }
        for dir in &dirs {
            if meta_properties::ensure(dir, &identity)? {
                tracing::info!(dir = %dir.display(), cluster_id = %identity.cluster_id, node_id = identity.node_id, "formatted data directory");
            }
        }
        let log_config = config.log_manager.clone();
        let logs = Arc::new(tokio::task::block_in_place(|| {
            LogManager::open(log_config, Arc::new(SystemClock))
        })?);
        logs.start_background()?;

        let voters: BTreeMap<u64, NodeInfo> = config
            .voters
            .iter()
            .map(|v| {
                (
                    v.node_id,
                    NodeInfo {
                        addr: format!("{}:{}", v.host, v.port),
                    },
                )
            })
            .collect();
        let listen = config
            .controller_listener()
            .socket_addr()
            .map_err(NodeError::Config)?;
        let election_ms = config.quorum_election_timeout_ms;
        let mut quorum_config = QuorumConfig::new(
            config.node_id,
            config.metadata_log_dir.join(METADATA_DIR_NAME),
            listen,
            if config.roles.controller {
                voters
            } else {
                BTreeMap::new()
            },
        );
        quorum_config.election_timeout_min_ms = election_ms;
        quorum_config.election_timeout_max_ms = election_ms * 2;
        quorum_config.heartbeat_interval_ms = (election_ms / 5).max(5);
        let quorum = Arc::new(Quorum::start(quorum_config).await?);
        let defaults = Defaults {
            partitions: config.num_partitions,
            replication_factor: config.default_replication_factor,
            unclean_leader_election: config.unclean_leader_election_enable,
        };
        let session_timeout = Duration::from_millis(config.broker_session_timeout_ms);
        let controller = ControllerService::new(&quorum, defaults, session_timeout);
        quorum.set_call_handler(controller.clone());
        let mut tasks = vec![
            tokio::spawn(Arc::clone(&controller).run_session_timer()),
            tokio::spawn(Arc::clone(&controller).run_reassignments()),
        ];
        if config.auto_leader_rebalance_enable {
            controller.enable_leader_rebalance(Duration::from_secs(
                config.leader_imbalance_check_interval_seconds,
            ));
            tasks.push(tokio::spawn(Arc::clone(&controller).run_leader_rebalance()));
        }
        let broker_epoch = Arc::new(AtomicI64::new(-1));
        let fenced = Arc::new(AtomicBool::new(true));
        let lifecycle = config.roles.broker.then(|| {
            tokio::spawn(broker_lifecycle(
                Arc::clone(&quorum),
                config.clone(),
                Arc::clone(&broker_epoch),
                Arc::clone(&fenced),
            ))
        });
        let broker_id = config.node_id as i32;
        let replicas = Arc::new(ReplicaManager::new(
            broker_id,
            Arc::clone(&logs),
            config.properties.clone(),
            Arc::clone(&broker_epoch),
        ));
        let metrics = Arc::new(Metrics::default());
        let mut server = None;
        if config.roles.broker {
            tasks.push(tokio::spawn(
                Arc::clone(&replicas).follow_images(quorum.images()),
            ));
            let client_listener = config
                .listeners
                .iter()
                .find(|l| l.name != config.controller_listener_name)
                .map_or_else(|| "PLAINTEXT".to_owned(), |l| l.name.clone());
            tasks.push(tokio::spawn(crate::replica::fetcher::run(
                Arc::clone(&replicas),
                Arc::clone(&quorum),
                crate::replica::fetcher::FetcherSettings {
                    listener_name: client_listener,
                    fetch_max_bytes: config.replica_fetch_max_bytes,
                    response_max_bytes: config.replica_fetch_response_max_bytes,
                    wait_max_ms: config.replica_fetch_wait_max_ms,
                    backoff_ms: config.replica_fetch_backoff_ms,
                },
            )));
            tasks.push(tokio::spawn(crate::replica::isr::run(
                Arc::clone(&replicas),
                Arc::clone(&quorum),
                config
                    .voters
                    .iter()
                    .map(|v| format!("{}:{}", v.host, v.port))
                    .collect(),
                Duration::from_millis(config.replica_lag_time_max_ms),
            )));
            let listener_config = config
                .listeners
                .iter()
                .find(|l| l.name != config.controller_listener_name)
                .ok_or_else(|| NodeError::Config("no client listener".into()))?
                .clone();
            let addr = listener_config.socket_addr().map_err(NodeError::Config)?;
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| NodeError::Kafka { addr, source })?;
            let broker = Arc::new(Broker {
                config: config.clone(),
                broker_id,
                quorum: Arc::clone(&quorum),
                replicas: Arc::clone(&replicas),
                metrics: Arc::clone(&metrics),
                producer_ids: ProducerIdManager::default(),
                fetch_sessions: FetchSessionCache::default(),
                broker_epoch: Arc::clone(&broker_epoch),
                fenced,
            });
            let settings = ListenerSettings {
                name: listener_config.name.clone(),
                request_bytes_max: config.socket_request_max_bytes,
                connections_max: config.max_connections,
                queued_requests_max: config.queued_max_requests,
                idle_ms: config.connections_max_idle_ms,
            };
            let started = Server::start(listener, settings, broker);
            tracing::info!(listener = %listener_config.name, addr = %started.local_addr(), "Kafka listener started");
            server = Some(started);
        }

        let http_listener = TcpListener::bind(config.http_listener)
            .await
            .map_err(|source| NodeError::Http {
                addr: config.http_listener,
                source,
            })?;
        tasks.push(tokio::spawn(serve_http(
            http_listener,
            Arc::clone(&quorum),
            Arc::clone(&logs),
            Arc::clone(&metrics),
            Arc::clone(&replicas),
        )));
        tracing::info!(node_id = config.node_id, cluster_id = %config.cluster_id, "node started");
        Ok(Node {
            config,
            logs,
            quorum,
            replicas,
            server,
            lifecycle,
            broker_epoch,
            tasks,
        })
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Stops the node: the Kafka listener (requests already read are answered), the quorum
    /// member, then the logs (producer state snapshotted, flushed, checkpointed, marked clean).
    pub async fn shutdown(self) -> Result<(), NodeError> {
        if let Some(lifecycle) = self.lifecycle {
            // No more heartbeats: they would unfence the broker again.
            lifecycle.abort();
            let _ = lifecycle.await;
            if self.config.controlled_shutdown_enable {
                controlled_shutdown(
                    &self.quorum,
                    &self.config,
                    self.broker_epoch.load(Ordering::Relaxed),
                )
                .await;
            }
        }
        if let Some(server) = self.server {
            server.shutdown(SHUTDOWN_GRACE).await;
        }
        // Background tasks first (replica fetchers with their supervisor, ISR and controller
        // timers, HTTP): nothing appends once producer state is snapshotted and logs close.
        for task in self.tasks {
            task.abort();
            let _ = task.await;
        }
        tokio::task::block_in_place(|| self.replicas.snapshot_producer_state());
        drop(self.replicas);
        match Arc::try_unwrap(self.quorum) {
            Ok(quorum) => quorum.shutdown().await,
            Err(_) => tracing::warn!("quorum still referenced at shutdown"),
        }
        let logs = self.logs;
        tokio::task::block_in_place(|| logs.shutdown())?;
        tracing::info!("node stopped");
        Ok(())
    }
}

/// Kafka's controlled shutdown: the controller fences this broker (moving its leaderships to
/// other ISR members) and the broker waits until its image shows it leads nothing, so clients
/// switch to the new leaders before this broker stops answering. Retried
/// `controlled.shutdown.max.retries` times; if the controller cannot be reached, the broker
/// stops anyway (its session will expire).
async fn controlled_shutdown(quorum: &Arc<Quorum>, config: &ServerConfig, broker_epoch: i64) {
    if broker_epoch < 0 {
        return;
    }
    let broker_id = config.node_id as i32;
    let leads_replicated = |image: &sluice_raft::MetadataImage| {
        image.topics.values().any(|t| {
            t.partitions
                .values()
                .any(|p| p.leader == broker_id && p.isr.len() > 1)
        })
    };
    if !leads_replicated(&quorum.image()) {
        // Nothing another broker could take over.
        return;
    }
    let voters: Vec<String> = config
        .voters
        .iter()
        .map(|v| format!("{}:{}", v.host, v.port))
        .collect();
    let request = ControllerRequest::ControlledShutdown {
        broker_id,
        broker_epoch,
    };
    let started = std::time::Instant::now();
    for attempt in 0..=config.controlled_shutdown_max_retries {
        match call_controller(quorum, &voters, &request, Duration::from_secs(5)).await {
            Ok(ControllerResponse::Ok { .. }) => {
                let mut images = quorum.images();
                let moved = tokio::time::timeout(
                    Duration::from_secs(30),
                    images.wait_for(|image| {
                        image.brokers.get(&broker_id).is_none_or(|b| b.fenced)
                            && !image.topics.values().any(|t| {
                                t.partitions.values().any(|p| {
                                    p.leader == broker_id && p.replicas.len() > 1 && p.isr.len() > 1
                                })
                            })
                    }),
                )
                .await;
                match moved {
                    Ok(Ok(_)) => tracing::info!(
                        broker_id,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "controlled shutdown: leaderships moved"
                    ),
                    _ => {
                        tracing::warn!(broker_id, "controlled shutdown: leaderships not all moved")
                    }
                }
                return;
            }
            Ok(other) => {
                tracing::warn!(attempt, ?other, "controlled shutdown refused");
            }
            Err(error) => tracing::warn!(attempt, %error, "controlled shutdown failed"),
        }
        tokio::time::sleep(Duration::from_millis(
            config.controlled_shutdown_retry_backoff_ms,
        ))
        .await;
    }
    tracing::warn!(broker_id, "controlled shutdown gave up: stopping anyway");
}

/// The broker's side of its registration: register with the active controller, then
/// heartbeat; report caught up (to be unfenced) once this node has applied its own
/// registration, i.e. its metadata image is current up to it. Re-registers after a stale
/// epoch (the controller lost track of it).
async fn broker_lifecycle(
    quorum: Arc<Quorum>,
    config: ServerConfig,
    current_epoch: Arc<AtomicI64>,
    current_fenced: Arc<AtomicBool>,
) {
    let broker_id = config.node_id as i32;
    let interval = Duration::from_millis(config.broker_heartbeat_interval_ms);
    let endpoints = config
        .advertised_listeners
        .iter()
        .filter(|l| l.name != config.controller_listener_name)
        .map(|l| sluice_raft::records::Endpoint {
            name: l.name.clone(),
            host: l.host.clone(),
            port: l.port,
            security_protocol: "PLAINTEXT".into(),
        })
        .collect::<Vec<_>>();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let incarnation = sluice_raft::records::Uuid(started ^ u128::from(config.node_id));
    let voters: Vec<String> = config
        .voters
        .iter()
        .map(|v| format!("{}:{}", v.host, v.port))
        .collect();
    if !config.voters.iter().any(|v| v.node_id == config.node_id) {
        // Not a voter: follow the metadata log as a learner first.
        let addr = match config.controller_listener().socket_addr() {
            Ok(addr) => addr.to_string(),
            Err(error) => {
                tracing::error!(%error, "no internal address to join the quorum with");
                return;
            }
        };
        let join = ControllerRequest::AddLearner {
            node_id: config.node_id,
            addr,
        };
        loop {
            match call_controller(&quorum, &voters, &join, Duration::from_secs(30)).await {
                Ok(ControllerResponse::Ok { .. }) => break,
                Ok(other) => tracing::warn!(
                    ?other,
                    "joining the quorum as a learner was refused; retrying"
                ),
                Err(error) => {
                    tracing::warn!(%error, "joining the quorum as a learner failed; retrying")
                }
            }
            tokio::time::sleep(interval).await;
        }
        tracing::info!(
            node_id = config.node_id,
            "following the metadata quorum as a learner"
        );
    }
    'register: loop {
        let registration = sluice_raft::records::RegisterBroker {
            broker_id,
            incarnation_id: incarnation,
            broker_epoch: 0,
            endpoints: endpoints.clone(),
            rack: config.broker_rack.clone(),
            fenced: true,
        };
        let request = ControllerRequest::RegisterBroker(registration);
        let epoch = match call_controller(&quorum, &voters, &request, Duration::from_secs(30)).await
        {
            Ok(ControllerResponse::Ok {
                broker_epoch: Some(epoch),
                ..
            }) => epoch,
            Ok(other) => {
                tracing::warn!(?other, "broker registration refused; retrying");
                tokio::time::sleep(interval).await;
                continue;
            }
            Err(error) => {
                tracing::warn!(%error, "broker registration failed; retrying");
                tokio::time::sleep(interval).await;
                continue;
            }
        };
        tracing::info!(
            broker_id,
            broker_epoch = epoch,
            "registered with the controller"
        );
        current_epoch.store(epoch, Ordering::Relaxed);
        let mut fenced = true;
        loop {
            let caught_up = quorum
                .image()
                .brokers
                .get(&broker_id)
                .is_some_and(|b| b.registration.broker_epoch == epoch);
            let heartbeat = ControllerRequest::Heartbeat {
                broker_id,
                broker_epoch: epoch,
                caught_up,
            };
            match call_controller(
                &quorum,
                &voters,
                &heartbeat,
                interval.max(Duration::from_secs(2)),
            )
            .await
            {
                Ok(ControllerResponse::Ok {
                    fenced: Some(now_fenced),
                    ..
                }) => {
                    if fenced && !now_fenced {
                        tracing::info!(broker_id, "unfenced: serving as a broker");
                    }
                    fenced = now_fenced;
                    current_fenced.store(now_fenced, Ordering::Relaxed);
                }
                // The controller no longer knows this registration.
                Ok(ControllerResponse::Error {
                    code: errors::STALE_BROKER_EPOCH,
                    message,
                }) => {
                    tracing::warn!(%message, "stale broker epoch: registering again");
                    continue 'register;
                }
                Ok(other) => tracing::debug!(?other, "heartbeat answer"),
                Err(error) => tracing::debug!(%error, "heartbeat failed"),
            }
            tokio::time::sleep(interval).await;
        }
    }
}

async fn serve_http(
    listener: TcpListener,
    quorum: Arc<Quorum>,
    logs: Arc<LogManager>,
    broker_metrics: Arc<Metrics>,
    replicas: Arc<ReplicaManager>,
) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let quorum = Arc::clone(&quorum);
        let logs = Arc::clone(&logs);
        let broker_metrics = Arc::clone(&broker_metrics);
        let replicas = Arc::clone(&replicas);
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(1024);
            let mut buffer = [0u8; 1024];
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while !head.windows(4).any(|w| w == b"\r\n\r\n")
                    && head.len() < HTTP_REQUEST_BYTES_MAX
                {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
            })
            .await;
            if read.is_err() {
                return;
            }
            let request_line = String::from_utf8_lossy(&head)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            let path = request_line.split_whitespace().nth(1).unwrap_or("");
            let (status, content_type, body) = match path {
                "/health" => ("200 OK", "text/plain", health(&quorum)),
                "/metrics" => ("200 OK", "text/plain; version=0.0.4", {
                    let mut text = metrics(&quorum, &logs);
                    broker_metrics.render(&mut text);
                    replicas.render_metrics(&mut text);
                    text
                }),
                _ => ("404 Not Found", "text/plain", "not found\n".to_owned()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

fn health(quorum: &Quorum) -> String {
    let metrics = quorum.metrics();
    format!(
        "ok node={} state={:?} leader={} term={}\n",
        quorum.node_id(),
        metrics.state,
        metrics
            .current_leader
            .map_or("none".to_owned(), |l| l.to_string()),
        metrics.current_term
    )
}

/// Prometheus text exposition of what operators watch.
fn metrics(quorum: &Quorum, logs: &LogManager) -> String {
    let m = quorum.metrics();
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    gauge(
        "sluice_quorum_current_term",
        "Raft term of the metadata quorum as this node sees it.",
        m.current_term.to_string(),
    );
    gauge(
        "sluice_quorum_current_leader",
        "Node id of the quorum leader, -1 when unknown.",
        m.current_leader.map_or(-1, |l| l as i64).to_string(),
    );
    gauge(
        "sluice_quorum_is_leader",
        "1 when this node leads the metadata quorum.",
        u8::from(m.current_leader == Some(quorum.node_id())).to_string(),
    );
    gauge(
        "sluice_quorum_last_log_index",
        "Index of the last entry in this node's metadata log.",
        m.last_log_index.unwrap_or(0).to_string(),
    );
    gauge(
        "sluice_quorum_last_applied_index",
        "Index of the last committed entry applied here (the metadata image's index).",
        m.last_applied.map_or(0, |l| l.index).to_string(),
    );
    gauge(
        "sluice_quorum_voters",
        "Voters in the quorum's membership.",
        m.membership_config.voter_ids().count().to_string(),
    );
    let image = quorum.image();
    gauge(
        "sluice_brokers_registered",
        "Brokers registered in the metadata image.",
        image.brokers.len().to_string(),
    );
    gauge(
        "sluice_brokers_unfenced",
        "Registered brokers not fenced.",
        image.unfenced_brokers().count().to_string(),
    );
    gauge(
        "sluice_topics",
        "Topics in the metadata image.",
        image.topics.len().to_string(),
    );
    let offline = image
        .topics
        .values()
        .flat_map(|t| t.partitions.values())
        .filter(|p| p.leader == sluice_raft::records::NO_LEADER)
        .count();
    gauge(
        "sluice_partitions_offline",
        "Partitions without a leader.",
        offline.to_string(),
    );
    let all = logs.all();
    gauge(
        "sluice_log_partitions",
        "Partition logs on this node.",
        all.len().to_string(),
    );
    gauge(
        "sluice_log_size_bytes",
        "Bytes in all partition logs on this node.",
        all.iter().map(|l| l.size_bytes()).sum::<u64>().to_string(),
    );
    gauge(
        "sluice_log_offline_partitions",
        "Partition logs taken offline by a storage error.",
        all.iter().filter(|l| l.is_offline()).count().to_string(),
    );
    out
}
