#!/usr/bin/env python3
"""DescribeLogDirs with kafka-python: its KafkaAdminClient.describe_log_dirs (which names every
partition of the topics it is given, or of every topic) and its own encoding of the request
with `topics` null (every log the broker has, what Kafka's admin and kafka-log-dirs.sh send),
to each broker of the cluster.

usage: log_dirs_suite.py BOOTSTRAP CASE ARGS...
cases: fill BOOTSTRAP TOPIC PARTITIONS REPLICATION_FACTOR COUNT PARTITION...
            creates TOPIC and writes COUNT records (acks=all) to each PARTITION named
       describe BOOTSTRAP [TOPIC]
            describe_log_dirs() (of TOPIC's partitions, or of every topic's)
       describe-null BOOTSTRAP
            DescribeLogDirs with topics null, sent to each broker
     describe cases print one JSON line:
       {"<broker>": [{"log_dir": path, "error_code": n, "total_bytes": n, "usable_bytes": n,
                      "partitions": {"topic-partition": [size, offset_lag, is_future]}}]}
"""
import json
import sys
import time

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

BOOTSTRAP, CASE = sys.argv[1], sys.argv[2]
ARGS = sys.argv[3:]


def admin():
    return KafkaAdminClient(bootstrap_servers=BOOTSTRAP, client_id="log-dirs-suite")


def fill(topic, partitions, replication_factor, count, targets):
    client = admin()
    client.create_topics([NewTopic(topic, partitions, replication_factor)])
    client.close()
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=5)
    # The new topic's leaders may take a moment to be known: sends are retried by the client.
    deadline = time.time() + 30
    for partition in targets:
        for n in range(count):
            producer.send(topic, value=b"v" * 100, key=str(n).encode(), partition=partition)
    producer.flush(timeout=max(1, deadline - time.time()))
    producer.close()
    print(json.dumps({"written": count * len(targets)}))


def dirs_of(results):
    """kafka-python's to_dict() form of the response's results, keyed as the usage says."""
    dirs = []
    for result in results:
        partitions = {}
        for topic in result["topics"]:
            for p in topic["partitions"]:
                key = f"{topic['name']}-{p['partition_index']}"
                partitions[key] = [p["partition_size"], p["offset_lag"], p["is_future_key"]]
        dirs.append({
            "log_dir": result["log_dir"],
            "error_code": result["error_code"],
            "total_bytes": result.get("total_bytes", -1),
            "usable_bytes": result.get("usable_bytes", -1),
            "partitions": partitions,
        })
    return dirs


def describe(topic):
    client = admin()
    answers = client.describe_log_dirs(topic_partitions=[topic] if topic else None)
    client.close()
    print(json.dumps({str(a["broker"]): dirs_of(a["log_dirs"]) for a in answers}, sort_keys=True))


def describe_null():
    from kafka.protocol.admin import DescribeLogDirsRequest
    client = admin()
    brokers = [b.node_id for b in client._manager.cluster.brokers()]

    async def call(node_id):
        return await client._manager.send(DescribeLogDirsRequest(topics=None), node_id=node_id)

    out = {}
    for node_id in brokers:
        response = client._manager.run(call, node_id)
        answer = response.to_dict()
        if answer.get("error_code", 0) != 0:
            raise SystemExit(f"broker {node_id} answered error {answer['error_code']}")
        out[str(node_id)] = dirs_of(answer["results"])
    client.close()
    print(json.dumps(out, sort_keys=True))


if CASE == "fill":
    topic, partitions, replication_factor, count = ARGS[0], int(ARGS[1]), int(ARGS[2]), int(ARGS[3])
    fill(topic, partitions, replication_factor, count, [int(p) for p in ARGS[4:]])
elif CASE == "describe":
    describe(ARGS[0] if ARGS else None)
elif CASE == "describe-null":
    describe_null()
else:
    raise SystemExit(f"unknown case {CASE}")
