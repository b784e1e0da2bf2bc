#!/usr/bin/env python3
"""Replication benchmark on three nodes of this machine.

Starts three `sluice server` processes (every node a voter and a broker), creates an RF=1 and
an RF=3 topic (8 partitions each), and alternates `sluice perf produce-batches` runs of 1 KiB records:
RF=1 with acks=1, then RF=3 with acks=all, the ratio of each pair reported. During the RF=3
runs it samples every node's `sluice_follower_lag_max_records` every 100 ms and reports the
lag's p50/p99/max (in records).

usage: benches/replication_perf.py [--sluice PATH] [--seconds N] [--rounds N]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_node import free_port  # noqa: E402


def gauge(http_port, name):
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def perf(binary, bootstrap, topic, acks, seconds):
    out = subprocess.run([binary, "perf", "produce-batches", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--partitions", "8", "--acks", acks, "--seconds", str(seconds),
                          "--record-bytes", "1024"], check=True, stdout=subprocess.PIPE, text=True).stdout
    return {k: float(v) for k, v in (line.split() for line in out.strip().splitlines())}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-repl-")
    nodes = [{"id": i, "kafka": free_port(), "quorum": free_port(), "http": free_port()} for i in (1, 2, 3)]
    voters = ",".join(f"{n['id']}@127.0.0.1:{n['quorum']}" for n in nodes)
    processes = []
    try:
        for n in nodes:
            log = open(os.path.join(work, f"node-{n['id']}.log"), "w")
            processes.append(subprocess.Popen([
                args.sluice, "server",
                "--override", f"node.id={n['id']}",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{n['kafka']},CONTROLLER://127.0.0.1:{n['quorum']}",
                "--override", f"controller.quorum.voters={voters}",
                "--override", f"http.listener=127.0.0.1:{n['http']}",
                "--override", f"log.dirs={os.path.join(work, 'data-' + str(n['id']))}",
                "--override", "min.insync.replicas=2",
                # Keep the disk bounded: old segments go while the benchmark runs.
                "--override", "log.retention.bytes=268435456",
                "--override", "log.segment.bytes=67108864",
                "--override", "log.retention.check.interval.ms=2000",
            ], stdout=subprocess.DEVNULL, stderr=log))
        bootstrap = f"127.0.0.1:{nodes[0]['kafka']}"
        deadline = time.time() + 60
        while time.time() < deadline and any(gauge(n["http"], "sluice_brokers_unfenced") != 3 for n in nodes):
            time.sleep(0.2)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for topic, factor in (("rf1", 1), ("rf3", 3)):
            admin.create_topics([NewTopic(topic, num_partitions=8, replication_factor=factor)])[topic].result()
        time.sleep(2)
        lags = []
        sampling = threading.Event()

        def sample():
            while True:
                if sampling.is_set():
                    values = [gauge(n["http"], "sluice_follower_lag_max_records") for n in nodes]
                    lags.append(max(v for v in values if v is not None))
                time.sleep(0.1)

        threading.Thread(target=sample, daemon=True).start()
        print(f"{'round':<6} {'RF=1 acks=1 MB/s':>17} {'p99 ms':>7} {'RF=3 acks=all MB/s':>19} {'p99 ms':>7} {'ratio':>6}")
        for round_ in range(1, args.rounds + 1):
            one = perf(args.sluice, bootstrap, "rf1", "1", args.seconds)
            sampling.set()
            three = perf(args.sluice, bootstrap, "rf3", "-1", args.seconds)
            sampling.clear()
            print(f"{round_:<6} {one['produce_mb_s']:>17.1f} {one['produce_request_p99_ms']:>7.1f} "
                  f"{three['produce_mb_s']:>19.1f} {three['produce_request_p99_ms']:>7.1f} "
                  f"{three['produce_mb_s'] / one['produce_mb_s']:>5.2f}x", flush=True)
        lags.sort()
        if lags:
            pick = lambda p: lags[min(len(lags) - 1, int(len(lags) * p))]
            print(f"follower lag under RF=3 load ({len(lags)} samples): p50 {pick(0.5):.0f}, "
                  f"p99 {pick(0.99):.0f}, max {lags[-1]:.0f} records")
    finally:
        for p in processes:
            p.terminate()
        for p in processes:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
