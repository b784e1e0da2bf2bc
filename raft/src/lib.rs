//! # sluice-raft: the metadata quorum
//!
//! Cluster metadata is the log of a Raft group run with openraft. This crate knows nothing of
//! the Kafka protocol.
//!
//! ## Layout
//! - `records`: the metadata records (versioned) that form the log's entries.
//! - `image`: `MetadataImage` (immutable, shared as `Arc`) and `MetadataDelta` (replay, apply).
//! - `types`: the openraft type configuration.
//! - `store`: the RocksDB log store and state machine (durable vote, synced appends,
//!   snapshots that are the encoded image, `last_purged_log_id` persisted).
//! - `network`: openraft's RPCs over tonic gRPC (`proto/raft.proto`), bounded and versioned.
//! - `calls`: opaque calls to the active controller (the node supplies the handler).
//! - `quorum`: a running member: store + openraft + gRPC listener, idempotent bootstrap,
//!   proposals, committed images.

pub mod calls;
pub mod image;
pub mod network;
pub mod quorum;
pub mod records;
pub mod store;
pub mod transport;
pub mod types;

/// The Raft library, for callers that need its membership and metrics types.
pub use openraft;

pub use image::{MetadataDelta, MetadataImage};
pub use quorum::{ProposeError, Quorum, QuorumConfig, QuorumError};
pub use records::{MetadataRecord, MetadataRequest, MetadataResponse};
pub use types::{NodeId, NodeInfo, TypeConfig};
