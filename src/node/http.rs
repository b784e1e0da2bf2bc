//! The HTTP listener: `/health` (the process answers), `/ready` (200 once a broker serves
//! clients: registered, unfenced, caught up; 503 with the reason before), `/metrics`
//! (Prometheus text), and on a broker the web console (`crate::console`) on every other path.

use super::*;

pub(super) async fn serve_http(
    listener: TcpListener,
    quorum: Arc<Quorum>,
    registry: Arc<Registry>,
    readiness: Option<Arc<Readiness>>,
    console: Option<Arc<crate::console::Console>>,
) {
    crate::http::serve(
        listener,
        crate::console::BODY_BYTES_MAX,
        move |request: crate::http::Request| {
            let quorum = Arc::clone(&quorum);
            let registry = Arc::clone(&registry);
            let readiness = readiness.clone();
            let console = console.clone();
            async move { answer(request, &quorum, registry, readiness.as_deref(), console).await }
        },
    )
    .await
}

async fn answer(
    request: crate::http::Request,
    quorum: &Quorum,
    registry: Arc<Registry>,
    readiness: Option<&Readiness>,
    console: Option<Arc<crate::console::Console>>,
) -> crate::http::Response {
    use crate::http::Response;
    let mut response = match request.path.as_str() {
        "/health" => Response::new(200, "text/plain", health(quorum).into_bytes()),
        "/ready" => {
            let (status, content_type, body) = ready(quorum, readiness);
            Response::new(status, content_type, body.into_bytes())
        }
        "/metrics" => Response::new(
            200,
            "text/plain; version=0.0.4",
            tokio::task::spawn_blocking(move || registry.render())
                .await
                .unwrap_or_default()
                .into_bytes(),
        ),
        _ => match &console {
            Some(console) => match console.handle(&request).await {
                Some(answer) => {
                    let mut response =
                        Response::new(answer.status, answer.content_type, answer.body);
                    if answer.challenge {
                        response.headers.push((
                            "WWW-Authenticate",
                            "Basic realm=\"Sluice console\", charset=\"UTF-8\"".to_owned(),
                        ));
                    }
                    response
                }
                None => Response::text(404, "not found\n"),
            },
            None => Response::text(404, "not found\n"),
        },
    };
    response
        .headers
        .push(("Cache-Control", "no-store".to_owned()));
    response
}

/// The node's metrics, registered in the order `/metrics` shows them: the process, the
/// quorum and the logs, then (on a broker) requests, replication, partitions, groups and
/// transactions.
pub(super) fn metrics_registry(
    quorum: &Arc<Quorum>,
    logs: &Arc<LogManager>,
    broker_metrics: &Arc<Metrics>,
    replicas: &Arc<ReplicaManager>,
    coordinators: Option<&Arc<crate::broker::Broker>>,
    partition_metrics: bool,
) -> Arc<Registry> {
    let registry = Arc::new(Registry::default());
    registry.register(Arc::new(crate::metrics::process::collect));
    let (node_quorum, node_logs) = (Arc::clone(quorum), Arc::clone(logs));
    registry.register(Arc::new(move |out: &mut Exposition| {
        node_metrics(&node_quorum, &node_logs, out)
    }));
    registry.register(Arc::clone(broker_metrics) as Arc<dyn Collect>);
    let (quorum, replicas) = (Arc::clone(quorum), Arc::clone(replicas));
    let broker = coordinators.cloned();
    registry.register(Arc::new(move |out: &mut Exposition| {
        let Some(broker) = &broker else {
            replicas.collect_metrics(out);
            return;
        };
        replica_metadata_lag(&quorum, &replicas, out);
        replicas.collect_metrics(out);
        if partition_metrics {
            replicas.collect_partition_metrics(out);
        }
        broker.groups.collect_metrics(out);
        broker.transactions.collect_metrics(out);
        broker.stall.collect_metrics(out);
    }));
    registry
}

/// `/ready`: a broker is ready once it serves clients (`Readiness`); a controller-only node
/// once its quorum has a leader.
fn ready(quorum: &Quorum, readiness: Option<&Readiness>) -> (u16, &'static str, String) {
    let state = match readiness {
        Some(readiness) => readiness.state(),
        None => match quorum.metrics().current_leader {
            Some(_) => ReadyState::Ready,
            None => ReadyState::Starting("no metadata quorum leader yet".into()),
        },
    };
    match state {
        ReadyState::Ready => (
            200,
            "text/plain",
            format!("ready node={}\n", quorum.node_id()),
        ),
        ReadyState::Starting(reason) => (
            503,
            "text/plain",
            format!("not ready node={}: {reason}\n", quorum.node_id()),
        ),
        ReadyState::ShuttingDown => (
            503,
            "text/plain",
            format!("not ready node={}: shutting down\n", quorum.node_id()),
        ),
    }
}

fn health(quorum: &Quorum) -> String {
    let metrics = quorum.metrics();
    format!(
        "ok node={} state={:?} leader={} term={}\n",
        quorum.node_id(),
        metrics.state,
        metrics
            .current_leader
            .map_or("none".to_owned(), |l| l.to_string()),
        metrics.current_term
    )
}

/// How many metadata log entries the broker's replicas are behind the committed image (Kafka's
/// broker metadata apply lag): 0 once every leadership and ISR change seen here is served.
fn replica_metadata_lag(quorum: &Quorum, replicas: &ReplicaManager, out: &mut Exposition) {
    let lag = quorum
        .image()
        .index
        .saturating_sub(replicas.applied_index());
    out.single(
        "sluice_replica_metadata_lag",
        Kind::Gauge,
        "Metadata log entries committed here that the broker's replicas do not serve yet.",
        lag,
    );
}

/// The node's own gauges: the quorum as this node sees it, the image, the logs.
fn node_metrics(quorum: &Quorum, logs: &LogManager, out: &mut Exposition) {
    let m = quorum.metrics();
    let mut gauge = |name: &str, help: &str, value: i64| {
        out.single(name, Kind::Gauge, help, value);
    };
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let index = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    gauge(
        "sluice_quorum_current_term",
        "Raft term of the metadata quorum as this node sees it.",
        index(m.current_term),
    );
    gauge(
        "sluice_quorum_current_leader",
        "Node id of the quorum leader, -1 when unknown.",
        m.current_leader.map_or(-1, |l| l as i64),
    );
    gauge(
        "sluice_quorum_is_leader",
        "1 when this node leads the metadata quorum.",
        i64::from(m.current_leader == Some(quorum.node_id())),
    );
    gauge(
        "sluice_quorum_last_log_index",
        "Index of the last entry in this node's metadata log.",
        index(m.last_log_index.unwrap_or(0)),
    );
    gauge(
        "sluice_quorum_last_applied_index",
        "Index of the last committed entry applied here (the metadata image's index).",
        index(m.last_applied.map_or(0, |l| l.index)),
    );
    gauge(
        "sluice_quorum_voters",
        "Voters in the quorum's membership.",
        count(m.membership_config.voter_ids().count()),
    );
    let image = quorum.image();
    gauge(
        "sluice_brokers_registered",
        "Brokers registered in the metadata image.",
        count(image.brokers.len()),
    );
    gauge(
        "sluice_brokers_unfenced",
        "Registered brokers not fenced.",
        count(image.unfenced_brokers().count()),
    );
    gauge(
        "sluice_topics",
        "Topics in the metadata image.",
        count(image.topics.len()),
    );
    let offline = image
        .topics
        .values()
        .flat_map(|t| t.partitions.values())
        .filter(|p| p.leader == sluice_raft::records::NO_LEADER)
        .count();
    gauge(
        "sluice_partitions_offline",
        "Partitions without a leader.",
        count(offline),
    );
    let all = logs.all();
    gauge(
        "sluice_log_partitions",
        "Partition logs on this node.",
        count(all.len()),
    );
    gauge(
        "sluice_log_size_bytes",
        "Bytes in all partition logs on this node.",
        index(all.iter().map(|l| l.size_bytes()).sum::<u64>()),
    );
    gauge(
        "sluice_log_offline_partitions",
        "Partition logs taken offline by a storage error.",
        count(all.iter().filter(|l| l.is_offline()).count()),
    );
}
