#!/usr/bin/env python3
"""kafka-python (its own protocol code) produces and consumes a few thousand records.

usage: kafka_python_roundtrip.py BOOTSTRAP
"""
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

BOOTSTRAP = sys.argv[1]
TOPIC = "kafka-python"
COUNT = 3000
PARTITIONS = 3

admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
admin.close()

producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", compression_type="gzip", linger_ms=5)
futures = [producer.send(TOPIC, key=f"k{i}".encode(), value=f"value-{i}".encode(), partition=i % PARTITIONS,
                         headers=[("n", str(i).encode())])
           for i in range(COUNT)]
producer.flush()
offsets = [f.get(timeout=30) for f in futures]
assert all(m.topic == TOPIC for m in offsets)
producer.close()

consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", consumer_timeout_ms=10_000)
consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
got = {}
deadline = time.time() + 60
while len(got) < COUNT and time.time() < deadline:
    for records in consumer.poll(timeout_ms=1000).values():
        for r in records:
            i = int(r.value.decode().split("-")[1])
            assert i not in got, f"record {i} twice"
            assert r.key == f"k{i}".encode(), f"key of {i}"
            assert r.partition == i % PARTITIONS, f"partition of {i}"
            assert r.headers == [("n", str(i).encode())], f"headers of {i}: {r.headers}"
            got[i] = r
consumer.close()
assert len(got) == COUNT, f"consumed {len(got)} of {COUNT}"
print(f"kafka-python: {COUNT} records round-tripped")
