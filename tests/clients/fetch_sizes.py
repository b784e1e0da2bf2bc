#!/usr/bin/env python3
"""Fetch sizes against librdkafka (confluent-kafka): one case per invocation.

usage: fetch_sizes.py BOOTSTRAP CASE

large-records: issue 24's consumer. Three partitions of 900 KiB records, read by a group
member with fetch.max.bytes=1000000, max.partition.fetch.bytes=20000000 and
receive.message.max.bytes=1000512: librdkafka drops the connection on a larger response
("Invalid response size"), so every record must arrive and no FetchResponse librdkafka
received may be larger. Prints the largest FetchResponse size librdkafka logged.
"""
import logging
import re
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = sys.argv[1]
CASE = sys.argv[2]

RECORD_BYTES = 900 * 1024
PER_PARTITION = 5
PARTITIONS = 3
RECEIVE_MAX_BYTES = 1000512


def check(condition, message):
    if not condition:
        raise AssertionError(message)


class Collect(logging.Handler):
    """Keeps librdkafka's log lines (they reach Python during poll)."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def large_records():
    topic = "fetch-sizes-large"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1,
                  config={"max.message.bytes": "2000000"})],
        operation_timeout=10)
    futures[topic].result(timeout=20)

    producer = Producer({"bootstrap.servers": BOOTSTRAP, "message.max.bytes": 2000000,
                         "linger.ms": 0})
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    for n in range(PER_PARTITION):
        for partition in range(PARTITIONS):
            value = bytes([n]) * RECORD_BYTES
            producer.produce(topic, value=value, key=f"{partition}-{n}",
                             partition=partition, on_delivery=delivered)
            producer.poll(0)
    check(producer.flush(60) == 0, "undelivered records")
    check(not failures, f"delivery failures: {failures}")

    errors = []
    collect = Collect()
    logger = logging.getLogger("librdkafka")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(collect)
    consumer = Consumer({
        "bootstrap.servers": BOOTSTRAP,
        "group.id": "fetch-sizes",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.max.bytes": 1000000,
        "max.partition.fetch.bytes": 20000000,
        "receive.message.max.bytes": RECEIVE_MAX_BYTES,
        "debug": "protocol",
        "logger": logger,
        "error_cb": errors.append,
    })
    consumer.subscribe([topic])
    expected = PER_PARTITION * PARTITIONS
    got = {}
    deadline = time.time() + 90
    while len(got) < expected and time.time() < deadline:
        message = consumer.poll(1.0)
        check(not errors, f"client errors: {errors}")
        if message is None:
            continue
        if message.error():
            check(message.error().code() == KafkaError._PARTITION_EOF,
                  f"consume error: {message.error()}")
            continue
        check(len(message.value()) == RECORD_BYTES,
              f"a record of {len(message.value())} bytes")
        check(message.key().decode() == f"{message.partition()}-{message.offset()}",
              f"record {message.key()} at {message.partition()}/{message.offset()}")
        got[(message.partition(), message.offset())] = True
    consumer.close()

    refused = [line for line in collect.lines if "Invalid response size" in line]
    check(not refused, f"librdkafka refused responses: {refused[:3]}")
    check(not errors, f"client errors: {errors}")
    check(len(got) == expected, f"consumed {len(got)} of {expected} records")
    sizes = [int(m.group(1)) for line in collect.lines
             for m in [re.search(r"Received FetchResponse \(v\d+, (\d+) bytes", line)] if m]
    check(sizes, "librdkafka logged no FetchResponse")
    check(max(sizes) <= RECEIVE_MAX_BYTES,
          f"a FetchResponse of {max(sizes)} bytes over {RECEIVE_MAX_BYTES}")
    print(f"consumed {len(got)} records; {len(sizes)} FetchResponses, largest {max(sizes)} "
          f"bytes (receive.message.max.bytes {RECEIVE_MAX_BYTES})")


CASES = {"large-records": large_records}

if __name__ == "__main__":
    CASES[CASE]()
