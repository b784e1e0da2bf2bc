"""An idempotent acks=all producer (confluent-kafka) that writes `r<i>` to partition i % 2 of
TOPIC until killed. Prints each acknowledged value on its own line, and every error it sees
as `ERROR <name> fatal=<bool> retriable=<bool> <text>`: delivery failures (a record given up)
from the delivery callback, client-level errors (a broker connection lost) from error_cb.

Usage: acked_producer.py BOOTSTRAP TOPIC
"""

import sys

from confluent_kafka import Producer

from client_env import with_client_config

(Producer,) = with_client_config(Producer)

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]


def report(kind, err):
    print(f"ERROR {kind}:{err.name()} fatal={err.fatal()} retriable={err.retriable()} {err.str()}",
          flush=True)


def delivered(err, msg):
    if err is None:
        print(msg.value().decode(), flush=True)
    else:
        report("delivery", err)


# message.timeout.ms well past any failover: when a queued message times out, librdkafka
# bumps its producer epoch locally and re-sends records it had sent and got a retriable
# error for under new sequence numbers, which stores them twice whatever the broker does
# (librdkafka issue #4953). A 5 s timeout did so under a loaded CI machine.
producer = Producer({"bootstrap.servers": BOOTSTRAP, "enable.idempotence": True, "acks": "all",
                     "linger.ms": 2, "message.timeout.ms": 60000,
                     "error_cb": lambda err: report("client", err)})
i = 0
while True:
    producer.produce(TOPIC, value=f"r{i}".encode(), partition=i % 2, on_delivery=delivered)
    producer.poll(0)
    i += 1
    if i % 200 == 0:
        producer.flush(1)
