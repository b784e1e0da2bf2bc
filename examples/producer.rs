//! Sends keyed records and prints where each was stored.
//!
//! `cargo run --example producer -- [BOOTSTRAP] [TOPIC]` (defaults: 127.0.0.1:9092, demo).

use sluice::client::{ClientConfig, Producer, ProducerRecord};

#[tokio::main]
async fn main() -> Result<(), sluice::client::Error> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9092".to_owned());
    let topic = args.next().unwrap_or_else(|| "demo".to_owned());
    let producer = Producer::new(
        ClientConfig::new(&bootstrap)
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("compression.type", "lz4"),
    )?;
    let mut deliveries = Vec::new();
    for i in 0..10 {
        let record = ProducerRecord::new(&topic, format!("event {i}"))
            .key(format!("user-{}", i % 3))
            .header("source", "example");
        deliveries.push(producer.send(record).await?);
    }
    for delivery in deliveries {
        let stored = delivery.await?;
        println!(
            "{}-{} offset {}",
            stored.topic, stored.partition, stored.offset
        );
    }
    producer.close().await
}
