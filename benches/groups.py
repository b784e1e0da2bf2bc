#!/usr/bin/env python3
"""Consumer group timings with librdkafka (confluent-kafka) against a broker of its own.

- join: a fresh consumer with librdkafka's defaults subscribes to a topic that has records,
  in an empty group: the time to its first record. Run with the embedded default
  (group.initial.rebalance.delay.ms=0) and with Kafka's 3000 ms, for the classic protocol
  and for KIP-848 (group.protocol=consumer).
- rebalance: ten consumers own a topic; an eleventh joins. Two times from its subscribe():
  `first`, until every partition is owned by exactly one member and the newcomer owns at
  least one; `balanced`, until besides every member owns its share (the partition count over
  the members, or one more). And how many partitions were revoked on the way (all of them
  under the eager protocol; only the moved ones under cooperative-sticky and KIP-848). With
  22 partitions the two members holding a third one must each give it up (no choice); with
  20 any one of the ten may give one up. Each scenario runs --rounds times with fresh groups:
  median and max. A rebalance waits on members' heartbeats, so when the newcomer arrives
  matters: `--join-at settled` starts it as soon as the ten are balanced (just after they all
  heartbeat: the worst moment when their heartbeats are in step), `random` (the default) at a
  moment drawn uniformly from the 5 s after that (seeded by the round: the same moments for
  every binary).
  librdkafka's members are polled in turn from one thread (5 ms each); the SDK's are
  `sluice consume --group` processes, their assignment read from the SDK's log lines
  ("joined the group" / "reconciled the group's assignment", `assigned=N`), timed from the
  newcomer process's start.
- commit: one member commits one partition's offset synchronously in a loop: commits per
  second and latency p50/p99, beside single-record acks=all produce latency measured in the
  same run (the same replicated append a commit waits for: the raw limit).

usage: benches/groups.py [--sluice PATH] [--seconds N] [--rounds N] [--join-at random|settled]
                         [--only join,rebalance,sdk,commit] [--protocols classic,cooperative,consumer]
"""
import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
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


def owned_once(owned_lists, partitions):
    owned = [p for parts in owned_lists for p in parts]
    return len(owned) == partitions and len(set(owned)) == partitions


def shares(counts, partitions):
    """Whether the counts are a balanced split of `partitions`."""
    floor = partitions // len(counts)
    return sum(counts) == partitions and all(floor <= c <= floor + 1 for c in counts)


def rebalance_time(bootstrap, topic, group, protocol, partitions, delay):
    """librdkafka: (first, balanced, revoked) for an eleventh member arriving `delay` seconds
    after the ten are balanced; times in seconds."""
    members = [Member(bootstrap, group, topic, protocol) for _ in range(10)]

    def poll_until(done, deadline):
        while not done() and time.monotonic() < deadline:
            for m in members:
                m.consumer.poll(0.005)
        return done()

    balanced = lambda: (owned_once([m.owned for m in members], partitions)  # noqa: E731
                        and shares([len(m.owned) for m in members], partitions))
    poll_until(balanced, time.monotonic() + 120)
    poll_until(lambda: False, time.monotonic() + delay)
    for m in members:
        m.revoked = 0
    newcomer = Member(bootstrap, group, topic, protocol)
    members.append(newcomer)
    started = time.monotonic()
    first_seen = lambda: bool(newcomer.owned) and owned_once([m.owned for m in members], partitions)  # noqa: E731
    first = time.monotonic() - started if poll_until(first_seen, started + 120) else float("nan")
    done = poll_until(balanced, started + 120)
    settled = time.monotonic() - started if done else float("nan")
    revoked = sum(m.revoked for m in members)
    close_all([m.consumer for m in members])
    return first, settled, revoked


def close_all(consumers):
    """Closes every consumer at once: closed one after another from this thread, a closing
    cooperative member can wait for a rebalance that needs the others, which nobody polls."""
    threads = [threading.Thread(target=c.close) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


ANSI = re.compile(r"\x1b\[[0-9;]*m")
ASSIGNED = re.compile(r"(?:joined the group|reconciled the group's assignment).*\bassigned=(\d+)")


class SdkMember:
    """A `sluice consume --group` process; `count` follows the SDK's log of its assignment."""

    def __init__(self, binary, bootstrap, group, topic, protocol):
        self.count = 0
        self.process = subprocess.Popen(
            [binary, "consume", topic, "--group", group, "--bootstrap-server", bootstrap,
             "--consumer-property", f"group.protocol={protocol}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, RUST_LOG="warn,sluice::client::group=info", NO_COLOR="1"))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stderr:
            match = ASSIGNED.search(ANSI.sub("", line))
            if match:
                self.count = int(match.group(1))

    def stop(self):
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def sdk_rebalance_time(binary, bootstrap, topic, group, protocol, partitions, delay):
    """The SDK: (first, balanced) for an eleventh member arriving `delay` seconds after the ten
    are balanced; times in seconds."""
    members = [SdkMember(binary, bootstrap, group, topic, protocol) for _ in range(10)]

    def wait_until(done, deadline):
        while not done() and time.monotonic() < deadline:
            time.sleep(0.002)
        return done()

    balanced = lambda: shares([m.count for m in members], partitions)  # noqa: E731
    try:
        wait_until(balanced, time.monotonic() + 120)
        time.sleep(delay)
        started = time.monotonic()
        newcomer = SdkMember(binary, bootstrap, group, topic, protocol)
        members.append(newcomer)
        first_seen = lambda: newcomer.count > 0 and sum(m.count for m in members) == partitions  # noqa: E731
        first = time.monotonic() - started if wait_until(first_seen, started + 120) else float("nan")
        settled = time.monotonic() - started if wait_until(balanced, started + 120) else float("nan")
        return first, settled
    finally:
        for m in members:
            m.stop()


def summary(values):
    values = [v for v in values if v == v]
    if not values:
        return "nan"
    return f"median {statistics.median(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms"


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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="join,rebalance,sdk,commit")
    parser.add_argument("--join-at", choices=("random", "settled"), default="random")
    parser.add_argument("--protocols", default="classic,cooperative,consumer")
    args = parser.parse_args()
    only = set(args.only.split(","))
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    for delay in (0, 3000) if "join" in only else ():
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
        for partitions in (22, 20):
            create(broker.bootstrap, f"rebalance-{partitions}", partitions)
        join_time(broker.bootstrap, "rebalance-22", "warm-up", "classic")
        scenarios = []
        if "rebalance" in only:
            scenarios += [("librdkafka", p, 22) for p in ("classic", "cooperative", "consumer")]
            scenarios += [("librdkafka", "consumer", 20)]
        if "sdk" in only:
            scenarios += [("sdk", p, n) for p in ("classic", "consumer") for n in (22, 20)]
        for client, protocol, partitions in [s for s in scenarios if s[1] in args.protocols.split(",")]:
            topic = f"rebalance-{partitions}"
            firsts, settles, revokes = [], [], []
            for r in range(args.rounds):
                group = f"rb-{client}-{protocol}-{partitions}-{r}"
                delay = random.Random(r).uniform(0, 5) if args.join_at == "random" else 0
                if client == "sdk":
                    first, settled = sdk_rebalance_time(args.sluice, broker.bootstrap, topic, group,
                                                        protocol, partitions, delay)
                else:
                    first, settled, revoked = rebalance_time(broker.bootstrap, topic, group, protocol,
                                                             partitions, delay)
                    revokes.append(revoked)
                firsts.append(first)
                settles.append(settled)
            revoked = f", {statistics.median(revokes):.0f} of {partitions} partitions revoked" if revokes else ""
            print(f"rebalance 10 -> 11 members (join at {args.join_at}), {client:10} {protocol:11} "
                  f"{partitions} partitions: "
                  f"first {summary(firsts)}; balanced {summary(settles)}{revoked} "
                  f"(rounds: {', '.join(ms(t) for t in settles)})", flush=True)
        if "commit" in only:
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
