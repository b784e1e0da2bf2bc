//! `LogManager`: every partition log in the broker's log dirs, and the housekeeping around
//! them.
//!
//! Per log dir it keeps Kafka's checkpoint files (`recovery-point-offset-checkpoint`,
//! `log-start-offset-checkpoint`, `replication-offset-checkpoint`,
//! `cleaner-offset-checkpoint`), a `.lock` held with `flock` so two processes never share a
//! dir, and a `.kafka_cleanshutdown` marker written after a clean shutdown (its presence at
//! start means no log needs recovery). Background threads run retention, time-based flushes,
//! checkpoints, delayed file deletion and the log cleaner.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::protocol::topic_partition::io_reason;

use super::checkpoint::{
    self, CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
};
use super::cleaner::CleanOutcome;
use super::config::{Clock, LogConfig};
use super::error::{LogError, Result};
use super::partition_log::{LoadState, Log};
use super::topic_partition::{self, TopicPartition};

/// The metadata quorum's directory: beside the partitions in the first log dir by default
/// (`metadata.log.dir`), and not a partition.
pub const METADATA_DIR_NAME: &str = "__cluster_metadata";

pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
pub const LOCK_FILE: &str = ".lock";
/// Suffix of a partition directory scheduled for removal after its topic was deleted.
pub const DELETE_DIR_SUFFIX: &str = "-delete";

#[derive(Debug, Clone, PartialEq)]
pub struct LogManagerConfig {
    /// `log.dirs`
    pub log_dirs: Vec<PathBuf>,
    /// Topic defaults from the broker's `log.*` keys.
    pub default_log_config: LogConfig,
    /// `log.cleaner.enable`
    pub cleaner_enable: bool,
    /// `log.cleaner.dedupe.buffer.size`
    pub cleaner_dedupe_buffer_bytes: usize,
    /// `log.cleaner.backoff.ms`
    pub cleaner_backoff_ms: u64,
    /// `log.retention.check.interval.ms`
    pub retention_check_interval_ms: u64,
    /// `log.flush.scheduler.interval.ms` (also how often rolled segments are flushed)
    pub flush_scheduler_interval_ms: u64,
    /// `log.flush.offset.checkpoint.interval.ms`
    pub checkpoint_interval_ms: u64,
}

impl Default for LogManagerConfig {
    fn default() -> Self {
        LogManagerConfig {
            log_dirs: vec![PathBuf::from("data")],
            default_log_config: LogConfig::default(),
            cleaner_enable: true,
            cleaner_dedupe_buffer_bytes: 128 * 1024 * 1024,
            cleaner_backoff_ms: 15_000,
            retention_check_interval_ms: 300_000,
            flush_scheduler_interval_ms: 1_000,
            checkpoint_interval_ms: 60_000,
        }
    }
}

/// One log dir as an operator asks about it (Kafka's DescribeLogDirs): where it is, the room
/// on its filesystem, and the logs it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDirDescription {
    /// The dir as `log.dirs` names it, made absolute (as Kafka reports it, not resolving
    /// links).
    pub path: PathBuf,
    /// The room on the dir's filesystem, or why it could not be asked (the dir removed, its
    /// disk gone): a dir this broker cannot write to.
    pub space: std::result::Result<DirSpace, String>,
    /// Its online logs that were asked for, in partition order. A log offline after a storage
    /// error (or not opened at start) is left out: Kafka's brokers list only the logs they
    /// serve.
    pub logs: Vec<LogDescription>,
}

/// The room on a log dir's filesystem, as Java's `FileStore` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirSpace {
    /// The filesystem's size.
    pub total_bytes: u64,
    /// What this (unprivileged) process may still write: blocks free to non-root users.
    pub usable_bytes: u64,
}

/// One partition's log in a log dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDescription {
    pub topic_partition: TopicPartition,
    /// Bytes of its segments on disk.
    pub size_bytes: u64,
    pub log_end_offset: u64,
    pub high_watermark: u64,
}

/// The room on the filesystem holding `dir` (statvfs).
// The statvfs fields are 32 bits wide on some targets, 64 on others.
#[allow(clippy::useless_conversion)]
fn filesystem_space(dir: &Path) -> std::io::Result<DirSpace> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("the path holds a NUL byte"))?;
    // SAFETY: statvfs reads the NUL-terminated path and writes only the struct passed, which
    // is plain data (all-zero is a valid value).
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fragment_bytes = u64::from(stats.f_frsize);
    Ok(DirSpace {
        total_bytes: u64::from(stats.f_blocks).saturating_mul(fragment_bytes),
        usable_bytes: u64::from(stats.f_bavail).saturating_mul(fragment_bytes),
    })
}

#[derive(Debug)]
struct ManagedLog {
    dir_index: usize,
    log: Arc<Log>,
}

#[derive(Debug, Default)]
struct Stopper {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stopper {
    /// Sleeps up to `timeout`; true when shutdown was requested.
    fn wait(&self, timeout: Duration) -> bool {
        let stopped = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        let (stopped, _) = self
            .wake
            .wait_timeout_while(stopped, timeout, |s| !*s)
            .unwrap_or_else(|p| p.into_inner());
        *stopped
    }
    fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake.notify_all();
    }
}

#[derive(Debug)]
pub struct LogManager {
    config: LogManagerConfig,
    clock: Arc<dyn Clock>,
    logs: RwLock<BTreeMap<TopicPartition, ManagedLog>>,
    /// Logs that could not be opened at start: their directory and why.
    failed: Mutex<HashMap<TopicPartition, (PathBuf, String)>>,
    cleaner_offsets: Mutex<BTreeMap<TopicPartition, u64>>,
    /// Files and directories to remove once their time (ms) has come.
    pending_deletes: Mutex<Vec<(i64, PathBuf)>>,
    _locks: Vec<File>,
    /// One checkpoint writer at a time: the scheduler and request paths (truncation,
    /// DeleteRecords) both write them, and a stale snapshot must not land after a fresh one.
    checkpointing: Mutex<()>,
    stopper: Arc<Stopper>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    shut_down: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn open_failed(tp: &TopicPartition, dir: &Path, reason: &str) -> LogError {
    LogError::OpenFailed {
        topic_partition: tp.to_string(),
        dir: dir.to_path_buf(),
        reason: reason.to_owned(),
    }
}

fn lock_dir(dir: &Path) -> Result<File> {
    let unusable = |reason: String| LogError::LogDirUnusable {
        dir: dir.to_owned(),
        reason,
    };
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| {
            unusable(format!(
                "creating its lock file {LOCK_FILE}: {}; is the directory writable by this user?",
                io_reason(&e)
            ))
        })?;
    // SAFETY: flock on a descriptor we own; no memory is involved.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked != 0 {
        return Err(unusable(
            "another process holds its lock (is another sluice running on it?); stop that \
             process or point log.dirs at another directory"
                .into(),
        ));
    }
    Ok(file)
}

impl LogManager {
    /// Locks and loads every log dir. Logs are recovered as their checkpoints require.
    pub fn open(config: LogManagerConfig, clock: Arc<dyn Clock>) -> Result<LogManager> {
        if config.log_dirs.is_empty() {
            return Err(LogError::InvalidArgument("log.dirs is empty".into()));
        }
        let started = Instant::now();
        let mut locks = Vec::new();
        let mut logs = BTreeMap::new();
        let mut failed = HashMap::new();
        let mut cleaner_offsets = BTreeMap::new();
        for (dir_index, dir) in config.log_dirs.iter().enumerate() {
            fs::create_dir_all(dir).map_err(|e| LogError::LogDirUnusable {
                dir: dir.clone(),
                reason: format!("creating it: {}", io_reason(&e)),
            })?;
            locks.push(lock_dir(dir)?);
            let recovery_points = checkpoint::read_offsets(&dir.join(RECOVERY_POINT_CHECKPOINT))?;
            let log_starts = checkpoint::read_offsets(&dir.join(LOG_START_OFFSET_CHECKPOINT))?;
            let high_watermarks =
                checkpoint::read_offsets(&dir.join(REPLICATION_OFFSET_CHECKPOINT))?;
            cleaner_offsets.extend(checkpoint::read_offsets(
                &dir.join(CLEANER_OFFSET_CHECKPOINT),
            )?);
            let marker = dir.join(CLEAN_SHUTDOWN_FILE);
            let clean_shutdown = marker.exists();
            for entry in fs::read_dir(dir).map_err(|e| LogError::io(dir, e))? {
                let entry = entry.map_err(|e| LogError::io(dir, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if !entry
                    .file_type()
                    .map_err(|e| LogError::io(entry.path(), e))?
                    .is_dir()
                {
                    continue;
                }
                if name.ends_with(DELETE_DIR_SUFFIX) {
                    fs::remove_dir_all(entry.path()).map_err(|e| LogError::io(entry.path(), e))?;
                    continue;
                }
                if name == METADATA_DIR_NAME {
                    continue;
                }
                let Some(tp) = topic_partition::from_dir_name(&name) else {
                    tracing::warn!(dir = %entry.path().display(), "ignoring a directory that is not a partition");
                    continue;
                };
                let load = LoadState {
                    recovery_point: recovery_points.get(&tp).copied().unwrap_or(0),
                    log_start_offset: log_starts.get(&tp).copied(),
                    high_watermark: high_watermarks.get(&tp).copied().unwrap_or(0),
                    clean_shutdown: clean_shutdown && recovery_points.contains_key(&tp),
                };
                let opened = Log::open(
                    &entry.path(),
                    tp.clone(),
                    config.default_log_config.clone(),
                    load,
                    Arc::clone(&clock),
                );
                let log = match opened {
                    Ok((log, _)) => log,
                    Err(error) => {
                        // One partition's damage must not keep the broker from serving the
                        // others: it stays offline here until repaired.
                        let (dir, reason) = (entry.path(), error.to_string());
                        let error = open_failed(&tp, &dir, &reason);
                        tracing::error!(topic_partition = %tp, %error, "partition offline");
                        failed.insert(tp, (dir, reason));
                        continue;
                    }
                };
                // Recovery may have cut the log below the cleaner checkpoint (data appended
                // after the checkpoint was written and never synced): what is appended next
                // is dirty.
                if let Some(first_dirty) = cleaner_offsets.get_mut(&tp) {
                    *first_dirty = (*first_dirty).min(log.log_end_offset());
                }
                logs.insert(
                    tp,
                    ManagedLog {
                        dir_index,
                        log: Arc::new(log),
                    },
                );
            }
            // From here on a crash is not a clean shutdown.
            if clean_shutdown {
                fs::remove_file(&marker).map_err(|e| LogError::io(&marker, e))?;
            }
        }
        tracing::info!(
            logs = logs.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "log manager loaded"
        );
        let manager = LogManager {
            config,
            clock,
            logs: RwLock::new(logs),
            failed: Mutex::new(failed),
            cleaner_offsets: Mutex::new(cleaner_offsets),
            pending_deletes: Mutex::new(Vec::new()),
            _locks: locks,
            checkpointing: Mutex::new(()),
            stopper: Arc::new(Stopper::default()),
            threads: Mutex::new(Vec::new()),
            shut_down: AtomicBool::new(false),
        };
        manager.checkpoint()?;
        Ok(manager)
    }

    pub fn config(&self) -> &LogManagerConfig {
        &self.config
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Log>> {
        self.logs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tp)
            .map(|m| Arc::clone(&m.log))
    }

    pub fn all(&self) -> Vec<Arc<Log>> {
        self.logs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|m| Arc::clone(&m.log))
            .collect()
    }

    /// Every log dir, in `log.dirs` order, with the online logs `wanted` selects (their sizes
    /// and offsets read now) and the room on its filesystem.
    pub fn describe_dirs(
        &self,
        wanted: impl Fn(&TopicPartition) -> bool,
    ) -> Vec<LogDirDescription> {
        let mut logs_by_dir: Vec<Vec<LogDescription>> =
            vec![Vec::new(); self.config.log_dirs.len()];
        for (tp, managed) in self.logs.read().unwrap_or_else(|p| p.into_inner()).iter() {
            if managed.log.is_offline() || !wanted(tp) {
                continue;
            }
            let Some(dir_logs) = logs_by_dir.get_mut(managed.dir_index) else {
                debug_assert!(
                    false,
                    "{tp} is in log dir {} of {}",
                    managed.dir_index,
                    self.config.log_dirs.len()
                );
                continue;
            };
            dir_logs.push(LogDescription {
                topic_partition: tp.clone(),
                size_bytes: managed.log.size_bytes(),
                log_end_offset: managed.log.log_end_offset(),
                high_watermark: managed.log.high_watermark(),
            });
        }
        self.config
            .log_dirs
            .iter()
            .zip(logs_by_dir)
            .map(|(dir, logs)| {
                let path = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
                let space = filesystem_space(dir).map_err(|e| {
                    tracing::warn!(dir = %path.display(), error = %e, "cannot read the log dir's filesystem");
                    io_reason(&e)
                });
                LogDirDescription { path, space, logs }
            })
            .collect()
    }

    /// Partitions whose logs could not be opened at start (they stay offline).
    pub fn failed(&self) -> Vec<TopicPartition> {
        lock(&self.failed).keys().cloned().collect()
    }

    /// The directory of `tp`'s log if it could not be opened at start.
    pub fn failed_dir(&self, tp: &TopicPartition) -> Option<PathBuf> {
        lock(&self.failed).get(tp).map(|(dir, _)| dir.clone())
    }

    /// The log of `tp`, created in the log dir holding the fewest logs if it does not exist.
    /// A log that could not be opened at start is not replaced: it stays an error.
    pub fn get_or_create(&self, tp: &TopicPartition, config: LogConfig) -> Result<Arc<Log>> {
        if let Some(log) = self.get(tp) {
            return Ok(log);
        }
        if let Some((dir, reason)) = lock(&self.failed).get(tp) {
            return Err(open_failed(tp, dir, reason));
        }
        let mut logs = self.logs.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = logs.get(tp) {
            return Ok(Arc::clone(&existing.log));
        }
        // Counting is linear in the logs: only worth it when there is a choice (creating
        // thousands of partitions counted them for each one).
        let dir_index = if self.config.log_dirs.len() > 1 {
            let mut counts = vec![0usize; self.config.log_dirs.len()];
            for managed in logs.values() {
                counts[managed.dir_index] += 1;
            }
            (0..counts.len()).min_by_key(|i| counts[*i]).unwrap_or(0)
        } else {
            0
        };
        let dir = self.config.log_dirs[dir_index].join(topic_partition::dir_name(tp));
        let (log, _) = Log::open(
            &dir,
            tp.clone(),
            config,
            LoadState::default(),
            Arc::clone(&self.clock),
        )?;
        let log = Arc::new(log);
        logs.insert(
            tp.clone(),
            ManagedLog {
                dir_index,
                log: Arc::clone(&log),
            },
        );
        tracing::info!(%tp, dir = %dir.display(), "created log");
        Ok(log)
    }

    /// Removes a partition's log (its topic was deleted): the directory is renamed at once and
    /// removed after `file.delete.delay.ms`.
    pub fn delete(&self, tp: &TopicPartition) -> Result<bool> {
        let Some(managed) = self
            .logs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tp)
        else {
            // A log that never opened goes the same way, with the default delay.
            let Some((dir, _)) = lock(&self.failed).remove(tp) else {
                return Ok(false);
            };
            let delay_ms = self.config.default_log_config.file_delete_delay_ms;
            return self.schedule_removal(tp, &dir, delay_ms).map(|()| true);
        };
        lock(&self.cleaner_offsets).remove(tp);
        managed.log.mark_deleted();
        let delay_ms = managed.log.config().file_delete_delay_ms;
        self.schedule_removal(tp, managed.log.dir(), delay_ms)
            .map(|()| true)
    }

    /// Renames a partition's directory to `<name>.<ms>-delete` at once and removes it after
    /// `delay_ms` (readers holding its files finish undisturbed).
    fn schedule_removal(&self, tp: &TopicPartition, dir: &Path, delay_ms: i64) -> Result<()> {
        let stamp = self.clock.now_ms();
        let target = dir.with_file_name(format!(
            "{}.{stamp}{DELETE_DIR_SUFFIX}",
            topic_partition::dir_name(tp)
        ));
        fs::rename(dir, &target).map_err(|e| LogError::io(dir, e))?;
        lock(&self.pending_deletes).push((stamp + delay_ms, target));
        Ok(())
    }

    /// Truncates a log (replication after a leader change) and checkpoints at once: a stale
    /// recovery point above the new log end would let a crash skip rescanning data appended
    /// after the truncation.
    pub fn truncate_to(&self, tp: &TopicPartition, offset: u64) -> Result<u64> {
        let log = self
            .get(tp)
            .ok_or_else(|| LogError::InvalidArgument(format!("no log for {tp}")))?;
        let end = log.truncate_to(offset)?;
        if let Some(first_dirty) = lock(&self.cleaner_offsets).get_mut(tp) {
            *first_dirty = (*first_dirty).min(end);
        }
        self.checkpoint()?;
        Ok(end)
    }

    /// Empties a log and restarts it at `offset` (a follower far behind its leader), then
    /// checkpoints: everything appended from `offset` on is dirty for the cleaner.
    pub fn truncate_fully_and_start_at(&self, tp: &TopicPartition, offset: u64) -> Result<()> {
        let log = self
            .get(tp)
            .ok_or_else(|| LogError::InvalidArgument(format!("no log for {tp}")))?;
        log.truncate_fully_and_start_at(offset)?;
        if let Some(first_dirty) = lock(&self.cleaner_offsets).get_mut(tp) {
            *first_dirty = (*first_dirty).min(offset);
        }
        self.checkpoint()
    }

    /// DeleteRecords: moves a log's start offset and checkpoints it at once, so deleted
    /// records do not come back after a crash.
    pub fn advance_log_start_offset(&self, tp: &TopicPartition, offset: u64) -> Result<u64> {
        let log = self
            .get(tp)
            .ok_or_else(|| LogError::InvalidArgument(format!("no log for {tp}")))?;
        let start = log.advance_log_start_offset(offset)?;
        self.checkpoint()?;
        Ok(start)
    }

    /// Writes every per-dir checkpoint from the logs' current state.
    pub fn checkpoint(&self) -> Result<()> {
        let _writing = lock(&self.checkpointing);
        let logs = self.logs.read().unwrap_or_else(|p| p.into_inner());
        let cleaner_offsets = lock(&self.cleaner_offsets).clone();
        for (dir_index, dir) in self.config.log_dirs.iter().enumerate() {
            let mut recovery_points = BTreeMap::new();
            let mut log_starts = BTreeMap::new();
            let mut high_watermarks = BTreeMap::new();
            let mut cleaner = BTreeMap::new();
            for (tp, managed) in logs.iter().filter(|(_, m)| m.dir_index == dir_index) {
                recovery_points.insert(tp.clone(), managed.log.recovery_point());
                log_starts.insert(tp.clone(), managed.log.log_start_offset());
                high_watermarks.insert(tp.clone(), managed.log.high_watermark());
                if let Some(offset) = cleaner_offsets.get(tp) {
                    cleaner.insert(tp.clone(), *offset);
                }
            }
            checkpoint::write_offsets(&dir.join(RECOVERY_POINT_CHECKPOINT), &recovery_points)?;
            checkpoint::write_offsets(&dir.join(LOG_START_OFFSET_CHECKPOINT), &log_starts)?;
            checkpoint::write_offsets(&dir.join(REPLICATION_OFFSET_CHECKPOINT), &high_watermarks)?;
            checkpoint::write_offsets(&dir.join(CLEANER_OFFSET_CHECKPOINT), &cleaner)?;
        }
        Ok(())
    }

    /// One round of housekeeping: time-based flushes and rolled-segment flushes, retention,
    /// and removal of files whose delete delay has passed.
    pub fn maintain(&self, retention: bool) -> Result<()> {
        let now = self.clock.now_ms();
        for log in self.all() {
            // One failing log goes offline on its own; the others carry on.
            if log.is_offline() {
                continue;
            }
            // A log that went offline since the check above was deleted (its topic) or failed
            // (said where it failed): nothing here for a person to act on.
            let report = |what: &str, error: LogError| {
                if log.is_offline() {
                    tracing::debug!(tp = %log.topic_partition(), %error, "{what} skipped: the log went offline (deleted or failed)");
                } else {
                    tracing::error!(tp = %log.topic_partition(), %error, "{what} failed");
                }
            };
            if let Err(error) = log.flush_if_due() {
                report("flush", error);
            }
            if retention {
                if let Err(error) = log.delete_retention_breached_segments() {
                    report("retention", error);
                }
            }
            let delay = log.config().file_delete_delay_ms;
            let deletes = log.take_pending_deletes();
            if !deletes.is_empty() {
                lock(&self.pending_deletes).extend(deletes.into_iter().map(|p| (now + delay, p)));
            }
        }
        self.delete_due_files(now);
        Ok(())
    }

    fn delete_due_files(&self, now: i64) {
        let due: Vec<PathBuf> = {
            let mut pending = lock(&self.pending_deletes);
            let (due, later): (Vec<_>, Vec<_>) = pending.drain(..).partition(|(at, _)| *at <= now);
            *pending = later;
            due.into_iter().map(|(_, p)| p).collect()
        };
        for path in due {
            let result = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            if let Err(error) = result {
                if error.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %path.display(), %error, "could not remove deleted file");
                }
            }
        }
    }

    /// Cleans the dirtiest compacted log that is due, if any.
    pub fn clean_once(&self) -> Result<Option<(TopicPartition, CleanOutcome)>> {
        let offsets = lock(&self.cleaner_offsets).clone();
        let mut best: Option<(f64, Arc<Log>, u64)> = None;
        for log in self.all() {
            let first_dirty = offsets.get(log.topic_partition()).copied().unwrap_or(0);
            let Some(plan) = log.cleanable(first_dirty) else {
                continue;
            };
            if plan.due
                && best
                    .as_ref()
                    .is_none_or(|(ratio, _, _)| plan.dirty_ratio > *ratio)
            {
                best = Some((plan.dirty_ratio, log, first_dirty));
            }
        }
        let Some((_, log, first_dirty)) = best else {
            return Ok(None);
        };
        let outcome = log.clean(first_dirty, self.config.cleaner_dedupe_buffer_bytes)?;
        if !outcome.abandoned {
            lock(&self.cleaner_offsets)
                .insert(log.topic_partition().clone(), outcome.first_dirty_offset);
        }
        Ok(Some((log.topic_partition().clone(), outcome)))
    }

    /// Starts the scheduler and (when enabled) the cleaner threads.
    pub fn start_background(self: &Arc<Self>) -> Result<()> {
        let mut threads = lock(&self.threads);
        let manager = Arc::clone(self);
        let scheduler = std::thread::Builder::new()
            .name("log-scheduler".into())
            .spawn(move || {
                crate::thread_affinity::unpin_current_thread();
                manager.run_scheduler()
            })
            .map_err(|e| LogError::io("log-scheduler thread", e))?;
        threads.push(scheduler);
        if self.config.cleaner_enable {
            let manager = Arc::clone(self);
            let cleaner = std::thread::Builder::new()
                .name("log-cleaner".into())
                .spawn(move || {
                    crate::thread_affinity::unpin_current_thread();
                    manager.run_cleaner()
                })
                .map_err(|e| LogError::io("log-cleaner thread", e))?;
            threads.push(cleaner);
        }
        Ok(())
    }

    fn run_scheduler(&self) {
        let tick = Duration::from_millis(self.config.flush_scheduler_interval_ms.max(10));
        let mut last_retention = Instant::now();
        let mut last_checkpoint = Instant::now();
        while !self.stopper.wait(tick) {
            let retention = last_retention.elapsed()
                >= Duration::from_millis(self.config.retention_check_interval_ms);
            if retention {
                last_retention = Instant::now();
            }
            if let Err(error) = self.maintain(retention) {
                tracing::error!(%error, "log maintenance failed");
            }
            if last_checkpoint.elapsed()
                >= Duration::from_millis(self.config.checkpoint_interval_ms)
            {
                last_checkpoint = Instant::now();
                if let Err(error) = self.checkpoint() {
                    tracing::error!(%error, "writing log checkpoints failed");
                }
            }
        }
    }

    fn run_cleaner(&self) {
        let backoff = Duration::from_millis(self.config.cleaner_backoff_ms.max(10));
        loop {
            let cleaned = match self.clean_once() {
                Ok(outcome) => outcome.is_some(),
                Err(error) => {
                    tracing::error!(%error, "log cleaning failed");
                    false
                }
            };
            if self
                .stopper
                .wait(if cleaned { Duration::ZERO } else { backoff })
            {
                return;
            }
        }
    }

    /// Stops the background threads, flushes and closes every log, writes the checkpoints and
    /// the clean-shutdown marker. Idempotent.
    pub fn shutdown(&self) -> Result<()> {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stopper.stop();
        for thread in lock(&self.threads).drain(..) {
            let _ = thread.join();
        }
        let mut all_closed = true;
        for log in self.all() {
            if let Err(error) = log.close() {
                tracing::error!(tp = %log.topic_partition(), %error, "closing log failed");
                all_closed = false;
            }
        }
        self.checkpoint()?;
        if all_closed {
            for dir in &self.config.log_dirs {
                let marker = dir.join(CLEAN_SHUTDOWN_FILE);
                File::create(&marker)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| LogError::io(&marker, e))?;
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| LogError::io(dir, e))?;
            }
        }
        tracing::info!("log manager shut down");
        Ok(())
    }
}

impl Drop for LogManager {
    fn drop(&mut self) {
        // Background threads hold an Arc, so this runs only once they are gone; make sure they
        // are told to stop in any case.
        self.stopper.stop();
    }
}
