//! Store failures end to end: what a failed attempt leaves behind in
//! Firestore, and what the next attempt of the same batch tells it.

mod common;
#[path = "support/events.rs"]
mod events;

use std::time::Duration;

use common::{Ev, Harness};
use gcloud_sdk::tonic::Code;
use hotcount_emulators::FaultSpec;

const WAIT: Duration = Duration::from_secs(30);

/// One like committed through a consumer while the first `times` Commits
/// fail with `code`; returns the emulators' harness afterwards.
async fn one_like_through_failed_commits(code: Code, times: u64) -> Harness {
    let h = Harness::start().await;
    h.emulators
        .firestore_faults()
        .add(FaultSpec::error("Commit", code).times(times))
        .expect("fault");
    // Every batch read in its transaction: these are its failures (a
    // commit from known memberships opens none: tests/known_memberships.rs).
    let args = ["--shards", "1", "--known-memberships-entries", "0"];
    let consumer = h.spawn(h.run_args("c1", &args));
    h.publish(&[Ev::like("e1", "p", "u1", 1)]).await;
    assert!(consumer.wait_for_acks(1, WAIT).await);
    assert_eq!(h.count("p").await, 1);
    consumer.stop().await;
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_failed_on_the_wire_is_rolled_back() {
    let h = one_like_through_failed_commits(Code::Unavailable, 1).await;
    assert_eq!(h.emulators.firestore_counters().get("Commit"), 2);
    assert!(
        h.emulators.firestore_counters().get("Rollback") >= 1,
        "the failed attempt's transaction was rolled back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_aborted_names_the_transaction_it_retries() {
    let h = one_like_through_failed_commits(Code::Aborted, 2).await;
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
    let mut leased_max = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while consumer.stats.acks.get() < 400 && tokio::time::Instant::now() < deadline {
        let leased = h.subscription_stats().outstanding;
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

/// Emulators whose commits wait at most `lock_wait` for an older
/// transaction's lock before they are ABORTED.
async fn harness_with_lock_wait(lock_wait: Duration) -> Harness {
    let mut config = hotcount_emulators::EmulatorsConfig::default();
    config.firestore.lock_wait_timeout = lock_wait;
    Harness::start_with_emulators(common::SubscriptionOptions::default(), config).await
}

/// Opens a read-write transaction that reads (and so locks) the membership
/// of (`post`, `user`) and never ends it: what a replica killed mid-batch
/// leaves behind until the transaction expires. Returns its id.
async fn abandon_a_transaction_on(h: &Harness, post: &str, user: &str) -> Vec<u8> {
    use hotcount::store::firestore::{Opened, Read};
    let key = hotcount::model::batch::MembershipKey {
        post_id: post.into(),
        user_id: user.into(),
    };
    let opened = Opened::default();
    let read = Read::ReadWrite {
        retry: None,
        opened: &opened,
    };
    let read =
        h.db.read_memberships(std::iter::once(&key), None, None, read)
            .await
            .expect("read");
    assert!(!read.transaction.is_empty());
    read.transaction
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_locked_by_a_dead_transaction_stalls_only_its_own_events() {
    let h = harness_with_lock_wait(Duration::from_millis(300)).await;
    let stuck = abandon_a_transaction_on(&h, "p", "user-stuck").await;
    let consumer = h.spawn(h.run_args("c1", &["--shards", "1", "--flush-interval-ms", "300"]));
    let mut events: Vec<Ev> = (0..29)
        .map(|u| Ev::like(&format!("e-{u}"), "p", &format!("user-{u}"), 1))
        .collect();
    events.push(Ev::like("e-stuck", "p", "user-stuck", 1));
    h.publish(&events).await;
    // The 29 others commit while the dead transaction still holds its lock.
    let others = std::collections::BTreeMap::from([("p".to_string(), 29)]);
    assert_eq!(
        h.wait_for_counts(&others, Duration::from_secs(20)).await,
        others
    );
    assert!(consumer.stats.contention_splits.get() > 0);
    // Once it ends, the stuck event commits too.
    h.db.rollback(stuck).await;
    let all = std::collections::BTreeMap::from([("p".to_string(), 30)]);
    assert_eq!(h.wait_for_counts(&all, WAIT).await, all);
    consumer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_by_its_deadline_rolls_back_and_nacks_what_did_not_commit() {
    // Commits would wait an hour for the dead transaction's lock, and each
    // store call may take a minute: only the 2 s shutdown deadline can end
    // the stop within the harness's bound (30 s).
    let h = harness_with_lock_wait(Duration::from_secs(3600)).await;
    let _stuck = abandon_a_transaction_on(&h, "p", "user-stuck").await;
    let consumer = h.spawn(h.run_args(
        "c1",
        &[
            "--shards",
            "1",
            "--shutdown-deadline-secs",
            "2",
            "--store-call-timeout-ms",
            "60000",
            "--stuck-commit-threshold-secs",
            "60",
        ],
    ));
    h.publish(&[Ev::like("e-stuck", "p", "user-stuck", 1)])
        .await;
    // Wait until the consumer's commit is waiting for the lock.
    let deadline = tokio::time::Instant::now() + WAIT;
    while h.emulators.firestore().stats().lock_waits == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the commit never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = consumer.stop().await;
    assert_eq!(
        h.emulators.firestore().stats().lock_timeouts,
        0,
        "ended by the shutdown deadline, not by the lock wait"
    );
    assert_eq!(stats.nacks.get(), 1, "what did not commit is nacked");
    assert_eq!(stats.acks.get(), 0);
    let active = h.emulators.firestore().stats().active_transactions;
    assert_eq!(active, 1, "only the dead transaction is left open");
}

/// The Firestore store over the harness's database, every RPC ending
/// within `call_timeout`.
fn store_with(h: &Harness, call_timeout: Duration) -> hotcount::store::firestore::FirestoreStore {
    hotcount::store::firestore::FirestoreStore::new(
        h.db.clone().with_call_timeout(call_timeout),
        hotcount::store::StoreSettings {
            consumer: "c1".into(),
            counter_shards: 4,
            counter_shard_target_writes_per_sec: 1,
            marker_ttl: Duration::from_secs(86_400),
            due_records: false,
            known_memberships: 0,
        },
    )
}

fn one_like(post: &str, id: &str) -> hotcount::model::batch::Batch {
    let event = events::event_of(true, post, "u1", 1, 1_700_000_000_000_000, id);
    hotcount::model::batch::Batch::new(vec![event], vec![])
}

/// Commits `batch` until it commits (transient failures retried).
async fn commit_until_done(
    store: &hotcount::store::firestore::FirestoreStore,
    batch: &hotcount::model::batch::Batch,
) {
    use hotcount::store::{Attempt, CounterStore};
    let mut attempt = Attempt::first();
    for _ in 0..50 {
        match store.commit(batch, &attempt).await {
            Ok(_) => return,
            Err(e) if e.is_retryable() => attempt = Attempt::after(&e),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("never committed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firestore_rpc_that_gets_no_answer_ends_at_its_deadline_and_says_what_it_left() {
    use hotcount::store::{Attempt, CounterStore};
    let h = Harness::start().await;
    let store = store_with(&h, Duration::from_millis(300));
    let faults = h.emulators.firestore_faults();
    // The read gets no answer: nothing was written.
    faults
        .add(FaultSpec::latency(
            "BatchGetDocuments",
            Duration::from_secs(5),
        ))
        .expect("fault");
    let started = tokio::time::Instant::now();
    let error = tokio::time::timeout(WAIT, store.commit(&one_like("p", "a"), &Attempt::first()))
        .await
        .expect("the read ends at its deadline")
        .expect_err("no answer");
    assert_eq!(
        error.code,
        hotcount::store::Code::DeadlineExceeded,
        "{error}"
    );
    assert!(error.is_retryable() && !error.proves_content(), "{error}");
    assert!(error.message.contains("nothing was written"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    faults.clear();
    // The Commit gets no answer: its outcome is unknown, and the next
    // attempts count it once either way.
    faults
        .add(FaultSpec::latency("Commit", Duration::from_secs(5)))
        .expect("fault");
    let batch = one_like("q", "b");
    let error = tokio::time::timeout(WAIT, store.commit(&batch, &Attempt::first()))
        .await
        .expect("the commit ends at its deadline")
        .expect_err("no answer");
    assert_eq!(
        error.code,
        hotcount::store::Code::DeadlineExceeded,
        "{error}"
    );
    assert!(error.message.contains("outcome is unknown"), "{error}");
    faults.clear();
    commit_until_done(&store, &batch).await;
    assert_eq!(h.count("q").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firestore_commit_abandoned_at_the_shutdown_deadline_reports_its_outcome_unknown() {
    use hotcount::store::{Attempt, CounterStore, Deadline};
    let h = Harness::start().await;
    let store = store_with(&h, Duration::from_secs(30));
    let faults = h.emulators.firestore_faults();
    faults
        .add(FaultSpec::latency("Commit", Duration::from_secs(3)))
        .expect("fault");
    let batch = one_like("p", "a");
    let (set, deadline) = Deadline::channel();
    set.send_replace(Some(
        tokio::time::Instant::now() + Duration::from_millis(500),
    ));
    let error = store
        .commit(&batch, &Attempt::first().until(deadline))
        .await
        .expect_err("abandoned at the deadline");
    assert!(error.message.contains("outcome is unknown"), "{error}");
    assert!(!error.message.contains("nothing applied"), "{error}");
    faults.clear();
    commit_until_done(&store, &batch).await;
    assert_eq!(h.count("p").await, 1, "counted once");
    // Abandoned while reading: nothing applied, and said so.
    faults
        .add(FaultSpec::latency(
            "BatchGetDocuments",
            Duration::from_secs(3),
        ))
        .expect("fault");
    let (set, deadline) = Deadline::channel();
    set.send_replace(Some(
        tokio::time::Instant::now() + Duration::from_millis(300),
    ));
    let error = store
        .commit(&one_like("r", "c"), &Attempt::first().until(deadline))
        .await
        .expect_err("abandoned at the deadline");
    assert!(error.message.contains("nothing applied"), "{error}");
}
