#!/usr/bin/env python3
"""Single-partition consume with librdkafka, and where each fetch cycle's time goes.

One node (benches/sluice_node.py), RECORDS records of 100 B in one partition written by
`rdkafka_performance -P`, then read back by `rdkafka_performance -C` (librdkafka's C
benchmark, built outside the repository; pass --rdkafka-performance):

- ROUNDS reads with the client's threads placed by the kernel from a broker whose
  threads float (`thread.affinity=false`) and ROUNDS from one with the default, network
  threads pinned one per CPU, alternated (the node restarts over the same data between them);
- with the default: ROUNDS reads with the client pinned to one CPU (`taskset -c 0`), and
  `sluice perf consume` (the SDK);
- one more unpinned read under `tcpdump` (headers only, on loopback), which splits each fetch
  cycle into: request -> first response byte (the broker's turnaround), first -> last byte
  (the transfer), and last byte -> next request (the client's own work before it asks again);
- the broker's CPU per fetch, from /proc over an unpinned read;
- with the broker's threads on CPU 1, ROUNDS reads per placement of the client's two busy
  threads (its application thread and its fetch thread `rdk:broker1`, placed 0.25 s into the
  read): which of them shares a CPU with the broker decides the rate.

usage: benches/consume_cycle.py --rdkafka-performance PATH [--sluice PATH] [--records N]
       [--rounds N]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_node import Node, say  # noqa: E402

RATE = re.compile(r"consumed in \d+ms: (\d+) msgs/s")
PACKET = re.compile(
    r"^(\d+\.\d+) IP 127\.0\.0\.1\.(\d+) > 127\.0\.0\.1\.(\d+): .*length (\d+)")


def consume(tool, bootstrap, records, pin=None):
    command = [tool, "-C", "-t", "bench", "-p", "0", "-o", "beginning", "-c", str(records),
               "-b", bootstrap]
    if pin is not None:
        command = ["taskset", "-c", str(pin)] + command
    out = subprocess.run(command, capture_output=True, text=True, timeout=600).stdout
    rates = RATE.findall(out)
    if not rates:
        raise SystemExit(f"no rate in rdkafka_performance output:\n{out}")
    return int(rates[-1])


def consume_placed(tool, bootstrap, records, app_cpu, fetch_cpu):
    """One read with the client's application thread on `app_cpu` and its fetch thread on
    `fetch_cpu` (set once both threads exist)."""
    command = [tool, "-C", "-t", "bench", "-p", "0", "-o", "beginning", "-c", str(records),
               "-b", bootstrap]
    client = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(0.25)
    for task in os.listdir(f"/proc/{client.pid}/task"):
        try:
            with open(f"/proc/{client.pid}/task/{task}/comm") as f:
                name = f.read().strip()
            if name == "rdkafka_perform":
                os.sched_setaffinity(int(task), {app_cpu})
            elif name == "rdk:broker1":
                os.sched_setaffinity(int(task), {fetch_cpu})
        except OSError:
            pass
    out, _ = client.communicate(timeout=600)
    rates = RATE.findall(out)
    if not rates:
        raise SystemExit(f"no rate in rdkafka_performance output:\n{out}")
    return int(rates[-1])


def pin_process(pid, cpus):
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except OSError:
            pass


def restart(node, overrides):
    """Restarts the node with `overrides`; returns once it serves the partition again."""
    node.stop()
    node.overrides = overrides
    node.start()
    node.wait_listening()
    time.sleep(2)


def cpu_ticks(pid):
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


def cycles(pcap, kafka_port):
    """Per fetch of more than 100 kB: (turnaround, transfer, client) in microseconds."""
    text = subprocess.run(["tcpdump", "-r", pcap, "-tt", "-n"], capture_output=True,
                          text=True).stdout
    packets = []
    sent_by_client = {}
    for line in text.splitlines():
        m = PACKET.match(line)
        if m:
            t, src, dst, length = float(m[1]), int(m[2]), int(m[3]), int(m[4])
            packets.append((t, src, dst, length))
            if src == kafka_port:
                sent_by_client[dst] = sent_by_client.get(dst, 0) + length
    client = max(sent_by_client, key=sent_by_client.get)
    fetches, current = [], None
    for t, src, dst, length in packets:
        if length == 0:
            continue
        if src == client:
            if current:
                fetches.append(current)
            current = [t, None, None, 0]
        elif dst == client and current:
            current[1] = current[1] or t
            current[2] = t
            current[3] += length
    result = []
    for fetch, following in zip(fetches, fetches[1:]):
        if fetch[3] > 100_000:
            result.append(((fetch[1] - fetch[0]) * 1e6, (fetch[2] - fetch[1]) * 1e6,
                           (following[0] - fetch[2]) * 1e6))
    return result


def summary(values):
    values = sorted(values)
    return (f"median {values[len(values) // 2]:.0f}  p90 {values[9 * len(values) // 10]:.0f}  "
            f"mean {statistics.mean(values):.0f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default="target/release/sluice")
    parser.add_argument("--rdkafka-performance", required=True)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not shutil.which("tcpdump"):
        raise SystemExit("tcpdump is needed: apt-get install -y tcpdump")
    work = tempfile.mkdtemp(prefix="sluice-consume-")
    node = Node(os.path.abspath(args.sluice), work)
    node.start()
    node.wait_listening()
    try:
        say(f"writing {args.records} records of 100 B")
        subprocess.run([args.rdkafka_performance, "-P", "-t", "bench", "-s", "100", "-c",
                        str(args.records), "-b", node.bootstrap, "-X", "linger.ms=5"],
                       capture_output=True, check=True, timeout=600)
        say("reading: threads floating and network threads pinned (the default), alternated")
        floating, default = [], []
        for _ in range(args.rounds):
            restart(node, ["thread.affinity=false"])
            floating.append(consume(args.rdkafka_performance, node.bootstrap, args.records))
            restart(node, [])
            default.append(consume(args.rdkafka_performance, node.bootstrap, args.records))
        say("reading: client on one CPU; the SDK")
        pinned = [consume(args.rdkafka_performance, node.bootstrap, args.records, 0)
                  for _ in range(args.rounds)]
        sdk = subprocess.run(node.perf("consume", "--topic", "bench", "--messages",
                                       str(args.records), "--output", "json"),
                             capture_output=True, text=True, timeout=600).stdout.strip()

        before = cpu_ticks(node.process.pid)
        started = time.time()
        pcap = os.path.join(work, "fetches.pcap")
        dump = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "80", "-B", "65536", "-w", pcap,
                                 f"tcp port {node.kafka}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        traced = consume(args.rdkafka_performance, node.bootstrap, args.records)
        time.sleep(0.5)
        dump.terminate()
        dump.wait()
        broker_cpu_s = (cpu_ticks(node.process.pid) - before) / os.sysconf("SC_CLK_TCK")
        elapsed = time.time() - started
        split = cycles(pcap, node.kafka)

        print(f"librdkafka, threads floating (thread.affinity=false) msgs/s: "
              f"{', '.join(f'{r:,}' for r in floating)}")
        print(f"librdkafka, network threads pinned (the default) msgs/s: "
              f"{', '.join(f'{r:,}' for r in default)}")
        print(f"  medians: {statistics.median(default):,.0f} pinned, {statistics.median(floating):,.0f} "
              f"floating: {statistics.median(default) / statistics.median(floating):.2f}x")
        print(f"librdkafka on one CPU (taskset), default broker msgs/s: "
              f"{', '.join(f'{r:,}' for r in pinned)}")
        print(f"sluice perf consume (SDK): {sdk}")
        print(f"traced read: {traced:,} msgs/s, {len(split)} fetches of > 100 kB")
        print(f"  request -> first byte (broker turnaround) us: {summary([c[0] for c in split])}")
        print(f"  first -> last byte (transfer) us:            {summary([c[1] for c in split])}")
        print(f"  last byte -> next request (client) us:       {summary([c[2] for c in split])}")
        whole = [sum(c) for c in split]
        broker_share = statistics.mean(c[0] + c[1] for c in split) / statistics.mean(whole)
        print(f"  cycle us: {summary(whole)}; broker turnaround + transfer: "
              f"{100 * broker_share:.0f}% of it")
        print(f"broker CPU: {broker_cpu_s:.2f} s over {elapsed:.1f} s "
              f"({1e6 * broker_cpu_s / max(len(split), 1):.0f} us per fetch)")

        if os.cpu_count() >= 2:
            say("reading with the broker on CPU 1 and the client's threads placed by hand")
            pin_process(node.process.pid, {1})
            for app_cpu, fetch_cpu in ((0, 1), (1, 0), (0, 0), (1, 1)):
                rates = [consume_placed(args.rdkafka_performance, node.bootstrap, args.records,
                                        app_cpu, fetch_cpu) for _ in range(args.rounds)]
                where = lambda cpu: f"CPU {cpu}" + (" (with the broker)" if cpu == 1 else "")
                print(f"application thread on {where(app_cpu)}, fetch thread on "
                      f"{where(fetch_cpu)} msgs/s: {', '.join(f'{r:,}' for r in rates)}")
            pin_process(node.process.pid, set(range(os.cpu_count())))
    finally:
        node.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
