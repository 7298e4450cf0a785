//! How the report shows its measurements: the percentile and throughput
//! charts, and the Markdown text that links them.
//!
//! Invariant: pure; every figure comes from the [`Measurements`] and the
//! [`RunInfo`] handed in.

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use hdrhistogram::Histogram;

use super::{percentiles, Measurements, RunInfo, Throughput};
use crate::chart::LineChart;
use crate::procfs::Machine;

/// The percentile curve: x = log10(1 / (1 - q)) (0 = p0, 1 = p90, 2 = p99, ...),
/// y = latency in ms; x runs as far as the sample count resolves (at most 5).
pub fn percentile_chart(h: &Histogram<u64>) -> LineChart {
    let x_max = (h.len().max(10) as f64).log10().clamp(1.0, 5.0);
    let steps = 400;
    let mut points = Vec::with_capacity(steps + 1);
    if !h.is_empty() {
        for i in 0..=steps {
            let x = x_max * i as f64 / steps as f64;
            let q = 1.0 - 10f64.powf(-x);
            points.push((x, h.value_at_quantile(q) as f64 / 1_000.0));
        }
    }
    let labels = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"];
    let x_ticks = labels
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as f64 <= x_max + 1e-9)
        .map(|(i, l)| (i as f64, (*l).to_string()))
        .collect();
    LineChart {
        width: 800,
        height: 450,
        title: "Publish -> commit latency by percentile".into(),
        x_label: "percentile (log scale of 1 / (1 - q))".into(),
        y_label: "latency (ms)".into(),
        points,
        x_range: (0.0, x_max),
        x_ticks,
        y_unit: String::new(),
    }
}

/// Memberships per second over time; x in seconds from the first commit.
pub fn throughput_chart(t: &Throughput) -> LineChart {
    let width = t.bucket_secs.max(1) as f64;
    let mut points = Vec::with_capacity(t.buckets.len() * 2);
    let start = t.buckets.first().map(|b| b.0).unwrap_or(0);
    for (s, n) in &t.buckets {
        let x = (s - start) as f64;
        let rate = *n as f64 / width;
        points.push((x, rate));
        points.push((x + width, rate));
    }
    let span = (t.buckets.len() as f64 * width).max(1.0);
    let (step, _) = crate::chart::nice_scale(span);
    let mut x_ticks = Vec::new();
    let mut x = 0.0;
    while x <= span + 1e-9 {
        x_ticks.push((x, crate::chart::format_tick(x, step)));
        x += step;
    }
    LineChart {
        width: 800,
        height: 320,
        title: "Memberships committed per second".into(),
        x_label: "time from the first commit (s)".into(),
        y_label: "memberships / s".into(),
        points,
        x_range: (0.0, span),
        x_ticks,
        y_unit: String::new(),
    }
}

/// The Markdown report: where it was made, how, the latency and the
/// throughput sections.
pub fn markdown(m: &Measurements, info: &RunInfo, machine: &Machine, now: DateTime<Utc>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# hotcount load report\n");
    let _ = writeln!(
        s,
        "Generated {} by `hotcount-loadgen report`.\n",
        now.to_rfc3339_opts(SecondsFormat::Secs, true)
    );
    machine_section(&mut s, machine);
    settings_section(&mut s, info);
    latency_section(&mut s, m);
    throughput_section(&mut s, &m.throughput);
    s
}

fn machine_section(s: &mut String, machine: &Machine) {
    let _ = writeln!(s, "## Machine\n\n| | |\n|---|---|");
    let _ = writeln!(s, "| CPU | {} |", machine.cpu);
    let _ = writeln!(s, "| Cores | {} |", machine.cores);
    let _ = writeln!(
        s,
        "| Memory | {:.1} GiB |",
        machine.memory_bytes as f64 / (1u64 << 30) as f64
    );
    let _ = writeln!(s, "| OS | {} |\n", machine.os);
}

fn settings_section(s: &mut String, info: &RunInfo) {
    let _ = writeln!(s, "## Command\n\n```\n{}\n```\n", info.command_line);
    let _ = writeln!(s, "## Settings\n\n| setting | value |\n|---|---|");
    for (k, v) in &info.settings {
        let _ = writeln!(s, "| {k} | `{v}` |");
    }
    let Some(w) = &info.workload else {
        return;
    };
    let _ = writeln!(
        s,
        "\nWorkload (from the truth file):\n\n| setting | value |\n|---|---|"
    );
    for (k, v) in [
        ("events", w.events.to_string()),
        ("posts", w.posts.to_string()),
        ("users", w.users.to_string()),
        ("zipf exponent", w.zipf_exponent.to_string()),
        ("unlike fraction", w.unlike_fraction.to_string()),
        ("duplicate fraction", w.duplicate_fraction.to_string()),
        ("poison fraction", w.poison_fraction.to_string()),
        ("seed", w.seed.to_string()),
    ] {
        let _ = writeln!(s, "| {k} | {v} |");
    }
}

fn latency_section(s: &mut String, m: &Measurements) {
    let p = percentiles(&m.latency_micros);
    let _ = writeln!(s, "\n## End-to-end latency\n");
    let _ = writeln!(
        s,
        "From each membership's `occurredAt` (the event's time, stamped when it was \
         handed to the publisher) to its `updatedAt`: the commit time Firestore recorded \
         or, on PostgreSQL, `updated_at`, the start of the committing transaction (so \
         there it reads low by up to one commit's duration). \
         The store keeps only the newest event of each (post, user), so latency is \
         **sampled over memberships**: {} samples, one per membership, not one per event. \
         Duplicates, stale events and poison leave no sample.\n",
        p.count
    );
    if m.missing_updated_at > 0 || m.negative > 0 {
        let _ = writeln!(
            s,
            "{} memberships had no `updatedAt` (not counted); {} had `updatedAt` before \
             `occurredAt` (clock skew; counted as 0 ms).\n",
            m.missing_updated_at, m.negative
        );
    }
    let _ = writeln!(s, "| percentile | latency (ms) |\n|---|---:|");
    for (k, v) in [
        ("p50", p.p50_ms),
        ("p90", p.p90_ms),
        ("p99", p.p99_ms),
        ("p99.9", p.p999_ms),
        ("max", p.max_ms),
        ("mean", p.mean_ms),
    ] {
        let _ = writeln!(s, "| {k} | {v:.1} |");
    }
    let _ = writeln!(
        s,
        "\n![latency by percentile](latency.png)\n\n\
         x: percentile on a log scale (0%, 90%, 99%, 99.9%, ...); y: latency in ms.\n"
    );
}

fn throughput_section(s: &mut String, t: &Throughput) {
    let _ = writeln!(s, "## Throughput\n");
    let _ = writeln!(
        s,
        "Memberships whose last commit fell in each {}-second bucket of `updatedAt` \
         (a lower bound on commits: a membership written twice counts once). \
         Peak {:.1}/s, mean {:.1}/s over {} s.\n",
        t.bucket_secs,
        t.peak_per_sec(),
        t.mean_per_sec(),
        t.buckets.len() as i64 * t.bucket_secs
    );
    let _ = writeln!(s, "![memberships committed per second](throughput.png)\n");
    let _ = writeln!(
        s,
        "| bucket start (UTC) | memberships | per second |\n|---|---:|---:|"
    );
    for (start, n) in &t.buckets {
        let at = DateTime::<Utc>::from_timestamp(*start, 0)
            .map(|d| d.to_rfc3339_opts(SecondsFormat::Secs, true))
            .unwrap_or_else(|| start.to_string());
        let _ = writeln!(
            s,
            "| {at} | {n} | {:.1} |",
            *n as f64 / t.bucket_secs as f64
        );
    }
}
