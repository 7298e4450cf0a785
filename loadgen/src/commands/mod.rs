//! The subcommands of `hotcount-loadgen`, one file each: its flags, how it
//! calls the library, what it prints, and its exit code. Shared here: the
//! message-mix flags, signal handling, the command line as typed, and the
//! verification printout.
//!
//! Invariant: the library returns values (summaries, reports, verdicts);
//! only these files print them and choose exit codes (0 success, 1 a wrong
//! count or failed publishes, 130 cancelled; errors are 2, in `main`).

pub mod bench;
pub mod chaos;
pub mod demo;
pub mod erase_rate;
pub mod publish;
pub mod report;
pub mod simulate;
pub mod verify;

use std::path::PathBuf;
use std::sync::OnceLock;

use hotcount::config::StoreLocation;
use hotcount_loadgen::verify::VerifyReport;
use hotcount_pgtemp::{Durability, PgCluster};

/// The file this run's logs go to, when not the terminal (the demo's
/// in-process consumer, the bench's consumers); set once, by `main`.
pub static LOG_FILE: OnceLock<PathBuf> = OnceLock::new();

/// Starts a throwaway PostgreSQL server for `--temp-postgres` (durable:
/// `fsync` and `synchronous_commit` on, as a real server; `wal_level=logical`
/// so `bench` can decode which counter row took the writes; room for
/// per-event's connections) with a database `hotcount`; the server lives
/// as long as the returned cluster.
async fn temp_postgres(command: &str) -> anyhow::Result<(PgCluster, StoreLocation)> {
    let cluster = tokio::task::spawn_blocking(|| {
        PgCluster::try_start(
            Durability::Durable,
            &[("wal_level", "logical"), ("max_connections", "300")],
        )
    })
    .await??;
    let url = cluster.try_create_database("hotcount").await?;
    eprintln!(
        "hotcount {command}: throwaway {} at {url} (removed at the end)",
        cluster.version()
    );
    Ok((cluster, StoreLocation::Postgres { url }))
}

/// The `--duplicate-fraction` and `--poison-fraction` flags of `chaos` and
/// `demo`, which take them with the same defaults (`publish` words them
/// differently, so it keeps its own; every other workload flag has
/// per-command defaults).
#[derive(clap::Args, Clone, Debug)]
pub struct MessageMixArgs {
    /// Fraction of messages republished verbatim (publisher retries).
    #[arg(long, default_value_t = 0.05)]
    pub duplicate_fraction: f64,
    /// Fraction of poison messages.
    #[arg(long, default_value_t = 0.01)]
    pub poison_fraction: f64,
    /// Fraction of hostile poison messages on top (reserved attribute keys,
    /// 100 x 1 KiB attributes, multi-MB payloads, deep JSON, overflowing
    /// numbers).
    #[arg(long, default_value_t = 0.0)]
    pub hostile_fraction: f64,
}

/// Prints up to `show` mismatches and invariant breaks, then the totals.
fn print_verify(r: &VerifyReport, show: usize) {
    for m in r.mismatches.iter().take(show) {
        println!(
            "MISMATCH post {}: expected {}, counted {} (liked memberships {})",
            m.post_id, m.expected, m.actual, m.liked_members
        );
    }
    for v in r.invariant_violations.iter().take(show) {
        println!(
            "INVARIANT post {}: sum of shards {} != liked memberships {}",
            v.post_id, v.shard_sum, v.liked_members
        );
    }
    println!(
        "{}: {} posts checked, {} exact, {} mismatched, {} invariant violations; expected total {}, counted {}; {} shards, {} memberships read ({} expected)",
        if r.is_exact() { "EXACT" } else { "NOT EXACT" },
        r.posts_checked,
        r.posts_exact,
        r.mismatches.len(),
        r.invariant_violations.len(),
        r.expected_total,
        r.actual_total,
        r.shards_read,
        r.memberships_read,
        r.memberships_expected
    );
    for m in r.rollup_mismatches.iter().take(show) {
        let rollup = m.rollup.map_or("none".to_string(), |n| n.to_string());
        println!(
            "ROLLUP post {}: expected {}, rollup {rollup}",
            m.post_id, m.expected
        );
    }
    println!(
        "quarantine: {} records for {} poison messages published",
        r.quarantined, r.poison_expected
    );
    if r.rollups_checked {
        println!(
            "rollups: {} of {} posts exact",
            r.rollups_exact,
            r.rollups_exact + r.rollup_mismatches.len()
        );
    }
    if !r.consistent_snapshot {
        println!("note: shards and memberships were not read at one read time; while the service is still committing, invariant violations may be artefacts");
    }
}

/// The command line, quoted where a shell would need it.
fn command_line() -> String {
    let quote = |a: String| {
        if !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c))
        {
            a
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    std::env::args().map(quote).collect::<Vec<_>>().join(" ")
}

/// Returns on Ctrl-C or SIGTERM.
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
