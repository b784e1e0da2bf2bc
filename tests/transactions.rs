//! Kafka transactions against real clients and real `sluice server` processes: librdkafka
//! (confluent-kafka) commits and aborts and read_committed consumers stop at the LSO; a
//! consume-transform-produce processor killed with -9 mid-transaction still writes each input
//! exactly once; a second producer fences the first; the coordinator aborts a transaction
//! that outlives its timeout; a commit survives kill -9 of the coordinator's broker in a
//! three-node cluster; kafka-python, aiokafka and kafkajs commit and abort too; the admin
//! APIs (ListTransactions, DescribeTransactions, DescribeProducers) show an open transaction.
//!
//! The client side of each case is in `tests/clients/txn_suite.py` (and
//! `txn_other_clients.py`, `kafkajs_txn.js`), which asserts and exits non-zero with the reason.
//! `TXN_DEBUG=1` turns on librdkafka's `eos,protocol,broker` debug output in txn_suite.py.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    ListTransactionsRequest, ListTransactionsResponse, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use support::raw::Client;
use support::{Cluster, SingleNode, clients_dir, run_client, tail};

fn txn_case(node: &SingleNode, case: &str, args: &[&str]) -> String {
    let bootstrap = node.bootstrap();
    let mut all = vec!["txn_suite.py", bootstrap.as_str(), case];
    all.extend_from_slice(args);
    run_client(node, "python3", &all)
}

/// A client program running beside the test: its stdout lines as they come (and kept), its
/// stderr kept, its stdin open for commands. Killed when dropped.
struct Script {
    what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stdout: Vec<String>,
    stderr: Arc<Mutex<String>>,
}

impl Script {
    fn python(args: &[&str]) -> Script {
        let mut child = Command::new("python3")
            .args(args)
            .current_dir(clients_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 (scripts/test installs the clients)");
        let stdout = child.stdout.take().expect("stdout piped");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().expect("stderr piped");
        let kept = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut kept = kept.lock().expect("lock");
                kept.push_str(&line);
                kept.push('\n');
            }
        });
        Script {
            what: args.join(" "),
            stdin: child.stdin.take(),
            child,
            lines,
            stdout: Vec::new(),
            stderr,
        }
    }

    /// Waits for a stdout line starting with `prefix`; the line, or `None` if the program
    /// exited or the timeout passed first.
    fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    println!("  | {line}");
                    self.stdout.push(line.clone());
                    if line.starts_with(prefix) {
                        return Some(line);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to the script");
        stdin.flush().expect("flush the script's stdin");
    }

    /// Waits for the program to exit; whether it succeeded (false on timeout, then killed).
    fn finish(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                // The rest of its output.
                self.wait_for_line("\u{0}never", Duration::from_millis(500));
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill9();
        // What it printed up to there.
        self.wait_for_line("\u{0}never", Duration::from_millis(500));
        false
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What the program printed, for a failure message. With `TXN_DEBUG` set (librdkafka's
    /// debug output on), all of its stderr goes to a file named there.
    fn output(&self) -> String {
        let stderr = self.stderr.lock().expect("lock");
        let mut saved = String::new();
        if std::env::var_os("TXN_DEBUG").is_some() {
            let path = std::env::temp_dir().join(format!("txn-debug-{}.log", self.child.id()));
            if std::fs::write(&path, stderr.as_bytes()).is_ok() {
                saved = format!(" (all of it in {})", path.display());
            }
        }
        format!(
            "--- {} stdout\n{}\n--- stderr{saved}\n{}",
            self.what,
            self.stdout.join("\n"),
            tail(&stderr, 80)
        )
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A seed for the randomized parts: `TXN_SEED` if set, else the clock. Printed.
fn seed() -> u64 {
    let seed = std::env::var("TXN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("seed {seed} (TXN_SEED={seed} repeats this run)");
    seed
}

/// xorshift64*: a number in `low..=high`.
fn pick(state: &mut u64, low: u64, high: u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    let value = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
    low + value % (high - low + 1)
}

#[test]
fn open_transactions_hold_read_committed_at_the_lso_commits_appear_and_aborts_never_do() {
    let node = SingleNode::start(&[]);
    txn_case(&node, "visibility", &[]);
}

#[test]
fn consume_transform_produce_is_exactly_once_across_kill_9_of_the_processor() {
    const PER_PARTITION: &str = "1000";
    let node = SingleNode::start(&[]);
    let mut state = seed().max(1);
    txn_case(&node, "eos-setup", &[PER_PARTITION]);
    let bootstrap = node.bootstrap();
    // Two incarnations are killed with a transaction open: the first after writing its
    // records, the second after sending its offsets too. The third finishes.
    let pauses = [
        (pick(&mut state, 2, 12).to_string(), "produced"),
        (pick(&mut state, 2, 12).to_string(), "offsets"),
        ("0".to_owned(), "none"),
    ];
    for (run, (pause_at, pause_where)) in pauses.iter().enumerate() {
        println!("processor run {run}: pause at transaction {pause_at} ({pause_where})");
        let mut processor = Script::python(&[
            "txn_suite.py",
            &bootstrap,
            "eos-process",
            PER_PARTITION,
            pause_at,
            pause_where,
        ]);
        if *pause_where == "none" {
            let finished = processor.finish(Duration::from_secs(60));
            assert!(
                finished,
                "the last processor failed\n{}\n--- server log\n{}",
                processor.output(),
                tail(&node.logs(), 60)
            );
        } else {
            let paused = processor.wait_for_line("paused", Duration::from_secs(45));
            assert!(
                paused.is_some(),
                "processor run {run} did not reach its pause\n{}\n--- server log\n{}",
                processor.output(),
                tail(&node.logs(), 60)
            );
            processor.kill9();
            println!("processor run {run} killed with -9");
        }
    }
    txn_case(&node, "eos-verify", &[PER_PARTITION]);
}

#[test]
fn a_second_producer_with_the_transactional_id_fences_the_first() {
    let node = SingleNode::start(&[]);
    txn_case(&node, "fencing", &[]);
}

#[test]
fn the_coordinator_aborts_a_transaction_that_outlives_its_timeout() {
    let node = SingleNode::start(&[]);
    txn_case(&node, "timeout", &[]);
}

/// FindCoordinator (key type 1) for a transactional id: the coordinator's port.
fn transaction_coordinator_port(client: &mut Client, transactional_id: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response: FindCoordinatorResponse = client.call(
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(transactional_id.to_owned()))
                .with_key_type(1),
        );
        if response.error_code == 0 {
            return response.port;
        }
        assert!(
            Instant::now() < deadline,
            "FindCoordinator for {transactional_id}: {response:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_transaction_commits_across_kill_9_of_its_coordinators_broker() {
    let mut cluster = Cluster::start(
        3,
        &[
            "transaction.state.log.num.partitions=3",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
            "offsets.topic.num.partitions=3",
        ],
    );
    let bootstrap = cluster.bootstrap();
    let mut script = Script::python(&["txn_suite.py", &bootstrap, "failover"]);
    let ready = script.wait_for_line("ready", Duration::from_secs(60));
    assert!(
        ready.is_some(),
        "the transaction did not get going\n{}\n--- logs\n{}",
        script.output(),
        tail(&cluster.logs(), 80)
    );
    let mut client = Client::connect(cluster.nodes[0].kafka_port);
    let port = transaction_coordinator_port(&mut client, "failover-txn");
    drop(client);
    let victim = cluster
        .nodes
        .iter()
        .position(|n| i32::from(n.kafka_port) == port)
        .expect("the coordinator is a node of the cluster");
    println!(
        "killing node {} (the coordinator)",
        cluster.nodes[victim].id
    );
    cluster.kill9(victim);
    script.send_line("go");
    let finished = script.finish(Duration::from_secs(90));
    println!("{}", script.output());
    if std::env::var_os("TXN_LOGS").is_some() {
        println!("{}", cluster.logs());
    }
    assert!(
        finished,
        "the transactions across the coordinator's kill failed\n{}\n--- logs\n{}",
        script.output(),
        tail(&cluster.logs(), 120)
    );
}

fn other_client(node: &SingleNode, program: &str, script: &[&str], topic: &str, group: &str) {
    txn_case(node, "create", &[topic, "2", group]);
    let bootstrap = node.bootstrap();
    let mut args = script.to_vec();
    args.extend_from_slice(&[&bootstrap, topic, group]);
    run_client(node, program, &args);
    // 20 committed records, 10 aborted; offset 7 committed for the group, not the aborted 99.
    txn_case(node, "check-other", &[topic, "2", "20", "10", group, "7"]);
}

#[test]
fn kafka_python_transactions_commit_and_abort() {
    let node = SingleNode::start(&[]);
    other_client(
        &node,
        "python3",
        &["txn_other_clients.py", "kafka-python"],
        "kafka-python-txn",
        "kafka-python-txn-group",
    );
}

#[test]
fn aiokafka_transactions_commit_and_abort() {
    let node = SingleNode::start(&[]);
    other_client(
        &node,
        "python3",
        &["txn_other_clients.py", "aiokafka"],
        "aiokafka-txn",
        "aiokafka-txn-group",
    );
}

#[test]
fn kafkajs_transactions_commit_and_abort() {
    let node = SingleNode::start(&[]);
    other_client(
        &node,
        "node",
        &["kafkajs_txn.js"],
        "kafkajs-txn",
        "kafkajs-txn-group",
    );
}

#[test]
fn the_admin_apis_show_an_open_transaction_and_its_producer() {
    let node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();
    let mut script = Script::python(&["txn_suite.py", &bootstrap, "hold-open", "held", "held-txn"]);
    let ready = script.wait_for_line("ready", Duration::from_secs(30));
    let Some(ready) = ready else {
        panic!(
            "the transaction did not get going\n{}\n--- server log\n{}",
            script.output(),
            tail(&node.logs(), 60)
        );
    };
    let first_offset: i64 = ready
        .trim_start_matches("ready ")
        .parse()
        .expect("ready <offset>");
    let mut client = Client::connect(node.kafka_port);

    let listed: ListTransactionsResponse = client.call(
        ApiKey::ListTransactions,
        1,
        &ListTransactionsRequest::default()
            .with_state_filters(vec![StrBytes::from_static_str("Ongoing")])
            .with_duration_filter(-1),
    );
    assert_eq!(listed.error_code, 0, "{listed:?}");
    let ids: Vec<String> = listed
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.to_string())
        .collect();
    assert_eq!(ids, vec!["held-txn"], "{listed:?}");
    let producer_id = listed.transaction_states[0].producer_id;

    let describe = |client: &mut Client| -> DescribeTransactionsResponse {
        client.call(
            ApiKey::DescribeTransactions,
            0,
            &DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(
                StrBytes::from_static_str("held-txn"),
            )]),
        )
    };
    let described = describe(&mut client);
    let state = &described.transaction_states[0];
    assert_eq!(
        (state.error_code, state.transaction_state.as_str()),
        (0, "Ongoing"),
        "{described:?}"
    );
    assert_eq!(state.producer_id, producer_id, "{described:?}");
    assert_eq!(state.transaction_timeout_ms, 60_000, "{described:?}");
    assert!(state.transaction_start_time_ms > 0, "{described:?}");
    let partitions: Vec<(String, Vec<i32>)> = state
        .topics
        .iter()
        .map(|t| (t.topic.to_string(), t.partitions.clone()))
        .collect();
    assert_eq!(
        partitions,
        vec![("held".to_owned(), vec![0])],
        "{described:?}"
    );

    let producers = |client: &mut Client| -> DescribeProducersResponse {
        client.call(
            ApiKey::DescribeProducers,
            0,
            &DescribeProducersRequest::default().with_topics(vec![
                TopicRequest::default()
                    .with_name(TopicName(StrBytes::from_static_str("held")))
                    .with_partition_indexes(vec![0]),
            ]),
        )
    };
    let active = producers(&mut client);
    let partition = &active.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0, "{active:?}");
    let held: Vec<(i64, i64)> = partition
        .active_producers
        .iter()
        .map(|p| (p.producer_id.0, p.current_txn_start_offset))
        .collect();
    assert_eq!(held, vec![(producer_id.0, first_offset)], "{active:?}");

    script.send_line("commit");
    let finished = script.finish(Duration::from_secs(30));
    assert!(finished, "{}", script.output());
    // Completed: described as such, no open transaction at the partition.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let described = describe(&mut client);
        let state = described.transaction_states[0]
            .transaction_state
            .to_string();
        let active = producers(&mut client);
        let start = active.topics[0].partitions[0]
            .active_producers
            .first()
            .map(|p| p.current_txn_start_offset);
        if state == "CompleteCommit" && start == Some(-1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the commit: state {state}, current_txn_start_offset {start:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let listed: ListTransactionsResponse = client.call(
        ApiKey::ListTransactions,
        1,
        &ListTransactionsRequest::default()
            .with_state_filters(vec![StrBytes::from_static_str("Ongoing")])
            .with_duration_filter(-1),
    );
    assert!(listed.transaction_states.is_empty(), "{listed:?}");
}

#[test]
fn open_and_aborted_transactions_survive_kill_9_and_restart_of_the_node() {
    let mut node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();
    let mut script = Script::python(&["txn_suite.py", &bootstrap, "restart"]);
    let ready = script.wait_for_line("ready", Duration::from_secs(30));
    assert!(
        ready.is_some(),
        "the transactions did not get going\n{}\n--- server log\n{}",
        script.output(),
        tail(&node.logs(), 60)
    );
    node.kill9();
    node.restart();
    script.send_line("go");
    let finished = script.finish(Duration::from_secs(60));
    println!("{}", script.output());
    assert!(
        finished,
        "transactions across the node's restart\n{}\n--- server log\n{}",
        script.output(),
        tail(&node.logs(), 80)
    );
}

#[test]
fn randomly_interleaved_transactions_leave_exactly_the_committed_records_visible() {
    let node = SingleNode::start(&[]);
    let seed = seed().to_string();
    txn_case(&node, "random-interleave", &[&seed]);
}
