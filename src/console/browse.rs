//! The console's message browser: a page of one partition's records from an offset, a
//! timestamp, the oldest or the newest, each key, value and header bounded in bytes, read
//! through the SDK's consumer (no group) like any client.

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::Serialize;

use crate::client::{ClientConfig, Consumer, TopicPartition};

/// The most records one page shows.
pub const RECORDS_MAX: usize = 500;
/// The most bytes of one key, value or header shown (the rest is cut, and said so).
pub const FIELD_BYTES_MAX: usize = 64 * 1024;
/// The bytes one fetch of the browser's consumer may bring (a record larger than this still
/// comes whole, as Kafka sends at least one batch; it is cut before it reaches the page).
const FETCH_BYTES_MAX: usize = 1024 * 1024;
/// How long a page waits for records it was promised by the log end offset.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Oldest,
    /// The newest records, shown newest first.
    Newest,
    Offset(i64),
    Timestamp(i64),
}

/// What the browser asks for.
#[derive(Debug, Clone)]
pub struct Query {
    pub topic: String,
    pub partition: i32,
    pub from: Start,
    pub limit: usize,
    pub field_bytes: usize,
}

/// Bytes as the page gets them: base64 of at most `field_bytes`, and the whole size.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Field {
    pub base64: String,
    pub size: usize,
    pub truncated: bool,
}

impl Field {
    fn of(bytes: &[u8], bound: usize) -> Field {
        let shown = &bytes[..bytes.len().min(bound)];
        Field {
            base64: base64::engine::general_purpose::STANDARD.encode(shown),
            size: bytes.len(),
            truncated: shown.len() < bytes.len(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Header {
    pub key: String,
    pub value: Option<Field>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub timestamp_type: String,
    pub key: Option<Field>,
    pub value: Option<Field>,
    pub headers: Vec<Header>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub topic: String,
    pub partition: i32,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// The offset the page started reading at.
    pub start_offset: i64,
    /// `oldest first` or `newest first`.
    pub order: String,
    pub records: Vec<Record>,
    /// Set when the page has fewer records than asked although the log has more (a read
    /// that timed out, or records removed under it).
    pub incomplete: Option<String>,
}

/// Reads one page. `client` is the console's client config (bootstrap and login).
pub async fn page(client: &ClientConfig, query: &Query) -> Result<Page, crate::client::Error> {
    let limit = query.limit.clamp(1, RECORDS_MAX);
    let field_bytes = query.field_bytes.clamp(16, FIELD_BYTES_MAX);
    let mut config = client.clone();
    config.insert("client.id", "sluice-console");
    config.insert("enable.auto.commit", "false");
    config.insert("fetch.max.bytes", FETCH_BYTES_MAX.to_string());
    config.insert("max.partition.fetch.bytes", FETCH_BYTES_MAX.to_string());
    let consumer = Consumer::new(config)?;
    let tp = TopicPartition::new(query.topic.as_str(), query.partition);
    let result = read(&consumer, &tp, query.from, limit, field_bytes).await;
    let _ = consumer.close().await;
    result.map(
        |(log_start_offset, log_end_offset, start_offset, records, incomplete)| Page {
            topic: query.topic.clone(),
            partition: query.partition,
            log_start_offset,
            log_end_offset,
            start_offset,
            order: if query.from == Start::Newest {
                "newest first"
            } else {
                "oldest first"
            }
            .to_owned(),
            records,
            incomplete,
        },
    )
}

type Read = (i64, i64, i64, Vec<Record>, Option<String>);

async fn read(
    consumer: &Consumer,
    tp: &TopicPartition,
    from: Start,
    limit: usize,
    field_bytes: usize,
) -> Result<Read, crate::client::Error> {
    let partitions = std::slice::from_ref(tp);
    let log_start = consumer
        .beginning_offsets(partitions)
        .await?
        .get(tp)
        .copied()
        .unwrap_or(0);
    let log_end = consumer
        .end_offsets(partitions)
        .await?
        .get(tp)
        .copied()
        .unwrap_or(0);
    let start = match from {
        Start::Oldest => log_start,
        Start::Newest => (log_end - limit as i64).max(log_start),
        Start::Offset(offset) => offset.clamp(log_start, log_end),
        Start::Timestamp(ms) => consumer
            .offsets_for_times(&[(tp.clone(), ms)].into_iter().collect())
            .await?
            .get(tp)
            .copied()
            .unwrap_or(log_end),
    };
    let mut records = Vec::new();
    let wanted = usize::try_from(log_end - start).unwrap_or(0).min(limit);
    if wanted > 0 {
        consumer.assign(partitions).await?;
        consumer.seek(tp, start).await?;
        let deadline = Instant::now() + READ_TIMEOUT;
        while records.len() < wanted && Instant::now() < deadline {
            for record in consumer.poll(Duration::from_millis(500)).await? {
                if records.len() >= wanted || record.offset >= log_end {
                    break;
                }
                records.push(Record {
                    offset: record.offset,
                    timestamp: record.timestamp,
                    timestamp_type: format!("{:?}", record.timestamp_type),
                    key: record.key.as_deref().map(|k| Field::of(k, field_bytes)),
                    value: record.value.as_deref().map(|v| Field::of(v, field_bytes)),
                    headers: record
                        .headers
                        .iter()
                        .map(|(key, value)| Header {
                            key: key.clone(),
                            value: value.as_deref().map(|v| Field::of(v, field_bytes)),
                        })
                        .collect(),
                });
            }
        }
    }
    // Compacted logs and transaction markers leave offsets without records: fewer records
    // than offsets is normal when the read reached the log end.
    let incomplete = (records.len() < wanted
        && records.last().is_none_or(|r| r.offset + 1 < log_end))
    .then(|| {
        format!(
            "{} of up to {wanted} records read before the {} s timeout",
            records.len(),
            READ_TIMEOUT.as_secs()
        )
    });
    if from == Start::Newest {
        records.reverse();
    }
    Ok((log_start, log_end, start, records, incomplete))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_cut_at_its_bound_and_says_so() {
        let whole = Field::of(b"hello", 16);
        assert_eq!(
            whole,
            Field {
                base64: "aGVsbG8=".into(),
                size: 5,
                truncated: false
            }
        );
        let cut = Field::of(&[7u8; 100], 16);
        assert_eq!((cut.size, cut.truncated), (100, true));
        let shown = base64::engine::general_purpose::STANDARD
            .decode(cut.base64)
            .expect("base64");
        assert_eq!(shown, [7u8; 16]);
    }
}
