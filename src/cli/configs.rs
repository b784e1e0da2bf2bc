//! `sluice configs`: a topic's or broker's configs through the Kafka port (`describe`,
//! `alter`, as Kafka's `kafka-configs`), users' SCRAM credentials and client quotas in
//! kafka-configs.sh's form (`--entity-type users|clients`, `--user`, `--client`), and `keys`:
//! every configuration key Sluice knows, from the config registry (the table that parsing,
//! validation and DescribeConfigs read): name, type and range, default, whether it changes
//! while running, and what it does.

use std::io::Write;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use sluice::client::{
    AlterConfigOp, ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilter,
    ClientQuotaFilterComponent, DEFAULT_SCRAM_ITERATIONS, QUOTA_ENTITY_CLIENT_ID,
    QUOTA_ENTITY_USER, RESOURCE_BROKER, RESOURCE_TOPIC, UserScramCredentialAlteration,
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
    /// Client quotas and SCRAM credentials (kafka-configs.sh's `--entity-type users`).
    #[value(alias = "users")]
    User,
    /// Client quotas of client ids (kafka-configs.sh's `--entity-type clients`).
    #[value(alias = "clients")]
    Client,
}

impl EntityType {
    fn resource_type(self) -> i8 {
        match self {
            EntityType::Topic => RESOURCE_TOPIC,
            // Users and clients are answered before any config request.
            EntityType::Broker | EntityType::User | EntityType::Client => RESOURCE_BROKER,
        }
    }
}

/// Which topic, broker, user or client, as kafka-configs.sh names it: `--entity-type topics
/// --entity-name T`, or its shortcuts `--topic T`, `--broker N`, `--entity-default` (every
/// broker's cluster-wide default, the default user or client id); a user's client id with
/// `--entity-type` and `--entity-name` (or `--entity-default`) twice, or `--user U --client
/// C` (`--user-defaults`, `--client-defaults`).
#[derive(Args, Debug, Clone)]
pub struct Entity {
    /// topics, brokers, users or clients (users and clients together: a user's client id).
    #[arg(long, value_enum, ignore_case = true)]
    entity_type: Vec<EntityType>,
    /// The topic name, broker id, user or client id (once per --entity-type).
    #[arg(long, conflicts_with_all = ["topic", "broker"])]
    entity_name: Vec<String>,
    /// The brokers' cluster-wide default, or the default user or client id.
    #[arg(long, conflicts_with_all = ["topic", "broker"])]
    entity_default: bool,
    /// A topic: --entity-type topics --entity-name T.
    #[arg(long, conflicts_with_all = ["entity_type", "broker"])]
    topic: Option<String>,
    /// A broker by id: --entity-type brokers --entity-name N.
    #[arg(long, conflicts_with = "entity_type")]
    broker: Option<String>,
    /// A user: --entity-type users --entity-name U.
    #[arg(long, conflicts_with_all = ["entity_type", "topic", "broker", "user_defaults"])]
    user: Option<String>,
    /// The default user: --entity-type users --entity-default.
    #[arg(long, conflicts_with_all = ["entity_type", "topic", "broker"])]
    user_defaults: bool,
    /// A client id: --entity-type clients --entity-name C.
    #[arg(long, conflicts_with_all = ["entity_type", "topic", "broker", "client_defaults"])]
    client: Option<String>,
    /// The default client id: --entity-type clients --entity-default.
    #[arg(long, conflicts_with_all = ["entity_type", "topic", "broker"])]
    client_defaults: bool,
}

/// One part of a client quota entity as the command line names it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Named(String),
    Default,
    /// Every one of its type (describe only).
    Every,
}

/// What a configs command is about.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A topic's or broker's configs ("" for the brokers' default).
    Config(EntityType, String),
    /// Users and client ids: client quotas, and a user's SCRAM credentials.
    Clients {
        user: Option<Part>,
        client: Option<Part>,
    },
}

impl Entity {
    fn resolve(&self) -> anyhow::Result<Target> {
        if let Some(topic) = &self.topic {
            return Ok(Target::Config(EntityType::Topic, topic.clone()));
        }
        if let Some(broker) = &self.broker {
            return Ok(Target::Config(EntityType::Broker, broker.clone()));
        }
        let flag = |name: &Option<String>, default: bool| match (name, default) {
            (Some(name), _) => Some(Part::Named(name.clone())),
            (None, true) => Some(Part::Default),
            (None, false) => None,
        };
        let user = flag(&self.user, self.user_defaults);
        let client = flag(&self.client, self.client_defaults);
        if user.is_some() || client.is_some() {
            return Ok(Target::Clients { user, client });
        }
        let types = &self.entity_type;
        let Some(&first) = types.first() else {
            anyhow::bail!(
                "what to configure? give --entity-type topics|brokers|users|clients with --entity-name, or --topic T, --broker N, --user U, --client C"
            );
        };
        let names = &self.entity_name;
        if matches!(first, EntityType::Topic | EntityType::Broker) {
            if types.len() > 1 || names.len() > 1 {
                anyhow::bail!("one {} at a time", entity_label(first));
            }
            return match (names.first(), self.entity_default) {
                (Some(name), false) => Ok(Target::Config(first, name.clone())),
                (None, true) if first == EntityType::Broker => {
                    Ok(Target::Config(first, String::new()))
                }
                (None, true) => anyhow::bail!("--entity-default is for brokers, users and clients"),
                (Some(_), true) => {
                    anyhow::bail!("give --entity-name or --entity-default, not both")
                }
                (None, false) => anyhow::bail!(
                    "which {}? give --entity-name{}",
                    entity_label(first),
                    if first == EntityType::Broker {
                        " (a broker id) or --entity-default"
                    } else {
                        ""
                    }
                ),
            };
        }
        let mut sorted = types.clone();
        sorted.sort_by_key(|t| *t as u8);
        sorted.dedup();
        if sorted.len() != types.len()
            || types
                .iter()
                .any(|t| matches!(t, EntityType::Topic | EntityType::Broker))
        {
            anyhow::bail!(
                "--entity-type users and clients may be given together (a user's client id), each once; topics and brokers alone"
            );
        }
        let defaults = usize::from(self.entity_default);
        if names.len() + defaults > types.len() {
            anyhow::bail!("more --entity-name/--entity-default than --entity-type");
        }
        if types.len() == 2 && defaults == 1 {
            anyhow::bail!(
                "which of users and clients is the default? say it with --user U|--user-defaults and --client C|--client-defaults"
            );
        }
        let (mut user, mut client) = (None, None);
        for (at, entity_type) in types.iter().enumerate() {
            let part = match names.get(at) {
                Some(name) if name.is_empty() => Part::Default,
                Some(name) => Part::Named(name.clone()),
                None if self.entity_default => Part::Default,
                None => Part::Every,
            };
            match entity_type {
                EntityType::User => user = Some(part),
                _ => client = Some(part),
            }
        }
        Ok(Target::Clients { user, client })
    }
}

fn entity_label(entity_type: EntityType) -> &'static str {
    match entity_type {
        EntityType::Topic => "topic",
        EntityType::Broker => "broker",
        EntityType::User => "user",
        EntityType::Client => "client",
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
    /// static broker, default), only those set unless --all; or the client quotas of users
    /// and client ids, and users' SCRAM credentials.
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
    /// Changes a topic's or broker's configs (IncrementalAlterConfigs; a broker's dynamic keys
    /// only, --entity-default for the cluster default), or the client quotas of users and
    /// client ids (AlterClientQuotas) and users' SCRAM credentials; others keep their values.
    #[command(after_help = "Examples (kafka-configs.sh's syntax):
  sluice configs --alter --entity-type topics --entity-name orders \\
      --add-config 'retention.ms=86400000,cleanup.policy=[compact,delete]'
  sluice configs --alter --topic orders --delete-config retention.ms,cleanup.policy
  sluice configs --alter --entity-type users --entity-name alice \\
      --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
  sluice configs --alter --entity-type clients --entity-default --add-config request_percentage=50
  sluice configs --alter --user alice --client app --delete-config producer_byte_rate")]
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

/// kafka-configs.sh's `--describe` of users and clients: the client quotas of the entities
/// named (strictly those: `--entity-type users` is every user entity, not users' client ids),
/// then, for users alone, their SCRAM mechanisms and iterations (never a secret).
async fn describe_clients(
    connect: &Connect,
    user: Option<&Part>,
    client: Option<&Part>,
    output: Format,
) -> anyhow::Result<()> {
    let admin = connect.admin().await?;
    let component = |entity_type: &str, part: &Part| match part {
        Part::Named(name) => ClientQuotaFilterComponent::of_entity(entity_type, Some(name)),
        Part::Default => ClientQuotaFilterComponent::of_entity(entity_type, None),
        Part::Every => ClientQuotaFilterComponent::of_entity_type(entity_type),
    };
    let components = [(QUOTA_ENTITY_USER, user), (QUOTA_ENTITY_CLIENT_ID, client)]
        .into_iter()
        .filter_map(|(entity_type, part)| part.map(|p| component(entity_type, p)))
        .collect();
    let quotas = admin
        .describe_client_quotas(&ClientQuotaFilter::contains_only(components))
        .await?;
    // SCRAM credentials belong to a user alone.
    let scram_users = match (user, client) {
        (Some(Part::Named(name)), None) => Some(vec![name.clone()]),
        (Some(Part::Every), None) => Some(Vec::new()),
        _ => None,
    };
    let users = match &scram_users {
        Some(named) => {
            match admin
                .describe_user_scram_credentials((!named.is_empty()).then_some(&named[..]))
                .await
            {
                Ok(users) => users,
                // A named user with client quotas and no credential.
                Err(error)
                    if error.code() == Some(sluice::protocol::errors::RESOURCE_NOT_FOUND) =>
                {
                    Vec::new()
                }
                Err(error) => return Err(error.into()),
            }
        }
        None => Vec::new(),
    };
    match output {
        Format::Json => {
            let value = json!({
                "client_quotas": quotas
                    .iter()
                    .map(|(entity, values)| json!({ "entity": entity.0, "quotas": values }))
                    .collect::<Vec<_>>(),
                "scram_credentials": users
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
                    .collect::<Vec<_>>(),
            });
            println!("{value}");
        }
        Format::Text => {
            for (entity, values) in &quotas {
                let values: Vec<String> = values
                    .iter()
                    .map(|(key, value)| format!("{key}={}", java_double(*value)))
                    .collect();
                println!("Quota configs for {entity} are {}", values.join(", "));
            }
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

/// A double as Java prints it (kafka-configs.sh shows quotas so): `1024.0`, `12.5`.
fn java_double(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e7 {
        format!("{value:.1}")
    } else {
        value.to_string()
    }
}

/// A SCRAM mechanism's name in `--add-config`/`--delete-config`, or `None` for a quota key.
fn scram_mechanism(name: &str) -> Option<Mechanism> {
    Mechanism::from_name(&name.trim().to_ascii_uppercase()).filter(|m| m.is_scram())
}

/// kafka-configs.sh's `--alter` of users and clients: client quota keys (`producer_byte_rate`,
/// `consumer_byte_rate`, `request_percentage`) go to AlterClientQuotas for the entity named;
/// for a user alone, `--add-config 'SCRAM-SHA-512=[iterations=8192,password=secret]'` sets a
/// credential (the password salted here) and `--delete-config SCRAM-SHA-512` removes one,
/// one request per mechanism (the broker, as Kafka's, refuses a user named twice in one).
async fn alter_clients(
    connect: &Connect,
    user: Option<&Part>,
    client: Option<&Part>,
    add: Vec<ConfigList>,
    delete: Vec<String>,
) -> anyhow::Result<()> {
    let mut entity = ClientQuotaEntity::default();
    for (entity_type, part, label) in [
        (QUOTA_ENTITY_USER, user, "user"),
        (QUOTA_ENTITY_CLIENT_ID, client, "client"),
    ] {
        entity = match part {
            None => entity,
            Some(Part::Named(name)) => entity.with(entity_type, Some(name)),
            Some(Part::Default) => entity.with(entity_type, None),
            Some(Part::Every) => {
                anyhow::bail!("which {label}? give --entity-name or --entity-default")
            }
        };
    }
    let scram_user = match (user, client) {
        (Some(Part::Named(name)), None) => Some(name.as_str()),
        _ => None,
    };
    let mut scram = Vec::new();
    let mut ops: Vec<(String, Option<f64>)> = Vec::new();
    for (name, value) in add.into_iter().flat_map(|list| list.0) {
        let Some(mechanism) = scram_mechanism(&name) else {
            let rate: f64 = value.trim().parse().map_err(|_| {
                anyhow::anyhow!("Cannot parse quota configuration value for {name}: {value:?}")
            })?;
            ops.push((name, Some(rate)));
            continue;
        };
        let Some(user) = scram_user else {
            anyhow::bail!(
                "{name} is a SCRAM credential: it belongs to one user (--entity-type users --entity-name U), not to {entity}"
            );
        };
        scram.push(scram_upsert(user, &name, mechanism, &value)?);
    }
    for name in delete.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        match (scram_mechanism(name), scram_user) {
            (Some(mechanism), Some(user)) => {
                scram.push(UserScramCredentialAlteration::delete(user, mechanism));
            }
            (Some(_), None) => anyhow::bail!(
                "{name} is a SCRAM credential: it belongs to one user, not to {entity}"
            ),
            (None, _) => ops.push((name.to_owned(), None)),
        }
    }
    let admin = connect.admin().await?;
    if !ops.is_empty() {
        let alteration = ClientQuotaAlteration {
            entity: entity.clone(),
            ops,
        };
        for (_, outcome) in admin.alter_client_quotas(&[alteration], false).await? {
            outcome?;
        }
    }
    for alteration in scram {
        for (_, outcome) in admin
            .alter_user_scram_credentials(std::slice::from_ref(&alteration))
            .await?
        {
            outcome?;
        }
    }
    match scram_user {
        Some(user) => println!("Completed updating config for user {user}."),
        None => println!("Completed updating config for {entity}."),
    }
    Ok(())
}

/// `SCRAM-SHA-512=[iterations=8192,password=secret]` (kafka-configs.sh's form) for `user`.
fn scram_upsert(
    user: &str,
    name: &str,
    mechanism: Mechanism,
    value: &str,
) -> anyhow::Result<UserScramCredentialAlteration> {
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
    Ok(UserScramCredentialAlteration::Upsert {
        user: user.to_owned(),
        mechanism,
        iterations,
        password: password.into_bytes(),
    })
}

pub fn run(command: ConfigsCommand) -> anyhow::Result<()> {
    match command {
        ConfigsCommand::Describe {
            entity,
            all,
            connect,
            output,
        } => block_on(async move {
            let (entity_type, entity_name) = match entity.resolve()? {
                Target::Config(entity_type, name) => (entity_type, name),
                Target::Clients { user, client } => {
                    return describe_clients(&connect, user.as_ref(), client.as_ref(), output)
                        .await;
                }
            };
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
                                "source": sluice::console::report::config_source_name(e.source),
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
                                sluice::console::report::config_source_name(e.source).to_owned(),
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
            let target = entity.resolve()?;
            if add.is_empty() && delete.is_empty() {
                anyhow::bail!("nothing to change: give --add-config or --delete-config");
            }
            let (entity_type, entity_name) = match target {
                Target::Config(entity_type, name) => (entity_type, name),
                Target::Clients { user, client } => {
                    return alter_clients(&connect, user.as_ref(), client.as_ref(), add, delete)
                        .await;
                }
            };
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

    #[derive(clap::Parser)]
    struct Line {
        #[command(flatten)]
        entity: Entity,
    }

    fn target(args: &str) -> anyhow::Result<Target> {
        use clap::Parser;
        let line = Line::try_parse_from(std::iter::once("configs").chain(args.split(' ')))?;
        line.entity.resolve()
    }

    fn named(name: &str) -> Option<Part> {
        Some(Part::Named(name.into()))
    }

    #[test]
    fn kafka_configs_entity_flags_name_users_clients_and_their_defaults() {
        let clients = |user, client| Target::Clients { user, client };
        assert_eq!(
            target("--entity-type users --entity-name alice").unwrap(),
            clients(named("alice"), None)
        );
        assert_eq!(
            target("--entity-type clients --entity-default").unwrap(),
            clients(None, Some(Part::Default))
        );
        assert_eq!(
            target("--entity-type users").unwrap(),
            clients(Some(Part::Every), None)
        );
        assert_eq!(
            target(
                "--entity-type users --entity-name alice --entity-type clients --entity-name app"
            )
            .unwrap(),
            clients(named("alice"), named("app"))
        );
        assert_eq!(
            target("--user alice --client-defaults").unwrap(),
            clients(named("alice"), Some(Part::Default))
        );
        assert_eq!(
            target("--user-defaults").unwrap(),
            clients(Some(Part::Default), None)
        );
        assert_eq!(
            target("--entity-type brokers --entity-default").unwrap(),
            Target::Config(EntityType::Broker, String::new())
        );
        assert_eq!(
            target("--topic orders").unwrap(),
            Target::Config(EntityType::Topic, "orders".into())
        );
        for ambiguous in [
            "--entity-type users --entity-name a --entity-type clients --entity-default",
            "--entity-type users --entity-type users",
            "--entity-type topics --entity-type users",
            "--entity-type topics --entity-default",
        ] {
            assert!(target(ambiguous).is_err(), "{ambiguous}");
        }
        assert_eq!(java_double(1024.0), "1024.0");
        assert_eq!(java_double(12.5), "12.5");
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
