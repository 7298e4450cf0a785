//! Store failures end to end: what a failed attempt leaves behind in
//! Firestore, and what the next attempt of the same batch tells it.

mod common;

use std::time::Duration;

use common::{Ev, Harness};
use gcloud_sdk::tonic::Code;
use hotcount_emulators::FaultSpec;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_failed_on_the_wire_is_rolled_back() {
    let h = Harness::start().await;
    h.emulators
        .firestore_faults()
        .add(FaultSpec::error("Commit", Code::Unavailable).times(1))
        .expect("fault");
    let consumer = h.spawn(h.run_args("c1", &["--shards", "1"]));
    h.publish(&[Ev::like("e1", "p", "u1", 1)]).await;
    assert!(consumer.wait_for_acks(1, WAIT).await);
    assert_eq!(h.count("p").await, 1);
    consumer.stop().await;
    assert_eq!(h.emulators.firestore_counters().get("Commit"), 2);
    assert!(
        h.emulators.firestore_counters().get("Rollback") >= 1,
        "the failed attempt's transaction was rolled back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_aborted_names_the_transaction_it_retries() {
    let h = Harness::start().await;
    h.emulators
        .firestore_faults()
        .add(FaultSpec::error("Commit", Code::Aborted).times(2))
        .expect("fault");
    let consumer = h.spawn(h.run_args("c1", &["--shards", "1"]));
    h.publish(&[Ev::like("e1", "p", "u1", 1)]).await;
    assert!(consumer.wait_for_acks(1, WAIT).await);
    assert_eq!(h.count("p").await, 1);
    consumer.stop().await;
    let stats = h.emulators.firestore().stats();
    assert_eq!(
        stats.retried_transactions, 2,
        "each retry keeps the age of the transaction it retries: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_when_streams_reconnect_while_messages_are_held() {
    use hotcount_emulators::FaultKind;

    let h = Harness::start().await;
    let events: Vec<Ev> = (0..400)
        .map(|u| Ev::like(&format!("r-{u}"), "p", &format!("user-{u}"), 1))
        .collect();
    h.publish(&events).await;
    // Slow commits keep messages held; dropped streams come back (resumed
    // by the client library) with a fresh server-side budget meanwhile.
    h.emulators
        .firestore_faults()
        .add(FaultSpec::latency("*", Duration::from_millis(150)))
        .expect("latency");
    h.emulators
        .pubsub_faults()
        .add(
            FaultSpec::new(FaultKind::DropStream)
                .probability(0.3)
                .times(40),
        )
        .expect("drop streams");
    let consumer = h.spawn(h.run_args(
        "c1",
        &[
            "--streams",
            "1",
            "--max-outstanding-messages",
            "50",
            "--max-batch-events",
            "1000",
            "--flush-interval-ms",
            "400",
        ],
    ));
    let subscription = format!(
        "projects/{}/subscriptions/{}",
        common::PROJECT,
        common::SUBSCRIPTION
    );
    let mut leased_max = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while consumer.stats.acks.get() < 400 && tokio::time::Instant::now() < deadline {
        let leased = h
            .emulators
            .pubsub()
            .stats(&subscription)
            .map_or(0, |s| s.outstanding);
        leased_max = leased_max.max(leased);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(h.count("p").await, 400);
    let stats = consumer.stop().await;
    let fired = h
        .emulators
        .pubsub_faults()
        .fired()
        .get(&FaultKind::DropStream)
        .copied()
        .unwrap_or(0);
    assert!(fired > 0, "streams were dropped");
    // Held by the service: at most the configured total (+1 read before the
    // cap was seen); leased by the server: that plus one response the
    // client library buffers.
    assert!(
        stats.in_flight.max() <= 51,
        "held {}",
        stats.in_flight.max()
    );
    assert!(
        leased_max <= 101,
        "{leased_max} leased at once with 1 stream x 50 after {fired} drops"
    );
}
