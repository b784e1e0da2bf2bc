//! DescribeTransactions: the state of transactional ids this broker coordinates (the admin
//! client asks each id's coordinator); others answer NOT_COORDINATOR, unknown ones
//! TRANSACTIONAL_ID_NOT_FOUND. Kafka's checks: DESCRIBE on each transactional id
//! (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and a described transaction shows only the
//! partitions of topics the principal may describe (the others are left out).

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName,
};

use super::offset_commit::refused_topics;
use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 0);

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    if request.transactional_ids.is_empty() {
        // No id: nothing to ask (Kafka asks per id).
        context.access.open_to_all();
    }
    let states = request
        .transactional_ids
        .into_iter()
        .map(|id| {
            let state = TransactionState::default()
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1)
                .with_transaction_state(str_bytes(""));
            if !context
                .access
                .allows_transactional_id(Operation::Describe, &id)
            {
                return state
                    .with_transactional_id(id)
                    .with_error_code(KafkaError::TransactionalIdAuthorizationFailed.code());
            }
            match broker.transactions.describe(&id) {
                Err(error) => state
                    .with_transactional_id(id)
                    .with_error_code(error.code()),
                Ok(metadata) => {
                    let refused = refused_topics(
                        metadata.partitions.iter().map(|tp| tp.topic.as_str()),
                        |topic| context.access.allows_topic(Operation::Describe, topic),
                    );
                    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for tp in metadata
                        .partitions
                        .iter()
                        .filter(|tp| !refused.contains(&tp.topic))
                    {
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
