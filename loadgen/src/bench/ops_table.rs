//! How `bench` prints the operation counts of a case: per 1,000 events
//! (acked messages), one column per runner (its median-events/s round,
//! as in the main table), Firestore's by collection group and RPC kind,
//! PostgreSQL's by table, Pub/Sub's bytes; and the rollups' share when
//! batched ran beside batched with rollups off.
//!
//! Invariant: every cell is a count of [`super::ops`] divided by the same
//! run's acked messages, so a column's figures are of one run.

use std::collections::BTreeSet;

use hotcount::config::Strategy;

use super::ops::{FirestoreOps, PgOps};
use super::render::{median_runs, runners_in_order, table_head};
use super::{Case, RunResult, Runner};

/// The counts table of `case` (Markdown); empty when no run of it counted
/// anything.
pub fn render_ops(results: &[RunResult], case: Case) -> String {
    let runs: Vec<&RunResult> = results
        .iter()
        .filter(|r| r.case == case && counts_store(r.runner))
        .collect();
    let shown = median_runs(&runs, &runners_in_order(&runs));
    if shown.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n#### {case:?}: operations per 1,000 events\n\n\
         Counted by the emulators (PostgreSQL: by the server's statistics views) from \
         before publishing to the consumers' stop (the drain's rollup writes included). \
         Index entries are an estimate: every field of each written document indexed \
         ascending and descending, no exemptions.\n\n"
    );
    out.push_str(&table_head("count", &shown));
    let mut row = |name: String, cell: &dyn Fn(&RunResult) -> Option<String>| {
        out.push_str(&format!("| {name} |"));
        for r in &shown {
            out.push_str(&format!(" {} |", cell(r).unwrap_or_else(|| "n/a".into())));
        }
        out.push('\n');
    };
    row("events (acked)".into(), &|r| Some(r.acked.to_string()));
    row("consumer CPU (ms)".into(), &|r| {
        r.cpu_ms_per_1k().map(|c| format!("{c:.1}"))
    });
    firestore_rows(&shown, &mut row);
    postgres_rows(&shown, &mut row);
    row("Pub/Sub publish requests".into(), &|r| {
        Some(format!("{:.2}", r.per_1k(r.ops.pubsub.publish_requests)))
    });
    row("Pub/Sub messages published / delivered".into(), &|r| {
        let p = &r.ops.pubsub;
        Some(format!(
            "{:.0} / {:.0}",
            r.per_1k(p.published),
            r.per_1k(p.delivered)
        ))
    });
    row(
        "Pub/Sub bytes published / delivered (data + attributes)".into(),
        &|r| {
            let p = &r.ops.pubsub;
            Some(format!(
                "{:.0} / {:.0}",
                r.per_1k(p.published_bytes),
                r.per_1k(p.delivered_bytes)
            ))
        },
    );
    out.push_str(&rollups_share(&runs));
    out
}

/// Whether `runner` writes to the store (the null consumers do not).
fn counts_store(runner: Runner) -> bool {
    !matches!(runner, Runner::Null | Runner::NullPush)
}

type RowFn<'a> = dyn FnMut(String, &dyn Fn(&RunResult) -> Option<String>) + 'a;

fn firestore_rows(shown: &[&RunResult], row: &mut RowFn<'_>) {
    let fs = |r: &RunResult| r.ops.firestore.clone();
    if shown.iter().all(|r| r.ops.firestore.is_none()) {
        return;
    }
    let per_1k = |r: &RunResult, n: u64| format!("{:.1}", r.per_1k(n));
    row("Firestore document reads".into(), &|r| {
        fs(r).map(|f| per_1k(r, f.total().reads))
    });
    row(
        "Firestore document writes (deletes excluded)".into(),
        &|r| fs(r).map(|f| per_1k(r, f.total().writes)),
    );
    row("Firestore document deletes".into(), &|r| {
        fs(r).map(|f| per_1k(r, f.total().deletes))
    });
    row("Firestore index entries written (estimate)".into(), &|r| {
        fs(r).map(|f| per_1k(r, f.total().index_entries))
    });
    let groups: BTreeSet<String> = shown
        .iter()
        .filter_map(|r| r.ops.firestore.as_ref())
        .flat_map(|f| f.by_collection.keys().chain(f.storage.keys()).cloned())
        .collect();
    for group in &groups {
        row(
            format!("`{group}`: reads / writes / deletes / index entries"),
            &|r| {
                fs(r).map(|f| {
                    let u = f.by_collection.get(group).copied().unwrap_or_default();
                    format!(
                        "{} / {} / {} / {}",
                        per_1k(r, u.reads),
                        per_1k(r, u.writes),
                        per_1k(r, u.deletes),
                        per_1k(r, u.index_entries)
                    )
                })
            },
        );
    }
    let methods: BTreeSet<String> = shown
        .iter()
        .filter_map(|r| r.ops.firestore.as_ref())
        .flat_map(|f| f.rpcs.keys().cloned())
        .collect();
    for method in &methods {
        row(format!("`{method}` RPCs"), &|r| {
            fs(r).map(|f| format!("{:.2}", r.per_1k(f.rpcs.get(method).copied().unwrap_or(0))))
        });
    }
    for group in &groups {
        row(
            format!("`{group}` stored at the end: documents, bytes each, index entries each (not per 1,000)"),
            &|r| fs(r).map(|f| stored_cell(&f, group)),
        );
    }
}

/// A group's stored documents, their mean storage size and index entries.
fn stored_cell(f: &FirestoreOps, group: &str) -> String {
    match f.storage.get(group) {
        Some(s) if s.documents > 0 => format!(
            "{} docs, {:.1} B, {:.1}",
            s.documents,
            s.document_bytes as f64 / s.documents as f64,
            s.index_entries as f64 / s.documents as f64
        ),
        _ => "0 docs".into(),
    }
}

fn postgres_rows(shown: &[&RunResult], row: &mut RowFn<'_>) {
    let pg = |r: &RunResult| r.ops.postgres.clone();
    if shown.iter().all(|r| r.ops.postgres.is_none()) {
        return;
    }
    let per_1k = |r: &RunResult, n: u64| format!("{:.1}", r.per_1k(n));
    row(
        "PostgreSQL transactions committed / rolled back".into(),
        &|r| pg(r).map(|p| format!("{} / {}", per_1k(r, p.commits), per_1k(r, p.rollbacks))),
    );
    row(
        "PostgreSQL buffer reads: hit / from the file system".into(),
        &|r| pg(r).map(|p| format!("{} / {}", per_1k(r, p.blocks_hit), per_1k(r, p.blocks_read))),
    );
    row("PostgreSQL WAL bytes".into(), &|r| {
        pg(r).map(|p| format!("{:.0}", r.per_1k(p.wal_bytes)))
    });
    let tables: BTreeSet<String> = shown
        .iter()
        .filter_map(|r| r.ops.postgres.as_ref())
        .flat_map(|p: &PgOps| p.tables.keys().cloned())
        .collect();
    for table in &tables {
        row(
            format!("`{table}`: rows inserted / updated (HOT) / deleted, index scans"),
            &|r| {
                pg(r).map(|p| {
                    let t = p.tables.get(table).copied().unwrap_or_default();
                    format!(
                        "{} / {} ({}) / {}, {}",
                        per_1k(r, t.inserted),
                        per_1k(r, t.updated),
                        per_1k(r, t.hot_updated),
                        per_1k(r, t.deleted),
                        per_1k(r, t.index_scans)
                    )
                })
            },
        );
    }
    for table in &tables {
        row(
            format!("`{table}` at the end: rows, bytes each with its indexes (not per 1,000)"),
            &|r| {
                pg(r).map(|p| {
                    let t = p.tables.get(table).copied().unwrap_or_default();
                    match t.live_rows {
                        0 => format!("0 rows, {} B", t.total_bytes),
                        n => format!("{n} rows, {:.1} B", t.total_bytes as f64 / n as f64),
                    }
                })
            },
        );
    }
}

/// With batched and batched-without-rollups both run: the rollups' share
/// per 1,000 events, the median over the rounds of the per-round
/// differences (Firestore: document reads and writes; PostgreSQL: row
/// writes and transactions).
fn rollups_share(runs: &[&RunResult]) -> String {
    let with = Runner::Hotcount(Strategy::Batched);
    let rounds: BTreeSet<u32> = runs.iter().map(|r| r.round).collect();
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for round in rounds {
        let find = |runner| runs.iter().find(|r| r.runner == runner && r.round == round);
        let (Some(on), Some(off)) = (find(with), find(Runner::NoRollups)) else {
            continue;
        };
        let (r_on, w_on) = read_write_per_1k(on);
        let (r_off, w_off) = read_write_per_1k(off);
        reads.push(r_on - r_off);
        writes.push(w_on - w_off);
    }
    let (Some(reads), Some(writes)) = (super::render::median(reads), super::render::median(writes))
    else {
        return String::new();
    };
    let (what_read, what_write) = match runs.iter().any(|r| r.ops.postgres.is_some()) {
        true => ("transactions committed", "rows written"),
        false => ("document reads", "document writes"),
    };
    format!(
        "\nRollups' share per 1,000 events (batched less batched with rollups off, median over the rounds): {what_read} {reads:+.1}, {what_write} {writes:+.1}\n"
    )
}

/// Firestore: (document reads, writes + deletes) per 1,000 events;
/// PostgreSQL: (transactions committed, rows inserted + updated + deleted).
fn read_write_per_1k(r: &RunResult) -> (f64, f64) {
    if let Some(f) = &r.ops.firestore {
        let t = f.total();
        return (r.per_1k(t.reads), r.per_1k(t.writes + t.deletes));
    }
    if let Some(p) = &r.ops.postgres {
        let rows: u64 = p
            .tables
            .values()
            .map(|t| t.inserted + t.updated + t.deleted)
            .sum();
        return (r.per_1k(p.commits), r.per_1k(rows));
    }
    (0.0, 0.0)
}

#[cfg(test)]
mod tests {
    use hotcount_emulators::firestore::CollectionUsage;

    use super::*;
    use crate::bench::result::sample_run_on_firestore;

    fn run(
        runner: Runner,
        round: u32,
        likes: CollectionUsage,
        counts: CollectionUsage,
    ) -> RunResult {
        sample_run_on_firestore(runner, round, [("likes", likes), ("counts", counts)])
    }

    fn usage(reads: u64, writes: u64) -> CollectionUsage {
        CollectionUsage {
            reads,
            writes,
            deletes: 0,
            index_entries: 2 * writes,
        }
    }

    #[test]
    fn counts_print_per_1000_events_by_collection_and_the_rollups_share_beside_none() {
        let results = [
            run(
                Runner::Hotcount(Strategy::Batched),
                0,
                usage(2_000, 1_800),
                usage(10, 6),
            ),
            run(Runner::NoRollups, 0, usage(2_000, 1_800), usage(0, 0)),
        ];
        let table = render_ops(&results, Case::Viral);
        assert!(
            table.contains("| Firestore document reads | 1005.0 | 1000.0 |"),
            "{table}"
        );
        assert!(
            table.contains("| `counts`: reads / writes / deletes / index entries | 5.0 / 3.0 / 0.0 / 6.0 | 0.0 / 0.0 / 0.0 / 0.0 |"),
            "{table}"
        );
        assert!(
            table.contains("document reads +5.0, document writes +3.0"),
            "{table}"
        );
        assert_eq!(render_ops(&results, Case::Zipf), "", "no run of that case");
    }
}
