//! CPU affinity of the broker's threads (`thread.affinity`).
//!
//! With it on, the Kafka listener's network threads are pinned one to each CPU the process
//! may use (`server::network`). A thread inherits its creator's affinity, so every other
//! thread a pinned one may start (the node runtime's blocking pool, the log's threads, the
//! writeback thread the first append starts) first widens its own back to the process's CPUs
//! with [`unpin_current_thread`].

use std::cell::Cell;
use std::sync::OnceLock;

/// The CPUs the process could use when pinning was set up: what other threads get back.
static PROCESS_CPUS: OnceLock<Vec<usize>> = OnceLock::new();

thread_local! {
    static PINNED: Cell<bool> = const { Cell::new(false) };
}

/// The CPUs the process may use, ascending, remembered for [`unpin_current_thread`]. Call
/// it before pinning any thread, from a thread that is not pinned.
pub fn process_cpus() -> std::io::Result<Vec<usize>> {
    if let Some(cpus) = PROCESS_CPUS.get() {
        return Ok(cpus.clone());
    }
    let cpus = current_thread_cpus()?;
    Ok(PROCESS_CPUS.get_or_init(|| cpus).clone())
}

/// Pins the calling thread to `cpu`; it is then left alone by [`unpin_current_thread`].
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    set_current_thread_cpus(&[cpu])?;
    PINNED.with(|pinned| pinned.set(true));
    Ok(())
}

/// Gives the calling thread back every CPU the process could use (undoing an affinity
/// inherited from a pinned thread). Does nothing on a pinned thread, or before
/// [`process_cpus`] was called.
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
    fn a_pinned_thread_keeps_its_cpu_and_the_threads_it_starts_get_all_back() {
        let process = process_cpus().expect("affinity readable");
        let last = *process.last().expect("at least one CPU");
        let (pinned, inherited, widened, kept) = std::thread::spawn(move || {
            pin_current_thread(last).expect("pin");
            let pinned = current_thread_cpus().expect("affinity readable");
            let (inherited, widened) = std::thread::spawn(|| {
                let inherited = current_thread_cpus().expect("affinity readable");
                unpin_current_thread();
                (inherited, current_thread_cpus().expect("affinity readable"))
            })
            .join()
            .expect("child thread");
            // A pinned thread is not widened.
            unpin_current_thread();
            (
                pinned,
                inherited,
                widened,
                current_thread_cpus().expect("affinity readable"),
            )
        })
        .join()
        .expect("pinned thread");
        assert_eq!(pinned, vec![last]);
        assert_eq!(
            inherited,
            vec![last],
            "a thread inherits its creator's affinity"
        );
        assert_eq!(widened, process);
        assert_eq!(kept, vec![last]);
        assert_eq!(current_thread_cpus().expect("affinity readable"), process);
    }
}
