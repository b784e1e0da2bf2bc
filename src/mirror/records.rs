//! MirrorMaker 2's record formats, so its tools (and `RemoteClusterUtils`) read what `sluice
//! mirror` writes:
//!
//! - progress, in `mm2-offsets.<source>.internal` on the target (Connect's offsets format):
//!   key `["MirrorSourceConnector",{"cluster":..,"partition":..,"topic":..}]`, value
//!   `{"offset": <last upstream offset mirrored>}`;
//! - offset syncs, in `mm2-offset-syncs.<target>.internal` on the source: key
//!   `{topic STRING, partition INT32}`, value `{upstreamOffset INT64, offset INT64}`;
//! - checkpoints, in `<source>.checkpoints.internal` on the target: key
//!   `{group STRING, topic STRING, partition INT32}`, value a version INT16 (0) then
//!   `{upstreamOffset INT64, offset INT64, metadata STRING}`.
//!
//! STRING is Kafka's protocol string: an INT16 length, then UTF-8.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde_json::{Value, json};

fn put_string(out: &mut BytesMut, text: &str) {
    let bytes = &text.as_bytes()[..text.len().min(i16::MAX as usize)];
    out.put_i16(bytes.len() as i16);
    out.put_slice(bytes);
}

fn get_string(input: &mut Bytes) -> Option<String> {
    if input.remaining() < 2 {
        return None;
    }
    let length = input.get_i16();
    if length < 0 || input.remaining() < length as usize {
        return None;
    }
    let text = input.split_to(length as usize);
    String::from_utf8(text.to_vec()).ok()
}

fn get_i32(input: &mut Bytes) -> Option<i32> {
    (input.remaining() >= 4).then(|| input.get_i32())
}

fn get_i64(input: &mut Bytes) -> Option<i64> {
    (input.remaining() >= 8).then(|| input.get_i64())
}

pub fn progress_key(cluster: &str, topic: &str, partition: i32) -> Bytes {
    Bytes::from(
        json!(["MirrorSourceConnector", {"cluster": cluster, "partition": partition, "topic": topic}])
            .to_string(),
    )
}

pub fn progress_value(last_mirrored: i64) -> Bytes {
    Bytes::from(json!({ "offset": last_mirrored }).to_string())
}

/// (cluster, topic, partition, last upstream offset mirrored) of a progress record.
pub fn decode_progress(key: &[u8], value: &[u8]) -> Option<(String, String, i32, i64)> {
    let key: Value = serde_json::from_slice(key).ok()?;
    let partition = key.as_array()?.get(1)?;
    let value: Value = serde_json::from_slice(value).ok()?;
    Some((
        partition.get("cluster")?.as_str()?.to_owned(),
        partition.get("topic")?.as_str()?.to_owned(),
        partition.get("partition")?.as_i64()? as i32,
        value.get("offset")?.as_i64()?,
    ))
}

/// An upstream offset and the downstream offset the same record got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetSync {
    pub upstream: i64,
    pub downstream: i64,
}

pub fn offset_sync_key(topic: &str, partition: i32) -> Bytes {
    let mut out = BytesMut::new();
    put_string(&mut out, topic);
    out.put_i32(partition);
    out.freeze()
}

pub fn offset_sync_value(sync: OffsetSync) -> Bytes {
    let mut out = BytesMut::with_capacity(16);
    out.put_i64(sync.upstream);
    out.put_i64(sync.downstream);
    out.freeze()
}

pub fn decode_offset_sync(key: Bytes, value: Bytes) -> Option<(String, i32, OffsetSync)> {
    let (mut key, mut value) = (key, value);
    let topic = get_string(&mut key)?;
    let partition = get_i32(&mut key)?;
    let upstream = get_i64(&mut value)?;
    let downstream = get_i64(&mut value)?;
    Some((
        topic,
        partition,
        OffsetSync {
            upstream,
            downstream,
        },
    ))
}

/// A group's committed offset upstream and where it resumes downstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub group: String,
    /// The downstream (target) topic.
    pub topic: String,
    pub partition: i32,
    pub upstream: i64,
    pub downstream: i64,
    pub metadata: String,
}

impl Checkpoint {
    pub fn key(&self) -> Bytes {
        let mut out = BytesMut::new();
        put_string(&mut out, &self.group);
        put_string(&mut out, &self.topic);
        out.put_i32(self.partition);
        out.freeze()
    }

    pub fn value(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i16(0);
        out.put_i64(self.upstream);
        out.put_i64(self.downstream);
        put_string(&mut out, &self.metadata);
        out.freeze()
    }

    pub fn decode(key: Bytes, value: Bytes) -> Option<Checkpoint> {
        let (mut key, mut value) = (key, value);
        let group = get_string(&mut key)?;
        let topic = get_string(&mut key)?;
        let partition = get_i32(&mut key)?;
        if value.remaining() < 2 || value.get_i16() != 0 {
            return None;
        }
        Some(Checkpoint {
            group,
            topic,
            partition,
            upstream: get_i64(&mut value)?,
            downstream: get_i64(&mut value)?,
            metadata: get_string(&mut value)?,
        })
    }
}

/// Where a group that committed `committed` upstream resumes downstream, from the latest sync
/// at or before it (MM2's translation): the sync's own offset when the group stopped exactly
/// there, else one past it. Never past where the group's next record was written, so a
/// consumer that moves over skips nothing (it may read some records again). A group that
/// stopped before everything mirrored resumes at the first record mirrored (the earliest
/// sync, which the mirror writes for its first record).
pub fn translate(syncs: &[OffsetSync], committed: i64) -> Option<i64> {
    let at_or_before = syncs
        .iter()
        .filter(|sync| sync.upstream <= committed)
        .max_by_key(|sync| sync.upstream);
    match at_or_before {
        Some(sync) if sync.upstream == committed => Some(sync.downstream),
        Some(sync) => Some(sync.downstream + 1),
        None => syncs
            .iter()
            .min_by_key(|sync| sync.upstream)
            .map(|sync| sync.downstream),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_round_trip_in_mm2_s_layout() {
        let key = offset_sync_key("orders", 2);
        assert_eq!(&key[..], b"\x00\x06orders\x00\x00\x00\x02");
        let sync = OffsetSync {
            upstream: 10,
            downstream: 7,
        };
        assert_eq!(
            decode_offset_sync(key, offset_sync_value(sync)),
            Some(("orders".to_owned(), 2, sync))
        );
        let checkpoint = Checkpoint {
            group: "g".to_owned(),
            topic: "source.orders".to_owned(),
            partition: 1,
            upstream: 5,
            downstream: 4,
            metadata: String::new(),
        };
        assert_eq!(&checkpoint.value()[..2], &[0, 0]);
        assert_eq!(
            Checkpoint::decode(checkpoint.key(), checkpoint.value()),
            Some(checkpoint)
        );
        assert_eq!(
            &progress_key("A", "orders", 0)[..],
            br#"["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"orders"}]"#
        );
        assert_eq!(
            decode_progress(&progress_key("A", "orders", 0), &progress_value(41)),
            Some(("A".to_owned(), "orders".to_owned(), 0, 41))
        );
        assert!(Checkpoint::decode(Bytes::from_static(b"\x00"), Bytes::new()).is_none());
    }

    #[test]
    fn translation_never_passes_the_group_s_next_record() {
        let syncs = [
            OffsetSync {
                upstream: 0,
                downstream: 0,
            },
            OffsetSync {
                upstream: 100,
                downstream: 103,
            },
        ];
        assert_eq!(translate(&syncs, 100), Some(103));
        assert_eq!(translate(&syncs, 150), Some(104));
        assert_eq!(translate(&syncs, 50), Some(1));
        assert_eq!(translate(&[], 50), None);
        let later = [OffsetSync {
            upstream: 40,
            downstream: 7,
        }];
        assert_eq!(
            translate(&later, 10),
            Some(7),
            "a group behind the first record mirrored"
        );
    }
}
