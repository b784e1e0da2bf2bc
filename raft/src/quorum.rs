//! `Quorum`: one member of the metadata quorum, running. It opens the RocksDB store, starts
//! openraft and the gRPC listener, and bootstraps the cluster on first start.
//!
//! Bootstrap is idempotent: every voter, on start, asks openraft to initialize with the same
//! voter set. A node whose log is not empty (it was initialized before, or already heard from
//! a leader) is refused with `NotAllowed`, which is the expected answer after the first start;
//! nodes that initialize concurrently with the same membership are safe (openraft's rule).
//! A node outside the voter set joins as a learner when a voter adds it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{Config, Raft, RaftMetrics, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::calls::{CallHandler, ControllerService, HandlerSlot};
use crate::image::MetadataImage;
use crate::network::{GateSlot, GrpcNetworkFactory, RaftService, SNAPSHOT_CHUNK_BYTES};
use crate::records::{MetadataRecord, MetadataRequest, MetadataResponse};
use crate::store::{self, StateMachine};
use crate::types::{NodeId, NodeInfo, TypeConfig};

#[derive(Debug, Clone)]
pub struct QuorumConfig {
    pub node_id: NodeId,
    /// Where the RocksDB store lives (`metadata.log.dir`).
    pub data_dir: PathBuf,
    /// The internal listener to bind (Raft RPCs).
    pub listen: SocketAddr,
    /// `controller.quorum.voters`: the voters of a new cluster, with their internal addresses.
    pub voters: BTreeMap<NodeId, NodeInfo>,
    pub heartbeat_interval_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// A snapshot is taken after this many entries since the last one; the log before it is
    /// purged (keeping `logs_kept_after_snapshot`).
    pub snapshot_after_entries: u64,
    pub logs_kept_after_snapshot: u64,
    /// Purges wait until at least this many entries can go at once.
    pub purge_batch_entries: u64,
    /// Mutual TLS on the listener and in calls to the other members (an SSL controller
    /// listener); `None`: plain TCP.
    pub tls: Option<crate::transport::QuorumTls>,
}

impl QuorumConfig {
    pub fn new(
        node_id: NodeId,
        data_dir: PathBuf,
        listen: SocketAddr,
        voters: BTreeMap<NodeId, NodeInfo>,
    ) -> Self {
        QuorumConfig {
            node_id,
            data_dir,
            listen,
            voters,
            heartbeat_interval_ms: 150,
            election_timeout_min_ms: 1_000,
            election_timeout_max_ms: 2_000,
            snapshot_after_entries: 10_000,
            logs_kept_after_snapshot: 1_000,
            purge_batch_entries: 256,
            tls: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("binding the internal listener {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("invalid quorum settings: {0}")]
    Config(String),
    #[error("raft stopped: {0}")]
    Fatal(String),
}

/// Why a proposal did not commit.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error("not the quorum leader (leader: {leader:?})")]
    NotLeader {
        leader: Option<NodeId>,
        leader_addr: Option<String>,
    },
    #[error("refused at replay: {0}")]
    Rejected(String),
    #[error("raft stopped: {0}")]
    Fatal(String),
}

pub struct Quorum {
    node_id: NodeId,
    raft: Raft<TypeConfig>,
    state_machine: StateMachine,
    listen: SocketAddr,
    /// The listener's stop signal and task, taken by the first shutdown.
    server: std::sync::Mutex<Option<(oneshot::Sender<()>, JoinHandle<()>)>>,
    call_handler: HandlerSlot,
    raft_gate: GateSlot,
}

impl Quorum {
    pub async fn start(config: QuorumConfig) -> Result<Quorum, QuorumError> {
        let raft_config = Config {
            cluster_name: "sluice".into(),
            heartbeat_interval: config.heartbeat_interval_ms,
            election_timeout_min: config.election_timeout_min_ms,
            election_timeout_max: config.election_timeout_max_ms,
            install_snapshot_timeout: config.election_timeout_min_ms.max(1_000),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_after_entries),
            max_in_snapshot_log_to_keep: config.logs_kept_after_snapshot,
            snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
            // Fewer, smaller AppendEntries: each must fit MESSAGE_BYTES_MAX and the deadline.
            max_payload_entries: 64,
            purge_batch_size: config.purge_batch_entries.max(1),
            ..Config::default()
        }
        .validate()
        .map_err(|e| QuorumError::Config(e.to_string()))?;
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| QuorumError::Config(format!("{}: {e}", config.data_dir.display())))?;
        let (log_store, state_machine) = store::open(&config.data_dir)?;
        let raft = Raft::new(
            config.node_id,
            Arc::new(raft_config),
            GrpcNetworkFactory::default(),
            log_store,
            state_machine.clone(),
        )
        .await
        .map_err(|e| QuorumError::Fatal(e.to_string()))?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| QuorumError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let listen = listener.local_addr().map_err(|source| QuorumError::Bind {
            addr: config.listen,
            source,
        })?;
        // openraft's own log is off by default (see the server's log filter): a failure
        // that stops the quorum on this node is reported here, once, for a person to act on.
        // Leadership changes are logged here too (INFO, one line each), so a failover's
        // timeline can be read from the nodes' logs.
        let mut metrics = raft.metrics();
        let node_id = config.node_id;
        tokio::spawn(async move {
            let mut leader = None;
            while metrics.changed().await.is_ok() {
                let (fatal, now_leader, term) = {
                    let current = metrics.borrow();
                    let fatal = match &current.running_state {
                        Err(openraft::error::Fatal::Stopped) | Ok(()) => None,
                        Err(fatal) => Some(fatal.to_string()),
                    };
                    (fatal, current.current_leader, current.current_term)
                };
                if now_leader != leader {
                    leader = now_leader;
                    match now_leader {
                        Some(id) if id == node_id => {
                            tracing::info!(term, "this node now leads the metadata quorum")
                        }
                        Some(id) => tracing::info!(leader = id, term, "metadata quorum leader"),
                        None => tracing::info!(term, "metadata quorum has no leader"),
                    }
                }
                if let Some(fatal) = fatal {
                    tracing::error!(error = %fatal, "the metadata quorum stopped on this node; check the metadata log dir's disk and restart the node");
                    return;
                }
            }
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let raft_gate: GateSlot = Arc::default();
        let service = RaftService::new(raft.clone(), Arc::clone(&raft_gate));
        let call_handler: HandlerSlot = Arc::default();
        let controller_service = ControllerService::new(Arc::clone(&call_handler));
        let router = tonic::transport::Server::builder()
            .add_service(service)
            .add_service(controller_service);
        let shutdown = async {
            let _ = stopped.await;
        };
        let server = match config.tls.clone() {
            None => tokio::spawn(async move {
                let incoming =
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
                if let Err(error) = router
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await
                {
                    tracing::error!(%error, "raft gRPC server failed");
                }
            }),
            Some(tls) => {
                // This process's calls to quorum listeners go over TLS too.
                crate::transport::set_client_tls(Some(Arc::clone(&tls.client)));
                tokio::spawn(async move {
                    let incoming = crate::transport::tls_incoming(listener, tls);
                    if let Err(error) = router
                        .serve_with_incoming_shutdown(incoming, shutdown)
                        .await
                    {
                        tracing::error!(%error, "raft gRPC server failed");
                    }
                })
            }
        };
        let quorum = Quorum {
            node_id: config.node_id,
            raft,
            state_machine,
            listen,
            server: std::sync::Mutex::new(Some((stop, server))),
            call_handler,
            raft_gate,
        };
        if config.voters.contains_key(&config.node_id) {
            quorum.bootstrap(config.voters.clone()).await?;
        }
        tracing::info!(node_id = config.node_id, %listen, "metadata quorum member started");
        Ok(quorum)
    }

    async fn bootstrap(&self, voters: BTreeMap<NodeId, NodeInfo>) -> Result<(), QuorumError> {
        match self.raft.initialize(voters.clone()).await {
            Ok(()) => {
                tracing::info!(voters = %voters.keys().map(u64::to_string).collect::<Vec<_>>().join(","), "initialized the metadata quorum");
                Ok(())
            }
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                tracing::debug!("metadata quorum already initialized");
                Ok(())
            }
            Err(RaftError::APIError(InitializeError::NotInMembers(e))) => {
                Err(QuorumError::Config(e.to_string()))
            }
            Err(RaftError::Fatal(e)) => Err(QuorumError::Fatal(e.to_string())),
        }
    }

    /// Installs who may send Raft RPCs to this member (until then, anyone who reaches the
    /// listener: over TLS, only holders of a certificate the truststore vouches for).
    pub fn set_raft_gate(&self, gate: crate::transport::RaftGate) {
        *self.raft_gate.write().unwrap_or_else(|p| p.into_inner()) = Some(gate);
    }

    /// Installs the handler of controller calls arriving on this member's listener.
    pub fn set_call_handler(&self, handler: Arc<dyn CallHandler>) {
        *self.call_handler.write().unwrap_or_else(|p| p.into_inner()) = Some(handler);
    }

    /// The internal address of `node` per the current membership.
    pub fn node_addr(&self, node: NodeId) -> Option<String> {
        self.metrics()
            .membership_config
            .membership()
            .get_node(&node)
            .map(|n| n.addr.clone())
    }

    pub fn is_leader(&self) -> bool {
        self.metrics().current_leader == Some(self.node_id)
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }
    /// The address the internal listener is bound to.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }
    pub fn metrics(&self) -> RaftMetrics<NodeId, NodeInfo> {
        self.raft.metrics().borrow().clone()
    }
    /// Committed metadata, as images: every applied batch publishes a new one.
    pub fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.state_machine.subscribe()
    }
    pub fn image(&self) -> Arc<MetadataImage> {
        self.state_machine.image()
    }

    /// Proposes records (on the leader); returns once they are committed and applied here.
    pub async fn propose(
        &self,
        records: Vec<MetadataRecord>,
    ) -> Result<MetadataResponse, ProposeError> {
        match self.raft.client_write(MetadataRequest::new(records)).await {
            Ok(response) => match response.data.rejected {
                Some(reason) => Err(ProposeError::Rejected(reason)),
                None => Ok(response.data),
            },
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                Err(ProposeError::NotLeader {
                    leader: forward.leader_id,
                    leader_addr: forward.leader_node.map(|n| n.addr),
                })
            }
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
                Err(ProposeError::Rejected(e.to_string()))
            }
            Err(RaftError::Fatal(e)) => Err(ProposeError::Fatal(e.to_string())),
        }
    }

    /// Waits until this node sees a leader (any), up to `timeout`.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Option<NodeId> {
        let mut metrics = self.raft.metrics();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(leader) = metrics.borrow().current_leader {
                return Some(leader);
            }
            if tokio::time::timeout_at(deadline, metrics.changed())
                .await
                .is_err()
            {
                return None;
            }
        }
    }

    /// Stops Raft and the listener (once; later calls do nothing). Takes `&self`: tasks
    /// that still hold the quorum see its calls fail as shut down.
    pub async fn shutdown(&self) {
        let server = self.server.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some((stop, server)) = server else {
            return;
        };
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "raft shutdown");
        }
        let _ = stop.send(());
        let _ = server.await;
    }
}
