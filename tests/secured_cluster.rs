//! A three-node cluster whose only Kafka listener is SASL_SSL and whose quorum listener is SSL
//! with client certificates: brokers replicate to each other as clients of the SASL_SSL
//! listener (TLS verified against the CA, SASL PLAIN as `User:admin`, a super user, with the
//! StandardAuthorizer on), quorum members and brokers call each other with their certificates
//! (`User:broker`), and clients log in with SCRAM-SHA-512 credentials that live in the metadata
//! quorum. An idempotent acks=all confluent-kafka producer loses nothing when its partition
//! leader is killed with SIGKILL; the killed broker comes back over TLS and SASL, catches up
//! and rejoins every ISR. The CLI sees the quorum with the admin's certificate; another
//! principal may not change its voters, and a caller without a certificate is refused.
//! Certificates are made by `openssl` for each run.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::certs::{keystore, make_ca, make_certificate};
use support::{
    AckedProducer, Cluster, assert_acked_stored_once_in_order, confluent_cluster, leaders, sluice,
};

const BROKER_EXTENSIONS: &str =
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n";

/// librdkafka's settings for a SASL_SSL client of the cluster.
fn client_config(ca: &str, mechanism: &str, user: &str, password: &str) -> String {
    format!(
        r#"{{"security.protocol": "SASL_SSL", "ssl.ca.location": "{ca}",
            "sasl.mechanism": "{mechanism}", "sasl.username": "{user}",
            "sasl.password": "{password}"}}"#
    )
}

/// A CA and the brokers' certificate in `dir`, and the settings every node of a cluster with a
/// SASL_SSL Kafka listener and an SSL quorum listener (client certificates required) shares;
/// returns the CA's path too.
fn secured_node_settings(dir: &std::path::Path) -> (String, Vec<String>) {
    make_ca(dir, "ca");
    make_certificate(dir, "ca", "broker", "/CN=broker", BROKER_EXTENSIONS);
    let broker_keystore = keystore(dir, "broker");
    let ca = dir.join("ca.pem").to_string_lossy().into_owned();
    let settings = vec![
        "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL".to_owned(),
        format!("ssl.keystore.location={}", broker_keystore.display()),
        format!("ssl.truststore.location={ca}"),
        "listener.name.controller.ssl.client.auth=required".to_owned(),
        "listener.name.controller.ssl.principal.mapping.rules=RULE:^CN=(.*)$/$1/,DEFAULT"
            .to_owned(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_owned(),
    ];
    (ca, settings)
}

#[test]
fn a_sasl_ssl_cluster_replicates_and_fails_over_without_loss() {
    let certs = tempfile::tempdir().expect("tempdir");
    let dir = certs.path();
    let (ca, shared) = secured_node_settings(dir);
    for user in ["admin", "app"] {
        let subject = format!("/CN={user}");
        make_certificate(dir, "ca", user, &subject, "extendedKeyUsage=clientAuth\n");
    }
    let jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\";";
    let mut settings = shared;
    settings.extend([
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512".to_owned(),
        "sasl.mechanism.inter.broker.protocol=PLAIN".to_owned(),
        format!("listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}"),
        "super.users=User:admin;User:broker".to_owned(),
        "min.insync.replicas=2".to_owned(),
        "replica.lag.time.max.ms=2000".to_owned(),
    ]);
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start_secured(
        3,
        "SASL_SSL",
        &settings,
        &client_config(&ca, "PLAIN", "admin", "admin-secret"),
    );
    let logs = cluster.logs();
    assert!(
        !logs.contains("grant it CLUSTER_ACTION"),
        "brokers log in as the super user admin: nothing to warn about\n{}",
        support::tail(&logs, 40)
    );

    // The admin (PLAIN, over TLS) creates a SCRAM user and gives it a topic prefix.
    let admin_config = dir.join("admin.properties");
    std::fs::write(
        &admin_config,
        format!(
            "security.protocol=SASL_SSL\nssl.truststore.location={ca}\nsasl.mechanism=PLAIN\n\
             sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"admin\" password=\"admin-secret\";\n"
        ),
    )
    .expect("admin config");
    let bootstrap = cluster.bootstrap();
    let as_admin = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend([
            "--bootstrap-server",
            bootstrap.as_str(),
            "--command-config",
            admin_config.to_str().expect("utf-8 path"),
        ]);
        sluice(&all)
    };
    as_admin(&[
        "users",
        "create",
        "app",
        "--password",
        "app-secret",
        "--mechanism",
        "SCRAM-SHA-512",
    ]);
    as_admin(&[
        "acls",
        "add",
        "--allow-principal",
        "User:app",
        "--operation",
        "All",
        "--topic",
        "secured",
        "--resource-pattern-type",
        "prefixed",
    ]);
    as_admin(&[
        "acls",
        "add",
        "--allow-principal",
        "User:app",
        "--operation",
        "IdempotentWrite",
        "--cluster",
    ]);

    // The quorum listener: the admin's certificate may see it; app's may not change voters;
    // without a certificate nothing is served.
    let quorum = format!("127.0.0.1:{}", cluster.nodes[0].quorum_port);
    let quorum_config = |user: &str| {
        let path = dir.join(format!("{user}-quorum.properties"));
        let keystore = keystore(dir, user);
        std::fs::write(
            &path,
            format!(
                "security.protocol=SSL\nssl.truststore.location={ca}\nssl.keystore.location={}\n",
                keystore.display()
            ),
        )
        .expect("quorum config");
        path.to_string_lossy().into_owned()
    };
    let admin_quorum = quorum_config("admin");
    let status = sluice(&[
        "cluster",
        "status",
        "--bootstrap-controller",
        &quorum,
        "--command-config",
        &admin_quorum,
    ]);
    assert_eq!(status.matches("voter").count(), 3, "{status}");
    let app_quorum = quorum_config("app");
    let refused = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "cluster",
            "remove-voter",
            "--bootstrap-controller",
            &quorum,
            "--node-id",
            "3",
            "--command-config",
            &app_quorum,
        ])
        .output()
        .expect("sluice");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "app changed the voters");
    assert!(
        said.contains("CLUSTER_AUTHORIZATION_FAILED") && said.contains("User:app"),
        "{said}"
    );
    let anonymous = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cluster", "status", "--bootstrap-controller", &quorum])
        .output()
        .expect("sluice");
    assert!(
        !anonymous.status.success(),
        "a caller without TLS saw the quorum: {}",
        String::from_utf8_lossy(&anonymous.stdout)
    );

    // Followers fetch over SASL_SSL: the ISRs fill only if brokers log in to each other.
    confluent_cluster(&cluster, "create-assigned", &["secured", "1,2,3/2,3,1"]);
    cluster.wait_until("full ISRs over SASL_SSL", Duration::from_secs(60), |c| {
        leaders(c, "secured")
            .iter()
            .all(|(_, _, isr)| isr.len() == 3)
    });

    // app, a SCRAM-SHA-512 user, produces; the leader of partition 0 is killed.
    let app = client_config(&ca, "SCRAM-SHA-512", "app", "app-secret");
    let producer = AckedProducer::start_with(&cluster.bootstrap(), "secured", Some(&app));
    cluster.wait_until(
        "5,000 acknowledged records",
        Duration::from_secs(60),
        |_| producer.count() >= 5_000,
    );
    let (_, leader, _) = leaders(&cluster, "secured")[0].clone();
    let victim = (leader - 1) as usize;
    let at_kill = producer.count();
    cluster.kill9(victim);
    let deadline = Instant::now() + Duration::from_secs(60);
    while producer.count() < at_kill + 5_000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (acked, _) = producer.stop();
    assert!(
        acked.len() >= at_kill + 5_000,
        "the producer did not recover after the leader was killed ({} acknowledged, {at_kill} \
         at the kill)\n{}",
        acked.len(),
        support::tail(&cluster.logs(), 60)
    );
    assert_ne!(leaders(&cluster, "secured")[0].1, leader, "a dead leader");

    // Every acknowledged record is stored once, in order, read back by the admin.
    let stored = assert_acked_stored_once_in_order(&cluster, "secured", &acked);
    println!(
        "{} acknowledged over SASL_SSL ({at_kill} before the kill), {stored} stored, none lost",
        acked.len()
    );

    // The killed broker comes back over TLS and SASL, catches up and rejoins every ISR.
    cluster.start_node(victim);
    cluster.wait_until("all ISRs full again", Duration::from_secs(90), |c| {
        leaders(c, "secured")
            .iter()
            .all(|(_, _, isr)| isr.len() == 3)
            && c.gauge_sum("sluice_under_replicated_partitions") == 0
    });
}

/// A cluster whose listener takes SCRAM-SHA-512 only, brokers included, could not be entered
/// without a first user: `sluice server --add-scram` (Kafka's `format --add-scram`) creates it
/// on the nodes' first start. Brokers then log in to each other with it, the admin creates
/// topics and users with it, and a later start with the same flag leaves it alone.
#[test]
fn a_scram_only_cluster_is_entered_with_add_scram_credentials() {
    let certs = tempfile::tempdir().expect("tempdir");
    let dir = certs.path();
    let (ca, mut settings) = secured_node_settings(dir);
    let jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required \
                username=\"admin\" password=\"admin-secret\";";
    settings.extend([
        "sasl.enabled.mechanisms=SCRAM-SHA-512".to_owned(),
        format!("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={jaas}"),
        "super.users=User:admin;User:broker;User:ops".to_owned(),
        "@arg=--add-scram".to_owned(),
        "@arg=SCRAM-SHA-512=[name=admin,password=admin-secret]".to_owned(),
        "@arg=--add-scram".to_owned(),
        "@arg=SCRAM-SHA-512=[name=ops,password=ops-secret]".to_owned(),
    ]);
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start_secured(
        3,
        "SASL_SSL",
        &settings,
        &client_config(&ca, "SCRAM-SHA-512", "ops", "ops-secret"),
    );
    cluster.wait_until(
        "the --add-scram credential committed",
        Duration::from_secs(30),
        |c| c.logs().contains("outcome=created"),
    );

    // ops logs in with its credential; brokers replicate to each other logging in as admin.
    confluent_cluster(&cluster, "create-assigned", &["scram-only", "1,2,3/2,3,1"]);
    cluster.wait_until("full ISRs over SCRAM", Duration::from_secs(60), |c| {
        leaders(c, "scram-only")
            .iter()
            .all(|(_, _, isr)| isr.len() == 3)
    });
    let producer = AckedProducer::start_on(&cluster, "scram-only");
    cluster.wait_until(
        "1,000 acknowledged records",
        Duration::from_secs(60),
        |_| producer.count() >= 1_000,
    );
    let (acked, _) = producer.stop();
    assert_acked_stored_once_in_order(&cluster, "scram-only", &acked);

    // ops changes its password; a restart with the same --add-scram keeps the new one.
    let ops_config = dir.join("ops.properties");
    std::fs::write(
        &ops_config,
        format!(
            "security.protocol=SASL_SSL\nssl.truststore.location={ca}\n\
             sasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=org.apache.kafka.common.security.\
             scram.ScramLoginModule required username=\"ops\" password=\"ops-secret\";\n"
        ),
    )
    .expect("ops config");
    let bootstrap = cluster.bootstrap();
    sluice(&[
        "users",
        "create",
        "ops",
        "--password",
        "ops-rotated",
        "--mechanism",
        "SCRAM-SHA-512",
        "--bootstrap-server",
        &bootstrap,
        "--command-config",
        &ops_config.to_string_lossy(),
    ]);
    // (`leaders` asks with the cluster's client config: from now on ops's new password, which
    // a reset to the --add-scram one would refuse.)
    cluster.client_config = Some(client_config(&ca, "SCRAM-SHA-512", "ops", "ops-rotated"));
    cluster.kill9(2);
    cluster.start_node(2);
    cluster.wait_for_gauge_everywhere("sluice_brokers_unfenced", 3);
    cluster.wait_until("node 3 back in every ISR", Duration::from_secs(60), |c| {
        c.logs().contains("--add-scram applies to a new node only")
            && leaders(c, "scram-only")
                .iter()
                .all(|(_, _, isr)| isr.len() == 3)
    });
}
