//! The broker's lifecycle with the controller: registration, heartbeats (fenced / unfenced,
//! registering again when the controller no longer knows this incarnation), and controlled
//! shutdown (leaderships moved away before the listener closes).

use super::*;

/// How long one ControlledShutdown call may take (within the whole bound below).
const CONTROLLED_SHUTDOWN_CALL_MAX: Duration = Duration::from_secs(5);
/// How long a probe of a voter's listener waits for the connection.
const VOTER_PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How often a stopping broker looks whether the quorum is still there.
const VOTER_PROBE_INTERVAL: Duration = Duration::from_millis(200);

/// Kafka's controlled shutdown: the controller fences this broker (moving its leaderships to
/// other ISR members) and the broker waits until its image shows it leads nothing, so clients
/// switch to the new leaders before this broker stops answering.
///
/// Bounded, so that a node always stops: `controlled.shutdown.max.retries` attempts
/// `controlled.shutdown.retry.backoff.ms` apart, each call at most 5 s, the whole never
/// longer than `broker.session.timeout.ms`. Past that bound a live controller has fenced this
/// broker by itself (it stopped heartbeating before this began) and moved its leaderships,
/// so waiting longer buys nothing. And when a majority of the voters refuse connections the
/// quorum is gone (every node was stopped at once): nobody can move anything, and the broker
/// stops at once. Before this bound, the last of three nodes stopped together waited 35 s.
pub(super) async fn controlled_shutdown(
    quorum: &Arc<Quorum>,
    config: &ServerConfig,
    broker_epoch: i64,
) {
    if broker_epoch < 0 {
        return;
    }
    let broker_id = config.node_id as i32;
    if !leads_replicated(&quorum.image(), broker_id) {
        // Nothing another broker could take over.
        return;
    }
    let voters: Vec<String> = config
        .voters
        .iter()
        .map(|v| format!("{}:{}", v.host, v.port))
        .collect();
    let request = ControllerRequest::ControlledShutdown {
        broker_id,
        broker_epoch,
    };
    let started = std::time::Instant::now();
    let deadline = started + shutdown_bound(config);
    let retries = config.controlled_shutdown_max_retries;
    let mut last_failure = None;
    for attempt in 0..=retries {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        // The call and the backoff after it each race the quorum going away: the voters
        // stopped together go one by one, and the last call would otherwise wait out its
        // timeout on a controller that is gone.
        let call_timeout = left.min(CONTROLLED_SHUTDOWN_CALL_MAX);
        let answer = tokio::select! {
            answer = call_controller(quorum, &voters, &request, call_timeout) => answer,
            refusing = until_quorum_gone(&voters) => {
                quorum_gone_said(broker_id, refusing, voters.len());
                return;
            }
        };
        let failure = match answer {
            Ok(ControllerResponse::Ok { .. }) => {
                // Waiting for the image races the quorum going away too: a controller that
                // committed the fencing and then stopped (all nodes stopped together) leaves
                // this node's image short of it for good, and the wait would take the whole
                // bound.
                tokio::select! {
                    () = wait_until_moved(quorum, broker_id, started, deadline) => {}
                    refusing = until_quorum_gone(&voters) => {
                        tracing::info!(
                            broker_id,
                            voters_refusing = refusing,
                            voters = voters.len(),
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "controlled shutdown: the controller took it, then the metadata \
                             quorum went away (a majority of its voters refuse connections) \
                             before this node's metadata showed every leadership moved; stopping"
                        );
                    }
                }
                return;
            }
            Ok(other) => other.summary(),
            Err(error) => error,
        };
        let attempt = attempt + 1;
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let backoff = Duration::from_millis(config.controlled_shutdown_retry_backoff_ms);
        if attempt > retries || left.is_zero() {
            // The last failure is said once, by the line giving up below.
            last_failure = Some(failure);
            break;
        }
        tracing::warn!(
            broker_id,
            attempt,
            retry_in_ms = left.min(backoff).as_millis() as u64,
            %failure,
            "controlled shutdown failed; retrying"
        );
        tokio::select! {
            _ = tokio::time::sleep(left.min(backoff)) => {}
            refusing = until_quorum_gone(&voters) => {
                quorum_gone_said(broker_id, refusing, voters.len());
                return;
            }
        }
    }
    tracing::warn!(
        broker_id,
        elapsed_ms = started.elapsed().as_millis() as u64,
        last_failure = last_failure.as_deref().unwrap_or("out of time"),
        "controlled shutdown gave up: stopping anyway (the controller fences this broker when \
         its session expires, and its leaderships move then)"
    );
}

/// The longest a controlled shutdown may take: its attempts and backoffs, and never more than
/// a broker session (see `controlled_shutdown`).
fn shutdown_bound(config: &ServerConfig) -> Duration {
    let retries = config.controlled_shutdown_max_retries;
    let attempts = CONTROLLED_SHUTDOWN_CALL_MAX.saturating_mul(retries.saturating_add(1));
    let backoffs =
        Duration::from_millis(config.controlled_shutdown_retry_backoff_ms).saturating_mul(retries);
    attempts
        .saturating_add(backoffs)
        .min(Duration::from_millis(config.broker_session_timeout_ms))
}

/// Waits (until `deadline`) for this node's image to show the broker fenced and leading no
/// replicated partition.
/// Whether `broker_id` leads a partition whose ISR holds another broker: a leadership
/// another broker could take over.
fn leads_replicated(image: &sluice_raft::MetadataImage, broker_id: i32) -> bool {
    image.topics.values().any(|t| {
        t.partitions
            .values()
            .any(|p| p.leader == broker_id && p.isr.len() > 1)
    })
}

async fn wait_until_moved(
    quorum: &Arc<Quorum>,
    broker_id: i32,
    started: std::time::Instant,
    deadline: std::time::Instant,
) {
    let mut images = quorum.images();
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    let moved = tokio::time::timeout(
        left,
        images.wait_for(|image| {
            image.brokers.get(&broker_id).is_none_or(|b| b.fenced)
                && !leads_replicated(image, broker_id)
        }),
    )
    .await;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    match moved {
        Ok(Ok(_)) => tracing::info!(
            broker_id,
            elapsed_ms,
            "controlled shutdown: leaderships moved"
        ),
        _ => tracing::warn!(
            broker_id,
            elapsed_ms,
            "controlled shutdown: the controller took it, but this node's metadata does not \
             show every leadership moved yet; stopping anyway"
        ),
    }
}

fn quorum_gone_said(broker_id: i32, refusing: usize, voters: usize) {
    tracing::info!(
        broker_id,
        voters_refusing = refusing,
        voters,
        "controlled shutdown skipped: the metadata quorum is gone (a majority of its voters \
         refuse connections), so no leadership can move; stopping"
    );
}

/// Resolves, with how many voters refuse connections, once a majority do; checks every
/// `VOTER_PROBE_INTERVAL`.
async fn until_quorum_gone(voters: &[String]) -> usize {
    loop {
        if let Some(refusing) = quorum_gone(voters).await {
            return refusing;
        }
        tokio::time::sleep(VOTER_PROBE_INTERVAL).await;
    }
}

/// `Some(refusing)` when a majority of the quorum's voters refuse connections: their
/// processes are gone, and no controller can commit anything. A voter that does not answer
/// in time may be paused or cut off, not gone: it does not count.
async fn quorum_gone(voters: &[String]) -> Option<usize> {
    if voters.is_empty() {
        return None;
    }
    let mut probes = tokio::task::JoinSet::new();
    for addr in voters {
        let addr = addr.clone();
        probes.spawn(async move {
            crate::controller::service::refuses_connection(addr, VOTER_PROBE_TIMEOUT).await
        });
    }
    let refusing = probes.join_all().await.into_iter().filter(|r| *r).count();
    let majority = voters.len() / 2 + 1;
    (voters.len() - refusing < majority).then_some(refusing)
}

/// The broker's side of its registration: register with the active controller, then
/// heartbeat; report caught up (to be unfenced) once this node has applied its own
/// registration, i.e. its metadata image is current up to it. Re-registers after a stale
/// epoch (the controller lost track of it).
pub(super) async fn broker_lifecycle(
    quorum: Arc<Quorum>,
    config: ServerConfig,
    current_epoch: Arc<AtomicI64>,
    current_fenced: Arc<AtomicBool>,
    stall: Arc<crate::broker::stall::StallGuard>,
) {
    let broker_id = config.node_id as i32;
    let interval = Duration::from_millis(config.broker_heartbeat_interval_ms);
    let endpoints = config
        .advertised_listeners
        .iter()
        .filter(|l| l.name != config.controller_listener_name)
        .map(|l| sluice_raft::records::Endpoint {
            name: l.name.clone(),
            host: l.host.clone(),
            port: l.port,
            security_protocol: config.security.listener(&l.name).protocol.name().into(),
        })
        .collect::<Vec<_>>();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let incarnation = sluice_raft::records::Uuid(started ^ u128::from(config.node_id));
    let voters: Vec<String> = config
        .voters
        .iter()
        .map(|v| format!("{}:{}", v.host, v.port))
        .collect();
    if !config.voters.iter().any(|v| v.node_id == config.node_id) {
        // Not a voter: follow the metadata log as a learner first.
        let addr = match config.controller_listener().socket_addr() {
            Ok(addr) => addr.to_string(),
            Err(error) => {
                tracing::error!(%error, "no internal address to join the quorum with");
                return;
            }
        };
        let join = ControllerRequest::AddLearner {
            node_id: config.node_id,
            addr,
        };
        loop {
            match call_controller(&quorum, &voters, &join, Duration::from_secs(30)).await {
                Ok(ControllerResponse::Ok { .. }) => break,
                Ok(other) => tracing::warn!(
                    answer = %other.summary(),
                    "joining the quorum as a learner was refused; retrying"
                ),
                Err(error) => {
                    tracing::warn!(%error, "joining the quorum as a learner failed; retrying")
                }
            }
            tokio::time::sleep(interval).await;
        }
        tracing::info!(
            node_id = config.node_id,
            "following the metadata quorum as a learner"
        );
    }
    let (partitions_max, partitions_max_source) = config.partitions_max();
    tracing::info!(
        partitions_max,
        source = %partitions_max_source,
        "partition replicas this broker hosts at most (max.broker.partitions)"
    );
    'register: loop {
        let registration = sluice_raft::records::RegisterBroker {
            broker_id,
            incarnation_id: incarnation,
            broker_epoch: 0,
            endpoints: endpoints.clone(),
            rack: config.broker_rack.clone(),
            fenced: true,
        };
        let request = ControllerRequest::RegisterBrokerWithCapacity {
            registration,
            partitions_max,
        };
        let epoch = match call_controller(&quorum, &voters, &request, Duration::from_secs(30)).await
        {
            Ok(ControllerResponse::Ok {
                broker_epoch: Some(epoch),
                ..
            }) => epoch,
            Ok(other) => {
                tracing::warn!(answer = %other.summary(), "broker registration refused; retrying");
                tokio::time::sleep(interval).await;
                continue;
            }
            Err(error) => {
                tracing::warn!(%error, "broker registration failed; retrying");
                tokio::time::sleep(interval).await;
                continue;
            }
        };
        tracing::info!(
            broker_id,
            broker_epoch = epoch,
            "registered with the controller"
        );
        current_epoch.store(epoch, Ordering::Relaxed);
        let mut fenced = true;
        loop {
            // Fenced by the controller, the broker is caught up once its image shows the
            // fencing too (and the leaderships moved away with it).
            let caught_up = quorum
                .image()
                .brokers
                .get(&broker_id)
                .is_some_and(|b| b.registration.broker_epoch == epoch && (!fenced || b.fenced));
            let sent_ms = stall.heartbeat_sent();
            let heartbeat = ControllerRequest::Heartbeat {
                broker_id,
                broker_epoch: epoch,
                caught_up,
            };
            match call_controller(
                &quorum,
                &voters,
                &heartbeat,
                interval.max(Duration::from_secs(2)),
            )
            .await
            {
                Ok(ControllerResponse::Ok {
                    fenced: Some(now_fenced),
                    ..
                }) => {
                    if fenced && !now_fenced {
                        tracing::info!(broker_id, "unfenced: serving as a broker");
                    }
                    fenced = now_fenced;
                    current_fenced.store(now_fenced, Ordering::Relaxed);
                    stall.answered(sent_ms, now_fenced);
                }
                // The controller no longer knows this registration.
                Ok(ControllerResponse::Error {
                    code: errors::STALE_BROKER_EPOCH,
                    message,
                }) => {
                    tracing::warn!(%message, "stale broker epoch: registering again");
                    continue 'register;
                }
                Ok(other) => tracing::debug!(answer = %other.summary(), "heartbeat answer"),
                Err(error) => tracing::debug!(%error, "heartbeat failed"),
            }
            tokio::time::sleep(interval).await;
        }
    }
}
