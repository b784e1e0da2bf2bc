//! The worker's three internal topics, with Kafka Connect's record formats (JSON without
//! schemas, UTF-8 keys), each read into memory by a tail: a consumer assigned every partition
//! from the beginning, outside any group. Writers produce through the worker's one producer;
//! a reader that must see its own write waits until the tail has read to the end
//! (`Tail::read_to_end`), as Kafka's `KafkaBasedLog.readToEnd` does.
//!
//! - config topic (1 partition): `connector-<name>` `{"properties":{..}}`,
//!   `task-<name>-<n>` `{"properties":{..}}`, `commit-<name>` `{"tasks":N}`,
//!   `target-state-<name>` `{"state":"STARTED|PAUSED|STOPPED"}`,
//!   `restart-connector-<name>` `{"include-tasks":bool,"only-failed":bool}`;
//! - offsets topic: key `["<connector>",{source partition}]`, value `{source offset}`;
//! - status topic: `status-connector-<name>` / `status-task-<name>-<n>`,
//!   `{"state","trace","worker_id","generation"}`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::{ConnectError, WorkerConfig};
use crate::client::{
    Admin, ClientConfig, Consumer, ConsumerRecord, NewTopic, OffsetSpec, TopicPartition,
};
use crate::protocol::errors;

/// A standalone tail's "positions" (bumped by each write) and who hears of changes.
type Local = (
    watch::Sender<BTreeMap<i32, i64>>,
    Option<Arc<tokio::sync::Notify>>,
);

/// What a tail applies its records to.
pub trait Apply: Send + Sync + 'static {
    fn apply(&mut self, record: &ConsumerRecord);
}

/// A topic read into `S` from its beginning, kept current by a task.
pub struct Tail<S> {
    pub state: Arc<RwLock<S>>,
    topic: String,
    partitions: Vec<TopicPartition>,
    /// The next offset to read, per partition: what has been applied.
    positions: watch::Receiver<BTreeMap<i32, i64>>,
    /// Reads the topic; none for a standalone worker's state, kept in memory.
    task: Option<tokio::task::JoinHandle<()>>,
    /// A standalone tail's writes: its "positions", and who hears of changes.
    local: Option<Local>,
}

impl<S: Apply + Default> Tail<S> {
    /// Creates the topic when it is missing (compacted, as Connect's topics are), then starts
    /// reading it.
    pub async fn start(
        admin: &Admin,
        client: ClientConfig,
        topic: &str,
        partitions: i32,
        replication_factor: i16,
        changed: Option<Arc<tokio::sync::Notify>>,
    ) -> Result<Tail<S>, ConnectError> {
        let new = NewTopic::new(topic, partitions, replication_factor)
            .config("cleanup.policy", "compact");
        match admin.create_topics(&[new], false).await {
            Ok(()) => tracing::info!(topic, partitions, "created the internal topic"),
            Err(error) if error.code() == Some(errors::TOPIC_ALREADY_EXISTS) => {}
            Err(error) => return Err(error.into()),
        }
        let described = admin.describe_topics(&[topic.to_owned()]).await?;
        let count = described
            .first()
            .map_or(0, |description| description.partitions.len() as i32);
        if count == 0 {
            return Err(ConnectError::BadRequest(format!(
                "internal topic {topic} has no partitions"
            )));
        }
        let partitions: Vec<TopicPartition> =
            (0..count).map(|p| TopicPartition::new(topic, p)).collect();
        let consumer = Consumer::new(
            client
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest")
                .set("isolation.level", "read_committed"),
        )?;
        consumer.assign(&partitions).await?;
        consumer.seek_to_beginning(&partitions).await?;
        let state = Arc::new(RwLock::new(S::default()));
        let (positions_tx, positions) = watch::channel(BTreeMap::new());
        let task = tokio::spawn(read_forever(
            consumer,
            partitions.clone(),
            Arc::clone(&state),
            positions_tx,
            changed,
        ));
        Ok(Tail {
            state,
            topic: topic.to_owned(),
            partitions,
            positions,
            task: Some(task),
            local: None,
        })
    }

    /// A standalone worker's state: in memory, written with `apply_local`.
    pub fn local(topic: &str, changed: Option<Arc<tokio::sync::Notify>>) -> Tail<S> {
        let (sender, positions) = watch::channel(BTreeMap::from([(0, 0)]));
        Tail {
            state: Arc::new(RwLock::new(S::default())),
            topic: topic.to_owned(),
            partitions: vec![TopicPartition::new(topic, 0)],
            positions,
            task: None,
            local: Some((sender, changed)),
        }
    }

    /// Applies a write to a standalone tail as if it had been read back from its topic.
    pub fn apply_local(&self, key: Bytes, value: Option<Bytes>) {
        let Some((positions, changed)) = &self.local else {
            return;
        };
        let offset = self.position(0);
        let record = ConsumerRecord {
            topic: Arc::from(self.topic.as_str()),
            partition: 0,
            offset,
            timestamp: 0,
            timestamp_type: crate::client::TimestampType::CreateTime,
            key: Some(key),
            value,
            headers: Vec::new(),
            leader_epoch: None,
        };
        self.state
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply(&record);
        positions.send_modify(|map| {
            map.insert(0, offset + 1);
        });
        if let Some(changed) = changed {
            changed.notify_one();
        }
    }
}

async fn read_forever<S: Apply>(
    consumer: Consumer,
    partitions: Vec<TopicPartition>,
    state: Arc<RwLock<S>>,
    positions: watch::Sender<BTreeMap<i32, i64>>,
    changed: Option<Arc<tokio::sync::Notify>>,
) {
    let mut failures = 0u32;
    loop {
        match consumer.poll(Duration::from_millis(500)).await {
            Ok(records) => {
                failures = 0;
                if !records.is_empty() {
                    let mut state = state.write().unwrap_or_else(|e| e.into_inner());
                    for record in &records {
                        state.apply(record);
                    }
                }
                let mut now = BTreeMap::new();
                for tp in &partitions {
                    if let Some(position) = consumer.position(tp).await {
                        now.insert(tp.partition, position);
                    }
                }
                positions.send_if_modified(|old| {
                    let moved = *old != now;
                    *old = now;
                    moved
                });
                if !records.is_empty()
                    && let Some(changed) = &changed
                {
                    changed.notify_one();
                }
            }
            Err(error) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(error = %error, "reading an internal topic failed; retrying");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

impl<S> Tail<S> {
    /// Waits until everything written to the topic before the call has been applied.
    pub async fn read_to_end(&self, admin: &Admin, timeout: Duration) -> Result<(), ConnectError> {
        if self.task.is_none() {
            // In memory: every write is applied as it is made.
            return Ok(());
        }
        let asked: BTreeSet<TopicPartition> = self.partitions.iter().cloned().collect();
        let ends = admin.list_offsets(&asked, OffsetSpec::Latest).await?;
        let mut positions = self.positions.clone();
        let reached = tokio::time::timeout(timeout, async {
            loop {
                let done = {
                    let now = positions.borrow_and_update();
                    ends.iter().all(|(tp, end)| {
                        end.is_none_or(|end| now.get(&tp.partition).is_some_and(|&at| at >= end))
                    })
                };
                if done || positions.changed().await.is_err() {
                    return done;
                }
            }
        })
        .await;
        match reached {
            Ok(true) => Ok(()),
            _ => Err(ConnectError::Timeout(format!(
                "Request timed out: the worker could not read the internal topic {} to its end within {timeout:?}",
                self.topic
            ))),
        }
    }

    /// The next offset to read in `partition`.
    pub fn position(&self, partition: i32) -> i64 {
        self.positions
            .borrow()
            .get(&partition)
            .copied()
            .unwrap_or(0)
    }

    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, S> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl<S> Drop for Tail<S> {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

fn record_json(record: &ConsumerRecord) -> Option<(String, Option<Value>)> {
    let key = String::from_utf8(record.key.as_ref()?.to_vec()).ok()?;
    let value = match &record.value {
        None => None,
        Some(bytes) => Some(serde_json::from_slice::<Value>(bytes).ok()?),
    };
    Some((key, value))
}

fn properties(value: &Value) -> BTreeMap<String, String> {
    value
        .get("properties")
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .map(|(k, v)| {
                    let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    (k.clone(), text)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetState {
    Started,
    Paused,
    Stopped,
}

impl TargetState {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetState::Started => "STARTED",
            TargetState::Paused => "PAUSED",
            TargetState::Stopped => "STOPPED",
        }
    }
}

/// A restart asked through the REST API, read back by every worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartRequest {
    pub connector: String,
    pub include_tasks: bool,
    pub only_failed: bool,
    /// The config topic offset it was written at: each worker acts on it once.
    pub offset: i64,
}

/// The config topic, as read.
#[derive(Debug, Default)]
pub struct ConfigState {
    pub connectors: BTreeMap<String, BTreeMap<String, String>>,
    /// Task configs written and not yet committed.
    pending_tasks: BTreeMap<String, BTreeMap<u32, BTreeMap<String, String>>>,
    /// Committed task configs: what the tasks of each connector run with.
    pub tasks: BTreeMap<String, Vec<BTreeMap<String, String>>>,
    pub targets: BTreeMap<String, TargetState>,
    pub restarts: Vec<RestartRequest>,
    /// Bumped by every record: the herder compares it to know something changed.
    pub version: u64,
    /// The offset of the last record that added or removed a connector or committed its
    /// tasks: an assignment made at an earlier offset does not cover it.
    pub assignment_changed_offset: Option<i64>,
}

impl ConfigState {
    pub fn target(&self, connector: &str) -> TargetState {
        self.targets
            .get(connector)
            .copied()
            .unwrap_or(TargetState::Started)
    }
}

impl Apply for ConfigState {
    fn apply(&mut self, record: &ConsumerRecord) {
        let Some((key, value)) = record_json(record) else {
            tracing::warn!(
                offset = record.offset,
                "skipping an unreadable config record"
            );
            return;
        };
        self.version += 1;
        if let Some(name) = key.strip_prefix("connector-") {
            match value {
                Some(value) => {
                    if self
                        .connectors
                        .insert(name.to_owned(), properties(&value))
                        .is_none()
                    {
                        self.assignment_changed_offset = Some(record.offset);
                    }
                }
                None => {
                    self.assignment_changed_offset = Some(record.offset);
                    self.connectors.remove(name);
                    self.tasks.remove(name);
                    self.pending_tasks.remove(name);
                    self.targets.remove(name);
                }
            }
        } else if let Some(name) = key.strip_prefix("target-state-") {
            let state = value
                .as_ref()
                .and_then(|v| v.get("state.v2").or(v.get("state")))
                .and_then(Value::as_str);
            match state {
                Some("PAUSED") => self.targets.insert(name.to_owned(), TargetState::Paused),
                Some("STOPPED") => self.targets.insert(name.to_owned(), TargetState::Stopped),
                Some(_) => self.targets.insert(name.to_owned(), TargetState::Started),
                None => self.targets.remove(name),
            };
        } else if let Some(rest) = key.strip_prefix("task-") {
            // `task-<name>-<n>`: the name may hold dashes; the number follows the last.
            if let Some((name, number)) = rest.rsplit_once('-')
                && let Ok(number) = number.parse::<u32>()
                && let Some(value) = value
            {
                self.pending_tasks
                    .entry(name.to_owned())
                    .or_default()
                    .insert(number, properties(&value));
            }
        } else if let Some(name) = key.strip_prefix("commit-") {
            let count = value
                .as_ref()
                .and_then(|v| v.get("tasks"))
                .and_then(Value::as_u64)
                .unwrap_or(0) as u32;
            let pending = self.pending_tasks.remove(name).unwrap_or_default();
            let tasks: Vec<BTreeMap<String, String>> = (0..count)
                .map(|n| pending.get(&n).cloned().unwrap_or_default())
                .collect();
            self.tasks.insert(name.to_owned(), tasks);
            self.assignment_changed_offset = Some(record.offset);
        } else if let Some(name) = key.strip_prefix("restart-connector-")
            && let Some(value) = value
        {
            let flag = |field: &str| value.get(field).and_then(Value::as_bool).unwrap_or(false);
            self.restarts.push(RestartRequest {
                connector: name.to_owned(),
                include_tasks: flag("include-tasks"),
                only_failed: flag("only-failed"),
                offset: record.offset,
            });
            if self.restarts.len() > 1024 {
                self.restarts.remove(0);
            }
        }
    }
}

pub fn connector_record(properties: &BTreeMap<String, String>) -> Bytes {
    Bytes::from(json!({ "properties": properties }).to_string())
}

pub fn commit_record(tasks: usize) -> Bytes {
    Bytes::from(json!({ "tasks": tasks }).to_string())
}

pub fn target_record(state: TargetState) -> Bytes {
    Bytes::from(json!({ "state": state.as_str(), "state.v2": state.as_str() }).to_string())
}

pub fn restart_record(include_tasks: bool, only_failed: bool) -> Bytes {
    Bytes::from(json!({ "include-tasks": include_tasks, "only-failed": only_failed }).to_string())
}

/// A connector's or task's state, as Connect reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub state: String,
    pub trace: Option<String>,
    pub worker_id: String,
    pub generation: i32,
}

impl Status {
    pub fn record(&self) -> Bytes {
        Bytes::from(
            json!({
                "state": self.state,
                "trace": self.trace,
                "worker_id": self.worker_id,
                "generation": self.generation,
            })
            .to_string(),
        )
    }
}

/// The status topic, as read.
#[derive(Debug, Default)]
pub struct StatusState {
    pub connectors: BTreeMap<String, Status>,
    pub tasks: BTreeMap<(String, u32), Status>,
}

impl Apply for StatusState {
    fn apply(&mut self, record: &ConsumerRecord) {
        let Some((key, value)) = record_json(record) else {
            return;
        };
        let status = value.map(|value| Status {
            state: value
                .get("state")
                .and_then(Value::as_str)
                .unwrap_or("UNASSIGNED")
                .to_owned(),
            trace: value
                .get("trace")
                .and_then(Value::as_str)
                .map(str::to_owned),
            worker_id: value
                .get("worker_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            generation: value.get("generation").and_then(Value::as_i64).unwrap_or(0) as i32,
        });
        if let Some(name) = key.strip_prefix("status-connector-") {
            match status {
                // A status from an older generation than the one shown is late news.
                Some(status)
                    if self
                        .connectors
                        .get(name)
                        .is_none_or(|old| old.generation <= status.generation) =>
                {
                    self.connectors.insert(name.to_owned(), status);
                }
                Some(_) => {}
                None => {
                    self.connectors.remove(name);
                }
            }
        } else if let Some(rest) = key.strip_prefix("status-task-")
            && let Some((name, number)) = rest.rsplit_once('-')
            && let Ok(number) = number.parse::<u32>()
        {
            let id = (name.to_owned(), number);
            match status {
                Some(status)
                    if self
                        .tasks
                        .get(&id)
                        .is_none_or(|old| old.generation <= status.generation) =>
                {
                    self.tasks.insert(id, status);
                }
                Some(_) => {}
                None => {
                    self.tasks.remove(&id);
                }
            }
        }
    }
}

/// The offsets topic, as read: each connector's source partitions and their offsets.
#[derive(Debug, Default)]
pub struct OffsetState {
    /// connector -> (source partition as JSON text -> (partition, offset)).
    pub offsets: BTreeMap<String, BTreeMap<String, (Value, Value)>>,
}

impl Apply for OffsetState {
    fn apply(&mut self, record: &ConsumerRecord) {
        let Some(key) = record
            .key
            .as_ref()
            .and_then(|key| serde_json::from_slice::<Value>(key).ok())
        else {
            return;
        };
        let Some([Value::String(connector), partition]) = key
            .as_array()
            .and_then(|a| <&[Value; 2]>::try_from(a.as_slice()).ok())
        else {
            return;
        };
        let value = record
            .value
            .as_ref()
            .and_then(|value| serde_json::from_slice::<Value>(value).ok());
        let entry = self.offsets.entry(connector.clone()).or_default();
        match value {
            Some(offset) if !offset.is_null() => {
                entry.insert(partition.to_string(), (partition.clone(), offset));
            }
            _ => {
                entry.remove(&partition.to_string());
            }
        }
    }
}

pub fn offset_key(connector: &str, partition: &Value) -> Bytes {
    Bytes::from(json!([connector, partition]).to_string())
}

/// The three tails of a worker, and for a standalone worker the file its offsets are kept in.
pub struct Stores {
    pub configs: Tail<ConfigState>,
    pub statuses: Tail<StatusState>,
    pub offsets: Arc<Tail<OffsetState>>,
    /// `offset.storage.file.filename` of a standalone worker: configs and statuses are in
    /// memory, offsets in this file (rewritten whole, then renamed over the old one).
    pub offset_file: Option<std::path::PathBuf>,
    offset_file_lock: tokio::sync::Mutex<()>,
}

impl Stores {
    pub async fn start(
        config: &WorkerConfig,
        admin: &Admin,
        config_changed: Arc<tokio::sync::Notify>,
    ) -> Result<Stores, ConnectError> {
        if let Some(file) = &config.offset_file {
            let offsets: Tail<OffsetState> = Tail::local(&config.offset_topic, None);
            load_offsets(file, &offsets)?;
            return Ok(Stores {
                configs: Tail::local(&config.config_topic, Some(config_changed)),
                statuses: Tail::local(&config.status_topic, None),
                offsets: Arc::new(offsets),
                offset_file: Some(file.clone()),
                offset_file_lock: tokio::sync::Mutex::new(()),
            });
        }
        let client = || config.client_config(&config.consumer);
        let configs = Tail::start(
            admin,
            client(),
            &config.config_topic,
            1,
            config.config_replication_factor,
            Some(config_changed),
        )
        .await?;
        let statuses = Tail::start(
            admin,
            client(),
            &config.status_topic,
            config.status_partitions,
            config.status_replication_factor,
            None,
        )
        .await?;
        let offsets = Tail::start(
            admin,
            client(),
            &config.offset_topic,
            config.offset_partitions,
            config.offset_replication_factor,
            None,
        )
        .await?;
        Ok(Stores {
            configs,
            statuses,
            offsets: Arc::new(offsets),
            offset_file: None,
            offset_file_lock: tokio::sync::Mutex::new(()),
        })
    }

    pub fn standalone(&self) -> bool {
        self.offset_file.is_some()
    }

    /// A standalone worker's write: applied in memory, and for offsets kept in the file
    /// before this returns (so an offset said written survives a kill -9).
    pub async fn write_local(
        &self,
        config: &WorkerConfig,
        topic: &str,
        key: Bytes,
        value: Option<Bytes>,
    ) -> Result<(), ConnectError> {
        if topic == config.config_topic {
            self.configs.apply_local(key, value);
        } else if topic == config.status_topic {
            self.statuses.apply_local(key, value);
        } else if topic == config.offset_topic {
            let _guard = self.offset_file_lock.lock().await;
            self.offsets.apply_local(key, value);
            if let Some(file) = &self.offset_file {
                save_offsets(file, &self.offsets)?;
            }
        }
        Ok(())
    }
}

/// The offsets file: a JSON array of `{"key": <offsets topic key>, "value": <offset>}`
/// (Kafka's standalone worker writes a Java-serialized map instead).
fn save_offsets(file: &std::path::Path, offsets: &Tail<OffsetState>) -> Result<(), ConnectError> {
    let entries: Vec<Value> = offsets
        .read()
        .offsets
        .iter()
        .flat_map(|(connector, map)| {
            map.values().map(move |(partition, offset)| {
                json!({ "key": [connector, partition], "value": offset })
            })
        })
        .collect();
    let io = |what: &str, source| ConnectError::Io {
        what: format!("{what} {}", file.display()),
        source,
    };
    let temporary = file.with_extension("tmp");
    {
        use std::io::Write as _;
        let mut out = std::fs::File::create(&temporary).map_err(|e| io("writing", e))?;
        out.write_all(Value::Array(entries).to_string().as_bytes())
            .and_then(|()| out.sync_all())
            .map_err(|e| io("writing", e))?;
    }
    std::fs::rename(&temporary, file).map_err(|e| io("replacing", e))
}

fn load_offsets(file: &std::path::Path, offsets: &Tail<OffsetState>) -> Result<(), ConnectError> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ConnectError::Io {
                what: format!("reading {}", file.display()),
                source,
            });
        }
    };
    let entries: Vec<Value> = serde_json::from_str(&text).map_err(|error| {
        ConnectError::BadRequest(format!(
            "{} is not a sluice connect offsets file: {error}",
            file.display()
        ))
    })?;
    for entry in entries {
        let key = Bytes::from(entry["key"].to_string());
        let value = Bytes::from(entry["value"].to_string());
        offsets.apply_local(key, Some(value));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::TimestampType;

    fn record(offset: i64, key: &str, value: Option<&str>) -> ConsumerRecord {
        ConsumerRecord {
            topic: Arc::from("connect-configs"),
            partition: 0,
            offset,
            timestamp: 0,
            timestamp_type: TimestampType::CreateTime,
            key: Some(Bytes::from(key.to_owned())),
            value: value.map(|v| Bytes::from(v.to_owned())),
            headers: Vec::new(),
            leader_epoch: None,
        }
    }

    #[test]
    fn config_records_in_kafka_s_format_build_the_connectors_and_their_tasks() {
        let mut state = ConfigState::default();
        state.apply(&record(
            0,
            "connector-my-src",
            Some(r#"{"properties":{"connector.class":"FileStreamSource","tasks.max":"1"}}"#),
        ));
        state.apply(&record(
            1,
            "task-my-src-0",
            Some(r#"{"properties":{"file":"a"}}"#),
        ));
        assert!(
            !state.tasks.contains_key("my-src"),
            "uncommitted tasks are not run"
        );
        assert_eq!(state.assignment_changed_offset, Some(0), "a new connector");
        state.apply(&record(2, "commit-my-src", Some(r#"{"tasks":1}"#)));
        assert_eq!(state.tasks["my-src"][0]["file"], "a");
        assert_eq!(
            state.assignment_changed_offset,
            Some(2),
            "its tasks committed"
        );
        state.apply(&record(
            3,
            "target-state-my-src",
            Some(r#"{"state":"PAUSED"}"#),
        ));
        assert_eq!(state.target("my-src"), TargetState::Paused);
        state.apply(&record(
            4,
            "restart-connector-my-src",
            Some(r#"{"include-tasks":true,"only-failed":false}"#),
        ));
        assert_eq!(state.restarts[0].offset, 4);
        assert!(state.restarts[0].include_tasks);
        assert_eq!(
            state.assignment_changed_offset,
            Some(2),
            "pauses and restarts need no new assignment"
        );
        state.apply(&record(5, "connector-my-src", None));
        assert_eq!(
            state.assignment_changed_offset,
            Some(5),
            "a connector removed"
        );
        assert!(state.connectors.is_empty() && state.tasks.is_empty());
        assert_eq!(state.target("my-src"), TargetState::Started);
    }

    #[test]
    fn older_generations_do_not_overwrite_a_status() {
        let mut state = StatusState::default();
        state.apply(&record(
            0,
            "status-task-c-0",
            Some(r#"{"state":"RUNNING","trace":null,"worker_id":"b:8083","generation":3}"#),
        ));
        state.apply(&record(
            1,
            "status-task-c-0",
            Some(r#"{"state":"UNASSIGNED","trace":null,"worker_id":"a:8083","generation":2}"#),
        ));
        assert_eq!(state.tasks[&("c".to_owned(), 0)].worker_id, "b:8083");
        let mut offsets = OffsetState::default();
        let key = offset_key("c", &json!({"filename": "/tmp/x"}));
        let mut r = record(0, "", Some(r#"{"position":12}"#));
        r.key = Some(key.clone());
        offsets.apply(&r);
        assert_eq!(
            offsets.offsets["c"].values().next().expect("one").1,
            json!({"position":12})
        );
        r.value = None;
        offsets.apply(&r);
        assert!(offsets.offsets["c"].is_empty());
    }
}
