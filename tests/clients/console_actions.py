"""confluent-kafka checks what the console's actions did (tests/console.rs).

usage: console_actions.py BOOTSTRAP HTTP_PORT created|modified|refusals
"""

import json
import sys
import urllib.error
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

bootstrap, http_port, step = sys.argv[1], int(sys.argv[2]), sys.argv[3]
TOPIC, GROUP = "console-made", "console-reset-group"
admin = AdminClient({"bootstrap.servers": bootstrap})


def post(path, body, header=True):
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/api/v1/{path}", data=json.dumps(body).encode(),
        method="POST", headers={"Content-Type": "application/json", **({"X-Sluice-Console": "1"} if header else {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


if step == "created":
    metadata = admin.list_topics(TOPIC, timeout=30).topics[TOPIC]
    assert metadata.error is None and len(metadata.partitions) == 3, metadata
    configs = admin.describe_configs([ConfigResource("topic", TOPIC)])
    entries = list(configs.values())[0].result(30)
    assert entries["retention.ms"].value == "3600000", entries["retention.ms"]
    assert entries["retention.bytes"].value == "1048576", entries["retention.bytes"]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce(TOPIC, key=f"k{i}", value=f"v{i}", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    consumer.commit(offsets=[TopicPartition(TOPIC, p, 10 if p == 0 else 0) for p in range(3)],
                    asynchronous=False)
    consumer.close()
    print("created ok: 3 partitions, retention.ms and retention.bytes set")
elif step == "modified":
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
    assert (low, high) == (4, 10), (low, high)
    committed = consumer.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=30)
    offsets = [tp.offset for tp in committed]
    assert offsets == [4, 0, 0], offsets
    consumer.close()
    print("modified ok: partition 0 starts at 4, the group's offsets reset to the earliest")
elif step == "refusals":
    status, answer = post("topics", {"name": "nope"}, header=False)
    assert status == 403 and "X-Sluice-Console" in answer["error"].replace("x-sluice-console", "X-Sluice-Console"), (status, answer)
    status, answer = post("topics", {"name": "console-made", "partitions": 1})
    assert status == 409 and "TOPIC_ALREADY_EXISTS" in answer["error"], (status, answer)
    status, answer = post("topics", {"name": "x", "partitons": 1})
    assert status == 400 and "partitons" in answer["error"], (status, answer)
    print("refusals ok")
elif step == "read-only":
    status, answer = post("topics", {"name": "nope"})
    assert status == 403 and "http.console.actions.enable=true" in answer["error"], (status, answer)
    print("read-only ok")
elif step == "login":
    # A broker with an authorizer and a SASL listener: the console logs users in.
    import base64
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, NewTopic,
                                       ResourcePatternType, ResourceType)

    for topic in ("alice-orders", "secret-payroll"):
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    for binding, future in admin.create_acls([
        AclBinding(ResourceType.TOPIC, "alice-orders", ResourcePatternType.LITERAL, "User:alice",
                   "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    ]).items():
        future.result(30)

    def get(path, user=None, password=None):
        headers = {}
        if user is not None:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        request = urllib.request.Request(f"http://127.0.0.1:{http_port}/{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.headers, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    status, headers, body = get("")
    assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Basic"), (status, headers)
    status, _, body = get("api/v1/topics", "alice", "wrong")
    assert status == 401 and b"SASL_AUTHENTICATION_FAILED" in body, (status, body)
    status, _, body = get("api/v1/topics", "alice", "alice-secret")
    assert status == 200, (status, body)
    names = [t["name"] for t in json.loads(body)["topics"]]
    assert status == 200 and names == ["alice-orders"], (status, names)
    status, _, body = get("api/v1/topics/secret-payroll/partitions/0/records?from=oldest", "alice", "alice-secret")
    assert status == 403 and b"TOPIC_AUTHORIZATION_FAILED" in body, (status, body)
    status, _, body = get("api/v1/topics", "mallory", "mallory-secret")
    assert status == 200, (status, body)
    names = [t["name"] for t in json.loads(body)["topics"]]
    assert status == 200 and names == [], (status, names)
    status, _, body = get("api/v1/cluster", "alice", "alice-secret")
    assert status == 403 and b"CLUSTER_AUTHORIZATION_FAILED" in body, (status, body)
    print("login ok: 401 without or with a wrong password; each user sees what its ACLs allow")
