//! Whether the broker serves clients yet. A node accepts connections as soon as its listener
//! is bound, but until the controller has registered and unfenced it, and its replicas serve
//! the image that unfenced it, the cluster does not count it: a CreateTopics then finds "0
//! available brokers" and a Metadata that auto-creates a topic makes it with the wrong
//! defaults. Kafka's brokers open their data plane only then; Sluice answers ApiVersions at
//! once and holds every other request, bounded (`READY_WAIT`), until the broker is ready.
//!
//! Ready is a start-up milestone: once reached it stays for the life of the process (a broker
//! fenced later, by a lost quorum, answers with the errors that state gives).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use sluice_raft::Quorum;
use sluice_raft::records::BrokerId;
use tokio::sync::watch;

use crate::replica::ReplicaManager;

/// How long a request that needs the broker waits for it to become ready before it is served
/// anyway (and gets whatever error the state then gives).
pub const READY_WAIT: Duration = Duration::from_secs(15);

/// How often the start-up state is looked at until ready: the broker epoch is not in the
/// image's change notifications.
const READY_POLL: Duration = Duration::from_millis(20);

/// Not ready yet, and why (for `/ready` and the log), or ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyState {
    Starting(String),
    Ready,
}

/// The broker's start-up state, shared by the Kafka listener and `/ready`.
#[derive(Debug)]
pub struct Readiness {
    state: watch::Sender<ReadyState>,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            state: watch::Sender::new(ReadyState::Starting("starting".into())),
        }
    }
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        *self.state.borrow() == ReadyState::Ready
    }

    pub fn state(&self) -> ReadyState {
        self.state.borrow().clone()
    }

    /// Waits until ready, at most `timeout`; whether it is.
    pub async fn wait(&self, timeout: Duration) -> bool {
        let mut state = self.state.subscribe();
        tokio::time::timeout(timeout, state.wait_for(|s| *s == ReadyState::Ready))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Follows start-up until the broker is ready: registered at `broker_epoch` (set by the
    /// lifecycle), unfenced in the committed image, and that image applied to the replicas.
    pub async fn follow(
        self: Arc<Self>,
        quorum: Arc<Quorum>,
        replicas: Arc<ReplicaManager>,
        broker_id: BrokerId,
        broker_epoch: Arc<AtomicI64>,
    ) {
        let started = tokio::time::Instant::now();
        loop {
            let state = start_up_state(&quorum, &replicas, broker_id, &broker_epoch);
            let ready = state == ReadyState::Ready;
            self.state.send_if_modified(|current| {
                let changed = *current != state;
                *current = state.clone();
                changed
            });
            if ready {
                tracing::info!(
                    broker_id,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "ready: registered, unfenced and caught up with the metadata log"
                );
                return;
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }
}

fn start_up_state(
    quorum: &Quorum,
    replicas: &ReplicaManager,
    broker_id: BrokerId,
    broker_epoch: &AtomicI64,
) -> ReadyState {
    let epoch = broker_epoch.load(Ordering::Relaxed);
    let image = quorum.image();
    if epoch < 0 {
        return ReadyState::Starting(match quorum.metrics().current_leader {
            None => "no metadata quorum leader yet: waiting for the controller quorum".into(),
            Some(leader) => {
                format!("registering with the controller (quorum leader: node {leader})")
            }
        });
    }
    match image.brokers.get(&broker_id) {
        Some(b) if b.registration.broker_epoch != epoch => ReadyState::Starting(format!(
            "registered at broker epoch {epoch}; catching up with the metadata log"
        )),
        None => ReadyState::Starting(format!(
            "registered at broker epoch {epoch}; catching up with the metadata log"
        )),
        Some(b) if b.fenced => ReadyState::Starting(
            "fenced: waiting for the controller to unfence this broker (it reports caught up \
             with its next heartbeat)"
                .into(),
        ),
        Some(_) if replicas.applied_index() < image.index => ReadyState::Starting(format!(
            "replicas applying metadata (index {} of {})",
            replicas.applied_index(),
            image.index
        )),
        Some(_) => ReadyState::Ready,
    }
}
