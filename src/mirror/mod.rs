//! `sluice mirror`: MirrorMaker 2's model on the SDK, speaking only the Kafka protocol (so
//! either side may be any Kafka-compatible cluster).
//!
//! Topics of the source matching `topics` (and not `topics.exclude`) are created on the target
//! under the replication policy's name (`<source alias>.<topic>` by default, MM2's
//! DefaultReplicationPolicy; the same name with IdentityReplicationPolicy) with the source's
//! partition count and the topic configs it sets; partitions and topics added later follow
//! within `refresh.topics.interval.seconds`. Records keep their partition, key, value, headers
//! and timestamp. Progress is written to the target only after the records it covers were
//! acknowledged there, so a kill -9 loses nothing and repeats at most a batch; with
//! `exactly.once.source.support=enabled` records and their progress are committed to the
//! target in one transaction, so a kill -9 repeats nothing a read_committed reader sees.
//! Offset syncs
//! (upstream offset -> downstream offset) go to the source, and checkpoints of the source's
//! consumer groups (their committed offsets translated) to the target, in MM2's formats
//! (`records.rs`), so a group can move to the target (`sluice groups translate`).

pub mod records;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use regex::Regex;

use crate::client::{
    Admin, ClientConfig, Consumer, ConsumerRecord, NewTopic, Producer, ProducerRecord,
    RESOURCE_TOPIC, TopicPartition,
};
use crate::connect::ConnectError as MirrorError;
use crate::connect::store::{Apply, Tail};
use crate::metrics::exposition::{Exposition, Kind};
use records::{Checkpoint, OffsetSync};

/// Topic configs not copied to the target (they describe the source cluster's own storage,
/// or MM2 leaves them to the target).
const CONFIGS_NOT_COPIED: &[&str] = &[
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
];
/// Offset syncs kept per partition for translation.
const SYNCS_KEPT: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// `<source alias><separator><topic>` (MM2's DefaultReplicationPolicy).
    Prefixed { separator: String },
    /// The same name (IdentityReplicationPolicy).
    Identity,
}

/// A mirror's settings, by MirrorMaker 2's names.
#[derive(Debug, Clone)]
pub struct MirrorConfig {
    pub source_alias: String,
    pub target_alias: String,
    /// Client settings of each side (`bootstrap.servers` and security).
    pub source: BTreeMap<String, String>,
    pub target: BTreeMap<String, String>,
    pub topics: Regex,
    pub topics_exclude: Regex,
    pub groups: Regex,
    pub groups_exclude: Regex,
    pub policy: Policy,
    pub refresh_topics_interval: Duration,
    pub emit_checkpoints_interval: Duration,
    pub offset_lag_max: i64,
    pub sync_topic_configs: bool,
    pub replication_factor: i16,
    /// `/metrics` (replication lag) on this address.
    pub http_listener: String,
    /// `exactly.once.source.support=enabled` (for the target): records and their progress
    /// are committed to the target in one transaction.
    pub exactly_once: bool,
}

/// MM2's lists are comma-separated regexes.
fn list_regex(key: &str, text: &str) -> Result<Regex, MirrorError> {
    let parts: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| format!("(?:{part})"))
        .collect();
    let pattern = if parts.is_empty() {
        "$^".to_owned()
    } else {
        format!("^(?:{})$", parts.join("|"))
    };
    Regex::new(&pattern).map_err(|error| MirrorError::BadRequest(format!("{key}={text}: {error}")))
}

const FLOW_KEYS: &[&str] = &[
    "enabled",
    "topics",
    "topics.exclude",
    "groups",
    "groups.exclude",
    "replication.policy.class",
    "replication.policy.separator",
    "refresh.topics.interval.seconds",
    "emit.checkpoints.interval.seconds",
    "offset.lag.max",
    "sync.topic.configs.enabled",
    "replication.factor",
    "http.listener",
    "exactly.once.source.support",
    "exactly.once.support",
];

/// MM2 settings Sluice does not implement, refused rather than ignored.
const REFUSED: &[(&str, &str)] = &[
    (
        "sync.group.offsets.enabled",
        "set it to false; apply checkpoints with `sluice groups translate --apply`",
    ),
    (
        "offset-syncs.topic.location",
        "the offset-syncs topic lives on the source, MM2's default",
    ),
];

impl MirrorConfig {
    /// From MM2 properties: `clusters`, `<alias>.bootstrap.servers` (and `<alias>.` client
    /// keys), one flow `<source>-><target>.enabled = true`, its settings global or prefixed
    /// with the flow.
    pub fn from_properties(
        properties: &BTreeMap<String, String>,
    ) -> Result<MirrorConfig, MirrorError> {
        let get = |key: &str| properties.get(key).map(|v| v.trim().to_owned());
        let flows: Vec<(String, String)> = properties
            .iter()
            .filter_map(|(key, value)| {
                let flow = key.strip_suffix(".enabled")?;
                let (source, target) = flow.split_once("->")?;
                (value.trim() == "true")
                    .then(|| (source.trim().to_owned(), target.trim().to_owned()))
            })
            .collect();
        let (source_alias, target_alias) = match flows.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(MirrorError::BadRequest(
                    "no flow is enabled: set <source>-><target>.enabled = true (as MirrorMaker 2 does)".to_owned(),
                ));
            }
            _ => {
                return Err(MirrorError::BadRequest(format!(
                    "{} flows are enabled; run one sluice mirror per flow",
                    flows.len()
                )));
            }
        };
        let flow = format!("{source_alias}->{target_alias}.");
        let setting = |key: &str| get(&format!("{flow}{key}")).or_else(|| get(key));
        let clients = |alias: &str| -> BTreeMap<String, String> {
            let prefix = format!("{alias}.");
            properties
                .iter()
                .filter_map(|(key, value)| {
                    let rest = key.strip_prefix(&prefix)?;
                    (!rest.contains("->")).then(|| (rest.to_owned(), value.trim().to_owned()))
                })
                .collect()
        };
        let mut source = clients(&source_alias);
        let mut target = clients(&target_alias);
        // MM2's `<target>.exactly.once.source.support` is the target's setting, not a
        // client's.
        source.remove("exactly.once.source.support");
        let exactly_once = match target
            .remove("exactly.once.source.support")
            .or_else(|| setting("exactly.once.source.support"))
            .as_deref()
        {
            None | Some("disabled") => false,
            Some("enabled") => true,
            Some(value) => {
                return Err(MirrorError::BadRequest(format!(
                    "exactly.once.source.support={value}: sluice mirror takes enabled or disabled"
                )));
            }
        };
        match setting("exactly.once.support").as_deref() {
            None | Some("requested") => {}
            Some("required") if exactly_once => {}
            Some("required") => {
                return Err(MirrorError::BadRequest(format!(
                    "exactly.once.support=required, but exactly-once is not enabled: set \
                     {target_alias}.exactly.once.source.support = enabled"
                )));
            }
            Some(value) => {
                return Err(MirrorError::BadRequest(format!(
                    "exactly.once.support={value}: expected requested or required"
                )));
            }
        }
        for (alias, settings) in [(&source_alias, &source), (&target_alias, &target)] {
            if !settings.contains_key("bootstrap.servers") {
                return Err(MirrorError::BadRequest(format!(
                    "{alias}.bootstrap.servers is not set"
                )));
            }
        }
        for (key, advice) in REFUSED {
            if let Some(value) = setting(key)
                && !matches!(value.as_str(), "false" | "disabled" | "source")
            {
                return Err(MirrorError::BadRequest(format!(
                    "{key}={value} is not implemented by sluice mirror: {advice}"
                )));
            }
        }
        for key in properties.keys() {
            let bare = key.strip_prefix(&flow).unwrap_or(key);
            let known = bare == "clusters"
                || FLOW_KEYS.contains(&bare)
                || REFUSED.iter().any(|(refused, _)| *refused == bare)
                || key.starts_with(&format!("{source_alias}."))
                || key.starts_with(&format!("{target_alias}."))
                || key.ends_with(".enabled");
            if !known {
                tracing::warn!(key = %key, "the mirror configuration {key} was supplied but isn't a known config");
            }
        }
        let seconds = |key: &str, default: u64| -> Result<Duration, MirrorError> {
            match setting(key) {
                None => Ok(Duration::from_secs(default)),
                Some(value) => value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0 && *s < 1e9)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| {
                        MirrorError::BadRequest(format!(
                            "{key}={value}: expected a positive number of seconds"
                        ))
                    }),
            }
        };
        let policy = match setting("replication.policy.class")
            .as_deref()
            .map(|c| c.rsplit('.').next().unwrap_or(c))
        {
            None | Some("DefaultReplicationPolicy") => Policy::Prefixed {
                separator: setting("replication.policy.separator")
                    .unwrap_or_else(|| ".".to_owned()),
            },
            Some("IdentityReplicationPolicy") => Policy::Identity,
            Some(other) => {
                return Err(MirrorError::BadRequest(format!(
                    "replication.policy.class={other}: sluice mirror implements DefaultReplicationPolicy and IdentityReplicationPolicy"
                )));
            }
        };
        let offset_lag_max = match setting("offset.lag.max") {
            None => 100,
            Some(value) => value
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    MirrorError::BadRequest(format!(
                        "offset.lag.max={value}: expected a whole number"
                    ))
                })?,
        };
        let replication_factor = match setting("replication.factor") {
            None => -1,
            Some(value) => value
                .parse::<i16>()
                .ok()
                .filter(|n| *n == -1 || *n >= 1)
                .ok_or_else(|| {
                    MirrorError::BadRequest(format!(
                        "replication.factor={value}: expected -1 or at least 1"
                    ))
                })?,
        };
        Ok(MirrorConfig {
            topics: list_regex(
                "topics",
                &setting("topics").unwrap_or_else(|| ".*".to_owned()),
            )?,
            topics_exclude: list_regex(
                "topics.exclude",
                &setting("topics.exclude")
                    .unwrap_or_else(|| r".*[\-\.]internal, .*\.replica, __.*".to_owned()),
            )?,
            groups: list_regex(
                "groups",
                &setting("groups").unwrap_or_else(|| ".*".to_owned()),
            )?,
            groups_exclude: list_regex(
                "groups.exclude",
                &setting("groups.exclude")
                    .unwrap_or_else(|| "console-consumer-.*, connect-.*, __.*".to_owned()),
            )?,
            policy,
            refresh_topics_interval: seconds("refresh.topics.interval.seconds", 10)?,
            emit_checkpoints_interval: seconds("emit.checkpoints.interval.seconds", 10)?,
            offset_lag_max,
            sync_topic_configs: setting("sync.topic.configs.enabled").is_none_or(|v| v != "false"),
            replication_factor,
            http_listener: setting("http.listener").unwrap_or_else(|| "127.0.0.1:9645".to_owned()),
            exactly_once,
            source_alias,
            target_alias,
            source,
            target,
        })
    }

    /// The target's name for a source topic.
    pub fn target_topic(&self, topic: &str) -> String {
        match &self.policy {
            Policy::Prefixed { separator } => format!("{}{separator}{topic}", self.source_alias),
            Policy::Identity => topic.to_owned(),
        }
    }

    fn mirrored(&self, topic: &str) -> bool {
        if !self.topics.is_match(topic) || self.topics_exclude.is_match(topic) {
            return false;
        }
        // A topic the target already mirrored here would go round in a cycle.
        match &self.policy {
            Policy::Prefixed { separator } => {
                !topic.starts_with(&format!("{}{separator}", self.target_alias))
            }
            Policy::Identity => true,
        }
    }

    fn progress_topic(&self) -> String {
        format!("mm2-offsets.{}.internal", self.source_alias)
    }

    fn offset_syncs_topic(&self) -> String {
        format!("mm2-offset-syncs.{}.internal", self.target_alias)
    }

    pub fn checkpoints_topic(&self) -> String {
        checkpoints_topic(&self.source_alias)
    }
}

/// Where MM2 writes the checkpoints of `source_alias`'s groups on the target.
pub fn checkpoints_topic(source_alias: &str) -> String {
    format!("{source_alias}.checkpoints.internal")
}

fn client(settings: &BTreeMap<String, String>) -> ClientConfig {
    let mut config =
        ClientConfig::new(settings.get("bootstrap.servers").map_or("", String::as_str));
    for (key, value) in settings {
        if key != "bootstrap.servers" {
            config.insert(key, value.clone());
        }
    }
    config
}

/// The progress topic, as read: the last upstream offset mirrored per source partition.
#[derive(Default)]
struct Progress {
    cluster: String,
    last: BTreeMap<TopicPartition, i64>,
}

impl Apply for Progress {
    fn apply(&mut self, record: &ConsumerRecord) {
        let (Some(key), Some(value)) = (&record.key, &record.value) else {
            return;
        };
        if let Some((cluster, topic, partition, offset)) = records::decode_progress(key, value)
            && (self.cluster.is_empty() || cluster == self.cluster)
        {
            self.last
                .insert(TopicPartition::new(topic, partition), offset);
        }
    }
}

/// The offset syncs topic, as read: recent syncs per source partition.
#[derive(Default)]
struct Syncs {
    syncs: BTreeMap<TopicPartition, Vec<OffsetSync>>,
}

impl Syncs {
    fn add(&mut self, tp: TopicPartition, sync: OffsetSync) {
        let list = self.syncs.entry(tp).or_default();
        // A sync below the last one means the target was written again from an older
        // position (a restart): the older syncs above it no longer hold.
        list.retain(|old| old.upstream < sync.upstream);
        list.push(sync);
        if list.len() > SYNCS_KEPT {
            // The older half is thinned (every other sync dropped), the first sync kept: a
            // group far behind still translates, more coarsely (it reads more again, and
            // never skips), as MM2 keeps syncs at growing distances. Dropping the oldest
            // instead left a group behind them translated past its records.
            let half = list.len() / 2;
            let mut index = 0;
            list.retain(|_| {
                let keep = index == 0 || index >= half || index % 2 == 0;
                index += 1;
                keep
            });
        }
    }
}

impl Apply for Syncs {
    fn apply(&mut self, record: &ConsumerRecord) {
        let (Some(key), Some(value)) = (&record.key, &record.value) else {
            return;
        };
        if let Some((topic, partition, sync)) =
            records::decode_offset_sync(key.clone(), value.clone())
        {
            self.add(TopicPartition::new(topic, partition), sync);
        }
    }
}

/// What `/metrics` shows.
#[derive(Default)]
struct Metrics {
    /// Per source partition: records mirrored, records behind, last end-to-end latency.
    partitions: BTreeMap<TopicPartition, PartitionMetrics>,
    checkpoints: u64,
}

#[derive(Default, Clone, Copy)]
struct PartitionMetrics {
    records: u64,
    bytes: u64,
    lag: i64,
    latency_ms: i64,
}

impl Metrics {
    fn render(&self, config: &MirrorConfig) -> String {
        let mut out = Exposition::new();
        let source = config.source_alias.as_str();
        let target = config.target_alias.as_str();
        let mut family =
            |name: &str, kind: Kind, help: &str, value: &dyn Fn(&PartitionMetrics) -> i64| {
                let mut f = out.family(name, kind, help);
                for (tp, metrics) in &self.partitions {
                    let partition = tp.partition.to_string();
                    f.sample(
                        &[
                            ("source", source),
                            ("target", target),
                            ("topic", &tp.topic),
                            ("partition", &partition),
                        ],
                        value(metrics),
                    );
                }
            };
        family(
            "sluice_mirror_records_total",
            Kind::Counter,
            "Records mirrored from the source partition (acknowledged by the target).",
            &|m| m.records as i64,
        );
        family(
            "sluice_mirror_bytes_total",
            Kind::Counter,
            "Key and value bytes mirrored from the source partition.",
            &|m| m.bytes as i64,
        );
        family(
            "sluice_mirror_record_lag",
            Kind::Gauge,
            "Records of the source partition not yet mirrored (source high watermark minus the mirror's position).",
            &|m| m.lag,
        );
        family(
            "sluice_mirror_replication_latency_ms",
            Kind::Gauge,
            "Time from a record's timestamp to its acknowledgement by the target, for the last batch.",
            &|m| m.latency_ms,
        );
        out.single(
            "sluice_mirror_checkpoints_total",
            Kind::Counter,
            "Consumer group checkpoints written to the target.",
            self.checkpoints,
        );
        out.into_text()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Per source partition, what the mirror has done since it started.
struct PartitionState {
    /// The next upstream offset to mirror.
    next: i64,
    /// The next upstream offset after what is committed to the target (acknowledged, or
    /// with exactly-once, in a committed transaction): where a failure goes back to.
    committed: i64,
    last_sync: Option<OffsetSync>,
}

/// How long an exactly-once mirror's transaction stays open while records keep coming.
const TRANSACTION_SPAN: Duration = Duration::from_millis(100);

/// Poll batches sent and not yet acknowledged, at most.
const BATCHES_IN_FLIGHT: usize = 4;

/// A poll's records sent to the target, their acknowledgements to come.
struct InFlight {
    records: Vec<ConsumerRecord>,
    deliveries: Vec<crate::client::DeliveryFuture>,
}

struct Mirror {
    config: Arc<MirrorConfig>,
    source_admin: Admin,
    target_admin: Admin,
    consumer: Consumer,
    /// Writes to the target: records and progress (transactional with exactly-once).
    producer: Producer,
    /// Writes checkpoints to the target (outside the records' transactions).
    checkpoint_producer: Producer,
    /// When the open transaction began (exactly-once).
    transaction_opened: Option<Instant>,
    /// Writes offset syncs to the source.
    sync_producer: Producer,
    progress: Tail<Progress>,
    syncs: Tail<Syncs>,
    partitions: BTreeMap<TopicPartition, PartitionState>,
    /// Source topic -> its partition count, as last seen.
    topics: BTreeMap<String, i32>,
    emitted: BTreeMap<(String, TopicPartition), i64>,
    metrics: Arc<Mutex<Metrics>>,
    in_flight: std::collections::VecDeque<InFlight>,
}

/// Runs the mirror until ctrl-c or SIGTERM.
pub async fn run(config: MirrorConfig) -> Result<(), MirrorError> {
    let config = Arc::new(config);
    let listener = tokio::net::TcpListener::bind(&config.http_listener)
        .await
        .map_err(|source| MirrorError::Io {
            what: format!("binding the metrics listener {}", config.http_listener),
            source,
        })?;
    let source_admin = Admin::new(client(&config.source))?;
    let target_admin = Admin::new(client(&config.target))?;
    let mut producer_config = client(&config.target);
    producer_config.insert("acks", "all");
    producer_config.insert("linger.ms", "5");
    let checkpoint_producer = Producer::new(producer_config.clone())?;
    let producer = if config.exactly_once {
        // Taking the transactional id fences a killed mirror and aborts what it left open,
        // before the progress is read (read_committed) below.
        let transactional_id = format!(
            "sluice-mirror-{}->{}",
            config.source_alias, config.target_alias
        );
        producer_config.insert("transactional.id", &transactional_id);
        let producer = Producer::new(producer_config)?;
        producer.init_transactions().await?;
        tracing::info!(
            transactional_id,
            "records and their progress are written in transactions"
        );
        producer
    } else {
        checkpoint_producer.clone()
    };
    let mut sync_config = client(&config.source);
    sync_config.insert("acks", "all");
    let sync_producer = Producer::new(sync_config)?;
    let mut consumer_config = client(&config.source);
    consumer_config.insert("enable.auto.commit", "false");
    consumer_config.insert("auto.offset.reset", "earliest");
    let consumer = Consumer::new(consumer_config)?;
    let progress: Tail<Progress> = Tail::start(
        &target_admin,
        client(&config.target),
        &config.progress_topic(),
        25,
        config.replication_factor,
        None,
    )
    .await?;
    progress
        .state
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .cluster
        .clone_from(&config.source_alias);
    let syncs: Tail<Syncs> = Tail::start(
        &source_admin,
        client(&config.source),
        &config.offset_syncs_topic(),
        1,
        config.replication_factor,
        None,
    )
    .await?;
    let checkpoints = NewTopic::new(&config.checkpoints_topic(), 1, config.replication_factor)
        .config("cleanup.policy", "compact");
    match target_admin.create_topics(&[checkpoints], false).await {
        Ok(()) => {}
        Err(error) if error.code() == Some(crate::protocol::errors::TOPIC_ALREADY_EXISTS) => {}
        Err(error) => return Err(error.into()),
    }
    progress
        .read_to_end(&target_admin, Duration::from_secs(60))
        .await?;
    syncs
        .read_to_end(&source_admin, Duration::from_secs(60))
        .await?;
    let metrics = Arc::new(Mutex::new(Metrics::default()));
    let http = {
        let (metrics, config) = (Arc::clone(&metrics), Arc::clone(&config));
        tokio::spawn(crate::http::serve(
            listener,
            0,
            move |request: crate::http::Request| {
                let text = (request.path == "/metrics").then(|| {
                    metrics
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .render(&config)
                });
                async move {
                    match text {
                        Some(text) => crate::http::Response::new(
                            200,
                            "text/plain; version=0.0.4",
                            text.into_bytes(),
                        ),
                        None => {
                            crate::http::Response::text(404, "not found: /metrics is served here\n")
                        }
                    }
                }
            },
        ))
    };
    tracing::info!(
        source = %config.source_alias,
        target = %config.target_alias,
        topics = %config.topics,
        metrics = %config.http_listener,
        "mirror starting"
    );
    let mut mirror = Mirror {
        config,
        source_admin,
        target_admin,
        consumer,
        producer,
        checkpoint_producer,
        transaction_opened: None,
        sync_producer,
        progress,
        syncs,
        partitions: BTreeMap::new(),
        topics: BTreeMap::new(),
        emitted: BTreeMap::new(),
        metrics,
        in_flight: std::collections::VecDeque::new(),
    };
    let outcome = mirror.run().await;
    http.abort();
    let _ = mirror.producer.flush().await;
    let _ = mirror.checkpoint_producer.flush().await;
    let _ = mirror.sync_producer.flush().await;
    outcome
}

impl Mirror {
    async fn run(&mut self) -> Result<(), MirrorError> {
        let mut terminate = tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        )
        .map_err(|source| MirrorError::Io {
            what: "installing the SIGTERM handler".to_owned(),
            source,
        })?;
        let mut next_refresh = Instant::now();
        let mut next_checkpoint = Instant::now() + self.config.emit_checkpoints_interval;
        let mut failures = 0u32;
        loop {
            if Instant::now() >= next_refresh {
                match self.refresh_topics().await {
                    Ok(()) => next_refresh = Instant::now() + self.config.refresh_topics_interval,
                    Err(error) => {
                        tracing::warn!(error = %error, "listing or creating topics failed; retrying");
                        next_refresh = Instant::now() + Duration::from_secs(1);
                    }
                }
            }
            if Instant::now() >= next_checkpoint {
                if let Err(error) = self.emit_checkpoints().await {
                    tracing::warn!(error = %error, "emitting checkpoints failed; retrying");
                }
                next_checkpoint = Instant::now() + self.config.emit_checkpoints_interval;
            }
            let polled = tokio::select! {
                // With batches in flight a poll that finds nothing ends soon: they complete.
                polled = self.consumer.poll(if self.in_flight.is_empty() {
                    Duration::from_millis(200)
                } else {
                    Duration::from_millis(5)
                }) => polled,
                _ = tokio::signal::ctrl_c() => break,
                _ = terminate.recv() => break,
            };
            let outcome = match polled {
                Ok(records) => self.pipeline(records).await,
                Err(error) => Err(error.into()),
            };
            match outcome {
                Ok(()) => failures = 0,
                Err(error) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(error = %error, "mirroring failed; going back to the last acknowledged position");
                    }
                    // What was not acknowledged (or committed) is read again from the last
                    // position written.
                    self.in_flight.clear();
                    self.abort().await?;
                    self.rewind().await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            self.update_lag().await;
        }
        tracing::info!("mirror stopping");
        // What was sent is awaited and its progress written, so a restart repeats nothing.
        while let Some(batch) = self.in_flight.pop_front() {
            if let Err(error) = self.complete(batch).await {
                tracing::warn!(error = %error, "a batch sent before stopping was not acknowledged; it will be mirrored again");
                self.in_flight.clear();
                self.abort().await?;
                break;
            }
        }
        if self.transaction_opened.is_some() {
            self.commit().await?;
        }
        Ok(())
    }

    /// Lists the source's topics, creates or grows their target topics, and reads new
    /// partitions from where the progress says (or the beginning).
    async fn refresh_topics(&mut self) -> Result<(), MirrorError> {
        let names: Vec<String> = self
            .source_admin
            .list_topics(false)
            .await?
            .into_iter()
            .filter(|name| self.config.mirrored(name))
            .collect();
        if names.is_empty() {
            return Ok(());
        }
        let described = self.source_admin.describe_topics(&names).await?;
        let mut added = Vec::new();
        for topic in described {
            let count = topic.partitions.len() as i32;
            if count == 0 || self.topics.get(&topic.name) == Some(&count) {
                continue;
            }
            self.ensure_target_topic(&topic.name, count).await?;
            for partition in 0..count {
                let tp = TopicPartition::new(topic.name.clone(), partition);
                if !self.partitions.contains_key(&tp) {
                    added.push(tp);
                }
            }
            self.topics.insert(topic.name.clone(), count);
        }
        if added.is_empty() {
            return Ok(());
        }
        let all: Vec<TopicPartition> = self
            .partitions
            .keys()
            .cloned()
            .chain(added.iter().cloned())
            .collect();
        self.consumer.assign(&all).await?;
        for tp in &added {
            let last = self.progress.read().last.get(tp).copied();
            let next = last.map_or(0, |last| last + 1);
            if last.is_some() {
                self.consumer.seek(tp, next).await?;
            } else {
                self.consumer
                    .seek_to_beginning(std::slice::from_ref(tp))
                    .await?;
            }
            self.partitions.insert(
                tp.clone(),
                PartitionState {
                    next,
                    committed: next,
                    last_sync: None,
                },
            );
        }
        tracing::info!(partitions = added.len(), "mirroring new partitions");
        Ok(())
    }

    async fn ensure_target_topic(&self, topic: &str, partitions: i32) -> Result<(), MirrorError> {
        let name = self.config.target_topic(topic);
        let existing = match self
            .target_admin
            .describe_topics(std::slice::from_ref(&name))
            .await
        {
            Ok(described) => described
                .first()
                .map(|d| d.partitions.len() as i32)
                .filter(|n| *n > 0),
            Err(error)
                if error.code() == Some(crate::protocol::errors::UNKNOWN_TOPIC_OR_PARTITION) =>
            {
                None
            }
            Err(error) => return Err(error.into()),
        };
        match existing {
            Some(count) if count >= partitions => Ok(()),
            Some(count) => {
                tracing::info!(topic = %name, from = count, to = partitions, "adding partitions to the target topic");
                self.target_admin
                    .create_partitions(&name, partitions, None)
                    .await?;
                Ok(())
            }
            None => {
                let mut new = NewTopic::new(&name, partitions, self.config.replication_factor);
                if self.config.sync_topic_configs {
                    for entry in self
                        .source_admin
                        .describe_configs(RESOURCE_TOPIC, topic)
                        .await?
                    {
                        if entry.is_default
                            || entry.source != 1
                            || entry.is_sensitive
                            || CONFIGS_NOT_COPIED.contains(&entry.name.as_str())
                        {
                            continue;
                        }
                        if let Some(value) = &entry.value {
                            new = new.config(&entry.name, value);
                        }
                    }
                }
                match self.target_admin.create_topics(&[new], false).await {
                    Ok(()) => {
                        tracing::info!(topic = %name, partitions, "created the target topic");
                        Ok(())
                    }
                    Err(error)
                        if error.code() == Some(crate::protocol::errors::TOPIC_ALREADY_EXISTS) =>
                    {
                        Ok(())
                    }
                    Err(error) => Err(error.into()),
                }
            }
        }
    }

    /// Sends a poll's records to the target and, once acknowledged, writes their progress
    /// and offset syncs.
    /// Sends a poll's records, then completes the oldest batches in flight: all of them
    /// when the poll found nothing more, else those beyond `BATCHES_IN_FLIGHT`. So the next
    /// poll's records are sent while the previous ones' acknowledgements come back.
    async fn pipeline(&mut self, records: Vec<ConsumerRecord>) -> Result<(), MirrorError> {
        let idle = records.is_empty();
        if !idle {
            if self.config.exactly_once && self.transaction_opened.is_none() {
                self.producer.begin_transaction()?;
                self.transaction_opened = Some(Instant::now());
            }
            let batch = self.send(records).await?;
            self.in_flight.push_back(batch);
        }
        while self.in_flight.len() > BATCHES_IN_FLIGHT || (idle && !self.in_flight.is_empty()) {
            if let Some(batch) = self.in_flight.pop_front() {
                self.complete(batch).await?;
            }
        }
        if let Some(opened) = self.transaction_opened
            && (self.in_flight.is_empty() || opened.elapsed() >= TRANSACTION_SPAN)
        {
            self.commit().await?;
        }
        Ok(())
    }

    /// Exactly-once: aborts the open transaction. A mirror fenced by another with the same
    /// transactional id stops; an abort that failed otherwise (a coordinator moving, a
    /// timeout) is tried again after the next failure, the transaction still counted open.
    async fn abort(&mut self) -> Result<(), MirrorError> {
        if self.transaction_opened.is_none() {
            return Ok(());
        }
        match self.producer.abort_transaction().await {
            Ok(()) => self.transaction_opened = None,
            Err(error) if error.is_fatal() => return Err(error.into()),
            Err(error) => {
                tracing::warn!(error = %error, "aborting the mirror's transaction failed; trying again");
            }
        }
        Ok(())
    }

    /// Exactly-once: completes every batch in flight (their progress joins the transaction),
    /// then commits the records and their progress together.
    async fn commit(&mut self) -> Result<(), MirrorError> {
        while let Some(batch) = self.in_flight.pop_front() {
            self.complete(batch).await?;
        }
        self.producer.commit_transaction().await?;
        self.transaction_opened = None;
        for state in self.partitions.values_mut() {
            state.committed = state.next;
        }
        Ok(())
    }

    async fn send(&mut self, records: Vec<ConsumerRecord>) -> Result<InFlight, MirrorError> {
        let mut sent = Vec::with_capacity(records.len());
        for record in &records {
            let topic = self.config.target_topic(&record.topic);
            let delivery = self
                .producer
                .send(ProducerRecord {
                    topic,
                    partition: Some(record.partition),
                    key: record.key.clone(),
                    value: record.value.clone(),
                    headers: record.headers.clone(),
                    timestamp: Some(record.timestamp),
                })
                .await?;
            sent.push(delivery);
        }
        Ok(InFlight {
            records,
            deliveries: sent,
        })
    }

    /// Awaits a batch's acknowledgements, then writes its progress and offset syncs.
    async fn complete(&mut self, batch: InFlight) -> Result<(), MirrorError> {
        let InFlight {
            records,
            deliveries: sent,
        } = batch;
        // Per partition: the first and last (upstream, downstream) acknowledged, records,
        // bytes and latency.
        let mut done: BTreeMap<TopicPartition, (OffsetSync, OffsetSync, u64, u64, i64)> =
            BTreeMap::new();
        for (record, delivery) in records.iter().zip(sent) {
            let metadata = delivery.await?;
            let tp = TopicPartition::new(record.topic.to_string(), record.partition);
            let bytes = record.key.as_ref().map_or(0, Bytes::len)
                + record.value.as_ref().map_or(0, Bytes::len);
            let sync = OffsetSync {
                upstream: record.offset,
                downstream: metadata.offset,
            };
            let entry = done.entry(tp).or_insert((sync, sync, 0, 0, 0));
            entry.1 = sync;
            entry.2 += 1;
            entry.3 += bytes as u64;
            entry.4 = now_ms() - record.timestamp;
        }
        let mut writes = Vec::new();
        for (tp, (first, sync, count, bytes, latency_ms)) in &done {
            writes.push(
                self.producer
                    .send(ProducerRecord {
                        topic: self.config.progress_topic(),
                        partition: None,
                        key: Some(records::progress_key(
                            &self.config.source_alias,
                            &tp.topic,
                            tp.partition,
                        )),
                        value: Some(records::progress_value(sync.upstream)),
                        headers: Vec::new(),
                        timestamp: None,
                    })
                    .await?,
            );
            let Some(state) = self.partitions.get_mut(tp) else {
                continue;
            };
            state.next = sync.upstream + 1;
            if !self.config.exactly_once {
                state.committed = state.next;
            }
            // The first record mirrored since the start is synced, so a group that stopped
            // before it translates too; then a sync every `offset.lag.max` records, or when
            // the offsets stop moving together (a record written twice, a compacted gap).
            let mut emit = Vec::new();
            if state.last_sync.is_none() {
                emit.push(*first);
                state.last_sync = Some(*first);
            }
            if let Some(last) = state.last_sync
                && (sync.upstream - last.upstream >= self.config.offset_lag_max
                    || sync.downstream - last.downstream != sync.upstream - last.upstream)
            {
                emit.push(*sync);
                state.last_sync = Some(*sync);
            }
            for sync in emit {
                // Read back by the syncs tail, which translation uses.
                let record = ProducerRecord {
                    topic: self.config.offset_syncs_topic(),
                    partition: Some(0),
                    key: Some(records::offset_sync_key(&tp.topic, tp.partition)),
                    value: Some(records::offset_sync_value(sync)),
                    headers: Vec::new(),
                    timestamp: None,
                };
                // The syncs topic is on the source: a producer of its own writes there.
                writes.push(self.sync_producer.send(record).await?);
            }
            let mut metrics = self.metrics.lock().unwrap_or_else(|e| e.into_inner());
            let entry = metrics.partitions.entry(tp.clone()).or_default();
            entry.records += count;
            entry.bytes += bytes;
            entry.latency_ms = *latency_ms;
        }
        for write in writes {
            write.await?;
        }
        Ok(())
    }

    /// After a failure: every partition reads again from the last acknowledged position.
    async fn rewind(&mut self) {
        for (tp, state) in &mut self.partitions {
            state.next = state.committed;
            if let Err(error) = self.consumer.seek(tp, state.next).await {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %error, "seeking back failed");
            }
        }
    }

    async fn update_lag(&self) {
        let mut lags = Vec::with_capacity(self.partitions.len());
        for tp in self.partitions.keys() {
            if let Some(lag) = self.consumer.lag(tp).await {
                lags.push((tp.clone(), lag));
            }
        }
        let mut metrics = self.metrics.lock().unwrap_or_else(|e| e.into_inner());
        for (tp, lag) in lags {
            metrics.partitions.entry(tp).or_default().lag = lag;
        }
    }

    /// Translates the committed offsets of the source's groups and writes the changed ones
    /// to the checkpoints topic.
    async fn emit_checkpoints(&mut self) -> Result<(), MirrorError> {
        let groups: Vec<String> = self
            .source_admin
            .list_groups()
            .await?
            .into_iter()
            .filter(|g| g.protocol_type == "consumer" || g.protocol_type.is_empty())
            .map(|g| g.group_id)
            .filter(|g| self.config.groups.is_match(g) && !self.config.groups_exclude.is_match(g))
            .collect();
        let mut written = 0u64;
        for group in groups {
            let committed = match self.source_admin.list_group_offsets(&group).await {
                Ok(committed) => committed,
                Err(error) => {
                    tracing::debug!(group = %group, error = %error, "reading a group's offsets failed");
                    continue;
                }
            };
            for (tp, offset) in committed {
                if !self.partitions.contains_key(&tp) {
                    continue;
                }
                let translated = {
                    let syncs = self.syncs.read();
                    syncs
                        .syncs
                        .get(&tp)
                        .and_then(|list| records::translate(list, offset))
                };
                let Some(downstream) = translated else {
                    continue;
                };
                let key = (group.clone(), tp.clone());
                if self.emitted.get(&key) == Some(&downstream) {
                    continue;
                }
                let checkpoint = Checkpoint {
                    group: group.clone(),
                    topic: self.config.target_topic(&tp.topic),
                    partition: tp.partition,
                    upstream: offset,
                    downstream,
                    metadata: String::new(),
                };
                self.checkpoint_producer
                    .send(ProducerRecord {
                        topic: self.config.checkpoints_topic(),
                        partition: Some(0),
                        key: Some(checkpoint.key()),
                        value: Some(checkpoint.value()),
                        headers: Vec::new(),
                        timestamp: None,
                    })
                    .await?
                    .await?;
                self.emitted.insert(key, downstream);
                written += 1;
            }
        }
        if written > 0 {
            self.metrics
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .checkpoints += written;
            tracing::debug!(checkpoints = written, "checkpoints written");
        }
        Ok(())
    }
}

/// The latest checkpoint of each (group, topic, partition) in a target's checkpoints topic.
pub async fn read_checkpoints(
    target: ClientConfig,
    source_alias: &str,
) -> Result<Vec<Checkpoint>, MirrorError> {
    let admin = Admin::new(target.clone())?;
    let topic = checkpoints_topic(source_alias);
    let tp = TopicPartition::new(topic.clone(), 0);
    let ends = admin
        .list_offsets(
            &BTreeSet::from([tp.clone()]),
            crate::client::OffsetSpec::Latest,
        )
        .await?;
    let end = ends.get(&tp).copied().flatten().unwrap_or(0);
    let mut latest: BTreeMap<(String, String, i32), Checkpoint> = BTreeMap::new();
    if end > 0 {
        let consumer = Consumer::new(
            target
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest"),
        )?;
        consumer.assign(std::slice::from_ref(&tp)).await?;
        consumer
            .seek_to_beginning(std::slice::from_ref(&tp))
            .await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while consumer.position(&tp).await.unwrap_or(0) < end {
            if Instant::now() > deadline {
                return Err(MirrorError::Timeout(format!(
                    "reading {topic} to its end took over 30 s"
                )));
            }
            for record in consumer.poll(Duration::from_millis(500)).await? {
                let (Some(key), Some(value)) = (record.key, record.value) else {
                    continue;
                };
                if let Some(checkpoint) = Checkpoint::decode(key, value) {
                    latest.insert(
                        (
                            checkpoint.group.clone(),
                            checkpoint.topic.clone(),
                            checkpoint.partition,
                        ),
                        checkpoint,
                    );
                }
            }
        }
        let _ = consumer.close().await;
    }
    Ok(latest.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn properties(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn old_syncs_are_thinned_not_dropped_so_a_group_far_behind_translates_without_skipping() {
        let mut syncs = Syncs::default();
        let tp = TopicPartition::new("orders", 0);
        // Downstream offsets 5 past upstream ones (a few records written twice).
        for i in 0..10_000i64 {
            syncs.add(
                tp.clone(),
                OffsetSync {
                    upstream: i * 100,
                    downstream: i * 100 + 5,
                },
            );
        }
        let list = &syncs.syncs[&tp];
        assert!(list.len() <= SYNCS_KEPT, "{}", list.len());
        assert_eq!(list[0].upstream, 0, "the first sync is kept");
        for committed in [0, 150, 3_000, 250_000, 999_950] {
            let translated = records::translate(list, committed).expect("translates");
            assert!(
                translated <= committed + 5,
                "{committed} -> {translated}: past its records"
            );
        }
        // Recent offsets translate exactly.
        assert_eq!(records::translate(list, 999_900), Some(999_905));
    }

    #[test]
    fn mm2_properties_name_one_flow_and_its_topics() {
        let config = MirrorConfig::from_properties(&properties(&[
            ("clusters", "A, B"),
            ("A.bootstrap.servers", "a:9092"),
            ("B.bootstrap.servers", "b:9092"),
            ("A->B.enabled", "true"),
            ("A->B.topics", "orders.*, payments"),
        ]))
        .expect("valid");
        assert_eq!(
            (config.source_alias.as_str(), config.target_alias.as_str()),
            ("A", "B")
        );
        assert_eq!(config.target_topic("orders"), "A.orders");
        assert!(config.mirrored("orders-eu") && config.mirrored("payments"));
        assert!(!config.mirrored("payments2") && !config.mirrored("mm2-offsets.A.internal"));
        assert!(!config.mirrored("__consumer_offsets"));
        assert_eq!(config.checkpoints_topic(), "A.checkpoints.internal");
        let refused = MirrorConfig::from_properties(&properties(&[
            ("A.bootstrap.servers", "a:9092"),
            ("B.bootstrap.servers", "b:9092"),
            ("A->B.enabled", "true"),
            ("sync.group.offsets.enabled", "true"),
        ]));
        assert!(matches!(refused, Err(MirrorError::BadRequest(m)) if m.contains("translate")));
        let two = MirrorConfig::from_properties(&properties(&[
            ("A.bootstrap.servers", "a:9092"),
            ("B.bootstrap.servers", "b:9092"),
            ("A->B.enabled", "true"),
            ("B->A.enabled", "true"),
        ]));
        assert!(two.is_err());
        // MM2's exactly-once switch is the target's setting, not a client setting of it.
        let exactly_once = MirrorConfig::from_properties(&properties(&[
            ("A.bootstrap.servers", "a:9092"),
            ("B.bootstrap.servers", "b:9092"),
            ("A->B.enabled", "true"),
            ("B.exactly.once.source.support", "enabled"),
            ("exactly.once.support", "required"),
        ]))
        .expect("valid");
        assert!(exactly_once.exactly_once);
        assert!(
            !exactly_once
                .target
                .contains_key("exactly.once.source.support")
        );
        assert!(!config.exactly_once);
        let required = MirrorConfig::from_properties(&properties(&[
            ("A.bootstrap.servers", "a:9092"),
            ("B.bootstrap.servers", "b:9092"),
            ("A->B.enabled", "true"),
            ("exactly.once.support", "required"),
        ]));
        assert!(
            matches!(required, Err(MirrorError::BadRequest(m)) if m.contains("B.exactly.once.source.support"))
        );
    }
}
