//! # The Sluice client SDK
//!
//! A Kafka client in Rust that speaks only the Kafka protocol, so it works against Sluice and
//! against any Kafka cluster. It builds without the broker:
//!
//! ```toml
//! sluice = { version = "0.1", default-features = false, features = ["client"] }
//! ```
//!
//! - [`Producer`]: batched, compressed, idempotent sends with delivery futures; with
//!   `transactional.id`, Kafka's transactions (`init_transactions`, `begin_transaction`,
//!   `send_offsets_to_transaction`, `commit_transaction`, `abort_transaction`).
//! - [`Consumer`]: partitions assigned by hand or by a consumer group (classic protocol with
//!   the range, roundrobin and cooperative-sticky assignors, or KIP-848), commits, seeks.
//! - [`Admin`]: topics, partitions, configs, consumer groups and their offsets, the cluster,
//!   records, transactions (list, describe, describe producers, abort), ACLs, SCRAM users,
//!   client quotas, each broker's log dirs.
//! - [`ClientConfig`]: settings by Kafka's client config names (`bootstrap.servers`, ...).
//! - [`Connection`]: one pipelined connection to a broker, for requests the clients above do
//!   not wrap (any `kafka_protocol` request, at the highest version both sides speak).
//! - [`Error`]: every failure, naming Kafka's error code and what to do.
//!
//! The runnable examples are in `examples/`.
//!
//! # Layout
//!
//! The consumer, top to bottom; each file imports only files on the lines below its own
//! (`offsets` and `fetcher` share a layer and do not import each other):
//!
//! ```text
//! consumer/mod.rs        the Consumer facade: its public methods and the poll loop
//! group.rs               membership: join and sync, heartbeats, KIP-848 reconciliation, leave
//! consumer/offsets.rs    commits and committed offsets at the coordinator (the group reached
//!                        through `GroupMember`, which group.rs implements), ListOffsets,
//!                        finding positions
//! consumer/fetcher.rs    Fetch requests, one per leader, answers decoded into partition buffers
//! consumer/positions.rs  the subscription, each partition's position and buffered records
//! consumer/types.rs      the public types, the settings, the `Context` the files above share
//! ```
//!
//! Beneath every client: `cluster.rs` (metadata, a connection per broker) over
//! `connection.rs` (one pipelined socket); `config.rs`, `error.rs`, `assignor.rs` (group.rs)
//! and `partitioner.rs` are leaves. `producer.rs` and `admin.rs` stand beside the consumer;
//! `admin_groups.rs` borrows its ListOffsets from `consumer/offsets.rs`. `producer.rs` drives
//! `transaction.rs` (the transactional state machine and the coordinator requests, which
//! `admin_transactions.rs` uses to find a transactional id's coordinator).

#![warn(missing_docs)]

mod admin;
mod admin_acls;
mod admin_groups;
mod admin_log_dirs;
mod admin_quotas;
mod admin_transactions;
mod admin_users;
mod assignor;
mod cluster;
mod config;
mod connection;
mod consumer;
mod error;
#[cfg(test)]
mod fake_broker;
mod group;
mod partitioner;
mod producer;
mod transaction;

pub use admin::{
    Admin, AlterConfigOp, ClusterDescription, ConfigEntry, ElectionResult, ElectionType, NewTopic,
    RESOURCE_BROKER, RESOURCE_TOPIC, TopicDescription,
};
pub use admin_groups::{GroupDescription, GroupListing, GroupMember, OffsetSpec};
pub use admin_log_dirs::{BrokerLogDirs, LogDirDescription, ReplicaInfo};
pub use admin_quotas::{
    ClientQuotaAlteration, ClientQuotaDescription, ClientQuotaEntity, ClientQuotaFilter,
    ClientQuotaFilterComponent, QUOTA_ENTITY_CLIENT_ID, QUOTA_ENTITY_IP, QUOTA_ENTITY_USER,
    QuotaFilterMatch,
};
pub use admin_transactions::{
    AbortTransactionSpec, ListTransactionsFilters, ProducerState, TransactionDescription,
    TransactionListing,
};
pub use admin_users::{
    DEFAULT_SCRAM_ITERATIONS, SCRAM_SALT_BYTES, ScramCredentialInfo, UserScramCredentialAlteration,
    UserScramCredentialsDescription,
};
pub use assignor::Assignor;
pub use cluster::{BrokerInfo, ClusterMetadata, PartitionMetadata, TopicMetadata};
#[cfg(feature = "broker")]
pub(crate) use config::CommonConfig;
pub use config::{ClientConfig, parse_pairs, parse_servers};
pub use connection::{Connection, PendingResponse};
pub use consumer::{
    Consumer, ConsumerGroupMetadata, ConsumerRecord, GroupProtocol, IsolationLevel, OffsetReset,
    RebalanceListener, TimestampType, TopicPartition,
};
pub use error::{Error, Result, TransactionErrorKind, io_reason, is_retriable_code};
pub use partitioner::{murmur2, partition_for_key};
pub use producer::{DeliveryFuture, Producer, ProducerRecord, RecordMetadata};
pub use transaction::TransactionState;
