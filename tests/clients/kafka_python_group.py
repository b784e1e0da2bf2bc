#!/usr/bin/env python3
"""kafka-python (its own group protocol code) joins a group, consumes, commits; its admin
client lists the group and its offsets and deletes one (OffsetDelete); a successor resumes
from the committed offsets.

One member at a time: two kafka-python 3.0.12 members rebalancing against each other
sometimes leave the leader stalled for good after a SyncGroup it received (both socket
queues empty, nothing more sent), a client-side hang (see `member` for its likely cause);
groups of several members are tested with librdkafka.

usage: kafka_python_group.py BOOTSTRAP
"""
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

BOOTSTRAP = sys.argv[1]
TOPIC = "kafka-python-group"
GROUP = "kafka-python-group"
PARTITIONS = 4
PER_PARTITION = 50

admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
for p in range(PARTITIONS):
    for i in range(PER_PARTITION):
        producer.send(TOPIC, value=f"{p}-{i}".encode(), partition=p)
producer.flush()
producer.close()


def member():
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=BOOTSTRAP, group_id=GROUP,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=10_000, heartbeat_interval_ms=500)
    # The topic's partitions known before the first poll joins: otherwise the member joins
    # with no metadata, assigns nothing and rejoins when the metadata arrives, and that second
    # join hangs kafka-python 3.0.12 for good when a poll's timeout ends while its SyncGroup is
    # in flight (the leader's assignment clears `need_rejoin`, so no later poll collects the
    # answer: the member holds no partitions and reads nothing).
    while len(consumer.partitions_for_topic(TOPIC)) < PARTITIONS:
        time.sleep(0.05)
    return consumer


consumer = member()
seen = set()
deadline = time.time() + 60
while len(seen) < PARTITIONS * PER_PARTITION and time.time() < deadline:
    for records in consumer.poll(timeout_ms=200).values():
        for r in records:
            key = (r.partition, r.offset)
            assert key not in seen, f"{key} read twice"
            seen.add(key)
assert len(seen) == PARTITIONS * PER_PARTITION, f"read {len(seen)}"
assert len(consumer.assignment()) == PARTITIONS, f"assignment {consumer.assignment()}"
consumer.commit()
groups = admin.list_groups()
print("list_groups:", groups)
assert any(g["group_id"] == GROUP and g["group_state"] == "Stable" for g in groups), groups
consumer.close()

committed = admin.list_group_offsets({GROUP: None})
committed = committed.get(GROUP, committed)
offsets = sorted((tp.partition, meta.offset) for tp, meta in committed.items())
assert offsets == [(p, PER_PARTITION) for p in range(PARTITIONS)], f"committed {offsets}"
# OffsetDelete: the group is empty now, so partition 0's offset can go.
print("delete_group_offsets:", admin.delete_group_offsets(GROUP, [TopicPartition(TOPIC, 0)]))
after = admin.list_group_offsets({GROUP: None})
after = after.get(GROUP, after)
left = sorted(tp.partition for tp, meta in after.items() if meta.offset >= 0)
assert left == list(range(1, PARTITIONS)), f"offsets left after OffsetDelete: {after}"
# Committed again (a tool's commit: no member, generation -1) for the successor below.
fixup = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=GROUP, enable_auto_commit=False)
fixup.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(PER_PARTITION, "", -1)})
fixup.close()
admin.close()

# A successor has nothing left to read.
successor = member()
extra = []
end = time.time() + 5
while time.time() < end:
    for records in successor.poll(timeout_ms=200).values():
        extra.extend(records)
assignment = successor.assignment()
successor.close()
assert len(assignment) == PARTITIONS, f"successor assignment {assignment}"
assert not extra, f"{len(extra)} records replayed after the commit"
print(f"kafka-python group: {len(seen)} records, committed, successor resumed at the end")
