//! # Sluice
//!
//! A Kafka-compatible distributed commit log in one binary.
//!
//! ## Layout
//! - `config`: `server.properties` (Kafka's keys): parse, validate, defaults, overrides.
//! - `controller`: the active controller's decisions (placement, elections, fencing,
//!   AlterPartition) as pure functions from an image to records or a Kafka error.
//! - `meta_properties`: which cluster and node a data directory belongs to.
//! - `node`: a running node (`sluice server`): data dirs, log manager, quorum member, HTTP.
//! - `log`: the storage engine: segmented partition logs in Kafka's on-disk format, with crash
//!   recovery, retention and compaction. Knows batches and offsets, not sockets.
//!
//! Still to come (see the project's issues): the metadata quorum (`raft/`, `controller`,
//! `metadata`), the Kafka protocol server (`server`, `protocol`, `handler`), replication
//! (`replica`), groups, and the client SDK.

#[cfg(feature = "broker")]
pub mod broker;
#[cfg(any(feature = "broker", feature = "client"))]
pub mod client;
#[cfg(feature = "broker")]
pub mod config;
#[cfg(feature = "broker")]
pub mod controller;
#[cfg(feature = "broker")]
pub mod file_slice;
#[cfg(feature = "broker")]
pub mod handler;
#[cfg(feature = "broker")]
pub mod lazy_alloc;
#[cfg(feature = "broker")]
pub mod log;
#[cfg(feature = "broker")]
pub mod meta_properties;
#[cfg(feature = "broker")]
pub mod metrics;
#[cfg(feature = "broker")]
pub mod node;
#[cfg(feature = "broker")]
pub mod protocol;
#[cfg(feature = "broker")]
pub mod replica;
#[cfg(feature = "broker")]
pub mod server;
#[cfg(feature = "broker")]
pub mod txn;
