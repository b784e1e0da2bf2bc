//! The purgatory: requests waiting for partitions to move (Kafka's DelayedProduce and
//! DelayedFetch). An `acks=all` Produce waits for high watermarks, a long-polling Fetch for
//! records (`max_wait_ms`, `min_bytes`); each is a [`Delayed`] watching exactly the partitions
//! it names, with one deadline for the whole request.
//!
//! Each partition keeps its own [`Watchers`] and wakes them when its log end, high watermark,
//! log start or leadership changes. A change to one partition wakes only the requests watching
//! it: a thousand consumers long-polling idle partitions cost nothing while another partition
//! takes writes.

use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

/// Prune dead waiters once a partition's list reaches a power of two at least this long.
const PRUNE_FROM: usize = 16;

/// The requests waiting on one partition.
#[derive(Debug, Default)]
pub struct Watchers {
    waiters: Mutex<Vec<Weak<Notify>>>,
}

impl Watchers {
    /// Wakes every request watching this partition (each re-checks what it waits for).
    pub fn wake(&self) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        waiters.retain(|waiter| match waiter.upgrade() {
            Some(notify) => {
                // Stores a permit when the request is between checks: no wake-up is lost.
                notify.notify_one();
                true
            }
            None => false,
        });
    }

    fn watch(&self, notify: &Arc<Notify>) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        // Requests that ended leave a dead entry until the next wake; an idle partition polled
        // for a long time is pruned here, amortised.
        if waiters.len() >= PRUNE_FROM && waiters.len().is_power_of_two() {
            waiters.retain(|w| w.strong_count() > 0);
        }
        waiters.push(Arc::downgrade(notify));
    }

    /// Requests watching (live ones; for tests and metrics).
    pub fn len(&self) -> usize {
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A request in the purgatory: woken by any partition it watches, until its deadline.
pub struct Delayed {
    notify: Arc<Notify>,
    deadline: Instant,
}

impl Delayed {
    /// A request that watches `partitions` until `deadline`.
    pub fn new<'a>(deadline: Instant, partitions: impl IntoIterator<Item = &'a Watchers>) -> Self {
        let notify = Arc::new(Notify::new());
        for watchers in partitions {
            watchers.watch(&notify);
        }
        Delayed { notify, deadline }
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Waits until `complete` holds (checked now and after each wake-up) or the deadline
    /// passes; returns whether it held.
    pub async fn until(&self, mut complete: impl FnMut() -> bool) -> bool {
        loop {
            if complete() {
                return true;
            }
            if tokio::time::timeout_at(self.deadline, self.notify.notified())
                .await
                .is_err()
            {
                return complete();
            }
        }
    }

    /// Waits for the next wake-up or the deadline; false at the deadline.
    pub async fn woken(&self) -> bool {
        tokio::time::timeout_at(self.deadline, self.notify.notified())
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_wake_on_a_watched_partition_completes_the_wait() {
        let (a, b) = (Arc::new(Watchers::default()), Watchers::default());
        let done = Arc::new(AtomicBool::new(false));
        let delayed = Delayed::new(Instant::now() + Duration::from_secs(30), [&*a, &b]);
        let waker = {
            let (a, done) = (Arc::clone(&a), Arc::clone(&done));
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                done.store(true, Ordering::Release);
                a.wake();
            })
        };
        let started = Instant::now();
        assert!(delayed.until(|| done.load(Ordering::Acquire)).await);
        assert!(started.elapsed() < Duration::from_secs(1));
        waker.await.expect("waker");
    }

    #[tokio::test]
    async fn an_unwatched_partition_does_not_wake_and_the_deadline_ends_the_wait() {
        let (watched, other) = (Watchers::default(), Watchers::default());
        let delayed = Delayed::new(Instant::now() + Duration::from_millis(200), [&watched]);
        other.wake();
        let mut checks = 0;
        let started = Instant::now();
        assert!(
            !delayed
                .until(|| {
                    checks += 1;
                    false
                })
                .await
        );
        // Checked on entry and at the deadline only: the other partition woke nobody here.
        assert_eq!(checks, 2);
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn a_wake_between_checks_is_not_lost() {
        let watchers = Watchers::default();
        let delayed = Delayed::new(Instant::now() + Duration::from_secs(30), [&watchers]);
        let mut first = true;
        let started = std::time::Instant::now();
        let done = delayed
            .until(|| {
                if first {
                    // The partition moves after the check, before the wait begins.
                    first = false;
                    watchers.wake();
                    false
                } else {
                    true
                }
            })
            .await;
        assert!(done);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn ended_requests_are_pruned() {
        let watchers = Watchers::default();
        for _ in 0..1000 {
            let _ = Delayed::new(Instant::now(), [&watchers]);
        }
        let kept = watchers
            .waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        assert!(kept <= 2 * PRUNE_FROM, "{kept} dead waiters kept");
        assert!(watchers.is_empty());
        let live = Delayed::new(Instant::now(), [&watchers]);
        assert_eq!(watchers.len(), 1);
        drop(live);
        watchers.wake();
        assert_eq!(
            watchers
                .waiters
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len(),
            0
        );
    }
}
