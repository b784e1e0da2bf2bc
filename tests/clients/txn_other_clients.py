#!/usr/bin/env python3
"""Transactions of kafka-python and aiokafka (their own transaction managers): a committed
transaction with consumed offsets sent to it, an aborted one (its records written first, and
other offsets sent), a second committed one; then the client's own read_committed consumer
reads only the committed records. txn_suite.py check-other then checks the topic with
librdkafka.

Values: `commit-<client>-<transaction>-<i>` and `abort-<client>-<transaction>-<i>`, 10 per
transaction over the topic's 2 partitions. The committed transaction sends offset 7 of
partition 0 for GROUP, the aborted one 99.

usage: txn_other_clients.py kafka-python|aiokafka BOOTSTRAP TOPIC GROUP
"""
import asyncio
import sys
import time

CLIENT, BOOTSTRAP, TOPIC, GROUP = sys.argv[1:5]
PARTITIONS = 2
PER_TRANSACTION = 10


def values(kind, transaction):
    return [f"{kind}-{CLIENT}-{transaction}-{i}" for i in range(PER_TRANSACTION)]


EXPECTED = values("commit", 1) + values("commit", 3)


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def check_read(got):
    twice = {v for v in got if got.count(v) > 1}
    check(not twice, f"read_committed read these twice: {sorted(twice)}")
    check(sorted(got) == sorted(EXPECTED), f"{CLIENT} read_committed read {sorted(got)}, "
          f"expected {sorted(EXPECTED)}")
    print(f"{CLIENT}: read_committed read the {len(got)} committed records", flush=True)


def kafka_python():
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    import kafka
    print(f"kafka-python {kafka.__version__}", flush=True)
    check(hasattr(KafkaProducer, "init_transactions"), f"kafka-python {kafka.__version__} has "
          "no transactions (2.1.0 and later have; scripts/test installs one)")
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id="kafka-python-txn",
                             enable_idempotence=True, acks="all")
    producer.init_transactions()
    tp0 = TopicPartition(TOPIC, 0)

    def send(vs):
        futures = [producer.send(TOPIC, value=v.encode(), partition=i % PARTITIONS)
                   for i, v in enumerate(vs)]
        producer.flush()
        for f in futures:
            f.get(timeout=30)
    producer.begin_transaction()
    send(values("commit", 1))
    producer.send_offsets_to_transaction({tp0: OffsetAndMetadata(7, "", -1)}, GROUP)
    producer.commit_transaction()
    producer.begin_transaction()
    send(values("abort", 2))
    producer.send_offsets_to_transaction({tp0: OffsetAndMetadata(99, "", -1)}, GROUP)
    producer.abort_transaction()
    producer.begin_transaction()
    send(values("commit", 3))
    producer.commit_transaction()
    producer.close()
    print("kafka-python: committed, aborted, committed", flush=True)

    consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    got = []
    deadline = time.time() + 20
    settle = None
    while time.time() < deadline and (settle is None or time.time() < settle):
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(r.value.decode() for r in records)
        if settle is None and len(got) >= len(EXPECTED):
            settle = time.time() + 1.5
    consumer.close()
    check_read(got)


async def aiokafka_main():
    import aiokafka
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    print(f"aiokafka {aiokafka.__version__}", flush=True)
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id="aiokafka-txn",
                                enable_idempotence=True)
    await producer.start()
    tp0 = TopicPartition(TOPIC, 0)

    async def send(vs):
        futures = [await producer.send(TOPIC, value=v.encode(), partition=i % PARTITIONS)
                   for i, v in enumerate(vs)]
        await asyncio.gather(*futures)
    try:
        async with producer.transaction():
            await send(values("commit", 1))
            await producer.send_offsets_to_transaction({tp0: 7}, GROUP)
        await producer.begin_transaction()
        await send(values("abort", 2))
        await producer.send_offsets_to_transaction({tp0: 99}, GROUP)
        await producer.abort_transaction()
        async with producer.transaction():
            await send(values("commit", 3))
    finally:
        await producer.stop()
    print("aiokafka: committed, aborted, committed", flush=True)

    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    got = []
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        deadline = time.time() + 20
        settle = None
        while time.time() < deadline and (settle is None or time.time() < settle):
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                got.extend(r.value.decode() for r in records)
            if settle is None and len(got) >= len(EXPECTED):
                settle = time.time() + 1.5
    finally:
        await consumer.stop()
    check_read(got)


if CLIENT == "kafka-python":
    kafka_python()
elif CLIENT == "aiokafka":
    asyncio.run(aiokafka_main())
else:
    raise SystemExit(f"unknown client {CLIENT}")
