//! Every configuration key, declared once: its name, type and range (or allowed values),
//! default, whether it can change while running, the broker key a topic key falls back to,
//! and a line of documentation. Parsing `server.properties`, topic and broker validation
//! (CreateTopics, IncrementalAlterConfigs), the log's settings, DescribeConfigs (values,
//! sources, synonyms, read-only, types, documentation) and `sluice configs keys` all read this
//! table.
//!
//! Adding a key: one entry in [`KEYS`]; then read it where it takes effect
//! (`ServerConfig::from_properties` for a broker key, `LogConfig::set` for a topic key the log
//! uses).

use std::collections::BTreeMap;

/// A value's type and the values it may take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Bool,
    /// A 32-bit integer (Kafka's INT) in `[min, max]`.
    Int {
        min: i64,
        max: i64,
    },
    /// A 64-bit integer (Kafka's LONG) in `[min, max]`.
    Long {
        min: i64,
        max: i64,
    },
    Double {
        min: f64,
        max: f64,
    },
    /// One of the values.
    Enum(&'static [&'static str]),
    /// A comma-separated, non-empty subset of the values.
    List(&'static [&'static str]),
    /// Free text (listeners, paths), checked where it is used.
    Text,
}

impl Kind {
    /// Kafka's `ConfigType` code in DescribeConfigs (v3+).
    pub fn kafka_type(&self) -> i8 {
        match self {
            Kind::Bool => 1,
            Kind::Text | Kind::Enum(_) => 2,
            Kind::Int { .. } => 3,
            Kind::Long { .. } => 5,
            Kind::Double { .. } => 6,
            Kind::List(_) => 7,
        }
    }

    fn describe(&self) -> String {
        match self {
            Kind::Bool => "boolean".into(),
            Kind::Int { min, max } | Kind::Long { min, max } => {
                let name = if matches!(self, Kind::Int { .. }) {
                    "int"
                } else {
                    "long"
                };
                match (*min, *max) {
                    (i64::MIN, i64::MAX) => name.into(),
                    (min, max) if max == i64::MAX || max == i64::from(i32::MAX) => {
                        format!("{name} >= {min}")
                    }
                    (min, max) => format!("{name} in [{min}, {max}]"),
                }
            }
            Kind::Double { min, max } => format!("double in [{min}, {max}]"),
            Kind::Enum(values) => format!("one of {}", values.join(", ")),
            Kind::List(values) => format!("list of {}", values.join(", ")),
            Kind::Text => "string".into(),
        }
    }
}

/// Where a key applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scope {
    /// A broker key (`server.properties`, and dynamic broker configs when `dynamic`).
    Broker,
    /// A topic key whose default comes from the broker key `broker` (same type and default;
    /// the broker key is dynamic, cluster-wide or per broker, when `dynamic`).
    Topic { broker: &'static str },
    /// Another unit of the broker key `of`: the value times `factor` (`log.retention.hours`
    /// for `log.retention.ms`). `of` wins when both are set.
    BrokerSynonym { of: &'static str, factor: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Key {
    pub name: &'static str,
    pub kind: Kind,
    /// The value when nothing sets it ("" for none: derived at start-up).
    pub default: &'static str,
    pub scope: Scope,
    /// Changeable while running (topic keys always are, at the topic level; for them this
    /// says whether the broker key is).
    pub dynamic: bool,
    /// Passwords and keys: never shown (DescribeConfigs' `is_sensitive`).
    pub sensitive: bool,
    pub doc: &'static str,
}

const I32_MAX: i64 = i32::MAX as i64;
const I64_MAX: i64 = i64::MAX;

const fn int(min: i64, max: i64) -> Kind {
    Kind::Int { min, max }
}

const fn long(min: i64) -> Kind {
    Kind::Long { min, max: I64_MAX }
}

const fn topic(
    name: &'static str,
    broker: &'static str,
    kind: Kind,
    default: &'static str,
    doc: &'static str,
) -> Key {
    Key {
        name,
        kind,
        default,
        scope: Scope::Topic { broker },
        dynamic: true,
        sensitive: false,
        doc,
    }
}

const fn broker(name: &'static str, kind: Kind, default: &'static str, doc: &'static str) -> Key {
    Key {
        name,
        kind,
        default,
        scope: Scope::Broker,
        dynamic: false,
        sensitive: false,
        doc,
    }
}

/// A broker key whose value DescribeConfigs and logs never show (Kafka's PASSWORD type).
const fn secret(name: &'static str, doc: &'static str) -> Key {
    Key {
        name,
        kind: Kind::Text,
        default: "",
        scope: Scope::Broker,
        dynamic: false,
        sensitive: true,
        doc,
    }
}

const fn synonym(name: &'static str, of: &'static str, factor: i64, doc: &'static str) -> Key {
    Key {
        name,
        kind: long(-1),
        default: "",
        scope: Scope::BrokerSynonym { of, factor },
        dynamic: true,
        sensitive: false,
        doc,
    }
}

/// Kafka's `compression.type` values.
pub const COMPRESSION_TYPES: &[&str] =
    &["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"];

/// Every key. Topic keys first (with their broker fallbacks), then broker keys.
pub const KEYS: &[Key] = &[
    topic(
        "cleanup.policy",
        "log.cleanup.policy",
        Kind::List(&["delete", "compact"]),
        "delete",
        "delete old segments by retention, compact to the latest value per key, or both",
    ),
    topic(
        "compression.type",
        "compression.type",
        Kind::Enum(COMPRESSION_TYPES),
        "producer",
        "the codec batches are stored in; producer keeps the producer's",
    ),
    topic(
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        long(0),
        "86400000",
        "how long tombstones stay readable after compaction first sees them",
    ),
    topic(
        "file.delete.delay.ms",
        "log.segment.delete.delay.ms",
        long(0),
        "60000",
        "how long a deleted segment's files stay, for readers still on them",
    ),
    topic(
        "flush.messages",
        "log.flush.interval.messages",
        long(1),
        "9223372036854775807",
        "fsync after this many records (replication gives durability by default)",
    ),
    topic(
        "flush.ms",
        "log.flush.interval.ms",
        long(0),
        "9223372036854775807",
        "fsync when the oldest unflushed record is this old",
    ),
    topic(
        "flush.policy",
        "log.flush.policy",
        Kind::Enum(&["interval", "always"]),
        "interval",
        "Sluice: interval (flush.messages / flush.ms, as Kafka) or always (fdatasync before acknowledging, group commit)",
    ),
    topic(
        "index.interval.bytes",
        "log.index.interval.bytes",
        int(0, I32_MAX),
        "4096",
        "bytes of records between offset index entries",
    ),
    topic(
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        long(1),
        "9223372036854775807",
        "the longest a record may stay uncompacted",
    ),
    topic(
        "max.message.bytes",
        "message.max.bytes",
        int(0, I32_MAX),
        "1048588",
        "the largest record batch accepted",
    ),
    topic(
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
        long(0),
        "9223372036854775807",
        "how far in the future a CreateTime timestamp may be",
    ),
    topic(
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
        long(0),
        "9223372036854775807",
        "how far in the past a CreateTime timestamp may be",
    ),
    topic(
        "message.timestamp.difference.max.ms",
        "log.message.timestamp.difference.max.ms",
        long(0),
        "9223372036854775807",
        "deprecated by Kafka: the before/after limits in one",
    ),
    topic(
        "message.timestamp.type",
        "log.message.timestamp.type",
        Kind::Enum(&["CreateTime", "LogAppendTime"]),
        "CreateTime",
        "keep the producer's timestamps or stamp the broker's append time",
    ),
    topic(
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        Kind::Double { min: 0.0, max: 1.0 },
        "0.5",
        "the share of uncompacted log that makes a partition worth compacting",
    ),
    topic(
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        long(0),
        "0",
        "the shortest a record stays uncompacted",
    ),
    topic(
        "min.insync.replicas",
        "min.insync.replicas",
        int(1, I32_MAX),
        "1",
        "the in-sync replicas an acks=all write needs",
    ),
    topic(
        "preallocate",
        "log.preallocate",
        Kind::Bool,
        "false",
        "accepted for Kafka compatibility; segments are not preallocated",
    ),
    topic(
        "retention.bytes",
        "log.retention.bytes",
        long(-1),
        "-1",
        "the most bytes a partition keeps before deleting old segments (-1: no limit)",
    ),
    topic(
        "retention.ms",
        "log.retention.ms",
        long(-1),
        "604800000",
        "how long records are kept (-1: forever)",
    ),
    topic(
        "segment.bytes",
        "log.segment.bytes",
        int(64, I32_MAX),
        "1073741824",
        "the size at which a segment rolls",
    ),
    topic(
        "segment.index.bytes",
        "log.index.size.max.bytes",
        int(48, I32_MAX),
        "10485760",
        "the size of a segment's offset index",
    ),
    topic(
        "segment.ms",
        "log.roll.ms",
        long(1),
        "604800000",
        "the age at which a segment rolls",
    ),
    topic(
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
        Kind::Bool,
        "false",
        "elect a leader outside the ISR when none is left (acknowledged records may be lost)",
    ),
    synonym(
        "log.retention.minutes",
        "log.retention.ms",
        60_000,
        "log.retention.ms in minutes",
    ),
    synonym(
        "log.retention.hours",
        "log.retention.ms",
        3_600_000,
        "log.retention.ms in hours",
    ),
    synonym(
        "log.roll.hours",
        "log.roll.ms",
        3_600_000,
        "log.roll.ms in hours",
    ),
    broker(
        "node.id",
        int(0, I32_MAX),
        "1",
        "this node's id, as a broker and as a quorum member",
    ),
    broker(
        "broker.id",
        int(0, I32_MAX),
        "",
        "the older name of node.id",
    ),
    broker(
        "process.roles",
        Kind::List(&["broker", "controller"]),
        "broker,controller",
        "broker, controller (a quorum voter) or both",
    ),
    broker(
        "listeners",
        Kind::Text,
        "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "NAME://host:port of the Kafka listener and the quorum's",
    ),
    broker(
        "advertised.listeners",
        Kind::Text,
        "",
        "what clients are told to connect to (default: listeners)",
    ),
    broker(
        "listener.security.protocol.map",
        Kind::Text,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "NAME:PROTOCOL of each listener: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (the \
         controller listener is PLAINTEXT unless the map names it, or SSL with client \
         certificates required)",
    ),
    broker(
        "inter.broker.listener.name",
        Kind::Text,
        "",
        "the listener followers fetch on and brokers call each other on, as its clients (TLS \
         with its stores, SASL with its JAAS username and password; default: the first \
         PLAINTEXT listener)",
    ),
    broker(
        "security.inter.broker.protocol",
        Kind::Text,
        "",
        "the inter-broker listener by protocol: the listener named after it (Kafka's older \
         form of inter.broker.listener.name; both set must agree)",
    ),
    broker(
        "sasl.mechanism.inter.broker.protocol",
        Kind::Text,
        "",
        "the SASL mechanism brokers log in to each other with (default: the inter-broker \
         listener's one mechanism)",
    ),
    broker(
        "java.security.auth.login.config",
        Kind::Text,
        "",
        "a JAAS file (Kafka takes it as a JVM property; Sluice as this key): sections \
         <listener>.KafkaServer or KafkaServer hold PLAIN's users and the broker's own logins, \
         where no listener.name.<l>.<mechanism>.sasl.jaas.config is set; read at start",
    ),
    broker(
        "sasl.enabled.mechanisms",
        Kind::Text,
        "GSSAPI",
        "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER \
         (Kafka's default, GSSAPI, is refused)",
    ),
    broker(
        "sasl.oauthbearer.jwks.endpoint.url",
        Kind::Text,
        "",
        "OAUTHBEARER with Kafka's OAuthBearerValidatorCallbackHandler: the JWKS signed tokens \
         are checked against, a file: URL (https:// is refused: no HTTP client), re-read when \
         the file changes",
    ),
    broker(
        "sasl.oauthbearer.expected.audience",
        Kind::Text,
        "",
        "OAUTHBEARER (JWKS validator): comma-separated audiences, one of which a token's aud \
         must hold; unset, a token with an aud is refused (as Kafka's jose4j refuses it)",
    ),
    broker(
        "sasl.oauthbearer.expected.issuer",
        Kind::Text,
        "",
        "OAUTHBEARER (JWKS validator): the iss a token must carry (unset: any)",
    ),
    broker(
        "sasl.oauthbearer.sub.claim.name",
        Kind::Text,
        "sub",
        "OAUTHBEARER (JWKS validator): the claim naming the principal (User:<value>)",
    ),
    broker(
        "sasl.oauthbearer.scope.claim.name",
        Kind::Text,
        "scope",
        "OAUTHBEARER (JWKS validator): the claim holding the token's scope",
    ),
    broker(
        "sasl.oauthbearer.clock.skew.seconds",
        int(0, I32_MAX),
        "30",
        "OAUTHBEARER (JWKS validator): how far a token's exp and nbf may be off the broker's \
         clock",
    ),
    broker(
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        long(0),
        "3600000",
        "Kafka's refresh period of an https:// JWKS; a file: JWKS (the only kind served) is \
         re-read when it changes instead, as Kafka reads it only once",
    ),
    broker(
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        long(0),
        "100",
        "Kafka's retry backoff for an https:// JWKS; no effect on a file: JWKS",
    ),
    broker(
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        long(0),
        "10000",
        "Kafka's longest retry backoff for an https:// JWKS; no effect on a file: JWKS",
    ),
    broker(
        "ssl.keystore.type",
        Kind::Text,
        "PEM",
        "PEM (Kafka's KIP-651 format); JKS and PKCS12 keystores are refused: convert them to PEM",
    ),
    broker(
        "ssl.keystore.location",
        Kind::Text,
        "",
        "a PEM file with the listener's private key and certificate chain; replaced files are \
         reloaded without a restart",
    ),
    secret(
        "ssl.keystore.certificate.chain",
        "the listener's certificate chain as PEM in the config (with ssl.keystore.key)",
    ),
    secret(
        "ssl.keystore.key",
        "the listener's private key as PEM in the config (encrypted with ssl.key.password, or not)",
    ),
    secret(
        "ssl.key.password",
        "the password of the keystore's encrypted PKCS#8 private key (PBES2: PBKDF2 or scrypt, \
         AES-CBC, as `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it)",
    ),
    secret(
        "ssl.keystore.password",
        "a PEM keystore has no password (refused when set, as Kafka does)",
    ),
    broker(
        "ssl.truststore.type",
        Kind::Text,
        "PEM",
        "PEM; JKS and PKCS12 truststores are refused: convert them to PEM",
    ),
    broker(
        "ssl.truststore.location",
        Kind::Text,
        "",
        "a PEM file of the CA certificates that vouch for client certificates",
    ),
    secret(
        "ssl.truststore.certificates",
        "the truststore's CA certificates as PEM in the config",
    ),
    secret(
        "ssl.truststore.password",
        "a PEM truststore has no password (refused when set, as Kafka does)",
    ),
    broker(
        "ssl.client.auth",
        Kind::Text,
        "none",
        "none, requested or required: whether clients present a certificate (their principal is \
         then its subject, through ssl.principal.mapping.rules)",
    ),
    broker(
        "ssl.enabled.protocols",
        Kind::Text,
        "TLSv1.2,TLSv1.3",
        "the TLS versions served (TLSv1.2, TLSv1.3)",
    ),
    broker(
        "ssl.protocol",
        Kind::Text,
        "TLSv1.3",
        "Java's SSLContext protocol: TLSv1.2, TLSv1.3 or TLS; ssl.enabled.protocols decides",
    ),
    broker(
        "ssl.principal.mapping.rules",
        Kind::Text,
        "DEFAULT",
        "rules mapping a client certificate's subject to a user name (RULE:pattern/replacement/ \
         with L or U, and DEFAULT)",
    ),
    broker(
        "ssl.cipher.suites",
        Kind::Text,
        "",
        "empty: rustls's safe suites; naming suites is refused",
    ),
    broker(
        "ssl.endpoint.identification.algorithm",
        Kind::Text,
        "https",
        "checked by clients; brokers do not connect to each other over TLS yet",
    ),
    broker(
        "authorizer.class.name",
        Kind::Text,
        "",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer enables ACLs (kept in the \
         metadata quorum); empty: every client may do everything",
    ),
    broker(
        "super.users",
        Kind::Text,
        "",
        "principals (Type:name, separated by ;) the authorizer allows everything",
    ),
    broker(
        "allow.everyone.if.no.acl.found",
        Kind::Bool,
        "false",
        "whether the authorizer allows an operation on a resource no ACL is on",
    ),
    broker(
        "connections.max.reauth.ms",
        long(0),
        "0",
        "how long a SASL session lasts before the client must re-authenticate on its \
         connection (KIP-368; 0: forever); past it, other requests close the connection",
    ),
    broker(
        "sasl.server.max.receive.size",
        int(1, I32_MAX),
        "524288",
        "the largest request read from a client before it authenticated",
    ),
    broker(
        "controller.listener.names",
        Kind::Text,
        "CONTROLLER",
        "the listener the quorum uses",
    ),
    broker(
        "controller.quorum.voters",
        Kind::Text,
        "",
        "id@host:port of every voter (default: this node alone)",
    ),
    broker(
        "cluster.id",
        Kind::Text,
        "",
        "Sluice: the cluster id (default: derived from the voters)",
    ),
    broker(
        "log.dirs",
        Kind::Text,
        "./data",
        "comma-separated data directories",
    ),
    broker("log.dir", Kind::Text, "", "the older name of log.dirs"),
    broker(
        "metadata.log.dir",
        Kind::Text,
        "",
        "where the quorum's state lives (default: the first log dir)",
    ),
    broker(
        "http.listener",
        Kind::Text,
        "127.0.0.1:9644",
        "Sluice: host:port of /health, /ready and /metrics",
    ),
    broker(
        "http.console.actions.enable",
        Kind::Bool,
        "false",
        "Sluice: the web console on http.listener may change the cluster (create topics, \
         change topic configs, delete records, reset a group's offsets); false: it only reads",
    ),
    broker(
        "metrics.partition.enable",
        Kind::Bool,
        "true",
        "Sluice: /metrics has per-topic and per-partition gauges (log start and end, size, \
         under-replicated) of the partitions this broker hosts; set false on brokers with \
         thousands of partitions to keep scrapes small (the totals stay)",
    ),
    broker(
        "broker.rack",
        Kind::Text,
        "",
        "the rack replicas are spread across",
    ),
    broker(
        "replica.selector.class",
        Kind::Enum(&[
            "",
            "org.apache.kafka.common.replica.LeaderSelector",
            "org.apache.kafka.common.replica.RackAwareReplicaSelector",
        ]),
        "",
        "which replica a consumer reads from (KIP-392): empty or LeaderSelector, the leader; \
         RackAwareReplicaSelector, a replica in the consumer's client.rack",
    ),
    Key {
        dynamic: true,
        ..broker(
            "max.broker.partitions",
            int(-1, I32_MAX),
            "-1",
            "the most partition replicas this broker hosts; creates and moves past it are \
             refused (INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT). -1: one per 256 KiB of \
             memory (physical or the cgroup limit, the smaller). Dynamic: a value set for a \
             broker, or cluster-wide, overrides it at once; -1 there defers to the next",
        )
    },
    broker(
        "num.partitions",
        int(1, I32_MAX),
        "1",
        "partitions of a topic created without a count",
    ),
    broker(
        "default.replication.factor",
        int(1, i16::MAX as i64),
        "1",
        "replicas of a topic created without a replication factor",
    ),
    broker(
        "auto.create.topics.enable",
        Kind::Bool,
        "true",
        "create topics on first Metadata or Produce",
    ),
    broker(
        "socket.request.max.bytes",
        int(1024, I32_MAX),
        "104857600",
        "the largest request accepted",
    ),
    broker(
        "max.connections",
        int(1, I32_MAX),
        "2147483647",
        "connections the Kafka listener accepts",
    ),
    broker(
        "max.connections.per.ip",
        int(0, I32_MAX),
        "2147483647",
        "connections one client address may hold across the broker's listeners; more are \
         closed at once",
    ),
    broker(
        "max.connections.per.ip.overrides",
        Kind::Text,
        "",
        "per-address limits, ip:count separated by commas (addresses, not host names)",
    ),
    broker(
        "max.connection.creation.rate",
        int(0, I32_MAX),
        "2147483647",
        "new connections a second the broker accepts, across its listeners (also per listener: \
         listener.name.<listener>.max.connection.creation.rate); more wait their turn",
    ),
    broker(
        "quota.window.num",
        int(1, 1000),
        "11",
        "samples a client quota's rate is measured over (the current one and the whole ones \
         before it)",
    ),
    broker(
        "quota.window.size.seconds",
        int(1, 3600),
        "1",
        "the length of one client quota sample",
    ),
    broker(
        "thread.affinity",
        Kind::Bool,
        "true",
        "serve each Kafka connection from one network thread, pinned to a CPU, one thread per \
         CPU the process may use (thread-per-core); set false when several brokers or other \
         busy processes share the CPUs",
    ),
    broker(
        "queued.max.requests",
        int(1, 100_000),
        "500",
        "requests read ahead per connection",
    ),
    broker(
        "connections.max.idle.ms",
        Kind::Long {
            min: 1,
            max: I64_MAX,
        },
        "600000",
        "idle connections are closed after this long",
    ),
    broker(
        "replica.lag.time.max.ms",
        long(0),
        "30000",
        "a follower not caught up for this long leaves the ISR",
    ),
    broker(
        "replica.silence.max.ms",
        long(100),
        "2500",
        "Sluice: a follower that sends no fetch at all for this long leaves the ISR (a hung \
         process, disk or network, which closes no connection); must exceed \
         replica.fetch.wait.max.ms, as a live follower long-polls without pause",
    ),
    broker(
        "replica.fetch.max.bytes",
        int(1024, I32_MAX),
        "1048576",
        "bytes per partition in a follower's fetch",
    ),
    broker(
        "replica.fetch.response.max.bytes",
        int(1024, I32_MAX),
        "10485760",
        "bytes in a follower's fetch response",
    ),
    broker(
        "replica.fetch.wait.max.ms",
        int(0, I32_MAX),
        "500",
        "how long a follower's fetch waits for records",
    ),
    broker(
        "replica.fetch.backoff.ms",
        long(0),
        "1000",
        "a follower's pause after a fetch error",
    ),
    broker(
        "num.replica.fetchers",
        int(1, I32_MAX),
        "1",
        "accepted for Kafka compatibility: one fetcher per leader",
    ),
    broker(
        "controlled.shutdown.enable",
        Kind::Bool,
        "true",
        "on SIGTERM, move leaderships away before stopping",
    ),
    broker(
        "controlled.shutdown.max.retries",
        int(0, 1000),
        "3",
        "attempts to move leaderships at shutdown",
    ),
    broker(
        "controlled.shutdown.retry.backoff.ms",
        long(0),
        "5000",
        "pause between those attempts",
    ),
    broker(
        "auto.leader.rebalance.enable",
        Kind::Bool,
        "true",
        "move leaderships back to preferred replicas",
    ),
    broker(
        "leader.imbalance.check.interval.seconds",
        Kind::Long {
            min: 1,
            max: 86_400,
        },
        "300",
        "how often preferred leaders are checked",
    ),
    broker(
        "leader.imbalance.per.broker.percentage",
        int(0, 100),
        "10",
        "the share of a broker's preferred leaderships led elsewhere that triggers a rebalance",
    ),
    broker(
        "broker.session.timeout.ms",
        long(0),
        "9000",
        "a broker not heard from for this long is fenced",
    ),
    broker(
        "broker.heartbeat.interval.ms",
        long(10),
        "1000",
        "how often a broker heartbeats the controller (Kafka: 2000; a missed heartbeat gets the \
         broker probed, see broker.liveness.probe.timeout.ms)",
    ),
    broker(
        "broker.liveness.probe.timeout.ms",
        long(0),
        "750",
        "Sluice: a broker that misses its heartbeat gets an ApiVersions request from the \
         controller on each listener; one that answers on none within this time (a hung process, \
         disk or network: no FIN, no RST) is fenced at once rather than at \
         broker.session.timeout.ms. 0: a silent broker waits out its session (one whose \
         listeners refuse connections, its process gone, is still fenced at once)",
    ),
    broker(
        "controller.quorum.election.timeout.ms",
        Kind::Long {
            min: 10,
            max: 3_600_000,
        },
        "1000",
        "quorum election timeout: a member that stops hearing from the leader starts an election 1.5-2x this later",
    ),
    broker(
        "offsets.topic.num.partitions",
        int(1, 1000),
        "50",
        "partitions of __consumer_offsets (fixed once the topic exists)",
    ),
    broker(
        "offsets.topic.replication.factor",
        int(1, i16::MAX as i64),
        "3",
        "replicas of __consumer_offsets (the embedded single-node default sets 1)",
    ),
    broker(
        "offsets.topic.segment.bytes",
        int(1024 * 1024, I32_MAX),
        "104857600",
        "segment size of __consumer_offsets",
    ),
    broker(
        "offsets.retention.minutes",
        int(1, I32_MAX),
        "10080",
        "an empty group's committed offsets are deleted after this long",
    ),
    broker(
        "offsets.retention.check.interval.ms",
        long(1),
        "600000",
        "how often expired offsets are looked for",
    ),
    broker(
        "offsets.commit.timeout.ms",
        int(1, I32_MAX),
        "5000",
        "how long a commit waits for the offsets topic's in-sync replicas",
    ),
    broker(
        "transaction.state.log.num.partitions",
        int(1, 1000),
        "50",
        "partitions of __transaction_state (fixed once the topic exists)",
    ),
    broker(
        "transaction.state.log.replication.factor",
        int(1, i16::MAX as i64),
        "3",
        "replicas of __transaction_state (the embedded single-node default sets 1)",
    ),
    broker(
        "transaction.state.log.min.isr",
        int(1, i16::MAX as i64),
        "2",
        "min.insync.replicas of __transaction_state (the embedded single-node default sets 1)",
    ),
    broker(
        "transaction.state.log.segment.bytes",
        int(1024 * 1024, I32_MAX),
        "104857600",
        "segment size of __transaction_state",
    ),
    broker(
        "transaction.max.timeout.ms",
        int(1, I32_MAX),
        "900000",
        "the longest transaction.timeout.ms a producer may ask for",
    ),
    broker(
        "transaction.partition.verification.enable",
        Kind::Bool,
        "true",
        "a partition leader asks the transaction coordinator before appending a transactional \
         write that opens its transaction there (KIP-890); clients of transaction version 2 \
         (Produce v12) are always served that way, the leader adding the partition",
    ),
    broker(
        "transactional.id.expiration.ms",
        int(1, I32_MAX),
        "604800000",
        "a transactional id with no transaction for this long is forgotten",
    ),
    broker(
        "offset.metadata.max.bytes",
        int(0, i16::MAX as i64),
        "4096",
        "the largest metadata string of a committed offset",
    ),
    broker(
        "group.initial.rebalance.delay.ms",
        int(0, I32_MAX),
        "3000",
        "an empty group's first rebalance waits this long for more members (embedded default: 0)",
    ),
    broker(
        "group.min.session.timeout.ms",
        int(0, I32_MAX),
        "6000",
        "the smallest session.timeout.ms a member may ask for",
    ),
    broker(
        "group.max.session.timeout.ms",
        int(0, I32_MAX),
        "1800000",
        "the largest session.timeout.ms a member may ask for",
    ),
    broker(
        "group.max.size",
        int(1, I32_MAX),
        "2147483647",
        "members a classic group may have",
    ),
    broker(
        "group.consumer.session.timeout.ms",
        int(1, I32_MAX),
        "45000",
        "KIP-848 consumers: a member not heard from for this long is removed",
    ),
    broker(
        "group.consumer.heartbeat.interval.ms",
        int(1, I32_MAX),
        "5000",
        "KIP-848 consumers: how often stable members heartbeat (a member whose assignment is changing is asked every 200 ms at most)",
    ),
    broker(
        "group.consumer.max.size",
        int(1, I32_MAX),
        "2147483647",
        "members a KIP-848 consumer group may have",
    ),
    broker(
        "group.coordinator.rebalance.protocols",
        Kind::List(&["classic", "consumer"]),
        "classic,consumer",
        "the group protocols served",
    ),
    broker(
        "log.cleaner.enable",
        Kind::Bool,
        "true",
        "run log compaction",
    ),
    broker(
        "log.cleaner.dedupe.buffer.size",
        long(0),
        "134217728",
        "memory for compaction's key map",
    ),
    broker(
        "log.cleaner.backoff.ms",
        long(0),
        "15000",
        "the cleaner's pause when nothing is cleanable",
    ),
    broker(
        "log.retention.check.interval.ms",
        long(0),
        "300000",
        "how often retention runs",
    ),
    broker(
        "log.flush.scheduler.interval.ms",
        long(0),
        "1000",
        "how often flush.ms is checked",
    ),
    broker(
        "log.flush.offset.checkpoint.interval.ms",
        long(0),
        "60000",
        "how often recovery points are checkpointed",
    ),
];

/// A Kafka broker key Sluice knows and does not implement. Such a key is never silently
/// ignored: one that promises something Sluice would not do (security above all) stops the
/// node at start; the others are accepted with a warning that says they have no effect and
/// why. `sluice configs keys` lists them. A key declared in [`KEYS`] is implemented.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unimplemented {
    /// The key, or a family of keys: a prefix ending in '.' (`ssl.`).
    pub name: &'static str,
    /// `Refused` stops start-up (unless the value is one of `accepted`, which mean "off");
    /// `NoEffect` is a warning.
    pub effect: UnimplementedEffect,
    /// Values that ask for nothing Sluice lacks (`security.inter.broker.protocol=PLAINTEXT`).
    pub accepted: &'static [&'static str],
    /// What Sluice does instead, or what to do.
    pub doc: &'static str,
}

/// What a set [`Unimplemented`] key does to start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnimplementedEffect {
    Refused,
    NoEffect,
}

const fn refused(
    name: &'static str,
    accepted: &'static [&'static str],
    doc: &'static str,
) -> Unimplemented {
    Unimplemented {
        name,
        effect: UnimplementedEffect::Refused,
        accepted,
        doc,
    }
}

const fn no_effect(name: &'static str, doc: &'static str) -> Unimplemented {
    Unimplemented {
        name,
        effect: UnimplementedEffect::NoEffect,
        accepted: &[],
        doc,
    }
}

const NO_TLS: &str = "this TLS setting is not implemented: Sluice serves PEM keystores and \
                      truststores, ssl.client.auth and ssl.principal.mapping.rules";
const NO_SASL: &str = "not implemented yet: clients authenticate with SASL PLAIN or SCRAM and \
                       are known by their user name";
const NO_GSSAPI: &str = "GSSAPI (Kerberos) is not implemented: Sluice serves SASL PLAIN, \
                         SCRAM-SHA-256 and SCRAM-SHA-512";
const NO_OAUTHBEARER: &str = "this OAUTHBEARER setting is a client's (a broker's own login, \
                              for brokers authenticating to each other, which they do not yet): \
                              a broker serves sasl.oauthbearer.jwks.endpoint.url, \
                              expected.audience, expected.issuer, sub.claim.name, \
                              scope.claim.name and clock.skew.seconds";
const NO_SASL_CLASSES: &str = "Sluice loads no Java classes: its SASL mechanisms are built in";

/// Kafka's broker keys that Sluice knows and does not implement (security first).
pub const UNIMPLEMENTED: &[Unimplemented] = &[
    refused("ssl.", &[], NO_TLS),
    refused("sasl.kerberos.", &[], NO_GSSAPI),
    refused("sasl.oauthbearer.", &[], NO_OAUTHBEARER),
    refused("sasl.login.", &[], NO_SASL_CLASSES),
    refused(
        "sasl.server.callback.handler.class",
        &[""],
        "Sluice loads no Java classes: its SASL mechanisms are built in; OAUTHBEARER's \
         validator is chosen per listener with \
         listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class",
    ),
    refused("sasl.client.callback.handler.class", &[""], NO_SASL_CLASSES),
    refused(
        "sasl.jaas.config",
        &[""],
        "a broker reads its SASL users and its own inter-broker login from \
         listener.name.<listener>.<mechanism>.sasl.jaas.config (as Kafka's brokers do)",
    ),
    refused(
        "listener.name.",
        &[],
        "this per-listener setting is not implemented: Sluice serves \
         listener.name.<listener>.sasl.enabled.mechanisms, \
         listener.name.<listener>.<mechanism>.sasl.jaas.config, the listener's ssl.* keys and \
         its OAUTHBEARER validator settings \
         (listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class, \
         [listener.name.<listener>.[oauthbearer.]]sasl.oauthbearer.*)",
    ),
    refused("principal.builder.class", &[""], NO_SASL),
    refused(
        "delegation.token.",
        &[],
        "delegation tokens are not implemented yet",
    ),
    refused(
        "security.providers",
        &[""],
        "Java security providers do not apply: TLS is rustls, built in",
    ),
    refused(
        "control.plane.listener.name",
        &[""],
        "a separate control-plane listener is not implemented: brokers reach the controller \
         on the CONTROLLER listener",
    ),
    no_effect(
        "num.network.threads",
        "Sluice runs one network thread per CPU (thread.affinity)",
    ),
    no_effect(
        "num.io.threads",
        "requests are handled on the network threads; there is no separate pool",
    ),
    no_effect(
        "background.threads",
        "background work has its own fixed threads",
    ),
    no_effect(
        "num.recovery.threads.per.data.dir",
        "logs are recovered one directory at a time",
    ),
    no_effect(
        "socket.send.buffer.bytes",
        "sockets keep the kernel's buffer sizes (autotuned)",
    ),
    no_effect(
        "socket.receive.buffer.bytes",
        "sockets keep the kernel's buffer sizes (autotuned)",
    ),
    no_effect(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "a transaction is aborted when its timeout passes (a timer per transaction), not by a \
         periodic scan",
    ),
    no_effect(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "a transactional id expires when transactional.id.expiration.ms passes (a timer per \
         id), not by a periodic scan",
    ),
    no_effect(
        "zookeeper.",
        "Sluice keeps metadata in its own quorum (controller.quorum.voters); there is no ZooKeeper",
    ),
    no_effect(
        "inter.broker.protocol.version",
        "one protocol: Sluice nodes of one version talk to each other",
    ),
    no_effect(
        "log.message.format.version",
        "logs hold v2 record batches only",
    ),
    no_effect(
        "metric.reporters",
        "metrics are served in Prometheus format on http.listener (/metrics)",
    ),
    no_effect(
        "kafka.metrics.reporters",
        "metrics are served in Prometheus format on http.listener (/metrics)",
    ),
    no_effect(
        "remote.log.storage.system.enable",
        "tiered storage is not implemented: segments stay on local disks",
    ),
    refused(
        "client.quota.callback.class",
        &[""],
        "client quotas follow Kafka's default callback (KIP-55's precedence); a Java callback \
         class cannot be loaded",
    ),
];

/// The [`Unimplemented`] entry covering a key, if Sluice knows it as unimplemented.
pub fn unimplemented_key(name: &str) -> Option<&'static Unimplemented> {
    if broker_key(name).is_some() {
        return None;
    }
    UNIMPLEMENTED.iter().find(|u| {
        if u.name.ends_with('.') {
            name.starts_with(u.name)
        } else {
            name == u.name
        }
    })
}

/// A key set in `server.properties` (or `--override`) that Sluice does not implement, and
/// what that means for start-up.
#[derive(Debug, Clone, PartialEq)]
pub enum UnservedKey {
    /// Unknown to Sluice (a typo, or a key of another product): a warning.
    Unknown(String),
    /// A Kafka key Sluice does not implement and whose value asks for nothing: a warning
    /// that says what Sluice does instead.
    NoEffect { key: String, doc: &'static str },
}

impl std::fmt::Display for UnservedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnservedKey::Unknown(key) => write!(f, "unknown configuration key {key} (ignored)"),
            UnservedKey::NoEffect { key, doc } => {
                write!(
                    f,
                    "{key} is a Kafka key Sluice does not implement (no effect): {doc}"
                )
            }
        }
    }
}

/// Sorts the keys of a broker's properties that the registry does not declare: an error
/// for the first that promises what Sluice does not do (the node must not start), else the
/// ones to warn about.
pub fn check_unserved_keys(
    properties: &BTreeMap<String, String>,
) -> Result<Vec<UnservedKey>, ConfigError> {
    let mut warnings = Vec::new();
    for (key, value) in properties {
        if broker_key(key).is_some() || super::security::is_served_listener_key(key) {
            continue;
        }
        match unimplemented_key(key) {
            None => warnings.push(UnservedKey::Unknown(key.clone())),
            Some(u)
                if u.accepted
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(value.trim())) => {}
            Some(u) if u.effect == UnimplementedEffect::Refused => {
                return Err(ConfigError::new(
                    key,
                    value,
                    format!("{}; remove the key to start", u.doc),
                ));
            }
            Some(u) => warnings.push(UnservedKey::NoEffect {
                key: key.clone(),
                doc: u.doc,
            }),
        }
    }
    Ok(warnings)
}

/// A bad value: the key, the value, why. Start-up, CreateTopics and AlterConfigs say it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value '{value}' for {key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: &str, value: &str, reason: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }
}

/// A value, parsed and checked against its key's kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    Number(i64),
    Double(f64),
    Text(String),
    List(Vec<String>),
}

impl Value {
    pub fn as_i64(&self) -> i64 {
        match self {
            Value::Number(n) => *n,
            _ => 0,
        }
    }

    pub fn as_bool(&self) -> bool {
        matches!(self, Value::Bool(true))
    }

    pub fn as_f64(&self) -> f64 {
        match self {
            Value::Double(d) => *d,
            Value::Number(n) => *n as f64,
            _ => 0.0,
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Value::Text(t) => t,
            _ => "",
        }
    }

    pub fn as_list(&self) -> &[String] {
        match self {
            Value::List(l) => l,
            _ => &[],
        }
    }
}

impl Key {
    /// `value` parsed and checked, or why not (errors name `as_name`: the key as written).
    pub fn parse_as(&self, as_name: &str, value: &str) -> Result<Value, ConfigError> {
        let error = |reason: String| ConfigError::new(as_name, value, reason);
        let text = value.trim();
        match self.kind {
            Kind::Bool => match text {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                _ => Err(error("expected true or false".into())),
            },
            Kind::Int { min, max } | Kind::Long { min, max } => {
                let n: i64 = text.parse().map_err(|_| error("not an integer".into()))?;
                if n < min {
                    Err(error(format!("must be at least {min}")))
                } else if n > max {
                    Err(error(format!("must be at most {max}")))
                } else {
                    Ok(Value::Number(n))
                }
            }
            Kind::Double { min, max } => {
                let d: f64 = text.parse().map_err(|_| error("not a number".into()))?;
                if (min..=max).contains(&d) {
                    Ok(Value::Double(d))
                } else {
                    Err(error(format!("must be between {min} and {max}")))
                }
            }
            Kind::Enum(values) => values
                .iter()
                .find(|v| **v == text)
                .map(|v| Value::Text((*v).to_owned()))
                .ok_or_else(|| error(format!("expected {}", values.join(", ")))),
            Kind::List(values) => {
                let parts: Vec<String> = text
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect();
                if parts.is_empty() || parts.iter().any(|p| !values.contains(&p.as_str())) {
                    Err(error(format!("expected a list of {}", values.join(", "))))
                } else {
                    Ok(Value::List(parts))
                }
            }
            Kind::Text => Ok(Value::Text(text.to_owned())),
        }
    }

    pub fn parse(&self, value: &str) -> Result<Value, ConfigError> {
        self.parse_as(self.name, value)
    }

    /// The broker key this topic key falls back to.
    pub fn broker_name(&self) -> &'static str {
        match self.scope {
            Scope::Topic { broker } => broker,
            _ => self.name,
        }
    }

    /// Type, range and default, for help and docs.
    pub fn summary(&self) -> String {
        let default = if self.default.is_empty() {
            String::new()
        } else {
            format!(", default {}", self.default)
        };
        format!("{}{default}", self.kind.describe())
    }
}

/// The topic-level keys.
pub fn topic_keys() -> impl Iterator<Item = &'static Key> {
    KEYS.iter()
        .filter(|k| matches!(k.scope, Scope::Topic { .. }))
}

/// A topic-level key by name.
pub fn topic_key(name: &str) -> Option<&'static Key> {
    topic_keys().find(|k| k.name == name)
}

/// A broker key by name: one declared as a broker key, a unit synonym, or the broker fallback
/// of a topic key (which then describes it: same type and default).
pub fn broker_key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| match k.scope {
        Scope::Topic { broker } => broker == name,
        _ => k.name == name,
    })
}

/// Every broker key name with its declaration, topic fallbacks included, synonyms not.
pub fn broker_keys() -> impl Iterator<Item = (&'static str, &'static Key)> {
    KEYS.iter().filter_map(|k| match k.scope {
        Scope::Topic { broker } => Some((broker, k)),
        Scope::Broker => Some((k.name, k)),
        Scope::BrokerSynonym { .. } => None,
    })
}

/// Whether a broker key can be changed while running (IncrementalAlterConfigs on a broker).
pub fn is_dynamic_broker_key(name: &str) -> bool {
    broker_key(name).is_some_and(|k| k.dynamic)
}

/// The values an unimplemented key accepts, for messages: `0`, `true or false`, `empty`.
pub fn accepted_values(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| if v.is_empty() { "empty" } else { v })
        .collect::<Vec<_>>()
        .join(" or ")
}

/// Kafka's topic configs that Sluice does not implement: (name, values that ask for nothing
/// Sluice lacks (Kafka's defaults, which tools that copy topic configs send), what Sluice
/// does instead). Any other value is refused (INVALID_CONFIG) with that reason, never
/// accepted and ignored.
pub const UNIMPLEMENTED_TOPIC_KEYS: &[(&str, &[&str], &str)] = &[
    (
        "segment.jitter.ms",
        &["0"],
        "segments roll at segment.ms exactly",
    ),
    (
        "leader.replication.throttled.replicas",
        &[""],
        "replication throttles are not implemented yet",
    ),
    (
        "follower.replication.throttled.replicas",
        &[""],
        "replication throttles are not implemented yet",
    ),
    (
        "message.downconversion.enable",
        &["true", "false"],
        "record batches are served in the v2 format only",
    ),
    (
        "message.format.version",
        &["3.0-IV1"],
        "logs hold v2 record batches only",
    ),
    (
        "remote.storage.enable",
        &["false"],
        "tiered storage is not implemented: segments stay on local disks",
    ),
    (
        "local.retention.ms",
        &["-2"],
        "tiered storage is not implemented",
    ),
    (
        "local.retention.bytes",
        &["-2"],
        "tiered storage is not implemented",
    ),
    (
        "compression.gzip.level",
        &["-1"],
        "batches are recompressed at each codec's default level",
    ),
    (
        "compression.lz4.level",
        &["9"],
        "batches are recompressed at each codec's default level",
    ),
    (
        "compression.zstd.level",
        &["3"],
        "batches are recompressed at each codec's default level",
    ),
];

/// A topic key's value checked (INVALID_CONFIG material).
pub fn validate_topic(name: &str, value: &str) -> Result<Value, ConfigError> {
    let Some(key) = topic_key(name) else {
        let reason = match UNIMPLEMENTED_TOPIC_KEYS.iter().find(|(k, _, _)| *k == name) {
            Some((_, accepted, _)) if accepted.contains(&value.trim()) => {
                return Ok(Value::Text(value.trim().to_owned()));
            }
            Some((_, accepted, doc)) => format!(
                "a Kafka topic config Sluice does not implement: {doc} (accepted: {})",
                accepted_values(accepted)
            ),
            None => "unknown topic config".to_owned(),
        };
        return Err(ConfigError::new(name, value, reason));
    };
    key.parse(value)
}

/// A broker key's value checked, by its broker name.
pub fn validate_broker(name: &str, value: &str) -> Result<Value, ConfigError> {
    let Some(key) = broker_key(name) else {
        let reason = match unimplemented_key(name) {
            Some(u) => format!("a Kafka key Sluice does not implement: {}", u.doc),
            None => "unknown broker config".to_owned(),
        };
        return Err(ConfigError::new(name, value, reason));
    };
    key.parse_as(name, value)
}

/// The value a layer of broker properties gives `broker_name` (a broker key or a topic key's
/// fallback), unit synonyms included (`log.retention.ms` wins over `.minutes`, which wins
/// over `.hours`, as in Kafka), as text in the key's own unit.
pub fn broker_value(
    properties: &BTreeMap<String, String>,
    broker_name: &str,
) -> Result<Option<String>, ConfigError> {
    if let Some(value) = properties.get(broker_name) {
        return Ok(Some(value.clone()));
    }
    let mut synonyms: Vec<(&Key, i64)> = KEYS
        .iter()
        .filter_map(|k| match k.scope {
            Scope::BrokerSynonym { of, factor } if of == broker_name => Some((k, factor)),
            _ => None,
        })
        .collect();
    // The finer unit wins.
    synonyms.sort_by_key(|(_, factor)| *factor);
    for (key, factor) in synonyms {
        if let Some(value) = properties.get(key.name) {
            let n = key.parse(value)?.as_i64();
            return Ok(Some(if n < 0 {
                "-1".into()
            } else {
                n.saturating_mul(factor).to_string()
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_is_valid_and_every_name_declared_once() {
        let mut names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        names.extend(KEYS.iter().filter_map(|k| match k.scope {
            Scope::Topic { broker } if broker != k.name => Some(broker),
            _ => None,
        }));
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a key declared twice");
        for key in KEYS {
            if !key.default.is_empty() {
                key.parse(key.default)
                    .unwrap_or_else(|e| panic!("{}: default {e}", key.name));
            }
            assert!(!key.doc.is_empty(), "{} has no doc", key.name);
        }
    }

    #[test]
    fn values_are_checked_against_their_kind_and_errors_name_the_key() {
        assert_eq!(
            validate_topic("cleanup.policy", "compact, delete"),
            Ok(Value::List(vec!["compact".into(), "delete".into()]))
        );
        assert!(validate_topic("cleanup.policy", "sometimes").is_err());
        assert_eq!(
            validate_topic("segment.bytes", "10").unwrap_err().key,
            "segment.bytes"
        );
        assert!(validate_topic("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(validate_topic("no.such.key", "1").is_err());
        assert_eq!(
            validate_broker("log.segment.bytes", "12").unwrap_err().key,
            "log.segment.bytes"
        );
        assert!(is_dynamic_broker_key("log.retention.ms"));
        assert!(is_dynamic_broker_key("log.retention.hours"));
        assert!(!is_dynamic_broker_key("num.partitions"));
    }

    #[test]
    fn unimplemented_kafka_topic_keys_take_only_values_that_ask_for_nothing() {
        assert!(validate_topic("segment.jitter.ms", "0").is_ok());
        assert!(validate_topic("remote.storage.enable", "false").is_ok());
        let error = validate_topic("segment.jitter.ms", "100").unwrap_err();
        assert!(error.reason.contains("does not implement"), "{error}");
        assert!(error.reason.contains("accepted: 0"), "{error}");
        let error = validate_topic("no.such.topic.key", "1").unwrap_err();
        assert_eq!(error.reason, "unknown topic config");
        // A refused broker key's "off" value is accepted.
        let properties: BTreeMap<String, String> =
            [("principal.builder.class".to_owned(), String::new())].into();
        assert_eq!(check_unserved_keys(&properties), Ok(vec![]));
    }

    #[test]
    fn unit_synonyms_resolve_with_kafkas_precedence() {
        let props = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let value = |pairs: &[(&str, &str)]| {
            broker_value(&props(pairs), "log.retention.ms").expect("valid")
        };
        assert_eq!(
            value(&[("log.retention.hours", "2")]),
            Some("7200000".into())
        );
        assert_eq!(
            value(&[("log.retention.hours", "2"), ("log.retention.minutes", "3")]),
            Some("180000".into())
        );
        assert_eq!(
            value(&[("log.retention.minutes", "3"), ("log.retention.ms", "5")]),
            Some("5".into())
        );
        assert_eq!(value(&[("log.retention.hours", "-1")]), Some("-1".into()));
        assert_eq!(value(&[]), None);
    }
}
