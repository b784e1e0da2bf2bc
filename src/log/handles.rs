//! A bounded set of open segment files, so that open descriptors do not grow with the number
//! of partitions or segments (Kafka keeps every segment open; with thousands of partitions a
//! broker runs out of `RLIMIT_NOFILE` and can no longer accept connections or start).
//!
//! Every segment's `.log` is a [`SegmentFile`]: its descriptor is opened on first use and
//! closed again when more than the limit are open, the least recently used first (a CLOCK
//! sweep: a use sets a flag, the sweep spares a flagged file once and clears its flag). A
//! reader or writer holds the `Arc<File>` it got for as long as it needs it (a sendfile in
//! flight, a fsync), so closing only drops the cache's reference: a descriptor lives until
//! its last user is done, and the limit can be exceeded by the files in use at that moment.
//!
//! The limit is process-wide, as descriptors are: [`set_limit`] at start (the node derives it
//! from `RLIMIT_NOFILE`).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Until [`set_limit`] is called: enough for tests, far below common limits.
const DEFAULT_LIMIT: usize = 4096;

static LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_LIMIT);
static OPENS: AtomicU64 = AtomicU64::new(0);
static CLOSES: AtomicU64 = AtomicU64::new(0);
static OPEN: Mutex<VecDeque<Weak<Slot>>> = Mutex::new(VecDeque::new());

/// Sets how many segment files may stay open at once (at least 16).
pub fn set_limit(limit: usize) {
    LIMIT.store(limit.max(16), Ordering::Relaxed);
}

pub fn limit() -> usize {
    LIMIT.load(Ordering::Relaxed)
}

/// Segment files open now, opened since start, and closed to stay under the limit.
pub fn stats() -> (usize, u64, u64) {
    let open = lock(&OPEN).iter().filter(|s| s.strong_count() > 0).count();
    (
        open,
        OPENS.load(Ordering::Relaxed),
        CLOSES.load(Ordering::Relaxed),
    )
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Debug)]
struct Slot {
    path: Mutex<PathBuf>,
    file: Mutex<Option<Arc<File>>>,
    used: AtomicBool,
}

/// One segment's `.log`, opened (read-write) when used.
#[derive(Debug)]
pub struct SegmentFile {
    slot: Arc<Slot>,
}

impl SegmentFile {
    /// Takes `file`, just opened or created at `path`, into the set.
    pub fn new(path: &Path, file: File) -> SegmentFile {
        let slot = Arc::new(Slot {
            path: Mutex::new(path.to_path_buf()),
            file: Mutex::new(None),
            used: AtomicBool::new(true),
        });
        let file = Arc::new(file);
        advise_sequential(&file);
        *lock(&slot.file) = Some(file);
        OPENS.fetch_add(1, Ordering::Relaxed);
        admit(&slot);
        SegmentFile { slot }
    }

    /// The open file, opened again if it was closed to make room.
    pub fn get(&self) -> io::Result<Arc<File>> {
        self.slot.used.store(true, Ordering::Relaxed);
        let mut file = lock(&self.slot.file);
        if let Some(open) = &*file {
            return Ok(Arc::clone(open));
        }
        let path = lock(&self.slot.path).clone();
        let opened = Arc::new(OpenOptions::new().read(true).write(true).open(&path)?);
        advise_sequential(&opened);
        *file = Some(Arc::clone(&opened));
        drop(file);
        OPENS.fetch_add(1, Ordering::Relaxed);
        admit(&self.slot);
        Ok(opened)
    }

    /// The file was renamed: a reopen must use the new name.
    pub fn set_path(&self, path: PathBuf) {
        *lock(&self.slot.path) = path;
    }
}

/// Segments are read front to back (consumers, followers, recovery): ask for the larger
/// readahead window. Advice only; a failure changes nothing.
fn advise_sequential(file: &File) {
    // SAFETY: an advisory call on a descriptor `file` owns.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
}

/// Counts `slot` as open, closing others while more than the limit are.
fn admit(slot: &Arc<Slot>) {
    let mut open = lock(&OPEN);
    open.push_back(Arc::downgrade(slot));
    let limit = limit();
    // Each pass either drops an entry or clears a flag, so two rounds always end the sweep.
    let mut budget = open.len() * 2;
    while open.len() > limit && budget > 0 {
        budget -= 1;
        let Some(candidate) = open.pop_front() else {
            break;
        };
        let Some(candidate) = candidate.upgrade() else {
            continue; // the segment is gone (deleted); its file closed with it
        };
        if Arc::ptr_eq(&candidate, slot) || candidate.used.swap(false, Ordering::Relaxed) {
            open.push_back(Arc::downgrade(&candidate));
            continue;
        }
        if lock(&candidate.file).take().is_some() {
            CLOSES.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;

    /// Descriptors of this process, counted in /proc.
    fn open_descriptors() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    #[test]
    fn files_beyond_the_limit_are_closed_and_reopened_on_use() {
        // The limit is process-wide: this is the only test that changes it.
        set_limit(16);
        let dir = tempfile::tempdir().unwrap();
        let before = open_descriptors();
        let files: Vec<SegmentFile> = (0..200)
            .map(|i| {
                let path = dir.path().join(format!("{i}.log"));
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)
                    .unwrap();
                file.write_all_at(format!("segment {i}").as_bytes(), 0)
                    .unwrap();
                SegmentFile::new(&path, file)
            })
            .collect();
        // Other tests of this binary open files too: allow for them.
        let held = open_descriptors().saturating_sub(before);
        assert!(held < 100, "200 segment files hold {held} descriptors");
        let read = |file: &SegmentFile| {
            let mut text = vec![0u8; 64];
            let n = file.get().unwrap().read_at(&mut text, 0).unwrap();
            String::from_utf8(text[..n].to_vec()).unwrap()
        };
        for (i, file) in files.iter().enumerate().rev() {
            assert_eq!(read(file), format!("segment {i}"));
        }
        // A renamed file is reopened by its new name.
        let renamed = dir.path().join("renamed.log");
        std::fs::rename(dir.path().join("0.log"), &renamed).unwrap();
        files[0].set_path(renamed);
        for file in &files[100..] {
            file.get().unwrap();
        }
        assert_eq!(read(&files[0]), "segment 0");
        set_limit(DEFAULT_LIMIT);
    }
}
