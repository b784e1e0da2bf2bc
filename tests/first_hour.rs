//! What a new user meets in the first hour: a setting that promises what Sluice does not do
//! stops the node with one line; a node answers clients only once it serves them (`/ready`),
//! so the README's quick start runs as a script with no sleeps.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::free_port;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

/// `sluice server` on free ports in `dir` with `overrides`, not waited for.
fn spawn_server(dir: &Path, overrides: &[String]) -> (Child, u16, u16) {
    let (kafka, quorum, http) = (free_port(), free_port(), free_port());
    let mut command = sluice();
    command.arg("server");
    let mut all = vec![
        format!("listeners=PLAINTEXT://127.0.0.1:{kafka},CONTROLLER://127.0.0.1:{quorum}"),
        format!("http.listener=127.0.0.1:{http}"),
        format!("log.dirs={}", dir.join("data").display()),
    ];
    all.extend(overrides.iter().cloned());
    for o in &all {
        command.arg("--override").arg(o);
    }
    let log = std::fs::File::create(dir.join("server.log")).expect("log file");
    let child = command
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start sluice");
    (child, kafka, http)
}

/// GET `path` on the HTTP listener: (status code, body), or None while it does not answer.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// A security setting Sluice does not implement stops the node at once, with one line that
/// names the key and says why.
#[test]
fn a_setting_that_promises_security_stops_the_node_with_one_line() {
    let cases: &[(&[&str], &str, &str)] = &[
        (
            // A TLS listener needs its certificate.
            &["listeners=SSL://127.0.0.1:{kafka},CONTROLLER://127.0.0.1:{quorum}"],
            "for ssl.keystore.location:",
            "TLS listener without a certificate",
        ),
        (
            // TLS keys without a TLS listener would do nothing.
            &["ssl.keystore.location=/etc/kafka/server.keystore.jks"],
            "for ssl.keystore.location:",
            "no listener of this node is SSL or SASL_SSL",
        ),
        (
            // A Java authorizer class Sluice cannot run (Kafka's KRaft one is served).
            &["authorizer.class.name=kafka.security.authorizer.AclAuthorizer"],
            "for authorizer.class.name:",
            "only Kafka's KRaft authorizer is served",
        ),
        (
            // Would do nothing without an authorizer.
            &["super.users=User:admin"],
            "for super.users:",
            "super.users needs an authorizer",
        ),
        (
            // Kafka's default mechanism on a SASL listener is GSSAPI.
            &["listeners=SASL_PLAINTEXT://127.0.0.1:{kafka},CONTROLLER://127.0.0.1:{quorum}"],
            "for sasl.enabled.mechanisms:",
            "SASL mechanism GSSAPI is not implemented",
        ),
        (
            &["sasl.kerberos.service.name=kafka"],
            "for sasl.kerberos.service.name:",
            "GSSAPI (Kerberos) is not implemented",
        ),
    ];
    for (overrides, names_key, says) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (kafka, quorum) = (free_port(), free_port());
        let mut command = sluice();
        command
            .arg("server")
            .arg("--override")
            .arg(format!(
                "listeners=PLAINTEXT://127.0.0.1:{kafka},CONTROLLER://127.0.0.1:{quorum}"
            ))
            .arg("--override")
            .arg(format!("http.listener=127.0.0.1:{}", free_port()))
            .arg("--override")
            .arg(format!("log.dirs={}", dir.path().join("data").display()));
        for o in *overrides {
            let o = o
                .replace("{kafka}", &kafka.to_string())
                .replace("{quorum}", &quorum.to_string());
            command.arg("--override").arg(o);
        }
        let started = Instant::now();
        let output = command.output().expect("run sluice");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{overrides:?} started:\n{stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "refusing took {:?}",
            started.elapsed()
        );
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{overrides:?}: one line, got:\n{stderr}");
        assert!(lines[0].contains(names_key), "{overrides:?}: {stderr}");
        assert!(lines[0].contains(says), "{overrides:?}: {stderr}");
    }
}

/// Known Kafka keys Sluice does not use are a warning that says what Sluice does instead;
/// `sluice configs keys` lists every such key with what it does to start-up.
#[test]
fn unimplemented_kafka_keys_are_listed_and_warned_about() {
    let output = sluice().args(["configs", "keys"]).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name} not listed:\n{text}"))
            .to_owned()
    };
    assert!(line("ssl.* ").contains("refused"));
    assert!(line("principal.builder.class ").contains("refused unless empty"));
    assert!(line("sasl.kerberos.* ").contains("refused"));
    assert!(line("num.io.threads ").contains("no effect"));

    let dir = tempfile::tempdir().unwrap();
    let (mut child, _, http) = spawn_server(
        dir.path(),
        &["num.io.threads=8".to_owned(), "no.such.key=1".to_owned()],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(http, "/ready").is_none_or(|(status, _)| status != 200) {
        assert!(Instant::now() < deadline, "not ready in 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    assert!(
        log.contains(
            "num.io.threads is a Kafka key Sluice does not implement (no effect): requests are \
             handled on the network threads"
        ),
        "{log}"
    );
    assert!(
        log.contains("unknown configuration key no.such.key (ignored)"),
        "{log}"
    );
}

/// `/ready` says why a broker does not serve yet: a broker whose controller quorum does not
/// answer is never ready, and says so; `/health` (the process answers) is 200 meanwhile.
#[test]
fn ready_is_503_with_the_reason_until_the_broker_serves() {
    let dir = tempfile::tempdir().unwrap();
    let absent_controller = free_port();
    let (mut child, _, http) = spawn_server(
        dir.path(),
        &[
            "node.id=2".to_owned(),
            "process.roles=broker".to_owned(),
            format!("controller.quorum.voters=1@127.0.0.1:{absent_controller}"),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let ready = loop {
        if let Some(answer) = http_get(http, "/ready") {
            break answer;
        }
        assert!(Instant::now() < deadline, "no HTTP listener in 20 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ready.0, 503, "{ready:?}");
    assert!(ready.1.starts_with("not ready node=2: "), "{ready:?}");
    assert!(ready.1.contains("quorum"), "the reason: {ready:?}");
    assert_eq!(http_get(http, "/health").map(|(s, _)| s), Some(200));
    let _ = child.kill();
    let _ = child.wait();
}

/// Straight after start, before the broker is registered, a CreateTopics (the CLI's and
/// kcat's metadata request) waits for the broker instead of failing with "0 available
/// brokers"; `/ready` turns 200 only once it serves.
#[test]
fn requests_right_after_start_wait_for_the_broker_instead_of_failing() {
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let (mut child, kafka, http) = spawn_server(dir.path(), &[]);
        let bootstrap = format!("127.0.0.1:{kafka}");
        // As soon as the port accepts: the broker is not registered yet.
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", kafka)).is_err() {
            assert!(Instant::now() < deadline, "no Kafka listener in 20 s");
            std::thread::sleep(Duration::from_millis(2));
        }
        let create = sluice()
            .args([
                "topics",
                "create",
                "demo",
                "--partitions",
                "3",
                "--bootstrap-server",
                &bootstrap,
            ])
            .output()
            .unwrap();
        let log = || std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
        assert!(
            create.status.success(),
            "round {round}: {}\n{}\n--- server log\n{}",
            String::from_utf8_lossy(&create.stdout),
            String::from_utf8_lossy(&create.stderr),
            log()
        );
        assert_eq!(http_get(http, "/ready").map(|(s, _)| s), Some(200));
        let kcat = Command::new("kcat")
            .args(["-b", &bootstrap, "-L", "-t", "demo"])
            .output()
            .expect("kcat");
        let listing = String::from_utf8_lossy(&kcat.stdout);
        assert!(listing.contains("with 3 partitions"), "{listing}");
        assert!(log().contains("ready: registered, unfenced and caught up"));
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// librdkafka straight after start: a producer that connects the moment the port accepts
/// (before the broker is registered) auto-creates its topic with the broker's defaults and
/// has every record acknowledged; a topic config Kafka has and Sluice does not implement is
/// refused with INVALID_CONFIG and a message that says so.
#[test]
fn librdkafka_straight_after_start_auto_creates_and_produces() {
    let dir = tempfile::tempdir().unwrap();
    let kafka = free_port();
    let script = r#"
import socket, sys, time
from confluent_kafka import Producer, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
port = int(sys.argv[1])
deadline = time.time() + 30
while True:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        if time.time() > deadline:
            sys.exit("no listener")
        time.sleep(0.002)
bootstrap = f"127.0.0.1:{port}"
errors = []
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000})
for i in range(10):
    producer.produce("auto-demo", str(i).encode(), on_delivery=lambda e, m: e and errors.append(str(e)))
assert producer.flush(30) == 0, "undelivered"
assert not errors, errors
admin = AdminClient({"bootstrap.servers": bootstrap})
partitions = len(admin.list_topics("auto-demo", timeout=10).topics["auto-demo"].partitions)
assert partitions == 3, partitions
future = admin.create_topics([NewTopic("jitter", 1, 1, config={"segment.jitter.ms": "100"})])["jitter"]
try:
    future.result(10)
    sys.exit("segment.jitter.ms was accepted")
except KafkaException as e:
    error = e.args[0]
    assert error.name() == "INVALID_CONFIG", error
    assert "does not implement" in error.str(), error.str()
print("ok")
"#;
    let client = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(kafka.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with confluent-kafka (scripts/test installs it)");
    // The client is waiting for the port before the server starts.
    std::thread::sleep(Duration::from_millis(300));
    let quorum = free_port();
    let http = free_port();
    let mut server = sluice()
        .arg("server")
        .args([
            "--override",
            &format!("listeners=PLAINTEXT://127.0.0.1:{kafka},CONTROLLER://127.0.0.1:{quorum}"),
            "--override",
            &format!("http.listener=127.0.0.1:{http}"),
            "--override",
            &format!("log.dirs={}", dir.path().join("data").display()),
            "--override",
            "num.partitions=3",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap())
        .spawn()
        .expect("start sluice");
    let output = client.wait_with_output().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        output.status.success(),
        "{}\n{}\n--- server log\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default()
    );
}

/// The README's quick start, run as it is written (the `scripts/run` of each line replaced by
/// the built binary, in a fresh directory), with no sleeps: each command finds the node it
/// needs or waits for it. Uses the default ports 9092/9093/9644, as the README does.
#[test]
fn the_readme_quick_start_runs_as_a_script() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("<!-- quick start -->")
        .expect("README marks its quick start");
    let block = &readme[start..];
    let body = block
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a sh block after the marker")
        .0;
    for port in [9092, 9093, 9644] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is taken: the quick start needs the default ports"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    // A failing line must not leave the node running on the default ports.
    let script = format!(
        "set -euo pipefail\ntrap 'kill %1 2>/dev/null || true' EXIT\n{}",
        body.replace("scripts/run", "\"$SLUICE\"")
    );
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("SLUICE", env!("CARGO_BIN_EXE_sluice"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "quick start failed:\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    // What the script produced and consumed: the ten records, in partition order.
    let mut values: Vec<u32> = stdout
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    values.sort_unstable();
    assert_eq!(values, (1..=10).collect::<Vec<_>>(), "{stdout}\n{stderr}");
}
