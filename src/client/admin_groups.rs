//! [`Admin`]'s consumer-group and offset operations, as Kafka's `AdminClient` has them: list
//! and describe groups (classic and KIP-848), read and alter a group's committed offsets,
//! delete groups, and list partition offsets (earliest, latest, by time).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, DeleteGroupsRequest, DescribeGroupsRequest, GroupId,
    ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::admin::Admin;
use super::assignor;
use super::connection::Connection;
use super::consumer::offsets;
use super::consumer::{IsolationLevel, TopicPartition};
use super::error::{Error, Result};
use crate::protocol::errors;

/// Where [`Admin::list_offsets`] looks: the first offset, the end, or the first offset at or
/// after a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The first offset still in the log.
    Earliest,
    /// The log end offset (the high watermark).
    Latest,
    /// The first offset whose timestamp is at least this many milliseconds since the epoch.
    Timestamp(i64),
}

impl OffsetSpec {
    fn timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(ms) => ms,
        }
    }
}

/// A group as ListGroups names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// The group's id.
    pub group_id: String,
    /// Its state (`Stable`, `Empty`, ...).
    pub state: String,
    /// `consumer` for consumer groups (classic or KIP-848).
    pub protocol_type: String,
}

/// A member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// Its member id.
    pub member_id: String,
    /// Its `group.instance.id`, for a static member.
    pub group_instance_id: Option<String>,
    /// Its `client.id`.
    pub client_id: String,
    /// Its host as the coordinator saw it.
    pub host: String,
    /// The partitions assigned to it.
    pub assignment: Vec<TopicPartition>,
}

/// A group as its coordinator describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group's id.
    pub group_id: String,
    /// The coordinator's `host:port`.
    pub coordinator: String,
    /// Its state (`Stable`, `Empty`, `PreparingRebalance`, ...).
    pub state: String,
    /// `consumer` for consumer groups.
    pub protocol_type: String,
    /// The assignor (with `(KIP-848)` for a group using the new protocol).
    pub protocol: String,
    /// Its members.
    pub members: Vec<GroupMember>,
}

fn name(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

fn kafka(code: i16, context: String, message: Option<&str>) -> Result<()> {
    match Error::kafka(code, context, message) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

impl Admin {
    /// Every group on every broker.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let metadata = self.metadata(Some(&[])).await?;
        let mut groups = BTreeMap::new();
        for broker in metadata.brokers.values() {
            let connection = self.cluster().connection_to(&broker.address()).await?;
            let response = connection.send(&ListGroupsRequest::default()).await?;
            kafka(
                response.error_code,
                format!("listing the groups of broker {}", broker.node_id),
                None,
            )?;
            for group in response.groups {
                groups.insert(
                    group.group_id.to_string(),
                    GroupListing {
                        group_id: group.group_id.to_string(),
                        state: group.group_state.to_string(),
                        protocol_type: group.protocol_type.to_string(),
                    },
                );
            }
        }
        Ok(groups.into_values().collect())
    }

    /// The coordinator of `group`, retried while `__consumer_offsets` is created or loads.
    async fn group_coordinator(&self, group: &str) -> Result<(String, std::sync::Arc<Connection>)> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.cluster().find_coordinator(group).await {
                Ok(addr) => {
                    let connection = self.cluster().connection_to(&addr).await?;
                    return Ok((addr, connection));
                }
                Err(error)
                    if attempt < 100
                        && matches!(
                            error.code(),
                            Some(
                                errors::COORDINATOR_NOT_AVAILABLE
                                    | errors::COORDINATOR_LOAD_IN_PROGRESS
                            )
                        ) =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Describes `group` (GROUP_ID_NOT_FOUND when there is no such group).
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (coordinator, connection) = self.group_coordinator(group).await?;
            let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(name(group))]);
            let response = connection.send(&request).await?;
            let described = response
                .groups
                .into_iter()
                .next()
                .ok_or_else(|| Error::Protocol("DescribeGroups answered no group".into()))?;
            if matches!(
                described.error_code,
                errors::COORDINATOR_LOAD_IN_PROGRESS | errors::NOT_COORDINATOR
            ) && attempt < 100
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            if described.error_code == errors::GROUP_ID_NOT_FOUND
                || described.group_state.as_str() == "Dead"
            {
                // Not a classic group: a KIP-848 group describes itself elsewhere.
                return match self
                    .describe_consumer_group(&coordinator, &connection, group)
                    .await?
                {
                    Some(described) => Ok(described),
                    None => Err(Error::from_code(
                        errors::GROUP_ID_NOT_FOUND,
                        format!("group {group}"),
                        None,
                    )),
                };
            }
            kafka(described.error_code, format!("group {group}"), None)?;
            let members = described
                .members
                .into_iter()
                .map(|m| GroupMember {
                    member_id: m.member_id.to_string(),
                    group_instance_id: m.group_instance_id.map(|i| i.to_string()),
                    client_id: m.client_id.to_string(),
                    host: m.client_host.to_string(),
                    // Only the consumer protocol's assignments are decoded.
                    assignment: assignor::decode_assignment(&m.member_assignment)
                        .unwrap_or_default(),
                })
                .collect();
            return Ok(GroupDescription {
                group_id: group.to_owned(),
                coordinator,
                state: described.group_state.to_string(),
                protocol_type: described.protocol_type.to_string(),
                protocol: described.protocol_data.to_string(),
                members,
            });
        }
    }

    /// ConsumerGroupDescribe of a KIP-848 group; `None` when it is not one (or the broker
    /// does not serve the API).
    async fn describe_consumer_group(
        &self,
        coordinator: &str,
        connection: &Connection,
        group: &str,
    ) -> Result<Option<GroupDescription>> {
        let request =
            ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(name(group))]);
        let response = match connection.send(&request).await {
            Ok(response) => response,
            Err(Error::UnsupportedVersion { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let Some(described) = response.groups.into_iter().next() else {
            return Ok(None);
        };
        if described.error_code == errors::GROUP_ID_NOT_FOUND {
            return Ok(None);
        }
        kafka(
            described.error_code,
            format!("group {group}"),
            described.error_message.as_deref(),
        )?;
        let members = described
            .members
            .into_iter()
            .map(|m| GroupMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.instance_id.map(|i| i.to_string()),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                assignment: m
                    .assignment
                    .topic_partitions
                    .into_iter()
                    .flat_map(|tp| {
                        let topic = tp.topic_name.to_string();
                        tp.partitions
                            .into_iter()
                            .map(move |p| TopicPartition::new(&topic, p))
                    })
                    .collect(),
            })
            .collect();
        Ok(Some(GroupDescription {
            group_id: group.to_owned(),
            coordinator: coordinator.to_owned(),
            state: described.group_state.to_string(),
            protocol_type: "consumer".into(),
            protocol: format!("{} (KIP-848)", described.assignor_name.as_str()),
            members,
        }))
    }

    /// The committed offsets of `group`: every partition that has one.
    pub async fn list_group_offsets(&self, group: &str) -> Result<BTreeMap<TopicPartition, i64>> {
        let (_, connection) = self.group_coordinator(group).await?;
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(name(group)))
            .with_topics(None);
        // Versions 8 and up batch groups in other fields; 7 carries all this needs.
        let response = connection.send_at_most(&request, 7).await?;
        kafka(response.error_code, format!("group {group}"), None)?;
        let mut offsets = BTreeMap::new();
        for topic in response.topics {
            for partition in topic.partitions {
                let tp = TopicPartition::new(topic.name.as_str(), partition.partition_index);
                kafka(partition.error_code, format!("offset of {tp}"), None)?;
                if partition.committed_offset >= 0 {
                    offsets.insert(tp, partition.committed_offset);
                }
            }
        }
        Ok(offsets)
    }

    /// Commits `offsets` for `group` from outside it (Kafka refuses with UNKNOWN_MEMBER_ID
    /// while the group has members: stop its consumers first). Fails with the first
    /// partition's error.
    pub async fn alter_group_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<()> {
        let (_, connection) = self.group_coordinator(group).await?;
        let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for (tp, offset) in offsets {
            topics.entry(&tp.topic).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(tp.partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1),
            );
        }
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(name(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(name(""))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(topic, partitions)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(TopicName(name(topic)))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let response = connection.send(&request).await?;
        for topic in &response.topics {
            for p in &topic.partitions {
                let context = format!(
                    "offset of {}-{} for group {group}",
                    topic.name.as_str(),
                    p.partition_index
                );
                if p.error_code == errors::UNKNOWN_MEMBER_ID {
                    return Err(Error::Kafka {
                        code: p.error_code,
                        context,
                        message: Some(
                            "the group has active members; stop its consumers first".into(),
                        ),
                    });
                }
                kafka(p.error_code, context, None)?;
            }
        }
        Ok(())
    }

    /// Deletes groups that have no members, with their committed offsets.
    pub async fn delete_groups(&self, groups: &[String]) -> Result<()> {
        for group in groups {
            let (_, connection) = self.group_coordinator(group).await?;
            let request =
                DeleteGroupsRequest::default().with_groups_names(vec![GroupId(name(group))]);
            let response = connection.send(&request).await?;
            let result = response
                .results
                .first()
                .ok_or_else(|| Error::Protocol("DeleteGroups answered no group".into()))?;
            kafka(result.error_code, format!("group {group}"), None)?;
        }
        Ok(())
    }

    /// Each partition's offset at `spec`, asked of its leader; `None` where there is none (a
    /// time after every record).
    pub async fn list_offsets(
        &self,
        partitions: &BTreeSet<TopicPartition>,
        spec: OffsetSpec,
    ) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
        let asked = partitions
            .iter()
            .map(|tp| (tp.clone(), spec.timestamp()))
            .collect();
        let found = offsets::list_offsets(
            self.cluster(),
            &asked,
            IsolationLevel::ReadUncommitted,
            Duration::from_millis(100),
        )
        .await?;
        Ok(partitions
            .iter()
            .map(|tp| (tp.clone(), found.get(tp).copied()))
            .collect())
    }
}
