//! SASL authentication against real `sluice server` processes: a node with a PLAINTEXT
//! listener and a SASL_PLAINTEXT one (PLAIN, users from the listener's JAAS config), served at
//! once. confluent-kafka, kafka-python and kcat produce and consume as a user; a wrong
//! password or an unknown user is refused with SASL_AUTHENTICATION_FAILED and Kafka's message,
//! before any metadata; a request before authentication, an oversized frame and an
//! unknown mechanism close the connection or are refused as Kafka's broker does. The client
//! side of the third-party cases is `tests/clients/sasl_suite.py`.

mod support;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, MetadataResponse, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use support::raw::Client;
use support::{SingleNode, run_client};

const JAAS: &str = "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
    org.apache.kafka.common.security.plain.PlainLoginModule required \
    user_alice=\"alice-secret\" user_bob=\"bob-secret\";";

fn sasl_node() -> SingleNode {
    SingleNode::start_with_listeners(
        &["SASL_PLAINTEXT"],
        &["sasl.enabled.mechanisms=PLAIN", JAAS],
    )
}

fn sasl_bootstrap(node: &SingleNode) -> String {
    format!("127.0.0.1:{}", node.listener_port("SASL_PLAINTEXT"))
}

fn handshake(client: &mut Client, mechanism: &str) -> SaslHandshakeResponse {
    client.call(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into())),
    )
}

fn authenticate(client: &mut Client, token: &[u8]) -> Result<SaslAuthenticateResponse, String> {
    client.try_call(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
    )
}

#[test]
fn third_party_clients_produce_and_consume_as_a_plain_user_and_bad_credentials_are_refused() {
    let node = sasl_node();
    let bootstrap = sasl_bootstrap(&node);
    run_client(
        &node,
        "python3",
        &[
            "sasl_suite.py",
            &bootstrap,
            "confluent-roundtrip",
            "sasl-confluent",
        ],
    );
    run_client(
        &node,
        "python3",
        &[
            "sasl_suite.py",
            &bootstrap,
            "kafka-python-roundtrip",
            "sasl-kafka-python",
        ],
    );
    run_client(
        &node,
        "python3",
        &["sasl_suite.py", &bootstrap, "confluent-refused"],
    );
    run_client(
        &node,
        "python3",
        &["sasl_suite.py", &bootstrap, "kafka-python-refused"],
    );
    let logs = node.logs();
    assert!(
        logs.contains("SASL authentication failed")
            && logs.contains("Invalid username or password"),
        "the broker did not log the refused authentications"
    );

    // kcat (librdkafka 2.0) with Kafka's client keys.
    kcat_roundtrip(&node, &bootstrap, "PLAIN", "sasl-kcat");
}

/// kcat (Debian's librdkafka 2.0.2) logs in as bob with `mechanism`, writes three records to
/// `topic` and reads them back.
fn kcat_roundtrip(node: &SingleNode, bootstrap: &str, mechanism: &str, topic: &str) {
    let mechanism = format!("sasl.mechanisms={mechanism}");
    let sasl = [
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        mechanism.as_str(),
        "-X",
        "sasl.username=bob",
        "-X",
        "sasl.password=bob-secret",
    ];
    let mut produce = vec!["-b", bootstrap, "-t", topic, "-P"];
    produce.extend_from_slice(&sasl);
    let mut child = std::process::Command::new("kcat")
        .args(&produce)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("kcat (scripts/test installs it)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"one\ntwo\nthree\n").expect("write");
    }
    assert!(child.wait().expect("kcat").success(), "kcat produce failed");
    let mut consume = vec!["-b", bootstrap, "-t", topic, "-C", "-e", "-o", "beginning"];
    consume.extend_from_slice(&sasl);
    let read = run_client(node, "kcat", &consume);
    assert_eq!(read.lines().collect::<Vec<_>>(), ["one", "two", "three"]);
}

/// PLAIN's users from a JAAS file, as Kafka reads `-Djava.security.auth.login.config` (a
/// config key here): the `<listener>.KafkaServer` section over `KafkaServer`. confluent-kafka
/// logs in as a user of the file; a user of the other section is refused.
#[test]
fn plain_users_come_from_a_jaas_file_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("kafka_server_jaas.conf");
    std::fs::write(
        &file,
        "KafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n  \
         user_mallory=\"mallory-secret\";\n};\n\
         sasl_plaintext.KafkaServer {\n  \
         org.apache.kafka.common.security.plain.PlainLoginModule required\n  \
         user_alice=\"alice-secret\";\n};\n",
    )
    .expect("JAAS file");
    let node = SingleNode::start_with_listeners(
        &["SASL_PLAINTEXT"],
        &[
            "sasl.enabled.mechanisms=PLAIN",
            &format!("java.security.auth.login.config={}", file.display()),
        ],
    );
    let bootstrap = sasl_bootstrap(&node);
    let suite = |args: &[&str]| {
        let mut all = vec!["sasl_suite.py", bootstrap.as_str()];
        all.extend_from_slice(args);
        run_client(&node, "python3", &all)
    };
    suite(&["confluent-roundtrip", "sasl-jaas-file"]);
    suite(&["confluent-refused"]);
    let mut client = Client::connect(node.listener_port("SASL_PLAINTEXT"));
    assert_eq!(handshake(&mut client, "PLAIN").error_code, 0);
    let refused = authenticate(&mut client, b"\0mallory\0mallory-secret").expect("answered");
    assert_eq!(
        refused.error_code, 58,
        "the listener's own section wins: {refused:?}"
    );
}

#[test]
fn the_sasl_listener_serves_nothing_before_authentication() {
    let node = sasl_node();
    let port = node.listener_port("SASL_PLAINTEXT");

    // A request other than ApiVersions and SASL's closes the connection, unanswered.
    let mut client = Client::connect(port);
    let metadata: Result<MetadataResponse, String> =
        client.try_call(ApiKey::Metadata, 12, &MetadataRequest::default());
    assert!(
        metadata.is_err(),
        "metadata served before authentication: {metadata:?}"
    );

    // A mechanism the listener does not enable: refused, with the ones it does.
    let mut client = Client::connect(port);
    let refused = handshake(&mut client, "SCRAM-SHA-512");
    assert_eq!(
        refused.error_code, 33,
        "UNSUPPORTED_SASL_MECHANISM: {refused:?}"
    );
    assert_eq!(refused.mechanisms, [StrBytes::from_static_str("PLAIN")]);

    // SaslAuthenticate before the handshake: ILLEGAL_SASL_STATE, then closed.
    let mut client = Client::connect(port);
    let early = authenticate(&mut client, b"\0alice\0alice-secret").expect("answered");
    assert_eq!(early.error_code, 34, "ILLEGAL_SASL_STATE: {early:?}");

    // A wrong password: SASL_AUTHENTICATION_FAILED with Kafka's message, then closed.
    let mut client = Client::connect(port);
    assert_eq!(handshake(&mut client, "PLAIN").error_code, 0);
    let failed = authenticate(&mut client, b"\0alice\0wrong").expect("answered");
    assert_eq!(
        failed.error_code, 58,
        "SASL_AUTHENTICATION_FAILED: {failed:?}"
    );
    assert!(
        failed
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains("Invalid username or password")),
        "{failed:?}"
    );
    let after: Result<MetadataResponse, String> =
        client.try_call(ApiKey::Metadata, 12, &MetadataRequest::default());
    assert!(after.is_err(), "the connection stayed open: {after:?}");

    // The right password: the session is authenticated and Metadata is served; a second
    // handshake is out of place.
    let mut client = Client::connect(port);
    assert_eq!(handshake(&mut client, "PLAIN").error_code, 0);
    let done = authenticate(&mut client, b"\0alice\0alice-secret").expect("answered");
    assert_eq!(done.error_code, 0, "{done:?}");
    let metadata: MetadataResponse = client.call(ApiKey::Metadata, 12, &MetadataRequest::default());
    assert_eq!(metadata.brokers.len(), 1);
    assert_eq!(
        metadata.brokers[0].port,
        i32::from(port),
        "Metadata answers the SASL listener's endpoint"
    );
    assert_eq!(handshake(&mut client, "PLAIN").error_code, 34);

    // Once authenticated, socket.request.max.bytes bounds frames, from the very first: a
    // 600 KiB Produce right after the login is answered (the reader had begun reading it under
    // the 512 KiB bound of the login, and closed the connection).
    let mut client = Client::connect(port);
    assert_eq!(handshake(&mut client, "PLAIN").error_code, 0);
    let done = authenticate(&mut client, b"\0alice\0alice-secret").expect("answered");
    assert_eq!(done.error_code, 0, "{done:?}");
    let produce = kafka_protocol::messages::ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![
            kafka_protocol::messages::produce_request::TopicProduceData::default()
                .with_name(kafka_protocol::messages::TopicName(
                    StrBytes::from_static_str("no-such-topic"),
                ))
                .with_partition_data(vec![
                    kafka_protocol::messages::produce_request::PartitionProduceData::default()
                        .with_records(Some(Bytes::from(vec![0u8; 600 * 1024]))),
                ]),
        ]);
    let answered: Result<kafka_protocol::messages::ProduceResponse, String> =
        client.try_call(ApiKey::Produce, 9, &produce);
    assert!(answered.is_ok(), "{answered:?}\n{}", node.logs());

    // An oversized frame before authentication (sasl.server.max.receive.size, 512 KiB) closes
    // the connection before its body is read.
    use std::io::{Read, Write};
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    raw.write_all(&(1_000_000i32).to_be_bytes()).expect("size");
    raw.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let mut byte = [0u8; 1];
    assert!(
        matches!(raw.read(&mut byte), Ok(0) | Err(_)),
        "an oversized frame was read"
    );

    // The PLAINTEXT listener: SASL requests are out of place.
    let mut plain = Client::connect(node.kafka_port);
    assert_eq!(handshake(&mut plain, "PLAIN").error_code, 34);

    // Operators see the outcomes: two successes, one wrong password (SaslAuthenticate before
    // the handshake is not an authentication).
    assert_eq!(node.gauge("sluice_sasl_authentications_total"), Some(2));
    assert_eq!(
        node.gauge("sluice_sasl_authentication_failures_total"),
        Some(1)
    );
}

/// SaslHandshake v0 (what librdkafka 2.0's feature check needs advertised): the exchange goes
/// on in raw size-prefixed tokens; PLAIN's answer is an empty token, a wrong password closes
/// the connection.
#[test]
fn a_v0_handshake_goes_on_in_raw_tokens() {
    use bytes::BytesMut;
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Decodable, Encodable};
    use std::io::{Read, Write};

    let node = sasl_node();
    let port = node.listener_port("SASL_PLAINTEXT");
    let frame = |stream: &mut std::net::TcpStream, body: &[u8]| {
        stream
            .write_all(&(body.len() as i32).to_be_bytes())
            .expect("size");
        stream.write_all(body).expect("body");
    };
    let read_frame = |stream: &mut std::net::TcpStream| -> Option<Vec<u8>> {
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        stream.read_exact(&mut body).ok()?;
        Some(body)
    };
    for (password, accepted) in [("alice-secret", true), ("wrong", false)] {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        let mut request = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::SaslHandshake as i16)
            .with_request_api_version(0)
            .with_correlation_id(1)
            .encode(&mut request, 1)
            .expect("header");
        SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str("PLAIN"))
            .encode(&mut request, 0)
            .expect("body");
        frame(&mut stream, &request);
        let answer = read_frame(&mut stream).expect("handshake answered");
        let mut body = Bytes::from(answer[4..].to_vec());
        let handshake = SaslHandshakeResponse::decode(&mut body, 0).expect("decode");
        assert_eq!(handshake.error_code, 0, "{handshake:?}");
        frame(&mut stream, format!("\0alice\0{password}").as_bytes());
        let token = read_frame(&mut stream);
        if accepted {
            assert_eq!(token, Some(Vec::new()), "PLAIN answers an empty token");
        } else {
            assert_eq!(token, None, "a wrong password closes the connection");
        }
    }
}

/// SCRAM users live in the metadata quorum: confluent-kafka's AdminClient creates and
/// describes them on the PLAINTEXT listener; confluent-kafka, kafka-python and kcat log in with
/// SCRAM-SHA-256 and SCRAM-SHA-512 and produce and consume; a wrong password, an unknown user,
/// a user's other mechanism and a deleted credential are refused; the users survive a restart.
#[test]
fn scram_users_from_the_quorum_log_in_and_survive_a_restart() {
    let mut node = SingleNode::start_with_listeners(
        &["SASL_PLAINTEXT"],
        &["sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512"],
    );
    let plain = node.bootstrap();
    let sasl = sasl_bootstrap(&node);
    let suite = |node: &SingleNode, args: &[&str]| {
        let mut all = vec!["scram_suite.py"];
        all.extend_from_slice(args);
        run_client(node, "python3", &all)
    };
    suite(&node, &["admin-create", &plain]);
    suite(&node, &["admin-describe", &plain, "bob:SCRAM-SHA-256:4096"]);
    suite(
        &node,
        &[
            "kafka-python-roundtrip",
            &sasl,
            "SCRAM-SHA-256",
            "bob",
            "bob-secret",
            "scram-kafka-python",
        ],
    );
    suite(
        &node,
        &[
            "confluent-roundtrip",
            &sasl,
            "SCRAM-SHA-256",
            "bob",
            "bob-secret",
            "scram-confluent",
        ],
    );
    // kcat (Debian's librdkafka 2.0.2, whose client-final repeats its client nonce in front of
    // the server's, as Kafka accepts) produces and reads back.
    kcat_roundtrip(&node, &sasl, "SCRAM-SHA-256", "scram-kcat");

    for (mechanism, user, password) in [
        ("SCRAM-SHA-256", "bob", "wrong"),
        ("SCRAM-SHA-256", "mallory", "anything"),
        // bob has no SCRAM-SHA-512 credential.
        ("SCRAM-SHA-512", "bob", "bob-secret"),
    ] {
        suite(
            &node,
            &["confluent-refused", &sasl, mechanism, user, password],
        );
    }

    // kafka-configs.sh's form, through the sluice CLI: carol gets a SCRAM-SHA-512 credential.
    let sluice = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .output()
            .expect("sluice");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "sluice {args:?}: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        text
    };
    sluice(&[
        "configs",
        "--bootstrap-server",
        &plain,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "carol",
        "--add-config",
        "SCRAM-SHA-512=[iterations=8192,password=carol-secret]",
    ]);
    let described = sluice(&[
        "configs",
        "--bootstrap-server",
        &plain,
        "--describe",
        "--entity-type",
        "users",
    ]);
    assert!(
        described.contains("user-principal 'carol' are SCRAM-SHA-512=iterations=8192"),
        "{described}"
    );
    let listed = sluice(&["users", "list", "--bootstrap-server", &plain]);
    assert!(
        listed.contains("carol") && listed.contains("bob"),
        "{listed}"
    );
    suite(
        &node,
        &[
            "confluent-roundtrip",
            &sasl,
            "SCRAM-SHA-512",
            "carol",
            "carol-secret",
            "scram-carol",
        ],
    );
    sluice(&["users", "delete", "carol", "--bootstrap-server", &plain]);

    // The credential is in the quorum's log: a restarted node still knows bob.
    assert!(node.terminate(), "the node did not stop on SIGTERM");
    node.restart();
    let sasl = sasl_bootstrap(&node);
    suite(
        &node,
        &[
            "confluent-roundtrip",
            &sasl,
            "SCRAM-SHA-256",
            "bob",
            "bob-secret",
            "scram-after-restart",
        ],
    );
    suite(
        &node,
        &["admin-delete", &node.bootstrap(), "bob", "SCRAM-SHA-256"],
    );
    suite(&node, &["admin-describe", &node.bootstrap(), ""]);
    suite(
        &node,
        &[
            "confluent-refused",
            &sasl,
            "SCRAM-SHA-256",
            "bob",
            "bob-secret",
        ],
    );
    assert!(
        node.gauge("sluice_sasl_authentication_failures_total")
            .unwrap_or(0)
            >= 1
    );
}

/// KIP-368: with `connections.max.reauth.ms`, librdkafka renews its session on each
/// connection while it produces, and no delivery fails; a client that does not renew has its
/// connection closed at its next request after the session ended.
#[test]
fn sessions_expire_and_clients_reauthenticate_in_place() {
    let node = SingleNode::start_with_listeners(
        &["SASL_PLAINTEXT"],
        &[
            "sasl.enabled.mechanisms=PLAIN",
            JAAS,
            "connections.max.reauth.ms=1500",
        ],
    );
    let bootstrap = sasl_bootstrap(&node);
    run_client(
        &node,
        "python3",
        &[
            "sasl_suite.py",
            &bootstrap,
            "confluent-reauthenticates",
            "sasl-reauth",
            "6",
        ],
    );
    let renewed = node
        .gauge("sluice_sasl_reauthentications_total")
        .unwrap_or(0);
    assert!(renewed >= 1, "no session was renewed ({renewed})");

    // A client that authenticates (told the session's lifetime) and does not renew.
    let port = node.listener_port("SASL_PLAINTEXT");
    let mut client = Client::connect(port);
    assert_eq!(handshake(&mut client, "PLAIN").error_code, 0);
    let done = authenticate(&mut client, b"\0alice\0alice-secret").expect("answered");
    assert_eq!(done.error_code, 0, "{done:?}");
    assert_eq!(done.session_lifetime_ms, 1500);
    let served: Result<MetadataResponse, String> =
        client.try_call(ApiKey::Metadata, 12, &MetadataRequest::default());
    assert!(served.is_ok(), "{served:?}");
    std::thread::sleep(std::time::Duration::from_millis(2000));
    let expired: Result<MetadataResponse, String> =
        client.try_call(ApiKey::Metadata, 12, &MetadataRequest::default());
    assert!(
        expired.is_err(),
        "served after the session expired: {expired:?}"
    );
    assert!(node.logs().contains("after the SASL session expired"));
}
