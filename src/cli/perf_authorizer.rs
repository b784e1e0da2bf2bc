//! `sluice perf authorizer`: what Kafka's StandardAuthorizer decision costs Sluice with many
//! ACLs. Builds an index of `--acls` ACLs (LITERAL and PREFIXED topics and groups, allows and
//! denies, many principals, as a large cluster's ACLs look), then times decisions the way
//! requests ask them: a 10-topic Produce (10 WRITE decisions), a consumer's Fetch plus its
//! group (READ), Metadata's authorized operations. The raw limit beside it, measured in the
//! same run: a hash-map lookup per decision in a map as large, the least a decision could
//! cost. Also the index rebuild, which happens once per image whose ACLs changed.

use std::collections::HashMap;
use std::hint::black_box;
use std::net::IpAddr;
use std::time::Instant;

use clap::Args;
use sluice::rng::SmallRng as Rng;
use sluice::security::acl::{
    AccessControlEntry, AclBinding, Acls, Action, AuthorizerConfig, Operation, ResourcePattern,
    ResourceType, authorize, authorized_operations,
};

#[derive(Args, Debug)]
pub struct AuthorizerArgs {
    /// ACLs in the index.
    #[arg(long, default_value_t = 10_000)]
    acls: usize,
    /// Requests timed per kind.
    #[arg(long, default_value_t = 200_000)]
    requests: usize,
}

const PRINCIPALS: usize = 500;
const TOPICS: usize = 5_000;

fn bindings(count: usize, rng: &mut Rng) -> Vec<AclBinding> {
    (0..count)
        .map(|i| {
            let principal = format!("User:app-{}", rng.index(PRINCIPALS));
            let (resource_type, name, operation) = if i % 4 == 3 {
                (
                    ResourceType::Group,
                    format!("group-{}", rng.index(TOPICS)),
                    Operation::Read,
                )
            } else {
                let operation =
                    [Operation::Write, Operation::Read, Operation::Describe][rng.index(3)];
                (
                    ResourceType::Topic,
                    format!("topic-{}", rng.index(TOPICS)),
                    operation,
                )
            };
            let pattern = if i % 10 == 0 {
                // A prefix of the topic's name: team-wide ACLs.
                let prefix = name[..name.len().saturating_sub(2).max(7)].to_owned();
                ResourcePattern::prefixed(resource_type, prefix)
            } else {
                ResourcePattern::literal(resource_type, name)
            };
            let entry = if i % 50 == 0 {
                AccessControlEntry::deny(principal, "*", operation)
            } else {
                AccessControlEntry::allow(principal, "*", operation)
            };
            AclBinding { pattern, entry }
        })
        .collect()
}

pub fn run(args: AuthorizerArgs) -> anyhow::Result<()> {
    let mut rng = Rng::new(0x5eed_cafe_f00d_1234);
    let bindings = bindings(args.acls, &mut rng);
    let built = Instant::now();
    let mut acls = Acls::new();
    for (id, binding) in bindings.iter().enumerate() {
        acls.insert(id as u128 + 1, binding.clone());
    }
    let rebuild_ms = built.elapsed().as_secs_f64() * 1e3;
    let config = AuthorizerConfig {
        super_users: Default::default(),
        allow_everyone_if_no_acl_found: false,
    };
    let host: IpAddr = [10, 1, 2, 3].into();
    // Each request asks for a principal and names resources at random.
    let requests: Vec<(String, Vec<String>, String)> = (0..1024)
        .map(|_| {
            (
                format!("User:app-{}", rng.index(PRINCIPALS)),
                (0..10)
                    .map(|_| format!("topic-{}", rng.index(TOPICS)))
                    .collect(),
                format!("group-{}", rng.index(TOPICS)),
            )
        })
        .collect();

    let mut allowed = 0usize;
    let started = Instant::now();
    for i in 0..args.requests {
        let (principal, topics, _) = &requests[i % requests.len()];
        for topic in topics {
            let action = Action::new(Operation::Write, ResourceType::Topic, topic.as_str());
            allowed += usize::from(authorize(&acls, &config, principal, host, &action));
        }
    }
    let produce = started.elapsed();
    let started = Instant::now();
    for i in 0..args.requests {
        let (principal, topics, group) = &requests[i % requests.len()];
        let group = Action::new(Operation::Read, ResourceType::Group, group.as_str());
        allowed += usize::from(authorize(&acls, &config, principal, host, &group));
        let topic = Action::new(Operation::Read, ResourceType::Topic, topics[0].as_str());
        allowed += usize::from(authorize(&acls, &config, principal, host, &topic));
    }
    let fetch = started.elapsed();
    let started = Instant::now();
    let mut bits = 0i32;
    for i in 0..args.requests / 10 {
        let (principal, topics, _) = &requests[i % requests.len()];
        bits ^= authorized_operations(
            &acls,
            &config,
            principal,
            host,
            ResourceType::Topic,
            &topics[0],
        );
    }
    let operations = started.elapsed();
    black_box((allowed, bits));

    // The raw limit: one hash-map lookup per decision in a map as large as the index.
    let map: HashMap<(String, String), bool> = bindings
        .iter()
        .map(|b| ((b.entry.principal.clone(), b.pattern.name.clone()), true))
        .collect();
    let keys: Vec<(String, String)> = requests
        .iter()
        .flat_map(|(principal, topics, _)| {
            topics
                .iter()
                .map(move |topic| (principal.clone(), topic.clone()))
        })
        .collect();
    let started = Instant::now();
    let mut hits = 0usize;
    for i in 0..args.requests * 10 {
        hits += usize::from(map.contains_key(&keys[i % keys.len()]));
    }
    let lookups = started.elapsed();
    black_box(hits);

    let per = |elapsed: std::time::Duration, count: usize| elapsed.as_nanos() as f64 / count as f64;
    let decision_ns = per(produce, args.requests * 10);
    let lookup_ns = per(lookups, args.requests * 10);
    println!("acls {}", args.acls);
    println!("acl_index_rebuild_ms {rebuild_ms:.1}");
    println!(
        "produce_10_topics_authorization_ns {:.0}",
        per(produce, args.requests)
    );
    println!(
        "fetch_with_group_authorization_ns {:.0}",
        per(fetch, args.requests)
    );
    println!(
        "topic_authorized_operations_ns {:.0}",
        per(operations, args.requests / 10)
    );
    println!("decision_ns {decision_ns:.0}");
    println!("raw_hash_lookup_ns {lookup_ns:.0}");
    println!(
        "decision_to_raw_lookup_ratio {:.1}",
        decision_ns / lookup_ns
    );
    Ok(())
}
