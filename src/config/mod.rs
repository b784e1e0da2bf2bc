//! `server.properties`: parse, validate, defaults. Kafka's key names; an unknown key is
//! warned about (never silently ignored); an invalid value stops start-up with a message
//! naming the key. `sluice server --override key=value` applies after the file, as Kafka's
//! start script does.
//!
//! With no file at all the node is a single-node cluster: node 1, a voter of its own quorum,
//! Kafka on 127.0.0.1:9092, the quorum on 127.0.0.1:9093, HTTP on 127.0.0.1:9644, data in
//! `./data`.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

pub mod oauthbearer;
pub mod registry;
pub mod security;
pub mod tls;

use crate::log::{LogConfig, LogManagerConfig};
use registry::ConfigError;
/// One `NAME://host:port` entry of `listeners`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Listener {
    pub fn socket_addr(&self) -> Result<SocketAddr, String> {
        let host = if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        };
        (host, self.port)
            .to_socket_addrs()
            .map_err(|e| e.to_string())?
            .next()
            .ok_or_else(|| format!("{host} resolves to no address"))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub node_id: u64,
    pub host: String,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Copy)]
pub struct Roles {
    pub broker: bool,
    pub controller: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// `node.id`
    pub node_id: u64,
    /// `process.roles`
    pub roles: Roles,
    /// `listeners`: the Kafka listener(s) and the `CONTROLLER` (internal gRPC) listener.
    pub listeners: Vec<Listener>,
    /// `advertised.listeners` (defaults to `listeners`).
    pub advertised_listeners: Vec<Listener>,
    /// `controller.listener.names`
    pub controller_listener_name: String,
    /// Each Kafka listener's security protocol and SASL mechanisms; the inter-broker listener.
    pub security: security::SecurityConfig,
    /// `controller.quorum.voters`
    pub voters: Vec<Voter>,
    /// `cluster.id` (ours; Kafka takes it from `kafka-storage format`). Defaults to an id
    /// derived from `controller.quorum.voters`, so that the nodes of one cluster agree on it
    /// without a formatting step.
    pub cluster_id: String,
    /// `log.dirs` (or `log.dir`)
    pub log_dirs: Vec<PathBuf>,
    /// `metadata.log.dir` (defaults to the first log dir)
    pub metadata_log_dir: PathBuf,
    /// `http.listener` (ours): `/metrics` and `/health`.
    pub http_listener: SocketAddr,
    /// `metrics.partition.enable` (ours): per-topic and per-partition gauges on `/metrics`.
    pub metrics_partition_enable: bool,
    /// `http.console.actions.enable` (ours): the console may change the cluster.
    pub http_console_actions_enable: bool,
    pub broker_rack: Option<String>,
    /// `replica.selector.class` (KIP-392): where the leader sends consumers that name a rack.
    pub replica_selector: crate::replica::read_replica::ReplicaSelector,
    /// `max.broker.partitions` (KIP-578's name): `None` derives it from memory
    /// (`ServerConfig::partitions_max`).
    pub max_broker_partitions: Option<u32>,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub min_insync_replicas: i32,
    pub auto_create_topics_enable: bool,
    pub unclean_leader_election_enable: bool,
    pub socket_request_max_bytes: usize,
    /// `max.connections` on the Kafka listener.
    pub max_connections: usize,
    /// `max.connections.per.ip` and `max.connections.per.ip.overrides`.
    pub max_connections_per_ip: usize,
    pub max_connections_per_ip_overrides: std::collections::HashMap<std::net::IpAddr, usize>,
    /// `max.connection.creation.rate` (broker-wide), and per listener
    /// (`listener.name.<l>.max.connection.creation.rate`).
    pub max_connection_creation_rate: u64,
    pub listener_connection_creation_rates: BTreeMap<String, u64>,
    /// `quota.window.num` and `quota.window.size.seconds`: how client quotas measure rates.
    pub quota_windows: crate::broker::client_quotas::QuotaWindows,
    /// `queued.max.requests`: requests read ahead per connection.
    pub queued_max_requests: usize,
    /// `thread.affinity`: connections served by network threads pinned one per CPU
    /// (`server::network`).
    pub thread_affinity: bool,
    /// `connections.max.idle.ms`
    pub connections_max_idle_ms: u64,
    pub replica_lag_time_max_ms: u64,
    /// `replica.silence.max.ms` (ours): a follower with no fetch for this long leaves the ISR.
    pub replica_silence_max_ms: u64,
    /// `replica.fetch.max.bytes`, per partition.
    pub replica_fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`
    pub replica_fetch_response_max_bytes: i32,
    /// `replica.fetch.wait.max.ms`
    pub replica_fetch_wait_max_ms: i32,
    /// `replica.fetch.backoff.ms`
    pub replica_fetch_backoff_ms: u64,
    /// `auto.leader.rebalance.enable`
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.check.interval.seconds`
    pub leader_imbalance_check_interval_seconds: u64,
    /// `leader.imbalance.per.broker.percentage`
    pub leader_imbalance_per_broker_percentage: u32,
    /// `controlled.shutdown.enable`: on SIGTERM, move leaderships away before stopping.
    pub controlled_shutdown_enable: bool,
    /// `controlled.shutdown.max.retries`
    pub controlled_shutdown_max_retries: u32,
    /// `controlled.shutdown.retry.backoff.ms`
    pub controlled_shutdown_retry_backoff_ms: u64,
    pub broker_session_timeout_ms: u64,
    pub broker_heartbeat_interval_ms: u64,
    /// `broker.liveness.probe.timeout.ms` (ours): how long a broker that missed its heartbeat
    /// has to answer the controller's probe before it is fenced; 0: it waits out its session.
    pub broker_liveness_probe_timeout_ms: u64,
    pub quorum_election_timeout_ms: u64,
    /// The log manager's settings: `log.dirs`, topic defaults from the `log.*` keys
    /// (`default_log_config`), `log.cleaner.*`, `log.retention.check.interval.ms`, ...
    pub log_manager: LogManagerConfig,
    /// The group coordinator's settings (`offsets.*`, `group.*`).
    pub groups: crate::group::GroupConfig,
    /// The transaction coordinator's settings (`transaction.*`, `transactional.*`).
    pub transactions: crate::txn::TxnConfig,
    /// Keys that were present and understood, with their values (for DescribeConfigs later).
    pub properties: BTreeMap<String, String>,
}

/// What a node started without `--config` as a single-node cluster (one voter) sets beyond the
/// registry's defaults, which are Kafka's.
pub const EMBEDDED_DEFAULTS: &[(&str, &str)] = &[
    ("offsets.topic.replication.factor", "1"),
    ("transaction.state.log.replication.factor", "1"),
    ("transaction.state.log.min.isr", "1"),
    ("group.initial.rebalance.delay.ms", "0"),
];

/// Parses Kafka's `.properties` text: `key=value` or `key: value` lines, `#`/`!` comments,
/// surrounding blanks trimmed. (Line continuations and escapes are not used by Kafka configs.)
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut properties = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let split = line
            .find(['=', ':'])
            .ok_or_else(|| format!("line {}: expected key=value: '{line}'", number + 1))?;
        let (key, value) = (line[..split].trim(), line[split + 1..].trim());
        if key.is_empty() {
            return Err(format!("line {}: empty key", number + 1));
        }
        properties.insert(key.to_owned(), value.to_owned());
    }
    Ok(properties)
}

fn parse_listeners(key: &str, value: &str) -> Result<Vec<Listener>, ConfigError> {
    let mut listeners = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, address) = entry.split_once("://").ok_or_else(|| {
            ConfigError::new(key, value, format!("'{entry}' is not NAME://host:port"))
        })?;
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| ConfigError::new(key, value, format!("'{entry}' has no port")))?;
        let port = port
            .parse()
            .map_err(|_| ConfigError::new(key, value, format!("'{port}' is not a port")))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if listeners
            .iter()
            .any(|l: &Listener| l.name.eq_ignore_ascii_case(name))
        {
            return Err(ConfigError::new(
                key,
                value,
                format!("listener name {name} appears twice"),
            ));
        }
        listeners.push(Listener {
            // Kafka normalises listener names to upper case (`ListenerName.normalised`).
            name: name.to_ascii_uppercase(),
            host,
            port,
        });
    }
    Ok(listeners)
}

/// Every advertised listener must be served: one that is not would be registered and never
/// answer.
fn check_advertised_listeners(
    properties: &BTreeMap<String, String>,
    listeners: &[Listener],
    advertised: &[Listener],
    controller_listener_name: &str,
) -> Result<(), ConfigError> {
    if let Some(unserved) = advertised
        .iter()
        .find(|a| a.name != controller_listener_name && !listeners.iter().any(|l| l.name == a.name))
    {
        return Err(ConfigError::new(
            "advertised.listeners",
            properties
                .get("advertised.listeners")
                .map_or("", String::as_str),
            format!(
                "listener {} is advertised but not in listeners",
                unserved.name
            ),
        ));
    }
    Ok(())
}

fn parse_voters(value: &str) -> Result<Vec<Voter>, ConfigError> {
    let key = "controller.quorum.voters";
    let mut voters = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || ConfigError::new(key, value, format!("'{entry}' is not id@host:port"));
        let (id, address) = entry.split_once('@').ok_or_else(bad)?;
        let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
        let voter = Voter {
            node_id: id.parse().map_err(|_| bad())?,
            host: host.to_owned(),
            port: port.parse().map_err(|_| bad())?,
        };
        if voters.iter().any(|v: &Voter| v.node_id == voter.node_id) {
            return Err(ConfigError::new(
                key,
                value,
                format!("node {} appears twice", voter.node_id),
            ));
        }
        // Two voters on one listener: the quorum's calls to one would reach the other (a
        // leader its own RPCs), so no quorum could form as configured.
        if let Some(other) = voters
            .iter()
            .find(|v: &&Voter| v.host == voter.host && v.port == voter.port)
        {
            return Err(ConfigError::new(
                key,
                value,
                format!(
                    "nodes {} and {} share the address {address}: each voter needs a \
                     controller listener of its own",
                    other.node_id, voter.node_id
                ),
            ));
        }
        voters.push(voter);
    }
    if voters.is_empty() {
        return Err(ConfigError::new(key, value, "no voters"));
    }
    Ok(voters)
}

/// A stable cluster id from the voter list: nodes configured with the same voters agree on it,
/// and a node configured for another cluster does not.
fn derived_cluster_id(voters: &[Voter]) -> String {
    // FNV-1a over the canonical voter list; 128 bits from two offsets, printed like a uuid.
    let canonical: String = voters
        .iter()
        .map(|v| format!("{}@{}:{};", v.node_id, v.host, v.port))
        .collect();
    let hash = |seed: u64| {
        canonical.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    format!(
        "{:016x}{:016x}",
        hash(0xcbf2_9ce4_8422_2325),
        hash(0x8422_2325_cbf2_9ce4)
    )
}

impl ServerConfig {
    /// Reads `path` (if any) and applies `overrides`, then validates. Returns the config and
    /// the keys it does not use, for the caller to warn about; a key that promises what Sluice
    /// does not do (TLS, SASL, ACLs) is an error.
    pub fn load(
        path: Option<&Path>,
        overrides: &[(String, String)],
    ) -> Result<(ServerConfig, Vec<registry::UnservedKey>), String> {
        let mut properties = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("reading {}: {e}", path.display()))?;
                parse_properties(&text).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => BTreeMap::new(),
        };
        for (key, value) in overrides {
            properties.insert(key.clone(), value.clone());
        }
        // The embedded single-node default (no config file, one voter): one broker holds the
        // offsets topic, and a group's first rebalance does not wait for more members. A
        // cluster of several voters started with overrides alone keeps Kafka's defaults.
        let voters = properties
            .get("controller.quorum.voters")
            .map_or(1, |v| v.split(',').filter(|s| !s.trim().is_empty()).count());
        if path.is_none() && voters <= 1 {
            for (key, value) in EMBEDDED_DEFAULTS {
                properties
                    .entry((*key).to_owned())
                    .or_insert_with(|| (*value).to_owned());
            }
        }
        let unserved = registry::check_unserved_keys(&properties).map_err(|e| e.to_string())?;
        let config = ServerConfig::from_properties(&properties).map_err(|e| e.to_string())?;
        Ok((config, unserved))
    }

    pub fn from_properties(
        properties: &BTreeMap<String, String>,
    ) -> Result<ServerConfig, ConfigError> {
        let get = |key: &str| properties.get(key).map(String::as_str);
        // Typed values come from the registry: its type, range and default for `key`.
        let value = |key: &str| -> Result<registry::Value, ConfigError> {
            let declared = registry::broker_key(key)
                .ok_or_else(|| ConfigError::new(key, "", "not declared in the config registry"))?;
            match registry::broker_value(properties, key)? {
                Some(value) => declared.parse_as(key, &value),
                None => declared.parse_as(key, declared.default),
            }
        };
        let number = |key: &str| value(key).map(|v| v.as_i64());
        let unsigned = |key: &str| number(key).map(|n| n.max(0) as u64);
        let boolean = |key: &str| value(key).map(|v| v.as_bool());
        let default = |key: &str| registry::broker_key(key).map_or("", |k| k.default);
        let node_id = match (get("node.id"), get("broker.id")) {
            (None, Some(_)) => unsigned("broker.id")?,
            _ => unsigned("node.id")?,
        };
        let roles_text = get("process.roles").unwrap_or(default("process.roles"));
        let mut roles = Roles {
            broker: false,
            controller: false,
        };
        for role in roles_text.split(',').map(str::trim) {
            match role {
                "broker" => roles.broker = true,
                "controller" => roles.controller = true,
                _ => {
                    return Err(ConfigError::new(
                        "process.roles",
                        roles_text,
                        "expected broker, controller or both",
                    ));
                }
            }
        }
        let controller_listener_name = get("controller.listener.names")
            .unwrap_or(default("controller.listener.names"))
            .trim()
            .to_ascii_uppercase();
        let listeners_text = get("listeners").unwrap_or(default("listeners"));
        let listeners = parse_listeners("listeners", listeners_text)?;
        if !listeners.iter().any(|l| l.name == controller_listener_name) {
            return Err(ConfigError::new(
                "listeners",
                listeners_text,
                format!("no {controller_listener_name} listener (the quorum's internal listener)"),
            ));
        }
        if roles.broker && !listeners.iter().any(|l| l.name != controller_listener_name) {
            return Err(ConfigError::new(
                "listeners",
                listeners_text,
                "a broker needs a client listener besides the controller one",
            ));
        }
        let security = security::parse(
            properties,
            &listeners,
            &controller_listener_name,
            roles.broker,
        )?;
        let advertised_listeners = match get("advertised.listeners") {
            Some(value) => parse_listeners("advertised.listeners", value)?,
            None => listeners.clone(),
        };
        check_advertised_listeners(
            properties,
            &listeners,
            &advertised_listeners,
            &controller_listener_name,
        )?;
        let controller = listeners
            .iter()
            .find(|l| l.name == controller_listener_name)
            .expect("checked above");
        let default_voters = format!(
            "{node_id}@{}:{}",
            if controller.host.is_empty() {
                "127.0.0.1"
            } else {
                &controller.host
            },
            controller.port
        );
        let voters = parse_voters(get("controller.quorum.voters").unwrap_or(&default_voters))?;
        if roles.controller && !voters.iter().any(|v| v.node_id == node_id) {
            return Err(ConfigError::new(
                "process.roles",
                roles_text,
                format!(
                    "node {node_id} has the controller role but is not in controller.quorum.voters"
                ),
            ));
        }
        let log_dirs: Vec<PathBuf> = get("log.dirs")
            .or(get("log.dir"))
            .unwrap_or(default("log.dirs"))
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect();
        if log_dirs.is_empty() {
            return Err(ConfigError::new(
                "log.dirs",
                get("log.dirs").unwrap_or(""),
                "no directory",
            ));
        }
        let metadata_log_dir = get("metadata.log.dir")
            .map(PathBuf::from)
            .unwrap_or_else(|| log_dirs[0].clone());
        let http_text = get("http.listener").unwrap_or(default("http.listener"));
        let http_listener = http_text
            .parse()
            .map_err(|_| ConfigError::new("http.listener", http_text, "expected host:port"))?;
        let cluster_id = get("cluster.id")
            .map(str::to_owned)
            .unwrap_or_else(|| derived_cluster_id(&voters));
        let log = LogConfig::from_broker_properties(properties)?;
        let config = ServerConfig {
            node_id,
            roles,
            listeners,
            advertised_listeners,
            controller_listener_name,
            security,
            voters,
            cluster_id,
            log_dirs: log_dirs.clone(),
            metadata_log_dir,
            http_listener,
            broker_rack: get("broker.rack").map(str::to_owned),
            replica_selector: {
                let key = "replica.selector.class";
                let class = get(key).unwrap_or_default();
                crate::replica::read_replica::ReplicaSelector::from_class_name(class).ok_or_else(
                    || ConfigError::new(key, class, "a replica selector Sluice does not have"),
                )?
            },
            max_broker_partitions: u32::try_from(number("max.broker.partitions")?).ok(),
            num_partitions: number("num.partitions")? as i32,
            default_replication_factor: number("default.replication.factor")? as i16,
            min_insync_replicas: number("min.insync.replicas")? as i32,
            auto_create_topics_enable: boolean("auto.create.topics.enable")?,
            unclean_leader_election_enable: boolean("unclean.leader.election.enable")?,
            socket_request_max_bytes: unsigned("socket.request.max.bytes")? as usize,
            max_connections: unsigned("max.connections")? as usize,
            max_connections_per_ip: unsigned("max.connections.per.ip")? as usize,
            max_connections_per_ip_overrides: {
                let key = "max.connections.per.ip.overrides";
                let text = get(key).unwrap_or_default();
                crate::server::quotas::parse_overrides(text)
                    .map_err(|reason| ConfigError::new(key, text, reason))?
            },
            max_connection_creation_rate: unsigned("max.connection.creation.rate")?,
            listener_connection_creation_rates: listener_creation_rates(properties)?,
            quota_windows: crate::broker::client_quotas::QuotaWindows {
                samples: unsigned("quota.window.num")? as u32,
                window_ms: unsigned("quota.window.size.seconds")? * 1000,
            },
            queued_max_requests: unsigned("queued.max.requests")? as usize,
            thread_affinity: boolean("thread.affinity")?,
            metrics_partition_enable: boolean("metrics.partition.enable")?,
            http_console_actions_enable: boolean("http.console.actions.enable")?,
            connections_max_idle_ms: unsigned("connections.max.idle.ms")?,
            replica_lag_time_max_ms: unsigned("replica.lag.time.max.ms")?,
            replica_silence_max_ms: unsigned("replica.silence.max.ms")?,
            replica_fetch_max_bytes: number("replica.fetch.max.bytes")? as i32,
            replica_fetch_response_max_bytes: number("replica.fetch.response.max.bytes")? as i32,
            replica_fetch_wait_max_ms: number("replica.fetch.wait.max.ms")? as i32,
            replica_fetch_backoff_ms: unsigned("replica.fetch.backoff.ms")?,
            controlled_shutdown_enable: boolean("controlled.shutdown.enable")?,
            auto_leader_rebalance_enable: boolean("auto.leader.rebalance.enable")?,
            leader_imbalance_check_interval_seconds: unsigned(
                "leader.imbalance.check.interval.seconds",
            )?,
            leader_imbalance_per_broker_percentage: unsigned(
                "leader.imbalance.per.broker.percentage",
            )? as u32,
            controlled_shutdown_max_retries: unsigned("controlled.shutdown.max.retries")? as u32,
            controlled_shutdown_retry_backoff_ms: unsigned("controlled.shutdown.retry.backoff.ms")?,
            broker_session_timeout_ms: unsigned("broker.session.timeout.ms")?,
            broker_heartbeat_interval_ms: unsigned("broker.heartbeat.interval.ms")?,
            broker_liveness_probe_timeout_ms: unsigned("broker.liveness.probe.timeout.ms")?,
            quorum_election_timeout_ms: unsigned("controller.quorum.election.timeout.ms")?,
            log_manager: LogManagerConfig {
                log_dirs,
                default_log_config: log,
                cleaner_enable: boolean("log.cleaner.enable")?,
                cleaner_dedupe_buffer_bytes: unsigned("log.cleaner.dedupe.buffer.size")? as usize,
                cleaner_backoff_ms: unsigned("log.cleaner.backoff.ms")?,
                retention_check_interval_ms: unsigned("log.retention.check.interval.ms")?,
                flush_scheduler_interval_ms: unsigned("log.flush.scheduler.interval.ms")?,
                checkpoint_interval_ms: unsigned("log.flush.offset.checkpoint.interval.ms")?,
            },
            groups: crate::group::GroupConfig {
                offsets_topic_num_partitions: number("offsets.topic.num.partitions")? as i32,
                offsets_topic_replication_factor: number("offsets.topic.replication.factor")?
                    as i16,
                offsets_topic_segment_bytes: number("offsets.topic.segment.bytes")?,
                offsets_retention_ms: unsigned("offsets.retention.minutes")? * 60_000,
                offsets_retention_check_interval_ms: unsigned(
                    "offsets.retention.check.interval.ms",
                )?,
                offsets_commit_timeout_ms: unsigned("offsets.commit.timeout.ms")?,
                offset_metadata_max_bytes: unsigned("offset.metadata.max.bytes")? as usize,
                initial_rebalance_delay_ms: unsigned("group.initial.rebalance.delay.ms")?,
                min_session_timeout_ms: unsigned("group.min.session.timeout.ms")?,
                max_session_timeout_ms: unsigned("group.max.session.timeout.ms")?,
                max_size: unsigned("group.max.size")? as usize,
                consumer_session_timeout_ms: unsigned("group.consumer.session.timeout.ms")?,
                consumer_heartbeat_interval_ms: unsigned("group.consumer.heartbeat.interval.ms")?,
                consumer_max_size: unsigned("group.consumer.max.size")? as usize,
                consumer_protocol_enabled: get("group.coordinator.rebalance.protocols")
                    .unwrap_or("classic,consumer")
                    .split(',')
                    .any(|p| p.trim() == "consumer"),
            },
            transactions: crate::txn::TxnConfig {
                state_log_num_partitions: number("transaction.state.log.num.partitions")? as i32,
                state_log_replication_factor: number("transaction.state.log.replication.factor")?
                    as i16,
                state_log_min_isr: number("transaction.state.log.min.isr")? as i16,
                state_log_segment_bytes: number("transaction.state.log.segment.bytes")?,
                max_timeout_ms: unsigned("transaction.max.timeout.ms")?,
                id_expiration_ms: unsigned("transactional.id.expiration.ms")?,
                partition_verification: boolean("transaction.partition.verification.enable")?,
            },
            properties: properties.clone(),
        };
        if config.broker_heartbeat_interval_ms >= config.broker_session_timeout_ms {
            return Err(ConfigError::new(
                "broker.heartbeat.interval.ms",
                &config.broker_heartbeat_interval_ms.to_string(),
                "must be smaller than broker.session.timeout.ms",
            ));
        }
        if config.replica_silence_max_ms <= config.replica_fetch_wait_max_ms.max(0) as u64 {
            return Err(ConfigError::new(
                "replica.silence.max.ms",
                &config.replica_silence_max_ms.to_string(),
                "must exceed replica.fetch.wait.max.ms: a follower waiting for records that \
                 long would look silent",
            ));
        }
        Ok(config)
    }

    /// The quorum's internal listener.
    pub fn controller_listener(&self) -> &Listener {
        self.listeners
            .iter()
            .find(|l| l.name == self.controller_listener_name)
            .expect("validated at load")
    }

    /// The most partition replicas this broker hosts: `max.broker.partitions`, or by default
    /// one per `PARTITION_MEMORY_BYTES` of the memory it may use. Also says where the figure
    /// comes from, for the start-up log.
    pub fn partitions_max(&self) -> (u32, String) {
        if let Some(max) = self.max_broker_partitions {
            return (max, "max.broker.partitions".to_owned());
        }
        match usable_memory_bytes() {
            Some(memory) => {
                let max = u32::try_from(memory / PARTITION_MEMORY_BYTES).unwrap_or(u32::MAX);
                (
                    max,
                    format!(
                        "{} MiB of memory at {} KiB per partition replica",
                        memory >> 20,
                        PARTITION_MEMORY_BYTES >> 10
                    ),
                )
            }
            None => (u32::MAX, "memory unknown: no limit".to_owned()),
        }
    }
}

/// The memory budgeted per hosted partition replica when `max.broker.partitions` is -1.
/// An idle partition costs about 8 KiB (50,000 partitions in 381 MiB of RSS); the rest is
/// room for active segment indexes, fetch buffers and producer state of busy partitions.
pub const PARTITION_MEMORY_BYTES: u64 = 256 << 10;

/// Physical memory, or the cgroup (v2, then v1) limit where that is smaller.
fn usable_memory_bytes() -> Option<u64> {
    let physical = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .map(|kib| kib << 10)
        });
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| {
        std::fs::read_to_string(path)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    });
    match (physical, cgroup) {
        (Some(physical), Some(cgroup)) => Some(physical.min(cgroup)),
        (physical, cgroup) => physical.or(cgroup),
    }
}

/// `listener.name.<listener>.max.connection.creation.rate`, by listener.
fn listener_creation_rates(
    properties: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, u64>, ConfigError> {
    let mut rates = BTreeMap::new();
    for (key, value) in properties {
        let Some(listener) = key
            .strip_prefix("listener.name.")
            .and_then(|rest| rest.strip_suffix(".max.connection.creation.rate"))
        else {
            continue;
        };
        let rate = value.trim().parse::<u64>().map_err(|_| {
            ConfigError::new(key, value, "expected a count of connections a second")
        })?;
        rates.insert(listener.to_ascii_uppercase(), rate);
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<ServerConfig, ConfigError> {
        ServerConfig::from_properties(&parse_properties(text).unwrap())
    }

    #[test]
    fn no_config_is_a_single_node_cluster_on_the_default_ports() {
        let config = load("").unwrap();
        assert_eq!(config.node_id, 1);
        assert!(config.roles.broker && config.roles.controller);
        assert_eq!(
            config.voters,
            vec![Voter {
                node_id: 1,
                host: "127.0.0.1".into(),
                port: 9093
            }]
        );
        assert_eq!(
            config.listeners[0],
            Listener {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092
            }
        );
        assert_eq!(config.log_dirs, vec![PathBuf::from("./data")]);
        assert_eq!(config.metadata_log_dir, PathBuf::from("./data"));
        assert_eq!(config.http_listener.to_string(), "127.0.0.1:9644");
    }

    #[test]
    fn three_node_quorum_config_parses() {
        let text = "# node 2\nnode.id=2\nlisteners=PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093\n\
            controller.quorum.voters=1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093\n\
            log.dirs=./data/node-2\nlog.retention.hours=1\nmin.insync.replicas = 2\n";
        let config = load(text).unwrap();
        assert_eq!(config.node_id, 2);
        assert_eq!(config.voters.len(), 3);
        assert_eq!(config.controller_listener().port, 29093);
        assert_eq!(
            config.log_manager.default_log_config.retention_ms,
            3_600_000
        );
        assert_eq!(config.min_insync_replicas, 2);
        let other = load(
            &text
                .replace("node.id=2", "node.id=3")
                .replace("29093,CONTROLLER", "39093,CONTROLLER"),
        )
        .unwrap();
        assert_eq!(
            config.cluster_id, other.cluster_id,
            "same voters, same cluster id"
        );
        let foreign = load(&text.replace("3@127.0.0.1:39093", "4@127.0.0.1:49093")).unwrap();
        assert_ne!(config.cluster_id, foreign.cluster_id);
    }

    #[test]
    fn invalid_values_name_their_key() {
        for (text, key) in [
            ("node.id=x", "node.id"),
            ("listeners=PLAINTEXT://127.0.0.1:9092", "listeners"),
            (
                "listeners=PLAINTEXT//127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "listeners",
            ),
            (
                "controller.quorum.voters=1@127.0.0.1",
                "controller.quorum.voters",
            ),
            (
                "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9093",
                "controller.quorum.voters",
            ),
            ("controller.quorum.voters=2@127.0.0.1:9093", "process.roles"),
            ("auto.create.topics.enable=yes", "auto.create.topics.enable"),
            ("num.partitions=0", "num.partitions"),
            ("log.segment.bytes=12", "log.segment.bytes"),
            (
                "broker.heartbeat.interval.ms=10000",
                "broker.heartbeat.interval.ms",
            ),
            ("http.listener=nowhere", "http.listener"),
            (
                "replica.selector.class=com.example.NearestSelector",
                "replica.selector.class",
            ),
            ("replica.silence.max.ms=500", "replica.silence.max.ms"),
        ] {
            let error = load(text).unwrap_err();
            assert_eq!(error.key, key, "{text}: {error}");
        }
    }

    #[test]
    fn kafkas_replica_selectors_are_served() {
        use crate::replica::read_replica::ReplicaSelector;
        assert_eq!(load("").unwrap().replica_selector, ReplicaSelector::Leader);
        let rack_aware = "replica.selector.class=\
            org.apache.kafka.common.replica.RackAwareReplicaSelector";
        assert_eq!(
            load(rack_aware).unwrap().replica_selector,
            ReplicaSelector::RackAware
        );
        let leader = "replica.selector.class=org.apache.kafka.common.replica.LeaderSelector";
        assert_eq!(
            load(leader).unwrap().replica_selector,
            ReplicaSelector::Leader
        );
    }

    #[test]
    fn unknown_keys_are_reported_and_overrides_win() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.properties");
        std::fs::write(&path, "num.partitions=3\nno.such.key=1\n").unwrap();
        let overrides = vec![("num.partitions".to_owned(), "5".to_owned())];
        let (config, unknown) = ServerConfig::load(Some(&path), &overrides).unwrap();
        assert_eq!(config.num_partitions, 5);
        assert_eq!(
            unknown,
            vec![registry::UnservedKey::Unknown("no.such.key".to_owned())]
        );
    }

    fn load_with(overrides: &[(&str, &str)]) -> Result<Vec<registry::UnservedKey>, String> {
        let overrides: Vec<(String, String)> = overrides
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ServerConfig::load(None, &overrides).map(|(_, unserved)| unserved)
    }

    #[test]
    fn a_listener_that_promises_security_stops_the_start() {
        let error = load_with(&[(
            "listeners",
            "SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        )])
        .unwrap_err();
        assert!(error.contains("for ssl.keystore.location"), "{error}");
        assert!(
            error.contains("TLS listener without a certificate"),
            "{error}"
        );
        // A listener of any name mapped to TLS needs its certificate as well; mapped to
        // PLAINTEXT it serves.
        let listeners = (
            "listeners",
            "CLIENT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        );
        let error = load_with(&[
            listeners,
            (
                "listener.security.protocol.map",
                "CLIENT:SSL,CONTROLLER:PLAINTEXT",
            ),
        ])
        .unwrap_err();
        assert!(
            error.contains("listener CLIENT is a TLS listener without a certificate"),
            "{error}"
        );
        load_with(&[
            listeners,
            (
                "listener.security.protocol.map",
                "CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            ),
        ])
        .unwrap();
        // As in Kafka, a listener with no protocol is an error, not a guess.
        let error = load_with(&[listeners]).unwrap_err();
        assert!(
            error.contains("no security protocol for listener CLIENT"),
            "{error}"
        );
        let error = load_with(&[
            listeners,
            ("listener.security.protocol.map", "CLIENT:PLAINTEXT"),
        ])
        .unwrap_err();
        assert!(error.contains("listener CONTROLLER"), "{error}");
    }

    #[test]
    fn listener_names_are_upper_case_as_in_kafka() {
        load_with(&[
            (
                "listeners",
                "plaintext://127.0.0.1:9092,controller://127.0.0.1:9093",
            ),
            ("inter.broker.listener.name", "plaintext"),
            ("security.inter.broker.protocol", "plaintext"),
        ])
        .unwrap();
        let (config, _) = ServerConfig::load(
            None,
            &[(
                "listeners".to_owned(),
                "plaintext://127.0.0.1:9092,controller://127.0.0.1:9093".to_owned(),
            )],
        )
        .unwrap();
        assert_eq!(config.listeners[0].name, "PLAINTEXT");
        assert_eq!(config.controller_listener().port, 9093);
    }

    #[test]
    fn listeners_that_would_not_be_served_stop_the_start() {
        let error = load_with(&[(
            "listeners",
            "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,SSL://127.0.0.1:9094",
        )])
        .unwrap_err();
        assert!(
            error.contains("TLS listener without a certificate"),
            "{error}"
        );
        // Several Kafka listeners are served; brokers talk on the first PLAINTEXT one unless
        // inter.broker.listener.name says otherwise.
        let two = [
            (
                "listeners".to_owned(),
                "EXTERNAL://127.0.0.1:9094,PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
                    .to_owned(),
            ),
            (
                "listener.security.protocol.map".to_owned(),
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,EXTERNAL:PLAINTEXT".to_owned(),
            ),
        ];
        let (config, _) = ServerConfig::load(None, &two).unwrap();
        assert_eq!(config.security.inter_broker_listener, "EXTERNAL");
        let mut named = two.to_vec();
        named.push((
            "inter.broker.listener.name".to_owned(),
            "plaintext".to_owned(),
        ));
        let (config, _) = ServerConfig::load(None, &named).unwrap();
        assert_eq!(config.security.inter_broker_listener, "PLAINTEXT");
        let error =
            load_with(&[("advertised.listeners", "EXTERNAL://example.com:9092")]).unwrap_err();
        assert!(
            error.contains("EXTERNAL is advertised but not in listeners"),
            "{error}"
        );
        let error = load_with(&[("inter.broker.listener.name", "INTERNAL")]).unwrap_err();
        assert!(error.contains("inter.broker.listener.name"), "{error}");
        load_with(&[("inter.broker.listener.name", "PLAINTEXT")]).unwrap();
    }

    #[test]
    fn security_keys_stop_the_start_and_other_kafka_keys_warn() {
        for (key, value, why) in [
            (
                "ssl.keystore.location",
                "/etc/kafka/keystore.jks",
                "no listener of this node is SSL",
            ),
            ("sasl.kerberos.service.name", "kafka", "not implemented"),
            (
                "listener.name.plaintext.ssl.keystore.location",
                "x",
                "not a TLS listener",
            ),
            ("ssl.engine.factory.class", "x", "not implemented"),
            (
                "security.inter.broker.protocol",
                "SSL",
                "no listener of this broker is SSL",
            ),
        ] {
            let error = load_with(&[(key, value)]).unwrap_err();
            assert!(error.contains(&format!("for {key}:")), "{key}: {error}");
            assert!(error.contains(why), "{key}: {error}");
        }
        // Values that ask for nothing Sluice lacks are accepted.
        for (key, value) in [
            ("authorizer.class.name", ""),
            (
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            ),
            ("security.inter.broker.protocol", "PLAINTEXT"),
        ] {
            assert_eq!(load_with(&[(key, value)]).unwrap(), vec![], "{key}={value}");
        }
        // Kafka's own KRaft server.properties: known keys Sluice does not use are warned
        // about with what Sluice does instead; nothing stops the start.
        let unserved = load_with(&[
            ("num.network.threads", "3"),
            ("num.io.threads", "8"),
            ("socket.send.buffer.bytes", "102400"),
            // Served since transactions exist: no warning.
            ("transaction.state.log.replication.factor", "1"),
            ("log.dir.typo", "x"),
        ])
        .unwrap();
        let text: Vec<String> = unserved.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 4, "{text:?}");
        assert!(
            text.iter().any(|t| t
                .contains("num.io.threads is a Kafka key Sluice does not implement (no effect)")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t == "unknown configuration key log.dir.typo (ignored)"),
            "{text:?}"
        );
    }
}

#[cfg(test)]
mod shipped_configs {
    use super::*;

    /// The files in config/ load without errors or unknown keys.
    #[test]
    fn shipped_config_files_are_valid() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        for name in [
            "server.properties",
            "node-1.properties",
            "node-2.properties",
            "node-3.properties",
        ] {
            let (config, unknown) = ServerConfig::load(Some(&root.join(name)), &[]).unwrap();
            assert!(unknown.is_empty(), "{name}: unknown keys {unknown:?}");
            assert!(config.roles.controller);
        }
    }

    #[test]
    fn the_embedded_defaults_apply_to_a_single_node_only() {
        let (single, _) = ServerConfig::load(None, &[]).unwrap();
        assert_eq!(single.groups.offsets_topic_replication_factor, 1);
        assert_eq!(single.groups.initial_rebalance_delay_ms, 0);
        let overrides = vec![(
            "controller.quorum.voters".to_owned(),
            "1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093".to_owned(),
        )];
        let (cluster, _) = ServerConfig::load(None, &overrides).unwrap();
        assert_eq!(cluster.groups.offsets_topic_replication_factor, 3);
        assert_eq!(cluster.groups.initial_rebalance_delay_ms, 3000);
        // An explicit value wins over the embedded default.
        let overrides = vec![(
            "group.initial.rebalance.delay.ms".to_owned(),
            "500".to_owned(),
        )];
        let (explicit, _) = ServerConfig::load(None, &overrides).unwrap();
        assert_eq!(explicit.groups.initial_rebalance_delay_ms, 500);
    }
}
