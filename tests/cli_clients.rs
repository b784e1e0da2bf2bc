//! The `sluice` client commands (built on the SDK) against a real broker: what they print,
//! their errors (Kafka's names, said once) and exit codes; confluent-kafka checks what they did.

mod support;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::{SingleNode, stderr_lines};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

/// Runs a command that must succeed; its stdout.
fn ok(node: &SingleNode, args: &[&str]) -> String {
    let bootstrap = node.bootstrap();
    let mut all = args.to_vec();
    all.extend(["--bootstrap-server", bootstrap.as_str()]);
    let output = sluice(&all);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "sluice {all:?}: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Runs a command that must fail with `code`; its stderr, which must be one line.
fn fails(node: &SingleNode, args: &[&str], code: i32) -> String {
    let bootstrap = node.bootstrap();
    let mut all = args.to_vec();
    all.extend(["--bootstrap-server", bootstrap.as_str()]);
    fails_raw(&all, code)
}

fn fails_raw(args: &[&str], code: i32) -> String {
    let output = sluice(args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(code),
        "sluice {args:?}: {stderr}{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
    stderr
}

#[test]
fn topics_and_configs_commands_do_what_they_say_and_name_kafka_errors() {
    let node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();

    // create, with configs, and again: TOPIC_ALREADY_EXISTS unless --if-not-exists.
    let out = ok(
        &node,
        &[
            "topics",
            "create",
            "orders",
            "--partitions",
            "3",
            "--config",
            "retention.ms=86400000",
        ],
    );
    assert_eq!(out.trim(), "Created topic orders.");
    let err = fails(&node, &["topics", "create", "orders"], 4);
    assert!(
        err.starts_with("error: TOPIC_ALREADY_EXISTS: topic orders"),
        "{err}"
    );
    ok(&node, &["topics", "create", "orders", "--if-not-exists"]);
    ok(
        &node,
        &["topics", "create", "placed", "--replica-assignment", "1,1"],
    );
    let err = fails(
        &node,
        &["topics", "create", "wide", "--replication-factor", "3"],
        4,
    );
    assert!(err.contains("INVALID_REPLICATION_FACTOR"), "{err}");
    let err = fails(&node, &["topics", "create", "bad name!"], 4);
    assert!(err.contains("INVALID_TOPIC_EXCEPTION"), "{err}");

    // list and describe, as text and JSON.
    assert_eq!(ok(&node, &["topics", "list"]), "orders\nplaced\n");
    let json: serde_json::Value = serde_json::from_str(&ok(
        &node,
        &["topics", "describe", "orders", "--output", "json"],
    ))
    .expect("json");
    assert_eq!(json[0]["name"], "orders");
    assert_eq!(json[0]["partitions"].as_array().map(Vec::len), Some(3));
    assert_eq!(json[0]["configs"]["retention.ms"], "86400000");
    assert_eq!(json[0]["partitions"][0]["leader"], 1);
    let text = ok(&node, &["topics", "describe", "placed"]);
    assert!(text.contains("PartitionCount: 2"), "{text}");
    let err = fails(&node, &["topics", "describe", "nope"], 4);
    assert!(
        err.starts_with("error: UNKNOWN_TOPIC_OR_PARTITION: topic nope: "),
        "{err}"
    );

    // alter: partitions and configs; confluent-kafka sees the result.
    ok(
        &node,
        &[
            "topics",
            "alter",
            "orders",
            "--partitions",
            "5",
            "--config",
            "cleanup.policy=compact",
            "--delete-config",
            "retention.ms",
        ],
    );
    let err = fails(
        &node,
        &["topics", "alter", "orders", "--partitions", "2"],
        4,
    );
    assert!(err.contains("INVALID_PARTITIONS"), "{err}");
    let seen = support::run_client(
        &node,
        "python3",
        &[
            "-c",
            "import sys\nfrom confluent_kafka.admin import AdminClient, ConfigResource\n\
             a = AdminClient({'bootstrap.servers': sys.argv[1]})\n\
             t = a.list_topics(timeout=10).topics['orders']\n\
             c = a.describe_configs([ConfigResource('topic', 'orders')])\n\
             c = list(c.values())[0].result()\n\
             print(len(t.partitions), c['cleanup.policy'].value, c['retention.ms'].source)",
            &bootstrap,
        ],
    );
    // retention.ms is back to its default (source 5: DEFAULT_CONFIG).
    assert_eq!(seen.trim(), "5 compact 5");

    // configs describe / alter.
    let text = ok(
        &node,
        &[
            "configs",
            "describe",
            "--entity-type",
            "topic",
            "--entity-name",
            "orders",
        ],
    );
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG"]),
        "{text}"
    );
    let err = fails(
        &node,
        &[
            "configs",
            "alter",
            "--entity-type",
            "topic",
            "--entity-name",
            "orders",
            "--add-config",
            "retention.ms=-5",
        ],
        4,
    );
    assert!(
        err.contains("INVALID_CONFIG") && err.contains("retention.ms"),
        "{err}"
    );
    ok(
        &node,
        &[
            "configs",
            "alter",
            "--entity-type",
            "broker",
            "--entity-name",
            "",
            "--add-config",
            "log.retention.ms=7200000",
        ],
    );
    let text = ok(
        &node,
        &[
            "configs",
            "describe",
            "--entity-type",
            "broker",
            "--entity-name",
            "1",
        ],
    );
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "log.retention.ms",
                    "7200000",
                    "DYNAMIC_DEFAULT_BROKER_CONFIG"
                ]),
        "{text}"
    );

    // delete.
    ok(&node, &["topics", "delete", "orders", "placed"]);
    let err = fails(&node, &["topics", "delete", "orders"], 4);
    assert!(err.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{err}");
    ok(&node, &["topics", "delete", "orders", "--if-exists"]);
    assert_eq!(ok(&node, &["topics", "list"]), "");

    // A list of bootstrap servers is tried in turn; none reachable: exit 3, each cause once
    // (--timeout-ms 0: one try, no wait; tests/cli_habits.rs checks the wait).
    let list = format!("127.0.0.1:1,{bootstrap}");
    let out = sluice(&["topics", "list", "--bootstrap-server", &list]);
    assert!(out.status.success(), "{out:?}");
    let err = fails_raw(
        &[
            "topics",
            "list",
            "--bootstrap-server",
            "127.0.0.1:1",
            "--timeout-ms",
            "0",
        ],
        3,
    );
    assert_eq!(
        err.trim_end(),
        "error: no broker answered within 0 s: cannot connect to 127.0.0.1:1: Connection refused; is a broker listening there?"
    );
    let err = fails_raw(
        &[
            "topics",
            "list",
            "--bootstrap-server",
            "127.0.0.1:1,127.0.0.1:2",
            "--timeout-ms",
            "0",
        ],
        3,
    );
    assert!(
        err.starts_with("error: no broker answered within 0 s: no broker reachable (tried 127.0.0.1:1, 127.0.0.1:2): cannot connect to 127.0.0.1:2"),
        "{err}"
    );
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    let err = fails_raw(&["topics", "list", "--bootstrap-server", "nohost"], 1);
    assert!(err.contains("bootstrap.servers"), "{err}");

    // cluster status through the Kafka port, with a bootstrap list.
    let text = ok(&node, &["cluster", "status"]);
    assert!(text.contains("unfenced"), "{text}");
}

#[test]
fn produce_writes_stdin_lines_that_kcat_reads_back() {
    use std::io::Write;
    use std::process::Stdio;

    let node = SingleNode::start(&["auto.create.topics.enable=false"]);
    let bootstrap = node.bootstrap();
    ok(&node, &["topics", "create", "lines", "--partitions", "3"]);
    let produce = |args: &[&str], input: &str| {
        let mut all = vec!["produce"];
        all.extend_from_slice(args);
        all.extend(["--bootstrap-server", bootstrap.as_str()]);
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(&all)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run sluice produce");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("wait")
    };
    let input: String = (0..30).map(|i| format!("key-{i}:value {i}\n")).collect();
    let out = produce(
        &[
            "lines",
            "--key-separator",
            ":",
            "--header",
            "source=cli",
            "--acks",
            "all",
            "--compression",
            "lz4",
        ],
        &input,
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "30 records written to lines"
    );
    let out = produce(&["lines", "--partition", "2", "--acks", "1"], "no key\n");
    assert!(out.status.success(), "{out:?}");

    let read = Command::new("kcat")
        .args(["-b", &bootstrap, "-C", "-t", "lines", "-e", "-q"])
        .args(["-f", "%p|%k|%s|%h\n"])
        .output()
        .expect("kcat (scripts/test installs it)");
    let text = String::from_utf8_lossy(&read.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 31, "{text}");
    for i in 0..30 {
        let partition = sluice::client::partition_for_key(format!("key-{i}").as_bytes(), 3);
        let expected = format!("{partition}|key-{i}|value {i}|source=cli");
        assert!(lines.contains(&expected.as_str()), "{expected} in {text}");
    }
    assert!(lines.contains(&"2||no key|"), "{text}");

    // Errors: Kafka's names, one line, a meaningful exit code.
    let out = produce(&["nope"], "x\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.starts_with("error: UNKNOWN_TOPIC_OR_PARTITION: topic nope"),
        "{err}"
    );
    let out = produce(&["lines", "--partition", "7"], "x\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(
            "error: UNKNOWN_TOPIC_OR_PARTITION: partition lines-7: the topic has 3 partitions"
        ),
        "{err}"
    );
    let out = produce(&["lines", "--acks", "2"], "x\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim(),
        "error: configuration acks: \"2\" is not one of all, -1, 0, 1"
    );
    let big = "x".repeat(2 << 20);
    let out = produce(&["lines"], &format!("{big}\n"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: MESSAGE_TOO_LARGE: topic lines"),
        "{err}"
    );
}

#[test]
fn a_second_server_on_a_locked_data_dir_says_so_once() {
    let node = SingleNode::start(&[]);
    // The broker raised its soft open-files limit to the hard one, and said so.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct passed.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    let logs = node.logs();
    assert!(
        logs.contains("open files limit")
            && logs.contains(&format!("soft={} hard={}", limit.rlim_max, limit.rlim_max)),
        "{}",
        support::tail(&logs, 20)
    );
    let (kafka, quorum, http) = (
        support::free_port(),
        support::free_port(),
        support::free_port(),
    );
    // The same cluster (as a second start with the same config would be), other ports.
    let meta = std::fs::read_to_string(node.data_dir().join("meta.properties")).expect("meta");
    let cluster_id = meta
        .lines()
        .find_map(|l| l.strip_prefix("cluster.id="))
        .expect("cluster.id");
    let output = sluice(&[
        "server",
        "--override",
        &format!("cluster.id={cluster_id}"),
        "--override",
        &format!("listeners=PLAINTEXT://127.0.0.1:{kafka},CONTROLLER://127.0.0.1:{quorum}"),
        "--override",
        &format!("http.listener=127.0.0.1:{http}"),
        "--override",
        &format!("log.dirs={}", node.data_dir().display()),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains(&format!(
            "log.dirs entry {} cannot be used: another process holds its lock",
            node.data_dir().display()
        )),
        "{stderr}"
    );
    assert_eq!(stderr.matches("holds its lock").count(), 1, "{stderr}");
    assert!(!stderr.contains("corrupt"), "{stderr}");

    // A data dir that cannot be created names the config key and what failed, once.
    let file = tempfile::NamedTempFile::new().expect("a file");
    let good = tempfile::tempdir().expect("a dir");
    for key in ["log.dirs", "metadata.log.dir"] {
        let bad = file.path().join("data");
        let output = sluice(&[
            "server",
            "--override",
            &format!("log.dirs={}", good.path().display()),
            "--override",
            &format!("listeners=PLAINTEXT://127.0.0.1:{kafka},CONTROLLER://127.0.0.1:{quorum}"),
            "--override",
            &format!("http.listener=127.0.0.1:{http}"),
            "--override",
            &format!("{key}={}", bad.display()),
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| !l.contains(" INFO ")).collect();
        assert_eq!(
            errors,
            [format!(
                "error: {key} entry {0} cannot be used: creating {0}: Not a directory; point {key} at a directory this user can write",
                bad.display()
            )],
            "{stderr}"
        );
    }
}

#[test]
fn perf_creates_the_partitions_it_asks_for_and_names_errors() {
    let node = SingleNode::start(&[]);
    let out = ok(
        &node,
        &[
            "perf",
            "produce",
            "--topic",
            "bench",
            "--partitions",
            "2",
            "--num-records",
            "20000",
            "--record-size",
            "100",
            "--producer-props",
            "acks=all",
            "linger.ms=2",
            "--output",
            "json",
        ],
    );
    let figures: serde_json::Value = serde_json::from_str(out.trim()).expect("one json object");
    assert_eq!(figures["records"], 20000, "{out}");
    for key in [
        "records_per_sec",
        "mb_per_sec",
        "p50_ms",
        "p99_ms",
        "p999_ms",
        "max_ms",
    ] {
        assert!(
            figures[key].as_f64().is_some_and(|v| v > 0.0),
            "{key} in {out}"
        );
    }
    let p = |key: &str| figures[key].as_f64().unwrap_or(0.0);
    assert!(
        p("p50_ms") <= p("p99_ms") && p("p99_ms") <= p("p999_ms") && p("p999_ms") <= p("max_ms")
    );
    let json: serde_json::Value = serde_json::from_str(&ok(
        &node,
        &["topics", "describe", "bench", "--output", "json"],
    ))
    .expect("json");
    assert_eq!(json[0]["partitions"].as_array().map(Vec::len), Some(2));
    // A fixed offered rate, a text summary as Kafka's tool prints it.
    let out = ok(
        &node,
        &[
            "perf",
            "produce",
            "--topic",
            "bench",
            "--num-records",
            "2000",
            "--throughput",
            "4000",
        ],
    );
    assert!(out.starts_with("2000 records sent, "), "{out}");
    assert!(out.contains("ms 99.9th."), "{out}");
    let out = ok(
        &node,
        &[
            "perf",
            "consume",
            "--topic",
            "bench",
            "--messages",
            "22000",
            "--output",
            "json",
        ],
    );
    let read: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(read["records"], 22000, "{out}");
    let err = fails(
        &node,
        &[
            "perf",
            "produce",
            "--topic",
            "bench",
            "--partitions",
            "4",
            "--num-records",
            "10",
        ],
        1,
    );
    assert!(
        err.contains("topic bench has 2 partitions and --partitions asks for 4"),
        "{err}"
    );
    let err = fails(&node, &["perf", "consume", "--topic", "nosuch"], 4);
    assert!(
        err.starts_with("error: UNKNOWN_TOPIC_OR_PARTITION: topic nosuch"),
        "{err}"
    );
}

#[test]
fn consume_prints_what_kcat_wrote_from_offsets_groups_and_patterns() {
    use std::io::Write;
    use std::process::Stdio;

    let node = SingleNode::start(&["auto.create.topics.enable=false"]);
    let bootstrap = node.bootstrap();
    ok(&node, &["topics", "create", "feed", "--partitions", "3"]);
    let mut kcat = Command::new("kcat")
        .args([
            "-b", &bootstrap, "-P", "-t", "feed", "-K", ":", "-H", "src=kcat",
        ])
        .args(["-X", "partitioner=murmur2_random"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("kcat (scripts/test installs it)");
    let input: String = (0..40).map(|i| format!("key-{i}:value {i}\n")).collect();
    kcat.stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    assert!(kcat.wait().expect("kcat").success());
    let consume = |args: &[&str]| {
        let mut all = vec!["consume"];
        all.extend_from_slice(args);
        all.extend(["--bootstrap-server", bootstrap.as_str()]);
        let output = sluice(&all);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "sluice {all:?}: {stderr}");
        (stdout, stderr)
    };

    // Everything, as JSON with metadata.
    let (out, err) = consume(&[
        "feed",
        "--from-beginning",
        "--max-messages",
        "40",
        "--format",
        "json",
    ]);
    assert_eq!(err.trim(), "Processed a total of 40 messages");
    let mut values = Vec::new();
    for line in out.lines() {
        let record: serde_json::Value = serde_json::from_str(line).expect("json line");
        let key = record["key"].as_str().expect("key");
        let i: usize = key["key-".len()..].parse().expect("numbered");
        assert_eq!(record["value"], format!("value {i}"));
        assert_eq!(record["headers"]["src"], "kcat");
        assert_eq!(record["topic"], "feed");
        let partition = sluice::client::partition_for_key(key.as_bytes(), 3);
        assert_eq!(
            record["partition"], partition,
            "kcat hashes keys as the SDK does"
        );
        values.push(i);
    }
    values.sort();
    assert_eq!(values, (0..40).collect::<Vec<_>>());

    // One partition from an offset, key and value, the same record kcat finds there.
    let (out, _) = consume(&[
        "feed",
        "--partition",
        "1",
        "--offset",
        "2",
        "--max-messages",
        "1",
        "--format",
        "key-value",
        "--key-separator",
        "=",
    ]);
    let theirs = Command::new("kcat")
        .args([
            "-b", &bootstrap, "-C", "-t", "feed", "-p", "1", "-o", "2", "-c", "1", "-e", "-q",
        ])
        .args(["-f", "%k=%s\n"])
        .output()
        .expect("kcat");
    assert_eq!(out, String::from_utf8_lossy(&theirs.stdout));

    // A group reads everything once and commits: the next run starts after it.
    let (out, err) = consume(&[
        "feed",
        "--group",
        "cli-g",
        "--from-beginning",
        "--timeout-ms",
        "3000",
    ]);
    assert_eq!(out.lines().count(), 40, "{err}");
    assert!(err.ends_with("Processed a total of 40 messages\n"), "{err}");
    let (out, _) = consume(&[
        "feed",
        "--group",
        "cli-g",
        "--from-beginning",
        "--timeout-ms",
        "1500",
    ]);
    assert_eq!(out, "", "the group's commits are where the next run starts");
    let described = ok(&node, &["groups", "describe", "cli-g", "--output", "json"]);
    assert!(described.contains("\"total_lag\": 0"), "{described}");

    // From the end by default: nothing old; a pattern subscription reads every match.
    let (out, _) = consume(&["feed", "--timeout-ms", "1000"]);
    assert_eq!(out, "");
    ok(&node, &["topics", "create", "feed-2", "--partitions", "1"]);
    let (out, _) = consume(&[
        "--include",
        "fe.*",
        "--from-beginning",
        "--max-messages",
        "40",
    ]);
    assert_eq!(out.lines().count(), 40);

    // Errors: Kafka's names, one line, exit 4 for the cluster's refusal, 2 for usage.
    let err = fails(&node, &["consume", "nope", "--timeout-ms", "500"], 4);
    assert!(
        err.starts_with("error: UNKNOWN_TOPIC_OR_PARTITION: topic nope"),
        "{err}"
    );
    let err = fails(&node, &["consume", "feed", "--partition", "9"], 1);
    assert!(
        err.contains("topic feed has no partition 9 (it has 3)"),
        "{err}"
    );
    let output = sluice(&["consume", "feed", "--offset", "3"]);
    assert_eq!(output.status.code(), Some(2), "--offset needs --partition");
}

#[test]
fn cluster_status_says_which_listener_it_needs_and_output_can_be_cut_short() {
    let node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();
    // A Kafka port where a CONTROLLER listener belongs: one line saying so, no transport dump.
    let err = fails_raw(
        &["cluster", "status", "--bootstrap-controller", &bootstrap],
        1,
    );
    assert!(err.contains("did not answer as a controller"), "{err}");
    assert!(
        err.contains("--bootstrap-server takes a Kafka one"),
        "{err}"
    );
    assert!(!err.contains("hyper") && !err.contains("tonic"), "{err}");
    let err = fails_raw(
        &["cluster", "status", "--bootstrap-controller", "127.0.0.1:1"],
        1,
    );
    assert_eq!(
        err.trim(),
        "error: cannot connect to 127.0.0.1:1: Connection refused; is a node's CONTROLLER listener there?"
    );
    // Piped into a reader that stops early (`| head -1`): no panic, no backtrace.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cluster", "status", "--bootstrap-server", &bootstrap])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `sluice produce` with `args`, its stdin piped; the child.
fn spawn_produce(node: &SingleNode, args: &[&str]) -> std::process::Child {
    use std::process::Stdio;

    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("produce")
        .args(args)
        .args(["--bootstrap-server", &node.bootstrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice produce")
}

/// What kcat reads of `topic` from the beginning to its end, one `format` per record (keys and
/// values that are null printed as NULL).
fn kcat_reads(node: &SingleNode, topic: &str, format: &str) -> String {
    let output = Command::new("kcat")
        .args([
            "-b",
            &node.bootstrap(),
            "-C",
            "-t",
            topic,
            "-o",
            "beginning",
        ])
        .args(["-e", "-q", "-Z", "-f", format])
        .output()
        .expect("run kcat");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every line that comes within `period`.
fn lines_within(lines: &std::sync::mpsc::Receiver<String>, period: Duration) -> Vec<String> {
    let deadline = Instant::now() + period;
    let mut seen = Vec::new();
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        seen.push(line);
    }
    seen
}

#[test]
fn produce_sends_each_line_as_it_is_typed_and_is_quiet_while_input_idles() {
    use std::io::Write;

    let node = SingleNode::start(&["auto.create.topics.enable=false"]);
    ok(&node, &["topics", "create", "typed"]);
    let mut child = spawn_produce(&node, &["typed"]);
    let errors = stderr_lines(&mut child);
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "first").expect("write stdin");
    stdin.flush().expect("flush stdin");

    // kcat reads the line while the producer's input is still open, as with
    // kafka-console-producer.sh (a person typing, `tail -f app.log | sluice produce`).
    let typed = Instant::now();
    let mut read = String::new();
    while typed.elapsed() < Duration::from_secs(10) && read != "first\n" {
        read = kcat_reads(&node, "typed", "%s\n");
    }
    assert_eq!(read, "first\n", "after {:?}", typed.elapsed());
    assert!(
        matches!(child.try_wait(), Ok(None)),
        "the producer still reads"
    );

    // Everything typed is acknowledged: more than a stall report period of idle input is
    // no reason to speak.
    let said = lines_within(&errors, Duration::from_secs(7));
    assert!(
        !said
            .iter()
            .any(|l| l.contains("waiting for acknowledgement")),
        "{said:?}"
    );

    writeln!(stdin, "second").expect("write stdin");
    drop(stdin);
    let status = child.wait().expect("wait");
    let said = lines_within(&errors, Duration::from_secs(1));
    assert!(status.success(), "{status}: {said:?}");
    assert_eq!(said, ["2 records written to typed"]);
    assert_eq!(kcat_reads(&node, "typed", "%s\n"), "first\nsecond\n");
}

#[test]
fn a_line_without_the_key_separator_fails_as_in_kafka_unless_errors_are_ignored() {
    use std::io::Write;

    let node = SingleNode::start(&["auto.create.topics.enable=false"]);
    let input = "a:1\nno separator\nb:2\n";
    let keyed = [
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
    ];
    for topic in ["strict", "lenient"] {
        ok(&node, &["topics", "create", topic]);
    }

    // Kafka's LineMessageReader: the line is refused, by number; what came before is written.
    let mut child = spawn_produce(&node, &[&["strict"][..], &keyed[..]].concat());
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("write stdin");
    drop(stdin);
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "error: No key separator found on line number 2: 'no separator'"
    );
    assert_eq!(kcat_reads(&node, "strict", "%k=%s\n"), "a=1\n");

    // ignore.error=true: the line is the value, with a null key.
    let lenient = [
        &["lenient"][..],
        &keyed[..],
        &["--property", "ignore.error=true"],
    ]
    .concat();
    let mut child = spawn_produce(&node, &lenient);
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("write stdin");
    drop(stdin);
    let output = child.wait_with_output().expect("wait");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        kcat_reads(&node, "lenient", "%k=%s\n"),
        "a=1\nNULL=no separator\nb=2\n"
    );
}

#[test]
fn consume_ends_at_ctrl_c_even_while_it_asks_a_silent_broker() {
    use std::io::{BufRead, Write};
    use std::process::Stdio;

    let node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();
    ok(&node, &["topics", "create", "quiet"]);
    let mut producer = spawn_produce(&node, &["quiet"]);
    producer
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"only\n")
        .expect("write stdin");
    assert!(producer.wait().expect("wait").success());

    let mut consume = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["consume", "quiet", "--from-beginning"])
        .args(["--bootstrap-server", &bootstrap])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice consume");
    let errors = stderr_lines(&mut consume);
    let mut first = String::new();
    std::io::BufReader::new(consume.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("read stdout");
    assert_eq!(first, "only\n");

    // The broker hangs (connections accepted, nothing answered): each probe waits its 2 s.
    // SAFETY: a signal to the test's own child.
    unsafe { libc::kill(node.pid() as i32, libc::SIGSTOP) };
    let silent = format!("no broker at {bootstrap} answers within 2 s; still trying");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        match errors.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line == silent => break,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no line '{silent}' within 20 s; got {seen:?}"),
        }
    }
    // Probes start 5 s apart and that one ended 2 s after its start: 3.5 s on, the next one
    // is half way (1.5 s left). Ctrl-C must not wait for it.
    std::thread::sleep(Duration::from_millis(3_500));
    // SAFETY: a signal to the test's own child.
    unsafe { libc::kill(consume.id() as i32, libc::SIGINT) };
    let interrupted = Instant::now();
    let status = loop {
        if let Ok(Some(status)) = consume.try_wait() {
            break status;
        }
        if interrupted.elapsed() > Duration::from_secs(10) {
            let _ = consume.kill();
            break consume.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let exited_after = interrupted.elapsed();
    // SAFETY: a signal to the test's own child.
    unsafe { libc::kill(node.pid() as i32, libc::SIGCONT) };
    assert!(status.success(), "{status}");
    assert!(
        exited_after < Duration::from_millis(1_300),
        "Ctrl-C took {exited_after:?}"
    );
}
