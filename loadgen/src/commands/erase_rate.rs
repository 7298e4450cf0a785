//! `hotcount-loadgen erase-rate`: likes erased per second for one heavy
//! user beside the pipeline's own rate on the same store, in one run, on
//! the Firestore emulator and a throwaway PostgreSQL server
//! ([`hotcount_loadgen::bench::erase`]).

use std::process::ExitCode;

use clap::Args;
use hotcount::config::{Endpoints, StoreLocation, Target};
use hotcount::store::postgres::{PgDb, PgDbConfig};
use hotcount::store::selected::SelectedDb;
use hotcount_emulators::{Emulators, EmulatorsConfig};
use hotcount_loadgen::bench::erase::{self, CheckPass, EraseRate, EraseRateSpec};
use hotcount_pgtemp::PgCluster;

use super::temp_postgres;

/// `hotcount-loadgen erase-rate`: the flags.
#[derive(Args, Debug)]
pub struct EraseRateArgs {
    /// The heavy user's likes, one per post.
    #[arg(long, default_value_t = 20_000)]
    pub likes: u32,
    /// Stores to run on, in order: `firestore` (the in-process emulator),
    /// `postgres` (a throwaway server, durable).
    #[arg(long, value_delimiter = ',', default_value = "firestore,postgres")]
    pub stores: Vec<String>,
    /// Rounds per store.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// Then, per store, this many pairs of pipeline passes with the
    /// tombstone check on and off (no user erased), alternated, on one
    /// store: the check's CPU and time per like (0: none).
    #[arg(long, default_value_t = 0)]
    pub check_cost_rounds: u32,
}

/// Runs each store's rounds and prints one line per round.
pub async fn run(args: EraseRateArgs) -> anyhow::Result<ExitCode> {
    let spec = EraseRateSpec {
        likes: args.likes,
        // The service's defaults (`--shards`, `--max-batch-events`,
        // `--counter-shards`).
        shards: 16,
        max_batch_events: 1000,
        counter_shards: hotcount::config::DEFAULT_COUNTER_SHARDS,
    };
    println!("store\tround\tlikes\tpipeline likes/s\tbatches\terase likes/s\terase commits\terase / pipeline");
    for store in &args.stores {
        for round in 1..=args.rounds {
            let rate = match store.as_str() {
                "firestore" => on_firestore(&spec).await?,
                "postgres" => on_postgres(&spec).await?,
                other => anyhow::bail!("--stores: unknown store {other:?} (firestore, postgres)"),
            };
            print_rate(store, round, &rate);
        }
    }
    if args.check_cost_rounds > 0 {
        println!("store\tpass\tcheck\tlikes\tlikes/s\tCPU ms per 1,000 likes");
        for store in &args.stores {
            let passes = match store.as_str() {
                "firestore" => {
                    let (_emulators, db) = firestore().await?;
                    erase::check_cost(db, &spec, args.check_cost_rounds).await?
                }
                _ => {
                    let (_cluster, db) = postgres().await?;
                    erase::check_cost(db, &spec, args.check_cost_rounds).await?
                }
            };
            print_passes(store, &passes);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per pass, then the median over rounds of on/off (CPU, time).
fn print_passes(store: &str, passes: &[CheckPass]) {
    let mut cpu_ratios = Vec::new();
    let mut wall_ratios = Vec::new();
    for (i, pass) in passes.iter().enumerate() {
        let cpu = pass
            .cpu_ms_per_1000()
            .map_or_else(|| "?".to_string(), |ms| format!("{ms:.2}"));
        println!(
            "{store}\t{}\t{}\t{}\t{:.0}\t{cpu}",
            i + 1,
            if pass.checked { "on" } else { "off" },
            pass.likes,
            pass.likes as f64 / pass.wall.as_secs_f64().max(1e-9)
        );
    }
    for pair in passes.chunks(2) {
        let (on, off) = match pair {
            [a, b] if a.checked => (a, b),
            [a, b] => (b, a),
            _ => continue,
        };
        if let (Some(on_cpu), Some(off_cpu)) = (on.cpu_ms_per_1000(), off.cpu_ms_per_1000()) {
            cpu_ratios.push(on_cpu / off_cpu.max(1e-9));
        }
        wall_ratios.push(on.wall.as_secs_f64() / off.wall.as_secs_f64().max(1e-9));
    }
    println!(
        "{store}\tcheck on / off, median of {} rounds: CPU per like x{:.3}, time x{:.3}",
        wall_ratios.len(),
        median(&mut cpu_ratios),
        median(&mut wall_ratios)
    );
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn print_rate(store: &str, round: u32, r: &EraseRate) {
    println!(
        "{store}\t{round}\t{}\t{:.0}\t{}\t{:.0}\t{}\tx{:.2}",
        r.likes,
        r.counted_per_sec(),
        r.batches,
        r.erased_per_sec(),
        r.erase_commits,
        r.erased_per_sec() / r.counted_per_sec().max(1e-9)
    );
}

/// One round on fresh in-process emulators (no injected round trip).
async fn on_firestore(spec: &EraseRateSpec) -> anyhow::Result<EraseRate> {
    let (_emulators, db) = firestore().await?;
    Ok(erase::run(db, spec).await?)
}

/// One round on a fresh throwaway server (`fsync` on), migrated.
async fn on_postgres(spec: &EraseRateSpec) -> anyhow::Result<EraseRate> {
    let (_cluster, db) = postgres().await?;
    Ok(erase::run(db, spec).await?)
}

/// Fresh in-process emulators (kept running while the first value lives)
/// and their Firestore database.
async fn firestore() -> anyhow::Result<(Emulators, SelectedDb)> {
    let emulators = Emulators::start(EmulatorsConfig::default()).await?;
    let endpoints = Endpoints {
        pubsub_emulator_host: Some(emulators.pubsub_addr().to_string()),
        firestore_emulator_host: Some(emulators.firestore_addr().to_string()),
    };
    let target = Target {
        store: StoreLocation::Firestore,
        project: "erase-rate".into(),
        database: "(default)".into(),
        collection_prefix: String::new(),
    };
    let db = hotcount::connect::firestore_db(&endpoints, &target).await?;
    Ok((emulators, SelectedDb::Firestore(db)))
}

/// A fresh throwaway server (`fsync` on; removed when the first value is
/// dropped), migrated.
async fn postgres() -> anyhow::Result<(PgCluster, SelectedDb)> {
    let (cluster, location) = temp_postgres("erase-rate").await?;
    let StoreLocation::Postgres { url } = location else {
        anyhow::bail!("a throwaway server has a URL");
    };
    let db = PgDb::new(&PgDbConfig::new(url))?;
    db.migrate().await?;
    Ok((cluster, SelectedDb::Postgres(db)))
}
