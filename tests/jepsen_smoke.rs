//! A short run of the fault-injection suite per fault class (`jepsen/run`): three real nodes,
//! confluent-kafka producers and consumers, a fault every few seconds (kill -9, SIGSTOP,
//! network partitions, a slow or lossy network, a crash that loses unsynced writes); the
//! history must pass the checker (no lost, unseen, duplicate or reordered records, writes
//! again within 15 s of healing). Network faults need root (namespaces): CI runs as root, and
//! without root `jepsen/run` refuses them, which fails the test rather than skipping it.

use std::path::Path;
use std::process::Command;

/// One run at a time: five clusters with their clients at once on two cores would measure the
/// machine, not the broker.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn smoke(nemesis: &str) {
    smoke_on(nemesis, &["--interval", "2"]);
}

/// A run with `extra` arguments for `jepsen/run` (node count, partitions, fault interval).
fn smoke_on(nemesis: &str, extra: &[&str]) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let store = tempfile::tempdir().expect("tempdir");
    let runner = Path::new(env!("CARGO_MANIFEST_DIR")).join("jepsen/run");
    let output = Command::new("python3")
        .arg(runner)
        .args([
            "--time",
            "12",
            "--recovery",
            "6",
            "--nemesis",
            nemesis,
            "--seed",
            "7",
        ])
        .args(extra)
        .arg("--sluice")
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .arg("--store")
        .arg(store.path())
        .output()
        .expect("jepsen/run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "jepsen/run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(store.path().join("plot.png").exists(), "no plot");
    let history = std::fs::read_to_string(store.path().join("history.jsonl")).expect("history");
    let events = sluice_jepsen::parse(&history).expect("parse history");
    let report = sluice_jepsen::check(&events);
    println!("{nemesis}: {}", sluice_jepsen::summary(&report));
    assert!(report.valid, "{}", sluice_jepsen::summary(&report));
    assert!(report.faults_injected >= 2, "{report:?}");
    assert!(
        report.write_recovery_ms.is_some(),
        "no healing in the history: {report:?}"
    );
    assert!(report.acknowledged_sends > 1000, "{report:?}");
}

#[test]
fn queue_workload_survives_kill_9() {
    smoke("kill");
}

#[test]
fn queue_workload_survives_pauses() {
    smoke("pause");
}

#[test]
fn queue_workload_survives_network_partitions() {
    smoke("partition");
}

#[test]
fn queue_workload_survives_a_slow_and_lossy_network() {
    smoke("latency,loss");
}

#[test]
fn queue_workload_survives_crashes_that_lose_unsynced_writes() {
    smoke("crash-unsynced");
}

/// Five nodes, six partitions, a kill -9 every 1.5 s (random nodes, partition leaders, the
/// quorum leader, often the same node again right after its restart): the shape of the run
/// that stored records twice when a restarted broker came back leading from its old image.
#[test]
fn queue_workload_survives_kill_9_on_five_nodes() {
    smoke_on(
        "kill",
        &["--nodes", "5", "--partitions", "6", "--interval", "1.5"],
    );
}
