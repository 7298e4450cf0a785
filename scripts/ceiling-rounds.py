#!/usr/bin/env python3
"""Per-round CPU ratios from `hotcount-loadgen bench --ceiling` outputs.

Each round of `bench --ceiling` runs the null consumer, then hotcount, back
to back; on a VM whose speed drifts between runs, the ratio of the two in
one round is steadier than the ratio of two medians. This reads the round
lines of every output given, pairs each hotcount round with the null
consumer round of the same round, and prints, per label, workload and
build (the first, and the one of `--compare-bin` when given), the medians
of both CPUs, of the per-round ratios, and of events/s; with a compared
build, also the median per-round ratio of the two builds' CPU.

    scripts/ceiling-rounds.py before='runs/ceiling-A-*.txt' after='runs/ceiling-D-*.txt'
"""
import collections
import glob
import re
import statistics
import sys

ROUND = re.compile(
    r"^\s+(\w+) round (\d+) (null consumer \(receive \+ ack\)|batched \(compared build\)|batched|per-event): "
    r"([0-9.]+) events/s, ([0-9.]+) RPCs/1k, CPU ([0-9.]+) ms/1k(?:, .*)?, ([^,]+?)\s*$"
)


def rounds(paths):
    """((workload, build) -> [(null cpu, hotcount cpu, hotcount events/s, exact, round key)])."""
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
                    build = "compared build" if "compared" in who else "first build"
                    found[(case, build)].append(
                        (null[(case, n)], float(cpu), float(eps), verdict, (path, n))
                    )
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
        found = rounds(paths)
        for (case, build), rows in sorted(found.items()):
            med = statistics.median
            print(
                f"{label} {case} ({build}): {len(rows)} rounds, null {med(r[0] for r in rows):.2f} ms/1k, "
                f"hotcount {med(r[1] for r in rows):.2f} ms/1k, "
                f"x{med(r[1] / r[0] for r in rows if r[0] > 0):.2f} (median per-round ratio), "
                f"{med(r[2] for r in rows):.0f} events/s, "
                f"{'all EXACT' if all(r[3] == 'EXACT' for r in rows) else 'NOT ALL EXACT'}"
            )
            if build == "compared build":
                first = {r[4]: r[1] for r in found.get((case, "first build"), [])}
                pairs = [r[1] / first[r[4]] for r in rows if first.get(r[4])]
                if pairs:
                    print(
                        f"{label} {case}: compared build / first build, CPU per message: "
                        f"x{med(pairs):.3f} (median of {len(pairs)} per-round ratios)"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
