//! Whether this broker may act as a partition leader after it could not run: a process that
//! was stopped (SIGSTOP, a paused VM, a starved host) for longer than the controller's
//! liveness probe waits may have been fenced and its partitions given to other brokers while
//! it could not hear of it. When it runs again its metadata still names it leader, and a
//! client that asks it (its Metadata answers from the same stale image) would read a log the
//! new leader has outgrown, or have an `acks=1` write acknowledged by a broker that will
//! truncate it. Kafka serves such requests until the broker's metadata catches up.
//!
//! Here a watch thread ticks every [`TICK`]; a gap between ticks longer than the threshold
//! (the probe timeout: the shortest silence the controller fences for) is a stall. From the
//! stall on, and while the controller answers that this broker is fenced, [`StallGuard::leads`]
//! is false and the broker's partitions answer NOT_LEADER_OR_FOLLOWER, until a heartbeat sent
//! after the stall is answered unfenced (the broker lifecycle reports itself caught up only
//! once its image has applied its own fencing, so the leaders moved away are known by then).
//! The gate also measures the gap itself, so a request handled in the first instant after a
//! stall, before the watch thread has run, is refused too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the watch thread ticks.
const TICK: Duration = Duration::from_millis(50);

pub struct StallGuard {
    origin: Instant,
    /// Milliseconds since `origin` of the watch thread's last tick.
    last_tick_ms: AtomicU64,
    /// Where the last stall began (the tick before the gap); 0 when none was seen.
    stalled_from_ms: AtomicU64,
    /// Set by a stall or a fenced answer; cleared by an unfenced answer to a heartbeat sent
    /// after the last stall began.
    suspended: AtomicBool,
    /// Stalls seen since the start.
    stalls: AtomicU64,
    threshold_ms: u64,
}

impl StallGuard {
    /// A guard whose stalls are gaps over `threshold`; none is watched until
    /// [`StallGuard::watch`].
    pub fn new(threshold: Duration) -> Arc<StallGuard> {
        // An origin a minute back keeps every time away from 0, which means "none".
        let now = Instant::now();
        Arc::new(StallGuard {
            origin: now.checked_sub(Duration::from_secs(60)).unwrap_or(now),
            last_tick_ms: AtomicU64::new(0),
            stalled_from_ms: AtomicU64::new(0),
            suspended: AtomicBool::new(false),
            stalls: AtomicU64::new(0),
            threshold_ms: (threshold.as_millis() as u64).max(TICK.as_millis() as u64 * 4),
        })
    }

    /// Starts the watch thread (an OS thread: a busy async runtime must not look like a
    /// stall).
    pub fn watch(self: &Arc<Self>) -> std::io::Result<()> {
        let guard = Arc::clone(self);
        guard.last_tick_ms.store(guard.now_ms(), Ordering::Relaxed);
        std::thread::Builder::new()
            .name("stall-watch".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(TICK);
                    guard.check();
                    guard.last_tick_ms.store(guard.now_ms(), Ordering::Relaxed);
                }
            })
            .map(|_| ())
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Notes a stall when the watch thread has not ticked for longer than the threshold.
    fn check(&self) {
        let last = self.last_tick_ms.load(Ordering::Relaxed);
        if last == 0 {
            return; // not watching
        }
        let gap = self.now_ms().saturating_sub(last);
        if gap > self.threshold_ms && self.stalled_from_ms.load(Ordering::Relaxed) < last {
            self.stalled_from_ms.store(last, Ordering::Relaxed);
            self.stalls.fetch_add(1, Ordering::Relaxed);
            if !self.suspended.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    stalled_ms = gap,
                    "this process could not run for {gap} ms (stopped, paused or starved): the \
                     controller may have moved its partitions; leading none until a heartbeat \
                     is answered"
                );
            }
        }
    }

    /// Whether this broker may act as a leader now.
    pub fn leads(&self) -> bool {
        self.check();
        !self.suspended.load(Ordering::Relaxed)
    }

    /// `sluice_broker_stalls_total` and `sluice_broker_leadership_suspended`.
    pub fn collect_metrics(&self, out: &mut crate::metrics::exposition::Exposition) {
        use crate::metrics::exposition::Kind;
        let leads = self.leads();
        out.single(
            "sluice_broker_stalls_total",
            Kind::Counter,
            "Times this process could not run for longer than the liveness probe waits.",
            self.stalls.load(Ordering::Relaxed),
        );
        out.single(
            "sluice_broker_leadership_suspended",
            Kind::Gauge,
            "1 while this broker leads nothing after a stall or a fencing, until the controller answers it unfenced.",
            u64::from(!leads),
        );
    }

    /// The time to pass to [`StallGuard::answered`] for a heartbeat sent now.
    pub fn heartbeat_sent(&self) -> u64 {
        self.check();
        self.now_ms()
    }

    /// The controller answered a heartbeat sent at `sent_ms`: fenced suspends leading; an
    /// unfenced answer ends a suspension that began before the heartbeat was sent.
    pub fn answered(&self, sent_ms: u64, fenced: bool) {
        self.check();
        if fenced {
            self.suspended.store(true, Ordering::Relaxed);
        } else if sent_ms > self.stalled_from_ms.load(Ordering::Relaxed)
            && self.suspended.swap(false, Ordering::Relaxed)
            && self.stalled_from_ms.load(Ordering::Relaxed) != 0
        {
            tracing::info!("the controller answered a heartbeat unfenced: leading again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard whose watch thread "ticked" now, and does not tick again by itself.
    fn ticked(threshold_ms: u64) -> Arc<StallGuard> {
        let guard = StallGuard::new(Duration::from_millis(threshold_ms));
        guard.last_tick_ms.store(guard.now_ms(), Ordering::Relaxed);
        guard
    }

    #[test]
    fn a_stall_suspends_leading_until_a_later_heartbeat_is_answered_unfenced() {
        let guard = ticked(200);
        assert!(guard.leads(), "no stall yet");
        let before = guard.heartbeat_sent();
        std::thread::sleep(Duration::from_millis(10));
        guard.last_tick_ms.store(guard.now_ms(), Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(250));
        assert!(!guard.leads(), "the gap is seen by the gate itself");
        assert_eq!(guard.stalls.load(Ordering::Relaxed), 1);
        // A heartbeat sent before the stall began says nothing about after it.
        guard.answered(before, false);
        assert!(!guard.leads());
        guard.last_tick_ms.store(guard.now_ms(), Ordering::Relaxed);
        let sent = guard.heartbeat_sent();
        guard.answered(sent, true);
        assert!(!guard.leads(), "fenced: still not leading");
        let sent = guard.heartbeat_sent();
        guard.answered(sent, false);
        assert!(guard.leads(), "unfenced after the stall: leading again");
    }

    #[test]
    fn gaps_under_the_threshold_are_no_stall() {
        let guard = ticked(400);
        std::thread::sleep(Duration::from_millis(250));
        assert!(guard.leads());
        // An unwatched guard never stalls.
        let idle = StallGuard::new(Duration::from_millis(200));
        std::thread::sleep(Duration::from_millis(250));
        assert!(idle.leads());
    }
}
