#!/usr/bin/env python3
"""kafka-python (its own group protocol code) consumes in a group of two, commits, and a
successor resumes from the committed offsets.

usage: kafka_python_group.py BOOTSTRAP
"""
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

BOOTSTRAP = sys.argv[1]
TOPIC = "kafka-python-group"
GROUP = "kafka-python-group"
PARTITIONS = 4
PER_PARTITION = 50

admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])



def member():
    return KafkaConsumer(TOPIC, bootstrap_servers=BOOTSTRAP, group_id=GROUP,
                         enable_auto_commit=False, auto_offset_reset="earliest",
                         session_timeout_ms=10_000, heartbeat_interval_ms=500)


a, b = member(), member()
# Both join before anything is produced, so neither reads what the other will own.
deadline = time.time() + 60
while not (a.assignment() and b.assignment()
           and len(a.assignment()) + len(b.assignment()) == PARTITIONS) and time.time() < deadline:
    for consumer in (a, b):
        consumer.poll(timeout_ms=100)

producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
for p in range(PARTITIONS):
    for i in range(PER_PARTITION):
        producer.send(TOPIC, value=f"{p}-{i}".encode(), partition=p)
producer.flush()
producer.close()
seen = {}
deadline = time.time() + 60
while len(seen) < PARTITIONS * PER_PARTITION and time.time() < deadline:
    for consumer in (a, b):
        for records in consumer.poll(timeout_ms=200).values():
            for r in records:
                key = (r.partition, r.offset)
                assert key not in seen, f"{key} read twice"
                seen[key] = consumer
assert len(seen) == PARTITIONS * PER_PARTITION, f"read {len(seen)}"
owned_a, owned_b = a.assignment(), b.assignment()
assert owned_a and owned_b and not (owned_a & owned_b), f"assignments {owned_a} {owned_b}"
assert len(owned_a | owned_b) == PARTITIONS, f"assignments {owned_a} {owned_b}"
a.commit()
b.commit()
a.close()
b.close()

committed = admin.list_group_offsets({GROUP: None})
print("list_group_offsets:", committed)
committed = committed.get(GROUP, committed)
offsets = sorted((tp.partition, meta.offset) for tp, meta in committed.items())
assert offsets == [(p, PER_PARTITION) for p in range(PARTITIONS)], f"committed {offsets}"
groups = admin.list_groups()
print("list_groups:", groups)
# OffsetDelete: the group is empty now, so partition 0's offset can go.
print("delete_group_offsets:", admin.delete_group_offsets(GROUP, [TopicPartition(TOPIC, 0)]))
after = admin.list_group_offsets({GROUP: None})
after = after.get(GROUP, after)
left = sorted(tp.partition for tp, meta in after.items() if meta.offset >= 0)
assert left == list(range(1, PARTITIONS)), f"offsets left after OffsetDelete: {after}"
# Committed again for the successor below.
fixup = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=GROUP, enable_auto_commit=False)
from kafka.structs import OffsetAndMetadata
fixup.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(PER_PARTITION, "", -1)})
fixup.close()
admin.close()

# A successor has nothing left to read.
c = member()
extra = []
end = time.time() + 5
while time.time() < end:
    for records in c.poll(timeout_ms=200).values():
        extra.extend(records)
c.close()
assert not extra, f"{len(extra)} records replayed after the commit"
print(f"kafka-python group: split {len(owned_a)}+{len(owned_b)}, committed and resumed")
