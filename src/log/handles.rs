//! Bounded sets of open segment resources, so that what a broker holds open does not grow
//! with the number of partitions or segments. Kafka keeps every segment's descriptors and
//! index mappings; with thousands of partitions a broker runs out of `RLIMIT_NOFILE` (and can
//! no longer accept connections, or start), and with tens of thousands of segments out of
//! `vm.max_map_count`.
//!
//! Two sets: [`SEGMENT_FILES`] holds the descriptors of segment `.log` files
//! ([`SegmentFile`]), [`INDEX_MAPS`] the read-only mappings of sealed indexes. A member is
//! opened on first use and closed again when more than the set's limit are open, the least
//! recently used first (a CLOCK sweep: a use sets a flag, the sweep spares a flagged member
//! once and clears its flag). A user holds the `Arc` it got for as long as it needs it (a
//! sendfile in flight, a fsync, a binary search), so closing only drops the set's reference:
//! a descriptor or mapping lives until its last user is done, and a limit can be exceeded by
//! the members in use at that moment.
//!
//! The limits are process-wide, as descriptors and mappings are: the node sets them at start
//! from `RLIMIT_NOFILE` and `vm.max_map_count`.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use memmap2::Mmap;

/// Until a limit is set: enough for tests, far below common limits.
const DEFAULT_LIMIT: usize = 4096;

/// A bounded set of lazily opened members.
pub struct BoundedSet {
    limit: AtomicUsize,
    opens: AtomicU64,
    closes: AtomicU64,
    open: Mutex<VecDeque<Weak<dyn Member>>>,
}

/// Descriptors of segment `.log` files.
pub static SEGMENT_FILES: BoundedSet = BoundedSet::new();
/// Read-only mappings of sealed `.index` and `.timeindex` files.
pub static INDEX_MAPS: BoundedSet = BoundedSet::new();

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl BoundedSet {
    const fn new() -> BoundedSet {
        BoundedSet {
            limit: AtomicUsize::new(DEFAULT_LIMIT),
            opens: AtomicU64::new(0),
            closes: AtomicU64::new(0),
            open: Mutex::new(VecDeque::new()),
        }
    }

    /// Sets how many members may stay open at once (at least 16).
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit.max(16), Ordering::Relaxed);
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Members open now, opened since start, and closed to stay under the limit.
    pub fn stats(&self) -> (usize, u64, u64) {
        let open = lock(&self.open)
            .iter()
            .filter(|m| m.strong_count() > 0)
            .count();
        (
            open,
            self.opens.load(Ordering::Relaxed),
            self.closes.load(Ordering::Relaxed),
        )
    }

    /// Counts `member` as open, closing others while more than the limit are.
    fn admit(&self, member: Arc<dyn Member>) {
        self.opens.fetch_add(1, Ordering::Relaxed);
        let mut open = lock(&self.open);
        open.push_back(Arc::downgrade(&member));
        let limit = self.limit();
        // Each pass either drops an entry or clears a flag, so two rounds always end the sweep.
        let mut budget = open.len() * 2;
        while open.len() > limit && budget > 0 {
            budget -= 1;
            let Some(candidate) = open.pop_front() else {
                break;
            };
            let Some(candidate) = candidate.upgrade() else {
                continue; // the segment is gone (deleted); its member closed with it
            };
            if Arc::ptr_eq(&candidate, &member) || candidate.take_used() {
                open.push_back(Arc::downgrade(&candidate));
                continue;
            }
            if candidate.close() {
                self.closes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What the sweep needs of a member.
trait Member: Send + Sync {
    /// Whether it was used since the last sweep, clearing the flag.
    fn take_used(&self) -> bool;
    /// Drops the set's reference; whether it was open.
    fn close(&self) -> bool;
}

struct Slot<T> {
    path: Mutex<PathBuf>,
    value: Mutex<Option<Arc<T>>>,
    used: AtomicBool,
}

impl<T: Send + Sync + 'static> Member for Slot<T> {
    fn take_used(&self) -> bool {
        self.used.swap(false, Ordering::Relaxed)
    }

    fn close(&self) -> bool {
        lock(&self.value).take().is_some()
    }
}

/// One member of a set: a value opened from its path, again after being closed.
struct Lazy<T: Send + Sync + 'static> {
    slot: Arc<Slot<T>>,
    set: &'static BoundedSet,
}

impl<T: Send + Sync + 'static> Lazy<T> {
    fn new(set: &'static BoundedSet, path: &Path, value: T) -> Lazy<T> {
        let slot = Arc::new(Slot {
            path: Mutex::new(path.to_path_buf()),
            value: Mutex::new(Some(Arc::new(value))),
            used: AtomicBool::new(true),
        });
        set.admit(slot.clone());
        Lazy { slot, set }
    }

    fn get(&self, open: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<Arc<T>> {
        self.slot.used.store(true, Ordering::Relaxed);
        let mut value = lock(&self.slot.value);
        if let Some(open) = &*value {
            return Ok(Arc::clone(open));
        }
        let path = lock(&self.slot.path).clone();
        let opened = Arc::new(open(&path)?);
        *value = Some(Arc::clone(&opened));
        drop(value);
        self.set.admit(self.slot.clone());
        Ok(opened)
    }

    fn set_path(&self, path: PathBuf) {
        *lock(&self.slot.path) = path;
    }
}

impl<T: Send + Sync + 'static> std::fmt::Debug for Lazy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lazy")
            .field("path", &*lock(&self.slot.path))
            .field("open", &lock(&self.slot.value).is_some())
            .finish()
    }
}

/// One segment's `.log`, opened (read-write) when used, in [`SEGMENT_FILES`].
#[derive(Debug)]
pub struct SegmentFile(Lazy<File>);

impl SegmentFile {
    /// Takes `file`, just opened or created at `path`, into the set.
    pub fn new(path: &Path, file: File) -> SegmentFile {
        advise_sequential(&file);
        SegmentFile(Lazy::new(&SEGMENT_FILES, path, file))
    }

    /// The open file, opened again if it was closed to make room.
    pub fn get(&self) -> io::Result<Arc<File>> {
        self.0.get(|path| {
            let file = OpenOptions::new().read(true).write(true).open(path)?;
            advise_sequential(&file);
            Ok(file)
        })
    }

    /// The file was renamed: a reopen must use the new name.
    pub fn set_path(&self, path: PathBuf) {
        self.0.set_path(path);
    }
}

/// A sealed index file mapped read-only, in [`INDEX_MAPS`]; no descriptor is kept.
#[derive(Debug)]
pub struct IndexMap(Lazy<Mmap>);

impl IndexMap {
    /// Maps the file at `path` and its length; `None` when it is empty (nothing to map).
    pub fn open(path: &Path) -> io::Result<Option<(IndexMap, usize)>> {
        if std::fs::metadata(path)?.len() == 0 {
            return Ok(None);
        }
        let mapping = map(path)?;
        let len = mapping.len();
        Ok(Some((IndexMap(Lazy::new(&INDEX_MAPS, path, mapping)), len)))
    }

    /// The mapping, mapped again if it was unmapped to make room.
    pub fn get(&self) -> io::Result<Arc<Mmap>> {
        self.0.get(map)
    }

    /// The file was renamed: a remap must use the new name.
    pub fn set_path(&self, path: PathBuf) {
        self.0.set_path(path);
    }
}

fn map(path: &Path) -> io::Result<Mmap> {
    let file = File::open(path)?;
    // SAFETY: a sealed index file is changed only through its index, which drops this
    // mapping first (`IndexFile::trim`, `make_active`); the descriptor may close once mapped.
    unsafe { Mmap::map(&file) }
}

/// Segments are read front to back (consumers, followers, recovery): ask for the larger
/// readahead window. Advice only; a failure changes nothing.
fn advise_sequential(file: &File) {
    // SAFETY: an advisory call on a descriptor `file` owns.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
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
        SEGMENT_FILES.set_limit(16);
        let dir = tempfile::tempdir().unwrap();
        let before = open_descriptors();
        let files: Vec<SegmentFile> = (0..200)
            .map(|i| {
                let path = dir.path().join(format!("{i}.log"));
                let file = File::create_new(&path).unwrap();
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
        SEGMENT_FILES.set_limit(DEFAULT_LIMIT);
    }

    #[test]
    fn mappings_beyond_the_limit_are_unmapped_and_mapped_again_on_use() {
        // The limit is process-wide: this is the only test that changes it.
        INDEX_MAPS.set_limit(16);
        let dir = tempfile::tempdir().unwrap();
        let maps: Vec<IndexMap> = (0..100u32)
            .map(|i| {
                let path = dir.path().join(format!("{i}.index"));
                std::fs::write(&path, i.to_be_bytes()).unwrap();
                IndexMap::open(&path).unwrap().unwrap().0
            })
            .collect();
        let (open, _, closes) = INDEX_MAPS.stats();
        assert!(open <= 16 + 1, "{open} mappings open");
        assert!(closes >= 80, "{closes} closed");
        for (i, map) in maps.iter().enumerate() {
            assert_eq!(&map.get().unwrap()[..], &(i as u32).to_be_bytes());
        }
        // Sealed offset indexes beyond the limit still answer every lookup.
        let indexes: Vec<crate::log::index::OffsetIndex> = (0..50u64)
            .map(|i| {
                let path = dir.path().join(format!("{i}-sealed.index"));
                let mut index =
                    crate::log::index::OffsetIndex::open(&path, i * 1000, 4096, true).unwrap();
                for n in 1..=20u64 {
                    index.append(i * 1000 + n * 10, (n * 100) as u32);
                }
                index.trim().unwrap();
                index
            })
            .collect();
        for (i, index) in indexes.iter().enumerate().rev() {
            let base = i as u64 * 1000;
            assert_eq!(index.lookup(base + 55), (base + 50, 500));
            assert_eq!(index.last(), Some((base + 200, 2000)));
            index.sanity_check(10_000).unwrap();
        }
        assert!(INDEX_MAPS.stats().0 <= 16 + 1);
        assert!(IndexMap::open(&dir.path().join("empty")).is_err());
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        assert!(IndexMap::open(&dir.path().join("empty")).unwrap().is_none());
        INDEX_MAPS.set_limit(DEFAULT_LIMIT);
    }
}
