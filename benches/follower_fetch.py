#!/usr/bin/env python3
"""Cross-rack fetch bytes with and without `client.rack` (KIP-392, fetch from follower).

Starts three nodes (benches/failover.py's cluster) in racks rack-1..rack-3 with Kafka's
RackAwareReplicaSelector, creates an RF=3 topic of 6 partitions (each node leads two),
writes RECORDS records of 1 KiB with
confluent-kafka (acks=all), lets replication settle, then reads the whole topic with a
confluent-kafka consumer in rack-1: once without `client.rack`, once with it. Nothing is
written while it reads, so what each broker's `sluice_bytes_out_total` grows by is what it
served that consumer; bytes served by brokers outside rack-1 are the cross-rack bytes (what a
cloud provider bills between zones). Also the read's duration and the leader's redirects.

usage: benches/follower_fetch.py [--sluice PATH] [--records N]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from failover import Cluster  # noqa: E402
from sluice_node import say  # noqa: E402

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
PARTITIONS = 6


def counter(node, name):
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{node['http']}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return 0


def counters(nodes, name):
    return {i: counter(n, name) or 0 for i, n in nodes.items()}


def read_all(bootstrap, topic, expected, rack):
    config = {"bootstrap.servers": bootstrap, "group.id": f"ffr-{rack or 'none'}-{time.time()}",
              "enable.auto.commit": False, "fetch.wait.max.ms": 100}
    if rack:
        config["client.rack"] = rack
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count, started = 0, time.monotonic()
    while count < expected and time.monotonic() - started < 300:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            count += 1
    elapsed = time.monotonic() - started
    consumer.close()
    if count < expected:
        sys.exit(f"read {count} of {expected} records")
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default="target/release/sluice")
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-ffr-")
    cluster = Cluster(os.path.abspath(args.sluice), work,
                      lambda i: [f"broker.rack=rack-{i}", f"replica.selector.class={SELECTOR}"])
    nodes, bootstrap = cluster.nodes, cluster.bootstrap
    try:
        deadline = time.monotonic() + 60
        while any(counter(n, "sluice_brokers_unfenced") != 3 for n in nodes.values()):
            if time.monotonic() > deadline:
                sys.exit("the cluster did not come up")
            time.sleep(0.2)
        topic = "ffr"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(60)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        value = b"x" * 1024
        for i in range(args.records):
            while True:
                try:
                    producer.produce(topic, value=value, partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.1)
        if producer.flush(120):
            sys.exit("records left unacknowledged")
        del producer, admin
        time.sleep(3)  # followers learn the final high watermark with their next fetches
        say(f"wrote {args.records} records of 1 KiB")
        results = []
        for rack in (None, "rack-1"):
            before = counters(nodes, "sluice_bytes_out_total")
            redirects_before = counters(nodes, "sluice_fetch_preferred_read_replica_total")
            elapsed = read_all(bootstrap, topic, args.records, rack)
            after = counters(nodes, "sluice_bytes_out_total")
            redirects = sum(counters(nodes, "sluice_fetch_preferred_read_replica_total").values()) \
                - sum(redirects_before.values())
            served = {i: after[i] - before[i] for i in nodes}
            total = sum(served.values())
            cross = total - served[1]
            results.append((rack or "(none)", total, cross, elapsed, redirects))
            say(f"client.rack {rack}: {served}")
        print("| client.rack | bytes served | cross-rack bytes | cross-rack share | read time s | redirects |")
        print("|---|---|---|---|---|---|")
        for rack, total, cross, elapsed, redirects in results:
            print(f"| {rack} | {total:,} | {cross:,} | {cross / max(total, 1):.0%} | {elapsed:.1f} | {redirects} |")
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
