#!/usr/bin/env python3
"""Where a process's CPU goes, by crate and by task, from `perf script`.

Reads the output of `perf script -F tid,ip,sym` (call graphs recorded with
`perf record --call-graph dwarf`) and puts each sample in one bucket: the
leaf-most frame whose function belongs to one of the crates or modules
below, so allocator, `memcpy` and other helper frames count for their
caller. Then, separately, the task the sample ran in, by the futures on
its stack. Prints both as shares of all samples.

    perf record -e cpu-clock -F 2999 --call-graph dwarf,16384 -p PID -o perf.data -- sleep 6
    perf script -i perf.data -F tid,ip,sym > perf.txt
    scripts/perf-buckets.py perf.txt [leaves per bucket]
"""
import collections
import sys

BUCKETS = [
    ("transport: tonic, hyper, h2, tower (both services)",
     ("tonic::", "h2::", "hyper::", "tower::", "hyper_util::", "http_body", "tokio_util::codec")),
    ("the official Pub/Sub client", ("google_cloud_pubsub::", "google_cloud_gax", "google_cloud_wkt")),
    ("prost's generated encode and decode", ("prost::", "gcloud_sdk::")),
    ("hotcount: store codec", ("hotcount::store::",)),
    ("hotcount: batch grouping and plan", ("hotcount::model::",)),
    ("hotcount: event parser", ("hotcount::event",)),
    ("hotcount: source and aggregator", ("hotcount::pipeline::source", "hotcount::pipeline::aggregator")),
    ("hotcount: flusher and acker", ("hotcount::pipeline::flusher", "hotcount::pipeline::acker")),
    ("hotcount: telemetry", ("hotcount::telemetry", "prometheus_client")),
    ("the write floor's own code (hotcount-null-consumer --commit-writes)",
     ("hotcount_null_consumer::",)),
    ("tokio", ("tokio::",)),
]
TASKS = [
    ("the Pub/Sub client's lease loop", "lease_loop"),
    ("source (stream read, accept)", "Source::run"),
    ("flusher", "Flusher<S,H>::run"),
    ("the write floor's stream task", "write_floor::run"),
    ("other Pub/Sub client tasks", "google_cloud_pubsub"),
    ("HTTP/2 connections", "hyper::proto::h2"),
    ("HTTP/2 connections", "h2::proto::connection"),
]
OTHER = "other (kernel, libc, runtime between tasks)"


def samples(path):
    """Each sample's frames, leaf first."""
    frames = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if line[:1] in ("\t", " ") and line.strip():
                parts = line.strip().split(" ", 1)
                if len(parts) == 2:
                    frames.append(parts[1])
                continue
            if frames:
                yield frames
            frames = []
    if frames:
        yield frames


def bucket(frames):
    for frame in frames:
        name = frame.lstrip("<&")
        for label, prefixes in BUCKETS:
            if name.startswith(prefixes):
                return label
    return OTHER


def task(frames):
    for label, marker in TASKS:
        if any(marker in f for f in frames):
            return label
    return OTHER


def main(args):
    if not args:
        print(__doc__.strip())
        return 2
    show = int(args[1]) if len(args) > 1 else 0
    buckets, tasks = collections.Counter(), collections.Counter()
    leaves = collections.defaultdict(collections.Counter)
    total = 0
    for frames in samples(args[0]):
        total += 1
        b = bucket(frames)
        buckets[b] += 1
        leaves[b][frames[0][:80]] += 1
        tasks[task(frames)] += 1
    if total == 0:
        print("no samples")
        return 1
    print(f"{total} samples; by bucket:")
    for label, n in buckets.most_common():
        print(f"{100 * n / total:5.1f} %  {label}")
        for leaf, k in leaves[label].most_common(show):
            print(f"            {100 * k / total:4.1f} %  {leaf}")
    print("by task:")
    for label, n in tasks.most_common():
        print(f"{100 * n / total:5.1f} %  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
