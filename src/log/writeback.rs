//! Incremental writeback of appended segment data, off the request path.
//!
//! With the default flush policy appends only reach the page cache, and the kernel writes
//! them back when it decides to. Left alone it lets gigabytes pile up and then throttles the
//! appending thread in `balance_dirty_pages` for tens of milliseconds: a tail latency spike
//! for every producer of the broker. So every [`WRITEBACK_BYTES`] appended to a segment, a
//! background thread asks the kernel to start writing that range
//! (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, as RocksDB's `bytes_per_sync`): dirty data stays
//! a few MiB per active segment, and the appending thread never waits for it. This is not a
//! flush: it waits for nothing and promises nothing about durability (`flush.messages`,
//! `flush.ms` and `log.flush.policy` do).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, OnceLock};

/// Appended bytes of a segment between two writeback requests.
pub const WRITEBACK_BYTES: u64 = 1 << 20;

/// Requests waiting for the thread; when it lags this far behind, new ones are dropped (the
/// kernel's own writeback still runs).
const QUEUED_MAX: usize = 1024;

struct Range {
    file: Arc<File>,
    offset: u64,
    len: u64,
}

fn queue() -> Option<&'static SyncSender<Range>> {
    static QUEUE: OnceLock<Option<SyncSender<Range>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (sender, receiver) = sync_channel::<Range>(QUEUED_MAX);
            let spawned = std::thread::Builder::new()
                .name("log-writeback".into())
                .spawn(move || {
                    crate::thread_affinity::unpin_current_thread();
                    for range in receiver {
                        write_back(&range);
                    }
                });
            match spawned {
                Ok(_) => Some(sender),
                Err(error) => {
                    tracing::warn!(%error, "no writeback thread: dirty segment data is left to the kernel");
                    None
                }
            }
        })
        .as_ref()
}

fn write_back(range: &Range) {
    let (Ok(offset), Ok(len)) = (i64::try_from(range.offset), i64::try_from(range.len)) else {
        return;
    };
    // SAFETY: a hint about a range of a descriptor the Arc keeps open; nothing is read or
    // written through pointers.
    let started = unsafe {
        libc::sync_file_range(
            range.file.as_raw_fd(),
            offset,
            len,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if started != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "sync_file_range failed");
    }
}

/// Asks (without waiting) for `len` bytes of `file` from `offset` to be written back.
pub fn start(file: Arc<File>, offset: u64, len: u64) {
    let Some(queue) = queue() else {
        return;
    };
    // A full queue drops the request: the kernel's own writeback still runs.
    let _ = queue.try_send(Range { file, offset, len });
}
