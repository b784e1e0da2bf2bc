//! Broker metrics in Prometheus text format: request rate and latency per API, bytes in and
//! out, connections. Counters are atomics; the HTTP listener renders them on `/metrics`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;

/// Upper bounds of the latency histogram buckets, in seconds.
const LATENCY_BUCKETS_SECONDS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// API keys are small integers; one slot each.
const API_SLOTS: usize = 128;

#[derive(Default)]
struct ApiMetrics {
    requests: AtomicU64,
    unsupported: AtomicU64,
    latency_micros_sum: AtomicU64,
    /// Cumulative counts per bucket, plus the +Inf bucket at the end.
    buckets: [AtomicU64; LATENCY_BUCKETS_SECONDS.len() + 1],
    response_bytes: AtomicU64,
}

pub struct Metrics {
    apis: Vec<ApiMetrics>,
    pub connections: AtomicI64,
    pub connections_refused: AtomicU64,
    /// Connections closed at accept because their address held `max.connections.per.ip`.
    pub connections_refused_per_ip: AtomicU64,
    /// Milliseconds accepts waited for `max.connection.creation.rate`.
    pub connection_creation_throttled_ms: AtomicU64,
    /// SASL authentications that succeeded and that failed (Kafka's
    /// successful-authentication-total and failed-authentication-total).
    pub sasl_authentications: AtomicU64,
    pub sasl_authentication_failures: AtomicU64,
    /// KIP-368 re-authentications that renewed a session.
    pub sasl_reauthentications: AtomicU64,
    /// TLS handshakes that failed or timed out (a client certificate refused, no common
    /// version, a plaintext client on a TLS port).
    pub tls_handshake_failures: AtomicU64,
    /// Authorizer decisions (Kafka's authorization-allowed/denied), and the ACLs it holds.
    pub authorizations_allowed: AtomicU64,
    pub authorizations_denied: AtomicU64,
    pub acls: AtomicI64,
    /// Client quotas (`broker::client_quotas`), by quota type (produce, fetch, request):
    /// responses throttled, the milliseconds they were told to wait (and their connections
    /// muted), and the users or clients measured now. Never per client: client ids are the
    /// clients' to choose, and a label each would grow without bound.
    pub client_quota_throttled: [AtomicU64; 3],
    pub client_quota_throttle_ms: [AtomicU64; 3],
    pub client_quota_sensors: [AtomicI64; 3],
    /// Record bytes appended by producers.
    pub bytes_in: AtomicU64,
    /// Record bytes served to consumers and followers.
    pub bytes_out: AtomicU64,
    /// Of those, bytes this broker served to consumers as a follower (KIP-392).
    pub follower_read_bytes: AtomicU64,
    /// Fetch answers that sent a consumer to a replica in its rack (KIP-392).
    pub preferred_read_replica_answers: AtomicU64,
    pub messages_in: AtomicU64,
    /// Per network thread (`server::network`): the CPU it is pinned to and its open
    /// connections. Set once the threads start; unset with `thread.affinity=false`.
    pub network_threads: std::sync::OnceLock<Vec<(usize, std::sync::Arc<AtomicUsize>)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            apis: (0..API_SLOTS).map(|_| ApiMetrics::default()).collect(),
            connections: AtomicI64::new(0),
            connections_refused: AtomicU64::new(0),
            connections_refused_per_ip: AtomicU64::new(0),
            connection_creation_throttled_ms: AtomicU64::new(0),
            sasl_authentications: AtomicU64::new(0),
            sasl_authentication_failures: AtomicU64::new(0),
            sasl_reauthentications: AtomicU64::new(0),
            tls_handshake_failures: AtomicU64::new(0),
            authorizations_allowed: AtomicU64::new(0),
            authorizations_denied: AtomicU64::new(0),
            acls: AtomicI64::new(0),
            client_quota_throttled: Default::default(),
            client_quota_throttle_ms: Default::default(),
            client_quota_sensors: Default::default(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            follower_read_bytes: AtomicU64::new(0),
            preferred_read_replica_answers: AtomicU64::new(0),
            messages_in: AtomicU64::new(0),
            network_threads: std::sync::OnceLock::new(),
        }
    }
}

fn slot(api_key: ApiKey) -> usize {
    (api_key as i16 as usize).min(API_SLOTS - 1)
}

impl Metrics {
    pub fn record_request(&self, api_key: ApiKey, latency: Duration, response_bytes: usize) {
        let api = &self.apis[slot(api_key)];
        api.requests.fetch_add(1, Ordering::Relaxed);
        api.latency_micros_sum
            .fetch_add(latency.as_micros() as u64, Ordering::Relaxed);
        api.response_bytes
            .fetch_add(response_bytes as u64, Ordering::Relaxed);
        let seconds = latency.as_secs_f64();
        for (bucket, bound) in api.buckets.iter().zip(LATENCY_BUCKETS_SECONDS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        api.buckets[LATENCY_BUCKETS_SECONDS.len()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_unsupported(&self, api_key: ApiKey) {
        self.apis[slot(api_key)]
            .unsupported
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the Prometheus text of these metrics to `out`.
    pub fn render(&self, out: &mut String) {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP sluice_requests_total Kafka requests answered, by API.\n# TYPE sluice_requests_total counter"
        );
        let used: Vec<(ApiKey, &ApiMetrics)> = ApiKey::iter()
            .map(|k| (k, &self.apis[slot(k)]))
            .filter(|(_, m)| load(&m.requests) > 0 || load(&m.unsupported) > 0)
            .collect();
        for (key, m) in &used {
            let _ = writeln!(
                out,
                "sluice_requests_total{{api=\"{key:?}\"}} {}",
                load(&m.requests)
            );
        }
        let _ = writeln!(
            out,
            "# HELP sluice_requests_unsupported_total Requests at a version we do not serve.\n# TYPE sluice_requests_unsupported_total counter"
        );
        for (key, m) in &used {
            let _ = writeln!(
                out,
                "sluice_requests_unsupported_total{{api=\"{key:?}\"}} {}",
                load(&m.unsupported)
            );
        }
        let _ = writeln!(
            out,
            "# HELP sluice_request_latency_seconds Time from a request's arrival to its response, by API.\n# TYPE sluice_request_latency_seconds histogram"
        );
        for (key, m) in &used {
            for (bucket, bound) in m.buckets.iter().zip(LATENCY_BUCKETS_SECONDS) {
                let _ = writeln!(
                    out,
                    "sluice_request_latency_seconds_bucket{{api=\"{key:?}\",le=\"{bound}\"}} {}",
                    load(bucket)
                );
            }
            let _ = writeln!(
                out,
                "sluice_request_latency_seconds_bucket{{api=\"{key:?}\",le=\"+Inf\"}} {}\nsluice_request_latency_seconds_sum{{api=\"{key:?}\"}} {}\nsluice_request_latency_seconds_count{{api=\"{key:?}\"}} {}",
                load(&m.buckets[LATENCY_BUCKETS_SECONDS.len()]),
                load(&m.latency_micros_sum) as f64 / 1e6,
                load(&m.requests)
            );
        }
        let _ = writeln!(
            out,
            "# HELP sluice_response_bytes_total Bytes of responses sent, by API.\n# TYPE sluice_response_bytes_total counter"
        );
        for (key, m) in &used {
            let _ = writeln!(
                out,
                "sluice_response_bytes_total{{api=\"{key:?}\"}} {}",
                load(&m.response_bytes)
            );
        }
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        counter(
            "sluice_bytes_in_total",
            "Record batch bytes appended from producers.",
            load(&self.bytes_in),
        );
        counter(
            "sluice_bytes_out_total",
            "Record batch bytes served by Fetch.",
            load(&self.bytes_out),
        );
        counter(
            "sluice_fetch_follower_read_bytes_total",
            "Record batch bytes served to consumers by this broker as a follower (fetch from follower, KIP-392).",
            load(&self.follower_read_bytes),
        );
        counter(
            "sluice_fetch_preferred_read_replica_total",
            "Partition answers of Fetch that sent a consumer to a replica in its rack (replica.selector.class).",
            load(&self.preferred_read_replica_answers),
        );
        counter(
            "sluice_messages_in_total",
            "Records appended from producers.",
            load(&self.messages_in),
        );
        counter(
            "sluice_connections_refused_total",
            "Connections closed at accept because max.connections was reached.",
            load(&self.connections_refused),
        );
        counter(
            "sluice_connections_refused_per_ip_total",
            "Connections closed at accept because their address held max.connections.per.ip.",
            load(&self.connections_refused_per_ip),
        );
        counter(
            "sluice_connection_creation_throttle_ms_total",
            "Milliseconds new connections waited for max.connection.creation.rate.",
            load(&self.connection_creation_throttled_ms),
        );
        counter(
            "sluice_sasl_authentications_total",
            "SASL authentications that succeeded.",
            load(&self.sasl_authentications),
        );
        counter(
            "sluice_sasl_authentication_failures_total",
            "SASL authentications that failed (the connection was closed).",
            load(&self.sasl_authentication_failures),
        );
        counter(
            "sluice_sasl_reauthentications_total",
            "SASL re-authentications (KIP-368, connections.max.reauth.ms) that renewed a session.",
            load(&self.sasl_reauthentications),
        );
        counter(
            "sluice_tls_handshake_failures_total",
            "TLS handshakes that failed or timed out (the connection was closed).",
            load(&self.tls_handshake_failures),
        );
        counter(
            "sluice_authorizations_allowed_total",
            "Authorizer decisions that allowed an operation on a resource.",
            load(&self.authorizations_allowed),
        );
        counter(
            "sluice_authorizations_denied_total",
            "Authorizer decisions that denied an operation on a resource.",
            load(&self.authorizations_denied),
        );
        let _ = writeln!(
            out,
            "# HELP sluice_acls ACLs the authorizer holds (from the metadata quorum).\n# TYPE sluice_acls gauge\nsluice_acls {}",
            self.acls.load(Ordering::Relaxed)
        );
        for (name, kind, help, values) in [
            (
                "sluice_client_quota_throttled_total",
                "counter",
                "Responses throttled by a client quota (the connection muted), by quota type.",
                self.client_quota_throttled
                    .each_ref()
                    .map(|v| v.load(Ordering::Relaxed) as i64),
            ),
            (
                "sluice_client_quota_throttle_ms_total",
                "counter",
                "Milliseconds clients were told to wait by client quotas, by quota type.",
                self.client_quota_throttle_ms
                    .each_ref()
                    .map(|v| v.load(Ordering::Relaxed) as i64),
            ),
            (
                "sluice_client_quota_entities",
                "gauge",
                "Users or clients whose rate is measured against a client quota, by quota type.",
                self.client_quota_sensors
                    .each_ref()
                    .map(|v| v.load(Ordering::Relaxed)),
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (quota, value) in ["produce", "fetch", "request"].into_iter().zip(values) {
                let _ = writeln!(out, "{name}{{quota=\"{quota}\"}} {value}");
            }
        }
        let _ = writeln!(
            out,
            "# HELP sluice_connections Open Kafka connections.\n# TYPE sluice_connections gauge\nsluice_connections {}",
            self.connections.load(Ordering::Relaxed)
        );
        if let Some(threads) = self.network_threads.get() {
            let _ = writeln!(
                out,
                "# HELP sluice_network_thread_connections Open Kafka connections served by each \
                 network thread, by the CPU it is pinned to (thread.affinity).\n\
                 # TYPE sluice_network_thread_connections gauge"
            );
            for (thread, (cpu, connections)) in threads.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "sluice_network_thread_connections{{thread=\"{thread}\",cpu=\"{cpu}\"}} {}",
                    connections.load(Ordering::Relaxed)
                );
            }
        }
    }
}
