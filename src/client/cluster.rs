//! What a client knows of the cluster: the brokers, where each partition's leader is, and one
//! connection per broker. Starts from `bootstrap.servers` (each tried in turn, as Kafka's
//! clients do) and is refreshed by Metadata requests when an answer says it is stale.
//!
//! Every connection encrypts and authenticates as the client's settings say
//! (`security.protocol`, `ssl.*`, `sasl.*`). A refused authentication, or a TLS handshake the
//! certificates fail, is not a broker that is down: it is said at once to the caller (not
//! hidden behind "no broker reachable", which callers retry), and the address is not tried
//! again for [`AUTHENTICATION_RETRY_BACKOFF`], so a task that retries on its own does not open
//! a connection per attempt.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{FindCoordinatorRequest, MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::config::CommonConfig;
use super::connection::Connection;
use super::error::{Error, Result};

/// A broker as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// The broker's node id.
    pub node_id: i32,
    /// Its advertised host.
    pub host: String,
    /// Its advertised port.
    pub port: i32,
    /// Its rack, when configured.
    pub rack: Option<String>,
}

impl BrokerInfo {
    /// `host:port`.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// The partition's index.
    pub partition: i32,
    /// Kafka's error code for this partition (LEADER_NOT_AVAILABLE while it has none).
    pub error_code: i16,
    /// The leader's node id, or -1.
    pub leader: i32,
    /// The leader's epoch.
    pub leader_epoch: i32,
    /// All replicas, the preferred leader first.
    pub replicas: Vec<i32>,
    /// The in-sync replicas.
    pub isr: Vec<i32>,
    /// Replicas whose log dir is offline.
    pub offline_replicas: Vec<i32>,
}

/// One topic as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// The topic's name.
    pub name: String,
    /// Kafka's error code for the topic (UNKNOWN_TOPIC_OR_PARTITION when it does not exist).
    pub error_code: i16,
    /// The topic's id (16 bytes).
    pub topic_id: [u8; 16],
    /// Whether it is an internal topic (`__consumer_offsets`).
    pub is_internal: bool,
    /// Its partitions, by index.
    pub partitions: Vec<PartitionMetadata>,
}

/// The brokers and topics a client knows of.
#[derive(Debug, Clone, Default)]
pub struct ClusterMetadata {
    /// The cluster's id.
    pub cluster_id: Option<String>,
    /// The controller node id Metadata names.
    pub controller_id: i32,
    /// Brokers by node id.
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicMetadata>,
}

impl ClusterMetadata {
    /// The partition's entry, if the topic is known.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionMetadata> {
        self.topics
            .get(topic)?
            .partitions
            .iter()
            .find(|p| p.partition == partition)
    }
}

/// How long an address whose broker refused the client's authentication answers with that
/// refusal instead of a new connection (Kafka's clients back off up to
/// `reconnect.backoff.max.ms`, 1 s by default, after an authentication failure).
pub(crate) const AUTHENTICATION_RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// How long a request may wait for its answer before the client asks another broker whether
/// the one it waits on is still in the cluster.
const STALL_CHECK_AFTER: Duration = Duration::from_secs(1);
/// How often the stall watch looks.
const STALL_CHECK_INTERVAL: Duration = Duration::from_millis(250);
/// How long a request is looked at on every tick; after that, on every
/// `STALL_CHECK_SLOW_TICKS`th (2 s).
const STALL_CHECK_FAST_FOR: Duration = Duration::from_secs(5);
const STALL_CHECK_SLOW_TICKS: u64 = 8;

/// Whether a failed connect says the client's settings are wrong, which no other broker and no
/// retry mends: a refused authentication ([`Error::is_authentication`]) or a configuration
/// error (a TLS handshake the certificates fail is one, naming the key to change).
fn refuses_client(error: &Error) -> bool {
    error.is_authentication() || matches!(error, Error::Config { .. })
}

/// A connection being opened (TCP, TLS, ApiVersions, SASL). A hung broker's kernel still
/// accepts the TCP connection and then nothing answers, so the stall watch looks at openings
/// as at requests waiting on an open connection.
struct Opening {
    addr: String,
    started: Instant,
    /// Notified when the broker was fenced while the connection was being opened.
    abandoned: Arc<tokio::sync::Notify>,
}

/// Removes its opening from the cluster's list however `connection_to` ends (dropped too).
struct OpeningEntry<'a> {
    cluster: &'a Cluster,
    id: u64,
}

impl Drop for OpeningEntry<'_> {
    fn drop(&mut self) {
        self.cluster.lock_opening().remove(&self.id);
    }
}

/// Brokers, metadata and connections, shared by a client's tasks.
pub(crate) struct Cluster {
    pub config: CommonConfig,
    connections: Mutex<HashMap<String, Arc<Connection>>>,
    /// Connections being opened, by a number of their own.
    opening: Mutex<HashMap<u64, Opening>>,
    next_opening: std::sync::atomic::AtomicU64,
    /// Addresses whose broker refused the authentication: when, and the error.
    refused: Mutex<HashMap<String, (Instant, Error)>>,
    metadata: RwLock<Arc<ClusterMetadata>>,
}

impl Cluster {
    pub fn new(config: CommonConfig) -> Cluster {
        Cluster {
            config,
            connections: Mutex::new(HashMap::new()),
            opening: Mutex::new(HashMap::new()),
            next_opening: std::sync::atomic::AtomicU64::new(0),
            refused: Mutex::new(HashMap::new()),
            metadata: RwLock::new(Arc::new(ClusterMetadata::default())),
        }
    }

    /// A cluster shared by a client's tasks, its stall watch started.
    pub fn shared(config: CommonConfig) -> Arc<Cluster> {
        let cluster = Arc::new(Cluster::new(config));
        cluster.watch_stalls();
        cluster
    }

    /// The metadata last fetched.
    pub fn cached(&self) -> Arc<ClusterMetadata> {
        self.metadata
            .read()
            .map(|m| m.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// An open connection to `addr` (authenticated when the client uses SASL), reused while
    /// it lives.
    pub async fn connection_to(&self, addr: &str) -> Result<Arc<Connection>> {
        if let Some(connection) = self.lock_connections().get(addr) {
            if !connection.is_closed() {
                return Ok(connection.clone());
            }
        }
        if let Some(error) = self.recently_refused(addr) {
            return Err(error);
        }
        let id = self
            .next_opening
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let abandoned = Arc::new(tokio::sync::Notify::new());
        self.lock_opening().insert(
            id,
            Opening {
                addr: addr.to_owned(),
                started: Instant::now(),
                abandoned: abandoned.clone(),
            },
        );
        let _entry = OpeningEntry { cluster: self, id };
        let opened = tokio::select! {
            opened = Connection::open(addr, &self.config, self.config.request_timeout) => opened,
            () = abandoned.notified() => Err(Error::Disconnected {
                addr: addr.to_owned(),
                reason: "its broker was fenced while the connection was being opened".to_owned(),
            }),
        };
        let connection = match opened {
            Ok(connection) => Arc::new(connection),
            Err(error) => {
                if refuses_client(&error) {
                    self.lock_refused()
                        .insert(addr.to_owned(), (Instant::now(), error.clone()));
                }
                return Err(error);
            }
        };
        let mut connections = self.lock_connections();
        // Another task may have connected meanwhile: keep one.
        let kept = match connections.get(addr) {
            Some(existing) if !existing.is_closed() => existing.clone(),
            _ => {
                connections.insert(addr.to_owned(), connection.clone());
                connection
            }
        };
        Ok(kept)
    }

    /// A connection to broker `node_id`, by the address metadata gives for it.
    pub async fn broker(&self, node_id: i32) -> Result<Arc<Connection>> {
        let addr = match self.cached().brokers.get(&node_id) {
            Some(broker) => broker.address(),
            None => {
                let metadata = self.refresh(None).await?;
                metadata
                    .brokers
                    .get(&node_id)
                    .map(BrokerInfo::address)
                    .ok_or_else(|| {
                        Error::Protocol(format!("broker {node_id} is not in the cluster metadata"))
                    })?
            }
        };
        self.connection_to(&addr).await
    }

    /// A connection to any broker: the live one with the fewest requests awaiting answers
    /// first (Kafka's least loaded node: a broker that has stopped answering, paused or cut
    /// off, is passed over while another answers), then the known brokers and the bootstrap
    /// servers in turn. Fails naming every address tried and the last cause.
    pub async fn any(&self) -> Result<Arc<Connection>> {
        self.any_except(&[]).await
    }

    /// [`Cluster::any`], passing over the brokers at `avoid`.
    async fn any_except(&self, avoid: &[String]) -> Result<Arc<Connection>> {
        let live = self
            .lock_connections()
            .values()
            .filter(|c| !c.is_closed() && !avoid.iter().any(|a| a == c.addr()))
            .min_by_key(|c| c.in_flight())
            .cloned();
        if let Some(connection) = live {
            return Ok(connection);
        }
        let mut candidates: Vec<String> = self
            .cached()
            .brokers
            .values()
            .map(BrokerInfo::address)
            .collect();
        for server in &self.config.bootstrap_servers {
            if !candidates.contains(server) {
                candidates.push(server.clone());
            }
        }
        candidates.retain(|addr| !avoid.contains(addr));
        let mut last = None;
        for addr in &candidates {
            match self.connection_to(addr).await {
                Ok(connection) => return Ok(connection),
                // Wrong credentials or certificates are wrong at every broker: said now, as
                // they are.
                Err(error) if refuses_client(&error) => return Err(error),
                Err(error) => {
                    tracing::debug!(addr, %error, "broker not reachable");
                    last = Some(error);
                }
            }
        }
        let last = last.unwrap_or(Error::Config {
            key: "bootstrap.servers".into(),
            reason: "is empty".into(),
        });
        if candidates.len() == 1 {
            return Err(last);
        }
        Err(Error::NoBrokerReachable {
            tried: candidates.join(", "),
            last: Box::new(last),
        })
    }

    /// Asks any broker for the metadata of `topics` (all topics for `None`) and merges it into
    /// the cache. Topics that do not exist come back with their error code.
    pub async fn refresh(&self, topics: Option<&[String]>) -> Result<Arc<ClusterMetadata>> {
        self.refresh_with(topics, false).await
    }

    /// [`Cluster::refresh`], asking the broker to create missing topics when it allows
    /// (`auto.create.topics.enable`), as producers do.
    pub async fn refresh_with(
        &self,
        topics: Option<&[String]>,
        allow_auto_topic_creation: bool,
    ) -> Result<Arc<ClusterMetadata>> {
        self.refresh_from(topics, allow_auto_topic_creation, &[])
            .await
    }

    /// [`Cluster::refresh_with`], asking a broker not at `avoid`.
    async fn refresh_from(
        &self,
        topics: Option<&[String]>,
        allow_auto_topic_creation: bool,
        avoid: &[String],
    ) -> Result<Arc<ClusterMetadata>> {
        let request = MetadataRequest::default()
            .with_topics(topics.map(|topics| {
                topics
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(allow_auto_topic_creation);
        let connection = self.any_except(avoid).await?;
        let response = match connection.send(&request).await {
            Ok(response) => response,
            Err(error) => {
                // A broken connection: forget it, so the next call tries another broker.
                self.forget(connection.addr());
                return Err(error);
            }
        };
        let mut metadata = ClusterMetadata {
            cluster_id: response.cluster_id.as_ref().map(|s| s.to_string()),
            controller_id: response.controller_id.0,
            brokers: response
                .brokers
                .iter()
                .map(|b| {
                    (
                        b.node_id.0,
                        BrokerInfo {
                            node_id: b.node_id.0,
                            host: b.host.to_string(),
                            port: b.port,
                            rack: b.rack.as_ref().map(|r| r.to_string()),
                        },
                    )
                })
                .collect(),
            topics: match topics {
                // Asked for some topics: the others stay as they were.
                Some(_) => self.cached().topics.clone(),
                None => BTreeMap::new(),
            },
        };
        for topic in &response.topics {
            let Some(name) = &topic.name else { continue };
            let mut partitions: Vec<PartitionMetadata> = topic
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    partition: p.partition_index,
                    error_code: p.error_code,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    offline_replicas: p.offline_replicas.iter().map(|b| b.0).collect(),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            metadata.topics.insert(
                name.to_string(),
                TopicMetadata {
                    name: name.to_string(),
                    error_code: topic.error_code,
                    topic_id: *topic.topic_id.as_bytes(),
                    is_internal: topic.is_internal,
                    partitions,
                },
            );
        }
        let metadata = Arc::new(metadata);
        *self.metadata.write().unwrap_or_else(|p| p.into_inner()) = metadata.clone();
        Ok(metadata)
    }

    /// The `host:port` of `group_id`'s coordinator (FindCoordinator to any broker).
    pub async fn find_coordinator(&self, group_id: &str) -> Result<String> {
        let request = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group_id.to_owned()))
            .with_key_type(0);
        let connection = self.any().await?;
        // Version 4 and up batch keys in another field; 3 carries one group.
        let response = match connection.send_at_most(&request, 3).await {
            Ok(response) => response,
            Err(error) => {
                self.forget(connection.addr());
                return Err(error);
            }
        };
        if let Some(error) = Error::kafka(
            response.error_code,
            format!("group {group_id}"),
            response.error_message.as_deref(),
        ) {
            return Err(error);
        }
        Ok(format!("{}:{}", response.host.as_str(), response.port))
    }

    /// KIP-951: a broker named `partition`'s new leader (and its endpoint). The cache takes
    /// it when the epoch is newer than what it knows and the leader's address is known, so a
    /// retry goes there without a Metadata request. Returns whether it did.
    pub fn learn_leader(
        &self,
        topic: &str,
        partition: i32,
        leader: i32,
        leader_epoch: i32,
        endpoint: Option<BrokerInfo>,
    ) -> bool {
        let mut cached = self.metadata.write().unwrap_or_else(|p| p.into_inner());
        let newer = cached
            .partition(topic, partition)
            .is_some_and(|p| p.leader_epoch < leader_epoch || p.leader < 0);
        let address_known = endpoint.is_some() || cached.brokers.contains_key(&leader);
        if !newer || !address_known {
            return false;
        }
        let mut next = (**cached).clone();
        if let Some(broker) = endpoint {
            next.brokers.insert(leader, broker);
        }
        if let Some(entry) = next
            .topics
            .get_mut(topic)
            .and_then(|t| t.partitions.iter_mut().find(|p| p.partition == partition))
        {
            entry.leader = leader;
            entry.leader_epoch = leader_epoch;
            entry.error_code = crate::protocol::errors::NONE;
        }
        *cached = Arc::new(next);
        true
    }

    /// Starts the stall watch (see [`Cluster::abandon_fenced`]) for as long as the cluster
    /// lives; nothing outside a tokio runtime.
    pub fn watch_stalls(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let cluster = Arc::downgrade(self);
        runtime.spawn(async move {
            for tick in 0u64.. {
                tokio::time::sleep(STALL_CHECK_INTERVAL).await;
                let Some(cluster) = cluster.upgrade() else {
                    return;
                };
                cluster
                    .abandon_fenced(tick % STALL_CHECK_SLOW_TICKS == 0)
                    .await;
            }
        });
    }

    /// When a request has waited [`STALL_CHECK_AFTER`] for its answer, asks another broker
    /// which brokers the cluster still has: a broker it no longer lists was fenced (hung,
    /// cut off, or stopped), so the requests waiting on it are abandoned at once and their
    /// callers retry at the new leaders, instead of waiting out `request.timeout.ms` (30 s)
    /// for a broker that may never answer. A broker still listed is waited for as before: a
    /// long wait (a JoinGroup, an acks=all Produce) is no fault. A connection still being
    /// opened counts as a waiting request (a hung broker's kernel accepts it, and then
    /// nothing answers its ApiVersions). A request that has waited
    /// [`STALL_CHECK_FAST_FOR`] is looked at only on a `slow_tick`: a hung broker is fenced
    /// within seconds, and a member waiting minutes in a JoinGroup should not ask for metadata
    /// four times a second.
    pub async fn abandon_fenced(&self, slow_tick: bool) {
        let stalled: Vec<Arc<Connection>> = self
            .lock_connections()
            .values()
            .filter(|c| {
                !c.is_closed()
                    && c.oldest_in_flight().is_some_and(|age| {
                        age >= STALL_CHECK_AFTER && (age < STALL_CHECK_FAST_FOR || slow_tick)
                    })
            })
            .cloned()
            .collect();
        let opening: Vec<(String, Duration, Arc<tokio::sync::Notify>)> = self
            .lock_opening()
            .values()
            .filter(|o| {
                let age = o.started.elapsed();
                age >= STALL_CHECK_AFTER && (age < STALL_CHECK_FAST_FOR || slow_tick)
            })
            .map(|o| (o.addr.clone(), o.started.elapsed(), o.abandoned.clone()))
            .collect();
        if stalled.is_empty() && opening.is_empty() {
            return;
        }
        let known = self.cached();
        let avoid: Vec<String> = stalled
            .iter()
            .map(|c| c.addr().to_owned())
            .chain(opening.iter().map(|(addr, _, _)| addr.clone()))
            .collect();
        // No topics: the brokers only; the cached topics stay.
        let Ok(fresh) = self.refresh_from(Some(&[]), false, &avoid).await else {
            return;
        };
        // The broker at `addr` that `known` listed and `fresh` no longer does. A bootstrap
        // address, not known as a broker, is not one: nothing says it left.
        let fenced = |addr: &str| {
            known
                .brokers
                .values()
                .find(|b| b.address() == addr)
                .filter(|b| !fresh.brokers.contains_key(&b.node_id))
        };
        for connection in stalled {
            let addr = connection.addr();
            let Some(broker) = fenced(addr) else {
                continue;
            };
            let waited = connection.oldest_in_flight().unwrap_or_default();
            tracing::info!(
                broker = broker.node_id,
                addr,
                waited_ms = waited.as_millis() as u64,
                "broker left the cluster's metadata (fenced: hung, cut off or stopped) while requests waited on it: abandoning them"
            );
            connection.abandon(format!(
                "broker {} was fenced while this request waited {} ms for its answer",
                broker.node_id,
                waited.as_millis()
            ));
            self.forget(addr);
        }
        for (addr, waited, abandoned) in opening {
            let Some(broker) = fenced(&addr) else {
                continue;
            };
            tracing::info!(
                broker = broker.node_id,
                addr,
                waited_ms = waited.as_millis() as u64,
                "broker left the cluster's metadata (fenced: hung, cut off or stopped) while a connection to it was being opened: abandoning it"
            );
            // A permit: the opening sees it even if it is not waiting at this instant.
            abandoned.notify_one();
        }
    }

    /// Drops the connection to `addr` (it failed); the next call opens a new one.
    pub fn forget(&self, addr: &str) {
        self.lock_connections().remove(addr);
    }

    /// Closes every connection.
    pub fn close(&self) {
        self.lock_connections().clear();
    }

    fn lock_connections(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Connection>>> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_opening(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Opening>> {
        self.opening.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The authentication error `addr` answered less than [`AUTHENTICATION_RETRY_BACKOFF`]
    /// ago, if any.
    fn recently_refused(&self, addr: &str) -> Option<Error> {
        let mut refused = self.lock_refused();
        refused.retain(|_, (at, _)| at.elapsed() < AUTHENTICATION_RETRY_BACKOFF);
        refused.get(addr).map(|(_, error)| error.clone())
    }

    fn lock_refused(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Error)>> {
        self.refused.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_leader_named_by_a_broker_replaces_the_cached_one() {
        let cluster = Cluster::new(CommonConfig {
            bootstrap_servers: vec!["a:1".into()],
            client_id: "test".into(),
            request_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            sasl: None,
            tls: None,
        });
        let broker = |id: i32| BrokerInfo {
            node_id: id,
            host: "h".into(),
            port: 9000 + id,
            rack: None,
        };
        let partition = PartitionMetadata {
            partition: 0,
            error_code: 0,
            leader: 1,
            leader_epoch: 3,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            offline_replicas: Vec::new(),
        };
        let metadata = ClusterMetadata {
            brokers: BTreeMap::from([(1, broker(1))]),
            topics: BTreeMap::from([(
                "t".to_string(),
                TopicMetadata {
                    name: "t".into(),
                    error_code: 0,
                    topic_id: [0; 16],
                    is_internal: false,
                    partitions: vec![partition],
                },
            )]),
            ..ClusterMetadata::default()
        };
        *cluster.metadata.write().expect("lock") = Arc::new(metadata);
        // An unknown broker without its endpoint cannot be reached: not taken.
        assert!(!cluster.learn_leader("t", 0, 2, 4, None));
        assert!(cluster.learn_leader("t", 0, 2, 4, Some(broker(2))));
        let cached = cluster.cached();
        let p = cached.partition("t", 0).expect("partition");
        assert_eq!((p.leader, p.leader_epoch), (2, 4));
        assert_eq!(cached.brokers[&2].port, 9002);
        // Not newer than what is known: ignored.
        assert!(!cluster.learn_leader("t", 0, 3, 4, Some(broker(3))));
        assert!(!cluster.learn_leader("t", 7, 3, 9, Some(broker(3))));
    }

    /// Metadata goes to the connection with the fewest requests awaiting answers, so a
    /// broker that has stopped answering is passed over while another is idle.
    #[tokio::test]
    async fn any_broker_is_the_least_loaded_live_one() {
        let (a, b) = (
            super::super::connection::silent_broker::start().await,
            super::super::connection::silent_broker::start().await,
        );
        let cluster = Cluster::new(CommonConfig {
            bootstrap_servers: vec![a.clone(), b.clone()],
            client_id: "test".into(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(1),
            sasl: None,
            tls: None,
        });
        let (to_a, to_b) = (
            cluster.connection_to(&a).await.expect("a"),
            cluster.connection_to(&b).await.expect("b"),
        );
        let request = kafka_protocol::messages::MetadataRequest::default();
        let _waiting_on_a = to_a.queue(&request, 12).await.expect("queue");
        for _ in 0..3 {
            assert_eq!(cluster.any().await.expect("any").addr(), b);
        }
        let _waiting_on_b = [
            to_b.queue(&request, 12).await.expect("queue"),
            to_b.queue(&request, 12).await.expect("queue"),
        ];
        assert_eq!(cluster.any().await.expect("any").addr(), a);
    }

    /// A hung broker's kernel still accepts connections, and then nothing answers their
    /// ApiVersions: a connection being opened to a broker the cluster has fenced is abandoned
    /// by the stall watch, as requests waiting on an open one are, instead of waiting out
    /// `request.timeout.ms`. (A consumer met it when a lagging broker's Metadata named the
    /// fenced leader again after its connection had been dropped.)
    #[tokio::test]
    async fn opening_a_connection_to_a_broker_fenced_meanwhile_is_abandoned() {
        use super::super::fake_broker::{self, FakeBroker};

        let live = FakeBroker::bind(1).await;
        let live_node = live.node();
        live.serve(move |_| Some(fake_broker::metadata(std::slice::from_ref(&live_node), &[])));
        let hung = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let hung_port = i32::from(hung.local_addr().expect("addr").port());
        let holding = tokio::spawn(async move {
            let mut accepted = Vec::new();
            while let Ok((socket, _)) = hung.accept().await {
                accepted.push(socket);
            }
        });
        let cluster = Arc::new(Cluster::new(CommonConfig {
            bootstrap_servers: vec![live.addr()],
            client_id: "test".into(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(1),
            sasl: None,
            tls: None,
        }));
        // The cache names broker 2, as the Metadata of a broker lagging behind the fencing does.
        let mut cached = (*cluster.cached()).clone();
        for (node_id, port) in [(1, live.node().port), (2, hung_port)] {
            cached.brokers.insert(
                node_id,
                BrokerInfo {
                    node_id,
                    host: "127.0.0.1".into(),
                    port,
                    rack: None,
                },
            );
        }
        *cluster.metadata.write().expect("metadata") = Arc::new(cached);
        cluster.watch_stalls();
        let started = Instant::now();
        let error = tokio::time::timeout(Duration::from_secs(10), cluster.broker(2))
            .await
            .expect("abandoned within 10 s, not after request.timeout.ms")
            .expect_err("broker 2 never answers");
        assert!(
            matches!(&error, Error::Disconnected { reason, .. } if reason.contains("fenced")),
            "{error:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert!(cluster.lock_opening().is_empty());
        holding.abort();
    }

    /// Wrong credentials are said at once, as they are, from any broker: not wrapped in "no
    /// broker reachable" (which callers retry), and not tried again within the backoff.
    #[tokio::test]
    async fn a_refused_authentication_is_said_at_once_and_not_retried_within_the_backoff() {
        use crate::security::sasl::Mechanism;
        use std::sync::atomic::Ordering;

        let start = super::super::connection::sasl_broker::start;
        let ((a, a_count), (b, b_count)) = (
            start(&[Mechanism::Plain], 0).await,
            start(&[Mechanism::Plain], 0).await,
        );
        let config = crate::client::ClientConfig::new(&format!("{a},{b}"))
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "PLAIN")
            .set("sasl.username", "alice")
            .set("sasl.password", "wrong");
        let cluster = Cluster::new(CommonConfig::from_config(&config).expect("config"));
        let error = cluster.any().await.expect_err("wrong password");
        assert_eq!(
            error.code(),
            Some(crate::protocol::errors::SASL_AUTHENTICATION_FAILED),
            "{error}"
        );
        assert!(!error.is_retriable(), "{error}");
        assert!(error.to_string().contains(&a), "{error}");
        assert_eq!(
            (
                a_count.load(Ordering::SeqCst),
                b_count.load(Ordering::SeqCst)
            ),
            (1, 0)
        );
        let again = cluster.refresh(None).await.expect_err("still wrong");
        assert_eq!(again.to_string(), error.to_string());
        assert_eq!(
            a_count.load(Ordering::SeqCst),
            1,
            "reconnected within the backoff"
        );
        tokio::time::sleep(AUTHENTICATION_RETRY_BACKOFF).await;
        assert!(cluster.any().await.is_err());
        assert_eq!(
            a_count.load(Ordering::SeqCst),
            2,
            "not tried after the backoff"
        );
    }

    /// A broker certificate the client cannot trust is wrong at every broker: said at once
    /// as the configuration error it is, not as "no broker reachable", which callers retry.
    #[tokio::test]
    async fn a_refused_tls_handshake_is_said_at_once_not_as_no_broker_reachable() {
        use super::super::connection::tls_broker::{self, BOTH, ClientAuth};

        let (a, b) = (
            tls_broker::start("127.0.0.1", "other-server.pem", ClientAuth::None, BOTH).await,
            tls_broker::start("127.0.0.1", "other-server.pem", ClientAuth::None, BOTH).await,
        );
        let config = crate::client::ClientConfig::new(&format!("{a},{b}"))
            .set("security.protocol", "SSL")
            .set("ssl.truststore.location", tls_broker::fixture("ca.pem"));
        let cluster = Cluster::new(CommonConfig::from_config(&config).expect("config"));
        let error = cluster.any().await.expect_err("an untrusted broker");
        assert!(
            matches!(&error, Error::Config { key, reason }
                if key == "ssl.truststore.location" && reason.contains(&a)),
            "{error:?}"
        );
        assert!(!error.is_retriable());
        let again = cluster.refresh(None).await.expect_err("still untrusted");
        assert_eq!(again.to_string(), error.to_string());
    }
}
