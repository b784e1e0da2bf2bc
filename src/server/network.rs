//! Network threads: each Kafka connection is served, for its whole life, by one thread pinned
//! to one CPU (`thread.affinity`, on by default), as Kafka's processors own their connections
//! and a thread-per-core broker's shards own theirs.
//!
//! Why: served by a pool of floating workers, a connection's requests were answered on
//! whichever CPU looked idle at that instant, moving with nearly every request and preempting
//! the client threads they landed beside. librdkafka consuming one partition on two CPUs read
//! 4.0-4.3 M records/s so, and 5.4-5.7 M with the broker's answers kept on one CPU
//! (`benches/consume_cycle.py`).
//!
//! Each network thread is a tokio runtime of one worker (not a current-thread runtime: the
//! produce path uses `block_in_place`), named `sluice-net-<i>`. Every thread of that runtime
//! is pinned to its CPU as it starts: its worker, and its blocking pool's threads, since
//! `block_in_place` hands the worker over to one of those while an append may fsync or a
//! batch is recompressed (the pool also runs the little `spawn_blocking` work of requests
//! served here). A new connection goes to the thread serving the fewest.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::runtime::{Handle, Runtime};

use crate::thread_affinity;

pub struct NetworkThreads {
    threads: Vec<NetworkThread>,
}

struct NetworkThread {
    /// `None` once shut down (`Drop`).
    runtime: Option<Runtime>,
    cpu: usize,
    connections: Arc<AtomicUsize>,
}

/// Counts a connection against its network thread while it lives.
pub struct ConnectionSlot(Arc<AtomicUsize>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl NetworkThreads {
    /// One network thread per CPU the process may use, or `None` with fewer than two CPUs
    /// (nothing to choose between: the node's own runtime serves connections).
    pub fn start() -> std::io::Result<Option<NetworkThreads>> {
        let cpus = thread_affinity::process_cpus()?;
        if cpus.len() < 2 {
            return Ok(None);
        }
        let mut threads = Vec::with_capacity(cpus.len());
        for (index, &cpu) in cpus.iter().enumerate() {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .thread_name(format!("sluice-net-{index}"))
                .on_thread_start({
                    let warned = Arc::new(AtomicBool::new(false));
                    move || pin_network_thread(cpu, &warned)
                })
                .build()?;
            threads.push(NetworkThread {
                runtime: Some(runtime),
                cpu,
                connections: Arc::new(AtomicUsize::new(0)),
            });
        }
        Ok(Some(NetworkThreads { threads }))
    }

    /// The CPUs of the network threads, in thread order.
    pub fn cpus(&self) -> Vec<usize> {
        self.threads.iter().map(|thread| thread.cpu).collect()
    }

    /// Per thread, in order: its CPU and its count of open connections (for `/metrics`).
    pub fn connection_counts(&self) -> Vec<(usize, Arc<AtomicUsize>)> {
        self.threads
            .iter()
            .map(|thread| (thread.cpu, Arc::clone(&thread.connections)))
            .collect()
    }

    /// The network thread serving the fewest connections (the first of equals), and the
    /// slot that counts the new one there until dropped.
    pub fn assign(&self) -> Option<(Handle, ConnectionSlot)> {
        let thread = self
            .threads
            .iter()
            .min_by_key(|thread| thread.connections.load(Ordering::Relaxed))?;
        let runtime = thread.runtime.as_ref()?;
        thread.connections.fetch_add(1, Ordering::Relaxed);
        Some((
            runtime.handle().clone(),
            ConnectionSlot(Arc::clone(&thread.connections)),
        ))
    }
}

impl Drop for NetworkThread {
    fn drop(&mut self) {
        // Dropping a runtime waits for its blocking threads, which is refused inside async
        // code (the node starts and stops these threads there). Connections still open, after
        // the listener's drain or its grace period, are dropped without waiting.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Pins a starting thread of a network runtime to its CPU; a failure is said once per
/// runtime (its blocking-pool threads come and go).
fn pin_network_thread(cpu: usize, warned: &AtomicBool) {
    if let Err(error) = thread_affinity::pin_current_thread(cpu)
        && !warned.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(cpu, %error, "could not pin a network thread: its threads float");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_go_to_the_least_busy_thread_and_its_worker_runs_on_its_cpu() {
        let Some(threads) = NetworkThreads::start().expect("network threads") else {
            assert!(thread_affinity::process_cpus().expect("cpus").len() < 2);
            return;
        };
        let cpus = threads.cpus();
        assert_eq!(cpus, thread_affinity::process_cpus().expect("cpus"));
        let first = threads.assign().expect("a thread");
        let second = threads.assign().expect("a thread");
        assert_ne!(
            first.0.id(),
            second.0.id(),
            "the second goes to the idle thread"
        );
        drop(first.1);
        let third = threads.assign().expect("a thread");
        assert_eq!(
            third.0.id(),
            first.0.id(),
            "the freed thread is the least busy again"
        );
        // A task on the first thread runs on its CPU, once the worker has parked once.
        let (sender, receiver) = std::sync::mpsc::channel();
        first.0.spawn(async move {
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            let _ = sender.send(thread_affinity::current_thread_cpus());
        });
        let ran_on = receiver
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the task ran")
            .expect("affinity readable");
        assert_eq!(ran_on, vec![cpus[0]]);
        // So does its blocking pool, which runs the worker while an append blocks.
        let blocking = first.0.spawn_blocking(thread_affinity::current_thread_cpus);
        let ran_on = first
            .0
            .block_on(blocking)
            .expect("blocking task")
            .expect("affinity readable");
        assert_eq!(ran_on, vec![cpus[0]]);
    }
}
