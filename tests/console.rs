//! The web console in a real browser (Debian's Chromium, headless, driven by puppeteer-core)
//! against three `sluice server` processes with real topics and a real consumer group made by
//! confluent-kafka: every page loads without a console error; the numbers on the pages equal
//! the CLI's `--output json` for the same thing; the message browser shows confluent-kafka's
//! records byte for byte; a node killed with -9 shows as down, and the overview as degraded,
//! within 10 s. Screenshots of every page (1280x800 and phone width) are written under the
//! test's target tmp dir (`console-screenshots/`).

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{Cluster, clients_dir};

/// One browser test at a time: each runs Chromium beside its brokers, and three at once on a
/// 2-core machine starve each other.
static BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_browser_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    BROWSER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn cli_json(cluster: &Cluster, args: &[&str]) -> serde_json::Value {
    let bootstrap = cluster.bootstrap();
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .args(["--bootstrap-server", &bootstrap, "--output", "json"])
        .output()
        .expect("run sluice");
    assert!(
        output.status.success(),
        "sluice {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the CLI's JSON")
}

fn node_script(args: &[&str]) -> std::process::Output {
    Command::new("node")
        .arg("console_browser.js")
        .args(args)
        .current_dir(clients_dir())
        .output()
        .expect("node (scripts/test installs it)")
}

/// What of `sluice cluster status` the overview shows that an election changes: the quorum
/// leader, each broker's leaderships, the under-replicated partitions.
fn shown(status: &serde_json::Value) -> serde_json::Value {
    let leaders: Vec<&serde_json::Value> = status["brokers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|broker| &broker["leaders"])
        .collect();
    serde_json::json!([
        status["quorum"]["leader_id"],
        leaders,
        status["under_replicated_partitions"]
    ])
}

#[test]
fn the_console_shows_what_the_cli_shows_and_a_killed_node_within_10_s() {
    let _browser = one_browser_at_a_time();
    let mut cluster = Cluster::start(3, &[]);
    let work = tempfile::tempdir().expect("tempdir");
    let setup_out = work.path().join("setup.json");

    // confluent-kafka makes the topic, the records and a group member that stays.
    let mut setup = Command::new("python3")
        .args([
            "console_setup.py",
            &cluster.bootstrap(),
            setup_out.to_str().expect("utf-8 path"),
        ])
        .current_dir(clients_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut ready = String::new();
    BufReader::new(setup.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("setup output");
    assert_eq!(ready.trim(), "ready", "console_setup.py did not get ready");
    let setup_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&setup_out).expect("setup.json"))
            .expect("setup JSON");
    let group_id = setup_json["group"].as_str().expect("group").to_owned();

    // Wait until the group is stable with its member and every replica is in sync, so the
    // CLI and the page read the same numbers.
    let deadline = Instant::now() + Duration::from_secs(60);
    let group = loop {
        let group = cli_json(&cluster, &["groups", "describe", &group_id]);
        let cluster_now = cli_json(&cluster, &["cluster", "status"]);
        if group["state"] == "Stable"
            && group["members"].as_array().is_some_and(|m| m.len() == 1)
            && cluster_now["under_replicated_partitions"] == 0
        {
            break group;
        }
        assert!(Instant::now() < deadline, "group never settled: {group}");
        std::thread::sleep(Duration::from_millis(500));
    };
    // The page is compared with the CLI's snapshot taken just before. Should the cluster
    // change in between (an election on a loaded machine moves the quorum leader or partition
    // leaders), the snapshot is taken again and the pages checked once more.
    let screenshots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let base = format!("http://127.0.0.1:{}", cluster.nodes[0].http_port);
    let mut attempts = 0;
    let stdout = loop {
        attempts += 1;
        let expected = serde_json::json!({
            "cluster": cli_json(&cluster, &["cluster", "status"]),
            "topics": cli_json(&cluster, &["topics", "describe"]),
            "group": group,
            "setup": setup_json,
        });
        let expected_path = work.path().join("expected.json");
        std::fs::write(&expected_path, expected.to_string()).expect("write expected.json");
        let output = node_script(&[
            "pages",
            &base,
            expected_path.to_str().expect("utf-8 path"),
            screenshots.to_str().expect("utf-8 path"),
        ]);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let failure = format!(
            "{stdout}\n{}\n--- logs\n{}",
            String::from_utf8_lossy(&output.stderr),
            support::tail(&cluster.logs(), 40)
        );
        let changed =
            shown(&expected["cluster"]) != shown(&cli_json(&cluster, &["cluster", "status"]));
        match (output.status.success(), changed && attempts == 1) {
            (true, _) => break stdout,
            (false, true) => eprintln!("the cluster changed while the pages were read:\n{failure}"),
            (false, false) => panic!("{failure}"),
        }
    };
    println!("{stdout}");
    for page in ["overview", "topics", "topic", "messages-hex", "group"] {
        for size in ["1280x800", "phone-390x844"] {
            let shot = screenshots.join(format!("{page}-{size}.png"));
            let bytes = std::fs::metadata(&shot).map_or(0, |m| m.len());
            assert!(bytes > 5_000, "{} is {bytes} bytes", shot.display());
        }
    }

    // kill -9 of node 3 while a browser watches the overview.
    let mut watcher = Command::new("node")
        .args(["console_browser.js", "degraded", &base, "3"])
        .current_dir(clients_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node");
    let mut lines = BufReader::new(watcher.stdout.take().expect("stdout")).lines();
    let watching = lines.next().and_then(Result::ok).unwrap_or_default();
    assert_eq!(watching, "watching", "the watcher did not start");
    cluster.kill9(2);
    let killed_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let mut stdin = watcher.stdin.take().expect("stdin");
    writeln!(stdin, "killed {killed_ms}").expect("tell the watcher");
    let result = lines.next().and_then(Result::ok).unwrap_or_default();
    let status = watcher.wait().expect("watcher");
    let mut stderr = String::new();
    if let Some(mut err) = watcher.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut err, &mut stderr);
    }
    assert!(status.success(), "{result}\n{stderr}");
    println!("{result}");
    let seconds: f64 = result
        .strip_prefix("degraded ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::MAX);
    assert!(seconds <= 10.0, "the overview took {seconds} s: {result}");

    drop(stdin);
    drop(setup.stdin.take());
    let _ = setup.wait();
}

fn python(node: &support::SingleNode, args: &[&str]) -> String {
    let bootstrap = node.bootstrap();
    let port = node.http_port.to_string();
    let mut all = vec!["console_actions.py", bootstrap.as_str(), port.as_str()];
    all.extend_from_slice(args);
    support::run_client(node, "python3", &all)
}

/// With `http.console.actions.enable=true` a person creates a topic, changes its config,
/// deletes records and resets a group's offsets through the pages' forms, and confluent-kafka
/// sees each change; an action without the console's header, a bad body and an existing
/// topic are refused with their reasons; without the setting every action is refused.
#[test]
fn console_actions_change_the_cluster_only_when_enabled() {
    let _browser = one_browser_at_a_time();
    let node = support::SingleNode::start(&["http.console.actions.enable=true"]);
    let base = format!("http://127.0.0.1:{}", node.http_port);
    let screenshots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let shots = screenshots.to_str().expect("utf-8 path");
    for (step, check) in [
        ("actions-create", "created"),
        ("actions-modify", "modified"),
    ] {
        let output = node_script(&[step, &base, shots]);
        assert!(
            output.status.success(),
            "{step}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        println!("{}", String::from_utf8_lossy(&output.stdout));
        python(&node, &[check]);
    }
    python(&node, &["refusals"]);

    let read_only = support::SingleNode::start(&[]);
    python(&read_only, &["read-only"]);
}

/// On a broker with an authorizer, the console asks for a user and password and logs in with
/// them to the broker's SASL listener: without credentials or with a wrong password it
/// answers 401 asking for them; a user sees the topics its ACLs allow and no others, in the
/// API and in a real browser; a topic it may not read is refused with Kafka's error.
#[test]
fn on_a_secured_broker_the_console_logs_users_in_and_their_acls_apply() {
    let _browser = one_browser_at_a_time();
    let node = support::SingleNode::start_with_listeners(
        &["SASL_PLAINTEXT"],
        &[
            "sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
             org.apache.kafka.common.security.plain.PlainLoginModule required \
             user_admin=\"admin-secret\" user_alice=\"alice-secret\" \
             user_mallory=\"mallory-secret\";",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin;User:ANONYMOUS",
            "allow.everyone.if.no.acl.found=false",
        ],
    );
    python(&node, &["login"]);
    let base = format!("http://127.0.0.1:{}", node.http_port);
    let screenshots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let output = node_script(&["login", &base, screenshots.to_str().expect("utf-8 path")]);
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{}", String::from_utf8_lossy(&output.stdout));
}
