#!/usr/bin/env python3
"""ACLs with a third-party client: confluent-kafka's AdminClient creates, describes and deletes
ACLs (as the super user on the PLAINTEXT listener); then alice, over SASL_PLAINTEXT, works
within them and is refused outside them with Kafka's errors: another principal's topic, a topic
whose READ is both allowed and denied (deny wins), another principal's group.

usage: acl_suite.py CASE PLAINTEXT_BOOTSTRAP SASL_BOOTSTRAP
cases: grant, alice-works, alice-refused, revoke
"""
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, NewTopic, ResourcePatternType, ResourceType)

CASE, PLAIN, SASL = sys.argv[1:4]


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def alice(**extra):
    config = {"bootstrap.servers": SASL, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": "alice",
              "sasl.password": "alice-secret"}
    config.update(extra)
    return config


ALICE_BINDINGS = [
    AclBinding(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*",
               AclOperation.ALL, AclPermissionType.ALLOW),
    AclBinding(ResourceType.GROUP, "alice-group", ResourcePatternType.LITERAL, "User:alice", "*",
               AclOperation.READ, AclPermissionType.ALLOW),
    AclBinding(ResourceType.TOPIC, "shared", ResourcePatternType.LITERAL, "User:alice", "*",
               AclOperation.READ, AclPermissionType.ALLOW),
    AclBinding(ResourceType.TOPIC, "shared", ResourcePatternType.LITERAL, "User:alice", "*",
               AclOperation.READ, AclPermissionType.DENY),
]


def alice_filter():
    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,
                            AclOperation.ANY, AclPermissionType.ANY)


def grant():
    admin = AdminClient({"bootstrap.servers": PLAIN})
    for topic, future in admin.create_topics([NewTopic("secret", 1, 1),
                                              NewTopic("shared", 1, 1)]).items():
        future.result(30)
    for binding, future in admin.create_acls(ALICE_BINDINGS).items():
        future.result(30)
    described = admin.describe_acls(alice_filter()).result(30)
    check(sorted(map(str, described)) == sorted(map(str, ALICE_BINDINGS)),
          f"described {described}")
    # An invalid ACL: Kafka's message for a CLUSTER ACL not named kafka-cluster.
    bad = AclBinding(ResourceType.BROKER, "other", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    try:
        admin.create_acls([bad])[bad].result(30)
        raise AssertionError("a CLUSTER ACL on another name was created")
    except KafkaException as e:
        check(e.args[0].code() == KafkaError.INVALID_REQUEST, f"bad ACL: {e}")
        print(f"invalid ACL refused: {e.args[0]}")
    # Produce to the others' topics as the super user.
    producer = Producer({"bootstrap.servers": PLAIN})
    for topic in ("secret", "shared"):
        producer.produce(topic, b"not for alice")
    check(producer.flush(30) == 0, "super user produce")
    print(f"granted alice {len(ALICE_BINDINGS)} ACLs, described them back")


def alice_works():
    admin = AdminClient(alice())
    admin.create_topics([NewTopic("alice-orders", 1, 1)])["alice-orders"].result(30)
    metadata = admin.list_topics(timeout=10)
    visible = sorted(t for t in metadata.topics if not t.startswith("__"))
    check(visible == ["alice-orders", "shared"], f"alice sees {visible}")
    producer = Producer(alice(acks="all"))
    values = [f"order-{i}" for i in range(10)]
    failures = []
    for value in values:
        producer.produce("alice-orders", value.encode(),
                         on_delivery=lambda e, m: e and failures.append(e))
    check(producer.flush(30) == 0 and not failures, f"alice produce: {failures}")
    consumer = Consumer(alice(**{"group.id": "alice-group", "auto.offset.reset": "earliest",
                                 "enable.auto.commit": False}))
    consumer.subscribe(["alice-orders"])
    got = []
    deadline = time.time() + 30
    while len(got) < len(values) and time.time() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        check(message.error() is None, f"alice consume: {message.error()}")
        got.append(message.value().decode())
    consumer.commit(asynchronous=False)
    consumer.close()
    check(got == values, f"alice read {got}")
    print(f"alice: created alice-orders, produced and consumed {len(got)} records in "
          f"alice-group; sees {visible}")


def expect_consume_refused(topic, group, code):
    consumer = Consumer(alice(**{"group.id": group, "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    deadline = time.time() + 20
    seen = None
    while time.time() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        if message.error() is not None:
            seen = message.error()
            break
        raise AssertionError(f"alice read {message.value()!r} from {topic}")
    consumer.close()
    check(seen is not None and seen.code() == code,
          f"{topic}: expected {KafkaError(code).name()}, got {seen}")
    print(f"alice: {topic} refused: {seen.name()}")


def alice_refused():
    expect_consume_refused("secret", "alice-group", KafkaError.TOPIC_AUTHORIZATION_FAILED)
    # READ allowed and denied: deny wins.
    expect_consume_refused("shared", "alice-group", KafkaError.TOPIC_AUTHORIZATION_FAILED)
    producer = Producer(alice(**{"message.timeout.ms": 10000}))
    failures = []
    producer.produce("secret", b"x", on_delivery=lambda e, m: failures.append(e))
    producer.flush(15)
    check(failures and failures[0] is not None
          and failures[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED,
          f"alice's produce to secret: {failures}")
    print(f"alice: produce to secret refused: {failures[0].name()}")
    # Another principal's group: joining it is refused (its coordinator is not even found).
    expect_consume_refused("alice-orders", "bob-group", KafkaError.GROUP_AUTHORIZATION_FAILED)


def revoke():
    admin = AdminClient({"bootstrap.servers": PLAIN})
    prefixed = AclBindingFilter(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED,
                                "User:alice", None, AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([prefixed])[prefixed].result(30)
    check(len(deleted) == 1, f"deleted {deleted}")
    producer = Producer(alice(**{"message.timeout.ms": 10000}))
    failures = []
    producer.produce("alice-orders", b"after revoke", on_delivery=lambda e, m: failures.append(e))
    producer.flush(15)
    check(failures and failures[0] is not None
          and failures[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED,
          f"alice's produce after the revoke: {failures}")
    remaining = admin.describe_acls(alice_filter()).result(30)
    check(len(remaining) == 3, f"remaining {remaining}")
    print(f"revoked alice's prefixed ACL: her produce is refused ({failures[0].name()}); "
          f"{len(remaining)} ACLs remain")


{"grant": grant, "alice-works": alice_works, "alice-refused": alice_refused,
 "revoke": revoke}[CASE]()
