//! A small corpus run of the request fuzzer (`sluice fuzz`): random and mutated frames of every
//! served API and version through the real request path of a single-node broker; no input may
//! crash it. Long runs (10 million inputs) are run by hand in release. Then the same through a
//! running broker's SASL_SSL listener.

mod support;

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

/// The same inputs against a running broker's SASL_SSL listener, as clients reach it: each
/// connection makes its TLS handshake and logs in (PLAIN, with the StandardAuthorizer on), then
/// sends mutated request bodies. The broker must answer or close, never crash, and still
/// serve afterwards.
#[test]
fn mutated_requests_over_a_sasl_ssl_listener_never_crash_the_broker() {
    use support::certs::{keystore, make_ca, make_certificate};
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    println!("fuzz seed {seed}");
    let certs = tempfile::tempdir().expect("tempdir");
    let dir = certs.path();
    make_ca(dir, "ca");
    make_certificate(
        dir,
        "ca",
        "server",
        "/CN=localhost",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    );
    let server_keystore = keystore(dir, "server");
    let ca = dir.join("ca.pem");
    let jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                user_fuzzer=\"fuzzer-secret\";";
    let node = support::SingleNode::start_with_listeners(
        &["SASL_SSL"],
        &[
            &format!("ssl.keystore.location={}", server_keystore.display()),
            "sasl.enabled.mechanisms=PLAIN",
            &format!("listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}"),
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS;User:fuzzer",
            "auto.create.topics.enable=false",
        ],
    );
    let command_config = dir.join("fuzzer.properties");
    std::fs::write(
        &command_config,
        format!(
            "security.protocol=SASL_SSL\nssl.truststore.location={}\nsasl.mechanism=PLAIN\n\
             sasl.username=fuzzer\nsasl.password=fuzzer-secret\n",
            ca.display()
        ),
    )
    .expect("command config");
    let sasl_ssl = format!("127.0.0.1:{}", node.listener_port("SASL_SSL"));
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["fuzz", "--inputs", "3000", "--concurrency", "8"])
        .args(["--seed", &seed.to_string(), "--bootstrap-server", &sasl_ssl])
        .arg("--command-config")
        .arg(&command_config)
        .output()
        .expect("sluice fuzz");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    let logs = node.logs();
    assert!(
        output.status.success() && stdout.contains("broker_answers_after true"),
        "seed {seed}:\n{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        support::tail(&logs, 40)
    );
    let answered: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("answered "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(answered > 300, "few inputs reached the handlers:\n{stdout}");
    assert!(!logs.contains("panicked"), "{}", support::tail(&logs, 60));
}
