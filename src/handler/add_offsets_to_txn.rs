//! AddOffsetsToTxn: a transactional producer about to commit a group's offsets in its
//! transaction (`send_offsets_to_transaction`) adds the group's `__consumer_offsets`
//! partition to it, so the commit marker reaches the offsets too. Kafka's checks, first: WRITE
//! on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group
//! (GROUP_AUTHORIZATION_FAILED).

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};

use super::RequestContext;
use crate::broker::Broker;
use crate::group::{OFFSETS_TOPIC, partition_for};
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, KafkaError};
use crate::security::acl::Operation;
use crate::txn::state::{ProducerIdAndEpoch, TxnApi, error_for_version};

pub const VERSIONS: (i16, i16) = (0, 4);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let api_version = context.api_version;
    if !context
        .access
        .allows_transactional_id(Operation::Write, &request.transactional_id)
    {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    if !context
        .access
        .allows_group(Operation::Read, &request.group_id)
    {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
    }
    let outcome = add(broker, &request).await;
    if let Err(error) = outcome {
        tracing::debug!(transactional_id = %request.transactional_id.as_str(), group_id = %request.group_id.as_str(), %error, "AddOffsetsToTxn refused");
    }
    let outcome = outcome.map_err(|e| error_for_version(e, TxnApi::AddOffsetsToTxn, api_version));
    AddOffsetsToTxnResponse::default().with_error_code(errors::code_of(&outcome))
}

async fn add(broker: &Broker, request: &AddOffsetsToTxnRequest) -> Result<(), KafkaError> {
    if request.transactional_id.is_empty() {
        return Err(KafkaError::InvalidRequest);
    }
    if request.group_id.is_empty() {
        return Err(KafkaError::InvalidGroupId);
    }
    let count = broker
        .groups
        .ensure_offsets_topic()
        .await
        .map_err(|refused| refused.error)?;
    let partition = TopicPartition::new(OFFSETS_TOPIC, partition_for(&request.group_id, count));
    broker
        .transactions
        .add_partitions(
            &request.transactional_id,
            ProducerIdAndEpoch {
                producer_id: request.producer_id.0,
                producer_epoch: request.producer_epoch,
            },
            &[partition],
        )
        .await
}
