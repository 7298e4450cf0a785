//! The load generator against a real PostgreSQL server (a throwaway
//! cluster per test): the demo counts exactly and reads back from the
//! database, the bench measures round trips and the hottest counter row on
//! the server, and a run never empties a database it did not make.

use std::time::Duration;

use clap::Parser;
use hotcount::config::{RunArgs, Strategy};
use hotcount::store::postgres::{PgDb, PgDbConfig};
use hotcount_loadgen::bench::{self, BenchConfig, Case, Verdict};
use hotcount_loadgen::demo::{self, DemoConfig};
use hotcount_loadgen::run_error::RunError;
use hotcount_pgtemp::{connect, PgCluster};
use tokio::sync::watch;

#[path = "support/small_workload.rs"]
mod small_workload;
use small_workload::small_workload;

#[derive(Parser)]
struct RunCli {
    #[command(flatten)]
    run: RunArgs,
}

fn run_args(url: &str) -> RunArgs {
    RunCli::parse_from([
        "demo",
        "--project",
        "loadgen-pg-test",
        "--flush-interval-ms",
        "20",
        "--metrics-addr",
        "off",
        "--store",
        url,
    ])
    .run
}

/// A throwaway cluster (with logical decoding, for the bench) and a database on it.
async fn database(name: &str) -> (PgCluster, String) {
    let cluster =
        tokio::task::spawn_blocking(|| PgCluster::start_with(&[("wal_level", "logical")]))
            .await
            .expect("cluster thread");
    let url = cluster.create_database(name).await;
    (cluster, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_on_postgres_counts_every_post_exactly_read_back_from_the_database() {
    let (_cluster, url) = database("demo").await;
    let out = std::env::temp_dir().join(format!("hotcount-pg-demo-test-{}", std::process::id()));
    let config = DemoConfig {
        run: run_args(&url),
        workload: small_workload(7),
        rate_per_sec: 0,
        store_rtt_ms: 0,
        out_dir: out.clone(),
        drain_timeout: Duration::from_secs(120),
        progress: false,
        milestones: true,
    };
    let (_cancel_tx, cancel) = watch::channel(false);
    let summary = demo::run(&config, cancel).await.expect("demo runs");
    let table = demo::render(&summary);
    assert!(summary.is_success(), "{table}\n{:?}", summary.verify);
    let milestones = summary.milestones.as_ref().expect("milestones on");
    assert!(milestones.missing.is_empty(), "{table}");
    assert!(summary.verify.consistent_snapshot, "{table}");
    assert_eq!(summary.verify.quarantined, 30, "{table}");
    assert!(summary.verify.memberships_read > 0, "{table}");
    // The consumer went through the stage's proxy, which counted it.
    assert!(summary.store_rpcs > 0, "{table}");
    // What verify read is what is in the database.
    let client = connect(&url).await;
    let total: i64 = client
        .query_one(
            "SELECT COALESCE(sum(likes), 0)::int8 FROM counter_shards",
            &[],
        )
        .await
        .expect("sum of the counters")
        .get(0);
    assert_eq!(total, summary.verify.expected_total);
    let _ = std::fs::remove_dir_all(out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_on_postgres_measures_round_trips_and_the_hottest_counter_row() {
    let (_cluster, url) = database("bench").await;
    let config = BenchConfig {
        run: run_args(&url),
        events: 2_000,
        posts: 500,
        users: 2_000,
        seed: 3,
        store_rtt_ms: 0,
        max_secs: 90,
        rate_per_sec: 0,
        cases: vec![Case::Viral],
        strategies: vec![Strategy::Batched, Strategy::PerEvent],
        deliveries: vec![hotcount::config::Delivery::Pull],
        backlog: false,
        consumer_bin: None,
        null_consumer_bin: None,
        write_floor: false,
        exact_floor: false,
        compare_bin: None,
        rounds: 1,
        replicas: 1,
        compare_rollups: false,
        data_format: None,
        consumer_log: None,
    };
    let results = bench::run(&config, |_| {}).await.expect("bench runs");
    let table = bench::render(&results, Case::Viral);
    assert_eq!(results.len(), 2, "{table}");
    for r in &results {
        assert_eq!(r.verdict, Verdict::Exact, "{table}");
        assert!(r.postgres && r.store_rpcs > 0, "{table}");
        assert!(r.commits > 0 && r.hottest_writes > 0, "{table}");
        assert!(r.hottest_document.contains(" / shard "), "{table}");
        let post_writes = r.hottest_post_writes.expect("decoded");
        assert!(post_writes >= r.hottest_writes, "{table}");
    }
    let (batched, per_event) = (&results[0], &results[1]);
    // One transaction per event writes the viral post's counter row once
    // per event; a batch once per batch.
    assert!(batched.rpcs_per_1k() < per_event.rpcs_per_1k(), "{table}");
    assert!(batched.commits < per_event.commits, "{table}");
    // A transaction per message: at least its two round trips each (the
    // proxy counts them per connection, 64 connections at once).
    assert!(per_event.rpcs_per_1k() >= 1_500.0, "{table}");
    assert!(table.contains("round trips per 1,000 events"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_refuses_to_empty_a_database_with_hotcount_data_it_did_not_make() {
    let (_cluster, url) = database("theirs").await;
    let db = PgDb::new(&PgDbConfig::new(url.clone())).expect("a pool");
    db.migrate().await.expect("migrated by someone else");
    let client = connect(&url).await;
    client
        .batch_execute("INSERT INTO counter_shards (post_id, shard, likes) VALUES ('p', 0, 41)")
        .await
        .expect("their count");
    let refused = hotcount_loadgen::postgres::prepare(&url).await;
    assert!(matches!(refused, Err(RunError::Invalid(_))), "{refused:?}");
    let kept: i64 = client
        .query_one("SELECT likes FROM counter_shards WHERE post_id = 'p'", &[])
        .await
        .expect("still there")
        .get(0);
    assert_eq!(kept, 41);
    // Emptied, the database is the run's: prepared, and prepared again.
    client
        .batch_execute("DELETE FROM counter_shards")
        .await
        .expect("emptied");
    hotcount_loadgen::postgres::prepare(&url)
        .await
        .expect("an empty database is taken");
    hotcount_loadgen::postgres::prepare(&url)
        .await
        .expect("its own database again");
}
