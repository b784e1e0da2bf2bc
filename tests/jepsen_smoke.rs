//! A short run of the fault-injection suite per fault class (`jepsen/run`): three real nodes,
//! confluent-kafka producers and consumers, kill -9 or SIGSTOP of nodes every few seconds; the
//! history must pass the checker (no lost, unseen, duplicate or reordered records).

use std::path::Path;
use std::process::Command;

fn smoke(nemesis: &str) {
    let store = tempfile::tempdir().expect("tempdir");
    let runner = Path::new(env!("CARGO_MANIFEST_DIR")).join("jepsen/run");
    let output = Command::new("python3")
        .arg(runner)
        .args([
            "--time",
            "12",
            "--interval",
            "2",
            "--nemesis",
            nemesis,
            "--seed",
            "7",
        ])
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
