//! Producer ids, idempotence and transactions.
//!
//! - `producer_state`: per partition, each producer's epoch, last batches and open
//!   transaction.
//! - [`ProducerIdManager`]: hands out producer ids from a block this broker got from the
//!   controller (committed as a `ProducerIds` record, so no id is ever given out twice, even
//!   across controller failover).
//! - The transaction coordinator: `records` (`__transaction_state` in Kafka's format),
//!   `state` (the state machine of one transactional id, pure), `shard` (a partition's ids on
//!   the coordinator runtime), `markers` (the marker sender), `coordinator` (entry points).

pub mod coordinator;
pub mod markers;
pub mod producer_state;
pub mod records;
pub mod shard;
pub mod state;

/// The transaction coordinator's settings (Kafka's keys of the same names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions`
    pub state_log_num_partitions: i32,
    /// `transaction.state.log.replication.factor`
    pub state_log_replication_factor: i16,
    /// `transaction.state.log.min.isr`
    pub state_log_min_isr: i16,
    /// `transaction.state.log.segment.bytes`
    pub state_log_segment_bytes: i64,
    /// `transaction.max.timeout.ms`
    pub max_timeout_ms: u64,
    /// `transactional.id.expiration.ms`
    pub id_expiration_ms: u64,
    /// `transaction.partition.verification.enable` (KIP-890)
    pub partition_verification: bool,
}

impl Default for TxnConfig {
    /// Kafka's defaults, but for one replica (tests and a single node).
    fn default() -> Self {
        TxnConfig {
            state_log_num_partitions: 50,
            state_log_replication_factor: 1,
            state_log_min_isr: 1,
            state_log_segment_bytes: 104_857_600,
            max_timeout_ms: 900_000,
            id_expiration_ms: 604_800_000,
            partition_verification: true,
        }
    }
}

use std::time::Duration;

use crate::controller::client::ControllerClient;
use crate::controller::service::{ControllerRequest, ControllerResponse};
use crate::protocol::errors::KafkaError;

#[derive(Debug, Default)]
struct Block {
    next: i64,
    end: i64,
}

#[derive(Debug, Default)]
pub struct ProducerIdManager {
    block: tokio::sync::Mutex<Block>,
}

impl ProducerIdManager {
    /// The next unused producer id; asks the controller for a new block when this one is used
    /// up.
    pub async fn next(&self, controller: &ControllerClient) -> Result<i64, KafkaError> {
        let mut block = self.block.lock().await;
        if block.next >= block.end {
            let request = ControllerRequest::AllocateProducerIds {
                broker_id: controller.broker_id(),
                broker_epoch: controller.broker_epoch(),
            };
            match controller.call(request, Duration::from_secs(10)).await {
                Ok(ControllerResponse::ProducerIds { first, count }) => {
                    *block = Block {
                        next: first,
                        end: first + i64::from(count),
                    };
                    tracing::info!(first, count, "new producer id block");
                }
                Ok(other) => {
                    tracing::warn!(?other, "unexpected answer to AllocateProducerIds");
                    return Err(KafkaError::CoordinatorNotAvailable);
                }
                Err(refused) => {
                    tracing::warn!(error = %refused.error, message = %refused.message, "AllocateProducerIds failed");
                    return Err(KafkaError::CoordinatorNotAvailable);
                }
            }
        }
        let id = block.next;
        block.next += 1;
        Ok(id)
    }
}
