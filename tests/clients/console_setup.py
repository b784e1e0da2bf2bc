"""Data for the console's browser test, made with confluent-kafka: a topic with records whose
keys, values and headers the message browser must show byte for byte, and a consumer group
that stays a member with a known lag.

usage: console_setup.py BOOTSTRAP OUT.json   (then it keeps the group's member alive until
stdin closes)
"""

import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, out_path = sys.argv[1], sys.argv[2]
TOPIC, GROUP = "console-orders", "console-group"

admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(60)
admin.create_topics([NewTopic("console-quiet", 1, 3)])["console-quiet"].result(60)

# Partition 0: records the browser shows byte for byte (binary keys, UTF-8 and JSON values,
# a tombstone, headers with and without values, a value larger than the page's bound).
browsed = [
    (b"\x00\x01\xfe\xff", b"plain text value", [("trace", b"abc"), ("empty", None)]),
    (b"order-2", json.dumps({"id": 2, "items": ["a", "b"], "total": 9.5}).encode(), []),
    (None, "grüße ✓".encode(), [("bin", b"\x00\xff")]),
    (b"order-4", None, []),
    (b"big", bytes(range(256)) * 40, [("size", b"10240")]),
]
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "enable.idempotence": True})
for key, value, headers in browsed:
    producer.produce(TOPIC, key=key, value=value, headers=headers, partition=0)
assert producer.flush(60) == 0
# 30 more records on each partition, for the group to lag behind.
for partition in range(3):
    for i in range(30):
        producer.produce(TOPIC, key=f"k{i}", value=f"v{i}", partition=partition)
assert producer.flush(60) == 0


def hex_of(data):
    return None if data is None else data.hex()


# The member: it reads and commits 10 records of each partition, then keeps polling without
# committing, so its lag stays put while the browser looks.
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "client.id": "console-member", "fetch.wait.max.ms": 100})
consumer.subscribe([TOPIC])
positions = {}
deadline = time.time() + 60
while len([p for p in positions.values() if p >= 10]) < 3 and time.time() < deadline:
    message = consumer.poll(0.5)
    if message is None or message.error():
        continue
    positions.setdefault(message.partition(), 0)
    positions[message.partition()] = max(positions[message.partition()], message.offset() + 1)
assert len(positions) == 3, positions
consumer.commit(offsets=[TopicPartition(TOPIC, p, 10) for p in range(3)], asynchronous=False)

with open(out_path, "w") as out:
    json.dump({
        "topic": TOPIC,
        "group": GROUP,
        "records": [
            {"offset": offset, "key": hex_of(key), "value": hex_of(value),
             "headers": [[name, hex_of(v)] for name, v in headers]}
            for offset, (key, value, headers) in enumerate(browsed)
        ],
    }, out)
print("ready", flush=True)
# Stay a member until the test closes stdin.
import threading

done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
while not done.is_set():
    consumer.poll(0.2)
consumer.close()
