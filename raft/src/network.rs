//! The quorum's transport: openraft's RPCs over tonic gRPC (`proto/raft.proto`).
//!
//! Client side: one lazily connected channel per peer, reconnected after a failure; every
//! call carries openraft's deadline; messages are bounded by `MESSAGE_BYTES_MAX` both ways.
//! A peer that cannot be reached is reported `Unreachable` (openraft then backs off), a refusal
//! by the peer's Raft comes back as the `RemoteError` it is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::transport::{Peer, RaftGate};
use crate::types::{NodeId, NodeInfo, TypeConfig};

pub mod proto {
    tonic::include_proto!("sluice.raft");
}

use proto::raft_client::RaftClient;
use proto::{RaftReply, RaftRequest};

/// The largest RPC either way. Snapshots travel in chunks of `SNAPSHOT_CHUNK_BYTES`.
pub const MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024;
pub const SNAPSHOT_CHUNK_BYTES: u64 = 1024 * 1024;
const WIRE_VERSION: u8 = 1;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Decoding is bounded (a hostile length cannot allocate); encoding is not, so that an
/// oversized message is reported (`PayloadTooLarge`) rather than failing to encode.
fn options() -> bincode::DefaultOptions {
    bincode::DefaultOptions::new()
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    use bincode::Options;
    let mut out = vec![WIRE_VERSION];
    options()
        .serialize_into(&mut out, value)
        .expect("in-memory openraft messages always encode");
    out
}

/// Decodes a payload; the size limit bounds every allocation a hostile length could ask for.
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    use bincode::Options;
    match bytes.split_first() {
        Some((&WIRE_VERSION, rest)) => options()
            .with_limit(MESSAGE_BYTES_MAX as u64)
            .deserialize(rest)
            .map_err(|e| e.to_string()),
        Some((version, _)) => Err(format!("unknown wire version {version}")),
        None => Err("empty payload".into()),
    }
}

/// Serves openraft's RPCs for the local node, to the peers its gate admits.
pub struct RaftService {
    raft: openraft::Raft<TypeConfig>,
    gate: GateSlot,
}

/// The node's decision on who may send Raft RPCs; empty (everyone on this listener) until
/// the node installs it.
pub type GateSlot = Arc<std::sync::RwLock<Option<RaftGate>>>;

impl RaftService {
    pub fn new(
        raft: openraft::Raft<TypeConfig>,
        gate: GateSlot,
    ) -> proto::raft_server::RaftServer<RaftService> {
        proto::raft_server::RaftServer::new(RaftService { raft, gate })
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX)
    }

    /// Refuses the RPC of a peer the gate does not admit (PERMISSION_DENIED, with why).
    fn admit<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let gate = self.gate.read().unwrap_or_else(|p| p.into_inner()).clone();
        match gate {
            Some(gate) => gate(&Peer::of(request)).map_err(Status::permission_denied),
            None => Ok(()),
        }
    }
}

fn reply<T: Serialize>(result: &T) -> Result<Response<RaftReply>, Status> {
    Ok(Response::new(RaftReply {
        payload: encode(result),
    }))
}

#[tonic::async_trait]
impl proto::raft_server::Raft for RaftService {
    async fn append_entries(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        self.admit(&request)?;
        let rpc: AppendEntriesRequest<TypeConfig> =
            decode(&request.into_inner().payload).map_err(Status::invalid_argument)?;
        reply(&self.raft.append_entries(rpc).await)
    }

    async fn vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        self.admit(&request)?;
        let rpc: VoteRequest<NodeId> =
            decode(&request.into_inner().payload).map_err(Status::invalid_argument)?;
        reply(&self.raft.vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        self.admit(&request)?;
        let rpc: InstallSnapshotRequest<TypeConfig> =
            decode(&request.into_inner().payload).map_err(Status::invalid_argument)?;
        reply(&self.raft.install_snapshot(rpc).await)
    }
}

/// Creates one [`GrpcNetwork`] per peer (openraft makes several per peer: replication,
/// votes); they share what is known of each peer's reachability.
#[derive(Debug, Clone, Default)]
pub struct GrpcNetworkFactory {
    peers: Arc<Mutex<HashMap<NodeId, bool>>>,
}

impl RaftNetworkFactory<TypeConfig> for GrpcNetworkFactory {
    type Network = GrpcNetwork;

    async fn new_client(&mut self, target: NodeId, node: &NodeInfo) -> GrpcNetwork {
        GrpcNetwork {
            target,
            addr: node.addr.clone(),
            client: None,
            peers: self.peers.clone(),
        }
    }
}

pub struct GrpcNetwork {
    target: NodeId,
    addr: String,
    client: Option<RaftClient<Channel>>,
    peers: Arc<Mutex<HashMap<NodeId, bool>>>,
}

/// The innermost cause's text (an I/O error's, without the OS error number).
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    let text = cause.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, NodeInfo, RaftError<NodeId, E>>>;

#[derive(Clone, Copy)]
enum Rpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl GrpcNetwork {
    /// Reports a peer going away or coming back once (openraft's own reports of each failed
    /// RPC are switched off by default: a voter down is normal, not a person's to act on).
    fn reachable(&self, failure: Option<&(dyn std::error::Error + 'static)>) {
        let reachable = failure.is_none();
        let was = self
            .peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.target, reachable);
        match (was, reachable) {
            (Some(true) | None, false) => tracing::warn!(
                peer = self.target,
                addr = %self.addr,
                reason = %failure.map(innermost).unwrap_or_default(),
                "quorum peer unreachable; retrying in the background"
            ),
            (Some(false), true) => tracing::info!(
                peer = self.target,
                addr = %self.addr,
                "quorum peer reachable again"
            ),
            _ => {}
        }
    }

    async fn connect(&mut self) -> Result<RaftClient<Channel>, tonic::transport::Error> {
        if let Some(client) = &self.client {
            return Ok(client.clone());
        }
        let channel = crate::transport::connect(&self.addr, CONNECT_TIMEOUT, None).await?;
        let client = RaftClient::new(channel)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX);
        self.client = Some(client.clone());
        Ok(client)
    }

    async fn call<Req, Resp, E>(
        &mut self,
        rpc: Rpc,
        request: &Req,
        option: &RPCOption,
        entries_hint: u64,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let mut client = match self.connect().await {
            Ok(client) => client,
            Err(error) => {
                self.reachable(Some(&error));
                return Err(RPCError::Unreachable(Unreachable::new(&error)));
            }
        };
        let payload = encode(request);
        if payload.len() > MESSAGE_BYTES_MAX {
            // openraft retries with fewer entries.
            return Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(entries_hint),
            ));
        }
        let mut request = Request::new(RaftRequest { payload });
        request.set_timeout(option.hard_ttl());
        let result = match rpc {
            Rpc::AppendEntries => client.append_entries(request).await,
            Rpc::Vote => client.vote(request).await,
            Rpc::InstallSnapshot => client.install_snapshot(request).await,
        };
        let reply = match result {
            Ok(reply) => {
                self.reachable(None);
                reply.into_inner()
            }
            Err(status) => {
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Unknown
                ) {
                    // The connection is gone: reconnect on the next call.
                    self.client = None;
                    self.reachable(Some(&status));
                    return Err(RPCError::Unreachable(Unreachable::new(&status)));
                }
                return Err(RPCError::Network(NetworkError::new(&status)));
            }
        };
        let result: Result<Resp, RaftError<NodeId, E>> = decode(&reply.payload)
            .map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for GrpcNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        let hint = (rpc.entries.len() as u64 / 2).max(1);
        self.call(Rpc::AppendEntries, &rpc, &option, hint).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call(Rpc::InstallSnapshot, &rpc, &option, 1).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call(Rpc::Vote, &rpc, &option, 1).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_versioned_and_bounded() {
        let encoded = encode(&vec![1u64, 2, 3]);
        assert_eq!(encoded[0], WIRE_VERSION);
        assert_eq!(decode::<Vec<u64>>(&encoded).unwrap(), vec![1, 2, 3]);
        assert!(decode::<Vec<u64>>(&[]).is_err());
        assert!(decode::<Vec<u64>>(&[9, 0]).unwrap_err().contains("version"));
        // A length prefix claiming 2^60 elements is refused before anything is allocated.
        let mut hostile = vec![WIRE_VERSION];
        hostile.extend_from_slice(&[0xff, 0, 0, 0, 0, 0, 0, 0, 0x10]);
        assert!(decode::<Vec<u64>>(&hostile).is_err());
    }
}
