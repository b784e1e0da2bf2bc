//! What a coordinator needs of the cluster, without the broker's whole context: calls to the
//! active controller (`ControllerClient`) and the metadata image with waits for it to change
//! (`ImageWatch`). The broker holds both and hands them to the coordinators, so `group/` and
//! `txn/` never import `broker/`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use sluice_raft::Quorum;
use sluice_raft::image::MetadataImage;
use sluice_raft::records::BrokerId;

use super::service::{ControllerRequest, ControllerResponse, call_controller};
use crate::protocol::errors::{ApiError, KafkaError};

/// Requests to the active controller, as this broker.
#[derive(Clone)]
pub struct ControllerClient {
    quorum: Arc<Quorum>,
    /// Internal addresses from `controller.quorum.voters`, tried while no leader is known.
    voters: Vec<String>,
    broker_id: BrokerId,
    /// This broker's registration epoch (-1 until registered).
    broker_epoch: Arc<AtomicI64>,
}

impl ControllerClient {
    pub fn new(
        quorum: Arc<Quorum>,
        voters: Vec<String>,
        broker_id: BrokerId,
        broker_epoch: Arc<AtomicI64>,
    ) -> ControllerClient {
        ControllerClient {
            quorum,
            voters,
            broker_id,
            broker_epoch,
        }
    }

    pub fn broker_id(&self) -> BrokerId {
        self.broker_id
    }

    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Relaxed)
    }

    /// A request to the active controller; the answer or the error with its message.
    pub async fn call(
        &self,
        request: ControllerRequest,
        timeout: Duration,
    ) -> Result<ControllerResponse, ApiError> {
        match call_controller(&self.quorum, &self.voters, &request, timeout).await {
            Ok(ControllerResponse::Error { code, message }) => {
                Err(ControllerResponse::decode_error(code, message))
            }
            Ok(ControllerResponse::NotController { .. }) => Err(ApiError::new(
                KafkaError::NotController,
                "no active controller answered",
            )),
            Ok(response) => Ok(response),
            Err(error) => Err(ApiError::new(
                KafkaError::RequestTimedOut,
                error.to_string(),
            )),
        }
    }
}

/// The metadata image this node has applied.
#[derive(Clone)]
pub struct ImageWatch {
    quorum: Arc<Quorum>,
}

impl ImageWatch {
    pub fn new(quorum: Arc<Quorum>) -> ImageWatch {
        ImageWatch { quorum }
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.quorum.image()
    }

    /// Waits until the image satisfies `until` (a committed change has reached this node),
    /// for at most `timeout`; whether it did.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut until: impl FnMut(&MetadataImage) -> bool,
    ) -> bool {
        let mut images = self.quorum.images();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if until(&images.borrow_and_update()) {
                return true;
            }
            match tokio::time::timeout_at(deadline, images.changed()).await {
                Ok(Ok(())) => {}
                _ => return until(&self.quorum.image()),
            }
        }
    }
}
