#!/usr/bin/env python3
"""Produce and consume benchmark of a single Sluice broker, driven by librdkafka.

Starts its own broker (target/release/sluice) on free ports with data in --dir, measures the
raw limits in the same run (`sluice perf raw`: disk write bandwidth, TCP loopback copy), then
for 100 B and 1 KiB records, one and eight partitions, acks=1 and acks=all:

- produce with confluent-kafka (librdkafka through Python): records/s, MB/s, and per-record
  latency (produce call to delivery report) p50/p99/p99.9;
- consume the same records back by assignment: records/s, MB/s.

A second produce/consume pass with kcat (librdkafka in C, no Python per record) gives the
throughput without the Python interpreter in the loop. Ratios are to the raw figures.
Broker RSS is reported idle and at its peak under load.

usage: benches/kafka_perf.py [--sluice PATH] [--dir DIR] [--seconds N]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_node import free_port  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Broker:
    def __init__(self, binary, data_dir, overrides=()):
        self.kafka, quorum, self.http = free_port(), free_port(), free_port()
        self.log = open(os.path.join(data_dir, "broker.log"), "w")
        extra = [arg for o in overrides for arg in ("--override", o)]
        self.process = subprocess.Popen([
            binary, "server",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.kafka},CONTROLLER://127.0.0.1:{quorum}",
            "--override", f"http.listener=127.0.0.1:{self.http}",
            "--override", f"log.dirs={os.path.join(data_dir, 'data')}",
            *extra,
        ], stdout=subprocess.DEVNULL, stderr=self.log)
        self.bootstrap = f"127.0.0.1:{self.kafka}"
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=1)
                md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
                if md.brokers:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError("broker did not start")

    def stop(self):
        self.process.terminate()
        self.process.wait(30)


class PeakRss(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, 0, True

    def run(self):
        while self.running:
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.1)


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p))]


def produce(bootstrap, topic, partitions, record_bytes, acks, seconds):
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
        "batch.size": 1_000_000, "queue.buffering.max.kbytes": 262_144,
        "compression.type": "none", "enable.idempotence": acks == "all",
    })
    payload = os.urandom(record_bytes)
    # Warm up: metadata, and the producer id for idempotence (librdkafka waits 500 ms for a
    # broker before it first asks), so latencies are the broker's, not the client's start.
    producer.produce(topic, payload, partition=0)
    producer.flush(30)
    latencies = []
    failures = [0]
    clock = time.perf_counter

    def delivered(err, msg, started):
        if err is not None:
            failures[0] += 1
        else:
            latencies.append(clock() - started)

    sent = 0
    start = clock()
    deadline = start + seconds
    while clock() < deadline:
        for _ in range(1000):
            t = clock()
            try:
                producer.produce(topic, payload, partition=sent % partitions,
                                 on_delivery=lambda err, msg, t=t: delivered(err, msg, t))
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
    producer.flush(120)
    elapsed = clock() - start
    if failures[0]:
        raise RuntimeError(f"{failures[0]} records failed")
    latencies.sort()
    return {
        "records": sent, "seconds": elapsed,
        "records_s": sent / elapsed, "mb_s": sent * record_bytes / elapsed / 1e6,
        "p50_ms": percentile(latencies, 0.5) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "p999_ms": percentile(latencies, 0.999) * 1e3,
    }


def consume(bootstrap, topic, partitions, expected, record_bytes):
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "perf", "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
        "fetch.wait.max.ms": 100,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < expected and time.perf_counter() < deadline:
        for m in consumer.consume(num_messages=10_000, timeout=1.0):
            if m.error() and m.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(str(m.error()))
            if not m.error():
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return {"records": got, "records_s": got / elapsed, "mb_s": got * record_bytes / elapsed / 1e6}


def sluice_perf(binary, what, bootstrap, topic, partitions, extra):
    out = subprocess.run([binary, "perf", what, "--bootstrap-server", bootstrap, "--topic", topic,
                          "--partitions", str(partitions)] + extra,
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return {k: float(v) for k, v in (line.split() for line in out.strip().splitlines())}


def kcat_pass(bootstrap, topic, record_bytes, count, work_dir):
    """Throughput with kcat (C): produce `count` lines from a file, consume them to /dev/null."""
    path = os.path.join(work_dir, f"kcat-{record_bytes}.txt")
    line = b"x" * (record_bytes - 1) + b"\n"
    with open(path, "wb") as f:
        for _ in range(count // 1000):
            f.write(line * 1000)
    start = time.perf_counter()
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-l", "-X", "linger.ms=5",
                    "-X", "batch.size=1000000", path], check=True)
    produce_s = time.perf_counter() - start
    start = time.perf_counter()
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%s\n",
                          "-X", "fetch.max.bytes=52428800"],
                         check=True, stdout=subprocess.PIPE).stdout
    consume_s = time.perf_counter() - start
    got = out.count(b"\n")
    os.remove(path)
    mb = count * record_bytes / 1e6
    return mb / produce_s, got * record_bytes / 1e6 / consume_s, got


def raw_disk_and_loopback(binary, work):
    """`sluice perf raw` in `work`: disk write MB/s (pwrite + fdatasync), TCP loopback copy MB/s."""
    raw = subprocess.run([binary, "perf", "raw", "--dir", os.path.join(work, "raw"),
                          "--total-bytes", "512MiB"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    limits = {k: float(v) for k, v in (line.split() for line in raw.strip().splitlines())}
    return limits["raw_disk_write_mb_s"], limits["loopback_copy_mb_s"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--dir", default=None, help="work directory (on the disk to measure)")
    parser.add_argument("--seconds", type=float, default=8.0, help="produce time per case")
    args = parser.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="sluice-perf-")
    os.makedirs(work, exist_ok=True)
    shutil.rmtree(os.path.join(work, "data"), ignore_errors=True)
    def raw_limits():
        """Measured again before every case: this machine's disk and loopback drift."""
        return raw_disk_and_loopback(args.sluice, work)

    disk, loopback = raw_limits()
    print(f"raw disk write (pwrite + fdatasync): {disk:8.1f} MB/s")
    print(f"loopback copy (TCP):                 {loopback:8.1f} MB/s")
    print("(each row's ratios use the raw figures measured right before it, shown in its last column)")
    broker = Broker(args.sluice, work)
    try:
        time.sleep(1)
        print(f"broker RSS idle: {rss_kib(broker.process.pid) / 1024:.1f} MiB")
        peak = PeakRss(broker.process.pid)
        peak.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        print()
        print("confluent-kafka (librdkafka through Python: per-record produce calls and delivery reports)")
        print(f"{'case':<28} {'produce rec/s':>13} {'MB/s':>8} {'x disk':>7} {'p50 ms':>7} {'p99 ms':>7} "
              f"{'p99.9 ms':>8} | {'consume rec/s':>13} {'MB/s':>8} {'x loop':>7}")
        for record_bytes in (100, 1024):
            for partitions in (1, 8):
                for acks in ("1", "all"):
                    topic = f"perf-{record_bytes}-{partitions}-{acks}"
                    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result()
                    disk, loopback = raw_limits()
                    p = produce(broker.bootstrap, topic, partitions, record_bytes, acks, args.seconds)
                    c = consume(broker.bootstrap, topic, partitions, p["records"], record_bytes)
                    print(f"{record_bytes:>4} B, {partitions} part, acks={acks:<3}  {p['records_s']:>13,.0f} {p['mb_s']:>8.1f} "
                          f"{p['mb_s'] / disk:>6.2f}x {p['p50_ms']:>7.2f} {p['p99_ms']:>7.2f} {p['p999_ms']:>8.2f} | "
                          f"{c['records_s']:>13,.0f} {c['mb_s']:>8.1f} {c['mb_s'] / loopback:>6.2f}x"
                          f"  (raw {disk:.0f}/{loopback:.0f})", flush=True)
        print()
        print("our client (sluice perf produce-batches|consume-batches: prebuilt batches of 512 records, 4 connections;"
              " fetches of 1 MiB per partition, records counted, not decoded)")
        print(f"{'case':<28} {'produce rec/s':>13} {'MB/s':>8} {'x disk':>7} {'req p50':>7} {'req p99':>7} "
              f"{'p99.9':>8} | {'consume rec/s':>13} {'MB/s':>8} {'x loop':>7}")
        for record_bytes in (100, 1024):
            for partitions in (1, 8):
                for acks in ("1", "-1"):
                    topic = f"sdk-{record_bytes}-{partitions}-{acks}"
                    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result()
                    disk, loopback = raw_limits()
                    p = sluice_perf(args.sluice, "produce-batches", broker.bootstrap, topic, partitions,
                                    ["--record-bytes", str(record_bytes), "--acks", acks,
                                     "--seconds", str(args.seconds)])
                    c = sluice_perf(args.sluice, "consume-batches", broker.bootstrap, topic, partitions, [])
                    label = "all" if acks == "-1" else acks
                    print(f"{record_bytes:>4} B, {partitions} part, acks={label:<3}  {p['produce_records_s']:>13,.0f} "
                          f"{p['produce_mb_s']:>8.1f} {p['produce_mb_s'] / disk:>6.2f}x {p['produce_request_p50_ms']:>7.2f} "
                          f"{p['produce_request_p99_ms']:>7.2f} {p['produce_request_p999_ms']:>8.2f} | "
                          f"{c['consume_records_s']:>13,.0f} {c['consume_mb_s']:>8.1f} {c['consume_mb_s'] / loopback:>6.2f}x"
                          f"  (raw {disk:.0f}/{loopback:.0f})", flush=True)
        print()
        for record_bytes, count in ((1024, 1_000_000),):
            topic = f"perf-kcat-{record_bytes}"
            disk, loopback = raw_limits()
            admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result()
            produce_mb, consume_mb, got = kcat_pass(broker.bootstrap, topic, record_bytes, count, work)
            print(f"kcat (C), {record_bytes} B records, {count:,}: produce {produce_mb:.1f} MB/s "
                  f"({produce_mb / disk:.2f}x disk), consume {consume_mb:.1f} MB/s "
                  f"({consume_mb / loopback:.2f}x loopback), {got:,} read back")
        peak.running = False
        print(f"broker RSS peak under load: {peak.peak / 1024:.1f} MiB")
    finally:
        broker.stop()
        # The broker's data is tens of gigabytes after a run: never leave it behind.
        shutil.rmtree(os.path.join(work, "data"), ignore_errors=True)
        shutil.rmtree(os.path.join(work, "raw"), ignore_errors=True)
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
