//! DescribeLogDirs against real `sluice server` processes: kafka-python's admin (and its own
//! encoding of the request with `topics` null) sees each partition's bytes in the node's data
//! dir; `sluice log-dirs --describe` prints kafka-log-dirs.sh's JSON with the sizes the SDK
//! reports; on three nodes every broker reports every replica, with the bytes of its leader's
//! log, and a broker killed fails only its own entry; with ACLs only DESCRIBE on the cluster
//! lets a user see the dirs.

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse};
use serde_json::Value;
use sluice::client::{Admin, BrokerLogDirs, ClientConfig, Error};
use support::{Cluster, SingleNode};

const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

/// The SDK's connections live on the runtime that made them: one runtime per test.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The last line of a suite's output, as JSON.
fn json_line(out: &str) -> Value {
    serde_json::from_str(out.trim().lines().last().unwrap_or("")).expect("a JSON line")
}

/// `{broker: {dir: {"topic-partition": size}}}` from the SDK's answer, every broker answered.
fn sdk_sizes(
    described: &[BrokerLogDirs],
) -> BTreeMap<i32, BTreeMap<String, BTreeMap<String, i64>>> {
    described
        .iter()
        .map(|broker| {
            let dirs = broker
                .log_dirs
                .as_ref()
                .unwrap_or_else(|e| panic!("broker {}: {e}", broker.broker_id));
            let dirs = dirs
                .iter()
                .map(|dir| {
                    assert!(dir.error.is_none(), "{}: {:?}", dir.path, dir.error);
                    let sizes = dir
                        .replicas
                        .iter()
                        .map(|r| (r.topic_partition.to_string(), r.size_bytes))
                        .collect();
                    (dir.path.clone(), sizes)
                })
                .collect();
            (broker.broker_id, dirs)
        })
        .collect()
}

/// The same from kafka-python's answer (the suite's JSON).
fn python_sizes(answer: &Value) -> BTreeMap<i32, BTreeMap<String, BTreeMap<String, i64>>> {
    let brokers = answer.as_object().expect("brokers");
    brokers
        .iter()
        .map(|(broker, dirs)| {
            let dirs = dirs
                .as_array()
                .expect("dirs")
                .iter()
                .map(|dir| {
                    assert_eq!(dir["error_code"], 0, "{dir}");
                    let sizes = dir["partitions"]
                        .as_object()
                        .expect("partitions")
                        .iter()
                        .map(|(tp, info)| {
                            assert_eq!(info[1], 0, "offset lag of {tp}");
                            assert_eq!(info[2], false, "{tp} is not a future replica");
                            (tp.clone(), info[0].as_i64().expect("size"))
                        })
                        .collect();
                    (dir["log_dir"].as_str().expect("path").to_owned(), sizes)
                })
                .collect();
            (broker.parse().expect("broker id"), dirs)
        })
        .collect()
}

#[test]
fn kafka_python_and_the_cli_see_each_partitions_bytes_in_the_nodes_data_dir() {
    let node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();
    let suite = |case: &str, extra: &[&str]| {
        let mut args = vec!["log_dirs_suite.py", bootstrap.as_str(), case];
        args.extend_from_slice(extra);
        support::run_client(&node, "python3", &args)
    };
    // Three partitions, records in two of them.
    suite("fill", &["sized", "3", "1", "50", "0", "1"]);
    let data_dir = node.data_dir().display().to_string();

    let answer = json_line(&suite("describe", &["sized"]));
    let dirs = answer["1"].as_array().expect("broker 1 answered");
    assert_eq!(dirs.len(), 1, "one log dir: {answer}");
    let dir = &dirs[0];
    assert_eq!(dir["log_dir"], data_dir.as_str(), "{answer}");
    assert_eq!(dir["error_code"], 0);
    let partitions = dir["partitions"].as_object().expect("partitions");
    assert_eq!(partitions.len(), 3, "{answer}");
    for (tp, written) in [("sized-0", true), ("sized-1", true), ("sized-2", false)] {
        let size = partitions[tp][0].as_i64().expect("size");
        assert_eq!(size > 0, written, "{tp}: {size} bytes");
    }
    // v4: the room on the data dir's filesystem.
    let (total, usable) = (
        dir["total_bytes"].as_i64().expect("total"),
        dir["usable_bytes"].as_i64().expect("usable"),
    );
    assert!(total > 0 && (0..=total).contains(&usable), "{answer}");

    // `topics` null (what Kafka's admin sends): every log, this topic's among them.
    let every = python_sizes(&json_line(&suite("describe-null", &[])));
    let named = python_sizes(&answer);
    for (tp, size) in &named[&1][&data_dir] {
        assert_eq!(every[&1][&data_dir].get(tp), Some(size), "{tp}");
    }

    // The SDK and the CLI say the same sizes as kafka-python.
    let runtime = runtime();
    let admin = Admin::new(ClientConfig::new(&bootstrap)).expect("admin");
    let described = runtime
        .block_on(admin.describe_log_dirs(None, Some(&["sized".to_owned()])))
        .expect("describe");
    assert_eq!(sdk_sizes(&described), named);
    let everything = runtime
        .block_on(admin.describe_log_dirs(None, None))
        .expect("describe");
    assert_eq!(sdk_sizes(&everything), every);
    let dir = &everything[0].log_dirs.as_ref().expect("dirs")[0];
    assert!(dir.total_bytes.is_some_and(|t| t > 0) && dir.usable_bytes.is_some());

    let out = support::sluice(&["log-dirs", "--describe", "--bootstrap-server", &bootstrap]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], "Querying brokers for log directories information");
    assert_eq!(
        lines[1],
        "Received log directory information from brokers 1"
    );
    let printed: Value = serde_json::from_str(lines[2]).expect("JSON on one line");
    assert_eq!(printed["version"], 1);
    let broker = &printed["brokers"][0];
    assert_eq!(broker["broker"], 1);
    let log_dir = &broker["logDirs"][0];
    assert_eq!(log_dir["logDir"], data_dir.as_str());
    assert_eq!(log_dir["error"], Value::Null);
    let cli_sizes: BTreeMap<String, i64> = log_dir["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            assert_eq!(p["offsetLag"], 0);
            assert_eq!(p["isFuture"], false);
            (
                p["partition"].as_str().expect("name").to_owned(),
                p["size"].as_i64().expect("size"),
            )
        })
        .collect();
    assert_eq!(cli_sizes, sdk_sizes(&everything)[&1][&data_dir]);
    // Kafka's key order, as its tool prints it.
    assert!(
        lines[2].starts_with(r#"{"brokers":[{"broker":1,"logDirs":[{"logDir":"#)
            && lines[2].contains(r#"{"partition":"sized-0","size":"#)
            && lines[2].ends_with(r#"],"version":1}"#),
        "{out}"
    );

    // --topic-list keeps only those topics; --broker-list names brokers that must exist.
    let out = support::sluice(&[
        "log-dirs",
        "--describe",
        "--bootstrap-server",
        &bootstrap,
        "--broker-list",
        "1",
        "--topic-list",
        "sized,absent",
    ]);
    let printed: Value = serde_json::from_str(out.lines().nth(2).expect("json")).expect("json");
    let names: Vec<&str> = printed["brokers"][0]["logDirs"][0]["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| p["partition"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["sized-0", "sized-1", "sized-2"]);
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["log-dirs", "--describe", "--bootstrap-server", &bootstrap])
        .args(["--broker-list", "1,7"])
        .output()
        .expect("sluice");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("do not exist from --broker-list: 7. Current existent brokers: 1"),
        "{stderr}"
    );
    // Asked through the SDK, a broker that is not there fails its own entry only.
    let described = runtime
        .block_on(admin.describe_log_dirs(Some(&[1, 7]), None))
        .expect("describe");
    assert!(described[0].log_dirs.is_ok());
    assert_eq!(described[1].broker_id, 7);
    assert!(described[1].log_dirs.is_err());
    admin.close();
}

#[test]
fn every_broker_reports_every_replica_with_its_leaders_bytes_and_a_dead_one_fails_alone() {
    let mut cluster = Cluster::start(3, &[]);
    support::suite_on_cluster(
        &cluster,
        "log_dirs_suite.py",
        "fill",
        &["replicated", "3", "3", "40", "0", "1", "2"],
    );
    let runtime = runtime();
    let admin = Admin::new(ClientConfig::new(&cluster.bootstrap())).expect("admin");
    let topics = ["replicated".to_owned()];
    // Followers fetch what their leaders hold: each replica ends up with the same bytes.
    let deadline = Instant::now() + Duration::from_secs(30);
    let sizes = loop {
        let described = runtime
            .block_on(admin.describe_log_dirs(None, Some(&topics)))
            .expect("describe");
        let sizes = sdk_sizes(&described);
        let per_broker: Vec<BTreeMap<String, i64>> = sizes
            .values()
            .map(|dirs| dirs.values().flat_map(|d| d.clone()).collect())
            .collect();
        let same = per_broker.len() == 3
            && per_broker
                .iter()
                .all(|p| p.len() == 3 && *p == per_broker[0]);
        if same {
            break sizes;
        }
        assert!(Instant::now() < deadline, "replicas differ: {sizes:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for (broker, dirs) in &sizes {
        assert_eq!(dirs.len(), 1, "broker {broker}: {dirs:?}");
        let (path, partitions) = dirs.iter().next().expect("a dir");
        assert!(path.ends_with(&format!("data-{broker}")), "{path}");
        assert!(partitions.values().all(|&size| size > 0), "{partitions:?}");
    }

    // kafka-python's `topics` null answer from each broker holds every replica too.
    let python = python_sizes(&json_line(&support::suite_on_cluster(
        &cluster,
        "log_dirs_suite.py",
        "describe-null",
        &[],
    )));
    assert_eq!(python.len(), 3);
    for (broker, dirs) in &sizes {
        for (path, partitions) in dirs {
            for (tp, size) in partitions {
                assert_eq!(python[broker][path].get(tp), Some(size), "{tp} on {broker}");
            }
        }
    }

    // A broker gone: its entry says why; the others still answer.
    cluster.kill9(2);
    let described = runtime
        .block_on(admin.describe_log_dirs(Some(&[1, 2, 3]), Some(&topics)))
        .expect("describe");
    let outcome: Vec<(i32, bool)> = described
        .iter()
        .map(|b| (b.broker_id, b.log_dirs.is_ok()))
        .collect();
    assert_eq!(outcome, [(1, true), (2, true), (3, false)], "{described:?}");
    let error = described[2]
        .log_dirs
        .as_ref()
        .expect_err("broker 3 is dead");
    assert!(
        matches!(
            error,
            Error::Connect { .. }
                | Error::Disconnected { .. }
                | Error::NoBrokerReachable { .. }
                | Error::Protocol(_)
        ),
        "{error}"
    );
    admin.close();
}

const JAAS: &str = "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
    org.apache.kafka.common.security.plain.PlainLoginModule required \
    user_alice=\"alice-secret\" user_mallory=\"mallory-secret\";";

fn as_user(node: &SingleNode, user: &str) -> ClientConfig {
    ClientConfig::new(&format!(
        "127.0.0.1:{}",
        node.listener_port("SASL_PLAINTEXT")
    ))
    .set("security.protocol", "SASL_PLAINTEXT")
    .set("sasl.mechanism", "PLAIN")
    .set(
        "sasl.jaas.config",
        format!(
            "org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"{user}\" password=\"{user}-secret\";"
        ),
    )
}

/// A raw client logged in as `user` on the SASL listener (as tests/acls.rs does).
fn sasl_client(node: &SingleNode, user: &str) -> support::raw::Client {
    use kafka_protocol::messages::{
        SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
        SaslHandshakeResponse,
    };
    use kafka_protocol::protocol::StrBytes;
    let mut client = support::raw::Client::connect(node.listener_port("SASL_PLAINTEXT"));
    let handshake: SaslHandshakeResponse = client.call(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    );
    assert_eq!(handshake.error_code, 0, "{handshake:?}");
    let token = format!("\0{user}\0{user}-secret");
    let done: SaslAuthenticateResponse = client.call(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(token.into_bytes())),
    );
    assert_eq!(done.error_code, 0, "{done:?}");
    client
}

#[test]
fn only_describe_on_the_cluster_shows_the_log_dirs() {
    let node = SingleNode::start_with_listeners(
        &["SASL_PLAINTEXT"],
        &[
            "sasl.enabled.mechanisms=PLAIN",
            JAAS,
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS",
            "allow.everyone.if.no.acl.found=false",
        ],
    );
    // v3+ says why at the top; v1 and v2 have no field for it and list no dir.
    let mut raw = sasl_client(&node, "mallory");
    for version in 1..=4 {
        let answer: DescribeLogDirsResponse = raw.call(
            ApiKey::DescribeLogDirs,
            version,
            &DescribeLogDirsRequest::default(),
        );
        let expected = if version >= 3 {
            CLUSTER_AUTHORIZATION_FAILED
        } else {
            0
        };
        assert_eq!(answer.error_code, expected, "v{version}: {answer:?}");
        assert!(answer.results.is_empty(), "v{version}: {answer:?}");
    }
    let runtime = runtime();
    let mallory = Admin::new(as_user(&node, "mallory")).expect("admin");
    let described = runtime
        .block_on(mallory.describe_log_dirs(None, None))
        .expect("the call itself");
    assert_eq!(described.len(), 1);
    let error = described[0].log_dirs.as_ref().expect_err("refused");
    assert_eq!(error.code(), Some(CLUSTER_AUTHORIZATION_FAILED), "{error}");
    mallory.close();

    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("mallory.properties");
    std::fs::write(
        &config,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=\
         org.apache.kafka.common.security.plain.PlainLoginModule required \
         username=\"mallory\" password=\"mallory-secret\";\n",
    )
    .expect("config");
    let sasl = format!("127.0.0.1:{}", node.listener_port("SASL_PLAINTEXT"));
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["log-dirs", "--describe", "--bootstrap-server", &sasl])
        .arg("--command-config")
        .arg(&config)
        .output()
        .expect("sluice");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "a Kafka error: {stderr}");
    assert!(
        stderr.contains("CLUSTER_AUTHORIZATION_FAILED") && stderr.contains("broker 1"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("logDirs"),
        "nothing printed for a refused broker"
    );

    // DESCRIBE on the cluster lets alice in.
    support::sluice(&[
        "acls",
        "add",
        "--bootstrap-server",
        &node.bootstrap(),
        "--allow-principal",
        "User:alice",
        "--operation",
        "Describe",
        "--cluster",
    ]);
    let alice = Admin::new(as_user(&node, "alice")).expect("admin");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let described = runtime
            .block_on(alice.describe_log_dirs(None, None))
            .expect("describe");
        match &described[0].log_dirs {
            Ok(dirs) => {
                assert_eq!(dirs[0].path, node.data_dir().display().to_string());
                break;
            }
            Err(error) if Instant::now() < deadline => {
                assert_eq!(error.code(), Some(CLUSTER_AUTHORIZATION_FAILED), "{error}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(error) => panic!("alice still refused: {error}"),
        }
    }
    alice.close();
}
