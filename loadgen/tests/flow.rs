//! The load generator end to end against the in-process emulators: the demo
//! flow at CI size, and `verify` catching a corrupted count.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use hotcount::config::{Endpoints, RunArgs, Target};
use hotcount::ops::setup::{self, SetupArgs};
use hotcount::store::firestore::codec;
use hotcount_emulators::{Emulators, EmulatorsConfig};
use hotcount_loadgen::demo::{self, DemoConfig};
use hotcount_loadgen::generate;
use hotcount_loadgen::publish::{self, PublishOptions};
use tokio::sync::watch;

#[derive(Parser)]
struct RunCli {
    #[command(flatten)]
    run: RunArgs,
}

fn run_args(extra: &[&str]) -> RunArgs {
    let mut argv = vec![
        "demo",
        "--project",
        "loadgen-test",
        "--flush-interval-ms",
        "20",
        "--metrics-addr",
        "off",
    ];
    argv.extend_from_slice(extra);
    RunCli::parse_from(argv).run
}

#[path = "support/small_workload.rs"]
mod small_workload;
use small_workload::small_workload;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_demo_at_ci_size_counts_exactly_through_the_emulators_push_delivery() {
    let out = std::env::temp_dir().join(format!("hotcount-push-demo-test-{}", std::process::id()));
    let config = DemoConfig {
        run: run_args(&["--delivery", "push"]),
        workload: small_workload(8),
        rate_per_sec: 0,
        store_rtt_ms: 1,
        out_dir: out.clone(),
        drain_timeout: Duration::from_secs(120),
        progress: false,
        milestones: false,
    };
    let (_cancel_tx, cancel) = watch::channel(false);
    let summary = demo::run(&config, cancel).await.expect("demo runs");
    let table = demo::render(&summary);
    assert!(summary.is_success(), "{table}");
    let stats = &summary.stats;
    use hotcount::telemetry::PushOutcome;
    assert!(
        stats.push_requests.get(PushOutcome::Acked) >= 3_000,
        "every message came as a push request, answered 204: {table}"
    );
    assert_eq!(
        stats.push_requests.get(PushOutcome::Unauthenticated),
        0,
        "{table}"
    );
    assert_eq!(summary.verify.quarantined, 30, "{table}");
    assert!(table.contains("push answers"), "{table}");
    let _ = std::fs::remove_dir_all(out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_runs_push_beside_pull_and_prints_their_ratios() {
    use hotcount::config::{Delivery, Strategy};
    use hotcount_loadgen::bench::{self, BenchConfig, Case, Runner, Verdict};
    let config = BenchConfig {
        run: run_args(&[]),
        events: 2_000,
        posts: 200,
        users: 2_000,
        seed: 5,
        store_rtt_ms: 1,
        max_secs: 90,
        rate_per_sec: 0,
        cases: vec![Case::Viral],
        strategies: vec![Strategy::Batched],
        deliveries: vec![Delivery::Push, Delivery::Pull],
        backlog: true,
        consumer_bin: None,
        null_consumer_bin: None,
        write_floor: false,
        exact_floor: false,
        compare_bin: None,
        rounds: 1,
        // Two push replicas: the subscription pushes through the front.
        replicas: 2,
        compare_rollups: false,
        data_format: None,
        consumer_log: None,
    };
    let results = bench::run(&config, |_| {}).await.expect("bench runs");
    let table = bench::render(&results, Case::Viral);
    let runners: Vec<Runner> = results.iter().map(|r| r.runner).collect();
    assert_eq!(
        runners,
        [
            Runner::Push(Strategy::Batched),
            Runner::Hotcount(Strategy::Batched)
        ],
        "{table}"
    );
    for r in &results {
        assert_eq!(r.verdict, Verdict::Exact, "{table}");
        assert_eq!(r.acked, r.published, "{table}");
    }
    assert!(table.contains("| batched, push |"), "{table}");
    assert!(table.contains("batched, push / pull"), "{table}");
    // Pulling settles leases with Acknowledge calls; push answers instead.
    let pulled = &results[1].lease_calls;
    assert!(pulled.acknowledge_calls > 0, "{table}");
    assert!(pulled.acknowledge_ids >= results[1].acked, "{table}");
    assert_eq!(results[0].lease_calls.acknowledge_calls, 0, "{table}");
    assert!(
        table.contains("| Acknowledge calls (ids) per 1,000 events |"),
        "{table}"
    );
    assert!(table.contains("n/a (push: the answer acks)"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_flow_at_ci_size_verifies_every_count_exact() {
    let out = std::env::temp_dir().join(format!("hotcount-demo-test-{}", std::process::id()));
    let config = DemoConfig {
        run: run_args(&["--milestones", "10,50,100", "--rollup-interval-ms", "100"]),
        workload: small_workload(7),
        rate_per_sec: 0,
        store_rtt_ms: 1,
        out_dir: out.clone(),
        drain_timeout: Duration::from_secs(120),
        progress: false,
        milestones: true,
    };
    let (_cancel_tx, cancel) = watch::channel(false);
    let summary = demo::run(&config, cancel).await.expect("demo runs");
    let table = demo::render(&summary);
    assert!(
        summary.is_success(),
        "{table}\n{:?}",
        summary.verify.mismatches
    );
    assert_eq!(summary.publish.published, 3_000);
    // The in-process sink got every milestone the truth crosses, once per key.
    let milestones = summary.milestones.as_ref().expect("milestones on");
    assert!(milestones.expected > 0, "{table}");
    assert_eq!(
        milestones.delivered,
        milestones.expected + milestones.above_final,
        "{table}"
    );
    assert!(
        milestones.missing.is_empty() && milestones.bad_signatures == 0,
        "{table}"
    );
    assert!(table.contains("milestones delivered"), "{table}");
    // Read back from Firestore: one record per poison message published.
    assert_eq!(summary.verify.poison_expected, 30, "{table}");
    assert_eq!(summary.verify.quarantined, 30, "{table}");
    assert_eq!(summary.verify.quarantined_events, 0, "{table}");
    assert!(summary.stats.duplicates.get() > 0, "{table}");
    assert!(
        summary.commits < 3_000 / 5,
        "batched: {} commits",
        summary.commits
    );
    let png = std::fs::read(&summary.report.latency_png).expect("latency.png written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG file");
    let md = std::fs::read_to_string(&summary.report.markdown).expect("report.md written");
    assert!(
        md.contains("## Machine") && md.contains("latency.png"),
        "{md}"
    );
    let _ = std::fs::remove_dir_all(out);
}

/// Publishes a small workload through a live consumer and drains it.
async fn counted_workload(
    emulators: &Emulators,
    endpoints: &Endpoints,
    truth_path: &std::path::Path,
) {
    let setup_args = SetupArgs {
        project: "loadgen-test".into(),
        topic: "likes".into(),
        subscription: "likes-hotcount".into(),
        dead_letter_topic: "likes-dead-letter".into(),
        dead_letter_subscription: "likes-dead-letter-inspect".into(),
        ack_deadline_secs: 60,
        min_retry_backoff_secs: 1,
        max_retry_backoff_secs: 10,
        max_delivery_attempts: 20,
        exactly_once: false,
        topic_retention_days: 7,
        iam: Default::default(),
        push: Default::default(),
    };
    setup::setup(endpoints, &setup_args).await.expect("setup");
    let config = run_args(&[]).validate().expect("valid");
    let (stop_tx, stop) = watch::channel(false);
    let stats = Arc::new(hotcount::telemetry::Stats::default());
    let service = {
        let (endpoints, config) = (endpoints.clone(), config.clone());
        tokio::spawn(async move { hotcount::service::run(&endpoints, &config, stop, stats).await })
    };
    let workload = generate(&small_workload(11));
    workload.truth.save(truth_path).expect("truth saved");
    let (_cancel_tx, cancel) = watch::channel(false);
    let options = PublishOptions {
        progress: false,
        ..PublishOptions::default()
    };
    let report = publish::connect_and_publish(
        endpoints,
        "projects/loadgen-test/topics/likes",
        &workload,
        &options,
        cancel,
    )
    .await
    .expect("published");
    assert_eq!(report.failed, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while emulators
        .pubsub()
        .stats(&config.subscription)
        .map_or(1, |s| s.unacked)
        > 0
    {
        assert!(tokio::time::Instant::now() < deadline, "backlog drained");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(true);
    service.await.expect("task").expect("service");
}

fn verify_cmd(emulators: &Emulators, truth: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hotcount-loadgen"))
        .env("PUBSUB_EMULATOR_HOST", emulators.pubsub_addr().to_string())
        .env(
            "FIRESTORE_EMULATOR_HOST",
            emulators.firestore_addr().to_string(),
        )
        .args(["verify", "--project", "loadgen-test", "--truth"])
        .arg(truth)
        .output()
        .expect("verify runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_a_corrupted_post_and_exits_nonzero() {
    let emulators = Emulators::start(EmulatorsConfig::default())
        .await
        .expect("emulators");
    let endpoints = Endpoints {
        pubsub_emulator_host: Some(emulators.pubsub_addr().to_string()),
        firestore_emulator_host: Some(emulators.firestore_addr().to_string()),
    };
    let truth_path =
        std::env::temp_dir().join(format!("hotcount-truth-{}.json", std::process::id()));
    counted_workload(&emulators, &endpoints, &truth_path).await;

    let clean = verify_cmd(&emulators, &truth_path);
    let text = String::from_utf8_lossy(&clean.stdout);
    assert_eq!(clean.status.code(), Some(0), "{text}");

    // Corrupt one shard of one post behind the service's back.
    let truth = hotcount_loadgen::Truth::load(&truth_path).expect("truth");
    let (post, _) = truth
        .counts
        .iter()
        .find(|(_, c)| **c > 0)
        .expect("a liked post");
    let target = Target {
        store: Default::default(),
        project: "loadgen-test".into(),
        database: "(default)".into(),
        collection_prefix: String::new(),
    };
    let db = hotcount::connect::firestore_db(&endpoints, &target)
        .await
        .expect("db");
    let write = codec::counter_increment(db.layout(), post, 0, 3);
    db.commit(vec![write], None)
        .await
        .expect("corrupting commit");

    let corrupted = verify_cmd(&emulators, &truth_path);
    let text = String::from_utf8_lossy(&corrupted.stdout);
    assert_eq!(corrupted.status.code(), Some(1), "{text}");
    assert!(text.contains(&format!("MISMATCH post {post}:")), "{text}");
    assert!(text.contains(&format!("INVARIANT post {post}:")), "{text}");
    let _ = std::fs::remove_file(truth_path);
    emulators.shutdown().await;
}
