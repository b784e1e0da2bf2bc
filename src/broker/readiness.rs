//! Whether the broker serves clients yet. A node accepts connections as soon as its listener
//! is bound, but until the controller has registered and unfenced it, and its replicas serve
//! the image that unfenced it, the cluster does not count it: a CreateTopics then finds "0
//! available brokers" and a Metadata that auto-creates a topic makes it with the wrong
//! defaults. Kafka's brokers open their data plane only then; Sluice answers ApiVersions at
//! once and holds every other request, bounded (`READY_WAIT`), until the broker is ready.
//!
//! Ready is a start-up milestone: once reached it stays for the life of the process (a broker
//! fenced later, by a lost quorum, answers with the errors that state gives). A broker that
//! does not become ready within `READY_WAIT` of its first waiting request stops holding
//! requests: the first ones wait that long, the rest are served at once (a pipelined client
//! must not wait `READY_WAIT` per request), with one WARN that says why it is not ready.
//! From the start of a shutdown `/ready` is 503 again, so a load balancer stops sending
//! clients, while requests are served as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use sluice_raft::Quorum;
use sluice_raft::records::BrokerId;
use tokio::sync::watch;

use crate::replica::ReplicaManager;

/// How long requests wait for the broker to become ready after a start before they are
/// served anyway (and get whatever error the state then gives).
pub const READY_WAIT: Duration = Duration::from_secs(15);

/// How often the start-up state is looked at until ready: the broker epoch is not in the
/// image's change notifications.
const READY_POLL: Duration = Duration::from_millis(20);

/// Not ready yet, and why (for `/ready` and the log); ready; or shutting down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyState {
    Starting(String),
    Ready,
    ShuttingDown,
}

/// The broker's start-up state, shared by the Kafka listener and `/ready`.
#[derive(Debug)]
pub struct Readiness {
    state: watch::Sender<ReadyState>,
    /// A request waited `READY_WAIT` in vain: requests no longer wait.
    gave_up: AtomicBool,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            state: watch::Sender::new(ReadyState::Starting("starting".into())),
            gave_up: AtomicBool::new(false),
        }
    }
}

impl Readiness {
    /// Whether `/ready` is 200.
    pub fn is_ready(&self) -> bool {
        *self.state.borrow() == ReadyState::Ready
    }

    pub fn state(&self) -> ReadyState {
        self.state.borrow().clone()
    }

    /// Whether a request should wait (`wait`) before it is served.
    pub fn holds_requests(&self) -> bool {
        matches!(*self.state.borrow(), ReadyState::Starting(_))
            && !self.gave_up.load(Ordering::Relaxed)
    }

    /// Waits until the broker stops holding requests (ready, shutting down, or `timeout`
    /// passed once: then no request waits again).
    pub async fn wait(&self, timeout: Duration) {
        let mut state = self.state.subscribe();
        let waited = tokio::time::timeout(
            timeout,
            state.wait_for(|s| !matches!(s, ReadyState::Starting(_))),
        )
        .await;
        if waited.is_err() && !self.gave_up.swap(true, Ordering::Relaxed) {
            let reason = match self.state() {
                ReadyState::Starting(reason) => reason,
                other => format!("{other:?}"),
            };
            tracing::warn!(
                waited_ms = timeout.as_millis() as u64,
                %reason,
                "not ready: serving requests anyway (they get the errors this state gives)"
            );
        }
    }

    /// The node is stopping: `/ready` is 503 from now on.
    pub fn shutting_down(&self) {
        self.state.send_replace(ReadyState::ShuttingDown);
    }

    /// Follows start-up until the broker is ready: registered at `broker_epoch` (set by the
    /// lifecycle), unfenced in the committed image, and the image that first showed it
    /// unfenced applied to the replicas.
    pub async fn follow(
        self: Arc<Self>,
        quorum: Arc<Quorum>,
        replicas: Arc<ReplicaManager>,
        broker_id: BrokerId,
        broker_epoch: Arc<AtomicI64>,
    ) {
        let started = tokio::time::Instant::now();
        let mut unfenced_at = None;
        loop {
            let state = start_up_state(
                &quorum,
                &replicas,
                broker_id,
                &broker_epoch,
                &mut unfenced_at,
            );
            let ready = state == ReadyState::Ready;
            self.state.send_if_modified(|current| {
                if *current == ReadyState::ShuttingDown || *current == state {
                    return false;
                }
                *current = state.clone();
                true
            });
            if *self.state.borrow() == ReadyState::ShuttingDown {
                return;
            }
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

/// Where start-up stands. `unfenced_at` keeps the index of the first image that showed this
/// registration unfenced: the replicas must serve that one (a later image moves on under
/// steady metadata traffic, and comparing against the newest could miss it for long).
fn start_up_state(
    quorum: &Quorum,
    replicas: &ReplicaManager,
    broker_id: BrokerId,
    broker_epoch: &AtomicI64,
    unfenced_at: &mut Option<u64>,
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
    if unfenced_at.is_none() {
        match image.brokers.get(&broker_id) {
            Some(b) if b.registration.broker_epoch == epoch && !b.fenced => {
                *unfenced_at = Some(image.index);
            }
            Some(b) if b.registration.broker_epoch == epoch => {
                return ReadyState::Starting(
                    "fenced: waiting for the controller to unfence this broker (it reports \
                     caught up with its next heartbeat)"
                        .into(),
                );
            }
            _ => {
                return ReadyState::Starting(format!(
                    "registered at broker epoch {epoch}; catching up with the metadata log"
                ));
            }
        }
    }
    let target = unfenced_at.unwrap_or(image.index);
    if replicas.applied_index() < target {
        return ReadyState::Starting(format!(
            "replicas applying metadata (index {} of {target})",
            replicas.applied_index()
        ));
    }
    ReadyState::Ready
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_wait_once_for_a_broker_that_does_not_become_ready() {
        let readiness = Readiness::default();
        assert!(readiness.holds_requests());
        let started = std::time::Instant::now();
        readiness.wait(Duration::from_millis(50)).await;
        assert!(started.elapsed() >= Duration::from_millis(50));
        // Still not ready (and /ready says so), but nothing waits again.
        assert!(!readiness.holds_requests());
        assert!(!readiness.is_ready());
    }

    #[tokio::test]
    async fn shutting_down_releases_waiters_and_ready_turns_false() {
        let readiness = Arc::new(Readiness::default());
        let waiter = tokio::spawn({
            let readiness = Arc::clone(&readiness);
            async move { readiness.wait(Duration::from_secs(30)).await }
        });
        readiness.shutting_down();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter is released")
            .unwrap();
        assert!(!readiness.holds_requests());
        assert!(!readiness.is_ready());
        assert_eq!(readiness.state(), ReadyState::ShuttingDown);
    }
}
