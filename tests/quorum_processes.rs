//! The metadata quorum with real `sluice server` processes: bootstrap of three nodes, election,
//! kill -9 of the leader and failover, catch-up of the restarted node, clean SIGTERM exits,
//! and refusal of a data directory that belongs to another node.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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
         controller.quorum.election.timeout.ms=500\n",
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
    let mut stream = TcpStream::connect(("127.0.0.1", http_port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
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

fn stop(mut child: Child) -> std::process::ExitStatus {
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "node did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn three_nodes_elect_a_leader_fail_over_after_kill_9_and_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let ports: BTreeMap<u64, Ports> = (1..=3)
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
    let voters = ports
        .iter()
        .map(|(id, p)| format!("{id}@127.0.0.1:{}", p.quorum))
        .collect::<Vec<_>>()
        .join(",");
    let configs: BTreeMap<u64, PathBuf> = ports
        .iter()
        .map(|(id, p)| (*id, write_config(dir.path(), *id, p, &voters)))
        .collect();
    let log = |id: u64, run: u32| dir.path().join(format!("node-{id}-{run}.log"));
    let mut nodes: BTreeMap<u64, Child> = configs
        .iter()
        .map(|(id, config)| (*id, start(config, &log(*id, 0))))
        .collect();

    let http = |ids: &[u64]| ids.iter().map(|id| ports[id].http).collect::<Vec<_>>();
    let all = [1, 2, 3];
    let (leader, applied) = agreed_leader(&http(&all), &all, Duration::from_secs(30))
        .expect("no leader after bootstrap");

    let mut killed = nodes.remove(&leader).unwrap();
    killed.kill().unwrap(); // SIGKILL
    killed.wait().unwrap();
    let killed_at = Instant::now();
    let rest: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();
    let (new_leader, applied_after) = agreed_leader(&http(&rest), &rest, Duration::from_secs(30))
        .expect("no new leader after kill -9");
    // The new leader's first entry committing is a metadata write through the new majority.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut committed = applied_after;
    while committed <= applied && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        committed = http(&rest)
            .iter()
            .filter_map(|p| metrics(*p))
            .map(|m| m["sluice_quorum_last_applied_index"])
            .min()
            .unwrap_or(0);
    }
    assert!(
        committed > applied,
        "nothing committed after failover ({committed} <= {applied})"
    );
    eprintln!(
        "leader {leader} killed; node {new_leader} leads and commits after {} ms",
        killed_at.elapsed().as_millis()
    );

    // The killed node restarts from its data and follows the new leader.
    nodes.insert(leader, start(&configs[&leader], &log(leader, 1)));
    let (agreed, _) = agreed_leader(&http(&all), &[new_leader], Duration::from_secs(30))
        .expect("restarted node did not rejoin");
    assert_eq!(agreed, new_leader);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let restarted =
            metrics(ports[&leader].http).map_or(0, |m| m["sluice_quorum_last_applied_index"]);
        if restarted >= committed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "restarted node stuck at {restarted} < {committed}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    for (id, node) in nodes {
        let status = stop(node);
        assert!(
            status.success(),
            "node {id} exited with {status} after SIGTERM"
        );
    }
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
