#!/usr/bin/env python3
"""The group coordinator's cost with many groups, and its load time, on one node.

The clients speak the Kafka protocol from Python (asyncio, frames built by hand), so that a
thousand members fit beside the broker on two cores.

1. scale: a broker with the shipped defaults (50 __consumer_offsets partitions). 10,000 idle
   classic groups, each made by one OffsetCommit with generation -1 and no member (a group
   with one offset), then 1,000 active members in 100 groups of ten, each group's members
   sharing 100 partitions, each member committing its ten every 5 s:
   - classic: JoinGroup/SyncGroup, each member on a connection of its own (a JoinGroup waits
     for the rest of its group, and a connection answers in order), then handed to a few
     pipelined connections; Heartbeat every 3 s.
   - consumer (KIP-848, another broker): ConsumerGroupHeartbeat on the pipelined
     connections, every group.consumer.heartbeat.interval.ms (5 s); OffsetCommit v9 at the
     member epoch.
   Over the measuring window: heartbeat and commit latency p50/p99, beside the p99 of
   ApiVersions requests sent on the same connections in the same window (the raw limit: the
   transport, the event loop and the broker's dispatch); the broker's CPU (utime+stime from
   /proc/PID/stat) per request served, beside its CPU per ApiVersions in a window of
   ApiVersions alone at the same request rate (measured before the members join).
2. load: a broker with offsets.topic.num.partitions=1 takes 1,000,000 offset commit records
   (10,000 groups x 100 partitions, one OffsetCommit per group), is stopped with SIGTERM and
   started again (three times): the time from the start until a group's OffsetFetch answers without
   COORDINATOR_LOAD_IN_PROGRESS, the broker's own "loaded coordinator partition" line
   (elapsed_ms, records), beside the time `cat` takes to read the partition's log files to
   /dev/null (the raw limit; the page cache is warm for both, the log was just written).

usage: benches/coordinator_scale.py [--sluice PATH] [--seconds N] [--protocols classic,consumer]
                                   [--restarts N] [--skip-scale] [--skip-load]
Results on stdout, progress on stderr.
"""
import argparse
import asyncio
import glob
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_node import Node, say  # noqa: E402

TOPIC = "scale"
TOPIC_PARTITIONS = 100
IDLE_GROUPS = 10_000
ACTIVE_GROUPS = 100
MEMBERS_PER_GROUP = 10
HEARTBEAT_INTERVAL_S = 3.0
COMMIT_INTERVAL_S = 5.0
CONSUMER_HEARTBEAT_INTERVAL_S = 5.0  # group.consumer.heartbeat.interval.ms's default
SESSION_TIMEOUT_MS = 45_000
REBALANCE_TIMEOUT_MS = 30_000
SHARED_CONNECTIONS = 8
PROBES_PER_CONNECTION_PER_S = 10
LOAD_GROUPS = 10_000
REQUEST_TIMEOUT_S = 60

# Kafka's API keys and the (non-flexible) versions spoken here.
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = (8, 7), (9, 5), (10, 2)
JOIN_GROUP, HEARTBEAT, SYNC_GROUP = (11, 5), (12, 3), (14, 3)
API_VERSIONS, CREATE_TOPICS = (18, 0), (19, 2)
# Flexible versions (compact strings and arrays, tagged fields): KIP-848's heartbeat, and the
# OffsetCommit version Kafka requires of a KIP-848 member.
CONSUMER_GROUP_HEARTBEAT, OFFSET_COMMIT_FLEXIBLE = (68, 0), (8, 9)
FLEXIBLE = {CONSUMER_GROUP_HEARTBEAT, OFFSET_COMMIT_FLEXIBLE}

# Error codes met on the way.
NONE, LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 0, 14, 15, 16
UNKNOWN_MEMBER_ID, TOPIC_ALREADY_EXISTS, FENCED_MEMBER_EPOCH = 25, 36, 110
MEMBER_ID_REQUIRED = 79
RETRIABLE = {LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}


# ---- encoding and decoding (Kafka's primitive types, big-endian) ----

def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def string(s):
    b = s.encode()
    return i16(len(b)) + b


def nullable_string(s):
    return i16(-1) if s is None else string(s)


def byte_array(b):
    return i32(-1) if b is None else i32(len(b)) + b


def array(items):
    return i32(len(items)) + b"".join(items)


def uvarint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def compact_string(s):
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def compact_array(items):
    """Items already end with their own (empty) tagged fields where they are structs."""
    return uvarint(0) if items is None else uvarint(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, fmt):
        (v,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return v

    def i16(self):
        return self.take(">h")

    def i32(self):
        return self.take(">i")

    def i64(self):
        return self.take(">q")

    def string(self):
        n = self.i16()
        if n < 0:
            return None
        s = self.data[self.at:self.at + n].decode()
        self.at += n
        return s

    def uvarint(self):
        v = shift = 0
        while True:
            b = self.data[self.at]
            self.at += 1
            v |= (b & 0x7F) << shift
            if b < 0x80:
                return v
            shift += 7

    def compact_string(self):
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.data[self.at:self.at + n].decode()
        self.at += n
        return s

    def raw(self, n):
        b = self.data[self.at:self.at + n]
        self.at += n
        return b

    def tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.raw(self.uvarint())

    def bytes(self):
        n = self.i32()
        if n < 0:
            return None
        b = self.data[self.at:self.at + n]
        self.at += n
        return b


def subscription(topics):
    """ConsumerProtocolSubscription v0: what a classic consumer puts in JoinGroup."""
    return i16(0) + array([string(t) for t in topics]) + byte_array(None)


def assignment(topic, partitions):
    """ConsumerProtocolAssignment v0: what the leader hands each member in SyncGroup."""
    return i16(0) + array([string(topic) + array([i32(p) for p in partitions])]) + byte_array(None)


def offset_commit(group, generation, member_id, topic, offsets):
    parts = [i32(p) + i64(o) + i32(-1) + nullable_string(None) for p, o in offsets]
    return (string(group) + i32(generation) + string(member_id) + nullable_string(None)
            + array([string(topic) + array(parts)]))


def offset_commit_errors(body):
    """Partition error codes of an OffsetCommit v7 answer."""
    r = Reader(body)
    r.i32()  # throttle_time_ms
    codes = []
    for _ in range(r.i32()):
        r.string()
        for _ in range(r.i32()):
            r.i32()
            codes.append(r.i16())
    return codes


def member_partitions(index):
    per = TOPIC_PARTITIONS // MEMBERS_PER_GROUP
    return list(range(index * per, (index + 1) * per))


# ---- a pipelined connection ----

class Connection:
    """One socket; requests go out as they are made, answers come back in order (matched by
    correlation id)."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.next_correlation_id, self.waiting = 0, {}
        self.task = asyncio.ensure_future(self.read_answers())

    @classmethod
    async def open(cls, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def read_answers(self):
        try:
            while True:
                size = struct.unpack(">i", await self.reader.readexactly(4))[0]
                body = await self.reader.readexactly(size)
                correlation_id = struct.unpack_from(">i", body)[0]
                future = self.waiting.pop(correlation_id, None)
                if future is not None and not future.done():
                    future.set_result(body[4:])
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            for future in self.waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"connection lost: {e}"))
            self.waiting.clear()

    async def request(self, api, body):
        """The answer's body (after the correlation id; a flexible answer's body starts with
        the header's tagged fields)."""
        (key, version) = api
        self.next_correlation_id += 1
        cid = self.next_correlation_id
        header = i16(key) + i16(version) + i32(cid) + string("bench")
        if api in FLEXIBLE:
            header += NO_TAGS  # request header v2
        future = asyncio.get_running_loop().create_future()
        self.waiting[cid] = future
        self.writer.write(i32(len(header) + len(body)) + header + body)
        return await asyncio.wait_for(future, REQUEST_TIMEOUT_S)

    async def close(self):
        self.task.cancel()
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


# ---- cluster setup ----

async def wait_coordinator(conn, group):
    """FindCoordinator until it answers (the first one creates __consumer_offsets)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = Reader(await conn.request(FIND_COORDINATOR, string(group) + b"\x00"))
        r.i32()
        if r.i16() == NONE:
            return
        await asyncio.sleep(0.1)
    raise SystemExit("FindCoordinator never answered without error")


async def create_topic(conn, name, partitions):
    body = array([string(name) + i32(partitions) + i16(1) + array([]) + array([])]) + i32(30_000) + b"\x00"
    r = Reader(await conn.request(CREATE_TOPICS, body))
    r.i32()
    r.i32()
    r.string()
    code = r.i16()
    if code not in (NONE, TOPIC_ALREADY_EXISTS):
        raise SystemExit(f"CreateTopics {name}: error {code}")


async def commit_until_stored(conn, body):
    """One OffsetCommit, repeated while the coordinator is not ready (loading, not yet
    leader). Returns how many partitions were stored."""
    for _ in range(600):
        codes = offset_commit_errors(await conn.request(OFFSET_COMMIT, body))
        if any(c in RETRIABLE for c in codes):
            await asyncio.sleep(0.1)
            continue
        bad = [c for c in codes if c != NONE]
        if bad:
            raise SystemExit(f"OffsetCommit: errors {sorted(set(bad))}")
        return len(codes)
    raise SystemExit("OffsetCommit kept answering a retriable error")


async def commit_many(port, bodies, connections, in_flight_per_connection):
    """Sends every body, pipelined; returns the partitions stored."""
    conns = [await Connection.open(port) for _ in range(connections)]
    stored = 0
    queue = iter(bodies)

    async def worker(conn):
        nonlocal stored
        for body in queue:
            partitions = await commit_until_stored(conn, body)
            stored += partitions

    await asyncio.gather(*(worker(c) for c in conns for _ in range(in_flight_per_connection)))
    for c in conns:
        await c.close()
    return stored


# ---- measuring ----

class Samples:
    def __init__(self):
        self.window = None  # (start, end) in time.monotonic()
        self.latencies = {"heartbeat": [], "commit": [], "api_versions": []}
        self.errors = {"heartbeat": {}, "commit": {}}
        self.sent_in_window = 0

    def record(self, kind, started, elapsed):
        if self.window and self.window[0] <= started < self.window[1]:
            self.latencies[kind].append(elapsed)

    def error(self, kind, code):
        self.errors[kind][code] = self.errors[kind].get(code, 0) + 1


def percentile(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(len(values) * p))]


def cpu_s(pid):
    """utime + stime of a process, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed(conn, api, body):
    started = time.monotonic()
    answer = await conn.request(api, body)
    return started, time.monotonic() - started, answer


async def probe(conn, samples, stop, per_s, phase):
    """ApiVersions at a steady rate on one connection, starting `phase` (0..1) of an interval
    late so that the connections' probes do not arrive together."""
    interval = 1.0 / per_s
    next_at = time.monotonic() + phase * interval
    await asyncio.sleep(phase * interval)
    while not stop.is_set():
        next_at += interval
        started, elapsed, _ = await timed(conn, API_VERSIONS, b"")
        samples.record("api_versions", started, elapsed)
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def api_versions_only(node, conns, rate_per_s, seconds):
    """The broker's CPU per ApiVersions, and their latency, at `rate_per_s` over `conns`."""
    samples = Samples()
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(probe(c, samples, stop, rate_per_s / len(conns), i / len(conns)))
             for i, c in enumerate(conns)]
    await asyncio.sleep(1)
    cpu_before, started = cpu_s(node.process.pid), time.monotonic()
    samples.window = (started, started + seconds)
    await asyncio.sleep(seconds)
    cpu = cpu_s(node.process.pid) - cpu_before
    stop.set()
    await asyncio.gather(*tasks)
    served = len(samples.latencies["api_versions"])
    return cpu, served, samples.latencies["api_versions"]


class Group:
    def __init__(self, name):
        self.name = name
        self.synced = {}  # member index -> generation it synced
        self.leader_members = {}  # generation -> members the leader saw

    def stable(self):
        generations = set(self.synced.values())
        if len(self.synced) != MEMBERS_PER_GROUP or len(generations) != 1:
            return False
        return self.leader_members.get(generations.pop()) == MEMBERS_PER_GROUP


async def join_member(port, group, index):
    """JoinGroup and SyncGroup on a connection of the member's own (a JoinGroup waits for the
    group's other members, and a connection answers in order), then Heartbeat until the whole
    group synced one generation of ten. Returns (member_id, generation)."""
    conn = await Connection.open(port)
    member_id, topics = "", subscription([TOPIC])
    try:
        while True:
            body = (string(group.name) + i32(SESSION_TIMEOUT_MS) + i32(REBALANCE_TIMEOUT_MS)
                    + string(member_id) + nullable_string(None) + string("consumer")
                    + array([string("range") + byte_array(topics)]))
            r = Reader(await conn.request(JOIN_GROUP, body))
            r.i32()
            code, generation = r.i16(), r.i32()
            r.string()
            leader, member_id = r.string(), r.string()
            members = []
            for _ in range(r.i32()):
                members.append(r.string())
                r.string()  # group_instance_id
                r.bytes()  # metadata
            if code == MEMBER_ID_REQUIRED:
                continue
            if code != NONE:
                if code == UNKNOWN_MEMBER_ID:
                    member_id = ""
                await asyncio.sleep(0.1)
                continue
            plan = []
            if leader == member_id:
                group.leader_members[generation] = len(members)
                plan = [string(m) + byte_array(assignment(TOPIC, member_partitions(i)))
                        for i, m in enumerate(sorted(members))]
            body = string(group.name) + i32(generation) + string(member_id) + nullable_string(None) + array(plan)
            r = Reader(await conn.request(SYNC_GROUP, body))
            r.i32()
            if r.i16() != NONE:
                continue
            group.synced[index] = generation
            while not group.stable():
                await asyncio.sleep(0.2)
                body = string(group.name) + i32(generation) + string(member_id) + nullable_string(None)
                r = Reader(await conn.request(HEARTBEAT, body))
                r.i32()
                code = r.i16()
                if code == UNKNOWN_MEMBER_ID:
                    member_id = ""
                if code != NONE:
                    group.synced.pop(index, None)
                    break
            else:
                return member_id, generation
    finally:
        await conn.close()


class ClassicMember:
    """A classic member after its SyncGroup: Heartbeat every 3 s, commits of its partitions."""

    heartbeat_interval_s = HEARTBEAT_INTERVAL_S

    def __init__(self, conn, group, index, member_id, generation):
        self.conn, self.group, self.member_id, self.generation = conn, group, member_id, generation
        self.partitions = member_partitions(index)
        self.body = string(group) + i32(generation) + string(member_id) + nullable_string(None)

    async def heartbeat(self):
        answer = await self.conn.request(HEARTBEAT, self.body)
        return struct.unpack_from(">h", answer, 4)[0]  # after throttle_time_ms

    async def commit(self, offset):
        body = offset_commit(self.group, self.generation, self.member_id, TOPIC,
                             [(p, offset) for p in self.partitions])
        return offset_commit_errors(await self.conn.request(OFFSET_COMMIT, body))


class ConsumerMember:
    """A KIP-848 member: ConsumerGroupHeartbeat (joining at epoch 0, then reporting the
    partitions it owns whenever its assignment changed) and OffsetCommit v9 at its epoch."""

    def __init__(self, conn, group):
        self.conn, self.group = conn, group
        self.member_id, self.epoch, self.owned = "", 0, []
        self.report_owned = False
        self.heartbeat_interval_s = 5.0

    def request(self):
        joining = self.epoch == 0
        owned = None
        if joining:
            owned = []
        elif self.report_owned:
            owned = [tid + compact_array([i32(p) for p in parts]) + NO_TAGS for tid, parts in self.owned]
        subscribed = [compact_string(TOPIC)] if joining else None
        return (compact_string(self.group) + compact_string(self.member_id) + i32(self.epoch)
                + compact_string(None) + compact_string(None)
                + i32(REBALANCE_TIMEOUT_MS if joining else -1) + compact_array(subscribed)
                + compact_string(None) + compact_array(owned) + NO_TAGS)

    async def heartbeat(self):
        sent_owned = self.report_owned or self.epoch == 0
        r = Reader(await self.conn.request(CONSUMER_GROUP_HEARTBEAT, self.request()))
        r.tags()  # response header v1
        r.i32()
        code = r.i16()
        r.compact_string()
        member_id, epoch, interval_ms = r.compact_string(), r.i32(), r.i32()
        assignment = None
        if r.take(">b") >= 0:
            assignment = []
            for _ in range(r.uvarint() - 1):
                topic_id = r.raw(16)
                assignment.append((topic_id, [r.i32() for _ in range(r.uvarint() - 1)]))
                r.tags()
            r.tags()
        if code == NONE:
            self.member_id, self.epoch = member_id, epoch
            self.heartbeat_interval_s = interval_ms / 1000
            if sent_owned:
                self.report_owned = False
            # The broker repeats the assignment whenever owned partitions were reported:
            # only a change is reported back.
            if assignment is not None and sorted(assignment) != sorted(self.owned):
                self.owned, self.report_owned = assignment, True
        elif code in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):
            self.epoch, self.owned, self.report_owned = 0, [], False
        return code

    def partitions(self):
        return sorted(p for _, parts in self.owned for p in parts)

    async def commit(self, offset):
        parts = [i32(p) + i64(offset) + i32(-1) + compact_string(None) + NO_TAGS for p in self.partitions()]
        body = (compact_string(self.group) + i32(self.epoch) + compact_string(self.member_id)
                + compact_string(None) + compact_array([compact_string(TOPIC) + compact_array(parts) + NO_TAGS])
                + NO_TAGS)
        r = Reader(await self.conn.request(OFFSET_COMMIT_FLEXIBLE, body))
        r.tags()
        r.i32()
        codes = []
        for _ in range(r.uvarint() - 1):
            r.compact_string()
            for _ in range(r.uvarint() - 1):
                r.i32()
                codes.append(r.i16())
                r.tags()
            r.tags()
        return codes


async def join_consumer_group(conns, name, first_connection):
    """Ten KIP-848 members join one group and heartbeat every 250 ms until each owns its
    share at one epoch, nothing left to report. Returns the members."""
    members = [ConsumerMember(conns[(first_connection + i) % len(conns)], name) for i in range(MEMBERS_PER_GROUP)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        codes = await asyncio.gather(*(m.heartbeat() for m in members))
        owned = [p for m in members for p in m.partitions()]
        if (all(c == NONE for c in codes) and len({m.epoch for m in members}) == 1
                and sorted(owned) == list(range(TOPIC_PARTITIONS)) and not any(m.report_owned for m in members)
                and all(len(m.partitions()) == TOPIC_PARTITIONS // MEMBERS_PER_GROUP for m in members)):
            return members
        await asyncio.sleep(0.25)
    raise SystemExit(f"consumer group {name} did not settle")


async def member_traffic(member, samples, stop, phase):
    """A joined member: its heartbeats, and an OffsetCommit of its partitions every 5 s."""
    next_heartbeat = time.monotonic() + phase * member.heartbeat_interval_s
    next_commit = time.monotonic() + phase * COMMIT_INTERVAL_S
    offset = 0
    while not stop.is_set():
        await asyncio.sleep(max(0.0, min(next_heartbeat, next_commit) - time.monotonic()))
        if stop.is_set():
            return
        started = time.monotonic()
        if next_heartbeat <= next_commit:
            next_heartbeat += member.heartbeat_interval_s
            codes, kind = [await member.heartbeat()], "heartbeat"
        else:
            next_commit += COMMIT_INTERVAL_S
            offset += 1
            codes, kind = await member.commit(offset), "commit"
        samples.record(kind, started, time.monotonic() - started)
        for code in codes:
            if code != NONE:
                samples.error(kind, code)


async def join_classic(port, conns, spread):
    """100 classic groups of ten, 20 groups joining at a time."""
    joining = asyncio.Semaphore(20)
    members = []

    async def one(name):
        group = Group(name)
        async with joining:
            joined = await asyncio.gather(*(join_member(port, group, i) for i in range(MEMBERS_PER_GROUP)))
        for index, (member_id, generation) in enumerate(joined):
            conn = conns[len(members) % len(conns)]
            member = ClassicMember(conn, name, index, member_id, generation)
            members.append(member)
            spread(member)

    await asyncio.gather(*(one(f"classic-{g:03d}") for g in range(ACTIVE_GROUPS)))
    return members


async def join_consumer(conns, spread):
    """100 KIP-848 groups of ten, 20 groups joining at a time."""
    joining = asyncio.Semaphore(20)
    members = []

    async def one(g):
        async with joining:
            joined = await join_consumer_group(conns, f"consumer-{g:03d}", g)
        for member in joined:
            members.append(member)
            spread(member)

    await asyncio.gather(*(one(g) for g in range(ACTIVE_GROUPS)))
    return members


async def scale(binary, seconds, protocol):
    """One broker, the idle groups, the raw window, then the active members of `protocol`
    (classic or consumer) and the measuring window."""
    work = tempfile.mkdtemp(prefix="sluice-coordinator-scale-")
    node = Node(binary, work)
    node.start()
    node.wait_listening()
    try:
        admin = await Connection.open(node.kafka)
        await wait_coordinator(admin, "warm-up")
        await create_topic(admin, TOPIC, TOPIC_PARTITIONS)
        await admin.close()
        started = time.monotonic()
        bodies = (offset_commit(f"idle-{g:05d}", -1, "", TOPIC, [(g % TOPIC_PARTITIONS, g)]) for g in range(IDLE_GROUPS))
        stored = await commit_many(node.kafka, bodies, SHARED_CONNECTIONS, 16)
        say(f"scale {protocol}: {IDLE_GROUPS} idle groups ({stored} offsets) in {time.monotonic() - started:.1f} s")

        conns = [await Connection.open(node.kafka) for _ in range(SHARED_CONNECTIONS)]
        heartbeat_s = HEARTBEAT_INTERVAL_S if protocol == "classic" else CONSUMER_HEARTBEAT_INTERVAL_S
        rate_per_s = (ACTIVE_GROUPS * MEMBERS_PER_GROUP * (1 / heartbeat_s + 1 / COMMIT_INTERVAL_S)
                      + SHARED_CONNECTIONS * PROBES_PER_CONNECTION_PER_S)
        raw_seconds = min(15.0, seconds)
        raw_cpu, raw_served, raw_latencies = await api_versions_only(node, conns, rate_per_s, raw_seconds)
        say(f"scale {protocol}: ApiVersions alone at {rate_per_s:.0f}/s for {raw_seconds:.0f} s: {raw_served} served")

        samples, stop, tasks = Samples(), asyncio.Event(), []
        tasks += [asyncio.ensure_future(probe(c, samples, stop, PROBES_PER_CONNECTION_PER_S, i / len(conns)))
                  for i, c in enumerate(conns)]

        def spread(member):
            # Members start spread over their interval (golden-ratio phases), as soon as they
            # joined: the first joined keep their sessions while the others join.
            phase = (len(tasks) * 0.6180339887) % 1.0
            tasks.append(asyncio.ensure_future(member_traffic(member, samples, stop, phase)))

        started = time.monotonic()
        if protocol == "classic":
            members = await join_classic(node.kafka, conns, spread)
        else:
            members = await join_consumer(conns, spread)
        say(f"scale {protocol}: {len(members)} members joined {ACTIVE_GROUPS} groups in {time.monotonic() - started:.1f} s")
        await asyncio.sleep(COMMIT_INTERVAL_S + 1)  # every member under way

        cpu_before, started = cpu_s(node.process.pid), time.monotonic()
        samples.window = (started, started + seconds)
        say(f"scale {protocol}: measuring for {seconds:.0f} s")
        await asyncio.sleep(seconds)
        cpu = cpu_s(node.process.pid) - cpu_before
        await asyncio.sleep(2)  # answers to requests sent in the window
        stop.set()
        await asyncio.gather(*tasks)
        for c in conns:
            await c.close()
        return report_scale(protocol, samples, seconds, cpu, raw_cpu, raw_served, raw_latencies)
    finally:
        node.stop()
        shutil.rmtree(work, ignore_errors=True)


def report_scale(protocol, samples, seconds, cpu, raw_cpu, raw_served, raw_latencies):
    lat = samples.latencies
    served = sum(len(v) for v in lat.values())
    ms = {k: (percentile(v, 0.50) * 1000, percentile(v, 0.99) * 1000) for k, v in lat.items()}
    raw_p50, raw_p99 = percentile(raw_latencies, 0.50) * 1000, percentile(raw_latencies, 0.99) * 1000
    per_request_us = cpu / served * 1e6
    raw_per_request_us = raw_cpu / raw_served * 1e6
    print(f"scale {protocol}: {IDLE_GROUPS} idle groups, {ACTIVE_GROUPS * MEMBERS_PER_GROUP} active {protocol} members, "
          f"{seconds:.0f} s window, {SHARED_CONNECTIONS} connections")
    print(f"  served: {len(lat['heartbeat'])} heartbeats, {len(lat['commit'])} commits, "
          f"{len(lat['api_versions'])} ApiVersions; errors: heartbeat {samples.errors['heartbeat'] or 'none'}, "
          f"commit {samples.errors['commit'] or 'none'}")
    for kind in ("heartbeat", "commit", "api_versions"):
        p50, p99 = ms[kind]
        print(f"  {kind:12} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  "
              f"(x{p50 / ms['api_versions'][0]:.2f} / x{p99 / ms['api_versions'][1]:.2f} of ApiVersions)")
    print(f"  broker CPU {cpu:.2f} s ({cpu / seconds * 100:.1f}% of a core): {per_request_us:.0f} us per request "
          f"served, {cpu / max(1, len(lat['heartbeat'])) * 1e6:.0f} us per heartbeat (all CPU / heartbeats)")
    print(f"  raw: ApiVersions alone at the same rate: p50 {raw_p50:.3f} ms p99 {raw_p99:.3f} ms, "
          f"{raw_per_request_us:.0f} us CPU per request; CPU per request x{per_request_us / raw_per_request_us:.2f}")
    sys.stdout.flush()
    return {
        "heartbeat_p50_ms": ms["heartbeat"][0], "heartbeat_p99_ms": ms["heartbeat"][1],
        "commit_p50_ms": ms["commit"][0], "commit_p99_ms": ms["commit"][1],
        "api_versions_p50_ms": ms["api_versions"][0], "api_versions_p99_ms": ms["api_versions"][1],
        "cpu_us_per_request": per_request_us, "raw_cpu_us_per_request": raw_per_request_us,
        "cpu_percent": cpu / seconds * 100,
    }


# ---- loading a partition of a million records ----

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def loaded_line(log_path, after_bytes):
    """The fields of the group coordinator's last "loaded coordinator partition" line past
    `after_bytes`."""
    with open(log_path, "rb") as f:
        f.seek(after_bytes)
        text = ANSI.sub("", f.read().decode(errors="replace"))
    lines = [line for line in text.splitlines()
             if "loaded coordinator partition" in line and "what=groups" in line]
    if not lines:
        return {}
    return dict(re.findall(r"(\w+)=(\S+)", lines[-1]))


async def offset_fetch_until_loaded(port, group, expected, deadline_s=600):
    """Seconds from now until OffsetFetch answers for `group` (connecting as soon as the port
    opens), and the error codes met before."""
    started = time.monotonic()
    seen = {}
    body = string(group) + array([string(TOPIC) + array([i32(p) for p, _ in expected])])
    conn = None
    while time.monotonic() - started < deadline_s:
        if conn is None:
            try:
                conn = await Connection.open(port)
            except OSError:
                await asyncio.sleep(0.005)
                continue
        try:
            r = Reader(await conn.request(OFFSET_FETCH, body))
        except (ConnectionError, asyncio.TimeoutError):
            await conn.close()
            conn = None
            continue
        r.i32()
        got, codes = {}, []
        for _ in range(r.i32()):
            r.string()
            for _ in range(r.i32()):
                p, o = r.i32(), r.i64()
                r.i32()
                r.string()
                codes.append(r.i16())
                got[p] = o
        codes.append(r.i16())
        code = next((c for c in codes if c != NONE), NONE)
        if code == NONE:
            elapsed = time.monotonic() - started
            await conn.close()
            if got != dict(expected):
                raise SystemExit(f"OffsetFetch after the restart: {got}, expected {dict(expected)}")
            return elapsed, seen
        seen[code] = seen.get(code, 0) + 1
        if code not in RETRIABLE:
            raise SystemExit(f"OffsetFetch after the restart: error {code}")
        await asyncio.sleep(0.005)
    raise SystemExit("the coordinator did not load")


def load_offset(group, partition):
    return group * 1000 + partition


async def load(binary, restarts):
    work = tempfile.mkdtemp(prefix="sluice-coordinator-load-")
    node = Node(binary, work, overrides=["offsets.topic.num.partitions=1"])
    log_path = os.path.join(work, "node.log")
    node.start()
    node.wait_listening()
    try:
        admin = await Connection.open(node.kafka)
        await wait_coordinator(admin, "warm-up")
        await create_topic(admin, TOPIC, TOPIC_PARTITIONS)
        await admin.close()
        started = time.monotonic()
        bodies = (offset_commit(f"load-{g:05d}", -1, "", TOPIC,
                                [(p, load_offset(g, p)) for p in range(TOPIC_PARTITIONS)])
                  for g in range(LOAD_GROUPS))
        stored = await commit_many(node.kafka, bodies, 4, 8)
        write_s = time.monotonic() - started
        say(f"load: {stored} offsets committed in {write_s:.1f} s")

        print(f"load: {stored} offset commits ({LOAD_GROUPS} groups x {TOPIC_PARTITIONS} partitions), "
              f"written in {write_s:.1f} s ({stored / write_s:.0f} records/s)")
        group = LOAD_GROUPS - 1
        expected = [(p, load_offset(group, p)) for p in (0, TOPIC_PARTITIONS - 1)]
        answered_ms, loaded_ms = [], []
        for restart in range(1, restarts + 1):
            started = time.monotonic()
            node.stop()
            stop_s = time.monotonic() - started
            segments = sorted(glob.glob(os.path.join(work, "data", "__consumer_offsets-0", "*.log")))
            log_bytes = sum(os.path.getsize(s) for s in segments)
            started = time.monotonic()
            subprocess.run(["sh", "-c", 'cat "$@" > /dev/null', "cat", *segments], check=True)
            cat_ms = (time.monotonic() - started) * 1000

            log_size = os.path.getsize(log_path)
            started = time.monotonic()
            node.start()
            _, seen = await offset_fetch_until_loaded(node.kafka, f"load-{group:05d}", expected)
            answered_ms.append((time.monotonic() - started) * 1000)  # from the process start
            await asyncio.sleep(0.5)
            line = loaded_line(log_path, log_size)
            loaded_ms.append(float(line.get("elapsed_ms", "nan")))
            print(f"  restart {restart}: SIGTERM stop {stop_s:.2f} s; log {log_bytes / 1e6:.1f} MB in "
                  f"{len(segments)} segment(s), cat to /dev/null {cat_ms:.0f} ms; first OffsetFetch answered "
                  f"{answered_ms[-1]:.0f} ms after the start (x{answered_ms[-1] / cat_ms:.1f} of cat; retried on "
                  f"{seen or 'none'}); broker's line: records={line.get('records')} groups={line.get('count')} "
                  f"elapsed_ms={line.get('elapsed_ms')} (x{loaded_ms[-1] / cat_ms:.1f} of cat)", flush=True)
        print(f"  median of {restarts}: answered {percentile(answered_ms, 0.5):.0f} ms, "
              f"loaded (broker's elapsed_ms) {percentile(loaded_ms, 0.5):.0f} ms", flush=True)
        return {"answered_ms": answered_ms, "loaded_ms": loaded_ms}
    finally:
        node.stop()
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sluice"))
    parser.add_argument("--seconds", type=float, default=60, help="the scale measuring window")
    parser.add_argument("--protocols", default="classic,consumer",
                        help="the active members' protocols, one broker each: classic, consumer (KIP-848)")
    parser.add_argument("--restarts", type=int, default=3, help="load: restarts measured")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-load", action="store_true")
    args = parser.parse_args()
    print(f"binary: {os.path.realpath(args.sluice)}", flush=True)
    if not args.skip_scale:
        for protocol in args.protocols.split(","):
            asyncio.run(scale(args.sluice, args.seconds, protocol))
    if not args.skip_load:
        asyncio.run(load(args.sluice, args.restarts))


if __name__ == "__main__":
    main()
