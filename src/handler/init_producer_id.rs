//! InitProducerId for idempotent producers: a fresh producer id (epoch 0) from this broker's
//! block, which the controller hands out in blocks through the metadata log.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::errors::KafkaError;

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(
    broker: &Broker,
    _context: &RequestContext,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default();
    if request.transactional_id.is_some() {
        // Transactions need a transaction coordinator, which this broker does not run yet.
        return response.with_error_code(KafkaError::CoordinatorNotAvailable.code());
    }
    match broker.producer_ids.next(&broker.controller).await {
        Ok(producer_id) => response
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(0),
        Err(error) => response.with_error_code(error.code()),
    }
}
