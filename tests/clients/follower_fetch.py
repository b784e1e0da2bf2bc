"""Fetch from follower (KIP-392) with confluent-kafka, for tests/fetch_from_follower.rs.

usage:
  follower_fetch.py BOOTSTRAP produce TOPIC FIRST COUNT
      acks=all, values v<FIRST>..v<FIRST+COUNT-1> to partition 0, in order (idempotent).
  follower_fetch.py BOOTSTRAP consume TOPIC RACK TOTAL
      reads partition 0 from the start with client.rack=RACK, printing "consumed N" as N
      grows, until TOTAL records; then checks they are v0..v<TOTAL-1> in order. Exits 1 on a
      client error, a gap, a duplicate, or when 120 s pass first.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def produce(bootstrap, topic, first, count):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    failures = []

    def delivered(error, _message):
        if error is not None:
            failures.append(str(error))

    for i in range(first, first + count):
        producer.produce(topic, value=f"v{i}".encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(90)
    if left or failures:
        sys.exit(f"produce: {left} not delivered, failures {failures[:3]}")
    print(f"produced {count}", flush=True)


def consume(bootstrap, topic, rack, total):
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "follower-fetch",
        "enable.auto.commit": False,
        "client.rack": rack,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + 120
    while len(values) < total:
        if time.monotonic() > deadline:
            sys.exit(f"consumed {len(values)} of {total} in 120 s")
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            if message.error().fatal() or not message.error().retriable():
                raise KafkaException(message.error())
            continue
        values.append(message.value().decode())
        print(f"consumed {len(values)}", flush=True)
    consumer.close()
    expected = [f"v{i}" for i in range(total)]
    if values != expected:
        wrong = next(i for i, (a, b) in enumerate(zip(values, expected)) if a != b)
        sys.exit(f"record {wrong} is {values[wrong]}, expected {expected[wrong]}")
    print("in order", flush=True)


def main():
    bootstrap, mode = sys.argv[1], sys.argv[2]
    if mode == "produce":
        produce(bootstrap, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "consume":
        consume(bootstrap, sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
