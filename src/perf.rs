//! `sluice perf`: benchmarks.
use clap::Subcommand;

#[derive(Subcommand)]
pub enum Target {}

pub fn run(target: Target) -> anyhow::Result<()> {
    match target {}
}
