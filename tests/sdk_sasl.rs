//! The Rust SDK and the `sluice` CLI authenticating with SASL PLAIN against a real
//! `sluice server` whose SASL_PLAINTEXT listener knows alice and bob (as `tests/sasl.rs` starts
//! it): an Admin, a Producer and a group Consumer round-trip records as alice with Kafka's
//! client keys (Java's `sasl.jaas.config`, librdkafka's `sasl.username`/`sasl.password`); a
//! wrong password is said within seconds as SASL_AUTHENTICATION_FAILED with the broker's
//! message, never retried into a timeout (and SASL against the PLAINTEXT listener as
//! ILLEGAL_SASL_STATE); TLS and Kerberos are refused when a client is built; and the CLI reads
//! the same keys from `--command-config`.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use sluice::client::{
    Admin, ClientConfig, Consumer, ConsumerRecord, Error, NewTopic, Producer, ProducerRecord,
};
use support::SingleNode;

/// The listener's users, as `tests/sasl.rs` configures them.
const LISTENER_JAAS: &str = "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
    org.apache.kafka.common.security.plain.PlainLoginModule required \
    user_alice=\"alice-secret\" user_bob=\"bob-secret\";";

/// What a Java client puts in `sasl.jaas.config` to log in as alice.
const ALICE_JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"alice\" password=\"alice-secret\";";

/// How fast a refused authentication must be said (the broker answers at once; a retry loop
/// would take request.timeout.ms or max.block.ms, tens of seconds).
const REFUSAL_WITHIN: Duration = Duration::from_secs(5);

fn sasl_node() -> SingleNode {
    SingleNode::start_with_listeners(
        &["SASL_PLAINTEXT"],
        &["sasl.enabled.mechanisms=PLAIN", LISTENER_JAAS],
    )
}

fn sasl_bootstrap(node: &SingleNode) -> String {
    format!("127.0.0.1:{}", node.listener_port("SASL_PLAINTEXT"))
}

/// A client configuration logging in with `jaas` (Java's style).
fn with_jaas(bootstrap: &str, jaas: &str) -> ClientConfig {
    ClientConfig::new(bootstrap)
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "PLAIN")
        .set("sasl.jaas.config", jaas)
}

fn wrong_password(bootstrap: &str) -> ClientConfig {
    with_jaas(
        bootstrap,
        "org.apache.kafka.common.security.plain.PlainLoginModule required \
         username=\"alice\" password=\"not-her-password\";",
    )
}

/// Reads from `consumer` until `expected` records arrived (or 30 s passed).
async fn read_all(consumer: &Consumer, expected: usize) -> Vec<ConsumerRecord> {
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while records.len() < expected && Instant::now() < deadline {
        records.extend(
            consumer
                .poll(Duration::from_millis(500))
                .await
                .expect("poll"),
        );
    }
    records
}

/// Asserts `error` is the broker's refusal of a wrong PLAIN password, said as Kafka says it.
fn assert_refused(error: &Error, started: Instant) {
    let text = error.to_string();
    assert!(
        text.contains("SASL_AUTHENTICATION_FAILED")
            && text.contains("Invalid username or password"),
        "{text}"
    );
    assert_eq!(
        text.matches("SASL_AUTHENTICATION_FAILED").count(),
        1,
        "{text}"
    );
    assert!(
        error.is_authentication() && !error.is_retriable(),
        "{error:?}"
    );
    assert!(
        started.elapsed() < REFUSAL_WITHIN,
        "refused after {:?}: {text}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_authenticate_as_alice_and_round_trip_records_through_a_group() {
    let node = sasl_node();
    let bootstrap = sasl_bootstrap(&node);
    let topic = "sasl-sdk";

    let admin = Admin::new(with_jaas(&bootstrap, ALICE_JAAS)).expect("admin");
    admin
        .create_topics(&[NewTopic::new(topic, 3, 1)], false)
        .await
        .expect("create as alice");
    assert!(
        admin
            .list_topics(false)
            .await
            .expect("list")
            .contains(&topic.to_owned())
    );
    admin.close();

    let producer = Producer::new(with_jaas(&bootstrap, ALICE_JAAS)).expect("producer");
    let count = 30;
    let mut deliveries = Vec::new();
    for i in 0..count {
        let record = ProducerRecord::new(topic, format!("value-{i}")).key(format!("key-{i}"));
        deliveries.push(producer.send(record).await.expect("send"));
    }
    for delivery in deliveries {
        delivery.await.expect("delivered");
    }
    producer.close().await.expect("close");

    // librdkafka's keys, in a group: the coordinator's connection authenticates too.
    let consumer = Consumer::new(
        ClientConfig::new(&bootstrap)
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanisms", "PLAIN")
            .set("sasl.username", "alice")
            .set("sasl.password", "alice-secret")
            .set("group.id", "sasl-group")
            .set("auto.offset.reset", "earliest"),
    )
    .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let records = read_all(&consumer, count).await;
    let mut values: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().expect("value")).into_owned())
        .collect();
    values.sort();
    let mut expected: Vec<String> = (0..count).map(|i| format!("value-{i}")).collect();
    expected.sort();
    assert_eq!(values, expected);
    consumer.commit_sync().await.expect("commit as a member");
    assert!(consumer.member_id().is_some(), "joined the group");
    consumer.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_said_within_seconds_as_sasl_authentication_failed() {
    let node = sasl_node();
    let bootstrap = sasl_bootstrap(&node);

    let admin = Admin::new(wrong_password(&bootstrap)).expect("admin");
    let started = Instant::now();
    let error = admin.list_topics(false).await.expect_err("wrong password");
    assert_refused(&error, started);

    let producer = Producer::new(wrong_password(&bootstrap)).expect("producer");
    let started = Instant::now();
    let error = match producer
        .send(ProducerRecord::new("sasl-refused", "x"))
        .await
    {
        Err(error) => error,
        Ok(delivery) => delivery.await.expect_err("delivered with a wrong password"),
    };
    assert_refused(&error, started);

    let consumer = Consumer::new(
        wrong_password(&bootstrap)
            .set("group.id", "sasl-refused")
            .set("auto.offset.reset", "earliest"),
    )
    .expect("consumer");
    consumer.subscribe(&["sasl-refused"]).expect("subscribe");
    let started = Instant::now();
    let error = consumer
        .poll(Duration::from_secs(20))
        .await
        .expect_err("polled with a wrong password");
    assert_refused(&error, started);

    // SASL against the PLAINTEXT listener: the broker says the handshake is out of place.
    let admin = Admin::new(with_jaas(&node.bootstrap(), ALICE_JAAS)).expect("admin");
    let started = Instant::now();
    let error = admin
        .list_topics(false)
        .await
        .expect_err("not a SASL listener");
    assert!(
        error.to_string().starts_with("ILLEGAL_SASL_STATE"),
        "{error}"
    );
    assert!(error.is_authentication() && started.elapsed() < REFUSAL_WITHIN);

    assert!(
        node.logs()
            .contains("Authentication failed: Invalid username or password"),
        "the broker did not log the refusals"
    );
}

#[test]
fn tls_without_a_truststore_and_kerberos_are_refused_when_a_client_is_built() {
    let refused = |config: ClientConfig, key: &str, words: &str| {
        let errors = [
            Admin::new(config.clone()).err(),
            Producer::new(config.clone()).err(),
            Consumer::new(config).err(),
        ];
        for error in errors {
            match error {
                Some(Error::Config { key: k, reason }) => {
                    assert_eq!(k, key);
                    assert!(reason.contains(words), "{reason}");
                }
                other => panic!("built, or refused otherwise: {other:?}"),
            }
        }
    };
    // TLS needs a truststore: the SDK bundles no public CAs (tests/sdk_tls.rs serves TLS).
    for protocol in ["SSL", "SASL_SSL"] {
        refused(
            with_jaas("127.0.0.1:9092", ALICE_JAAS).set("security.protocol", protocol),
            "ssl.truststore.location",
            "bundles no public CA",
        );
    }
    let mut kerberos = ClientConfig::new("127.0.0.1:9092")
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.jaas.config", ALICE_JAAS);
    refused(kerberos.clone(), "sasl.mechanism", "GSSAPI");
    kerberos.insert("sasl.mechanism", "GSSAPI");
    refused(kerberos, "sasl.mechanism", "GSSAPI");
}

#[test]
fn the_cli_reads_sasl_from_its_command_config_and_says_a_refusal_once() {
    let node = sasl_node();
    let bootstrap = sasl_bootstrap(&node);
    let dir = tempfile::tempdir().expect("tempdir");
    let write_config = |name: &str, jaas: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                "# as Kafka's tools take it\nsecurity.protocol=SASL_PLAINTEXT\n\
                 sasl.mechanism=PLAIN\nsasl.jaas.config={jaas}\n"
            ),
        )
        .expect("write config");
        path.to_string_lossy().into_owned()
    };
    let alice = write_config("alice.properties", ALICE_JAAS);
    let sluice = |args: &[&str], config: &str| {
        let mut all = args.to_vec();
        all.extend(["--bootstrap-server", &bootstrap, "--command-config", config]);
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(&all)
            .output()
            .expect("run sluice");
        (
            output.status,
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };

    let (status, _, stderr) = sluice(
        &["topics", "create", "sasl-cli", "--partitions", "2"],
        &alice,
    );
    assert!(status.success(), "create: {status}: {stderr}");
    let (status, stdout, stderr) = sluice(&["topics", "list"], &alice);
    assert!(status.success(), "list: {status}: {stderr}");
    assert!(
        stdout.lines().any(|line| line.trim() == "sasl-cli"),
        "{stdout}"
    );

    let wrong = write_config(
        "wrong.properties",
        "org.apache.kafka.common.security.plain.PlainLoginModule required \
         username=\"alice\" password=\"not-her-password\";",
    );
    let started = Instant::now();
    let (status, stdout, stderr) = sluice(&["topics", "list"], &wrong);
    assert!(!status.success(), "listed with a wrong password: {stdout}");
    // 3 would say no broker was reached: one was, and it refused.
    assert_ne!(status.code(), Some(3), "{stderr}");
    assert_eq!(
        stderr.matches("SASL_AUTHENTICATION_FAILED").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("Invalid username or password"), "{stderr}");
    assert!(
        started.elapsed() < REFUSAL_WITHIN * 2,
        "refused after {:?}",
        started.elapsed()
    );
}
