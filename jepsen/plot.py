#!/usr/bin/env python3
"""Plots a jepsen/run history: acknowledged sends per second and send latency (invoke to ok)
over time, with every fault window shaded. In the txn workload a committed transaction's
sends count as acknowledged at its commit, and the latency is the transaction's (invoke to
committed).

usage: jepsen/plot.py HISTORY.jsonl OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    history_path, out = sys.argv[1], sys.argv[2]
    events = [json.loads(line) for line in open(history_path) if line.strip()]
    if not events:
        sys.exit("empty history")
    start = min(e["time_ns"] for e in events)
    t = lambda e: (e["time_ns"] - start) / 1e9  # noqa: E731
    invoked = {}
    acked_times, latencies = [], []
    faults, heals = [], []
    for e in events:
        if e["f"] == "send" and e["type"] == "invoke":
            invoked[(e["process"], e["key"], e["value"])] = t(e)
        elif e["f"] == "send" and e["type"] == "ok":
            began = invoked.get((e["process"], e["key"], e["value"]))
            acked_times.append(t(e))
            if began is not None:
                latencies.append((t(e), (t(e) - began) * 1e3))
        elif e["f"] == "txn" and e["type"] == "invoke":
            txn = e.get("txn", {})
            invoked[("txn", txn.get("transactional_id"), txn.get("seq"))] = t(e)
        elif e["f"] == "txn" and e["type"] == "ok":
            txn = e.get("txn", {})
            sends = [m for m in txn.get("mops", []) if m.get("f") == "send"]
            acked_times.extend([t(e)] * len(sends))
            began = invoked.get(("txn", txn.get("transactional_id"), txn.get("seq")))
            if began is not None:
                latencies.append((t(e), (t(e) - began) * 1e3))
        elif e["f"] == "nemesis":
            faults.append((t(e), e.get("value", "")))
        elif e["f"] == "heal":
            heals.append(t(e))
    end = max(t(e) for e in events)
    buckets = [0] * (int(end) + 1)
    for at in acked_times:
        buckets[int(at)] += 1
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 6))
    top.plot(range(len(buckets)), buckets, drawstyle="steps-post", color="tab:blue")
    top.set_ylabel("acknowledged sends / s")
    if latencies:
        bottom.scatter([x for x, _ in latencies], [y for _, y in latencies], s=1, color="tab:orange")
        bottom.set_yscale("log")
    bottom.set_ylabel("send latency (ms)")
    bottom.set_xlabel("seconds")
    for at, what in faults:
        healed = next((h for h in sorted(heals) if h >= at), end)
        for axis in (top, bottom):
            axis.axvspan(at, healed, color="tab:red", alpha=0.15)
        top.text(at, max(buckets or [1]) * 0.95, what.split(" (")[0], fontsize=7, rotation=90, va="top")
    fig.suptitle(f"{len(acked_times)} acknowledged sends, {len(faults)} faults (shaded)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main()
