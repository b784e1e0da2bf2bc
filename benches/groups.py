#!/usr/bin/env python3
"""Consumer group timings with librdkafka (confluent-kafka) against a broker of its own.

- join: a fresh consumer with librdkafka's defaults subscribes to a topic that has records,
  in an empty group: the time to its first record. Run with the embedded default
  (group.initial.rebalance.delay.ms=0) and with Kafka's 3000 ms, for the classic protocol
  and for KIP-848 (group.protocol=consumer).
- rebalance: ten consumers own a 22-partition topic; an eleventh joins. The time from its
  subscribe() until every partition is owned by exactly one member and the newcomer owns its
  share; and how many partitions were revoked on the way (all of them under the eager
  protocol; only the moved ones under cooperative-sticky and KIP-848).
- commit: one member commits one partition's offset synchronously in a loop: commits per
  second and latency p50/p99, beside single-record acks=all produce latency measured in the
  same run (the same replicated append a commit waits for: the raw limit).

usage: benches/groups.py [--sluice PATH] [--seconds N]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kafka_perf import Broker, percentile  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def create(bootstrap, topic, partitions, records_per_partition=0):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    if records_per_partition:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for p in range(partitions):
            for i in range(records_per_partition):
                producer.produce(topic, value=b"x" * 100, partition=p)
        producer.flush(60)


def consumer(bootstrap, group, protocol, **extra):
    config = {"bootstrap.servers": bootstrap, "group.id": group,
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if protocol == "consumer":
        config["group.protocol"] = "consumer"
    elif protocol == "cooperative":
        config["partition.assignment.strategy"] = "cooperative-sticky"
    config.update(extra)
    return Consumer(config)


def join_time(bootstrap, topic, group, protocol):
    c = consumer(bootstrap, group, protocol)
    started = time.monotonic()
    c.subscribe([topic])
    while time.monotonic() - started < 60:
        m = c.poll(0.01)
        if m is not None and not m.error():
            elapsed = time.monotonic() - started
            c.close()
            return elapsed
    c.close()
    return float("nan")


class Member:
    def __init__(self, bootstrap, group, topic, protocol):
        self.owned, self.revoked = set(), 0
        self.incremental = protocol in ("cooperative", "consumer")
        self.consumer = consumer(bootstrap, group, protocol)
        self.consumer.subscribe([topic], on_assign=self.assign, on_revoke=self.revoke)

    def assign(self, _, partitions):
        parts = {p.partition for p in partitions}
        self.owned = self.owned | parts if self.incremental else parts

    def revoke(self, _, partitions):
        parts = {p.partition for p in partitions}
        self.revoked += len(parts)
        self.owned = self.owned - parts if self.incremental else set()


def settled(members, partitions):
    owned = [p for m in members for p in m.owned]
    return len(owned) == partitions and len(set(owned)) == partitions and all(m.owned for m in members)


def rebalance_time(bootstrap, topic, group, protocol, partitions):
    members = [Member(bootstrap, group, topic, protocol) for _ in range(10)]
    deadline = time.monotonic() + 120
    while not settled(members, partitions) and time.monotonic() < deadline:
        for m in members:
            m.consumer.poll(0.005)
    for m in members:
        m.revoked = 0
    newcomer = Member(bootstrap, group, topic, protocol)
    members.append(newcomer)
    started = time.monotonic()
    deadline = started + 120
    while not settled(members, partitions) and time.monotonic() < deadline:
        for m in members:
            m.consumer.poll(0.005)
    elapsed = time.monotonic() - started if settled(members, partitions) else float("nan")
    revoked = sum(m.revoked for m in members)
    for m in members:
        m.consumer.close()
    return elapsed, revoked


def commit_latency(bootstrap, topic, seconds):
    # Commits need no assignment (a tool's commit to a group without members).
    c = consumer(bootstrap, "bench-commit", "classic")
    latencies = []
    offset = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        offset += 1
        t = time.monotonic()
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        latencies.append(time.monotonic() - t)
    elapsed = time.monotonic() - started
    c.close()
    latencies.sort()
    produce = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        t = time.monotonic()
        producer.produce(topic, value=b"x", partition=0)
        producer.flush(10)
        produce.append(time.monotonic() - t)
    produce.sort()
    return len(latencies) / elapsed, latencies, produce


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    for delay in (0, 3000):
        work = tempfile.mkdtemp(prefix="sluice-groups-")
        broker = Broker(args.sluice, work, overrides=[f"group.initial.rebalance.delay.ms={delay}"])
        try:
            create(broker.bootstrap, "join", 4, 100)
            # The first FindCoordinator creates __consumer_offsets: not part of a join.
            join_time(broker.bootstrap, "join", "warm-up", "classic")
            for protocol in ("classic", "consumer"):
                t = join_time(broker.bootstrap, "join", f"join-{protocol}", protocol)
                print(f"join {protocol:9} initial_delay {delay:4} ms: first record after {ms(t)}", flush=True)
        finally:
            broker.stop()
            shutil.rmtree(work, ignore_errors=True)
    work = tempfile.mkdtemp(prefix="sluice-groups-")
    broker = Broker(args.sluice, work)
    try:
        create(broker.bootstrap, "rebalance", 22)
        join_time(broker.bootstrap, "rebalance", "warm-up", "classic")
        for protocol in ("classic", "cooperative", "consumer"):
            t, revoked = rebalance_time(broker.bootstrap, "rebalance", f"rb-{protocol}", protocol, 22)
            print(f"rebalance 10 -> 11 members, {protocol:11}: settled after {ms(t)}, "
                  f"{revoked} of 22 partitions revoked", flush=True)
        create(broker.bootstrap, "commit", 1)
        rate, commits, produces = commit_latency(broker.bootstrap, "commit", args.seconds)
        c50, c99 = percentile(commits, 0.50), percentile(commits, 0.99)
        p50, p99 = percentile(produces, 0.50), percentile(produces, 0.99)
        print(f"commit: {rate:.0f} sync commits/s, p50 {c50 * 1000:.3f} ms, p99 {c99 * 1000:.3f} ms; "
              f"acks=all produce p50 {p50 * 1000:.3f} ms, p99 {p99 * 1000:.3f} ms; "
              f"commit/produce p99 x{c99 / p99:.2f}", flush=True)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
