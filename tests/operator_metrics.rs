//! `/metrics` as operators and Prometheus read it: parsed whole by the Prometheus Python
//! client's parser after confluent-kafka created, produced, consumed and committed; request
//! errors by API and error name (in responses, and of requests not served); the process's own
//! metrics and build info; per-partition gauges, and none with `metrics.partition.enable=false`.

mod support;

use support::{SingleNode, run_client};

fn suite(node: &SingleNode, mode: &str) -> String {
    let bootstrap = node.bootstrap();
    let port = node.http_port.to_string();
    run_client(
        node,
        "python3",
        &["metrics_suite.py", &bootstrap, &port, mode],
    )
}

#[test]
fn metrics_parse_whole_and_count_what_clients_did() {
    let node = SingleNode::start(&[]);
    let output = suite(&node, "partition-metrics");
    assert!(output.contains("metrics ok"), "{output}");
}

#[test]
fn per_partition_metrics_can_be_switched_off() {
    let node = SingleNode::start(&["metrics.partition.enable=false"]);
    let output = suite(&node, "no-partition-metrics");
    assert!(output.contains("metrics ok"), "{output}");
}

/// Every metric `config/grafana-dashboard.json` queries is one a broker exposes (a histogram's
/// `_bucket`, `_sum` and `_count` series by its family's name), and its panels are well formed.
#[test]
fn the_grafana_dashboard_queries_only_metrics_that_exist() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/grafana-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("config/grafana-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());

    let node = SingleNode::start(&[]);
    let exposition = node.metrics_text();
    let mut families = std::collections::BTreeMap::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                families.insert(name.to_owned(), kind.to_owned());
            }
        }
    }
    let exists = |name: &str| {
        families.contains_key(name)
            || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                name.strip_suffix(suffix)
                    .is_some_and(|family| families.get(family).is_some_and(|k| k == "histogram"))
            })
    };

    let mut ids = std::collections::BTreeSet::new();
    let mut named = std::collections::BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().expect("a panel title");
        assert!(
            ids.insert(panel["id"].as_u64().expect("a panel id")),
            "{title}: id repeated"
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            let metrics: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .filter(|word| word.starts_with("sluice_") || word.starts_with("process_"))
                .collect();
            assert!(!metrics.is_empty(), "{title}: {expr} names no metric");
            for metric in metrics {
                assert!(exists(metric), "{title}: {metric} is not on /metrics");
                named.insert(metric.to_owned());
            }
        }
    }
    println!(
        "the dashboard's {} panels query {} metrics, all exposed",
        panels.len(),
        named.len()
    );
}
