#!/usr/bin/env python3
"""SASL against a SASL_PLAINTEXT listener, with third-party clients: confluent-kafka
(librdkafka) and kafka-python produce and consume as a user of the listener's PLAIN JAAS
config; a wrong password and an unknown user fail with Kafka's authentication error, before
any metadata (not even a topic name) is served.

usage: sasl_suite.py BOOTSTRAP CASE [TOPIC]
cases: confluent-roundtrip TOPIC, kafka-python-roundtrip TOPIC, confluent-refused,
       kafka-python-refused
"""
import sys
import time

BOOTSTRAP, CASE = sys.argv[1:3]
USER, PASSWORD = "alice", "alice-secret"


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def confluent_config(username, password, **extra):
    config = {"bootstrap.servers": BOOTSTRAP, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": username, "sasl.password": password}
    config.update(extra)
    return config


def confluent_roundtrip(topic):
    from confluent_kafka import Consumer, Producer
    producer = Producer(confluent_config(USER, PASSWORD, **{"acks": "all"}))
    failures = []
    values = [f"sasl-{i}" for i in range(20)]
    for value in values:
        producer.produce(topic, value.encode(), on_delivery=lambda e, m: e and failures.append(e))
    check(producer.flush(30) == 0, "confluent-kafka: records still unsent after 30 s")
    check(not failures, f"confluent-kafka: deliveries failed: {failures}")
    consumer = Consumer(confluent_config(USER, PASSWORD, **{
        "group.id": "sasl-group", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got = []
    deadline = time.time() + 30
    while len(got) < len(values) and time.time() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        check(message.error() is None, f"confluent-kafka consumer: {message.error()}")
        got.append(message.value().decode())
    consumer.commit(asynchronous=False)
    consumer.close()
    check(got == values, f"confluent-kafka read {got}, expected {values}")
    print(f"confluent-kafka: produced and consumed {len(got)} records as {USER} over SASL PLAIN")


def confluent_refused():
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    for username, password in [(USER, "wrong"), ("mallory", "anything")]:
        errors = []
        admin = AdminClient(confluent_config(username, password, **{
            "error_cb": lambda e: errors.append(e)}))
        try:
            metadata = admin.list_topics(timeout=5)
            raise AssertionError(f"{username}: metadata served without authentication: "
                                 f"{sorted(metadata.topics)}")
        except KafkaException as e:
            print(f"{username}: list_topics failed: {e}")
        deadline = time.time() + 10
        while not errors and time.time() < deadline:
            admin.poll(0.2)
        codes = [e.code() for e in errors]
        check(KafkaError._AUTHENTICATION in codes,
              f"{username}: expected an authentication error, got {[str(e) for e in errors]}")
        text = " ".join(str(e) for e in errors)
        check("Invalid username or password" in text, f"{username}: the broker's message is "
              f"missing: {text}")
        print(f"{username}: refused: {errors[0]}")


def kafka_python_config(username, password):
    return {"bootstrap_servers": BOOTSTRAP, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": username,
            "sasl_plain_password": password}


def kafka_python_roundtrip(topic):
    from kafka import KafkaConsumer, KafkaProducer
    producer = KafkaProducer(acks="all", **kafka_python_config(USER, PASSWORD))
    values = [f"kafka-python-{i}" for i in range(10)]
    for value in values:
        producer.send(topic, value.encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                             **kafka_python_config(USER, PASSWORD))
    got = [m.value.decode() for m in consumer if m.value.decode().startswith("kafka-python-")]
    consumer.close()
    check(got == values, f"kafka-python read {got}, expected {values}")
    print(f"kafka-python: produced and consumed {len(got)} records as {USER} over SASL PLAIN")


def kafka_python_refused():
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    try:
        KafkaProducer(request_timeout_ms=5000, **kafka_python_config(USER, "wrong"))
        raise AssertionError("kafka-python: a producer connected with a wrong password")
    except KafkaError as e:
        text = f"{type(e).__name__}: {e}"
        # kafka-python retries the refused authentication until its bootstrap times out (3.0:
        # KafkaTimeoutError; 2.x: NoBrokersAvailable); the test checks the broker's log.
        check(any(s in text for s in ("SaslAuthenticationFailed", "NoBrokersAvailable",
                                      "Unable to bootstrap")),
              f"kafka-python: expected an authentication failure, got {text}")
        print(f"kafka-python: refused: {text}")


def confluent_reauthenticates(topic, seconds):
    """Produces for `seconds` over a listener whose sessions last less: librdkafka renews its
    session on each connection (KIP-368) and no delivery fails."""
    from confluent_kafka import Producer
    producer = Producer(confluent_config(USER, PASSWORD, **{"acks": "all"}))
    failures = []
    sent = 0
    deadline = time.time() + float(seconds)
    while time.time() < deadline:
        producer.produce(topic, f"reauth-{sent}".encode(),
                         on_delivery=lambda e, m: e and failures.append(e))
        sent += 1
        producer.poll(0.1)
    check(producer.flush(30) == 0, "records still unsent")
    check(not failures, f"deliveries failed across re-authentications: {failures}")
    print(f"confluent-kafka: {sent} records over {seconds} s of sessions renewed in place")


if CASE == "confluent-roundtrip":
    confluent_roundtrip(sys.argv[3])
elif CASE == "kafka-python-roundtrip":
    kafka_python_roundtrip(sys.argv[3])
elif CASE == "confluent-refused":
    confluent_refused()
elif CASE == "kafka-python-refused":
    kafka_python_refused()
elif CASE == "confluent-reauthenticates":
    confluent_reauthenticates(sys.argv[3], sys.argv[4])
else:
    raise SystemExit(f"unknown case {CASE}")
