//! `sluice connect`: a Kafka Connect worker built on the SDK. It serves Connect's REST API,
//! runs the built-in connectors (`plugins`), and keeps its state where a distributed Kafka
//! Connect cluster keeps it, with Kafka's names and record formats: connector and task configs
//! in `config.storage.topic`, source offsets in `offset.storage.topic`, statuses in
//! `status.storage.topic`, sink positions in each connector's consumer group `connect-<name>`.
//! Workers of one `group.id` share the connectors and tasks through a group of protocol type
//! `connect` (Kafka's eager protocol, `ConnectProtocol` v0 encodings).
//!
//! ```text
//! mod.rs      the worker's settings, errors, start-up
//! rest.rs     the REST API (Connect's paths and JSON shapes, errors as {error_code, message})
//! herder.rs   membership and what runs here: joins the group, assigns as leader, starts and
//!             stops connectors and tasks, writes task configs and statuses
//! tasks.rs    a source task (file -> producer, offsets after acknowledgement) and a sink task
//!             (consumer -> file or topic, commits after the write)
//! store.rs    the three internal topics, each read by a tail into memory
//! member.rs   the group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup; the encodings
//! plugins.rs  the connectors and their settings
//! data.rs     converters
//! ```

pub mod data;
mod herder;
mod member;
pub mod plugins;
mod rest;
pub(crate) mod store;
mod tasks;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::client::{ClientConfig, Error as ClientError};

pub use data::{Converter, Data};

/// A Connect failure, answered with Connect's status codes by the REST API.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// 400: the request or a config is wrong.
    #[error("{0}")]
    BadRequest(String),
    /// 404: no such connector or task.
    #[error("{0}")]
    NotFound(String),
    /// 409: it exists already, or a rebalance is under way.
    #[error("{0}")]
    Conflict(String),
    /// A record that cannot be converted or written (fails its task).
    #[error("{0}")]
    Data(String),
    /// The cluster refused or did not answer.
    #[error(transparent)]
    Kafka(#[from] ClientError),
    /// A file.
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    /// 405: the path exists, with other methods.
    #[error("HTTP 405 Method Not Allowed")]
    MethodNotAllowed,
    /// Waited too long (500, as Connect answers a request that timed out).
    #[error("{0}")]
    Timeout(String),
}

impl ConnectError {
    /// A failure that goes away by itself (a coordinator loading, a leader moving).
    pub fn is_retriable(&self) -> bool {
        matches!(self, ConnectError::Kafka(error) if error.is_retriable())
    }

    pub fn status(&self) -> u16 {
        match self {
            ConnectError::BadRequest(_) => 400,
            ConnectError::NotFound(_) => 404,
            ConnectError::Conflict(_) => 409,
            ConnectError::MethodNotAllowed => 405,
            ConnectError::Data(_)
            | ConnectError::Kafka(_)
            | ConnectError::Io { .. }
            | ConnectError::Timeout(_) => 500,
        }
    }
}

/// Worker keys this worker reads; others are passed to its clients when they are client keys
/// (`security.protocol`, `sasl.*`, `ssl.*`, or prefixed `producer.`, `consumer.`, `admin.`)
/// and warned about otherwise, as Kafka Connect does.
const WORKER_KEYS: &[&str] = &[
    "bootstrap.servers",
    "group.id",
    "config.storage.topic",
    "offset.storage.topic",
    "status.storage.topic",
    "config.storage.replication.factor",
    "offset.storage.replication.factor",
    "status.storage.replication.factor",
    "offset.storage.partitions",
    "status.storage.partitions",
    "key.converter",
    "value.converter",
    "key.converter.schemas.enable",
    "value.converter.schemas.enable",
    "listeners",
    "rest.advertised.host.name",
    "rest.advertised.port",
    "offset.flush.interval.ms",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "rebalance.timeout.ms",
    "plugin.path",
    "connect.protocol",
    "exactly.once.source.support",
    "client.id",
    "offset.storage.file.filename",
];

/// The worker's settings (Kafka Connect's worker keys).
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub bootstrap_servers: String,
    pub group_id: String,
    pub config_topic: String,
    pub offset_topic: String,
    pub status_topic: String,
    pub config_replication_factor: i16,
    pub offset_replication_factor: i16,
    pub status_replication_factor: i16,
    pub offset_partitions: i32,
    pub status_partitions: i32,
    pub key_converter: Converter,
    pub value_converter: Converter,
    /// The REST listener's `host:port`.
    pub listener: String,
    /// This worker's id in statuses and in the group (`host:port` of its REST API).
    pub worker_id: String,
    /// The longest a task's offsets wait to be written after their records are
    /// acknowledged; 0 (Sluice's default) writes them after every acknowledged batch.
    pub offset_flush_interval: Duration,
    /// `exactly.once.source.support=enabled`: each source task writes its records and its
    /// offsets in one transaction (KIP-618).
    pub exactly_once_source: bool,
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub rebalance_timeout: Duration,
    /// A standalone worker's offsets file (`offset.storage.file.filename`): no group, configs
    /// and statuses in memory, connectors from the command line and the REST API.
    pub offset_file: Option<std::path::PathBuf>,
    /// Client settings for every client the worker makes (security), before prefixes.
    pub client: BTreeMap<String, String>,
    pub producer: BTreeMap<String, String>,
    pub consumer: BTreeMap<String, String>,
    pub admin: BTreeMap<String, String>,
}

fn is_client_key(key: &str) -> bool {
    key == "security.protocol" || key.starts_with("sasl.") || key.starts_with("ssl.")
}

impl WorkerConfig {
    /// The worker a properties file (or nothing: the defaults of Kafka's
    /// `connect-distributed.properties` against 127.0.0.1:9092) describes.
    pub fn from_properties(
        properties: &BTreeMap<String, String>,
        standalone: bool,
    ) -> Result<WorkerConfig, ConnectError> {
        let get = |key: &str| properties.get(key).map(|v| v.trim().to_owned());
        let number = |key: &str, default: i64, min: i64, max: i64| -> Result<i64, ConnectError> {
            match get(key) {
                None => Ok(default),
                Some(value) => match value.parse::<i64>() {
                    Ok(n) if (min..=max).contains(&n) => Ok(n),
                    _ => Err(ConnectError::BadRequest(format!(
                        "Invalid value {value} for configuration {key}: expected a whole number from {min} to {max}"
                    ))),
                },
            }
        };
        let replication = |key: &str| -> Result<i16, ConnectError> {
            let n = number(key, -1, -1, i16::MAX as i64)?;
            if n == 0 {
                return Err(ConnectError::BadRequest(format!(
                    "Invalid value 0 for configuration {key}: must be -1 (the broker's default) or at least 1"
                )));
            }
            Ok(n as i16)
        };
        let exactly_once_source = match get("exactly.once.source.support").as_deref() {
            None | Some("disabled") => false,
            Some("enabled") if standalone => {
                return Err(ConnectError::BadRequest(
                    "exactly.once.source.support=enabled: exactly-once source connectors \
                     (KIP-618) run on distributed workers only, as in Kafka Connect; run sluice \
                     connect without --standalone"
                        .to_owned(),
                ));
            }
            Some("enabled") => true,
            Some(value) => {
                return Err(ConnectError::BadRequest(format!(
                    "exactly.once.source.support={value}: sluice connect takes enabled or \
                     disabled (preparing, the rolling-upgrade step in which workers fence each \
                     other without running tasks exactly once, is not implemented)"
                )));
            }
        };
        if let Some(value) = get("connect.protocol")
            && value != "eager"
        {
            return Err(ConnectError::BadRequest(format!(
                "connect.protocol={value}: sluice connect runs eager rebalances only (incremental \
                 cooperative rebalancing and request signing are not implemented); set \
                 connect.protocol=eager or leave it unset"
            )));
        }
        let offset_file = get("offset.storage.file.filename").filter(|f| !f.is_empty());
        match (standalone, &offset_file) {
            (true, None) => {
                return Err(ConnectError::BadRequest(
                    "a standalone worker keeps its offsets in a file: set offset.storage.file.filename".to_owned(),
                ));
            }
            (false, Some(file)) => {
                return Err(ConnectError::BadRequest(format!(
                    "offset.storage.file.filename={file} is a standalone worker's setting: run \
                     sluice connect --standalone (a distributed worker keeps offsets in \
                     offset.storage.topic)"
                )));
            }
            _ => {}
        }
        let mut converters = BTreeMap::new();
        for prefix in ["key.converter", "value.converter"] {
            let mut scoped = properties.clone();
            scoped
                .entry(prefix.to_owned())
                .or_insert_with(|| "org.apache.kafka.connect.json.JsonConverter".to_owned());
            let converter = Converter::from_config(&scoped, prefix)?.unwrap_or(Converter::Json {
                schemas_enable: true,
            });
            converters.insert(prefix, converter);
        }
        let listener = match get("listeners") {
            None => "127.0.0.1:8083".to_owned(),
            Some(list) => {
                let first = list.split(',').next().unwrap_or_default().trim().to_owned();
                let Some(address) = first.strip_prefix("http://") else {
                    return Err(ConnectError::BadRequest(format!(
                        "listeners={list}: sluice connect serves its REST API over http:// only \
                         (https listeners are not implemented)"
                    )));
                };
                if list.contains(',') {
                    return Err(ConnectError::BadRequest(format!(
                        "listeners={list}: sluice connect serves one REST listener"
                    )));
                }
                // Kafka's `http://:8083` binds every interface; Sluice binds loopback unless
                // told a host.
                if let Some(port) = address.strip_prefix(':') {
                    format!("127.0.0.1:{port}")
                } else {
                    address.to_owned()
                }
            }
        };
        let (host, port) = listener
            .rsplit_once(':')
            .unwrap_or((listener.as_str(), "8083"));
        let worker_id = format!(
            "{}:{}",
            get("rest.advertised.host.name").unwrap_or_else(|| host.to_owned()),
            get("rest.advertised.port").unwrap_or_else(|| port.to_owned())
        );
        let mut client = BTreeMap::new();
        let mut producer = BTreeMap::new();
        let mut consumer = BTreeMap::new();
        let mut admin = BTreeMap::new();
        for (key, value) in properties {
            if let Some(rest) = key.strip_prefix("producer.") {
                producer.insert(rest.to_owned(), value.clone());
            } else if let Some(rest) = key.strip_prefix("consumer.") {
                consumer.insert(rest.to_owned(), value.clone());
            } else if let Some(rest) = key.strip_prefix("admin.") {
                admin.insert(rest.to_owned(), value.clone());
            } else if is_client_key(key) {
                client.insert(key.clone(), value.clone());
            } else if !WORKER_KEYS.contains(&key.as_str())
                && !key.starts_with("key.converter.")
                && !key.starts_with("value.converter.")
            {
                tracing::warn!(key = %key, "the worker configuration {key} was supplied but isn't a known config");
            }
        }
        if let Some(path) = get("plugin.path") {
            tracing::info!(
                plugin_path = %path,
                "plugin.path is not searched: sluice connect runs its built-in connectors ({})",
                plugins::Plugin::ALL.map(|p| p.class()).join(", ")
            );
        }
        Ok(WorkerConfig {
            bootstrap_servers: get("bootstrap.servers")
                .unwrap_or_else(|| "127.0.0.1:9092".to_owned()),
            group_id: get("group.id").unwrap_or_else(|| "connect-cluster".to_owned()),
            config_topic: get("config.storage.topic")
                .unwrap_or_else(|| "connect-configs".to_owned()),
            offset_topic: get("offset.storage.topic")
                .unwrap_or_else(|| "connect-offsets".to_owned()),
            status_topic: get("status.storage.topic")
                .unwrap_or_else(|| "connect-status".to_owned()),
            config_replication_factor: replication("config.storage.replication.factor")?,
            offset_replication_factor: replication("offset.storage.replication.factor")?,
            status_replication_factor: replication("status.storage.replication.factor")?,
            offset_partitions: number("offset.storage.partitions", 25, 1, 10_000)? as i32,
            status_partitions: number("status.storage.partitions", 5, 1, 10_000)? as i32,
            key_converter: converters["key.converter"],
            value_converter: converters["value.converter"],
            listener,
            worker_id,
            exactly_once_source,
            offset_flush_interval: Duration::from_millis(number(
                "offset.flush.interval.ms",
                0,
                0,
                i32::MAX as i64,
            )? as u64),
            session_timeout: Duration::from_millis(number(
                "session.timeout.ms",
                10_000,
                1,
                i32::MAX as i64,
            )? as u64),
            heartbeat_interval: Duration::from_millis(number(
                "heartbeat.interval.ms",
                3_000,
                1,
                i32::MAX as i64,
            )? as u64),
            rebalance_timeout: Duration::from_millis(number(
                "rebalance.timeout.ms",
                60_000,
                1,
                i32::MAX as i64,
            )? as u64),
            offset_file: offset_file.map(std::path::PathBuf::from),
            client,
            producer,
            consumer,
            admin,
        })
    }

    /// A client config with the worker's bootstrap servers and security settings, then
    /// `extra` (a client kind's prefixed settings) over them.
    pub fn client_config(&self, extra: &BTreeMap<String, String>) -> ClientConfig {
        let mut config = ClientConfig::new(&self.bootstrap_servers);
        for (key, value) in self.client.iter().chain(extra) {
            config.insert(key, value.clone());
        }
        config
    }
}

/// Runs a worker until ctrl-c or SIGTERM: the REST API on `config.listener`, membership in
/// `config.group_id`, and whatever the group gives it.
pub async fn run(config: WorkerConfig) -> Result<(), ConnectError> {
    run_with_connectors(config, Vec::new()).await
}

/// [`run`], after creating or updating `connectors` (connector properties, as
/// connect-standalone.sh reads them from files).
pub async fn run_with_connectors(
    config: WorkerConfig,
    connectors: Vec<BTreeMap<String, String>>,
) -> Result<(), ConnectError> {
    for connector in &connectors {
        let name = connector.get("name").map(String::as_str).unwrap_or("");
        if name.trim().is_empty() {
            return Err(ConnectError::BadRequest(
                "a connector properties file has no name=".to_owned(),
            ));
        }
        plugins::check(connector)?;
    }
    let listener = tokio::net::TcpListener::bind(&config.listener)
        .await
        .map_err(|source| ConnectError::Io {
            what: format!("binding the REST listener {}", config.listener),
            source,
        })?;
    let config = Arc::new(config);
    let worker = herder::Worker::start(Arc::clone(&config)).await?;
    for connector in connectors {
        let name = connector.get("name").cloned().unwrap_or_default();
        rest::put_config(&worker, &name, connector, None).await?;
    }
    tracing::info!(
        listener = %config.listener,
        group = %config.group_id,
        bootstrap = %config.bootstrap_servers,
        "Kafka Connect worker serving its REST API"
    );
    let rest = tokio::spawn(crate::http::serve(
        listener,
        rest::BODY_BYTES_MAX,
        rest::handler(Arc::clone(&worker)),
    ));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| ConnectError::Io {
        what: "installing the SIGTERM handler".to_owned(),
        source,
    })?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("stopping: tasks commit what they wrote, then the worker leaves its group");
    rest.abort();
    worker.shutdown().await;
    Ok(())
}
