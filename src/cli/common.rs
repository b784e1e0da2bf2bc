//! What the client subcommands share: the connection flags (`--bootstrap-server` as Kafka's
//! tools take it, `--command-config` for client settings), the output format, and exit codes.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use kafka_protocol::messages::ApiVersionsRequest;
use kafka_protocol::protocol::StrBytes;
use sluice::client::{Admin, ClientConfig, Connection, Error, parse_servers};

/// How to reach the cluster.
#[derive(Args, Debug, Clone)]
pub struct Connect {
    #[command(flatten)]
    pub servers: Servers,
    /// How long to wait for a broker to answer before giving up (exit 3), in milliseconds.
    /// The command says on stderr what it waits for.
    #[arg(long = "timeout-ms", id = "broker_timeout_ms", default_value_t = BROKER_WAIT_MS)]
    pub broker_timeout_ms: u64,
}

/// The default bound on the wait for a reachable broker (Kafka's tools wait about as long
/// for metadata).
pub const BROKER_WAIT_MS: u64 = 30_000;

/// The bootstrap list and client settings, as Kafka's tools take them.
#[derive(Args, Debug, Clone)]
pub struct Servers {
    /// Brokers to start from: host:port, comma-separated; each is tried in turn.
    /// (--broker-list, the console producer's old name, is accepted too.)
    #[arg(long, alias = "broker-list", default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// A properties file of client settings (Kafka's names: client.id, request.timeout.ms, ...).
    #[arg(
        long,
        aliases = ["producer.config", "consumer.config", "admin.config"]
    )]
    pub command_config: Option<PathBuf>,
}

impl Servers {
    /// The client configuration these flags give.
    pub fn config(&self) -> anyhow::Result<ClientConfig> {
        let mut config = match &self.command_config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading --command-config {}", path.display()))?;
                ClientConfig::from_properties(&text)?
            }
            None => ClientConfig::default(),
        };
        config.insert("bootstrap.servers", self.bootstrap_server.clone());
        if config.get("client.id").is_none() {
            config.insert("client.id", "sluice-cli");
        }
        Ok(config)
    }
}

impl Connect {
    /// The client configuration these flags give.
    pub fn config(&self) -> anyhow::Result<ClientConfig> {
        self.servers.config()
    }

    /// An admin client whose connection to a broker is made: waits for one as
    /// [`wait_for_broker`] does.
    pub async fn admin(&self) -> anyhow::Result<Admin> {
        let admin = Admin::new(self.config()?)?;
        wait_for_broker(
            &admin,
            &self.servers.bootstrap_server,
            Duration::from_millis(self.broker_timeout_ms),
        )
        .await?;
        Ok(admin)
    }

    /// Waits until a broker answers (a producer or consumer then finds it at once).
    pub async fn wait_for_broker(&self) -> anyhow::Result<()> {
        self.admin().await.map(|admin| admin.close())
    }
}

/// Waits at most `bound` for any of the bootstrap servers to answer (a connection that
/// completes Kafka's ApiVersions handshake), saying once on stderr what it waits for and why,
/// so a command against a broker that is not there is never silent. Fails with the SDK's
/// connection error (exit code 3), which names the addresses tried.
pub async fn wait_for_broker(admin: &Admin, servers: &str, bound: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + bound;
    let mut said = false;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        // A connect whose SYN goes unanswered would otherwise wait its own (longer) timeout;
        // every attempt gets a moment, so --timeout-ms 0 means "try once".
        let attempt = tokio::time::timeout(remaining.max(ATTEMPT_MIN), admin.connection());
        let error = match attempt.await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(error)) if is_unreachable(&error) => error,
            Ok(Err(error)) => return Err(error.into()),
            // The bound is said by the context below: the reason says what did not happen.
            Err(_) => Error::Connect {
                addr: servers.to_owned(),
                reason: "the connection and its ApiVersions handshake did not complete".into(),
            },
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            // A connection that was dropped or timed out is a broker not reached too: exit 3.
            let error = match error {
                reached @ (Error::Connect { .. } | Error::NoBrokerReachable { .. }) => reached,
                other => Error::Connect {
                    addr: servers.to_owned(),
                    reason: other.to_string(),
                },
            };
            return Err(anyhow::Error::new(error)
                .context(format!("no broker answered within {}", seconds(bound))));
        }
        if !said {
            eprintln!(
                "waiting for a broker at {servers} ({}); giving up in {}",
                unreachable_reason(&error),
                seconds(remaining)
            );
            said = true;
        }
        tokio::time::sleep(remaining.min(BROKER_RETRY_BACKOFF)).await;
    }
}

/// The least time an attempt to reach a broker gets (a connection and ApiVersions).
const ATTEMPT_MIN: Duration = Duration::from_secs(1);

/// Between attempts to reach a broker that is not there.
const BROKER_RETRY_BACKOFF: Duration = Duration::from_millis(250);

fn is_unreachable(error: &Error) -> bool {
    matches!(
        error,
        Error::Connect { .. }
            | Error::NoBrokerReachable { .. }
            | Error::Disconnected { .. }
            | Error::Timeout { .. }
    )
}

/// The cause in a few words: "connection refused".
pub fn unreachable_reason(error: &Error) -> String {
    match error {
        Error::Connect { reason, .. } | Error::Disconnected { reason, .. } => reason.to_lowercase(),
        Error::NoBrokerReachable { last, .. } => unreachable_reason(last),
        other => other.to_string(),
    }
}

/// "30 s", "1.5 s".
pub fn seconds(duration: Duration) -> String {
    let value = duration.as_secs_f64();
    if value.fract() < 0.05 || value >= 10.0 {
        format!("{value:.0} s")
    } else {
        format!("{value:.1} s")
    }
}

/// Records a command handed to the client and records finished (acknowledged or failed),
/// for [`watch_stalls`].
#[derive(Debug, Default)]
pub struct Progress {
    pub sent: AtomicU64,
    pub done: AtomicU64,
}

/// How often a stalled command says that it still waits.
pub const STALL_REPORT_EVERY: Duration = Duration::from_secs(5);

/// A task that says on stderr, every [`STALL_REPORT_EVERY`] in which records are outstanding
/// and none finished, how many wait and whether a broker answers: a broker that goes away
/// in the middle of a command must not leave it silent until the client's own timeouts
/// (`delivery.timeout.ms`, two minutes) end it. Stops when dropped.
pub struct StallWatch(tokio::task::JoinHandle<()>);

impl Drop for StallWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub fn watch_stalls(progress: Arc<Progress>, servers: Servers) -> StallWatch {
    StallWatch(tokio::spawn(async move {
        let mut probe = BrokerProbe::new(&servers);
        let mut last_done = progress.done.load(Ordering::Relaxed);
        let mut stalled_since: Option<Instant> = None;
        loop {
            tokio::time::sleep(STALL_REPORT_EVERY).await;
            let sent = progress.sent.load(Ordering::Relaxed);
            let done = progress.done.load(Ordering::Relaxed);
            if done != last_done || sent <= done {
                last_done = done;
                stalled_since = None;
                continue;
            }
            // The clock may read less than one period since boot (a fresh container).
            let since = *stalled_since.get_or_insert_with(|| {
                let now = Instant::now();
                now.checked_sub(STALL_REPORT_EVERY).unwrap_or(now)
            });
            eprintln!(
                "{} record(s) waiting for acknowledgement, none for {}; {}",
                sent - done,
                seconds(Duration::from_secs(since.elapsed().as_secs())),
                probe.state().await.1
            );
        }
    }))
}

/// Asks whether a broker of the bootstrap list answers now, with ApiVersions alone, on a
/// connection kept from one probe to the next (a new one only when it failed). Not Metadata:
/// a broker answers ApiVersions at once, even while it starts, but holds Metadata until it is
/// ready (up to 15 s), so a starting broker would be reported as gone.
pub struct BrokerProbe {
    bootstrap: String,
    client_id: String,
    /// The command's client settings: a TLS or SASL listener is probed as the command
    /// connects to it (`None` when they do not parse: the command says so itself).
    config: Option<ClientConfig>,
    connection: Option<Connection>,
}

/// How long a probe waits for a broker to answer.
const PROBE_WAIT: Duration = Duration::from_secs(2);

impl BrokerProbe {
    pub fn new(servers: &Servers) -> BrokerProbe {
        let client_id = servers
            .config()
            .ok()
            .and_then(|config| config.get("client.id").map(str::to_owned))
            .unwrap_or_else(|| "sluice-cli".to_owned());
        BrokerProbe {
            bootstrap: servers.bootstrap_server.clone(),
            client_id,
            config: servers.config().ok(),
            connection: None,
        }
    }

    /// Whether a broker answers within [`PROBE_WAIT`], and that in words.
    pub async fn state(&mut self) -> (bool, String) {
        let bootstrap = self.bootstrap.clone();
        match tokio::time::timeout(PROBE_WAIT, self.ask()).await {
            Ok(Ok(())) => (true, format!("a broker at {bootstrap} answers")),
            Ok(Err(error)) => {
                self.connection = None;
                (
                    false,
                    format!(
                        "no broker at {bootstrap} answers ({}); still trying",
                        unreachable_reason(&error)
                    ),
                )
            }
            Err(_) => {
                self.connection = None;
                (
                    false,
                    format!(
                        "no broker at {bootstrap} answers within {}; still trying",
                        seconds(PROBE_WAIT)
                    ),
                )
            }
        }
    }

    /// ApiVersions on the kept connection; failing that, a new connection to each bootstrap
    /// address in turn (whose handshake is an ApiVersions).
    async fn ask(&mut self) -> Result<(), Error> {
        if let Some(connection) = self.connection.take() {
            let request = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("sluice-cli"))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
            if !connection.is_closed() && connection.send(&request).await.is_ok() {
                self.connection = Some(connection);
                return Ok(());
            }
        }
        // The connection's own bounds are longer than the probe's: the probe's bound ends a
        // wait, so a silent broker is always said the same way.
        let bound = PROBE_WAIT * 2;
        let mut last = None;
        for addr in parse_servers(&self.bootstrap) {
            let connected = match &self.config {
                Some(config) => {
                    tokio::time::timeout(bound, Connection::connect_with(&addr, config))
                        .await
                        .unwrap_or_else(|_| {
                            Err(Error::Connect {
                                addr: addr.clone(),
                                reason: format!("no answer within {} ms", bound.as_millis()),
                            })
                        })
                }
                None => Connection::connect_as(&addr, &self.client_id, bound, bound).await,
            };
            match connected {
                Ok(connection) => {
                    self.connection = Some(connection);
                    return Ok(());
                }
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or_else(|| Error::Connect {
            addr: self.bootstrap.clone(),
            reason: "no address in the bootstrap list".to_owned(),
        }))
    }
}

/// Tables for people, JSON for scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// A current-thread runtime for a command.
pub fn block_on<F: std::future::Future<Output = anyhow::Result<()>>>(
    future: F,
) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(future)
}

/// The exit code for a failed command: 3 when no broker could be reached, 4 for a Kafka error
/// the cluster answered with, 1 otherwise (2 is a usage error, from the argument parser).
pub fn exit_code(error: &anyhow::Error) -> u8 {
    use sluice::client::Error;
    for cause in error.chain() {
        match cause.downcast_ref::<Error>() {
            Some(Error::Connect { .. } | Error::NoBrokerReachable { .. }) => return 3,
            Some(Error::Kafka { .. }) => return 4,
            _ => {}
        }
    }
    1
}

/// Prints rows as columns, each as wide as its widest cell.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.len());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// A name given as Sluice's positional argument or as Kafka's flag (`--topic`, `--group`);
/// the parser has already required exactly one of them.
pub fn one_of(positional: Option<String>, flag: Option<String>) -> String {
    positional.or(flag).unwrap_or_default()
}

/// A topic named as `sluice` takes it (positional) or as Kafka's tools do (`--topic T`):
/// exactly one of the two.
#[derive(clap::Args, Debug, Clone)]
pub struct TopicArg {
    /// The topic (or --topic, as Kafka's tools take it).
    #[arg(required_unless_present = "topic_flag", conflicts_with = "topic_flag")]
    topic: Option<String>,
    /// The same, as Kafka's tools name it.
    #[arg(
        long = "topic",
        id = "topic_flag",
        value_name = "TOPIC",
        hide_short_help = true
    )]
    topic_flag: Option<String>,
}

impl TopicArg {
    pub fn name(&self) -> String {
        one_of(self.topic.clone(), self.topic_flag.clone())
    }
}

/// A group named as `sluice` takes it (positional) or as kafka-consumer-groups.sh does
/// (`--group G`): exactly one of the two.
#[derive(clap::Args, Debug, Clone)]
pub struct GroupArg {
    /// The group (or --group, as kafka-consumer-groups.sh takes it).
    #[arg(required_unless_present = "group_flag", conflicts_with = "group_flag")]
    group: Option<String>,
    /// The same, as Kafka's tools name it.
    #[arg(
        long = "group",
        id = "group_flag",
        value_name = "GROUP",
        hide_short_help = true
    )]
    group_flag: Option<String>,
}

impl GroupArg {
    pub fn name(&self) -> String {
        one_of(self.group.clone(), self.group_flag.clone())
    }
}

/// `key=value` from the command line.
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not key=value"))?;
    Ok((key.trim().to_owned(), value.trim().to_owned()))
}

/// `key=value` of Kafka's `--property`: the value kept as given, since separators are often
/// blanks (`key.separator=' '`, a tab).
pub fn parse_property(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not key=value"))?;
    let key = key.trim();
    if key.ends_with(".separator") && value.is_empty() {
        return Err(format!("{key} must not be empty"));
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// `count` distinct loopback ports nothing listens on, for the nodes a command starts.
///
/// All are held until every one is picked, so the kernel cannot hand the same port out twice.
pub fn free_ports(count: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// The connection flags and output format of an admin command (`users`, `acls`,
/// `transactions`), accepted before or after its subcommand.
#[derive(Args)]
pub struct Common {
    /// Brokers to start from: host:port, comma-separated; each is tried in turn.
    #[arg(
        long,
        alias = "broker-list",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    pub bootstrap_server: String,
    /// A properties file of client settings (Kafka's names, e.g. the admin's SASL login).
    #[arg(long, alias = "admin.config", global = true)]
    pub command_config: Option<PathBuf>,
    /// How long to wait for a broker to answer before giving up (exit 3), in milliseconds.
    #[arg(long = "timeout-ms", default_value_t = BROKER_WAIT_MS, global = true)]
    pub broker_timeout_ms: u64,
    #[arg(long, value_enum, default_value_t = Format::Text, global = true)]
    pub output: Format,
}

impl Common {
    pub fn connect(&self) -> Connect {
        Connect {
            servers: Servers {
                bootstrap_server: self.bootstrap_server.clone(),
                command_config: self.command_config.clone(),
            },
            broker_timeout_ms: self.broker_timeout_ms,
        }
    }
}
