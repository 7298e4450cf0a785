//! The CI-sized chaos run against a real PostgreSQL server (a throwaway
//! cluster): three `hotcount run --store postgres://...` processes, one
//! killed with SIGKILL again and again, connections cut before and after
//! COMMIT, lock spikes on the counter table while leases expire, the
//! Pub/Sub faults, a Seek replay, and exact counts read back from the
//! database at the end.

use std::time::Duration;

use hotcount::config::StoreLocation;
use hotcount_loadgen::chaos::{self, ChaosConfig, POSTGRES_FAULT_KINDS};
use hotcount_pgtemp::PgCluster;

#[path = "support/hotcount_bin.rs"]
mod hotcount_bin;

use hotcount_bin::hotcount_bin;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_on_postgres_under_kills_cut_commits_lock_spikes_and_replay() {
    let events = std::env::var("CHAOS_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let cluster = tokio::task::spawn_blocking(PgCluster::start)
        .await
        .expect("cluster thread");
    let url = cluster.create_database("chaos").await;
    let mut config = ChaosConfig::ci(events, hotcount_bin());
    config.timeout = Duration::from_secs(120);
    config.store = url.parse().expect("a postgres URL");
    assert!(matches!(config.store, StoreLocation::Postgres { .. }));
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let summary = chaos::run(&config, cancel).await.expect("chaos run");
    println!("{}", chaos::render(&summary));
    for kind in POSTGRES_FAULT_KINDS {
        assert!(
            summary.faults.get(kind).copied().unwrap_or(0) > 0,
            "{kind} fired"
        );
    }
    // The same verdict as the chaos command's PASS.
    let failures = summary.failures();
    assert!(
        failures.is_empty(),
        "chaos claims that failed: {failures:#?}\nserver log:\n{}",
        cluster.log()
    );
    assert!(summary.is_success());
}
