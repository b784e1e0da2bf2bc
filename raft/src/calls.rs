//! Opaque calls to the active controller over the internal listener (`proto/controller.proto`).
//!
//! The quorum member serves them by handing the payload to a [`CallHandler`] that the node
//! installs once it is up; until then callers get `Unavailable` and retry. The payload format
//! belongs to the handler: this crate only carries bytes, bounded in size.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tonic::{Code, Request, Response, Status};

use crate::network::MESSAGE_BYTES_MAX;
use crate::transport::Peer;

pub mod proto {
    tonic::include_proto!("sluice.controller");
}

use proto::controller_client::ControllerClient;
use proto::{ControllerCall, ControllerReply};

pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Vec<u8>> + Send + 'a>>;

/// Answers controller calls; installed by the node on its quorum member. `peer` is who
/// called (its TLS certificate on an SSL quorum listener), for the handler to authorize.
pub trait CallHandler: Send + Sync + 'static {
    fn handle(&self, peer: Peer, payload: Vec<u8>) -> CallFuture<'_>;
}

/// Where the server finds the handler; empty until the node installs one.
pub type HandlerSlot = Arc<RwLock<Option<Arc<dyn CallHandler>>>>;

pub struct ControllerService {
    handler: HandlerSlot,
}

impl ControllerService {
    pub fn new(
        handler: HandlerSlot,
    ) -> proto::controller_server::ControllerServer<ControllerService> {
        proto::controller_server::ControllerServer::new(ControllerService { handler })
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX)
    }
}

#[tonic::async_trait]
impl proto::controller_server::Controller for ControllerService {
    async fn call(
        &self,
        request: Request<ControllerCall>,
    ) -> Result<Response<ControllerReply>, Status> {
        let handler = self
            .handler
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(handler) = handler else {
            return Err(Status::unavailable(
                "this node's controller is not running yet",
            ));
        };
        let peer = Peer::of(&request);
        let payload = handler.handle(peer, request.into_inner().payload).await;
        Ok(Response::new(ControllerReply { payload }))
    }
}

/// A failed controller call, said once: the cause without the transport's error chain.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cannot connect to {addr}: {reason}; is a node's CONTROLLER listener there?")]
    Unreachable { addr: String, reason: String },
    #[error("{}", failed_message(addr, status))]
    Failed { addr: String, status: Status },
}

impl CallError {
    /// Whether no connection could be made (the node is down or the address is wrong).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, CallError::Unreachable { .. })
    }
}

/// The innermost I/O error's text in `error`'s chain, without the OS error number.
fn io_cause(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut found = None;
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            let text = io.to_string();
            found = Some(match text.find(" (os error") {
                Some(at) => text[..at].to_owned(),
                None => text,
            });
        }
        cause = current.source();
    }
    found
}

fn failed_message(addr: &str, status: &Status) -> String {
    // Not an answer from a controller: the connection broke or was not HTTP/2 (a Kafka
    // listener closes it on the first bytes).
    let transport = status.code() == Code::Cancelled
        || (matches!(
            status.code(),
            Code::Unknown | Code::Unavailable | Code::Internal
        ) && (status.message().contains("transport error")
            || status.message().contains("protocol error")));
    if transport {
        let cause = io_cause(status).unwrap_or_else(|| status.message().to_owned());
        return format!(
            "{addr} did not answer as a controller ({cause}); is it a Kafka listener? \
             --bootstrap-controller takes a node's CONTROLLER listener (--bootstrap-server \
             takes a Kafka one)"
        );
    }
    format!("call to {addr} failed: {}", status.message())
}

/// One call to the controller service at `addr` (a node's internal listener).
pub async fn call(addr: &str, payload: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, CallError> {
    let unreachable = |reason: String| CallError::Unreachable {
        addr: addr.to_owned(),
        reason,
    };
    let channel = crate::transport::connect(addr, timeout, Some(timeout))
        .await
        .map_err(|e| unreachable(io_cause(&e).unwrap_or_else(|| e.to_string())))?;
    let mut client = ControllerClient::new(channel)
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let reply = client
        .call(Request::new(ControllerCall { payload }))
        .await
        .map_err(|status| CallError::Failed {
            addr: addr.to_owned(),
            status,
        })?;
    Ok(reply.into_inner().payload)
}
