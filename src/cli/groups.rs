//! `sluice groups`: consumer group administration through any broker's Kafka port, with the
//! APIs Kafka's `kafka-consumer-groups.sh` uses (so it works against Kafka too): `list`,
//! `describe` (members, assignment, committed offset, log end offset and lag per partition),
//! `reset-offsets` (a dry run unless `--execute`; refused while the group has members) and
//! `delete`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use sluice::client::{Admin, OffsetSpec, TopicPartition};
use sluice::console::report::{self, members};

use serde_json::json;

use super::common::{Connect, Format, GroupArg, block_on, print_table};

#[derive(Subcommand)]
pub enum GroupsCommand {
    /// Every consumer group of the cluster, with its state.
    List {
        #[command(flatten)]
        common: Common,
    },
    /// A group's members and, per partition, the committed offset, log end offset and lag.
    #[command(override_usage = "sluice groups describe [OPTIONS] <GROUP | --group GROUP>")]
    Describe {
        #[command(flatten)]
        group: GroupArg,
        #[command(flatten)]
        view: DescribeView,
        /// With --members: each member's partitions too (always shown; accepted as
        /// kafka-consumer-groups.sh takes it).
        #[arg(long, requires = "members")]
        verbose: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Moves a group's committed offsets for a topic. A dry run unless --execute; refused
    /// while the group has members (stop its consumers first), as Kafka does.
    #[command(
        override_usage = "sluice groups reset-offsets [OPTIONS] <GROUP | --group GROUP> --topic TOPIC <--to-earliest|--to-latest|--to-offset N|--to-datetime T|--shift-by N>"
    )]
    ResetOffsets {
        #[command(flatten)]
        group: GroupArg,
        #[arg(long)]
        topic: String,
        #[command(flatten)]
        target: ResetTarget,
        /// Commit the new offsets (without it, only shows them).
        #[arg(long)]
        execute: bool,
        #[command(flatten)]
        common: Common,
    },
    /// On a mirror's target cluster: where a group of the source resumes here, from the
    /// checkpoints `sluice mirror` (or MirrorMaker 2) wrote; with --execute, commits them to
    /// the group on this cluster (refused while it has members), so its consumers can move.
    #[command(
        override_usage = "sluice groups translate [OPTIONS] <GROUP | --group GROUP> --bootstrap-server TARGET"
    )]
    Translate {
        #[command(flatten)]
        group: GroupArg,
        /// The source cluster's alias in the mirror (its checkpoints are in
        /// <alias>.checkpoints.internal).
        #[arg(long, default_value = "source")]
        source_alias: String,
        /// Commit the translated offsets (without it, only shows them).
        #[arg(long)]
        execute: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Deletes a group that has no members, with its committed offsets.
    #[command(override_usage = "sluice groups delete [OPTIONS] <GROUP | --group GROUP>")]
    Delete {
        #[command(flatten)]
        group: GroupArg,
        #[command(flatten)]
        common: Common,
    },
}

/// kafka-consumer-groups.sh's views of a group: the partitions with their offsets and lag
/// (`--offsets`, the default), the members (`--members`, with `--verbose` their partitions),
/// or the group's state (`--state`).
#[derive(Args)]
#[group(multiple = false)]
pub struct DescribeView {
    /// Per partition: committed offset, log end offset, lag and owner (the default).
    #[arg(long)]
    offsets: bool,
    /// The members: consumer id, host, client id and partition count.
    #[arg(long)]
    members: bool,
    /// The group's coordinator, assignor, state and member count.
    #[arg(long)]
    state: bool,
}

#[derive(Args)]
pub struct Common {
    #[command(flatten)]
    connect: Connect,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

#[derive(Args)]
#[group(required = true, multiple = false)]
pub struct ResetTarget {
    /// The first offset still in the log.
    #[arg(long)]
    to_earliest: bool,
    /// The log end offset (the high watermark).
    #[arg(long)]
    to_latest: bool,
    /// This offset (kept within the log's earliest and latest).
    #[arg(long)]
    to_offset: Option<i64>,
    /// The first offset at or after this time: 2026-12-01T10:00:00, with an optional
    /// fraction and Z or +hh:mm (UTC when none), or milliseconds since the epoch.
    #[arg(long)]
    to_datetime: Option<String>,
    /// The committed offset moved by N (negative: back), kept within the log.
    #[arg(long, allow_negative_numbers = true)]
    shift_by: Option<i64>,
}

pub fn run(command: GroupsCommand) -> anyhow::Result<()> {
    block_on(async move {
        match command {
            GroupsCommand::List { common } => list(&common).await,
            GroupsCommand::Describe {
                group,
                view,
                verbose: _,
                common,
            } => {
                if view.members || view.state {
                    describe_members_or_state(&common, &group.name(), &view).await
                } else {
                    describe(&common, &group.name()).await
                }
            }
            GroupsCommand::ResetOffsets {
                group,
                topic,
                target,
                execute,
                common,
            } => {
                let group = group.name();
                reset_offsets(&common, &group, &topic, &target, execute).await
            }
            GroupsCommand::Delete { group, common } => delete(&common, &group.name()).await,
            GroupsCommand::Translate {
                group,
                source_alias,
                execute,
                common,
            } => translate(&common, &group.name(), &source_alias, execute).await,
        }
    })
}

async fn list(common: &Common) -> anyhow::Result<()> {
    let admin: Admin = common.connect.admin().await?;
    let listed = report::groups(&admin).await?;
    if common.output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&listed)?);
        return Ok(());
    }
    let width = listed
        .iter()
        .map(|l| l.group.len())
        .max()
        .unwrap_or(5)
        .max(5);
    println!("{:<width$}  {:<20}  PROTOCOL-TYPE", "GROUP", "STATE");
    for l in &listed {
        println!("{:<width$}  {:<20}  {}", l.group, l.state, l.protocol_type);
    }
    Ok(())
}

async fn describe(common: &Common, group: &str) -> anyhow::Result<()> {
    let admin: Admin = common.connect.admin().await?;
    let described = report::group(&admin, group).await?;
    if common.output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&described)?);
        return Ok(());
    }
    let rows = &described.partitions;
    let total_lag = described.total_lag;
    println!(
        "group {group}: {} ({} members), coordinator {}, protocol {} {}",
        described.state,
        described.members.len(),
        described.coordinator,
        described.protocol_type,
        described.protocol
    );
    let show = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let topic_width = rows.iter().map(|r| r.topic.len()).max().unwrap_or(5).max(5);
    println!(
        "\n{:<topic_width$}  {:>9}  {:>14}  {:>14}  {:>8}  {:<40}  {:<16}  CLIENT-ID",
        "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST"
    );
    for r in rows {
        println!(
            "{:<topic_width$}  {:>9}  {:>14}  {:>14}  {:>8}  {:<40}  {:<16}  {}",
            r.topic,
            r.partition,
            show(r.committed_offset),
            show(r.log_end_offset),
            show(r.lag),
            r.member_id.as_deref().unwrap_or("-"),
            r.host.as_deref().unwrap_or("-"),
            r.client_id.as_deref().unwrap_or("-"),
        );
    }
    println!("\ntotal_lag {total_lag}");
    Ok(())
}

/// `--describe --members [--verbose]` and `--describe --state`, in kafka-consumer-groups.sh's
/// columns.
async fn describe_members_or_state(
    common: &Common,
    group: &str,
    view: &DescribeView,
) -> anyhow::Result<()> {
    let admin: Admin = common.connect.admin().await?;
    let described = admin.describe_group(group).await?;
    let members = members(&described);
    if common.output == Format::Json {
        let value = if view.state {
            json!({
                "group": group,
                "coordinator": described.coordinator,
                "assignment_strategy": described.protocol,
                "state": described.state,
                "members": members.len(),
            })
        } else {
            json!({ "group": group, "members": members })
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    if view.state {
        print_table(
            &[
                "GROUP",
                "COORDINATOR",
                "ASSIGNMENT-STRATEGY",
                "STATE",
                "#MEMBERS",
            ],
            &[vec![
                group.to_owned(),
                described.coordinator.clone(),
                described.protocol.clone(),
                described.state.clone(),
                members.len().to_string(),
            ]],
        );
        return Ok(());
    }
    if members.is_empty() {
        println!("Consumer group '{group}' has no active members.");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = members
        .iter()
        .map(|m| {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for tp in &m.assignment {
                by_topic.entry(&tp.topic).or_default().push(tp.partition);
            }
            let assignment = by_topic
                .iter()
                .map(|(topic, partitions)| {
                    let list: Vec<String> = partitions.iter().map(i32::to_string).collect();
                    format!("{topic}({})", list.join(","))
                })
                .collect::<Vec<_>>()
                .join(",");
            vec![
                group.to_owned(),
                m.member_id.clone(),
                m.host.clone(),
                m.client_id.clone(),
                m.assignment.len().to_string(),
                if assignment.is_empty() {
                    "-".to_owned()
                } else {
                    assignment
                },
            ]
        })
        .collect();
    print_table(
        &[
            "GROUP",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "ASSIGNMENT",
        ],
        &rows,
    );
    Ok(())
}

async fn reset_offsets(
    common: &Common,
    group: &str,
    topic: &str,
    target: &ResetTarget,
    execute: bool,
) -> anyhow::Result<()> {
    let admin: Admin = common.connect.admin().await?;
    let described = admin.describe_group(group).await?;
    if !described.members.is_empty() {
        bail!(
            "group {group} has {} active members (state {}): offsets can only be reset while \
             it has none; stop its consumers first",
            described.members.len(),
            described.state
        );
    }
    let partitions: BTreeSet<TopicPartition> = admin
        .describe_topics(&[topic.to_owned()])
        .await?
        .first()
        .context("Metadata answered no topic")?
        .partitions
        .iter()
        .map(|p| TopicPartition::new(topic, p.partition))
        .collect();
    let earliest = offsets_at(&admin, &partitions, OffsetSpec::Earliest).await?;
    let latest = offsets_at(&admin, &partitions, OffsetSpec::Latest).await?;
    let committed = committed_offsets(&admin, group).await?;
    let at_time = match &target.to_datetime {
        Some(text) => {
            let millis = parse_datetime_ms(text).with_context(|| {
                format!(
                    "--to-datetime {text}: expected 2026-12-01T10:00:00[.sss][Z|+hh:mm] or \
                     milliseconds"
                )
            })?;
            Some(offsets_at(&admin, &partitions, OffsetSpec::Timestamp(millis)).await?)
        }
        None => None,
    };
    let mut plan = Vec::new();
    for key in &partitions {
        let low = earliest.get(key).copied().flatten().unwrap_or(0);
        let high = latest.get(key).copied().flatten().unwrap_or(low);
        let clamp = |offset: i64| offset.clamp(low, high);
        let new_offset = if target.to_earliest {
            low
        } else if target.to_latest {
            high
        } else if let Some(offset) = target.to_offset {
            clamp(offset)
        } else if let Some(shift) = target.shift_by {
            clamp(
                committed
                    .get(key)
                    .copied()
                    .unwrap_or(low)
                    .saturating_add(shift),
            )
        } else if let Some(at_time) = &at_time {
            // No record at or after the time: the end, as Kafka's tool does.
            at_time.get(key).copied().flatten().unwrap_or(high)
        } else {
            bail!("no reset target given");
        };
        plan.push((key.clone(), committed.get(key).copied(), new_offset));
    }
    if execute {
        let offsets: BTreeMap<TopicPartition, i64> = plan
            .iter()
            .map(|(tp, _, offset)| (tp.clone(), *offset))
            .collect();
        admin.alter_group_offsets(group, &offsets).await?;
    }
    #[derive(Serialize)]
    struct Reset {
        topic: String,
        partition: i32,
        committed_offset: Option<i64>,
        new_offset: i64,
    }
    let rows: Vec<Reset> = plan
        .into_iter()
        .map(
            |(TopicPartition { topic, partition }, committed_offset, new_offset)| Reset {
                topic,
                partition,
                committed_offset,
                new_offset,
            },
        )
        .collect();
    if common.output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<20}  {:>9}  {:>14}  {:>10}",
            "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"
        );
        for r in &rows {
            println!(
                "{:<20}  {:>9}  {:>14}  {:>10}",
                r.topic,
                r.partition,
                r.committed_offset.map_or("-".to_owned(), |o| o.to_string()),
                r.new_offset,
            );
        }
        if !execute {
            println!("\ndry run: nothing committed (add --execute to commit these offsets)");
        }
    }
    Ok(())
}

async fn delete(common: &Common, group: &str) -> anyhow::Result<()> {
    let admin: Admin = common.connect.admin().await?;
    admin.delete_groups(&[group.to_owned()]).await?;
    if common.output == Format::Json {
        println!("{}", serde_json::json!({ "group": group, "deleted": true }));
    } else {
        println!("deleted group {group}");
    }
    Ok(())
}

async fn translate(
    common: &Common,
    group: &str,
    source_alias: &str,
    execute: bool,
) -> anyhow::Result<()> {
    let checkpoints: Vec<_> =
        sluice::mirror::read_checkpoints(common.connect.config()?, source_alias)
            .await?
            .into_iter()
            .filter(|checkpoint| checkpoint.group == group)
            .collect();
    if checkpoints.is_empty() {
        bail!(
            "no checkpoint of group {group} in {}: is a mirror from {source_alias} running, with the group committing offsets there?",
            sluice::mirror::checkpoints_topic(source_alias)
        );
    }
    let offsets: BTreeMap<TopicPartition, i64> = checkpoints
        .iter()
        .map(|c| {
            (
                TopicPartition::new(c.topic.clone(), c.partition),
                c.downstream,
            )
        })
        .collect();
    if execute {
        let admin: Admin = common.connect.admin().await?;
        // A group new to this cluster may find its coordinator still loading.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match admin.alter_group_offsets(group, &offsets).await {
                Ok(()) => break,
                Err(error) if error.is_retriable() && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
                Err(error) => {
                    return Err(error).with_context(|| {
                        format!("committing group {group}'s translated offsets (stop its consumers on this cluster first)")
                    });
                }
            }
        }
    }
    if common.output == Format::Json {
        let rows: Vec<_> = checkpoints
            .iter()
            .map(|c| json!({"topic": c.topic, "partition": c.partition, "source_offset": c.upstream, "offset": c.downstream}))
            .collect();
        println!(
            "{}",
            json!({"group": group, "executed": execute, "partitions": rows})
        );
        return Ok(());
    }
    let rows: Vec<Vec<String>> = checkpoints
        .iter()
        .map(|c| {
            vec![
                c.topic.clone(),
                c.partition.to_string(),
                c.upstream.to_string(),
                c.downstream.to_string(),
            ]
        })
        .collect();
    print_table(
        &["TOPIC", "PARTITION", "SOURCE-OFFSET", "TRANSLATED-OFFSET"],
        &rows,
    );
    if execute {
        println!("committed group {group}'s translated offsets");
    } else {
        println!("(a dry run: --execute commits them)");
    }
    Ok(())
}

/// The group's committed offsets.
async fn committed_offsets(
    admin: &Admin,
    group: &str,
) -> anyhow::Result<BTreeMap<TopicPartition, i64>> {
    Ok(admin.list_group_offsets(group).await?)
}

/// Each partition's offset at `spec` (`None`: no record at or after the time).
async fn offsets_at(
    admin: &Admin,
    partitions: &BTreeSet<TopicPartition>,
    spec: OffsetSpec,
) -> anyhow::Result<BTreeMap<TopicPartition, Option<i64>>> {
    Ok(admin.list_offsets(partitions, spec).await?)
}

/// `2026-12-01T10:00:00[.sss][Z|±hh:mm]` (UTC without a zone) or milliseconds since the epoch.
fn parse_datetime_ms(text: &str) -> Option<i64> {
    let text = text.trim();
    if let Ok(millis) = text.parse::<i64>() {
        return Some(millis);
    }
    let (date, rest) = text.split_once(['T', ' '])?;
    let mut date_parts = date.split('-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: i64 = date_parts.next()?.parse().ok()?;
    let day: i64 = date_parts.next()?.parse().ok()?;
    if date_parts.next().is_some() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Split off the zone: Z, +hh:mm or -hh:mm.
    let (time, offset_minutes) = if let Some(time) = rest.strip_suffix(['Z', 'z']) {
        (time, 0)
    } else if let Some(at) = rest.rfind(['+', '-']) {
        let (time, zone) = rest.split_at(at);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (h, m) = zone[1..].split_once(':').unwrap_or((&zone[1..], "0"));
        (
            time,
            sign * (h.parse::<i64>().ok()? * 60 + m.parse::<i64>().ok()?),
        )
    } else {
        (rest, 0)
    };
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock_parts = clock.split(':');
    let hour: i64 = clock_parts.next()?.parse().ok()?;
    let minute: i64 = clock_parts.next().unwrap_or("0").parse().ok()?;
    let second: i64 = clock_parts.next().unwrap_or("0").parse().ok()?;
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let millis: i64 = if fraction.is_empty() {
        0
    } else {
        let digits: String = fraction.chars().chain("000".chars()).take(3).collect();
        digits.parse().ok()?
    };
    let days = days_from_civil(year, month, day);
    Some(
        ((days * 86_400 + hour * 3_600 + minute * 60 + second) - offset_minutes * 60) * 1_000
            + millis,
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_parse_as_kafkas_tool_takes_them() {
        assert_eq!(parse_datetime_ms("1970-01-01T00:00:00"), Some(0));
        assert_eq!(parse_datetime_ms("1700000000000"), Some(1_700_000_000_000));
        // 2023-11-14T22:13:20Z is 1_700_000_000 s.
        assert_eq!(
            parse_datetime_ms("2023-11-14T22:13:20Z"),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            parse_datetime_ms("2023-11-14T23:13:20.5+01:00"),
            Some(1_700_000_000_500)
        );
        assert_eq!(
            parse_datetime_ms("2024-02-29T00:00:00.123"),
            Some(1_709_164_800_123)
        );
        assert_eq!(parse_datetime_ms("2024-13-01T00:00:00"), None);
        assert_eq!(parse_datetime_ms("yesterday"), None);
    }
}
