//! The `sluice` command line. Today: `sluice perf log`, the storage engine benchmark.

mod perf;

use clap::{Parser, Subcommand};

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
    /// Benchmarks, reported beside the raw limits of this machine measured in the same run.
    Perf {
        #[command(subcommand)]
        target: perf::Target,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Perf { target } => perf::run(target),
    }
}
