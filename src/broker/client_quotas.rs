//! Client quotas enforced, as Kafka's `ClientQuotaManager` enforces them (KIP-13, KIP-55,
//! KIP-124): the quorum holds the quotas (`MetadataImage::client_quotas`), and each broker
//! measures what every user and client does against them, on its own, as each Kafka broker
//! does.
//!
//! # Which quota applies (KIP-55)
//! For a request of user U (its principal's name; `ANONYMOUS` unauthenticated) and client id
//! C, the first of these entities holding the quota's key applies:
//! `(U, C)`, `(U, default client)`, `(U)`, `(default user, C)`,
//! `(default user, default client)`, `(default user)`, `(C)`, `(default client)`.
//! The level that matched also says who shares the measured rate: a quota of user U alone is
//! shared by all of U's clients; one of the default client id is measured per client id;
//! `(U, C)` levels per user and client id (Kafka's metric tags).
//!
//! # The rate (Kafka's `Rate` over a `SampledStat`)
//! Values are summed in `quota.window.num` samples of `quota.window.size.seconds` each (11 of
//! 1 s by default; one more kept while the oldest ages out). The rate is the sum over the time
//! since the oldest sample began, counted as at least `quota.window.num - 1` whole windows, so
//! a client's first burst is not judged over a few milliseconds. A value is recorded, then the
//! rate checked: over the quota by O - T, the client waits `(O - T) / T * W` (W the window the
//! rate was measured over), which brings the rate back to T if it sends nothing meanwhile. The
//! request quota's wait is at most one window, as Kafka's; the byte quotas' is not bounded.
//!
//! # What is measured
//! Produce: the request's bytes. Fetch: the record bytes returned (a fetch that would go over
//! returns nothing, is not counted, and says how long to wait; its `max_bytes` is bounded by
//! what the quota allows in a window). Request: time the handler spent on a thread (its
//! polls), as a percentage of one thread. Follower fetches and inter-broker requests are
//! exempt.
//!
//! # Bounds
//! A measured entity is forgotten once idle for the whole sample span (its samples would all
//! be obsolete): the map holds only clients that sent something quota'd in the last
//! `quota.window.num` windows, and at most `MEASURED_ENTITIES_MAX` of them. Past that (a
//! client cycling through client ids under a default client-id quota), new ones share one
//! rate per quota type, so they are throttled together rather than each let through.
//! Metrics are per quota type, never per client.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_raft::image::ClientQuotas;
use sluice_raft::records::{ClientQuotaEntity, QuotaEntityName};

use crate::controller::client_quotas::QuotaKey;
use crate::metrics::Metrics;

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaType {
    Produce,
    Fetch,
    Request,
}

impl QuotaType {
    pub const ALL: [QuotaType; 3] = [QuotaType::Produce, QuotaType::Fetch, QuotaType::Request];

    pub fn key(self) -> QuotaKey {
        match self {
            QuotaType::Produce => QuotaKey::ProducerByteRate,
            QuotaType::Fetch => QuotaKey::ConsumerByteRate,
            QuotaType::Request => QuotaKey::RequestPercentage,
        }
    }

    /// Kafka's name of the quota type (its metrics group).
    pub fn name(self) -> &'static str {
        match self {
            QuotaType::Produce => "produce",
            QuotaType::Fetch => "fetch",
            QuotaType::Request => "request",
        }
    }

    pub fn index(self) -> usize {
        match self {
            QuotaType::Produce => 0,
            QuotaType::Fetch => 1,
            QuotaType::Request => 2,
        }
    }
}

/// `quota.window.num` and `quota.window.size.seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaWindows {
    pub samples: u32,
    pub window_ms: u64,
}

impl Default for QuotaWindows {
    fn default() -> Self {
        QuotaWindows {
            samples: 11,
            window_ms: 1000,
        }
    }
}

impl QuotaWindows {
    /// How long a sample counts: after this without a value, it is reset.
    fn span_ms(self) -> u64 {
        u64::from(self.samples) * self.window_ms
    }
}

/// The client a request comes from, as quotas name it.
#[derive(Debug, Clone, Copy)]
pub struct QuotaClient<'a> {
    /// The principal's name (`User:alice` is `alice`).
    pub user: &'a str,
    pub client_id: &'a str,
}

impl<'a> QuotaClient<'a> {
    /// A request's client: its principal without the `User:` type, and its client id.
    pub fn new(principal: &'a str, client_id: Option<&'a str>) -> QuotaClient<'a> {
        let user = principal
            .split_once(':')
            .map_or(principal, |(_, name)| name);
        QuotaClient {
            user,
            client_id: client_id.unwrap_or(""),
        }
    }
}

/// The most users and clients measured at once (see "Bounds").
const MEASURED_ENTITIES_MAX: usize = 100_000;

/// Who shares a measured rate (Kafka's quota metric tags): a user, a client id or both; or,
/// past `MEASURED_ENTITIES_MAX`, every entity not measured yet (`overflow`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SensorKey {
    quota: QuotaType,
    user: Option<String>,
    client_id: Option<String>,
    overflow: bool,
}

/// The quota that applies to `client` for `key`, by KIP-55's precedence: who shares its
/// measured rate, and the limit.
fn resolve(
    quotas: &ClientQuotas,
    quota: QuotaType,
    client: QuotaClient<'_>,
) -> Option<(SensorKey, f64)> {
    let key = quota.key().name();
    let user = || Some(QuotaEntityName::Named(client.user.to_owned()));
    let client_id = || Some(QuotaEntityName::Named(client.client_id.to_owned()));
    let default = || Some(QuotaEntityName::Default);
    // (entity, shared by the user, shared by the client id)
    let levels: [(Option<QuotaEntityName>, Option<QuotaEntityName>, bool, bool); 8] = [
        (user(), client_id(), true, true),
        (user(), default(), true, true),
        (user(), None, true, false),
        (default(), client_id(), true, true),
        (default(), default(), true, true),
        (default(), None, true, false),
        (None, client_id(), false, true),
        (None, default(), false, true),
    ];
    levels
        .into_iter()
        .find_map(|(user, client_id, by_user, by_client)| {
            let entity = ClientQuotaEntity {
                user,
                client_id,
                ip: None,
            };
            let limit = quotas.get(&entity)?.get(key)?.0;
            Some((
                SensorKey {
                    quota,
                    user: by_user.then(|| client.user.to_owned()),
                    client_id: by_client.then(|| client.client_id.to_owned()),
                    overflow: false,
                },
                limit,
            ))
        })
}

/// One sample of a rate: the values recorded in one window.
#[derive(Debug, Clone, Copy)]
struct Sample {
    value: f64,
    start_ms: u64,
    last_event_ms: u64,
}

impl Sample {
    fn new(now_ms: u64) -> Sample {
        Sample {
            value: 0.0,
            start_ms: now_ms,
            last_event_ms: now_ms,
        }
    }
}

/// Kafka's `Rate` over a `WindowedSum` (`SampledStat`): `samples + 1` samples at most, each
/// one window long.
#[derive(Debug, Clone, Default)]
struct Rate {
    samples: Vec<Sample>,
    current: usize,
}

impl Rate {
    fn record(&mut self, windows: QuotaWindows, value: f64, now_ms: u64) {
        if self.samples.is_empty() {
            self.samples.push(Sample::new(now_ms));
            self.current = 0;
        }
        let complete =
            now_ms.saturating_sub(self.samples[self.current].start_ms) >= windows.window_ms;
        if complete {
            self.current = (self.current + 1) % (windows.samples as usize + 1);
            if self.current >= self.samples.len() {
                self.samples.push(Sample::new(now_ms));
            } else {
                self.samples[self.current] = Sample::new(now_ms);
            }
        }
        let sample = &mut self.samples[self.current];
        sample.value += value;
        sample.last_event_ms = now_ms;
        debug_assert!(self.samples.len() <= windows.samples as usize + 1);
    }

    /// Samples without a value for the whole span start over (Kafka's
    /// `purgeObsoleteSamples`).
    fn purge(&mut self, windows: QuotaWindows, now_ms: u64) {
        for sample in &mut self.samples {
            if now_ms.saturating_sub(sample.last_event_ms) >= windows.span_ms() {
                *sample = Sample::new(now_ms);
            }
        }
    }

    /// The time the rate is measured over, in milliseconds: since the oldest sample began,
    /// at least `samples - 1` whole windows (Kafka's `Rate.windowSize`).
    fn window_ms(&mut self, windows: QuotaWindows, now_ms: u64) -> u64 {
        self.purge(windows, now_ms);
        let oldest = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let mut elapsed = now_ms.saturating_sub(oldest);
        let full = elapsed / windows.window_ms;
        let full_min = u64::from(windows.samples.saturating_sub(1));
        if full < full_min {
            elapsed += (full_min - full) * windows.window_ms;
        }
        elapsed.max(1)
    }

    /// Per second.
    fn measure(&mut self, windows: QuotaWindows, now_ms: u64) -> f64 {
        let window_ms = self.window_ms(windows, now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total / (window_ms as f64 / 1000.0)
    }

    /// How long to wait for the rate to come back to `limit`, when over it (Kafka's
    /// `QuotaUtils.throttleTime`); zero within it.
    fn throttle_ms(&mut self, windows: QuotaWindows, limit: f64, now_ms: u64) -> u64 {
        let rate = self.measure(windows, now_ms);
        if rate <= limit {
            return 0;
        }
        let window_ms = self.window_ms(windows, now_ms);
        ((rate - limit) / limit * window_ms as f64).round() as u64
    }

    fn last_event_ms(&self) -> u64 {
        self.samples
            .iter()
            .map(|s| s.last_event_ms)
            .max()
            .unwrap_or(0)
    }
}

/// The measured rates of the clients quotas apply to.
pub struct ClientQuotaManager {
    windows: QuotaWindows,
    entities_max: usize,
    started: Instant,
    rates: Mutex<Rates>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct Rates {
    by_sensor: HashMap<SensorKey, Rate>,
    /// When idle rates were last dropped.
    swept_ms: u64,
}

impl ClientQuotaManager {
    pub fn new(windows: QuotaWindows, metrics: Arc<Metrics>) -> ClientQuotaManager {
        assert!(
            windows.samples >= 1 && windows.window_ms >= 1,
            "{windows:?}"
        );
        ClientQuotaManager {
            windows,
            entities_max: MEASURED_ENTITIES_MAX,
            started: Instant::now(),
            rates: Mutex::new(Rates::default()),
            metrics,
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Records `value` (bytes, or percent-seconds of a thread) for `client`, and returns how
    /// long it must wait for its rate to come back within its quota: zero within the quota,
    /// or when no quota of this type applies to it.
    pub fn record(
        &self,
        quotas: &ClientQuotas,
        quota: QuotaType,
        client: QuotaClient<'_>,
        value: f64,
    ) -> Duration {
        if quotas.is_empty() {
            return Duration::ZERO;
        }
        let Some((sensor, limit)) = resolve(quotas, quota, client) else {
            return Duration::ZERO;
        };
        let now_ms = self.now_ms();
        let mut rates = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        self.sweep(&mut rates, now_ms);
        let sensor = if rates.by_sensor.len() >= self.entities_max
            && !rates.by_sensor.contains_key(&sensor)
        {
            SensorKey {
                quota,
                user: None,
                client_id: None,
                overflow: true,
            }
        } else {
            sensor
        };
        let rate = rates.by_sensor.entry(sensor).or_default();
        rate.record(self.windows, value, now_ms);
        let mut throttle_ms = rate.throttle_ms(self.windows, limit, now_ms);
        if quota == QuotaType::Request {
            // Kafka's ClientRequestQuotaManager: at most one window.
            throttle_ms = throttle_ms.min(self.windows.window_ms);
        }
        Duration::from_millis(throttle_ms)
    }

    /// Takes back a value recorded for a response that will not be sent as measured (a fetch
    /// answered empty because it was throttled), as Kafka's `unrecordQuotaSensor`.
    pub fn unrecord(
        &self,
        quotas: &ClientQuotas,
        quota: QuotaType,
        client: QuotaClient<'_>,
        value: f64,
    ) {
        let Some((sensor, _)) = resolve(quotas, quota, client) else {
            return;
        };
        let now_ms = self.now_ms();
        let mut rates = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        let overflow = SensorKey {
            quota,
            user: None,
            client_id: None,
            overflow: true,
        };
        let rates = &mut rates.by_sensor;
        let sensor = if rates.contains_key(&sensor) {
            sensor
        } else {
            overflow
        };
        if let Some(rate) = rates.get_mut(&sensor) {
            rate.record(self.windows, -value, now_ms);
        }
    }

    /// The most that can be recorded in one go without being throttled whatever came before
    /// (Kafka's `getMaxValueInQuotaWindow`): a fetch's `max_bytes` is bounded by it.
    pub fn max_value_in_window(
        &self,
        quotas: &ClientQuotas,
        quota: QuotaType,
        client: QuotaClient<'_>,
    ) -> Option<f64> {
        if quotas.is_empty() {
            return None;
        }
        let (_, limit) = resolve(quotas, quota, client)?;
        let whole_windows = f64::from(self.windows.samples.saturating_sub(1).max(1));
        Some(limit * whole_windows * self.windows.window_ms as f64 / 1000.0)
    }

    /// Counts a response throttled by `quota` for `throttle` (`/metrics`).
    pub fn count_throttle(&self, quota: QuotaType, throttle: Duration) {
        let slot = quota.index();
        self.metrics.client_quota_throttled[slot].fetch_add(1, Ordering::Relaxed);
        self.metrics.client_quota_throttle_ms[slot]
            .fetch_add(throttle.as_millis() as u64, Ordering::Relaxed);
    }

    /// Drops the rates of clients idle for the whole span (at most once a window).
    fn sweep(&self, rates: &mut Rates, now_ms: u64) {
        if now_ms.saturating_sub(rates.swept_ms) < self.windows.window_ms {
            return;
        }
        rates.swept_ms = now_ms;
        let span_ms = self.windows.span_ms();
        rates
            .by_sensor
            .retain(|_, rate| now_ms.saturating_sub(rate.last_event_ms()) < span_ms);
        let mut counts = [0i64; 3];
        for sensor in rates.by_sensor.keys() {
            counts[sensor.quota.index()] += 1;
        }
        for (gauge, count) in self.metrics.client_quota_sensors.iter().zip(counts) {
            gauge.store(count, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_raft::records::QuotaValue;

    const WINDOWS: QuotaWindows = QuotaWindows {
        samples: 11,
        window_ms: 1000,
    };

    fn entity(user: Option<Option<&str>>, client_id: Option<Option<&str>>) -> ClientQuotaEntity {
        let name = |n: Option<&str>| QuotaEntityName::from_option(n);
        ClientQuotaEntity {
            user: user.map(name),
            client_id: client_id.map(name),
            ip: None,
        }
    }

    fn quotas(entries: &[(ClientQuotaEntity, &str, f64)]) -> ClientQuotas {
        let mut quotas = ClientQuotas::new();
        for (entity, key, value) in entries {
            quotas
                .entry(entity.clone())
                .or_default()
                .insert((*key).to_owned(), QuotaValue(*value));
        }
        quotas
    }

    #[test]
    fn the_most_specific_entity_wins_in_kip_55_order() {
        let produce = "producer_byte_rate";
        let levels = [
            (entity(Some(Some("alice")), Some(Some("app"))), 1.0),
            (entity(Some(Some("alice")), Some(None)), 2.0),
            (entity(Some(Some("alice")), None), 3.0),
            (entity(Some(None), Some(Some("app"))), 4.0),
            (entity(Some(None), Some(None)), 5.0),
            (entity(Some(None), None), 6.0),
            (entity(None, Some(Some("app"))), 7.0),
            (entity(None, Some(None)), 8.0),
        ];
        let alice = QuotaClient::new("User:alice", Some("app"));
        // Remove the most specific level one at a time: the next one applies, with its
        // sharing (tags) as Kafka's DefaultQuotaCallback gives them.
        let expected_tags = [
            (true, true),
            (true, true),
            (true, false),
            (true, true),
            (true, true),
            (true, false),
            (false, true),
            (false, true),
        ];
        for skip in 0..levels.len() {
            let held: Vec<_> = levels[skip..]
                .iter()
                .map(|(e, v)| (e.clone(), produce, *v))
                .collect();
            let (sensor, limit) =
                resolve(&quotas(&held), QuotaType::Produce, alice).expect("a level applies");
            assert_eq!(limit, (skip + 1) as f64, "level {}", skip + 1);
            assert_eq!(
                (sensor.user.is_some(), sensor.client_id.is_some()),
                expected_tags[skip],
                "level {}",
                skip + 1
            );
            assert_eq!(sensor.user.as_deref().unwrap_or("alice"), "alice");
        }
        // Each quota type resolves on its own key; other users and clients fall through.
        let held = quotas(&[
            (
                entity(Some(Some("alice")), None),
                "consumer_byte_rate",
                10.0,
            ),
            (entity(None, Some(None)), produce, 20.0),
        ]);
        assert_eq!(
            resolve(&held, QuotaType::Produce, alice).map(|(_, l)| l),
            Some(20.0)
        );
        assert_eq!(
            resolve(&held, QuotaType::Fetch, alice).map(|(_, l)| l),
            Some(10.0)
        );
        let bob = QuotaClient::new("User:bob", None);
        assert_eq!(resolve(&held, QuotaType::Fetch, bob), None);
        assert_eq!(resolve(&held, QuotaType::Request, alice), None);
        // The anonymous principal is user ANONYMOUS.
        let anonymous = QuotaClient::new("User:ANONYMOUS", Some("x"));
        assert_eq!(anonymous.user, "ANONYMOUS");
    }

    #[test]
    fn the_rate_counts_at_least_ten_whole_windows_and_forgets_old_samples() {
        let mut rate = Rate::default();
        // 1000 bytes at once: measured over ten windows, 100 B/s.
        rate.record(WINDOWS, 1000.0, 0);
        assert_eq!(rate.measure(WINDOWS, 0), 100.0);
        // Steady 1000 B/s for 20 s: the rate reads 1000 (within a sample's rounding).
        let mut rate = Rate::default();
        for ms in (0..20_000).step_by(100) {
            rate.record(WINDOWS, 100.0, ms);
        }
        let measured = rate.measure(WINDOWS, 20_000);
        assert!((measured - 1000.0).abs() < 100.0, "{measured}");
        assert!(rate.samples.len() <= 12);
        // Silent for the whole span: every sample starts over.
        assert_eq!(rate.measure(WINDOWS, 20_000 + 11_000), 0.0);
    }

    #[test]
    fn throttle_time_brings_the_rate_back_to_the_quota() {
        let mut rate = Rate::default();
        // 3000 bytes at t=0 against 100 B/s: measured 300 B/s over 10 s; waiting
        // (300 - 100) / 100 * 10 s = 20 s brings it to 100 B/s.
        rate.record(WINDOWS, 3000.0, 0);
        assert_eq!(rate.throttle_ms(WINDOWS, 100.0, 0), 20_000);
        assert_eq!(rate.throttle_ms(WINDOWS, 300.0, 0), 0);
        // A client kept to its quota by the waits it is told averages the quota.
        let limit = 10_000.0;
        let mut rate = Rate::default();
        let mut now = 0u64;
        let mut sent = 0.0;
        while now < 60_000 {
            rate.record(WINDOWS, 4000.0, now);
            sent += 4000.0;
            now += rate.throttle_ms(WINDOWS, limit, now).max(10);
        }
        let average = sent / (now as f64 / 1000.0);
        assert!(
            (average - limit).abs() / limit < 0.15,
            "average {average} B/s against {limit}"
        );
    }

    #[test]
    fn the_manager_shares_rates_as_the_matched_level_says_and_unrecords() {
        let manager = ClientQuotaManager::new(WINDOWS, Arc::new(Metrics::default()));
        // alice's quota is shared by all her clients; 1000 B/s is 10 000 bytes in the window.
        let held = quotas(&[(
            entity(Some(Some("alice")), None),
            "producer_byte_rate",
            1000.0,
        )]);
        let a = QuotaClient::new("User:alice", Some("a"));
        let b = QuotaClient::new("User:alice", Some("b"));
        assert_eq!(
            manager.record(&held, QuotaType::Produce, a, 9000.0),
            Duration::ZERO
        );
        assert!(manager.record(&held, QuotaType::Produce, b, 2000.0) > Duration::ZERO);
        manager.unrecord(&held, QuotaType::Produce, b, 2000.0);
        assert_eq!(
            manager.record(&held, QuotaType::Produce, b, 500.0),
            Duration::ZERO
        );
        // bob has no quota; an empty quota set costs nothing.
        let bob = QuotaClient::new("User:bob", Some("a"));
        assert_eq!(
            manager.record(&held, QuotaType::Produce, bob, 1e12),
            Duration::ZERO
        );
        assert_eq!(
            manager.max_value_in_window(&held, QuotaType::Produce, a),
            Some(10_000.0)
        );
        assert_eq!(
            manager.max_value_in_window(&ClientQuotas::new(), QuotaType::Produce, a),
            None
        );
        // Past the bound, clients not measured yet share one rate.
        let mut bounded = ClientQuotaManager::new(WINDOWS, Arc::new(Metrics::default()));
        bounded.entities_max = 2;
        let per_client = quotas(&[(entity(None, Some(None)), "producer_byte_rate", 1000.0)]);
        // c1 and c2 are measured on their own; c3 is the first to share the overflow rate.
        for id in ["c1", "c2", "c3"] {
            let client = QuotaClient::new("User:x", Some(id));
            assert_eq!(
                bounded.record(&per_client, QuotaType::Produce, client, 6000.0),
                Duration::ZERO,
                "{id}"
            );
        }
        let fourth = QuotaClient::new("User:x", Some("c4"));
        assert!(
            bounded.record(&per_client, QuotaType::Produce, fourth, 6000.0) > Duration::ZERO,
            "c4 shares c3's rate: 12 000 bytes against 10 000 a window"
        );
        let first = QuotaClient::new("User:x", Some("c1"));
        assert_eq!(
            bounded.record(&per_client, QuotaType::Produce, first, 1000.0),
            Duration::ZERO,
            "a client measured before keeps its own rate"
        );
        assert_eq!(bounded.rates.lock().expect("rates").by_sensor.len(), 3);
        // The request quota waits at most one window.
        let held = quotas(&[(entity(None, Some(None)), "request_percentage", 1.0)]);
        assert_eq!(
            manager.record(&held, QuotaType::Request, a, 500.0),
            Duration::from_millis(1000)
        );
    }
}
