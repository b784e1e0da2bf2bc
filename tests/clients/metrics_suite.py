"""/metrics judged by a third party: the Prometheus Python client's parser reads the whole
exposition (every family once, HELP and TYPE before its samples), and the numbers match what
confluent-kafka did and saw.

usage: metrics_suite.py BOOTSTRAP HTTP_PORT partition-metrics|no-partition-metrics
"""

import json
import socket
import struct
import sys
import time
import urllib.request

from confluent_kafka import KafkaException, Producer, TopicPartition, Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

bootstrap, http_port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
TOPIC = "metrics-suite"


def scrape():
    """Every sample of /metrics as {(name, frozenset(labels)): value}, and the family types;
    fails on text the parser refuses and on a family written twice."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as answer:
        assert answer.status == 200, answer.status
        text = answer.read().decode()
    parsed, samples = set(), {}
    for family in text_string_to_metric_families(text):
        # (The parser names a counter's family without `_total`.)
        assert family.name not in parsed, f"family {family.name} written twice"
        parsed.add(family.name)
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    # Every family's TYPE comes once (the parser would merge repeats), by its full name.
    types = [line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE ")]
    families = dict(types)
    assert len(types) == len(families), "a TYPE line repeated"
    return families, samples


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def raw_request(api_key, api_version):
    """A request header with no body over a raw socket; the broker closes the connection."""
    client_id = b"metrics-suite"
    header = struct.pack(">hhih", api_key, api_version, 7, len(client_id)) + client_id
    with socket.create_connection(("127.0.0.1", int(bootstrap.rsplit(":", 1)[1])), 5) as s:
        s.sendall(struct.pack(">i", len(header)) + header)
        s.settimeout(5)
        try:
            while s.recv(4096):
                pass
        except (ConnectionResetError, socket.timeout):
            pass


admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
# The same topic again: the response carries TOPIC_ALREADY_EXISTS.
try:
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
    raise AssertionError("a second create succeeded")
except KafkaException as error:
    assert error.args[0].name() == "TOPIC_ALREADY_EXISTS", error

producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
per_partition = {0: 10, 1: 20, 2: 5}
for partition, count in per_partition.items():
    for i in range(count):
        producer.produce(TOPIC, value=b"x" * 100, key=str(i), partition=partition)
assert producer.flush(30) == 0

# A Produce at a version nobody serves, and an API key Kafka does not have.
raw_request(0, 99)
raw_request(999, 0)

consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "metrics-suite-group",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
consumer.assign([TopicPartition(TOPIC, 0, 0)])
read = 0
deadline = time.time() + 30
while read < 4 and time.time() < deadline:
    message = consumer.poll(1)
    if message is not None and message.error() is None:
        read += 1
consumer.commit(asynchronous=False)
consumer.close()

families, samples = scrape()
problems = []


def expect(condition, what):
    if not condition:
        problems.append(what)


for name in ["process_cpu_seconds_total", "process_resident_memory_bytes",
             "process_open_fds", "process_max_fds", "process_start_time_seconds"]:
    expect(name in families, f"{name} missing")
expect(value(samples, "process_resident_memory_bytes") > 1_000_000, "rss too small")
start = value(samples, "process_start_time_seconds")
expect(start is not None and time.time() - 600 < start <= time.time(), f"start time {start}")
build = [labels for (name, labels) in samples if name == "sluice_build_info"]
expect(len(build) == 1 and dict(build[0]).get("version"), f"build info {build}")

expect(value(samples, "sluice_request_errors_total", api="CreateTopics",
             error="TOPIC_ALREADY_EXISTS") == 1, "CreateTopics TOPIC_ALREADY_EXISTS not counted")
expect(value(samples, "sluice_request_errors_total", api="Produce",
             error="UNSUPPORTED_VERSION") == 1, "Produce v99 not counted")
expect(value(samples, "sluice_request_errors_total", api="unknown",
             error="INVALID_REQUEST") == 1, "API key 999 not counted")
expect(value(samples, "sluice_requests_total", api="Produce") >= 1, "no Produce counted")
expect(families.get("sluice_request_latency_seconds") == "histogram", "latency not a histogram")

if mode == "partition-metrics":
    for partition, count in per_partition.items():
        labels = {"topic": TOPIC, "partition": str(partition)}
        expect(value(samples, "sluice_partition_log_end_offset", **labels) == count,
               f"log end of {partition}")
        expect(value(samples, "sluice_partition_high_watermark", **labels) == count,
               f"high watermark of {partition}")
        expect(value(samples, "sluice_partition_log_start_offset", **labels) == 0,
               f"log start of {partition}")
        expect(value(samples, "sluice_partition_under_replicated", **labels) == 0,
               f"under-replicated of {partition}")
        expect(value(samples, "sluice_partition_size_bytes", **labels) > 100 * count,
               f"size of {partition}")
    expect(value(samples, "sluice_topic_partitions_hosted", topic=TOPIC) == 3, "partitions hosted")
    topic_size = value(samples, "sluice_topic_size_bytes", topic=TOPIC)
    partition_sizes = sum(value(samples, "sluice_partition_size_bytes", topic=TOPIC,
                                partition=str(p)) for p in per_partition)
    expect(topic_size == partition_sizes, f"topic size {topic_size} != {partition_sizes}")
    expect(value(samples, "sluice_topic_messages_in_total", topic=TOPIC) == 35, "messages in")
    bytes_in = value(samples, "sluice_topic_bytes_in_total", topic=TOPIC)
    expect(bytes_in is not None and 35 * 100 < bytes_in <= partition_sizes, f"bytes in {bytes_in}")
    # The consumer read partition 0 (10 records, one or more batches) from offset 0.
    bytes_out = value(samples, "sluice_topic_bytes_out_total", topic=TOPIC)
    size_0 = value(samples, "sluice_partition_size_bytes", topic=TOPIC, partition="0")
    expect(bytes_out is not None and 0 < bytes_out and bytes_out >= size_0 // 2,
           f"bytes out {bytes_out} (partition 0 holds {size_0})")
else:
    for name in families:
        expect(not name.startswith("sluice_partition_") and not name.startswith("sluice_topic_"),
               f"{name} shown with metrics.partition.enable=false")

# The group's lag on partition 0: committed 4 of 10.
expect(value(samples, "sluice_consumer_group_lag_sum", group="metrics-suite-group",
             topic=TOPIC) == 6, "group lag")

if problems:
    print(json.dumps(sorted(f"{n}{dict(l)}={v}" for (n, l), v in samples.items()
                            if n.startswith("sluice_request_errors") or TOPIC in str(l)),
                     indent=1))
    sys.exit("; ".join(problems))
print(f"metrics ok: {len(families)} families, {len(samples)} samples")
