#!/usr/bin/env python3
"""What the web console and /metrics cost the broker.

1. Render: the console's pages in headless Chromium (benches/console_render.js): milliseconds
   from navigation to the page drawn with its data, p50 and max over --loads loads, on an idle
   broker with a topic and a group.
2. Data path: kcat produces --records records of 100 B (linger.ms=5, acks=1) to a 4-partition
   topic at full speed, alternately without and with 5 "browsers" refreshing the overview every
   second (5 pollers fetching what the overview page fetches: /api/v1/cluster and
   /api/v1/broker/series; real browsers run on the operators' machines, and 5 Chromium
   processes on this 2-core VM would measure their own rendering). Records/s and broker CPU
   per million records, per pass and as medians; the throughput ratio with/without.
3. /metrics at scale: the same broker grown to --partitions partitions (topics of 100) and
   --groups groups (each committed one offset); scrape time and bytes, median of 5, with the
   per-partition gauges (metrics.partition.enable=true, the default) and without (the broker
   restarted with false).

The loopback copy rate (`sluice perf raw`) is measured in the same run as the raw limit.
Results as JSON lines on stdout; progress on stderr.

usage: benches/console.py [--sluice PATH] [--records N] [--rounds N] [--partitions N] [--groups N]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_node import Node, say  # noqa: E402

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def get(url, timeout=60):
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.read()


def render(node, loads):
    env = dict(os.environ, NODE_PATH=os.path.join(ROOT, "tests/clients/node_modules"))
    out = subprocess.run(
        ["node", os.path.join(ROOT, "benches/console_render.js"), f"http://127.0.0.1:{node.http}",
         str(loads), "", "topics", "topics/bench-load", "topics/bench-load/browse?partition=0&from=newest&limit=50",
         "groups", "groups/bench-group"],
        env=env, check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


class Pollers:
    """`count` threads, each fetching what the overview fetches, once a second."""

    def __init__(self, node, count):
        self.node, self.count = node, count
        self.stop = threading.Event()
        self.requests, self.errors, self.latencies = 0, 0, []
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(count)]

    def run(self):
        base = f"http://127.0.0.1:{self.node.http}/api/v1/"
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                get(base + "cluster", timeout=10)
                get(base + "broker/series", timeout=10)
                self.requests += 2
                self.latencies.append(time.monotonic() - started)
            except OSError:
                self.errors += 1
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


def produce(node, records_file, records, topic="bench-load"):
    cpu = node.cpu_seconds()
    started = time.monotonic()
    subprocess.run(["kcat", "-P", "-b", node.bootstrap, "-t", topic, "-X", "linger.ms=5",
                    "-X", "acks=1", "-X", "enable.idempotence=false", "-X", "compression.codec=none",
                    "-X", "queue.buffering.max.messages=1000000", "-l", records_file],
                   check=True, stderr=subprocess.DEVNULL)
    seconds = time.monotonic() - started
    return {"records_per_s": round(records / seconds), "broker_cpu_s_per_million": round((node.cpu_seconds() - cpu) / records * 1e6, 3)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(ROOT, "target/release/sluice"))
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=1_000)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="sluice-console-bench-")
    node = Node(args.sluice, work, overrides=["thread.affinity=false"])
    try:
        raw = subprocess.run([args.sluice, "perf", "raw", "--dir", work], check=True,
                             stdout=subprocess.PIPE, text=True).stdout.strip()
        print(json.dumps({"raw_limits": raw.split()}), flush=True)
        node.start()
        node.wait_ready()
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic("bench-load", 4, 1)])["bench-load"].result(60)
        records_file = os.path.join(work, "records")
        with open(records_file, "w") as f:
            line = "x" * 99 + "\n"
            f.write(line * args.records)
        # A group with a committed offset for the group pages.
        consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "bench-group"})
        consumer.commit(offsets=[TopicPartition("bench-load", 0, 0)], asynchronous=False)
        consumer.close()

        # 1. Render times.
        produce(node, records_file, args.records)
        for row in render(node, args.loads):
            print(json.dumps({"render": row}), flush=True)

        # 2. Produce with and without 5 pollers, alternating.
        # Each pass writes to a fresh topic and the previous one is deleted, so that every
        # pass starts from the same disk and page cache (a growing log changes the broker's
        # cost per record once the page cache is full).
        passes = {"without": [], "with_5_overviews": []}
        previous = "bench-load"
        for round_index in range(args.rounds):
            for mode in ("without", "with_5_overviews"):
                topic = f"bench-pass-{round_index}-{mode}"
                admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(60)
                admin.delete_topics([previous])[previous].result(60)
                previous = topic
                time.sleep(2)
                if mode == "without":
                    result = produce(node, records_file, args.records, topic)
                else:
                    with Pollers(node, 5) as pollers:
                        result = produce(node, records_file, args.records, topic)
                        result["console_requests"] = pollers.requests
                        result["console_errors"] = pollers.errors
                        if pollers.latencies:
                            result["overview_fetch_ms_p50"] = round(statistics.median(pollers.latencies) * 1000, 1)
                passes[mode].append(result)
                print(json.dumps({"round": round_index, "mode": mode, **result}), flush=True)
        # The console's own cost on an idle broker: CPU per second with the 5 pollers.
        cpu = node.cpu_seconds()
        time.sleep(5)
        idle = node.cpu_seconds() - cpu
        with Pollers(node, 5) as pollers:
            cpu = node.cpu_seconds()
            time.sleep(20)
            polled = node.cpu_seconds() - cpu
            overviews = pollers.requests / 2
        without = statistics.median(p["records_per_s"] for p in passes["without"])
        with_console = statistics.median(p["records_per_s"] for p in passes["with_5_overviews"])
        pairs = [w["records_per_s"] / o["records_per_s"]
                 for o, w in zip(passes["without"], passes["with_5_overviews"])]
        print(json.dumps({
            "produce_records_per_s_median": {"without": without, "with_5_overviews": with_console},
            "throughput_ratio_with_over_without": round(with_console / without, 3),
            "throughput_ratio_per_round": [round(r, 3) for r in pairs],
            "throughput_ratio_median_of_rounds": round(statistics.median(pairs), 3),
            "idle_broker_cpu_percent": round(idle / 5 * 100, 1),
            "broker_cpu_percent_with_5_overviews_idle": round(polled / 20 * 100, 1),
            "broker_cpu_ms_per_overview_refresh": round((polled - idle * 4) / max(1, overviews) * 1000, 2),
        }), flush=True)

        # 3. /metrics at scale (--partitions 0: skipped).
        if args.partitions == 0:
            return
        topics = [NewTopic(f"scale-{i:04}", 100, 1) for i in range(args.partitions // 100)]
        for start in range(0, len(topics), 10):
            for future in admin.create_topics(topics[start:start + 10], operation_timeout=120).values():
                future.result(300)
        say(f"{args.partitions} partitions created; committing {args.groups} groups")
        for i in range(args.groups):
            consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"scale-group-{i:04}"})
            consumer.commit(offsets=[TopicPartition(f"scale-{i % len(topics):04}", i % 100, 1)], asynchronous=False)
            consumer.close()

        def scrape(label):
            times, sizes = [], []
            for _ in range(5):
                started = time.monotonic()
                body = get(f"http://127.0.0.1:{node.http}/metrics", timeout=120)
                times.append(time.monotonic() - started)
                sizes.append(len(body))
            print(json.dumps({"metrics_scrape": label, "partitions": args.partitions + 4, "groups": args.groups + 1,
                              "ms_median": round(statistics.median(times) * 1000, 1),
                              "bytes": statistics.median(sizes)}), flush=True)

        time.sleep(3)
        scrape("metrics.partition.enable=true")
        node.stop()
        node.overrides.append("metrics.partition.enable=false")
        node.start()
        node.wait_ready(600)
        time.sleep(5)
        scrape("metrics.partition.enable=false")
    finally:
        node.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
