//! What a Kafka user types by habit works on `sluice`: Kafka's quick-start commands with only
//! the tool's name changed, a mistyped flag answered with the closest real one, a client
//! command that waits (boundedly, and saying so) for a broker that is not there, and
//! `topics elect-leaders` as kafka-leader-election.sh. Third-party clients (confluent-kafka,
//! kcat) check what the commands did.

mod support;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{Cluster, SingleNode, stderr_lines};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

/// A command line as Kafka's quick start writes it, the tool's name replaced: must succeed;
/// its stdout.
fn ok(line: &str) -> String {
    ok_with_input(line, None)
}

fn ok_with_input(line: &str, input: Option<&str>) -> String {
    let args = shell_words(line);
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice");
    let mut stdin = child.stdin.take().expect("stdin");
    if let Some(input) = input {
        stdin.write_all(input.as_bytes()).expect("write stdin");
    }
    drop(stdin);
    let output = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "sluice {line}: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Splits a command line at spaces, keeping 'single-quoted' parts whole (as a shell would,
/// for the lines these tests write).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// A confluent-kafka snippet against the node; its stdout.
fn python(bootstrap: &str, code: &str) -> String {
    let output = Command::new("python3")
        .arg("-c")
        .arg(code)
        .arg(bootstrap)
        .output()
        .expect("run python3");
    assert!(
        output.status.success(),
        "python: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn kafka_quickstart_commands_work_with_only_the_tool_name_changed() {
    let node = SingleNode::start(&["auto.create.topics.enable=false"]);
    let b = node.bootstrap();

    // kafka-topics.sh --create / --describe / --list.
    let out = ok(&format!(
        "topics --create --topic quickstart-events --bootstrap-server {b}"
    ));
    assert_eq!(out.trim(), "Created topic quickstart-events.");
    let out = ok(&format!(
        "topics --describe --topic quickstart-events --bootstrap-server {b}"
    ));
    assert!(
        out.contains("Topic: quickstart-events") && out.contains("PartitionCount: 1"),
        "{out}"
    );
    let out = ok(&format!("topics --list --bootstrap-server {b}"));
    assert!(out.lines().any(|l| l == "quickstart-events"), "{out}");

    // kafka-console-producer.sh, then kafka-console-consumer.sh --from-beginning: the consumer
    // prints the values, one a line.
    ok_with_input(
        &format!("produce --topic quickstart-events --bootstrap-server {b}"),
        Some("This is my first event\nThis is my second event\n"),
    );
    let out = ok(&format!(
        "consume --topic quickstart-events --from-beginning --bootstrap-server {b} --max-messages 2"
    ));
    assert_eq!(out, "This is my first event\nThis is my second event\n");

    // The producer's old --broker-list; keys by --property, as both console tools take them.
    ok_with_input(
        &format!(
            "produce --broker-list {b} --topic quickstart-events --property parse.key=true --property key.separator=:"
        ),
        Some("k1:third\n"),
    );
    let out = ok(&format!(
        "consume --bootstrap-server {b} --topic quickstart-events --from-beginning --max-messages 3 --property print.key=true --property key.separator=:"
    ));
    assert_eq!(
        out,
        "null:This is my first event\nnull:This is my second event\nk1:third\n"
    );
    let out = ok(&format!(
        "consume --bootstrap-server {b} --topic quickstart-events --partition 0 --offset 2 --max-messages 1 --property print.offset=true --property print.partition=true"
    ));
    assert_eq!(out, "Partition:0\tOffset:2\tthird\n");
    // kcat sees the key the producer parsed.
    let kcat = Command::new("kcat")
        .args([
            "-b",
            &b,
            "-C",
            "-t",
            "quickstart-events",
            "-o",
            "2",
            "-c",
            "1",
        ])
        .args(["-e", "-f", "%k=%s\n"])
        .output()
        .expect("kcat");
    assert_eq!(String::from_utf8_lossy(&kcat.stdout), "k1=third\n");

    // kafka-consumer-groups.sh --list / --describe --group, after a group consumed.
    ok(&format!(
        "consume --bootstrap-server {b} --topic quickstart-events --group g1 --from-beginning --max-messages 3"
    ));
    let out = ok(&format!("groups --bootstrap-server {b} --list"));
    assert!(out.contains("g1"), "{out}");
    let out = ok(&format!(
        "groups --bootstrap-server {b} --describe --group g1"
    ));
    assert!(out.contains("quickstart-events"), "{out}");
    // --describe --state and --members, kafka-consumer-groups.sh's other views: g1's consumer
    // has gone; a live kcat member of g2 is listed with its partition.
    let out = ok(&format!(
        "groups --bootstrap-server {b} --describe --group g1 --state"
    ));
    assert!(
        out.contains("ASSIGNMENT-STRATEGY") && out.contains("Empty"),
        "{out}"
    );
    let out = ok(&format!(
        "groups --bootstrap-server {b} --describe --group g1 --members"
    ));
    assert_eq!(out.trim(), "Consumer group 'g1' has no active members.");
    let mut member = Command::new("kcat")
        .args(["-b", &b, "-G", "g2", "quickstart-events"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kcat");
    let deadline = Instant::now() + Duration::from_secs(30);
    let members = loop {
        // GROUP_ID_NOT_FOUND until kcat's first join.
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(shell_words(&format!(
                "groups --bootstrap-server {b} --describe --group g2 --members --verbose"
            )))
            .output()
            .expect("run sluice");
        let out = String::from_utf8_lossy(&output.stdout).into_owned();
        if out.contains("quickstart-events(0)") || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = member.kill();
    let _ = member.wait();
    assert!(members.contains("#PARTITIONS"), "{members}");
    assert!(members.contains("quickstart-events(0)"), "{members}");

    // kafka-configs.sh --alter --add-config with a list value, then --describe; confluent-kafka
    // reads what was set.
    let out = ok(&format!(
        "configs --bootstrap-server {b} --entity-type topics --entity-name quickstart-events --alter --add-config 'retention.ms=86400000,cleanup.policy=[compact,delete]'"
    ));
    assert_eq!(
        out.trim(),
        "Completed updating config for topic quickstart-events."
    );
    let out = ok(&format!(
        "configs --bootstrap-server {b} --entity-type topics --entity-name quickstart-events --describe"
    ));
    assert!(
        out.starts_with("Dynamic configs for topic quickstart-events are:"),
        "{out}"
    );
    let read_configs = r#"
import sys
from confluent_kafka.admin import AdminClient, ConfigResource
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
resource = ConfigResource("topic", "quickstart-events")
configs = admin.describe_configs([resource])[resource].result(timeout=10)
print(configs["retention.ms"].value, configs["cleanup.policy"].value)
"#;
    assert_eq!(python(&b, read_configs).trim(), "86400000 compact,delete");
    ok(&format!(
        "configs --bootstrap-server {b} --entity-type topic --entity-name quickstart-events --alter --delete-config retention.ms,cleanup.policy"
    ));
    assert_eq!(python(&b, read_configs).trim(), "604800000 delete");

    // kafka-topics.sh --create with --partitions, --replication-factor and --config; the
    // positional form still works beside it.
    ok(&format!(
        "topics --bootstrap-server {b} --create --topic three --partitions 3 --replication-factor 1 --config retention.ms=5000"
    ));
    let out = ok(&format!("topics describe three --bootstrap-server {b}"));
    assert!(
        out.contains("PartitionCount: 3") && out.contains("retention.ms=5000"),
        "{out}"
    );
    ok(&format!(
        "topics --bootstrap-server {b} --delete --topic three"
    ));
    let out = ok(&format!("topics list --bootstrap-server {b}"));
    assert!(!out.lines().any(|l| l == "three"), "{out}");
}

#[test]
fn a_mistyped_flag_is_answered_with_the_closest_real_flag_never_with_dash_dash() {
    for (line, closest) in [
        ("topics create --topicc t", "'--topic'"),
        ("topics --create --partitons 3 --topic t", "'--partitions'"),
        ("consume --topci t", "'--topic'"),
        ("consume t --from-begining", "'--from-beginning'"),
        ("groups --describe --gruop g", "'--group'"),
        (
            "configs --alter --topic t --add-confg a=1",
            "'--add-config'",
        ),
        ("produce t --bootstrap-servers x:1", "--bootstrap-server"),
        ("topics list --zookeeper x:2181", "--bootstrap-server"),
        // A mistyped action flag, where Kafka's action flags are taken.
        ("topics --lst", "'--list'"),
        (
            "groups --bootstrap-server x:1 --descibe --group g",
            "'--describe'",
        ),
        (
            "configs --entity-type topics --entity-name t --describ",
            "'--describe'",
        ),
        ("configs --entity-type topics", "--describe, --alter"),
    ] {
        let output = sluice(
            &shell_words(line)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{line}: {stderr}");
        assert!(stderr.contains(closest), "{line}: {stderr}");
        assert!(!stderr.contains("'-- "), "{line}: {stderr}");
        assert!(stderr.contains("Usage:"), "{line}: {stderr}");
    }
}

#[test]
fn every_client_command_gives_up_on_an_absent_broker_within_its_bound_naming_it() {
    let port = support::free_port();
    let address = format!("127.0.0.1:{port}");
    let bound = Duration::from_millis(1500);
    let bound_ms = bound.as_millis().to_string();
    let commands: Vec<Vec<&str>> = vec![
        vec!["topics", "list", "--timeout-ms", &bound_ms],
        vec!["produce", "t", "--timeout-ms", &bound_ms],
        vec!["consume", "t", "--broker-timeout-ms", &bound_ms],
        vec!["groups", "list", "--timeout-ms", &bound_ms],
        vec![
            "configs",
            "describe",
            "--entity-type",
            "topics",
            "--entity-name",
            "t",
            "--timeout-ms",
            &bound_ms,
        ],
        vec!["perf", "produce", "--topic", "t", "--timeout-ms", &bound_ms],
        vec!["cluster", "status", "--timeout-ms", &bound_ms],
    ];
    for mut args in commands {
        args.extend(["--bootstrap-server", address.as_str()]);
        let started = Instant::now();
        let output = sluice(&args);
        let elapsed = started.elapsed();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(3), "{args:?}: {stderr}");
        // It waited the bound (not less: it retried), and not much more.
        assert!(
            elapsed >= bound && elapsed < bound + Duration::from_secs(3),
            "{args:?} took {elapsed:?}: {stderr}"
        );
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(
            lines.first().copied(),
            Some(
                format!(
                    "waiting for a broker at {address} (connection refused); giving up in 1.5 s"
                )
                .as_str()
            ),
            "{args:?}: {stderr}"
        );
        let last = lines.last().copied().unwrap_or_default();
        assert!(
            last.starts_with("error: no broker answered within 1.5 s: cannot connect to ")
                && last.contains(&address),
            "{args:?}: {stderr}"
        );
    }
}

/// A command that finds no broker waits for one, and goes on once it answers.
#[test]
fn a_command_waiting_for_a_broker_goes_on_once_it_answers() {
    use std::io::BufRead;

    let mut node = SingleNode::start(&[]);
    ok(&format!(
        "topics --create --topic waited --bootstrap-server {}",
        node.bootstrap()
    ));
    node.kill9();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["topics", "--list", "--bootstrap-server", &node.bootstrap()])
        .args(["--timeout-ms", "60000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut first = String::new();
    stderr.read_line(&mut first).expect("read stderr");
    assert!(
        first.starts_with(&format!("waiting for a broker at {}", node.bootstrap())),
        "{first}"
    );
    node.restart();
    let output = child.wait_with_output().expect("wait");
    assert!(output.status.success(), "{:?}", output.status);
    assert!(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .any(|l| l == "waited"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn elect_leaders_moves_leadership_back_to_the_preferred_replica() {
    // No automatic rebalance: only the command may move leadership back.
    let mut cluster = Cluster::start(3, &["auto.leader.rebalance.enable=false"]);
    let b = cluster.bootstrap();
    ok(&format!(
        "topics --create --topic elect --replica-assignment 1:2:3,2:3:1 --bootstrap-server {b}"
    ));
    let leader_of = |bootstrap: &str, partition: i32| -> Option<i32> {
        let output = Command::new("kcat")
            .args(["-b", bootstrap, "-L", "-t", "elect", "-J"])
            .output()
            .ok()?;
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
        let topic = json["topics"].as_array()?.first()?.clone();
        topic["partitions"]
            .as_array()?
            .iter()
            .find(|p| p["partition"] == partition)
            .and_then(|p| p["leader"].as_i64())
            .map(|l| l as i32)
    };
    let isr_of = |bootstrap: &str, partition: i32| -> Vec<i64> {
        let output = Command::new("kcat")
            .args(["-b", bootstrap, "-L", "-t", "elect", "-J"])
            .output()
            .expect("kcat");
        // kcat -J: "isrs": [{"id": 1}, ...].
        let json: serde_json::Value =
            serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
        json["topics"][0]["partitions"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["partition"] == partition))
            .and_then(|p| p["isrs"].as_array())
            .map(|isr| isr.iter().filter_map(|r| r["id"].as_i64()).collect())
            .unwrap_or_default()
    };
    cluster.wait_until("node 1 leads elect-0", Duration::from_secs(30), |c| {
        leader_of(&c.bootstrap(), 0) == Some(1)
    });

    // Node 1 goes away: partition 0 fails over. Back, it catches up but does not lead.
    cluster.kill9(0);
    let survivors = format!(
        "127.0.0.1:{},127.0.0.1:{}",
        cluster.nodes[1].kafka_port, cluster.nodes[2].kafka_port
    );
    cluster.wait_until("elect-0 fails over", Duration::from_secs(30), |_| {
        leader_of(&survivors, 0).is_some_and(|l| l != 1 && l > 0)
    });
    cluster.start_node(0);
    cluster.wait_until(
        "node 1 is back in elect-0's ISR",
        Duration::from_secs(60),
        |_| isr_of(&survivors, 0).contains(&1),
    );
    assert_ne!(
        leader_of(&survivors, 0),
        Some(1),
        "nothing moved it back yet"
    );

    let out = ok(&format!(
        "topics elect-leaders --election-type preferred --topic elect --bootstrap-server {b}"
    ));
    assert_eq!(
        out,
        "Successfully completed leader election (PREFERRED) for partitions elect-0\n\
         Valid replica already elected for partitions elect-1\n"
    );
    cluster.wait_until(
        "kcat sees node 1 lead elect-0",
        Duration::from_secs(30),
        |_| leader_of(&survivors, 0) == Some(1),
    );
    // Again, Kafka's spelling of one partition: nothing to do, and said so.
    let out = ok(&format!(
        "topics elect-leaders --bootstrap-server {b} --election-type PREFERRED --topic elect --partition 0"
    ));
    assert_eq!(
        out,
        "Valid replica already elected for partitions elect-0\n"
    );
    // --all-topic-partitions on a cluster where every preferred replica leads: Kafka answers
    // no partition (it leaves out ELECTION_NOT_NEEDED when none were named), and
    // kafka-leader-election.sh prints nothing.
    let out = ok(&format!(
        "topics elect-leaders --bootstrap-server {b} --election-type preferred --all-topic-partitions"
    ));
    assert_eq!(out, "", "every preferred replica leads already");
}

/// Waits for a line that `wanted` accepts; panics with what came before after `timeout`.
fn expect_line(
    lines: &std::sync::mpsc::Receiver<String>,
    timeout: Duration,
    what: &str,
    wanted: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if wanted(&line) => return line,
            Ok(line) => seen.push(line),
            Err(_) => panic!(
                "no line {what} within {timeout:?}; got:\n{}",
                seen.join("\n")
            ),
        }
    }
}

#[test]
fn a_broker_gone_in_the_middle_of_a_command_is_reported_not_waited_on_in_silence() {
    let mut node = SingleNode::start(&[]);
    let b = node.bootstrap();
    ok(&format!("topics create gone --bootstrap-server {b}"));
    let spawn = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .args(["--bootstrap-server", &b])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run sluice")
    };
    let mut perf = spawn(&[
        "perf",
        "produce",
        "--topic",
        "gone",
        "--num-records",
        "100000000",
        "--throughput",
        "200",
    ]);
    let mut consume = spawn(&["consume", "gone"]);
    let perf_lines = stderr_lines(&mut perf);
    let consume_lines = stderr_lines(&mut consume);
    // The benchmark is under way (its progress line every 5 s), the consumer reading.
    expect_line(&perf_lines, Duration::from_secs(30), "of progress", |l| {
        l.contains("records sent")
    });

    node.kill9();
    let killed = Instant::now();
    let gone = format!("no broker at {b} answers (connection refused); still trying");
    let line = expect_line(
        &perf_lines,
        Duration::from_secs(20),
        "about the stall",
        |l| l.contains("waiting for acknowledgement"),
    );
    assert!(line.ends_with(&gone), "{line}");
    expect_line(
        &consume_lines,
        Duration::from_secs(20),
        "about the broker",
        |l| l == gone,
    );
    // Said within two report periods and a probe, not after the client's own timeouts.
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "{:?}",
        killed.elapsed()
    );
    for mut child in [perf, consume] {
        let _ = child.kill();
        let _ = child.wait();
    }
}
