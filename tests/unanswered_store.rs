//! A store that stops answering without closing anything: a PostgreSQL
//! host gone in a failover or a partition (a proxy that stops forwarding,
//! a black hole), or Firestore RPCs that get no answer (the emulator's
//! latency far above the call deadline). The replica turns not ready
//! within `--stuck-commit-threshold-secs` and says why (`/readyz`, the
//! `hotcount_commits_stalled` gauge), acks and counts nothing meanwhile,
//! and once the store answers again it is ready and exact by itself.

mod common;
#[path = "support/scrape.rs"]
mod scrape;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Backend, Ev, Harness, Running};
use hotcount_emulators::FaultSpec;

const THRESHOLD: Duration = Duration::from_secs(2);
/// Readiness is judged every 200 ms; a CI machine may be slow besides.
const MARGIN: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(60);

fn run_flags(store: &str) -> Vec<&str> {
    vec![
        "--store",
        store,
        "--store-call-timeout-ms",
        "500",
        "--stuck-commit-threshold-secs",
        "2",
        "--shards",
        "2",
    ]
}

async fn readyz(addr: SocketAddr) -> (u16, String) {
    scrape::get(addr, "/readyz").await
}

/// Waits until `/readyz` answers 200 (`true`) or 503 (`false`); how long it took.
async fn until_ready(addr: SocketAddr, ready: bool, within: Duration) -> Duration {
    let started = tokio::time::Instant::now();
    loop {
        let (status, body) = readyz(addr).await;
        if (status == 200) == ready {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "/readyz still {status} {body:?} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metric(addr: SocketAddr, series: &str) -> f64 {
    let (_, body) = scrape::get(addr, "/metrics").await;
    scrape::value(&body, series).unwrap_or_else(|| panic!("no {series}"))
}

/// The scenario on either store: `silence` makes the store stop answering,
/// `answer` lets it answer again.
async fn stalls_then_recovers_exactly(
    h: &Harness,
    consumer: &Running,
    silence: impl FnOnce(),
    answer: impl FnOnce(),
) {
    let addr = scrape::metrics_addr(&consumer.stats).await;
    until_ready(addr, true, WAIT).await;
    let before = common::likes("p", 20, "a");
    h.publish(&before).await;
    assert!(consumer.wait_for_acks(20, WAIT).await);
    let counted = common::expected(&before);
    assert_eq!(h.wait_for_counts(&counted, WAIT).await, counted);

    silence();
    let silenced = tokio::time::Instant::now();
    // New likes, unlikes of earlier ones, and redeliveries of earlier events.
    let mut after: Vec<Ev> = (0..10)
        .map(|u| Ev::unlike(&format!("b-{u}"), "p", &format!("user-{u}"), 2))
        .collect();
    after.extend(common::likes("q", 15, "c"));
    after.extend(before.iter().take(5).cloned());
    h.publish(&after).await;
    let acked = consumer.stats.acks.get();

    let took = until_ready(addr, false, THRESHOLD + MARGIN).await;
    let (_, body) = readyz(addr).await;
    assert!(body.contains("stalled"), "says why: {body:?}");
    assert_eq!(metric(addr, "hotcount_commits_stalled").await, 1.0);
    assert_eq!(metric(addr, "hotcount_ready").await, 0.0);
    eprintln!(
        "not ready {:?} after the store went silent",
        silenced.elapsed().max(took)
    );
    // Nothing acked, nothing counted, while the store does not answer.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(consumer.stats.acks.get(), acked, "no ack without a commit");
    assert_eq!(h.counts(counted.keys()).await, counted);
    assert!(consumer.stats.store_call_timeouts.get() > 0);

    answer();
    until_ready(addr, true, WAIT).await;
    let mut all = before.clone();
    all.extend(after);
    let want = common::expected(&all);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want, "exact after");
    assert_eq!(metric(addr, "hotcount_commits_stalled").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_host_that_stops_answering_turns_the_replica_not_ready_then_exact() {
    let h = Harness::start_on(Backend::Postgres).await;
    let cluster = &h.postgres.as_ref().expect("postgres").0;
    let proxy = common::pg::Proxy::start(cluster.addr()).await;
    let url = proxy.url("hotcount");
    let consumer = h.spawn(h.run_args("hotcount", &run_flags(&url)));
    stalls_then_recovers_exactly(&h, &consumer, || proxy.black_hole(), || proxy.resume()).await;
    let stats = consumer.stop().await;
    assert_eq!(stats.commit_progress.check(THRESHOLD), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firestore_rpcs_without_an_answer_turn_the_replica_not_ready_then_exact() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("hotcount", &run_flags("firestore")));
    let faults = h.emulators.firestore_faults();
    let silence = || {
        for method in ["BatchGetDocuments", "Commit"] {
            faults
                .add(FaultSpec::latency(method, Duration::from_secs(120)))
                .expect("fault");
        }
    };
    stalls_then_recovers_exactly(&h, &consumer, silence, || faults.clear()).await;
    consumer.stop().await;
}

/// The milestone dispatcher's store calls get no answer (Firestore
/// RunQuery far past the call deadline, the commits unaffected): the
/// replica turns not ready saying why (`hotcount_stage_stalled{stage=
/// "milestones"}`), and once the store answers it is ready again and the
/// milestone recorded meanwhile is delivered: nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_milestone_dispatcher_without_store_answers_turns_the_replica_not_ready_then_delivers() {
    let h = Harness::start().await;
    let sink = hotcount_emulators::webhook::Sink::start(
        hotcount_emulators::webhook::SinkConfig::default(),
    )
    .await
    .expect("sink");
    let url = sink.url();
    let mut flags = run_flags("firestore");
    flags.extend([
        "--milestone-webhook",
        url.as_str(),
        "--milestones",
        "5",
        "--rollup-interval-ms",
        "50",
        "--milestone-retry-initial-ms",
        "50",
    ]);
    let consumer = h.spawn(h.run_args("hotcount", &flags));
    let addr = scrape::metrics_addr(&consumer.stats).await;
    until_ready(addr, true, WAIT).await;
    // The refresher past its start-up sweep (a RunQuery too): one rollup
    // written.
    h.publish(&common::likes("warm", 1, "w")).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while consumer.stats.rollup_refreshes.get() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "a rollup written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let faults = h.emulators.firestore_faults();
    faults
        .add(FaultSpec::latency("RunQuery", Duration::from_secs(120)))
        .expect("fault");
    let events = common::likes("p", 8, "a");
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(9, WAIT).await, "commits go on");
    until_ready(addr, false, THRESHOLD + MARGIN).await;
    let (_, body) = readyz(addr).await;
    assert!(
        body.contains("milestone dispatch stalled"),
        "says why: {body:?}"
    );
    assert_eq!(
        metric(addr, "hotcount_stage_stalled{stage=\"milestones\"}").await,
        1.0
    );
    assert!(sink.processed().is_empty());

    faults.clear();
    until_ready(addr, true, WAIT).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while sink.processed().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let keys: Vec<String> = sink.processed().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["hotcount:p:5"], "delivered once the store answers");
    assert_eq!(
        metric(addr, "hotcount_stage_stalled{stage=\"milestones\"}").await,
        0.0
    );
    consumer.stop().await;
}
