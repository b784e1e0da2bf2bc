#!/usr/bin/env python3
"""Reads the group metadata records of `__consumer_offsets` through the Kafka protocol.

  jepsen/consumer_offsets.py BOOTSTRAP

prints one JSON line per group metadata record, in log order per partition of the topic. The
groups workload of jepsen/run puts these records in its history (`group-metadata` events) so
the checker can look for two members owning one partition in one generation: the clients
cannot see generations, the coordinator's records name them.

The formats are Kafka's, as src/group/records.rs writes them (read that file for the layout):
a key of version 2 is a group's metadata (versions 0 and 1 are committed offsets, skipped
here); its value, versions 0 to 3, holds the generation and every member with its assignment.
A member's assignment is the client's bytes, for the `consumer` protocol type Kafka's
ConsumerProtocolAssignment:

  version i16 | [topic string (i16 length) | [partition i32]] | user_data bytes (i32 length)

with arrays as an i32 count. Only records below the high watermark are read: what the
coordinator wrote but the in-sync replicas never held was never acknowledged and may be gone.
"""
import json
import struct
import sys
import time

OFFSETS_TOPIC = "__consumer_offsets"
GROUP_KEY_VERSION = 2
# Kafka 3.5+ writes flexible group metadata versions (4+); the broker under test does not.
GROUP_VALUE_VERSIONS = range(0, 4)


class Malformed(Exception):
    """A record that does not decode: a length runs past it, or a version is unknown."""


class Reader:
    """Big-endian fields of a record; every length is checked against what is left."""

    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        if n < 0 or self.at + n > len(self.data):
            raise Malformed(f"a length of {n} runs past the record at byte {self.at}")
        part = self.data[self.at:self.at + n]
        self.at += n
        return part

    def int16(self):
        return struct.unpack(">h", self.take(2))[0]

    def int32(self):
        return struct.unpack(">i", self.take(4))[0]

    def int64(self):
        return struct.unpack(">q", self.take(8))[0]

    def nullable_string(self):
        length = self.int16()
        if length < 0:
            return None
        try:
            return self.take(length).decode()
        except UnicodeDecodeError as e:
            raise Malformed(f"a string is not UTF-8: {e}") from None

    def string(self):
        value = self.nullable_string()
        if value is None:
            raise Malformed("a null string where one is required")
        return value

    def nullable_bytes(self):
        length = self.int32()
        return None if length < 0 else self.take(length)

    def count(self):
        """An array's count (a null array is empty); each element takes at least one byte."""
        count = self.int32()
        if count > len(self.data) - self.at:
            raise Malformed(f"an array count of {count} exceeds the record")
        return max(count, 0)


def group_of_key(data):
    """The group a key names when it is a group metadata key, else None."""
    reader = Reader(data)
    if reader.int16() != GROUP_KEY_VERSION:
        return None
    return reader.string()


def decode_assignment(data):
    """ConsumerProtocolAssignment bytes -> sorted `topic-partition` keys (the history's names).
    An empty assignment (a member the leader gave nothing) has no bytes at all."""
    if not data:
        return []
    reader = Reader(data)
    reader.int16()  # every version so far has the same fields
    keys = []
    for _ in range(reader.count()):
        topic = reader.string()
        keys.extend(f"{topic}-{reader.int32()}" for _ in range(reader.count()))
    reader.nullable_bytes()  # user_data
    return sorted(keys)


def decode_group_value(data):
    """A GroupMetadataValue (versions 0-3) -> its generation and members' assignments."""
    reader = Reader(data)
    version = reader.int16()
    if version not in GROUP_VALUE_VERSIONS:
        raise Malformed(f"group metadata value version {version} is not read")
    protocol_type = reader.string()
    value = {
        "protocol_type": protocol_type,
        "generation": reader.int32(),
        "protocol": reader.nullable_string(),
        "leader": reader.nullable_string(),
        "state_timestamp_ms": reader.int64() if version >= 2 else -1,
        "members": [],
    }
    for _ in range(reader.count()):
        member = {"member_id": reader.string()}
        if version >= 3:
            member["group_instance_id"] = reader.nullable_string()
        member["client_id"] = reader.string()
        member["client_host"] = reader.string()
        if version >= 1:
            reader.int32()  # rebalance timeout
        reader.int32()  # session timeout
        reader.nullable_bytes()  # subscription
        assignment = reader.nullable_bytes() or b""
        if protocol_type == "consumer":
            member["assignment"] = decode_assignment(assignment)
        else:
            member["assignment"] = []
            member["assignment_bytes"] = len(assignment)
        value["members"].append(member)
    return value


def group_metadata(connection, timeout=60):
    """Every group metadata record of the topic up to its high watermark, as dicts: `group`,
    `partition` and `offset` of the record, then the decoded value, or `deleted` (a
    tombstone), or `error` (a value that does not decode). Raises TimeoutError when the topic
    cannot be read to its end within `timeout` seconds. `connection`: confluent-kafka settings,
    bootstrap.servers and a login allowed to read the topic (jepsen/run's admin)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
    consumer = Consumer(dict(connection, **{"group.id": "jepsen-offsets-reader",
                                            "enable.auto.commit": False, "enable.partition.eof": True,
                                            "socket.timeout.ms": 5000}))
    try:
        deadline = time.time() + timeout
        topic = consumer.list_topics(OFFSETS_TOPIC, timeout=10).topics.get(OFFSETS_TOPIC)
        if topic is None or topic.error is not None:
            return []  # no group ever asked for a coordinator
        # The end of each partition, fixed now: the cluster is quiet when this runs.
        ends = {}
        for p in topic.partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, p), timeout=10)
            if high > 0:
                ends[p] = high
        consumer.assign([TopicPartition(OFFSETS_TOPIC, p, OFFSET_BEGINNING) for p in ends])
        records = []
        pending = set(ends)
        while pending:
            if time.time() > deadline:
                raise TimeoutError(f"{OFFSETS_TOPIC} partitions {sorted(pending)} not read to their end")
            for m in consumer.consume(num_messages=500, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                    continue
                if m.offset() + 1 >= ends.get(m.partition(), 0):
                    pending.discard(m.partition())
                record = decode_record(m.partition(), m.offset(), m.key(), m.value())
                if record is not None:
                    records.append(record)
        return records
    finally:
        consumer.close()


def decode_record(partition, offset, key, value):
    """One record of the topic -> its group metadata dict, or None for another kind."""
    try:
        group = group_of_key(key or b"")
    except Malformed as e:
        return {"group": None, "partition": partition, "offset": offset, "error": f"key: {e}"}
    if group is None:
        return None
    record = {"group": group, "partition": partition, "offset": offset}
    if value is None:
        record["deleted"] = True
        return record
    try:
        record.update(decode_group_value(value))
    except Malformed as e:
        record["error"] = str(e)
    return record


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for record in group_metadata({"bootstrap.servers": sys.argv[1]}):
        print(json.dumps(record))


if __name__ == "__main__":
    main()
