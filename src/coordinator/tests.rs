//! The runtime on a toy shard (named counters), a `MemoryWriter` and a `ManualClock`.

use std::collections::BTreeMap;

use super::*;

type Record = (String, Option<i64>);

#[derive(Default)]
struct Counters {
    values: BTreeMap<String, i64>,
    fired: Vec<String>,
    unloads: usize,
}

impl Counters {
    /// The live write path: replay, then hand the record and its undo to the runtime.
    fn set(&mut self, ctx: &mut Ctx<Counters>, key: &str, value: Option<i64>) {
        let undo = (key.to_owned(), self.values.get(key).copied());
        let record = (key.to_owned(), value);
        self.replay(&record, ctx.now);
        ctx.written(record, undo);
    }
}

impl Shard for Counters {
    type Record = Record;

    fn replay(&mut self, (key, value): &Record, _now: Now) {
        match value {
            Some(value) => self.values.insert(key.clone(), *value),
            None => self.values.remove(key),
        };
    }

    fn key_of(record: &Record) -> &str {
        &record.0
    }

    fn encode((key, value): &Record) -> writer::EncodedRecord {
        (
            key.as_bytes().to_vec(),
            value.map(|v| v.to_be_bytes().to_vec()),
        )
    }

    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<Record>, String> {
        let key = String::from_utf8(key.to_vec()).map_err(|e| e.to_string())?;
        let value = value
            .map(|v| v.try_into().map(i64::from_be_bytes))
            .transpose()
            .map_err(|_| "value is not 8 bytes".to_owned())?;
        Ok(Some((key, value)))
    }

    fn loaded(&mut self, _ctx: &mut Ctx<Self>) {}

    fn timer(&mut self, key: &str, ctx: &mut Ctx<Self>) {
        self.fired.push(key.to_owned());
        let next = self.values.get(key).copied().unwrap_or(0) + 1;
        self.set(ctx, key, Some(next));
    }

    fn unload(&mut self) {
        self.unloads += 1;
    }

    fn rolled_back(&mut self, _key: &str, _ctx: &mut Ctx<Self>) {}

    fn check(&self, key: &str) -> Result<(), String> {
        match self.values.get(key) {
            Some(value) if *value < 0 => Err(format!("{key} is negative")),
            _ => Ok(()),
        }
    }
}

struct Fixture {
    clock: Arc<ManualClock>,
    writer: Arc<MemoryWriter>,
    runtime: Runtime<Counters>,
    shard: Arc<ShardHandle<Counters>>,
}

fn fixture() -> Fixture {
    let clock = Arc::new(ManualClock::new());
    let writer = MemoryWriter::new();
    let runtime = Runtime::new(
        RuntimeConfig::for_tests("test"),
        Arc::clone(&clock) as Arc<dyn Clock>,
    );
    let shard = runtime
        .start_shard(
            0,
            0,
            Arc::clone(&writer) as Arc<dyn PartitionWriter>,
            Arc::new(Counters::default),
        )
        .expect("a new shard");
    Fixture {
        clock,
        writer,
        runtime,
        shard,
    }
}

fn value(shard: &ShardHandle<Counters>, key: &str) -> Option<i64> {
    shard.inspect(|s| s.values.get(key).copied())
}

#[tokio::test]
async fn a_write_is_answered_once_committed_and_loading_replays_the_same_records() {
    let f = fixture();
    assert_eq!(
        f.shard.write(|_, _| ()).await,
        Err(KafkaError::CoordinatorLoadInProgress)
    );
    f.shard.load().expect("load");
    f.writer.set_manual_commit(true);
    let shard = Arc::clone(&f.shard);
    let write = tokio::spawn(async move {
        shard
            .write(|s, ctx| {
                s.set(ctx, "a", Some(1));
                s.set(ctx, "b", Some(2));
                "done"
            })
            .await
    });
    tokio::task::yield_now().await;
    // Appended and replayed, not yet committed: a read of "a" that must see its writes waits.
    assert_eq!(value(&f.shard, "a"), Some(1));
    assert!(!write.is_finished());
    let shard = Arc::clone(&f.shard);
    let read = tokio::spawn(async move { shard.read_committed("a", |s| s.values["a"]).await });
    tokio::task::yield_now().await;
    assert!(!read.is_finished());
    f.writer.commit_all();
    assert_eq!(write.await.unwrap(), Ok("done"));
    assert_eq!(read.await.unwrap(), Ok(1));

    // A second shard on the same log replays to the same state.
    let reloaded = f
        .runtime
        .start_shard(
            0,
            1,
            Arc::clone(&f.writer) as Arc<dyn PartitionWriter>,
            Arc::new(Counters::default),
        )
        .expect("a new epoch");
    assert_eq!(
        f.shard.write(|_, _| ()).await,
        Err(KafkaError::NotCoordinator)
    );
    assert_eq!(f.shard.inspect(|s| s.unloads), 1);
    let loaded = reloaded.load().expect("load");
    assert_eq!(loaded.records, 2);
    assert_eq!(
        reloaded.inspect(|s| s.values.clone()),
        f.shard.inspect(|s| s.values.clone())
    );
}

#[tokio::test]
async fn a_failed_append_rolls_the_state_back_and_tells_the_continuations() {
    let f = fixture();
    f.shard.load().expect("load");
    f.shard
        .write(|s, ctx| s.set(ctx, "a", Some(1)))
        .await
        .unwrap();
    f.writer.fail_appends(Some(KafkaError::NotLeaderOrFollower));
    let told = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&told);
    let outcome = f
        .shard
        .write(move |s, ctx| {
            s.set(ctx, "a", Some(5));
            s.set(ctx, "a", Some(6));
            s.set(ctx, "new", Some(7));
            ctx.after_commit(move |_, _, result| *seen.lock().unwrap() = Some(result));
        })
        .await;
    assert_eq!(outcome, Err(KafkaError::NotLeaderOrFollower));
    assert_eq!(value(&f.shard, "a"), Some(1));
    assert_eq!(value(&f.shard, "new"), None);
    assert_eq!(
        *told.lock().unwrap(),
        Some(Err(KafkaError::NotLeaderOrFollower))
    );
    assert_eq!(f.writer.records().len(), 1);
}

#[tokio::test]
async fn an_appended_write_that_is_not_committed_is_an_error_and_stays() {
    let f = fixture();
    f.shard.load().expect("load");
    f.writer.set_manual_commit(true);
    let outcome = f.shard.write(|s, ctx| s.set(ctx, "a", Some(1))).await;
    // Timed out: the client hears it; the records are in this leader's log, so is the state.
    assert_eq!(outcome, Err(KafkaError::RequestTimedOut));
    assert_eq!(value(&f.shard, "a"), Some(1));
    f.writer.fail_commits(Some(KafkaError::NotEnoughReplicas));
    assert_eq!(
        f.shard.write(|s, ctx| s.set(ctx, "a", Some(2))).await,
        Err(KafkaError::NotEnoughReplicas)
    );
}

#[tokio::test]
async fn only_expired_timers_fire_and_a_failed_timer_write_retries() {
    let f = fixture();
    f.shard.load().expect("load");
    let base = f.clock.now().instant;
    f.shard
        .write(|_, ctx| {
            for i in 0..1_000u64 {
                ctx.schedule(format!("k{i}"), Some(base + Duration::from_millis(10 + i)));
            }
        })
        .await
        .unwrap();
    assert_eq!(f.shard.timer_count(), 1_000);
    f.clock.advance_ms(12);
    let next = f.shard.fire_timers();
    assert_eq!(
        f.shard.inspect(|s| s.fired.clone()),
        vec!["k0".to_owned(), "k1".into(), "k2".into()]
    );
    assert_eq!(next, Some(base + Duration::from_millis(13)));
    assert_eq!(f.shard.timer_count(), 997);
    assert_eq!(value(&f.shard, "k1"), Some(1));

    f.writer.fail_appends(Some(KafkaError::NotLeaderOrFollower));
    f.clock.advance_ms(1);
    f.shard.fire_timers();
    // The timer ran, its write was refused and rolled back; it comes again after the retry.
    assert_eq!(value(&f.shard, "k3"), None);
    f.writer.fail_appends(None);
    f.clock.advance_ms(999);
    f.shard.fire_timers();
    assert_eq!(
        value(&f.shard, "k3"),
        None,
        "the retry waits its full second"
    );
    f.clock.advance_ms(1);
    f.shard.fire_timers();
    assert_eq!(value(&f.shard, "k3"), Some(1));
}

#[tokio::test]
async fn a_broken_invariant_fences_the_shard() {
    let f = fixture();
    f.shard.load().expect("load");
    f.shard
        .write(|s, ctx| s.set(ctx, "a", Some(-1)))
        .await
        .unwrap();
    assert!(!f.shard.is_loaded());
    assert_eq!(
        f.shard.write(|s, ctx| s.set(ctx, "b", Some(1))).await,
        Err(KafkaError::NotCoordinator)
    );
    assert_eq!(f.shard.read(|_| ()), Err(KafkaError::NotCoordinator));
    // Reloading from the log (what the timer task does) serves it again.
    assert!(f.shard.fence_to_reload());
    f.shard.load().expect("reload");
    assert!(f.shard.is_loaded());
}

#[tokio::test]
async fn appends_are_fenced_by_the_leader_epoch_the_shard_loaded_at() {
    let f = fixture();
    f.shard.load().expect("load");
    f.writer.set_leader_epoch(3);
    assert_eq!(
        f.shard.write(|s, ctx| s.set(ctx, "a", Some(1))).await,
        Err(KafkaError::NotLeaderOrFollower)
    );
    assert_eq!(value(&f.shard, "a"), None);
}

#[tokio::test]
async fn a_read_behind_a_write_that_leadership_took_away_is_told_to_find_the_coordinator() {
    let f = fixture();
    f.shard.load().expect("load");
    f.writer.set_manual_commit(true);
    f.writer.fail_commits(Some(KafkaError::NotLeaderOrFollower));
    assert_eq!(
        f.shard.write(|s, ctx| s.set(ctx, "a", Some(1))).await,
        Err(KafkaError::NotLeaderOrFollower)
    );
    assert_eq!(
        f.shard.read_committed("a", |s| s.values["a"]).await,
        Err(KafkaError::NotCoordinator)
    );
    f.writer.fail_commits(Some(KafkaError::RequestTimedOut));
    assert_eq!(
        f.shard.read_committed("a", |s| s.values["a"]).await,
        Err(KafkaError::CoordinatorLoadInProgress)
    );
    // Once the high watermark passes the write, it is read.
    f.writer.commit_all();
    assert_eq!(f.shard.read_committed("a", |s| s.values["a"]).await, Ok(1));
}
