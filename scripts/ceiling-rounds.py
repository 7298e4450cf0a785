#!/usr/bin/env python3
"""Per-round CPU ratios from `hotcount-loadgen bench --ceiling` outputs.

Each round of `bench --ceiling` runs the null consumer, then hotcount, back
to back; on a VM whose speed drifts between runs, the ratio of the two in
one round is steadier than the ratio of two medians. This reads the round
lines of every output given, pairs each hotcount round with the null
consumer round before it, and prints, per label and workload, the medians
of both CPUs, of the per-round ratios, and of events/s.

    scripts/ceiling-rounds.py before='runs/ceiling-A-*.txt' after='runs/ceiling-D-*.txt'
"""
import collections
import glob
import re
import statistics
import sys

ROUND = re.compile(
    r"^\s+(\w+) round (\d+) (null consumer \(receive \+ ack\)|batched|per-event): "
    r"([0-9.]+) events/s, ([0-9.]+) RPCs/1k, CPU ([0-9.]+) ms/1k, (\S+)"
)


def rounds(paths):
    """(workload -> [(null cpu, hotcount cpu, hotcount events/s, exact)])."""
    found = collections.defaultdict(list)
    for path in paths:
        null = {}
        with open(path, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                m = ROUND.match(line)
                if not m:
                    continue
                case, n, who, eps, _rpcs, cpu, verdict = m.groups()
                if who.startswith("null"):
                    null[(case, n)] = float(cpu)
                elif (case, n) in null:
                    found[case].append((null.pop((case, n)), float(cpu), float(eps), verdict))
    return found


def main(args):
    if not args:
        print(__doc__.strip())
        return 2
    for arg in args:
        label, pattern = arg.split("=", 1)
        paths = sorted(glob.glob(pattern))
        if not paths:
            print(f"{label}: no file matches {pattern}")
            return 1
        for case, rows in sorted(rounds(paths).items()):
            med = statistics.median
            print(
                f"{label} {case}: {len(rows)} rounds, null {med(r[0] for r in rows):.2f} ms/1k, "
                f"hotcount {med(r[1] for r in rows):.2f} ms/1k, "
                f"x{med(r[1] / r[0] for r in rows if r[0] > 0):.2f} (median per-round ratio), "
                f"{med(r[2] for r in rows):.0f} events/s, "
                f"{'all EXACT' if all(r[3] == 'EXACT' for r in rows) else 'NOT ALL EXACT'}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
