//! A small corpus run of the request fuzzer (`sluice fuzz`): random and mutated frames of every
//! served API and version through the real request path of a single-node broker; no input may
//! crash it. Long runs (10 million inputs) are run by hand in release.

use std::process::Command;

#[test]
fn mutated_requests_never_crash_the_broker() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    println!("fuzz seed {seed}");
    let findings = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["fuzz", "--inputs", "20000", "--seed", &seed.to_string()])
        .arg("--findings")
        .arg(findings.path())
        .output()
        .expect("sluice fuzz");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success() && stdout.contains("crashes 0"),
        "seed {seed}:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
