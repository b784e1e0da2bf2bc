//! `sluice configs`: a topic's or broker's configs through the Kafka port (`describe`,
//! `alter`, as Kafka's `kafka-configs`), and `keys`: every configuration key Sluice knows, from
//! the config registry (the table that parsing, validation and DescribeConfigs read): name,
//! type and range, default, whether it changes while running, and what it does.

use std::io::Write;

use clap::{Subcommand, ValueEnum};
use serde_json::json;
use sluice::client::{AlterConfigOp, RESOURCE_BROKER, RESOURCE_TOPIC};
use sluice::config::registry::{self, Scope};

use super::common::{Connect, Format, block_on, parse_key_value, print_table};

/// What a config belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EntityType {
    Topic,
    Broker,
}

impl EntityType {
    fn resource_type(self) -> i8 {
        match self {
            EntityType::Topic => RESOURCE_TOPIC,
            EntityType::Broker => RESOURCE_BROKER,
        }
    }
}

#[derive(Subcommand)]
pub enum ConfigsCommand {
    /// A topic's or broker's configs: value and where it comes from (topic, dynamic broker,
    /// static broker, default). Only those set, unless --all.
    Describe {
        #[arg(long, value_enum)]
        entity_type: EntityType,
        /// The topic name or broker id.
        #[arg(long)]
        entity_name: String,
        /// Also the keys left at their defaults.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        connect: Connect,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// Changes a topic's or broker's configs (IncrementalAlterConfigs); others keep their
    /// values. A broker's dynamic keys only; an empty --entity-name for the cluster default.
    Alter {
        #[arg(long, value_enum)]
        entity_type: EntityType,
        #[arg(long)]
        entity_name: String,
        /// key=value to set (repeatable).
        #[arg(long = "add-config", value_parser = parse_key_value)]
        add: Vec<(String, String)>,
        /// A key to return to its default (repeatable).
        #[arg(long = "delete-config")]
        delete: Vec<String>,
        #[command(flatten)]
        connect: Connect,
    },
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
        ConfigsCommand::Describe {
            entity_type,
            entity_name,
            all,
            connect,
            output,
        } => block_on(async move {
            let entries = connect
                .admin()?
                .describe_configs(entity_type.resource_type(), &entity_name)
                .await?;
            let shown: Vec<_> = entries.iter().filter(|e| all || !e.is_default).collect();
            match output {
                Format::Json => {
                    let value: Vec<_> = shown
                        .iter()
                        .map(|e| {
                            json!({
                                "name": e.name,
                                "value": e.value,
                                "source": source_name(e.source),
                                "read_only": e.read_only,
                                "sensitive": e.is_sensitive,
                            })
                        })
                        .collect();
                    println!("{}", json!(value));
                }
                Format::Text => {
                    let rows: Vec<Vec<String>> = shown
                        .iter()
                        .map(|e| {
                            vec![
                                e.name.clone(),
                                match (&e.value, e.is_sensitive) {
                                    (_, true) => "(sensitive)".to_owned(),
                                    (Some(v), false) => v.clone(),
                                    (None, false) => "(null)".to_owned(),
                                },
                                source_name(e.source).to_owned(),
                            ]
                        })
                        .collect();
                    print_table(&["name", "value", "source"], &rows);
                }
            }
            Ok(())
        }),
        ConfigsCommand::Alter {
            entity_type,
            entity_name,
            add,
            delete,
            connect,
        } => block_on(async move {
            if add.is_empty() && delete.is_empty() {
                anyhow::bail!("nothing to change: give --add-config or --delete-config");
            }
            let changes: Vec<(String, AlterConfigOp)> = add
                .into_iter()
                .map(|(k, v)| (k, AlterConfigOp::Set(v)))
                .chain(delete.into_iter().map(|k| (k, AlterConfigOp::Delete)))
                .collect();
            connect
                .admin()?
                .alter_configs(entity_type.resource_type(), &entity_name, &changes, false)
                .await?;
            println!("{} config(s) changed", changes.len());
            Ok(())
        }),
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
                out.push(String::new());
                out.push(
                    "Kafka topic keys Sluice does not implement (refused with INVALID_CONFIG):"
                        .into(),
                );
                for (name, doc) in registry::UNIMPLEMENTED_TOPIC_KEYS {
                    out.push(format!("  {name:<38} refused; {doc}"));
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
                out.push(String::new());
                out.push(
                    "Kafka broker keys Sluice does not implement (refused: the node does not \
                     start; no effect: a warning at start):"
                        .into(),
                );
                for key in registry::UNIMPLEMENTED {
                    let name = if key.name.ends_with('.') {
                        format!("{}*", key.name)
                    } else {
                        key.name.to_owned()
                    };
                    let effect = match key.effect {
                        registry::UnimplementedEffect::Refused if key.accepted.is_empty() => {
                            "refused".to_owned()
                        }
                        registry::UnimplementedEffect::Refused => format!(
                            "refused unless {}",
                            key.accepted
                                .iter()
                                .map(|v| if v.is_empty() { "empty" } else { v })
                                .collect::<Vec<_>>()
                                .join(" or ")
                        ),
                        registry::UnimplementedEffect::NoEffect => "no effect".to_owned(),
                    };
                    out.push(format!("  {name:<38} {effect}; {}", key.doc));
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

/// Kafka's names of config sources (`ConfigEntry.ConfigSource`).
fn source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        _ => "UNKNOWN",
    }
}
