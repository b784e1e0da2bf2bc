#!/usr/bin/env python3
"""SCRAM users stored in the metadata quorum, with third-party clients: confluent-kafka's
AdminClient creates, describes and deletes credentials (AlterUserScramCredentials,
DescribeUserScramCredentials) on a PLAINTEXT listener; confluent-kafka and kafka-python then
produce and consume as those users over SASL_PLAINTEXT with SCRAM-SHA-256 and SCRAM-SHA-512;
a wrong password, an unknown user and a deleted user are refused before any metadata.

usage: scram_suite.py CASE ARGS...
cases: admin-create PLAINTEXT_BOOTSTRAP
       admin-describe PLAINTEXT_BOOTSTRAP EXPECTED   (EXPECTED: user:MECHANISM:iterations,...)
       admin-delete PLAINTEXT_BOOTSTRAP USER MECHANISM
       confluent-roundtrip SASL_BOOTSTRAP MECHANISM USER PASSWORD TOPIC
       kafka-python-roundtrip SASL_BOOTSTRAP MECHANISM USER PASSWORD TOPIC
       confluent-refused SASL_BOOTSTRAP MECHANISM USER PASSWORD
"""
import sys
import time

CASE = sys.argv[1]


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def admin(bootstrap):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def mechanism_of(name):
    from confluent_kafka.admin import ScramMechanism
    return {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
            "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}[name]


def admin_create(bootstrap):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion
    client = admin(bootstrap)
    upsert = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(mechanism_of("SCRAM-SHA-256"), 4096), b"bob-secret")
    futures = client.alter_user_scram_credentials([upsert])
    futures["bob"].result(30)
    print("confluent-kafka: created bob (SCRAM-SHA-256, 4096 iterations)")
    # Too few iterations: UNACCEPTABLE_CREDENTIAL, nothing stored.
    weak = UserScramCredentialUpsertion(
        "weak", ScramCredentialInfo(mechanism_of("SCRAM-SHA-256"), 1000), b"weak-secret")
    try:
        client.alter_user_scram_credentials([weak])["weak"].result(30)
        raise AssertionError("a credential with 1000 iterations was accepted")
    except KafkaException as e:
        check(e.args[0].name() == "UNACCEPTABLE_CREDENTIAL", f"weak: {e}")
        print(f"confluent-kafka: 1000 iterations refused: {e.args[0].name()}")


def admin_describe(bootstrap, expected):
    from confluent_kafka import KafkaException
    client = admin(bootstrap)
    described = client.describe_user_scram_credentials().result(30)
    got = sorted(f"{user}:{info.mechanism.name.replace('_', '-')}:{info.iterations}"
                 for user, description in described.items()
                 for info in description.scram_credential_infos)
    want = sorted(e for e in expected.split(",") if e)
    check(got == want, f"described {got}, expected {want}")
    print(f"confluent-kafka: described {got}")
    try:
        client.describe_user_scram_credentials(["nobody"])["nobody"].result(30)
        raise AssertionError("a user without credentials was described")
    except KafkaException as e:
        check(e.args[0].name() == "RESOURCE_NOT_FOUND", f"nobody: {e}")
        print(f"confluent-kafka: nobody: {e.args[0].name()}")


def admin_delete(bootstrap, user, mechanism):
    from confluent_kafka.admin import UserScramCredentialDeletion
    client = admin(bootstrap)
    deletion = UserScramCredentialDeletion(user, mechanism_of(mechanism))
    client.alter_user_scram_credentials([deletion])[user].result(30)
    print(f"confluent-kafka: deleted {user}'s {mechanism} credential")


def confluent_config(bootstrap, mechanism, username, password, **extra):
    config = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": mechanism, "sasl.username": username,
              "sasl.password": password}
    config.update(extra)
    return config


def confluent_roundtrip(bootstrap, mechanism, username, password, topic):
    from confluent_kafka import Consumer, Producer
    producer = Producer(confluent_config(bootstrap, mechanism, username, password, acks="all"))
    failures = []
    values = [f"{username}-{i}" for i in range(20)]
    for value in values:
        producer.produce(topic, value.encode(), on_delivery=lambda e, m: e and failures.append(e))
    check(producer.flush(30) == 0, "confluent-kafka: records still unsent after 30 s")
    check(not failures, f"confluent-kafka: deliveries failed: {failures}")
    consumer = Consumer(confluent_config(bootstrap, mechanism, username, password, **{
        "group.id": f"{username}-group", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got = []
    deadline = time.time() + 30
    while len(got) < len(values) and time.time() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        check(message.error() is None, f"confluent-kafka consumer: {message.error()}")
        got.append(message.value().decode())
    consumer.close()
    check(got == values, f"confluent-kafka read {got}, expected {values}")
    print(f"confluent-kafka: produced and consumed {len(got)} records as {username} "
          f"over {mechanism}")


def kafka_python_roundtrip(bootstrap, mechanism, username, password, topic):
    from kafka import KafkaConsumer, KafkaProducer
    config = {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": mechanism, "sasl_plain_username": username,
              "sasl_plain_password": password}
    producer = KafkaProducer(acks="all", **config)
    values = [f"kafka-python-{i}" for i in range(10)]
    for value in values:
        producer.send(topic, value.encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                             **config)
    got = [m.value.decode() for m in consumer]
    consumer.close()
    check(got == values, f"kafka-python read {got}, expected {values}")
    print(f"kafka-python: produced and consumed {len(got)} records as {username} "
          f"over {mechanism}")


def confluent_refused(bootstrap, mechanism, username, password):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    errors = []
    client = AdminClient(confluent_config(bootstrap, mechanism, username, password, **{
        "error_cb": lambda e: errors.append(e)}))
    try:
        metadata = client.list_topics(timeout=5)
        raise AssertionError(f"{username}: metadata served without authentication: "
                             f"{sorted(metadata.topics)}")
    except KafkaException as e:
        print(f"{username}: list_topics failed: {e}")
    deadline = time.time() + 10
    while not errors and time.time() < deadline:
        client.poll(0.2)
    codes = [e.code() for e in errors]
    check(KafkaError._AUTHENTICATION in codes,
          f"{username}: expected an authentication error, got {[str(e) for e in errors]}")
    text = " ".join(str(e) for e in errors)
    check(f"Authentication failed during authentication due to invalid credentials with SASL "
          f"mechanism {mechanism}" in text, f"{username}: the broker's message is missing: {text}")
    print(f"{username}: refused: {errors[0]}")


CASES = {
    "admin-create": admin_create,
    "admin-describe": admin_describe,
    "admin-delete": admin_delete,
    "confluent-roundtrip": confluent_roundtrip,
    "kafka-python-roundtrip": kafka_python_roundtrip,
    "confluent-refused": confluent_refused,
}
if CASE not in CASES:
    raise SystemExit(f"unknown case {CASE}")
CASES[CASE](*sys.argv[2:])
