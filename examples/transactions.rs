//! Consume-transform-produce exactly once: reads a topic as a member of a consumer group,
//! writes each record upper-cased to another topic, and commits the output and the input's
//! offsets in one transaction. A crash between two commits repeats nothing a `read_committed`
//! reader sees: the open transaction is aborted when the next instance (same
//! `transactional.id`) starts, and it resumes from the offsets committed with the last
//! output.
//!
//! `cargo run --example transactions -- [BOOTSTRAP] [INPUT] [OUTPUT] [GROUP]` (defaults:
//! 127.0.0.1:9092, demo, demo-upper, demo-eos). Stops after 10 s without records.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice::client::{ClientConfig, Consumer, Error, Producer, ProducerRecord, TopicPartition};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9092".to_owned());
    let input = args.next().unwrap_or_else(|| "demo".to_owned());
    let output = args.next().unwrap_or_else(|| "demo-upper".to_owned());
    let group = args.next().unwrap_or_else(|| "demo-eos".to_owned());
    let consumer = Consumer::new(
        ClientConfig::new(&bootstrap)
            .set("group.id", group.as_str())
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            // Input written by transactions: only what committed.
            .set("isolation.level", "read_committed"),
    )?;
    consumer.subscribe(&[&input])?;
    let producer = Producer::new(
        ClientConfig::new(&bootstrap).set("transactional.id", format!("{group}-upper")),
    )?;
    // Fences an older instance with the same transactional.id and aborts what it left open.
    producer.init_transactions().await?;

    let mut last_record = Instant::now();
    while last_record.elapsed() < Duration::from_secs(10) {
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if records.is_empty() {
            continue;
        }
        last_record = Instant::now();
        producer.begin_transaction()?;
        let mut offsets = BTreeMap::new();
        for record in &records {
            let value = record
                .value
                .as_deref()
                .unwrap_or_default()
                .to_ascii_uppercase();
            producer.send(ProducerRecord::new(&output, value)).await?;
            offsets.insert(
                TopicPartition::new(record.topic.to_string(), record.partition),
                record.offset + 1,
            );
        }
        let Some(group_metadata) = consumer.group_metadata() else {
            return Err(Error::Config {
                key: "group.id".into(),
                reason: "is required".into(),
            });
        };
        let committed = async {
            producer
                .send_offsets_to_transaction(&offsets, &group_metadata)
                .await?;
            producer.commit_transaction().await
        }
        .await;
        match committed {
            Ok(()) => println!("committed {} records", records.len()),
            Err(error) if error.is_abortable() => {
                // A rebalance took partitions away, a record was refused...: nothing of this
                // transaction is kept; go back to the last committed offsets.
                eprintln!("aborting: {error}");
                producer.abort_transaction().await?;
                let positions: Vec<TopicPartition> = offsets.into_keys().collect();
                let committed = consumer.committed(&positions).await?;
                for tp in positions {
                    match committed.get(&tp) {
                        Some(&offset) => consumer.seek(&tp, offset).await?,
                        None => consumer.seek_to_beginning(&[tp]).await?,
                    }
                }
            }
            // Fatal (fenced by a newer instance...): this producer cannot go on.
            Err(error) => return Err(error),
        }
    }
    producer.close().await?;
    consumer.close().await
}
