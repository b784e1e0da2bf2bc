//! The `sluice` command line: `sluice server` runs a node; `sluice perf` benchmarks.

#[global_allocator]
static ALLOCATOR: sluice::lazy_alloc::LazyHugeAlloc = sluice::lazy_alloc::LazyHugeAlloc;

mod cli;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A Kafka-compatible distributed commit log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The metadata quorum: status, adding and removing voters.
    Cluster {
        #[command(subcommand)]
        command: cli::cluster::ClusterCommand,
    },
    /// A topic's or broker's configs (describe, alter, as kafka-configs.sh), and `keys`: every
    /// topic and broker key Sluice knows.
    Configs {
        #[command(subcommand)]
        command: cli::configs::ConfigsCommand,
    },
    /// Topics through a broker's Kafka port: create, list, describe, alter, delete,
    /// elect-leaders and reassign (moves a partition's replicas).
    ///
    /// kafka-topics.sh's spelling works too: `sluice topics --create --topic T --partitions 3`.
    /// Every client command waits at most --timeout-ms (30 s) for a broker to answer, saying so
    /// on stderr.
    ///
    /// Exit codes of the client commands: 0 done, 1 failed, 2 bad usage, 3 no broker
    /// reachable, 4 the cluster refused with a Kafka error (named in the message).
    Topics {
        #[command(subcommand)]
        command: cli::topics::TopicsCommand,
    },
    /// A Kafka Connect worker: Connect's REST API on 127.0.0.1:8083, the file connectors.
    Connect(cli::connect::ConnectArgs),
    /// Mirrors topics and consumer group offsets between clusters (MirrorMaker 2's model).
    Mirror(cli::mirror::MirrorArgs),
    /// Writes standard input to a topic, a record per line (a console producer).
    Produce(cli::produce::ProduceArgs),
    /// Prints a topic's records (a console consumer): from the end, the beginning, an offset,
    /// or a consumer group's committed offsets.
    Consume(cli::consume::ConsumeArgs),
    /// Consumer groups through a broker's Kafka port: list, describe (lag), reset-offsets,
    /// delete.
    Groups {
        #[command(subcommand)]
        command: cli::groups::GroupsCommand,
    },
    /// Kafka transactions, as kafka-transactions.sh: list, describe a transactional id,
    /// describe-producers of a partition, abort a hanging transaction.
    Transactions(cli::transactions::TransactionsArgs),
    /// SCRAM users, as kafka-configs.sh --entity-type users: create (or replace) a user's
    /// credential, list users and their mechanisms, delete credentials.
    Users(cli::users::UsersArgs),
    /// ACLs, as kafka-acls.sh: add, list, remove (--allow-principal, --operation, --topic,
    /// --group, --cluster, --producer, --consumer, ...).
    Acls(cli::acls::AclsArgs),
    /// Each broker's log dirs and the replicas in them (size on disk, lag), as
    /// kafka-log-dirs.sh --describe prints them (--broker-list, --topic-list).
    LogDirs(cli::log_dirs::LogDirsArgs),
    /// Runs a node. With no --config: a single-node cluster on 127.0.0.1:9092 (Kafka),
    /// :9093 (quorum), :9644 (HTTP), data in ./data.
    Server {
        /// A server.properties file (Kafka's keys).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// key=value, applied after the file (repeatable), like Kafka's --override.
        #[arg(long = "override", value_parser = cli::common::parse_key_value)]
        overrides: Vec<(String, String)>,
        /// A SCRAM credential created when this node starts for the first time, unless it
        /// exists (repeatable), as kafka-storage.sh format --add-scram:
        /// 'SCRAM-SHA-512=[name=admin,password=admin-secret]'. For clusters whose listeners
        /// take only SCRAM, where nobody could log in to create the first user.
        #[arg(long = "add-scram", value_name = "MECHANISM=[name=USER,password=PASSWORD]",
              value_parser = sluice::node::scram_bootstrap::BootstrapCredential::parse)]
        add_scram: Vec<sluice::node::scram_bootstrap::BootstrapCredential>,
    },
    /// Random and mutated requests through the request path of an in-process single-node
    /// broker: crashes, slow inputs, peak memory.
    #[command(hide = true)]
    Fuzz(cli::fuzz::FuzzArgs),
    /// Benchmarks, reported beside the raw limits of this machine measured in the same run.
    Perf {
        #[command(subcommand)]
        target: cli::perf::Target,
    },
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // The error chain, without a backtrace: an operator reads this.
            eprintln!("error: {}", error_chain(&error));
            std::process::ExitCode::from(cli::common::exit_code(&error))
        }
    }
}

/// The error and its causes, each said once: a cause whose text an outer error already
/// includes (thiserror variants often print their source) is not repeated.
fn error_chain(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

fn run() -> anyhow::Result<()> {
    // Kafka's spellings first (`topics --create` is `topics create`), then the parser; a flag
    // it does not know is explained by the closest real one.
    let args = cli::habits::subcommand_first(
        cli::habits::rewrite(std::env::args_os().collect()),
        &Cli::command(),
    );
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(error) => cli::habits::explain(error, &Cli::command(), &args).exit(),
    };
    if !matches!(
        cli.command,
        Command::Server { .. } | Command::Connect(_) | Command::Mirror(_)
    ) {
        // A client command piped into `head` ends quietly when the reader goes away, as
        // Unix tools do. (SIGPIPE stays ignored: the network clients write to sockets
        // without MSG_NOSIGNAL, and a peer closing one must not kill the process.)
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if message.starts_with("failed printing to stdout") {
                std::process::exit(0);
            }
            default_hook(info);
        }));
    }
    // A server narrates what it does; a benchmark prints its figures and only warnings.
    let default_level = match cli.command {
        // openraft reports every failed RPC while a voter is down (dozens of ERRORs a
        // minute); the quorum's network says a peer went away and came back, once each.
        Command::Server { .. } => "info,openraft=off",
        // A worker narrates as a server does.
        Command::Connect(_) | Command::Mirror(_) => "info",
        Command::Perf { .. }
        | Command::Cluster { .. }
        | Command::Topics { .. }
        | Command::Groups { .. }
        | Command::Transactions(_)
        | Command::Users(_)
        | Command::Acls(_)
        | Command::LogDirs(_)
        | Command::Produce(_)
        | Command::Consume(_)
        | Command::Configs { .. } => "warn",
        // Refused requests are the point: only errors.
        Command::Fuzz(_) => "error",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_level.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Perf { target } => cli::perf::run(target),
        Command::Cluster { command } => cli::cluster::run(command),
        Command::Topics { command } => cli::topics::run(command),
        Command::Groups { command } => cli::groups::run(command),
        Command::Transactions(args) => cli::transactions::run(args),
        Command::Users(args) => cli::users::run(args),
        Command::Acls(args) => cli::acls::run(args),
        Command::LogDirs(args) => cli::log_dirs::run(args),
        Command::Connect(args) => cli::connect::run(args),
        Command::Mirror(args) => cli::mirror::run(args),
        Command::Produce(args) => cli::produce::run(args),
        Command::Consume(args) => cli::consume::run(args),
        Command::Configs { command } => cli::configs::run(command),
        Command::Fuzz(args) => cli::fuzz::run(args),
        Command::Server {
            config,
            overrides,
            add_scram,
        } => server(config.as_deref(), &overrides, add_scram),
    }
}

fn server(
    path: Option<&std::path::Path>,
    overrides: &[(String, String)],
    add_scram: Vec<sluice::node::scram_bootstrap::BootstrapCredential>,
) -> anyhow::Result<()> {
    let (config, unknown) = sluice::config::ServerConfig::load(path, overrides)
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    for key in unknown {
        tracing::warn!("{key}");
    }
    raise_open_files_limit();
    bound_index_mappings();
    let runtime = server_runtime()?;
    runtime.block_on(async move {
        let node = sluice::node::Node::start_with_scram_bootstrap(config, add_scram).await?;
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
            _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
        }
        node.shutdown().await?;
        anyhow::Ok(())
    })
}

/// The node's runtime. Its threads float across CPUs (with `thread.affinity` the Kafka
/// listener's connections are served by pinned network threads of their own,
/// `sluice::server::network`); a blocking-pool thread started from a pinned thread widens
/// its affinity back first.
fn server_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice")
        .on_thread_start(sluice::thread_affinity::unpin_current_thread)
        .build()?)
}

/// Gives half of `vm.max_map_count` to the mappings of sealed indexes (the rest is for the
/// allocator, thread stacks and libraries), and logs it: mappings beyond it are unmapped,
/// the least recently used first, and mapped again on use (see `log::handles`).
fn bound_index_mappings() {
    let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok());
    let Some(max_map_count) = max_map_count else {
        tracing::info!(
            index_mappings_max = sluice::log::handles::INDEX_MAPS.limit(),
            "vm.max_map_count unreadable: keeping the default bound on index mappings"
        );
        return;
    };
    sluice::log::handles::INDEX_MAPS.set_limit(max_map_count / 2);
    tracing::info!(
        max_map_count,
        index_mappings_max = sluice::log::handles::INDEX_MAPS.limit(),
        "memory mappings limit"
    );
}

/// Raises the soft limit on open files to the hard limit (segments and connections hold
/// descriptors; distributions default the soft limit far below the hard one), gives half
/// of it to open segment files, and logs all three, so an operator sees what the broker can
/// open.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limits into the struct passed; nothing else is touched.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot read the open files limit");
        return;
    }
    let soft_before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct passed; raising the soft limit up to the hard
        // one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        } else {
            tracing::warn!(error = %std::io::Error::last_os_error(), soft = soft_before, hard = limit.rlim_max, "cannot raise the open files limit");
        }
    }
    // Half the descriptors for segment files, the rest for connections, indexes being
    // opened, checkpoints and the quorum: open segments are a bounded set, not one per
    // segment (see `log::handles`).
    let segment_files_max = usize::try_from(limit.rlim_cur / 2).unwrap_or(usize::MAX);
    sluice::log::handles::SEGMENT_FILES.set_limit(segment_files_max);
    tracing::info!(
        soft_before,
        soft = limit.rlim_cur,
        hard = limit.rlim_max,
        segment_files_max = sluice::log::handles::SEGMENT_FILES.limit(),
        "open files limit"
    );
}
