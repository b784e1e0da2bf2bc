"""Mirror and Connect throughput, against the SDK doing the same work by hand, in one run.

Two single-node brokers (target/release/sluice, the shipped defaults) on this machine:

- mirror: N records of 100 B and of 1 KiB on the source (4 partitions), copied at least once
  and then exactly once (transactions on the target). The SDK's own figures
  for the two halves of the copy, `sluice perf consume` of the topic on the source and `sluice
  perf produce` of as many records of the same size to the target, give the hand-made limit
  (the slower half; a copy cannot beat either). Then `sluice mirror` copies the topic; its
  rate is taken from its /metrics (records mirrored) between the first record and the last.
- steady lag: with the mirror running, `sluice perf produce --throughput R` for D seconds; the
  mirror's end-to-end latency gauge (record timestamp to the target's acknowledgement, per
  batch) sampled every 100 ms: p50, p99, max.
- Connect: a file of 100-byte lines through FileStreamSource (StringConverter) into a topic,
  then FileStreamSink out of it, in MB/s, beside the machine's disk write bandwidth (a file of
  the same size written and fsynced) and `sluice perf produce` of the same records.

Usage: python3 benches/connect_mirror.py [--records 1000000] [--rate 20000] [--seconds 20]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from sluice_node import Node, free_port, say  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, "target", "release", "sluice")


def perf(*args):
    out = subprocess.run([BINARY, "perf", *args, "--output", "json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def metrics(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""


def metric_sum(text, name):
    total = 0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def metric_values(text, name):
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]


def start_mirror(source, target, topics, work, alias="source", exactly_once=False):
    port = free_port()
    log = open(os.path.join(work, "mirror.log"), "a")
    extra = ["--override", "exactly.once.source.support=enabled"] if exactly_once else []
    process = subprocess.Popen([BINARY, "mirror", "--source", source.bootstrap, "--target",
                                target.bootstrap, "--topics", topics, "--source-alias", alias,
                                "--override", f"http.listener=127.0.0.1:{port}",
                                "--override", "refresh.topics.interval.seconds=1", *extra],
                               stdout=subprocess.DEVNULL, stderr=log)
    return process, port


def mirror_rate(source, target, topic, records, work, alias="source", exactly_once=False):
    process, port = start_mirror(source, target, topic, work, alias, exactly_once)
    first = None
    deadline = time.time() + 600
    while time.time() < deadline:
        done = metric_sum(metrics(port), "sluice_mirror_records_total")
        now = time.time()
        if done > 0 and first is None:
            first = (now, done)
        if done >= records:
            break
        time.sleep(0.05)
    process.terminate()
    process.wait()
    elapsed = now - first[0]
    return (records - first[1]) / elapsed if elapsed > 0 else float("nan")


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


def disk_write_mb_s(path, size):
    block = os.urandom(1 << 20)
    start = time.time()
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    elapsed = time.time() - start
    os.unlink(path)
    return (size >> 20) / elapsed


def rest(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        text = r.read().decode()
        return json.loads(text) if text else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    if not os.path.exists(BINARY):
        raise SystemExit("build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="sluice-connect-mirror-")
    nodes = []
    try:
        for name in ("a", "b"):
            os.makedirs(os.path.join(work, name))
            node = Node(BINARY, os.path.join(work, name))
            node.start()
            nodes.append(node)
        for node in nodes:
            node.wait_ready()
        source, target = nodes
        print("mirror throughput (records/s; the hand-made limit is the slower of the SDK's "
              "consume of the source and produce to the target):")
        for size in (100, 1024):
            records = args.records if size == 100 else args.records // 4
            topic = f"m{size}"
            perf("produce", "--bootstrap-server", source.bootstrap, "--topic", topic,
                 "--num-records", str(records), "--record-size", str(size), "--partitions", "4")
            consumed = perf("consume", "--bootstrap-server", source.bootstrap, "--topic", topic,
                            "--messages", str(records))
            produced = perf("produce", "--bootstrap-server", target.bootstrap, "--topic",
                            f"hand{size}", "--num-records", str(records), "--record-size", str(size),
                            "--partitions", "4")
            limit = min(consumed["records_per_sec"], produced["records_per_sec"])
            rate = mirror_rate(source, target, topic, records, work)
            print(f"  {size:>5} B: mirror {rate:,.0f}/s; SDK consume {consumed['records_per_sec']:,.0f}/s, "
                  f"SDK produce {produced['records_per_sec']:,.0f}/s; ratio to the limit {rate / limit:.2f}")
            # The same copy with exactly-once (another alias: its own target topic and progress).
            exact = mirror_rate(source, target, topic, records, work, f"eos{size}", True)
            print(f"  {size:>5} B exactly-once: mirror {exact:,.0f}/s; ratio to the limit "
                  f"{exact / limit:.2f}, to at-least-once {exact / rate:.2f}")

        process, port = start_mirror(source, target, "steady", work)
        samples = []
        producer = subprocess.Popen([BINARY, "perf", "produce", "--bootstrap-server",
                                     source.bootstrap, "--topic", "steady", "--num-records",
                                     str(args.rate * args.seconds), "--record-size", "100",
                                     "--throughput", str(args.rate), "--partitions", "4",
                                     "--output", "json"], stdout=subprocess.DEVNULL)
        while producer.poll() is None:
            samples.extend(metric_values(metrics(port), "sluice_mirror_replication_latency_ms"))
            time.sleep(0.1)
        process.terminate()
        process.wait()
        samples = samples[len(samples) // 10:]  # the first tenth: the mirror finding the topic
        print(f"steady lag at {args.rate:,} records/s of 100 B for {args.seconds} s: p50 "
              f"{percentile(samples, 0.5):.0f} ms, p99 {percentile(samples, 0.99):.0f} ms, "
              f"max {max(samples, default=float('nan')):.0f} ms ({len(samples)} samples)")

        lines = args.records
        path = os.path.join(work, "lines.txt")
        with open(path, "w") as f:
            line = "x" * 99 + "\n"
            for _ in range(lines):
                f.write(line)
        size = os.path.getsize(path)
        disk = disk_write_mb_s(os.path.join(work, "disk.bin"), size)
        produce = perf("produce", "--bootstrap-server", source.bootstrap, "--topic", "raw100",
                       "--num-records", str(lines), "--record-size", "99", "--partitions", "1")
        rest_port = free_port()
        worker = subprocess.Popen([BINARY, "connect", "--override",
                                   f"bootstrap.servers={source.bootstrap}", "--override",
                                   f"listeners=http://127.0.0.1:{rest_port}", "--override",
                                   "value.converter=org.apache.kafka.connect.storage.StringConverter"],
                                  stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(work, "connect.log"), "a"))
        deadline = time.time() + 60
        while True:
            try:
                rest(rest_port, "GET", "/")
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("the worker did not start")
                time.sleep(0.2)
        start = time.time()
        rest(rest_port, "POST", "/connectors", {"name": "src", "config": {
            "connector.class": "FileStreamSource", "file": path, "topic": "lines"}})
        while True:
            offsets = rest(rest_port, "GET", "/connectors/src/offsets")["offsets"]
            if offsets and offsets[0]["offset"]["position"] >= size:
                break
            time.sleep(0.1)
        source_mb_s = size / (1 << 20) / (time.time() - start)
        sink_path = os.path.join(work, "sink.txt")
        start = time.time()
        rest(rest_port, "POST", "/connectors", {"name": "dst", "config": {
            "connector.class": "FileStreamSink", "file": sink_path, "topics": "lines"}})
        while not os.path.exists(sink_path) or os.path.getsize(sink_path) < size:
            time.sleep(0.1)
        sink_mb_s = size / (1 << 20) / (time.time() - start)
        worker.terminate()
        worker.wait()
        print(f"connect, {lines:,} lines of 100 B ({size / (1 << 20):.0f} MiB): FileStreamSource "
              f"{source_mb_s:.1f} MB/s, FileStreamSink {sink_mb_s:.1f} MB/s; disk write {disk:.0f} MB/s "
              f"(source/disk {source_mb_s / disk:.2f}); SDK produce of the same records "
              f"{produce['mb_per_sec']:.1f} MB/s (source/SDK {source_mb_s / produce['mb_per_sec']:.2f})")
    finally:
        for node in nodes:
            node.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
