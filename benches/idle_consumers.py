#!/usr/bin/env python3
"""Idle long-polling consumers must cost a broker nothing while another partition takes writes.

Starts its own broker (target/release/sluice) on free ports, creates a topic with 1,001
partitions, then runs `sluice perf idle-consumers` twice: one producer (one record per acks=1
request, partition 0) beside 10 and beside 1,000 idle consumers, each on its own connection
long-polling its own empty partition (max_wait_ms 500). Reports, for both, the producer's
request latency p50/p99 against TCP loopback round trips measured in the same run, and the
broker's CPU time over the run. With the purgatory neither should grow with the consumers:
an append wakes only the requests waiting on its partition, and an idle consumer costs the
broker two fetches a second.

usage: benches/idle_consumers.py [--sluice PATH] [--broker PATH] [--seconds N]
(--broker: another build to run as the broker, to compare it with; default --sluice)
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kafka_perf import Broker  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PARTITIONS = 1001


def figures(text):
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--broker")
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-idle-")
    broker = Broker(args.broker or args.sluice, work)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("idle", PARTITIONS, 1)])["idle"].result(60)
        results = {}
        for consumers in (10, 1000):
            run = subprocess.run([
                args.sluice, "perf", "idle-consumers",
                "--bootstrap-server", broker.bootstrap, "--topic", "idle",
                "--consumers", str(consumers), "--seconds", str(args.seconds),
                "--broker-pid", str(broker.process.pid),
            ], capture_output=True, text=True, check=True)
            print(f"--- {consumers} idle consumers\n{run.stdout}", flush=True)
            results[consumers] = figures(run.stdout)
        few, many = results[10], results[1000]
        for name in ("produce_request_p50_ms", "produce_request_p99_ms", "broker_cpu_percent", "broker_cpu_us_per_produce"):
            print(f"{name}: 10 consumers {few[name]:.3f}, 1000 consumers {many[name]:.3f}, ratio {many[name] / few[name]:.2f}")
        print(f"produce p99 over loopback p99: {few['produce_p99_over_loopback_p99']:.1f} (10), {many['produce_p99_over_loopback_p99']:.1f} (1000)")
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
