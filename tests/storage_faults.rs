//! The storage fault hook the fault-injection suite uses (`SLUICE_FAULT_SYNC_JOURNAL`,
//! `jepsen/faults.py drop-unsynced`), and what it shows: after a kill -9 that also loses every
//! byte never fdatasync'ed (a power cut), `log.flush.policy=always` keeps every acknowledged
//! record, and the default policy (fsync left to the OS, durability from replication) does not
//! on a single node.

mod support;

use std::path::Path;
use std::process::Command;

use support::{SingleNode, confluent};

const RECORDS: usize = 3000;

/// Produces, kills the node with kill -9, drops its unsynced bytes and restarts it. Returns
/// the bytes dropped and the records read back.
fn produce_crash_and_lose_unsynced(flush_policy: &str) -> (u64, usize) {
    let journal_dir = tempfile::tempdir().expect("tempdir");
    let journal = journal_dir.path().join("sync-journal");
    let journal_text = journal.display().to_string();
    let mut node = SingleNode::start_with_env(
        &[&format!("log.flush.policy={flush_policy}")],
        &[("SLUICE_FAULT_SYNC_JOURNAL", &journal_text)],
    );
    let count = RECORDS.to_string();
    confluent(&node, "produce", &["power-cut", &count, "all", "r"]);
    node.kill9();
    let faults = Path::new(env!("CARGO_MANIFEST_DIR")).join("jepsen/faults.py");
    let output = Command::new("python3")
        .arg(faults)
        .arg("drop-unsynced")
        .arg(node.data_dir())
        .arg(&journal)
        .output()
        .expect("jepsen/faults.py");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dropped: u64 = stdout
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {stdout}"));
    node.restart();
    let values = confluent(&node, "dump", &["power-cut", "1"]);
    let read: Vec<&str> = values.lines().filter(|l| *l != "dump: ok").collect();
    // Whatever survived is a prefix of what was acknowledged, in order.
    for (i, value) in read.iter().enumerate() {
        assert_eq!(*value, format!("r{i}"), "record {i} after the power cut");
    }
    (dropped, read.len())
}

#[test]
fn flush_policy_always_keeps_every_acknowledged_record_through_a_power_cut() {
    let (dropped, read) = produce_crash_and_lose_unsynced("always");
    assert_eq!(dropped, 0, "acknowledged bytes were not synced");
    assert_eq!(read, RECORDS);
}

#[test]
fn the_default_flush_policy_loses_unsynced_records_on_one_node() {
    // The control: the hook really drops data, so the test above can fail.
    let (dropped, read) = produce_crash_and_lose_unsynced("interval");
    assert!(dropped > 0, "nothing was dropped");
    assert!(read < RECORDS, "{read} records survived");
}
