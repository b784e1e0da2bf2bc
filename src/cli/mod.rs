//! The command line's own code (binary only): administration through a broker's Kafka port or
//! the quorum (`cluster`, `topics`, `groups`, `configs`, `log-dirs`) and the benchmarks
//! (`perf*`).

pub mod acls;
pub mod cluster;
pub mod common;
pub mod configs;
pub mod connect;
pub mod consume;
pub mod fuzz;
pub mod groups;
pub mod habits;
pub mod log_dirs;
pub mod mirror;
pub mod perf;
pub mod perf_authorizer;
pub mod perf_client;
pub mod perf_kafka;
pub mod perf_quorum;
pub mod produce;
pub mod topics;
pub mod transactions;
pub mod users;
