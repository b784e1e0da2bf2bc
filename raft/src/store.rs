//! The quorum's storage on RocksDB: the Raft log, the vote, and the state machine.
//!
//! Column families:
//! - `logs`: entries by index (8-byte big-endian key), bincode-encoded;
//! - `meta`: `vote`, `committed`, `last_purged`;
//! - `state`: `snapshot` (its meta and the encoded `MetadataImage`).
//!
//! Durability. Unlike openraft's RocksDB example, every write Raft relies on is synced before
//! it is acknowledged: `save_vote` returns after a synced write, appended entries are synced
//! before the `LogFlushed` callback fires, truncation is synced (a truncated entry must not
//! reappear), and `last_purged` is synced before the purge deletes anything. The state
//! machine lives in memory: on start it is rebuilt from the last snapshot, and openraft
//! re-applies the log from there up to the saved committed index. Snapshots are written
//! synced before they are reported built or installed.
//!
//! fsyncs run on tokio's blocking pool, not on the runtime's two worker threads.

// openraft's traits fix the error type (`StorageError`, a large enum); helpers return it too.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, RwLock};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftLogReader, RaftSnapshotBuilder, StorageIOError};
use rocksdb::{
    ColumnFamilyDescriptor, DB, Direction, IteratorMode, Options, WriteBatch, WriteOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::image::{MetadataDelta, MetadataImage};
use crate::records::MetadataResponse;
use crate::types::{
    Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig, Vote,
};

const CF_LOGS: &str = "logs";
const CF_META: &str = "meta";
const CF_STATE: &str = "state";
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";
const KEY_SNAPSHOT: &[u8] = b"snapshot";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("opening the metadata store at {path}: {source}")]
    Open {
        path: String,
        source: rocksdb::Error,
    },
    #[error("the metadata store's snapshot is unreadable: {0}")]
    CorruptSnapshot(String),
}

/// Opens (creating if needed) the store under `path`.
pub fn open(path: &Path) -> Result<(LogStore, StateMachine), StoreError> {
    let mut options = Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    let families = [CF_LOGS, CF_META, CF_STATE]
        .map(|name| ColumnFamilyDescriptor::new(name, Options::default()));
    let db =
        DB::open_cf_descriptors(&options, path, families).map_err(|source| StoreError::Open {
            path: path.display().to_string(),
            source,
        })?;
    let db = Arc::new(db);
    let state_machine = StateMachine::load(Arc::clone(&db))?;
    Ok((LogStore { db }, state_machine))
}

fn synced() -> WriteOptions {
    let mut options = WriteOptions::default();
    options.set_sync(true);
    options
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn read_error(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read(&e).into()
}
fn write_error(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write(&e).into()
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serialize(value).expect("in-memory values always encode")
}

fn decode<T: for<'a> Deserialize<'a>>(bytes: &[u8]) -> Result<T, StorageError> {
    bincode::deserialize(bytes).map_err(read_error)
}

/// Runs blocking RocksDB work (an fsync) off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(write_error)?
}

#[derive(Debug, Clone)]
pub struct LogStore {
    db: Arc<DB>,
}

impl LogStore {
    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("column families are created at open")
    }

    fn get_meta<T: for<'a> Deserialize<'a>>(&self, key: &[u8]) -> Result<Option<T>, StorageError> {
        match self.db.get_cf(self.cf(CF_META), key).map_err(read_error)? {
            Some(bytes) => Ok(Some(decode(&bytes)?)),
            None => Ok(None),
        }
    }

    async fn put_meta_synced<T: Serialize>(
        &self,
        key: &'static [u8],
        value: &T,
    ) -> Result<(), StorageError> {
        let store = self.clone();
        let bytes = encode(value);
        blocking(move || {
            store
                .db
                .put_cf_opt(store.cf(CF_META), key, bytes, &synced())
                .map_err(write_error)
        })
        .await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => i.saturating_add(1),
            Bound::Excluded(i) => *i,
            Bound::Unbounded => u64::MAX,
        };
        let mut entries = Vec::new();
        let iterator = self.db.iterator_cf(
            self.cf(CF_LOGS),
            IteratorMode::From(&index_key(start), Direction::Forward),
        );
        for item in iterator {
            let (key, value) = item.map_err(read_error)?;
            let index = u64::from_be_bytes(
                key.as_ref()
                    .try_into()
                    .map_err(|_| read_error(std::io::Error::other("bad log key")))?,
            );
            if index >= end {
                break;
            }
            entries.push(decode(&value)?);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.get_meta(KEY_LAST_PURGED)?;
        let last = self
            .db
            .iterator_cf(self.cf(CF_LOGS), IteratorMode::End)
            .next();
        let last_log_id = match last {
            Some(item) => {
                let (_, value) = item.map_err(read_error)?;
                Some(decode::<Entry>(&value)?.log_id)
            }
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.put_meta_synced(KEY_VOTE, vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.get_meta(KEY_VOTE)
    }

    /// Not synced: the committed index only tells a restarted node how far it may re-apply
    /// without waiting for the leader; losing its latest value loses nothing.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.db
            .put_cf(self.cf(CF_META), KEY_COMMITTED, encode(&committed))
            .map_err(write_error)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.get_meta::<Option<LogId>>(KEY_COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::default();
        for entry in entries {
            batch.put_cf(
                self.cf(CF_LOGS),
                index_key(entry.log_id.index),
                encode(&entry),
            );
        }
        let store = self.clone();
        let written =
            blocking(move || store.db.write_opt(batch, &synced()).map_err(write_error)).await;
        // The callback says "durable": only after the synced write returned.
        callback.log_io_completed(
            written
                .as_ref()
                .map(|_| ())
                .map_err(|e| std::io::Error::other(e.to_string())),
        );
        written
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let store = self.clone();
        blocking(move || {
            let mut batch = WriteBatch::default();
            batch.delete_range_cf(
                store.cf(CF_LOGS),
                index_key(log_id.index),
                index_key(u64::MAX),
            );
            batch.delete_cf(store.cf(CF_LOGS), index_key(u64::MAX));
            store.db.write_opt(batch, &synced()).map_err(write_error)
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Record the purge point first: entries must never be missing below a log state that
        // claims them.
        self.put_meta_synced(KEY_LAST_PURGED, &log_id).await?;
        let end = log_id.index.saturating_add(1);
        self.db
            .delete_range_cf(self.cf(CF_LOGS), index_key(0), index_key(end))
            .map_err(write_error)
    }
}

/// A snapshot as stored: its meta and the encoded image.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

#[derive(Debug, Clone, Default)]
struct StateData {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    image: Arc<MetadataImage>,
}

/// The state machine: the current `MetadataImage`, published to subscribers after each batch
/// of entries is applied.
#[derive(Debug, Clone)]
pub struct StateMachine {
    db: Arc<DB>,
    data: Arc<RwLock<StateData>>,
    images: watch::Sender<Arc<MetadataImage>>,
    snapshots_built: Arc<std::sync::atomic::AtomicU64>,
    /// Serialises snapshot saves (compare-and-write).
    saving: Arc<std::sync::Mutex<()>>,
}

impl StateMachine {
    fn load(db: Arc<DB>) -> Result<Self, StoreError> {
        let cf = db.cf_handle(CF_STATE).expect("created at open");
        let mut data = StateData::default();
        if let Some(bytes) = db
            .get_cf(cf, KEY_SNAPSHOT)
            .map_err(|e| StoreError::CorruptSnapshot(e.to_string()))?
        {
            let stored: StoredSnapshot = bincode::deserialize(&bytes)
                .map_err(|e| StoreError::CorruptSnapshot(e.to_string()))?;
            let image = MetadataImage::decode(&stored.data)
                .map_err(|e| StoreError::CorruptSnapshot(e.to_string()))?;
            data = StateData {
                last_applied: stored.meta.last_log_id,
                membership: stored.meta.last_membership.clone(),
                image: Arc::new(image),
            };
        }
        let (images, _) = watch::channel(Arc::clone(&data.image));
        Ok(StateMachine {
            db,
            data: Arc::new(RwLock::new(data)),
            images,
            snapshots_built: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            saving: Arc::default(),
        })
    }

    /// Every image, as it is published. Nodes act on committed metadata only: an image is
    /// published once the entries it contains are applied, which openraft does only after
    /// they are committed.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.images.subscribe()
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        Arc::clone(&self.read().image)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, StateData> {
        self.data.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, StateData> {
        self.data.write().unwrap_or_else(|p| p.into_inner())
    }

    fn stored_snapshot(&self) -> Result<Option<StoredSnapshot>, StorageError> {
        let cf = self.db.cf_handle(CF_STATE).expect("created at open");
        match self.db.get_cf(cf, KEY_SNAPSHOT).map_err(read_error)? {
            Some(bytes) => Ok(Some(decode(&bytes)?)),
            None => Ok(None),
        }
    }

    /// Stores `snapshot` unless a newer one is stored already: openraft builds snapshots in a
    /// task of their own, so an install can land between a build's start and its save.
    async fn save_snapshot(&self, snapshot: StoredSnapshot) -> Result<(), StorageError> {
        let db = Arc::clone(&self.db);
        let saving = Arc::clone(&self.saving);
        blocking(move || {
            let _one_at_a_time = saving.lock().unwrap_or_else(|p| p.into_inner());
            let cf = db.cf_handle(CF_STATE).expect("created at open");
            if let Some(bytes) = db.get_cf(cf, KEY_SNAPSHOT).map_err(read_error)? {
                let stored: StoredSnapshot = decode(&bytes)?;
                if stored.meta.last_log_id > snapshot.meta.last_log_id {
                    return Ok(());
                }
            }
            db.put_cf_opt(cf, KEY_SNAPSHOT, encode(&snapshot), &synced())
                .map_err(write_error)
        })
        .await
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let data = self.read();
        Ok((data.last_applied, data.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<MetadataResponse>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut responses = Vec::new();
        let image = {
            let mut data = self.write();
            let mut image = Arc::clone(&data.image);
            for entry in entries {
                let index = entry.log_id.index;
                data.last_applied = Some(entry.log_id);
                let mut response = MetadataResponse {
                    index,
                    rejected: None,
                };
                match entry.payload {
                    EntryPayload::Blank => {}
                    EntryPayload::Normal(request) => {
                        let mut delta = MetadataDelta::new(&image);
                        match delta.replay_all(&request.records) {
                            Ok(()) => image = Arc::new(delta.apply(index)),
                            // A record this node cannot read: applying around it would make this
                            // node's metadata differ from the others'. Stop instead (fatal).
                            Err(crate::image::ReplayError::UnknownVersion(version)) => {
                                return Err(write_error(std::io::Error::other(format!(
                                    "metadata record version {version} at index {index} is newer than this node understands"
                                ))));
                            }
                            Err(error) => {
                                tracing::warn!(index, %error, "metadata request refused at replay");
                                response.rejected = Some(error.to_string());
                            }
                        }
                    }
                    EntryPayload::Membership(membership) => {
                        data.membership = StoredMembership::new(Some(entry.log_id), membership);
                    }
                }
                responses.push(response);
            }
            data.image = Arc::clone(&image);
            image
        };
        self.images.send_replace(image);
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let image = MetadataImage::decode(&data)
            .map_err(|e| read_error(std::io::Error::other(e.to_string())))?;
        self.save_snapshot(StoredSnapshot {
            meta: meta.clone(),
            data,
        })
        .await?;
        let image = Arc::new(image);
        {
            let mut state = self.write();
            state.last_applied = meta.last_log_id;
            state.membership = meta.last_membership.clone();
            state.image = Arc::clone(&image);
        }
        self.images.send_replace(image);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        Ok(self.stored_snapshot()?.map(|stored| Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(stored.data)),
        }))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let (last_applied, membership, image) = {
            let data = self.read();
            (
                data.last_applied,
                data.membership.clone(),
                Arc::clone(&data.image),
            )
        };
        let built = self
            .snapshots_built
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let snapshot_id = match last_applied {
            Some(log_id) => format!(
                "{}-{}-{}-{built}",
                log_id.leader_id.term, log_id.leader_id.node_id, log_id.index
            ),
            None => format!("empty-{built}"),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id,
        };
        let data = image.encode();
        self.save_snapshot(StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        })
        .await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

/// The raw limit for metadata commits, for benchmarks: the latency of `samples` synced
/// 1 KiB RocksDB writes in a fresh database under `dir`.
pub fn measure_synced_write_latency(
    dir: &Path,
    samples: usize,
) -> Result<Vec<std::time::Duration>, StoreError> {
    let mut options = Options::default();
    options.create_if_missing(true);
    let db = DB::open(&options, dir).map_err(|source| StoreError::Open {
        path: dir.display().to_string(),
        source,
    })?;
    let value = vec![0x5au8; 1024];
    let mut latencies = Vec::with_capacity(samples);
    for n in 0..samples as u64 {
        let started = std::time::Instant::now();
        db.put_opt(n.to_be_bytes(), &value, &synced())
            .map_err(|source| StoreError::Open {
                path: dir.display().to_string(),
                source,
            })?;
        latencies.push(started.elapsed());
    }
    Ok(latencies)
}

#[cfg(test)]
mod tests {
    use openraft::testing::{StoreBuilder, Suite};

    use super::*;

    struct Builder;

    impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
        async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
            let dir = tempfile::tempdir().map_err(write_error)?;
            let (log, state_machine) =
                open(dir.path()).map_err(|e| write_error(std::io::Error::other(e.to_string())))?;
            Ok((dir, log, state_machine))
        }
    }

    fn leader(term: u64, index: u64) -> LogId {
        openraft::LogId::new(openraft::CommittedLeaderId::new(term, 1), index)
    }

    /// What a node relies on after a crash: vote, entries, purge point and the snapshot's
    /// image are all read back from disk.
    #[test]
    fn vote_entries_and_snapshot_survive_reopening() {
        use crate::records::{MetadataRecord, MetadataRequest, Uuid};
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        runtime.block_on(async {
            let (mut log, mut state_machine) = open(dir.path()).unwrap();
            let vote = Vote::new(3, 1);
            log.save_vote(&vote).await.unwrap();
            let entries: Vec<Entry> = (1..=4)
                .map(|index| Entry {
                    log_id: leader(3, index),
                    payload: EntryPayload::Normal(MetadataRequest::new([MetadataRecord::Topic {
                        topic_id: Uuid(u128::from(index)),
                        name: format!("t{index}"),
                    }])),
                })
                .collect();
            // Returns once the append callback has fired, i.e. once the write is synced.
            openraft::storage::RaftLogStorageExt::blocking_append(&mut log, entries.clone())
                .await
                .unwrap();
            let responses = state_machine.apply(entries[..3].to_vec()).await.unwrap();
            assert!(responses.iter().all(|r| r.rejected.is_none()));
            assert_eq!(state_machine.image().topic_ids_by_name.len(), 3);
            let snapshot = state_machine.build_snapshot().await.unwrap();
            assert_eq!(snapshot.meta.last_log_id, Some(leader(3, 3)));
            log.purge(leader(3, 2)).await.unwrap();
        });
        runtime.block_on(async {
            let (mut log, mut state_machine) = open(dir.path()).unwrap();
            assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
            let state = log.get_log_state().await.unwrap();
            assert_eq!(state.last_purged_log_id, Some(leader(3, 2)));
            assert_eq!(state.last_log_id, Some(leader(3, 4)));
            assert_eq!(log.try_get_log_entries(0..10).await.unwrap().len(), 2);
            let (applied, _) = state_machine.applied_state().await.unwrap();
            assert_eq!(applied, Some(leader(3, 3)));
            assert_eq!(
                state_machine.image().topic_ids_by_name.len(),
                3,
                "image rebuilt from the snapshot"
            );
        });
    }

    /// openraft's storage conformance suite (log store and state machine).
    #[test]
    fn openraft_storage_suite_passes() -> Result<(), StorageError> {
        Suite::test_all(Builder)
    }
}
