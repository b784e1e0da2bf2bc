//! The Rust SDK and the `sluice` CLI over TLS against a real `sluice server` with an SSL
//! listener that requires client certificates and a SASL_SSL listener with SCRAM-SHA-512
//! users from the quorum (as `tests/tls.rs` starts it; certificates made by `openssl` for each
//! run). An Admin, a Producer and a group Consumer round-trip records over each listener with
//! Kafka's client keys (Java's stores, PEM in config, librdkafka's file names); the CLI reads
//! the same keys from `--command-config`. A client that does not trust the broker's CA, or
//! brings no certificate where one is required, is told so within seconds, naming the key to
//! change, never retried into a timeout; a host name the certificate does not hold is refused
//! while `ssl.endpoint.identification.algorithm` is `https` and served when it is empty.

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sluice::client::{
    Admin, ClientConfig, Consumer, ConsumerRecord, Error, NewTopic, Producer, ProducerRecord,
    UserScramCredentialAlteration,
};
use sluice::security::sasl::Mechanism;
use support::SingleNode;
use support::certs::{keystore, make_ca, make_certificate};

const SERVER_EXTENSIONS: &str = "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";

/// How fast a refused handshake must be said (a retry loop would take request.timeout.ms or
/// max.block.ms, tens of seconds).
const REFUSAL_WITHIN: Duration = Duration::from_secs(5);

/// SCRAM-SHA-512 user bob, created through the PLAINTEXT listener.
const BOB_JAAS: &str = "org.apache.kafka.common.security.scram.ScramLoginModule required \
                        username=\"bob\" password=\"bob-secret\";";

/// The certificates of one run: the CA the node trusts, an unrelated CA, the broker's
/// certificate and alice's client certificate.
struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    fn make() -> Certificates {
        let dir = tempfile::tempdir().expect("tempdir");
        make_ca(dir.path(), "ca");
        make_ca(dir.path(), "other-ca");
        make_certificate(dir.path(), "ca", "server", "/CN=sluice", SERVER_EXTENSIONS);
        make_certificate(
            dir.path(),
            "ca",
            "alice",
            "/O=acme/CN=alice",
            "extendedKeyUsage=clientAuth\n",
        );
        keystore(dir.path(), "server");
        keystore(dir.path(), "alice");
        Certificates { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }

    fn text(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).expect("read")
    }
}

/// A node with SSL (client certificates required) and SASL_SSL (SCRAM-SHA-512) listeners
/// beside PLAINTEXT, and bob's SCRAM credential.
async fn tls_node(certificates: &Certificates) -> SingleNode {
    let node = SingleNode::start_with_listeners(
        &["SSL", "SASL_SSL"],
        &[
            &format!(
                "ssl.keystore.location={}",
                certificates.path("server-keystore.pem")
            ),
            "ssl.keystore.type=PEM",
            &format!("ssl.truststore.location={}", certificates.path("ca.pem")),
            "listener.name.ssl.ssl.client.auth=required",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
        ],
    );
    let admin = Admin::new(ClientConfig::new(&node.bootstrap())).expect("admin");
    let results = admin
        .alter_user_scram_credentials(&[UserScramCredentialAlteration::upsert(
            "bob",
            Mechanism::ScramSha512,
            "bob-secret",
        )])
        .await
        .expect("create bob");
    for (user, result) in results {
        result.unwrap_or_else(|error| panic!("{user}: {error}"));
    }
    admin.close();
    node
}

fn ssl_bootstrap(node: &SingleNode) -> String {
    format!("127.0.0.1:{}", node.listener_port("SSL"))
}

fn sasl_ssl_bootstrap(node: &SingleNode) -> String {
    format!("127.0.0.1:{}", node.listener_port("SASL_SSL"))
}

/// alice over SSL with Java's keys: PEM stores in files.
fn alice_java(certificates: &Certificates, bootstrap: &str) -> ClientConfig {
    ClientConfig::new(bootstrap)
        .set("security.protocol", "SSL")
        .set("ssl.truststore.type", "PEM")
        .set("ssl.truststore.location", certificates.path("ca.pem"))
        .set("ssl.keystore.type", "PEM")
        .set(
            "ssl.keystore.location",
            certificates.path("alice-keystore.pem"),
        )
}

/// alice over SSL with librdkafka's keys: the CA, the certificate and the key apart.
fn alice_librdkafka(certificates: &Certificates, bootstrap: &str) -> ClientConfig {
    ClientConfig::new(bootstrap)
        .set("security.protocol", "ssl")
        .set("ssl.ca.location", certificates.path("ca.pem"))
        .set("ssl.certificate.location", certificates.path("alice.pem"))
        .set("ssl.key.location", certificates.path("alice.key"))
}

/// bob over SASL_SSL with Java's keys, the CA as PEM in the config.
fn bob_java(certificates: &Certificates, bootstrap: &str) -> ClientConfig {
    ClientConfig::new(bootstrap)
        .set("security.protocol", "SASL_SSL")
        .set("ssl.truststore.certificates", certificates.text("ca.pem"))
        .set("sasl.mechanism", "SCRAM-SHA-512")
        .set("sasl.jaas.config", BOB_JAAS)
}

/// bob over SASL_SSL with librdkafka's keys.
fn bob_librdkafka(certificates: &Certificates, bootstrap: &str) -> ClientConfig {
    ClientConfig::new(bootstrap)
        .set("security.protocol", "SASL_SSL")
        .set("ssl.ca.location", certificates.path("ca.pem"))
        .set("sasl.mechanisms", "SCRAM-SHA-512")
        .set("sasl.username", "bob")
        .set("sasl.password", "bob-secret")
}

/// Writes `count` records `<prefix>-<i>` to `topic` and waits for every acknowledgement.
async fn produce(config: ClientConfig, topic: &str, prefix: &str, count: usize) {
    let producer = Producer::new(config).expect("producer");
    let mut deliveries = Vec::new();
    for i in 0..count {
        let record = ProducerRecord::new(topic, format!("{prefix}-{i}")).key(format!("key-{i}"));
        deliveries.push(producer.send(record).await.expect("send"));
    }
    for delivery in deliveries {
        delivery.await.expect("delivered");
    }
    producer.close().await.expect("close");
}

/// Reads `topic` as a member of `group` until `expected` records arrived (or 30 s passed);
/// their values, sorted.
async fn consume(config: ClientConfig, topic: &str, group: &str, expected: usize) -> Vec<String> {
    let consumer = Consumer::new(
        config
            .set("group.id", group)
            .set("auto.offset.reset", "earliest"),
    )
    .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut records: Vec<ConsumerRecord> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while records.len() < expected && Instant::now() < deadline {
        records.extend(
            consumer
                .poll(Duration::from_millis(500))
                .await
                .expect("poll"),
        );
    }
    consumer.commit_sync().await.expect("commit as a member");
    assert!(consumer.member_id().is_some(), "joined the group");
    consumer.close().await.expect("close");
    let mut values: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().expect("value")).into_owned())
        .collect();
    values.sort();
    values
}

fn numbered(prefix: &str, count: usize) -> Vec<String> {
    let mut values: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
    values.sort();
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_round_trip_records_over_mutual_tls_and_scram_over_sasl_ssl() {
    let certificates = Certificates::make();
    let node = tls_node(&certificates).await;
    let (ssl, sasl_ssl) = (ssl_bootstrap(&node), sasl_ssl_bootstrap(&node));

    // SSL with alice's certificate: the Admin creates, the Producer writes (Java's keys),
    // bob's group reads them over SASL_SSL (librdkafka's keys).
    let admin = Admin::new(alice_java(&certificates, &ssl)).expect("admin");
    admin
        .create_topics(
            &[
                NewTopic::new("tls-mtls", 3, 1),
                NewTopic::new("tls-scram", 3, 1),
            ],
            false,
        )
        .await
        .expect("create over SSL");
    admin.close();
    produce(alice_java(&certificates, &ssl), "tls-mtls", "mtls", 30).await;
    let read = consume(
        bob_librdkafka(&certificates, &sasl_ssl),
        "tls-mtls",
        "tls-bob",
        30,
    )
    .await;
    assert_eq!(read, numbered("mtls", 30));

    // SASL_SSL as bob (Java's keys, the CA as PEM in the config) writes; alice's group reads
    // over SSL with librdkafka's file keys; bob's Admin sees both topics.
    produce(bob_java(&certificates, &sasl_ssl), "tls-scram", "scram", 20).await;
    let read = consume(
        alice_librdkafka(&certificates, &ssl),
        "tls-scram",
        "tls-alice",
        20,
    )
    .await;
    assert_eq!(read, numbered("scram", 20));
    let admin = Admin::new(bob_java(&certificates, &sasl_ssl)).expect("admin");
    let topics = admin.list_topics(false).await.expect("list over SASL_SSL");
    for topic in ["tls-mtls", "tls-scram"] {
        assert!(topics.contains(&topic.to_owned()), "{topics:?}");
    }
    admin.close();
    // Every connection went through the handshake: none failed.
    assert_eq!(
        node.gauge("sluice_tls_handshake_failures_total")
            .unwrap_or(0),
        0
    );
}

/// Asserts `error` is a configuration error for `key`, naming `words`, said within
/// [`REFUSAL_WITHIN`] of `started` and not retriable.
fn assert_refused(error: &Error, started: Instant, key: &str, words: &str) {
    let text = error.to_string();
    assert!(
        matches!(error, Error::Config { key: k, .. } if k == key),
        "{error:?}"
    );
    assert!(text.contains(words), "{text}");
    assert!(!error.is_retriable(), "{error:?}");
    assert!(
        started.elapsed() < REFUSAL_WITHIN,
        "refused after {:?}: {text}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misconfigured_tls_client_is_told_at_once_which_key_to_change() {
    let certificates = Certificates::make();
    let node = tls_node(&certificates).await;
    let (ssl, sasl_ssl) = (ssl_bootstrap(&node), sasl_ssl_bootstrap(&node));

    // Trusting another CA: each client says the broker's certificate is not trusted.
    let untrusted = || {
        alice_java(&certificates, &ssl)
            .set("ssl.truststore.location", certificates.path("other-ca.pem"))
    };
    let admin = Admin::new(untrusted()).expect("admin");
    let started = Instant::now();
    let error = admin.list_topics(false).await.expect_err("untrusted");
    assert_refused(&error, started, "ssl.truststore.location", "UnknownIssuer");
    let producer = Producer::new(untrusted()).expect("producer");
    let started = Instant::now();
    let error = match producer.send(ProducerRecord::new("tls-refused", "x")).await {
        Err(error) => error,
        Ok(delivery) => delivery
            .await
            .expect_err("delivered to an untrusted broker"),
    };
    assert_refused(&error, started, "ssl.truststore.location", "UnknownIssuer");
    let consumer = Consumer::new(
        untrusted()
            .set("group.id", "tls-refused")
            .set("auto.offset.reset", "earliest"),
    )
    .expect("consumer");
    consumer.subscribe(&["tls-refused"]).expect("subscribe");
    let started = Instant::now();
    let error = consumer
        .poll(Duration::from_secs(20))
        .await
        .expect_err("polled an untrusted broker");
    assert_refused(&error, started, "ssl.truststore.location", "UnknownIssuer");

    // No client certificate where the listener requires one.
    let anonymous = ClientConfig::new(&ssl)
        .set("security.protocol", "SSL")
        .set("ssl.truststore.location", certificates.path("ca.pem"));
    let admin = Admin::new(anonymous).expect("admin");
    let started = Instant::now();
    let error = admin.list_topics(false).await.expect_err("no certificate");
    assert_refused(
        &error,
        started,
        "ssl.keystore.location",
        "asks for a client certificate",
    );

    // TLS holds over SASL_SSL, then SASL refuses a wrong password as it does in the clear.
    let wrong = bob_librdkafka(&certificates, &sasl_ssl).set("sasl.password", "not-bobs");
    let admin = Admin::new(wrong).expect("admin");
    let started = Instant::now();
    let error = admin.list_topics(false).await.expect_err("wrong password");
    assert!(
        error.is_authentication() && error.to_string().contains("SASL_AUTHENTICATION_FAILED"),
        "{error}"
    );
    assert!(started.elapsed() < REFUSAL_WITHIN);

    // localhost is not a name the broker's certificate holds (127.0.0.1 is): refused while
    // the name is checked, served when only the chain is.
    let port = node.listener_port("SSL");
    let by_name = format!("localhost:{port}");
    let admin = Admin::new(alice_java(&certificates, &by_name)).expect("admin");
    let started = Instant::now();
    let error = admin.list_topics(false).await.expect_err("a wrong name");
    assert_refused(
        &error,
        started,
        "ssl.endpoint.identification.algorithm",
        "not valid for name \"localhost\"",
    );
    let chain_only =
        || alice_java(&certificates, &by_name).set("ssl.endpoint.identification.algorithm", "");
    let admin = Admin::new(chain_only()).expect("admin");
    admin
        .create_topics(&[NewTopic::new("tls-by-name", 1, 1)], false)
        .await
        .expect("served with the chain checked");
    admin.close();
    produce(chain_only(), "tls-by-name", "by-name", 5).await;
    let read = consume(chain_only(), "tls-by-name", "tls-by-name", 5).await;
    assert_eq!(read, numbered("by-name", 5));
}

fn sluice(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;

    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    child.wait_with_output().expect("wait")
}

/// Runs `sluice args --bootstrap-server bootstrap --command-config config`, which must
/// succeed; its stdout and stderr.
fn cli_ok(args: &[&str], bootstrap: &str, config: &str, stdin: Option<&str>) -> (String, String) {
    let mut all = args.to_vec();
    all.extend(["--bootstrap-server", bootstrap, "--command-config", config]);
    let output = sluice(&all, stdin);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert!(
        output.status.success(),
        "sluice {all:?}: {}: {stderr}",
        output.status
    );
    (stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_kafkas_tls_keys_from_its_command_config() {
    let certificates = Certificates::make();
    let node = tls_node(&certificates).await;
    let (ssl, sasl_ssl) = (ssl_bootstrap(&node), sasl_ssl_bootstrap(&node));
    let write = |name: &str, text: String| {
        let path = certificates.dir.path().join(name);
        std::fs::write(&path, text).expect("write config");
        path.to_string_lossy().into_owned()
    };
    // Kafka's client.properties for mutual TLS.
    let alice = write(
        "alice.properties",
        format!(
            "# as Kafka's tools take it\nsecurity.protocol=SSL\nssl.truststore.type=PEM\n\
             ssl.truststore.location={}\nssl.keystore.type=PEM\nssl.keystore.location={}\n",
            certificates.path("ca.pem"),
            certificates.path("alice-keystore.pem")
        ),
    );
    // SCRAM over TLS, the CA as PEM in the config over continued lines, as Kafka's docs
    // write it.
    let ca_lines = certificates
        .text("ca.pem")
        .trim_end()
        .lines()
        .collect::<Vec<_>>()
        .join(" \\\n    ");
    let bob = write(
        "bob.properties",
        format!(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config={BOB_JAAS}\nssl.truststore.certificates={ca_lines}\n"
        ),
    );

    cli_ok(
        &["topics", "create", "tls-cli", "--partitions", "2"],
        &ssl,
        &alice,
        None,
    );
    let (listed, _) = cli_ok(&["topics", "list"], &sasl_ssl, &bob, None);
    assert!(
        listed.lines().any(|line| line.trim() == "tls-cli"),
        "{listed}"
    );
    let input: String = (0..5).map(|i| format!("line {i}\n")).collect();
    let (_, said) = cli_ok(&["produce", "tls-cli"], &ssl, &alice, Some(&input));
    assert_eq!(said.trim(), "5 records written to tls-cli");
    let (read, _) = cli_ok(
        &[
            "consume",
            "tls-cli",
            "--group",
            "tls-cli",
            "--from-beginning",
            "--max-messages",
            "5",
        ],
        &sasl_ssl,
        &bob,
        None,
    );
    let mut lines: Vec<&str> = read.lines().collect();
    lines.sort();
    assert_eq!(lines, ["line 0", "line 1", "line 2", "line 3", "line 4"]);

    // Trusting another CA: said at once, once, naming the problem and the key; not "no
    // broker reachable" (exit 3), which would mean none answered.
    let untrusted = write(
        "untrusted.properties",
        format!(
            "security.protocol=SSL\nssl.truststore.location={}\nssl.keystore.location={}\n",
            certificates.path("other-ca.pem"),
            certificates.path("alice-keystore.pem")
        ),
    );
    let started = Instant::now();
    let output = sluice(
        &[
            "topics",
            "list",
            "--bootstrap-server",
            &ssl,
            "--command-config",
            &untrusted,
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "listed: {stderr}");
    assert_ne!(output.status.code(), Some(3), "{stderr}");
    assert_eq!(stderr.matches("UnknownIssuer").count(), 1, "{stderr}");
    assert!(stderr.contains("ssl.truststore.location"), "{stderr}");
    assert!(
        started.elapsed() < REFUSAL_WITHIN * 2,
        "refused after {:?}",
        started.elapsed()
    );
}
