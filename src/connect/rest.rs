//! Kafka Connect's REST API: the same paths, JSON shapes and status codes, errors as
//! `{"error_code": N, "message": "..."}`. Any worker answers any request: writes go to the
//! config topic, which every worker reads, and the answer waits until this worker has read its
//! own write back, so a GET that follows a PUT sees it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Value, json};

use super::ConnectError;
use super::data::Converter;
use super::herder::{READ_TIMEOUT, Worker};
use super::plugins::{self, Kind, Plugin};
use super::store::{self, Status, TargetState};
use crate::http::{Request, Response, percent_decode};

/// The largest request body read (a connector config).
pub const BODY_BYTES_MAX: usize = 1024 * 1024;

type Answer = Pin<Box<dyn Future<Output = Response> + Send>>;

pub fn handler(worker: Arc<Worker>) -> impl Fn(Request) -> Answer + Send + Sync + 'static {
    move |request: Request| {
        let worker = Arc::clone(&worker);
        Box::pin(async move {
            let method = request.method.clone();
            let path = request.path.clone();
            if method == "GET" && path == "/metrics" {
                return Response::new(
                    200,
                    "text/plain; version=0.0.4",
                    metrics(&worker).into_bytes(),
                );
            }
            let answer = route(&worker, &request).await;
            let response = match answer {
                Ok((status, body)) => json_response(status, body),
                Err(error) => {
                    let status = error.status();
                    if status >= 500 {
                        tracing::warn!(method = %method, path = %path, error = %error, "REST request failed");
                    }
                    json_response(
                        status,
                        Some(json!({"error_code": status, "message": error.to_string()})),
                    )
                }
            };
            tracing::debug!(method = %method, path = %path, status = response.status, "REST request");
            response
        })
    }
}

/// The worker's metrics: its tasks' records and commits, and the state of each connector and
/// task it runs (from the status topic).
fn metrics(worker: &Worker) -> String {
    use crate::metrics::exposition::{Exposition, Kind};
    use std::sync::atomic::Ordering;
    let counters: Vec<((String, u32), (u64, u64))> = worker
        .counters
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(id, c)| {
            (
                id.clone(),
                (
                    c.records.load(Ordering::Relaxed),
                    c.commits.load(Ordering::Relaxed),
                ),
            )
        })
        .collect();
    let mut out = Exposition::new();
    for (name, help, pick) in [
        (
            "sluice_connect_task_records_total",
            "Records a task on this worker sent (a source, acknowledged) or wrote (a sink).",
            0,
        ),
        (
            "sluice_connect_task_offset_commits_total",
            "Positions a source task wrote, or offset commits of a sink task, on this worker.",
            1,
        ),
    ] {
        let mut family = out.family(name, Kind::Counter, help);
        for ((connector, task), values) in &counters {
            let task = task.to_string();
            let value = if pick == 0 { values.0 } else { values.1 };
            family.sample(&[("connector", connector), ("task", &task)], value);
        }
    }
    let statuses = worker.stores.statuses.read();
    let mine = |status: &Status| status.worker_id == worker.config.worker_id;
    let mut family = out.family(
        "sluice_connect_task_state",
        Kind::Gauge,
        "1 for the state of each task this worker runs (RUNNING, PAUSED, FAILED, ...).",
    );
    for ((connector, task), status) in statuses.tasks.iter().filter(|(_, s)| mine(s)) {
        let task = task.to_string();
        family.sample(
            &[
                ("connector", connector),
                ("task", &task),
                ("state", &status.state),
            ],
            1u64,
        );
    }
    let mut family = out.family(
        "sluice_connect_connector_state",
        Kind::Gauge,
        "1 for the state of each connector this worker runs.",
    );
    for (connector, status) in statuses.connectors.iter().filter(|(_, s)| mine(s)) {
        family.sample(&[("connector", connector), ("state", &status.state)], 1u64);
    }
    out.into_text()
}

fn json_response(status: u16, body: Option<Value>) -> Response {
    match body {
        Some(body) => Response::new(status, "application/json", body.to_string().into_bytes()),
        None => Response::new(status, "application/json", Vec::new()),
    }
}

type Outcome = Result<(u16, Option<Value>), ConnectError>;

fn not_found(name: &str) -> ConnectError {
    ConnectError::NotFound(format!("Connector {name} not found"))
}

async fn route(worker: &Worker, request: &Request) -> Outcome {
    let segments: Vec<String> = request
        .path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = request.method.as_str();
    match (method, segments.as_slice()) {
        ("GET", []) => Ok((
            200,
            Some(json!({
                "version": env!("CARGO_PKG_VERSION"),
                "commit": "unknown",
                "kafka_cluster_id": worker.cluster_id,
            })),
        )),
        ("GET", ["connectors"]) => list(worker, request),
        ("POST", ["connectors"]) => create(worker, request).await,
        ("GET", ["connectors", name]) => {
            let info = info(worker, name).ok_or_else(|| not_found(name))?;
            Ok((200, Some(info)))
        }
        ("DELETE", ["connectors", name]) => delete(worker, name).await,
        ("GET", ["connectors", name, "config"]) => {
            let configs = worker.stores.configs.read();
            let config = configs
                .connectors
                .get(*name)
                .ok_or_else(|| not_found(name))?;
            Ok((200, Some(json!(config))))
        }
        ("PUT", ["connectors", name, "config"]) => {
            let body = parse_body(request)?;
            let config = string_map(&body, "the connector config")?;
            put_config(worker, name, config, None).await
        }
        ("GET", ["connectors", name, "status"]) => {
            let status = status(worker, name).ok_or_else(|| not_found(name))?;
            Ok((200, Some(status)))
        }
        ("GET", ["connectors", name, "tasks"]) => {
            let configs = worker.stores.configs.read();
            if !configs.connectors.contains_key(*name) {
                return Err(not_found(name));
            }
            let tasks: Vec<Value> = configs
                .tasks
                .get(*name)
                .map(|tasks| {
                    tasks
                        .iter()
                        .enumerate()
                        .map(|(n, config)| {
                            json!({"id": {"connector": name, "task": n}, "config": config})
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok((200, Some(Value::Array(tasks))))
        }
        ("GET", ["connectors", name, "tasks", task, "status"]) => {
            let number: u32 = task
                .parse()
                .map_err(|_| ConnectError::NotFound(format!("Task {name}-{task} not found")))?;
            let statuses = worker.stores.statuses.read();
            let status = statuses
                .tasks
                .get(&((*name).to_owned(), number))
                .ok_or_else(|| {
                    ConnectError::NotFound(format!("No status found for task {name}-{number}"))
                })?;
            Ok((200, Some(task_status_json(number, status))))
        }
        ("POST", ["connectors", name, "restart"]) => restart(worker, request, name).await,
        ("PUT", ["connectors", name, action @ ("pause" | "resume" | "stop")]) => {
            let target = match *action {
                "pause" => TargetState::Paused,
                "resume" => TargetState::Started,
                _ => TargetState::Stopped,
            };
            if !worker.stores.configs.read().connectors.contains_key(*name) {
                return Err(not_found(name));
            }
            worker
                .write_config_read_back(
                    format!("target-state-{name}"),
                    Some(store::target_record(target)),
                )
                .await?;
            Ok((202, None))
        }
        ("GET", ["connectors", name, "offsets"]) => {
            let offsets = offsets(worker, name).await?;
            Ok((200, Some(json!({ "offsets": offsets }))))
        }
        ("DELETE", ["connectors", name, "offsets"]) => reset_offsets(worker, name).await,
        ("GET", ["connector-plugins"]) => {
            let mut plugins: Vec<Value> = Plugin::ALL
                .iter()
                .map(|plugin| {
                    json!({"class": plugin.class(), "type": plugin.kind().as_str(), "version": plugin.version()})
                })
                .collect();
            if request.query("connectorsOnly") == Some("false") {
                for class in super::data::CONVERTER_CLASSES {
                    plugins.push(json!({"class": class, "type": "converter"}));
                }
            }
            Ok((200, Some(Value::Array(plugins))))
        }
        ("PUT", ["connector-plugins", plugin, "config", "validate"]) => {
            let body = parse_body(request)?;
            let mut config = string_map(&body, "the connector config")?;
            let plugin = Plugin::by_class(plugin).ok_or_else(|| {
                ConnectError::BadRequest(format!(
                    "Failed to find any class that implements Connector and which name matches {plugin}"
                ))
            })?;
            config.insert("connector.class".to_owned(), plugin.class().to_owned());
            Ok((200, Some(plugin.validation_report(&config))))
        }
        (_, ["connectors", ..]) | (_, ["connector-plugins", ..]) | (_, [])
            if known_path(&segments) =>
        {
            Err(ConnectError::MethodNotAllowed)
        }
        _ => Err(ConnectError::NotFound("HTTP 404 Not Found".to_owned())),
    }
}

/// Whether a path exists with another method (405 rather than 404).
fn known_path(segments: &[&str]) -> bool {
    matches!(
        segments,
        [] | ["connectors"]
            | ["connectors", _]
            | [
                "connectors",
                _,
                "config" | "status" | "restart" | "pause" | "resume" | "stop" | "tasks" | "offsets"
            ]
            | ["connectors", _, "tasks", _, "status"]
            | ["connector-plugins"]
            | ["connector-plugins", _, "config", "validate"]
    )
}

fn parse_body(request: &Request) -> Result<Value, ConnectError> {
    serde_json::from_slice(&request.body)
        .map_err(|error| ConnectError::BadRequest(format!("The request body is not JSON: {error}")))
}

/// A JSON object of settings as strings (numbers and booleans written as Kafka's Jackson
/// reads them into a `Map<String, String>`).
fn string_map(value: &Value, what: &str) -> Result<BTreeMap<String, String>, ConnectError> {
    let Some(object) = value.as_object() else {
        return Err(ConnectError::BadRequest(format!(
            "{what} must be a JSON object"
        )));
    };
    let mut map = BTreeMap::new();
    for (key, value) in object {
        let text = match value {
            Value::String(text) => text.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => continue,
            _ => {
                return Err(ConnectError::BadRequest(format!(
                    "{what}: the value of {key} must be a string"
                )));
            }
        };
        map.insert(key.clone(), text);
    }
    Ok(map)
}

fn check_name(name: &str) -> Result<(), ConnectError> {
    if name.trim().is_empty() {
        return Err(ConnectError::BadRequest(
            "Connector name is null or empty".to_owned(),
        ));
    }
    if name.trim() != name {
        return Err(ConnectError::BadRequest(format!(
            "Connector name '{name}' cannot contain leading or trailing whitespace"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(ConnectError::BadRequest(format!(
            "Connector name '{}' contains control characters",
            name.escape_debug()
        )));
    }
    Ok(())
}

fn list(worker: &Worker, request: &Request) -> Outcome {
    let names: Vec<String> = worker
        .stores
        .configs
        .read()
        .connectors
        .keys()
        .cloned()
        .collect();
    let expand: Vec<&str> = request
        .query
        .iter()
        .filter(|(key, _)| key == "expand")
        .map(|(_, value)| value.as_str())
        .collect();
    if expand.is_empty() {
        return Ok((200, Some(json!(names))));
    }
    let mut out = serde_json::Map::new();
    for name in names {
        let mut entry = serde_json::Map::new();
        if expand.contains(&"status")
            && let Some(status) = status(worker, &name)
        {
            entry.insert("status".to_owned(), status);
        }
        if expand.contains(&"info")
            && let Some(info) = info(worker, &name)
        {
            entry.insert("info".to_owned(), info);
        }
        out.insert(name, Value::Object(entry));
    }
    Ok((200, Some(Value::Object(out))))
}

fn connector_kind(config: &BTreeMap<String, String>) -> &'static str {
    config
        .get("connector.class")
        .and_then(|class| Plugin::by_class(class))
        .map_or("unknown", |plugin| plugin.kind().as_str())
}

fn info(worker: &Worker, name: &str) -> Option<Value> {
    let configs = worker.stores.configs.read();
    let config = configs.connectors.get(name)?;
    let tasks: Vec<Value> = (0..configs.tasks.get(name).map_or(0, Vec::len))
        .map(|n| json!({"connector": name, "task": n}))
        .collect();
    Some(json!({
        "name": name,
        "config": config,
        "tasks": tasks,
        "type": connector_kind(config),
    }))
}

fn status_json(status: Option<&Status>) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    match status {
        Some(status) => {
            out.insert("state".to_owned(), json!(status.state));
            out.insert("worker_id".to_owned(), json!(status.worker_id));
            if let Some(trace) = &status.trace {
                out.insert("trace".to_owned(), json!(trace));
            }
        }
        None => {
            out.insert("state".to_owned(), json!("UNASSIGNED"));
            out.insert("worker_id".to_owned(), json!(""));
        }
    }
    out
}

fn task_status_json(number: u32, status: &Status) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("id".to_owned(), json!(number));
    out.extend(status_json(Some(status)));
    Value::Object(out)
}

fn status(worker: &Worker, name: &str) -> Option<Value> {
    let (kind, task_count) = {
        let configs = worker.stores.configs.read();
        let config = configs.connectors.get(name)?;
        (
            connector_kind(config),
            configs.tasks.get(name).map_or(0, Vec::len),
        )
    };
    let statuses = worker.stores.statuses.read();
    let tasks: Vec<Value> = (0..task_count as u32)
        .map(|n| {
            let mut out = serde_json::Map::new();
            out.insert("id".to_owned(), json!(n));
            out.extend(status_json(statuses.tasks.get(&(name.to_owned(), n))));
            Value::Object(out)
        })
        .collect();
    Some(json!({
        "name": name,
        "connector": Value::Object(status_json(statuses.connectors.get(name))),
        "tasks": tasks,
        "type": kind,
    }))
}

async fn create(worker: &Worker, request: &Request) -> Outcome {
    let body = parse_body(request)?;
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ConnectError::BadRequest("Connector name is null or empty".to_owned()))?
        .to_owned();
    let config = string_map(
        body.get("config").unwrap_or(&Value::Null),
        "Connector config",
    )?;
    let initial = match body.get("initial_state").and_then(Value::as_str) {
        None | Some("RUNNING") => None,
        Some("PAUSED") => Some(TargetState::Paused),
        Some("STOPPED") => Some(TargetState::Stopped),
        Some(other) => {
            return Err(ConnectError::BadRequest(format!(
                "Invalid initial_state {other}: expected RUNNING, PAUSED or STOPPED"
            )));
        }
    };
    if worker.stores.configs.read().connectors.contains_key(&name) {
        return Err(ConnectError::Conflict(format!(
            "Connector {name} already exists"
        )));
    }
    put_config(worker, &name, config, initial)
        .await
        .map(|(_, body)| (201, body))
}

pub(super) async fn put_config(
    worker: &Worker,
    name: &str,
    mut config: BTreeMap<String, String>,
    initial: Option<TargetState>,
) -> Outcome {
    check_name(name)?;
    match config.get("name") {
        Some(configured) if configured != name => {
            return Err(ConnectError::BadRequest(format!(
                "Connector name configuration ({configured}) doesn't match connector name in the URL ({name})"
            )));
        }
        _ => {
            config.insert("name".to_owned(), name.to_owned());
        }
    }
    plugins::check(&config)?;
    Converter::from_config(&config, "key.converter")?;
    Converter::from_config(&config, "value.converter")?;
    let existed = worker.stores.configs.read().connectors.contains_key(name);
    if !existed && let Some(target) = initial {
        worker
            .write_config(
                format!("target-state-{name}"),
                Some(store::target_record(target)),
            )
            .await?;
    }
    worker
        .write_config_read_back(
            format!("connector-{name}"),
            Some(store::connector_record(&config)),
        )
        .await?;
    tracing::info!(connector = %name, created = !existed, "connector config written");
    let info = info(worker, name).ok_or_else(|| not_found(name))?;
    Ok((if existed { 200 } else { 201 }, Some(info)))
}

async fn delete(worker: &Worker, name: &str) -> Outcome {
    let tasks = {
        let configs = worker.stores.configs.read();
        if !configs.connectors.contains_key(name) {
            return Err(not_found(name));
        }
        configs.tasks.get(name).map_or(0, Vec::len)
    };
    worker
        .write_config(format!("connector-{name}"), None)
        .await?;
    worker
        .write_config_read_back(format!("target-state-{name}"), None)
        .await?;
    worker
        .write_status(format!("status-connector-{name}"), None)
        .await?;
    for n in 0..tasks {
        worker
            .write_status(format!("status-task-{name}-{n}"), None)
            .await?;
    }
    tracing::info!(connector = %name, "connector deleted");
    Ok((204, None))
}

async fn restart(worker: &Worker, request: &Request, name: &str) -> Outcome {
    if !worker.stores.configs.read().connectors.contains_key(name) {
        return Err(not_found(name));
    }
    let flag = |key: &str| {
        request
            .query(key)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    };
    let include_tasks = flag("includeTasks");
    let only_failed = flag("onlyFailed");
    // Kafka answers 202 with what will restart marked RESTARTING: the plan is made from the
    // statuses before the request is written (after, the restart may already be done).
    let mut status = status(worker, name).ok_or_else(|| not_found(name))?;
    let restarting = |entry: &mut Value, include: bool| {
        let failed = entry.get("state").and_then(Value::as_str) == Some("FAILED");
        if include && (!only_failed || failed) {
            entry["state"] = json!("RESTARTING");
        }
    };
    restarting(&mut status["connector"], true);
    if let Some(tasks) = status["tasks"].as_array_mut() {
        for task in tasks {
            restarting(task, include_tasks);
        }
    }
    worker
        .write_config_read_back(
            format!("restart-connector-{name}"),
            Some(store::restart_record(include_tasks, only_failed)),
        )
        .await?;
    if !include_tasks && !only_failed {
        return Ok((204, None));
    }
    Ok((202, Some(status)))
}

fn connector_plugin(worker: &Worker, name: &str) -> Result<Plugin, ConnectError> {
    let configs = worker.stores.configs.read();
    let config = configs
        .connectors
        .get(name)
        .ok_or_else(|| not_found(name))?;
    plugins::check(config)
}

async fn offsets(worker: &Worker, name: &str) -> Result<Vec<Value>, ConnectError> {
    match connector_plugin(worker, name)?.kind() {
        Kind::Source => {
            worker
                .stores
                .offsets
                .read_to_end(&worker.admin, READ_TIMEOUT)
                .await?;
            let offsets = worker.stores.offsets.read();
            Ok(offsets
                .offsets
                .get(name)
                .map(|map| {
                    map.values()
                        .map(
                            |(partition, offset)| json!({"partition": partition, "offset": offset}),
                        )
                        .collect()
                })
                .unwrap_or_default())
        }
        Kind::Sink => {
            let group = format!("connect-{name}");
            let committed = match worker.admin.list_group_offsets(&group).await {
                Ok(committed) => committed,
                Err(error) if error.code() == Some(crate::protocol::errors::GROUP_ID_NOT_FOUND) => {
                    BTreeMap::new()
                }
                Err(error) => return Err(error.into()),
            };
            Ok(committed
                .into_iter()
                .map(|(tp, offset)| {
                    json!({
                        "partition": {"kafka_topic": tp.topic, "kafka_partition": tp.partition},
                        "offset": {"kafka_offset": offset},
                    })
                })
                .collect())
        }
    }
}

async fn reset_offsets(worker: &Worker, name: &str) -> Outcome {
    let plugin = connector_plugin(worker, name)?;
    if worker.stores.configs.read().target(name) != TargetState::Stopped {
        return Err(ConnectError::BadRequest(format!(
            "Connectors must be in the STOPPED state before their offsets can be modified. This \
             can be done for the specified connector by issuing a 'PUT' request to the \
             '/connectors/{name}/stop' endpoint"
        )));
    }
    match plugin.kind() {
        Kind::Source => {
            worker
                .stores
                .offsets
                .read_to_end(&worker.admin, READ_TIMEOUT)
                .await?;
            let partitions: Vec<Value> = worker
                .stores
                .offsets
                .read()
                .offsets
                .get(name)
                .map(|map| {
                    map.values()
                        .map(|(partition, _)| partition.clone())
                        .collect()
                })
                .unwrap_or_default();
            for partition in partitions {
                let key = store::offset_key(name, &partition);
                let key = String::from_utf8_lossy(&key).into_owned();
                worker.write(&worker.config.offset_topic, key, None).await?;
            }
            worker
                .stores
                .offsets
                .read_to_end(&worker.admin, READ_TIMEOUT)
                .await?;
        }
        Kind::Sink => {
            let group = format!("connect-{name}");
            match worker.admin.delete_groups(&[group]).await {
                Ok(()) => {}
                Err(error) if error.code() == Some(crate::protocol::errors::GROUP_ID_NOT_FOUND) => {
                }
                Err(error) if error.code() == Some(crate::protocol::errors::NON_EMPTY_GROUP) => {
                    return Err(ConnectError::BadRequest(format!(
                        "the sink's consumer group connect-{name} still has members: its tasks have not stopped yet; try again"
                    )));
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
    tracing::info!(connector = %name, "connector offsets reset");
    Ok((
        200,
        Some(json!({"message": "The offsets for this connector have been reset successfully"})),
    ))
}
