//! The worker: its clients and stores, and the herder task that keeps it in its group and runs
//! what the group gives it. Rebalances are eager: before a join every connector and task here
//! stops (committing what it wrote), and the new assignment starts after the sync.
//!
//! A connector's instance runs on one worker: it checks the connector's config, writes the
//! task configs (`task-*` then `commit-*`) when they differ from the committed ones, and
//! reports the connector's status. A committed change of any connector's task count, or a
//! connector added or removed, sends every worker back to the group (the leader assigns from
//! the config topic it has read to the end). Pause, resume and stop are target states in the
//! config topic, applied by the workers running the connector's tasks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, watch};

use super::data::Converter;
use super::member::{CONNECTOR_TASK, Member, WorkerState, assign};
use super::plugins::{self, Plugin};
use super::store::{ConfigState, Status, Stores, TargetState};
use super::tasks::{self, TaskContext};
use super::{ConnectError, WorkerConfig};
use crate::client::{Admin, Producer, ProducerRecord};

/// How long a task has to stop (Kafka's `task.shutdown.graceful.timeout.ms` default).
const TASK_STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request waits for an internal topic to be read to its end.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What the REST API shows of the group.
#[derive(Debug, Clone, Default)]
pub struct GroupView {
    pub member_id: String,
    pub generation: i32,
    pub leader_url: String,
}

pub struct Worker {
    pub config: Arc<WorkerConfig>,
    pub admin: Admin,
    pub producer: Producer,
    pub stores: Arc<Stores>,
    pub cluster_id: String,
    pub view: Mutex<GroupView>,
    /// The counters of every task this worker has run, for `/metrics`.
    pub counters: Mutex<BTreeMap<(String, u32), Arc<tasks::TaskCounters>>>,
    config_changed: Arc<Notify>,
    shutdown: watch::Sender<bool>,
    herder: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Worker {
    pub async fn start(config: Arc<WorkerConfig>) -> Result<Arc<Worker>, ConnectError> {
        let admin = Admin::new(config.client_config(&config.admin))?;
        let cluster_id = admin.describe_cluster().await?.cluster_id;
        let mut producer_config = config.client_config(&config.producer);
        producer_config.insert("acks", "all");
        producer_config.insert("linger.ms", "1");
        let producer = Producer::new(producer_config)?;
        let config_changed = Arc::new(Notify::new());
        let stores = Arc::new(Stores::start(&config, &admin, Arc::clone(&config_changed)).await?);
        let (shutdown, _) = watch::channel(false);
        let worker = Arc::new(Worker {
            config,
            admin,
            producer,
            stores,
            cluster_id,
            view: Mutex::new(GroupView::default()),
            counters: Mutex::new(BTreeMap::new()),
            config_changed,
            shutdown,
            herder: Mutex::new(None),
        });
        let handle = tokio::spawn(herd(Arc::clone(&worker)));
        *worker.herder.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        Ok(worker)
    }

    /// Stops every task (each commits what it wrote), leaves the group, flushes.
    pub async fn shutdown(&self) {
        self.shutdown.send_replace(true);
        let handle = self.herder.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.await;
        }
        let _ = self.producer.flush().await;
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.config.worker_id)
    }

    /// Writes a config topic record and waits for its acknowledgement.
    pub async fn write_config(
        &self,
        key: String,
        value: Option<Bytes>,
    ) -> Result<(), ConnectError> {
        self.write(&self.config.config_topic, key, value).await
    }

    /// [`Worker::write_config`], then waits until this worker has read it back, so what
    /// answers next sees it.
    pub async fn write_config_read_back(
        &self,
        key: String,
        value: Option<Bytes>,
    ) -> Result<(), ConnectError> {
        self.write_config(key, value).await?;
        self.stores
            .configs
            .read_to_end(&self.admin, READ_TIMEOUT)
            .await
    }

    pub async fn write(
        &self,
        topic: &str,
        key: String,
        value: Option<Bytes>,
    ) -> Result<(), ConnectError> {
        if self.stores.standalone() {
            return self
                .stores
                .write_local(&self.config, topic, Bytes::from(key), value)
                .await;
        }
        let record = ProducerRecord {
            topic: topic.to_owned(),
            partition: None,
            key: Some(Bytes::from(key)),
            value,
            headers: Vec::new(),
            timestamp: None,
        };
        self.producer.send(record).await?.await?;
        Ok(())
    }

    pub async fn write_status(
        &self,
        key: String,
        status: Option<&Status>,
    ) -> Result<(), ConnectError> {
        self.write(&self.config.status_topic, key, status.map(Status::record))
            .await
    }

    fn status(&self, state: &str, trace: Option<String>, generation: i32) -> Status {
        Status {
            state: state.to_owned(),
            trace,
            worker_id: self.config.worker_id.clone(),
            generation,
        }
    }

    async fn report(&self, key: String, status: Status) {
        if let Err(error) = self.write_status(key.clone(), Some(&status)).await {
            tracing::warn!(key = %key, error = %error, "writing a status failed");
        }
    }
}

struct RunningConnector {
    config: BTreeMap<String, String>,
    target: TargetState,
    failed: bool,
}

struct RunningTask {
    target: watch::Sender<TargetState>,
    handle: Option<tokio::task::JoinHandle<Result<(), ConnectError>>>,
    failed: bool,
}

#[derive(Default)]
struct Running {
    connectors: BTreeMap<String, RunningConnector>,
    tasks: BTreeMap<(String, u32), RunningTask>,
}

/// What the group's assignment depends on: the connectors and their committed task counts.
fn fingerprint(configs: &ConfigState) -> BTreeMap<String, u32> {
    configs
        .connectors
        .keys()
        .map(|name| {
            let tasks = configs
                .tasks
                .get(name)
                .map_or(0, |tasks| tasks.len() as u32);
            (name.clone(), tasks)
        })
        .collect()
}

async fn herd(worker: Arc<Worker>) {
    let mut member = Member::new(Arc::clone(&worker.config), worker.admin.clone());
    let mut shutdown = worker.shutdown.subscribe();
    let mut running = Running::default();
    let mut restarts_seen: Option<i64> = None;
    let mut failures = 0u32;
    let standalone = worker.stores.standalone();
    let mut standalone_generation = 0;
    'join: loop {
        if *shutdown.borrow() {
            break;
        }
        stop_all(&mut running).await;
        if let Err(error) = worker
            .stores
            .configs
            .read_to_end(&worker.admin, READ_TIMEOUT)
            .await
        {
            tracing::warn!(error = %error, "reading the config topic before joining failed; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        let config_offset = worker.stores.configs.position(0) - 1;
        let restarts_seen = restarts_seen.get_or_insert(config_offset);
        let state = WorkerState {
            url: worker.url(),
            config_offset,
        };
        let joined = if standalone {
            // A standalone worker is its own group: everything is its.
            standalone_generation += 1;
            let id = worker.config.worker_id.clone();
            let mut assignments =
                leader_assignment(&worker, vec![(id.clone(), state.clone())], id.clone()).await;
            Ok(super::member::Joined {
                member_id: id.clone(),
                generation: standalone_generation,
                assignment: assignments.remove(&id).unwrap_or_default(),
            })
        } else {
            let leader_worker = Arc::clone(&worker);
            tokio::select! {
                joined = member.join(&state, move |members, leader_id| async move {
                    leader_assignment(&leader_worker, members, leader_id).await
                }) => joined,
                _ = shutdown.changed() => break,
            }
        };
        let joined = match joined {
            Ok(joined) => {
                failures = 0;
                joined
            }
            Err(error) => {
                failures += 1;
                if error.is_retriable() && failures < 20 {
                    // A coordinator loading or moving: normal at a cluster's start.
                    tracing::debug!(group = %worker.config.group_id, error = %error, "joining the Connect group: retrying");
                } else if failures == 1 || failures == 20 {
                    tracing::warn!(group = %worker.config.group_id, error = %error, "joining the Connect group failed; retrying");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        {
            let mut view = worker.view.lock().unwrap_or_else(|e| e.into_inner());
            view.member_id = joined.member_id.clone();
            view.generation = joined.generation;
            view.leader_url = joined.assignment.leader_url.clone();
        }
        if worker.stores.configs.position(0) - 1 < joined.assignment.config_offset
            && let Err(error) = worker
                .stores
                .configs
                .read_to_end(&worker.admin, READ_TIMEOUT)
                .await
        {
            tracing::warn!(error = %error, "reading the config topic to the leader's offset failed; joining again");
            continue;
        }
        let generation = joined.generation;
        tracing::info!(
            group = %worker.config.group_id,
            generation,
            member = %joined.member_id,
            leader = %joined.assignment.leader_url,
            assignment = ?joined.assignment.work,
            "joined the Connect group"
        );
        let mut known = {
            let configs = worker.stores.configs.read();
            if configs
                .assignment_changed_offset
                .is_some_and(|offset| offset > joined.assignment.config_offset)
            {
                // A connector or its tasks changed after the leader assigned: this
                // assignment does not cover it (the change's notification may have come
                // and gone while joining).
                tracing::info!("connectors or their tasks changed while joining; rebalancing");
                continue 'join;
            }
            fingerprint(&configs)
        };
        for (connector, work) in &joined.assignment.work {
            if work.contains(&CONNECTOR_TASK) {
                start_connector(&worker, &mut running, connector, generation).await;
            }
            for task in work.iter().filter(|&&t| t >= 0) {
                start_task(&worker, &mut running, connector, *task as u32, generation).await;
            }
        }
        let mut heartbeat = tokio::time::interval(worker.config.heartbeat_interval);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heartbeat_failures = 0u32;
        loop {
            tokio::select! {
                _ = shutdown.changed() => break 'join,
                _ = heartbeat.tick(), if !standalone => match member.heartbeat().await {
                    Ok(true) => heartbeat_failures = 0,
                    Ok(false) => {
                        tracing::info!(group = %worker.config.group_id, "the Connect group is rebalancing; joining again");
                        continue 'join;
                    }
                    Err(error) => {
                        heartbeat_failures += 1;
                        if heartbeat_failures == 1 {
                            tracing::warn!(error = %error, "a heartbeat to the Connect group failed");
                        }
                        if worker.config.heartbeat_interval * heartbeat_failures >= worker.config.session_timeout {
                            continue 'join;
                        }
                    }
                },
                _ = worker.config_changed.notified() => {
                    let now = fingerprint(&worker.stores.configs.read());
                    if now != known {
                        tracing::info!("connectors or their tasks changed; rebalancing");
                        known = now;
                        continue 'join;
                    }
                    react(&worker, &mut running, restarts_seen, generation).await;
                    // Task configs written just now change the fingerprint: rejoin for them.
                    if fingerprint(&worker.stores.configs.read()) != known {
                        continue 'join;
                    }
                }
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    reap(&worker, &mut running, generation).await;
                }
            }
        }
    }
    stop_all(&mut running).await;
    member.leave().await;
}

async fn leader_assignment(
    worker: &Worker,
    members: Vec<(String, WorkerState)>,
    leader_id: String,
) -> BTreeMap<String, super::member::Assignment> {
    if let Err(error) = worker
        .stores
        .configs
        .read_to_end(&worker.admin, READ_TIMEOUT)
        .await
    {
        tracing::warn!(error = %error, "the leader could not read the config topic to its end; assigning what it has");
    }
    let config_offset = worker.stores.configs.position(0) - 1;
    let counts = fingerprint(&worker.stores.configs.read());
    let leader_url = members
        .iter()
        .find(|(id, _)| *id == leader_id)
        .map(|(_, state)| state.url.clone())
        .unwrap_or_default();
    assign(&members, &counts, &leader_id, &leader_url, config_offset)
}

fn connector_status_key(name: &str) -> String {
    format!("status-connector-{name}")
}

fn task_status_key(name: &str, task: u32) -> String {
    format!("status-task-{name}-{task}")
}

fn state_name(target: TargetState) -> &'static str {
    match target {
        TargetState::Started => "RUNNING",
        TargetState::Paused => "PAUSED",
        TargetState::Stopped => "STOPPED",
    }
}

/// Starts a connector's instance here: checks its config, writes its task configs when they
/// changed, reports its status.
async fn start_connector(worker: &Worker, running: &mut Running, name: &str, generation: i32) {
    let (config, target, committed) = {
        let configs = worker.stores.configs.read();
        let Some(config) = configs.connectors.get(name).cloned() else {
            return;
        };
        (
            config,
            configs.target(name),
            configs.tasks.get(name).cloned(),
        )
    };
    let plugin = match plugins::check(&config) {
        Ok(plugin) => plugin,
        Err(error) => {
            worker
                .report(
                    connector_status_key(name),
                    worker.status("FAILED", Some(error.to_string()), generation),
                )
                .await;
            running.connectors.insert(
                name.to_owned(),
                RunningConnector {
                    config,
                    target,
                    failed: true,
                },
            );
            return;
        }
    };
    let wanted = if target == TargetState::Stopped {
        Vec::new()
    } else {
        plugin.task_configs(&config)
    };
    if committed.as_ref() != Some(&wanted)
        && let Err(error) = write_task_configs(worker, name, &wanted).await
    {
        tracing::warn!(connector = %name, error = %error, "writing task configs failed");
    }
    worker
        .report(
            connector_status_key(name),
            worker.status(state_name(target), None, generation),
        )
        .await;
    tracing::info!(connector = %name, class = plugin.class(), state = state_name(target), "connector started");
    running.connectors.insert(
        name.to_owned(),
        RunningConnector {
            config,
            target,
            failed: false,
        },
    );
}

async fn write_task_configs(
    worker: &Worker,
    name: &str,
    tasks: &[BTreeMap<String, String>],
) -> Result<(), ConnectError> {
    for (n, task) in tasks.iter().enumerate() {
        worker
            .write_config(
                format!("task-{name}-{n}"),
                Some(super::store::connector_record(task)),
            )
            .await?;
    }
    worker
        .write_config(
            format!("commit-{name}"),
            Some(super::store::commit_record(tasks.len())),
        )
        .await
}

async fn start_task(
    worker: &Worker,
    running: &mut Running,
    name: &str,
    task: u32,
    generation: i32,
) {
    let (config, target) = {
        let configs = worker.stores.configs.read();
        let Some(config) = configs
            .tasks
            .get(name)
            .and_then(|tasks| tasks.get(task as usize))
            .cloned()
        else {
            return;
        };
        (config, configs.target(name))
    };
    let key = task_status_key(name, task);
    let prepared = (|| -> Result<(Plugin, Converter, Converter), ConnectError> {
        let plugin = plugins::check(&config)?;
        let key_converter = Converter::from_config(&config, "key.converter")?
            .unwrap_or(worker.config.key_converter);
        let value_converter = Converter::from_config(&config, "value.converter")?
            .unwrap_or(worker.config.value_converter);
        Ok((plugin, key_converter, value_converter))
    })();
    let (target_tx, target_rx) = watch::channel(target);
    let (plugin, key_converter, value_converter) = match prepared {
        Ok(prepared) => prepared,
        Err(error) => {
            worker
                .report(
                    key,
                    worker.status("FAILED", Some(error.to_string()), generation),
                )
                .await;
            running.tasks.insert(
                (name.to_owned(), task),
                RunningTask {
                    target: target_tx,
                    handle: None,
                    failed: true,
                },
            );
            return;
        }
    };
    let context = TaskContext {
        worker: Arc::clone(&worker.config),
        connector: name.to_owned(),
        task,
        plugin,
        config,
        key_converter,
        value_converter,
        producer: worker.producer.clone(),
        stores: Arc::clone(&worker.stores),
        target: target_rx,
        shutdown: worker.shutdown.subscribe(),
        admin: worker.admin.clone(),
        counters: Arc::clone(
            worker
                .counters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry((name.to_owned(), task))
                .or_default(),
        ),
    };
    worker
        .report(key, worker.status(state_name(target), None, generation))
        .await;
    let handle = tokio::spawn(tasks::run(context));
    running.tasks.insert(
        (name.to_owned(), task),
        RunningTask {
            target: target_tx,
            handle: Some(handle),
            failed: false,
        },
    );
}

/// Stops every task here and waits for each to commit (at most `TASK_STOP_TIMEOUT`).
async fn stop_all(running: &mut Running) {
    for task in running.tasks.values() {
        task.target.send_replace(TargetState::Stopped);
    }
    for ((name, number), task) in std::mem::take(&mut running.tasks) {
        stop_task(&name, number, task).await;
    }
    running.connectors.clear();
}

async fn stop_task(name: &str, number: u32, mut task: RunningTask) {
    task.target.send_replace(TargetState::Stopped);
    let Some(mut handle) = task.handle.take() else {
        return;
    };
    match tokio::time::timeout(TASK_STOP_TIMEOUT, &mut handle).await {
        Ok(_) => {}
        Err(_) => {
            tracing::warn!(connector = %name, task = number, "a task did not stop within {TASK_STOP_TIMEOUT:?}; abandoning it");
            handle.abort();
        }
    }
}

/// Reports tasks that ended with a failure.
async fn reap(worker: &Worker, running: &mut Running, generation: i32) {
    for ((name, number), task) in running.tasks.iter_mut() {
        let finished = task.handle.as_ref().is_some_and(|h| h.is_finished());
        if !finished {
            continue;
        }
        let Some(handle) = task.handle.take() else {
            continue;
        };
        let outcome = match handle.await {
            Ok(outcome) => outcome,
            Err(join) => Err(ConnectError::Data(format!("the task panicked: {join}"))),
        };
        if let Err(error) = outcome {
            task.failed = true;
            tracing::warn!(connector = %name, task = number, error = %error, "task failed; it stays FAILED until restarted");
            let trace = format!("org.apache.kafka.connect.errors.ConnectException: {error}");
            worker
                .report(
                    task_status_key(name, *number),
                    worker.status("FAILED", Some(trace), generation),
                )
                .await;
        }
    }
}

/// Applies config changes that do not change the assignment: a running connector's new
/// config (new task configs), target states, restart requests.
async fn react(worker: &Worker, running: &mut Running, restarts_seen: &mut i64, generation: i32) {
    let (connectors, targets, restarts) = {
        let configs = worker.stores.configs.read();
        let connectors: BTreeMap<String, BTreeMap<String, String>> = running
            .connectors
            .keys()
            .filter_map(|name| {
                configs
                    .connectors
                    .get(name)
                    .map(|c| (name.clone(), c.clone()))
            })
            .collect();
        let targets: BTreeMap<String, TargetState> = running
            .connectors
            .keys()
            .chain(running.tasks.keys().map(|(name, _)| name))
            .map(|name| (name.clone(), configs.target(name)))
            .collect();
        let restarts: Vec<_> = configs
            .restarts
            .iter()
            .filter(|r| r.offset > *restarts_seen)
            .cloned()
            .collect();
        (connectors, targets, restarts)
    };
    for (name, config) in connectors {
        let Some(current) = running.connectors.get(&name) else {
            continue;
        };
        let target = targets.get(&name).copied().unwrap_or(TargetState::Started);
        if current.config != config || current.target != target {
            start_connector(worker, running, &name, generation).await;
        }
    }
    for ((name, number), task) in running.tasks.iter() {
        let target = targets.get(name).copied().unwrap_or(TargetState::Started);
        if *task.target.borrow() != target && !task.failed {
            task.target.send_replace(target);
            if target != TargetState::Stopped {
                worker
                    .report(
                        task_status_key(name, *number),
                        worker.status(state_name(target), None, generation),
                    )
                    .await;
            }
        }
    }
    for restart in restarts {
        *restarts_seen = (*restarts_seen).max(restart.offset);
        let name = restart.connector.clone();
        if let Some(connector) = running.connectors.get(&name)
            && (!restart.only_failed || connector.failed)
        {
            tracing::info!(connector = %name, "restarting the connector");
            start_connector(worker, running, &name, generation).await;
        }
        if !restart.include_tasks {
            continue;
        }
        let chosen: Vec<(String, u32)> = running
            .tasks
            .iter()
            .filter(|((task_connector, _), task)| {
                *task_connector == name && (!restart.only_failed || task.failed)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for (task_connector, number) in chosen {
            if let Some(task) = running.tasks.remove(&(task_connector.clone(), number)) {
                tracing::info!(connector = %task_connector, task = number, "restarting the task");
                stop_task(&task_connector, number, task).await;
            }
            start_task(worker, running, &task_connector, number, generation).await;
        }
    }
}
