//! The metadata quorum with real `sluice server` processes: bootstrap of three nodes, election,
//! broker registration and unfencing, fencing of a broker that stops heartbeating (SIGSTOP),
//! kill -9 of the leader and failover, catch-up of the restarted node, clean SIGTERM exits,
//! and refusal of a data directory that belongs to another node.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::free_port;

struct Ports {
    kafka: u16,
    quorum: u16,
    http: u16,
}

fn write_config(dir: &Path, id: u64, ports: &Ports, voters: &str) -> PathBuf {
    let path = dir.join(format!("node-{id}.properties"));
    let text = format!(
        "node.id={id}\nlisteners=PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{}\n\
         controller.quorum.voters={voters}\nhttp.listener=127.0.0.1:{}\nlog.dirs={}\n\
         controller.quorum.election.timeout.ms=500\n\
         broker.session.timeout.ms=3000\nbroker.heartbeat.interval.ms=300\n",
        ports.kafka,
        ports.quorum,
        ports.http,
        dir.join(format!("data-{id}")).display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn start(config: &Path, log: &Path) -> Child {
    let stderr = std::fs::File::create(log).unwrap();
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["server", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start sluice server")
}

/// The node's Prometheus gauges, or `None` while it does not answer.
fn metrics(http_port: u16) -> Option<BTreeMap<String, i64>> {
    let text = support::metrics_at(http_port)?;
    let body = text.split("\r\n\r\n").nth(1)?;
    Some(
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(name, value)| Some((name.to_owned(), value.parse().ok()?)))
            .collect(),
    )
}

/// Waits until every port in `http_ports` reports the same leader, among `candidates`.
fn agreed_leader(http_ports: &[u16], candidates: &[u64], timeout: Duration) -> Option<(u64, i64)> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let seen: Vec<_> = http_ports.iter().filter_map(|p| metrics(*p)).collect();
        if seen.len() == http_ports.len() {
            let leaders: Vec<i64> = seen
                .iter()
                .map(|m| m["sluice_quorum_current_leader"])
                .collect();
            let applied = seen
                .iter()
                .map(|m| m["sluice_quorum_last_applied_index"])
                .min()
                .unwrap_or(0);
            if leaders.windows(2).all(|w| w[0] == w[1]) && candidates.contains(&(leaders[0] as u64))
            {
                return Some((leaders[0] as u64, applied));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Waits until every port in `http_ports` reports `value` for `gauge`.
fn wait_for_gauge(http_ports: &[u16], gauge: &str, value: i64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let values: Vec<Option<i64>> = http_ports
            .iter()
            .map(|p| metrics(*p).and_then(|m| m.get(gauge).copied()))
            .collect();
        if values.iter().all(|v| *v == Some(value)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{gauge} never reached {value}: {values:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as i32, signal) };
}

fn stop(mut child: Child) -> std::process::ExitStatus {
    signal(&child, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "node did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every node log in `dir` (name, text), in name order.
fn read_node_logs(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.into_iter()
        .map(|log| {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            (log, text)
        })
        .collect()
}

/// The whole text of every node log in `dir`, for asserting what the nodes said.
fn node_logs(dir: &Path) -> String {
    read_node_logs(dir)
        .into_iter()
        .map(|(_, text)| text)
        .collect()
}

/// The last lines of every node log in `dir`, for a failure message.
fn node_log_tails(dir: &Path) -> String {
    let mut out = String::new();
    for (log, text) in read_node_logs(dir) {
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        out.push_str(&format!("--- {}\n", log.display()));
        for line in tail.into_iter().rev() {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn applied_min(http_ports: &[u16]) -> i64 {
    http_ports
        .iter()
        .filter_map(|p| metrics(*p))
        .map(|m| m["sluice_quorum_last_applied_index"])
        .min()
        .unwrap_or(0)
}

/// Ports, config files and a data dir for `count` nodes, the first `voters` of them voters of
/// the metadata quorum and the rest `process.roles=broker`.
struct Layout {
    dir: tempfile::TempDir,
    ports: BTreeMap<u64, Ports>,
    configs: BTreeMap<u64, PathBuf>,
}

fn layout(count: u64, voters: u64) -> Layout {
    let dir = tempfile::tempdir().unwrap();
    let ports: BTreeMap<u64, Ports> = (1..=count)
        .map(|id| {
            (
                id,
                Ports {
                    kafka: free_port(),
                    quorum: free_port(),
                    http: free_port(),
                },
            )
        })
        .collect();
    let voter_list = ports
        .iter()
        .filter(|(id, _)| **id <= voters)
        .map(|(id, p)| format!("{id}@127.0.0.1:{}", p.quorum))
        .collect::<Vec<_>>()
        .join(",");
    let configs = ports
        .iter()
        .map(|(id, p)| {
            let path = write_config(dir.path(), *id, p, &voter_list);
            if *id > voters {
                let text = std::fs::read_to_string(&path).unwrap();
                std::fs::write(&path, format!("{text}process.roles=broker\n")).unwrap();
            }
            (*id, path)
        })
        .collect();
    Layout {
        dir,
        ports,
        configs,
    }
}

impl Layout {
    fn log(&self, id: u64, run: u32) -> PathBuf {
        self.dir.path().join(format!("node-{id}-{run}.log"))
    }
    fn start(&self, id: u64, run: u32) -> Child {
        start(&self.configs[&id], &self.log(id, run))
    }
    fn start_all(&self, run: u32) -> BTreeMap<u64, Child> {
        self.configs
            .keys()
            .map(|id| (*id, self.start(*id, run)))
            .collect()
    }
    fn http(&self, ids: &[u64]) -> Vec<u16> {
        ids.iter().map(|id| self.ports[id].http).collect()
    }
}

#[test]
fn three_nodes_elect_fence_fail_over_after_kill_9_and_catch_up() {
    let cluster = layout(3, 3);
    let dir = &cluster.dir;
    let mut nodes = cluster.start_all(0);
    let http = |ids: &[u64]| cluster.http(ids);
    let all = [1, 2, 3];

    // Bootstrap: a leader, and every node registered as a broker and unfenced once caught up.
    let (leader, _) =
        agreed_leader(&http(&all), &all, Duration::from_secs(60)).unwrap_or_else(|| {
            panic!(
                "no leader after bootstrap
{}",
                node_log_tails(dir.path())
            )
        });
    wait_for_gauge(
        &http(&all),
        "sluice_brokers_unfenced",
        3,
        Duration::from_secs(30),
    );

    // A broker that stops heartbeating (paused) is fenced; resumed, it is unfenced again.
    let paused = *all.iter().find(|id| **id != leader).unwrap();
    let others: Vec<u64> = all.iter().copied().filter(|id| *id != paused).collect();
    signal(&nodes[&paused], libc::SIGSTOP);
    let paused_at = Instant::now();
    wait_for_gauge(
        &http(&others),
        "sluice_brokers_unfenced",
        2,
        Duration::from_secs(20),
    );
    eprintln!(
        "paused broker {paused} fenced after {} ms (session timeout 3000 ms, probe 1000 ms)",
        paused_at.elapsed().as_millis()
    );
    // Paused, its listener still accepts connections but answers nothing: the controller's
    // probe after its missed heartbeat fences it, not as dead.
    let logs = node_logs(dir.path());
    assert!(
        logs.contains("answers on none of its listeners (a hung process")
            && !logs.contains("its process is gone"),
        "a paused broker is fenced by its unanswered probe, not as dead"
    );
    signal(&nodes[&paused], libc::SIGCONT);
    wait_for_gauge(
        &http(&all),
        "sluice_brokers_unfenced",
        3,
        Duration::from_secs(20),
    );

    // kill -9 of the leader: the other two elect one of themselves and commit.
    let (leader, applied) = agreed_leader(&http(&all), &all, Duration::from_secs(30))
        .expect("no leader after the pause");
    let mut killed = nodes.remove(&leader).unwrap();
    killed.kill().unwrap();
    killed.wait().unwrap();
    let killed_at = Instant::now();
    let rest: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();
    // Asked at once, a survivor may still name the dead leader: `cluster status` asks again
    // until the quorum has a new one, instead of failing on the dead address.
    let status = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cluster", "status", "--bootstrap-controller"])
        .arg(format!("127.0.0.1:{}", cluster.ports[&rest[0]].quorum))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status.status.success() && !text.starts_with(&format!("leader {leader} ")),
        "cluster status after the leader's kill -9: {text}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let (new_leader, _) = agreed_leader(&http(&rest), &rest, Duration::from_secs(30))
        .expect("no new leader after kill -9");
    let deadline = Instant::now() + Duration::from_secs(10);
    while applied_min(&http(&rest)) <= applied {
        assert!(
            Instant::now() < deadline,
            "nothing committed after failover"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "leader {leader} killed; node {new_leader} leads and commits after {} ms",
        killed_at.elapsed().as_millis()
    );
    // The new controller fences the dead broker: its listener refuses connections, so
    // without waiting for its session to expire.
    wait_for_gauge(
        &http(&rest),
        "sluice_brokers_unfenced",
        2,
        Duration::from_secs(20),
    );
    eprintln!(
        "dead broker {leader} fenced {} ms after its kill -9",
        killed_at.elapsed().as_millis()
    );
    assert!(
        node_logs(dir.path()).contains(&format!(
            "broker missed its heartbeat and its listeners refuse connections (its process is gone): fencing it broker={leader}"
        )),
        "{}",
        node_log_tails(dir.path())
    );

    // The killed node restarts from its data, follows the new leader, catches up, re-registers.
    nodes.insert(leader, cluster.start(leader, 1));
    let (agreed, _) = agreed_leader(&http(&all), &[new_leader], Duration::from_secs(30))
        .expect("restarted node did not rejoin");
    assert_eq!(agreed, new_leader);
    wait_for_gauge(
        &http(&all),
        "sluice_brokers_unfenced",
        3,
        Duration::from_secs(30),
    );

    for (id, node) in nodes {
        let status = stop(node);
        assert!(
            status.success(),
            "node {id} exited with {status} after SIGTERM"
        );
    }
    // A paused, killed and restarted voter is normal operation: the logs say so once per
    // event, at WARN and INFO, never at ERROR.
    let logs = node_logs(dir.path());
    let errors: Vec<&str> = logs.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(errors.is_empty(), "no ERROR for normal events: {errors:#?}");
    // Each node says a peer went away once, not per failed RPC: per peer, its log alternates
    // between unreachable and reachable again. The killed leader is noticed by a survivor.
    let mut noticed = Vec::new();
    for (log, text) in read_node_logs(dir.path()) {
        let mut reachable: BTreeMap<u64, bool> = BTreeMap::new();
        for line in text.lines() {
            let went = if line.contains("quorum peer unreachable") {
                false
            } else if line.contains("quorum peer reachable again") {
                true
            } else {
                continue;
            };
            let peer = peer_of(line).unwrap_or_else(|| panic!("no peer field: {line}"));
            let was = reachable.insert(peer, went);
            assert_ne!(
                was,
                Some(went),
                "{}: peer {peer}'s state said twice in a row: {line}",
                log.display()
            );
            if !went && peer == leader {
                noticed.push(log.clone());
            }
        }
    }
    assert!(
        noticed
            .iter()
            .any(|log| rest.iter().any(|id| *log == cluster.log(*id, 0))),
        "no survivor said the killed leader {leader} went away"
    );
    assert!(logs.contains(&format!("quorum peer reachable again peer={leader}")));
}

/// The `peer=` field of a log line.
fn peer_of(line: &str) -> Option<u64> {
    let at = line.find("peer=")? + "peer=".len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[test]
fn a_node_refuses_the_data_directory_of_another_node() {
    let dir = tempfile::tempdir().unwrap();
    let ports = Ports {
        kafka: free_port(),
        quorum: free_port(),
        http: free_port(),
    };
    let first = write_config(
        dir.path(),
        1,
        &ports,
        &format!("1@127.0.0.1:{}", ports.quorum),
    );
    let node = start(&first, &dir.path().join("first.log"));
    assert!(agreed_leader(&[ports.http], &[1], Duration::from_secs(30)).is_some());
    assert!(stop(node).success());

    // Same data directory, another node id.
    let text = std::fs::read_to_string(&first)
        .unwrap()
        .replace("node.id=1", "node.id=2")
        .replace("voters=1@", "voters=2@");
    let second = dir.path().join("second.properties");
    std::fs::write(&second, text).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["server", "--config"])
        .arg(&second)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("refusing to start") && stderr.contains("node 1"),
        "{stderr}"
    );
}

#[test]
fn a_minority_cannot_commit_and_a_full_restart_keeps_every_committed_record() {
    let cluster = layout(3, 3);
    let dir = &cluster.dir;
    let mut nodes = cluster.start_all(0);
    let http = |ids: &[u64]| cluster.http(ids);
    let all = [1, 2, 3];
    let (leader, _) = agreed_leader(&http(&all), &all, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("no leader after bootstrap\n{}", node_log_tails(dir.path())));
    wait_for_gauge(
        &http(&all),
        "sluice_brokers_unfenced",
        3,
        Duration::from_secs(30),
    );

    // Pause both followers past their session timeout: the leader, alone, decides to fence
    // them but cannot commit it, so its committed image does not change.
    let followers: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();
    let before = metrics(cluster.ports[&leader].http).expect("leader answers");
    for id in &followers {
        signal(&nodes[id], libc::SIGSTOP);
    }
    std::thread::sleep(Duration::from_millis(5_000));
    let during = metrics(cluster.ports[&leader].http).expect("leader answers");
    assert_eq!(
        during["sluice_quorum_last_applied_index"], before["sluice_quorum_last_applied_index"],
        "a minority committed"
    );
    assert_eq!(
        during["sluice_brokers_unfenced"], 3,
        "fencing committed without a majority"
    );
    for id in &followers {
        signal(&nodes[id], libc::SIGCONT);
    }
    wait_for_gauge(
        &http(&all),
        "sluice_brokers_unfenced",
        3,
        Duration::from_secs(30),
    );
    let committed = applied_min(&http(&all));

    // Every node killed at once, then restarted: everything committed is still there.
    for (_, mut node) in std::mem::take(&mut nodes) {
        node.kill().unwrap();
        node.wait().unwrap();
    }
    nodes = cluster.start_all(1);
    agreed_leader(&http(&all), &all, Duration::from_secs(60)).unwrap_or_else(|| {
        panic!(
            "no leader after a full restart\n{}",
            node_log_tails(dir.path())
        )
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while applied_min(&http(&all)) < committed {
        assert!(
            Instant::now() < deadline,
            "committed entries missing after a full restart"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for_gauge(
        &http(&all),
        "sluice_brokers_registered",
        3,
        Duration::from_secs(20),
    );
    for (id, node) in nodes {
        let status = stop(node);
        assert!(
            status.success(),
            "node {id} exited with {status} after SIGTERM"
        );
    }
}

#[test]
fn a_broker_only_node_follows_the_quorum_as_a_learner() {
    let cluster = layout(4, 3);
    let dir = &cluster.dir;
    let ports = &cluster.ports;
    let nodes = cluster.start_all(0);
    let http = |ids: &[u64]| cluster.http(ids);
    let everyone = [1, 2, 3, 4];
    agreed_leader(&http(&everyone), &[1, 2, 3], Duration::from_secs(60))
        .unwrap_or_else(|| panic!("no leader seen by all four\n{}", node_log_tails(dir.path())));
    // Node 4 registered and was unfenced: it receives the same metadata log, as a learner.
    wait_for_gauge(
        &http(&everyone),
        "sluice_brokers_unfenced",
        4,
        Duration::from_secs(30),
    );
    wait_for_gauge(
        &http(&[4]),
        "sluice_quorum_voters",
        3,
        Duration::from_secs(10),
    );
    wait_for_gauge(
        &http(&[4]),
        "sluice_quorum_is_leader",
        0,
        Duration::from_secs(10),
    );

    // `sluice cluster` against the learner's internal listener is followed to the leader.
    let cluster = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("cluster")
            .args(args)
            .args([
                "--bootstrap-controller",
                &format!("127.0.0.1:{}", ports[&4].quorum),
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "sluice cluster {args:?}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    };
    let roles = |status: &str| -> BTreeMap<u64, String> {
        status
            .lines()
            .filter_map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                (fields.len() >= 2 && (fields[1] == "voter" || fields[1] == "learner"))
                    .then(|| (fields[0].parse().unwrap(), fields[1].to_owned()))
            })
            .collect()
    };
    let status = cluster(&["status"]);
    assert!(status.starts_with("leader "), "{status}");
    let expected: BTreeMap<u64, String> =
        [(1, "voter"), (2, "voter"), (3, "voter"), (4, "learner")]
            .into_iter()
            .map(|(id, role)| (id, role.to_owned()))
            .collect();
    assert_eq!(roles(&status), expected);
    assert_eq!(status.matches("unfenced").count(), 4, "{status}");
    // One voter at a time, without losing quorum.
    assert!(cluster(&["add-voter", "--node-id", "4"]).contains("done"));
    assert_eq!(roles(&cluster(&["status"]))[&4], "voter");
    assert!(cluster(&["remove-voter", "--node-id", "4"]).contains("done"));
    assert_eq!(roles(&cluster(&["status"]))[&4], "learner");
    // The same through a broker's Kafka listener (DescribeQuorum and DescribeCluster).
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cluster", "status", "--bootstrap-server"])
        .arg(format!("127.0.0.1:{}", ports[&4].kafka))
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{status}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(status.starts_with("leader "), "{status}");
    assert_eq!(roles(&status), expected, "{status}");
    assert_eq!(status.matches("unfenced").count(), 4, "{status}");

    for (id, node) in nodes {
        let status = stop(node);
        assert!(
            status.success(),
            "node {id} exited with {status} after SIGTERM"
        );
    }
}

#[test]
fn perf_quorum_runs_on_three_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "perf",
            "quorum",
            "--topics",
            "20",
            "--concurrency",
            "4",
            "--dir",
        ])
        .arg(dir.path().join("q"))
        .output()
        .expect("run sluice perf quorum");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in ["RocksDB synced 1 KiB write", "metadata commit", "topics/s"] {
        assert!(text.contains(expected), "missing '{expected}' in:\n{text}");
    }
}
