//! A scripted broker for the SDK's unit tests: a listener on a loopback port that decodes each
//! request frame with `kafka_protocol`, records it, and sends back what the test's handler
//! returns. ApiVersions the fake answers itself, with the versions Sluice's broker serves, so
//! the SDK is tested at the versions it meets there.
//!
//! The handler is told which request of its API each one is ([`Received::nth`]), so a script
//! such as "refuse the first Produce, accept the second" keeps no counters of its own. A
//! handler that returns `None` closes the connection, as a failing broker does: a request the
//! test did not script fails at once instead of waiting out `request.timeout.ms`.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, FindCoordinatorResponse, MetadataResponse,
    RequestHeader, RequestKind, ResponseHeader, ResponseKind, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The versions the fake serves: those of Sluice's broker (`src/handler`).
const VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 4),
];

/// The largest request frame the fake reads.
const REQUEST_BYTES_MAX: usize = 16 << 20;

/// A request the fake received.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub api_key: ApiKey,
    /// How many requests of this API the broker received before this one (0: the first).
    pub nth: usize,
    pub request: RequestKind,
}

type Handler = Box<dyn FnMut(&Received) -> Option<ResponseKind> + Send>;

/// Where a fake broker listens, as Metadata and FindCoordinator answers name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    pub node_id: i32,
    pub port: i32,
}

/// One fake broker. Bound first ([`FakeBroker::bind`]) so that handlers of several brokers can
/// name each other, then served ([`FakeBroker::serve`]); it runs until the test's runtime ends.
pub(crate) struct FakeBroker {
    node: Node,
    listener: Mutex<Option<TcpListener>>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl FakeBroker {
    /// A broker with node id `node_id` on a free loopback port, not yet answering.
    pub async fn bind(node_id: i32) -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("local address").port();
        FakeBroker {
            node: Node {
                node_id,
                port: i32::from(port),
            },
            listener: Mutex::new(Some(listener)),
            received: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn node(&self) -> Node {
        self.node
    }

    /// `host:port`, for `bootstrap.servers`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.node.port)
    }

    /// Starts answering: every request but ApiVersions goes to `handler`, in the order the
    /// broker reads them (one connection at a time holds the handler).
    pub fn serve(&self, handler: impl FnMut(&Received) -> Option<ResponseKind> + Send + 'static) {
        let listener = lock(&self.listener).take().expect("served once");
        let handler: Arc<Mutex<Handler>> = Arc::new(Mutex::new(Box::new(handler)));
        let received = self.received.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(answer(socket, handler.clone(), received.clone()));
            }
        });
    }

    /// Every request received, ApiVersions included, in order.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.received).clone()
    }

    /// How many requests of `api_key` the broker received.
    pub fn count(&self, api_key: ApiKey) -> usize {
        lock(&self.received)
            .iter()
            .filter(|r| r.api_key == api_key)
            .count()
    }

    /// Waits until the broker has received `count` requests of `api_key`, for requests the
    /// client does not wait for (acks=0, heartbeats). Panics after 3 s: the request never
    /// came.
    pub async fn wait_for(&self, api_key: ApiKey, count: usize) {
        let arrived = async {
            while self.count(api_key) < count {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        };
        if tokio::time::timeout(std::time::Duration::from_secs(3), arrived)
            .await
            .is_err()
        {
            panic!(
                "{count} {api_key:?} requests never came: {} did",
                self.count(api_key)
            );
        }
    }

    /// The requests of one API received, in order: `broker.requests::<ProduceRequest>()`.
    pub fn requests<R: FromKind>(&self) -> Vec<R> {
        lock(&self.received)
            .iter()
            .filter_map(|r| R::from_kind(&r.request))
            .collect()
    }
}

/// A request type the fake hands back from its log.
pub(crate) trait FromKind: Sized {
    fn from_kind(kind: &RequestKind) -> Option<Self>;
}

macro_rules! from_kind {
    ($( $variant:ident => $request:ident, )*) => {
        $(
            impl FromKind for kafka_protocol::messages::$request {
                fn from_kind(kind: &RequestKind) -> Option<Self> {
                    match kind {
                        RequestKind::$variant(request) => Some(request.clone()),
                        _ => None,
                    }
                }
            }
        )*
    };
}

from_kind! {
    Produce => ProduceRequest,
    Fetch => FetchRequest,
    ListOffsets => ListOffsetsRequest,
    Metadata => MetadataRequest,
    OffsetCommit => OffsetCommitRequest,
    OffsetFetch => OffsetFetchRequest,
    FindCoordinator => FindCoordinatorRequest,
    JoinGroup => JoinGroupRequest,
    Heartbeat => HeartbeatRequest,
    LeaveGroup => LeaveGroupRequest,
    SyncGroup => SyncGroupRequest,
    InitProducerId => InitProducerIdRequest,
    ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest,
    AddPartitionsToTxn => AddPartitionsToTxnRequest,
    AddOffsetsToTxn => AddOffsetsToTxnRequest,
    EndTxn => EndTxnRequest,
    TxnOffsetCommit => TxnOffsetCommitRequest,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves one connection until the client closes it or the handler declines a request.
async fn answer(
    mut socket: TcpStream,
    handler: Arc<Mutex<Handler>>,
    received: Arc<Mutex<Vec<Received>>>,
) {
    loop {
        let Ok(size) = socket.read_i32().await else {
            return;
        };
        let size = usize::try_from(size).expect("a positive frame size");
        assert!(
            (8..=REQUEST_BYTES_MAX).contains(&size),
            "frame of {size} bytes"
        );
        let mut frame = vec![0; size];
        if socket.read_exact(&mut frame).await.is_err() {
            return;
        }
        let api_key = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).expect("API key");
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let mut body = Bytes::from(frame);
        let header = RequestHeader::decode(&mut body, api_key.request_header_version(version))
            .expect("request header");
        let request = RequestKind::decode(api_key, &mut body, version).expect("request body");
        let acks_zero = matches!(&request, RequestKind::Produce(p) if p.acks == 0);
        let response = {
            let mut log = lock(&received);
            let nth = log.iter().filter(|r| r.api_key == api_key).count();
            let received = Received {
                api_key,
                nth,
                request,
            };
            log.push(received.clone());
            drop(log);
            match api_key {
                ApiKey::ApiVersions => Some(api_versions()),
                _ => (lock(&handler))(&received),
            }
        };
        let Some(response) = response else {
            return; // not scripted: the connection closes
        };
        if acks_zero {
            continue; // a broker does not answer Produce with acks=0
        }
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(header.correlation_id)
            .encode(&mut out, api_key.response_header_version(version))
            .expect("response header");
        response.encode(&mut out, version).expect("response body");
        let mut frame = i32::try_from(out.len())
            .expect("size")
            .to_be_bytes()
            .to_vec();
        frame.extend_from_slice(&out);
        if socket.write_all(&frame).await.is_err() {
            return;
        }
    }
}

fn api_versions() -> ResponseKind {
    ResponseKind::ApiVersions(
        ApiVersionsResponse::default().with_api_keys(
            VERSIONS
                .iter()
                .map(|&(key, min, max)| {
                    ApiVersion::default()
                        .with_api_key(key as i16)
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect(),
        ),
    )
}

/// A topic's id, the same for every broker of a test.
pub(crate) fn topic_id(name: &str) -> uuid::Uuid {
    let mut id = [0x5a; 16];
    for (at, byte) in name.bytes().enumerate().take(16) {
        id[at] = byte;
    }
    uuid::Uuid::from_bytes(id)
}

/// A Metadata answer naming `brokers` and `topics`: each topic's name with the leader's node
/// id for each of its partitions (leader epoch 0, the leader the only replica).
pub(crate) fn metadata(brokers: &[Node], topics: &[(&str, &[i32])]) -> ResponseKind {
    ResponseKind::Metadata(
        MetadataResponse::default()
            .with_cluster_id(Some(StrBytes::from_static_str("fake")))
            .with_controller_id(BrokerId(brokers.first().map_or(-1, |b| b.node_id)))
            .with_brokers(
                brokers
                    .iter()
                    .map(|b| {
                        MetadataResponseBroker::default()
                            .with_node_id(BrokerId(b.node_id))
                            .with_host(StrBytes::from_static_str("127.0.0.1"))
                            .with_port(b.port)
                    })
                    .collect(),
            )
            .with_topics(
                topics
                    .iter()
                    .map(|&(name, leaders)| {
                        MetadataResponseTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(name.to_owned()))))
                            .with_topic_id(topic_id(name))
                            .with_partitions(
                                leaders
                                    .iter()
                                    .enumerate()
                                    .map(|(index, &leader)| {
                                        MetadataResponsePartition::default()
                                            .with_partition_index(index as i32)
                                            .with_leader_id(BrokerId(leader))
                                            .with_leader_epoch(0)
                                            .with_replica_nodes(vec![BrokerId(leader)])
                                            .with_isr_nodes(vec![BrokerId(leader)])
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
    )
}

/// A FindCoordinator answer naming `coordinator`.
pub(crate) fn find_coordinator(coordinator: Node) -> ResponseKind {
    ResponseKind::FindCoordinator(
        FindCoordinatorResponse::default()
            .with_node_id(BrokerId(coordinator.node_id))
            .with_host(StrBytes::from_static_str("127.0.0.1"))
            .with_port(coordinator.port),
    )
}
