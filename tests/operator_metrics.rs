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
