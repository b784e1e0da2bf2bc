//! openraft's type configuration for the metadata quorum.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::records::{MetadataRequest, MetadataResponse};

pub type NodeId = u64;

/// What the quorum knows of a member: where its internal (gRPC) listener is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub addr: String,
}

openraft::declare_raft_types!(
    pub TypeConfig:
        D = MetadataRequest,
        R = MetadataResponse,
        NodeId = NodeId,
        Node = NodeInfo,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
);

pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, NodeInfo>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, NodeInfo>;
pub type Snapshot = openraft::storage::Snapshot<TypeConfig>;
pub type Entry = openraft::Entry<TypeConfig>;
