#!/usr/bin/env python3
"""What TLS, SASL and the authorizer cost one Sluice broker, as ratios measured in one run.

Makes a CA and a broker certificate with openssl (EC P-256, SAN IP:127.0.0.1 and localhost,
as tests/support/certs.rs does), starts ONE broker (target/release/sluice) with three Kafka
listeners at once, PLAINTEXT, SSL (server-authenticated TLS) and SASL_SSL (a SCRAM-SHA-512
user made with `sluice users create`, which kcat and the SDK log in as), and
measures the raw limits in the same run: disk write and TCP loopback copy (`sluice perf
raw`) and, on one core, the cipher the TLS listeners negotiate (`openssl speed`: the least
CPU a TLS byte costs, once per direction per side).

Then for 100 B and 1 KiB records, each phase on the three listeners in turn, --rounds times
(every other round in reverse order), the same data per listener:
- librdkafka (kcat, C): produce --records-100 or --records-1k records from a file (acks=1,
  linger.ms=5), then consume them back;
- our SDK: `sluice perf consume-batches` of those same records (--consume-passes times), and
  `sluice perf produce-batches` (prebuilt batches of 512 records, 4 connections, a partition
  each, acks=1) for --seconds (time-bound: its rate, not its amount, is compared).
For every phase, over its rounds: records/s, MB/s (record values: records x size), the
rounds' spread (fastest / slowest), the ratio to PLAINTEXT and
to the raw limit (produce: disk write; consume: loopback copy), the broker's CPU seconds per MB
(utime + stime from /proc/<pid>/stat over the phase) and its ratio to PLAINTEXT, the client's
CPU per MB, and `TLS extra / cipher`: the broker CPU per MB TLS adds over PLAINTEXT divided by
the cipher's CPU per MB (1.0 would be the cipher alone; above it, copies and system calls).

Authorization: `sluice perf authorizer --acls 10000` (the decision alone, against a hash-map
lookup), then end to end on the same broker, restarted: without an authorizer, with Kafka's
StandardAuthorizer and only the 2 ACLs the client needs, with 10,000 more (the shape `sluice
perf authorizer` builds: 500 principals, topics and groups, a tenth prefixed, one in fifty a
deny), then --authorizer-rounds - 1 more restarts without and with it (the ACLs stay), so
that the machine's drift shows as the spread of the runs without. One client
(User:ANONYMOUS on PLAINTEXT) sends pipelined Metadata requests naming 10 topics (10
DESCRIBE decisions each) and small produce requests (`sluice perf produce-batches`, one
100 B record per request, 4 connections each to its own partition; one WRITE decision
each): requests/s and broker CPU microseconds per request, as ratios of the medians to the
runs without the authorizer, beside what the decision alone would add.

usage: flock /tmp/heavy.lock benches/security_perf.py [--sluice PATH] [--dir DIR] [--seconds N]
       [--records-100 N] [--records-1k N] [--rounds N] [--consume-passes N]
       [--authorizer-seconds N] [--authorizer-rounds N]
"""
import argparse
import os
import random
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, NewTopic, ResourcePatternType, ResourceType)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kafka_perf import raw_disk_and_loopback, sluice_perf  # noqa: E402
from sluice_node import Node, say  # noqa: E402

LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"
PARTITIONS = 4
AUTHZ_TOPICS = [f"authz-{i}" for i in range(10)]


# --- certificates and client settings -------------------------------------------------------

def openssl(work, *args):
    subprocess.run(["openssl", *args], cwd=work, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def make_certificates(work):
    """A CA and a broker certificate it signs; returns (ca.pem, the broker's keystore: key then
    certificate in one PEM file)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl(work, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
            "-subj", "/CN=Sluice bench CA")
    with open(os.path.join(work, "broker.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    openssl(work, "req", *ec, "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=localhost")
    openssl(work, "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "broker.pem", "-days", "30", "-extfile", "broker.ext")
    keystore = os.path.join(work, "broker-keystore.pem")
    with open(keystore, "w") as out:
        for name in ("broker.key", "broker.pem"):
            with open(os.path.join(work, name)) as f:
                out.write(f.read())
    return os.path.join(work, "ca.pem"), keystore


def broker_settings(keystore):
    """TLS from the keystore on SSL and SASL_SSL; SASL_SSL logs in with SCRAM-SHA-512 (the
    user made with `sluice users create`)."""
    return [f"ssl.keystore.location={keystore}", "ssl.keystore.type=PEM",
            # Each listener's topics are deleted once measured: their gigabytes go at once,
            # not 60 s later (Kafka's default), or the disk fills.
            "log.segment.delete.delay.ms=0", "log.retention.check.interval.ms=250",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512"]


AUTHORIZER = ["authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              f"super.users=User:{USER}"]


class Clients:
    """Each listener's client settings, in the three forms the clients take."""

    def __init__(self, work, ca):
        self.ca = ca
        self.command_configs = {}
        for listener in LISTENERS:
            path = os.path.join(work, f"{listener.lower()}.properties")
            with open(path, "w") as f:
                f.write("".join(f"{k}={v}\n" for k, v in self.java(listener).items()))
            self.command_configs[listener] = path

    def java(self, listener):
        """Kafka's client keys (`--command-config` of `sluice perf`)."""
        keys = {"security.protocol": listener}
        if listener != "PLAINTEXT":
            keys["ssl.truststore.location"] = self.ca
        if listener == "SASL_SSL":
            keys["sasl.mechanism"] = "SCRAM-SHA-512"
            keys["sasl.jaas.config"] = ("org.apache.kafka.common.security.scram.ScramLoginModule "
                                        f'required username="{USER}" password="{PASSWORD}";')
        return keys

    def librdkafka(self, listener):
        """librdkafka's keys (kcat's -X, confluent-kafka's dict)."""
        keys = {"security.protocol": listener}
        if listener != "PLAINTEXT":
            keys["ssl.ca.location"] = self.ca
        if listener == "SASL_SSL":
            keys.update({"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER,
                         "sasl.password": PASSWORD})
        return keys

    def kcat_args(self, listener):
        return [arg for k, v in self.librdkafka(listener).items() for arg in ("-X", f"{k}={v}")]


# --- raw limits ------------------------------------------------------------------------------

def negotiated_cipher(port):
    """The TLS version and cipher suite an OpenSSL client gets from the listener."""
    out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername",
                          "localhost"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, timeout=30).stdout
    found = re.search(r"New, (\S+), Cipher is (\S+)", out)
    return (found.group(1), found.group(2)) if found else ("?", "?")


def cipher_mb_s(suite):
    """One core's AEAD throughput on 16 KiB records (TLS's largest) for `suite`."""
    evp = {"TLS_AES_128_GCM_SHA256": "aes-128-gcm", "TLS_CHACHA20_POLY1305_SHA256": "chacha20-poly1305"}
    name = evp.get(suite, "aes-256-gcm")
    out = subprocess.run(["openssl", "speed", "-evp", name, "-seconds", "2", "-bytes", "16384"],
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    # The last line: the cipher's name, then thousands of bytes per second.
    return name, float(out.strip().splitlines()[-1].split()[-1].rstrip("k")) / 1000


# --- phases ----------------------------------------------------------------------------------

def children_cpu_s():
    times = os.times()
    return times.children_user + times.children_system


def measured(node, run):
    """Runs `run()` (which returns its figures) and adds the broker's and the client
    processes' CPU seconds spent meanwhile."""
    broker, client = node.cpu_seconds(), children_cpu_s()
    figures = run()
    figures["broker_cpu_s"] = node.cpu_seconds() - broker
    figures["client_cpu_s"] = children_cpu_s() - client
    return figures


# produce-batches' topics are never read: their old segments go while it writes.
BOUNDED = {"retention.bytes": str(128 << 20), "segment.bytes": str(32 << 20)}


def create_topic(admin, topic, partitions, config=None):
    """Creates the topic and waits until each partition has a leader in metadata: a produce
    right after creation may otherwise meet a partition its leader does not serve yet."""
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})
    admin.create_topics([new])[topic].result()
    deadline = time.time() + 30
    while time.time() < deadline:
        md = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions \
                and all(p.leader >= 0 and p.error is None for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{topic}: no leader for every partition after 30 s")


def delete_topics(admin, topics):
    for future in admin.delete_topics(topics).values():
        future.result()


def kcat_file(record_bytes, count):
    """`count` lines of `record_bytes` bytes (each line one record), in memory (/dev/shm)
    where there is one: off the disk the broker writes to, which is shared."""
    memory = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    handle, path = tempfile.mkstemp(prefix=f"security-perf-{record_bytes}-", suffix=".txt", dir=memory)
    os.close(handle)
    line = b"x" * record_bytes + b"\n"
    with open(path, "wb") as f:
        for _ in range(count // 1000):
            f.write(line * 1000)
    return path


def kcat_produce(node, clients, listener, topic, path, count):
    start = time.perf_counter()
    subprocess.run(["kcat", "-b", node.listener(listener), "-P", "-t", topic, "-l",
                    "-X", "acks=1", "-X", "linger.ms=5", "-X", "batch.size=1000000",
                    *clients.kcat_args(listener), path], check=True)
    return {"records": count, "seconds": time.perf_counter() - start}


def kcat_consume(node, clients, listener, topic):
    start = time.perf_counter()
    # One byte of output per record: the count without the values.
    out = subprocess.run(["kcat", "-b", node.listener(listener), "-C", "-t", topic, "-o", "beginning",
                          "-e", "-q", "-f", ".", "-X", "fetch.max.bytes=52428800",
                          # The end (-e) is a fetch that finds nothing: not 500 ms of waiting.
                          "-X", "fetch.wait.max.ms=10",
                          *clients.kcat_args(listener)], check=True, stdout=subprocess.PIPE).stdout
    return {"records": len(out), "seconds": time.perf_counter() - start}


def sdk_produce(node, clients, listener, topic, record_bytes, seconds, partitions=PARTITIONS,
                batch_records=512):
    """`sluice perf produce-batches`; a run that fails is retried once and said."""
    args = ["--record-bytes", str(record_bytes), "--acks", "1", "--seconds", str(seconds),
            "--batch-records", str(batch_records), "--connections", "4",
            "--command-config", clients.command_configs[listener]]
    for attempt in (1, 2):
        try:
            start = time.perf_counter()
            out = sluice_perf(node.binary, "produce-batches", node.listener(listener), topic,
                              partitions, args)
            return {"records": out["produced_records"], "seconds": time.perf_counter() - start,
                    "rate": out["produce_records_s"]}
        except subprocess.CalledProcessError as failure:
            say(f"produce-batches on {listener} ({topic}) failed (attempt {attempt}): exit "
                f"{failure.returncode}; broker log tail:")
            with open(os.path.join(node.work, "node.log")) as f:
                say("".join(f.readlines()[-15:]))
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def sdk_consume(node, clients, listener, topic, passes):
    """`sluice perf consume-batches` of the whole topic, `passes` times (one pass of the SDK
    is too short for CPU time counted in 10 ms ticks)."""
    records, seconds = 0, 0.0
    for _ in range(passes):
        out = sluice_perf(node.binary, "consume-batches", node.listener(listener), topic, PARTITIONS,
                          ["--command-config", clients.command_configs[listener]])
        records += out["consumed_records"]
        seconds += out["consumed_records"] / out["consume_records_s"]
    return {"records": records, "seconds": seconds, "rate": records / seconds}


def security_phases(node, clients, admin, args, disk, loopback, cipher_s_per_mb):
    """Each listener in turn, --rounds times (in reverse order every other round), so that
    the machine's drift spreads over all three instead of landing on one. One topic at a
    time, deleted once measured, and produce-batches' topics under retention: the disk is
    shared."""
    phases = {}

    def phase(record_bytes, client, direction, listener, run, expected=None):
        say(f"{record_bytes} B: {client} {direction} on {listener}")
        figures = measured(node, run)
        if expected is not None and figures["records"] != expected:
            raise RuntimeError(f"{record_bytes} B on {listener}: {figures['records']} of {expected} "
                               "records read back")
        if "rate" in figures:
            # The tool's own timing, which leaves out its start.
            figures["seconds"] = figures["records"] / figures["rate"]
        say(f"  {figures['records'] / figures['seconds']:,.0f} records/s, broker {figures['broker_cpu_s']:.2f} s "
            f"and client {figures['client_cpu_s']:.2f} s of CPU in {figures['seconds']:.2f} s")
        phases.setdefault((record_bytes, client, direction, listener), []).append(figures)

    for record_bytes, count in ((100, args.records_100), (1024, args.records_1k)):
        path = kcat_file(record_bytes, count)
        try:
            for round_ in range(args.rounds):
                order = LISTENERS if round_ % 2 == 0 else LISTENERS[::-1]
                for listener in order:
                    topic = f"rdk-{record_bytes}-{listener}-{round_}"
                    create_topic(admin, topic, PARTITIONS)
                    phase(record_bytes, "kcat", "produce", listener,
                          lambda: kcat_produce(node, clients, listener, topic, path, count))
                    phase(record_bytes, "kcat", "consume", listener,
                          lambda: kcat_consume(node, clients, listener, topic), count)
                    phase(record_bytes, "sdk", "consume", listener,
                          lambda: sdk_consume(node, clients, listener, topic, args.consume_passes),
                          count * args.consume_passes)
                    delete_topics(admin, [topic])
                for listener in order:
                    topic = f"sdk-{record_bytes}-{listener}-{round_}"
                    create_topic(admin, topic, PARTITIONS, BOUNDED)
                    phase(record_bytes, "sdk", "produce", listener,
                          lambda: sdk_produce(node, clients, listener, topic, record_bytes, args.seconds))
                    delete_topics(admin, [topic])
        finally:
            os.remove(path)
    rows = []
    for (record_bytes, client, direction, listener), runs in phases.items():
        records = sum(r["records"] for r in runs)
        mb = records * record_bytes / 1e6
        rates = [r["records"] / r["seconds"] for r in runs]
        rows.append({"size": record_bytes, "listener": listener, "client": client,
                     "direction": direction, "records_s": records / sum(r["seconds"] for r in runs),
                     "spread": max(rates) / min(rates),
                     "broker_s_mb": sum(r["broker_cpu_s"] for r in runs) / mb,
                     "client_s_mb": sum(r["client_cpu_s"] for r in runs) / mb,
                     "raw": disk if direction == "produce" else loopback})
        rows[-1]["mb_s"] = rows[-1]["records_s"] * record_bytes / 1e6
    print_security_table(rows, cipher_s_per_mb, args.rounds)
    return rows


def print_security_table(rows, cipher_s_per_mb, rounds):
    base = {(r["size"], r["client"], r["direction"]): r for r in rows if r["listener"] == "PLAINTEXT"}
    print()
    print(f"{rounds} rounds per row: records/s = all records / all seconds; spread = the rounds' fastest/slowest;"
          " CPU = all CPU seconds / all MB of record values")
    print("x raw: produce / raw disk write, consume / loopback copy")
    print(f"TLS extra / cipher: (broker CPU/MB - PLAINTEXT's) / the cipher's CPU/MB on one core "
          f"({cipher_s_per_mb * 1e3:.3f} ms/MB)")
    print(f"{'size':>5} {'client':<6} {'dir':<8} {'listener':<10} {'records/s':>11} {'MB/s':>8} {'spread':>6} "
          f"{'x PLAIN':>7} {'x raw':>6} {'broker s/MB':>11} {'x PLAIN':>7} {'TLS extra/cipher':>16} "
          f"{'client s/MB':>11}")
    for r in sorted(rows, key=lambda r: (r["size"], r["client"] != "kcat", r["direction"] != "produce",
                                         LISTENERS.index(r["listener"]))):
        b = base[(r["size"], r["client"], r["direction"])]
        extra = ""
        if r["listener"] != "PLAINTEXT":
            extra = f"{(r['broker_s_mb'] - b['broker_s_mb']) / cipher_s_per_mb:.1f}"
        # CPU time comes in clock ticks (10 ms): a phase too short to show any has no ratio.
        cpu_ratio = f"{r['broker_s_mb'] / b['broker_s_mb']:>6.2f}x" if b["broker_s_mb"] > 0 else f"{'-':>7}"
        print(f"{r['size']:>5} {r['client']:<6} {r['direction']:<8} {r['listener']:<10} {r['records_s']:>11,.0f} "
              f"{r['mb_s']:>8.1f} {r['spread']:>5.2f}x {r['mb_s'] / b['mb_s']:>6.2f}x {r['mb_s'] / r['raw']:>5.2f}x "
              f"{r['broker_s_mb'] * 1e3:>8.3f} ms {cpu_ratio} {extra:>16} "
              f"{r['client_s_mb'] * 1e3:>8.3f} ms", flush=True)


# --- authorization ---------------------------------------------------------------------------

def metadata_request(topics, correlation_id=0):
    """A Metadata v4 request frame naming `topics`, auto-creation off."""
    client_id = b"security-perf"
    body = struct.pack(">i", len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    body += b"\x00"
    message = struct.pack(">hhih", 3, 4, correlation_id, len(client_id)) + client_id + body
    return struct.pack(">i", len(message)) + message


def metadata_requests(port, topics, seconds, window=64):
    """Metadata requests from one connection, `window` in flight: requests/s."""
    block = metadata_request(topics) * window
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer, answered = bytearray(), 0
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            sock.sendall(block)
            pending = window
            while pending:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    raise RuntimeError("the broker closed the Metadata connection")
                buffer += chunk
                offset = 0
                while pending and len(buffer) - offset >= 4:
                    size = int.from_bytes(buffer[offset:offset + 4], "big")
                    if len(buffer) - offset < 4 + size:
                        break
                    offset += 4 + size
                    pending -= 1
                del buffer[:offset]
            answered += window
        return {"requests": answered, "seconds": time.perf_counter() - start}


def check_described(node):
    """Every benchmark topic is visible to User:ANONYMOUS on PLAINTEXT, without error."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 2})
    for topic in AUTHZ_TOPICS:
        md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            raise RuntimeError(f"{topic}: {md.error if md else 'missing'} for User:ANONYMOUS")


def request_figures(node, clients, seconds):
    """Metadata requests/s and small produce requests/s from one client, with the broker's
    CPU per request (after half a second of Metadata requests not counted: a restarted
    broker's first requests are slower)."""
    check_described(node)
    metadata_requests(node.kafka, AUTHZ_TOPICS, 0.5)
    metadata = measured(node, lambda: metadata_requests(node.kafka, AUTHZ_TOPICS, seconds))
    produce = measured(node, lambda: sdk_produce(node, clients, "PLAINTEXT", AUTHZ_TOPICS[0], 100,
                                                 seconds, batch_records=1))
    return {
        "metadata_s": metadata["requests"] / metadata["seconds"],
        "metadata_cpu_us": metadata["broker_cpu_s"] / metadata["requests"] * 1e6,
        "produce_s": produce["rate"],
        "produce_cpu_us": produce["broker_cpu_s"] / produce["records"] * 1e6,
    }


def many_acls(count):
    """`count` ACLs shaped as `sluice perf authorizer` shapes them: 500 principals, 5,000
    topics and groups, a tenth prefixed, one in fifty a deny."""
    rng = random.Random(0x5eed)
    bindings, seen = [], set()
    i = 0
    while len(bindings) < count:
        i += 1
        principal = f"User:app-{rng.randrange(500)}"
        if i % 4 == 3:
            kind, name, operation = ResourceType.GROUP, f"group-{rng.randrange(5000)}", AclOperation.READ
        else:
            kind, name = ResourceType.TOPIC, f"topic-{rng.randrange(5000)}"
            operation = rng.choice([AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE])
        pattern = ResourcePatternType.LITERAL
        if i % 10 == 0:
            name, pattern = name[:max(len(name) - 2, 7)], ResourcePatternType.PREFIXED
        permission = AclPermissionType.DENY if i % 50 == 0 else AclPermissionType.ALLOW
        binding = AclBinding(kind, name, pattern, principal, "*", operation, permission)
        if binding not in seen:
            seen.add(binding)
            bindings.append(binding)
    return bindings


def create_acls(admin, bindings, batch=1000):
    for i in range(0, len(bindings), batch):
        for future in admin.create_acls(bindings[i:i + batch]).values():
            future.result()


def acl_count(admin):
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    return len(admin.describe_acls(everything).result())


def authorization(node, clients, admin_config, args):
    print()
    out = subprocess.run([node.binary, "perf", "authorizer", "--acls", "10000"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    decision = {k: float(v) for k, v in (line.split() for line in out.strip().splitlines())}
    print(f"sluice perf authorizer --acls 10000: decision {decision['decision_ns']:.0f} ns "
          f"({decision['decision_to_raw_lookup_ratio']:.1f}x a hash-map lookup, "
          f"{decision['raw_hash_lookup_ns']:.0f} ns); 10-topic Produce "
          f"{decision['produce_10_topics_authorization_ns'] / 1e3:.2f} us, Fetch + group "
          f"{decision['fetch_with_group_authorization_ns'] / 1e3:.2f} us, a topic's authorized "
          f"operations {decision['topic_authorized_operations_ns'] / 1e3:.2f} us; index rebuild "
          f"{decision['acl_index_rebuild_ms']:.1f} ms", flush=True)

    without = [o for o in node.overrides if o not in AUTHORIZER]
    runs = []
    seconds = args.authorizer_seconds
    say("authorization: no authorizer")
    runs.append(("none", request_figures(node, clients, seconds)))
    restart(node, without + AUTHORIZER)
    admin = AdminClient(admin_config)
    needed = [AclBinding(ResourceType.TOPIC, "authz-", ResourcePatternType.PREFIXED, "User:ANONYMOUS",
                         "*", operation, AclPermissionType.ALLOW)
              for operation in (AclOperation.DESCRIBE, AclOperation.WRITE)]
    create_acls(admin, needed)
    few = acl_count(admin)
    say(f"authorization: StandardAuthorizer, {few} ACLs")
    runs.append(("few", request_figures(node, clients, seconds)))
    started = time.perf_counter()
    create_acls(admin, many_acls(10_000))
    many = acl_count(admin)
    say(f"10,000 ACLs created in {time.perf_counter() - started:.1f} s; {many} listed")
    runs.append(("many", request_figures(node, clients, seconds)))
    # The ACLs stay in the metadata log: restarts alternate without and with the authorizer,
    # so that drift of this machine shows as spread rather than as a ratio.
    for _ in range(args.authorizer_rounds - 1):
        for name, overrides in (("none", without), ("many", without + AUTHORIZER)):
            restart(node, overrides)
            say(f"authorization: {name}")
            runs.append((name, request_figures(node, clients, seconds)))

    labels = {"none": "no authorizer", "few": f"StandardAuthorizer, {few} ACLs",
              "many": f"StandardAuthorizer, {many} ACLs"}
    keys = ("metadata_s", "metadata_cpu_us", "produce_s", "produce_cpu_us")
    print("end to end, one client as User:ANONYMOUS on PLAINTEXT: Metadata naming 10 topics (64 in flight),"
          " produce of one 100 B record per request (4 connections, a partition each, acks=1);"
          f" {seconds:g} s per figure, runs in this order")
    print(f"{'broker':<34} {'Metadata/s':>10} {'CPU us/req':>10} | {'produce/s':>10} {'CPU us/req':>10}")
    for name, r in runs:
        print(f"{labels[name]:<34} {r['metadata_s']:>10,.0f} {r['metadata_cpu_us']:>10.1f} | "
              f"{r['produce_s']:>10,.0f} {r['produce_cpu_us']:>10.1f}", flush=True)
    median = {name: {k: statistics.median(r[k] for n, r in runs if n == name) for k in keys}
              for name in labels}
    spread = {k: (max(r[k] for n, r in runs if n == "none") / min(r[k] for n, r in runs if n == "none"))
              for k in keys}
    print("ratios of medians to no authorizer's; spread = the no-authorizer runs' max/min")
    for name in ("few", "many"):
        m = median[name]
        print(f"{labels[name]:<34} " + ", ".join(
            f"{k} {m[k] / median['none'][k]:.2f}x" for k in keys))
    print(f"{'spread without authorizer':<34} " + ", ".join(f"{k} {spread[k]:.2f}x" for k in keys))
    expected = decision["decision_ns"] * len(AUTHZ_TOPICS) / 1e3
    print(f"expected from the decision alone: +{expected:.2f} us per Metadata request "
          f"({expected / median['none']['metadata_cpu_us'] * 100:.0f}% of its CPU), "
          f"+{decision['decision_ns'] / 1e3:.2f} us per produce request "
          f"({decision['decision_ns'] / 1e3 / median['none']['produce_cpu_us'] * 100:.1f}%)", flush=True)


def restart(node, overrides):
    node.stop()
    node.overrides = list(overrides)
    node.start()
    node.wait_ready()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--dir", default=None, help="work directory (on the disk to measure)")
    parser.add_argument("--seconds", type=float, default=2.0, help="time of each produce-batches run")
    parser.add_argument("--records-100", type=int, default=3_000_000, help="100 B records per listener")
    parser.add_argument("--records-1k", type=int, default=600_000, help="1 KiB records per listener")
    parser.add_argument("--consume-passes", type=int, default=3, help="SDK reads of each topic")
    parser.add_argument("--rounds", type=int, default=2, help="runs of every phase on each listener")
    parser.add_argument("--authorizer-seconds", type=float, default=3.0,
                        help="time of each request-rate figure")
    parser.add_argument("--authorizer-rounds", type=int, default=4,
                        help="runs without and with the authorizer and 10,000 ACLs, alternating")
    args = parser.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="sluice-security-perf-")
    os.makedirs(work, exist_ok=True)
    shutil.rmtree(os.path.join(work, "data"), ignore_errors=True)
    ca, keystore = make_certificates(work)
    clients = Clients(work, ca)
    node = Node(os.path.abspath(args.sluice), work, broker_settings(keystore), listeners=LISTENERS[1:])
    try:
        disk, loopback = raw_disk_and_loopback(node.binary, work)
        shutil.rmtree(os.path.join(work, "raw"), ignore_errors=True)
        node.start()
        node.wait_ready()
        subprocess.run([node.binary, "users", "create", USER, "--password", PASSWORD,
                        "--bootstrap-server", node.bootstrap], check=True, stdout=subprocess.DEVNULL)
        version, suite = negotiated_cipher(node.ports["SSL"])
        cipher, cipher_mb = cipher_mb_s(suite)
        print(f"raw disk write (pwrite + fdatasync): {disk:8.1f} MB/s")
        print(f"loopback copy (TCP):                 {loopback:8.1f} MB/s")
        print(f"TLS listeners negotiate {version} {suite}; openssl speed -evp {cipher}, 16 KiB, one core: "
              f"{cipher_mb:8.1f} MB/s")
        print(f"cores: {os.cpu_count()}; one broker, three listeners; kcat {args.records_100:,} x 100 B and "
              f"{args.records_1k:,} x 1 KiB records per listener; produce-batches {args.seconds:g} s each")
        admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 2})
        security_phases(node, clients, admin, args, disk, loopback, 1 / cipher_mb)
        # The produce topic has a partition per connection, as the SDK's produce phases.
        for topic in AUTHZ_TOPICS:
            create_topic(admin, topic, PARTITIONS if topic == AUTHZ_TOPICS[0] else 1)
        # Quiet: the admin stays connected across the restarts, which librdkafka would log.
        admin_config = {"bootstrap.servers": node.listener("SASL_SSL"), "log_level": 2,
                        **clients.librdkafka("SASL_SSL")}
        authorization(node, clients, admin_config, args)
    finally:
        node.stop()
        # Gigabytes of records: never leave them behind.
        shutil.rmtree(os.path.join(work, "data"), ignore_errors=True)
        shutil.rmtree(os.path.join(work, "raw"), ignore_errors=True)
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
