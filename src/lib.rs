//! # Sluice
//!
//! A Kafka-compatible distributed commit log in one binary.
//!
//! ## Layout (data flows socket -> server -> handler -> replica -> log)
//! - `server`: the Kafka listener: framing, connection limits, request order, responses (Fetch
//!   records by sendfile).
//! - `protocol`: record batches and codecs, Kafka's error codes (`protocol::errors`), shared
//!   with the client SDK; the broker's request headers and response framing.
//! - `handler`: one file per Kafka API, registered in one list; translates requests into calls on
//!   the broker context, the replica layer and the controller.
//! - `broker`: the broker's shared context (image, controller calls, replicas, producer ids,
//!   fetch sessions, metrics), for handlers and coordinators alike.
//! - `replica`: partition replicas (leader and follower paths, ISR, fetchers) and the purgatory
//!   where requests wait for partitions to move; leadership change events.
//! - `log`: the storage engine: segmented partition logs in Kafka's on-disk format, with crash
//!   recovery, retention and compaction. Knows batches and offsets, not sockets.
//! - `file_slice`: byte ranges of segment files, passed from the log to the socket.
//! - `controller`: the active controller's decisions (placement, elections, fencing,
//!   AlterPartition, configs) as pure functions from an image to records or a Kafka error, and
//!   the service that proposes them.
//! - `txn`: producer ids and idempotent producer state (transactions to come).
//! - `config`: `server.properties` (Kafka's keys): parse, validate, defaults, overrides.
//! - `node`: a running node (`sluice server`): wiring, broker lifecycle, HTTP.
//! - `connect`: `sluice connect`, a Kafka Connect worker (REST API, file connectors) on the SDK.
//! - `mirror`: `sluice mirror`, MirrorMaker 2's model (topics, offset syncs, checkpoints) on the SDK.
//! - `console`: the web console on the HTTP listener, and the reports it shares with the
//!   CLI's `--output json`.
//! - `http`: a small HTTP/1.1 server (the node's listener, `sluice connect`'s REST API).
//! - `metrics`: the one Prometheus writer and registry, process metrics, request metrics.
//! - `thread_affinity`: CPU affinity of threads (network threads pinned, `thread.affinity`).
//! - `meta_properties`: which cluster and node a data directory belongs to.
//! - `client`: a minimal Kafka client (replica fetchers, CLI, benchmarks).
//! - `security`: SASL mechanisms and ACLs (no I/O), for the broker and the SDK.
//!
//! The metadata quorum (openraft over RocksDB) is the `sluice-raft` crate (`raft/`).

#[cfg(feature = "broker")]
pub mod broker;
#[cfg(any(feature = "broker", feature = "client"))]
pub mod client;
#[cfg(feature = "broker")]
pub mod config;
#[cfg(feature = "broker")]
pub mod connect;
#[cfg(feature = "broker")]
pub mod console;
#[cfg(feature = "broker")]
pub mod controller;
#[cfg(feature = "broker")]
pub mod coordinator;
#[cfg(feature = "broker")]
pub mod file_slice;
#[cfg(feature = "broker")]
pub mod group;
#[cfg(feature = "broker")]
pub mod handler;
#[cfg(feature = "broker")]
pub mod http;
#[cfg(feature = "broker")]
pub mod inter_broker;
#[cfg(feature = "broker")]
pub mod lazy_alloc;
#[cfg(feature = "broker")]
pub mod log;
#[cfg(feature = "broker")]
pub mod meta_properties;
#[cfg(feature = "broker")]
pub mod metrics;
#[cfg(feature = "broker")]
pub mod mirror;
#[cfg(feature = "broker")]
pub mod node;
#[cfg(any(feature = "broker", feature = "client"))]
pub mod protocol;
#[cfg(feature = "broker")]
pub mod replica;
pub mod rng;
#[cfg(any(feature = "broker", feature = "client"))]
pub mod security;
#[cfg(feature = "broker")]
pub mod server;
#[cfg(feature = "broker")]
pub mod thread_affinity;
#[cfg(feature = "broker")]
pub mod txn;
