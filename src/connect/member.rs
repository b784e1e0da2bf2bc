//! A worker's membership in its Connect group: protocol type `connect`, Kafka's eager
//! protocol (`default`, `ConnectProtocol` v0). Member metadata is the worker's URL and the
//! config topic offset it has read; the leader's assignment names, per worker, the connectors
//! and tasks it runs (task -1 is the connector itself).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::{ConnectError, WorkerConfig};
use crate::client::{Admin, Connection, Error as ClientError};
use crate::protocol::errors;

const PROTOCOL: &str = "default";
/// The connector itself in an assignment's task list.
pub const CONNECTOR_TASK: i32 = -1;

/// What a member tells the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerState {
    pub url: String,
    pub config_offset: i64,
}

/// What the leader gives a member.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    pub error: i16,
    pub leader: String,
    pub leader_url: String,
    pub config_offset: i64,
    /// connector -> its tasks here (-1: the connector).
    pub work: BTreeMap<String, Vec<i32>>,
}

fn put_string(out: &mut BytesMut, text: &str) {
    out.put_i16(text.len().min(i16::MAX as usize) as i16);
    out.put_slice(&text.as_bytes()[..text.len().min(i16::MAX as usize)]);
}

fn get_string(input: &mut Bytes) -> Result<String, ConnectError> {
    if input.remaining() < 2 {
        return Err(truncated());
    }
    let length = input.get_i16();
    if length < 0 || input.remaining() < length as usize {
        return Err(truncated());
    }
    let text = input.split_to(length as usize);
    Ok(String::from_utf8_lossy(&text).into_owned())
}

fn truncated() -> ConnectError {
    ConnectError::Kafka(ClientError::Protocol(
        "a Connect group member's metadata or assignment is truncated".to_owned(),
    ))
}

impl WorkerState {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i16(0);
        put_string(&mut out, &self.url);
        out.put_i64(self.config_offset);
        out.freeze()
    }

    pub fn decode(mut input: Bytes) -> Result<WorkerState, ConnectError> {
        if input.remaining() < 2 {
            return Err(truncated());
        }
        let _version = input.get_i16();
        let url = get_string(&mut input)?;
        if input.remaining() < 8 {
            return Err(truncated());
        }
        Ok(WorkerState {
            url,
            config_offset: input.get_i64(),
        })
    }
}

impl Assignment {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i16(0);
        out.put_i16(self.error);
        put_string(&mut out, &self.leader);
        put_string(&mut out, &self.leader_url);
        out.put_i64(self.config_offset);
        out.put_i32(self.work.len() as i32);
        for (connector, tasks) in &self.work {
            put_string(&mut out, connector);
            out.put_i32(tasks.len() as i32);
            for task in tasks {
                out.put_i32(*task);
            }
        }
        out.freeze()
    }

    pub fn decode(mut input: Bytes) -> Result<Assignment, ConnectError> {
        if input.remaining() < 4 {
            return Err(truncated());
        }
        let _version = input.get_i16();
        let error = input.get_i16();
        let leader = get_string(&mut input)?;
        let leader_url = get_string(&mut input)?;
        if input.remaining() < 12 {
            return Err(truncated());
        }
        let config_offset = input.get_i64();
        let count = input.get_i32();
        let mut work = BTreeMap::new();
        for _ in 0..count.max(0) {
            let connector = get_string(&mut input)?;
            if input.remaining() < 4 {
                return Err(truncated());
            }
            let tasks = input.get_i32().max(0) as usize;
            if input.remaining() < tasks * 4 {
                return Err(truncated());
            }
            let list: Vec<i32> = (0..tasks).map(|_| input.get_i32()).collect();
            work.insert(connector, list);
        }
        Ok(Assignment {
            error,
            leader,
            leader_url,
            config_offset,
            work,
        })
    }
}

/// The leader's assignment: connectors round-robin over the members in member id order, then
/// every task round-robin after them (Kafka's eager assignor).
pub fn assign(
    members: &[(String, WorkerState)],
    connectors: &BTreeMap<String, u32>,
    leader: &str,
    leader_url: &str,
    config_offset: i64,
) -> BTreeMap<String, Assignment> {
    let mut sorted: Vec<&(String, WorkerState)> = members.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: BTreeMap<String, Assignment> = sorted
        .iter()
        .map(|(id, _)| {
            (
                id.clone(),
                Assignment {
                    error: 0,
                    leader: leader.to_owned(),
                    leader_url: leader_url.to_owned(),
                    config_offset,
                    work: BTreeMap::new(),
                },
            )
        })
        .collect();
    if sorted.is_empty() {
        return out;
    }
    let mut next = 0usize;
    let mut give = |connector: &str, task: i32| {
        let id = &sorted[next % sorted.len()].0;
        next += 1;
        if let Some(assignment) = out.get_mut(id) {
            assignment
                .work
                .entry(connector.to_owned())
                .or_default()
                .push(task);
        }
    };
    for connector in connectors.keys() {
        give(connector, CONNECTOR_TASK);
    }
    for (connector, tasks) in connectors {
        for task in 0..*tasks {
            give(connector, task as i32);
        }
    }
    out
}

/// One generation's outcome for this member.
pub struct Joined {
    pub member_id: String,
    pub generation: i32,
    pub assignment: Assignment,
}

/// The worker's connection to its group coordinator.
pub struct Member {
    config: Arc<WorkerConfig>,
    admin: Admin,
    connection: Option<Arc<Connection>>,
    pub member_id: String,
    pub generation: i32,
}

impl Member {
    pub fn new(config: Arc<WorkerConfig>, admin: Admin) -> Member {
        Member {
            config,
            admin,
            connection: None,
            member_id: String::new(),
            generation: -1,
        }
    }

    async fn coordinator(&mut self) -> Result<Arc<Connection>, ConnectError> {
        if let Some(connection) = &self.connection
            && !connection.is_closed()
        {
            return Ok(Arc::clone(connection));
        }
        let address = self
            .admin
            .cluster()
            .find_coordinator(&self.config.group_id)
            .await?;
        let connection = self.admin.cluster().connection_to(&address).await?;
        self.connection = Some(Arc::clone(&connection));
        Ok(connection)
    }

    fn forget(&mut self) {
        self.connection = None;
    }

    /// Sends to the coordinator; a connection that failed is not used again.
    async fn send<R: kafka_protocol::protocol::Request>(
        &mut self,
        connection: &Connection,
        request: &R,
    ) -> Result<R::Response, ConnectError> {
        match connection.send(request).await {
            Ok(response) => Ok(response),
            Err(error) => {
                self.forget();
                Err(error.into())
            }
        }
    }

    fn group(&self) -> GroupId {
        GroupId(StrBytes::from_string(self.config.group_id.clone()))
    }

    /// Joins (or rejoins) the group. `leader_assign` is called on the leader with every
    /// member's state and returns each member's assignment.
    pub async fn join<F, Fut>(
        &mut self,
        state: &WorkerState,
        leader_assign: F,
    ) -> Result<Joined, ConnectError>
    where
        F: FnOnce(Vec<(String, WorkerState)>, String) -> Fut,
        Fut: std::future::Future<Output = BTreeMap<String, Assignment>>,
    {
        let mut leader_assign = Some(leader_assign);
        loop {
            let connection = match self.coordinator().await {
                Ok(connection) => connection,
                Err(error) => return Err(error),
            };
            let request = JoinGroupRequest::default()
                .with_group_id(self.group())
                .with_session_timeout_ms(self.config.session_timeout.as_millis() as i32)
                .with_rebalance_timeout_ms(self.config.rebalance_timeout.as_millis() as i32)
                .with_member_id(StrBytes::from_string(self.member_id.clone()))
                .with_group_instance_id(None)
                .with_protocol_type(StrBytes::from_static_str("connect"))
                .with_protocols(vec![
                    JoinGroupRequestProtocol::default()
                        .with_name(StrBytes::from_static_str(PROTOCOL))
                        .with_metadata(state.encode()),
                ])
                .with_reason(None);
            let response = self.send(&connection, &request).await?;
            match response.error_code {
                errors::NONE => {}
                errors::MEMBER_ID_REQUIRED => {
                    self.member_id = response.member_id.to_string();
                    continue;
                }
                errors::UNKNOWN_MEMBER_ID => {
                    self.member_id.clear();
                    continue;
                }
                errors::NOT_COORDINATOR | errors::COORDINATOR_NOT_AVAILABLE => {
                    self.forget();
                    return Err(group_error(&self.config.group_id, response.error_code));
                }
                code => return Err(group_error(&self.config.group_id, code)),
            }
            self.member_id = response.member_id.to_string();
            self.generation = response.generation_id;
            let assignments = if response.leader == response.member_id {
                let mut members = Vec::with_capacity(response.members.len());
                for member in &response.members {
                    members.push((
                        member.member_id.to_string(),
                        WorkerState::decode(member.metadata.clone())?,
                    ));
                }
                let assign = leader_assign.take().ok_or_else(|| {
                    ConnectError::Kafka(ClientError::Protocol(
                        "chosen as leader twice in one join".to_owned(),
                    ))
                })?;
                assign(members, self.member_id.clone())
                    .await
                    .into_iter()
                    .map(|(member, assignment)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(StrBytes::from_string(member))
                            .with_assignment(assignment.encode())
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let sync = SyncGroupRequest::default()
                .with_group_id(self.group())
                .with_generation_id(self.generation)
                .with_member_id(StrBytes::from_string(self.member_id.clone()))
                .with_group_instance_id(None)
                .with_protocol_type(Some(StrBytes::from_static_str("connect")))
                .with_protocol_name(Some(StrBytes::from_static_str(PROTOCOL)))
                .with_assignments(assignments);
            let response = self.send(&connection, &sync).await?;
            match response.error_code {
                errors::NONE => {}
                errors::REBALANCE_IN_PROGRESS | errors::ILLEGAL_GENERATION => {
                    if leader_assign.is_none() {
                        // The leader's closure is spent; the caller joins again.
                        return Err(group_error(&self.config.group_id, response.error_code));
                    }
                    continue;
                }
                errors::UNKNOWN_MEMBER_ID => {
                    self.member_id.clear();
                    return Err(group_error(&self.config.group_id, response.error_code));
                }
                code => return Err(group_error(&self.config.group_id, code)),
            }
            return Ok(Joined {
                member_id: self.member_id.clone(),
                generation: self.generation,
                assignment: Assignment::decode(response.assignment)?,
            });
        }
    }

    /// One heartbeat: Ok(true) while the generation holds, Ok(false) when the group
    /// rebalances and this member must join again.
    pub async fn heartbeat(&mut self) -> Result<bool, ConnectError> {
        let connection = self.coordinator().await?;
        let request = HeartbeatRequest::default()
            .with_group_id(self.group())
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_group_instance_id(None);
        let response = self.send(&connection, &request).await?;
        match response.error_code {
            errors::NONE => Ok(true),
            errors::REBALANCE_IN_PROGRESS | errors::ILLEGAL_GENERATION => Ok(false),
            errors::UNKNOWN_MEMBER_ID | errors::FENCED_INSTANCE_ID => {
                self.member_id.clear();
                Ok(false)
            }
            errors::NOT_COORDINATOR | errors::COORDINATOR_NOT_AVAILABLE => {
                self.forget();
                Ok(false)
            }
            code => Err(group_error(&self.config.group_id, code)),
        }
    }

    /// Leaves the group so the others rebalance at once, not after a session timeout.
    pub async fn leave(&mut self) {
        if self.member_id.is_empty() {
            return;
        }
        let Ok(connection) = self.coordinator().await else {
            return;
        };
        let request = LeaveGroupRequest::default()
            .with_group_id(self.group())
            .with_member_id(StrBytes::from_string(self.member_id.clone()));
        let request = match connection.version_for::<LeaveGroupRequest>(5) {
            Ok(version) if version >= 3 => request.with_members(vec![
                MemberIdentity::default()
                    .with_member_id(StrBytes::from_string(self.member_id.clone()))
                    .with_group_instance_id(None)
                    .with_reason(
                        (version >= 5).then(|| StrBytes::from_static_str("the worker is stopping")),
                    ),
            ]),
            _ => request,
        };
        let _ = connection.send_at_most(&request, 5).await;
        self.member_id.clear();
    }
}

fn group_error(group: &str, code: i16) -> ConnectError {
    ConnectError::Kafka(ClientError::from_code(code, format!("group {group}"), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_round_trip_in_kafka_s_layout() {
        let state = WorkerState {
            url: "http://127.0.0.1:8083/".to_owned(),
            config_offset: 7,
        };
        let bytes = state.encode();
        assert_eq!(&bytes[..4], &[0, 0, 0, 22]);
        assert_eq!(WorkerState::decode(bytes).expect("decodes"), state);
        let members = vec![
            ("b".to_owned(), state.clone()),
            ("a".to_owned(), state.clone()),
        ];
        let connectors = BTreeMap::from([("sink".to_owned(), 3u32), ("src".to_owned(), 1)]);
        let assignments = assign(&members, &connectors, "a", "http://a/", 7);
        assert_eq!(assignments["a"].work["sink"], vec![-1, 0, 2]);
        assert!(!assignments["a"].work.contains_key("src"));
        assert_eq!(assignments["b"].work["src"], vec![-1, 0]);
        assert_eq!(assignments["b"].work["sink"], vec![1]);
        let encoded = assignments["a"].encode();
        assert_eq!(
            Assignment::decode(encoded.clone()).expect("decodes"),
            assignments["a"]
        );
        assert!(Assignment::decode(encoded.slice(..encoded.len() - 2)).is_err());
    }
}
