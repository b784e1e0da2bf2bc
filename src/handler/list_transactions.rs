//! ListTransactions: the transactional ids this broker coordinates, filtered by state
//! (Kafka's names; unknown names come back in `unknown_state_filters`), producer id, how long
//! they have been running (v1) and an id pattern (v2, a regular expression). Only the ids the
//! principal may describe are listed (Kafka's rule: the others are left out, not refused).

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{ListTransactionsRequest, ListTransactionsResponse};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::protocol::errors::{self, KafkaError};
use crate::security::acl::Operation;
use crate::txn::state::TxnState;

pub const VERSIONS: (i16, i16) = (0, 2);

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let mut response = list(broker, &request);
    if response.transaction_states.is_empty() {
        // Nothing listed: nothing to ask (Kafka asks per listed id).
        context.access.open_to_all();
    }
    // Kafka filters what the coordinator listed.
    response.transaction_states.retain(|state| {
        context
            .access
            .allows_transactional_id(Operation::Describe, &state.transactional_id)
    });
    response
}

/// Every transaction the filters keep, before authorization.
fn list(broker: &Broker, request: &ListTransactionsRequest) -> ListTransactionsResponse {
    let mut response = ListTransactionsResponse::default();
    let mut states = Vec::new();
    for name in &request.state_filters {
        match TxnState::from_name(name) {
            Some(state) => states.push(state),
            None => response.unknown_state_filters.push(name.clone()),
        }
    }
    if !response.unknown_state_filters.is_empty() && states.is_empty() {
        // Only unknown states: nothing can match.
        return response;
    }
    let pattern = match request.transactional_id_pattern.as_deref() {
        None | Some("") => None,
        Some(pattern) => match regex::Regex::new(pattern) {
            Ok(regex) => Some(regex),
            Err(_) => {
                return response.with_error_code(KafkaError::InvalidRegularExpression.code());
            }
        },
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let (all, outcome) = broker.transactions.list();
    response.error_code = errors::code_of(&outcome);
    response.transaction_states = all
        .into_iter()
        .filter(|m| states.is_empty() || states.contains(&m.state))
        .filter(|m| {
            request.producer_id_filters.is_empty()
                || request
                    .producer_id_filters
                    .iter()
                    .any(|p| p.0 == m.producer_id)
        })
        .filter(|m| {
            request.duration_filter < 0
                || (m.start_timestamp_ms >= 0
                    && now_ms - m.start_timestamp_ms >= request.duration_filter)
        })
        .filter(|m| {
            pattern
                .as_ref()
                .is_none_or(|p| p.is_match(&m.transactional_id))
        })
        .map(|m| {
            TransactionState::default()
                .with_transactional_id(str_bytes(m.transactional_id).into())
                .with_producer_id(kafka_protocol::messages::ProducerId(m.producer_id))
                .with_transaction_state(str_bytes(m.state.name()))
        })
        .collect();
    response
}
