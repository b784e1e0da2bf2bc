//! The console's actions, served only with `http.console.actions.enable=true`: create a
//! topic, change a topic's configs, delete a partition's records, reset a group's offsets.
//! Each is the admin call the CLI makes for the same thing, with the same refusals (a group's
//! offsets are reset only while it has no members, as `kafka-consumer-groups --reset-offsets`).
//!
//! Requests are JSON bodies of POSTs that carry the header `X-Sluice-Console: 1`: a page of
//! another site cannot send that header here without a CORS preflight this listener never
//! allows, so no other site can make a visitor's browser act on the cluster.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::Response;
use crate::client::{Admin, AlterConfigOp, NewTopic, OffsetSpec, RESOURCE_TOPIC, TopicPartition};

/// The header every action must carry.
pub const ACTION_HEADER: &str = "x-sluice-console";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTopic {
    name: String,
    /// -1 or absent: the broker's `num.partitions`.
    #[serde(default = "minus_one")]
    partitions: i32,
    /// -1 or absent: `default.replication.factor`.
    #[serde(default = "minus_one_i16")]
    replication_factor: i16,
    #[serde(default)]
    configs: BTreeMap<String, String>,
}

fn minus_one() -> i32 {
    -1
}

fn minus_one_i16() -> i16 {
    -1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AlterConfigs {
    /// Keys to set.
    #[serde(default)]
    set: BTreeMap<String, String>,
    /// Keys back to their defaults.
    #[serde(default)]
    delete: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteRecords {
    /// Records below this offset go (-1: all up to the high watermark).
    before_offset: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetOffsets {
    topic: String,
    /// `earliest`, `latest`, `offset` or `timestamp`.
    to: String,
    offset: Option<i64>,
    /// Milliseconds since the epoch.
    timestamp: Option<i64>,
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Response> {
    serde_json::from_slice(body)
        .map_err(|error| Response::error(400, &format!("the request body: {error}")))
}

/// Runs the action at `path` (under `/api/v1/`).
pub async fn act(admin: &Admin, path: &[&str], body: &[u8]) -> Response {
    let result = match path {
        ["topics"] => create_topic(admin, body).await,
        ["topics", topic, "configs"] => alter_configs(admin, topic, body).await,
        ["topics", topic, "partitions", partition, "delete-records"] => {
            delete_records(admin, topic, partition, body).await
        }
        ["groups", group, "offsets"] => reset_offsets(admin, group, body).await,
        _ => Err(Response::error(404, "no such console action")),
    };
    result.unwrap_or_else(|response| response)
}

fn done(message: String) -> Result<Response, Response> {
    Ok(Response::json(200, &serde_json::json!({ "done": message })))
}

fn failed(error: crate::client::Error) -> Response {
    Response::from_client(&error)
}

async fn create_topic(admin: &Admin, body: &[u8]) -> Result<Response, Response> {
    let request: CreateTopic = parse(body)?;
    let mut topic = NewTopic::new(
        &request.name,
        request.partitions,
        request.replication_factor,
    );
    topic.configs = request.configs;
    admin.create_topics(&[topic], false).await.map_err(failed)?;
    done(format!("created topic {}", request.name))
}

async fn alter_configs(admin: &Admin, topic: &str, body: &[u8]) -> Result<Response, Response> {
    let request: AlterConfigs = parse(body)?;
    let changes: Vec<(String, AlterConfigOp)> = request
        .set
        .into_iter()
        .map(|(key, value)| (key, AlterConfigOp::Set(value)))
        .chain(
            request
                .delete
                .into_iter()
                .map(|key| (key, AlterConfigOp::Delete)),
        )
        .collect();
    if changes.is_empty() {
        return Err(Response::error(400, "no config to set or delete"));
    }
    admin
        .alter_configs(RESOURCE_TOPIC, topic, &changes, false)
        .await
        .map_err(failed)?;
    done(format!(
        "changed {} config(s) of topic {topic}",
        changes.len()
    ))
}

async fn delete_records(
    admin: &Admin,
    topic: &str,
    partition: &str,
    body: &[u8],
) -> Result<Response, Response> {
    let request: DeleteRecords = parse(body)?;
    let partition: i32 = partition
        .parse()
        .map_err(|_| Response::error(400, &format!("partition {partition:?} is not a number")))?;
    let low = admin
        .delete_records(topic, &BTreeMap::from([(partition, request.before_offset)]))
        .await
        .map_err(failed)?;
    let start = low.get(&partition).copied().unwrap_or(-1);
    done(format!(
        "records of {topic}-{partition} deleted: the log now starts at {start}"
    ))
}

async fn reset_offsets(admin: &Admin, group: &str, body: &[u8]) -> Result<Response, Response> {
    let request: ResetOffsets = parse(body)?;
    let described = admin.describe_group(group).await.map_err(failed)?;
    if !described.members.is_empty() {
        return Err(Response::error(
            409,
            &format!(
                "group {group} has {} member(s) ({}): offsets can only be reset while it has none; \
                 stop its consumers first",
                described.members.len(),
                described.state
            ),
        ));
    }
    let partitions: BTreeSet<TopicPartition> = admin
        .describe_topics(std::slice::from_ref(&request.topic))
        .await
        .map_err(failed)?
        .into_iter()
        .flat_map(|t| {
            t.partitions
                .into_iter()
                .map(move |p| TopicPartition::new(t.name.as_str(), p.partition))
        })
        .collect();
    let offsets: BTreeMap<TopicPartition, i64> = match request.to.as_str() {
        "offset" => {
            let Some(offset) = request.offset else {
                return Err(Response::error(400, "to=offset needs an offset"));
            };
            let ends = admin
                .list_offsets(&partitions, OffsetSpec::Latest)
                .await
                .map_err(failed)?;
            let starts = admin
                .list_offsets(&partitions, OffsetSpec::Earliest)
                .await
                .map_err(failed)?;
            // As Kafka's tool: clamped into each partition's log.
            partitions
                .iter()
                .map(|tp| {
                    let start = starts.get(tp).copied().flatten().unwrap_or(0);
                    let end = ends.get(tp).copied().flatten().unwrap_or(start);
                    (tp.clone(), offset.clamp(start, end.max(start)))
                })
                .collect()
        }
        to @ ("earliest" | "latest" | "timestamp") => {
            let spec = match to {
                "earliest" => OffsetSpec::Earliest,
                "latest" => OffsetSpec::Latest,
                _ => match request.timestamp {
                    Some(ms) => OffsetSpec::Timestamp(ms),
                    None => return Err(Response::error(400, "to=timestamp needs a timestamp")),
                },
            };
            let found = admin
                .list_offsets(&partitions, spec)
                .await
                .map_err(failed)?;
            let ends = admin
                .list_offsets(&partitions, OffsetSpec::Latest)
                .await
                .map_err(failed)?;
            // No record at or after the time: the log end, as Kafka's tool.
            partitions
                .iter()
                .map(|tp| {
                    let offset = found
                        .get(tp)
                        .copied()
                        .flatten()
                        .or_else(|| ends.get(tp).copied().flatten())
                        .unwrap_or(0);
                    (tp.clone(), offset)
                })
                .collect()
        }
        other => {
            return Err(Response::error(
                400,
                &format!("to={other}: expected earliest, latest, offset or timestamp"),
            ));
        }
    };
    admin
        .alter_group_offsets(group, &offsets)
        .await
        .map_err(failed)?;
    done(format!(
        "offsets of group {group} on {} reset: {}",
        request.topic,
        offsets
            .iter()
            .map(|(tp, offset)| format!("{}={offset}", tp.partition))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
