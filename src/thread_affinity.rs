//! One CPU per worker thread (`thread.affinity`).
//!
//! The broker's tokio worker threads are pinned one to each CPU the process may use, as a
//! thread-per-core broker pins its reactors. Left to float, the worker that answers a request
//! is woken on whichever CPU looks idle at that instant, and on a busy machine it moves
//! between CPUs with every request, preempting the client threads it lands beside: a
//! librdkafka consumer on two CPUs read 3.9-4.4 M records/s with floating workers and
//! 5.0-5.4 M with pinned ones (`benches/consume_cycle.py`).
//!
//! Only workers are pinned. A thread inherits its creator's affinity, so every other thread
//! the broker starts (tokio's blocking pool, the log's background threads) first widens its
//! own back to the process's CPUs with [`unpin_current_thread`].
//!
//! Several brokers, or other busy processes, on the same few CPUs are better served by
//! floating threads: `thread.affinity=false` (the three-node example configs set it).

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The CPUs the process could use when pinning was set up: what the other threads get back.
static PROCESS_CPUS: OnceLock<Vec<usize>> = OnceLock::new();

thread_local! {
    static PINNED: Cell<bool> = const { Cell::new(false) };
}

/// Hands each worker thread its own CPU, the first time it parks.
pub struct WorkerPinning {
    cpus: Vec<usize>,
    next: AtomicUsize,
}

impl WorkerPinning {
    /// A plan for `cpus.len()` workers, or `None` when there is nothing to pin to (fewer than
    /// two CPUs) or the CPUs cannot be read. Records the process's CPUs for
    /// [`unpin_current_thread`].
    pub fn for_process() -> std::io::Result<Option<WorkerPinning>> {
        let cpus = current_thread_cpus()?;
        let _ = PROCESS_CPUS.set(cpus.clone());
        if cpus.len() < 2 {
            return Ok(None);
        }
        Ok(Some(WorkerPinning {
            cpus,
            next: AtomicUsize::new(0),
        }))
    }

    /// The CPUs, one per worker thread, in the order they are handed out.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Pins the calling thread to the next CPU, once per thread; later calls return at once.
    pub fn pin_current_thread_once(&self) {
        if PINNED.with(|pinned| pinned.replace(true)) {
            return;
        }
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.cpus.len();
        let cpu = self.cpus[index];
        if let Err(error) = set_current_thread_cpus(&[cpu]) {
            tracing::warn!(cpu, %error, "could not pin a worker thread: it floats");
        }
    }
}

/// Gives the calling thread back every CPU the process could use (undoing an affinity
/// inherited from a pinned worker). Does nothing when no worker was pinned.
pub fn unpin_current_thread() {
    let Some(cpus) = PROCESS_CPUS.get() else {
        return;
    };
    if PINNED.with(Cell::get) {
        return;
    }
    if let Err(error) = set_current_thread_cpus(cpus) {
        tracing::warn!(%error, "could not widen a thread's CPU affinity");
    }
}

/// The CPUs the calling thread may run on, ascending.
pub fn current_thread_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the set is valid for its size; 0 names the calling thread.
    let result = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if result != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let capacity = 8 * size_of::<libc::cpu_set_t>();
    // SAFETY: every index is below the set's capacity in bits.
    Ok((0..capacity)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

fn set_current_thread_cpus(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let capacity = 8 * size_of::<libc::cpu_set_t>();
    for &cpu in cpus {
        if cpu >= capacity {
            return Err(std::io::Error::other(format!(
                "CPU {cpu} is past the set's {capacity}"
            )));
        }
        // SAFETY: cpu is below the set's capacity in bits.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: the set is valid for its size; 0 names the calling thread.
    let result = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if result != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_get_a_cpu_each_and_other_threads_get_all_of_them_back() {
        let Some(pinning) = WorkerPinning::for_process().expect("affinity readable") else {
            // One CPU: nothing to pin, and the plan says so.
            assert!(current_thread_cpus().expect("affinity readable").len() < 2);
            return;
        };
        let process = current_thread_cpus().expect("affinity readable");
        assert_eq!(pinning.cpus(), process.as_slice());
        let pinning = std::sync::Arc::new(pinning);
        let workers: Vec<_> = (0..process.len())
            .map(|_| {
                let pinning = std::sync::Arc::clone(&pinning);
                std::thread::spawn(move || {
                    pinning.pin_current_thread_once();
                    pinning.pin_current_thread_once();
                    let pinned = current_thread_cpus().expect("affinity readable");
                    // A thread it starts inherits the one CPU, and widens it back.
                    let (inherited, widened) = std::thread::spawn(|| {
                        let inherited = current_thread_cpus().expect("affinity readable");
                        unpin_current_thread();
                        (inherited, current_thread_cpus().expect("affinity readable"))
                    })
                    .join()
                    .expect("child thread");
                    (pinned, inherited, widened)
                })
            })
            .collect();
        let mut seen = Vec::new();
        for worker in workers {
            let (pinned, inherited, widened) = worker.join().expect("worker thread");
            assert_eq!(pinned.len(), 1, "a worker is pinned to one CPU: {pinned:?}");
            assert_eq!(inherited, pinned);
            assert_eq!(widened, process);
            seen.extend(pinned);
        }
        seen.sort_unstable();
        assert_eq!(seen, process, "each CPU gets one worker");
        // The test's own thread was never pinned.
        assert_eq!(current_thread_cpus().expect("affinity readable"), process);
    }
}
