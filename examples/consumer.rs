//! Reads a topic as a member of a consumer group, printing each record and committing after
//! each batch. Start two to watch the group share the partitions (and a rebalance when one
//! stops).
//!
//! `cargo run --example consumer -- [BOOTSTRAP] [TOPIC] [GROUP]` (defaults: 127.0.0.1:9092,
//! demo, demo-group). Stops after 10 s without records.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::client::{ClientConfig, Consumer, RebalanceListener, TopicPartition};

struct Announce;

impl RebalanceListener for Announce {
    fn on_partitions_assigned(&self, partitions: &[TopicPartition]) {
        println!("assigned: {partitions:?}");
    }
    fn on_partitions_revoked(&self, partitions: &[TopicPartition]) {
        println!("revoked: {partitions:?}");
    }
}

#[tokio::main]
async fn main() -> Result<(), sluice::client::Error> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9092".to_owned());
    let topic = args.next().unwrap_or_else(|| "demo".to_owned());
    let group = args.next().unwrap_or_else(|| "demo-group".to_owned());
    let consumer = Consumer::new(
        ClientConfig::new(&bootstrap)
            .set("group.id", group)
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .set("partition.assignment.strategy", "cooperative-sticky"),
    )?;
    consumer.set_rebalance_listener(Arc::new(Announce));
    consumer.subscribe(&[&topic])?;
    let mut last_record = Instant::now();
    while last_record.elapsed() < Duration::from_secs(10) {
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if records.is_empty() {
            continue;
        }
        last_record = Instant::now();
        for record in &records {
            println!(
                "{}-{} offset {}: {}",
                record.topic,
                record.partition,
                record.offset,
                String::from_utf8_lossy(record.value.as_deref().unwrap_or_default())
            );
        }
        consumer.commit_sync().await?;
    }
    consumer.close().await
}
