#!/usr/bin/env python3
"""Storage faults for the fault-injection suite.

  jepsen/faults.py drop-unsynced DATA_DIR JOURNAL

After a node was killed with kill -9, drops what a power cut would have dropped: every byte of
a segment (`<base offset>.log` under DATA_DIR) past the prefix its sync journal says is durable is
overwritten with zeros. The journal is written by `sluice server` when it runs with
SLUICE_FAULT_SYNC_JOURNAL=JOURNAL (src/log/fault.rs): lines `<bytes> <segment path>`, the last
one per path being the durable prefix. A segment the journal never mentions was never synced
and loses everything. Prints `dropped <bytes> bytes in <files> files`.
"""
import os
import sys


def durable_prefixes(journal):
    prefixes = {}
    try:
        with open(journal, "rb") as f:
            for line in f:
                text = line.decode(errors="replace").rstrip("\n")
                size, _, path = text.partition(" ")
                if path and size.isdigit():
                    prefixes[path] = int(size)
    except FileNotFoundError:
        pass
    return prefixes


def drop_unsynced(data_dir, journal):
    """Zeroes the unsynced tail of every segment; returns (bytes, files) dropped."""
    prefixes = durable_prefixes(journal)
    dropped_bytes, dropped_files = 0, 0
    zeros = bytes(1 << 16)
    for root, _, names in os.walk(data_dir):
        for name in names:
            # Segments only (`<20-digit base offset>.log`): RocksDB's WAL files of the
            # metadata quorum are `*.log` too, and RocksDB syncs them itself.
            if not (len(name) == 24 and name.endswith(".log") and name[:20].isdigit()):
                continue
            path = os.path.join(root, name)
            durable = prefixes.get(path, 0)
            size = os.path.getsize(path)
            # Bytes past the durable prefix that are not already zeros (preallocation).
            with open(path, "r+b") as f:
                f.seek(durable)
                position, lost = durable, 0
                while position < size:
                    chunk = f.read(min(len(zeros), size - position))
                    if not chunk:
                        break
                    lost += len(chunk) - chunk.count(0)
                    position += len(chunk)
                if lost:
                    f.seek(durable)
                    remaining = size - durable
                    while remaining > 0:
                        n = min(len(zeros), remaining)
                        f.write(zeros[:n])
                        remaining -= n
                    dropped_bytes += lost
                    dropped_files += 1
    return dropped_bytes, dropped_files


def main():
    if len(sys.argv) != 4 or sys.argv[1] != "drop-unsynced":
        sys.exit(__doc__)
    dropped_bytes, dropped_files = drop_unsynced(sys.argv[2], sys.argv[3])
    print(f"dropped {dropped_bytes} bytes in {dropped_files} files")


if __name__ == "__main__":
    main()
