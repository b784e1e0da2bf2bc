//! A single `sluice server` process on free ports, for tests that drive it with real clients.

#![allow(dead_code)]

pub mod certs;
mod ports;
pub mod raw;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use ports::free_port;

pub struct SingleNode {
    pub dir: tempfile::TempDir,
    pub kafka_port: u16,
    pub quorum_port: u16,
    pub http_port: u16,
    overrides: Vec<String>,
    /// Kafka listeners besides PLAINTEXT on `kafka_port`: (name, port).
    pub extra_listeners: Vec<(String, u16)>,
    env: Vec<(String, String)>,
    /// `RLIMIT_NOFILE` (soft and hard) for the server, when set.
    pub open_files_limit: Option<u64>,
    child: Option<Child>,
    runs: u32,
}

impl SingleNode {
    /// Starts a node with `overrides` (`key=value`) and waits until it serves as a broker.
    pub fn start(overrides: &[&str]) -> SingleNode {
        Self::start_with_env(overrides, &[])
    }

    /// As [`SingleNode::start`], with environment variables for the server (set on every
    /// restart too).
    pub fn start_with_env(overrides: &[&str], env: &[(&str, &str)]) -> SingleNode {
        Self::start_limited(overrides, env, None)
    }

    /// As [`SingleNode::start_with_env`], the server (and its restarts) limited to
    /// `open_files` descriptors, soft and hard, so it cannot raise the limit.
    pub fn start_limited(
        overrides: &[&str],
        env: &[(&str, &str)],
        open_files: Option<u64>,
    ) -> SingleNode {
        Self::start_full(&[], overrides, env, open_files)
    }

    /// As [`SingleNode::start`], with more Kafka listeners named `extra` (each on a port of
    /// its own: [`SingleNode::listener_port`]); `overrides` set their security.
    pub fn start_with_listeners(extra: &[&str], overrides: &[&str]) -> SingleNode {
        Self::start_full(extra, overrides, &[], None)
    }

    /// The port of listener `name` (one of the `extra` ones, or PLAINTEXT).
    pub fn listener_port(&self, name: &str) -> u16 {
        self.extra_listeners
            .iter()
            .find(|(n, _)| n == name)
            .map_or(self.kafka_port, |(_, port)| *port)
    }

    fn start_full(
        extra: &[&str],
        overrides: &[&str],
        env: &[(&str, &str)],
        open_files: Option<u64>,
    ) -> SingleNode {
        // Free ports are picked, released, then bound by the server: a test running beside
        // this one can take one in between. A server that cannot bind exits at once; then it
        // starts again on other ports.
        for attempt in 0..3 {
            let mut node = SingleNode {
                dir: tempfile::tempdir().expect("tempdir"),
                kafka_port: free_port(),
                quorum_port: free_port(),
                http_port: free_port(),
                overrides: overrides.iter().map(|s| (*s).to_owned()).collect(),
                extra_listeners: extra
                    .iter()
                    .map(|name| ((*name).to_owned(), free_port()))
                    .collect(),
                env: env
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                open_files_limit: open_files,
                child: None,
                runs: 0,
            };
            node.launch();
            if node.wait_up() {
                return node;
            }
            let exited = node
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            if !exited || attempt == 2 {
                panic!("broker did not come up; log:\n{}", node.logs());
            }
        }
        unreachable!("the loop returns or panics")
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.kafka_port)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Starts the process (again, over the same data) and waits until it is unfenced.
    pub fn restart(&mut self) {
        self.launch();
        if !self.wait_up() {
            panic!("broker did not come up; log:\n{}", self.logs());
        }
    }

    /// Waits up to 30 s for the broker to be unfenced and to serve what its unfencing gave it
    /// (its leaderships: until then it answers NOT_LEADER_OR_FOLLOWER); false if it exits or
    /// times out.
    fn wait_up(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.gauge("sluice_brokers_unfenced") == Some(1)
                && self.gauge("sluice_replica_metadata_lag") == Some(0)
            {
                return true;
            }
            if self
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
            {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn launch(&mut self) {
        self.runs += 1;
        let log = self.dir.path().join(format!("server-{}.log", self.runs));
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .arg("server")
            .arg("--override")
            .arg(format!(
                "listeners=PLAINTEXT://127.0.0.1:{},{}CONTROLLER://127.0.0.1:{}",
                self.kafka_port,
                self.extra_listeners
                    .iter()
                    .map(|(name, port)| format!("{name}://127.0.0.1:{port},"))
                    .collect::<String>(),
                self.quorum_port
            ))
            .arg("--override")
            .arg(format!("http.listener=127.0.0.1:{}", self.http_port))
            .arg("--override")
            .arg(format!("log.dirs={}", self.data_dir().display()))
            .arg("--override")
            .arg("broker.heartbeat.interval.ms=200");
        for o in &self.overrides {
            command.arg("--override").arg(o);
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(limit) = self.open_files_limit {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            // SAFETY: setrlimit is async-signal-safe and touches only the child being started.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let stderr = std::fs::File::create(&log).expect("log file");
        self.child = Some(
            command
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .expect("start sluice"),
        );
    }

    /// A gauge from `/metrics`.
    pub fn gauge(&self, name: &str) -> Option<i64> {
        gauge_at(self.http_port, name)
    }

    pub fn metrics_text(&self) -> String {
        metrics_at(self.http_port).unwrap_or_default()
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM; returns whether the process exited 0 within the timeout.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        // SAFETY: signalling a child process we own.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        false
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn logs(&self) -> String {
        let mut all = String::new();
        for run in 1..=self.runs {
            let path = self.dir.path().join(format!("server-{run}.log"));
            all.push_str(&format!("--- run {run}\n"));
            all.push_str(&std::fs::read_to_string(path).unwrap_or_default());
        }
        all
    }

    /// Resident memory of the server, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for SingleNode {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Runs a client program; panics with its output (and the server's log) unless it succeeds.
pub fn run_client(node: &SingleNode, program: &str, args: &[&str]) -> String {
    let output: Output = Command::new(program)
        .args(args)
        .current_dir(clients_dir())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e} (scripts/test installs the clients)"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        panic!(
            "{program} {args:?} failed ({}):\n{stdout}\n{stderr}\n--- server log tail\n{}",
            output.status,
            tail(&node.logs(), 60)
        );
    }
    println!("{stdout}");
    stdout
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The `/metrics` response (headers and Prometheus text) of the node whose HTTP listener is on
/// `http_port`, or `None` while it does not answer.
pub fn metrics_at(http_port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", http_port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text)
}

/// One gauge from the node's `/metrics`.
pub fn gauge_at(http_port: u16, name: &str) -> Option<i64> {
    metrics_at(http_port)?
        .lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
}

/// Runs a case of `confluent_suite.py`.
pub fn confluent(node: &SingleNode, case: &str, extra: &[&str]) -> String {
    let bootstrap = node.bootstrap();
    let mut args = vec!["confluent_suite.py", bootstrap.as_str(), case];
    args.extend_from_slice(extra);
    run_client(node, "python3", &args)
}

/// Three (or more) `sluice server` processes forming one cluster, every node a voter and a
/// broker, on free ports.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<ClusterNode>,
    /// The storage fault hook is armed on every node (`start_with_write_faults`).
    write_faults: bool,
    /// The Kafka clients' settings (librdkafka keys, as JSON) the Python suites and the acked
    /// producer add to their own, in `SLUICE_CLIENT_CONFIG`: a secured cluster's credentials.
    pub client_config: Option<String>,
    /// Arguments every `sluice server` of the cluster is started with (`@arg=` overrides).
    server_args: Vec<String>,
}

pub struct ClusterNode {
    pub id: u64,
    pub kafka_port: u16,
    pub quorum_port: u16,
    pub http_port: u16,
    child: Option<Child>,
    runs: u32,
    config: PathBuf,
}

impl Cluster {
    pub fn start(count: u64, overrides: &[&str]) -> Cluster {
        Cluster::start_with_voters(count, count, overrides)
    }

    /// `count` nodes, the first `voters` of them voters; the rest are broker-only nodes that
    /// follow the metadata log as learners.
    pub fn start_with_voters(count: u64, voters: u64, overrides: &[&str]) -> Cluster {
        Cluster::start_armed(count, voters, overrides, false)
    }

    /// As `start_with_voters`, with the storage fault hook armed on every node: `fail_writes`
    /// then makes writes to the logs it names fail with an I/O error.
    pub fn start_with_write_faults(count: u64, voters: u64, overrides: &[&str]) -> Cluster {
        Cluster::start_armed(count, voters, overrides, true)
    }

    /// `count` voters whose Kafka listener is named `listener` (its protocol and security in
    /// `overrides`; an `@arg=ARG` override is a command-line argument of every start); the
    /// Python clients connect with `client_config` (librdkafka keys, JSON).
    pub fn start_secured(
        count: u64,
        listener: &str,
        overrides: &[&str],
        client_config: &str,
    ) -> Cluster {
        let mut all = vec![format!("@listener={listener}")];
        all.extend(overrides.iter().map(|o| o.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let mut cluster = Cluster::start_armed(count, count, &all, false);
        cluster.client_config = Some(client_config.to_owned());
        cluster
    }

    /// From now on, writes on node `index` to the logs of `topic_partitions` (`topic-N`) fail.
    pub fn fail_writes(&self, index: usize, topic_partitions: &[&str]) {
        assert!(self.write_faults, "start_with_write_faults arms the hook");
        let file = self.fail_writes_file(self.nodes[index].id);
        std::fs::write(file, topic_partitions.join("\n")).expect("fault file");
    }

    fn fail_writes_file(&self, node_id: u64) -> PathBuf {
        self.dir.path().join(format!("fail-writes-{node_id}"))
    }

    fn start_armed(count: u64, voters: u64, overrides: &[&str], write_faults: bool) -> Cluster {
        // Free ports are picked, released, then bound by the servers: a test running beside
        // this one can take one in between. A node that cannot bind exits at once; then the
        // whole cluster starts again on other ports.
        for _ in 0..2 {
            let mut cluster = Cluster::try_start(count, voters, overrides, write_faults);
            if cluster.wait_for_gauge("sluice_brokers_unfenced", count as i64) {
                return cluster;
            }
            if !cluster.any_exited() {
                panic!("the cluster did not come up\n{}", tail(&cluster.logs(), 80));
            }
        }
        let cluster = Cluster::try_start(count, voters, overrides, write_faults);
        cluster.wait_for_gauge_everywhere("sluice_brokers_unfenced", count as i64);
        cluster
    }

    fn any_exited(&mut self) -> bool {
        self.nodes.iter_mut().any(|n| {
            n.child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
        })
    }

    /// Waits (up to 60 s, or until a node exits) for a gauge to reach `value` everywhere.
    fn wait_for_gauge(&mut self, name: &str, value: i64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if (0..self.nodes.len()).all(|i| self.gauge(i, name) == Some(value)) {
                return true;
            }
            if self.any_exited() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    fn try_start(count: u64, voters: u64, overrides: &[&str], write_faults: bool) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let nodes: Vec<ClusterNode> = (1..=count)
            .map(|id| ClusterNode {
                id,
                kafka_port: free_port(),
                quorum_port: free_port(),
                http_port: free_port(),
                child: None,
                runs: 0,
                config: dir.path().join(format!("node-{id}.properties")),
            })
            .collect();
        let voter_count = voters;
        let voters = nodes
            .iter()
            .filter(|n| n.id <= voter_count)
            .map(|n| format!("{}@127.0.0.1:{}", n.id, n.quorum_port))
            .collect::<Vec<_>>()
            .join(",");
        // The nodes share the machine's CPUs: their threads float (thread.affinity=false), as
        // the three-node example configs say.
        // A secured cluster names its Kafka listener (`@listener=NAME`, from start_secured).
        let listener = overrides
            .iter()
            .find_map(|o| o.strip_prefix("@listener="))
            .unwrap_or("PLAINTEXT");
        for node in &nodes {
            let mut text = format!(
                "node.id={}\nlisteners={listener}://127.0.0.1:{},CONTROLLER://127.0.0.1:{}\n\
                 controller.quorum.voters={voters}\nhttp.listener=127.0.0.1:{}\nlog.dirs={}\n\
                 controller.quorum.election.timeout.ms=500\nbroker.session.timeout.ms=3000\n\
                 broker.heartbeat.interval.ms=300\nreplica.fetch.backoff.ms=100\n\
                 thread.affinity=false\n",
                node.id,
                node.kafka_port,
                node.quorum_port,
                node.http_port,
                dir.path().join(format!("data-{}", node.id)).display()
            );
            if node.id > voter_count {
                text.push_str("process.roles=broker\n");
            }
            // `{id}` in an override is the node's id (`broker.rack=rack-{id}`).
            for o in overrides.iter().filter(|o| !o.starts_with('@')) {
                text.push_str(&o.replace("{id}", &node.id.to_string()));
                text.push('\n');
            }
            std::fs::write(&node.config, text).expect("config");
        }
        let mut cluster = Cluster {
            dir,
            nodes,
            write_faults,
            client_config: None,
            server_args: overrides
                .iter()
                .filter_map(|o| o.strip_prefix("@arg="))
                .map(str::to_owned)
                .collect(),
        };
        for index in 0..cluster.nodes.len() {
            cluster.start_node(index);
        }
        cluster
    }

    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.kafka_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn start_node(&mut self, index: usize) {
        let dir = self.dir.path().to_owned();
        let fault_file = self
            .write_faults
            .then(|| self.fail_writes_file(self.nodes[index].id));
        let server_args = self.server_args.clone();
        let node = &mut self.nodes[index];
        node.runs += 1;
        let log = dir.join(format!("node-{}-run-{}.log", node.id, node.runs));
        let stderr = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .arg("server")
            .arg("--config")
            .arg(&node.config)
            .args(&server_args)
            .stdout(Stdio::null())
            .stderr(stderr);
        if let Some(file) = fault_file {
            command.env("SLUICE_FAULT_FAIL_WRITES", file);
        }
        node.child = Some(command.spawn().expect("start sluice"));
    }

    pub fn kill9(&mut self, index: usize) {
        if let Some(mut child) = self.nodes[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for a node's process to exit; its status, or `None` on timeout.
    pub fn wait_exit(
        &mut self,
        index: usize,
        timeout: Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(child) = self.nodes[index].child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.nodes[index].child = None;
                    return Some(status);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn signal(&self, index: usize, signal: i32) {
        if let Some(child) = &self.nodes[index].child {
            // SAFETY: signalling a child process we own.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    /// A gauge from one node's `/metrics`.
    pub fn gauge(&self, index: usize, name: &str) -> Option<i64> {
        gauge_at(self.nodes[index].http_port, name)
    }

    pub fn gauge_sum(&self, name: &str) -> i64 {
        (0..self.nodes.len())
            .filter_map(|i| self.gauge(i, name))
            .sum()
    }

    pub fn wait_for_gauge_everywhere(&self, name: &str, value: i64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if (0..self.nodes.len()).all(|i| self.gauge(i, name) == Some(value)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{name} did not reach {value} on every node\n{}",
            self.logs()
        );
    }

    /// Waits until `check` holds, or panics with `what` and the logs.
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Cluster) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if check(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}\n{}", tail(&self.logs(), 80));
    }

    pub fn logs(&self) -> String {
        let mut all = String::new();
        for node in &self.nodes {
            for run in 1..=node.runs {
                let path = self
                    .dir
                    .path()
                    .join(format!("node-{}-run-{run}.log", node.id));
                all.push_str(&format!("--- node {} run {run}\n", node.id));
                all.push_str(&std::fs::read_to_string(path).unwrap_or_default());
            }
        }
        all
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for index in 0..self.nodes.len() {
            self.kill9(index);
        }
    }
}

/// Runs a confluent_suite.py case against a cluster.
pub fn confluent_cluster(cluster: &Cluster, case: &str, extra: &[&str]) -> String {
    suite_on_cluster(cluster, "confluent_suite.py", case, extra)
}

/// Runs a case of one of the Python suites in `tests/clients` against a cluster.
pub fn suite_on_cluster(cluster: &Cluster, script: &str, case: &str, extra: &[&str]) -> String {
    let bootstrap = cluster.bootstrap();
    let mut args = vec![script, bootstrap.as_str(), case];
    args.extend_from_slice(extra);
    let mut command = Command::new("python3");
    command.args(&args).current_dir(clients_dir());
    if let Some(config) = &cluster.client_config {
        command.env("SLUICE_CLIENT_CONFIG", config);
    }
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running python3: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        panic!(
            "{script} {case} failed:\n{stdout}\n{}\n--- logs\n{}",
            String::from_utf8_lossy(&output.stderr),
            tail(&cluster.logs(), 80)
        );
    }
    stdout
}

/// `tests/clients/acked_producer.py`: an idempotent acks=all confluent-kafka producer writing
/// `r<i>` to partition `i % 2` of a topic until stopped. Collects what was acknowledged (the
/// values, in the order acknowledged) and every error the client reported.
pub struct AckedProducer {
    child: Child,
    acked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    errors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl AckedProducer {
    pub fn start(bootstrap: &str, topic: &str) -> AckedProducer {
        AckedProducer::start_with(bootstrap, topic, None)
    }

    /// On `cluster`, with its clients' settings.
    pub fn start_on(cluster: &Cluster, topic: &str) -> AckedProducer {
        AckedProducer::start_with(
            &cluster.bootstrap(),
            topic,
            cluster.client_config.as_deref(),
        )
    }

    pub fn start_with(bootstrap: &str, topic: &str, client_config: Option<&str>) -> AckedProducer {
        use std::io::BufRead;
        let mut command = Command::new("python3");
        if let Some(config) = client_config {
            command.env("SLUICE_CLIENT_CONFIG", config);
        }
        let mut child = command
            .args(["acked_producer.py", bootstrap, topic])
            .current_dir(clients_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start acked_producer.py (scripts/test installs confluent-kafka)");
        let stdout = child.stdout.take().expect("stdout");
        let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let reader = {
            let (acked, errors) = (acked.clone(), errors.clone());
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                {
                    if line.starts_with("ERROR ") {
                        errors.lock().expect("lock").push(line);
                    } else {
                        acked.lock().expect("lock").push(line);
                    }
                }
            })
        };
        AckedProducer {
            child,
            acked,
            errors,
            reader,
        }
    }

    /// Records acknowledged so far.
    pub fn count(&self) -> usize {
        self.acked.lock().expect("lock").len()
    }

    /// Waits (up to 60 s) for `more` records acknowledged from now on.
    pub fn wait_for_more(&self, cluster: &Cluster, more: usize) {
        let before = self.count();
        cluster.wait_until("the producer going on", Duration::from_secs(60), |_| {
            self.count() >= before + more
        });
    }

    /// Stops the producer: the values it got acknowledged, and the errors it reported.
    pub fn stop(mut self) -> (Vec<String>, Vec<String>) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.reader.join();
        let acked = self.acked.lock().expect("lock").clone();
        let errors = self.errors.lock().expect("lock").clone();
        (acked, errors)
    }
}

/// Lines of a child's stderr, as they come.
pub fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;

    let stderr = child.stderr.take().expect("stderr piped");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    received
}

/// Runs the `sluice` CLI; its stdout, after checking it succeeded.
pub fn sluice(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("sluice");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "sluice {args:?}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// (partition, leader, isr) of each partition of `topic`.
pub fn leaders(cluster: &Cluster, topic: &str) -> Vec<(i32, i32, Vec<i32>)> {
    confluent_cluster(cluster, "leaders", &[topic])
        .lines()
        .filter_map(|l| {
            let fields: Vec<i32> = l
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            (fields.len() >= 2).then(|| (fields[0], fields[1], fields[2..].to_vec()))
        })
        .collect()
}

/// Every acknowledged record is stored exactly once, in order within its partition; returns
/// the number stored.
pub fn assert_acked_stored_once_in_order(
    cluster: &Cluster,
    topic: &str,
    acked: &[String],
) -> usize {
    let dumped = confluent_cluster(cluster, "dump", &[topic, "2"]);
    let stored: Vec<u64> = dumped
        .lines()
        .filter_map(|l| l.strip_prefix('r'))
        .filter_map(|n| n.parse().ok())
        .collect();
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for i in &stored {
        *counts.entry(*i).or_default() += 1;
    }
    let missing: Vec<&String> = acked
        .iter()
        .filter(|a| {
            a.strip_prefix('r')
                .and_then(|n| n.parse::<u64>().ok())
                .is_none_or(|n| !counts.contains_key(&n))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged records lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "records stored twice: {twice:?}");
    for partition in 0..2 {
        let in_partition: Vec<u64> = stored
            .iter()
            .copied()
            .filter(|i| i % 2 == partition)
            .collect();
        assert!(
            in_partition.windows(2).all(|w| w[0] < w[1]),
            "partition {partition} is out of order"
        );
    }
    stored.len()
}
