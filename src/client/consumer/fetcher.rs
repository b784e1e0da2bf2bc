//! The fetcher: one Fetch in flight per broker, sessionless (topic ids and names both set, so
//! any Fetch version works), its answers decoded into each partition's buffer. A partition is
//! fetched from its leader, or from the replica the leader named for this consumer's
//! `client.rack` (KIP-392) until that replica errs or the choice is `metadata.max.age.ms` old.
//!
//! Batches are decoded without copying (`Bytes` slices), CRCs checked, compressed batches
//! inflated through the bounded codec, control batches and (for `read_committed`) aborted
//! transactions skipped. A seek bumps the partition's epoch, so answers to older fetches are
//! dropped. Retriable errors (a leader moved) mark the metadata stale; others (not authorized,
//! corrupt) fail the poll.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::mpsc;

use super::positions::{Start, SubscriptionState};
use super::types::{ConsumerRecord, IsolationLevel, Settings, TimestampType, TopicPartition};
use crate::client::cluster::Cluster;
use crate::client::error::{Error, Result, is_retriable_code};
use crate::protocol::batch::{BatchHeader, BatchIter, RecordIter, compute_crc, read_varint};
use crate::protocol::codec;
use crate::protocol::errors;

/// A partition the next fetch asks for.
struct ToFetch {
    tp: TopicPartition,
    /// The partition's seek epoch when asked.
    epoch: u64,
    fetch_offset: i64,
    leader_epoch: i32,
    served_at: u64,
}

/// A fetch's answer (or failure) with what was asked.
pub(super) struct FetchDone {
    broker: i32,
    asked: Vec<(TopicPartition, u64, i64)>,
    topic_ids: HashMap<[u8; 16], String>,
    result: Result<FetchResponse>,
}

/// The fetches in flight and their answers, waiting for poll.
pub(super) struct Fetcher {
    cluster: Arc<Cluster>,
    brokers_in_flight: BTreeSet<i32>,
    results: mpsc::UnboundedReceiver<FetchDone>,
    results_tx: mpsc::UnboundedSender<FetchDone>,
    /// Counts partitions served records by fetches, to order the next fetches.
    served_count: u64,
    /// Leaders must be looked up again before the next fetch (a fetch failed or named a
    /// moved leader, the subscription changed). The group's metadata check clears it too.
    pub(super) metadata_stale: bool,
}

impl Fetcher {
    pub(super) fn new(cluster: Arc<Cluster>) -> Fetcher {
        let (results_tx, results) = mpsc::unbounded_channel();
        Fetcher {
            cluster,
            brokers_in_flight: BTreeSet::new(),
            results,
            results_tx,
            served_count: 0,
            metadata_stale: true,
        }
    }

    /// The next fetch answer (cancel-safe: nothing is lost when the wait is dropped).
    pub(super) async fn answer(&mut self) -> Option<FetchDone> {
        self.results.recv().await
    }

    /// Sends a fetch to each leader that has fetchable partitions and no fetch in flight.
    pub(super) async fn send_fetches(
        &mut self,
        positions: &mut SubscriptionState,
        settings: &Settings,
    ) {
        let metadata = self.cluster.cached();
        if self.metadata_stale
            || positions.partitions.iter().any(|(tp, p)| {
                p.position.is_some()
                    && metadata
                        .partition(&tp.topic, tp.partition)
                        .is_none_or(|m| m.leader < 0)
            })
        {
            let topics: BTreeSet<String> = positions
                .partitions
                .keys()
                .map(|tp| tp.topic.clone())
                .collect();
            if !topics.is_empty() {
                let topics: Vec<String> = topics.into_iter().collect();
                if let Err(error) = self.cluster.refresh(Some(&topics)).await {
                    tracing::debug!(%error, "metadata refresh failed");
                }
            }
            self.metadata_stale = false;
        }
        let metadata = self.cluster.cached();

        let now = Instant::now();
        let mut by_broker: BTreeMap<i32, Vec<ToFetch>> = BTreeMap::new();
        for (tp, p) in &positions.partitions {
            if p.paused || p.in_flight || p.position.is_none() || !p.buffered.is_empty() {
                continue;
            }
            let Some(leader) = metadata.partition(&tp.topic, tp.partition) else {
                continue;
            };
            if leader.leader < 0 {
                continue;
            }
            let broker = match p.preferred_read_replica {
                Some((replica, until))
                    if now < until && metadata.brokers.contains_key(&replica) =>
                {
                    replica
                }
                _ => leader.leader,
            };
            if self.brokers_in_flight.contains(&broker) {
                continue;
            }
            by_broker.entry(broker).or_default().push(ToFetch {
                tp: tp.clone(),
                epoch: p.epoch,
                fetch_offset: p.fetch_offset,
                leader_epoch: leader.leader_epoch,
                served_at: p.served_at,
            });
        }
        for (broker, mut partitions) in by_broker {
            // The broker gives `fetch.max.bytes` to partitions in request order, and only the
            // first to return records may exceed it (KIP-74): as Kafka's consumer does, the
            // partitions served longest ago go first, so a busy one cannot starve the rest.
            partitions.sort_by_key(|p| p.served_at);
            let mut topics: Vec<(String, Vec<FetchPartition>)> = Vec::new();
            let mut topic_ids = HashMap::new();
            let mut asked = Vec::new();
            for ToFetch {
                tp,
                epoch,
                fetch_offset,
                leader_epoch,
                ..
            } in partitions
            {
                let at = match topics.iter().position(|(topic, _)| *topic == tp.topic) {
                    Some(at) => at,
                    None => {
                        topics.push((tp.topic.clone(), Vec::new()));
                        topics.len() - 1
                    }
                };
                topics[at].1.push(
                    FetchPartition::default()
                        .with_partition(tp.partition)
                        .with_current_leader_epoch(leader_epoch)
                        .with_fetch_offset(fetch_offset)
                        .with_log_start_offset(-1)
                        .with_partition_max_bytes(settings.max_partition_fetch_bytes),
                );
                if let Some(p) = positions.partitions.get_mut(&tp) {
                    p.in_flight = true;
                }
                asked.push((tp, epoch, fetch_offset));
            }
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(settings.fetch_max_wait.as_millis() as i32)
                .with_min_bytes(settings.fetch_min_bytes)
                .with_max_bytes(settings.fetch_max_bytes)
                .with_isolation_level(match settings.isolation_level {
                    IsolationLevel::ReadUncommitted => 0,
                    IsolationLevel::ReadCommitted => 1,
                })
                .with_session_id(0)
                .with_session_epoch(-1)
                .with_rack_id(StrBytes::from_string(settings.client_rack.clone()))
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(topic, partitions)| {
                            let id = metadata
                                .topics
                                .get(&topic)
                                .map(|t| t.topic_id)
                                .unwrap_or_default();
                            topic_ids.insert(id, topic.clone());
                            FetchTopic::default()
                                .with_topic(TopicName(StrBytes::from_string(topic)))
                                .with_topic_id(uuid::Uuid::from_bytes(id))
                                .with_partitions(partitions)
                        })
                        .collect(),
                );
            self.brokers_in_flight.insert(broker);
            let cluster = self.cluster.clone();
            let results = self.results_tx.clone();
            tokio::spawn(async move {
                let result = async {
                    let connection = cluster.broker(broker).await?;
                    connection.send(&request).await
                }
                .await;
                let _ = results.send(FetchDone {
                    broker,
                    asked,
                    topic_ids,
                    result,
                });
            });
        }
    }

    /// Buffers a fetch's records and acts on its errors.
    pub(super) async fn complete_fetch(
        &mut self,
        positions: &mut SubscriptionState,
        settings: &Settings,
        done: FetchDone,
    ) -> Result<()> {
        self.brokers_in_flight.remove(&done.broker);
        for (tp, _, _) in &done.asked {
            if let Some(p) = positions.partitions.get_mut(tp) {
                p.in_flight = false;
            }
        }
        let response = match done.result {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(broker = done.broker, %error, "fetch failed");
                forget_preferred_replicas(positions, &done.asked);
                if let Some(addr) = self
                    .cluster
                    .cached()
                    .brokers
                    .get(&done.broker)
                    .map(|b| b.address())
                {
                    self.cluster.forget(&addr);
                }
                self.metadata_stale = true;
                tokio::time::sleep(settings.retry_backoff).await;
                return Ok(());
            }
        };
        if response.error_code != errors::NONE {
            let error = Error::from_code(
                response.error_code,
                format!("fetch from broker {}", done.broker),
                None,
            );
            if !error.is_retriable() {
                return Err(error);
            }
            tracing::debug!(broker = done.broker, %error, "fetch refused; retrying");
            forget_preferred_replicas(positions, &done.asked);
            self.metadata_stale = true;
            tokio::time::sleep(settings.retry_backoff).await;
            return Ok(());
        }
        let asked: HashMap<TopicPartition, (u64, i64)> = done
            .asked
            .into_iter()
            .map(|(tp, epoch, offset)| (tp, (epoch, offset)))
            .collect();
        for topic in response.responses {
            let name = if topic.topic.is_empty() {
                match done.topic_ids.get(topic.topic_id.as_bytes()) {
                    Some(name) => name.clone(),
                    None => continue,
                }
            } else {
                topic.topic.to_string()
            };
            let topic_name: Arc<str> = Arc::from(name.as_str());
            for partition in topic.partitions {
                let tp = TopicPartition::new(&name, partition.partition_index);
                let Some(&(epoch, offset)) = asked.get(&tp) else {
                    continue;
                };
                let Some(p) = positions.partitions.get_mut(&tp) else {
                    continue;
                };
                if p.epoch != epoch || p.fetch_offset != offset {
                    continue; // sought meanwhile
                }
                let from_replica = p.preferred_read_replica.take();
                if partition.error_code == errors::NONE && partition.preferred_read_replica.0 >= 0 {
                    // The leader names the replica to read from, and sends no records.
                    let replica = partition.preferred_read_replica.0;
                    tracing::debug!(partition = %tp, replica, "reading from the replica in client.rack");
                    p.preferred_read_replica =
                        Some((replica, Instant::now() + settings.metadata_max_age));
                    continue;
                }
                match partition.error_code {
                    errors::NONE => {
                        p.preferred_read_replica = from_replica;
                    }
                    // A follower behind the offset: the leader may have it (Kafka's consumer
                    // resets only when the leader says the offset is out of range).
                    errors::OFFSET_OUT_OF_RANGE if from_replica.is_some() => {
                        tracing::debug!(partition = %tp, offset, "out of range on the preferred replica; fetching from the leader");
                        continue;
                    }
                    errors::OFFSET_OUT_OF_RANGE => {
                        tracing::info!(partition = %tp, offset, "offset out of range; resetting by auto.offset.reset");
                        p.unknown(Start::Reset(settings.auto_offset_reset));
                        continue;
                    }
                    // A leader moved or is catching up: find it again and fetch on.
                    code if code != errors::CORRUPT_MESSAGE && is_retriable_code(code) => {
                        tracing::debug!(partition = %tp, error = %errors::name(code), "fetch error; refreshing metadata");
                        self.metadata_stale = true;
                        continue;
                    }
                    // Not authorized, corrupt, unsupported: the application must know.
                    code => {
                        return Err(Error::from_code(code, format!("partition {tp}"), None));
                    }
                }
                p.high_watermark = if settings.isolation_level == IsolationLevel::ReadCommitted
                    && partition.last_stable_offset >= 0
                {
                    partition.last_stable_offset
                } else {
                    partition.high_watermark
                };
                let Some(records) = partition.records else {
                    continue;
                };
                let aborted: Vec<(i64, i64)> = match settings.isolation_level {
                    IsolationLevel::ReadCommitted => partition
                        .aborted_transactions
                        .unwrap_or_default()
                        .iter()
                        .map(|a| (a.producer_id.0, a.first_offset))
                        .collect(),
                    IsolationLevel::ReadUncommitted => Vec::new(),
                };
                let decoded = decode_records(
                    &topic_name,
                    partition.partition_index,
                    &records,
                    offset,
                    aborted,
                    settings.check_crcs,
                )
                .map_err(|reason| Error::Kafka {
                    code: errors::CORRUPT_MESSAGE,
                    context: format!("partition {tp}"),
                    message: Some(reason),
                })?;
                if let Some(next) = decoded.next_offset {
                    p.fetch_offset = next;
                    p.buffered.extend(decoded.records);
                    self.served_count += 1;
                    p.served_at = self.served_count;
                }
            }
        }
        Ok(())
    }
}

/// After a failed fetch, its partitions go back to their leader (Kafka's consumer clears the
/// preferred read replica the same way).
fn forget_preferred_replicas(
    positions: &mut SubscriptionState,
    asked: &[(TopicPartition, u64, i64)],
) {
    for (tp, _, _) in asked {
        if let Some(p) = positions.partitions.get_mut(tp) {
            p.preferred_read_replica = None;
        }
    }
}

/// The records of a fetch answer at or past `fetch_offset`, and the offset to fetch next.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub records: Vec<ConsumerRecord>,
    /// Past the last whole batch; `None` when the answer held no whole batch.
    pub next_offset: Option<i64>,
}

/// Decodes the batches of a fetch answer: CRCs checked (`check.crcs`), compressed batches
/// inflated through a bound, control batches and (for `read_committed`) aborted transactions
/// skipped, a trailing partial batch ignored.
pub(crate) fn decode_records(
    topic: &Arc<str>,
    partition: i32,
    bytes: &Bytes,
    fetch_offset: i64,
    mut aborted: Vec<(i64, i64)>,
    check_crcs: bool,
) -> std::result::Result<Decoded, String> {
    aborted.sort_by_key(|&(_, first_offset)| std::cmp::Reverse(first_offset));
    let mut aborting: BTreeSet<i64> = BTreeSet::new();
    let mut decoded = Decoded::default();
    for batch in BatchIter::new(bytes) {
        let Ok((_, header, raw)) = batch else {
            break; // a partial batch at the end of the answer
        };
        if header.magic != 2 {
            return Err(format!("record batch magic {} is not 2", header.magic));
        }
        if check_crcs && compute_crc(raw) != header.crc {
            return Err(format!(
                "record batch at offset {} fails its CRC check",
                header.base_offset
            ));
        }
        decoded.next_offset = Some(header.last_offset() + 1);
        while aborted
            .last()
            .is_some_and(|&(_, first)| first <= header.last_offset())
        {
            if let Some((producer_id, _)) = aborted.pop() {
                aborting.insert(producer_id);
            }
        }
        if header.is_control() {
            if is_abort_marker(&header, raw) {
                aborting.remove(&header.producer_id);
            }
            continue;
        }
        if header.is_transactional() && aborting.contains(&header.producer_id) {
            continue;
        }
        if header.last_offset() < fetch_offset {
            continue;
        }
        let leader_epoch =
            (header.partition_leader_epoch >= 0).then_some(header.partition_leader_epoch);
        let timestamp_type = if header.is_log_append_time() {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        };
        let (section, records) = if header.is_compressed() {
            let inflated = codec::decompress(
                header.compression().into(),
                &raw[crate::protocol::batch::BATCH_HEADER_BYTES..],
            )?;
            (Bytes::from(inflated), true)
        } else {
            (bytes.slice_ref(raw), false)
        };
        let iter = if records {
            RecordIter::decompressed(&header, &section)
        } else {
            RecordIter::new(&header, &section)
        };
        for record in iter {
            let record = record.map_err(|e| format!("offset {}: {e}", header.base_offset))?;
            let offset = record.offset(&header);
            if offset < fetch_offset {
                continue;
            }
            decoded.records.push(ConsumerRecord {
                topic: topic.clone(),
                partition,
                offset,
                timestamp: record.timestamp(&header),
                timestamp_type,
                key: record.key.map(|k| section.slice_ref(k)),
                value: record.value.map(|v| section.slice_ref(v)),
                headers: decode_headers(&section, record.headers, record.header_count)?,
                leader_epoch,
            });
        }
    }
    Ok(decoded)
}

/// An abort marker: a control record whose key is (version, type 0).
fn is_abort_marker(header: &BatchHeader, raw: &[u8]) -> bool {
    if header.is_compressed() {
        return false;
    }
    RecordIter::new(header, raw)
        .next()
        .and_then(|r| r.ok())
        .and_then(|r| r.key)
        .is_some_and(|key| key.len() >= 4 && i16::from_be_bytes([key[2], key[3]]) == 0)
}

fn decode_headers(
    section: &Bytes,
    mut bytes: &[u8],
    count: i32,
) -> std::result::Result<Vec<(String, Option<Bytes>)>, String> {
    let mut headers = Vec::with_capacity(count.clamp(0, 64) as usize);
    for _ in 0..count {
        let key_length = read_varint(&mut bytes).ok_or("truncated header key")?;
        let key_length = usize::try_from(key_length).map_err(|_| "null header key")?;
        if key_length > bytes.len() {
            return Err("header key exceeds the record".into());
        }
        let key = String::from_utf8_lossy(&bytes[..key_length]).into_owned();
        bytes = &bytes[key_length..];
        let value_length = read_varint(&mut bytes).ok_or("truncated header value")?;
        let value = if value_length < 0 {
            None
        } else {
            let length = value_length as usize;
            if length > bytes.len() {
                return Err("header value exceeds the record".into());
            }
            let value = section.slice_ref(&bytes[..length]);
            bytes = &bytes[length..];
            Some(value)
        };
        headers.push((key, value));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::BatchBuilder;

    fn batch(base: i64, values: &[&str], codec: i16) -> Vec<u8> {
        let mut builder = BatchBuilder::new(base, 1_000);
        for (i, v) in values.iter().enumerate() {
            builder.push(
                1_000 + i as i64,
                Some(b"k".as_slice()),
                Some(v.as_bytes()),
                &[(b"h".as_slice(), Some(b"x".as_slice()))],
            );
        }
        if codec == 0 {
            builder.build()
        } else {
            builder.build_compressed(codec).expect("compresses")
        }
    }

    #[test]
    fn records_decode_from_the_fetch_offset_with_headers_and_every_codec() {
        for codec in 0..=4 {
            let mut bytes = batch(10, &["a", "b", "c"], codec);
            bytes.extend(batch(13, &["d"], codec));
            // A partial batch at the end, as a fetch at its byte limit returns.
            let partial = batch(14, &["e"], codec);
            bytes.extend(&partial[..partial.len() / 2]);
            let bytes = Bytes::from(bytes);
            let topic: Arc<str> = Arc::from("t");
            let decoded = decode_records(&topic, 0, &bytes, 11, Vec::new(), true).expect("decodes");
            let offsets: Vec<i64> = decoded.records.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, [11, 12, 13], "codec {codec}");
            assert_eq!(decoded.next_offset, Some(14));
            let first = &decoded.records[0];
            assert_eq!(first.value.as_deref(), Some(b"b".as_slice()));
            assert_eq!(first.key.as_deref(), Some(b"k".as_slice()));
            assert_eq!(first.timestamp, 1_001);
            assert_eq!(
                first.headers,
                [("h".to_string(), Some(Bytes::from_static(b"x")))]
            );
        }
    }

    /// A batch from `producer_id` with `attributes` set (0x10 transactional, 0x20 control),
    /// re-checksummed.
    fn with_attributes(mut batch: Vec<u8>, producer_id: i64, attributes: i16) -> Vec<u8> {
        batch[43..51].copy_from_slice(&producer_id.to_be_bytes());
        let current = i16::from_be_bytes([batch[21], batch[22]]);
        batch[21..23].copy_from_slice(&(current | attributes).to_be_bytes());
        let crc = compute_crc(&batch);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    #[test]
    fn read_committed_skips_aborted_transactions_and_control_batches() {
        // Offsets 0-1: producer 7, aborted; 2: its abort marker; 3-4: producer 8, committed;
        // 5: its commit marker; 6: not transactional.
        let control = |base: i64, producer_id: i64, kind: u8| {
            let mut builder = BatchBuilder::new(base, 1_000);
            builder.push(
                1_000,
                Some(&[0, 0, 0, kind][..]),
                Some(&[0, 0, 0, 0, 0, 0][..]),
                &[],
            );
            with_attributes(builder.build(), producer_id, 0x30)
        };
        let mut bytes = with_attributes(batch(0, &["a0", "a1"], 0), 7, 0x10);
        bytes.extend(control(2, 7, 0));
        bytes.extend(with_attributes(batch(3, &["c3", "c4"], 0), 8, 0x10));
        bytes.extend(control(5, 8, 1));
        bytes.extend(batch(6, &["p6"], 0));
        let bytes = Bytes::from(bytes);
        let topic: Arc<str> = Arc::from("t");
        let values = |decoded: &Decoded| -> Vec<String> {
            decoded
                .records
                .iter()
                .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into())
                .collect()
        };
        let committed = decode_records(&topic, 0, &bytes, 0, vec![(7, 0)], true).expect("decodes");
        assert_eq!(values(&committed), ["c3", "c4", "p6"]);
        assert_eq!(committed.next_offset, Some(7));
        // read_uncommitted: everything but the markers.
        let all = decode_records(&topic, 0, &bytes, 0, Vec::new(), true).expect("decodes");
        assert_eq!(values(&all), ["a0", "a1", "c3", "c4", "p6"]);
    }

    #[test]
    fn corrupt_batches_are_refused() {
        let mut bytes = batch(0, &["a"], 0);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let topic: Arc<str> = Arc::from("t");
        let error =
            decode_records(&topic, 0, &Bytes::from(bytes), 0, Vec::new(), true).expect_err("crc");
        assert!(error.contains("CRC"), "{error}");
    }
}
