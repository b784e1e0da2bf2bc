#!/usr/bin/env python3
"""Failover timeline: how long an idempotent acks=all producer stalls when a leader dies.

Starts three nodes (each broker and controller, like config/node-*.properties, on free ports
under a temporary directory), creates two RF=3 topics of 2 partitions, and keeps a
confluent-kafka producer sending a record every 2 ms round-robin over the four partitions.
Then, for each scenario, kill -9 of a node and a restart:

- `partition-leader`: a node that leads a partition but not the metadata quorum;
- `quorum-leader`: the node that leads the metadata quorum (and some partitions).

Per partition it reports the stall: the longest gap between acknowledgements around the kill
(0 for partitions whose leader lived, if nothing waited on the dead node). The timeline, in
seconds after the kill, from the surviving nodes' logs and the producer:

- `quorum_leader_s`: a surviving node leads the metadata quorum (quorum-leader scenario);
- `fenced_s`: the active controller fenced the dead broker, and why (`fence_reason`);
- `leaders_moved_s`: the first and last partition leadership taken over by a survivor;
- per partition, `first_ack_after_kill_s`: the producer's first acknowledgement after the kill.

usage: benches/failover.py [--sluice PATH] [--rounds N]
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_node import free_port  # noqa: E402


class Cluster:
    def __init__(self, binary, work, overrides=lambda node_id: []):
        """Three nodes; `overrides(node_id)`: more `key=value` settings of that node."""
        self.binary, self.work, self.overrides = binary, work, overrides
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
            # Three nodes share this machine's CPUs, as config/node-*.properties say.
            "--override", "thread.affinity=false",
            *[arg for o in self.overrides(i) for arg in ("--override", o)],
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


def log_time(line):
    """Seconds since the epoch of a log line's UTC timestamp."""
    stamp = line.split()[0].rstrip("Z")
    return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp()


def timeline(cluster, victim, killed_wall):
    """Phases after the kill, from the survivors' log lines (seconds after the kill)."""
    after = lambda line: round(log_time(line) - killed_wall, 3)
    lines = [l for i in cluster.nodes if i != victim for l in cluster.logs(i).splitlines()
             if l[:4].isdigit() and log_time(l) >= killed_wall]
    phases = {}
    leads = [l for l in lines if "now leads the metadata quorum" in l]
    if leads:
        phases["quorum_leader_s"] = min(map(after, leads))
    fences = [l for l in lines if "fencing it" in l and f"broker={victim}" in l]
    if fences:
        first = min(fences, key=log_time)
        phases["fenced_s"] = after(first)
        phases["fence_reason"] = "listeners refuse" if "refuse" in first else "session expired"
    moved = sorted(after(l) for l in lines if "became leader" in l)
    if moved:
        phases["leaders_moved_s"] = [moved[0], moved[-1]]
    return phases


def leaders(admin, topics):
    md = admin.list_topics(timeout=10)
    return {(t, p): md.topics[t].partitions[p].leader for t in topics for p in md.topics[t].partitions}


CLIENT_DEBUG = None


def run_scenario(cluster, admin, topics, scenario):
    acks = {}  # (topic, partition) -> list of ack times
    lock = threading.Lock()
    stop = threading.Event()

    def report(err, msg):
        if err is None:
            with lock:
                acks.setdefault((msg.topic(), msg.partition()), []).append(time.monotonic())

    settings = {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                "linger.ms": 1, "message.timeout.ms": 60000}
    if CLIENT_DEBUG:
        settings["debug"] = CLIENT_DEBUG
    producer = Producer(settings)

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
    killed_wall = time.time()
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
    result["timeline"] = timeline(cluster, victim, killed_wall)
    cluster.start(victim)
    time.sleep(10)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--scenarios", default="partition-leader,quorum-leader")
    parser.add_argument("--client-debug", help="librdkafka debug contexts for the producer (to stderr)")
    args = parser.parse_args()
    global CLIENT_DEBUG
    CLIENT_DEBUG = args.client_debug
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
            for scenario in args.scenarios.split(","):
                print(json.dumps(run_scenario(cluster, admin, topics, scenario)), flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
