#!/usr/bin/env python3
"""Sluice against librdkafka (confluent-kafka): one case per invocation.

usage: confluent_suite.py BOOTSTRAP CASE
Exits non-zero (with the reason) when the broker does not behave as Kafka would.
"""
import sys
import time

from confluent_kafka import (Consumer, KafkaError, KafkaException, Producer,
                             TopicCollection, TopicPartition)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, ConfigSource, NewPartitions,
                                   NewTopic)

from client_env import with_client_config

Producer, Consumer, AdminClient = with_client_config(Producer, Consumer, AdminClient)

BOOTSTRAP = sys.argv[1]
CASE = sys.argv[2]


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def admin():
    return AdminClient({"bootstrap.servers": BOOTSTRAP})


def create(client, topic, partitions=1, config=None, **kw):
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=10, **kw)
    return futures[topic]


def error_code(future):
    try:
        future.result(timeout=20)
    except KafkaException as e:
        return e.args[0].code()
    return None


def consume_all(topic, partitions, expected, timeout=60):
    consumer = Consumer({
        "bootstrap.servers": BOOTSTRAP,
        "group.id": "unused-by-assign",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.time() + timeout
    while len(got) < expected and time.time() < deadline:
        for m in consumer.consume(num_messages=1000, timeout=1.0):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consume error: {m.error()}")
            got.append(m)
    consumer.close()
    return got


def case_admin():
    client = admin()
    check(error_code(create(client, "admin-topic", 3, {"retention.ms": "3600000"})) is None,
          "create admin-topic")
    code = error_code(create(client, "admin-topic", 3))
    check(code == KafkaError.TOPIC_ALREADY_EXISTS, f"duplicate create gave {code}")
    futures = client.create_topics([NewTopic("bad-rf", num_partitions=1, replication_factor=3)])
    code = error_code(futures["bad-rf"])
    check(code == KafkaError.INVALID_REPLICATION_FACTOR, f"replication factor 3 on one broker gave {code}")
    futures = client.create_topics([NewTopic("bad-partitions", num_partitions=0, replication_factor=1)])
    code = error_code(futures["bad-partitions"])
    check(code == KafkaError.INVALID_PARTITIONS, f"0 partitions gave {code}")
    code = error_code(create(client, "validated-only", 2, validate_only=True))
    check(code is None, f"validate_only create gave {code}")
    check("validated-only" not in client.list_topics(timeout=10).topics, "validate_only created the topic")

    # CreatePartitions: grow, then refuse to shrink.
    check(error_code(client.create_partitions([NewPartitions("admin-topic", 5)])["admin-topic"]) is None,
          "grow to 5 partitions")
    md = client.list_topics("admin-topic", timeout=10)
    check(len(md.topics["admin-topic"].partitions) == 5, f"partitions after grow: {md.topics['admin-topic'].partitions}")
    code = error_code(client.create_partitions([NewPartitions("admin-topic", 2)])["admin-topic"])
    check(code == KafkaError.INVALID_PARTITIONS, f"shrink gave {code}")
    # With explicit replicas for the new partitions: validated like CreateTopics' assignments.
    code = error_code(client.create_partitions(
        [NewPartitions("admin-topic", 7, replica_assignment=[[1], [9]])])["admin-topic"])
    check(code == KafkaError.INVALID_REPLICA_ASSIGNMENT, f"unknown broker gave {code}")
    code = error_code(client.create_partitions(
        [NewPartitions("admin-topic", 7, replica_assignment=[[1]])])["admin-topic"])
    check(code == KafkaError.INVALID_REPLICA_ASSIGNMENT, f"one assignment for two gave {code}")
    check(error_code(client.create_partitions(
        [NewPartitions("admin-topic", 7, replica_assignment=[[1], [1]])])["admin-topic"]) is None,
        "grow to 7 on assigned replicas")
    md = client.list_topics("admin-topic", timeout=10)
    check(sorted(md.topics["admin-topic"].partitions) == list(range(7)),
          f"partitions after the assigned grow: {md.topics['admin-topic'].partitions}")
    check(md.topics["admin-topic"].partitions[6].replicas == [1], "partition 6 replicas")

    # DescribeConfigs: the topic's own value, a broker default, Kafka's default.
    resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-topic")
    configs = client.describe_configs([resource])[resource].result(timeout=10)
    check(configs["retention.ms"].value == "3600000", f"retention.ms {configs['retention.ms'].value}")
    check(configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
          f"retention.ms source {configs['retention.ms'].source}")
    check(configs["cleanup.policy"].value == "delete", "cleanup.policy default")
    check(configs["max.message.bytes"].source in (ConfigSource.DEFAULT_CONFIG.value, ConfigSource.STATIC_BROKER_CONFIG.value),
          "max.message.bytes source")

    # IncrementalAlterConfigs: set one key, delete another, append to a list.
    alter = ConfigResource(ConfigResource.Type.TOPIC, "admin-topic", incremental_configs=[
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    client.incremental_alter_configs([alter])[alter].result(timeout=10)
    configs = client.describe_configs([resource])[resource].result(timeout=10)
    check(configs["segment.bytes"].value == "1048576", f"segment.bytes {configs['segment.bytes'].value}")
    check(configs["retention.ms"].value == "604800000", f"retention.ms after delete {configs['retention.ms'].value}")
    check(configs["cleanup.policy"].value == "compact", f"cleanup.policy {configs['cleanup.policy'].value}")
    bad = ConfigResource(ConfigResource.Type.TOPIC, "admin-topic", incremental_configs=[
        ConfigEntry("segment.bytes", "not-a-number", incremental_operation=AlterConfigOpType.SET)])
    try:
        client.incremental_alter_configs([bad])[bad].result(timeout=10)
        raise AssertionError("an invalid config value was accepted")
    except KafkaException as e:
        check(e.args[0].code() == KafkaError.INVALID_CONFIG, f"invalid value gave {e.args[0]}")

    # The legacy AlterConfigs (alter_configs): the given set replaces the topic's configs;
    # the same validation as IncrementalAlterConfigs.
    legacy = ConfigResource(ConfigResource.Type.TOPIC, "admin-topic",
                            set_config={"retention.ms": "3600000"})
    client.alter_configs([legacy])[legacy].result(timeout=10)
    configs = client.describe_configs([resource])[resource].result(timeout=10)
    check(configs["retention.ms"].value == "3600000", f"legacy retention.ms {configs['retention.ms'].value}")
    check(configs["segment.bytes"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
          "legacy alter_configs returned segment.bytes to its default")
    check(configs["cleanup.policy"].value == "delete", f"legacy cleanup.policy {configs['cleanup.policy'].value}")
    bad = ConfigResource(ConfigResource.Type.TOPIC, "admin-topic", set_config={"segment.bytes": "nope"})
    try:
        client.alter_configs([bad])[bad].result(timeout=10)
        raise AssertionError("legacy alter_configs accepted an invalid value")
    except KafkaException as e:
        check(e.args[0].code() == KafkaError.INVALID_CONFIG, f"legacy invalid value gave {e.args[0]}")
    check(client.describe_configs([resource])[resource].result(timeout=10)["retention.ms"].value == "3600000",
          "a refused legacy alter_configs changed nothing")

    # Broker configs, and a dynamic per-broker default for topics.
    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = client.describe_configs([broker])[broker].result(timeout=10)
    check("log.segment.bytes" in configs, "broker configs list log.segment.bytes")
    # Read-only and types come from the config registry: static keys are read-only.
    check(configs["num.partitions"].is_read_only and not configs["log.retention.ms"].is_read_only,
          "read-only flags of num.partitions / log.retention.ms")
    check(configs["num.partitions"].value == "1" and not configs["num.partitions"].is_sensitive,
          f"num.partitions {configs['num.partitions']}")
    bad = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("num.partitions", "4", incremental_operation=AlterConfigOpType.SET)])
    try:
        client.incremental_alter_configs([bad])[bad].result(timeout=10)
        raise AssertionError("a static broker config was changed")
    except KafkaException as e:
        check(e.args[0].code() == KafkaError.INVALID_CONFIG, f"static broker key gave {e.args[0]}")
    default = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([default])[default].result(timeout=10)
    check(error_code(create(client, "after-default")) is None, "create after-default")
    r = ConfigResource(ConfigResource.Type.TOPIC, "after-default")
    configs = client.describe_configs([r])[r].result(timeout=10)
    check(configs["retention.ms"].value == "7200000", f"dynamic default retention.ms {configs['retention.ms'].value}")
    check(configs["retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value,
          f"dynamic default source {configs['retention.ms'].source}")

    # DescribeCluster and DeleteTopics.
    cluster = client.describe_cluster(request_timeout=10).result()
    check([n.id for n in cluster.nodes] == [1], f"cluster nodes {cluster.nodes}")
    check(cluster.cluster_id, "cluster id")
    check(cluster.controller is not None and cluster.controller.id == 1, f"controller {cluster.controller}")
    # Authorized operations, when asked for: everything, until ACLs exist.
    check(cluster.authorized_operations is None, "operations not asked for")
    cluster = client.describe_cluster(include_authorized_operations=True, request_timeout=10).result()
    operations = {op.name for op in cluster.authorized_operations or []}
    check(operations == {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                         "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}, f"cluster operations {operations}")
    topics = client.describe_topics(TopicCollection(["admin-topic"]), include_authorized_operations=True,
                                    request_timeout=10)
    topic = topics["admin-topic"].result()
    operations = {op.name for op in topic.authorized_operations or []}
    check(operations == {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS",
                         "ALTER_CONFIGS"}, f"topic operations {operations}")
    client.delete_topics(["after-default"], operation_timeout=10)["after-default"].result(timeout=20)
    check("after-default" not in client.list_topics(timeout=10).topics, "deleted topic still listed")


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACKS = ["0", "1", "all"]
RECORDS_TOTAL = 100_000


def case_produce_consume():
    global DATA_DIR
    DATA_DIR = sys.argv[3]
    client = admin()
    per_run = RECORDS_TOTAL // (len(CODECS) * len(ACKS))
    runs = []
    for codec in CODECS:
        for acks in ACKS:
            topic = f"pc-{codec}-{acks}"
            check(error_code(create(client, topic, 4)) is None, f"create {topic}")
            runs.append((codec, acks, topic))
    for codec, acks, topic in runs:
        config = {
            "bootstrap.servers": BOOTSTRAP,
            "compression.type": codec,
            "acks": acks,
            "linger.ms": 5,
        }
        if acks == "all":
            config["enable.idempotence"] = True
        producer = Producer(config)
        failures = []
        for i in range(per_run):
            key = f"key-{i % 97}".encode()
            value = (f"{codec}/{acks}/{i}/" + "x" * (i % 200)).encode()
            headers = [("h1", f"v{i}".encode()), ("empty", b"")]
            producer.produce(topic, value=value, key=key, headers=headers, partition=i % 4,
                             on_delivery=lambda err, msg: failures.append(err) if err else None)
            if i % 1000 == 0:
                producer.poll(0)
        remaining = producer.flush(60)
        check(remaining == 0, f"{topic}: {remaining} records undelivered")
        check(not failures, f"{topic}: delivery failures {failures[:3]}")
        got = consume_all(topic, 4, per_run)
        check(len(got) == per_run, f"{topic}: consumed {len(got)} of {per_run}")
        seen = {}
        for m in got:
            _, _, index, _ = m.value().decode().split("/", 3)
            i = int(index)
            check(i not in seen, f"{topic}: record {i} consumed twice")
            seen[i] = m
            check(m.partition() == i % 4, f"{topic}: record {i} in partition {m.partition()}")
            check(m.key() == f"key-{i % 97}".encode(), f"{topic}: key of {i}")
            check(m.value() == (f"{codec}/{acks}/{i}/" + "x" * (i % 200)).encode(), f"{topic}: value of {i}")
            check(m.headers() == [("h1", f"v{i}".encode()), ("empty", b"")], f"{topic}: headers of {i}: {m.headers()}")
        # Offsets per partition are dense from 0.
        for p in range(4):
            offsets = sorted(m.offset() for m in got if m.partition() == p)
            check(offsets == list(range(len(offsets))), f"{topic}: partition {p} offsets not dense")
        # The batches were stored as the producer compressed them.
        stored = set()
        for p in range(4):
            stored |= set(stored_codecs(DATA_DIR, topic, p))
        want = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
        # librdkafka sends a batch uncompressed when compressing would not shrink it (tiny
        # batches): the producer's codec, or none, and the codec at least once.
        check(want in stored and stored <= {0, want}, f"{topic}: stored codecs {stored}, want {want}")
        print(f"{topic}: {per_run} records round-tripped, stored with codec {want}", flush=True)


def stored_codecs(data_dir, topic, partition=0):
    """The codec of every batch in a partition's first segment file."""
    import os
    import struct
    path = os.path.join(data_dir, f"{topic}-{partition}", "00000000000000000000.log")
    data = open(path, "rb").read()
    codecs, at = [], 0
    while at + 61 <= len(data):
        (length,) = struct.unpack(">i", data[at + 8:at + 12])
        (attributes,) = struct.unpack(">h", data[at + 21:at + 23])
        codecs.append(attributes & 7)
        at += 12 + length
    return codecs


def case_topic_compression():
    """compression.type on a topic recompresses batches in another codec; `producer` keeps them."""
    data_dir = sys.argv[3]
    client = admin()
    ids = {"producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    for topic_codec, expected in ids.items():
        topic = f"tc-{topic_codec}"
        check(error_code(create(client, topic, 1, {"compression.type": topic_codec})) is None, f"create {topic}")
        for producer_codec in ["none", "lz4"]:
            producer = Producer({"bootstrap.servers": BOOTSTRAP, "compression.type": producer_codec,
                                 "linger.ms": 20})
            for i in range(500):
                producer.produce(topic, key=b"k", value=f"{producer_codec}-{i}-".encode() + b"z" * 300,
                                 headers=[("dup", b"1"), ("dup", b"2")])
            check(producer.flush(20) == 0, f"{topic}: undelivered")
        got = consume_all(topic, 1, 1000)
        values = [m.value() for m in got]
        want = [f"{c}-{i}-".encode() + b"z" * 300 for c in ["none", "lz4"] for i in range(500)]
        check(values == want, f"{topic}: records differ after recompression")
        check(all(m.headers() == [("dup", b"1"), ("dup", b"2")] for m in got), f"{topic}: headers changed")
        codecs = stored_codecs(data_dir, topic)
        if expected is None:
            check(0 in codecs and 3 in codecs, f"{topic}: producer codecs not kept: {set(codecs)}")
        else:
            check(set(codecs) == {expected}, f"{topic}: stored codecs {set(codecs)}, want {expected}")
        print(f"{topic}: stored as {sorted(set(codecs))}", flush=True)


def case_list_offsets():
    client = admin()
    check(error_code(create(client, "by-time", 1)) is None, "create by-time")
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 0})
    base = 1_700_000_000_000
    for i in range(100):
        producer.produce("by-time", value=str(i).encode(), timestamp=base + i * 1000)
        producer.flush(10)  # one batch per record: the time index sees each
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "lo"})
    low, high = consumer.get_watermark_offsets(TopicPartition("by-time", 0), timeout=10)
    check((low, high) == (0, 100), f"watermarks {(low, high)}")
    for wanted, expected in [(base, 0), (base + 42_500, 43), (base + 99_000, 99), (base - 5, 0), (base + 200_000, -1)]:
        found = consumer.offsets_for_times([TopicPartition("by-time", 0, wanted)], timeout=10)[0]
        check(found.error is None, f"offsets_for_times error {found.error}")
        check(found.offset == expected, f"offset for {wanted - base}: {found.offset}, want {expected}")
    consumer.close()
    # Admin list_offsets: earliest, latest, max timestamp.
    from confluent_kafka.admin import OffsetSpec
    tp = TopicPartition("by-time", 0)
    for spec, expected in [(OffsetSpec.earliest(), 0), (OffsetSpec.latest(), 100), (OffsetSpec.max_timestamp(), 99)]:
        result = client.list_offsets({tp: spec}, request_timeout=10)[tp].result()
        check(result.offset == expected, f"list_offsets {spec}: {result.offset}")
    # DeleteRecords moves the log start offset.
    result = client.delete_records([TopicPartition("by-time", 0, 10)], request_timeout=10)
    deleted = list(result.values())[0].result()
    check(deleted.low_watermark == 10, f"low watermark after delete_records {deleted.low_watermark}")
    result = client.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=10)[tp].result()
    check(result.offset == 10, f"earliest after delete_records {result.offset}")


def case_errors():
    client = admin()
    check(error_code(create(client, "small", 1, {"max.message.bytes": "10000"})) is None, "create small")
    errors = []
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "message.max.bytes": 5_000_000,
                         "compression.type": "none", "linger.ms": 0, "retries": 0})
    producer.produce("small", value=b"x" * 20_000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    check(errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE,
          f"oversized record gave {errors}")
    # The topic still works, and nothing of the refused record is there.
    errors.clear()
    producer.produce("small", value=b"fits", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    check(errors == [None], f"small record gave {errors}")
    got = consume_all("small", 1, 1, timeout=20)
    check([m.value() for m in got] == [b"fits"], f"small holds {[m.value() for m in got]}")


def case_record_errors():
    """A compacted topic refuses keyless records one by one, in every codec: librdkafka fails
    exactly those with INVALID_RECORD and the rest of their batch as not at fault
    (_INVALID_DIFFERENT_RECORD), as against Kafka; keyed batches are stored."""
    client = admin()
    check(error_code(create(client, "compacted", 1, {"cleanup.policy": "compact"})) is None,
          "create compacted")
    stored_values = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        producer = Producer({"bootstrap.servers": BOOTSTRAP, "compression.type": codec,
                             "linger.ms": 1000, "batch.num.messages": 1000, "retries": 0,
                             "enable.idempotence": False, "acks": "all"})
        # Connected and with the partition's leader known before the first record, so the
        # hundred records go in one batch within linger.ms (records produced while the
        # connection is still coming up can be sent early, in a batch of their own).
        producer.list_topics("compacted", timeout=10)
        outcomes = {}

        def report(err, msg):
            outcomes[int(msg.value().decode())] = err.code() if err else None

        for i in range(100):
            key = None if i % 10 == 3 else f"k{i}".encode()
            producer.produce("compacted", key=key, value=str(i).encode(), on_delivery=report)
        producer.flush(30)
        check(len(outcomes) == 100, f"{codec}: {len(outcomes)} delivery reports")
        bad = sorted(i for i, code in outcomes.items() if code == KafkaError.INVALID_RECORD)
        check(bad == list(range(3, 100, 10)), f"{codec}: INVALID_RECORD for {bad}")
        # The valid records of a batch holding bad ones fail as not at fault; a batch that
        # librdkafka happened to close before a bad record is stored.
        others = [code for i, code in outcomes.items() if i % 10 != 3]
        check(set(others) <= {KafkaError._INVALID_DIFFERENT_RECORD, None},
              f"{codec}: the valid records got {set(others)}")
        check(others.count(KafkaError._INVALID_DIFFERENT_RECORD) >= 80,
              f"{codec}: {others.count(None)} valid records stored: not one batch")
        stored_values.extend(str(i).encode() for i, code in outcomes.items() if code is None)
        # A batch of keyed records alone is stored.
        ok = []
        for i in range(10):
            producer.produce("compacted", key=f"k{i}".encode(), value=b"kept",
                             on_delivery=lambda err, msg: ok.append(err))
        producer.flush(30)
        check(ok == [None] * 10, f"{codec}: keyed records gave {ok}")
        stored_values.extend([b"kept"] * 10)
    got = consume_all("compacted", 1, len(stored_values), timeout=30)
    check(sorted(m.value() for m in got) == sorted(stored_values),
          f"compacted holds {[m.value() for m in got][:20]}")


def case_no_auto_create():
    client = admin()
    md = client.list_topics("not-there", timeout=10)
    err = md.topics["not-there"].error
    check(err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, f"metadata for a missing topic: {err}")
    errors = []
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "message.timeout.ms": 3000})
    producer.produce("not-there", value=b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    check(errors and errors[0] is not None and errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._MSG_TIMED_OUT),
          f"produce to a missing topic gave {errors}")
    check("not-there" not in client.list_topics(timeout=10).topics, "topic was auto-created")


def case_partition_limit():
    """On a broker started with max.broker.partitions=10: creates past it are refused with
    INVALID_PARTITIONS and a message naming the limit, and nothing of them is committed."""
    client = admin()

    def refused(future, what, limit=10):
        try:
            future.result(timeout=20)
        except KafkaException as e:
            error = e.args[0]
            check(error.code() == KafkaError.INVALID_PARTITIONS, f"{what} gave {error}")
            check(f"max.broker.partitions of {limit}" in error.str(), f"{what} said {error.str()}")
            return
        raise AssertionError(f"{what} was accepted")

    check(error_code(create(client, "fits", 6)) is None, "create 6 of 10")
    refused(create(client, "too-many", 5), "5 more partitions")
    refused(create(client, "too-many", 5, validate_only=True), "5 more, validate_only")
    check("too-many" not in client.list_topics(timeout=10).topics, "a refused topic exists")
    grow = client.create_partitions([NewPartitions("fits", 11)], operation_timeout=10)
    refused(grow["fits"], "growing fits to 11")
    grow = client.create_partitions([NewPartitions("fits", 10)], operation_timeout=10)
    check(error_code(grow["fits"]) is None, "growing fits to 10")
    check(len(client.list_topics("fits", timeout=10).topics["fits"].partitions) == 10, "fits has 10")
    refused(create(client, "one-more", 1), "an 11th partition")
    # An auto-create the cap refuses is answered with the refusal, not LEADER_NOT_AVAILABLE.
    # Asked by a client of its own: librdkafka keeps asking for a topic it was once asked
    # about, and once the delete below frees room, one of those asks would create it.
    probe = admin()
    md = probe.list_topics("auto-made", timeout=10)
    del probe
    err = md.topics["auto-made"].error
    check(err is not None and err.code() == KafkaError.INVALID_PARTITIONS,
          f"metadata for a refused auto-create: {err}")
    # Deleting a topic frees its room.
    check(error_code(client.delete_topics(["fits"], operation_timeout=10)["fits"]) is None, "delete fits")
    check(error_code(create(client, "too-many", 5)) is None, "5 partitions after the delete")

    # The limit changed at run time (a dynamic broker config) counts at once, and removing it
    # goes back to the static 10.
    def set_limit(value):
        operation = AlterConfigOpType.SET if value else AlterConfigOpType.DELETE
        r = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
            ConfigEntry("max.broker.partitions", value, incremental_operation=operation)])
        client.incremental_alter_configs([r])[r].result(timeout=10)

    set_limit("7")
    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    entry = client.describe_configs([broker])[broker].result(timeout=10)["max.broker.partitions"]
    check(entry.value == "7" and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
          and not entry.is_read_only, f"max.broker.partitions described as {entry}")
    refused(create(client, "past-seven", 3), "3 more past a dynamic 7", limit=7)
    check(error_code(create(client, "two", 2)) is None, "2 more up to a dynamic 7")
    set_limit(None)
    check(error_code(create(client, "three", 3)) is None, "3 more after the dynamic 7 is removed")
    refused(create(client, "past-ten", 1), "one past the static 10 again")
    for topic, future in client.delete_topics(["two", "three"], operation_timeout=10).items():
        check(error_code(future) is None, f"delete {topic}")


def case_auto_create():
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    errors = []
    producer.produce("made-on-demand", value=b"hello", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    check(errors == [None], f"produce with auto-create gave {errors}")
    got = consume_all("made-on-demand", 1, 1, timeout=20)
    check([m.value() for m in got] == [b"hello"], "auto-created topic content")


def case_create():
    """Creates TOPIC with PARTITIONS partitions and REPLICATION_FACTOR replicas."""
    topic, partitions, factor = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    client = admin()
    futures = client.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=factor)],
                                   operation_timeout=10)
    futures[topic].result(timeout=30)


def case_produce():
    """Produces COUNT records `PREFIX<i>` to partition 0 of TOPIC with ACKS; all must succeed."""
    topic, count, acks, prefix = sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
    errors = []
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": acks, "linger.ms": 5,
                         "message.timeout.ms": 30000})
    for i in range(count):
        producer.produce(topic, f"{prefix}{i}".encode(), partition=0,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    check(producer.flush(60) == 0, "undelivered records")
    check(not errors, f"delivery errors {errors[:3]}")


def case_delete():
    """Deletes TOPIC."""
    topic = sys.argv[3]
    client = admin()  # held: a collected client fails its futures with _DESTROY
    client.delete_topics([topic], operation_timeout=10)[topic].result(timeout=30)


def case_create_assigned():
    """Creates TOPIC with partitions on the replicas ASSIGNMENT (e.g. 4,1 or 1,2,3/2,3,1)."""
    topic = sys.argv[3]
    assignment = [[int(b) for b in part.split(",")] for part in sys.argv[4].split("/")]
    client = admin()
    new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)
    futures = client.create_topics([new], operation_timeout=10)
    futures[topic].result(timeout=30)


def case_set_config():
    """Sets a topic config: TOPIC KEY VALUE."""
    topic, key, value = sys.argv[3], sys.argv[4], sys.argv[5]
    client = admin()
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([resource])[resource].result(timeout=30)


def case_elect_preferred():
    """ElectLeaders (preferred) for partitions 0..N-1 of TOPIC; prints `partition error`."""
    from confluent_kafka import ElectionType
    topic, count = sys.argv[3], int(sys.argv[4])
    client = admin()
    # (confluent-kafka 2.16 fails on elect_leaders keyword arguments: none are passed.)
    future = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p) for p in range(count)])
    for tp, error in sorted(future.result(timeout=30).items(), key=lambda kv: kv[0].partition):
        print(tp.partition, error.code() if error else 0)


def case_leaders():
    """Prints `partition leader isr...` for each partition of TOPIC."""
    topic = sys.argv[3]
    md = admin().list_topics(topic, timeout=10).topics[topic]
    for pid, p in sorted(md.partitions.items()):
        print(pid, p.leader, *p.isrs)


def case_dump():
    """Prints every record value of a topic, one per line, reading each partition to its end."""
    topic = sys.argv[3]
    partitions = int(sys.argv[4])
    consumer = Consumer({
        "bootstrap.servers": BOOTSTRAP,
        "group.id": "dump",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    at_end = set()
    deadline = time.time() + 60
    while len(at_end) < partitions and time.time() < deadline:
        for m in consumer.consume(num_messages=1000, timeout=1.0):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise AssertionError(f"consume error: {m.error()}")
            print(m.value().decode())
    consumer.close()
    check(len(at_end) == partitions, f"only {sorted(at_end)} of {partitions} partitions read to the end")


CASES = {name[5:].replace("_", "-"): f for name, f in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    CASES[CASE]()
    print(f"{CASE}: ok", flush=True)
