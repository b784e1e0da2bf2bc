//! `sluice fuzz`: random and mutated request frames through the real request path of a
//! single-node broker started in this process (header and body decoding, dispatch, the
//! handlers, the replica layer and the log, response encoding; `server::process_frame`, what
//! every connection runs). Seeds are valid requests of every served API and version; each
//! input stacks a few mutations (bit flips, interesting integers, cuts, inserts, splices) or is
//! random bytes.
//!
//! It reports crashes (any panic, in the request path or in a broker task: must be 0), the
//! peak RSS, and inputs slower than 100 ms that did not ask to wait (a Fetch's `max_wait_ms`,
//! an acks=all Produce's `timeout_ms`, a controller round trip). Requests that would change
//! the cluster beyond the fuzzed topic (CreateTopics, CreatePartitions and
//! IncrementalAlterConfigs unless `validate_only`, DeleteTopics, reassignments) are decoded
//! but not dispatched. cargo-fuzz needs a nightly toolchain this project does not use; this
//! runs on stable, and in release for long runs. A quarter of the inputs go through a SASL
//! listener's session (before its handshake, after a v1 handshake, or as a v0 raw token).
//!
//! With `--bootstrap-server` (and `--command-config`, Kafka's client keys) the inputs go to a
//! running broker instead, over the SDK's connections: through TLS and a SASL login when the
//! listener asks for them, so a SASL_SSL listener's session is fuzzed as clients reach it. The
//! SDK writes each request's header; the body is the mutated one. Cluster-changing requests
//! (and ACL changes, which could lock the fuzzer out) are not sent; an acks=0 Produce is not
//! sent either (no answer to wait for). A connection the broker closes (as it does on an
//! undecodable request) is made again. At the end the broker must still answer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use clap::Args;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, ListOffsetsRequest, MetadataRequest, ProduceRequest,
    RequestHeader, RequestKind, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use sluice::broker::Broker;
use sluice::config::ServerConfig;
use sluice::config::security::{ListenerSecurity, SecurityProtocol};
use sluice::handler::SUPPORTED_APIS;
use sluice::log::batch::BatchBuilder;
use sluice::protocol;
use sluice::rng::SmallRng as Rng;
use sluice::security::sasl::Mechanism;
use sluice::server::session::Session;
use sluice::server::{Frame, process_frame};

#[derive(Args)]
pub struct FuzzArgs {
    /// Inputs to run.
    #[arg(long, default_value_t = 100_000)]
    inputs: u64,
    /// The random seed (printed; a run is repeated with the same seed and inputs).
    #[arg(long)]
    seed: Option<u64>,
    /// Where the broker keeps its data (a fresh temporary directory by default).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Inputs in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Where crashing and slow inputs are written (hex), if any.
    #[arg(long, default_value = "fuzz-findings")]
    findings: PathBuf,
    /// Fuzzes a running broker's listener at this address instead of a broker in this process.
    #[arg(long)]
    bootstrap_server: Option<String>,
    /// Kafka's client settings for --bootstrap-server (security.protocol, ssl.*, sasl.*).
    #[arg(long, requires = "bootstrap_server")]
    command_config: Option<PathBuf>,
}

/// Inputs slower than this that did not ask to wait are reported.
const SLOW: Duration = Duration::from_millis(100);
/// An input still running after this is abandoned (and reported).
const INPUT_TIMEOUT: Duration = Duration::from_secs(10);
const TOPIC: &str = "fuzz";

static PANICS: AtomicU64 = AtomicU64::new(0);

pub fn run(args: FuzzArgs) -> anyhow::Result<()> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1
    });
    println!("seed {seed}");
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let temporary;
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            temporary = tempfile_dir()?;
            temporary.clone()
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if let Some(bootstrap) = &args.bootstrap_server {
        let servers = super::common::Servers {
            bootstrap_server: bootstrap.clone(),
            command_config: args.command_config.clone(),
        };
        let config = servers.config()?;
        return runtime.block_on(fuzz_remote(&args, seed, bootstrap, config));
    }
    let result = runtime.block_on(fuzz(&args, seed, &dir));
    if args.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("sluice-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

async fn fuzz(args: &FuzzArgs, seed: u64, dir: &std::path::Path) -> anyhow::Result<()> {
    let ports = super::common::free_ports(3)?;
    let (kafka, quorum, http) = (ports[0], ports[1], ports[2]);
    let overrides: Vec<(String, String)> = [
        (
            "listeners",
            format!("PLAINTEXT://127.0.0.1:{kafka},CONTROLLER://127.0.0.1:{quorum}"),
        ),
        ("http.listener", format!("127.0.0.1:{http}")),
        ("log.dirs", dir.join("data").display().to_string()),
        ("auto.create.topics.enable", "false".into()),
        // Bounded disk: mutated batches that pass validation are appended.
        ("log.segment.bytes", (16 << 20).to_string()),
        ("log.retention.bytes", (64 << 20).to_string()),
        ("log.retention.check.interval.ms", "1000".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let (config, _) = ServerConfig::load(None, &overrides).map_err(anyhow::Error::msg)?;
    let node = sluice::node::Node::start(config).await?;
    let broker = Arc::clone(node.broker().context("the node runs no broker")?);
    create_topic(&broker).await?;
    let topic_id = broker
        .image()
        .topic_by_name(TOPIC)
        .map_or(uuid::Uuid::nil(), |t| uuid::Uuid::from_u128(t.id.0));
    let seeds = seeds(topic_id);
    println!("seeds {} (every served API and version)", seeds.len());

    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let peer: SocketAddr = "127.0.0.1:1".parse()?;
    let mut tasks = tokio::task::JoinSet::new();
    let mut running: HashMap<tokio::task::Id, Vec<u8>> = HashMap::new();
    let (mut crashes, mut timed_out, mut slow_unexplained, mut slow_waiting, mut skipped) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut slowest = Duration::ZERO;
    let mut findings = 0usize;
    let mut save = |kind: &str, input: &[u8]| {
        if findings < 50 {
            findings += 1;
            let _ = std::fs::create_dir_all(&args.findings);
            let path = args.findings.join(format!("{kind}-{findings}.hex"));
            let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
            let _ = std::fs::write(path, hex);
        }
    };
    let mut sent = 0u64;
    while sent < args.inputs || !tasks.is_empty() {
        while sent < args.inputs && tasks.len() < args.concurrency.max(1) {
            let input = mutate(&seeds, &mut rng);
            sent += 1;
            report_progress(sent, args.inputs, started);
            let plan = plan(&input);
            if plan.skip {
                skipped += 1;
                continue;
            }
            let broker = Arc::clone(&broker);
            let frame_input = input.clone();
            // A quarter of the inputs reach a SASL listener's session: before a handshake,
            // after a v1 handshake (the input as SaslAuthenticate or anything else) or after
            // a v0 one (the input as a raw token).
            let sasl = rng.chance(25).then(|| rng.index(3));
            let handle = tasks.spawn(async move {
                let begun = Instant::now();
                let frame = Frame {
                    bytes: Bytes::from(frame_input),
                    received: begun,
                };
                let answered = tokio::time::timeout(INPUT_TIMEOUT, async {
                    let Some(stage) = sasl else {
                        let mut session = Session::new(Arc::new(ListenerSecurity::plaintext()));
                        return process_frame(&broker, "PLAINTEXT", &mut session, peer, frame)
                            .await
                            .is_ok();
                    };
                    let mut session = Session::new(Arc::clone(&SASL_SECURITY));
                    if stage > 0 {
                        let handshake = Frame {
                            bytes: Bytes::from(sasl_handshake(if stage == 1 { 1 } else { 0 })),
                            received: begun,
                        };
                        let _ =
                            process_frame(&broker, "SASL_PLAINTEXT", &mut session, peer, handshake)
                                .await;
                    }
                    process_frame(&broker, "SASL_PLAINTEXT", &mut session, peer, frame)
                        .await
                        .is_ok()
                })
                .await;
                (begun.elapsed(), answered.is_err(), plan.may_wait)
            });
            running.insert(handle.id(), input);
        }
        let Some(done) = tasks.join_next_with_id().await else {
            continue;
        };
        match done {
            Ok((id, (elapsed, abandoned, may_wait))) => {
                let input = running.remove(&id).unwrap_or_default();
                slowest = slowest.max(elapsed);
                if abandoned {
                    timed_out += 1;
                    if may_wait < INPUT_TIMEOUT {
                        save("timeout", &input);
                    }
                } else if elapsed > SLOW {
                    if elapsed <= may_wait + SLOW {
                        slow_waiting += 1;
                    } else {
                        slow_unexplained += 1;
                        save("slow", &input);
                    }
                }
            }
            Err(error) => {
                let input = running.remove(&error.id()).unwrap_or_default();
                if error.is_panic() {
                    crashes += 1;
                    save("crash", &input);
                }
            }
        }
    }
    let elapsed = started.elapsed();
    drop(broker);
    node.shutdown().await?;
    let panics = PANICS.load(Ordering::SeqCst);
    println!("inputs {sent}");
    println!("seconds {:.1}", elapsed.as_secs_f64());
    println!("inputs_per_s {:.0}", sent as f64 / elapsed.as_secs_f64());
    println!("decoded_not_dispatched {skipped}");
    println!("crashes {}", crashes.max(panics));
    println!("slow_over_100ms_unexplained {slow_unexplained}");
    println!("slow_over_100ms_waiting_as_asked {slow_waiting}");
    println!("abandoned_after_10s {timed_out}");
    println!("slowest_ms {}", slowest.as_millis());
    println!("peak_rss_kib {}", peak_rss_kib());
    if findings > 0 {
        println!("findings written to {}", args.findings.display());
    }
    anyhow::ensure!(
        crashes == 0 && panics == 0,
        "{} crash(es): inputs in {}",
        crashes.max(panics),
        args.findings.display()
    );
    Ok(())
}

/// A request body sent as it is (the SDK writes the header).
struct RawBody(Vec<u8>);

impl Encodable for RawBody {
    fn encode<B: kafka_protocol::protocol::buf::ByteBufMut>(
        &self,
        buf: &mut B,
        _version: i16,
    ) -> anyhow::Result<()> {
        buf.put_slice(&self.0);
        Ok(())
    }
    fn compute_size(&self, _version: i16) -> anyhow::Result<usize> {
        Ok(self.0.len())
    }
}

/// Whatever the broker answered, unread.
struct AnyResponse;

impl kafka_protocol::protocol::Decodable for AnyResponse {
    fn decode<B: kafka_protocol::protocol::buf::ByteBuf>(
        buf: &mut B,
        _version: i16,
    ) -> anyhow::Result<Self> {
        buf.advance(buf.remaining());
        Ok(AnyResponse)
    }
}

/// How an input sent to a running broker ended.
enum RemoteOutcome {
    Answered,
    /// The broker closed the connection (an undecodable or refused request).
    Closed,
    /// No answer within the input timeout (the connection is dropped).
    Abandoned,
}

/// `--bootstrap-server`: the inputs go to a running broker over the SDK's connections (TLS and
/// SASL as the command config says), `concurrency` connections at once.
async fn fuzz_remote(
    args: &FuzzArgs,
    seed: u64,
    bootstrap: &str,
    config: sluice::client::ClientConfig,
) -> anyhow::Result<()> {
    use sluice::client::{Admin, Connection, NewTopic};
    let admin = Admin::new(config.clone())?;
    match admin
        .create_topics(&[NewTopic::new(TOPIC, 2, -1)], false)
        .await
    {
        Ok(()) => {}
        Err(error) if error.to_string().contains("TOPIC_ALREADY_EXISTS") => {}
        Err(error) => return Err(error).context("creating the fuzzed topic"),
    }
    // (api key, version, body) of every seed frame, the header cut off.
    let mut bodies: Vec<(ApiKey, i16, Vec<u8>)> = Vec::new();
    for frame in seeds(uuid::Uuid::nil()) {
        let Ok(start) = protocol::peek_start(&frame) else {
            continue;
        };
        let Ok(api_key) = ApiKey::try_from(start.api_key) else {
            continue;
        };
        let mut bytes = Bytes::from(frame);
        if protocol::decode_header(api_key, &mut bytes).is_ok() {
            bodies.push((api_key, start.api_version, bytes.to_vec()));
        }
    }
    println!("seeds {} (every served API and version)", bodies.len());
    let seed_frames: Vec<Vec<u8>> = bodies.iter().map(|(_, _, body)| body.clone()).collect();
    // The seeds by API and version, grouped once.
    let mut by_api: Vec<(ApiKey, i16, Vec<Vec<u8>>)> = Vec::new();
    for (api_key, version, body) in bodies {
        match by_api.last_mut() {
            Some((key, v, group)) if *key == api_key && *v == version => group.push(body),
            _ => by_api.push((api_key, version, vec![body])),
        }
    }
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let (mut answered, mut closed, mut abandoned, mut not_sent) = (0u64, 0u64, 0u64, 0u64);
    let workers = args.concurrency.clamp(1, 16);
    let mut connections: Vec<Option<Arc<Connection>>> = vec![None; workers];
    let mut tasks: tokio::task::JoinSet<(usize, Option<Arc<Connection>>, RemoteOutcome)> =
        tokio::task::JoinSet::new();
    let mut free: Vec<usize> = (0..workers).collect();
    let mut sent = 0u64;
    while sent < args.inputs || !tasks.is_empty() {
        while sent < args.inputs && !free.is_empty() {
            sent += 1;
            report_progress(sent, args.inputs, started);
            let (api_key, version, same_api) = &by_api[rng.index(by_api.len())];
            let (api_key, version) = (*api_key, *version);
            // A body of this API version's seeds, mutated (`mutate` keeps the first 8 bytes most
            // of the time; in a body they are just more bytes), now and then spliced with
            // another API's.
            let body = if rng.chance(10) {
                mutate(&seed_frames, &mut rng)
            } else {
                mutate(same_api, &mut rng)
            };
            if !remote_may_send(api_key, version, &body) {
                not_sent += 1;
                continue;
            }
            let Some(slot) = free.pop() else { break };
            let connection = connections[slot].take();
            let config = config.clone();
            let bootstrap = bootstrap.to_owned();
            tasks.spawn(async move {
                let connection = match connection {
                    Some(connection) if !connection.is_closed() => connection,
                    _ => match Connection::connect_with(&bootstrap, &config).await {
                        Ok(connection) => Arc::new(connection),
                        Err(_) => return (slot, None, RemoteOutcome::Closed),
                    },
                };
                let body = RawBody(body);
                let call = connection.call::<RawBody, AnyResponse>(api_key, version, &body);
                match tokio::time::timeout(INPUT_TIMEOUT, call).await {
                    Ok(Ok(AnyResponse)) => (slot, Some(connection), RemoteOutcome::Answered),
                    Ok(Err(_)) => (slot, None, RemoteOutcome::Closed),
                    Err(_) => (slot, None, RemoteOutcome::Abandoned),
                }
            });
        }
        let Some(done) = tasks.join_next().await else {
            continue;
        };
        let (slot, connection, outcome) = done.context("a fuzzing task failed")?;
        connections[slot] = connection;
        free.push(slot);
        match outcome {
            RemoteOutcome::Answered => answered += 1,
            RemoteOutcome::Closed => closed += 1,
            RemoteOutcome::Abandoned => abandoned += 1,
        }
    }
    let elapsed = started.elapsed();
    // The broker must still answer a new client.
    let alive = match Connection::connect_with(bootstrap, &config).await {
        Ok(connection) => connection
            .send(&kafka_protocol::messages::ApiVersionsRequest::default())
            .await
            .is_ok(),
        Err(_) => false,
    };
    println!("inputs {sent}");
    println!("seconds {:.1}", elapsed.as_secs_f64());
    println!("inputs_per_s {:.0}", sent as f64 / elapsed.as_secs_f64());
    println!("not_sent {not_sent}");
    println!("answered {answered}");
    println!("connection_closed_by_broker {closed}");
    println!("abandoned_after_10s {abandoned}");
    println!("broker_answers_after {alive}");
    anyhow::ensure!(alive, "the broker at {bootstrap} no longer answers");
    Ok(())
}

/// Whether a mutated body may go to a running broker: not what would change the cluster
/// beyond the fuzzed topic, its ACLs, or an acks=0 Produce (nothing would answer it).
fn remote_may_send(api_key: ApiKey, version: i16, body: &[u8]) -> bool {
    if matches!(
        api_key,
        ApiKey::CreateAcls
            | ApiKey::DeleteAcls
            | ApiKey::AlterUserScramCredentials
            | ApiKey::AlterClientQuotas
            | ApiKey::AlterConfigs
            | ApiKey::DeleteTopics
            | ApiKey::AlterPartitionReassignments
    ) {
        return false;
    }
    let mut bytes = Bytes::copy_from_slice(body);
    match protocol::decode_body(api_key, version, &mut bytes) {
        Ok(RequestKind::Produce(request)) => request.acks != 0,
        Ok(RequestKind::CreateTopics(r)) => r.validate_only,
        Ok(RequestKind::CreatePartitions(r)) => r.validate_only,
        Ok(RequestKind::IncrementalAlterConfigs(r)) => r.validate_only,
        // Undecodable: the broker closes the connection, which is what is being tried.
        _ => true,
    }
}

/// A progress line every tenth of the inputs.
fn report_progress(sent: u64, inputs: u64, started: Instant) {
    if sent % (inputs / 10).max(1) == 0 {
        println!(
            "progress {sent}/{inputs} inputs, {:.0} inputs/s",
            sent as f64 / started.elapsed().as_secs_f64()
        );
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next().map(str::to_owned))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn create_topic(broker: &Broker) -> anyhow::Result<()> {
    use sluice::controller::NewTopic;
    use sluice::controller::service::ControllerRequest;
    let topic = NewTopic {
        name: TOPIC.into(),
        partitions: 2,
        replication_factor: 1,
        ..Default::default()
    };
    // The broker registers and is unfenced a moment after start.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request = ControllerRequest::CreateTopic(topic.clone());
        match broker
            .call_controller(request, Duration::from_secs(10))
            .await
        {
            Ok(_) => break,
            Err(refused) if Instant::now() > deadline => {
                anyhow::bail!("creating {TOPIC}: {}: {}", refused.error, refused.message)
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    anyhow::ensure!(
        broker
            .wait_for_image(Duration::from_secs(30), |i| i
                .topic_by_name(TOPIC)
                .is_some())
            .await,
        "{TOPIC} never appeared"
    );
    Ok(())
}

/// What the fuzzer does with an input: dispatch it or only decode it, and how long it may
/// rightly wait.
struct Plan {
    skip: bool,
    may_wait: Duration,
}

fn plan(input: &[u8]) -> Plan {
    let run = Plan {
        skip: false,
        may_wait: Duration::ZERO,
    };
    let Ok(start) = protocol::peek_start(input) else {
        return run;
    };
    let Ok(api_key) = ApiKey::try_from(start.api_key) else {
        return run;
    };
    let mut bytes = Bytes::copy_from_slice(input);
    let Ok(header) = protocol::decode_header(api_key, &mut bytes) else {
        return run;
    };
    let Ok(request) = protocol::decode_body(api_key, header.request_api_version, &mut bytes) else {
        return run;
    };
    let millis = |ms: i32| Duration::from_millis(ms.max(0) as u64);
    // Controller round trips (and their image waits) take their own time on a loaded machine.
    let controller = Duration::from_secs(2);
    match request {
        RequestKind::CreateTopics(r) => Plan {
            skip: !r.validate_only,
            may_wait: controller,
        },
        RequestKind::CreatePartitions(r) => Plan {
            skip: !r.validate_only,
            may_wait: controller,
        },
        RequestKind::IncrementalAlterConfigs(r) => Plan {
            skip: !r.validate_only,
            may_wait: controller,
        },
        RequestKind::DeleteTopics(_) | RequestKind::AlterPartitionReassignments(_) => Plan {
            skip: true,
            may_wait: controller,
        },
        RequestKind::Fetch(r) => Plan {
            skip: false,
            may_wait: millis(r.max_wait_ms),
        },
        RequestKind::Produce(r) => Plan {
            skip: false,
            may_wait: if r.acks == -1 {
                millis(r.timeout_ms)
            } else {
                Duration::ZERO
            },
        },
        // A join waits for the rebalance (bounded by the group's rebalance timeouts), a sync
        // for the leader's assignment.
        RequestKind::JoinGroup(r) => Plan {
            skip: false,
            may_wait: controller + millis(r.rebalance_timeout_ms.max(r.session_timeout_ms)),
        },
        RequestKind::SyncGroup(_) => Plan {
            skip: false,
            may_wait: Duration::from_secs(3600),
        },
        // Coordinator writes wait for the offsets topic's in-sync replicas.
        RequestKind::OffsetCommit(_)
        | RequestKind::DeleteGroups(_)
        | RequestKind::OffsetDelete(_) => Plan {
            skip: false,
            may_wait: controller + Duration::from_secs(5),
        },
        RequestKind::ElectLeaders(_)
        | RequestKind::FindCoordinator(_)
        | RequestKind::InitProducerId(_)
        | RequestKind::DescribeQuorum(_) => Plan {
            skip: false,
            may_wait: controller,
        },
        _ => run,
    }
}

/// A request frame (header and body, no size prefix).
/// A SASL_PLAINTEXT listener with PLAIN and one user, for the SASL inputs.
static SASL_SECURITY: std::sync::LazyLock<Arc<ListenerSecurity>> = std::sync::LazyLock::new(|| {
    Arc::new(ListenerSecurity {
        protocol: SecurityProtocol::SaslPlaintext,
        mechanisms: vec![Mechanism::Plain],
        plain_users: [("alice".to_owned(), "alice-secret".to_owned())].into(),
        tls: None,
        connections_max_reauth_ms: 0,
        oauthbearer: None,
    })
});

/// A valid SaslHandshake(PLAIN) frame of `version`.
fn sasl_handshake(version: i16) -> Vec<u8> {
    let request = RequestKind::SaslHandshake(
        kafka_protocol::messages::SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str("PLAIN")),
    );
    frame(ApiKey::SaslHandshake, version, &request).unwrap_or_default()
}

fn frame(api_key: ApiKey, version: i16, body: &RequestKind) -> Option<Vec<u8>> {
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api_key.request_header_version(version))
        .ok()?;
    body.encode(&mut out, version).ok()?;
    Some(out.to_vec())
}

fn empty_request(api_key: ApiKey) -> Option<RequestKind> {
    use kafka_protocol::messages::*;
    Some(match api_key {
        ApiKey::Produce => ProduceRequest::default().into(),
        ApiKey::Fetch => FetchRequest::default().into(),
        ApiKey::ListOffsets => ListOffsetsRequest::default().into(),
        ApiKey::Metadata => MetadataRequest::default().into(),
        ApiKey::ApiVersions => ApiVersionsRequest::default().into(),
        ApiKey::CreateTopics => CreateTopicsRequest::default().into(),
        ApiKey::DeleteTopics => DeleteTopicsRequest::default().into(),
        ApiKey::DeleteRecords => DeleteRecordsRequest::default().into(),
        ApiKey::InitProducerId => InitProducerIdRequest::default().into(),
        ApiKey::OffsetForLeaderEpoch => OffsetForLeaderEpochRequest::default().into(),
        ApiKey::DescribeConfigs => DescribeConfigsRequest::default().into(),
        ApiKey::CreatePartitions => CreatePartitionsRequest::default().into(),
        ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsRequest::default().into(),
        ApiKey::DescribeCluster => DescribeClusterRequest::default().into(),
        ApiKey::DescribeQuorum => DescribeQuorumRequest::default().into(),
        ApiKey::ElectLeaders => ElectLeadersRequest::default().into(),
        ApiKey::AlterPartitionReassignments => AlterPartitionReassignmentsRequest::default().into(),
        ApiKey::ListPartitionReassignments => ListPartitionReassignmentsRequest::default().into(),
        ApiKey::FindCoordinator => FindCoordinatorRequest::default().into(),
        ApiKey::JoinGroup => JoinGroupRequest::default().into(),
        ApiKey::SyncGroup => SyncGroupRequest::default().into(),
        ApiKey::Heartbeat => HeartbeatRequest::default().into(),
        ApiKey::LeaveGroup => LeaveGroupRequest::default().into(),
        ApiKey::OffsetCommit => OffsetCommitRequest::default().into(),
        ApiKey::OffsetFetch => OffsetFetchRequest::default().into(),
        ApiKey::ListGroups => ListGroupsRequest::default().into(),
        ApiKey::DescribeGroups => DescribeGroupsRequest::default().into(),
        ApiKey::DeleteGroups => DeleteGroupsRequest::default().into(),
        ApiKey::OffsetDelete => OffsetDeleteRequest::default().into(),
        ApiKey::ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest::default().into(),
        ApiKey::ConsumerGroupDescribe => ConsumerGroupDescribeRequest::default().into(),
        ApiKey::DescribeLogDirs => DescribeLogDirsRequest::default().with_topics(None).into(),
        _ => return None,
    })
}

/// Valid requests of every served API and version (empty ones), and requests with content
/// for the data path (Produce, Fetch, ListOffsets, Metadata on the fuzzed topic).
fn seeds(topic_id: uuid::Uuid) -> Vec<Vec<u8>> {
    let name = TopicName(StrBytes::from_static_str(TOPIC));
    let mut builder = BatchBuilder::new(0, 1_700_000_000_000);
    for i in 0..3u8 {
        builder.push(
            1_700_000_000_000,
            Some(&[i]),
            Some(b"value"),
            &[(b"h", Some(b"v"))],
        );
    }
    let batch = Bytes::from(builder.build());
    let mut seeds = Vec::new();
    for (api_key, min, max) in SUPPORTED_APIS {
        for version in *min..=*max {
            let mut bodies: Vec<RequestKind> = empty_request(*api_key).into_iter().collect();
            match api_key {
                ApiKey::Produce => {
                    for acks in [1, -1, 0] {
                        bodies.push(
                            ProduceRequest::default()
                                .with_acks(acks)
                                .with_timeout_ms(50)
                                .with_topic_data(vec![
                                    TopicProduceData::default()
                                        .with_name(name.clone())
                                        .with_partition_data(vec![
                                            PartitionProduceData::default()
                                                .with_index(0)
                                                .with_records(Some(batch.clone())),
                                        ]),
                                ])
                                .into(),
                        );
                    }
                }
                ApiKey::Fetch => bodies.push(
                    FetchRequest::default()
                        .with_replica_id(BrokerId(-1))
                        .with_max_wait_ms(20)
                        .with_min_bytes(1)
                        .with_max_bytes(1 << 20)
                        .with_session_epoch(if version >= 7 { 0 } else { -1 })
                        .with_topics(vec![
                            FetchTopic::default()
                                .with_topic(name.clone())
                                .with_topic_id(topic_id)
                                .with_partitions(vec![
                                    FetchPartition::default()
                                        .with_partition(0)
                                        .with_fetch_offset(0)
                                        .with_partition_max_bytes(1 << 20),
                                ]),
                        ])
                        .into(),
                ),
                ApiKey::ListOffsets => bodies.push(
                    ListOffsetsRequest::default()
                        .with_replica_id(BrokerId(-1))
                        .with_topics(vec![
                            ListOffsetsTopic::default()
                                .with_name(name.clone())
                                .with_partitions(vec![
                                    ListOffsetsPartition::default()
                                        .with_partition_index(0)
                                        .with_timestamp(-1),
                                ]),
                        ])
                        .into(),
                ),
                ApiKey::Metadata => bodies.push(
                    MetadataRequest::default()
                        .with_topics(Some(vec![
                            MetadataRequestTopic::default()
                                .with_name(Some(name.clone()))
                                .with_topic_id(topic_id),
                        ]))
                        .into(),
                ),
                _ => {}
            }
            for body in &bodies {
                if let Some(frame) = frame(*api_key, version, body) {
                    seeds.push(frame);
                }
            }
        }
    }
    seeds
}

const INTERESTING_8: &[u8] = &[0, 1, 0x7f, 0x80, 0xff];
const INTERESTING_32: &[i32] = &[
    0,
    1,
    -1,
    2,
    0x7f,
    0x7fff,
    0xffff,
    i32::MAX,
    i32::MIN,
    1 << 20,
];

/// A seed with one to four mutations, or (rarely) random bytes after a real header start.
fn mutate(seeds: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let seed = &seeds[rng.index(seeds.len())];
    if rng.chance(3) {
        let mut input = seed[..8.min(seed.len())].to_vec();
        let extra = rng.index(256);
        input.extend((0..extra).map(|_| rng.next_u64() as u8));
        return input;
    }
    let mut input = seed.clone();
    for _ in 0..1 + rng.index(4) {
        // The first 8 bytes (key, version, correlation id) stay most of the time, so inputs
        // reach the decoders of served APIs instead of the version check.
        let from = if rng.chance(90) {
            8.min(input.len())
        } else {
            0
        };
        if input.len() <= from {
            input.extend((0..1 + rng.index(16)).map(|_| rng.next_u64() as u8));
            continue;
        }
        let at = from + rng.index(input.len() - from);
        match rng.index(8) {
            0 => {
                let bit = rng.index(8);
                input[at] ^= 1 << bit;
            }
            1 => input[at] = INTERESTING_8[rng.index(INTERESTING_8.len())],
            2 => {
                let value = INTERESTING_32[rng.index(INTERESTING_32.len())];
                let bytes: Vec<u8> = if rng.chance(50) {
                    value.to_be_bytes().to_vec()
                } else {
                    (value as i16).to_be_bytes().to_vec()
                };
                for (i, b) in bytes.iter().enumerate() {
                    if let Some(slot) = input.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            3 => {
                let len = 1 + rng.index((input.len() - at).min(32));
                input.drain(at..at + len);
            }
            4 => {
                let len = 1 + rng.index(32);
                let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                input.splice(at..at, bytes);
            }
            5 => input.truncate(at),
            6 => {
                let len = 1 + rng.index((input.len() - at).min(64));
                let chunk = input[at..at + len].to_vec();
                input.splice(at..at, chunk);
            }
            _ => {
                let other = &seeds[rng.index(seeds.len())];
                let tail = rng.index(other.len());
                input.truncate(at);
                input.extend_from_slice(&other[tail..]);
            }
        }
    }
    input
}
