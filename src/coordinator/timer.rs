//! Timers keyed by deadline: scheduling, moving or cancelling one is O(log n) and firing costs
//! O(expired), so a request that moves one deadline never makes the coordinator look at every
//! group.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// At most one deadline per key (a group id).
#[derive(Debug, Default)]
pub struct Timers {
    by_deadline: BTreeSet<(Instant, String)>,
    by_key: HashMap<String, Instant>,
}

impl Timers {
    /// Sets (or moves, or with `None` cancels) the deadline of `key`.
    pub fn set(&mut self, key: &str, deadline: Option<Instant>) {
        if self.by_key.get(key).copied() == deadline {
            return;
        }
        if let Some(previous) = self.by_key.remove(key) {
            self.by_deadline.remove(&(previous, key.to_owned()));
        }
        if let Some(deadline) = deadline {
            self.by_key.insert(key.to_owned(), deadline);
            self.by_deadline.insert((deadline, key.to_owned()));
        }
    }

    pub fn deadline(&self, key: &str) -> Option<Instant> {
        self.by_key.get(key).copied()
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.by_deadline.first().map(|(deadline, _)| *deadline)
    }

    /// Removes and returns the keys whose deadline is at or before `now`, earliest first.
    pub fn expired(&mut self, now: Instant) -> Vec<String> {
        let mut keys = Vec::new();
        while let Some((deadline, _)) = self.by_deadline.first() {
            if *deadline > now {
                break;
            }
            let Some((_, key)) = self.by_deadline.pop_first() else {
                break;
            };
            self.by_key.remove(&key);
            keys.push(key);
        }
        keys
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_expired_keys_fire_and_moving_a_deadline_replaces_it() {
        let base = Instant::now();
        let at = |ms| base + Duration::from_millis(ms);
        let mut timers = Timers::default();
        timers.set("a", Some(at(30)));
        timers.set("b", Some(at(10)));
        timers.set("c", Some(at(20)));
        timers.set("a", Some(at(5)));
        timers.set("c", None);
        assert_eq!(timers.len(), 2);
        assert_eq!(timers.next(), Some(at(5)));
        assert_eq!(timers.expired(at(4)), Vec::<String>::new());
        assert_eq!(timers.expired(at(10)), vec!["a".to_owned(), "b".to_owned()]);
        assert!(timers.is_empty());
        assert_eq!(timers.next(), None);
    }
}
