//! DescribeTransactions: the state of transactional ids this broker coordinates (the admin
//! client asks each id's coordinator); others answer NOT_COORDINATOR, unknown ones
//! TRANSACTIONAL_ID_NOT_FOUND.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName,
};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;

pub const VERSIONS: (i16, i16) = (0, 0);

pub fn handle(
    broker: &Broker,
    _context: &RequestContext,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let states = request
        .transactional_ids
        .into_iter()
        .map(|id| {
            let state = TransactionState::default()
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1)
                .with_transaction_state(str_bytes(""));
            match broker.transactions.describe(&id) {
                Err(error) => state
                    .with_transactional_id(id)
                    .with_error_code(error.code()),
                Ok(metadata) => {
                    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for tp in &metadata.partitions {
                        topics
                            .entry(tp.topic.clone())
                            .or_default()
                            .push(tp.partition);
                    }
                    state
                        .with_transactional_id(id)
                        .with_transaction_state(str_bytes(metadata.state.name()))
                        .with_transaction_timeout_ms(metadata.transaction_timeout_ms)
                        .with_transaction_start_time_ms(metadata.start_timestamp_ms)
                        .with_producer_id(ProducerId(metadata.producer_id))
                        .with_producer_epoch(metadata.producer_epoch)
                        .with_topics(
                            topics
                                .into_iter()
                                .map(|(topic, partitions)| {
                                    TopicData::default()
                                        .with_topic(TopicName(str_bytes(topic)))
                                        .with_partitions(partitions)
                                })
                                .collect(),
                        )
                }
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}
