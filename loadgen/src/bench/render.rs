//! How `bench` prints its results: one progress line per run, the settings
//! line, and a Markdown table per case with the strategies side by side.

use std::time::Duration;

use hotcount::config::{StoreLocation, Strategy};

use super::{
    BenchConfig, Case, LeaseCalls, RunResult, Runner, Verdict, CONCENTRATED_POSTS,
    CONCENTRATED_UNLIKE_FRACTION, CONCENTRATED_USERS,
};

/// How a runner is named in the tables, the progress lines and the log.
pub(super) fn runner_name(r: Runner) -> String {
    let strategy = |s| match s {
        Strategy::Batched => "batched",
        Strategy::PerEvent => "per-event",
    };
    match r {
        Runner::Hotcount(s) => strategy(s).into(),
        Runner::Push(s) => format!("{}, push", strategy(s)),
        Runner::Compare(s) => format!("{} (compared build)", strategy(s)),
        Runner::ComparePush(s) => format!("{}, push (compared build)", strategy(s)),
        Runner::Null => "null consumer (receive + ack)".into(),
        Runner::WriteFloor => "write floor (parse + write + ack)".into(),
        Runner::ExactFloor => "exact floor (parse + conditioned write + rollups + ack)".into(),
        Runner::NullPush => "null consumer, push (read + 204)".into(),
        Runner::ExactPushFloor => {
            "exact push floor (parse + conditioned write + rollups + 204)".into()
        }
        Runner::NoRollups => "batched, rollups off".into(),
    }
}

/// A row's name as printed: Firestore's words, or PostgreSQL's for the
/// same figure.
fn label(name: &'static str, postgres: bool) -> &'static str {
    if !postgres {
        return name;
    }
    match name {
        "store RPCs per 1,000 events" => "round trips per 1,000 events",
        "commits" => "transactions committed (server)",
        "hottest document writes/s" => "hottest counter row updates/s",
        "hottest document" => "hottest counter row (post, shard)",
        other => other,
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
        Verdict::NotCounted => "n/a (counts nothing)".into(),
    }
}

/// The progress line of one finished run.
pub fn render_progress(r: &RunResult) -> String {
    format!(
        "  {:?} round {} {}: {:.0} events/s, {:.1} {}/1k, CPU {} ms/1k{}, {}",
        r.case,
        r.round + 1,
        runner_name(r.runner),
        r.events_per_sec(),
        r.rpcs_per_1k(),
        if r.postgres { "round trips" } else { "RPCs" },
        r.cpu_ms_per_1k()
            .map_or("n/a".to_string(), |c| format!("{c:.1}")),
        if pushed(r.runner) {
            String::new()
        } else {
            let c = &r.lease_calls;
            format!(
                ", ModifyAckDeadline ids {:.1}/1k, Acknowledge calls {:.2}/1k",
                r.per_1k(c.modify_ack_deadline_ids),
                r.per_1k(c.acknowledge_calls)
            )
        },
        verdict_text(&r.verdict)
    )
}

/// The line above the tables: every setting that shapes the figures.
pub fn render_settings(config: &BenchConfig) -> String {
    let store = match &config.run.target.store {
        StoreLocation::Firestore => format!("store RTT {} ms per RPC", config.store_rtt_ms),
        postgres => format!(
            "store {postgres} (a real server, reached through the run's round-trip counting proxy)"
        ),
    };
    format!(
        "{store}; {} messages, {} posts, {} users{}, seed {}; publish rate {}{}; consumer {} x {}; cap {} s per run; shards {}, counter shards <= {} at {} writes/s each, flush interval {} ms (min wait {} ms), commits in flight {}, max batch {}, streams {}, per-event concurrency {}, rollup interval {} ms\n",
        config.events,
        config.posts,
        config.users,
        if config.cases.contains(&Case::Concentrated)
            || config.cases.contains(&Case::ConcentratedTagged)
        {
            format!(
                " (concentrated: {CONCENTRATED_POSTS} posts, {CONCENTRATED_USERS} users, shuffled, unlike on a liked pair {CONCENTRATED_UNLIKE_FRACTION}; published as Google's Python client publishes json.dumps, no attributes; concentrated-tagged: compact JSON with a loadgenOrigin attribute)"
            )
        } else {
            String::new()
        },
        config.seed,
        if config.rate_per_sec == 0 { "max".to_string() } else { format!("{}/s", config.rate_per_sec) },
        if config.backlog { ", all published before the consumer starts (window from its start)" } else { "" },
        if config.consumer_bin.is_some() { "in a child process" } else { "in this process" },
        config.replicas.max(1),
        config.max_secs,
        config.run.flush.shards,
        config.run.store_writes.counter_shards,
        config.run.store_writes.counter_shard_target_writes_per_sec,
        config.run.flush.flush_interval_ms,
        config.run.flush.flush_min_wait_ms,
        config.run.flush.max_commits_in_flight,
        config.run.flush.max_batch_events,
        config.run.source.streams,
        config.run.flush.per_event_concurrency,
        config.run.rollups.rollup_interval_ms,
    )
}

/// Whether `runner` is pushed to (its answers ack: no lease calls).
fn pushed(runner: Runner) -> bool {
    matches!(
        runner,
        Runner::Push(_) | Runner::ComparePush(_) | Runner::NullPush | Runner::ExactPushFloor
    )
}

/// A lease-call cell: the two figures `pick` takes, per 1,000 messages,
/// the second in parentheses; `n/a` for a pushed run.
fn lease_cell(r: &RunResult, pick: fn(&LeaseCalls) -> (u64, u64)) -> String {
    if pushed(r.runner) {
        return "n/a (push: the answer acks)".into();
    }
    let (first, second) = pick(&r.lease_calls);
    format!("{:.1} ({:.1})", r.per_1k(first), r.per_1k(second))
}

/// A row of the table: its name and one run's cell.
/// Two durations the consumer measured, in whole milliseconds (`a / b`),
/// or `n/a`.
fn duration_pair_cell(pair: Option<(Duration, Duration)>) -> String {
    pair.map_or("n/a".to_string(), |(a, b)| {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        format!("{:.0} / {:.0}", ms(a), ms(b))
    })
}

type Row = (&'static str, fn(&RunResult) -> String);

/// The rows of the side-by-side table, in order.
const ROWS: [Row; 19] = [
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
        if r.postgres && r.hottest_document.is_empty() {
            return "n/a (no logical decoding)".into();
        }
        format!("{:.1}", r.hottest_writes_per_sec())
    }),
    ("hottest document", |r| {
        let d = &r.hottest_document;
        d.split("/documents/").nth(1).unwrap_or(d).to_string()
    }),
    ("hottest post's counter writes/s (all its shards)", |r| {
        r.hottest_post_writes_per_sec()
            .map_or("n/a".to_string(), |w| format!("{w:.1}"))
    }),
    ("publish->commit p50 / p99 (ms)", |r| {
        format!("{:.0} / {:.0}", r.latency.p50_ms, r.latency.p99_ms)
    }),
    ("commit duration p50 / p99 (ms, consumer's view)", |r| {
        duration_pair_cell(r.commit_duration)
    }),
    (
        "push hold mean / p99 (ms, consumer's view: arrival to answer)",
        |r| duration_pair_cell(r.push_hold),
    ),
    (
        "rollup lag p50 / p99 (ms, consumer's view: a post's change to its rollup)",
        |r| duration_pair_cell(r.rollup_lag),
    ),
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
        r.cpu_ms_per_1k()
            .map_or("n/a (in-process)".to_string(), |cpu| format!("{cpu:.1}"))
    }),
    ("ModifyAckDeadline ids (calls) per 1,000 events", |r| {
        lease_cell(r, |c| {
            (c.modify_ack_deadline_ids, c.modify_ack_deadline_calls)
        })
    }),
    ("Acknowledge calls (ids) per 1,000 events", |r| {
        lease_cell(r, |c| (c.acknowledge_calls, c.acknowledge_ids))
    }),
    ("rollup RPCs per 1,000 events", |r| {
        r.rollup_rpcs_per_1k()
            .map_or("n/a (see rollups off)".to_string(), |n| format!("{n:.2}"))
    }),
    ("most liked post's rollup writes/s", |r| {
        r.top_rollup_writes_per_sec()
            .map_or("n/a".to_string(), |w| format!("{w:.2}"))
    }),
    ("counts", |r| verdict_text(&r.verdict)),
];

/// The side-by-side table of one case (Markdown): per runner, the round
/// with the median events/s; then, with several rounds or a null consumer,
/// the medians over the rounds ([`render_medians`]); and the batched /
/// per-event ratios when both ran.
pub fn render(results: &[RunResult], case: Case) -> String {
    let runs: Vec<&RunResult> = results.iter().filter(|r| r.case == case).collect();
    if runs.is_empty() {
        return String::new();
    }
    let runners = runners_in_order(&runs);
    let postgres = runs.iter().any(|r| r.postgres);
    let rounds = runs.iter().map(|r| r.round + 1).max().unwrap_or(1);
    let shown = median_runs(&runs, &runners);
    let mut out = format!("\n### {case:?}\n\n");
    if rounds > 1 {
        out.push_str(&format!(
            "Each column: the round with the median events/s of {rounds}.\n\n"
        ));
    }
    out.push_str(&table_head("metric", &shown));
    for (name, cell) in ROWS {
        out.push_str(&format!("| {} |", label(name, postgres)));
        for r in &shown {
            out.push_str(&format!(" {} |", cell(r)));
        }
        out.push('\n');
    }
    if rounds > 1 || runners.contains(&Runner::Null) || runners.contains(&Runner::NullPush) {
        out.push_str(&render_medians(&runs, &runners, rounds));
    }
    let find = |s| shown.iter().find(|r| r.runner == Runner::Hotcount(s));
    if let (Some(b), Some(p)) = (find(Strategy::Batched), find(Strategy::PerEvent)) {
        out.push_str(&format!(
            "\nbatched / per-event: throughput x{:.1}, {} per event x{:.3}\n",
            b.events_per_sec() / p.events_per_sec().max(1e-9),
            if postgres {
                "round trips"
            } else {
                "store RPCs"
            },
            b.rpcs_per_1k() / p.rpcs_per_1k().max(1e-9),
        ));
    }
    out.push_str(&render_push_beside_pull(&runs, rounds));
    out.push_str(&render_push_beside_floors(&runs, rounds));
    out
}

/// Each push run (and the exact push floor) as a multiple of the push
/// floor, and each push run of the exact push floor, when they ran: the
/// median of the per-round ratios for CPU per 1,000 messages and
/// messages/s (issue 39's push goals read against them).
fn render_push_beside_floors(runs: &[&RunResult], rounds: u32) -> String {
    let ran = |runner| runs.iter().any(|r: &&RunResult| r.runner == runner);
    let mut pairs = vec![(Runner::ExactPushFloor, Runner::NullPush)];
    for strategy in [Strategy::Batched, Strategy::PerEvent] {
        for push in [Runner::Push(strategy), Runner::ComparePush(strategy)] {
            pairs.extend([(push, Runner::NullPush), (push, Runner::ExactPushFloor)]);
        }
    }
    let mut out = String::new();
    for (runner, floor) in pairs {
        if !ran(runner) || !ran(floor) {
            continue;
        }
        let ratio = |figure: fn(&RunResult) -> Option<f64>| {
            median_ratio(runs, rounds, (runner, floor), figure)
        };
        let floor_name = match floor {
            Runner::NullPush => "the push floor",
            _ => "the exact push floor",
        };
        out.push_str(&format!(
            "\n{} / {floor_name} (median of the per-round ratios): CPU per 1,000 messages {}, messages/s {}\n",
            runner_name(runner),
            ratio(RunResult::cpu_ms_per_1k),
            ratio(|r| Some(r.events_per_sec())),
        ));
    }
    out
}

/// For each strategy run with both deliveries: push as a multiple of pull,
/// the median of the per-round ratios (each round's runs ran side by
/// side), for CPU per 1,000 messages and messages/s; with the push floor
/// (the null consumer's push endpoint), the floor as a multiple of pull
/// too: the least push can cost beside it.
fn render_push_beside_pull(runs: &[&RunResult], rounds: u32) -> String {
    let mut out = String::new();
    let ran = |runner| runs.iter().any(|r| r.runner == runner);
    for strategy in [Strategy::Batched, Strategy::PerEvent] {
        let pull = Runner::Hotcount(strategy);
        if !ran(pull) {
            continue;
        }
        for (push, what) in [
            (Runner::Push(strategy), "push / pull"),
            (
                Runner::ComparePush(strategy),
                "push (compared build) / pull",
            ),
            (Runner::NullPush, "push floor (null consumer, push) / pull"),
        ] {
            if !ran(push) {
                continue;
            }
            let ratio = |figure: fn(&RunResult) -> Option<f64>| {
                median_ratio(runs, rounds, (push, pull), figure)
            };
            let p99 = match push {
                Runner::NullPush => String::new(),
                _ => format!(
                    ", publish->commit p99 {}",
                    ratio(|r| Some(r.latency.p99_ms))
                ),
            };
            out.push_str(&format!(
                "\n{}, {what} (median of the per-round ratios): CPU per 1,000 messages {}, messages/s {}{p99}\n",
                runner_name(pull),
                ratio(RunResult::cpu_ms_per_1k),
                ratio(|r| Some(r.events_per_sec())),
            ));
        }
    }
    out
}

/// The runners of `runs` in the order they first ran.
pub(super) fn runners_in_order(runs: &[&RunResult]) -> Vec<Runner> {
    let mut runners = Vec::new();
    for r in runs {
        if !runners.contains(&r.runner) {
            runners.push(r.runner);
        }
    }
    runners
}

/// Each of `runners`' median run ([`median_run`]), in their order: the
/// columns of a table.
pub(super) fn median_runs<'a>(runs: &[&'a RunResult], runners: &[Runner]) -> Vec<&'a RunResult> {
    (runners.iter())
        .filter_map(|&runner| median_run(runs, runner))
        .collect()
}

/// A Markdown table's head over the runners of `shown`, one column each,
/// after a first column named `first`: the names line and the alignment
/// line (numbers right-aligned).
pub(super) fn table_head(first: &str, shown: &[&RunResult]) -> String {
    let mut out = format!("| {first} |");
    for r in shown {
        out.push_str(&format!(" {} |", runner_name(r.runner)));
    }
    out.push_str("\n|---|");
    for _ in shown {
        out.push_str("---:|");
    }
    out.push('\n');
    out
}

/// The run of `runner` with the median events/s (the lower middle one of
/// an even count).
pub(super) fn median_run<'a>(runs: &[&'a RunResult], runner: Runner) -> Option<&'a RunResult> {
    let mut mine: Vec<&RunResult> = runs
        .iter()
        .copied()
        .filter(|r| r.runner == runner)
        .collect();
    mine.sort_by(|a, b| a.events_per_sec().total_cmp(&b.events_per_sec()));
    mine.get(mine.len().saturating_sub(1) / 2).copied()
}

/// The median of `values` (the mean of the middle two of an even count);
/// `None` when empty.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// A row of the medians table: its name and one run's figure.
type FigureRow = (&'static str, fn(&RunResult) -> Option<f64>, usize);

const MEDIAN_ROWS: [FigureRow; 13] = [
    ("events/s", |r| Some(r.events_per_sec()), 0),
    (
        "consumer CPU per 1,000 messages (ms)",
        RunResult::cpu_ms_per_1k,
        2,
    ),
    (
        "consumer CPU per 1,000 messages after the first fifth acked (ms)",
        RunResult::cpu_ms_per_1k_steady,
        2,
    ),
    (
        "ModifyAckDeadline ids per 1,000 messages",
        |r| (!pushed(r.runner)).then(|| r.per_1k(r.lease_calls.modify_ack_deadline_ids)),
        1,
    ),
    (
        "Acknowledge calls per 1,000 messages",
        |r| (!pushed(r.runner)).then(|| r.per_1k(r.lease_calls.acknowledge_calls)),
        2,
    ),
    ("store RPCs per 1,000 events", |r| Some(r.rpcs_per_1k()), 1),
    (
        "hottest document writes/s",
        |r| (!r.hottest_document.is_empty()).then_some(r.hottest_writes_per_sec()),
        1,
    ),
    (
        "hottest post's counter writes/s (all its shards)",
        RunResult::hottest_post_writes_per_sec,
        1,
    ),
    (
        "publish->commit p99 (ms)",
        |r| (r.verdict != Verdict::NotCounted).then_some(r.latency.p99_ms),
        0,
    ),
    (
        "peak RSS (MiB)",
        |r| Some(r.peak_rss_bytes as f64 / (1024.0 * 1024.0)),
        0,
    ),
    (
        "rollup RPCs per 1,000 events",
        RunResult::rollup_rpcs_per_1k,
        3,
    ),
    ("rollup lag p99 (ms)", RunResult::rollup_lag_p99_ms, 0),
    (
        "most liked post's rollup writes/s",
        RunResult::top_rollup_writes_per_sec,
        2,
    ),
];

/// Medians over the rounds, per runner; with a null consumer, each
/// runner's CPU per 1,000 messages as a multiple of the null consumer's
/// (the median of the per-round ratios: each round's runs ran side by
/// side).
pub fn render_medians(runs: &[&RunResult], runners: &[Runner], rounds: u32) -> String {
    let postgres = runs.iter().any(|r| r.postgres);
    let mut out = format!("\nMedian of {rounds} round(s):\n\n| metric |");
    for &runner in runners {
        out.push_str(&format!(" {} |", runner_name(runner)));
    }
    out.push_str("\n|---|");
    for _ in runners {
        out.push_str("---:|");
    }
    out.push('\n');
    let of = |runner: Runner| -> Vec<&RunResult> {
        runs.iter()
            .copied()
            .filter(|r| r.runner == runner)
            .collect()
    };
    for (name, figure, decimals) in MEDIAN_ROWS {
        out.push_str(&format!("| {} |", label(name, postgres)));
        for &runner in runners {
            let cell = median(of(runner).into_iter().filter_map(figure).collect())
                .map_or("n/a".to_string(), |v| format!("{v:.decimals$}"));
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
    }
    if runners.contains(&Runner::Null) || runners.contains(&Runner::NullPush) {
        // Push runs beside the push floor, the others beside the pull floor.
        push_row(
            &mut out,
            "CPU per message, x the null consumer (push: its push floor)",
            runners,
            |runner| median_cpu_ratio(runs, rounds, runner, floor_of(runner)),
        );
        push_row(
            &mut out,
            "the same after the first fifth acked (start-up left out)",
            runners,
            |runner| {
                let pair = (runner, floor_of(runner));
                median_ratio(runs, rounds, pair, RunResult::cpu_ms_per_1k_steady)
            },
        );
    }
    for (floor, title) in [
        (Runner::WriteFloor, "CPU per message, x the write floor"),
        (Runner::ExactFloor, "CPU per message, x the exact floor"),
        (
            Runner::ExactPushFloor,
            "CPU per message, x the exact push floor",
        ),
    ] {
        if !runners.contains(&floor) {
            continue;
        }
        for warning in floor_that_did_not_write(runs, rounds, floor) {
            out.push_str(&format!("| **{warning}** |\n"));
        }
        push_row(&mut out, title, runners, |runner| match (floor, runner) {
            (
                Runner::WriteFloor | Runner::ExactFloor,
                Runner::Hotcount(_) | Runner::Compare(_) | Runner::NoRollups,
            )
            | (Runner::WriteFloor, Runner::ExactFloor)
            | (Runner::ExactPushFloor, Runner::Push(_) | Runner::ComparePush(_)) => {
                median_cpu_ratio(runs, rounds, runner, floor)
            }
            _ => String::new(),
        });
    }
    if runners
        .iter()
        .any(|r| matches!(r, Runner::Compare(_) | Runner::ComparePush(_)))
    {
        push_row(
            &mut out,
            "CPU per message, x the first build's of the round",
            runners,
            |runner| match runner {
                Runner::Compare(s) => median_cpu_ratio(runs, rounds, runner, Runner::Hotcount(s)),
                Runner::ComparePush(s) => median_cpu_ratio(runs, rounds, runner, Runner::Push(s)),
                _ => String::new(),
            },
        );
    }
    out
}

/// A line per round whose floor (`floor`: the write, exact or exact push
/// floor) wrote fewer than half the documents per message hotcount (with
/// the same delivery) wrote in it: its Commits failed (the consumer log
/// says why), so it measured no floor there.
fn floor_that_did_not_write(runs: &[&RunResult], rounds: u32, floor: Runner) -> Vec<String> {
    let writes_per_1k = |who: &dyn Fn(Runner) -> bool, round: u32| {
        let run = runs.iter().find(|r| who(r.runner) && r.round == round)?;
        let writes = run.ops.firestore.as_ref()?.total().writes;
        Some(run.per_1k(writes))
    };
    (0..rounds)
        .filter_map(|round| {
            let written = writes_per_1k(&|r| r == floor, round)?;
            let hotcount = match floor {
                Runner::ExactPushFloor => writes_per_1k(&|r| matches!(r, Runner::Push(_)), round)?,
                _ => writes_per_1k(&|r| matches!(r, Runner::Hotcount(_)), round)?,
            };
            let name = match floor {
                Runner::ExactFloor => "exact",
                Runner::ExactPushFloor => "exact push",
                _ => "write",
            };
            (written < hotcount / 2.0).then(|| {
                format!(
                    "round {}: the {name} floor wrote {written:.0} documents per 1,000 messages \
                     against hotcount's {hotcount:.0}: its Commits failed (see the consumer \
                     log), so it is no floor in this round",
                    round + 1
                )
            })
        })
        .collect()
}

/// Appends the table row `title` with `cell(runner)` in each runner's column.
fn push_row(out: &mut String, title: &str, runners: &[Runner], cell: impl Fn(Runner) -> String) {
    out.push_str(&format!("| {title} |"));
    for &runner in runners {
        out.push_str(&format!(" {} |", cell(runner)));
    }
    out.push('\n');
}

/// The floor `runner` is measured against: the push floor for push runs,
/// the null consumer for the others.
fn floor_of(runner: Runner) -> Runner {
    match runner {
        Runner::Push(_) | Runner::ComparePush(_) | Runner::NullPush | Runner::ExactPushFloor => {
            Runner::NullPush
        }
        _ => Runner::Null,
    }
}

/// The median over the rounds of `runner`'s CPU per message divided by
/// `base`'s in the same round (`x1.23`), or `n/a`.
fn median_cpu_ratio(runs: &[&RunResult], rounds: u32, runner: Runner, base: Runner) -> String {
    median_ratio(runs, rounds, (runner, base), RunResult::cpu_ms_per_1k)
}

/// The median over the rounds of `runner`'s `figure` divided by `base`'s
/// in the same round (each round's runs ran side by side): `x1.23`, or
/// `n/a`. A round whose `base` measured zero (a window too short for the
/// CPU clock's tick) has no ratio.
fn median_ratio(
    runs: &[&RunResult],
    rounds: u32,
    (runner, base): (Runner, Runner),
    figure: impl Fn(&RunResult) -> Option<f64>,
) -> String {
    let of = |who: Runner, round: u32| {
        runs.iter()
            .find(|r| r.runner == who && r.round == round)
            .and_then(|r| figure(r))
    };
    let ratios = (0..rounds)
        .filter_map(|round| {
            let base = of(base, round).filter(|b| *b > 0.0)?;
            Some(of(runner, round)? / base)
        })
        .collect();
    median(ratios).map_or("n/a".to_string(), |v| format!("x{v:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::result::{sample_run, sample_run_on_firestore};

    /// The line of `table` whose row is `title` (the test fails without one).
    fn row_of(table: &str, title: &str) -> String {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| {title} |")))
            .unwrap_or_else(|| panic!("no row {title} in\n{table}"))
            .to_string()
    }

    fn with_cpu(runner: Runner, round: u32, steady_ms: u64) -> RunResult {
        RunResult {
            consumer_cpu: Some(Duration::from_millis(10)),
            consumer_cpu_steady: Some((Duration::from_millis(steady_ms), 1_600)),
            ..sample_run(Case::Viral, runner, round)
        }
    }

    fn writing(runner: Runner, round: u32, writes: u64) -> RunResult {
        let usage = hotcount_emulators::firestore::CollectionUsage {
            writes,
            ..Default::default()
        };
        sample_run_on_firestore(runner, round, [("likes", usage)])
    }

    #[test]
    fn a_write_floor_that_wrote_far_fewer_documents_than_hotcount_is_called_no_floor() {
        let hotcount = Runner::Hotcount(Strategy::Batched);
        let runners = [Runner::Null, Runner::WriteFloor, hotcount];
        // 2,000 messages each: the floor wrote 1,950 documents in round 0
        // (its Commits applied) and 60 in round 1 (nearly all failed).
        let results = [
            writing(Runner::WriteFloor, 0, 1_950),
            writing(hotcount, 0, 2_036),
            writing(Runner::WriteFloor, 1, 60),
            writing(hotcount, 1, 2_036),
        ];
        let runs: Vec<&RunResult> = results.iter().collect();
        let table = render_medians(&runs, &runners, 2);
        let warnings: Vec<&str> = table.lines().filter(|l| l.contains("no floor")).collect();
        assert_eq!(warnings.len(), 1, "{table}");
        assert!(
            warnings[0].contains("round 2") && warnings[0].contains("30 documents per 1,000"),
            "{}",
            warnings[0]
        );
        let fine = render_medians(&runs[..2], &runners, 1);
        assert!(!fine.contains("no floor"), "{fine}");
    }

    #[test]
    fn a_ratio_over_a_floor_that_measured_no_cpu_prints_not_available() {
        let hotcount = Runner::Hotcount(Strategy::Batched);
        let results = [
            with_cpu(Runner::Null, 0, 0),
            with_cpu(hotcount, 0, 8),
            with_cpu(Runner::Null, 1, 0),
            with_cpu(hotcount, 1, 8),
        ];
        let runs: Vec<&RunResult> = results.iter().collect();
        let table = render_medians(&runs, &[Runner::Null, hotcount], 2);
        let row = |title: &str| row_of(&table, title);
        // The whole window measured CPU for both: a ratio.
        assert!(
            row("CPU per message, x the null consumer (push: its push floor)")
                .ends_with("| x1.00 | x1.00 |")
        );
        // The null consumer's steady window measured none: no ratio, not
        // a division by almost zero.
        let steady = row("the same after the first fifth acked (start-up left out)");
        assert!(steady.ends_with("| n/a | n/a |"), "{steady}");
    }

    #[test]
    fn the_exact_floor_row_gives_hotcount_over_it_and_the_write_floor_gives_the_exact_floor_too() {
        let hotcount = Runner::Hotcount(Strategy::Batched);
        let costing = |runner, cpu_ms| RunResult {
            consumer_cpu: Some(Duration::from_millis(cpu_ms)),
            ..sample_run(Case::Viral, runner, 0)
        };
        let results = [
            costing(Runner::Null, 20),
            costing(Runner::WriteFloor, 40),
            costing(Runner::ExactFloor, 50),
            costing(hotcount, 100),
        ];
        let runs: Vec<&RunResult> = results.iter().collect();
        let runners = [
            Runner::Null,
            Runner::WriteFloor,
            Runner::ExactFloor,
            hotcount,
        ];
        let table = render_medians(&runs, &runners, 1);
        let row = |title: &str| row_of(&table, title);
        assert!(
            table.contains("exact floor (parse + conditioned write + rollups + ack)"),
            "{table}"
        );
        let write = row("CPU per message, x the write floor");
        assert!(write.ends_with("|  |  | x1.25 | x2.50 |"), "{write}");
        let exact = row("CPU per message, x the exact floor");
        assert!(exact.ends_with("|  |  |  | x2.00 |"), "{exact}");
    }

    #[test]
    fn push_is_given_over_the_push_floor_and_the_exact_push_floor_in_cpu_and_messages_per_second() {
        let push = Runner::Push(Strategy::Batched);
        // 2,000 messages each: CPU in ms, window in ms.
        let run = |runner, cpu_ms, window_ms| RunResult {
            consumer_cpu: Some(Duration::from_millis(cpu_ms)),
            elapsed: Duration::from_millis(window_ms),
            ..sample_run(Case::Viral, runner, 0)
        };
        let results = [
            run(Runner::NullPush, 20, 40),
            run(Runner::ExactPushFloor, 32, 64),
            run(push, 40, 100),
        ];
        let runs: Vec<&RunResult> = results.iter().collect();
        let runners = [Runner::NullPush, Runner::ExactPushFloor, push];
        let table = render_medians(&runs, &runners, 1);
        assert!(
            table.contains("exact push floor (parse + conditioned write + rollups + 204)"),
            "{table}"
        );
        let floor = row_of(
            &table,
            "CPU per message, x the null consumer (push: its push floor)",
        );
        assert!(floor.ends_with("| x1.00 | x1.60 | x2.00 |"), "{floor}");
        let exact = row_of(&table, "CPU per message, x the exact push floor");
        assert!(exact.ends_with("|  |  | x1.25 |"), "{exact}");
        let lines = render_push_beside_floors(&runs, 1);
        for expected in [
            "exact push floor (parse + conditioned write + rollups + 204) / the push floor (median of the per-round ratios): CPU per 1,000 messages x1.60, messages/s x0.62",
            "batched, push / the push floor (median of the per-round ratios): CPU per 1,000 messages x2.00, messages/s x0.40",
            "batched, push / the exact push floor (median of the per-round ratios): CPU per 1,000 messages x1.25, messages/s x0.64",
        ] {
            assert!(lines.contains(expected), "{expected}\n{lines}");
        }
        assert!(
            render_push_beside_floors(&runs[2..], 1).is_empty(),
            "nothing without a floor beside push"
        );
    }
}
