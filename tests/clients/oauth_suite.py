#!/usr/bin/env python3
"""SASL/OAUTHBEARER against a SASL_PLAINTEXT listener, with third-party clients.

confluent-kafka (librdkafka) logs in with its built-in unsecured token
(sasl.oauthbearer.config=principal=..., enable.sasl.oauthbearer.unsecure.jwt) or with a token
its oauth_cb hands it; kafka-python with a token provider (sasl_oauth_token_provider). Signed
tokens are minted by the Rust test and passed here as files. A refused token fails with
Kafka's authentication error and the broker's {"status":"invalid_token"}.

usage: oauth_suite.py BOOTSTRAP CASE ARGS...
cases: confluent-unsecured-roundtrip TOPIC PRINCIPAL
       confluent-reauthenticates TOPIC SECONDS       (unsecured tokens of 3 s)
       confluent-token-roundtrip TOPIC TOKEN_FILE
       confluent-token-refused TOKEN_FILE
       kafka-python-token-roundtrip TOPIC TOKEN_FILE
       kafka-python-token-refused TOKEN_FILE
"""
import base64
import json
import sys
import time

BOOTSTRAP, CASE = sys.argv[1:3]
ARGS = sys.argv[3:]


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def read_token(path):
    with open(path) as f:
        return f.read().strip()


def token_expiry(token):
    """The token's exp (seconds), read from its payload."""
    payload = token.split(".")[1]
    payload += "=" * (-len(payload) % 4)
    return float(json.loads(base64.urlsafe_b64decode(payload))["exp"])


def unsecured_config(principal, life_seconds=None, **extra):
    oauth = f"principal={principal}"
    if life_seconds:
        oauth += f" lifeSeconds={life_seconds}"
    config = {"bootstrap.servers": BOOTSTRAP, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
              "sasl.oauthbearer.config": oauth}
    config.update(extra)
    return config


def token_config(token_file, **extra):
    def oauth_cb(_config):
        token = read_token(token_file)
        return token, token_expiry(token)
    config = {"bootstrap.servers": BOOTSTRAP, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}
    config.update(extra)
    return config


def confluent_roundtrip(topic, config_of, who):
    from confluent_kafka import Consumer, Producer
    producer = Producer(config_of(acks="all"))
    producer.poll(1)  # serves oauth_cb
    failures = []
    values = [f"oauth-{i}" for i in range(20)]
    for value in values:
        producer.produce(topic, value.encode(), on_delivery=lambda e, m: e and failures.append(e))
    check(producer.flush(30) == 0, "confluent-kafka: records still unsent after 30 s")
    check(not failures, f"confluent-kafka: deliveries failed: {failures}")
    consumer = Consumer(config_of(**{"group.id": f"{topic}-group",
                                     "auto.offset.reset": "earliest"}))
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
    print(f"confluent-kafka: produced and consumed {len(got)} records as {who} over OAUTHBEARER")


def confluent_reauthenticates(topic, seconds):
    """Produces for `seconds` with unsecured tokens that live 3 s: the broker bounds each
    session by its token, librdkafka makes new tokens and renews its sessions in place
    (KIP-368), and no delivery fails."""
    from confluent_kafka import Producer
    producer = Producer(unsecured_config("alice", life_seconds=3, acks="all"))
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
    print(f"confluent-kafka: {sent} records over {seconds} s of 3 s tokens")


def confluent_refused(token_file):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    errors = []
    admin = AdminClient(token_config(token_file, error_cb=lambda e: errors.append(e)))
    admin.poll(1)
    try:
        metadata = admin.list_topics(timeout=5)
        raise AssertionError(f"metadata served with a refused token: {sorted(metadata.topics)}")
    except KafkaException as e:
        print(f"list_topics failed: {e}")
    deadline = time.time() + 10
    while not errors and time.time() < deadline:
        admin.poll(0.2)
    codes = [e.code() for e in errors]
    check(KafkaError._AUTHENTICATION in codes,
          f"expected an authentication error, got {[str(e) for e in errors]}")
    text = " ".join(str(e) for e in errors)
    check("invalid_token" in text, f"the broker's error challenge is missing: {text}")
    print(f"confluent-kafka: refused: {errors[0]}")


def kafka_python_provider(token_file):
    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider
    except ImportError:  # kafka-python 2.x
        try:
            from kafka.sasl.oauth import AbstractTokenProvider
        except ImportError:
            from kafka.oauth.abstract import AbstractTokenProvider

    class FileTokenProvider(AbstractTokenProvider):
        def token(self):
            return read_token(token_file)

    return FileTokenProvider()


def kafka_python_config(token_file):
    return {"bootstrap_servers": BOOTSTRAP, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": kafka_python_provider(token_file)}


def kafka_python_roundtrip(topic, token_file):
    from kafka import KafkaConsumer, KafkaProducer
    producer = KafkaProducer(acks="all", **kafka_python_config(token_file))
    values = [f"kafka-python-{i}" for i in range(10)]
    for value in values:
        producer.send(topic, value.encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                             **kafka_python_config(token_file))
    got = [m.value.decode() for m in consumer if m.value.decode().startswith("kafka-python-")]
    consumer.close()
    check(got == values, f"kafka-python read {got}, expected {values}")
    print(f"kafka-python: produced and consumed {len(got)} records with a signed token")


def kafka_python_refused(token_file):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    try:
        KafkaProducer(request_timeout_ms=5000, **kafka_python_config(token_file))
        raise AssertionError("kafka-python: a producer connected with a refused token")
    except KafkaError as e:
        text = f"{type(e).__name__}: {e}"
        # kafka-python retries the refused authentication until its bootstrap times out (3.0:
        # KafkaTimeoutError; 2.x: NoBrokersAvailable); the test checks the broker's log.
        check(any(s in text for s in ("SaslAuthenticationFailed", "NoBrokersAvailable",
                                      "Unable to bootstrap", "invalid_token")),
              f"kafka-python: expected an authentication failure, got {text}")
        print(f"kafka-python: refused: {text}")


if CASE == "confluent-unsecured-roundtrip":
    topic, principal = ARGS
    confluent_roundtrip(topic, lambda **extra: unsecured_config(principal, **extra), principal)
elif CASE == "confluent-reauthenticates":
    confluent_reauthenticates(*ARGS)
elif CASE == "confluent-token-roundtrip":
    topic, token_file = ARGS
    confluent_roundtrip(topic, lambda **extra: token_config(token_file, **extra),
                        "the token's subject")
elif CASE == "confluent-token-refused":
    confluent_refused(*ARGS)
elif CASE == "kafka-python-token-roundtrip":
    kafka_python_roundtrip(*ARGS)
elif CASE == "kafka-python-token-refused":
    kafka_python_refused(*ARGS)
else:
    raise SystemExit(f"unknown case {CASE}")
