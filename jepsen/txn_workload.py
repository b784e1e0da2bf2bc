"""The transactional workload of jepsen/run (--workload txn): Jepsen's Kafka queue workload with
transactions, as Kingsbury ran it against Redpanda in 2022. The checker's side, with the
history format, is jepsen/checker/src/txn.rs.

- Topics: TOPICS, each with --partitions partitions; a key is `{topic}-{partition}`.
- Every client process has a transactional producer (its own transactional.id,
  enable.idempotence, acks=all) and a read_committed consumer.
  - `assign` clients assign every partition of every topic from offset 0; a transaction is 1
    to MOPS_MAX micro-ops, each a send of a unique value to a random key or a poll.
  - `group` clients (consume-transform-produce) are members of GROUP subscribed to the input
    topics; a transaction is one poll, a derived value sent to a random partition of the
    output topic per record read, and the group's offsets past what was read
    (send_offsets_to_transaction). After an abort the consumer is rewound to the group's
    committed offsets.
  About ABORT_PROBABILITY of the transactions are aborted on purpose.
- Outcomes: `ok` committed; `fail` never asked to commit (aborted, or an error before
  commit_transaction); `info` the commit was asked for and did not succeed. A client whose
  commit ended unknown, or whose producer hit a fatal error (fenced), exits; the harness
  replaces a client that crashed with a new process, with a new transactional.id or (half of
  the time) the old one, which fences what the old process left open.
- Faults on the clients while the nemesis runs: a client crashes (os._exit) at a random point
  of a transaction (mid-transaction, during the commit, right after it), the harness kill -9s
  one now and then, and starts a second process with a live client's transactional.id (the
  old one is then a zombie its successor fences).
- Final reads: a read_committed consumer takes every partition to its end: the end it saw
  (end of partition) at or past the high watermark, so no transaction is left open there.
"""
import json
import os
import random
import threading
import time

TOPICS = ("txn-a", "txn-b", "txn-out")
INPUT_TOPICS = ("txn-a", "txn-b")
OUTPUT_TOPIC = "txn-out"
GROUP = "jepsen-txn"
# A transaction of an assign client: 1 to MOPS_MAX micro-ops, each a send with SEND_PROBABILITY.
MOPS_MAX = 4
SEND_PROBABILITY = 0.6
ABORT_PROBABILITY = 0.2
# A poll returns at most this many records, waiting at most this long.
POLL_RECORDS_MAX = 100
POLL_TIMEOUT_S = 0.05
# A consume-transform-produce transaction reads at most this many records.
CTP_RECORDS_MAX = 20
CTP_POLL_TIMEOUT_S = 0.2
# transaction.timeout.ms: a transaction left open by a crashed client blocks read_committed
# readers (the last stable offset) until the coordinator aborts it this long after it began.
TRANSACTION_TIMEOUT_MS = 10000
# How long a client waits for init, commit or abort (retrying retriable errors) before giving up.
CALL_TIMEOUT_S = 10.0
OPERATION_DEADLINE_S = 30.0
# A client lives this long on average before it crashes, while the faults last.
CLIENT_LIFETIME_MEAN_S = 45.0
CRASH_POINTS = ("mid-transaction", "during-commit", "after-commit")
# Exit codes of a client: a crash the harness replaces, and a fenced producer.
EXIT_CRASH = 1
EXIT_FENCED = 3


def now_ns():
    return time.monotonic_ns()


def keys(partitions, topics=TOPICS):
    return [(topic, p) for topic in topics for p in range(partitions)]


def key_name(topic, partition):
    return f"{topic}-{partition}"


class EventLog:
    """One event file per client process; each line is written by one write(2), so a crash
    (os._exit, kill -9) loses whole lines only."""

    def __init__(self, path, process):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.process = process
        self.lock = threading.Lock()

    def event(self, kind, f, time_ns=None, **fields):
        record = {"time_ns": time_ns or now_ns(), "process": self.process, "type": kind, "f": f}
        record.update(fields)
        line = (json.dumps(record) + "\n").encode()
        with self.lock:
            os.write(self.fd, line)

    def close(self):
        os.close(self.fd)


class Fenced(Exception):
    """The producer hit a fatal error (another producer with its transactional.id fenced it)."""


class Unknown(Exception):
    """A commit whose outcome the client cannot learn."""


def describe(error):
    return f"{error.name()}: {error.str()}"


class TxnClient:
    """A transactional producer and a read_committed consumer, running transactions."""

    def __init__(self, connection, partitions, events_dir, process, transactional_id, mode, stop_at,
                 crash_by, seed):
        from confluent_kafka import Producer
        self.connection, self.partitions, self.process = connection, partitions, process
        self.transactional_id, self.mode, self.stop_at = transactional_id, mode, stop_at
        self.rng = random.Random(seed)
        self.log = EventLog(os.path.join(events_dir, f"t{process}.jsonl"), process)
        self.producer = Producer(dict(connection, **{
            "transactional.id": transactional_id,
            "enable.idempotence": True, "acks": "all", "linger.ms": 2,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "message.timeout.ms": TRANSACTION_TIMEOUT_MS, "socket.timeout.ms": 5000,
            "client.id": f"jepsen-txn-{process}"}))
        self.counter = 0
        self.seq = 0
        lifetime = self.rng.expovariate(1 / CLIENT_LIFETIME_MEAN_S)
        self.crash_at = time.time() + lifetime if time.time() + lifetime < crash_by else None
        self.crash_point = self.rng.choice(CRASH_POINTS)
        self.consumer = None

    # -- lifecycle ------------------------------------------------------------------------

    def run(self):
        try:
            self.init_transactions()
            self.consumer = self.make_consumer()
            while time.time() < self.stop_at:
                if self.mode == "assign":
                    self.assign_transaction()
                else:
                    self.consume_transform_produce()
        except Fenced as e:
            self.log.event("info", "txn-fenced", value=str(e))
            self.exit(EXIT_FENCED)
        except Unknown as e:
            self.log.event("info", "txn-crash", value=f"gave up after an unknown commit: {e}")
            self.exit(EXIT_CRASH)
        if self.consumer is not None:
            self.consumer.close()
        self.log.close()

    def exit(self, code):
        os._exit(code)

    def crash_due(self, point):
        if self.crash_at is not None and time.time() >= self.crash_at and self.crash_point == point:
            self.log.event("info", "txn-crash", value=f"os._exit {point}")
            os._exit(EXIT_CRASH)

    def init_transactions(self):
        from confluent_kafka import KafkaException
        deadline = time.time() + OPERATION_DEADLINE_S
        while True:
            try:
                self.producer.init_transactions(CALL_TIMEOUT_S)
                self.log.event("ok", "txn-init", value=self.transactional_id)
                return
            except KafkaException as e:
                error = e.args[0]
                if error.fatal():
                    raise Fenced(f"init_transactions: {describe(error)}") from None
                if time.time() > min(deadline, self.stop_at):
                    self.log.event("fail", "txn-init", value=self.transactional_id, error=describe(error))
                    self.exit(EXIT_CRASH)

    def make_consumer(self):
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        config = dict(self.connection, **{"isolation.level": "read_committed",
                                          "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                          "client.id": f"jepsen-txn-{self.process}",
                                          "socket.timeout.ms": 5000})
        if self.mode == "assign":
            consumer = Consumer(dict(config, **{"group.id": f"jepsen-txn-reader-{self.process}"}))
            consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in keys(self.partitions)])
            self.log.event("ok", "assign", value="every partition from the beginning")
            return consumer
        consumer = Consumer(dict(config, **{"group.id": GROUP, "session.timeout.ms": 6000,
                                            "heartbeat.interval.ms": 500, "max.poll.interval.ms": 20000}))

        def on_assign(_, tps):
            # The consumer starts again at the group's committed offsets (or the beginning).
            self.log.event("ok", "assign", partitions=[key_name(tp.topic, tp.partition) for tp in tps],
                           value="rebalance")

        consumer.subscribe(list(INPUT_TOPICS), on_assign=on_assign)
        return consumer

    # -- transactions ---------------------------------------------------------------------

    def next_value(self):
        self.counter += 1
        return self.process * 1_000_000_000 + self.counter

    def txn(self, mops, **extra):
        return dict({"transactional_id": self.transactional_id, "seq": self.seq, "mops": mops}, **extra)

    def poll(self, count, timeout):
        """One poll of the consumer: the records it returned, per key, and when it returned."""
        reads = {}
        for m in self.consumer.consume(num_messages=count, timeout=timeout):
            if m.error():
                if m.error().fatal():
                    self.log.event("info", "txn-crash", value=f"fatal consumer error: {m.error()}")
                    self.exit(EXIT_CRASH)
                continue
            reads.setdefault(key_name(m.topic(), m.partition()), []).append([m.offset(), int(m.value())])
        return reads, now_ns()

    def send(self, mop):
        """Produces a send micro-op; its delivery report fills in the offset."""
        topic, partition = mop["key"].rsplit("-", 1)

        def delivered(err, msg):
            if err is None:
                mop["offset"] = msg.offset()
            else:
                mop["error"] = str(err)

        mop["invoked_ns"] = now_ns()
        self.producer.produce(topic, str(mop["value"]).encode(), partition=int(partition),
                              on_delivery=delivered)
        self.producer.poll(0)

    def assign_transaction(self):
        """A transaction of random sends and polls by an assign client."""
        from confluent_kafka import KafkaException
        self.seq += 1
        mops = []
        for _ in range(self.rng.randint(1, MOPS_MAX)):
            if self.rng.random() < SEND_PROBABILITY:
                topic, partition = self.rng.choice(keys(self.partitions))
                mops.append({"f": "send", "key": key_name(topic, partition), "value": self.next_value(),
                             "offset": None})
            else:
                mops.append({"f": "poll"})
        self.log.event("invoke", "txn", txn=self.txn([dict(m) for m in mops]))
        try:
            self.producer.begin_transaction()
            for mop in mops:
                if mop["f"] == "send":
                    self.send(mop)
                else:
                    mop["reads"], mop["completed_ns"] = self.poll(POLL_RECORDS_MAX, POLL_TIMEOUT_S)
        except (KafkaException, BufferError) as e:
            self.fail_if_fatal(e, mops)
            self.abort(mops, f"before commit: {e}")
            return
        self.crash_due("mid-transaction")
        if self.rng.random() < ABORT_PROBABILITY:
            self.abort(mops, None)
        else:
            self.commit(mops)

    def consume_transform_produce(self):
        """Reads a batch from the group, sends a derived value per record, and commits the
        group's offsets past the batch in the same transaction."""
        from confluent_kafka import KafkaException, TopicPartition
        reads, completed_ns = self.poll(CTP_RECORDS_MAX, CTP_POLL_TIMEOUT_S)
        if not reads:
            return
        self.seq += 1
        mops = [{"f": "poll", "reads": reads, "completed_ns": completed_ns}]
        for records in reads.values():
            for _ in records:
                partition = self.rng.randrange(self.partitions)
                mops.append({"f": "send", "key": key_name(OUTPUT_TOPIC, partition), "value": self.next_value(),
                             "offset": None})
        self.log.event("invoke", "txn", txn=self.txn([dict(m) for m in mops]))
        try:
            self.producer.begin_transaction()
            for mop in mops[1:]:
                self.send(mop)
            positions = self.consumer.position(self.consumer.assignment())
            offsets = {key_name(tp.topic, tp.partition): tp.offset for tp in positions if tp.offset >= 0}
            mops.append({"f": "send-offsets", "group": GROUP, "offsets": offsets})
            self.producer.send_offsets_to_transaction(
                [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in positions if tp.offset >= 0],
                self.consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
        except (KafkaException, BufferError) as e:
            self.fail_if_fatal(e, mops)
            self.abort(mops, f"before commit: {e}")
            self.rewind()
            return
        self.crash_due("mid-transaction")
        if self.rng.random() < ABORT_PROBABILITY:
            self.abort(mops, None)
            self.rewind()
        else:
            self.commit(mops)

    def rewind(self):
        """After an abort: back to the group's committed offsets, which the aborted
        transaction did not move."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition
        assignment = self.consumer.assignment()
        try:
            committed = self.consumer.committed(assignment, timeout=CALL_TIMEOUT_S) if assignment else []
            for tp in committed:
                offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        except KafkaException as e:
            self.log.event("info", "txn-crash", value=f"could not rewind after an abort: {e}")
            self.exit(EXIT_CRASH)
        self.log.event("ok", "assign", partitions=[key_name(tp.topic, tp.partition) for tp in assignment],
                       value="rewind after abort")

    def flush(self):
        """Waits for the delivery reports (the sends' offsets); a fenced producer raises."""
        from confluent_kafka import KafkaException
        try:
            self.producer.flush(CALL_TIMEOUT_S)
        except KafkaException as e:
            if e.args[0].fatal():
                raise Fenced(f"flush: {describe(e.args[0])}") from None

    def fail_if_fatal(self, error, mops):
        """A fatal error before the commit (fenced by a successor): the transaction never
        commits and the producer can neither abort nor flush. Calling flush() then made
        confluent-kafka raise `SystemError: <class 'str'> returned a result with an exception
        set` (a crash with the transaction unlogged) instead of the fatal error."""
        from confluent_kafka import KafkaException
        if isinstance(error, KafkaException) and error.args[0].fatal():
            self.log.event("fail", "txn", txn=self.txn(mops, error=f"before commit: {describe(error.args[0])}"))
            raise Fenced(f"before commit: {describe(error.args[0])}") from None

    def abort(self, mops, error):
        """Aborts: the commit was never asked for, so the transaction did not commit whatever
        becomes of the abort."""
        from confluent_kafka import KafkaException
        txn = self.txn(mops, error=error or "aborted on purpose")
        try:
            self.flush()
        except Fenced:
            self.log.event("fail", "txn", txn=txn)
            raise
        deadline = time.time() + OPERATION_DEADLINE_S
        while True:
            try:
                self.producer.abort_transaction(CALL_TIMEOUT_S)
                self.log.event("fail", "txn", txn=txn)
                return
            except KafkaException as e:
                failure = e.args[0]
                if failure.fatal():
                    self.log.event("fail", "txn", txn=dict(txn, error=f"abort: {describe(failure)}"))
                    raise Fenced(f"abort_transaction: {describe(failure)}") from None
                if not failure.retriable() or time.time() > deadline:
                    self.log.event("fail", "txn", txn=dict(txn, error=f"abort: {describe(failure)}"))
                    self.log.event("info", "txn-crash", value="the producer could not abort")
                    self.exit(EXIT_CRASH)

    def commit(self, mops):
        """Commits; `ok` when the commit succeeded, `info` when it did not (it may have)."""
        from confluent_kafka import KafkaException
        try:
            self.flush()
        except Fenced:
            self.log.event("fail", "txn", txn=self.txn(mops, error="fenced before the commit"))
            raise
        commit_ns = now_ns()
        # The sends (with their offsets) and the group offsets: with the polls of the
        # invocation, all a crash during the commit would otherwise take.
        writes = [dict(m) for m in mops if m["f"] in ("send", "send-offsets")]
        self.log.event("invoke", "txn-commit", time_ns=commit_ns, txn=self.txn(writes, commit_ns=commit_ns))
        if self.crash_point == "during-commit" and self.crash_at is not None and time.time() >= self.crash_at:
            delay = self.rng.uniform(0, 0.05)

            def crash():
                self.log.event("info", "txn-crash", value=f"os._exit during the commit ({delay * 1000:.0f} ms in)")
                os._exit(EXIT_CRASH)
            threading.Timer(delay, crash).start()
        deadline = time.time() + OPERATION_DEADLINE_S
        while True:
            try:
                self.producer.commit_transaction(CALL_TIMEOUT_S)
                break
            except KafkaException as e:
                failure = e.args[0]
                txn = self.txn(mops, commit_ns=commit_ns, error=f"commit: {describe(failure)}")
                if failure.retriable() and time.time() < deadline:
                    continue
                self.log.event("info", "txn", txn=txn)
                if failure.fatal():
                    raise Fenced(f"commit_transaction: {describe(failure)}") from None
                raise Unknown(describe(failure)) from None
        self.crash_due("after-commit")
        self.log.event("ok", "txn", txn=self.txn(mops, commit_ns=commit_ns))


def client_main(connection, partitions, events_dir, process, transactional_id, mode, stop_at, crash_by, seed):
    """`connection`: the client's confluent-kafka settings, bootstrap.servers and its login."""
    TxnClient(connection, partitions, events_dir, process, transactional_id, mode, stop_at, crash_by, seed).run()


def final_reader_main(connection, partitions, events_dir, process, deadline):
    """Reads every partition from its start with read_committed until it is at its end: an end
    of partition at or past the high watermark (an end below it means a transaction is still
    open there, holding the last stable offset back)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
    log = EventLog(os.path.join(events_dir, f"f{process}.jsonl"), process)
    consumer = Consumer(dict(connection, **{"group.id": f"jepsen-txn-final-{process}",
                                            "isolation.level": "read_committed", "enable.auto.commit": False,
                                            "enable.partition.eof": True, "auto.offset.reset": "earliest"}))
    tps = [TopicPartition(t, p, OFFSET_BEGINNING) for t, p in keys(partitions)]
    consumer.assign(tps)
    log.event("ok", "assign", value="final")
    end_seen = {}  # key -> the offset an end-of-partition was last seen at
    done = False
    last_check = 0.0
    while time.time() < deadline and not done:
        reads = {}
        for m in consumer.consume(num_messages=1000, timeout=0.5):
            key = key_name(m.topic(), m.partition())
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    end_seen[key] = m.offset()
                continue
            end_seen.pop(key, None)
            reads.setdefault(key, []).append([m.offset(), int(m.value())])
        if reads:
            log.event("ok", "poll", reads=reads)
        if len(end_seen) == len(tps) and time.time() - last_check > 1.0:
            last_check = time.time()
            ends = {}
            for tp in tps:
                _, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=5,
                                                         cached=False)
                ends[key_name(tp.topic, tp.partition)] = high
            done = all(end_seen[k] >= high for k, high in ends.items())
            if not done:
                behind = {k: [end_seen[k], high] for k, high in ends.items() if end_seen[k] < high}
                print(f"  final reads: at the end of every partition, below the high watermark in {behind}",
                      flush=True)
    consumer.close()
    log.close()
    if not done:
        raise SystemExit(f"final reads reached the end of only {sorted(end_seen)} "
                         f"of {len(tps)} partitions (or not the high watermark)")


class TxnClients:
    """The workload's client processes, one per slot. While the run lasts, a crashed client is
    replaced by a new process with a new transactional.id or its predecessor's; while the
    faults last, the harness kill -9s a random client now and then, and starts a second
    process with a live client's transactional.id (which fences the live one)."""

    KILL_MEAN_INTERVAL_S = 30.0
    FENCE_MEAN_INTERVAL_S = 30.0

    def __init__(self, spawn, modes, stop_at, crash_by, rng, log):
        self.spawn, self.stop_at, self.crash_by, self.log = spawn, stop_at, crash_by, log
        self.ids = 0
        self.slots = [{"mode": mode, "transactional_id": self.new_id(), "proc": None} for mode in modes]
        self.zombies = []
        self.replaced = self.killed = self.fenced = 0
        for slot in self.slots:
            self.start(slot, rng)

    def new_id(self):
        self.ids += 1
        return f"jepsen-txn-{self.ids}"

    def start(self, slot, rng):
        slot["proc"] = self.spawn(client_main, slot["transactional_id"], slot["mode"], self.stop_at,
                                  self.crash_by, rng.randrange(1 << 30))

    def transactional_ids(self):
        return [s["transactional_id"] for s in self.slots if s["proc"] is not None and s["proc"].is_alive()]

    def supervise(self, rng):
        next_kill = time.time() + rng.expovariate(1 / self.KILL_MEAN_INTERVAL_S)
        next_fence = time.time() + rng.expovariate(1 / self.FENCE_MEAN_INTERVAL_S)
        while time.time() < self.stop_at - 1:
            for slot in self.slots:
                p = slot["proc"]
                if not p.is_alive() and p.exitcode not in (0, None):
                    if rng.random() < 0.5:
                        slot["transactional_id"] = self.new_id()
                    self.start(slot, rng)
                    self.replaced += 1
            faults_on = time.time() < self.crash_by
            if time.time() >= next_kill:
                next_kill = time.time() + rng.expovariate(1 / self.KILL_MEAN_INTERVAL_S)
                alive = [s for s in self.slots if s["proc"].is_alive()]
                if alive and faults_on:
                    victim = rng.choice(alive)["proc"]
                    self.log.event("info", "txn-crash", process=victim.number, value="kill -9 by the harness")
                    victim.kill()
                    self.killed += 1
            if time.time() >= next_fence:
                next_fence = time.time() + rng.expovariate(1 / self.FENCE_MEAN_INTERVAL_S)
                alive = [s for s in self.slots if s["proc"].is_alive()]
                if alive and faults_on:
                    slot = rng.choice(alive)
                    zombie = slot["proc"]
                    self.zombies.append(zombie)
                    self.start(slot, rng)
                    self.log.event("info", "txn-fence", value=f"process {slot['proc'].number} starts with "
                                   f"{slot['transactional_id']}, fencing process {zombie.number}")
                    self.fenced += 1
            time.sleep(0.5)

    def join(self, timeout):
        for p in [s["proc"] for s in self.slots] + self.zombies:
            p.join(timeout)
            if p.is_alive():
                print(f"  client process {p.number} did not end: killed", flush=True)
                p.kill()
                p.join()
