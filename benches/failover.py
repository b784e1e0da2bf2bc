#!/usr/bin/env python3
"""Failover timeline: how long an idempotent acks=all producer stalls when a leader dies.

Starts three nodes (each broker and controller, like config/node-*.properties, on free ports
under a temporary directory), creates two RF=3 topics of 2 partitions, and keeps a
confluent-kafka producer sending a record every 2 ms round-robin over the four partitions.
Then, for each scenario, kill -9 of a node and a restart:

- `partition-leader`: a node that leads a partition but not the metadata quorum;
- `quorum-leader`: the node that leads the metadata quorum (and some partitions).

Per partition it reports the stall: the longest gap between acknowledgements around the kill
(0 for partitions whose leader lived, if nothing waited on the dead node). Phases, from the
nodes' logs: when a controller fenced the dead broker and why, and when the partitions got new
leaders as the producer saw them (first acknowledgement after the kill).

usage: benches/failover.py [--sluice PATH] [--rounds N]
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, binary, work):
        self.binary, self.work = binary, work
        self.nodes = {i: {"kafka": free_port(), "quorum": free_port(), "http": free_port()} for i in (1, 2, 3)}
        self.voters = ",".join(f"{i}@127.0.0.1:{n['quorum']}" for i, n in self.nodes.items())
        self.processes = {}
        for i in self.nodes:
            self.start(i)
        self.bootstrap = ",".join(f"127.0.0.1:{n['kafka']}" for n in self.nodes.values())

    def start(self, i):
        n = self.nodes[i]
        log = open(os.path.join(self.work, f"node-{i}.log"), "a")
        self.processes[i] = subprocess.Popen([
            self.binary, "server",
            "--override", f"node.id={i}",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{n['kafka']},CONTROLLER://127.0.0.1:{n['quorum']}",
            "--override", f"controller.quorum.voters={self.voters}",
            "--override", f"http.listener=127.0.0.1:{n['http']}",
            "--override", f"log.dirs={os.path.join(self.work, f'data-{i}')}",
            "--override", "default.replication.factor=3",
            "--override", "min.insync.replicas=2",
        ], stdout=subprocess.DEVNULL, stderr=log)

    def kill9(self, i):
        self.processes[i].send_signal(signal.SIGKILL)
        self.processes[i].wait()

    def stop(self):
        for p in self.processes.values():
            if p.poll() is None:
                p.terminate()
        for p in self.processes.values():
            p.wait(30)

    def quorum_leader(self):
        out = subprocess.run([self.binary, "cluster", "status", "--bootstrap-server", self.bootstrap],
                             stdout=subprocess.PIPE, text=True, timeout=30).stdout
        return int(out.split()[1])

    def logs(self, i):
        with open(os.path.join(self.work, f"node-{i}.log")) as f:
            return f.read()


def leaders(admin, topics):
    md = admin.list_topics(timeout=10)
    return {(t, p): md.topics[t].partitions[p].leader for t in topics for p in md.topics[t].partitions}


def run_scenario(cluster, admin, topics, scenario):
    acks = {}  # (topic, partition) -> list of ack times
    lock = threading.Lock()
    stop = threading.Event()

    def report(err, msg):
        if err is None:
            with lock:
                acks.setdefault((msg.topic(), msg.partition()), []).append(time.monotonic())

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 1, "message.timeout.ms": 60000})

    def send():
        i = 0
        keys = [(t, p) for t in topics for p in (0, 1)]
        while not stop.is_set():
            t, p = keys[i % len(keys)]
            producer.produce(t, value=b"x" * 100, partition=p, on_delivery=report)
            producer.poll(0)
            i += 1
            time.sleep(0.002)
        producer.flush(60)

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(3)
    owners = leaders(admin, topics)
    quorum_leader = cluster.quorum_leader()
    if scenario == "quorum-leader":
        victim = quorum_leader
    else:
        candidates = [n for n in set(owners.values()) if n != quorum_leader]
        victim = candidates[0] if candidates else [n for n in cluster.nodes if n != quorum_leader][0]
    killed_at = time.monotonic()
    cluster.kill9(victim)
    time.sleep(20)
    stop.set()
    sender.join()
    result = {"scenario": scenario, "victim": victim, "quorum_leader": quorum_leader, "partitions": {}}
    for key, times in sorted(acks.items()):
        before = [t for t in times if t <= killed_at]
        after = [t for t in times if t > killed_at]
        last_before = before[-1] if before else killed_at
        first_after = after[0] if after else None
        gaps = [b - a for a, b in zip(times, times[1:]) if b > killed_at - 1]
        result["partitions"][f"{key[0]}-{key[1]}"] = {
            "led_by_victim": owners[key] == victim,
            "stall_s": round(max(gaps) if gaps else float("nan"), 3),
            "first_ack_after_kill_s": round(first_after - killed_at, 3) if first_after else None,
        }
    fence = re.findall(r"^(\S+).*fencing it.*broker=%d" % victim + r"|^(\S+).*broker=%d.*fencing it" % victim,
                       "\n".join(cluster.logs(i) for i in cluster.nodes if i != victim), re.M)
    result["fence_log"] = [a or b for a, b in fence][:2]
    cluster.start(victim)
    time.sleep(10)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-failover-")
    cluster = Cluster(args.sluice, work)
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if len(admin.list_topics(timeout=2).brokers) == 3:
                    break
            except Exception:
                pass
            time.sleep(0.5)
        topics = ["failover-a", "failover-b"]
        for f in admin.create_topics([NewTopic(t, 2, 3) for t in topics]).values():
            f.result()
        time.sleep(3)
        for _ in range(args.rounds):
            for scenario in ("partition-leader", "quorum-leader"):
                print(json.dumps(run_scenario(cluster, admin, topics, scenario)), flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
