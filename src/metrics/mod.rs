//! Metrics: the one Prometheus writer and registry (`exposition`), the process's own
//! (`process`), and the broker's request metrics (rate, latency and errors per API, bytes in
//! and out, connections: atomics on the request path, rendered on `/metrics`).

pub mod errors;
pub mod exposition;
pub mod process;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;

pub use exposition::{Collect, Exposition, Kind, Registry};

/// Upper bounds of the latency histogram buckets, in seconds.
pub const LATENCY_BUCKETS_SECONDS: [f64; 14] = [
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
    /// Errors by API and code (`record_errors`).
    errors: Mutex<BTreeMap<(ApiLabel, i16), u64>>,
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
            errors: Mutex::default(),
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

    /// One API's counts so far: requests, cumulative latency buckets (the last is +Inf) and
    /// response bytes (the console's charts take differences of these).
    pub fn api_totals(&self, api_key: ApiKey) -> ApiTotals {
        let api = &self.apis[slot(api_key)];
        ApiTotals {
            requests: api.requests.load(Ordering::Relaxed),
            buckets: api.buckets.each_ref().map(|b| b.load(Ordering::Relaxed)),
            response_bytes: api.response_bytes.load(Ordering::Relaxed),
        }
    }

    pub fn record_unsupported(&self, api_key: ApiKey) {
        self.apis[slot(api_key)]
            .unsupported
            .fetch_add(1, Ordering::Relaxed);
        self.record_errors(
            ApiLabel::of(api_key),
            [crate::protocol::errors::UNSUPPORTED_VERSION],
        );
    }

    /// Counts the errors of a response (or of a request refused before it had one), by API
    /// and error code. Only answers with errors take the lock.
    pub fn record_errors(&self, api: ApiLabel, codes: impl IntoIterator<Item = i16>) {
        let mut codes = codes.into_iter().filter(|&c| c != 0).peekable();
        if codes.peek().is_none() {
            return;
        }
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        for code in codes {
            // Bounded: at most one entry per API (or unknown) and error code.
            *errors.entry((api, code)).or_default() += 1;
        }
    }
}

/// `Metrics::api_totals`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ApiTotals {
    pub requests: u64,
    pub buckets: [u64; LATENCY_BUCKETS_SECONDS.len() + 1],
    pub response_bytes: u64,
}

impl ApiTotals {
    /// The latency under which `quantile` of the requests between `earlier` and these totals
    /// were answered, interpolated inside its bucket as Prometheus' `histogram_quantile`
    /// does; `None` without requests (and the largest bound when it is past it).
    pub fn quantile_since(&self, earlier: &ApiTotals, quantile: f64) -> Option<f64> {
        let delta: Vec<u64> = self
            .buckets
            .iter()
            .zip(&earlier.buckets)
            .map(|(now, then)| now.saturating_sub(*then))
            .collect();
        let total = *delta.last()?;
        if total == 0 {
            return None;
        }
        let rank = quantile * total as f64;
        let mut lower_bound = 0.0;
        let mut below = 0u64;
        for (count, bound) in delta.iter().zip(LATENCY_BUCKETS_SECONDS) {
            if *count as f64 >= rank {
                let inside = (*count - below) as f64;
                let fraction = if inside > 0.0 {
                    (rank - below as f64) / inside
                } else {
                    1.0
                };
                return Some(lower_bound + (bound - lower_bound) * fraction);
            }
            lower_bound = bound;
            below = *count;
        }
        LATENCY_BUCKETS_SECONDS.last().copied()
    }
}

/// The API of a counted error: a known key, or a key this broker does not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApiLabel {
    Known(i16),
    Unknown,
}

impl ApiLabel {
    pub fn of(api_key: ApiKey) -> Self {
        ApiLabel::Known(api_key as i16)
    }

    fn name(self) -> String {
        match self {
            ApiLabel::Known(key) => {
                ApiKey::try_from(key).map_or_else(|()| "unknown".to_owned(), |k| format!("{k:?}"))
            }
            ApiLabel::Unknown => "unknown".to_owned(),
        }
    }
}

impl Collect for Metrics {
    fn collect(&self, out: &mut Exposition) {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let used: Vec<(String, &ApiMetrics)> = ApiKey::iter()
            .map(|k| (format!("{k:?}"), &self.apis[slot(k)]))
            .filter(|(_, m)| load(&m.requests) > 0 || load(&m.unsupported) > 0)
            .collect();
        let mut family = out.family(
            "sluice_requests_total",
            Kind::Counter,
            "Kafka requests answered, by API.",
        );
        for (api, m) in &used {
            family.sample(&[("api", api)], load(&m.requests));
        }
        let mut family = out.family(
            "sluice_requests_unsupported_total",
            Kind::Counter,
            "Requests at a version we do not serve.",
        );
        for (api, m) in &used {
            family.sample(&[("api", api)], load(&m.unsupported));
        }
        let errors: Vec<((ApiLabel, i16), u64)> = self
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        let mut family = out.family(
            "sluice_request_errors_total",
            Kind::Counter,
            "Errors in responses (each partition's, member's or resource's, as Kafka's \
             ErrorsPerSec), and requests refused without one (an API or version not served, \
             an undecodable request), by API and Kafka's error name.",
        );
        for ((api, code), count) in errors {
            family.sample(
                &[
                    ("api", &api.name()),
                    ("error", &crate::protocol::errors::name(code)),
                ],
                count,
            );
        }
        let mut family = out.family(
            "sluice_request_latency_seconds",
            Kind::Histogram,
            "Time from a request's arrival to its response, by API.",
        );
        for (api, m) in &used {
            let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS_SECONDS
                .iter()
                .zip(&m.buckets)
                .map(|(bound, bucket)| (*bound, load(bucket)))
                .collect();
            family.histogram(
                &[("api", api)],
                &buckets,
                load(&m.latency_micros_sum) as f64 / 1e6,
                load(&m.buckets[LATENCY_BUCKETS_SECONDS.len()]),
            );
        }
        let mut family = out.family(
            "sluice_response_bytes_total",
            Kind::Counter,
            "Bytes of responses sent, by API.",
        );
        for (api, m) in &used {
            family.sample(&[("api", api)], load(&m.response_bytes));
        }
        for (name, help, value) in [
            (
                "sluice_bytes_in_total",
                "Record batch bytes appended from producers.",
                &self.bytes_in,
            ),
            (
                "sluice_bytes_out_total",
                "Record batch bytes served by Fetch.",
                &self.bytes_out,
            ),
            (
                "sluice_fetch_follower_read_bytes_total",
                "Record batch bytes served to consumers by this broker as a follower (fetch from follower, KIP-392).",
                &self.follower_read_bytes,
            ),
            (
                "sluice_fetch_preferred_read_replica_total",
                "Partition answers of Fetch that sent a consumer to a replica in its rack (replica.selector.class).",
                &self.preferred_read_replica_answers,
            ),
            (
                "sluice_messages_in_total",
                "Records appended from producers.",
                &self.messages_in,
            ),
            (
                "sluice_connections_refused_total",
                "Connections closed at accept because max.connections was reached.",
                &self.connections_refused,
            ),
            (
                "sluice_connections_refused_per_ip_total",
                "Connections closed at accept because their address held max.connections.per.ip.",
                &self.connections_refused_per_ip,
            ),
            (
                "sluice_connection_creation_throttle_ms_total",
                "Milliseconds new connections waited for max.connection.creation.rate.",
                &self.connection_creation_throttled_ms,
            ),
            (
                "sluice_sasl_authentications_total",
                "SASL authentications that succeeded.",
                &self.sasl_authentications,
            ),
            (
                "sluice_sasl_authentication_failures_total",
                "SASL authentications that failed (the connection was closed).",
                &self.sasl_authentication_failures,
            ),
            (
                "sluice_sasl_reauthentications_total",
                "SASL re-authentications (KIP-368, connections.max.reauth.ms) that renewed a session.",
                &self.sasl_reauthentications,
            ),
            (
                "sluice_tls_handshake_failures_total",
                "TLS handshakes that failed or timed out (the connection was closed).",
                &self.tls_handshake_failures,
            ),
            (
                "sluice_authorizations_allowed_total",
                "Authorizer decisions that allowed an operation on a resource.",
                &self.authorizations_allowed,
            ),
            (
                "sluice_authorizations_denied_total",
                "Authorizer decisions that denied an operation on a resource.",
                &self.authorizations_denied,
            ),
        ] {
            out.single(name, Kind::Counter, help, load(value));
        }
        out.single(
            "sluice_acls",
            Kind::Gauge,
            "ACLs the authorizer holds (from the metadata quorum).",
            self.acls.load(Ordering::Relaxed),
        );
        for (name, kind, help, values) in [
            (
                "sluice_client_quota_throttled_total",
                Kind::Counter,
                "Responses throttled by a client quota (the connection muted), by quota type.",
                self.client_quota_throttled
                    .each_ref()
                    .map(|v| v.load(Ordering::Relaxed) as i64),
            ),
            (
                "sluice_client_quota_throttle_ms_total",
                Kind::Counter,
                "Milliseconds clients were told to wait by client quotas, by quota type.",
                self.client_quota_throttle_ms
                    .each_ref()
                    .map(|v| v.load(Ordering::Relaxed) as i64),
            ),
            (
                "sluice_client_quota_entities",
                Kind::Gauge,
                "Users or clients whose rate is measured against a client quota, by quota type.",
                self.client_quota_sensors
                    .each_ref()
                    .map(|v| v.load(Ordering::Relaxed)),
            ),
        ] {
            let mut family = out.family(name, kind, help);
            for (quota, value) in ["produce", "fetch", "request"].into_iter().zip(values) {
                family.sample(&[("quota", quota)], value);
            }
        }
        out.single(
            "sluice_connections",
            Kind::Gauge,
            "Open Kafka connections.",
            self.connections.load(Ordering::Relaxed),
        );
        if let Some(threads) = self.network_threads.get() {
            let mut family = out.family(
                "sluice_network_thread_connections",
                Kind::Gauge,
                "Open Kafka connections served by each network thread, by the CPU it is pinned \
                 to (thread.affinity).",
            );
            for (thread, (cpu, connections)) in threads.iter().enumerate() {
                family.sample(
                    &[("thread", &thread.to_string()), ("cpu", &cpu.to_string())],
                    connections.load(Ordering::Relaxed),
                );
            }
        }
    }
}
