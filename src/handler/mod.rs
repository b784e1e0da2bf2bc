//! One file per Kafka API: each declares the versions it serves and translates a request into
//! calls on the replica manager, the metadata image or the controller. No storage logic here.
//!
//! One list (`apis!` below) names every API served, its versions and its handler: the registry
//! ApiVersions answers from (`SUPPORTED_APIS`) and the dispatch are both generated from it, so
//! an API cannot be advertised without a handler. A request for an API or version not in it is
//! refused by the server before it is decoded.
//!
//! Adding an API: a file here with `VERSIONS` and `handle`, and one line in `apis!`.

mod acls;
mod add_offsets_to_txn;
mod add_partitions_to_txn;
mod alter_configs;
mod api_versions;
mod client_quotas;
mod consumer_group_describe;
mod consumer_group_heartbeat;
mod create_partitions;
mod create_topics;
mod delete_groups;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_log_dirs;
mod describe_producers;
mod describe_quorum;
mod describe_transactions;
mod elect_leaders;
mod end_txn;
mod fetch;
mod find_coordinator;
mod heartbeat;
mod incremental_alter_configs;
mod init_producer_id;
mod join_group;
mod leave_group;
mod list_groups;
mod list_offsets;
mod list_transactions;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod offset_for_leader_epoch;
mod partition_reassignments;
mod produce;
mod sasl;
mod sync_group;
mod throttle;
mod txn_offset_commit;
mod txn_partitions;
mod user_scram_credentials;
mod write_txn_markers;

pub use describe_configs::topic_config_entries;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::broker::readiness::READY_WAIT;
use crate::protocol::errors::KafkaError;
use crate::protocol::fetch_encode::FetchAnswer;

/// How long a data request waits for the replicas to catch up with the metadata image.
const REPLICAS_APPLY_WAIT: Duration = Duration::from_secs(2);

/// Generates the registry and the dispatch from one list. Each line: the API, its versions
/// (inclusive), `data` when it is served from the replicas (it waits, bounded, for them to apply
/// the image this node has: after a restart, until caught up to its registration) or `meta`
/// otherwise, and how the decoded request `r` is answered with `broker` `b` and context `c`.
macro_rules! apis {
    ($( $key:ident $versions:expr, $kind:ident => |$b:ident, $c:ident, $r:ident| $answer:expr; )*) => {
        /// Every API served, with the versions (inclusive).
        pub const SUPPORTED_APIS: &[(ApiKey, i16, i16)] = &[
            $( (ApiKey::$key, $versions.0, $versions.1), )*
        ];

        /// Whether requests of `api_key` are served from the replicas.
        fn served_from_replicas(api_key: ApiKey) -> bool {
            match api_key {
                $( ApiKey::$key => stringify!($kind) == "data", )*
                _ => false,
            }
        }

        /// The answer to a decoded request of a registered API; `None` when no response is
        /// due (Produce with acks=0).
        async fn serve(
            broker: &Arc<Broker>,
            context: &RequestContext,
            request: RequestKind,
        ) -> Option<Answer> {
            match request {
                $( RequestKind::$key(r) => {
                    let ($b, $c, $r) = (broker, context, r);
                    $answer
                } )*
                // The server refuses APIs outside the registry before decoding them, and the
                // registry is this list: only a decoder bug lands here.
                other => {
                    tracing::warn!(api = ?context.api_key, "request decoded as an unregistered API");
                    drop(other);
                    Some(Answer::Close)
                }
            }
        }
    };
}

/// An answer that is a plain message.
fn message(response: ResponseKind) -> Option<Answer> {
    Some(Answer::Message(Box::new(response)))
}

apis! {
    Produce produce::VERSIONS, data => |b, c, r| produce::handle(b, c, r).await.map(|answer| {
        match answer {
            Ok(response) => Answer::Message(Box::new(ResponseKind::Produce(response))),
            Err(()) => Answer::Close,
        }
    });
    Fetch fetch::VERSIONS, data => |b, c, r| Some(Answer::Fetch(fetch::handle(b, c, r).await));
    ListOffsets list_offsets::VERSIONS, data =>
        |b, c, r| message(ResponseKind::ListOffsets(list_offsets::handle(b, c, r)));
    Metadata metadata::VERSIONS, data =>
        |b, c, r| message(ResponseKind::Metadata(metadata::handle(b, c, r).await));
    ApiVersions api_versions::VERSIONS, meta =>
        |_b, c, r| message(ResponseKind::ApiVersions(api_versions::handle(&r, c.api_version)));
    CreateTopics create_topics::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::CreateTopics(create_topics::handle(b, c, r).await));
    DeleteTopics delete_topics::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::DeleteTopics(delete_topics::handle(b, c, r).await));
    DeleteRecords delete_records::VERSIONS, data =>
        |b, c, r| message(ResponseKind::DeleteRecords(delete_records::handle(b, c, r)));
    InitProducerId init_producer_id::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::InitProducerId(init_producer_id::handle(b, c, r).await));
    OffsetForLeaderEpoch offset_for_leader_epoch::VERSIONS, data => |b, c, r| message(
        ResponseKind::OffsetForLeaderEpoch(offset_for_leader_epoch::handle(b, c, r)),
    );
    DescribeConfigs describe_configs::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::DescribeConfigs(describe_configs::handle(b, c, r)));
    CreatePartitions create_partitions::VERSIONS, meta => |b, c, r| message(
        ResponseKind::CreatePartitions(create_partitions::handle(b, c, r).await),
    );
    AlterConfigs alter_configs::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::AlterConfigs(alter_configs::handle(b, c, r).await));
    IncrementalAlterConfigs incremental_alter_configs::VERSIONS, meta => |b, c, r| message(
        ResponseKind::IncrementalAlterConfigs(incremental_alter_configs::handle(b, c, r).await),
    );
    DescribeCluster describe_cluster::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::DescribeCluster(describe_cluster::handle(b, c, r)));
    DescribeQuorum describe_quorum::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::DescribeQuorum(describe_quorum::handle(b, c, r).await));
    ElectLeaders elect_leaders::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::ElectLeaders(elect_leaders::handle(b, c, r).await));
    AlterPartitionReassignments partition_reassignments::ALTER_VERSIONS, meta => |b, c, r| message(
        ResponseKind::AlterPartitionReassignments(partition_reassignments::alter(b, c, r).await),
    );
    ListPartitionReassignments partition_reassignments::LIST_VERSIONS, meta => |b, c, r| message(
        ResponseKind::ListPartitionReassignments(partition_reassignments::list(b, c, r)),
    );
    FindCoordinator find_coordinator::VERSIONS, meta => |b, c, r| message(
        ResponseKind::FindCoordinator(find_coordinator::handle(b, c, r).await),
    );
    JoinGroup join_group::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::JoinGroup(join_group::handle(b, c, r).await));
    SyncGroup sync_group::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::SyncGroup(sync_group::handle(b, c, r).await));
    Heartbeat heartbeat::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::Heartbeat(heartbeat::handle(b, c, r)));
    LeaveGroup leave_group::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::LeaveGroup(leave_group::handle(b, c, r)));
    OffsetCommit offset_commit::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::OffsetCommit(offset_commit::handle(b, c, r).await));
    OffsetFetch offset_fetch::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::OffsetFetch(offset_fetch::handle(b, c, r).await));
    ListGroups list_groups::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::ListGroups(list_groups::handle(b, c, r)));
    DescribeGroups describe_groups::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::DescribeGroups(describe_groups::handle(b, c, r)));
    DeleteGroups delete_groups::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::DeleteGroups(delete_groups::handle(b, c, r).await));
    ConsumerGroupHeartbeat consumer_group_heartbeat::VERSIONS, meta => |b, c, r| message(
        ResponseKind::ConsumerGroupHeartbeat(consumer_group_heartbeat::handle(b, c, r).await),
    );
    ConsumerGroupDescribe consumer_group_describe::VERSIONS, meta => |b, c, r| message(
        ResponseKind::ConsumerGroupDescribe(consumer_group_describe::handle(b, c, r)),
    );
    OffsetDelete offset_delete::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::OffsetDelete(offset_delete::handle(b, c, r).await));
    AddPartitionsToTxn add_partitions_to_txn::VERSIONS, meta => |b, c, r| message(
        ResponseKind::AddPartitionsToTxn(add_partitions_to_txn::handle(b, c, r).await));
    AddOffsetsToTxn add_offsets_to_txn::VERSIONS, meta => |b, c, r| message(
        ResponseKind::AddOffsetsToTxn(add_offsets_to_txn::handle(b, c, r).await));
    EndTxn end_txn::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::EndTxn(end_txn::handle(b, c, r).await));
    DescribeTransactions describe_transactions::VERSIONS, meta => |b, c, r| message(
        ResponseKind::DescribeTransactions(describe_transactions::handle(b, c, r)));
    ListTransactions list_transactions::VERSIONS, meta =>
        |b, c, r| message(ResponseKind::ListTransactions(list_transactions::handle(b, c, r)));
    DescribeLogDirs describe_log_dirs::VERSIONS, meta => |b, c, r| message(
        ResponseKind::DescribeLogDirs(describe_log_dirs::handle(b, c, r)));
    DescribeProducers describe_producers::VERSIONS, data =>
        |b, c, r| message(ResponseKind::DescribeProducers(describe_producers::handle(b, c, r)));
    TxnOffsetCommit txn_offset_commit::VERSIONS, meta => |b, c, r| message(
        ResponseKind::TxnOffsetCommit(txn_offset_commit::handle(b, c, r).await));
    WriteTxnMarkers write_txn_markers::VERSIONS, data => |b, c, r| message(
        ResponseKind::WriteTxnMarkers(write_txn_markers::handle(b, c, r).await));
    SaslHandshake sasl::HANDSHAKE_VERSIONS, meta =>
        |_b, _c, r| message(ResponseKind::SaslHandshake(sasl::handshake(r)));
    SaslAuthenticate sasl::AUTHENTICATE_VERSIONS, meta =>
        |_b, _c, r| message(ResponseKind::SaslAuthenticate(sasl::authenticate(r)));
    DescribeUserScramCredentials user_scram_credentials::DESCRIBE_VERSIONS, meta => |b, c, r| message(
        ResponseKind::DescribeUserScramCredentials(user_scram_credentials::describe(b, c, r)));
    AlterUserScramCredentials user_scram_credentials::ALTER_VERSIONS, meta => |b, c, r| message(
        ResponseKind::AlterUserScramCredentials(user_scram_credentials::alter(b, c, r).await));
    CreateAcls acls::CREATE_VERSIONS, meta =>
        |b, c, r| message(ResponseKind::CreateAcls(acls::create(b, c, r).await));
    DescribeAcls acls::DESCRIBE_VERSIONS, meta =>
        |b, c, r| message(ResponseKind::DescribeAcls(acls::describe(b, c, r)));
    DeleteAcls acls::DELETE_VERSIONS, meta =>
        |b, c, r| message(ResponseKind::DeleteAcls(acls::delete(b, c, r).await));
    DescribeClientQuotas client_quotas::DESCRIBE_VERSIONS, meta => |b, c, r| message(
        ResponseKind::DescribeClientQuotas(client_quotas::describe(b, c, r)));
    AlterClientQuotas client_quotas::ALTER_VERSIONS, meta => |b, c, r| message(
        ResponseKind::AlterClientQuotas(client_quotas::alter(b, c, r).await));
}

pub fn supported_versions(api_key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED_APIS
        .iter()
        .find(|(key, _, _)| *key == api_key)
        .map(|(_, min, max)| (*min, *max))
}

/// What a handler knows of the request beyond its body.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub client_id: Option<String>,
    /// The listener the request came in on: Metadata answers with that listener's endpoints.
    pub listener_name: String,
    /// Who sent it: `User:<name>` after SASL, `User:ANONYMOUS` on a PLAINTEXT listener.
    pub principal: Arc<str>,
    /// What it may do: the one authorization point every handler asks.
    pub access: crate::broker::authorizer::Access,
    pub peer: SocketAddr,
    pub received: Instant,
    /// The request's size (without its length prefix): what `producer_byte_rate` counts.
    pub request_bytes: usize,
}

/// A registered broker's endpoint on the named listener (the one a request came in on).
pub(crate) fn listener_endpoint<'a>(
    broker: &'a sluice_raft::image::BrokerRegistration,
    listener: &str,
) -> Option<&'a sluice_raft::records::Endpoint> {
    broker
        .registration
        .endpoints
        .iter()
        .find(|e| e.name == listener)
}

/// KIP-951: for answers saying this broker does not lead a partition (NOT_LEADER_OR_FOLLOWER,
/// FENCED_LEADER_EPOCH), where its leader is by the committed image, and the endpoints of
/// the leaders named, on the listener the client used, so it retries there without a
/// Metadata request.
pub(crate) struct LeaderHints<'a> {
    broker_id: i32,
    image: Arc<sluice_raft::image::MetadataImage>,
    listener: &'a str,
    /// (host, port, rack) by leader id.
    endpoints: BTreeMap<i32, (String, i32, Option<String>)>,
}

impl<'a> LeaderHints<'a> {
    pub fn new(broker: &crate::broker::Broker, listener: &'a str) -> Self {
        LeaderHints {
            broker_id: broker.broker_id,
            image: broker.image(),
            listener,
            endpoints: BTreeMap::new(),
        }
    }

    /// (leader id, leader epoch) for a partition answered with `error_code`, when the image
    /// names a leader other than this broker (whose own view would be no better).
    pub fn hint(&mut self, topic: &str, partition: i32, error_code: i16) -> Option<(i32, i32)> {
        if !matches!(
            KafkaError::check(error_code),
            Err(KafkaError::NotLeaderOrFollower | KafkaError::FencedLeaderEpoch)
        ) {
            return None;
        }
        let registration = self
            .image
            .topic_by_name(topic)?
            .partitions
            .get(&partition)?;
        let leader = registration.leader;
        if leader < 0 || leader == self.broker_id {
            return None;
        }
        let endpoint = self
            .image
            .brokers
            .get(&leader)
            .filter(|b| !b.fenced)
            .and_then(|b| {
                let endpoint = listener_endpoint(b, self.listener)?;
                Some((
                    endpoint.host.clone(),
                    i32::from(endpoint.port),
                    b.registration.rack.clone(),
                ))
            });
        if let Some(endpoint) = endpoint {
            self.endpoints.insert(leader, endpoint);
        }
        Some((leader, registration.leader_epoch))
    }

    /// The named leaders' (id, host, port, rack).
    pub fn endpoints(self) -> impl Iterator<Item = (i32, String, i32, Option<String>)> {
        self.endpoints
            .into_iter()
            .map(|(id, (host, port, rack))| (id, host, port, rack))
    }
}

/// The client's address as Kafka shows it in group descriptions (`/127.0.0.1`).
pub(crate) fn client_host(context: &RequestContext) -> String {
    format!("/{}", context.peer.ip())
}

pub(crate) fn str_bytes(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

pub(crate) fn kafka_uuid(id: sluice_raft::records::Uuid) -> uuid::Uuid {
    uuid::Uuid::from_u128(id.0)
}

pub(crate) fn our_uuid(id: uuid::Uuid) -> sluice_raft::records::Uuid {
    sluice_raft::records::Uuid(id.as_u128())
}

/// What a handler answers: a message the codec encodes, or a Fetch response whose records are
/// sent from the segment files as they are.
pub enum Answer {
    Message(Box<ResponseKind>),
    Fetch(FetchAnswer),
    /// No response: close the connection (Produce with acks=0 that failed).
    Close,
}

/// Every request but ApiVersions (the handshake) and DescribeQuorum (the quorum's state,
/// which an operator asks for when the broker does not become ready) waits for the broker
/// to be ready after a start.
fn waits_for_readiness(api_key: ApiKey) -> bool {
    !matches!(
        api_key,
        ApiKey::ApiVersions
            | ApiKey::DescribeQuorum
            | ApiKey::SaslHandshake
            | ApiKey::SaslAuthenticate
    )
}

/// APIs Kafka serves to every authenticated client without asking its authorizer.
fn is_open_to_all(api_key: ApiKey) -> bool {
    matches!(
        api_key,
        ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
    )
}

/// Answers a decoded request; `None` when no response is due (Produce with acks=0). With
/// the answer, how long its client must wait under its client quotas (zero within them): the
/// answer says so in `throttle_time_ms`, and the connection reads nothing more for as long.
pub async fn dispatch(
    broker: &Arc<Broker>,
    context: &RequestContext,
    request: RequestKind,
) -> (Option<Answer>, Duration) {
    if waits_for_readiness(context.api_key) && broker.readiness.holds_requests() {
        // Right after a start: the cluster does not count this broker until it is registered,
        // unfenced and caught up, so a CreateTopics would find no broker to place replicas on
        // and an auto-create would use the wrong defaults. Wait, bounded, instead of failing.
        broker.readiness.wait(READY_WAIT).await;
    }
    if served_from_replicas(context.api_key) {
        // Data requests, and Metadata that sends clients to leaders, are served from replicas
        // at least as new as the image this node has (after a restart: once caught up to its
        // registration, bounded).
        let index = broker.quorum.image().index;
        broker
            .replicas
            .wait_applied(index, REPLICAS_APPLY_WAIT)
            .await;
    }
    let charge = throttle::QuotaCharge::of(&request, context.api_version);
    let served = std::pin::pin!(serve(broker, context, request));
    let (mut answer, on_thread) = throttle::OnThread::new(served).await;
    let wait = throttle::charge(broker, context, charge, on_thread, &mut answer);
    if context.access.is_enforced()
        && !context.access.was_consulted()
        && !is_open_to_all(context.api_key)
    {
        // A handler that answered without asking the authorizer: a bug the API walk test
        // (tests/acls.rs) looks for in the log.
        tracing::error!(api = ?context.api_key, "a request was answered without asking the authorizer");
    }
    tracing::trace!(api = ?context.api_key, version = context.api_version, peer = %context.peer, client_id = ?context.client_id, elapsed_us = context.received.elapsed().as_micros() as u64, "request answered");
    (answer, wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_lists_each_api_once_with_sane_versions() {
        let mut keys: Vec<i16> = SUPPORTED_APIS.iter().map(|(k, _, _)| *k as i16).collect();
        keys.sort_unstable();
        let count = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), count, "an API listed twice");
        for (key, min, max) in SUPPORTED_APIS {
            assert!(0 <= *min && min <= max, "{key:?} {min}..{max}");
            // kafka-protocol can decode every version we claim.
            let codec_max = key.valid_versions().max;
            assert!(
                *max <= codec_max,
                "{key:?} v{max} beyond the codec's v{codec_max}"
            );
        }
    }
}
