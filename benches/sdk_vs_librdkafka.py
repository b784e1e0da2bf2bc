#!/usr/bin/env python3
"""The SDK's producer against librdkafka's, at the same settings, on the same broker, in one run.

Starts its own broker (target/release/sluice), then alternates `sluice perf produce` (the SDK)
and librdkafka's C benchmark `rdkafka_performance` (built outside the repository; pass
--rdkafka-performance) over the same workload: 100 B records to one partition, acks=all,
idempotence on, linger.ms=5, per-record latency from send to acknowledgement.

Three scenarios:
- as fast as each producer goes (throughput; latency then measures queueing in the client);
- a fixed offered rate (--rate, default 100,000 records/s): latency at the same load, with
  batch.size=1000000 (librdkafka's default: batches go when linger.ms expires) and with
  batch.size=16384 (Java's default: batches fill before linger.ms).

Each scenario runs --rounds times per client, alternating, and reports the median round, with
the client process's CPU time (user + system) per second of its run: rdkafka_performance paces
a fixed rate by spinning (about one core busy), `sluice perf` by sleeping. A busy core answers
wake-ups sooner on this VM, so latency at a fixed rate is also reported for the SDK with a
spinning process beside it (`sdk+spin`): the same CPU state as librdkafka's run.
rdkafka_performance writes every latency to a file (-l -A); percentiles are computed here as
`sluice perf produce` computes its own (the value at index floor(n * p) of the sorted list).

usage: benches/sdk_vs_librdkafka.py --rdkafka-performance PATH [--sluice PATH] [--records N]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from kafka_perf import Broker  # noqa: E402

SETTINGS = {"acks": "all", "linger.ms": "5", "enable.idempotence": "true",
            "batch.size": "1000000", "compression.type": "none"}


def settings(batch_size):
    return dict(SETTINGS, **{"batch.size": str(batch_size)})


def percentile(values, p):
    return values[min(len(values) - 1, int(len(values) * p))] if values else 0.0


def children_cpu_s():
    usage = os.times()
    return usage.children_user + usage.children_system


def timed(run):
    """Runs `run()` and adds `cpu_per_s`: the child's CPU seconds per second of wall time."""
    cpu, wall = children_cpu_s(), time.time()
    figures = run()
    figures["cpu_per_s"] = (children_cpu_s() - cpu) / max(time.time() - wall, 1e-9)
    return figures


def spinning(run):
    """Runs `run()` with a process spinning on the CPU beside it."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        return run()
    finally:
        spinner.kill()
        spinner.wait()


def sdk_run(binary, bootstrap, topic, records, rate, batch_size):
    props = [f"{k}={v}" for k, v in settings(batch_size).items()]
    out = subprocess.run([binary, "perf", "produce", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--num-records", str(records), "--record-size", "100",
                          "--throughput", str(rate), "--output", "json", "--producer-props", *props],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    return {k: figures[k] for k in ("records_per_sec", "p50_ms", "p99_ms", "p999_ms", "max_ms")}


def rdkafka_run(tool, bootstrap, topic, records, rate, batch_size, work):
    latency_file = os.path.join(work, "latency.txt")
    args = [tool, "-P", "-t", topic, "-b", bootstrap, "-p", "0", "-s", "100", "-c", str(records),
            "-l", "-A", latency_file, "-q"]
    if rate > 0:
        args += ["-r", str(rate)]
    for key, value in settings(batch_size).items():
        args += ["-X", f"{key}={value}"]
    out = subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    rate_seen = [float(m) for m in re.findall(r"(\d+) msgs/s", out)]
    with open(latency_file) as f:
        micros = sorted(int(line) for line in f if line.strip())
    ms = [m / 1000 for m in micros]
    return {"records_per_sec": rate_seen[-1] if rate_seen else 0.0,
            "p50_ms": percentile(ms, 0.5), "p99_ms": percentile(ms, 0.99),
            "p999_ms": percentile(ms, 0.999), "max_ms": ms[-1] if ms else 0.0}


def median_round(rounds):
    by_rate = sorted(rounds, key=lambda r: r["records_per_sec"])
    return by_rate[len(by_rate) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--rdkafka-performance", required=True)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rate", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-sdk-vs-rdk-")
    broker = Broker(args.sluice, work)
    try:
        at_rate = min(args.records, args.rate * 10)
        scenarios = [("max", -1, args.records, 1_000_000), ("rate", args.rate, at_rate, 1_000_000),
                     ("rate-16k-batches", args.rate, at_rate, 16384)]
        report = {}
        for name, rate, records, batch_size in scenarios:
            sdk, rdk, spun = [], [], []
            for i in range(args.rounds):
                sdk.append(timed(lambda: sdk_run(args.sluice, broker.bootstrap, f"sdk-{name}-{i}",
                                                 records, rate, batch_size)))
                rdk.append(timed(lambda: rdkafka_run(args.rdkafka_performance, broker.bootstrap,
                                                     f"rdk-{name}-{i}", records, rate, batch_size,
                                                     work)))
                print(f"{name} round {i}: sdk {sdk[-1]}\n{name} round {i}: librdkafka {rdk[-1]}", flush=True)
                if rate > 0:
                    spun.append(spinning(lambda: sdk_run(args.sluice, broker.bootstrap,
                                                         f"spun-{name}-{i}", records, rate,
                                                         batch_size)))
                    print(f"{name} round {i}: sdk+spin {spun[-1]}", flush=True)
            s, r = median_round(sdk), median_round(rdk)
            report[name] = {"sdk": s, "librdkafka": r,
                            "throughput_ratio": s["records_per_sec"] / max(r["records_per_sec"], 1e-9),
                            "p99_ratio": s["p99_ms"] / max(r["p99_ms"], 1e-9)}
            if spun:
                p = median_round(spun)
                report[name]["sdk+spin"] = p
                report[name]["p99_ratio_spin"] = p["p99_ms"] / max(r["p99_ms"], 1e-9)
        print(json.dumps(report, indent=2))
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
