#!/usr/bin/env python3
"""TLS listeners with third-party clients: confluent-kafka and kafka-python over SSL with a
client certificate (mTLS: the broker names the client by its certificate's subject through
ssl.principal.mapping.rules, and the ACLs are for that name), and over SASL_SSL with SCRAM;
a client without a certificate, or one that does not trust the broker's CA, is refused.

usage: tls_suite.py CASE BOOTSTRAP CERTS_DIR [TOPIC]
cases: mtls-roundtrip, mtls-kafka-python, no-certificate-refused, untrusted-refused,
       scram-roundtrip, scram-kafka-python, mtls-encrypted-key (TOPIC KEY_FILE PASSWORD: alice's encrypted key)
"""
import os
import sys
import time

CASE, BOOTSTRAP, CERTS = sys.argv[1:4]


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def cert(name):
    return os.path.join(CERTS, name)


def ssl_config(**extra):
    config = {"bootstrap.servers": BOOTSTRAP, "security.protocol": "SSL",
              "ssl.ca.location": cert("ca.pem"),
              "ssl.certificate.location": cert("alice.pem"),
              "ssl.key.location": cert("alice.key")}
    config.update(extra)
    return config


def scram_config(**extra):
    config = {"bootstrap.servers": BOOTSTRAP, "security.protocol": "SASL_SSL",
              "ssl.ca.location": cert("ca.pem"), "sasl.mechanism": "SCRAM-SHA-512",
              "sasl.username": "bob", "sasl.password": "bob-secret"}
    config.update(extra)
    return config


def roundtrip(config, topic, who):
    from confluent_kafka import Consumer, Producer
    producer = Producer(dict(config, acks="all"))
    values = [f"{who}-{i}" for i in range(20)]
    failures = []
    for value in values:
        producer.produce(topic, value.encode(), on_delivery=lambda e, m: e and failures.append(e))
    check(producer.flush(30) == 0 and not failures, f"{who}: produce failed: {failures}")
    consumer = Consumer(dict(config, **{"group.id": f"tls-{who}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got = []
    deadline = time.time() + 30
    while len(got) < len(values) and time.time() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        check(message.error() is None, f"{who}: consume: {message.error()}")
        got.append(message.value().decode())
    consumer.close()
    check(got == values, f"{who} read {got}")
    print(f"{who}: produced and consumed {len(got)} records on {topic}")


def refused(config, who):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    errors = []
    admin = AdminClient(dict(config, error_cb=lambda e: errors.append(e)))
    try:
        metadata = admin.list_topics(timeout=5)
        raise AssertionError(f"{who}: metadata served: {sorted(metadata.topics)}")
    except KafkaException as e:
        print(f"{who}: list_topics failed: {e}")
    deadline = time.time() + 10
    while not errors and time.time() < deadline:
        admin.poll(0.2)
    text = " ".join(str(e) for e in errors)
    check("SSL" in text or "ssl" in text or "handshake" in text,
          f"{who}: expected a TLS failure, got {text}")
    print(f"{who}: refused: {errors[0]}")


def kafka_python_roundtrip(topic, how):
    from kafka import KafkaConsumer, KafkaProducer
    if how == "mTLS":
        config = {"bootstrap_servers": BOOTSTRAP, "security_protocol": "SSL",
                  "ssl_cafile": cert("ca.pem"), "ssl_certfile": cert("alice.pem"),
                  "ssl_keyfile": cert("alice.key")}
    else:
        config = {"bootstrap_servers": BOOTSTRAP, "security_protocol": "SASL_SSL",
                  "ssl_cafile": cert("ca.pem"), "sasl_mechanism": "SCRAM-SHA-512",
                  "sasl_plain_username": "bob", "sasl_plain_password": "bob-secret"}
    producer = KafkaProducer(acks="all", **config)
    values = [f"kafka-python-{i}" for i in range(10)]
    for value in values:
        producer.send(topic, value.encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                             **config)
    got = [m.value.decode() for m in consumer]
    consumer.close()
    check(got == values, f"kafka-python read {got}")
    print(f"kafka-python: produced and consumed {len(got)} records over {how}")


if CASE == "mtls-roundtrip":
    roundtrip(ssl_config(), sys.argv[4], "alice")
elif CASE == "mtls-kafka-python":
    kafka_python_roundtrip(sys.argv[4], "mTLS")
elif CASE == "scram-kafka-python":
    kafka_python_roundtrip(sys.argv[4], "SASL_SSL with SCRAM-SHA-512")
elif CASE == "no-certificate-refused":
    config = ssl_config()
    del config["ssl.certificate.location"], config["ssl.key.location"]
    refused(config, "no certificate")
elif CASE == "untrusted-refused":
    refused(ssl_config(**{"ssl.ca.location": cert("other-ca.pem")}), "untrusting client")
elif CASE == "scram-roundtrip":
    roundtrip(scram_config(), sys.argv[4], "bob")
elif CASE == "mtls-encrypted-key":
    key_file, password = sys.argv[5:7]
    roundtrip(ssl_config(**{"ssl.key.location": key_file, "ssl.key.password": password}),
              sys.argv[4], "alice")
else:
    raise SystemExit(f"unknown case {CASE}")
