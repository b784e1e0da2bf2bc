//! `sluice acls`: ACLs through any broker's Kafka port, with `kafka-acls.sh`'s vocabulary and
//! the APIs it uses (CreateAcls, DescribeAcls, DeleteAcls; so it works against Kafka too):
//! `add`, `list` and `remove`.
//!
//! # What the flags mean (as in kafka-acls.sh)
//! - Resources: `--topic`, `--group`, `--transactional-id`, `--delegation-token` (each
//!   repeatable; `*` is every name) and `--cluster`, matched as `--resource-pattern-type`
//!   says: `literal` (the default) or `prefixed`; for `list` and `remove` also `any` (every
//!   pattern type, the name exactly) or `match` (every ACL that applies to the named resource).
//! - Entries: `--allow-principal`/`--deny-principal` (`User:alice`; `User:*` is every user),
//!   each from `--allow-host`/`--deny-host` (default `*`), for each `--operation` (default
//!   `All`). Every principal gets every operation from every one of its hosts.
//! - Roles: `--producer` is WRITE, DESCRIBE and CREATE on each topic and WRITE and DESCRIBE on
//!   each transactional id (IDEMPOTENT_WRITE on the cluster only with `--idempotent`: since
//!   Kafka 3.0, KIP-679, WRITE on a topic lets a producer be idempotent); `--consumer` is READ
//!   and DESCRIBE on each topic and READ on each group.
//! - `remove` deletes, for each resource, the ACLs the same flags would have added (so the
//!   flags of an `add` undo it), or every ACL on the resource when no principal is named. It
//!   does not prompt (`--force` is accepted), and says what it removed.
//!
//! The connection flags may come before the subcommand (`sluice acls --bootstrap-server H:P
//! list`).

use std::str::FromStr;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use sluice::client::Admin;
use sluice::security::acl::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclError,
    CLUSTER_NAME, Operation, PatternType, Permission, ResourcePattern, ResourcePatternFilter,
    ResourceType, WILDCARD, supported_operations,
};

use super::common::{Common, Format, block_on};

#[derive(Args)]
pub struct AclsArgs {
    #[command(subcommand)]
    command: AclsCommand,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand)]
pub enum AclsCommand {
    /// Adds ACLs: each principal, from each host, for each operation, on each resource.
    #[command(after_help = "Examples (kafka-acls.sh's flags):
  sluice acls add --allow-principal User:alice --operation Read --operation Describe --topic orders
  sluice acls add --allow-principal User:app --producer --topic orders --transactional-id orders-app
  sluice acls add --allow-principal User:app --consumer --topic orders --group app \\
      --resource-pattern-type prefixed")]
    Add {
        #[command(flatten)]
        resources: Resources,
        #[command(flatten)]
        entries: Entries,
        #[command(flatten)]
        roles: Roles,
    },
    /// Lists ACLs: every one, those on the resources named, or those of --principal.
    List {
        #[command(flatten)]
        resources: Resources,
        /// Only the ACLs of this principal (Type:name; repeatable).
        #[arg(long = "principal", value_name = "PRINCIPAL", value_parser = parse_principal)]
        principals: Vec<String>,
    },
    /// Removes the ACLs the same flags would add, or every ACL on the resources named when no
    /// principal is given; says what it removed.
    Remove {
        #[command(flatten)]
        resources: Resources,
        #[command(flatten)]
        entries: Entries,
        #[command(flatten)]
        roles: Roles,
        /// Accepted as kafka-acls.sh takes it: remove never prompts.
        #[arg(long)]
        force: bool,
    },
}

/// The resources an ACL is on, as kafka-acls.sh names them.
#[derive(Args, Debug, Clone, Default)]
pub struct Resources {
    /// A topic (`*`: every topic; repeatable).
    #[arg(long = "topic", value_name = "TOPIC")]
    topics: Vec<String>,
    /// A consumer group (`*`: every group; repeatable).
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// The cluster itself.
    #[arg(long)]
    cluster: bool,
    /// A transactional id (`*`: every one; repeatable).
    #[arg(long = "transactional-id", value_name = "ID")]
    transactional_ids: Vec<String>,
    /// A delegation token (`*`: every one; repeatable).
    #[arg(long = "delegation-token", value_name = "TOKEN")]
    delegation_tokens: Vec<String>,
    /// literal (default) or prefixed; to list or remove also any (every pattern type, the
    /// name exactly) or match (every ACL that applies to the named resource).
    #[arg(long, value_name = "TYPE", value_parser = parse_pattern_type)]
    resource_pattern_type: Option<PatternType>,
}

/// Who, from where, may or may not do what.
#[derive(Args, Debug, Clone, Default)]
pub struct Entries {
    /// A principal to allow, Type:name (`User:alice`; `User:*` is every user; repeatable).
    #[arg(long = "allow-principal", value_name = "PRINCIPAL", value_parser = parse_principal)]
    allow_principals: Vec<String>,
    /// A principal to deny (a DENY wins over every ALLOW; repeatable).
    #[arg(long = "deny-principal", value_name = "PRINCIPAL", value_parser = parse_principal)]
    deny_principals: Vec<String>,
    /// A host (IP address) the allowed principals may come from (default `*`; repeatable).
    #[arg(
        long = "allow-host",
        value_name = "HOST",
        requires = "allow_principals"
    )]
    allow_hosts: Vec<String>,
    /// A host the denied principals are denied from (default `*`; repeatable).
    #[arg(long = "deny-host", value_name = "HOST", requires = "deny_principals")]
    deny_hosts: Vec<String>,
    /// Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
    /// AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens or All (the default;
    /// repeatable; any case).
    #[arg(long = "operation", value_name = "OPERATION", value_parser = parse_operation)]
    operations: Vec<Operation>,
}

/// kafka-acls.sh's convenience roles, which stand for the operations they need.
#[derive(Args, Debug, Clone, Default)]
pub struct Roles {
    /// A producer: WRITE, DESCRIBE, CREATE on each topic; WRITE, DESCRIBE on each
    /// transactional id.
    #[arg(long, conflicts_with_all = ["operations", "deny_principals", "deny_hosts"])]
    producer: bool,
    /// A consumer: READ, DESCRIBE on each topic; READ on each group.
    #[arg(long, conflicts_with_all = ["operations", "deny_principals", "deny_hosts"])]
    consumer: bool,
    /// With --producer: also IDEMPOTENT_WRITE on the cluster (only brokers before Kafka 3.0
    /// need it).
    #[arg(long, requires = "producer")]
    idempotent: bool,
}

/// `Type:name`, as Kafka parses a principal.
fn parse_principal(value: &str) -> Result<String, String> {
    let value = value.trim();
    match value.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(value.to_owned()),
        _ => Err(format!(
            "{value:?} is not a principal: give Type:name, e.g. User:alice (User:* for every user)"
        )),
    }
}

/// An operation by Kafka's name in any case, `_` or `-` (`ClusterAction`, `CLUSTER_ACTION`,
/// `cluster-action`).
fn parse_operation(value: &str) -> Result<Operation, String> {
    match Operation::from_str(value) {
        Ok(Operation::Unknown) | Err(_) => Err(format!(
            "{value:?} is not an operation: give one of {}",
            operation_names()
        )),
        Ok(operation) => Ok(operation),
    }
}

fn operation_names() -> String {
    Operation::VALUES
        .iter()
        .filter(|operation| operation.is_concrete())
        .map(|operation| operation.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A pattern type by Kafka's name in any case (UNKNOWN refused, as kafka-acls.sh does).
fn parse_pattern_type(value: &str) -> Result<PatternType, String> {
    match PatternType::from_str(value) {
        Ok(PatternType::Unknown) | Err(_) => Err(format!(
            "{value:?} is not a resource pattern type: give literal, prefixed, any or match"
        )),
        Ok(pattern_type) => Ok(pattern_type),
    }
}

pub fn run(args: AclsArgs) -> anyhow::Result<()> {
    let AclsArgs { command, common } = args;
    // Arguments are checked before any connection is made.
    let action = match command {
        AclsCommand::Add {
            resources,
            entries,
            roles,
        } => Action::Add(additions(&resources, &entries, &roles)?),
        AclsCommand::List {
            resources,
            principals,
        } => Action::List(list_filters(&resources)?, principals),
        AclsCommand::Remove {
            resources,
            entries,
            roles,
            force: _,
        } => Action::Remove(removal_filters(&resources, &entries, &roles)?),
    };
    block_on(async move {
        let admin = common.connect().admin().await?;
        let outcome = match action {
            Action::Add(additions) => add(&admin, additions).await,
            Action::List(filters, principals) => {
                list(&admin, &filters, &principals, common.output).await
            }
            Action::Remove(filters) => remove(&admin, &filters).await,
        };
        admin.close();
        outcome
    })
}

/// What a command will send, worked out from its flags.
enum Action {
    /// Per resource pattern, the bindings to create on it.
    Add(Vec<(ResourcePattern, Vec<AclBinding>)>),
    /// The pattern filters to describe, and the principals to list the ACLs of.
    List(Vec<ResourcePatternFilter>, Vec<String>),
    /// The filters whose ACLs to delete.
    Remove(Vec<AclBindingFilter>),
}

/// The pattern filters the resource flags name, in kafka-acls.sh's order (topics, cluster,
/// groups, transactional ids, delegation tokens), each with `pattern_type`.
fn resource_filters(
    resources: &Resources,
    pattern_type: PatternType,
) -> anyhow::Result<Vec<ResourcePatternFilter>> {
    let named = |resource_type: ResourceType, names: &[String]| {
        names
            .iter()
            .map(|name| ResourcePatternFilter {
                resource_type,
                name: Some(name.trim().to_owned()),
                pattern_type,
            })
            .collect::<Vec<_>>()
    };
    let mut filters = named(ResourceType::Topic, &resources.topics);
    if resources.cluster {
        if pattern_type == PatternType::Prefixed {
            bail!("--cluster names one resource, kafka-cluster: its ACLs are literal");
        }
        filters.push(ResourcePatternFilter {
            resource_type: ResourceType::Cluster,
            name: Some(CLUSTER_NAME.to_owned()),
            pattern_type,
        });
    }
    filters.extend(named(ResourceType::Group, &resources.groups));
    filters.extend(named(
        ResourceType::TransactionalId,
        &resources.transactional_ids,
    ));
    filters.extend(named(
        ResourceType::DelegationToken,
        &resources.delegation_tokens,
    ));
    if let Some(empty) = filters.iter().find(|f| f.name.as_deref() == Some("")) {
        bail!("an empty {} name", empty.resource_type);
    }
    Ok(filters)
}

const NO_RESOURCE: &str = "no resource given: name one with --topic, --group, --cluster, --transactional-id or \
     --delegation-token";

/// Each resource's entries, as kafka-acls.sh builds them from the entry flags and roles:
/// without a role, every principal with every `--operation` (default ALL) from every host;
/// with roles, the operations each role needs on each resource type. Refused: no resource,
/// a role without the resources it needs, an operation the resource type has no use for.
fn resource_entries(
    resources: &Resources,
    entries: &Entries,
    roles: &Roles,
) -> anyhow::Result<Vec<(ResourcePatternFilter, Vec<AccessControlEntry>)>> {
    let pattern_type = resources
        .resource_pattern_type
        .unwrap_or(PatternType::Literal);
    let filters = resource_filters(resources, pattern_type)?;
    if filters.is_empty() {
        bail!(NO_RESOURCE);
    }
    if roles.producer && resources.topics.is_empty() {
        bail!("--producer needs --topic");
    }
    if roles.consumer {
        if resources.topics.is_empty() || resources.groups.is_empty() {
            bail!("--consumer needs --topic and --group");
        }
        if !roles.producer && (resources.cluster || !resources.transactional_ids.is_empty()) {
            bail!("--consumer has no use for --cluster or --transactional-id (without --producer)");
        }
    }
    let mut planned: Vec<(ResourcePatternFilter, Vec<AccessControlEntry>)> = Vec::new();
    let mut plan = |filter: ResourcePatternFilter, operations: &[Operation]| {
        let entries = entries_for(entries, operations);
        match planned.iter_mut().find(|(f, _)| *f == filter) {
            Some((_, existing)) => {
                for entry in entries {
                    if !existing.contains(&entry) {
                        existing.push(entry);
                    }
                }
            }
            None => planned.push((filter, entries)),
        }
    };
    if !roles.producer && !roles.consumer {
        let operations = if entries.operations.is_empty() {
            vec![Operation::All]
        } else {
            entries.operations.clone()
        };
        for filter in filters {
            plan(filter, &operations);
        }
    } else {
        let of = |resource_type: ResourceType| {
            filters
                .iter()
                .filter(move |f| f.resource_type == resource_type)
                .cloned()
        };
        if roles.producer {
            use Operation::{Create, Describe, Write};
            for topic in of(ResourceType::Topic) {
                plan(topic, &[Write, Describe, Create]);
            }
            for transactional_id in of(ResourceType::TransactionalId) {
                plan(transactional_id, &[Write, Describe]);
            }
            if roles.idempotent {
                plan(cluster_filter(), &[Operation::IdempotentWrite]);
            }
        }
        if roles.consumer {
            use Operation::{Describe, Read};
            for topic in of(ResourceType::Topic) {
                plan(topic, &[Read, Describe]);
            }
            for group in of(ResourceType::Group) {
                plan(group, &[Read]);
            }
        }
    }
    for (filter, entries) in &planned {
        check_operations(filter.resource_type, entries)?;
    }
    Ok(planned)
}

fn cluster_filter() -> ResourcePatternFilter {
    ResourcePatternFilter {
        resource_type: ResourceType::Cluster,
        name: Some(CLUSTER_NAME.to_owned()),
        pattern_type: PatternType::Literal,
    }
}

/// Every principal of `entries` with every operation from every one of its hosts (`*` when
/// none is given): ALLOWs, then DENYs, each once.
fn entries_for(entries: &Entries, operations: &[Operation]) -> Vec<AccessControlEntry> {
    let wildcard = [WILDCARD.to_owned()];
    let hosts = |given: &[String]| -> Vec<String> {
        let given = if given.is_empty() {
            &wildcard[..]
        } else {
            given
        };
        given.iter().map(|host| host.trim().to_owned()).collect()
    };
    let mut out: Vec<AccessControlEntry> = Vec::new();
    for (principals, hosts, permission) in [
        (
            &entries.allow_principals,
            hosts(&entries.allow_hosts),
            Permission::Allow,
        ),
        (
            &entries.deny_principals,
            hosts(&entries.deny_hosts),
            Permission::Deny,
        ),
    ] {
        for principal in principals {
            for &operation in operations {
                for host in &hosts {
                    let entry = AccessControlEntry {
                        principal: principal.clone(),
                        host: host.clone(),
                        operation,
                        permission,
                    };
                    if !out.contains(&entry) {
                        out.push(entry);
                    }
                }
            }
        }
    }
    out
}

/// kafka-acls.sh's check: an operation the resource type supports, or ALL (ANY passes too:
/// it is a filter, for `remove`, and the broker refuses it in an ACL).
fn check_operations(
    resource_type: ResourceType,
    entries: &[AccessControlEntry],
) -> anyhow::Result<()> {
    let supported = supported_operations(resource_type);
    for entry in entries {
        let operation = entry.operation;
        if !matches!(operation, Operation::All | Operation::Any) && !supported.contains(&operation)
        {
            return Err(AclError::UnsupportedOperation {
                resource_type,
                operation,
            }
            .into());
        }
    }
    Ok(())
}

/// The bindings `add` creates, per resource pattern.
fn additions(
    resources: &Resources,
    entries: &Entries,
    roles: &Roles,
) -> anyhow::Result<Vec<(ResourcePattern, Vec<AclBinding>)>> {
    if let Some(pattern_type @ (PatternType::Any | PatternType::Match)) =
        resources.resource_pattern_type
    {
        bail!(
            "--resource-pattern-type {pattern_type} is a filter, to list or remove ACLs: \
             adding them takes literal or prefixed"
        );
    }
    if entries.operations.contains(&Operation::Any) {
        bail!("--operation ANY is a filter, to list or remove ACLs: name the operations to add");
    }
    let planned = resource_entries(resources, entries, roles)?;
    planned
        .into_iter()
        .map(|(filter, entries)| {
            if entries.is_empty() {
                bail!("adding ACLs needs a principal: --allow-principal or --deny-principal");
            }
            let pattern = ResourcePattern {
                resource_type: filter.resource_type,
                name: filter.name.unwrap_or_default(),
                pattern_type: filter.pattern_type,
            };
            let bindings = entries
                .into_iter()
                .map(|entry| AclBinding {
                    pattern: pattern.clone(),
                    entry,
                })
                .collect();
            Ok((pattern, bindings))
        })
        .collect()
}

/// The filters `remove` deletes with: per resource, one per entry the flags name (exactly
/// that entry), or one for every entry when no principal is named.
fn removal_filters(
    resources: &Resources,
    entries: &Entries,
    roles: &Roles,
) -> anyhow::Result<Vec<AclBindingFilter>> {
    let planned = resource_entries(resources, entries, roles)?;
    Ok(planned
        .into_iter()
        .flat_map(|(pattern, entries)| {
            if entries.is_empty() {
                return vec![AclBindingFilter {
                    pattern,
                    entry: AccessControlEntryFilter::ANY,
                }];
            }
            entries
                .into_iter()
                .map(|entry| AclBindingFilter {
                    pattern: pattern.clone(),
                    entry: AccessControlEntryFilter {
                        principal: Some(entry.principal),
                        host: Some(entry.host),
                        operation: entry.operation,
                        permission: entry.permission,
                    },
                })
                .collect()
        })
        .collect())
}

/// The pattern filters `list` describes: the resources named (literal unless
/// --resource-pattern-type says otherwise), or every ACL when none is named.
fn list_filters(resources: &Resources) -> anyhow::Result<Vec<ResourcePatternFilter>> {
    let filters = resource_filters(
        resources,
        resources
            .resource_pattern_type
            .unwrap_or(PatternType::Literal),
    )?;
    if !filters.is_empty() {
        return Ok(filters);
    }
    Ok(vec![ResourcePatternFilter {
        pattern_type: resources.resource_pattern_type.unwrap_or(PatternType::Any),
        ..ResourcePatternFilter::ANY
    }])
}

async fn add(
    admin: &Admin,
    additions: Vec<(ResourcePattern, Vec<AclBinding>)>,
) -> anyhow::Result<()> {
    let mut failures = Vec::new();
    let mut attempted = 0;
    for (pattern, bindings) in additions {
        let existing = admin
            .describe_acls(&AclBindingFilter {
                pattern: exact_filter(&pattern),
                entry: AccessControlEntryFilter::ANY,
            })
            .await
            .with_context(|| format!("describing the ACLs on `{pattern}`"))?;
        let (present, new): (Vec<AclBinding>, Vec<AclBinding>) =
            bindings.into_iter().partition(|b| existing.contains(b));
        for binding in &present {
            println!("ACL {binding} already exists.");
        }
        if new.is_empty() {
            continue;
        }
        let entries: Vec<AccessControlEntry> = new.iter().map(|b| b.entry.clone()).collect();
        print!(
            "{}",
            resource_block("Adding ACLs for resource", &pattern, &entries)
        );
        attempted += new.len();
        let results = admin.create_acls(&new).await?;
        failures.extend(results.into_iter().filter_map(Result::err));
    }
    match failures.into_iter().next() {
        None => Ok(()),
        Some(first) => Err(anyhow::Error::new(first).context(format!(
            "not every ACL was created ({attempted} tried); the first refused"
        ))),
    }
}

/// The filter that selects exactly `pattern`.
fn exact_filter(pattern: &ResourcePattern) -> ResourcePatternFilter {
    ResourcePatternFilter {
        resource_type: pattern.resource_type,
        name: Some(pattern.name.clone()),
        pattern_type: pattern.pattern_type,
    }
}

#[derive(Serialize)]
struct AclRow {
    resource_type: &'static str,
    resource_name: String,
    pattern_type: &'static str,
    principal: String,
    host: String,
    operation: &'static str,
    permission_type: &'static str,
}

impl From<&AclBinding> for AclRow {
    fn from(binding: &AclBinding) -> Self {
        let (pattern, entry) = (&binding.pattern, &binding.entry);
        AclRow {
            resource_type: pattern.resource_type.name(),
            resource_name: pattern.name.clone(),
            pattern_type: pattern.pattern_type.name(),
            principal: entry.principal.clone(),
            host: entry.host.clone(),
            operation: entry.operation.name(),
            permission_type: entry.permission.name(),
        }
    }
}

async fn list(
    admin: &Admin,
    filters: &[ResourcePatternFilter],
    principals: &[String],
    output: Format,
) -> anyhow::Result<()> {
    let entry_filters: Vec<(Option<&String>, AccessControlEntryFilter)> = if principals.is_empty() {
        vec![(None, AccessControlEntryFilter::ANY)]
    } else {
        principals
            .iter()
            .map(|principal| {
                (
                    Some(principal),
                    AccessControlEntryFilter {
                        principal: Some(principal.clone()),
                        ..AccessControlEntryFilter::ANY
                    },
                )
            })
            .collect()
    };
    let mut every = Vec::new();
    for (principal, entry) in entry_filters {
        let mut bindings = Vec::new();
        for pattern in filters {
            let filter = AclBindingFilter {
                pattern: pattern.clone(),
                entry: entry.clone(),
            };
            bindings.extend(admin.describe_acls(&filter).await.context("listing ACLs")?);
        }
        sort_and_dedup(&mut bindings);
        if output == Format::Json {
            every.extend(bindings);
            continue;
        }
        if let Some(principal) = principal {
            println!("ACLs for principal `{principal}`");
        }
        print!("{}", current_acls(&bindings));
    }
    if output == Format::Json {
        sort_and_dedup(&mut every);
        let rows: Vec<AclRow> = every.iter().map(AclRow::from).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}

async fn remove(admin: &Admin, filters: &[AclBindingFilter]) -> anyhow::Result<()> {
    let results = admin.delete_acls(filters).await?;
    let mut removed = Vec::new();
    let mut failures = Vec::new();
    for result in results {
        match result {
            Ok(deleted) => removed.extend(deleted),
            Err(error) => failures.push(error),
        }
    }
    sort_and_dedup(&mut removed);
    if removed.is_empty() && failures.is_empty() {
        println!("No ACL matched: nothing was removed.");
    }
    for (pattern, entries) in by_pattern(&removed) {
        print!(
            "{}",
            resource_block("Removed ACLs for resource", &pattern, &entries)
        );
    }
    match failures.into_iter().next() {
        None => Ok(()),
        Some(first) => Err(anyhow::Error::new(first).context(format!(
            "not every ACL was removed ({} filters sent); the first refused",
            filters.len()
        ))),
    }
}

/// kafka-acls.sh's listing: per resource pattern, a heading and its entries.
fn current_acls(bindings: &[AclBinding]) -> String {
    by_pattern(bindings)
        .iter()
        .map(|(pattern, entries)| resource_block("Current ACLs for resource", pattern, entries))
        .collect()
}

/// "<heading> `ResourcePattern(...)`:", a tab-indented line per entry, then a blank line.
fn resource_block(
    heading: &str,
    pattern: &ResourcePattern,
    entries: &[AccessControlEntry],
) -> String {
    let mut text = format!("{heading} `{pattern}`:\n");
    for entry in entries {
        text.push_str(&format!("\t{entry}\n"));
    }
    text.push('\n');
    text
}

/// Consecutive bindings grouped by their pattern (the input sorted, so each pattern once).
fn by_pattern(bindings: &[AclBinding]) -> Vec<(ResourcePattern, Vec<AccessControlEntry>)> {
    let mut groups: Vec<(ResourcePattern, Vec<AccessControlEntry>)> = Vec::new();
    for binding in bindings {
        match groups.last_mut() {
            Some((pattern, entries)) if *pattern == binding.pattern => {
                entries.push(binding.entry.clone());
            }
            _ => groups.push((binding.pattern.clone(), vec![binding.entry.clone()])),
        }
    }
    groups
}

/// By resource type, name, pattern type, then principal, host, operation, permission; each
/// binding once (two filters, e.g. of MATCH, may select the same ACL).
fn sort_and_dedup(bindings: &mut Vec<AclBinding>) {
    let key = |b: &AclBinding| {
        (
            b.pattern.resource_type,
            b.pattern.name.clone(),
            b.pattern.pattern_type,
            b.entry.principal.clone(),
            b.entry.host.clone(),
            b.entry.operation,
            b.entry.permission,
        )
    };
    bindings.sort_by_key(key);
    bindings.dedup();
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        acls: AclsArgs,
    }

    fn parse(args: &[&str]) -> Result<AclsCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("acls").chain(args.iter().copied()))
            .map(|cli| cli.acls.command)
    }

    fn add_of(args: &[&str]) -> anyhow::Result<Vec<(ResourcePattern, Vec<AclBinding>)>> {
        let mut full = vec!["add"];
        full.extend_from_slice(args);
        match parse(&full)? {
            AclsCommand::Add {
                resources,
                entries,
                roles,
            } => additions(&resources, &entries, &roles),
            _ => unreachable!(),
        }
    }

    fn remove_of(args: &[&str]) -> anyhow::Result<Vec<AclBindingFilter>> {
        let mut full = vec!["remove"];
        full.extend_from_slice(args);
        match parse(&full)? {
            AclsCommand::Remove {
                resources,
                entries,
                roles,
                ..
            } => removal_filters(&resources, &entries, &roles),
            _ => unreachable!(),
        }
    }

    /// `(resource type, name, pattern type, principal, host, operation, permission)` of each
    /// binding, in Kafka's names.
    fn shown(additions: &[(ResourcePattern, Vec<AclBinding>)]) -> Vec<String> {
        additions
            .iter()
            .flat_map(|(_, bindings)| bindings)
            .map(|b| {
                format!(
                    "{} {} {} {} {} {} {}",
                    b.pattern.resource_type,
                    b.pattern.name,
                    b.pattern.pattern_type,
                    b.entry.principal,
                    b.entry.host,
                    b.entry.operation,
                    b.entry.permission
                )
            })
            .collect()
    }

    #[test]
    fn add_grants_every_principal_every_operation_from_every_host() {
        let additions = add_of(&[
            "--allow-principal",
            "User:alice",
            "--allow-host",
            "10.0.0.1",
            "--operation",
            "read",
            "--operation",
            "ClusterAction",
            "--topic",
            "orders",
            "--cluster",
        ]);
        // CLUSTER_ACTION is no topic operation: refused as kafka-acls.sh refuses it.
        let error = additions.unwrap_err().to_string();
        assert!(
            error.starts_with("ResourceType TOPIC only supports operations READ,WRITE"),
            "{error}"
        );
        let additions = add_of(&[
            "--allow-principal",
            "User:alice",
            "--deny-principal",
            "User:mallory",
            "--allow-host",
            "10.0.0.1",
            "--allow-host",
            "10.0.0.2",
            "--operation",
            "READ",
            "--operation",
            "describe",
            "--topic",
            "orders",
        ])
        .unwrap();
        assert_eq!(
            shown(&additions),
            [
                "TOPIC orders LITERAL User:alice 10.0.0.1 READ ALLOW",
                "TOPIC orders LITERAL User:alice 10.0.0.2 READ ALLOW",
                "TOPIC orders LITERAL User:alice 10.0.0.1 DESCRIBE ALLOW",
                "TOPIC orders LITERAL User:alice 10.0.0.2 DESCRIBE ALLOW",
                "TOPIC orders LITERAL User:mallory * READ DENY",
                "TOPIC orders LITERAL User:mallory * DESCRIBE DENY",
            ]
        );
    }

    #[test]
    fn add_defaults_to_all_from_every_host_on_each_resource() {
        let additions = add_of(&[
            "--allow-principal",
            "User:ops",
            "--cluster",
            "--group",
            "g",
            "--transactional-id",
            "t",
            "--delegation-token",
            "d",
            "--topic",
            "*",
        ])
        .unwrap();
        assert_eq!(
            shown(&additions),
            [
                "TOPIC * LITERAL User:ops * ALL ALLOW",
                "CLUSTER kafka-cluster LITERAL User:ops * ALL ALLOW",
                "GROUP g LITERAL User:ops * ALL ALLOW",
                "TRANSACTIONAL_ID t LITERAL User:ops * ALL ALLOW",
                "DELEGATION_TOKEN d LITERAL User:ops * ALL ALLOW",
            ]
        );
    }

    #[test]
    fn producer_expands_to_write_describe_create_on_topics_and_transactional_ids() {
        let additions = add_of(&[
            "--allow-principal",
            "User:app",
            "--producer",
            "--topic",
            "orders",
            "--transactional-id",
            "app-",
            "--resource-pattern-type",
            "PREFIXED",
        ])
        .unwrap();
        assert_eq!(
            shown(&additions),
            [
                "TOPIC orders PREFIXED User:app * WRITE ALLOW",
                "TOPIC orders PREFIXED User:app * DESCRIBE ALLOW",
                "TOPIC orders PREFIXED User:app * CREATE ALLOW",
                "TRANSACTIONAL_ID app- PREFIXED User:app * WRITE ALLOW",
                "TRANSACTIONAL_ID app- PREFIXED User:app * DESCRIBE ALLOW",
            ]
        );
        let idempotent = add_of(&[
            "--allow-principal",
            "User:app",
            "--producer",
            "--idempotent",
            "--topic",
            "orders",
        ])
        .unwrap();
        assert_eq!(
            shown(&idempotent)[3..],
            ["CLUSTER kafka-cluster LITERAL User:app * IDEMPOTENT_WRITE ALLOW"]
        );
    }

    #[test]
    fn consumer_expands_to_read_describe_on_topics_and_read_on_groups() {
        let additions = add_of(&[
            "--allow-principal",
            "User:app",
            "--consumer",
            "--producer",
            "--topic",
            "orders",
            "--group",
            "app",
        ])
        .unwrap();
        assert_eq!(
            shown(&additions),
            [
                "TOPIC orders LITERAL User:app * WRITE ALLOW",
                "TOPIC orders LITERAL User:app * DESCRIBE ALLOW",
                "TOPIC orders LITERAL User:app * CREATE ALLOW",
                "TOPIC orders LITERAL User:app * READ ALLOW",
                "GROUP app LITERAL User:app * READ ALLOW",
            ]
        );
    }

    #[test]
    fn contradictory_or_incomplete_arguments_are_refused() {
        let refused_by_parser = [
            &[
                "--allow-principal",
                "User:a",
                "--producer",
                "--operation",
                "Read",
                "--topic",
                "t",
            ][..],
            &[
                "--deny-principal",
                "User:a",
                "--consumer",
                "--topic",
                "t",
                "--group",
                "g",
            ],
            &["--allow-principal", "alice", "--topic", "t"],
            &["--allow-principal", "User:", "--topic", "t"],
            &["--allow-host", "10.0.0.1", "--topic", "t"],
            &[
                "--allow-principal",
                "User:a",
                "--idempotent",
                "--topic",
                "t",
            ],
            &[
                "--allow-principal",
                "User:a",
                "--operation",
                "Fly",
                "--topic",
                "t",
            ],
            &[
                "--allow-principal",
                "User:a",
                "--resource-pattern-type",
                "unknown",
                "--topic",
                "t",
            ],
        ];
        for args in refused_by_parser {
            assert!(add_of(args).is_err(), "{args:?}");
        }
        let refused = [
            (&["--allow-principal", "User:a"][..], "no resource given"),
            (&["--topic", "t"], "needs a principal"),
            (
                &["--allow-principal", "User:a", "--producer", "--group", "g"],
                "--producer needs --topic",
            ),
            (
                &["--allow-principal", "User:a", "--consumer", "--topic", "t"],
                "--consumer needs --topic and --group",
            ),
            (
                &[
                    "--allow-principal",
                    "User:a",
                    "--consumer",
                    "--topic",
                    "t",
                    "--group",
                    "g",
                    "--cluster",
                ],
                "no use for --cluster",
            ),
            (
                &[
                    "--allow-principal",
                    "User:a",
                    "--topic",
                    "t",
                    "--resource-pattern-type",
                    "match",
                ],
                "is a filter",
            ),
            (
                &[
                    "--allow-principal",
                    "User:a",
                    "--topic",
                    "t",
                    "--operation",
                    "any",
                ],
                "is a filter",
            ),
            (
                &[
                    "--allow-principal",
                    "User:a",
                    "--cluster",
                    "--resource-pattern-type",
                    "prefixed",
                ],
                "literal",
            ),
            (
                &["--allow-principal", "User:a", "--topic", " "],
                "empty TOPIC name",
            ),
        ];
        for (args, said) in refused {
            let error = add_of(args).unwrap_err().to_string();
            assert!(error.contains(said), "{args:?}: {error}");
        }
    }

    #[test]
    fn operations_and_pattern_types_parse_in_any_case_as_kafka_acls_takes_them() {
        for (given, operation) in [
            ("Read", Operation::Read),
            ("WRITE", Operation::Write),
            ("ClusterAction", Operation::ClusterAction),
            ("cluster_action", Operation::ClusterAction),
            ("DescribeConfigs", Operation::DescribeConfigs),
            ("IdempotentWrite", Operation::IdempotentWrite),
            ("all", Operation::All),
        ] {
            assert_eq!(parse_operation(given), Ok(operation));
        }
        assert!(parse_operation("unknown").is_err());
        assert!(
            parse_operation("reed")
                .unwrap_err()
                .contains("CLUSTER_ACTION")
        );
        for (given, pattern_type) in [
            ("literal", PatternType::Literal),
            ("PREFIXED", PatternType::Prefixed),
            ("Match", PatternType::Match),
            ("any", PatternType::Any),
        ] {
            assert_eq!(parse_pattern_type(given), Ok(pattern_type));
        }
        assert!(parse_pattern_type("unknown").is_err());
        assert!(parse_pattern_type("glob").is_err());
    }

    #[test]
    fn remove_undoes_what_the_same_flags_add_or_clears_the_resource() {
        let filters = remove_of(&[
            "--allow-principal",
            "User:app",
            "--consumer",
            "--topic",
            "orders",
            "--group",
            "app",
        ])
        .unwrap();
        let added = add_of(&[
            "--allow-principal",
            "User:app",
            "--consumer",
            "--topic",
            "orders",
            "--group",
            "app",
        ])
        .unwrap();
        let added: Vec<AclBindingFilter> = added
            .iter()
            .flat_map(|(_, bindings)| bindings.iter().map(AclBinding::to_filter))
            .collect();
        assert_eq!(filters, added);

        let cleared = remove_of(&[
            "--topic",
            "orders",
            "--resource-pattern-type",
            "match",
            "--force",
        ])
        .unwrap();
        assert_eq!(
            cleared,
            [AclBindingFilter {
                pattern: ResourcePatternFilter {
                    resource_type: ResourceType::Topic,
                    name: Some("orders".into()),
                    pattern_type: PatternType::Match,
                },
                entry: AccessControlEntryFilter::ANY,
            }]
        );
        let any_operation = remove_of(&[
            "--allow-principal",
            "User:a",
            "--operation",
            "any",
            "--topic",
            "t",
        ])
        .unwrap();
        assert_eq!(any_operation[0].entry.operation, Operation::Any);
        assert!(remove_of(&["--allow-principal", "User:a"]).is_err());
    }

    #[test]
    fn list_without_a_resource_asks_for_every_acl() {
        let AclsCommand::List {
            resources,
            principals,
        } = parse(&["list", "--principal", "User:alice"]).unwrap()
        else {
            panic!("list");
        };
        assert_eq!(principals, ["User:alice"]);
        assert_eq!(
            list_filters(&resources).unwrap(),
            [ResourcePatternFilter::ANY]
        );
        let AclsCommand::List { resources, .. } =
            parse(&["list", "--topic", "t", "--group", "g"]).unwrap()
        else {
            panic!("list");
        };
        let filters = list_filters(&resources).unwrap();
        assert_eq!(filters.len(), 2);
        assert!(
            filters
                .iter()
                .all(|f| f.pattern_type == PatternType::Literal)
        );
        // --principal is a list flag only.
        assert!(parse(&["add", "--principal", "User:a", "--topic", "t"]).is_err());
    }

    fn binding(name: &str, principal: &str, operation: Operation) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern::literal(ResourceType::Topic, name),
            entry: AccessControlEntry::allow(principal, "*", operation),
        }
    }

    #[test]
    fn listing_groups_entries_under_their_resource_as_kafka_acls_prints_them() {
        let mut bindings = vec![
            binding("t", "User:bob", Operation::Write),
            binding("a", "User:alice", Operation::Read),
            binding("t", "User:alice", Operation::Read),
            binding("t", "User:bob", Operation::Write),
        ];
        sort_and_dedup(&mut bindings);
        assert_eq!(
            current_acls(&bindings),
            "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=a, patternType=LITERAL)`:\n\
             \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\
             \n\
             Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:\n\
             \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\
             \t(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)\n\
             \n"
        );
        assert_eq!(current_acls(&[]), "");
        let row = serde_json::to_value(AclRow::from(&bindings[0])).unwrap();
        assert_eq!(
            row,
            serde_json::json!({
                "resource_type": "TOPIC",
                "resource_name": "a",
                "pattern_type": "LITERAL",
                "principal": "User:alice",
                "host": "*",
                "operation": "READ",
                "permission_type": "ALLOW",
            })
        );
    }
}
