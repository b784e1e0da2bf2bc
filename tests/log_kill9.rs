//! Real processes: a `sluice` process appends to a log and is killed with SIGKILL at a moment
//! the test does not control; reopening the log must keep every append the process had
//! acknowledged, exactly once and in order, and nothing torn.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sluice::log::batch::BatchIter;
use sluice::log::{LogManager, LogManagerConfig, SystemClock, TopicPartition};

/// Starts a writer, lets it acknowledge appends for a while, kills it, and returns the last
/// offset it acknowledged.
fn run_writer_and_kill(dir: &Path, flush_policy: &str, run_ms: u64) -> u64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "perf",
            "log-writer",
            "--bytes",
            "1MiB",
            "--print-acks",
            "--flush-policy",
            flush_policy,
            "--dir",
        ])
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start sluice");
    let stdout = child.stdout.take().expect("stdout");
    let (first_ack, acked) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut last_ack = None;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(offset) = line.strip_prefix("ack ") {
                if last_ack.is_none() {
                    let _ = first_ack.send(());
                }
                last_ack = Some(offset.parse::<u64>().expect("offset"));
            }
        }
        last_ack
    });
    // The kill comes `run_ms` after the first acknowledgement: a loaded machine can take longer
    // than that to start the writer at all (a debug build beside other tests).
    let _ = acked.recv_timeout(Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(run_ms));
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    reader
        .join()
        .expect("reader")
        .expect("the writer acknowledged appends")
}

fn check_log_after_kill(dir: &Path, last_ack: u64) {
    let config = LogManagerConfig {
        log_dirs: vec![dir.to_path_buf()],
        ..LogManagerConfig::default()
    };
    let manager = LogManager::open(config, Arc::new(SystemClock)).expect("reopen");
    let log = manager
        .get(&TopicPartition::new("perf", 0))
        .expect("log exists");
    assert!(
        log.log_end_offset() > last_ack,
        "acknowledged offset {last_ack} lost: log ends at {}",
        log.log_end_offset()
    );
    let mut offset = 0;
    let mut expected_base = 0;
    while let Some(slice) = log.read(offset, 1 << 20, None).expect("read").slice {
        let bytes = slice.to_vec().expect("slice");
        for item in BatchIter::new(&bytes) {
            let (_, header, batch) = item.expect("only whole batches are readable");
            assert_eq!(
                header.base_offset as u64, expected_base,
                "offsets are contiguous"
            );
            sluice::log::batch::validate_batch(0, &header, batch).expect("every batch is valid");
            expected_base = header.last_offset() as u64 + 1;
            offset = expected_base;
        }
    }
    assert_eq!(expected_base, log.log_end_offset());
    manager.shutdown().expect("shutdown");
}

#[test]
fn acknowledged_appends_survive_kill_9_with_flush_policy_always() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let last_ack = run_writer_and_kill(dir.path(), "always", 400 + 150 * round);
        check_log_after_kill(dir.path(), last_ack);
    }
}

#[test]
fn acknowledged_appends_survive_kill_9_with_the_default_flush_policy() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let last_ack = run_writer_and_kill(dir.path(), "interval", 300 + 100 * round);
        check_log_after_kill(dir.path(), last_ack);
    }
}

#[test]
fn perf_log_runs_and_reports_ratios() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "perf",
            "log",
            "--total-bytes",
            "4MiB",
            "--restart-bytes",
            "6MiB",
            "--appenders",
            "4",
            "--dir",
        ])
        .arg(dir.path().join("perf"))
        // Keep the machine's page cache: this is a smoke run, not a measurement.
        .env("SLUICE_PERF_HOT", "1")
        .output()
        .expect("run sluice perf log");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "raw write",
        "x raw write",
        "always, 4 appender(s)",
        "x raw read",
        "restart after kill -9",
    ] {
        assert!(text.contains(expected), "missing '{expected}' in:\n{text}");
    }
}
