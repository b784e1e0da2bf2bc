#!/usr/bin/env python3
"""Lists the record batches of a partition's segment files with their producer fields.

Usage: jepsen/batches.py DATA_DIR TOPIC-PARTITION [FROM_OFFSET [TO_OFFSET]]

For a duplicate the checker reports, this shows whether the two copies came from one producer
epoch and sequence (a broker that failed to recognise a retry) or from two (a client that
re-sent records under a bumped epoch, which no broker can recognise).
"""

import glob
import os
import struct
import sys

HEADER = struct.Struct(">qiibIhiqqqhii")  # up to records count: 61 bytes


def batches(path):
    with open(path, "rb") as f:
        data = f.read()
    position = 0
    while position + HEADER.size <= len(data):
        (base_offset, length, leader_epoch, magic, _crc, attributes, last_delta, _base_ts, _max_ts,
         producer_id, producer_epoch, base_sequence, count) = HEADER.unpack_from(data, position)
        if length <= 0 or magic != 2:
            break  # preallocated zeros or a torn tail
        yield {
            "base_offset": base_offset,
            "last_offset": base_offset + last_delta,
            "leader_epoch": leader_epoch,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "base_sequence": base_sequence,
            "records": count,
            "compressed": attributes & 7,
        }
        position += 12 + length


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    directory = os.path.join(sys.argv[1], sys.argv[2])
    low = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    high = int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 62
    for path in sorted(glob.glob(os.path.join(directory, "*.log"))):
        for batch in batches(path):
            if batch["last_offset"] >= low and batch["base_offset"] <= high:
                print("{base_offset}..{last_offset} leader_epoch={leader_epoch} producer={producer_id} "
                      "epoch={producer_epoch} sequence={base_sequence} records={records}".format(**batch))


if __name__ == "__main__":
    main()
