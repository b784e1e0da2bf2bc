//! The directory name Kafka gives a partition replica (`<topic>-<partition>`).

pub use crate::protocol::topic_partition::TopicPartition;
use crate::protocol::topic_partition::validate_topic_name;

/// The partition directory name inside a log dir.
pub fn dir_name(tp: &TopicPartition) -> String {
    format!("{}-{}", tp.topic, tp.partition)
}

/// Parses a partition directory name; `None` for anything else found in a log dir.
pub fn from_dir_name(name: &str) -> Option<TopicPartition> {
    let (topic, partition) = name.rsplit_once('-')?;
    let partition: i32 = partition.parse().ok()?;
    (partition >= 0 && validate_topic_name(topic).is_ok())
        .then(|| TopicPartition::new(topic, partition))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names_round_trip_with_dashes_in_topic() {
        let tp = TopicPartition::new("orders-eu-1", 12);
        assert_eq!(dir_name(&tp), "orders-eu-1-12");
        assert_eq!(from_dir_name("orders-eu-1-12"), Some(tp));
        assert_eq!(from_dir_name("orders"), None);
        assert_eq!(from_dir_name("orders-x"), None);
        assert_eq!(
            from_dir_name("orders--1"),
            Some(TopicPartition::new("orders-", 1))
        );
        assert_eq!(from_dir_name("a b-1"), None);
    }
}
