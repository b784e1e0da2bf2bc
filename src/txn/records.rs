//! The records of `__transaction_state`, in Kafka's formats (its `TransactionLogKey` and
//! `TransactionLogValue` schemas), so Kafka's tools read our transaction log and we read
//! theirs. One key per transactional id; the topic is compacted, so the latest record of a key
//! is all a coordinator needs to load; a record without a value (a tombstone) deletes the
//! transactional id (Kafka's expiration).
//!
//! ```text
//! key       version i16 (0) | transactional_id string
//! value v0  version i16 (0) | producer_id i64 | producer_epoch i16
//!           | transaction_timeout_ms i32 | state i8
//!           | partitions nullable [topic string | partition_ids [i32]]
//!           | last_update_timestamp_ms i64 | start_timestamp_ms i64
//! value v1  the same fields, flexible: strings and arrays compact (uvarint length + 1,
//!           0 for null), each partitions entry and the value end with tagged fields:
//!             tag 0 previous_producer_id i64 (default -1)
//!             tag 1 next_producer_id i64 (default -1)
//!             tag 2 client_transaction_version i16 (default 0)
//!             tag 3 next_producer_epoch i16 (default -1; KIP-939, never set by us)
//!           a tagged field is written only when it is not its default, in tag order.
//! ```
//!
//! v0 strings are an i16 length then UTF-8, arrays an i32 count (-1 for null). The partitions
//! are null for an Empty transaction (Kafka's writer; its reader ignores them there), grouped
//! by topic otherwise; we write topics and partitions sorted.
//!
//! Versions: Kafka writes v1 once the cluster's `transaction.version` is 1 or more (every new
//! Kafka 4 cluster), v0 before. [`encode_value`] writes v1, so nothing we hold is lost (v0 has
//! no previous/next producer id nor client transaction version); [`encode_value_version`]
//! writes v0 for a reader older than Kafka 4. Decoding reads both.
//!
//! Decoding never trusts a length: every one is checked against what is left before anything
//! is allocated; unknown tagged fields are skipped; bytes after the value are an error.

use thiserror::Error;

use super::state::TxnState;
use crate::protocol::TopicPartition;

/// The only key version Kafka has (its `CoordinatorRecordType.TRANSACTION_LOG`).
pub const KEY_VERSION: i16 = 0;

const TAG_PREVIOUS_PRODUCER_ID: u64 = 0;
const TAG_NEXT_PRODUCER_ID: u64 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u64 = 2;
const TAG_NEXT_PRODUCER_EPOCH: u64 = 3;

/// A record that is not Kafka's `__transaction_state` format (corrupt, or not ours to read).
#[derive(Debug, Error, PartialEq, Eq)]
#[error("malformed __transaction_state record: {0}")]
pub struct RecordError(pub &'static str);

type Result<T> = std::result::Result<T, RecordError>;

/// The versions of `TransactionLogValue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueVersion {
    /// Kafka before 4.0 (or `transaction.version` 0): no tagged fields.
    V0,
    /// Flexible; what Kafka 4 writes.
    V1,
}

impl ValueVersion {
    pub const fn number(self) -> i16 {
        match self {
            ValueVersion::V0 => 0,
            ValueVersion::V1 => 1,
        }
    }
}

/// A decoded record of `__transaction_state`: its key and value (`None`: a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogRecord {
    pub transactional_id: String,
    pub value: Option<TxnLogValue>,
}

/// `TransactionLogValue`: one transactional id's state as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: i64,
    /// The producer id before the transition that wrote this record (-1: none, v0).
    pub previous_producer_id: i64,
    /// Transaction version 2: the producer id the transaction moves to when it completes
    /// (its epoch was exhausted); -1 otherwise.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// KIP-939 (two-phase commit): -1 here; kept as read.
    pub next_producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    pub state: TxnState,
    /// Sorted, no duplicates (decoding sorts what it reads; Kafka writes them unsorted).
    pub partitions: Vec<TopicPartition>,
    pub last_update_timestamp_ms: i64,
    pub start_timestamp_ms: i64,
    /// The transaction version the client used (0, 1 or 2; 0 in v0).
    pub client_transaction_version: i16,
}

impl TxnLogRecord {
    pub fn tombstone(transactional_id: impl Into<String>) -> TxnLogRecord {
        TxnLogRecord {
            transactional_id: transactional_id.into(),
            value: None,
        }
    }

    /// The key's bytes and the value's (`None`: a tombstone), as [`encode_key`] and
    /// [`encode_value`] write them.
    pub fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        (
            encode_key(&self.transactional_id),
            self.value.as_ref().map(encode_value),
        )
    }
}

/// `TransactionLogKey` v0.
pub fn encode_key(transactional_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + transactional_id.len());
    put_i16(&mut out, KEY_VERSION);
    put_string(&mut out, transactional_id);
    out
}

/// `TransactionLogValue` v1, what Kafka 4 writes.
pub fn encode_value(value: &TxnLogValue) -> Vec<u8> {
    encode_value_version(value, ValueVersion::V1)
}

/// `TransactionLogValue` at `version`. v0 drops the previous and next producer ids, the next
/// producer epoch and the client transaction version.
pub fn encode_value_version(value: &TxnLogValue, version: ValueVersion) -> Vec<u8> {
    let flexible = version == ValueVersion::V1;
    let mut out = Vec::with_capacity(64 + 16 * value.partitions.len());
    put_i16(&mut out, version.number());
    put_i64(&mut out, value.producer_id);
    put_i16(&mut out, value.producer_epoch);
    put_i32(&mut out, value.transaction_timeout_ms);
    out.push(value.state.code() as u8);
    // Kafka writes null for Empty, whatever the set holds (it holds nothing there).
    debug_assert!(value.state != TxnState::Empty || value.partitions.is_empty());
    let topics = (value.state != TxnState::Empty).then(|| group_by_topic(&value.partitions));
    put_partitions(&mut out, topics.as_deref(), flexible);
    put_i64(&mut out, value.last_update_timestamp_ms);
    put_i64(&mut out, value.start_timestamp_ms);
    if flexible {
        put_value_tagged_fields(&mut out, value);
    }
    out
}

/// A key and its value (`None`: a tombstone) as read from `__transaction_state`. `Ok(None)`
/// for a key version this coordinator does not know (a loader skips it, as Kafka does).
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<TxnLogRecord>> {
    let mut input = Reader(key);
    if input.i16()? != KEY_VERSION {
        return Ok(None);
    }
    let transactional_id = input.string()?;
    input.end()?;
    let value = match value {
        Some(bytes) => Some(decode_value(bytes)?),
        None => None,
    };
    Ok(Some(TxnLogRecord {
        transactional_id,
        value,
    }))
}

/// `TransactionLogValue` v0 or v1.
pub fn decode_value(bytes: &[u8]) -> Result<TxnLogValue> {
    let mut input = Reader(bytes);
    let flexible = match input.i16()? {
        0 => false,
        1 => true,
        _ => return Err(RecordError("unknown value version")),
    };
    let producer_id = input.i64()?;
    let producer_epoch = input.i16()?;
    let transaction_timeout_ms = input.i32()?;
    let state = TxnState::from_code(input.i8()?).ok_or(RecordError("unknown state"))?;
    let mut partitions = input.partitions(flexible)?;
    let last_update_timestamp_ms = input.i64()?;
    let start_timestamp_ms = input.i64()?;
    let mut value = TxnLogValue {
        producer_id,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch,
        next_producer_epoch: -1,
        transaction_timeout_ms,
        state,
        partitions: Vec::new(),
        last_update_timestamp_ms,
        start_timestamp_ms,
        client_transaction_version: 0,
    };
    if flexible {
        input.value_tagged_fields(&mut value)?;
    }
    input.end()?;
    // Kafka's reader ignores the partitions of an Empty transaction.
    if state == TxnState::Empty {
        partitions.clear();
    }
    partitions.sort();
    partitions.dedup();
    value.partitions = partitions;
    Ok(value)
}

/// Per topic (in order), its partitions (in order, once each).
fn group_by_topic(partitions: &[TopicPartition]) -> Vec<(&str, Vec<i32>)> {
    let mut sorted: Vec<&TopicPartition> = partitions.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
    for tp in sorted {
        match topics.last_mut() {
            Some((topic, list)) if *topic == tp.topic => list.push(tp.partition),
            _ => topics.push((&tp.topic, vec![tp.partition])),
        }
    }
    topics
}

fn put_partitions(out: &mut Vec<u8>, topics: Option<&[(&str, Vec<i32>)]>, flexible: bool) {
    let Some(topics) = topics else {
        if flexible {
            put_uvarint(out, 0);
        } else {
            put_i32(out, -1);
        }
        return;
    };
    put_count(out, topics.len(), flexible);
    for (topic, list) in topics {
        if flexible {
            put_compact_string(out, topic);
        } else {
            put_string(out, topic);
        }
        put_count(out, list.len(), flexible);
        for partition in list {
            put_i32(out, *partition);
        }
        if flexible {
            put_uvarint(out, 0);
        }
    }
}

/// The value's tagged fields: those that are not their default, in tag order.
fn put_value_tagged_fields(out: &mut Vec<u8>, value: &TxnLogValue) {
    let mut fields: Vec<(u64, Vec<u8>)> = Vec::with_capacity(4);
    if value.previous_producer_id != -1 {
        fields.push((
            TAG_PREVIOUS_PRODUCER_ID,
            value.previous_producer_id.to_be_bytes().to_vec(),
        ));
    }
    if value.next_producer_id != -1 {
        fields.push((
            TAG_NEXT_PRODUCER_ID,
            value.next_producer_id.to_be_bytes().to_vec(),
        ));
    }
    if value.client_transaction_version != 0 {
        fields.push((
            TAG_CLIENT_TRANSACTION_VERSION,
            value.client_transaction_version.to_be_bytes().to_vec(),
        ));
    }
    if value.next_producer_epoch != -1 {
        fields.push((
            TAG_NEXT_PRODUCER_EPOCH,
            value.next_producer_epoch.to_be_bytes().to_vec(),
        ));
    }
    put_uvarint(out, fields.len() as u64);
    for (tag, bytes) in fields {
        put_uvarint(out, tag);
        put_uvarint(out, bytes.len() as u64);
        out.extend_from_slice(&bytes);
    }
}

fn put_count(out: &mut Vec<u8>, count: usize, flexible: bool) {
    if flexible {
        put_uvarint(out, count as u64 + 1);
    } else {
        put_i32(out, i32::try_from(count).unwrap_or(i32::MAX));
    }
}

fn put_uvarint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
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

/// At most i16::MAX bytes, cut at a character boundary: transactional ids and topic names are
/// bounded far below that before they get here (Kafka's own limit is the same).
fn bounded(value: &str) -> &str {
    let mut end = value.len().min(i16::MAX as usize);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

fn put_string(out: &mut Vec<u8>, value: &str) {
    let value = bounded(value);
    put_i16(out, value.len() as i16);
    out.extend_from_slice(value.as_bytes());
}

fn put_compact_string(out: &mut Vec<u8>, value: &str) {
    let value = bounded(value);
    put_uvarint(out, value.len() as u64 + 1);
    out.extend_from_slice(value.as_bytes());
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

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    fn end(&self) -> Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(RecordError("bytes after the record's last field"))
        }
    }

    fn i8(&mut self) -> Result<i8> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array()?))
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

    fn utf8(&mut self, length: usize) -> Result<String> {
        let bytes = self.take(length)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| RecordError("a string is not UTF-8"))
    }

    fn string(&mut self) -> Result<String> {
        let length = self.i16()?;
        let length = usize::try_from(length)
            .map_err(|_| RecordError("a null string where one is required"))?;
        self.utf8(length)
    }

    fn compact_string(&mut self) -> Result<String> {
        let length = self.uvarint()?;
        let length = length
            .checked_sub(1)
            .ok_or(RecordError("a null string where one is required"))?;
        let length = usize::try_from(length).map_err(|_| RecordError("a string is too long"))?;
        self.utf8(length)
    }

    /// An array's count (`None` for null), checked against the bytes left: each element
    /// takes at least `element_bytes`.
    fn count(&mut self, flexible: bool, element_bytes: usize) -> Result<Option<usize>> {
        let count = if flexible {
            match self.uvarint()? {
                0 => return Ok(None),
                n => usize::try_from(n - 1).map_err(|_| RecordError("an array is too long"))?,
            }
        } else {
            match self.i32()? {
                -1 => return Ok(None),
                n => usize::try_from(n).map_err(|_| RecordError("a negative array count"))?,
            }
        };
        if count.saturating_mul(element_bytes) > self.0.len() {
            return Err(RecordError("an array count exceeds the record"));
        }
        Ok(Some(count))
    }

    /// `TransactionPartitions`: null reads as none.
    fn partitions(&mut self, flexible: bool) -> Result<Vec<TopicPartition>> {
        // A topic entry is at least a string length and an array count (one byte each when
        // flexible, plus its tagged fields).
        let minimum = if flexible { 3 } else { 6 };
        let Some(topics) = self.count(flexible, minimum)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for _ in 0..topics {
            let topic = if flexible {
                self.compact_string()?
            } else {
                self.string()?
            };
            let count = self
                .count(flexible, 4)?
                .ok_or(RecordError("null partition ids"))?;
            out.reserve(count);
            for _ in 0..count {
                out.push(TopicPartition::new(topic.clone(), self.i32()?));
            }
            if flexible {
                self.skip_tagged_fields()?;
            }
        }
        Ok(out)
    }

    fn skip_tagged_fields(&mut self) -> Result<()> {
        let count = self.uvarint()?;
        for _ in 0..count {
            self.uvarint()?;
            let size = self.tagged_size()?;
            self.take(size)?;
        }
        Ok(())
    }

    fn tagged_size(&mut self) -> Result<usize> {
        usize::try_from(self.uvarint()?).map_err(|_| RecordError("a tagged field is too large"))
    }

    /// The value's tagged fields: the known ones read (their size must be the field's), the
    /// others skipped.
    fn value_tagged_fields(&mut self, value: &mut TxnLogValue) -> Result<()> {
        let count = self.uvarint()?;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.tagged_size()?;
            let mut field = Reader(self.take(size)?);
            match tag {
                TAG_PREVIOUS_PRODUCER_ID => value.previous_producer_id = field.i64()?,
                TAG_NEXT_PRODUCER_ID => value.next_producer_id = field.i64()?,
                TAG_CLIENT_TRANSACTION_VERSION => value.client_transaction_version = field.i16()?,
                TAG_NEXT_PRODUCER_EPOCH => value.next_producer_epoch = field.i16()?,
                _ => continue,
            }
            field.end()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(state: TxnState, partitions: Vec<TopicPartition>) -> TxnLogValue {
        TxnLogValue {
            producer_id: 4_000,
            previous_producer_id: 3_999,
            next_producer_id: 4_001,
            producer_epoch: 7,
            next_producer_epoch: -1,
            transaction_timeout_ms: 60_000,
            state,
            partitions,
            last_update_timestamp_ms: 1_700_000_000_123,
            start_timestamp_ms: 1_700_000_000_000,
            client_transaction_version: 2,
        }
    }

    fn some_partitions() -> Vec<TopicPartition> {
        vec![
            TopicPartition::new("a", 0),
            TopicPartition::new("a", 3),
            TopicPartition::new("b", 1),
        ]
    }

    #[test]
    fn both_versions_round_trip() {
        for state in TxnState::ALL {
            let partitions = if state == TxnState::Empty {
                Vec::new()
            } else {
                some_partitions()
            };
            let v1 = value(state, partitions);
            assert_eq!(
                decode_value(&encode_value(&v1)),
                Ok(v1.clone()),
                "{state:?}"
            );
            // v0 keeps what it has fields for; the rest reads as the defaults.
            let v0 = TxnLogValue {
                previous_producer_id: -1,
                next_producer_id: -1,
                client_transaction_version: 0,
                ..v1.clone()
            };
            let bytes = encode_value_version(&v1, ValueVersion::V0);
            assert_eq!(decode_value(&bytes), Ok(v0), "{state:?}");
        }
        let record = TxnLogRecord {
            transactional_id: "tx-é".into(),
            value: Some(value(TxnState::Ongoing, some_partitions())),
        };
        let (key, bytes) = record.encode();
        assert_eq!(decode(&key, bytes.as_deref()), Ok(Some(record)));
        let tombstone = TxnLogRecord::tombstone("tx");
        let (key, bytes) = tombstone.encode();
        assert_eq!(bytes, None);
        assert_eq!(decode(&key, None), Ok(Some(tombstone)));
    }

    #[test]
    fn defaults_are_not_written_as_tagged_fields() {
        let mut plain = value(TxnState::CompleteCommit, Vec::new());
        plain.previous_producer_id = -1;
        plain.next_producer_id = -1;
        plain.client_transaction_version = 0;
        let bytes = encode_value(&plain);
        assert_eq!(bytes.last(), Some(&0), "an empty tagged-field section");
        assert_eq!(decode_value(&bytes), Ok(plain));
    }

    #[test]
    fn partitions_are_written_grouped_sorted_and_once() {
        let unsorted = vec![
            TopicPartition::new("b", 1),
            TopicPartition::new("a", 3),
            TopicPartition::new("a", 0),
            TopicPartition::new("a", 3),
        ];
        let encoded = encode_value(&value(TxnState::Ongoing, unsorted));
        assert_eq!(
            encoded,
            encode_value(&value(TxnState::Ongoing, some_partitions()))
        );
        assert_eq!(
            decode_value(&encoded).map(|v| v.partitions),
            Ok(some_partitions())
        );
    }

    /// TransactionLogKey v0 of "txn-1", field by field as Kafka lays it out.
    #[test]
    fn kafkas_key_layout() {
        let mut key = Vec::new();
        key.extend_from_slice(&0i16.to_be_bytes()); // version
        key.extend_from_slice(&5i16.to_be_bytes()); // TransactionalId length
        key.extend_from_slice(b"txn-1");
        assert_eq!(encode_key("txn-1"), key);
        let record = decode(&key, None).unwrap().unwrap();
        assert_eq!(record.transactional_id, "txn-1");
        // An unknown key version is skipped, not an error; trailing bytes are an error.
        assert_eq!(decode(&[0, 9, 0, 0], None), Ok(None));
        let mut longer = key.clone();
        longer.push(0);
        assert!(decode(&longer, None).is_err());
    }

    /// TransactionLogValue v0, field by field as Kafka's schema lays it out.
    #[test]
    fn kafkas_v0_value_layout() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0i16.to_be_bytes()); // version
        bytes.extend_from_slice(&4_000i64.to_be_bytes()); // ProducerId
        bytes.extend_from_slice(&7i16.to_be_bytes()); // ProducerEpoch
        bytes.extend_from_slice(&60_000i32.to_be_bytes()); // TransactionTimeoutMs
        bytes.push(2); // TransactionStatus: PrepareCommit
        bytes.extend_from_slice(&2i32.to_be_bytes()); // TransactionPartitions: 2 topics
        bytes.extend_from_slice(&1i16.to_be_bytes()); //   Topic
        bytes.push(b'a');
        bytes.extend_from_slice(&2i32.to_be_bytes()); //   PartitionIds: 2
        bytes.extend_from_slice(&0i32.to_be_bytes());
        bytes.extend_from_slice(&3i32.to_be_bytes());
        bytes.extend_from_slice(&1i16.to_be_bytes()); //   Topic
        bytes.push(b'b');
        bytes.extend_from_slice(&1i32.to_be_bytes()); //   PartitionIds: 1
        bytes.extend_from_slice(&1i32.to_be_bytes());
        bytes.extend_from_slice(&1_700_000_000_123i64.to_be_bytes()); // LastUpdateTimestampMs
        bytes.extend_from_slice(&1_700_000_000_000i64.to_be_bytes()); // StartTimestampMs
        let expected = TxnLogValue {
            previous_producer_id: -1,
            next_producer_id: -1,
            client_transaction_version: 0,
            ..value(TxnState::PrepareCommit, some_partitions())
        };
        assert_eq!(decode_value(&bytes), Ok(expected.clone()));
        assert_eq!(encode_value_version(&expected, ValueVersion::V0), bytes);

        // An Empty transaction: null partitions.
        let empty = TxnLogValue {
            state: TxnState::Empty,
            partitions: Vec::new(),
            start_timestamp_ms: -1,
            ..expected
        };
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0i16.to_be_bytes());
        bytes.extend_from_slice(&4_000i64.to_be_bytes());
        bytes.extend_from_slice(&7i16.to_be_bytes());
        bytes.extend_from_slice(&60_000i32.to_be_bytes());
        bytes.push(0); // Empty
        bytes.extend_from_slice(&(-1i32).to_be_bytes()); // null TransactionPartitions
        bytes.extend_from_slice(&1_700_000_000_123i64.to_be_bytes());
        bytes.extend_from_slice(&(-1i64).to_be_bytes());
        assert_eq!(encode_value_version(&empty, ValueVersion::V0), bytes);
        assert_eq!(decode_value(&bytes), Ok(empty));
    }

    /// TransactionLogValue v1, field by field as Kafka's schema lays it out.
    #[test]
    fn kafkas_v1_value_layout() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&1i16.to_be_bytes()); // version
        bytes.extend_from_slice(&4_000i64.to_be_bytes()); // ProducerId
        bytes.extend_from_slice(&7i16.to_be_bytes()); // ProducerEpoch
        bytes.extend_from_slice(&60_000i32.to_be_bytes()); // TransactionTimeoutMs
        bytes.push(1); // TransactionStatus: Ongoing
        bytes.push(2 + 1); // TransactionPartitions: compact, 2 topics
        bytes.push(1 + 1); //   Topic: compact string
        bytes.push(b'a');
        bytes.push(2 + 1); //   PartitionIds: compact, 2
        bytes.extend_from_slice(&0i32.to_be_bytes());
        bytes.extend_from_slice(&3i32.to_be_bytes());
        bytes.push(0); //   no tagged fields
        bytes.push(1 + 1); //   Topic
        bytes.push(b'b');
        bytes.push(1 + 1); //   PartitionIds: 1
        bytes.extend_from_slice(&1i32.to_be_bytes());
        bytes.push(0); //   no tagged fields
        bytes.extend_from_slice(&1_700_000_000_123i64.to_be_bytes()); // LastUpdateTimestampMs
        bytes.extend_from_slice(&1_700_000_000_000i64.to_be_bytes()); // StartTimestampMs
        bytes.push(3); // 3 tagged fields
        bytes.push(0); // tag 0 PreviousProducerId
        bytes.push(8);
        bytes.extend_from_slice(&3_999i64.to_be_bytes());
        bytes.push(1); // tag 1 NextProducerId
        bytes.push(8);
        bytes.extend_from_slice(&4_001i64.to_be_bytes());
        bytes.push(2); // tag 2 ClientTransactionVersion
        bytes.push(2);
        bytes.extend_from_slice(&2i16.to_be_bytes());
        let expected = value(TxnState::Ongoing, some_partitions());
        assert_eq!(encode_value(&expected), bytes);
        assert_eq!(decode_value(&bytes), Ok(expected.clone()));

        // A tag we do not know (99) is skipped; NextProducerEpoch (3) is read.
        let mut newer = bytes.clone();
        let tags_at = newer.len() - (1 + 10 + 10 + 4);
        newer.truncate(tags_at);
        newer.push(2);
        newer.push(3); // tag 3 NextProducerEpoch
        newer.push(2);
        newer.extend_from_slice(&5i16.to_be_bytes());
        newer.push(99);
        newer.push(3);
        newer.extend_from_slice(&[1, 2, 3]);
        let read = decode_value(&newer).unwrap();
        assert_eq!(read.next_producer_epoch, 5);
        assert_eq!(
            (read.previous_producer_id, read.client_transaction_version),
            (-1, 0)
        );
    }

    #[test]
    fn truncated_input_is_an_error_at_every_length() {
        let record = TxnLogRecord {
            transactional_id: "transactional".into(),
            value: Some(value(TxnState::PrepareAbort, some_partitions())),
        };
        let (key, bytes) = record.encode();
        let bytes = bytes.unwrap();
        for cut in 0..key.len() {
            assert!(
                decode(&key[..cut], Some(&bytes)).is_err(),
                "key cut at {cut}"
            );
        }
        for version in [ValueVersion::V0, ValueVersion::V1] {
            let bytes = encode_value_version(record.value.as_ref().unwrap(), version);
            for cut in 0..bytes.len() {
                assert!(
                    decode_value(&bytes[..cut]).is_err(),
                    "{version:?} cut at {cut}"
                );
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(decode_value(&longer).is_err(), "{version:?} trailing byte");
        }
    }

    #[test]
    fn absurd_lengths_are_errors_without_allocating() {
        let head = |version: i16| {
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&version.to_be_bytes());
            bytes.extend_from_slice(&1i64.to_be_bytes());
            bytes.extend_from_slice(&0i16.to_be_bytes());
            bytes.extend_from_slice(&1000i32.to_be_bytes());
            bytes.push(1);
            bytes
        };
        // v0: i32::MAX topics; then one topic with i32::MAX partitions.
        let mut bytes = head(0);
        bytes.extend_from_slice(&i32::MAX.to_be_bytes());
        bytes.extend_from_slice(&[0; 16]);
        assert!(decode_value(&bytes).is_err());
        let mut bytes = head(0);
        bytes.extend_from_slice(&1i32.to_be_bytes());
        bytes.extend_from_slice(&[0, 1, b't']);
        bytes.extend_from_slice(&i32::MAX.to_be_bytes());
        bytes.extend_from_slice(&[0; 16]);
        assert!(decode_value(&bytes).is_err());
        // A negative count other than null, a string longer than the record.
        let mut bytes = head(0);
        bytes.extend_from_slice(&(-2i32).to_be_bytes());
        assert!(decode_value(&bytes).is_err());
        let mut bytes = head(0);
        bytes.extend_from_slice(&1i32.to_be_bytes());
        bytes.extend_from_slice(&i16::MAX.to_be_bytes());
        bytes.extend_from_slice(&[0; 16]);
        assert!(decode_value(&bytes).is_err());
        // v1: a compact count of u64::MAX, a tagged field of u32::MAX bytes.
        let mut bytes = head(1);
        bytes.extend_from_slice(&[0xff; 9]);
        bytes.push(0x01);
        assert!(decode_value(&bytes).is_err());
        let mut bytes = head(1);
        bytes.push(0); // null partitions
        bytes.extend_from_slice(&[0; 16]);
        bytes.push(1);
        bytes.push(0);
        bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode_value(&bytes).is_err());
        // A varint that never ends.
        let mut bytes = head(1);
        bytes.extend_from_slice(&[0x80; 12]);
        assert!(decode_value(&bytes).is_err());
        // A known tagged field of the wrong size, an unknown state, an unknown version.
        let mut bytes = head(1);
        bytes.push(0);
        bytes.extend_from_slice(&[0; 16]);
        bytes.extend_from_slice(&[1, 0, 4, 0, 0, 0, 1]);
        assert!(decode_value(&bytes).is_err());
        let mut bytes = head(0);
        bytes[16] = 8;
        bytes.extend_from_slice(&(-1i32).to_be_bytes());
        bytes.extend_from_slice(&[0; 16]);
        assert_eq!(decode_value(&bytes), Err(RecordError("unknown state")));
        let mut bytes = head(2);
        bytes.extend_from_slice(&(-1i32).to_be_bytes());
        bytes.extend_from_slice(&[0; 16]);
        assert_eq!(
            decode_value(&bytes),
            Err(RecordError("unknown value version"))
        );
    }
}
