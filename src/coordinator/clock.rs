//! The time coordinators act at, injected so their logic runs in unit tests without a node:
//! a monotonic instant for deadlines and the wall clock for what is stored (commit and state
//! timestamps).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The time a request or a timer acts at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub instant: Instant,
    pub wall_ms: i64,
}

impl Now {
    /// `duration` later, on both clocks.
    pub fn after(self, duration: Duration) -> Now {
        Now {
            instant: self.instant + duration,
            wall_ms: self.wall_ms.saturating_add(duration.as_millis() as i64),
        }
    }
}

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Now;
}

/// The machine's clocks.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Now {
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Now {
            instant: Instant::now(),
            wall_ms,
        }
    }
}

/// A clock that moves only when told (unit tests).
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Now>,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock {
            now: Mutex::new(Now {
                instant: Instant::now(),
                wall_ms: 1_700_000_000_000,
            }),
        }
    }

    /// Moves both clocks `ms` forward; the new time.
    pub fn advance_ms(&self, ms: u64) -> Now {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now = now.after(Duration::from_millis(ms));
        *now
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Now {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}
