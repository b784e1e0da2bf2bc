#!/usr/bin/env python3
"""Many partitions on one node: what each thousand costs, up to 50,000 (RF=1).

Starts one node with the shipped defaults (only ports and log.dirs overridden) under the
process's own open files limit, and grows it to each target (default 1,000 / 10,000 /
50,000 partitions) with topics of 10 partitions created 1,000 partitions per CreateTopics
request (confluent-kafka's AdminClient). At each target it reports:

- create_s: how long the creates since the previous target took, and partitions/s;
- rss_mib, fds, maps: the broker's resident memory, open descriptors and memory mappings
  (from /proc: the limits that matter are RLIMIT_NOFILE and vm.max_map_count);
- metadata_ms: a Metadata request for every topic (median of 3);
- restart_clean_s and restart_kill9_s: from SIGTERM / kill -9 to a restarted broker answering
  Metadata with a leader for every partition.

One JSON object per target on stdout, progress on stderr.

usage: benches/many_partitions.py [--sluice PATH] [--targets 1000,10000,50000]
"""
import argparse
import json
import os
import resource
import shutil
import signal
import tempfile
import time

from confluent_kafka.admin import AdminClient, NewTopic

from sluice_node import Node, say

PARTITIONS_PER_TOPIC = 10
PARTITIONS_PER_REQUEST = 1000


def admin(node):
    return AdminClient({"bootstrap.servers": node.bootstrap, "socket.timeout.ms": 120000})


def served(node, partitions):
    """Seconds until Metadata answers with a leader for `partitions` partitions."""
    started = time.monotonic()
    while time.monotonic() - started < 600:
        try:
            md = admin(node).list_topics(timeout=60)
            led = sum(1 for t in md.topics.values() for p in t.partitions.values() if p.leader >= 0)
            if led >= partitions:
                return round(time.monotonic() - started, 2)
        except Exception:  # not listening yet
            pass
        time.sleep(0.2)
    raise SystemExit(f"not serving {partitions} partitions after 600 s")


def metadata_ms(node):
    client = admin(node)
    times = []
    for _ in range(3):
        started = time.monotonic()
        client.list_topics(timeout=120)
        times.append((time.monotonic() - started) * 1000)
    return round(sorted(times)[1], 1)


def create(node, first_topic, topics):
    client = admin(node)
    per_request = PARTITIONS_PER_REQUEST // PARTITIONS_PER_TOPIC
    for start in range(first_topic, first_topic + topics, per_request):
        names = [f"t{n}" for n in range(start, min(start + per_request, first_topic + topics))]
        futures = client.create_topics([NewTopic(n, PARTITIONS_PER_TOPIC, 1) for n in names],
                                       operation_timeout=120, request_timeout=300)
        for name, future in futures.items():
            future.result(timeout=300)
        say(f"created {(start + len(names)) * PARTITIONS_PER_TOPIC} partitions")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--targets", default="1000,10000,50000")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with open("/proc/sys/vm/max_map_count") as f:
        max_map_count = int(f.read())
    say(f"open files limit soft={soft} hard={hard}; vm.max_map_count={max_map_count}")
    work = tempfile.mkdtemp(prefix="sluice-many-")
    node = Node(args.sluice, work)
    node.start()
    served(node, 0)
    topics = 0
    try:
        for target in (int(t) for t in args.targets.split(",")):
            wanted = target // PARTITIONS_PER_TOPIC
            started = time.monotonic()
            create(node, topics, wanted - topics)
            created = (wanted - topics) * PARTITIONS_PER_TOPIC
            topics = wanted
            served(node, target)
            create_s = time.monotonic() - started
            row = {
                "partitions": target,
                "create_s": round(create_s, 1),
                "create_partitions_per_s": round(created / create_s),
                "rss_mib": node.rss_mib(),
                "fds": node.fds(),
                "maps": node.maps(),
                "metadata_ms": metadata_ms(node),
                "fd_limit": soft,
                "max_map_count": max_map_count,
            }
            node.process.send_signal(signal.SIGTERM)
            node.process.wait(300)
            node.start()
            row["restart_clean_s"] = served(node, target)
            row["rss_mib_after_restart"] = node.rss_mib()
            row["fds_after_restart"] = node.fds()
            node.process.send_signal(signal.SIGKILL)
            node.process.wait()
            node.start()
            row["restart_kill9_s"] = served(node, target)
            print(json.dumps(row), flush=True)
    finally:
        node.stop()
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
