//! The Kafka wire protocol. Shared by the broker and the client SDK: v2 record batches
//! (`batch`), their compression codecs (`codec`), Kafka's error codes (`errors`), and
//! `TopicPartition`, `TopicIdPartition` and the topic name rule (`topic_partition`). The
//! broker's side adds request headers and response framing; message bodies are encoded and
//! decoded by the `kafka-protocol` crate (generated from Kafka's own JSON schemas); which APIs
//! and versions we serve is the handler registry (`handler::SUPPORTED_APIS`), from which
//! ApiVersions answers.

pub mod batch;
pub mod codec;
pub mod errors;
pub mod topic_partition;
pub use topic_partition::{TopicIdPartition, TopicPartition};
#[cfg(feature = "broker")]
pub mod fetch_encode;
#[cfg(feature = "broker")]
mod frame;
#[cfg(feature = "broker")]
pub use frame::*;
