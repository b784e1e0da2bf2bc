//! TLS listeners against a real `sluice server`: an SSL listener that requires client
//! certificates (the principal is the certificate's subject through
//! `ssl.principal.mapping.rules`, and ACLs name it) and a SASL_SSL listener with SCRAM users
//! from the quorum, served beside the PLAINTEXT one. confluent-kafka, kafka-python, kafkajs and
//! kcat produce and consume; a client without a certificate and a client that does not trust the
//! broker's CA are refused; a replaced certificate file is served to new connections without a
//! restart. Certificates are made by `openssl` for each run.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::certs::{keystore, keystore_contents, make_ca, make_certificate};
use support::{SingleNode, run_client, sluice};

const SERVER_EXTENSIONS: &str =
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n";

/// The subject of the certificate a TLS listener serves now, as openssl prints it.
fn served_subject(port: u16, ca: &Path) -> String {
    let output = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-CAfile",
            &ca.to_string_lossy(),
            "-cert",
            &ca.with_file_name("alice.pem").to_string_lossy(),
            "-key",
            &ca.with_file_name("alice.key").to_string_lossy(),
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find(|l| l.trim_start().starts_with("subject="))
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn tls_listeners_serve_mtls_and_sasl_ssl_clients_and_reload_certificates() {
    let certs = tempfile::tempdir().expect("tempdir");
    let dir = certs.path();
    make_ca(dir, "ca");
    make_ca(dir, "other-ca");
    make_certificate(dir, "ca", "server", "/CN=localhost", SERVER_EXTENSIONS);
    make_certificate(
        dir,
        "ca",
        "alice",
        "/C=US/O=acme/OU=eng/CN=alice",
        "extendedKeyUsage=clientAuth\n",
    );
    let server_keystore = keystore(dir, "server");
    let ca = dir.join("ca.pem");
    let node = SingleNode::start_with_listeners(
        &["SSL", "SASL_SSL"],
        &[
            &format!("ssl.keystore.location={}", server_keystore.display()),
            "ssl.keystore.type=PEM",
            &format!("ssl.truststore.location={}", ca.display()),
            "listener.name.ssl.ssl.client.auth=required",
            "ssl.principal.mapping.rules=RULE:^CN=(.*?),OU=.*$/$1/L,DEFAULT",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS",
        ],
    );
    let plain = node.bootstrap();
    let ssl = format!("127.0.0.1:{}", node.listener_port("SSL"));
    let sasl_ssl = format!("127.0.0.1:{}", node.listener_port("SASL_SSL"));
    let certs_dir = dir.to_string_lossy().into_owned();

    // Users and ACLs through the PLAINTEXT listener (User:ANONYMOUS is a super user): the
    // ACLs name alice as her certificate maps her, and bob, a SCRAM user.
    sluice(&[
        "users",
        "create",
        "bob",
        "--password",
        "bob-secret",
        "--bootstrap-server",
        &plain,
    ]);
    for principal in ["User:alice", "User:bob"] {
        sluice(&[
            "acls",
            "add",
            "--allow-principal",
            principal,
            "--operation",
            "All",
            "--topic",
            "tls-",
            "--resource-pattern-type",
            "prefixed",
            "--bootstrap-server",
            &plain,
        ]);
        sluice(&[
            "acls",
            "add",
            "--allow-principal",
            principal,
            "--operation",
            "Read",
            "--group",
            "tls-",
            "--resource-pattern-type",
            "prefixed",
            "--bootstrap-server",
            &plain,
        ]);
    }
    let listed = sluice(&["acls", "list", "--bootstrap-server", &plain]);
    assert!(listed.contains("principal=User:alice"), "{listed}");

    let suite = |args: &[&str]| {
        let mut all = vec!["tls_suite.py"];
        all.extend_from_slice(args);
        run_client(&node, "python3", &all)
    };
    suite(&["mtls-roundtrip", &ssl, &certs_dir, "tls-orders"]);
    suite(&["mtls-kafka-python", &ssl, &certs_dir, "tls-kafka-python"]);
    suite(&["no-certificate-refused", &ssl, &certs_dir]);
    suite(&["untrusted-refused", &ssl, &certs_dir]);
    suite(&["scram-roundtrip", &sasl_ssl, &certs_dir, "tls-scram"]);
    suite(&[
        "scram-kafka-python",
        &sasl_ssl,
        &certs_dir,
        "tls-scram-python",
    ]);
    // kafkajs: Node's TLS and kafkajs's own SASL.
    let kafkajs = |args: &[&str]| {
        let mut all = vec!["kafkajs_secured.js"];
        all.extend_from_slice(args);
        run_client(&node, "node", &all)
    };
    kafkajs(&["mtls", &ssl, &certs_dir, "tls-kafkajs-mtls"]);
    kafkajs(&[
        "scram",
        &sasl_ssl,
        &certs_dir,
        "tls-kafkajs-scram",
        "bob",
        "bob-secret",
    ]);
    kafkajs(&[
        "scram-refused",
        &sasl_ssl,
        &certs_dir,
        "bob",
        "not-bob-secret",
    ]);
    assert!(
        node.gauge("sluice_tls_handshake_failures_total")
            .unwrap_or(0)
            >= 1
    );

    // kcat (librdkafka 2.0) with a client certificate reads what alice wrote.
    let read = run_client(
        &node,
        "kcat",
        &[
            "-b",
            &ssl,
            "-X",
            "security.protocol=SSL",
            "-X",
            &format!("ssl.ca.location={}", ca.display()),
            "-X",
            &format!(
                "ssl.certificate.location={}",
                dir.join("alice.pem").display()
            ),
            "-X",
            &format!("ssl.key.location={}", dir.join("alice.key").display()),
            "-t",
            "tls-orders",
            "-C",
            "-e",
            "-o",
            "beginning",
            "-c",
            "3",
        ],
    );
    assert_eq!(read.lines().count(), 3, "{read}");
    // And over SASL_SSL as bob (SCRAM-SHA-512), what bob wrote.
    let read = run_client(
        &node,
        "kcat",
        &[
            "-b",
            &sasl_ssl,
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            &format!("ssl.ca.location={}", ca.display()),
            "-X",
            "sasl.mechanism=SCRAM-SHA-512",
            "-X",
            "sasl.username=bob",
            "-X",
            "sasl.password=bob-secret",
            "-t",
            "tls-scram",
            "-C",
            "-e",
            "-o",
            "beginning",
            "-c",
            "3",
        ],
    );
    assert_eq!(read.lines().count(), 3, "{read}");

    // The CLI over mTLS, idle long enough for its broker probe (every 5 s without records):
    // the probe connects as the command does, so it finds the broker answering.
    let alice_keystore = keystore(dir, "alice");
    let command_config = dir.join("alice.properties");
    std::fs::write(
        &command_config,
        format!(
            "security.protocol=SSL\nssl.truststore.location={}\nssl.keystore.location={}\n",
            ca.display(),
            alice_keystore.display()
        ),
    )
    .expect("command config");
    let consumed = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "consume",
            "--bootstrap-server",
            &ssl,
            "--command-config",
            &command_config.to_string_lossy(),
            "--topic",
            "tls-orders",
            "--timeout-ms",
            "7000",
        ])
        .output()
        .expect("sluice consume");
    let stderr = String::from_utf8_lossy(&consumed.stderr);
    assert!(consumed.status.success(), "{stderr}");
    assert!(
        !stderr.contains("no broker"),
        "the idle consumer's probe did not reach the TLS listener: {stderr}"
    );

    // A replaced certificate is served to new connections, without a restart.
    let port = node.listener_port("SSL");
    assert!(served_subject(port, &ca).contains("CN = localhost"));
    make_certificate(dir, "ca", "renewed", "/CN=renewed", SERVER_EXTENSIONS);
    let renewed = keystore_contents(dir, "renewed");
    std::fs::write(&server_keystore, renewed).expect("replace keystore");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !served_subject(port, &ca).contains("CN = renewed") {
        assert!(
            Instant::now() < deadline,
            "the replaced certificate was not served:\n{}",
            support::tail(&node.logs(), 20)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(node.logs().contains("TLS certificates reloaded"));
    suite(&["mtls-roundtrip", &ssl, &certs_dir, "tls-after-reload"]);
}

/// `name`'s key encrypted as PKCS#8 with `password` (`<name>-encrypted.key`), as
/// `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it; returns its path.
fn encrypt_key(dir: &Path, name: &str, password: &str) -> std::path::PathBuf {
    let encrypted = dir.join(format!("{name}-encrypted.key"));
    let status = Command::new("openssl")
        .args(["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in"])
        .arg(dir.join(format!("{name}.key")))
        .arg("-out")
        .arg(&encrypted)
        .args(["-passout", &format!("pass:{password}")])
        .status()
        .expect("openssl (scripts/test installs it)");
    assert!(status.success(), "openssl pkcs8");
    encrypted
}

#[test]
fn encrypted_private_keys_are_read_with_ssl_key_password() {
    let certs = tempfile::tempdir().expect("tempdir");
    let dir = certs.path();
    make_ca(dir, "ca");
    make_certificate(dir, "ca", "server", "/CN=localhost", SERVER_EXTENSIONS);
    make_certificate(
        dir,
        "ca",
        "alice",
        "/C=US/O=acme/OU=eng/CN=alice",
        "extendedKeyUsage=clientAuth\n",
    );
    // The broker's keystore: its encrypted key, then its certificate.
    let server_key = encrypt_key(dir, "server", "server-secret");
    let server_keystore = dir.join("server-encrypted-keystore.pem");
    let certificate = std::fs::read_to_string(dir.join("server.pem")).expect("certificate");
    let key = std::fs::read_to_string(&server_key).expect("key");
    std::fs::write(&server_keystore, format!("{key}{certificate}")).expect("keystore");
    let ca = dir.join("ca.pem");
    let settings = [
        format!("ssl.keystore.location={}", server_keystore.display()),
        format!("ssl.truststore.location={}", ca.display()),
        "ssl.client.auth=required".to_owned(),
    ];

    // A wrong password: the broker refuses to start, naming the key and the cause.
    let (kafka, ssl, quorum) = (
        support::free_port(),
        support::free_port(),
        support::free_port(),
    );
    let data = tempfile::tempdir().expect("tempdir");
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.args(["server", "--override"]).arg(format!(
        "listeners=PLAINTEXT://127.0.0.1:{kafka},SSL://127.0.0.1:{ssl},CONTROLLER://127.0.0.1:{quorum}"
    ));
    for setting in settings.iter().map(String::as_str).chain([
        "ssl.key.password=not-the-password",
        &format!("http.listener=127.0.0.1:{}", support::free_port()),
        &format!("log.dirs={}", data.path().display()),
    ]) {
        command.arg("--override").arg(setting);
    }
    let output = command.output().expect("sluice server");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "started with a wrong key password"
    );
    assert!(
        stderr.contains("cannot decrypt the private key") && stderr.contains("ssl.key.password"),
        "{stderr}"
    );

    let mut overrides: Vec<&str> = settings.iter().map(String::as_str).collect();
    overrides.extend([
        "ssl.key.password=server-secret",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS;User:CN=alice,OU=eng,O=acme,C=US",
    ]);
    let node = SingleNode::start_with_listeners(&["SSL"], &overrides);
    let ssl = format!("127.0.0.1:{}", node.listener_port("SSL"));

    // confluent-kafka presents alice's certificate with her encrypted key.
    let alice_key = encrypt_key(dir, "alice", "alice-secret");
    run_client(
        &node,
        "python3",
        &[
            "tls_suite.py",
            "mtls-encrypted-key",
            &ssl,
            &dir.to_string_lossy(),
            "tls-encrypted",
            &alice_key.to_string_lossy(),
            "alice-secret",
        ],
    );

    // The CLI (the SDK) reads it back with a keystore whose key is encrypted.
    let alice_keystore = dir.join("alice-encrypted-keystore.pem");
    let certificate = std::fs::read_to_string(dir.join("alice.pem")).expect("certificate");
    let key = std::fs::read_to_string(&alice_key).expect("key");
    std::fs::write(&alice_keystore, format!("{key}{certificate}")).expect("keystore");
    let command_config = dir.join("alice.properties");
    let write_config = |password: &str| {
        std::fs::write(
            &command_config,
            format!(
                "security.protocol=SSL\nssl.truststore.location={}\nssl.keystore.location={}\n\
                 ssl.key.password={password}\n",
                ca.display(),
                alice_keystore.display()
            ),
        )
        .expect("command config");
    };
    let consume = || {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["consume", "--bootstrap-server", &ssl, "--command-config"])
            .arg(&command_config)
            .args([
                "--topic",
                "tls-encrypted",
                "--from-beginning",
                "--max-messages",
                "10",
            ])
            .args(["--timeout-ms", "10000"])
            .output()
            .expect("sluice consume")
    };
    write_config("alice-secret");
    let consumed = consume();
    let stdout = String::from_utf8_lossy(&consumed.stdout);
    assert!(
        consumed.status.success(),
        "{}",
        String::from_utf8_lossy(&consumed.stderr)
    );
    assert_eq!(stdout.lines().count(), 10, "{stdout}");
    // A wrong password is said once, naming the key, before any connection.
    write_config("wrong");
    let refused = consume();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("ssl.key.password") && stderr.contains("wrong password"),
        "{stderr}"
    );
}
