#!/usr/bin/env python3
"""Kafka transactions against librdkafka (confluent-kafka): one case per invocation.

usage: txn_suite.py BOOTSTRAP CASE [ARGS...]
Exits non-zero (with the reason) when the broker does not behave as Kafka would.

Values name what a read_committed consumer must make of them: the checks look for them by
prefix (`pre-`, `open-`, `aborted-`, ...), so a record seen twice, missing or out of place
is reported with its value.
"""
import os
import signal
import sys
import time
from collections import Counter

from confluent_kafka import (Consumer, IsolationLevel, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

BOOTSTRAP = sys.argv[1]
CASE = sys.argv[2]
ARGS = sys.argv[3:]

# librdkafka's names for the answers that fence a producer.
FENCING_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


_ADMIN = []


def admin():
    """One admin client for the whole run (a dropped client fails its pending futures)."""
    if not _ADMIN:
        _ADMIN.append(AdminClient({"bootstrap.servers": BOOTSTRAP}))
    return _ADMIN[0]


def create(topic, partitions, replication=1, config=None):
    futures = admin().create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication,
                  config=config or {})],
        operation_timeout=20)
    futures[topic].result(timeout=30)


def plain_producer():
    return Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 0})


def txn_producer(transactional_id, **extra):
    config = {"bootstrap.servers": BOOTSTRAP, "transactional.id": transactional_id,
              "linger.ms": 0,
              # Reported here; the calls that fail say the rest.
              "error_cb": lambda error: log(f"{transactional_id}: client error {error}")}
    if os.environ.get("TXN_DEBUG"):
        config["debug"] = "eos,protocol,broker"
    config.update(extra)
    return Producer(config)


class Deliveries:
    """Delivery reports of one producer: offsets by value, errors by value."""

    def __init__(self):
        self.offsets = {}
        self.errors = {}

    def __call__(self, err, msg):
        value = msg.value().decode()
        if err is None:
            self.offsets[value] = (msg.partition(), msg.offset())
        else:
            self.errors[value] = err


def produce_values(producer, topic, values_by_partition, reports=None):
    for partition, values in values_by_partition.items():
        for value in values:
            producer.produce(topic, value=value.encode(), partition=partition,
                             on_delivery=reports)


def flush(producer, reports=None):
    left = producer.flush(30)
    check(left == 0, f"{left} records left unsent after 30 s")
    if reports is not None:
        check(not reports.errors, f"delivery errors: {reports.errors}")


def named(prefix, partitions, count):
    """{partition: [f"{prefix}-{partition}-{i}" for i < count]}."""
    return {p: [f"{prefix}-{p}-{i}" for i in range(count)] for p in range(partitions)}


class Reader:
    """A consumer assigned every partition of a topic from the beginning (no group), that keeps
    what it read."""

    def __init__(self, topic, partitions, isolation):
        self.topic = topic
        self.isolation = isolation
        self.consumer = Consumer({
            "bootstrap.servers": BOOTSTRAP,
            "group.id": f"reader-{topic}-{isolation}-{time.time()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        })
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.records = []  # (partition, offset, value)

    def poll_for(self, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            for m in self.consumer.consume(num_messages=500, timeout=0.2):
                if m.error():
                    raise AssertionError(f"{self.isolation} consume error: {m.error()}")
                self.records.append((m.partition(), m.offset(), m.value().decode()))

    def poll_until(self, what, done, timeout=20):
        deadline = time.time() + timeout
        while not done(self.values()):
            if time.time() > deadline:
                raise AssertionError(
                    f"{self.isolation} consumer: timed out waiting for {what}; read "
                    f"{self.values()}")
            self.poll_for(0.2)

    def values(self):
        return [v for _, _, v in self.records]

    def by_partition(self):
        parts = {}
        for p, _, v in self.records:
            parts.setdefault(p, []).append(v)
        return parts

    def close(self):
        self.consumer.close()


def has_all(expected):
    wanted = set(expected)
    return lambda values: wanted <= set(values)


def check_no_duplicates(values, who):
    twice = [v for v, n in Counter(values).items() if n > 1]
    check(not twice, f"{who} read these more than once: {twice[:20]}")


def list_offsets(topic, partitions, isolation):
    """The latest offset of each partition as ListOffsets answers it with `isolation`."""
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    deadline = time.time() + 15
    while True:
        futures = admin().list_offsets(request, isolation_level=isolation, request_timeout=20)
        try:
            return {tp.partition: f.result(timeout=30).offset for tp, f in futures.items()}
        except KafkaException as e:
            # After a node's restart: librdkafka's admin ListOffsets sends the leader epoch of
            # its metadata cache, and does not refresh the cache when told FENCED_LEADER_EPOCH
            # (the restart bumped it); a new client starts with fresh metadata.
            check(time.time() < deadline, f"ListOffsets {isolation} failed for 15 s: {e!r}")
            log(f"ListOffsets {isolation}: {kafka_error(e)}; retrying with a new admin client")
            _ADMIN.clear()
            time.sleep(0.2)


def kafka_error(exception):
    return exception.args[0] if exception.args and isinstance(exception.args[0], KafkaError) \
        else None


# --- 1. commit and abort visibility ---------------------------------------------------------

def case_visibility():
    """An open transaction is invisible to read_committed and holds it (and ListOffsets) at the
    LSO; committed records then appear in order; aborted ones never do; interleaved
    transactions of two producers are told apart."""
    topic, parts = "vis", 2
    create(topic, parts)
    plain = plain_producer()
    produce_values(plain, topic, named("pre", parts, 3))
    flush(plain)

    t1 = txn_producer("vis-1")
    t1.init_transactions(30)
    t1.begin_transaction()
    t1_reports = Deliveries()
    produce_values(t1, topic, named("open", parts, 4), t1_reports)
    flush(t1, t1_reports)
    # Another producer's records after the open transaction's.
    produce_values(plain, topic, named("after", parts, 3))
    flush(plain)

    committed = Reader(topic, parts, "read_committed")
    uncommitted = Reader(topic, parts, "read_uncommitted")
    everything = [v for prefix in ("pre", "open", "after")
                  for vs in named(prefix, parts, 4 if prefix == "open" else 3).values()
                  for v in vs]
    uncommitted.poll_until("pre, open and after records", has_all(everything))
    for p, values in uncommitted.by_partition().items():
        expected = named("pre", parts, 3)[p] + named("open", parts, 4)[p] \
            + named("after", parts, 3)[p]
        check(values == expected, f"read_uncommitted partition {p}: {values}, expected {expected}")

    committed.poll_until("the records before the transaction", has_all(
        [v for vs in named("pre", parts, 3).values() for v in vs]))
    committed.poll_for(3)
    check(sorted(committed.values()) == sorted(v for vs in named("pre", parts, 3).values()
                                               for v in vs),
          "read_committed read past the LSO of an open transaction: "
          f"{committed.values()}")

    lso = list_offsets(topic, parts, IsolationLevel.READ_COMMITTED)
    high = list_offsets(topic, parts, IsolationLevel.READ_UNCOMMITTED)
    first_open = {p: min(o for v, (q, o) in t1_reports.offsets.items() if q == p)
                  for p in range(parts)}
    log(f"open transaction: ListOffsets read_committed {lso}, read_uncommitted {high}, "
        f"first open offsets {first_open}")
    check(lso == first_open, f"ListOffsets read_committed {lso}, expected the LSO {first_open}")
    check(high == {p: 10 for p in range(parts)}, f"ListOffsets read_uncommitted {high}")

    t1.commit_transaction(30)
    committed.poll_until("the committed transaction and the records after it", has_all(everything))
    committed.poll_for(1)
    for p, values in committed.by_partition().items():
        expected = named("pre", parts, 3)[p] + named("open", parts, 4)[p] \
            + named("after", parts, 3)[p]
        check(values == expected, f"read_committed partition {p} after the commit: {values}, "
              f"expected {expected}")
    # The commit marker takes an offset of its own.
    for isolation in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        answered = list_offsets(topic, parts, isolation)
        check(answered == {p: 11 for p in range(parts)},
              f"ListOffsets {isolation} after the commit: {answered}, expected 11 each")

    # An aborted transaction, written (flushed) before the abort.
    t2 = txn_producer("vis-2")
    t2.init_transactions(30)
    t2.begin_transaction()
    t2_reports = Deliveries()
    produce_values(t2, topic, named("aborted", parts, 4), t2_reports)
    flush(t2, t2_reports)
    t2.abort_transaction(30)
    produce_values(plain, topic, named("tail", parts, 2))
    flush(plain)
    tail = [v for vs in named("tail", parts, 2).values() for v in vs]
    aborted = [v for vs in named("aborted", parts, 4).values() for v in vs]
    committed.poll_until("the records after the aborted transaction", has_all(tail))
    uncommitted.poll_until("the aborted transaction and the tail", has_all(aborted + tail))
    committed.poll_for(1)
    seen_aborted = [v for v in committed.values() if v.startswith("aborted-")]
    check(not seen_aborted, f"read_committed read aborted records: {seen_aborted}")
    answered = list_offsets(topic, parts, IsolationLevel.READ_COMMITTED)
    check(answered == {p: 18 for p in range(parts)},
          f"ListOffsets read_committed after the abort: {answered}, expected 18 (4 aborted, "
          "1 marker, 2 more)")

    # Two transactions interleaved on partition 0: the first aborts, the second commits.
    t3 = txn_producer("vis-3")
    t4 = txn_producer("vis-4")
    for t in (t3, t4):
        t.init_transactions(30)
        t.begin_transaction()
    t3_reports, t4_reports = Deliveries(), Deliveries()
    for i in range(3):
        produce_values(t3, topic, {0: [f"x3-{i}"]}, t3_reports)
        flush(t3, t3_reports)
        produce_values(t4, topic, {0: [f"x4-{i}"]}, t4_reports)
        flush(t4, t4_reports)
    x3_first = t3_reports.offsets["x3-0"][1]
    x4_first = t4_reports.offsets["x4-0"][1]
    answered = list_offsets(topic, 1, IsolationLevel.READ_COMMITTED)[0]
    check(answered == x3_first, f"LSO with two open transactions: {answered}, expected {x3_first}")
    t3.abort_transaction(30)
    # EndTxn is answered once the outcome is decided; the markers follow.
    deadline = time.time() + 10
    while (answered := list_offsets(topic, 1, IsolationLevel.READ_COMMITTED)[0]) != x4_first:
        check(time.time() < deadline, "LSO 10 s after the first of two transactions aborted: "
              f"{answered}, expected {x4_first} (the second one's first offset)")
        time.sleep(0.1)
    committed.poll_for(1.5)
    early = [v for v in committed.values() if v.startswith(("x3-", "x4-"))]
    check(not early, f"read_committed read {early} while the second transaction is open")
    t4.commit_transaction(30)
    committed.poll_until("the second interleaved transaction", has_all(["x4-0", "x4-1", "x4-2"]))
    uncommitted.poll_until("both interleaved transactions",
                           has_all([f"x{t}-{i}" for t in (3, 4) for i in range(3)]))
    committed.poll_for(1)

    # A fresh read_committed consumer from offset 0 sees exactly the committed history.
    fresh = Reader(topic, parts, "read_committed")
    expected = {p: named("pre", parts, 3)[p] + named("open", parts, 4)[p]
                + named("after", parts, 3)[p] + named("tail", parts, 2)[p] for p in range(parts)}
    expected[0] = expected[0] + ["x4-0", "x4-1", "x4-2"]
    fresh.poll_until("the committed history", has_all([v for vs in expected.values() for v in vs]))
    fresh.poll_for(1.5)
    for reader in (committed, fresh):
        check_no_duplicates(reader.values(), "read_committed")
        check(reader.by_partition() == expected,
              f"read_committed ({'fresh' if reader is fresh else 'live'}) read "
              f"{reader.by_partition()}, expected {expected}")
    check_no_duplicates(uncommitted.values(), "read_uncommitted")
    for reader in (committed, uncommitted, fresh):
        reader.close()


# --- 2. consume-transform-produce, exactly once --------------------------------------------

EOS_IN, EOS_OUT, EOS_GROUP, EOS_PARTITIONS = "eos-in", "eos-out", "eos-group", 3


def case_eos_setup():
    """ARGS: PER_PARTITION. The input topic, filled; the output topic, empty."""
    per_partition = int(ARGS[0])
    create(EOS_IN, EOS_PARTITIONS)
    create(EOS_OUT, EOS_PARTITIONS)
    plain = plain_producer()
    produce_values(plain, EOS_IN, named("in", EOS_PARTITIONS, per_partition))
    flush(plain)
    log(f"{EOS_PARTITIONS * per_partition} input records written")


def case_eos_process():
    """ARGS: PER_PARTITION PAUSE_AT PAUSE_WHERE. The processor: reads eos-in (read_committed,
    group eos-group), writes `out:<value>` to the same partition of eos-out, in transactions
    of up to 50 records with the consumed offsets sent to the transaction. Exits 0 once the
    group's committed offsets reach the input's end. With PAUSE_AT > 0, its transaction number
    PAUSE_AT stops while open (after its records are written, and, for PAUSE_WHERE=offsets,
    after its offsets too), prints `paused` and waits to be killed."""
    per_partition, pause_at, pause_where = int(ARGS[0]), int(ARGS[1]), ARGS[2]
    producer = txn_producer("eos-processor")
    # Fences the previous incarnation and aborts what it left open, before this one reads
    # the committed offsets.
    producer.init_transactions(30)
    consumer = Consumer({
        "bootstrap.servers": BOOTSTRAP,
        "group.id": EOS_GROUP,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    })
    consumer.subscribe([EOS_IN])
    everything = [TopicPartition(EOS_IN, p) for p in range(EOS_PARTITIONS)]
    transactions = 0
    processed = 0
    started = time.time()
    while True:
        if time.time() - started > 50:
            raise AssertionError(f"the processor did not finish in 50 s ({processed} records "
                                 f"in {transactions} transactions)")
        batch = consumer.consume(num_messages=50, timeout=0.5)
        records = []
        for m in batch:
            if m.error():
                raise AssertionError(f"consume error: {m.error()}")
            records.append(m)
        if not records:
            committed = consumer.committed(everything, timeout=10)
            if all(tp.offset == per_partition for tp in committed):
                log(f"done: {processed} records in {transactions} transactions")
                break
            continue
        transactions += 1
        producer.begin_transaction()
        positions = {}
        for m in records:
            producer.produce(EOS_OUT, value=b"out:" + m.value(), partition=m.partition())
            positions[m.partition()] = m.offset() + 1
        if transactions == pause_at and pause_where == "produced":
            flush(producer)
            pause(transactions, positions)
        producer.send_offsets_to_transaction(
            [TopicPartition(EOS_IN, p, o) for p, o in sorted(positions.items())],
            consumer.consumer_group_metadata(), 30)
        if transactions == pause_at and pause_where == "offsets":
            flush(producer)
            pause(transactions, positions)
        producer.commit_transaction(30)
        processed += len(records)
    consumer.close()


def pause(transactions, positions):
    log(f"transaction {transactions} open, up to offsets {positions}")
    print("paused", flush=True)
    time.sleep(120)
    raise AssertionError("the processor was not killed")


def case_eos_verify():
    """ARGS: PER_PARTITION. Each input record is in eos-out exactly once for read_committed,
    on its partition, in order; the kills left aborted output behind (read_uncommitted reads
    more); the group committed the input's end offsets."""
    per_partition = int(ARGS[0])
    expected = {p: [f"out:{v}" for v in values]
                for p, values in named("in", EOS_PARTITIONS, per_partition).items()}
    committed = Reader(EOS_OUT, EOS_PARTITIONS, "read_committed")
    committed.poll_until("the output", has_all([v for vs in expected.values() for v in vs]),
                         timeout=30)
    committed.poll_for(1.5)
    check_no_duplicates(committed.values(), "read_committed")
    got = committed.by_partition()
    for p in range(EOS_PARTITIONS):
        check(got.get(p) == expected[p], f"output partition {p} is not its input, in order: "
              f"{len(got.get(p, []))} records, first differences "
              f"{[(a, b) for a, b in zip(got.get(p, []), expected[p]) if a != b][:5]}")
    uncommitted = Reader(EOS_OUT, EOS_PARTITIONS, "read_uncommitted")
    uncommitted.poll_until("the output", has_all([v for vs in expected.values() for v in vs]),
                           timeout=30)
    uncommitted.poll_for(1)
    extra = len(uncommitted.values()) - EOS_PARTITIONS * per_partition
    log(f"read_committed {len(committed.values())} records, read_uncommitted "
        f"{len(uncommitted.values())} ({extra} of aborted transactions)")
    check(extra > 0, "no aborted output in the log: the processor was not killed with a "
          "transaction's records written")
    group = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": EOS_GROUP,
                      "isolation.level": "read_committed"})
    offsets = group.committed([TopicPartition(EOS_IN, p) for p in range(EOS_PARTITIONS)],
                              timeout=20)
    got_offsets = [tp.offset for tp in offsets]
    check(got_offsets == [per_partition] * EOS_PARTITIONS,
          f"group {EOS_GROUP} committed {got_offsets}, expected {per_partition} each")
    for c in (committed, uncommitted, group):
        c.close()


# --- 3. zombie fencing ----------------------------------------------------------------------

def fenced_error(action, what):
    """Runs `action`, which must fail; returns the KafkaError."""
    try:
        action()
    except KafkaException as e:
        error = kafka_error(e)
        check(error is not None, f"{what}: {e!r}")
        log(f"{what}: {error.name()} fatal={error.fatal()} "
            f"abortable={error.txn_requires_abort()}: {error.str()}")
        return error
    raise AssertionError(f"{what} succeeded for a fenced producer")


def case_fencing():
    """A second producer with the same transactional.id fences the first: whatever the first
    does next (produce to a partition of its transaction, add a partition, commit) fails
    fatally, its open transaction is aborted, and nothing it sent after the fence is in the
    log; the second one commits."""
    topic, parts = "fence", 2
    create(topic, parts)
    expected_visible = []
    for how in ("produce", "new-partition", "commit"):
        transactional_id = f"zombie-{how}"
        first = txn_producer(transactional_id)
        first.init_transactions(30)
        first.begin_transaction()
        reports = Deliveries()
        produce_values(first, topic, {0: [f"before-{how}-{i}" for i in range(3)]}, reports)
        flush(first, reports)

        second = txn_producer(transactional_id)
        second.init_transactions(30)
        log(f"{how}: the second producer initialized")

        # No delivery callback here: confluent-kafka 2.16 fails a callback's calls on a
        # message failed with a fatal error (SystemError). read_uncommitted checks below that
        # none of these records was written.
        # The fence can come back while the later records are still being handed over: the
        # producer is then in its fatal state and refuses them (_STATE), as Kafka's would.
        late = {"produce": 0, "new-partition": 1}.get(how)
        if late is not None:
            try:
                produce_values(first, topic, {late: [f"after-{how}-{i}" for i in range(3)]})
            except KafkaException as e:
                error = kafka_error(e)
                check(error is not None and (error.code() == KafkaError._STATE
                                             or error.code() in FENCING_CODES),
                      f"{how}: produce after the fence failed with {e!r}")
                log(f"{how}: produce refused after the fence: {error.str()}")
        if how != "commit":
            try:
                left = first.flush(30)
                log(f"{how}: flushed, {left} left")
            except KafkaException as e:
                log(f"{how}: flush: {kafka_error(e)}")
        error = fenced_error(lambda: first.commit_transaction(30), f"{how}: commit")
        if not error.fatal():
            check(error.txn_requires_abort(), f"{how}: commit failed with {error.name()}, "
                  "neither fatal nor abortable")
            error = fenced_error(lambda: first.abort_transaction(30), f"{how}: abort")
        check(error.fatal(), f"{how}: the fenced producer's error is not fatal: {error.name()}")
        check(error.code() in FENCING_CODES,
              f"{how}: the fenced producer failed with {error.name()}, expected a fencing error")

        second.begin_transaction()
        ok = Deliveries()
        values = [f"second-{how}-{i}" for i in range(3)]
        produce_values(second, topic, {0: values[:2], 1: values[2:]}, ok)
        flush(second, ok)
        second.commit_transaction(30)
        expected_visible += values

    committed = Reader(topic, parts, "read_committed")
    committed.poll_until("the second producers' records", has_all(expected_visible))
    committed.poll_for(1)
    check(sorted(committed.values()) == sorted(expected_visible),
          f"read_committed read {committed.values()}, expected only {expected_visible}")
    uncommitted = Reader(topic, parts, "read_uncommitted")
    uncommitted.poll_until("everything written", has_all(expected_visible))
    uncommitted.poll_for(1)
    late_written = [v for v in uncommitted.values() if v.startswith("after-")]
    check(not late_written, f"records sent after the fence are in the log: {late_written}")
    before = [v for v in uncommitted.values() if v.startswith("before-")]
    check(len(before) == 9, f"read_uncommitted read {before} of the fenced transactions")
    committed.close()
    uncommitted.close()


# --- 4. transaction timeout -----------------------------------------------------------------

def case_timeout():
    """transaction.timeout.ms=3000: the coordinator aborts the transaction it outlives,
    read_committed consumers move past it without its records, the producer cannot commit it,
    and the transactional id works again for a new producer."""
    topic = "timeout"
    create(topic, 1)
    producer = txn_producer("slow", **{"transaction.timeout.ms": 3000})
    producer.init_transactions(30)
    producer.begin_transaction()
    reports = Deliveries()
    produce_values(producer, topic, {0: [f"slow-{i}" for i in range(5)]}, reports)
    flush(producer, reports)
    written = time.time()
    plain = plain_producer()
    after = [f"after-{i}" for i in range(3)]
    produce_values(plain, topic, {0: after})
    flush(plain)

    committed = Reader(topic, 1, "read_committed")
    committed.poll_until("the records after the timed-out transaction", has_all(after),
                         timeout=20)
    waited = time.time() - written
    log(f"read_committed moved past the transaction {waited:.1f} s after its records")
    # The timeout counts from the transaction's first partition, a little before `written`.
    check(waited > 1, f"the transaction was aborted {waited:.1f} s after its records were "
          "written, before its 3 s timeout")
    check(waited < 3 + 7, f"the coordinator took {waited:.1f} s to abort a transaction with a "
          "3 s timeout")
    check(committed.values() == after, f"read_committed read {committed.values()}")
    answered = list_offsets(topic, 1, IsolationLevel.READ_COMMITTED)[0]
    check(answered == 9, f"ListOffsets read_committed {answered}, expected 9 (5 aborted, a "
          "marker, 3 after)")

    error = fenced_error(lambda: producer.commit_transaction(30), "commit after the timeout")
    if error.txn_requires_abort():
        try:
            producer.abort_transaction(30)
            log("abort after the timeout: ok")
        except KafkaException as e:
            log(f"abort after the timeout: {kafka_error(e)}")
    # The id is free again: a new producer commits with it.
    successor = txn_producer("slow")
    successor.init_transactions(30)
    successor.begin_transaction()
    produce_values(successor, topic, {0: ["next-0", "next-1"]})
    flush(successor)
    successor.commit_transaction(30)
    committed.poll_until("the successor's transaction", has_all(["next-0", "next-1"]))
    committed.poll_for(1)
    check(committed.values() == after + ["next-0", "next-1"],
          f"read_committed read {committed.values()}")
    committed.close()


# --- 5. coordinator failover ----------------------------------------------------------------

def run_transaction(producer, topic, values_by_partition, commit, counts, send_offsets=None):
    """begin, produce (and `send_offsets()`), commit or abort; retriable errors retried,
    abortable ones aborted and the transaction done again. `counts` tallies what happened."""
    deadline = time.time() + 60
    while True:
        check(time.time() < deadline, f"transaction {values_by_partition} not done in 60 s")
        producer.begin_transaction()
        try:
            write_transaction(producer, topic, values_by_partition, send_offsets)
            end_transaction(producer, commit, counts)
            return
        except KafkaException as e:
            error = kafka_error(e)
            check(error is not None and error.txn_requires_abort() and not error.fatal(),
                  f"transaction failed: {e!r}")
            log(f"abortable error {error.name()}: aborting and doing the transaction again")
            counts["redone"] += 1
            producer.abort_transaction(60)


def write_transaction(producer, topic, values_by_partition, send_offsets):
    reports = Deliveries()
    produce_values(producer, topic, values_by_partition, reports)
    producer.flush(30)
    if reports.errors:
        raise KafkaException(next(iter(reports.errors.values())))
    if send_offsets is not None:
        send_offsets()


def end_transaction(producer, commit, counts):
    while True:
        try:
            if commit:
                producer.commit_transaction(60)
            else:
                producer.abort_transaction(60)
            return
        except KafkaException as e:
            error = kafka_error(e)
            if error is not None and error.retriable() and not error.fatal():
                log(f"retriable error {error.name()} ending the transaction: retrying")
                counts["retried"] += 1
                continue
            raise


def case_failover():
    """On a three-node cluster: committed and aborted transactions, then one left open with its
    records written and its consumed offsets sent while the test kill -9s the transaction
    coordinator's broker (it prints `ready` and waits for a line on stdin); the commit goes
    through (retried, or aborted and done again), more transactions follow; read_committed
    sees exactly the committed ones, and the group exactly their offsets."""
    topic, parts, group = "failover", 3, "failover-group"
    create(topic, parts, replication=3, config={"min.insync.replicas": "2"})
    producer = txn_producer("failover-txn", **{"transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    member = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": group,
                       "isolation.level": "read_committed"})
    counts = Counter()

    def values(name):
        return named(name, parts, 10)

    def offsets(offset):
        """Sends offset OFFSET of partition 0 for the group."""
        return lambda: producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, offset)], member.consumer_group_metadata(), 60)

    def group_offset():
        return member.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
    run_transaction(producer, topic, values("commit-0"), True, counts, offsets(1))
    run_transaction(producer, topic, values("abort-0"), False, counts, offsets(101))
    check(group_offset() == 1, f"the group's offset {group_offset()}, expected 1")
    producer.begin_transaction()
    write_transaction(producer, topic, values("commit-1"), offsets(2))
    print("ready", flush=True)
    line = sys.stdin.readline()
    check(line.strip() == "go", f"expected go on stdin, read {line!r}")
    log("the coordinator was killed: committing")
    started = time.time()
    try:
        end_transaction(producer, True, counts)
    except KafkaException as e:
        error = kafka_error(e)
        check(error is not None and error.txn_requires_abort() and not error.fatal(),
              f"commit after the coordinator's kill failed: {e!r}")
        log(f"abortable error {error.name()}: aborting and doing the transaction again")
        counts["redone"] += 1
        producer.abort_transaction(60)
        run_transaction(producer, topic, values("commit-1"), True, counts, offsets(2))
    log(f"committed {time.time() - started:.1f} s after the kill")
    check(group_offset() == 2, f"the group's offset {group_offset()} after the commit, "
          "expected 2")
    # The rest with a new producer (InitProducerId at the new coordinator, fencing the old
    # one): librdkafka 2.16's send_offsets_to_transaction waits forever when its cached group
    # coordinator's broker was dropped from the metadata (librdkafka issue 5511, its timeout
    # unchecked: issue 5456), as a killed broker is once fenced.
    producer = txn_producer("failover-txn", **{"transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    run_transaction(producer, topic, values("commit-2"), True, counts, offsets(3))
    run_transaction(producer, topic, values("abort-2"), False, counts, offsets(103))
    log(f"retried {counts['retried']}, redone {counts['redone']}")
    check(group_offset() == 3, f"the group's offset {group_offset()}, expected 3")
    member.close()

    expected = [v for name in ("commit-0", "commit-1", "commit-2")
                for vs in values(name).values() for v in vs]
    committed = Reader(topic, parts, "read_committed")
    committed.poll_until("the committed transactions", has_all(expected), timeout=30)
    committed.poll_for(1.5)
    check_no_duplicates(committed.values(), "read_committed")
    check(sorted(committed.values()) == sorted(expected),
          f"read_committed read {len(committed.values())} records; unexpected: "
          f"{sorted(set(committed.values()) - set(expected))[:20]}")
    for p, got in committed.by_partition().items():
        in_order = [v for name in ("commit-0", "commit-1", "commit-2") for v in values(name)[p]]
        check(got == in_order, f"partition {p}: {got}")
    committed.close()


# --- 6. other clients' transactions, checked with librdkafka --------------------------------

def case_check_other():
    """ARGS: TOPIC PARTITIONS COMMITTED ABORTED GROUP OFFSET. read_committed reads each
    `commit-` record exactly once (COMMITTED of them) and no `abort-` record; read_uncommitted
    reads the ABORTED `abort-` records too (they were written); GROUP's committed offset of
    TOPIC partition 0 is OFFSET (sent in the committed transaction, a different one in the
    aborted)."""
    topic, parts, commits, aborts, group, offset = ARGS[0], int(ARGS[1]), int(ARGS[2]), \
        int(ARGS[3]), ARGS[4], int(ARGS[5])

    def read_all(isolation, count):
        reader = Reader(topic, parts, isolation)
        reader.poll_until(f"{count} records", lambda values: len(values) >= count)
        reader.poll_for(1.5)
        reader.close()
        return reader.values()
    committed = read_all("read_committed", commits)
    check_no_duplicates(committed, "read_committed")
    wrong = [v for v in committed if not v.startswith("commit-")]
    check(not wrong, f"read_committed read {wrong}")
    check(len(committed) == commits, f"read_committed read {len(committed)} records, expected "
          f"{commits}")
    uncommitted = read_all("read_uncommitted", commits + aborts)
    check_no_duplicates(uncommitted, "read_uncommitted")
    aborted = [v for v in uncommitted if v.startswith("abort-")]
    check(len(aborted) == aborts, f"read_uncommitted read {len(aborted)} aborted records, "
          f"expected {aborts}")
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": group})
    got = consumer.committed([TopicPartition(topic, 0)], timeout=20)[0].offset
    consumer.close()
    check(got == offset, f"group {group} committed {got}, expected {offset}")
    log(f"{topic}: {len(committed)} committed records, {len(aborted)} aborted, group offset "
        f"{got}")


def case_restart():
    """Transactions across kill -9 and restart of the (single) node, which prints `ready` and
    waits for a line on stdin meanwhile: before it, an aborted and a committed transaction,
    then two left open (records written) and another producer's records after them. After
    it, read_committed still stops at the first open transaction (the LSO) and filters the
    aborted one; the transaction whose producer stays idle is aborted at its 6 s timeout by
    the restarted coordinator; the other one commits."""
    topic = "restart"
    create(topic, 1)
    aborted = txn_producer("r-abort")
    aborted.init_transactions(30)
    aborted.begin_transaction()
    produce_values(aborted, topic, {0: ["aborted-0", "aborted-1", "aborted-2"]})
    flush(aborted)
    aborted.abort_transaction(30)
    committed = txn_producer("r-commit")
    committed.init_transactions(30)
    committed.begin_transaction()
    produce_values(committed, topic, {0: ["committed-0", "committed-1", "committed-2"]})
    flush(committed)
    committed.commit_transaction(30)
    idle = txn_producer("r-idle", **{"transaction.timeout.ms": 6000})
    idle.init_transactions(30)
    idle.begin_transaction()
    reports = Deliveries()
    # The idle transaction's timeout runs from its first produce: taken from before it, the
    # time since is never less than the transaction's age.
    idle_opened = time.time()
    produce_values(idle, topic, {0: ["idle-0", "idle-1", "idle-2"]}, reports)
    flush(idle, reports)
    first_open = reports.offsets["idle-0"][1]
    survivor = txn_producer("r-survivor", **{"transaction.timeout.ms": 60000})
    survivor.init_transactions(30)
    survivor.begin_transaction()
    produce_values(survivor, topic, {0: ["survivor-0", "survivor-1", "survivor-2"]})
    flush(survivor)
    plain = plain_producer()
    produce_values(plain, topic, {0: ["after-0", "after-1"]})
    flush(plain)
    lso = list_offsets(topic, 1, IsolationLevel.READ_COMMITTED)[0]
    check(lso == first_open, f"LSO before the restart {lso}, expected {first_open}")
    print("ready", flush=True)
    line = sys.stdin.readline()
    check(line.strip() == "go", f"expected go on stdin, read {line!r}")
    log(f"the node was restarted {time.time() - idle_opened:.1f} s after the idle transaction "
        "began")

    # Unless the idle transaction's timeout has passed already, the LSO is still its start.
    lso = list_offsets(topic, 1, IsolationLevel.READ_COMMITTED)[0]
    reader = Reader(topic, 1, "read_committed")
    if time.time() - idle_opened < 5:
        check(lso == first_open, f"LSO after the restart {lso}, expected {first_open} (the "
              "open transactions' first offset)")
        reader.poll_until("the committed transaction", has_all(["committed-0", "committed-1",
                                                                "committed-2"]))
        reader.poll_for(1)
        check(reader.values() == ["committed-0", "committed-1", "committed-2"],
              f"read_committed after the restart: {reader.values()}")
    # The idle one is aborted at its timeout; the LSO moves on to the survivor's first offset.
    survivor_first = first_open + 3
    deadline = time.time() + 20
    while (lso := list_offsets(topic, 1, IsolationLevel.READ_COMMITTED)[0]) != survivor_first:
        check(time.time() < deadline, f"LSO {lso} 20 s after the restart; the idle transaction "
              f"(6 s timeout) should have been aborted, moving it to {survivor_first}")
        time.sleep(0.2)
    log(f"the idle transaction was aborted {time.time() - idle_opened:.1f} s after it began")
    survivor.commit_transaction(60)
    expected = ["committed-0", "committed-1", "committed-2", "survivor-0", "survivor-1",
                "survivor-2", "after-0", "after-1"]
    reader.poll_until("the survivor's transaction and the records after it", has_all(expected))
    reader.poll_for(1)
    check(reader.values() == expected, f"read_committed read {reader.values()}, expected "
          f"{expected}")
    uncommitted = Reader(topic, 1, "read_uncommitted")
    everything = ["aborted-0", "aborted-1", "aborted-2"] + expected[:3] \
        + ["idle-0", "idle-1", "idle-2"] + expected[3:]
    uncommitted.poll_until("every record", has_all(everything))
    uncommitted.poll_for(0.5)
    check(uncommitted.values() == everything, f"read_uncommitted read {uncommitted.values()}")
    error = fenced_error(lambda: idle.commit_transaction(30), "the idle producer's commit")
    log(f"the idle producer's commit failed: {error.name()}")
    reader.close()
    uncommitted.close()


def case_random_interleave():
    """ARGS: SEED. Four transactional producers and a plain one write interleaved to two
    partitions, the transactional ones committing and aborting at random (the seed's choice).
    Along the way ListOffsets read_committed answers each partition's LSO (the first offset of
    its oldest open transaction, else the high watermark); at the end read_committed
    consumers (one fetching in small pieces) read exactly the committed and plain records in
    offset order, read_uncommitted everything."""
    import random
    seed = int(ARGS[0])
    rng = random.Random(seed)
    log(f"seed {seed}")
    topic, parts = "interleave", 2
    create(topic, parts)
    plain = plain_producer()
    producers = []
    for n in range(4):
        p = txn_producer(f"interleave-{n}")
        p.init_transactions(30)
        producers.append({"producer": p, "open": False, "records": [], "name": n, "txn": 0})
    visible = []  # (partition, offset, value) of committed and plain records
    written = []  # every record
    for step in range(60):
        choice = rng.random()
        if choice < 0.15:
            reports = Deliveries()
            values = [f"plain-{step}-{i}" for i in range(rng.randint(1, 3))]
            produce_values(plain, topic, {rng.randrange(parts): values}, reports)
            flush(plain, reports)
            records = [(p, o, v) for v, (p, o) in reports.offsets.items()]
            visible += records
            written += records
            continue
        state = rng.choice(producers)
        p = state["producer"]
        if not state["open"]:
            p.begin_transaction()
            state["open"], state["records"] = True, []
            state["txn"] += 1
        if choice < 0.75 or not state["records"]:
            reports = Deliveries()
            values = [f"t{state['name']}-{state['txn']}-{step}-{i}"
                      for i in range(rng.randint(1, 4))]
            produce_values(p, topic, {rng.randrange(parts): values}, reports)
            flush(p, reports)
            records = [(q, o, v) for v, (q, o) in reports.offsets.items()]
            state["records"] += records
            written += records
        elif choice < 0.9:
            p.commit_transaction(30)
            visible += state["records"]
            state["open"] = False
        else:
            p.abort_transaction(30)
            state["open"] = False
        if step % 10 == 9:
            check_lso(topic, parts, producers, written)
    for state in producers:
        if state["open"]:
            if rng.random() < 0.5:
                state["producer"].commit_transaction(30)
                visible += state["records"]
            else:
                state["producer"].abort_transaction(30)
            state["open"] = False
    check_lso(topic, parts, producers, written)

    def in_order(records):
        parts_values = {}
        for p, _, v in sorted(records):
            parts_values.setdefault(p, []).append(v)
        return parts_values
    expected, everything = in_order(visible), in_order(written)
    log(f"{len(written)} records written, {len(visible)} visible")
    for isolation, wanted in (("read_committed", expected), ("read_uncommitted", everything)):
        reader = Reader(topic, parts, isolation)
        reader.poll_until("every record", has_all([v for vs in wanted.values() for v in vs]))
        reader.poll_for(1)
        check(reader.by_partition() == wanted, f"seed {seed}: {isolation} read "
              f"{reader.by_partition()}, expected {wanted}")
        reader.close()
    # A read_committed consumer fetching 200 bytes of a partition at a time: each fetch's aborted
    # transactions must cover its own range.
    small = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "interleave-small",
                      "enable.auto.commit": False, "isolation.level": "read_committed",
                      "message.max.bytes": 1000, "fetch.max.bytes": 1000,
                      "max.partition.fetch.bytes": 200,
                      "fetch.wait.max.ms": 50})
    small.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    got = {}
    deadline = time.time() + 30
    settle = None
    while time.time() < deadline and (settle is None or time.time() < settle):
        for m in small.consume(num_messages=100, timeout=0.2):
            check(not m.error(), f"consume error {m.error()}")
            got.setdefault(m.partition(), []).append(m.value().decode())
        if settle is None and got == expected:
            settle = time.time() + 1
    small.close()
    check(got == expected, f"seed {seed}: read_committed in small fetches read {got}, "
          f"expected {expected}")


def check_lso(topic, parts, producers, written):
    """ListOffsets read_committed is each partition's LSO: the first offset an open transaction
    wrote there, else the high watermark. (EndTxn returns before the markers are written, so
    this waits for the answer to settle.)"""
    high = {p: 0 for p in range(parts)}
    for p, o, _ in written:
        high[p] = max(high[p], o + 1)
    deadline = time.time() + 10
    while True:
        expected = {}
        for p in range(parts):
            firsts = [o for s in producers if s["open"] for q, o, _ in s["records"] if q == p]
            expected[p] = min(firsts) if firsts else None
        answered = list_offsets(topic, parts, IsolationLevel.READ_COMMITTED)
        # With no open transaction, the LSO is the high watermark, past the last marker too.
        ok = all(answered[p] == expected[p] if expected[p] is not None
                 else answered[p] >= high[p] for p in range(parts))
        if ok:
            return
        check(time.time() < deadline, f"ListOffsets read_committed {answered}, expected the "
              f"LSO {expected} (None: no open transaction, at least {high})")
        time.sleep(0.1)


def case_hold_open():
    """ARGS: TOPIC TRANSACTIONAL_ID. Writes 5 records to partition 0 of TOPIC in a transaction
    and holds it open: prints `ready <producer's first offset>`, commits on a line on stdin."""
    topic, transactional_id = ARGS
    create(topic, 1)
    producer = txn_producer(transactional_id)
    producer.init_transactions(30)
    producer.begin_transaction()
    reports = Deliveries()
    produce_values(producer, topic, {0: [f"held-{i}" for i in range(5)]}, reports)
    flush(producer, reports)
    print(f"ready {min(o for _, o in reports.offsets.values())}", flush=True)
    line = sys.stdin.readline()
    check(line.strip() == "commit", f"expected commit on stdin, read {line!r}")
    producer.commit_transaction(30)


def case_create():
    """ARGS: TOPIC PARTITIONS [GROUP]. With GROUP, also waits until the group's coordinator
    answers: kafkajs 2.2.4 does not retry TxnOffsetCommit on COORDINATOR_LOAD_IN_PROGRESS (its
    eosManager looks for that name, its error table calls code 14 GROUP_LOAD_IN_PROGRESS), so
    on a fresh node, whose offsets topic is created by the first FindCoordinator, sendOffsets
    can fail while the coordinator loads."""
    create(ARGS[0], int(ARGS[1]))
    if len(ARGS) > 2:
        consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": ARGS[2]})
        committed = consumer.committed([TopicPartition(ARGS[0], 0)], timeout=30)
        consumer.close()
        log(f"group {ARGS[2]} coordinator answers: committed {committed[0].offset}")


CASES = {name[5:].replace("_", "-"): f for name, f in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    CASES[CASE]()
    print(f"{CASE}: ok", flush=True)
