//! Creates a topic, describes it and the cluster, changes a config, deletes the topic.
//!
//! `cargo run --example admin -- [BOOTSTRAP]` (default 127.0.0.1:9092).

use sluice::client::{Admin, AlterConfigOp, ClientConfig, NewTopic, RESOURCE_TOPIC};

#[tokio::main]
async fn main() -> Result<(), sluice::client::Error> {
    let bootstrap = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9092".to_owned());
    let admin = Admin::new(ClientConfig::new(&bootstrap))?;
    let cluster = admin.describe_cluster().await?;
    println!(
        "cluster {} with {} broker(s)",
        cluster.cluster_id,
        cluster.brokers.len()
    );

    let topic = "admin-example";
    admin
        .create_topics(
            &[NewTopic::new(topic, 3, 1).config("retention.ms", "3600000")],
            false,
        )
        .await?;
    admin
        .alter_configs(
            RESOURCE_TOPIC,
            topic,
            &[(
                "cleanup.policy".to_owned(),
                AlterConfigOp::Set("compact".to_owned()),
            )],
            false,
        )
        .await?;
    for description in admin.describe_topics(&[topic.to_owned()]).await? {
        println!("{}: configs {:?}", description.name, description.configs);
        for p in &description.partitions {
            println!(
                "  partition {} leader {} isr {:?}",
                p.partition, p.leader, p.isr
            );
        }
    }
    admin.delete_topics(&[topic.to_owned()]).await?;
    println!("deleted {topic}");
    Ok(())
}
