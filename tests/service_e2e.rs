//! End-to-end behaviour of the counter service: the real client crates
//! against the in-process emulators, with counts checked against an
//! independent model of the expected state. The exactness scenarios run on
//! each store (`name::firestore`, `name::postgres`: Firestore in the
//! emulator, a real PostgreSQL server); the ones that inject Firestore
//! faults or count Firestore writes run on Firestore.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{expected, Backend, Delivery, Ev, Harness, SubscriptionOptions};
use gcloud_sdk::tonic::Code;
use hotcount_emulators::{FaultKind, FaultSpec};

const WAIT: Duration = Duration::from_secs(30);

fn many_likes(post: &str, users: usize, prefix: &str) -> Vec<Ev> {
    (0..users)
        .map(|u| Ev::like(&format!("{prefix}-{u}"), post, &format!("user-{u}"), 1))
        .collect()
}

crate::on_each_store_and_delivery!(
    duplicates_publisher_retries_and_double_likes_count_once,
    like_unlike_like_out_of_order_and_redelivered_ends_right,
    poison_is_quarantined_with_reason_and_acked_while_valid_events_count,
    two_competing_consumers_count_exactly,
);

crate::on_each_store!(
    consumer_killed_after_commit_before_ack_applies_nothing_twice,
    push_consumer_killed_between_commit_and_answer_applies_nothing_twice,
    push_refuses_missing_forged_expired_and_misaddressed_tokens,
    push_without_wrapper_counts_and_quarantines_by_message_id,
);

async fn duplicates_publisher_retries_and_double_likes_count_once(
    backend: Backend,
    delivery: Delivery,
) {
    let h = Harness::start_for(backend, delivery).await;
    let mut events = many_likes("p1", 20, "a");
    // A publisher retry: the same event (same eventId) under a new message id.
    events.push(events[3].clone());
    events.push(events[3].clone());
    // A double like by one user: two distinct events for the same intent.
    events.push(Ev::like("double-2", "p1", "user-5", 2));
    events.extend(many_likes("p2", 5, "b"));
    let want = expected(&events);
    assert_eq!(want["p1"], 20);

    let consumer = h.spawn(h.run_args("c1", &[]));
    h.publish(&events).await;
    assert!(
        consumer.wait_for_acks(events.len() as u64, WAIT).await,
        "every message acked"
    );
    assert_eq!(h.counts(want.keys()).await, want);
    let stats = consumer.stop().await;
    assert_eq!(
        stats.applied.get(),
        26,
        "20 + 5 first likes + the newer double like"
    );
    assert_eq!(
        stats.duplicates.get(),
        2,
        "both publisher retries recognised"
    );
}

async fn like_unlike_like_out_of_order_and_redelivered_ends_right(
    backend: Backend,
    delivery: Delivery,
) {
    let h = Harness::start_for(backend, delivery).await;
    let consumer = h.spawn(h.run_args("c1", &[]));
    let history = vec![
        Ev::like("l1", "p", "alice", 1),
        Ev::unlike("u2", "p", "alice", 2),
        Ev::like("l3", "p", "alice", 3),
        Ev::like("b1", "p", "bob", 1),
        Ev::unlike("b2", "p", "bob", 2),
    ];
    // Newest first, in separate rounds, so older events meet a stored newer state.
    let rounds = [
        vec![history[2].clone(), history[4].clone()],
        vec![history[0].clone(), history[3].clone()],
        vec![history[1].clone()],
    ];
    // Acked messages come back once more.
    h.emulators
        .pubsub_faults()
        .add(FaultSpec::new(FaultKind::SpuriousRedelivery).times(3))
        .unwrap();
    let mut sent = 0;
    for round in &rounds {
        h.publish(round).await;
        sent += round.len() as u64;
        // Acks count the redelivered copies too: wait on the emulator's
        // side until this round (and its copies) is acked.
        assert!(consumer.wait_for_acks(sent, WAIT).await);
        assert!(h.wait_until_all_acked(WAIT).await, "round settled");
    }
    let want = expected(&history);
    assert_eq!(want["p"], 1, "alice likes, bob does not");
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    let stats = consumer.stop().await;
    assert_eq!(
        stats.applied.get(),
        2,
        "only the newest event of each user applied"
    );
    assert!(stats.stale.get() >= 3, "older events were no-ops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_and_applied_but_unavailable_commits_neither_lose_nor_double() {
    let h = Harness::start().await;
    let faults = h.emulators.firestore_faults();
    faults
        .add(FaultSpec::error("Commit", Code::Aborted).times(3))
        .unwrap();
    faults
        .add(FaultSpec::error_after_apply("Commit", Code::Unavailable).times(3))
        .unwrap();
    let events = many_likes("p", 60, "e");
    let consumer = h.spawn(h.run_args("c1", &["--max-batch-events", "10"]));
    h.publish(&events).await;
    let want = expected(&events);
    assert!(consumer.wait_for_acks(60, WAIT).await);
    assert_eq!(h.counts(want.keys()).await, want);
    let fired = faults.fired();
    assert_eq!(fired.get(&FaultKind::Error), Some(&3), "ABORTED injected");
    assert_eq!(
        fired.get(&FaultKind::ErrorAfterApply),
        Some(&3),
        "unknown outcomes injected"
    );
    let stats = consumer.stop().await;
    assert!(stats.commit_retries.get() >= 6);
    assert_eq!(stats.applied.get(), 60);
}

async fn consumer_killed_after_commit_before_ack_applies_nothing_twice(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let events = many_likes("p", 40, "k");
    let want = expected(&events);
    // Every ack is lost: the first consumer commits everything, acks nothing.
    h.emulators
        .pubsub_faults()
        .add(FaultSpec::new(FaultKind::AckLost))
        .unwrap();
    let first = h.spawn(h.run_args("c1", &[]));
    h.publish(&events).await;
    assert_eq!(
        h.wait_for_counts(&want, WAIT).await,
        want,
        "committed by the first consumer"
    );
    assert!(first.wait_for_acks(40, WAIT).await);
    // The client sends acks in the background: wait until the emulator has
    // received (and lost) all of them, then crash.
    let sub = format!(
        "projects/{}/subscriptions/{}",
        common::PROJECT,
        common::SUBSCRIPTION
    );
    let lost = || h.emulators.pubsub().stats(&sub).map_or(0, |s| s.acks_lost);
    let deadline = tokio::time::Instant::now() + WAIT;
    while lost() < 40 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "acks reached the emulator"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().await;
    h.emulators.pubsub_faults().clear();
    // Past every ack deadline: everything is redelivered.
    h.emulators.clock().advance(Duration::from_secs(700));

    let second = h.spawn(h.run_args("c1", &[]));
    let done = second.wait_for_acks(40, WAIT).await;
    assert!(
        done,
        "redeliveries processed: consumer acked {} of {} received; emulator {:?}; unacked {:?}",
        second.stats.acks.get(),
        second.stats.received.get(),
        h.emulators.pubsub().stats(&sub),
        h.emulators.pubsub().unacked(&sub)
    );
    assert_eq!(h.counts(want.keys()).await, want, "nothing applied twice");
    let stats = second.stop().await;
    assert_eq!(stats.applied.get(), 0);
    assert_eq!(stats.duplicates.get(), 40);
}

async fn push_consumer_killed_between_commit_and_answer_applies_nothing_twice(backend: Backend) {
    let h = Harness::start_for(backend, Delivery::Push).await;
    let push = h.push.as_ref().expect("push harness");
    let events = many_likes("p", 40, "k");
    let want = expected(&events);
    // The first consumer commits the first messages it gets and dies
    // before its answers reach Pub/Sub: the front swallows them (a 502,
    // so a nack), then the consumer is killed.
    const LOST: u64 = 3;
    push.front.lose_next(LOST);
    let first = h.spawn(h.run_args("c1", &[]));
    h.publish(&events).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while push.front.answers_lost() < LOST {
        assert!(
            tokio::time::Instant::now() < deadline,
            "answers reached the front"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.kill().await;
    // Each lost answer was a 204: its message had committed (the lost
    // answers may be redeliveries of one message: Pub/Sub pushes the
    // failed ones again first).
    let committed_by_first = h.count("p").await;
    assert!(committed_by_first >= 1, "the first consumer committed");
    // A second replica takes the redeliveries and the rest.
    let second = h.spawn(h.run_args("c1", &[]));
    assert_eq!(
        h.wait_for_counts(&want, WAIT).await,
        want,
        "nothing applied twice"
    );
    assert!(
        h.wait_until_all_acked(WAIT).await,
        "every message answered 204 at last: {:?}",
        h.subscription_stats()
    );
    let stats = second.stop().await;
    assert!(
        stats.applied.get() as i64 <= 40 - committed_by_first,
        "the second replica applied none of the first's commits: {} applied, {committed_by_first} committed before",
        stats.applied.get()
    );
    assert!(
        stats.duplicates.get() >= 1,
        "the redelivered messages whose answers were lost were duplicates: {}",
        stats.duplicates.get()
    );
}

async fn push_without_wrapper_counts_and_quarantines_by_message_id(backend: Backend) {
    let h = Harness::start_for_with(backend, Delivery::Push, true).await;
    let consumer = h.spawn(h.run_args("c1", &[]));
    let valid = many_likes("p", 10, "w");
    let mut payloads: Vec<Vec<u8>> = valid.iter().map(|e| e.json().into_bytes()).collect();
    payloads.extend(valid[..3].iter().map(|e| e.json().into_bytes()));
    payloads.push(b"{not json".to_vec());
    payloads.push(br#"{"message": {"data": 5}}"#.to_vec());
    let ids = h.publish_raw(&payloads).await;
    assert!(consumer.wait_for_acks(15, WAIT).await);
    assert_eq!(h.count("p").await, 10);
    let stats = consumer.stop().await;
    assert_eq!((stats.applied.get(), stats.duplicates.get()), (10, 3));
    assert_eq!(stats.poison.get(), 2);
    // Named by the message ids the x-goog-pubsub-* headers carried.
    let reasons = quarantine_reasons(&h, &ids[13..]).await;
    assert!(reasons[0].contains("not a JSON object"), "{}", reasons[0]);
    assert!(!reasons[1].is_empty());
}

async fn push_refuses_missing_forged_expired_and_misaddressed_tokens(backend: Backend) {
    use common::oidc::{claims, now, Signer};
    let h = Harness::start_for(backend, Delivery::Push).await;
    let push = h.push.as_ref().expect("push harness");
    let consumer = h.spawn(h.run_args("c1", &[]));
    // The valid traffic flows through the front meanwhile.
    let events = many_likes("p", 10, "t");
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(10, WAIT).await);
    let addr = *consumer.stats.push_addr.get().expect("push endpoint bound");
    let sneaked = Ev::like("sneaked", "p", "mallory", 1);
    let body = serde_json::json!({
        "message": {
            "data": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, sneaked.json()),
            "messageId": "sneaked-1",
        },
        "subscription": format!("projects/{}/subscriptions/{}", common::PROJECT, common::SUBSCRIPTION),
    })
    .to_string();
    let with = |key: &str, value: serde_json::Value| {
        let mut claims = claims();
        claims[key] = value;
        push.signer.sign(&claims)
    };
    let cases: Vec<(&str, Option<String>, u16)> = vec![
        ("no token", None, 401),
        (
            "a forged token",
            Some(Signer::forger("test-key-1").push_token()),
            401,
        ),
        (
            "an expired token",
            Some(with("exp", (now() - 3600).into())),
            401,
        ),
        (
            "a token for another audience",
            Some(with("aud", "https://elsewhere.example/push".into())),
            401,
        ),
        (
            "a token of another service account",
            Some(with(
                "email",
                "intruder@other.iam.gserviceaccount.com".into(),
            )),
            403,
        ),
    ];
    let client = reqwest::Client::new();
    for (what, token, status) in cases {
        let mut request = client
            .post(format!("http://{addr}/pubsub/push"))
            .body(body.clone());
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let answer = request.send().await.expect("the endpoint answers");
        assert_eq!(answer.status().as_u16(), status, "{what}");
    }
    let stats = consumer.stop().await;
    assert_eq!(h.count("p").await, 10, "no refused request was counted");
    assert_eq!(
        stats.received.get(),
        stats.acks.get(),
        "only the relayed messages entered"
    );
    use hotcount::telemetry::{AuthFailure, PushOutcome};
    assert_eq!(stats.push_requests.get(PushOutcome::Unauthenticated), 4);
    assert_eq!(stats.push_requests.get(PushOutcome::Forbidden), 1);
    for failure in [
        AuthFailure::Missing,
        AuthFailure::Signature,
        AuthFailure::Expired,
        AuthFailure::Audience,
        AuthFailure::Email,
    ] {
        assert_eq!(stats.push_auth_failures.get(failure), 1, "{failure:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_acked_before_its_batch_commits() {
    let h = Harness::start().await;
    let faults = h.emulators.firestore_faults();
    faults
        .add(FaultSpec::error("Commit", Code::Unavailable))
        .unwrap();
    let events = many_likes("p", 30, "n");
    let consumer = h.spawn(h.run_args("c1", &["--commit-max-attempts", "100"]));
    h.publish(&events).await;
    // While every commit fails, the service must not ack anything: watched
    // through several failed attempts (observed, not a fixed time window).
    const FAILED_COMMITS: u64 = 5;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        assert_eq!(
            h.emulators.pubsub_counters().get("Acknowledge"),
            0,
            "ack before commit"
        );
        assert_eq!(consumer.stats.acks.get(), 0, "ack before commit");
        let attempted = h.emulators.firestore_counters().get("Commit");
        if attempted >= FAILED_COMMITS {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {attempted} of {FAILED_COMMITS} commits attempted within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(h.emulators.pubsub_counters().get("Acknowledge"), 0);
    faults.clear();
    assert!(consumer.wait_for_acks(30, WAIT).await);
    let want = expected(&events);
    assert_eq!(h.counts(want.keys()).await, want);
    consumer.stop().await;
    assert!(h.emulators.pubsub_counters().get("Acknowledge") > 0);
}

async fn poison_is_quarantined_with_reason_and_acked_while_valid_events_count(
    backend: Backend,
    delivery: Delivery,
) {
    let h = Harness::start_for(backend, delivery).await;
    let consumer = h.spawn(h.run_args("c1", &["--shards", "1"]));
    let valid = many_likes("p", 10, "v");
    let mut payloads: Vec<Vec<u8>> = valid.iter().map(|e| e.json().into_bytes()).collect();
    payloads.push(b"{not json".to_vec());
    payloads.push(br#"{"eventId":"x","type":"like.added","postId":"a/b","userId":"u","occurredAt":"2026-11-30T12:00:00Z"}"#.to_vec());
    payloads.push(br#"{"eventId":"y","type":"like.exploded","postId":"p","userId":"u","occurredAt":"2026-11-30T12:00:00Z"}"#.to_vec());
    payloads.push(vec![0xff, 0xfe, 0x00]);
    let ids = h.publish_raw(&payloads).await;
    assert!(consumer.wait_for_acks(14, WAIT).await, "poison acked too");
    assert_eq!(h.count("p").await, 10);
    let stats = consumer.stop().await;
    assert_eq!(stats.poison.get(), 4);
    // Each poison message has a quarantine record with its reason.
    let reasons = quarantine_reasons(&h, &ids[10..]).await;
    assert_eq!(reasons.len(), 4);
    assert!(reasons[0].contains("not a JSON object"), "{}", reasons[0]);
    assert!(
        reasons[1].contains("postId") && reasons[1].contains('/'),
        "{}",
        reasons[1]
    );
    assert!(reasons[2].contains("unknown event type"), "{}", reasons[2]);
    assert!(reasons[3].contains("UTF-8"), "{}", reasons[3]);
}

/// The reason of each message's quarantine record, in `message_ids`' order
/// (read as `hotcount quarantine list` reads them, from either store).
async fn quarantine_reasons(h: &Harness, message_ids: &[String]) -> Vec<String> {
    let records = hotcount::ops::quarantine::list(&h.store, Some("c1"), 1000)
        .await
        .expect("read quarantine");
    let mut reasons = Vec::new();
    for id in message_ids {
        let stored = records
            .iter()
            .find(|r| &r.record.message_id == id)
            .expect("quarantine record exists");
        reasons.push(stored.record.reason.clone());
    }
    reasons
}

async fn two_competing_consumers_count_exactly(backend: Backend, delivery: Delivery) {
    let h = Harness::start_for(backend, delivery).await;
    // Small flow-control windows, so neither consumer can take the whole backlog.
    let args = ["--max-outstanding-messages", "20", "--streams", "1"];
    let a = h.spawn(h.run_args("c1", &args));
    let b = h.spawn(h.run_args("c1", &args));
    let mut events = Vec::new();
    for p in 0..10 {
        events.extend(many_likes(&format!("post-{p}"), 30, &format!("p{p}")));
    }
    events.extend(events[..50].to_vec());
    h.publish(&events).await;
    let want = expected(&events);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    let deadline = tokio::time::Instant::now() + WAIT;
    while a.stats.acks.get() + b.stats.acks.get() < events.len() as u64 {
        assert!(tokio::time::Instant::now() < deadline, "all messages acked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (sa, sb) = (a.stop().await, b.stop().await);
    assert!(
        sa.received.get() > 0 && sb.received.get() > 0,
        "both consumers got work"
    );
    assert_eq!(sa.applied.get() + sb.applied.get(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_post_gets_one_increment_per_batch_not_per_event() {
    let h = Harness::start().await;
    let events = many_likes("viral", 2000, "h");
    h.publish(&events).await;
    let before = h.emulators.firestore_counters().get("Commit");
    let consumer = h.spawn(h.run_args(
        "c1",
        &["--max-batch-events", "500", "--flush-interval-ms", "200"],
    ));
    assert!(consumer.wait_for_acks(2000, WAIT).await);
    assert_eq!(h.count("viral").await, 2000);
    let stats = consumer.stop().await;
    let commits = h.emulators.firestore_counters().get("Commit") - before;
    assert_eq!(
        stats.increments.get(),
        stats.batches.get(),
        "one increment per batch"
    );
    // Counted on the emulator's side: writes to every counter shard the
    // post has (listed, whatever their number).
    let shards =
        h.db.counter_shards("viral", hotcount::store::firestore::Read::Latest)
            .await
            .expect("list shards");
    assert!(!shards.is_empty());
    let shard_writes: u64 = shards
        .keys()
        .map(|name| h.emulators.firestore().document_writes(name))
        .sum();
    assert_eq!(shard_writes, stats.increments.get());
    assert!(
        shard_writes <= 40,
        "{shard_writes} counter writes for 2000 events"
    );
    assert!(commits <= 40, "{commits} commits for 2000 events");
    assert!(stats.batches.get() <= 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viral_post_is_in_several_commits_at_once_on_distinct_counter_shards() {
    let h = Harness::start().await;
    // Slow commits, so that batches overlap in time.
    h.emulators
        .firestore_faults()
        .add(FaultSpec::latency("Commit", Duration::from_millis(40)))
        .unwrap();
    // One post. Every like comes twice (a publisher retry) and a tenth of
    // the users unlike afterwards: one membership in several messages.
    let mut events = many_likes("viral", 1500, "a");
    events.extend(many_likes("viral", 1500, "a"));
    events
        .extend((0..150).map(|u| Ev::unlike(&format!("r-{u}"), "viral", &format!("user-{u}"), 2)));
    h.publish(&events).await;
    let before = h.emulators.firestore().stats();
    let consumer = h.spawn(h.run_args(
        "c1",
        &[
            "--max-batch-events",
            "100",
            "--max-commits-in-flight",
            "4",
            "--counter-shards",
            "8",
            // The rate alone never asks for a second shard: a batch writes
            // shard 0 unless another batch in flight holds it.
            "--counter-shard-target-writes-per-sec",
            "10000",
            // No rollups: each post's shards are not capped at what its
            // rollup registers (tests/rollups.rs covers that case).
            "--rollup-interval-ms",
            "0",
        ],
    ));
    assert!(consumer.wait_for_acks(events.len() as u64, WAIT).await);
    assert_eq!(h.count("viral").await, 1350);
    let stats = consumer.stop().await;
    let after = h.emulators.firestore().stats();
    let layout = h.db.layout();
    let writes: Vec<u64> = (0..8)
        .map(|k| {
            h.emulators
                .firestore()
                .document_writes(&layout.counter_shard("viral", k))
        })
        .collect();
    assert_eq!(writes.iter().sum::<u64>(), stats.increments.get());
    assert!(
        writes[1..].iter().sum::<u64>() > 0,
        "the post was in several commits at once, each on its own shard: {writes:?}"
    );
    // Disjoint memberships and distinct counter shards: no commit waited
    // for another's lock, none was aborted.
    assert_eq!(after.lock_waits, before.lock_waits);
    assert_eq!(after.aborted_transactions, before.aborted_transactions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_under_a_backlog_larger_than_flow_control() {
    let h = Harness::start().await;
    let events = many_likes("p", 1500, "m");
    h.publish(&events).await;
    let consumer = h.spawn(h.run_args(
        "c1",
        &[
            "--max-outstanding-messages",
            "50",
            "--streams",
            "2",
            "--max-batch-events",
            "1000",
            "--flush-interval-ms",
            "50",
        ],
    ));
    assert!(consumer.wait_for_acks(1500, WAIT).await);
    assert_eq!(h.count("p").await, 1500);
    let stats = consumer.stop().await;
    let high = stats.in_flight.max();
    assert!(
        high <= 100,
        "held {high} messages with 2 streams x 50 outstanding"
    );
    assert!(high > 0);
    // The emulator's own count: no stream ever had more than 50 leased.
    let sub = h.subscription_stats();
    assert!(sub.max_stream_outstanding_messages <= 50, "{sub:?}");
    assert!(sub.max_stream_outstanding_messages > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_subscription_confirms_acks_and_counts_once() {
    let h = Harness::start_with(SubscriptionOptions {
        exactly_once: true,
        ..Default::default()
    })
    .await;
    let mut events = many_likes("p", 25, "x");
    events.push(events[0].clone());
    let consumer = h.spawn(h.run_args("c1", &[]));
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(26, WAIT).await);
    let want: BTreeMap<String, i64> = expected(&events);
    assert_eq!(h.counts(want.keys()).await, want);
    let stats = consumer.stop().await;
    assert_eq!(stats.ack_failures.get(), 0);
    // On the emulator's side: every message acknowledged, once, nothing left.
    let sub = h.subscription_stats();
    assert_eq!((sub.acks, sub.unacked), (26, 0), "{sub:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_event_baseline_counts_exactly_with_one_transaction_per_event() {
    let h = Harness::start().await;
    let mut events = many_likes("viral", 120, "pe");
    events.push(events[0].clone());
    events.push(Ev::unlike("pe-un", "viral", "user-1", 2));
    let want = expected(&events);
    let before = h.emulators.firestore_counters().get("Commit");
    let consumer = h.spawn(h.run_args(
        "c1",
        &[
            "--strategy",
            "per-event",
            "--per-event-concurrency",
            "8",
            "--counter-shards",
            "1",
        ],
    ));
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(events.len() as u64, WAIT).await);
    assert_eq!(h.counts(want.keys()).await, want);
    let stats = consumer.stop().await;
    let commits = h.emulators.firestore_counters().get("Commit") - before;
    assert!(
        commits >= events.len() as u64,
        "{commits} commits for {} events",
        events.len()
    );
    assert_eq!(
        stats.batches.get(),
        events.len() as u64,
        "one batch per event"
    );
}
