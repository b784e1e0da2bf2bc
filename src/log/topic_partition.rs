//! `TopicPartition` and the directory name Kafka gives a partition replica (`<topic>-<partition>`).

use std::fmt;

/// Kafka's limit on topic name length (`Topic.MAX_NAME_LENGTH`).
pub const TOPIC_NAME_LENGTH_MAX: usize = 249;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// The partition directory name inside a log dir.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Parses a partition directory name; `None` for anything else found in a log dir.
    pub fn from_dir_name(name: &str) -> Option<TopicPartition> {
        let (topic, partition) = name.rsplit_once('-')?;
        let partition: i32 = partition.parse().ok()?;
        (partition >= 0 && validate_topic_name(topic).is_ok())
            .then(|| TopicPartition::new(topic, partition))
    }
}

impl fmt::Display for TopicPartition {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names_round_trip_with_dashes_in_topic() {
        let tp = TopicPartition::new("orders-eu-1", 12);
        assert_eq!(tp.dir_name(), "orders-eu-1-12");
        assert_eq!(TopicPartition::from_dir_name("orders-eu-1-12"), Some(tp));
        assert_eq!(TopicPartition::from_dir_name("orders"), None);
        assert_eq!(TopicPartition::from_dir_name("orders-x"), None);
        assert_eq!(
            TopicPartition::from_dir_name("orders--1"),
            Some(TopicPartition::new("orders-", 1))
        );
        assert_eq!(TopicPartition::from_dir_name("a b-1"), None);
    }
}
