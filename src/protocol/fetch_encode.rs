//! Fetch responses written without copying records: the response is a list of parts, encoded
//! bytes and file slices, and the connection sends the slices with `sendfile`, straight from
//! the page cache to the socket.
//!
//! Each partition's fields are encoded by the `kafka-protocol` codec with an empty records
//! field, which is the partition's last field before its tagged fields (none are set when
//! there are records; a partition without records, e.g. one with a diverging epoch, is
//! encoded whole by the codec); the empty records' length is then replaced by the slice's. The outer structure (topics and
//! the response's own fields) is written here. A unit test checks the result byte for byte
//! against the codec's own encoding of the same response, for every version served.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Encodable;

use super::FrameError;
use crate::file_slice::FileSlice;

/// One piece of an encoded response.
#[derive(Debug)]
pub enum Part {
    Bytes(Bytes),
    File(FileSlice),
}

#[derive(Debug)]
pub struct FetchPartitionAnswer {
    /// Everything but the records (left empty here).
    pub data: PartitionData,
    pub records: Option<FileSlice>,
}

#[derive(Debug)]
pub struct FetchTopicAnswer {
    pub name: String,
    pub topic_id: uuid::Uuid,
    pub partitions: Vec<FetchPartitionAnswer>,
}

#[derive(Debug, Default)]
pub struct FetchAnswer {
    /// KIP-219: how long the client is to wait before its next fetch (a client quota).
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub session_id: i32,
    pub topics: Vec<FetchTopicAnswer>,
    /// KIP-951 (v16+): the endpoints of leaders named in partitions' `current_leader`.
    pub node_endpoints: Vec<kafka_protocol::messages::fetch_response::NodeEndpoint>,
}

impl FetchAnswer {
    pub fn record_bytes(&self) -> u64 {
        self.topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter_map(|p| p.records.as_ref())
            .map(|s| s.len)
            .sum()
    }
}

fn put_unsigned_varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

fn put_string(out: &mut BytesMut, text: &str, flexible: bool) {
    if flexible {
        put_unsigned_varint(out, text.len() as u64 + 1);
    } else {
        out.put_i16(text.len() as i16);
    }
    out.put_slice(text.as_bytes());
}

fn put_array_length(out: &mut BytesMut, length: usize, flexible: bool) {
    if flexible {
        put_unsigned_varint(out, length as u64 + 1);
    } else {
        out.put_i32(length as i32);
    }
}

/// Encodes a Fetch response frame (size, header, body) as parts; returns them and the frame's
/// total length.
pub fn encode(
    version: i16,
    correlation_id: i32,
    answer: &FetchAnswer,
) -> Result<(Vec<Part>, usize), FrameError> {
    let encode_error = |reason: String| FrameError::Encode {
        api_key: ApiKey::Fetch,
        version,
        reason,
    };
    let flexible = version >= 12;
    let mut parts = Vec::new();
    let mut out = BytesMut::with_capacity(256);
    out.put_i32(0); // the frame size, set at the end
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, ApiKey::Fetch.response_header_version(version))
        .map_err(|e| encode_error(e.to_string()))?;
    out.put_i32(answer.throttle_time_ms);
    if version >= 7 {
        out.put_i16(answer.error_code);
        out.put_i32(answer.session_id);
    }
    put_array_length(&mut out, answer.topics.len(), flexible);
    let mut total = 0usize;
    for topic in &answer.topics {
        if version >= 13 {
            out.put_slice(topic.topic_id.as_bytes());
        } else {
            put_string(&mut out, &topic.name, flexible);
        }
        put_array_length(&mut out, topic.partitions.len(), flexible);
        for partition in &topic.partitions {
            let mut data = partition.data.clone();
            data.records = Some(Bytes::new());
            if partition.records.as_ref().is_none_or(|s| s.len == 0) {
                // No records to splice in: the codec writes the whole partition, tagged
                // fields (a diverging epoch) included.
                data.encode(&mut out, version)
                    .map_err(|e| encode_error(e.to_string()))?;
                continue;
            }
            let mut encoded = BytesMut::new();
            data.encode(&mut encoded, version)
                .map_err(|e| encode_error(e.to_string()))?;
            // [fields][empty records length][tagged fields: one 0 byte when flexible]
            let (marker, tags): (&[u8], usize) = if flexible {
                (&[1], 1)
            } else {
                (&[0, 0, 0, 0], 0)
            };
            let marker_at = encoded
                .len()
                .checked_sub(marker.len() + tags)
                .ok_or_else(|| encode_error("partition shorter than its records".into()))?;
            if &encoded[marker_at..marker_at + marker.len()] != marker
                || (flexible && encoded[encoded.len() - 1] != 0)
            {
                return Err(encode_error(
                    "unexpected partition layout (tagged fields set?)".into(),
                ));
            }
            out.put_slice(&encoded[..marker_at]);
            let length = partition.records.as_ref().map_or(0, |s| s.len);
            if flexible {
                put_unsigned_varint(&mut out, length + 1);
            } else {
                let length =
                    i32::try_from(length).map_err(|_| encode_error("records over 2 GiB".into()))?;
                out.put_i32(length);
            }
            if let Some(slice) = &partition.records {
                if slice.len > 0 {
                    total += out.len();
                    parts.push(Part::Bytes(out.split().freeze()));
                    total += slice.len as usize;
                    parts.push(Part::File(slice.clone()));
                }
            }
            out.put_slice(&encoded[marker_at + marker.len()..]);
        }
        if flexible {
            out.put_u8(0); // the topic's tagged fields
        }
    }
    if flexible {
        if version >= 16 && !answer.node_endpoints.is_empty() {
            // The response's one tagged field: NodeEndpoints (tag 0), a compact array.
            let mut field = BytesMut::new();
            put_array_length(&mut field, answer.node_endpoints.len(), true);
            for endpoint in &answer.node_endpoints {
                endpoint
                    .encode(&mut field, version)
                    .map_err(|e| encode_error(e.to_string()))?;
            }
            put_unsigned_varint(&mut out, 1);
            put_unsigned_varint(&mut out, 0);
            put_unsigned_varint(&mut out, field.len() as u64);
            out.put_slice(&field);
        } else {
            out.put_u8(0); // the response's tagged fields: none
        }
    }
    total += out.len();
    parts.push(Part::Bytes(out.freeze()));
    let size = i32::try_from(total - 4).map_err(|_| encode_error("response over 2 GiB".into()))?;
    // The size goes in the first part's first four bytes.
    if let Some(Part::Bytes(first)) = parts.first_mut() {
        let mut patched = BytesMut::from(&first[..]);
        patched[..4].copy_from_slice(&size.to_be_bytes());
        *first = patched.freeze();
    }
    Ok((parts, total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::FetchResponse;
    use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse};
    use kafka_protocol::messages::{ProducerId, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use std::io::Write;
    use std::sync::Arc;

    fn materialize(parts: &[Part]) -> Vec<u8> {
        let mut out = Vec::new();
        for part in parts {
            match part {
                Part::Bytes(b) => out.extend_from_slice(b),
                Part::File(slice) => slice.read_into(&mut out).expect("read slice"),
            }
        }
        out
    }

    #[test]
    fn parts_equal_the_codecs_encoding_for_every_version() {
        let mut file = tempfile::tempfile().expect("tempfile");
        let content: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        file.write_all(&content).expect("write");
        let file = Arc::new(file);
        let topic_id = uuid::Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788);
        for version in 4..=17 {
            let partition = |index: i32, records: Option<(u64, u64)>, committed: bool| {
                let data = PartitionData::default()
                    .with_partition_index(index)
                    .with_error_code(if records.is_none() { 1 } else { 0 })
                    .with_high_watermark(900 + i64::from(index))
                    .with_last_stable_offset(800)
                    .with_log_start_offset(if version >= 5 { 7 } else { -1 })
                    .with_aborted_transactions(committed.then(|| {
                        vec![
                            AbortedTransaction::default()
                                .with_producer_id(ProducerId(5))
                                .with_first_offset(6),
                        ]
                    }))
                    .with_preferred_read_replica(kafka_protocol::messages::BrokerId(
                        if version >= 11 { 3 } else { -1 },
                    ));
                let slice =
                    records.map(|(position, len)| FileSlice::new(Arc::clone(&file), position, len));
                FetchPartitionAnswer {
                    data,
                    records: slice,
                }
            };
            let node_endpoints = if version >= 16 {
                vec![
                    kafka_protocol::messages::fetch_response::NodeEndpoint::default()
                        .with_node_id(kafka_protocol::messages::BrokerId(3))
                        .with_host(StrBytes::from_static_str("broker-3"))
                        .with_port(9092)
                        .with_rack(Some(StrBytes::from_static_str("r1"))),
                ]
            } else {
                Vec::new()
            };
            let answer = FetchAnswer {
                throttle_time_ms: 1234,
                node_endpoints: node_endpoints.clone(),
                error_code: 0,
                session_id: if version >= 7 { 42 } else { 0 },
                topics: vec![
                    FetchTopicAnswer {
                        name: "alpha".into(),
                        topic_id,
                        partitions: vec![
                            partition(0, Some((10, 1000)), false),
                            partition(1, None, true),
                            partition(2, Some((0, 0)), false),
                        ],
                    },
                    FetchTopicAnswer {
                        name: "beta".into(),
                        topic_id,
                        partitions: vec![partition(5, Some((3000, 2000)), true)],
                    },
                ],
            };
            let (parts, total) = encode(version, 77, &answer).expect("encode");
            let ours = materialize(&parts);
            assert_eq!(ours.len(), total);

            let mut expected_response = FetchResponse::default()
                .with_throttle_time_ms(answer.throttle_time_ms)
                .with_session_id(answer.session_id)
                .with_error_code(answer.error_code)
                .with_node_endpoints(node_endpoints);
            for topic in &answer.topics {
                let mut t = FetchableTopicResponse::default();
                if version >= 13 {
                    t.topic_id = topic.topic_id;
                } else {
                    t.topic = TopicName(StrBytes::from_string(topic.name.clone()));
                }
                for p in &topic.partitions {
                    let mut data = p.data.clone();
                    let mut bytes = Vec::new();
                    if let Some(slice) = &p.records {
                        slice.read_into(&mut bytes).expect("read");
                    }
                    data.records = Some(Bytes::from(bytes));
                    t.partitions.push(data);
                }
                expected_response.responses.push(t);
            }
            let expected = crate::protocol::encode_response(
                ApiKey::Fetch,
                version,
                77,
                &kafka_protocol::messages::ResponseKind::Fetch(expected_response),
            )
            .expect("codec encode");
            assert_eq!(ours, expected.to_vec(), "version {version}");
        }
    }
}
