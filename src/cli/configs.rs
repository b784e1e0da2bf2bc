//! `sluice configs keys`: every configuration key Sluice knows, from the config registry (the
//! table that parsing, validation and DescribeConfigs read): name, type and range, default,
//! whether it changes while running, and what it does.

use std::io::Write;

use clap::Subcommand;
use sluice::config::registry::{self, Scope};

#[derive(Subcommand)]
pub enum ConfigsCommand {
    /// Lists every topic and broker key with its type, range, default and documentation.
    Keys {
        /// Only topic keys (with the broker key each falls back to).
        #[arg(long, conflicts_with = "broker")]
        topic: bool,
        /// Only broker keys (`server.properties` and dynamic broker configs).
        #[arg(long)]
        broker: bool,
    },
}

pub fn run(command: ConfigsCommand) -> anyhow::Result<()> {
    match command {
        ConfigsCommand::Keys { topic, broker } => {
            let mut out: Vec<String> = Vec::new();
            if !broker {
                out.push("Topic keys (set per topic; the broker key gives the default):".into());
                for key in registry::topic_keys() {
                    out.push(format!(
                        "  {:<38} {}\n  {:<38} broker key {}{}; {}",
                        key.name,
                        key.summary(),
                        "",
                        key.broker_name(),
                        if key.dynamic { " (dynamic)" } else { "" },
                        key.doc
                    ));
                }
            }
            if !topic {
                if !broker {
                    out.push(String::new());
                }
                out.push(
                    "Broker keys (server.properties; dynamic ones also per broker or cluster-wide):"
                        .into(),
                );
                for key in registry::KEYS
                    .iter()
                    .filter(|k| !matches!(k.scope, Scope::Topic { .. }))
                {
                    out.push(format!(
                        "  {:<38} {}{}; {}",
                        key.name,
                        key.summary(),
                        if key.dynamic { ", dynamic" } else { "" },
                        key.doc
                    ));
                }
            }
            let text = out.join("\n") + "\n";
            match std::io::stdout().write_all(text.as_bytes()) {
                // A reader that stopped early (`| head`) is not an error.
                Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => other.map_err(Into::into),
            }
        }
    }
}
