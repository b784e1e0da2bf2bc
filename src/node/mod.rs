//! A running node: what `sluice server` starts, wired here in order: the data directories
//! (checked against `meta.properties`), the log manager, the metadata quorum member with the
//! controller service, and for a broker the replica manager (image follower, replica fetchers,
//! ISR upkeep), the broker lifecycle (`lifecycle`) and the Kafka listener; the HTTP listener
//! (`http`) on every node. Shutdown stops them in the reverse order.

mod http;
mod lifecycle;
mod quorum_access;
pub mod scram_bootstrap;

use http::serve_http;
use lifecycle::{broker_lifecycle, controlled_shutdown};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_raft::{NodeInfo, Quorum, QuorumConfig};
use tokio::net::TcpListener;

use crate::broker::readiness::{Readiness, ReadyState};
use crate::broker::{Broker, FetchSessionCache};
use crate::config::ServerConfig;
use crate::controller::Defaults;
use crate::controller::service::{
    ControllerRequest, ControllerResponse, ControllerService, call_controller,
};
use crate::log::{LogManager, SystemClock};
use crate::meta_properties::{self, MetaProperties};
use crate::metrics::{Collect, Exposition, Kind, Metrics, Registry};
use crate::protocol::errors;
use crate::replica::ReplicaManager;
use crate::server::network::NetworkThreads;
use crate::server::{ListenerSettings, Server};
use crate::txn::ProducerIdManager;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

pub use crate::log::manager::METADATA_DIR_NAME;
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
    #[error(
        "{key} entry {dir} cannot be used: {reason}; point {key} at a directory this user can write"
    )]
    DataDir {
        key: &'static str,
        dir: String,
        reason: String,
    },
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
    /// One server per Kafka listener.
    servers: Vec<Server>,
    /// The broker context the Kafka listener serves with (`None` on a controller-only node).
    broker: Option<Arc<Broker>>,
    /// Registration and heartbeats; stopped first at a controlled shutdown.
    lifecycle: Option<tokio::task::JoinHandle<()>>,
    broker_epoch: Arc<AtomicI64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How long shutdown waits for requests already read to be answered.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

impl Node {
    pub async fn start(config: ServerConfig) -> Result<Node, NodeError> {
        Node::start_with_scram_bootstrap(config, Vec::new()).await
    }

    /// Starts the node; on its first start (its metadata directory formatted now), the
    /// `--add-scram` credentials are created in the quorum unless they exist
    /// ([`scram_bootstrap`]).
    pub async fn start_with_scram_bootstrap(
        config: ServerConfig,
        scram_credentials: Vec<scram_bootstrap::BootstrapCredential>,
    ) -> Result<Node, NodeError> {
        let identity = MetaProperties {
            cluster_id: config.cluster_id.clone(),
            node_id: config.node_id,
        };
        let mut dirs = config.log_dirs.clone();
        if !dirs.contains(&config.metadata_log_dir) {
            dirs.push(config.metadata_log_dir.clone());
        }
        let mut metadata_formatted_now = false;
        for dir in &dirs {
            let key = if config.log_dirs.contains(dir) {
                "log.dirs"
            } else {
                "metadata.log.dir"
            };
            let formatted =
                meta_properties::ensure(dir, &identity).map_err(|error| match error {
                    io @ meta_properties::MetaPropertiesError::Io { .. } => NodeError::DataDir {
                        key,
                        dir: dir.display().to_string(),
                        reason: io.to_string(),
                    },
                    other => other.into(),
                })?;
            if formatted {
                tracing::info!(dir = %dir.display(), cluster_id = %identity.cluster_id, node_id = identity.node_id, "formatted data directory");
            }
            metadata_formatted_now |= formatted && *dir == config.metadata_log_dir;
        }
        let create_scram = scram_bootstrap::pending(
            &config.metadata_log_dir,
            metadata_formatted_now,
            &scram_credentials,
        )
        .map_err(|error| NodeError::DataDir {
            key: "metadata.log.dir",
            dir: config.metadata_log_dir.display().to_string(),
            reason: format!("cannot write the --add-scram marker: {error}"),
        })?;
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
        // openraft waits its leader lease (the maximum election timeout) on top of a random
        // election timeout once it has known a leader, and a voter refuses to vote while its
        // own lease runs: with [E, 2E] an election after a quorum leader died began 3-4 s
        // later and often needed a second round. [E/2, E] starts it 1.5-2 E after the last
        // heartbeat, when every voter's lease has run out, so one round elects.
        quorum_config.election_timeout_min_ms = (election_ms / 2).max(5);
        quorum_config.election_timeout_max_ms = election_ms.max(10);
        quorum_config.heartbeat_interval_ms = (election_ms / 5).max(5);
        // An SSL quorum listener: mutual TLS between members, brokers and the CLI.
        let controller_tls = match &config.security.controller_tls {
            Some(settings) => {
                let name = &config.controller_listener_name;
                let tls = Arc::new(load_listener_tls(name, settings)?);
                let verify_hostname = endpoint_identification(&config.properties, name);
                let client = crate::security::tls::client_config(
                    settings.truststore.as_ref(),
                    Some(&settings.keystore),
                    verify_hostname,
                )
                .map_err(|e| NodeError::Config(format!("TLS listener {name}: {e}")))?;
                let served = Arc::clone(&tls);
                quorum_config.tls = Some(sluice_raft::transport::QuorumTls {
                    server: Arc::new(move || served.server.server_config()),
                    client,
                });
                Some(tls)
            }
            None => None,
        };
        let quorum = Arc::new(Quorum::start(quorum_config).await?);
        let metrics = Arc::new(Metrics::default());
        // Who may use the quorum listener (Raft RPCs, controller calls, voter changes).
        let quorum_access = Arc::new(quorum_access::QuorumAccess::new(
            controller_tls.as_ref().map(|tls| tls.principals.clone()),
            crate::broker::authorizer::Authorizer::new(
                config.security.authorizer.clone(),
                crate::controller::client::ImageWatch::new(Arc::clone(&quorum)),
                Arc::clone(&metrics),
            ),
        ));
        if controller_tls.is_some() {
            let access = Arc::clone(&quorum_access);
            quorum.set_raft_gate(Arc::new(move |peer| {
                access.check(peer, crate::security::acl::Operation::ClusterAction)
            }));
        }
        let defaults = Defaults {
            partitions: config.num_partitions,
            replication_factor: config.default_replication_factor,
            unclean_leader_election: config.unclean_leader_election_enable,
        };
        let session_timeout = Duration::from_millis(config.broker_session_timeout_ms);
        let controller = ControllerService::new(&quorum, defaults, session_timeout);
        // A closed liveness watch or one missed heartbeat (and a little): a dead broker is
        // found by its refused listener, a hung one by its unanswered probe, long before its
        // session expires.
        controller.probe_silent_brokers(crate::controller::service::ProbePolicy {
            after: Duration::from_millis(config.broker_heartbeat_interval_ms)
                + Duration::from_millis(250),
            answer_timeout: (config.broker_liveness_probe_timeout_ms > 0)
                .then(|| Duration::from_millis(config.broker_liveness_probe_timeout_ms)),
        });
        {
            let access = Arc::clone(&quorum_access);
            controller.set_caller_check(Arc::new(move |peer, operation| {
                access.check(peer, operation)
            }));
        }
        quorum.set_call_handler(controller.clone());
        let mut tasks = vec![
            tokio::spawn(Arc::clone(&controller).run_session_timer()),
            tokio::spawn(Arc::clone(&controller).run_liveness_watch()),
            tokio::spawn(Arc::clone(&controller).run_reassignments()),
        ];
        // The voters' internal addresses: where a node asks for the controller before it
        // knows the quorum's leader.
        let voter_addrs: Vec<String> = config
            .voters
            .iter()
            .map(|v| format!("{}:{}", v.host, v.port))
            .collect();
        if create_scram {
            tasks.push(tokio::spawn(scram_bootstrap::create(
                Arc::clone(&quorum),
                voter_addrs.clone(),
                config.metadata_log_dir.clone(),
                scram_credentials,
            )));
        }
        if let Some(tls) = &controller_tls {
            tasks.push(tokio::spawn(reload_certificates(
                config.controller_listener_name.clone(),
                Arc::clone(tls),
            )));
        }
        if config.auto_leader_rebalance_enable {
            let settings = crate::controller::service::LeaderRebalance {
                interval: Duration::from_secs(config.leader_imbalance_check_interval_seconds),
                imbalance_percentage_max: config.leader_imbalance_per_broker_percentage,
            };
            tasks.push(tokio::spawn(
                Arc::clone(&controller).run_leader_rebalance(settings),
            ));
        }
        let broker_epoch = Arc::new(AtomicI64::new(-1));
        let fenced = Arc::new(AtomicBool::new(true));
        // The shortest silence the controller fences a broker for: its liveness probe's
        // timeout, or without a probe the session.
        let stall = crate::broker::stall::StallGuard::new(Duration::from_millis(
            match config.broker_liveness_probe_timeout_ms {
                0 => config.broker_session_timeout_ms,
                probe => probe,
            },
        ));
        if config.roles.broker
            && let Err(error) = stall.watch()
        {
            tracing::warn!(%error, "no stall watch thread: leadership after a stall is not checked");
        }
        let lifecycle = config.roles.broker.then(|| {
            tokio::spawn(broker_lifecycle(
                Arc::clone(&quorum),
                config.clone(),
                Arc::clone(&broker_epoch),
                Arc::clone(&fenced),
                Arc::clone(&stall),
            ))
        });
        let broker_id = config.node_id as i32;
        let replicas = Arc::new(ReplicaManager::new(
            broker_id,
            Arc::clone(&logs),
            config.properties.clone(),
            Arc::clone(&broker_epoch),
        ));
        let readiness = Arc::new(Readiness::default());
        if config.roles.broker {
            tasks.push(tokio::spawn(Arc::clone(&readiness).follow(
                Arc::clone(&quorum),
                Arc::clone(&replicas),
                broker_id,
                Arc::clone(&broker_epoch),
            )));
        }
        let mut servers = Vec::new();
        let mut broker_context = None;
        let mut console_client = None;
        if config.roles.broker {
            tasks.push(tokio::spawn(
                Arc::clone(&replicas).follow_images(quorum.images()),
            ));
            // Followers fetch and brokers call each other on the inter-broker listener, as
            // its clients.
            let inter_broker = match &config.security.inter_broker_login {
                Some(login) => crate::inter_broker::InterBrokerClient::new(
                    login,
                    &format!("broker-{broker_id}"),
                )
                .map_err(NodeError::Config)?,
                None => {
                    return Err(NodeError::Config(
                        "a broker needs a Kafka listener to talk to the other brokers on".into(),
                    ));
                }
            };
            console_client = Some(inter_broker.clone());
            tasks.push(tokio::spawn(crate::replica::fetcher::run(
                Arc::clone(&replicas),
                Arc::clone(&quorum),
                crate::replica::fetcher::FetcherSettings {
                    inter_broker: inter_broker.clone(),
                    fetch_max_bytes: config.replica_fetch_max_bytes,
                    response_max_bytes: config.replica_fetch_response_max_bytes,
                    wait_max_ms: config.replica_fetch_wait_max_ms,
                    backoff_ms: config.replica_fetch_backoff_ms,
                },
            )));
            let voters = voter_addrs.clone();
            tasks.push(tokio::spawn(crate::replica::isr::run(
                Arc::clone(&replicas),
                Arc::clone(&quorum),
                voters.clone(),
                Duration::from_millis(config.replica_lag_time_max_ms),
                Duration::from_millis(config.replica_silence_max_ms),
            )));
            tasks.push(tokio::spawn(crate::replica::offline::run(
                Arc::clone(&replicas),
                Arc::clone(&quorum),
                voters,
            )));
            // Bound before anything starts serving: a port taken stops the node here.
            let mut bound = Vec::new();
            for listener_config in config
                .listeners
                .iter()
                .filter(|l| l.name != config.controller_listener_name)
            {
                let addr = listener_config.socket_addr().map_err(NodeError::Config)?;
                let listener = TcpListener::bind(addr)
                    .await
                    .map_err(|source| NodeError::Kafka { addr, source })?;
                bound.push((listener_config.clone(), listener));
            }
            let images = crate::controller::client::ImageWatch::new(Arc::clone(&quorum));
            let controller = crate::controller::client::ControllerClient::new(
                Arc::clone(&quorum),
                voter_addrs.clone(),
                broker_id,
                Arc::clone(&broker_epoch),
            );
            let groups = crate::group::GroupCoordinator::new(
                config.groups.clone(),
                Arc::clone(&replicas),
                images.clone(),
                controller.clone(),
            );
            tasks.extend(groups.start());
            let producer_ids = Arc::new(ProducerIdManager::default());
            let transactions = crate::txn::coordinator::TxnCoordinator::new(
                config.transactions.clone(),
                Arc::clone(&replicas),
                images.clone(),
                controller.clone(),
                Arc::clone(&producer_ids),
                inter_broker.clone(),
            );
            tasks.extend(transactions.start());
            warn_about_the_anonymous_principal(&config);
            let broker = Arc::new(Broker {
                config: config.clone(),
                broker_id,
                quorum: Arc::clone(&quorum),
                replicas: Arc::clone(&replicas),
                metrics: Arc::clone(&metrics),
                producer_ids,
                fetch_sessions: FetchSessionCache::default(),
                groups: groups.clone(),
                transactions,
                peers: crate::broker::peers::Peers::new(inter_broker.clone()),
                controller,
                authorizer: crate::broker::authorizer::Authorizer::new(
                    config.security.authorizer.clone(),
                    images.clone(),
                    Arc::clone(&metrics),
                ),
                images,
                broker_epoch: Arc::clone(&broker_epoch),
                fenced,
                stall,
                readiness: Arc::clone(&readiness),
                client_quotas: crate::broker::client_quotas::ClientQuotaManager::new(
                    config.quota_windows,
                    Arc::clone(&metrics),
                ),
            });
            let network_threads = if config.thread_affinity {
                match NetworkThreads::start() {
                    Ok(Some(threads)) => {
                        tracing::info!(cpus = ?threads.cpus(), "network threads pinned one per CPU (thread.affinity)");
                        let _ = broker
                            .metrics
                            .network_threads
                            .set(threads.connection_counts());
                        Some(Arc::new(threads))
                    }
                    Ok(None) => {
                        tracing::info!("one CPU: connections are served by the node's threads");
                        None
                    }
                    Err(error) => {
                        tracing::warn!(%error, "no network threads: connections are served by the node's threads");
                        None
                    }
                }
            } else {
                tracing::info!(
                    "thread.affinity=false: connections are served by the node's floating threads"
                );
                None
            };
            // Connection quotas shared by the listeners.
            let per_ip = Arc::new(crate::server::quotas::PerIpConnections::new(
                config.max_connections_per_ip,
                config.max_connections_per_ip_overrides.clone(),
            ));
            let broker_creation_rate =
                crate::server::quotas::CreationRate::new(config.max_connection_creation_rate)
                    .map(Arc::new);
            for (listener_config, listener) in bound {
                let security = Arc::new(config.security.listener(&listener_config.name));
                // OAUTHBEARER: the JWKS read now (a listener that would refuse every token
                // does not start), or the warning that unsecured tokens are taken.
                if let Some(validator) = &security.oauthbearer {
                    validator.start(&listener_config.name).map_err(|e| {
                        NodeError::Config(format!(
                            "OAUTHBEARER listener {}: {e}",
                            listener_config.name
                        ))
                    })?;
                }
                let tls = match &security.tls {
                    None => None,
                    Some(tls) => Some(Arc::new(load_listener_tls(&listener_config.name, tls)?)),
                };
                if let Some(tls) = &tls {
                    tasks.push(tokio::spawn(reload_certificates(
                        listener_config.name.clone(),
                        Arc::clone(tls),
                    )));
                }
                let settings = ListenerSettings {
                    name: listener_config.name.clone(),
                    request_bytes_max: config.socket_request_max_bytes,
                    connections_max: config.max_connections,
                    queued_requests_max: config.queued_max_requests,
                    idle_ms: config.connections_max_idle_ms,
                    sasl_request_bytes_max: config.security.sasl_server_max_receive_size,
                    security: Arc::clone(&security),
                    tls,
                    per_ip: Arc::clone(&per_ip),
                    creation_rates: broker_creation_rate
                        .iter()
                        .cloned()
                        .chain(
                            config
                                .listener_connection_creation_rates
                                .get(&listener_config.name)
                                .and_then(|rate| crate::server::quotas::CreationRate::new(*rate))
                                .map(Arc::new),
                        )
                        .collect(),
                };
                let started = Server::start(
                    listener,
                    settings,
                    Arc::clone(&broker),
                    network_threads.clone(),
                );
                tracing::info!(
                    listener = %listener_config.name,
                    security_protocol = security.protocol.name(),
                    mechanisms = ?security.mechanisms.iter().map(|m| m.name()).collect::<Vec<_>>(),
                    addr = %started.local_addr(),
                    "Kafka listener started"
                );
                servers.push(started);
            }
            broker_context = Some(broker);
        }

        let http_listener = TcpListener::bind(config.http_listener)
            .await
            .map_err(|source| NodeError::Http {
                addr: config.http_listener,
                source,
            })?;
        let registry = http::metrics_registry(
            &quorum,
            &logs,
            &metrics,
            &replicas,
            broker_context.as_ref(),
            config.metrics_partition_enable,
        );
        let console = broker_context
            .as_ref()
            .zip(console_client)
            .map(|(broker, client)| {
                let console = crate::console::Console::new(Arc::clone(broker), client);
                tasks.push(console.start());
                console
            });
        tasks.push(tokio::spawn(serve_http(
            http_listener,
            Arc::clone(&quorum),
            registry,
            config.roles.broker.then_some(readiness),
            console,
        )));
        tracing::info!(node_id = config.node_id, cluster_id = %config.cluster_id, "node started");
        Ok(Node {
            config,
            logs,
            quorum,
            replicas,
            servers,
            broker: broker_context,
            lifecycle,
            broker_epoch,
            tasks,
        })
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The broker context requests are served with (`None` on a controller-only node).
    pub fn broker(&self) -> Option<&Arc<Broker>> {
        self.broker.as_ref()
    }

    /// Stops the node: the Kafka listener (requests already read are answered), the quorum
    /// member, then the logs (producer state snapshotted, flushed, checkpointed, marked clean).
    pub async fn shutdown(self) -> Result<(), NodeError> {
        if let Some(broker) = &self.broker {
            broker.readiness.shutting_down();
        }
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
        for server in self.servers {
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
        self.quorum.shutdown().await;
        let logs = self.logs;
        tokio::task::block_in_place(|| logs.shutdown())?;
        tracing::info!("node stopped");
        Ok(())
    }
}

/// With an authorizer, says once at start who brokers are to each other, since a mistake
/// either stops replication or opens the cluster: on a PLAINTEXT (or SSL without client
/// certificates) listener every client is `User:ANONYMOUS`, brokers included; on a SASL
/// listener a broker is its login's user, which needs CLUSTER_ACTION (super.users, or an ACL).
fn warn_about_the_anonymous_principal(config: &ServerConfig) {
    let Some(authorizer) = &config.security.authorizer else {
        return;
    };
    let anonymous = crate::server::session::ANONYMOUS;
    let unauthenticated: Vec<&str> = config
        .security
        .listeners
        .iter()
        .filter(|(_, security)| {
            !security.protocol.is_sasl()
                && security
                    .tls
                    .as_ref()
                    .is_none_or(|tls| tls.client_auth == crate::config::tls::ClientAuth::None)
        })
        .map(|(name, _)| name.as_str())
        .collect();
    if authorizer.super_users.contains(anonymous) && !unauthenticated.is_empty() {
        tracing::warn!(
            listeners = ?unauthenticated,
            "{anonymous} is a super user: every client of these listeners, which do not \
             authenticate, may do everything; keep them on a private network"
        );
    }
    let listener = &config.security.inter_broker_listener;
    let login_user = config
        .security
        .inter_broker_login
        .as_ref()
        .and_then(|login| login.client_properties().get("sasl.username"));
    match login_user {
        Some(user) => {
            let principal = format!("User:{user}");
            if !authorizer.super_users.contains(principal.as_str()) {
                tracing::warn!(
                    inter_broker_listener = %listener,
                    %principal,
                    "brokers log in to each other as {principal}: grant it CLUSTER_ACTION on \
                     the cluster (an ACL, or super.users), or replication and transaction \
                     markers are refused"
                );
            }
        }
        None if unauthenticated.contains(&listener.as_str())
            && !authorizer.super_users.contains(anonymous) =>
        {
            tracing::warn!(
                inter_broker_listener = %listener,
                "brokers fetch from each other as {anonymous} on the inter-broker listener, \
                 which does not authenticate: grant it CLUSTER_ACTION on the cluster (an ACL, \
                 or super.users), or replication and transaction markers are refused"
            );
        }
        None => {}
    }
}

/// Whether a TLS client checks the name in the server's certificate, from
/// `ssl.endpoint.identification.algorithm` (the listener's own, else the node's): Kafka's
/// default `https` checks it; empty does not.
fn endpoint_identification(properties: &BTreeMap<String, String>, listener: &str) -> bool {
    let key = "ssl.endpoint.identification.algorithm";
    properties
        .get(&format!(
            "listener.name.{}.{key}",
            listener.to_ascii_lowercase()
        ))
        .or_else(|| properties.get(key))
        .is_none_or(|value| !value.trim().is_empty())
}

/// A TLS listener's certificates and principal rules, loaded at start: a bad file stops the
/// node, naming the listener.
fn load_listener_tls(
    listener: &str,
    settings: &crate::config::tls::TlsSettings,
) -> Result<crate::server::ListenerTls, NodeError> {
    let refused = |e: crate::security::tls::TlsError| {
        NodeError::Config(format!("TLS listener {listener}: {e}"))
    };
    Ok(crate::server::ListenerTls {
        server: crate::security::tls::ServerTls::load(settings).map_err(refused)?,
        principals: crate::security::tls::PrincipalMapper::parse(&settings.principal_mapping_rules)
            .map_err(refused)?,
    })
}

/// How often a TLS listener's certificate files are checked for a change.
const CERTIFICATE_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// Reloads a TLS listener's certificates when their files change (new connections get the
/// new ones); a file that does not load is said once and the old certificates kept.
async fn reload_certificates(listener: String, tls: Arc<crate::server::ListenerTls>) {
    let mut failing: Option<String> = None;
    loop {
        tokio::time::sleep(CERTIFICATE_CHECK_INTERVAL).await;
        match tls.server.reload_if_changed() {
            Ok(true) => {
                failing = None;
                tracing::info!(%listener, "TLS certificates reloaded");
            }
            Ok(false) => {}
            Err(error) => {
                let said = error.to_string();
                if failing.as_deref() != Some(said.as_str()) {
                    tracing::error!(%listener, error = %said, "TLS certificates changed but do not load: the old ones are still served; fix the files");
                    failing = Some(said);
                }
            }
        }
    }
}
