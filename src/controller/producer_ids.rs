//! Producer id blocks handed to brokers, committed so no id is given out twice.

use super::*;

/// Producer ids handed to a broker at a time.
pub const PRODUCER_ID_BLOCK_SIZE: i32 = 1000;

/// AllocateProducerIds: the next block of producer ids for a registered broker, as the record
/// that hands it out and the block's first id.
pub fn allocate_producer_ids(
    image: &MetadataImage,
    broker_id: BrokerId,
    broker_epoch: i64,
) -> Result<(Vec<MetadataRecord>, i64), ControllerError> {
    match image.brokers.get(&broker_id) {
        Some(b) if b.registration.broker_epoch == broker_epoch => {}
        _ => return Err(ControllerError::StaleBrokerEpoch(broker_id)),
    }
    let first = image.next_producer_id;
    let record = MetadataRecord::ProducerIds {
        broker_id,
        broker_epoch,
        next_producer_id: first + i64::from(PRODUCER_ID_BLOCK_SIZE),
    };
    Ok((vec![record], first))
}
