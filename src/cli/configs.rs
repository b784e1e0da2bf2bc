//! `sluice configs`: a topic's or broker's configs through the Kafka port (`describe`,
//! `alter`, as Kafka's `kafka-configs`), users' SCRAM credentials in kafka-configs.sh's form
//! (`--entity-type users`), and `keys`: every configuration key Sluice knows, from
//! the config registry (the table that parsing, validation and DescribeConfigs read): name,
//! type and range, default, whether it changes while running, and what it does.

use std::io::Write;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use sluice::client::{
    AlterConfigOp, DEFAULT_SCRAM_ITERATIONS, RESOURCE_BROKER, RESOURCE_TOPIC,
    UserScramCredentialAlteration,
};
use sluice::config::registry::{self, Scope};
use sluice::security::sasl::Mechanism;

use super::common::{Connect, Format, block_on, print_table};

/// What a config belongs to; Kafka's tools spell it in the plural (`topics`, `brokers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EntityType {
    #[value(alias = "topics")]
    Topic,
    #[value(alias = "brokers")]
    Broker,
    /// SCRAM credentials (kafka-configs.sh's `--entity-type users`), not configs.
    #[value(alias = "users")]
    User,
}

impl EntityType {
    fn resource_type(self) -> i8 {
        match self {
            EntityType::Topic => RESOURCE_TOPIC,
            // Users are answered before any config request (their SCRAM credentials).
            EntityType::Broker | EntityType::User => RESOURCE_BROKER,
        }
    }
}

/// Which topic or broker, as kafka-configs.sh names it: `--entity-type topics --entity-name
/// T`, or its shortcuts `--topic T`, `--broker N`, `--entity-default` (every broker's
/// cluster-wide default).
#[derive(Args, Debug, Clone)]
pub struct Entity {
    #[arg(long, value_enum, ignore_case = true)]
    entity_type: Option<EntityType>,
    /// The topic name or broker id.
    #[arg(long, conflicts_with_all = ["topic", "broker", "entity_default"])]
    entity_name: Option<String>,
    /// The cluster-wide default of brokers (with --entity-type brokers).
    #[arg(long, conflicts_with_all = ["topic", "broker"])]
    entity_default: bool,
    /// A topic: --entity-type topics --entity-name T.
    #[arg(long, conflicts_with_all = ["entity_type", "broker"])]
    topic: Option<String>,
    /// A broker by id: --entity-type brokers --entity-name N.
    #[arg(long, conflicts_with = "entity_type")]
    broker: Option<String>,
}

impl Entity {
    /// The resource type and name, and how Kafka's tool says it ("topic t", "broker 1").
    fn resolve(&self) -> anyhow::Result<(EntityType, String)> {
        if let Some(topic) = &self.topic {
            return Ok((EntityType::Topic, topic.clone()));
        }
        if let Some(broker) = &self.broker {
            return Ok((EntityType::Broker, broker.clone()));
        }
        let Some(entity_type) = self.entity_type else {
            anyhow::bail!(
                "what to configure? give --entity-type topics|brokers with --entity-name, or --topic T, or --broker N"
            );
        };
        match (&self.entity_name, self.entity_default) {
            (Some(name), _) => Ok((entity_type, name.clone())),
            // Every user with a credential.
            (None, false) if entity_type == EntityType::User => Ok((entity_type, String::new())),
            (None, true) if entity_type == EntityType::Broker => Ok((entity_type, String::new())),
            (None, true) => anyhow::bail!("--entity-default is for --entity-type brokers"),
            (None, false) => anyhow::bail!(
                "which {}? give --entity-name{}",
                entity_label(entity_type),
                if entity_type == EntityType::Broker {
                    " (a broker id) or --entity-default"
                } else {
                    ""
                }
            ),
        }
    }
}

fn entity_label(entity_type: EntityType) -> &'static str {
    match entity_type {
        EntityType::Topic => "topic",
        EntityType::Broker => "broker",
        EntityType::User => "user",
    }
}

/// How kafka-configs.sh names an entity in its messages.
fn entity_text(entity_type: EntityType, name: &str) -> String {
    match (entity_type, name) {
        (EntityType::Broker, "") => "the brokers' cluster-wide default".to_owned(),
        (entity_type, name) => format!("{} {name}", entity_label(entity_type)),
    }
}

/// Kafka's `--add-config` syntax: `k1=v1,k2=[a,b],k3=v3`; a value in brackets may hold
/// commas (a list such as `cleanup.policy=[compact,delete]`), and is passed without them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigList(pub Vec<(String, String)>);

pub fn parse_config_list(text: &str) -> Result<ConfigList, String> {
    let mut pairs = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after_key) = rest
            .split_once('=')
            .ok_or_else(|| format!("{rest:?} is not key=value (in {text:?})"))?;
        let key = key.trim();
        if key.is_empty() || key.contains(',') {
            return Err(format!(
                "{key:?} is not a config key (in {text:?}); give key=value, comma-separated"
            ));
        }
        let (value, after_value) = if let Some(list) = after_key.strip_prefix('[') {
            let (inside, after) = list
                .split_once(']')
                .ok_or_else(|| format!("the list after {key}= has no closing ']' (in {text:?})"))?;
            if !after.is_empty() && !after.starts_with(',') {
                return Err(format!("text after {key}=[{inside}] (in {text:?})"));
            }
            (inside.to_owned(), after.strip_prefix(',').unwrap_or(after))
        } else {
            match after_key.split_once(',') {
                Some((value, after)) => (value.to_owned(), after),
                None => (after_key.to_owned(), ""),
            }
        };
        pairs.push((key.to_owned(), value.trim().to_owned()));
        rest = after_value;
    }
    if pairs.is_empty() {
        return Err("no key=value given".to_owned());
    }
    Ok(ConfigList(pairs))
}

#[derive(Subcommand)]
pub enum ConfigsCommand {
    /// A topic's or broker's configs: value and where it comes from (topic, dynamic broker,
    /// static broker, default). Only those set, unless --all.
    Describe {
        #[command(flatten)]
        entity: Entity,
        /// Also the keys left at their defaults.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        connect: Connect,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// Changes a topic's or broker's configs (IncrementalAlterConfigs); others keep their
    /// values. A broker's dynamic keys only; --entity-default for the cluster default.
    #[command(after_help = "Examples (kafka-configs.sh's syntax):
  sluice configs --alter --entity-type topics --entity-name orders \\
      --add-config 'retention.ms=86400000,cleanup.policy=[compact,delete]'
  sluice configs --alter --topic orders --delete-config retention.ms,cleanup.policy")]
    Alter {
        #[command(flatten)]
        entity: Entity,
        /// key=value to set, comma-separated; a list value in brackets: k=[a,b] (repeatable).
        #[arg(long = "add-config", value_parser = parse_config_list)]
        add: Vec<ConfigList>,
        /// Keys to return to their defaults, comma-separated (repeatable).
        #[arg(long = "delete-config", value_delimiter = ',')]
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

/// kafka-configs.sh's `--describe --entity-type users`: each user's SCRAM mechanisms and
/// iterations (never a secret).
async fn describe_users(connect: &Connect, user: &str, output: Format) -> anyhow::Result<()> {
    let named = [user.to_owned()];
    let users = connect
        .admin()
        .await?
        .describe_user_scram_credentials((!user.is_empty()).then_some(&named[..]))
        .await?;
    match output {
        Format::Json => {
            let value: Vec<_> = users
                .iter()
                .map(|u| {
                    json!({
                        "user": u.user,
                        "credentials": u.credentials.iter().map(|c| json!({
                            "mechanism": c.mechanism.name(),
                            "iterations": c.iterations,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            println!("{}", json!(value));
        }
        Format::Text => {
            for u in &users {
                let credentials: Vec<String> = u
                    .credentials
                    .iter()
                    .map(|c| format!("{}=iterations={}", c.mechanism.name(), c.iterations))
                    .collect();
                println!(
                    "SCRAM credential configs for user-principal '{}' are {}",
                    u.user,
                    credentials.join(", ")
                );
            }
        }
    }
    Ok(())
}

/// kafka-configs.sh's `--alter --entity-type users`: `--add-config
/// 'SCRAM-SHA-512=[iterations=8192,password=secret]'` sets a credential (the password salted
/// here), `--delete-config SCRAM-SHA-512` removes one. One request per mechanism: the broker,
/// as Kafka's, refuses a user named twice in one request.
async fn alter_user(
    connect: &Connect,
    user: &str,
    add: Vec<ConfigList>,
    delete: Vec<String>,
) -> anyhow::Result<()> {
    if user.is_empty() {
        anyhow::bail!("which user? give --entity-name");
    }
    let mechanism = |name: &str| {
        Mechanism::from_name(&name.trim().to_ascii_uppercase())
            .filter(|m| m.is_scram())
            .ok_or_else(|| {
                anyhow::anyhow!("{name} is not a SCRAM mechanism: SCRAM-SHA-256 or SCRAM-SHA-512")
            })
    };
    let mut alterations = Vec::new();
    for (name, value) in add.into_iter().flat_map(|list| list.0) {
        let mechanism = mechanism(&name)?;
        let mut iterations = DEFAULT_SCRAM_ITERATIONS;
        let mut password = None;
        for setting in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match setting.split_once('=') {
                Some(("iterations", n)) => {
                    iterations = n
                        .trim()
                        .parse()
                        .map_err(|_| anyhow::anyhow!("iterations={n} is not a number"))?;
                }
                Some(("password", p)) => password = Some(p.to_owned()),
                _ => anyhow::bail!(
                    "{name}=[{value}]: expected iterations=N and password=P (kafka-configs.sh's form)"
                ),
            }
        }
        let Some(password) = password else {
            anyhow::bail!("{name} needs password=... (e.g. '{name}=[password=secret]')");
        };
        alterations.push(UserScramCredentialAlteration::Upsert {
            user: user.to_owned(),
            mechanism,
            iterations,
            password: password.into_bytes(),
        });
    }
    for name in delete.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        alterations.push(UserScramCredentialAlteration::delete(
            user,
            mechanism(name)?,
        ));
    }
    let admin = connect.admin().await?;
    for alteration in alterations {
        for (_, outcome) in admin
            .alter_user_scram_credentials(std::slice::from_ref(&alteration))
            .await?
        {
            outcome?;
        }
    }
    println!("Completed updating config for user {user}.");
    Ok(())
}

pub fn run(command: ConfigsCommand) -> anyhow::Result<()> {
    match command {
        ConfigsCommand::Describe {
            entity,
            all,
            connect,
            output,
        } => block_on(async move {
            let (entity_type, entity_name) = entity.resolve()?;
            if entity_type == EntityType::User {
                return describe_users(&connect, &entity_name, output).await;
            }
            let entries = connect
                .admin()
                .await?
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
                    // kafka-configs.sh's heading, then a table.
                    println!(
                        "{} configs for {} are:",
                        if all { "All" } else { "Dynamic" },
                        entity_text(entity_type, &entity_name)
                    );
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
            entity,
            add,
            delete,
            connect,
        } => block_on(async move {
            let (entity_type, entity_name) = entity.resolve()?;
            if add.is_empty() && delete.is_empty() {
                anyhow::bail!("nothing to change: give --add-config or --delete-config");
            }
            if entity_type == EntityType::User {
                return alter_user(&connect, &entity_name, add, delete).await;
            }
            let changes: Vec<(String, AlterConfigOp)> = add
                .into_iter()
                .flat_map(|list| list.0)
                .map(|(k, v)| (k, AlterConfigOp::Set(v)))
                .chain(
                    delete
                        .into_iter()
                        .map(|k| k.trim().to_owned())
                        .filter(|k| !k.is_empty())
                        .map(|k| (k, AlterConfigOp::Delete)),
                )
                .collect();
            connect
                .admin()
                .await?
                .alter_configs(entity_type.resource_type(), &entity_name, &changes, false)
                .await?;
            println!(
                "Completed updating config for {}.",
                entity_text(entity_type, &entity_name)
            );
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
                    "Kafka topic keys Sluice does not implement (other values refused with INVALID_CONFIG):"
                        .into(),
                );
                for (name, accepted, doc) in registry::UNIMPLEMENTED_TOPIC_KEYS {
                    out.push(format!(
                        "  {name:<38} refused unless {}; {doc}",
                        registry::accepted_values(accepted)
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
                        registry::UnimplementedEffect::Refused => {
                            format!("refused unless {}", registry::accepted_values(key.accepted))
                        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> ConfigList {
        ConfigList(
            list.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn add_config_reads_kafka_comma_lists_with_bracketed_list_values() {
        assert_eq!(
            parse_config_list("retention.ms=1000,segment.bytes=1048576"),
            Ok(pairs(&[
                ("retention.ms", "1000"),
                ("segment.bytes", "1048576")
            ]))
        );
        assert_eq!(
            parse_config_list("cleanup.policy=[compact,delete],retention.ms=1000"),
            Ok(pairs(&[
                ("cleanup.policy", "compact,delete"),
                ("retention.ms", "1000")
            ]))
        );
        assert_eq!(
            parse_config_list("retention.ms=1000,cleanup.policy=[compact,delete]"),
            Ok(pairs(&[
                ("retention.ms", "1000"),
                ("cleanup.policy", "compact,delete")
            ]))
        );
        assert_eq!(
            parse_config_list("min.insync.replicas="),
            Ok(pairs(&[("min.insync.replicas", "")]))
        );
        for bad in ["retention.ms", "a=1,b", "p=[x,y", "p=[x]y", "=1", ""] {
            assert!(parse_config_list(bad).is_err(), "{bad}");
        }
    }
}
