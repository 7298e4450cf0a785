//! How `bench` prints its results: one progress line per run, the settings
//! line, and a Markdown table per case with the strategies side by side.

use std::time::Duration;

use hotcount::config::Strategy;

use super::{BenchConfig, Case, RunResult, Verdict};

fn strategy_name(s: Strategy) -> &'static str {
    match s {
        Strategy::Batched => "batched",
        Strategy::PerEvent => "per-event",
    }
}

/// The verdict as the table and the progress lines print it.
fn verdict_text(v: &Verdict) -> String {
    match v {
        Verdict::Exact => "EXACT".into(),
        Verdict::Wrong {
            mismatches,
            invariant_breaks,
        } => format!("WRONG ({mismatches} posts, {invariant_breaks} invariant breaks)"),
        Verdict::Partial { invariant_breaks } => {
            format!("partial run; invariant breaks: {invariant_breaks}")
        }
    }
}

/// The progress line of one finished run.
pub fn render_progress(r: &RunResult) -> String {
    format!(
        "  {:?} {}: {:.0} events/s, {:.1} RPCs/1k, {}",
        r.case,
        strategy_name(r.strategy),
        r.events_per_sec(),
        r.rpcs_per_1k(),
        verdict_text(&r.verdict)
    )
}

/// The line above the tables: every setting that shapes the figures.
pub fn render_settings(config: &BenchConfig) -> String {
    format!(
        "store RTT {} ms per RPC; {} messages, {} posts, {} users, seed {}; publish rate {}{}; consumer {}; cap {} s per run; shards {}, counter shards <= {} at {} writes/s each, flush interval {} ms (min wait {} ms), commits in flight {}, max batch {}, streams {}, per-event concurrency {}\n",
        config.store_rtt_ms,
        config.events,
        config.posts,
        config.users,
        config.seed,
        if config.rate_per_sec == 0 { "max".to_string() } else { format!("{}/s", config.rate_per_sec) },
        if config.backlog { ", all published before the consumer starts (window from its start)" } else { "" },
        if config.consumer_bin.is_some() { "in a child process" } else { "in this process" },
        config.max_secs,
        config.run.shards,
        config.run.counter_shards,
        config.run.counter_shard_target_writes_per_sec,
        config.run.flush_interval_ms,
        config.run.flush_min_wait_ms,
        config.run.max_commits_in_flight,
        config.run.max_batch_events,
        config.run.streams,
        config.run.per_event_concurrency,
    )
}

/// A row of the table: its name and one run's cell.
type Row = (&'static str, fn(&RunResult) -> String);

/// The rows of the side-by-side table, in order.
const ROWS: [Row; 12] = [
    ("messages acked / published", |r| {
        format!("{} / {}", r.acked, r.published)
    }),
    ("measured window (s)", |r| {
        let capped = if r.completed { "" } else { " (capped)" };
        format!("{:.1}{capped}", r.elapsed.as_secs_f64())
    }),
    ("events/s (acked / window)", |r| {
        format!("{:.0}", r.events_per_sec())
    }),
    ("store RPCs per 1,000 events", |r| {
        format!("{:.1}", r.rpcs_per_1k())
    }),
    ("commits", |r| r.commits.to_string()),
    ("hottest document writes/s", |r| {
        format!("{:.1}", r.hottest_writes_per_sec())
    }),
    ("hottest document", |r| {
        let d = &r.hottest_document;
        d.split("/documents/").nth(1).unwrap_or(d).to_string()
    }),
    ("publish->commit p50 / p99 (ms)", |r| {
        format!("{:.0} / {:.0}", r.latency.p50_ms, r.latency.p99_ms)
    }),
    ("commit duration p50 / p99 (ms, consumer's view)", |r| {
        r.commit_duration.map_or("n/a".to_string(), |(p50, p99)| {
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            format!("{:.0} / {:.0}", ms(p50), ms(p99))
        })
    }),
    ("peak RSS (MiB)", |r| {
        let whose = if r.rss_is_consumer_only {
            "consumer process"
        } else {
            "whole process"
        };
        format!(
            "{:.0} ({whose})",
            r.peak_rss_bytes as f64 / (1024.0 * 1024.0)
        )
    }),
    ("consumer CPU per 1,000 events (ms)", |r| {
        r.consumer_cpu
            .map_or("n/a (in-process)".to_string(), |cpu| {
                format!("{:.0}", cpu.as_secs_f64() * 1e6 / r.acked.max(1) as f64)
            })
    }),
    ("counts", |r| verdict_text(&r.verdict)),
];

/// The side-by-side table of one case (Markdown), with the ratios when
/// both strategies ran.
pub fn render(results: &[RunResult], case: Case) -> String {
    let runs: Vec<&RunResult> = results.iter().filter(|r| r.case == case).collect();
    if runs.is_empty() {
        return String::new();
    }
    let mut out = format!("\n### {case:?}\n\n| metric |");
    for r in &runs {
        out.push_str(&format!(" {} |", strategy_name(r.strategy)));
    }
    out.push_str("\n|---|");
    for _ in &runs {
        out.push_str("---:|");
    }
    out.push('\n');
    for (name, cell) in ROWS {
        out.push_str(&format!("| {name} |"));
        for r in &runs {
            out.push_str(&format!(" {} |", cell(r)));
        }
        out.push('\n');
    }
    let find = |s| runs.iter().find(|r| r.strategy == s);
    if let (Some(b), Some(p)) = (find(Strategy::Batched), find(Strategy::PerEvent)) {
        out.push_str(&format!(
            "\nbatched / per-event: throughput x{:.1}, store RPCs per event x{:.3}\n",
            b.events_per_sec() / p.events_per_sec().max(1e-9),
            b.rpcs_per_1k() / p.rpcs_per_1k().max(1e-9),
        ));
    }
    out
}
