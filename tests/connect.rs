//! `sluice connect` as real processes: Kafka's quickstart `curl` commands copy a file through
//! a topic byte for byte (checked with kcat too); the REST API's errors, pause, stop and
//! offset reset, a failing task's trace; a worker killed with -9 in the middle of a growing
//! file loses nothing and repeats at most one batch, and with exactly-once sources repeats
//! nothing a read_committed reader sees; two workers split a sink's tasks and one
//! takes over when the other is killed.

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{SingleNode, free_port, tail};

/// A `sluice connect` process.
struct Worker {
    port: u16,
    log: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    runs: u32,
}

impl Worker {
    fn start(node: &SingleNode, overrides: &[&str]) -> Worker {
        let port = free_port();
        let mut args = vec![
            "connect".to_owned(),
            "--override".to_owned(),
            format!("bootstrap.servers={}", node.bootstrap()),
            "--override".to_owned(),
            format!("listeners=http://127.0.0.1:{port}"),
        ];
        for value in overrides {
            args.push("--override".to_owned());
            args.push((*value).to_owned());
        }
        Worker::with_args(node, port, args)
    }

    /// `sluice` with `args`, its REST API on `port`.
    fn with_args(node: &SingleNode, port: u16, args: Vec<String>) -> Worker {
        let mut worker = Worker {
            port,
            log: node.dir.path().join(format!("connect-{port}.log")),
            args,
            child: None,
            runs: 0,
        };
        worker.launch();
        worker
    }

    fn launch(&mut self) {
        self.runs += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("worker log");
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(&self.args)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start sluice connect");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some((200, _)) = self.try_call("GET", "/", None) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the worker did not serve its REST API:\n{}", self.logs());
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn logs(&self) -> String {
        tail(&std::fs::read_to_string(&self.log).unwrap_or_default(), 60)
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A request with curl: (status, body as JSON or Null).
    fn try_call(&self, method: &str, path: &str, body: Option<&str>) -> Option<(u16, Value)> {
        let mut command = Command::new("curl");
        command.args(["-s", "-m", "40", "-w", "\n%{http_code}", "-X", method]);
        if let Some(body) = body {
            command.args(["-H", "Content-Type: application/json", "--data", body]);
        }
        let output = command
            .arg(self.url(path))
            .output()
            .expect("curl (scripts/test installs it)");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n')?;
        let status: u16 = status.trim().parse().ok()?;
        if status == 0 {
            return None;
        }
        Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
    }

    fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        self.try_call(method, path, body)
            .unwrap_or_else(|| panic!("{method} {path}: no answer\n{}", self.logs()))
    }

    /// Waits until `check` holds for the status of `connector`.
    fn wait_status(&self, connector: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        self.wait_get(&format!("/connectors/{connector}/status"), what, check)
    }

    /// Waits until `check` holds for what GET `path` answers (200).
    fn wait_get(&self, path: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = Value::Null;
        while Instant::now() < deadline {
            let (status, body) = self.call("GET", path, None);
            if status == 200 && check(&body) {
                return body;
            }
            last = body;
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "{path}: not {what} within 60 s; last answer {last}\n{}",
            self.logs()
        );
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn states(status: &Value) -> Vec<String> {
    let mut out = vec![
        status["connector"]["state"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    ];
    for task in status["tasks"].as_array().into_iter().flatten() {
        out.push(task["state"].as_str().unwrap_or("").to_owned());
    }
    out
}

fn all_running(status: &Value) -> bool {
    let states = states(status);
    states.len() > 1 && states.iter().all(|s| s == "RUNNING")
}

fn wait_file(path: &Path, what: &str, check: impl Fn(&[u8]) -> bool, worker: &Worker) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let bytes = std::fs::read(path).unwrap_or_default();
        if check(&bytes) {
            return bytes;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let bytes = std::fs::read(path).unwrap_or_default();
    panic!(
        "{}: {what} not reached within 60 s ({} bytes)\n{}",
        path.display(),
        bytes.len(),
        worker.logs()
    );
}

/// Every record value of `topic`, read with kcat to its end (none while it does not exist).
fn kcat_values(node: &SingleNode, topic: &str) -> Vec<String> {
    kcat_values_as(node, topic, "read_uncommitted")
}

/// [`kcat_values`] at an `isolation.level`.
fn kcat_values_as(node: &SingleNode, topic: &str, isolation_level: &str) -> Vec<String> {
    let output = Command::new("kcat")
        .args([
            "-C",
            "-b",
            &node.bootstrap(),
            "-X",
            &format!("isolation.level={isolation_level}"),
            "-t",
            topic,
            "-e",
            "-q",
            "-f",
            "%s\n",
        ])
        .output()
        .expect("kcat");
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("Unknown topic or partition") {
        // Not created yet.
        return Vec::new();
    }
    assert!(output.status.success(), "kcat: {stderr}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Creates `topic` with `partitions` partitions with the CLI.
fn create_topic(node: &SingleNode, topic: &str, partitions: u32) {
    support::sluice(&[
        "topics",
        "--bootstrap-server",
        &node.bootstrap(),
        "--create",
        "--topic",
        topic,
        "--partitions",
        &partitions.to_string(),
    ]);
}

fn kcat_produce(node: &SingleNode, topic: &str, lines: &str, keyed: bool) {
    let bootstrap = node.bootstrap();
    let mut args = vec!["-P", "-b", bootstrap.as_str(), "-t", topic];
    if keyed {
        args.push("-K:");
    }
    let mut child = Command::new("kcat")
        .args(&args)
        .stdin(Stdio::piped())
        .spawn()
        .expect("kcat");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(lines.as_bytes())
        .expect("write");
    assert!(child.wait().expect("kcat").success());
}

#[test]
fn the_quickstart_curl_commands_copy_a_file_through_a_topic() {
    let node = SingleNode::start(&[]);
    let worker = Worker::start(&node, &[]);
    let dir = node.dir.path();
    let source = dir.join("test.txt");
    let sink = dir.join("test.sink.txt");
    std::fs::write(&source, "foo\nbar\n").expect("write test.txt");

    // The quickstart's commands, with this test's port and paths.
    let (status, created) = worker.call(
        "POST",
        "/connectors",
        Some(&format!(
            r#"{{"name": "local-file-source", "config": {{"connector.class":"FileStreamSource", "tasks.max":"1", "file":"{}", "topic":"connect-test" }}}}"#,
            source.display()
        )),
    );
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["type"], "source");
    assert_eq!(created["config"]["name"], "local-file-source");
    let (status, created) = worker.call(
        "POST",
        "/connectors",
        Some(&format!(
            r#"{{"name": "local-file-sink", "config": {{"connector.class":"org.apache.kafka.connect.file.FileStreamSinkConnector", "tasks.max":"1", "file":"{}", "topics":"connect-test" }}}}"#,
            sink.display()
        )),
    );
    assert_eq!(status, 201, "{created}");
    let copied = wait_file(&sink, "a copy of test.txt", |b| b == b"foo\nbar\n", &worker);
    assert_eq!(copied, std::fs::read(&source).expect("read"));
    // The topic holds JsonConverter's envelope, as Kafka's quickstart shows it (kcat reads it).
    assert_eq!(
        kcat_values(&node, "connect-test"),
        [
            r#"{"schema":{"type":"string","optional":false},"payload":"foo"}"#,
            r#"{"schema":{"type":"string","optional":false},"payload":"bar"}"#
        ]
    );
    let status = worker.wait_status("local-file-source", "running", all_running);
    assert_eq!(
        status["tasks"][0]["worker_id"],
        format!("127.0.0.1:{}", worker.port)
    );
    worker.wait_status("local-file-sink", "running", all_running);
    let (_, listed) = worker.call("GET", "/connectors", None);
    assert_eq!(
        listed,
        serde_json::json!(["local-file-sink", "local-file-source"])
    );
    // What operators scrape: each task's state and records on the worker that runs it.
    let metrics = Command::new("curl")
        .args(["-s", &worker.url("/metrics")])
        .output()
        .expect("curl");
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        metrics.contains(
            r#"sluice_connect_task_state{connector="local-file-source",task="0",state="RUNNING"} 1"#
        ),
        "{metrics}"
    );
    let source_records: u64 = metrics
        .lines()
        .find(|l| {
            l.starts_with(r#"sluice_connect_task_records_total{connector="local-file-source""#)
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0);
    assert_eq!(source_records, 2, "{metrics}");
    let (_, tasks) = worker.call("GET", "/connectors/local-file-source/tasks", None);
    assert_eq!(
        tasks[0]["id"],
        serde_json::json!({"connector": "local-file-source", "task": 0})
    );

    // A line appended is copied: the source follows the file.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&source)
        .and_then(|mut f| f.write_all("baz ü\n".as_bytes()))
        .expect("append");
    wait_file(
        &sink,
        "the appended line",
        |b| b.ends_with("baz ü\n".as_bytes()),
        &worker,
    );
    // Each task commits its offsets after the line is written (the source after its produce
    // is acknowledged, the sink after its flush): the line can be in the file a moment before.
    let length = std::fs::metadata(&source).expect("stat").len();
    let offsets = worker.wait_get(
        "/connectors/local-file-source/offsets",
        "at the file's end",
        |offsets| offsets["offsets"][0]["offset"]["position"] == length,
    );
    assert_eq!(
        offsets["offsets"][0]["partition"]["filename"],
        source.display().to_string()
    );
    worker.wait_get(
        "/connectors/local-file-sink/offsets",
        "past the three records",
        |offsets| offsets["offsets"][0]["offset"]["kafka_offset"] == 3,
    );

    // Connect's errors.
    let (status, body) = worker.call(
        "POST",
        "/connectors",
        Some(r#"{"name":"local-file-sink","config":{"connector.class":"FileStreamSink","file":"/tmp/x","topics":"t"}}"#),
    );
    assert_eq!(
        (status, body["error_code"].as_u64()),
        (409, Some(409)),
        "{body}"
    );
    let (status, body) = worker.call("GET", "/connectors/nope/status", None);
    assert_eq!(status, 404);
    assert_eq!(body["message"], "Connector nope not found");
    let (status, body) = worker.call(
        "POST",
        "/connectors",
        Some(r#"{"name":"jdbc","config":{"connector.class":"io.confluent.connect.jdbc.JdbcSourceConnector"}}"#),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("FileStreamSourceConnector"),
        "{body}"
    );
    let (status, body) = worker.call(
        "PUT",
        "/connector-plugins/FileStreamSinkConnector/config/validate",
        Some(r#"{"connector.class":"FileStreamSink","topics":"a","topics.regex":"b","transforms":"t"}"#),
    );
    assert_eq!(status, 200);
    assert_eq!(body["error_count"], 5, "{body}");
    let (status, _) = worker.call("DELETE", "/connectors", None);
    assert_eq!(status, 405);

    // Pause: nothing is copied until resume.
    let (status, _) = worker.call("PUT", "/connectors/local-file-source/pause", None);
    assert_eq!(status, 202);
    worker.wait_status("local-file-source", "paused", |s| {
        states(s).iter().all(|state| state == "PAUSED")
    });
    std::fs::OpenOptions::new()
        .append(true)
        .open(&source)
        .and_then(|mut f| f.write_all(b"qux\n"))
        .expect("append");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !std::fs::read(&sink).expect("read").ends_with(b"qux\n"),
        "copied while paused"
    );
    worker.call("PUT", "/connectors/local-file-source/resume", None);
    wait_file(
        &sink,
        "the line written while paused",
        |b| b.ends_with(b"qux\n"),
        &worker,
    );

    // Stop, reset the sink's offsets, resume: it copies the topic again from its start.
    let (status, body) = worker.call("DELETE", "/connectors/local-file-sink/offsets", None);
    assert_eq!(status, 400, "offsets of a running connector: {body}");
    worker.call("PUT", "/connectors/local-file-sink/stop", None);
    worker.wait_status("local-file-sink", "stopped", |s| {
        s["connector"]["state"] == "STOPPED" && s["tasks"].as_array().is_some_and(Vec::is_empty)
    });
    let reset = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = worker.call("DELETE", "/connectors/local-file-sink/offsets", None);
        if status == 200 {
            break;
        }
        // The stopped task's consumer may still be leaving its group.
        assert!(Instant::now() < reset, "reset refused: {body}");
        std::thread::sleep(Duration::from_millis(500));
    }
    worker.call("PUT", "/connectors/local-file-sink/resume", None);
    let once = std::fs::read(&source).expect("read");
    wait_file(
        &sink,
        "a second copy",
        |b| b.len() == once.len() * 2,
        &worker,
    );

    // A task that cannot convert what it reads fails, with its trace in the status.
    kcat_produce(&node, "plain", "not json\n", false);
    let (status, _) = worker.call(
        "POST",
        "/connectors",
        Some(&format!(
            r#"{{"name":"strict","config":{{"connector.class":"FileStreamSink","file":"{}","topics":"plain","value.converter":"org.apache.kafka.connect.json.JsonConverter","value.converter.schemas.enable":"true"}}}}"#,
            dir.join("strict.txt").display()
        )),
    );
    assert_eq!(status, 201);
    let failed = worker.wait_status("strict", "failed", |s| s["tasks"][0]["state"] == "FAILED");
    let trace = failed["tasks"][0]["trace"].as_str().unwrap_or("");
    assert!(
        trace.contains("Converting byte[] to Kafka Connect data failed"),
        "{trace}"
    );
    let (status, body) = worker.call(
        "POST",
        "/connectors/strict/restart?includeTasks=true&onlyFailed=true",
        None,
    );
    assert_eq!(status, 202);
    assert_eq!(body["tasks"][0]["state"], "RESTARTING");
    assert_eq!(body["connector"]["state"], "RUNNING");
    let (status, _) = worker.call("DELETE", "/connectors/strict", None);
    assert_eq!(status, 204);
    let (status, _) = worker.call("GET", "/connectors/strict", None);
    assert_eq!(status, 404);
}

/// Lines `line-000000`... appended by a thread while the test runs.
struct Appender {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl Appender {
    fn start(path: PathBuf) -> Appender {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .expect("open");
            let mut written = 0usize;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let mut chunk = String::new();
                for _ in 0..500 {
                    chunk.push_str(&format!("line-{written:07}\n"));
                    written += 1;
                }
                file.write_all(chunk.as_bytes()).expect("append");
                std::thread::sleep(Duration::from_millis(20));
            }
            written
        });
        Appender {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .expect("thread")
            .join()
            .expect("appender")
    }
}

/// How many times each line appears, and the lines that appear more than once.
fn counted(lines: impl Iterator<Item = String>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in lines {
        *counts.entry(line).or_insert(0) += 1;
    }
    counts
}

#[test]
fn a_worker_killed_mid_file_loses_nothing_and_repeats_at_most_a_batch() {
    let node = SingleNode::start(&[]);
    let overrides = [
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        "session.timeout.ms=6000",
        "heartbeat.interval.ms=1000",
    ];
    let mut worker = Worker::start(&node, &overrides);
    let dir = node.dir.path();
    let source = dir.join("growing.txt");
    let sink = dir.join("growing.sink.txt");
    let appender = Appender::start(source.clone());
    for body in [
        format!(
            r#"{{"name":"src","config":{{"connector.class":"FileStreamSource","file":"{}","topic":"lines","batch.size":"1000"}}}}"#,
            source.display()
        ),
        format!(
            r#"{{"name":"dst","config":{{"connector.class":"FileStreamSink","file":"{}","topics":"lines"}}}}"#,
            sink.display()
        ),
    ] {
        let (status, answer) = worker.call("POST", "/connectors", Some(&body));
        assert_eq!(status, 201, "{answer}");
    }
    wait_file(&sink, "some lines copied", |b| b.len() > 200_000, &worker);
    worker.kill9();
    let copied_at_kill = std::fs::metadata(&sink).map_or(0, |m| m.len());
    std::thread::sleep(Duration::from_secs(2));
    worker.launch();
    std::thread::sleep(Duration::from_secs(2));
    let written = appender.stop();
    let expected: Vec<String> = (0..written).map(|n| format!("line-{n:07}")).collect();
    let source_bytes = std::fs::read(&source).expect("read");
    assert_eq!(source_bytes.len(), expected.len() * 13);
    wait_file(
        &sink,
        "every line",
        |b| {
            b.len() >= source_bytes.len()
                && counted(String::from_utf8_lossy(b).lines().map(str::to_owned)).len() == written
        },
        &worker,
    );
    let topic = counted(kcat_values(&node, "lines").into_iter());
    let sunk = counted(
        String::from_utf8_lossy(&std::fs::read(&sink).expect("read"))
            .lines()
            .map(str::to_owned),
    );
    for (what, counts, bound) in [
        ("topic", &topic, 1000usize),
        ("sink file", &sunk, 1000 + 500),
    ] {
        let missing: Vec<&String> = expected
            .iter()
            .filter(|l| !counts.contains_key(*l))
            .take(5)
            .collect();
        assert!(missing.is_empty(), "{what} lacks {missing:?}");
        assert_eq!(counts.len(), written, "{what} has lines never written");
        let repeated: usize = counts.values().map(|n| n - 1).sum();
        println!("{what}: {written} lines, {repeated} repeated after the kill -9 (bound {bound})");
        assert!(
            repeated <= bound,
            "{what}: {repeated} lines repeated, more than a batch"
        );
    }
    println!(
        "{copied_at_kill} bytes were copied when the worker was killed; {} lines in all",
        written
    );
}

#[test]
fn an_exactly_once_source_killed_mid_file_writes_each_line_once_for_read_committed_readers() {
    let node = SingleNode::start(&[]);
    create_topic(&node, "eos-lines", 1);
    let overrides = [
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        "session.timeout.ms=6000",
        "heartbeat.interval.ms=1000",
        "exactly.once.source.support=enabled",
    ];
    let mut worker = Worker::start(&node, &overrides);
    let dir = node.dir.path();
    let source = dir.join("growing.txt");
    // A connector that wants transaction boundaries of its own is refused: FileStreamSource
    // defines none.
    let config = |boundary: &str| {
        format!(
            r#"{{"name":"src","config":{{"connector.class":"FileStreamSource","file":"{}","topic":"eos-lines","batch.size":"1000","exactly.once.support":"required","transaction.boundary":"{boundary}"}}}}"#,
            source.display()
        )
    };
    let (status, answer) = worker.call("POST", "/connectors", Some(&config("connector")));
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("connector-defined transaction boundaries")),
        "{answer}"
    );
    let appender = Appender::start(source.clone());
    // Transactions of 2 s, so each kill -9 lands in an open one.
    let (status, answer) = worker.call(
        "POST",
        "/connectors",
        Some(&config("interval").replace(
            r#""transaction.boundary":"interval""#,
            r#""transaction.boundary":"interval","transaction.boundary.interval.ms":"2000""#,
        )),
    );
    assert_eq!(status, 201, "{answer}");
    // While lines keep coming kcat never sees the partition's end, so progress is watched
    // through the task's committed position (GET .../offsets; a line is 13 bytes).
    let advanced = |worker: &Worker, lines: u64| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let position = worker
                .try_call("GET", "/connectors/src/offsets", None)
                .and_then(|(status, body)| {
                    (status == 200).then(|| body["offsets"][0]["offset"]["position"].as_u64())
                })
                .flatten()
                .unwrap_or(0);
            if position >= lines * 13 {
                return position / 13;
            }
            assert!(
                Instant::now() < deadline,
                "the source's position is line {}, not {lines}, within 60 s\n{}",
                position / 13,
                worker.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    // Two kill -9s while the task writes; each restart aborts what was open and reads on
    // from the last committed position.
    let mut seen = 0;
    for _ in 0..2 {
        seen = advanced(&worker, seen + 20_000);
        worker.kill9();
        std::thread::sleep(Duration::from_millis(500));
        worker.launch();
    }
    advanced(&worker, seen + 10_000);
    let written = appender.stop();
    advanced(&worker, written as u64);
    std::thread::sleep(Duration::from_secs(1));
    let lines = kcat_values_as(&node, "eos-lines", "read_committed");
    let expected: Vec<String> = (0..written).map(|n| format!("line-{n:07}")).collect();
    if lines != expected {
        let first_wrong = lines.iter().zip(&expected).position(|(a, b)| a != b);
        panic!(
            "read_committed: {} lines for {written} written; first difference at {first_wrong:?}\n{}",
            lines.len(),
            worker.logs()
        );
    }
    let aborted = kcat_values(&node, "eos-lines").len() - written;
    println!(
        "{written} lines, each once and in order for read_committed; read_uncommitted also sees {aborted} aborted"
    );
    assert!(aborted > 0, "no kill -9 landed in an open transaction");
    worker.wait_status("src", "running", all_running);
}

#[test]
fn two_workers_split_a_sink_s_tasks_and_one_takes_over() {
    let node = SingleNode::start(&[]);
    create_topic(&node, "spread", 4);
    let overrides = [
        "key.converter=org.apache.kafka.connect.storage.StringConverter",
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        "session.timeout.ms=6000",
        "heartbeat.interval.ms=1000",
        // The sink tasks' consumers: a killed worker's are dropped from their group sooner
        // than the consumer's default 45 s.
        "consumer.session.timeout.ms=6000",
        "consumer.heartbeat.interval.ms=1000",
    ];
    let a = Worker::start(&node, &overrides);
    let mut b = Worker::start(&node, &overrides);
    let (status, body) = a.call(
        "POST",
        "/connectors",
        Some(r#"{"name":"copy","config":{"connector.class":"io.sluice.connect.TopicSinkConnector","tasks.max":"2","topics":"spread","target.topic":"spread-copy"}}"#),
    );
    assert_eq!(status, 201, "{body}");
    let a_id = format!("127.0.0.1:{}", a.port);
    let b_id = format!("127.0.0.1:{}", b.port);
    let split = a.wait_status("copy", "split over both workers", |s| {
        let workers: Vec<&str> = s["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["state"] == "RUNNING")
            .filter_map(|t| t["worker_id"].as_str())
            .collect();
        workers.len() == 2 && workers.contains(&a_id.as_str()) && workers.contains(&b_id.as_str())
    });
    // Either worker answers for the whole cluster.
    let (_, from_b) = b.call("GET", "/connectors/copy/status", None);
    assert_eq!(from_b["tasks"], split["tasks"], "{from_b}");
    let first: String = (0..1000).map(|n| format!("k{n}:first-{n}\n")).collect();
    kcat_produce(&node, "spread", &first, true);
    let deadline = Instant::now() + Duration::from_secs(60);
    while kcat_values(&node, "spread-copy").len() < 1000 {
        assert!(
            Instant::now() < deadline,
            "not copied:\n{}\n{}",
            a.logs(),
            b.logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    b.kill9();
    a.wait_status("copy", "taken over by the worker left", |s| {
        all_running(s)
            && s["tasks"].as_array().is_some_and(|tasks| {
                tasks.len() == 2 && tasks.iter().all(|t| t["worker_id"] == a_id.as_str())
            })
    });
    let second: String = (0..1000).map(|n| format!("k{n}:second-{n}\n")).collect();
    kcat_produce(&node, "spread", &second, true);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let copied = counted(kcat_values(&node, "spread-copy").into_iter());
        let missing = (0..1000)
            .flat_map(|n| [format!("first-{n}"), format!("second-{n}")])
            .filter(|value| !copied.contains_key(value))
            .count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} records not copied after the takeover\n{}",
            a.logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_standalone_worker_runs_connector_files_and_keeps_offsets_in_its_file() {
    let node = SingleNode::start(&[]);
    let dir = node.dir.path();
    let port = free_port();
    let offsets = dir.join("connect.offsets");
    let worker_file = dir.join("connect-standalone.properties");
    std::fs::write(
        &worker_file,
        format!(
            "bootstrap.servers={}\nkey.converter=org.apache.kafka.connect.json.JsonConverter\n\
             value.converter=org.apache.kafka.connect.json.JsonConverter\n\
             key.converter.schemas.enable=true\nvalue.converter.schemas.enable=true\n\
             offset.storage.file.filename={}\noffset.flush.interval.ms=10000\n\
             listeners=http://127.0.0.1:{port}\nplugin.path=libs/connect-file-4.0.0.jar\n",
            node.bootstrap(),
            offsets.display()
        ),
    )
    .expect("worker file");
    // Kafka's quickstart connector files, with this test's paths.
    let source_file = dir.join("connect-file-source.properties");
    let sink_file = dir.join("connect-file-sink.properties");
    let (input, output) = (dir.join("test.txt"), dir.join("test.sink.txt"));
    std::fs::write(
        &source_file,
        format!(
            "name=local-file-source\nconnector.class=FileStreamSource\ntasks.max=1\nfile={}\ntopic=connect-test\n",
            input.display()
        ),
    )
    .expect("source file");
    std::fs::write(
        &sink_file,
        format!(
            "name=local-file-sink\nconnector.class=FileStreamSink\ntasks.max=1\nfile={}\ntopics=connect-test\n",
            output.display()
        ),
    )
    .expect("sink file");
    std::fs::write(&input, "foo\nbar\n").expect("test.txt");
    let args: Vec<String> = ["connect", "--standalone"]
        .into_iter()
        .map(str::to_owned)
        .chain([&worker_file, &source_file, &sink_file].map(|p| p.display().to_string()))
        .collect();
    let mut worker = Worker::with_args(&node, port, args);
    wait_file(
        &output,
        "a copy of test.txt",
        |b| b == b"foo\nbar\n",
        &worker,
    );
    worker.wait_status("local-file-source", "running", all_running);
    let (_, listed) = worker.call("GET", "/connectors", None);
    assert_eq!(
        listed,
        serde_json::json!(["local-file-sink", "local-file-source"])
    );
    // The position is in the offsets file once the lines are acknowledged, whatever
    // offset.flush.interval.ms says for the next ones.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&offsets)
        .unwrap_or_default()
        .contains("\"position\":8")
    {
        assert!(
            Instant::now() < deadline,
            "no position in {}\n{}",
            offsets.display(),
            worker.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    worker.kill9();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&input)
        .and_then(|mut f| f.write_all(b"baz\n"))
        .expect("append");
    worker.launch();
    wait_file(
        &output,
        "the line written while the worker was down",
        |b| b.ends_with(b"baz\n"),
        &worker,
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        std::fs::read(&output).expect("read"),
        b"foo\nbar\nbaz\n",
        "{}",
        worker.logs()
    );
    worker.kill9();

    // A standalone worker without its offsets file, or a distributed one with it, is refused.
    let refused = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "connect",
            "--standalone",
            "--override",
            &format!("bootstrap.servers={}", node.bootstrap()),
        ])
        .output()
        .expect("sluice connect");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("offset.storage.file.filename"));
    let refused = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["connect", &worker_file.display().to_string()])
        .output()
        .expect("sluice connect");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--standalone"));
}
