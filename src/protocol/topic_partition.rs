//! A topic partition, and Kafka's rule for topic names: the vocabulary the broker's layers and
//! the client SDK share.

use std::fmt;

/// Kafka's limit on topic name length (`Topic.MAX_NAME_LENGTH`).
pub const TOPIC_NAME_LENGTH_MAX: usize = 249;

/// A topic and one of its partitions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
}
