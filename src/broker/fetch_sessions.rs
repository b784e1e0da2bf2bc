//! Incremental fetch sessions (KIP-227): a consumer or follower names its partitions once, then
//! sends only what changed; the broker answers only partitions with news (records, a moved
//! high watermark or log start, an error). The cache is bounded
//! (`max.incremental.fetch.session.cache.slots`); when full, a session idle long enough makes
//! room, else the fetch is served without a session (id 0).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid as KafkaUuid;

use crate::protocol::errors::KafkaError;

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
    /// The key a session knows the partition by once it is in the session (the topic's name).
    fn key(&self) -> (&str, i32) {
        (self.topic.as_str(), self.partition)
    }
}

/// What a session last told the client of a partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reported {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

#[derive(Debug)]
pub(crate) struct Session {
    next_epoch: i32,
    /// In serving order (the response order): the order the client added them, but for
    /// those that returned records, which move to the back in the order they were served.
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
    ) -> Result<Vec<(Wanted, Option<Reported>)>, KafkaError> {
        let mut sessions = self.sessions();
        let session = sessions
            .get_mut(&id)
            .ok_or(KafkaError::FetchSessionIdNotFound)?;
        if session.next_epoch != epoch {
            return Err(KafkaError::InvalidFetchSessionEpoch);
        }
        // One pass over the session for each kind of change: these run under the lock over
        // every session, and a session can hold thousands of partitions.
        if !forgotten.is_empty() {
            if by_topic_id {
                let forgotten: HashSet<(KafkaUuid, i32)> =
                    forgotten.iter().map(|(_, id, p)| (*id, *p)).collect();
                session
                    .partitions
                    .retain(|(w, _)| !forgotten.contains(&(w.topic_id, w.partition)));
            } else {
                let forgotten: HashSet<(&str, i32)> =
                    forgotten.iter().map(|(t, _, p)| (t.as_str(), *p)).collect();
                session
                    .partitions
                    .retain(|(w, _)| !forgotten.contains(&w.key()));
            }
        }
        if !requested.is_empty() {
            // Each partition's last mention in the request, by its index there.
            let latest: HashMap<(&str, i32), usize> = requested
                .iter()
                .enumerate()
                .map(|(at, w)| (w.key(), at))
                .collect();
            let mut updated = vec![false; requested.len()];
            for (w, _) in &mut session.partitions {
                if let Some(&at) = latest.get(&w.key()) {
                    *w = requested[at].clone();
                    updated[at] = true;
                }
            }
            for (at, w) in requested.iter().enumerate() {
                if !updated[at] && latest.get(&w.key()) == Some(&at) {
                    session.partitions.push((w.clone(), None));
                }
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
        // Linear in the session's partitions, and the maps built before taking the lock: it
        // is held over every session, and a session can hold thousands of partitions.
        let reported: HashMap<(&str, i32), &Reported> =
            reported.map(|(w, r)| (w.key(), r)).collect();
        let mut served_rank: HashMap<(&str, i32), usize> = HashMap::new();
        for w in served {
            let rank = served_rank.len();
            served_rank.entry(w.key()).or_insert(rank);
        }
        let mut sessions = self.sessions();
        let Some(session) = sessions.get_mut(&id) else {
            return;
        };
        if incremental {
            session.next_epoch = session.next_epoch.checked_add(1).unwrap_or(1);
        }
        if !reported.is_empty() {
            for (w, before) in &mut session.partitions {
                if let Some(now_reported) = reported.get(&w.key()) {
                    *before = Some((*now_reported).clone());
                }
            }
        }
        if !served_rank.is_empty() {
            let (mut moved, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut session.partitions)
                .into_iter()
                .partition(|(w, _)| served_rank.contains_key(&w.key()));
            // Stable: a partition named twice keeps its place among its namesakes.
            moved.sort_by_key(|(w, _)| served_rank.get(&w.key()).copied());
            session.partitions = kept;
            session.partitions.append(&mut moved);
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
    fn thousands_of_partitions_are_reordered_reported_and_updated_in_one_pass() {
        const PARTITIONS: i32 = 20_000;
        let cache = FetchSessionCache::default();
        let t0 = Instant::now();
        let all: Vec<Wanted> = (0..PARTITIONS).map(|p| wanted("a", p, 0)).collect();
        let id = cache.create(&all, t0);
        // Every even partition served, the highest first; every partition reported.
        let served: Vec<&Wanted> = all.iter().filter(|w| w.partition % 2 == 0).rev().collect();
        let reported: Vec<(Wanted, Reported)> = all
            .iter()
            .map(|w| {
                let high_watermark = i64::from(w.partition);
                let r = Reported {
                    high_watermark,
                    ..Reported::default()
                };
                (w.clone(), r)
            })
            .collect();
        let started = Instant::now();
        cache.answered(
            id,
            false,
            reported.iter().map(|(w, r)| (w, r)),
            served.into_iter(),
            t0,
        );
        // Every partition kept gets a new fetch offset; ten are new.
        let requested: Vec<Wanted> = (0..PARTITIONS + 10)
            .filter(|p| p % 4 != 1 || *p >= PARTITIONS)
            .map(|p| wanted("a", p, 7))
            .collect();
        let forgotten: Vec<(String, KafkaUuid, i32)> = (0..PARTITIONS)
            .filter(|p| p % 4 == 1)
            .map(|p| ("a".to_string(), KafkaUuid::nil(), p))
            .collect();
        let partitions = cache
            .update(id, 1, &forgotten, &requested, false, t0)
            .expect("session");
        let elapsed = started.elapsed();
        let odd_left = (0..PARTITIONS).filter(|p| p % 2 == 1 && p % 4 != 1);
        let evens_as_served = (0..PARTITIONS).filter(|p| p % 2 == 0).rev();
        let expected: Vec<i32> = odd_left
            .chain(evens_as_served)
            .chain(PARTITIONS..PARTITIONS + 10)
            .collect();
        let order: Vec<i32> = partitions.iter().map(|(w, _)| w.partition).collect();
        let first_difference = order.iter().zip(&expected).position(|(a, b)| a != b);
        assert_eq!(
            (order.len(), first_difference),
            (expected.len(), None),
            "the session's order"
        );
        for (w, before) in &partitions {
            assert_eq!(w.fetch_offset, 7, "partition {} updated", w.partition);
            let expected = (w.partition < PARTITIONS).then(|| Reported {
                high_watermark: i64::from(w.partition),
                ..Reported::default()
            });
            assert_eq!(*before, expected, "partition {}", w.partition);
        }
        // Quadratic work over 20 000 partitions takes seconds even optimised; this bound
        // only catches that, with room for a slow debug build on a busy machine.
        assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    }

    #[test]
    fn epochs_must_follow_each_answer_and_closed_sessions_are_gone() {
        let cache = FetchSessionCache::default();
        let now = Instant::now();
        let id = cache.create(&[wanted("a", 0, 0)], now);
        assert_eq!(
            cache.update(id, 2, &[], &[], false, now),
            Err(KafkaError::InvalidFetchSessionEpoch)
        );
        assert!(cache.update(id, 1, &[], &[], false, now).is_ok());
        cache.answered(id, true, std::iter::empty(), std::iter::empty(), now);
        assert_eq!(
            cache.update(id, 1, &[], &[], false, now),
            Err(KafkaError::InvalidFetchSessionEpoch),
            "epoch 1 was used"
        );
        assert!(cache.update(id, 2, &[], &[], false, now).is_ok());
        cache.close(id);
        assert_eq!(
            cache.update(id, 2, &[], &[], false, now),
            Err(KafkaError::FetchSessionIdNotFound)
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
