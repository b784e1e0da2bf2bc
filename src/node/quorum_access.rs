//! Who may use the quorum listener. Its callers are the other members (Raft RPCs), brokers
//! (controller calls made for requests their own listeners already authorized) and the CLI
//! (`sluice cluster`: voter changes, the quorum's status).
//!
//! On an SSL quorum listener every caller presented a certificate the truststore vouches for,
//! and is the principal its subject maps to (`ssl.principal.mapping.rules` of that listener).
//! With an authorizer, as Kafka's controllers do: Raft RPCs and brokers' calls need
//! CLUSTER_ACTION on the cluster, voter changes ALTER, the quorum's status DESCRIBE.
//!
//! On a PLAINTEXT quorum listener every caller is `User:ANONYMOUS`. Members' and brokers'
//! calls are not authorized there (the listener must be on a trusted network, as the
//! configuration says; Kafka would refuse them unless ANONYMOUS were a super user, which opens
//! the Kafka listeners too); voter changes and the status are, so that an authorizer keeps
//! anyone who reaches the port from changing the quorum.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use sluice_raft::transport::Peer;

use crate::broker::authorizer::Authorizer;
use crate::security::acl::Operation;
use crate::security::tls::{PrincipalMapper, subject_dn};
use crate::server::session::ANONYMOUS;

pub struct QuorumAccess {
    /// The SSL quorum listener's principal rules; `None`: PLAINTEXT.
    principals: Option<PrincipalMapper>,
    authorizer: Authorizer,
}

impl QuorumAccess {
    pub fn new(principals: Option<PrincipalMapper>, authorizer: Authorizer) -> QuorumAccess {
        QuorumAccess {
            principals,
            authorizer,
        }
    }

    /// The principal of `peer`: its certificate's, or `User:ANONYMOUS` without one.
    fn principal(&self, peer: &Peer) -> Result<String, String> {
        match (&self.principals, &peer.certificate) {
            (Some(mapper), Some(certificate)) => {
                let name = subject_dn(certificate)
                    .and_then(|dn| mapper.name(&dn))
                    .map_err(|error| format!("client certificate: {error}"))?;
                Ok(format!("User:{name}"))
            }
            _ => Ok(ANONYMOUS.to_owned()),
        }
    }

    /// Whether `peer` may do `operation` on the cluster; why not, said to the caller.
    pub fn check(&self, peer: &Peer, operation: Operation) -> Result<(), String> {
        if self.principals.is_none() && operation == Operation::ClusterAction {
            return Ok(());
        }
        let principal = self.principal(peer)?;
        let host = peer
            .addr
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |addr| addr.ip());
        let access = self.authorizer.access(Arc::from(principal.as_str()), host);
        if access.allows_cluster(operation) {
            return Ok(());
        }
        let how = if self.principals.is_some() {
            "grant it with an ACL (sluice acls add --allow-principal ... --cluster) or super.users"
        } else {
            "the quorum listener is PLAINTEXT, so callers are not authenticated: map it to SSL \
             with client certificates and call with a certificate whose principal may"
        };
        tracing::info!(%principal, %host, ?operation, "quorum call refused");
        Err(format!(
            "Cluster authorization failed: {principal} may not {operation:?} on the cluster; {how}"
        ))
    }
}
