//! A topic partition (by name or by topic id), and Kafka's rule for topic names: the
//! vocabulary the broker's layers and the client SDK share.

use std::fmt;

/// Kafka's limit on topic name length (`Topic.MAX_NAME_LENGTH`).
pub const TOPIC_NAME_LENGTH_MAX: usize = 249;

/// A topic and one of its partitions. Brokers send it to the controller (bincode, which
/// encodes it as it encodes the `(String, i32)` it replaced, so mixed versions agree).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "broker", derive(serde::Serialize, serde::Deserialize))]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: String,
    /// The partition's index.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`'s partition `partition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    /// `topic-partition`, as Kafka prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A partition named by its topic's id (Kafka's `TopicIdPartition`), as KIP-848 requests and
/// the consumer group records carry it: ids survive a topic's deletion and re-creation under the
/// same name, so an assignment cannot silently move to the new topic. Ordered by topic id, then
/// partition (the order the records group partitions by topic in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicIdPartition {
    /// The topic's id (Kafka's `Uuid`, big-endian).
    pub topic_id: u128,
    /// The partition's index.
    pub partition: i32,
}

impl TopicIdPartition {
    /// Partition `partition` of the topic with id `topic_id`.
    pub fn new(topic_id: u128, partition: i32) -> Self {
        TopicIdPartition {
            topic_id,
            partition,
        }
    }
}

impl fmt::Display for TopicIdPartition {
    /// `topic_id-partition`, the id as Kafka prints a `Uuid`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", topic_id_text(self.topic_id), self.partition)
    }
}

/// A topic id as Kafka prints a `Uuid` (URL-safe base64 of its 16 bytes, without padding).
pub fn topic_id_text(topic_id: u128) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    for chunk in topic_id.to_be_bytes().chunks(3) {
        let mut n = 0u32;
        for (i, b) in chunk.iter().enumerate() {
            n |= u32::from(*b) << (16 - 8 * i);
        }
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Kafka's topic name rule: 1..=249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name cannot be '{name}'"));
    }
    if name.len() > TOPIC_NAME_LENGTH_MAX {
        return Err(format!(
            "topic name is longer than {TOPIC_NAME_LENGTH_MAX} characters"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c)))
    {
        return Err(format!(
            "topic name contains '{bad}'; legal are ASCII alphanumerics, '.', '_', '-'"
        ));
    }
    Ok(())
}

/// An I/O error's text without the `(os error N)` suffix, for messages that say the cause once.
pub fn io_reason(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafkas_rule() {
        assert!(validate_topic_name("orders-eu_1.v2").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a b").is_err());
        assert!(validate_topic_name(&"x".repeat(TOPIC_NAME_LENGTH_MAX)).is_ok());
        assert!(validate_topic_name(&"x".repeat(TOPIC_NAME_LENGTH_MAX + 1)).is_err());
        assert_eq!(TopicPartition::new("t", 3).to_string(), "t-3");
    }

    #[test]
    fn topic_ids_print_as_kafka_prints_a_uuid() {
        // Kafka's `Uuid.ZERO_UUID` and `Uuid.METADATA_TOPIC_ID` (0, 1).
        assert_eq!(topic_id_text(0), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(topic_id_text(1), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(
            TopicIdPartition::new(u128::MAX, 7).to_string(),
            "_____________________w-7"
        );
        assert!(TopicIdPartition::new(1, 9) < TopicIdPartition::new(2, 0));
    }

    #[cfg(feature = "broker")]
    #[test]
    fn a_topic_partition_crosses_to_the_controller_as_the_tuple_it_replaced() {
        let old: Option<Vec<(String, i32)>> = Some(vec![("orders".to_owned(), 3)]);
        let new = Some(vec![TopicPartition::new("orders", 3)]);
        let bytes = bincode::serialize(&old).expect("serializes");
        assert_eq!(bincode::serialize(&new).expect("serializes"), bytes);
        assert_eq!(
            bincode::deserialize::<Option<Vec<TopicPartition>>>(&bytes).expect("deserializes"),
            new
        );
    }
}
