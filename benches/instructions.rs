//! Instructions per event of the decode stages (and of reading a stored
//! membership back from the store's answer, and of the known memberships'
//! per-key work beside the write floor's map), counted by cachegrind: exact
//! and repeatable where wall time on a shared, noisy machine is not (CPU
//! steal and frequency changes do not enter the count). It complements
//! `pipeline`'s `decode_validate_aggregate` and `aggregator_vs_dashmap`
//! groups: same payloads, same loops (`support`, `buffers`; the buffers on
//! one thread only).
//!
//! `cargo bench --bench instructions` runs this binary again under
//! `valgrind --tool=cachegrind` once per workload, and once for the setup
//! alone (building the inputs), which it subtracts; then it prints
//! instructions per event and each workload's ratio to `hotcount_sharded`
//! (and the DashMap buffer's to the aggregator's).
//! Without valgrind it says so and exits with success: the count is an
//! extra, not a gate. Instructions are not time (a cache miss costs more than
//! an add), so read them next to the criterion figures, not instead.

use std::collections::HashMap;
use std::process::{Command, ExitCode};

use hotcount::pipeline::aggregator::Aggregator;
use hotcount::store::firestore::known::KnownMemberships;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod buffers;
mod support;

/// Passes over the payloads per workload.
const ROUNDS: usize = 10;

/// The workloads, in print order; `setup` builds the payloads and stops.
const WORKLOADS: [&str; 16] = [
    "setup",
    "parse_only",
    "hotcount_sharded",
    "naive_mutex_hashmap",
    "parse_into_naive_mutex_hashmap",
    "batch_build_1000",
    "buffer_aggregator",
    "buffer_dashmap",
    "read_stored_memberships",
    "read_stored_memberships_sdk",
    "rollup_write_500",
    "rollup_write_500_sdk",
    "known_memberships",
    "floor_map",
    "known_memberships_viral",
    "floor_map_viral",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--workload") {
        return match args.get(at + 1) {
            Some(name) if run(name) => ExitCode::SUCCESS,
            other => {
                eprintln!("unknown workload {other:?}; one of {WORKLOADS:?}");
                ExitCode::FAILURE
            }
        };
    }
    if Command::new("valgrind").arg("--version").output().is_err() {
        println!("instructions: valgrind not found; install it to count instructions per event");
        return ExitCode::SUCCESS;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("instructions: cannot find this binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut counts = Vec::new();
    for name in WORKLOADS {
        match count(&exe, name) {
            Ok(n) => counts.push((name, n)),
            Err(e) => {
                eprintln!("instructions: {name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    print_table(&counts);
    ExitCode::SUCCESS
}

/// Runs one workload in this process (the child side).
fn run(name: &str) -> bool {
    let payloads = support::payloads();
    let agg: Aggregator<u32> = Aggregator::new(16, support::BATCH);
    let map = support::NaiveMap::default();
    let events = support::events();
    let config = support::store_config();
    let items = buffers::items();
    let mut messages: Vec<_> = (0..ROUNDS).map(|_| buffers::pending(&items, 1)).collect();
    let buffer = Aggregator::new(buffers::SHARDS, buffers::BATCH);
    let dash = buffers::DashBuffer::new();
    let responses = support::stored_membership_responses();
    let concentrated = support::concentrated_batches(support::PAYLOADS);
    let viral = support::viral_batches(support::PAYLOADS);
    // A fresh table per round, built with the setup.
    let mut tables: Vec<_> = (0..ROUNDS)
        .map(|_| KnownMemberships::new(200_000))
        .collect();
    let mut maps: Vec<_> = (0..ROUNDS).map(|_| HashMap::new()).collect();
    for _ in 0..ROUNDS {
        match name {
            "setup" => {}
            "parse_only" => support::parse_only(&payloads),
            "hotcount_sharded" => support::hotcount_sharded(&agg, &payloads),
            "naive_mutex_hashmap" => support::naive_mutex_hashmap(&map, &payloads),
            "parse_into_naive_mutex_hashmap" => {
                support::parse_into_naive_mutex_hashmap(&map, &payloads)
            }
            // As many events as the other workloads, in batches of 1,000.
            "batch_build_1000" => {
                for chunk in events.chunks(support::BATCH) {
                    support::build_batch(&config, chunk);
                }
            }
            // Owned messages, built with the setup: only the buffer counts.
            "buffer_aggregator" => {
                buffers::run(&buffer, messages.pop().unwrap_or_default());
            }
            "buffer_dashmap" => {
                buffers::run(&dash, messages.pop().unwrap_or_default());
            }
            // One stored membership read back per event, from the bytes the
            // store answers with (built with the setup).
            "read_stored_memberships" => {
                support::read_stored_memberships(&responses);
            }
            // One rollup write per event, in BatchWrite requests of 500.
            "rollup_write_500" => {
                for chunk in events.chunks(500) {
                    support::rollup_writes(&config, chunk);
                }
            }
            "rollup_write_500_sdk" => {
                for chunk in events.chunks(500) {
                    support::rollup_writes_sdk(&config, chunk);
                }
            }
            "read_stored_memberships_sdk" => {
                support::read_stored_memberships_sdk(&responses);
            }
            // The known memberships' per-key work on the concentrated
            // shape (then the viral one), and the write floor's map beside
            // it (the same events).
            "known_memberships" | "known_memberships_viral" => {
                let batches = if name == "known_memberships" {
                    &concentrated
                } else {
                    &viral
                };
                if let Some(known) = tables.pop() {
                    support::known_memberships_pass(&known, batches);
                    tables.insert(0, known);
                }
            }
            "floor_map" | "floor_map_viral" => {
                let batches = if name == "floor_map" {
                    &concentrated
                } else {
                    &viral
                };
                if let Some(mut map) = maps.pop() {
                    support::floor_map_pass(&mut map, batches);
                    maps.insert(0, map);
                }
            }
            _ => return false,
        }
    }
    true
}

/// Instructions the child executed for `name`, from cachegrind's summary.
fn count(exe: &std::path::Path, name: &str) -> Result<u64, String> {
    let out = Command::new("valgrind")
        .args([
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
        ])
        .arg(exe)
        .args(["--workload", name])
        .output()
        .map_err(|e| format!("valgrind did not run: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("exit {}: {stderr}", out.status));
    }
    parse_refs(&stderr).ok_or_else(|| format!("no `I refs` line in: {stderr}"))
}

/// The number on cachegrind's `I refs:` line (`==1== I   refs:  1,234`).
fn parse_refs(stderr: &str) -> Option<u64> {
    let line = stderr.lines().find(|l| l.contains("I   refs:"))?;
    let number = line.rsplit(':').next()?.trim().replace(',', "");
    number.parse().ok()
}

fn print_table(counts: &[(&str, u64)]) {
    let events = (support::PAYLOADS * ROUNDS) as f64;
    let setup = counts.first().map_or(0, |(_, n)| *n);
    let per_event = |n: u64| n.saturating_sub(setup) as f64 / events;
    let of = |workload: &str| {
        counts
            .iter()
            .find(|(name, _)| *name == workload)
            .map_or(f64::NAN, |(_, n)| per_event(*n))
    };
    let reference = of("hotcount_sharded");
    println!(
        "instructions per event (cachegrind; {} events per workload, setup subtracted)",
        events
    );
    println!(
        "{:<34} {:>12} {:>22}",
        "workload", "instr/event", "vs hotcount_sharded"
    );
    for (name, n) in &counts[1..] {
        let mine = per_event(*n);
        println!("{name:<34} {mine:>12.0} {:>21.2}x", mine / reference);
    }
    println!(
        "buffer_dashmap / buffer_aggregator: {:.2}x",
        of("buffer_dashmap") / of("buffer_aggregator")
    );
    println!(
        "read_stored_memberships_sdk / read_stored_memberships: {:.2}x",
        of("read_stored_memberships_sdk") / of("read_stored_memberships")
    );
    println!(
        "known_memberships / floor_map: {:.2}x (viral shape: {:.2}x)",
        of("known_memberships") / of("floor_map"),
        of("known_memberships_viral") / of("floor_map_viral")
    );
}
