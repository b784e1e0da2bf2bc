#!/usr/bin/env python3
"""Client quotas with third-party clients: kafka-python's own encodings of AlterClientQuotas and
DescribeClientQuotas (its protocol classes; its AdminClient has no quota methods, and
confluent-kafka's none at all) set, read and refuse quotas; confluent-kafka producers and
consumers are held to them, and report the broker's throttle times (throttle_cb and the
`throttle` window of librdkafka's statistics).

usage: quota_suite.py CASE ARGS...
cases: alter BOOTSTRAP JSON [validate]   JSON: [{"entity": {"user": "alice"|null, ...},
                                                 "ops": {"key": value|null}}]
                                          prints [[error_code, error_message], ...]
       describe BOOTSTRAP JSON STRICT   JSON: [["user", "exact"|"default"|"any", name|null]]
                                          prints {"error": [code, message], "entries": [...]}
       fill BOOTSTRAP TOPIC BYTES        produce BYTES of 1 KiB records in 16 KiB batches
                                          (client id "filler")
       produce-rate BOOTSTRAP TOPIC CLIENT_ID SECONDS FROM_S [MAX_BYTES]
       consume-rate BOOTSTRAP TOPIC CLIENT_ID SECONDS FROM_S [MAX_BYTES]
            (from offset 0 of partition 0, 64 KiB fetches; stops early at MAX_BYTES)
            (16 KiB batches, Java's batch.size, so a throttle is felt batch by batch; stops
            early at MAX_BYTES)
            rate cases print {"rate": bytes/s of record values from FROM_S to the end,
                              "total": bytes, "throttle_events": n, "throttle_max_ms": ms,
                              "stats_throttle_max_ms": ms}
"""
import json
import sys
import time

CASE = sys.argv[1]
VALUE = b"q" * 1024


def kafka_python_admin(bootstrap):
    from kafka import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="quota-admin")


def send(admin, request):
    async def call():
        return await admin._manager.send(request)
    return admin._manager.run(call)


def alter(bootstrap, entries, validate_only):
    from kafka.protocol.admin import AlterClientQuotasRequest
    Entry = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(
        entries=[
            Entry(
                entity=[Entry.EntityData(entity_type=t, entity_name=n)
                        for t, n in e["entity"].items()],
                ops=[Entry.OpData(key=k, value=float(v or 0.0), remove=v is None)
                     for k, v in e["ops"].items()],
            )
            for e in entries
        ],
        validate_only=validate_only,
    )
    admin = kafka_python_admin(bootstrap)
    response = send(admin, request)
    admin.close()
    print(json.dumps([[e.error_code, e.error_message] for e in response.entries]))


def describe(bootstrap, components, strict):
    from kafka.protocol.admin import DescribeClientQuotasRequest
    match_types = {"exact": 0, "default": 1, "any": 2}
    request = DescribeClientQuotasRequest(
        components=[
            DescribeClientQuotasRequest.ComponentData(
                entity_type=t, match_type=match_types[m], match=n)
            for t, m, n in components
        ],
        strict=strict,
    )
    admin = kafka_python_admin(bootstrap)
    response = send(admin, request)
    admin.close()
    entries = [
        {
            "entity": {e.entity_type: e.entity_name for e in entry.entity},
            "values": {v.key: v.value for v in entry.values},
        }
        for entry in (response.entries or [])
    ]
    print(json.dumps({"error": [response.error_code, response.error_message],
                      "entries": entries}))


def fill(bootstrap, topic, total):
    from confluent_kafka import Producer
    # 16 KiB batches: a fetch returns whole batches, so the consumers' 64 KiB fetches below
    # can only be that small if the batches are.
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "filler",
                         "linger.ms": 5, "acks": 1, "batch.size": 16384})
    sent = 0
    while sent < total:
        try:
            producer.produce(topic, VALUE)
            sent += len(VALUE)
        except BufferError:
            producer.poll(0.05)
    left = producer.flush(60)
    if left:
        raise AssertionError(f"{left} records not delivered")
    print(json.dumps({"filled": sent}))


class Throttles:
    """Throttle times the broker reported: librdkafka's throttle_cb and its statistics."""

    def __init__(self):
        self.events = 0
        self.max_ms = 0.0
        self.stats_max_ms = 0

    def on_throttle(self, event):
        if event.throttle_time > 0:
            self.events += 1
            self.max_ms = max(self.max_ms, event.throttle_time * 1000.0)

    def on_stats(self, text):
        for broker in json.loads(text).get("brokers", {}).values():
            self.stats_max_ms = max(self.stats_max_ms, broker.get("throttle", {}).get("max", 0))

    def config(self):
        return {"throttle_cb": self.on_throttle, "stats_cb": self.on_stats,
                "statistics.interval.ms": 500}

    def report(self, rate, total):
        print(json.dumps({"rate": rate, "total": total, "throttle_events": self.events,
                          "throttle_max_ms": self.max_ms,
                          "stats_throttle_max_ms": self.stats_max_ms}))


def produce_rate(bootstrap, topic, client_id, seconds, from_s, max_bytes):
    from confluent_kafka import Producer
    throttles = Throttles()
    delivered = []  # (time, bytes)

    def on_delivery(error, message):
        if error is None:
            delivered.append((time.monotonic(), len(message.value())))

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "linger.ms": 5, "acks": 1, "batch.size": 16384,
                         "queue.buffering.max.kbytes": 1024, **throttles.config()})
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds and sent < max_bytes:
        try:
            producer.produce(topic, VALUE, on_delivery=on_delivery)
            sent += len(VALUE)
        except BufferError:
            producer.poll(0.02)
        producer.poll(0)
    producer.flush(30 if sent >= max_bytes else 0)
    end = time.monotonic()
    # What was not delivered by the end does not count.
    producer.flush(30)
    window = [b for t, b in delivered if start + from_s <= t <= end]
    throttles.report(sum(window) / (end - start - from_s), sum(b for _, b in delivered))


def consume_rate(bootstrap, topic, client_id, seconds, from_s, max_bytes):
    from confluent_kafka import Consumer, TopicPartition
    throttles = Throttles()
    # 64 KiB fetches (librdkafka's default is 1 MiB, five seconds of the quota): the rate is
    # read over ten seconds, so whole-MiB fetches would make it 1, 2 or 3 MiB by chance.
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "group.id": f"quota-{client_id}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "max.partition.fetch.bytes": 65536,
                         **throttles.config()})
    consumer.assign([TopicPartition(topic, 0, 0)])
    received = []
    total = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds and total < max_bytes:
        for message in consumer.consume(1000, 0.2):
            if message.error() is None:
                received.append((time.monotonic(), len(message.value())))
                total += len(message.value())
    end = time.monotonic()
    # Statistics and throttle callbacks are served from poll.
    consumer.poll(0.6)
    consumer.close()
    window = [b for t, b in received if start + from_s <= t <= end]
    throttles.report(sum(window) / (end - start - from_s), sum(b for _, b in received))


if CASE == "alter":
    alter(sys.argv[2], json.loads(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == "validate")
elif CASE == "describe":
    describe(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] == "true")
elif CASE == "fill":
    fill(sys.argv[2], sys.argv[3], int(sys.argv[4]))
elif CASE == "produce-rate":
    produce_rate(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6]),
                 int(sys.argv[7]) if len(sys.argv) > 7 else 1 << 62)
elif CASE == "consume-rate":
    consume_rate(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6]),
                 int(sys.argv[7]) if len(sys.argv) > 7 else 1 << 62)
else:
    raise SystemExit(f"unknown case {CASE}")
