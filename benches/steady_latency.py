#!/usr/bin/env python3
"""Produce latency at a steady offered load: is the tail flat?

Starts one node with the shipped defaults (default flush policy) and offers a steady rate
(default 100,000 records/s of 100 B, acks=all, linger.ms=0, one partition) with
`sluice perf produce --throughput`, which times every record from send to acknowledgement.
Three runs:

- `fresh`: nothing else going on;
- `writeback`: right after a burst of `--burst-gb` GB (as fast as it goes), while the kernel
  still writes that back (the dirty page cache before the run is reported);
- `consumer`: with `sluice perf consume` reading the same topic at the same time.

For each: records/s, p50/p99/p99.9/max in ms, and where the broker's threads were blocked
in the kernel: /proc/<pid>/task/*/stat is sampled every 2 ms, and samples of a thread in
uninterruptible sleep (state D: waiting on I/O or on writeback throttling) are counted by
thread name and kernel wait channel (`off_cpu_io_ms`, approximate: samples x 2 ms).

usage: benches/steady_latency.py [--sluice PATH] [--rate 100000] [--seconds 30] [--burst-gb 1]
       [--override KEY=VALUE ...]
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from sluice_node import Node, say


def dirty_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Dirty:"):
                return round(int(line.split()[1]) / 1024)
    return None


class BlockedSampler(threading.Thread):
    """Counts samples of the broker's threads in state D, by (thread name, wait channel)."""

    def __init__(self, pid, every_s=0.002):
        super().__init__(daemon=True)
        self.pid, self.every_s = pid, every_s
        self.counts = collections.Counter()
        self.samples = 0
        self.stop = threading.Event()

    def run(self):
        tasks = f"/proc/{self.pid}/task"
        while not self.stop.is_set():
            self.samples += 1
            try:
                for tid in os.listdir(tasks):
                    try:
                        with open(f"{tasks}/{tid}/stat") as f:
                            stat = f.read()
                        name = stat[stat.index("(") + 1:stat.rindex(")")]
                        state = stat[stat.rindex(")") + 2]
                        if state != "D":
                            continue
                        with open(f"{tasks}/{tid}/wchan") as f:
                            wchan = f.read().strip() or "?"
                        self.counts[(name, wchan)] += 1
                    except OSError:
                        continue
            except OSError:
                return
            time.sleep(self.every_s)

    def report(self):
        return {f"{name}@{wchan}": round(n * self.every_s * 1000) for (name, wchan), n in self.counts.most_common(8)}


def steady(node, topic, rate, seconds, consumer=False):
    records = rate * seconds
    subprocess.run([node.binary, "topics", "create", topic, "--partitions", "1",
                    "--bootstrap-server", node.bootstrap], stdout=subprocess.DEVNULL, check=True)
    reader = None
    if consumer:
        reader = subprocess.Popen(node.perf("consume", "--topic", topic, "--messages", str(records),
                                            "--timeout", "60000", "--output", "json"),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    sampler = BlockedSampler(node.process.pid)
    sampler.start()
    out = subprocess.run(node.perf("produce", "--topic", topic, "--num-records", str(records),
                                   "--record-size", "100", "--throughput", str(rate),
                                   "--producer-props", "acks=all", "linger.ms=0", "--output", "json"),
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    sampler.stop.set()
    sampler.join()
    result = json.loads(out.strip().splitlines()[-1])
    row = {k: result[k] for k in ("records_per_sec", "p50_ms", "p99_ms", "p999_ms", "max_ms")}
    row["off_cpu_io_ms"] = sampler.report()
    if reader:
        consumed = json.loads(reader.communicate(timeout=120)[0].strip().splitlines()[-1])
        row["consumer_records"] = consumed["records"]
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--rate", type=int, default=100_000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--burst-gb", type=float, default=1.0)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting, e.g. thread.affinity=false (repeatable)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-steady-")
    node = Node(args.sluice, work, args.override)
    node.start()
    node.wait_listening()
    try:
        say("fresh")
        print(json.dumps({"run": "fresh", **steady(node, "steady-fresh", args.rate, args.seconds)}), flush=True)
        say(f"burst of {args.burst_gb} GB")
        subprocess.run(node.perf("produce", "--topic", "burst", "--num-records", str(int(args.burst_gb * 1e7)),
                                 "--record-size", "100", "--producer-props", "acks=1", "linger.ms=5",
                                 "--output", "json"), stdout=subprocess.DEVNULL, check=True)
        dirty = dirty_mib()
        say("writeback")
        row = steady(node, "steady-writeback", args.rate, args.seconds)
        print(json.dumps({"run": "writeback", "dirty_mib_before": dirty, **row}), flush=True)
        say("consumer")
        row = steady(node, "steady-consumer", args.rate, args.seconds, consumer=True)
        print(json.dumps({"run": "consumer", **row}), flush=True)
    finally:
        node.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
