#!/usr/bin/env python3
"""Transactions with librdkafka (confluent-kafka) against a broker of its own.

- produce: one producer sends 1 KiB records to a 6-partition topic as fast as it can for
  `--seconds`, in transactions of 10, 100 and 1,000 records (begin, sends, commit), against
  the idempotent producer with the same settings in the same run (the raw limit: the same
  appends without the transaction's AddPartitionsToTxn, EndTxn and markers). Records/s and the
  ratio; EndTxn (commit_transaction) latency p50/p99.
- consume: the same data (committed transactions) read from the start by one consumer with
  isolation.level=read_committed and with read_uncommitted: records/s and the ratio.

usage: benches/transactions.py [--sluice PATH] [--seconds N]
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

PARTITIONS = 6
VALUE = b"x" * 1024


def create(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)


def producer_config(bootstrap, transactional_id=None):
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
              "acks": "all", "queue.buffering.max.messages": 1_000_000}
    if transactional_id:
        config["transactional.id"] = transactional_id
    return config


def idempotent_rate(bootstrap, topic, seconds):
    producer = Producer(producer_config(bootstrap))
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        for _ in range(1000):
            try:
                producer.produce(topic, VALUE, partition=sent % PARTITIONS)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
    producer.flush(60)
    return sent / (time.monotonic() - started)


def transactional_rate(bootstrap, topic, seconds, size):
    producer = Producer(producer_config(bootstrap, f"bench-{size}"))
    producer.init_transactions(30)
    sent, commits = 0, []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        producer.begin_transaction()
        for _ in range(size):
            while True:
                try:
                    producer.produce(topic, VALUE, partition=sent % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
            sent += 1
        commit_started = time.monotonic()
        producer.commit_transaction(60)
        commits.append((time.monotonic() - commit_started) * 1000)
    return sent / (time.monotonic() - started), sorted(commits), sent


def consume_rate(bootstrap, topic, isolation, expected):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "fetch.max.bytes": 52428800})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    started = time.monotonic()
    while got < expected and time.monotonic() - started < 120:
        for message in consumer.consume(10_000, 1.0):
            if not message.error():
                got += 1
    elapsed = time.monotonic() - started
    consumer.close()
    return got / elapsed, got


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(
        os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-bench-txn-")
    broker = Broker(args.sluice, work)
    try:
        bootstrap = broker.bootstrap
        create(bootstrap, "idempotent")
        base = idempotent_rate(bootstrap, "idempotent", args.seconds)
        print(f"idempotent producer: {base:,.0f} records/s (1 KiB, acks=all, linger.ms=5)")
        committed = 0
        for size in (10, 100, 1000):
            topic = f"txn-{size}"
            create(bootstrap, topic)
            rate, commits, sent = transactional_rate(bootstrap, topic, args.seconds, size)
            print(f"transactions of {size:>5}: {rate:,.0f} records/s (x{rate / base:.2f} of idempotent); "
                  f"commit_transaction p50 {percentile(commits, 0.5):.1f} ms, "
                  f"p99 {percentile(commits, 0.99):.1f} ms over {len(commits)} transactions", flush=True)
            committed = sent
        uncommitted_rate, uncommitted = consume_rate(bootstrap, "txn-1000", "read_uncommitted", committed)
        committed_rate, got = consume_rate(bootstrap, "txn-1000", "read_committed", committed)
        print(f"consume the {committed:,} records of transactions of 1,000: read_uncommitted "
              f"{uncommitted_rate:,.0f} records/s ({uncommitted:,} read), read_committed "
              f"{committed_rate:,.0f} records/s ({got:,} read; x{committed_rate / uncommitted_rate:.2f})")
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
