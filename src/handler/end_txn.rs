//! EndTxn: a transactional producer commits or aborts. Answered once the coordinator has
//! stored PrepareCommit / PrepareAbort (the outcome is then decided); the markers follow.
//! From v5 (transaction version 2) the answer carries the producer's bumped epoch. Kafka's
//! check, first: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;
use crate::txn::state::{ProducerIdAndEpoch, TxnApi, TxnResult, error_for_version};

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: EndTxnRequest,
) -> EndTxnResponse {
    let api_version = context.api_version;
    let response = EndTxnResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if !context
        .access
        .allows_transactional_id(Operation::Write, &request.transactional_id)
    {
        return response.with_error_code(KafkaError::TransactionalIdAuthorizationFailed.code());
    }
    let result = if request.committed {
        TxnResult::Commit
    } else {
        TxnResult::Abort
    };
    // EndTxn v5+ is sent by clients of transaction version 2 (KIP-890 part 2).
    let transaction_version = if api_version >= 5 { 2 } else { 0 };
    let outcome = if request.transactional_id.is_empty() {
        Err(KafkaError::InvalidRequest)
    } else {
        broker
            .transactions
            .end_txn(
                &request.transactional_id,
                ProducerIdAndEpoch {
                    producer_id: request.producer_id.0,
                    producer_epoch: request.producer_epoch,
                },
                result,
                transaction_version,
            )
            .await
    };
    match outcome {
        Ok(producer) => response
            .with_producer_id(ProducerId(producer.producer_id))
            .with_producer_epoch(producer.producer_epoch),
        Err(error) => {
            tracing::debug!(transactional_id = %request.transactional_id.as_str(), %error, ?result, "EndTxn refused");
            response.with_error_code(error_for_version(error, TxnApi::EndTxn, api_version).code())
        }
    }
}
