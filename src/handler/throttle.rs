//! Client quotas at the dispatch (`broker::client_quotas` measures and resolves them): what a
//! request costs its client, how long it must then wait, and the wait written into the
//! response's `throttle_time_ms` (KIP-219: the client waits by itself; the connection is
//! muted for as long after the response, `server`).
//!
//! Costs: Produce the request's bytes (`producer_byte_rate`, as Kafka counts
//! `request.sizeInBytes`), Fetch the record bytes returned (`consumer_byte_rate`, decided in
//! `fetch` because a throttled fetch returns nothing), and every request the time its
//! handler spent on a thread (`request_percentage`; polls only, so a long poll waiting in the
//! purgatory costs nothing while it waits). The answer's wait is the longest of them.
//! Requests between brokers are exempt, as in Kafka: follower fetches, WriteTxnMarkers and
//! KIP-890 verification (AddPartitionsToTxn v4+).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use super::{Answer, RequestContext};
use crate::broker::Broker;
use crate::broker::client_quotas::{QuotaClient, QuotaType};

/// A future and the time spent polling it: its time on a thread.
pub(super) struct OnThread<'a, F> {
    inner: Pin<&'a mut F>,
    busy: Duration,
}

impl<'a, F: Future> OnThread<'a, F> {
    pub(super) fn new(inner: Pin<&'a mut F>) -> Self {
        OnThread {
            inner,
            busy: Duration::ZERO,
        }
    }
}

impl<F: Future> Future for OnThread<'_, F> {
    type Output = (F::Output, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        self.busy += started.elapsed();
        polled.map(|output| (output, self.busy))
    }
}

/// What client quotas need of a request before it is handed to its handler.
#[derive(Debug, Clone, Copy)]
pub(super) struct QuotaCharge {
    /// Between brokers: no quota applies.
    exempt: bool,
    /// Produce with acks=0: no answer, and no request quota (Kafka's exemption).
    acks_zero: bool,
}

impl QuotaCharge {
    pub(super) fn of(request: &RequestKind, version: i16) -> QuotaCharge {
        let exempt = match request {
            RequestKind::Fetch(fetch) => {
                fetch.replica_id.0.max(fetch.replica_state.replica_id.0) >= 0
            }
            RequestKind::WriteTxnMarkers(_) => true,
            RequestKind::AddPartitionsToTxn(_) => version >= 4,
            _ => false,
        };
        QuotaCharge {
            exempt,
            acks_zero: matches!(request, RequestKind::Produce(p) if p.acks == 0),
        }
    }
}

/// Charges a request to its client's quotas and writes the wait into its answer; returns the
/// wait (zero when within its quotas).
pub(super) fn charge(
    broker: &Broker,
    context: &RequestContext,
    charge: QuotaCharge,
    on_thread: Duration,
    answer: &mut Option<Answer>,
) -> Duration {
    if charge.exempt {
        return Duration::ZERO;
    }
    let image = broker.image();
    let quotas = &image.client_quotas;
    if quotas.is_empty() {
        return Duration::ZERO;
    }
    let client = QuotaClient::new(&context.principal, context.client_id.as_deref());
    let manager = &broker.client_quotas;
    let mut waits: Vec<(QuotaType, Duration)> = Vec::with_capacity(2);
    match (context.api_key, answer.as_ref()) {
        (ApiKey::Produce, _) => waits.push((
            QuotaType::Produce,
            manager.record(
                quotas,
                QuotaType::Produce,
                client,
                context.request_bytes as f64,
            ),
        )),
        (ApiKey::Fetch, Some(Answer::Fetch(fetch))) => waits.push((
            QuotaType::Fetch,
            Duration::from_millis(fetch.throttle_time_ms.max(0) as u64),
        )),
        _ => {}
    }
    if !charge.acks_zero {
        // Kafka's unit: percent of one thread, per second.
        let percent_seconds = on_thread.as_secs_f64() * 100.0;
        waits.push((
            QuotaType::Request,
            manager.record(quotas, QuotaType::Request, client, percent_seconds),
        ));
    }
    let Some((quota, wait)) = waits.into_iter().max_by_key(|(_, wait)| *wait) else {
        return Duration::ZERO;
    };
    if wait.is_zero() {
        return Duration::ZERO;
    }
    manager.count_throttle(quota, wait);
    let millis = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    match answer {
        Some(Answer::Message(response)) => set_throttle_time(response, millis),
        Some(Answer::Fetch(fetch)) => fetch.throttle_time_ms = millis,
        Some(Answer::Close) | None => {}
    }
    tracing::debug!(principal = %context.principal, client_id = ?context.client_id, quota = quota.name(), wait_ms = millis, "client quota exceeded: throttled");
    wait
}

/// Generates the setter of `throttle_time_ms` over the responses that carry it, and the list
/// of them.
macro_rules! throttled_responses {
    ($( $kind:ident ),* $(,)?) => {
        /// Sets `throttle_time_ms` of a response that has it.
        fn set_throttle_time(response: &mut ResponseKind, millis: i32) {
            match response {
                $( ResponseKind::$kind(r) => r.throttle_time_ms = millis, )*
                _ => {}
            }
        }

        /// The APIs whose responses say how long to wait.
        #[cfg(test)]
        const WITH_THROTTLE_TIME: &[ApiKey] = &[ $( ApiKey::$kind, )* ApiKey::Fetch ];
    };
}

throttled_responses! {
    Produce, ListOffsets, Metadata, OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup,
    Heartbeat, LeaveGroup, SyncGroup, DescribeGroups, ListGroups, ApiVersions, CreateTopics,
    DeleteTopics, DeleteRecords, InitProducerId, OffsetForLeaderEpoch, AddPartitionsToTxn,
    AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeAcls, CreateAcls, DeleteAcls,
    DescribeConfigs, AlterConfigs, CreatePartitions, DeleteGroups, ElectLeaders,
    IncrementalAlterConfigs, AlterPartitionReassignments, ListPartitionReassignments,
    OffsetDelete, DescribeClientQuotas, AlterClientQuotas, DescribeUserScramCredentials,
    AlterUserScramCredentials, DescribeCluster, DescribeProducers, DescribeTransactions,
    ListTransactions, ConsumerGroupHeartbeat, ConsumerGroupDescribe, DescribeLogDirs,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every API served either says how long to wait or has no such field in Kafka's schema:
    /// an API added without its line here fails.
    #[test]
    fn every_served_response_with_a_throttle_field_carries_the_wait() {
        let without_field = [
            ApiKey::DescribeQuorum,
            ApiKey::WriteTxnMarkers,
            ApiKey::SaslHandshake,
            ApiKey::SaslAuthenticate,
        ];
        for (key, _, _) in super::super::SUPPORTED_APIS {
            assert!(
                WITH_THROTTLE_TIME.contains(key) || without_field.contains(key),
                "{key:?}: add it to throttled_responses! (or to the APIs without the field)"
            );
        }
        let mut response = ResponseKind::Produce(Default::default());
        set_throttle_time(&mut response, 250);
        let ResponseKind::Produce(produce) = response else {
            unreachable!()
        };
        assert_eq!(produce.throttle_time_ms, 250);
    }

    #[test]
    fn time_on_a_thread_counts_polls_not_waits() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let (_, busy) = runtime.block_on(async {
            let waiting = std::pin::pin!(async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                std::thread::sleep(Duration::from_millis(20));
            });
            OnThread::new(waiting).await
        });
        assert!(
            busy >= Duration::from_millis(20) && busy < Duration::from_millis(90),
            "{busy:?}"
        );
    }
}
