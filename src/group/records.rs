//! The records of `__consumer_offsets`, in Kafka's formats (its `OffsetCommitKey/Value` and
//! `GroupMetadataKey/Value` schemas), so Kafka's tools read our offsets topic and ours read
//! theirs. Keys are versioned: versions 0 and 1 are a committed offset, version 2 a group's
//! metadata. A record without a value (a tombstone) deletes its key; the topic is compacted, so
//! the latest record per key is all a coordinator needs to load.
//!
//! ```text
//! offset key    version i16 (1) | group string | topic string | partition i32
//! offset value  version i16 (3) | offset i64 | leader_epoch i32 | metadata string
//!               | commit_timestamp i64
//!               (v1: ... metadata | commit_timestamp | expire_timestamp; v0 without them)
//! group key     version i16 (2) | group string
//! group value   version i16 (3) | protocol_type string | generation i32
//!               | protocol nullable string | leader nullable string
//!               | current_state_timestamp i64 | members [member]
//! member        member_id string | group_instance_id nullable string | client_id string
//!               | client_host string | rebalance_timeout i32 | session_timeout i32
//!               | subscription bytes | assignment bytes
//! ```
//!
//! Strings are an i16 length then UTF-8 (-1 for null), bytes an i32 length, arrays an i32
//! count. Decoding never trusts a length: every one is checked against what is left.
//!
//! KIP-848 consumer groups use Kafka's newer records: keys (version, then i16-length
//! strings) v3 ConsumerGroupMetadata (group), v5 ConsumerGroupMemberMetadata (group, member),
//! v6 ConsumerGroupTargetAssignmentMetadata (group), v7 ConsumerGroupTargetAssignmentMember
//! (group, member), v8 ConsumerGroupCurrentMemberAssignment (group, member); their values are
//! a version i16 (0) then a flexible body (compact strings and arrays, UUIDs, tagged fields).
//! v4 (subscription metadata) is not written and is skipped.

use thiserror::Error;

use crate::protocol::TopicIdPartition;

const OFFSET_KEY_VERSION: i16 = 1;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_KEY_VERSION: i16 = 2;
const GROUP_VALUE_VERSION: i16 = 3;

#[derive(Debug, Error, PartialEq, Eq)]
#[error("malformed __consumer_offsets record: {0}")]
pub struct RecordError(pub &'static str);

type Result<T> = std::result::Result<T, RecordError>;

/// What a record of `__consumer_offsets` is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecordKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
    /// KIP-848: the group epoch.
    ConsumerGroup {
        group: String,
    },
    /// KIP-848: a member's subscription and identity.
    ConsumerMember {
        group: String,
        member: String,
    },
    /// KIP-848: the assignment epoch of the target assignment.
    TargetAssignment {
        group: String,
    },
    /// KIP-848: a member's target assignment.
    TargetMember {
        group: String,
        member: String,
    },
    /// KIP-848: a member's epochs and current assignment.
    CurrentAssignment {
        group: String,
        member: String,
    },
}

impl RecordKey {
    pub fn group(&self) -> &str {
        match self {
            RecordKey::Offset { group, .. }
            | RecordKey::Group { group }
            | RecordKey::ConsumerGroup { group }
            | RecordKey::ConsumerMember { group, .. }
            | RecordKey::TargetAssignment { group }
            | RecordKey::TargetMember { group, .. }
            | RecordKey::CurrentAssignment { group, .. } => group,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        match self {
            RecordKey::Offset {
                group,
                topic,
                partition,
            } => {
                put_i16(&mut out, OFFSET_KEY_VERSION);
                put_string(&mut out, group);
                put_string(&mut out, topic);
                put_i32(&mut out, *partition);
            }
            RecordKey::Group { group } => {
                put_i16(&mut out, GROUP_KEY_VERSION);
                put_string(&mut out, group);
            }
            RecordKey::ConsumerGroup { group } => {
                put_i16(&mut out, 3);
                put_string(&mut out, group);
            }
            RecordKey::TargetAssignment { group } => {
                put_i16(&mut out, 6);
                put_string(&mut out, group);
            }
            RecordKey::ConsumerMember { group, member }
            | RecordKey::TargetMember { group, member }
            | RecordKey::CurrentAssignment { group, member } => {
                let version = match self {
                    RecordKey::ConsumerMember { .. } => 5,
                    RecordKey::TargetMember { .. } => 7,
                    _ => 8,
                };
                put_i16(&mut out, version);
                put_string(&mut out, group);
                put_string(&mut out, member);
            }
        }
        out
    }

    /// `None` for a key version this broker does not know (Kafka's newer record types, which
    /// a loader skips).
    pub fn decode(bytes: &[u8]) -> Result<Option<RecordKey>> {
        let mut input = Reader(bytes);
        let key = match input.i16()? {
            0 | 1 => RecordKey::Offset {
                group: input.string()?,
                topic: input.string()?,
                partition: input.i32()?,
            },
            2 => RecordKey::Group {
                group: input.string()?,
            },
            3 => RecordKey::ConsumerGroup {
                group: input.string()?,
            },
            5 => RecordKey::ConsumerMember {
                group: input.string()?,
                member: input.string()?,
            },
            6 => RecordKey::TargetAssignment {
                group: input.string()?,
            },
            7 => RecordKey::TargetMember {
                group: input.string()?,
                member: input.string()?,
            },
            8 => RecordKey::CurrentAssignment {
                group: input.string()?,
                member: input.string()?,
            },
            _ => return Ok(None),
        };
        Ok(Some(key))
    }
}

/// A record of `__consumer_offsets`, decoded: its key and value (`None`: a tombstone). What a
/// coordinator shard writes and replays.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupRecord {
    pub key: RecordKey,
    pub value: Option<RecordValue>,
}

/// The value of each kind of key.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordValue {
    Offset(OffsetValue),
    Group(GroupValue),
    /// KIP-848: the group epoch (ConsumerGroup) or the assignment epoch (TargetAssignment).
    Epoch(i32),
    ConsumerMember(ConsumerMemberValue),
    TargetMember(Vec<TopicIdPartition>),
    CurrentAssignment(CurrentAssignmentValue),
}

impl GroupRecord {
    pub fn new(key: RecordKey, value: Option<RecordValue>) -> GroupRecord {
        GroupRecord { key, value }
    }

    pub fn tombstone(key: RecordKey) -> GroupRecord {
        GroupRecord { key, value: None }
    }

    pub fn group(&self) -> &str {
        self.key.group()
    }

    pub fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        let value = self.value.as_ref().map(|value| match value {
            RecordValue::Offset(v) => v.encode(),
            RecordValue::Group(v) => v.encode(),
            RecordValue::Epoch(epoch) => encode_epoch_value(*epoch),
            RecordValue::ConsumerMember(v) => v.encode(),
            RecordValue::TargetMember(partitions) => encode_target_value(partitions),
            RecordValue::CurrentAssignment(v) => v.encode(),
        });
        (self.key.encode(), value)
    }

    /// `Ok(None)` for a key version this coordinator does not read (v4 subscription
    /// metadata, a future version).
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<GroupRecord>> {
        let Some(key) = RecordKey::decode(key)? else {
            return Ok(None);
        };
        let Some(bytes) = value else {
            return Ok(Some(GroupRecord::tombstone(key)));
        };
        let value = match &key {
            RecordKey::Offset { .. } => RecordValue::Offset(OffsetValue::decode(bytes)?),
            RecordKey::Group { .. } => RecordValue::Group(GroupValue::decode(bytes)?),
            RecordKey::ConsumerGroup { .. } | RecordKey::TargetAssignment { .. } => {
                RecordValue::Epoch(decode_epoch_value(bytes)?)
            }
            RecordKey::ConsumerMember { .. } => {
                RecordValue::ConsumerMember(ConsumerMemberValue::decode(bytes)?)
            }
            RecordKey::TargetMember { .. } => {
                RecordValue::TargetMember(decode_target_value(bytes)?)
            }
            RecordKey::CurrentAssignment { .. } => {
                RecordValue::CurrentAssignment(CurrentAssignmentValue::decode(bytes)?)
            }
        };
        Ok(Some(GroupRecord::new(key, Some(value))))
    }
}

/// A committed offset as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    /// -1 when the committer did not say.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

impl OffsetValue {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.metadata.len());
        put_i16(&mut out, OFFSET_VALUE_VERSION);
        put_i64(&mut out, self.offset);
        put_i32(&mut out, self.leader_epoch);
        put_string(&mut out, &self.metadata);
        put_i64(&mut out, self.commit_timestamp_ms);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<OffsetValue> {
        let mut input = Reader(bytes);
        let version = input.i16()?;
        let offset = input.i64()?;
        let leader_epoch = if version >= 3 { input.i32()? } else { -1 };
        let metadata = input.string()?;
        let commit_timestamp_ms = input.i64()?;
        Ok(OffsetValue {
            offset,
            leader_epoch,
            metadata,
            commit_timestamp_ms,
        })
    }
}

/// A group's membership as of its last completed rebalance (or its becoming empty).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp_ms: i64,
    pub members: Vec<MemberValue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Vec<u8>,
    pub assignment: Vec<u8>,
}

impl GroupValue {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        put_i16(&mut out, GROUP_VALUE_VERSION);
        put_string(&mut out, &self.protocol_type);
        put_i32(&mut out, self.generation);
        put_nullable_string(&mut out, self.protocol.as_deref());
        put_nullable_string(&mut out, self.leader.as_deref());
        put_i64(&mut out, self.current_state_timestamp_ms);
        put_i32(&mut out, self.members.len() as i32);
        for member in &self.members {
            put_string(&mut out, &member.member_id);
            put_nullable_string(&mut out, member.group_instance_id.as_deref());
            put_string(&mut out, &member.client_id);
            put_string(&mut out, &member.client_host);
            put_i32(&mut out, member.rebalance_timeout_ms);
            put_i32(&mut out, member.session_timeout_ms);
            put_bytes(&mut out, &member.subscription);
            put_bytes(&mut out, &member.assignment);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<GroupValue> {
        let mut input = Reader(bytes);
        let version = input.i16()?;
        if !(0..=4).contains(&version) {
            return Err(RecordError("unknown group metadata version"));
        }
        if version >= 4 {
            // Kafka 3.5+ writes flexible versions (compact strings, tagged fields): not read.
            return Err(RecordError("flexible group metadata versions are not read"));
        }
        let protocol_type = input.string()?;
        let generation = input.i32()?;
        let protocol = input.nullable_string()?;
        let leader = input.nullable_string()?;
        let current_state_timestamp_ms = if version >= 2 { input.i64()? } else { -1 };
        let count = input.count()?;
        let mut members = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let member_id = input.string()?;
            let group_instance_id = if version >= 3 {
                input.nullable_string()?
            } else {
                None
            };
            let client_id = input.string()?;
            let client_host = input.string()?;
            let rebalance_timeout_ms = if version >= 1 { input.i32()? } else { -1 };
            let session_timeout_ms = input.i32()?;
            let subscription = input.bytes()?.to_vec();
            let assignment = input.bytes()?.to_vec();
            members.push(MemberValue {
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms: if rebalance_timeout_ms < 0 {
                    session_timeout_ms
                } else {
                    rebalance_timeout_ms
                },
                session_timeout_ms,
                subscription,
                assignment,
            });
        }
        Ok(GroupValue {
            protocol_type,
            generation,
            protocol,
            leader,
            current_state_timestamp_ms,
            members,
        })
    }
}

/// ConsumerGroupMemberMetadataValue v0.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerMemberValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
}

/// ConsumerGroupCurrentMemberAssignmentValue v0.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CurrentAssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// Kafka's MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions.
    pub state: i8,
    pub assigned: Vec<TopicIdPartition>,
    pub pending_revocation: Vec<TopicIdPartition>,
}

/// A flexible-version value: version 0, then the body.
fn flexible(body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_i16(&mut out, 0);
    body(&mut out);
    out
}

/// ConsumerGroupMetadataValue or ConsumerGroupTargetAssignmentMetadataValue: one epoch.
pub fn encode_epoch_value(epoch: i32) -> Vec<u8> {
    flexible(|out| {
        put_i32(out, epoch);
        put_uvarint(out, 0);
    })
}

pub fn decode_epoch_value(bytes: &[u8]) -> Result<i32> {
    let mut input = Reader(bytes);
    input.i16()?;
    let epoch = input.i32()?;
    input.skip_tagged_fields()?;
    Ok(epoch)
}

impl ConsumerMemberValue {
    pub fn encode(&self) -> Vec<u8> {
        flexible(|out| {
            put_compact_nullable_string(out, self.instance_id.as_deref());
            put_compact_nullable_string(out, self.rack_id.as_deref());
            put_compact_nullable_string(out, Some(&self.client_id));
            put_compact_nullable_string(out, Some(&self.client_host));
            put_uvarint(out, self.subscribed_topic_names.len() as u64 + 1);
            for name in &self.subscribed_topic_names {
                put_compact_nullable_string(out, Some(name));
            }
            put_compact_nullable_string(out, None);
            put_i32(out, self.rebalance_timeout_ms);
            put_compact_nullable_string(out, self.server_assignor.as_deref());
            put_uvarint(out, 0);
        })
    }

    pub fn decode(bytes: &[u8]) -> Result<ConsumerMemberValue> {
        let mut input = Reader(bytes);
        input.i16()?;
        let instance_id = input.compact_nullable_string()?;
        let rack_id = input.compact_nullable_string()?;
        let client_id = input.compact_nullable_string()?.unwrap_or_default();
        let client_host = input.compact_nullable_string()?.unwrap_or_default();
        let count = input.compact_count()?;
        let mut subscribed_topic_names = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            subscribed_topic_names.push(input.compact_nullable_string()?.unwrap_or_default());
        }
        let _regex = input.compact_nullable_string()?;
        let rebalance_timeout_ms = input.i32()?;
        let server_assignor = input.compact_nullable_string()?;
        input.skip_tagged_fields()?;
        Ok(ConsumerMemberValue {
            instance_id,
            rack_id,
            client_id,
            client_host,
            subscribed_topic_names,
            rebalance_timeout_ms,
            server_assignor,
        })
    }
}

/// ConsumerGroupTargetAssignmentMemberValue v0.
pub fn encode_target_value(partitions: &[TopicIdPartition]) -> Vec<u8> {
    flexible(|out| {
        put_id_partitions(out, partitions);
        put_uvarint(out, 0);
    })
}

pub fn decode_target_value(bytes: &[u8]) -> Result<Vec<TopicIdPartition>> {
    let mut input = Reader(bytes);
    input.i16()?;
    let partitions = input.id_partitions()?;
    input.skip_tagged_fields()?;
    Ok(partitions)
}

impl CurrentAssignmentValue {
    pub fn encode(&self) -> Vec<u8> {
        flexible(|out| {
            put_i32(out, self.member_epoch);
            put_i32(out, self.previous_member_epoch);
            out.push(self.state as u8);
            put_id_partitions(out, &self.assigned);
            put_id_partitions(out, &self.pending_revocation);
            put_uvarint(out, 0);
        })
    }

    pub fn decode(bytes: &[u8]) -> Result<CurrentAssignmentValue> {
        let mut input = Reader(bytes);
        input.i16()?;
        let member_epoch = input.i32()?;
        let previous_member_epoch = input.i32()?;
        let state = input.take(1)?[0] as i8;
        let assigned = input.id_partitions()?;
        let pending_revocation = input.id_partitions()?;
        input.skip_tagged_fields()?;
        Ok(CurrentAssignmentValue {
            member_epoch,
            previous_member_epoch,
            state,
            assigned,
            pending_revocation,
        })
    }
}

/// `[]TopicPartitions`: per topic id (in order), its partitions; each struct with its
/// (empty) tagged fields.
fn put_id_partitions(out: &mut Vec<u8>, partitions: &[TopicIdPartition]) {
    let mut topics: Vec<(u128, Vec<i32>)> = Vec::new();
    for tp in partitions {
        match topics.last_mut() {
            Some((last, list)) if *last == tp.topic_id => list.push(tp.partition),
            _ => topics.push((tp.topic_id, vec![tp.partition])),
        }
    }
    put_uvarint(out, topics.len() as u64 + 1);
    for (id, list) in topics {
        out.extend_from_slice(&id.to_be_bytes());
        put_uvarint(out, list.len() as u64 + 1);
        for partition in list {
            put_i32(out, partition);
        }
        put_uvarint(out, 0);
    }
}

fn put_uvarint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_compact_nullable_string(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => {
            put_uvarint(out, value.len() as u64 + 1);
            out.extend_from_slice(value.as_bytes());
        }
        None => put_uvarint(out, 0),
    }
}

fn put_i16(out: &mut Vec<u8>, value: i16) {
    out.extend_from_slice(&value.to_be_bytes());
}

fn put_i32(out: &mut Vec<u8>, value: i32) {
    out.extend_from_slice(&value.to_be_bytes());
}

fn put_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(&value.to_be_bytes());
}

/// Strings longer than i16::MAX bytes are cut at a character boundary: group ids, topics and
/// metadata are bounded well below that before they get here.
fn put_string(out: &mut Vec<u8>, value: &str) {
    let mut end = value.len().min(i16::MAX as usize);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    put_i16(out, end as i16);
    out.extend_from_slice(&value.as_bytes()[..end]);
}

fn put_nullable_string(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => put_string(out, value),
        None => put_i16(out, -1),
    }
}

fn put_bytes(out: &mut Vec<u8>, value: &[u8]) {
    put_i32(out, value.len() as i32);
    out.extend_from_slice(value);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.0.len() {
            return Err(RecordError("a length runs past the record"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16> {
        let bytes = self.take(2)?;
        Ok(i16::from_be_bytes([bytes[0], bytes[1]]))
    }

    fn i32(&mut self) -> Result<i32> {
        let bytes = self.take(4)?;
        Ok(i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn i64(&mut self) -> Result<i64> {
        let bytes = self.take(8)?;
        let mut array = [0u8; 8];
        array.copy_from_slice(bytes);
        Ok(i64::from_be_bytes(array))
    }

    fn nullable_string(&mut self) -> Result<Option<String>> {
        let length = self.i16()?;
        if length < 0 {
            return Ok(None);
        }
        let bytes = self.take(length as usize)?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| RecordError("a string is not UTF-8"))
    }

    fn string(&mut self) -> Result<String> {
        self.nullable_string()?
            .ok_or(RecordError("a null string where one is required"))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let length = self.i32()?;
        if length < 0 {
            return Ok(&[]);
        }
        self.take(length as usize)
    }

    fn uvarint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(RecordError("a varint is too long"))
    }

    fn compact_nullable_string(&mut self) -> Result<Option<String>> {
        let length = self.uvarint()?;
        if length == 0 {
            return Ok(None);
        }
        let length =
            usize::try_from(length - 1).map_err(|_| RecordError("a string is too long"))?;
        let bytes = self.take(length)?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| RecordError("a string is not UTF-8"))
    }

    /// A compact array's count (0 for null), checked against the bytes left.
    fn compact_count(&mut self) -> Result<usize> {
        let count = self.uvarint()?;
        let count = usize::try_from(count.saturating_sub(1))
            .map_err(|_| RecordError("an array count is too large"))?;
        if count > self.0.len() {
            return Err(RecordError("an array count exceeds the record"));
        }
        Ok(count)
    }

    fn id_partitions(&mut self) -> Result<Vec<TopicIdPartition>> {
        let topics = self.compact_count()?;
        let mut out = Vec::new();
        for _ in 0..topics {
            let id = self.take(16)?;
            let mut bytes = [0u8; 16];
            bytes.copy_from_slice(id);
            let id = u128::from_be_bytes(bytes);
            let count = self.compact_count()?;
            for _ in 0..count {
                out.push(TopicIdPartition::new(id, self.i32()?));
            }
            self.skip_tagged_fields()?;
        }
        Ok(out)
    }

    fn skip_tagged_fields(&mut self) -> Result<()> {
        let count = self.uvarint()?;
        for _ in 0..count {
            self.uvarint()?;
            let size = usize::try_from(self.uvarint()?)
                .map_err(|_| RecordError("a tagged field is too large"))?;
            self.take(size)?;
        }
        Ok(())
    }

    /// An array's count, checked against the bytes left (each element takes at least one).
    fn count(&mut self) -> Result<usize> {
        let count = self.i32()?;
        if count < 0 {
            return Ok(0);
        }
        let count = count as usize;
        if count > self.0.len() {
            return Err(RecordError("an array count exceeds the record"));
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip() {
        let offset = RecordKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 7,
        };
        assert_eq!(RecordKey::decode(&offset.encode()), Ok(Some(offset)));
        let group = RecordKey::Group { group: "g".into() };
        assert_eq!(RecordKey::decode(&group.encode()), Ok(Some(group)));
        let value = OffsetValue {
            offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp_ms: 1_700_000_000_000,
        };
        assert_eq!(OffsetValue::decode(&value.encode()), Ok(value));
        let group = GroupValue {
            protocol_type: "consumer".into(),
            generation: 5,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp_ms: 9,
            members: vec![MemberValue {
                member_id: "m1".into(),
                group_instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: vec![1, 2],
                assignment: vec![3],
            }],
        };
        assert_eq!(GroupValue::decode(&group.encode()), Ok(group));
    }

    #[test]
    fn kafkas_bytes_decode() {
        // OffsetCommitKey v1 ("grp", "tp", 2) as Kafka's serializer writes it.
        let key = [0, 1, 0, 3, b'g', b'r', b'p', 0, 2, b't', b'p', 0, 0, 0, 2];
        assert_eq!(
            RecordKey::decode(&key),
            Ok(Some(RecordKey::Offset {
                group: "grp".into(),
                topic: "tp".into(),
                partition: 2
            }))
        );
        // OffsetCommitValue v1: offset 5, metadata "", commit 1, expire 2.
        let mut value = vec![0, 1];
        value.extend_from_slice(&5i64.to_be_bytes());
        value.extend_from_slice(&[0, 0]);
        value.extend_from_slice(&1i64.to_be_bytes());
        value.extend_from_slice(&2i64.to_be_bytes());
        let decoded = OffsetValue::decode(&value).unwrap();
        assert_eq!((decoded.offset, decoded.leader_epoch), (5, -1));
        // An unknown key version is skipped, not an error.
        assert_eq!(RecordKey::decode(&[0, 9, 0, 0]), Ok(None));
    }

    #[test]
    fn truncated_or_lying_lengths_are_errors_not_panics() {
        let group = GroupValue {
            protocol_type: "consumer".into(),
            members: vec![MemberValue::default()],
            ..Default::default()
        }
        .encode();
        for cut in 0..group.len() {
            assert!(GroupValue::decode(&group[..cut]).is_err(), "cut at {cut}");
        }
        // A member count of i32::MAX with a few bytes left.
        let mut lying = vec![0, 3, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255];
        lying.extend_from_slice(&0i64.to_be_bytes());
        lying.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(GroupValue::decode(&lying).is_err());
        assert!(RecordKey::decode(&[0, 1, 127, 255]).is_err());
    }

    #[test]
    fn kip848_records_round_trip() {
        for key in [
            RecordKey::ConsumerGroup { group: "g".into() },
            RecordKey::TargetAssignment { group: "g".into() },
            RecordKey::ConsumerMember {
                group: "g".into(),
                member: "m".into(),
            },
            RecordKey::TargetMember {
                group: "g".into(),
                member: "m".into(),
            },
            RecordKey::CurrentAssignment {
                group: "g".into(),
                member: "m".into(),
            },
        ] {
            assert_eq!(RecordKey::decode(&key.encode()), Ok(Some(key)));
        }
        assert_eq!(decode_epoch_value(&encode_epoch_value(7)), Ok(7));
        let member = ConsumerMemberValue {
            instance_id: Some("i".into()),
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            subscribed_topic_names: vec!["a".into(), "b".into()],
            rebalance_timeout_ms: 300_000,
            server_assignor: Some("uniform".into()),
        };
        assert_eq!(ConsumerMemberValue::decode(&member.encode()), Ok(member));
        let partitions = vec![
            TopicIdPartition::new(1 << 100, 0),
            TopicIdPartition::new(1 << 100, 3),
            TopicIdPartition::new(5, 1),
        ];
        assert_eq!(
            decode_target_value(&encode_target_value(&partitions)),
            Ok(partitions.clone())
        );
        let current = CurrentAssignmentValue {
            member_epoch: 4,
            previous_member_epoch: 3,
            state: 1,
            assigned: partitions.clone(),
            pending_revocation: vec![TopicIdPartition::new(9, 9)],
        };
        let encoded = current.encode();
        // The bytes Kafka writes for these values (a change of types must not move a byte).
        assert_eq!(
            hex(&encode_target_value(&partitions)),
            "0000030000001000000000000000000000000003000000000000000300000000000000000000000000\
             0000000502000000010000"
        );
        assert_eq!(
            hex(&encoded),
            "0000000000040000000301030000001000000000000000000000000003000000000000000300000000\
             0000000000000000000000000502000000010002000000000000000000000000000000090200000009\
             0000"
        );
        assert_eq!(CurrentAssignmentValue::decode(&encoded), Ok(current));
        for cut in 0..encoded.len() {
            assert!(
                CurrentAssignmentValue::decode(&encoded[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
