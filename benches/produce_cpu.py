#!/usr/bin/env python3
"""Broker CPU per produced and per consumed record, on one broker, in one run.

Starts its own broker (target/release/sluice, shipped defaults), then per round: produces
--records records of 100 B to a one-partition topic with kcat (librdkafka in C: linger.ms=5,
acks=1, idempotence off, no compression) at full speed, and with the SDK (`sluice perf
produce`) at a steady --rate records/s (acks=all, idempotent, linger.ms=5: its per-record
latency p50/p99); then reads the partition back with kcat. For each pass it reports the broker's
CPU seconds (user + system, /proc) per million records and the records/s, and the loopback TCP
copy rate (`sluice perf raw`) measured in the same run as the raw limit. Around each produce pass
a plain process writes as many bytes as the partition's log holds to the same file system (1 MiB
writes, writeback started per MiB as the log does): its CPU per million records is the page-cache
floor, and the broker's CPU above it is what the broker itself adds. On a VM whose free memory
goes back to the host (free page reporting) the floor is most of the cost and moves a lot between
minutes: compare binaries on the figure above the floor, and on the user-space CPU (which the
page cache does not touch).

With --perf, the full-speed kcat produce of the first round runs under `perf record -g` on the
broker's process, and the report's top symbols (self time) are printed to stderr.

Several --sluice binaries (before and after a change) alternate round by round, each round on a
fresh broker; the medians per binary close the output.

usage: benches/produce_cpu.py [--sluice PATH ...] [--records N] [--rate N] [--rounds N] [--perf]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_node import Node, say  # noqa: E402

KCAT_PRODUCER = ["-X", "linger.ms=5", "-X", "acks=1", "-X", "enable.idempotence=false",
                 "-X", "compression.codec=none", "-X", "queue.buffering.max.messages=1000000"]


def kcat_produce(node, topic, records_file):
    """(seconds, broker CPU seconds, of which user space)"""
    started = time.monotonic()
    user, system = node.cpu_user_system_seconds()
    subprocess.run(["kcat", "-P", "-b", node.bootstrap, "-t", topic, "-p", "0", *KCAT_PRODUCER, "-l",
                    records_file], check=True, stderr=subprocess.DEVNULL)
    user_after, system_after = node.cpu_user_system_seconds()
    return time.monotonic() - started, user_after + system_after - user - system, user_after - user


def kcat_consume(node, topic, records):
    started = time.monotonic()
    cpu = node.cpu_seconds()
    subprocess.run(["kcat", "-C", "-b", node.bootstrap, "-t", topic, "-p", "0", "-o", "beginning",
                    "-c", str(records), "-e", "-q", "-f", ""], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - started, node.cpu_seconds() - cpu


def sdk_produce(node, topic, records, rate):
    """(the perf tool's summary, broker CPU seconds, of which user space)"""
    user, system = node.cpu_user_system_seconds()
    out = subprocess.run(node.perf("produce", "--topic", topic, "--num-records", str(records), "--record-size",
                                   "100", "--throughput", str(rate), "--output", "json", "--producer-props",
                                   "acks=all", "linger.ms=5", "enable.idempotence=true"),
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    user_after, system_after = node.cpu_user_system_seconds()
    return json.loads(out), user_after + system_after - user - system, user_after - user


def record(node, work, name):
    """`perf record` of the broker until `stop_recording`."""
    recorder = subprocess.Popen(["perf", "record", "-g", "-F", "1999", "-o", os.path.join(work, f"perf-{name}.data"),
                                 "-p", str(node.process.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    return recorder


def stop_recording(recorder):
    if recorder:
        recorder.send_signal(2)
        recorder.wait()


# A 100-byte record's bytes in the log, with its record header and its share of a batch's.
RECORD_LOG_BYTES = 110
# The floor: a plain process writing bytes to a file in 1 MiB writes and starting their writeback
# every 1 MiB (sync_file_range, as the broker's log does), measured by its own CPU time.
FLOOR_WRITER = """
import ctypes, os, resource, sys
path, size = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
chunk = bytes(range(256)) * 4096
before = resource.getrusage(resource.RUSAGE_SELF)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
written = 0
while written < size:
    n = os.write(fd, chunk[:min(len(chunk), size - written)])
    libc.sync_file_range(fd, ctypes.c_int64(written), ctypes.c_int64(n), 2)
    written += n
os.close(fd)
after = resource.getrusage(resource.RUSAGE_SELF)
print(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
"""


def log_bytes(work, topic):
    """The bytes of the topic's log segments under the broker's data directory."""
    total = 0
    for root, _dirs, files in os.walk(os.path.join(work, "data")):
        if os.path.basename(root).startswith(f"{topic}-"):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".log"))
    return total


def page_cache_floor(work, size):
    """CPU seconds a plain writer spends putting `size` bytes into the page cache on the same file
    system: what any log that writes through the page cache pays for them (on this VM mostly the
    hypervisor backing fresh pages, which varies minute to minute)."""
    path = os.path.join(work, "floor")
    try:
        out = subprocess.run([sys.executable, "-c", FLOOR_WRITER, path, str(size)], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        return float(out)
    finally:
        os.unlink(path)


def cpu_figures(work, topic, records, cpu, user, floor_before):
    """A produce pass's broker CPU per million records: total, user space, the page-cache floor
    (taken before the pass with the log's size estimated and after it with its size, averaged:
    the VM's cost of fresh pages moves between the two) and the total above it."""
    floor = (floor_before + page_cache_floor(work, log_bytes(work, topic))) / 2
    return {"cpu_s_per_million": per_million(cpu, records),
            "user_cpu_s_per_million": per_million(user, records),
            "page_cache_floor_cpu_s_per_million": per_million(floor, records),
            "above_floor_cpu_s_per_million": per_million(cpu - floor, records)}


def per_million(cpu_s, records):
    return round(cpu_s / records * 1e6, 4)


def measure(binary, work, records_file, records, rate, profile):
    """One round on a fresh broker: kcat produce, kcat consume, SDK produce at `rate`."""
    node = Node(os.path.abspath(binary), work)
    node.start()
    try:
        node.wait_ready()
        topic = "cpu"
        subprocess.run(["kcat", "-P", "-b", node.bootstrap, "-t", topic, "-p", "0"], input="warm\n", text=True,
                       check=True, stderr=subprocess.DEVNULL)
        time.sleep(1)
        result = {}
        floor_before = page_cache_floor(work, records * RECORD_LOG_BYTES)
        recorder = record(node, work, "kcat") if profile else None
        elapsed, cpu, user = kcat_produce(node, topic, records_file)
        stop_recording(recorder)
        result["kcat_produce"] = {"records_per_s": round(records / elapsed),
                                  **cpu_figures(work, topic, records, cpu, user, floor_before)}
        elapsed, cpu = kcat_consume(node, topic, records + 1)
        result["kcat_consume"] = {"records_per_s": round(records / elapsed),
                                  "cpu_s_per_million": per_million(cpu, records)}
        floor_before = page_cache_floor(work, records // 2 * RECORD_LOG_BYTES)
        recorder = record(node, work, "sdk") if profile else None
        summary, cpu, user = sdk_produce(node, "sdk", records // 2, rate)
        stop_recording(recorder)
        result["sdk_produce"] = {"records_per_s": round(summary.get("records_per_sec", 0)),
                                 "p50_ms": summary.get("p50_ms"), "p99_ms": summary.get("p99_ms"),
                                 **cpu_figures(work, "sdk", records // 2, cpu, user, floor_before)}
        return result
    finally:
        node.stop()
        shutil.rmtree(os.path.join(work, "data"), ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", action="append",
                        help="a sluice binary; several (before, after) alternate round by round "
                             "(default: target/release/sluice)")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rate", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--perf", action="store_true", help="profile the first binary's first round")
    args = parser.parse_args()
    binaries = args.sluice or [os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice")]
    work = tempfile.mkdtemp(prefix="sluice-produce-cpu-")
    try:
        raw = subprocess.run([binaries[0], "perf", "raw", "--dir", work], check=True, stdout=subprocess.PIPE,
                             text=True).stdout
        say(raw.strip())
        records_file = os.path.join(work, "records")
        with open(records_file, "w") as f:
            f.write(("x" * 100 + "\n") * args.records)  # kcat -l: a record per line, without its newline
        results = {binary: [] for binary in binaries}
        for round_ in range(args.rounds):
            for index, binary in enumerate(binaries):
                result = measure(binary, work, records_file, args.records, args.rate,
                                 args.perf and round_ == 0 and index == 0)
                results[binary].append(result)
                say(json.dumps({"binary": binary, "round": round_, **result}))
        if args.perf:
            for name in ("kcat", "sdk"):
                report = subprocess.run(["perf", "report", "-i", os.path.join(work, f"perf-{name}.data"),
                                         "--no-children", "--sort", "symbol", "--stdio", "-g", "none",
                                         "--percent-limit", "0.7"],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
                say(f"top symbols, broker, {name} produce:")
                say("\n".join(line.rstrip(" -") for line in report.splitlines() if line and not line.startswith("#")))
        medians = {}
        for binary, rounds in results.items():
            medians[binary] = {kind: {key: statistics.median(r[kind][key] for r in rounds)
                                      for key in rounds[0][kind] if rounds[0][kind][key] is not None}
                               for kind in rounds[0]}
        print(json.dumps({"raw": raw.split(), "median": medians}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
