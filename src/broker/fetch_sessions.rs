//! Incremental fetch sessions (KIP-227): a consumer or follower names its partitions once, then
//! sends only what changed; the broker answers only partitions with news (records, a moved
//! high watermark or log start, an error). The cache is bounded
//! (`max.incremental.fetch.session.cache.slots`); when full, a session idle long enough makes
//! room, else the fetch is served without a session (id 0).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid as KafkaUuid;

use crate::protocol::errors;

/// `max.incremental.fetch.session.cache.slots`
const SESSIONS_MAX: usize = 1000;
/// Sessions unused this long may be evicted for new ones.
const SESSION_IDLE_EVICT: Duration = Duration::from_secs(120);

/// A partition a fetch names, with what the client asked of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub topic: String,
    pub topic_id: KafkaUuid,
    pub partition: i32,
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    pub current_leader_epoch: i32,
    /// A follower's epoch of its last fetched batch (v12+; -1 when unknown).
    pub last_fetched_epoch: i32,
}

impl Wanted {
    /// Whether `self` names the same partition; from Fetch v13 on topics go by id.
    fn same_partition(
        &self,
        topic: &str,
        topic_id: KafkaUuid,
        partition: i32,
        by_id: bool,
    ) -> bool {
        self.partition == partition
            && if by_id {
                self.topic_id == topic_id
            } else {
                self.topic == topic
            }
    }
}

/// What a session last told the client of a partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reported {
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

#[derive(Debug)]
pub(crate) struct Session {
    next_epoch: i32,
    /// In the order the client added them (the response order).
    partitions: Vec<(Wanted, Option<Reported>)>,
    last_used: Instant,
}

#[derive(Debug, Default)]
pub struct FetchSessionCache {
    sessions: Mutex<HashMap<i32, Session>>,
    next_id: Mutex<i32>,
}

impl FetchSessionCache {
    fn new_id(&self) -> i32 {
        let mut next = self.next_id.lock().unwrap_or_else(|p| p.into_inner());
        *next = if *next >= i32::MAX - 1 { 1 } else { *next + 1 };
        *next
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn len(&self) -> usize {
        self.sessions().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A new session over `requested`: its id, or 0 when the cache is full of sessions in use
    /// (the fetch is then served without one).
    pub(crate) fn create(&self, requested: &[Wanted], now: Instant) -> i32 {
        let mut sessions = self.sessions();
        if sessions.len() >= SESSIONS_MAX {
            let evict = sessions
                .iter()
                .filter(|(_, s)| now.saturating_duration_since(s.last_used) > SESSION_IDLE_EVICT)
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| *id);
            match evict {
                Some(id) => {
                    sessions.remove(&id);
                }
                None => return 0,
            }
        }
        let id = self.new_id();
        sessions.insert(
            id,
            Session {
                next_epoch: 1,
                partitions: requested.iter().map(|w| (w.clone(), None)).collect(),
                last_used: now,
            },
        );
        id
    }

    /// Ends a session (epoch -1).
    pub(crate) fn close(&self, id: i32) {
        self.sessions().remove(&id);
    }

    /// An incremental fetch at `epoch`: drops the `forgotten` partitions, adds or updates the
    /// `requested` ones, and returns every partition of the session with what it was last
    /// told. FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH otherwise.
    pub(crate) fn update(
        &self,
        id: i32,
        epoch: i32,
        forgotten: &[(String, KafkaUuid, i32)],
        requested: &[Wanted],
        by_topic_id: bool,
        now: Instant,
    ) -> Result<Vec<(Wanted, Option<Reported>)>, i16> {
        let mut sessions = self.sessions();
        let session = sessions
            .get_mut(&id)
            .ok_or(errors::FETCH_SESSION_ID_NOT_FOUND)?;
        if session.next_epoch != epoch {
            return Err(errors::INVALID_FETCH_SESSION_EPOCH);
        }
        for (topic, topic_id, partition) in forgotten {
            session
                .partitions
                .retain(|(w, _)| !w.same_partition(topic, *topic_id, *partition, by_topic_id));
        }
        for wanted in requested {
            match session
                .partitions
                .iter_mut()
                .find(|(w, _)| w.partition == wanted.partition && w.topic == wanted.topic)
            {
                Some((w, _)) => *w = wanted.clone(),
                None => session.partitions.push((wanted.clone(), None)),
            }
        }
        session.last_used = now;
        Ok(session.partitions.clone())
    }

    /// After answering: what each partition was told (`Some` for those reported), and, for an
    /// incremental fetch, the epoch the next one must carry. The partitions `served` records
    /// move to the back of the session, as in Kafka's `IncrementalFetchContext`: a response's
    /// `max_bytes` goes to partitions in session order, and an incremental request names no
    /// order of its own, so without the move a busy first partition would starve the rest.
    pub(crate) fn answered<'a>(
        &self,
        id: i32,
        incremental: bool,
        reported: impl Iterator<Item = (&'a Wanted, &'a Reported)>,
        served: impl Iterator<Item = &'a Wanted>,
        now: Instant,
    ) {
        let mut sessions = self.sessions();
        let Some(session) = sessions.get_mut(&id) else {
            return;
        };
        if incremental {
            session.next_epoch = session.next_epoch.checked_add(1).unwrap_or(1);
        }
        for (w, now_reported) in reported {
            if let Some((_, before)) = session
                .partitions
                .iter_mut()
                .find(|(s, _)| s.partition == w.partition && s.topic == w.topic)
            {
                *before = Some(now_reported.clone());
            }
        }
        for w in served {
            if let Some(at) = session
                .partitions
                .iter()
                .position(|(s, _)| s.partition == w.partition && s.topic == w.topic)
            {
                let moved = session.partitions.remove(at);
                session.partitions.push(moved);
            }
        }
        session.last_used = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(topic: &str, partition: i32, fetch_offset: i64) -> Wanted {
        Wanted {
            topic: topic.into(),
            topic_id: KafkaUuid::from_u128(topic.len() as u128),
            partition,
            fetch_offset,
            partition_max_bytes: 1 << 20,
            current_leader_epoch: -1,
            last_fetched_epoch: -1,
        }
    }

    #[test]
    fn an_incremental_fetch_updates_adds_and_forgets_partitions_in_order() {
        let cache = FetchSessionCache::default();
        let t0 = Instant::now();
        let id = cache.create(&[wanted("a", 0, 0), wanted("a", 1, 0)], t0);
        assert!(id > 0);
        cache.answered(
            id,
            false,
            [(&wanted("a", 0, 0), &Reported::default())].into_iter(),
            std::iter::empty(),
            t0,
        );
        let partitions = cache
            .update(
                id,
                1,
                &[("a".into(), KafkaUuid::nil(), 1)],
                &[wanted("a", 0, 5), wanted("b", 0, 0)],
                false,
                t0,
            )
            .expect("session");
        let names: Vec<(&str, i32, i64)> = partitions
            .iter()
            .map(|(w, _)| (w.topic.as_str(), w.partition, w.fetch_offset))
            .collect();
        assert_eq!(names, [("a", 0, 5), ("b", 0, 0)]);
        assert_eq!(partitions[0].1, Some(Reported::default()));
        assert_eq!(partitions[1].1, None);
    }

    #[test]
    fn partitions_that_returned_records_move_to_the_back_of_the_session() {
        let cache = FetchSessionCache::default();
        let t0 = Instant::now();
        let all = [wanted("a", 0, 0), wanted("a", 1, 0), wanted("a", 2, 0)];
        let id = cache.create(&all, t0);
        cache.answered(id, false, std::iter::empty(), [&all[0]].into_iter(), t0);
        let order: Vec<i32> = cache
            .update(id, 1, &[], &[], false, t0)
            .expect("session")
            .iter()
            .map(|(w, _)| w.partition)
            .collect();
        assert_eq!(order, [1, 2, 0]);
        cache.answered(
            id,
            true,
            std::iter::empty(),
            [&all[2], &all[1]].into_iter(),
            t0,
        );
        let order: Vec<i32> = cache
            .update(id, 2, &[], &[], false, t0)
            .expect("session")
            .iter()
            .map(|(w, _)| w.partition)
            .collect();
        assert_eq!(order, [0, 2, 1], "in the order they were served");
    }

    #[test]
    fn epochs_must_follow_each_answer_and_closed_sessions_are_gone() {
        let cache = FetchSessionCache::default();
        let now = Instant::now();
        let id = cache.create(&[wanted("a", 0, 0)], now);
        assert_eq!(
            cache.update(id, 2, &[], &[], false, now),
            Err(errors::INVALID_FETCH_SESSION_EPOCH)
        );
        assert!(cache.update(id, 1, &[], &[], false, now).is_ok());
        cache.answered(id, true, std::iter::empty(), std::iter::empty(), now);
        assert_eq!(
            cache.update(id, 1, &[], &[], false, now),
            Err(errors::INVALID_FETCH_SESSION_EPOCH),
            "epoch 1 was used"
        );
        assert!(cache.update(id, 2, &[], &[], false, now).is_ok());
        cache.close(id);
        assert_eq!(
            cache.update(id, 2, &[], &[], false, now),
            Err(errors::FETCH_SESSION_ID_NOT_FOUND)
        );
    }

    #[test]
    fn a_full_cache_evicts_only_idle_sessions() {
        let cache = FetchSessionCache::default();
        let t0 = Instant::now();
        for _ in 0..SESSIONS_MAX {
            assert!(cache.create(&[wanted("a", 0, 0)], t0) > 0);
        }
        // All in use: served without a session.
        assert_eq!(
            cache.create(&[wanted("a", 0, 0)], t0 + Duration::from_secs(1)),
            0
        );
        assert_eq!(cache.len(), SESSIONS_MAX);
        // Later than the idle limit: one makes room.
        let later = t0 + SESSION_IDLE_EVICT + Duration::from_secs(1);
        assert!(cache.create(&[wanted("a", 0, 0)], later) > 0);
        assert_eq!(cache.len(), SESSIONS_MAX);
    }
}
