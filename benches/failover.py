#!/usr/bin/env python3
"""Failover timeline: how long an idempotent acks=all producer stalls when a node fails.

Starts three nodes (each broker and controller, like config/node-*.properties, on free ports
under a temporary directory, shipped liveness settings), creates two RF=3 topics of 2
partitions, and keeps an idempotent acks=all producer (`--client`: confluent-kafka, or
kafka-python, which follows the Java client) sending a record every 2 ms round-robin over the
four partitions. Then, for each fault and scenario, the fault for `--fault-s` seconds (20)
and its end:

- faults: `kill` (kill -9, then a restart), `pause` (SIGSTOP, then SIGCONT: a hung process,
  disk or VM; no FIN, no RST), `partition` (the node cut from everyone, clients included, by
  nftables on loopback: each node runs as its own user, and every packet its sockets send or
  that is sent to its ports is dropped; then healed). `partition` needs root.
- scenarios: `partition-leader` (a node that leads a partition but not the metadata quorum),
  `quorum-leader` (the node that leads the metadata quorum, and some partitions).

Per partition it reports the stall: the longest gap between acknowledgements around the fault
(partitions the victim led, and those it only followed, apart). The timeline, in seconds after
the fault, from the surviving nodes' logs and the producer:

- `quorum_leader_s`: a surviving node leads the metadata quorum (quorum-leader scenario);
- `fenced_s`: the active controller fenced the victim, and why (`fence_reason`);
- `leaders_moved_s`: the first and last partition leadership taken over by a survivor;
- per partition, `first_ack_after_fault_s`: the producer's first acknowledgement after it.

The last line is the table: per fault and scenario, stall p50/max of the victim's partitions
and of the others, over every round.

usage: benches/failover.py [--sluice PATH] [--rounds N] [--faults kill,pause,partition]
                          [--client librdkafka|kafka-python]
"""
import argparse
import datetime
import statistics
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


# Each node's user id when nodes run as users of their own (for `partition`).
NODE_UID_BASE = 61000


class Cluster:
    def __init__(self, binary, work, overrides=lambda node_id: [], own_users=False):
        """Three nodes; `overrides(node_id)`: more `key=value` settings of that node;
        `own_users`: each node runs as user NODE_UID_BASE + id, so its packets can be told
        apart on loopback (see `cut`)."""
        self.binary, self.work, self.overrides = binary, work, overrides
        self.own_users = own_users
        self.nodes = {i: {"kafka": free_port(), "quorum": free_port(), "http": free_port()} for i in (1, 2, 3)}
        self.voters = ",".join(f"{i}@127.0.0.1:{n['quorum']}" for i, n in self.nodes.items())
        self.processes = {}
        for i in self.nodes:
            self.start(i)
        self.bootstrap = ",".join(f"127.0.0.1:{n['kafka']}" for n in self.nodes.values())

    def start(self, i):
        n = self.nodes[i]
        log = open(os.path.join(self.work, f"node-{i}.log"), "a")
        user = {}
        if self.own_users:
            uid = NODE_UID_BASE + i
            os.chmod(self.work, 0o755)
            data = os.path.join(self.work, f"data-{i}")
            os.makedirs(data, exist_ok=True)
            for root, dirs, files in os.walk(data):
                for name in [root] + [os.path.join(root, f) for f in dirs + files]:
                    os.chown(name, uid, uid)
            user = {"user": uid, "group": uid}
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
        ], stdout=subprocess.DEVNULL, stderr=log, **user)

    def kill9(self, i):
        self.processes[i].send_signal(signal.SIGKILL)
        self.processes[i].wait()

    def pause(self, i):
        self.processes[i].send_signal(signal.SIGSTOP)

    def resume(self, i):
        self.processes[i].send_signal(signal.SIGCONT)

    def cut(self, i):
        """Drops every packet node `i`'s sockets send and every packet sent to its ports."""
        ports = ", ".join(str(p) for p in self.nodes[i].values())
        rules = (f"table inet sluice_failover {{\n chain output {{ type filter hook output priority 0;\n"
                 f"  meta skuid {NODE_UID_BASE + i} drop\n  tcp dport {{ {ports} }} drop\n }}\n}}\n")
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)

    def heal(self):
        subprocess.run(["nft", "delete", "table", "inet", "sluice_failover"], capture_output=True)

    def stop(self):
        self.heal()
        for p in self.processes.values():
            p.send_signal(signal.SIGCONT)
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
        phases["fence_reason"] = ("listeners refuse" if "refuse" in first
                                  else "no answer to the probe" if "answers on none" in first
                                  else "session expired")
    moved = sorted(after(l) for l in lines if "became leader" in l)
    if moved:
        phases["leaders_moved_s"] = [moved[0], moved[-1]]
    return phases


def leaders(admin, topics):
    md = admin.list_topics(timeout=10)
    return {(t, p): md.topics[t].partitions[p].leader for t in topics for p in md.topics[t].partitions}


CLIENT_DEBUG = None
CLIENT = "librdkafka"


class LibrdkafkaProducer:
    """confluent-kafka: idempotent, acks=all, its own request timeout (30 s)."""

    def __init__(self, bootstrap, report):
        settings = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                    "linger.ms": 1, "message.timeout.ms": 60000}
        if CLIENT_DEBUG:
            settings["debug"] = CLIENT_DEBUG
        self.producer = Producer(settings)
        self.report = report

    def send(self, topic, partition, value):
        def delivered(err, msg):
            if err is None:
                self.report(msg.topic(), msg.partition())
        self.producer.produce(topic, value=value, partition=partition, on_delivery=delivered)
        self.producer.poll(0)

    def close(self):
        self.producer.flush(60)


class KafkaPythonProducer:
    """kafka-python, the Java client's design in Python: idempotent, acks=all, its defaults
    (request_timeout_ms 30 s), which are the Java client's."""

    def __init__(self, bootstrap, report):
        from kafka import KafkaProducer
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                      linger_ms=1, delivery_timeout_ms=60000)
        self.report = report

    def send(self, topic, partition, value):
        future = self.producer.send(topic, value=value, partition=partition)
        future.add_callback(lambda metadata: self.report(metadata.topic, metadata.partition))

    def close(self):
        self.producer.flush(60)
        self.producer.close(5)


PRODUCERS = {"librdkafka": LibrdkafkaProducer, "kafka-python": KafkaPythonProducer}


def make_producer(bootstrap, report):
    return PRODUCERS[CLIENT](bootstrap, report)


def run_scenario(cluster, admin, topics, fault, scenario, fault_s):
    acks = {}  # (topic, partition) -> list of ack times
    lock = threading.Lock()
    stop = threading.Event()

    def report(topic, partition):
        with lock:
            acks.setdefault((topic, partition), []).append(time.monotonic())

    producer = make_producer(cluster.bootstrap, report)

    def send():
        i = 0
        keys = [(t, p) for t in topics for p in (0, 1)]
        while not stop.is_set():
            t, p = keys[i % len(keys)]
            producer.send(t, p, b"x" * 100)
            i += 1
            time.sleep(0.002)
        producer.close()

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
    if fault == "kill":
        cluster.kill9(victim)
    elif fault == "pause":
        cluster.pause(victim)
    else:
        cluster.cut(victim)
    time.sleep(fault_s)
    if fault == "kill":
        cluster.start(victim)
    elif fault == "pause":
        cluster.resume(victim)
    else:
        cluster.heal()
    time.sleep(3)
    stop.set()
    sender.join()
    result = {"client": CLIENT, "fault": fault, "scenario": scenario, "victim": victim, "quorum_leader": quorum_leader,
              "partitions": {}}
    for key, times in sorted(acks.items()):
        before = [t for t in times if t <= killed_at]
        after = [t for t in times if t > killed_at]
        last_before = before[-1] if before else killed_at
        first_after = after[0] if after else None
        gaps = [b - a for a, b in zip(times, times[1:]) if b > killed_at - 1]
        if first_after is None:
            gaps.append(time.monotonic() - last_before)
        result["partitions"][f"{key[0]}-{key[1]}"] = {
            "led_by_victim": owners[key] == victim,
            "stall_s": round(max(gaps) if gaps else float("nan"), 3),
            "first_ack_after_fault_s": round(first_after - killed_at, 3) if first_after else None,
        }
    result["timeline"] = timeline(cluster, victim, killed_wall)
    # Until the victim is back in every ISR, so the next scenario starts whole.
    deadline = time.time() + 60
    while time.time() < deadline:
        md = admin.list_topics(timeout=10)
        if all(len(p.isrs) == 3 for t in topics for p in md.topics[t].partitions.values()):
            break
        time.sleep(0.5)
    time.sleep(2)
    return result


def table(results):
    """Stall p50/max (seconds) per fault and scenario: the victim's partitions, the others."""
    rows = {}
    for r in results:
        row = rows.setdefault((r["fault"], r["scenario"]), {"victim_led": [], "others": []})
        for p in r["partitions"].values():
            row["victim_led" if p["led_by_victim"] else "others"].append(p["stall_s"])
    summary = []
    for (fault, scenario), row in sorted(rows.items()):
        entry = {"fault": fault, "scenario": scenario}
        for side, stalls in row.items():
            if stalls:
                entry[side] = {"p50_s": round(statistics.median(stalls), 3), "max_s": round(max(stalls), 3),
                               "n": len(stalls)}
        summary.append(entry)
    return summary


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--scenarios", default="partition-leader,quorum-leader")
    parser.add_argument("--faults", default="kill,pause,partition")
    parser.add_argument("--fault-s", type=float, default=20.0, help="how long each fault lasts")
    parser.add_argument("--client", choices=sorted(PRODUCERS), default="librdkafka",
                        help="the producer: confluent-kafka (librdkafka) or kafka-python (the Java client's design)")
    parser.add_argument("--client-debug", help="librdkafka debug contexts for the producer (to stderr)")
    args = parser.parse_args()
    global CLIENT_DEBUG, CLIENT
    CLIENT_DEBUG = args.client_debug
    CLIENT = args.client
    work = tempfile.mkdtemp(prefix="sluice-failover-")
    faults = args.faults.split(",")
    cluster = Cluster(args.sluice, work, own_users="partition" in faults)
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
        results = []
        for _ in range(args.rounds):
            for fault in faults:
                for scenario in args.scenarios.split(","):
                    result = run_scenario(cluster, admin, topics, fault, scenario, args.fault_s)
                    results.append(result)
                    print(json.dumps(result), flush=True)
        print(json.dumps({"stalls": table(results)}), flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
