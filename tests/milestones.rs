//! Milestone notifications end to end, on each store: the service records
//! each milestone once with the rollup write that reaches it, and delivers
//! it to a webhook sink (a receiver that keys on `Idempotency-Key` as
//! payment APIs do) through the sink's faults, a dispatcher killed between
//! the call and the mark, and a replay of the whole window.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{expected, Backend, Ev, Harness};
use google_cloud_pubsub::model::{Subscription, UpdateSubscriptionRequest};
use google_cloud_wkt::FieldMask;
use hotcount::ops::milestones as ops;
use hotcount::pipeline::milestones::{DispatchConfig, Dispatcher, Webhook};
use hotcount::store::firestore::{Opened, Read};
use hotcount::store::milestone::{MilestoneRecord, MilestoneStatus, MilestoneStore};
use hotcount::store::rollup::{micros_of, RollupStore, RollupWrite, WriteOutcome};
use hotcount::telemetry::Stats;
use hotcount_emulators::webhook::{Fate, Received, Sink, SinkConfig, SinkFaults};
use hotcount_emulators::FaultSpec;
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(30);
const SECRET: &str = "test-secret";

crate::on_each_store!(
    milestones_are_delivered_once_per_key_through_faults_and_a_replay_sends_nothing,
    a_dispatcher_killed_between_the_call_and_the_mark_repeats_it_with_the_same_key,
    a_refused_milestone_is_given_up_with_why_and_retry_delivers_it,
    a_milestone_recorded_at_a_store_time_ahead_of_the_replicas_clock_is_called_at_once,
    without_a_stored_setting_or_a_list_no_milestone_is_recorded,
    the_stored_setting_rules_every_replica_without_a_restart,
    the_cli_lists_milestones_and_retries_one_by_id,
    a_replica_with_another_milestones_list_refuses_to_start,
    reconcile_moving_a_post_across_a_milestone_records_it_and_it_is_delivered,
    a_replica_clock_ten_minutes_ahead_takes_no_live_lease,
    two_replicas_and_a_kill_acknowledge_each_key_once_and_deliver_within_the_interval_plus_5_s,
    a_stale_settle_after_a_retry_changes_nothing,
    dispatchers_claiming_at_once_never_lease_one_record_twice,
    while_a_secret_is_rotated_a_receiver_knowing_only_the_new_or_only_the_old_accepts_every_call,
);

fn likes(post: &str, users: usize, prefix: &str) -> Vec<Ev> {
    (0..users)
        .map(|u| Ev::like(&format!("{prefix}-{u}"), post, &format!("user-{u}"), 1))
        .collect()
}

/// The service's flags for milestones 5, 20 and 40 delivered to `sink`,
/// with short rollup, retry and lease times.
fn milestone_flags<'a>(url: &'a str, secret: &'a str) -> Vec<&'a str> {
    vec![
        "--milestone-webhook",
        url,
        "--milestone-webhook-secret",
        secret,
        "--milestones",
        "5,20,40",
        "--rollup-interval-ms",
        "50",
        "--milestone-webhook-timeout-ms",
        "300",
        "--milestone-lease-secs",
        "1",
        "--milestone-retry-initial-ms",
        "50",
    ]
}

/// Waits (bounded) until every record is `status`, `n` of them; returns them.
async fn wait_for_records(h: &Harness, n: usize, status: MilestoneStatus) -> Vec<MilestoneRecord> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let records = h.store.milestones().await.expect("list");
        let settled = records.len() == n && records.iter().all(|r| r.status == status);
        if settled || tokio::time::Instant::now() > deadline {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn milestones_are_delivered_once_per_key_through_faults_and_a_replay_sends_nothing(
    backend: Backend,
) {
    let h = Harness::start_on(backend).await;
    let sink = Sink::start(SinkConfig {
        secret: Some(SECRET.into()),
        faults: SinkFaults {
            error_rate: 0.25,
            hang_rate: 0.15,
            hang: Duration::from_millis(600),
            close_rate: 0.15,
            // Each key meets up to 4 faults, then is delivered: a run
            // never hangs on the tail where every draw fails (0.55^10).
            max_faults_per_key: 4,
            ..SinkFaults::default()
        },
    })
    .await
    .expect("sink");
    let url = sink.url();
    let subscription = format!(
        "projects/{}/subscriptions/{}",
        common::PROJECT,
        common::SUBSCRIPTION
    );
    // Acked messages kept, so a Seek to a time replays them.
    let admin = hotcount::connect::subscription_admin(&h.endpoints)
        .await
        .expect("admin");
    admin
        .update_subscription()
        .with_request(
            UpdateSubscriptionRequest::new()
                .set_subscription(
                    Subscription::new()
                        .set_name(subscription.clone())
                        .set_retain_acked_messages(true),
                )
                .set_update_mask(FieldMask::default().set_paths(["retain_acked_messages"])),
        )
        .send()
        .await
        .expect("retain acked messages");
    let before = SystemTime::now() - Duration::from_secs(1);
    let consumer = h.spawn(h.run_args("c1", &milestone_flags(&url, SECRET)));
    let mut events = likes("viral", 45, "v");
    events.extend(likes("quiet", 3, "q"));
    let want = expected(&events);
    h.publish(&events).await;
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    let records = wait_for_records(&h, 3, MilestoneStatus::Done).await;
    let ids: Vec<String> = records.iter().map(MilestoneRecord::id).collect();
    assert_eq!(
        ids.iter().collect::<BTreeSet<_>>(),
        ["viral:5", "viral:20", "viral:40"]
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .iter()
            .collect(),
        "{records:?}"
    );
    assert!(
        records.iter().all(|r| r.status == MilestoneStatus::Done),
        "{records:?}"
    );
    // Exactly once per key at the receiver; every call signed.
    let processed = sink.processed();
    let keys: BTreeSet<&str> = processed.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["c1:viral:5", "c1:viral:20", "c1:viral:40"])
    );
    for (key, body) in &processed {
        let body: serde_json::Value = serde_json::from_slice(body).expect("json");
        let n = body["milestone"].as_i64().expect("milestone");
        assert!(key.ends_with(&format!(":{n}")), "{key} {body}");
        assert!(body["likes"].as_i64().expect("likes") >= n, "{body}");
        assert_eq!(body["postId"], "viral");
        assert!(body["reachedAt"].is_string());
    }
    let requests = sink.requests();
    assert!(requests.iter().all(|r| r.signature_ok == Some(true)));
    let calls = requests.len();

    // Replay the whole window: every event again, no count changes, and
    // no milestone is decided or called again.
    admin
        .seek()
        .set_subscription(subscription)
        .set_time(google_cloud_wkt::Timestamp::try_from(before).expect("time"))
        .send()
        .await
        .expect("seek");
    let total = 2 * events.len() as u64;
    assert!(
        consumer.wait_for_acks(total, WAIT).await,
        "replay processed"
    );
    // Several rollup intervals and dispatcher rounds.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(h.counts(want.keys()).await, want, "counts unchanged");
    let stats = consumer.stop().await;
    assert_eq!(stats.milestones_recorded.get(), 3);
    assert_eq!(stats.milestones_delivered.get(), 3);
    assert_eq!(stats.milestones_dead.get(), 0);
    // Calls still in flight at the replay (a hang) may end after it, but
    // nothing new is called after the records are done.
    assert_eq!(
        sink.requests().len(),
        calls,
        "nothing called after the replay"
    );
    assert_eq!(h.store.milestones().await.expect("list"), records);
}

/// A sink checking [`SECRET`], without faults.
async fn fault_free_sink() -> Sink {
    Sink::start(SinkConfig {
        secret: Some(SECRET.into()),
        faults: SinkFaults::default(),
    })
    .await
    .expect("sink")
}

/// Creates the record of `post` reaching 100 (with its rollup) directly.
async fn record_milestone(h: &Harness, post: &str) {
    record_milestone_at(h, post, micros_of(SystemTime::now())).await;
}

/// Creates the record of `post` reaching 100 with a rollup read at `now`
/// (the store's time).
async fn record_milestone_at(h: &Harness, post: &str, now: i64) {
    let write = RollupWrite {
        post_id: post,
        likes: 101,
        as_of: now,
        shards: 1,
        previous: None,
        milestones: &[100],
    };
    let outcomes = h.store.write_rollups(&[write]).await.expect("write");
    assert_eq!(outcomes, vec![WriteOutcome::Written]);
}

fn dispatcher(
    h: &Harness,
    url: &str,
    secret: &str,
) -> Dispatcher<hotcount::store::selected::SelectedDb> {
    dispatcher_leasing(h, url, secret, Duration::from_millis(800))
}

/// [`dispatcher`] with leases of `lease`.
fn dispatcher_leasing(
    h: &Harness,
    url: &str,
    secret: &str,
    lease: Duration,
) -> Dispatcher<hotcount::store::selected::SelectedDb> {
    let webhook = Webhook::new(
        url.parse().expect("url"),
        Some(secret),
        "c1",
        Duration::from_millis(500),
    )
    .expect("client");
    let config = DispatchConfig {
        lease,
        backoff_initial: Duration::from_millis(50),
        ..DispatchConfig::default()
    };
    Dispatcher::new(
        Arc::new(h.store.clone()),
        webhook,
        config,
        Arc::new(Stats::default()),
    )
}

async fn a_dispatcher_killed_between_the_call_and_the_mark_repeats_it_with_the_same_key(
    backend: Backend,
) {
    let h = Harness::start_on(backend).await;
    let sink = fault_free_sink().await;
    record_milestone(&h, "p").await;
    let first = dispatcher(&h, &sink.url(), SECRET);
    let second = dispatcher(&h, &sink.url(), SECRET);

    // The first claims and calls; the receiver accepts; it dies before
    // marking done (its claim is never settled).
    let claims = first.claim().await.expect("claim");
    assert_eq!(claims.len(), 1);
    let answer = Webhook::new(sink.url().parse().expect("url"), Some(SECRET), "c1", WAIT)
        .expect("client")
        .call(&claims[0].record)
        .await;
    assert_eq!(answer, hotcount::pipeline::milestones::Answer::Accepted);
    // While the lease holds, nobody else calls.
    assert_eq!(second.round().await.claimed, 0);
    // The lease ends; the second takes over and calls again, same key.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let report = second.round().await;
    assert_eq!((report.claimed, report.delivered), (1, 1), "{report:?}");
    // The dead dispatcher's late mark changes nothing.
    let late = first
        .settle(&claims[0], hotcount::pipeline::milestones::Answer::Accepted)
        .await;
    assert_eq!(late, Some(hotcount::pipeline::milestones::Settled::Lost));

    let requests = sink.requests();
    let keys: Vec<&str> = requests.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["c1:p:100", "c1:p:100"], "the raw repeat: same key");
    let fates: Vec<Fate> = requests.iter().map(|r| r.fate).collect();
    assert_eq!(fates, [Fate::Processed, Fate::Replayed]);
    assert_eq!(sink.processed().len(), 1, "processed once");
    let records = h.store.milestones().await.expect("list");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, MilestoneStatus::Done);
    assert_eq!(records[0].attempts, 2);
}

async fn a_refused_milestone_is_given_up_with_why_and_retry_delivers_it(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let sink = fault_free_sink().await;
    record_milestone(&h, "p").await;
    // A wrong secret: the receiver answers 401, which is not retried.
    let wrong = dispatcher(&h, &sink.url(), "wrong-secret");
    let report = wrong.round().await;
    assert_eq!(report.dead, 1, "{report:?}");
    let dead = ops::list(&h.store, Some("dead")).await.expect("list");
    assert_eq!(dead.len(), 1);
    let why = dead[0].last_error.clone().unwrap_or_default();
    assert!(why.contains("401"), "{why}");
    // Nothing claims a dead record.
    assert_eq!(wrong.round().await.claimed, 0);
    assert!(sink.processed().is_empty());

    // Fixed, then retried: delivered with the same key.
    assert_eq!(ops::retry(&h.store, &[]).await.expect("retry"), 1);
    let fixed = dispatcher(&h, &sink.url(), SECRET);
    let report = fixed.round().await;
    assert_eq!(report.delivered, 1, "{report:?}");
    let processed = sink.processed();
    assert_eq!(processed.len(), 1);
    assert_eq!(processed[0].0, "c1:p:100");
    assert!(ops::list(&h.store, Some("dead"))
        .await
        .expect("list")
        .is_empty());
    assert_eq!(ops::retry(&h.store, &[]).await.expect("retry"), 0);
}

async fn a_milestone_recorded_at_a_store_time_ahead_of_the_replicas_clock_is_called_at_once(
    backend: Backend,
) {
    let h = Harness::start_on(backend).await;
    let sink = fault_free_sink().await;
    // The store's read time an hour ahead of this replica's clock (the
    // chaos run's emulated clock jumps did this: nothing was ever claimed).
    let ahead = micros_of(SystemTime::now() + Duration::from_secs(3600));
    record_milestone_at(&h, "p", ahead).await;
    let report = dispatcher(&h, &sink.url(), SECRET).round().await;
    assert_eq!((report.claimed, report.delivered), (1, 1), "{report:?}");
    let records = h.store.milestones().await.expect("list");
    assert_eq!(records[0].reached_at, ahead);
}

async fn without_a_stored_setting_or_a_list_no_milestone_is_recorded(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let consumer = h.spawn(h.run_args("c1", &["--rollup-interval-ms", "50"]));
    let events = likes("p", 8, "a");
    let want = expected(&events);
    h.publish(&events).await;
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    let stats = consumer.stop().await;
    // The rollup shows 8 (the drain refreshed it), and nothing was recorded.
    assert!(stats.rollup_refreshes.get() > 0);
    assert_eq!(stats.milestones_recorded.get(), 0);
    assert!(h.store.milestones().await.expect("list").is_empty());
}

/// `setup --milestones` turns milestones on for the fleet: a replica
/// without a webhook (and without `--milestones`) records them, a
/// dispatcher sends them; `setup --no-milestones` turns them off without a
/// restart.
async fn the_stored_setting_rules_every_replica_without_a_restart(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let sink = fault_free_sink().await;
    let (ok, out) = hotcount_cli(&h, &["setup", "--milestones", "5"]);
    assert!(ok, "{out}");
    assert!(out.contains("milestones 5"), "{out}");
    let consumer = h.spawn(h.run_args("c1", &["--rollup-interval-ms", "50"]));
    let on = likes("p", 8, "a");
    h.publish(&on).await;
    assert!(consumer.wait_for_acks(8, WAIT).await);
    let records = wait_for_records(&h, 1, MilestoneStatus::Pending).await;
    assert_eq!(
        records.iter().map(MilestoneRecord::id).collect::<Vec<_>>(),
        ["p:5"]
    );
    let report = dispatcher(&h, &sink.url(), SECRET).round().await;
    assert_eq!(report.delivered, 1, "{report:?}");

    // Off for the fleet: the running replica follows within a second or so.
    let (ok, out) = hotcount_cli(&h, &["setup", "--no-milestones"]);
    assert!(ok && out.contains("milestones: 5 -> off"), "{out}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let off = likes("q", 8, "b");
    h.publish(&off).await;
    assert!(consumer.wait_for_acks(16, WAIT).await);
    let stats = consumer.stop().await;
    assert_eq!(
        stats.milestones_recorded.get(),
        1,
        "nothing recorded while off"
    );
    assert_eq!(h.store.milestones().await.expect("list").len(), 1);
}

fn hotcount_cli(h: &Harness, args: &[&str]) -> (bool, String) {
    let mut command = h.command();
    command.args(args);
    if let Some(url) = h.postgres_url() {
        command.args(["--store", url]);
    }
    let out = command.output().expect("hotcount runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

async fn the_cli_lists_milestones_and_retries_one_by_id(backend: Backend) {
    let h = Harness::start_on(backend).await;
    record_milestone(&h, "p").await;
    let (ok, out) = hotcount_cli(&h, &["milestones", "list"]);
    assert!(ok, "{out}");
    assert!(out.contains("p:100\tpending\t0\t101\t"), "{out}");
    assert!(out.contains("1 record(s)"), "{out}");
    let (ok, out) = hotcount_cli(&h, &["milestones", "list", "--status", "dead"]);
    assert!(ok && out.contains("0 record(s)"), "{out}");
    let (ok, out) = hotcount_cli(&h, &["milestones", "retry", "p:100"]);
    assert!(
        ok && out.contains("1 record(s) made pending again"),
        "{out}"
    );
    let (ok, out) = hotcount_cli(&h, &["milestones", "retry", "nonsense"]);
    assert!(!ok, "a bad id is refused: {out}");
}

async fn a_replica_with_another_milestones_list_refuses_to_start(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let sink = fault_free_sink().await;
    let url = sink.url();
    let first = h.spawn(h.run_args("c1", &milestone_flags(&url, SECRET)));
    let events = likes("p", 2, "a");
    h.publish(&events).await;
    assert!(first.wait_for_acks(2, WAIT).await, "the first replica runs");
    let config = h
        .run_args(
            "c1",
            &["--milestones", "5,20", "--rollup-interval-ms", "50"],
        )
        .validate()
        .expect("valid flags");
    let (_stop, rx) = watch::channel(false);
    let run = hotcount::service::run(&h.endpoints, &config, rx, Arc::new(Stats::default()));
    let refused = tokio::time::timeout(WAIT, run)
        .await
        .expect("refused at start, not left running");
    let error = refused
        .expect_err("another --milestones list is refused")
        .to_string();
    assert!(
        error.contains("5,20,40") && error.contains("--milestones 5,20"),
        "names both lists: {error}"
    );
    first.stop().await;
}

async fn reconcile_moving_a_post_across_a_milestone_records_it_and_it_is_delivered(
    backend: Backend,
) {
    let h = Harness::start_on(backend).await;
    let sink = fault_free_sink().await;
    let url = sink.url();
    let all = likes("p", 12, "a");
    // A replica with milestones 5, 20, 40 writes the rollup at 3.
    let consumer = h.spawn(h.run_args("c1", &milestone_flags(&url, SECRET)));
    h.publish(&all[..3]).await;
    assert!(consumer.wait_for_acks(3, WAIT).await);
    let stats = consumer.stop().await;
    assert!(stats.rollup_refreshes.get() > 0, "the rollup shows 3");
    // Counts move to 12 without a rollup write (a replica with rollups
    // off), as a repair or a replay moves them.
    let counting = h.spawn(h.run_args("c1", &["--rollup-interval-ms", "0"]));
    h.publish(&all[3..]).await;
    assert!(counting.wait_for_acks(9, WAIT).await);
    counting.stop().await;
    assert!(h.store.milestones().await.expect("list").is_empty());

    // reconcile --repair refreshes the rollup: 3 -> 12 crosses 5.
    let repaired = hotcount::ops::reconcile::PostReport {
        post_id: "p".into(),
        shards_sum: 12,
        liked: 12,
        repaired: true,
        error: None,
    };
    let written = hotcount::ops::reconcile::refresh_rollups(&h.store, &[repaired]).await;
    assert_eq!(written, 1);
    let records = h.store.milestones().await.expect("list");
    let ids: Vec<String> = records.iter().map(MilestoneRecord::id).collect();
    assert_eq!(ids, ["p:5"], "the repair's write records what it crosses");
    let report = dispatcher(&h, &url, SECRET).round().await;
    assert_eq!(report.delivered, 1, "{report:?}");
    let processed = sink.processed();
    assert_eq!(processed.len(), 1);
    assert_eq!(processed[0].0, "c1:p:5");
}

/// Four dispatchers claim the same due records at the same moment, round
/// after round: each record is leased to one of them per round, never to
/// two (Firestore: the claim's Commit is conditioned on the update time
/// the due query read; PostgreSQL: `FOR UPDATE SKIP LOCKED`).
async fn dispatchers_claiming_at_once_never_lease_one_record_twice(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let posts: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    for post in &posts {
        record_milestone(&h, post).await;
    }
    let lease = Duration::from_millis(300);
    for round in 0..3 {
        let claims = futures::future::join_all((0..4).map(|_| h.store.claim(lease, 32))).await;
        let mut leased: Vec<String> = claims
            .into_iter()
            .flat_map(|c| c.expect("claim"))
            .map(|c| c.record.id())
            .collect();
        leased.sort();
        let distinct: BTreeSet<&String> = leased.iter().collect();
        assert_eq!(
            distinct.len(),
            leased.len(),
            "round {round}: leased twice: {leased:?}"
        );
        assert_eq!(distinct.len(), posts.len(), "round {round}: {leased:?}");
        // Every lease ends; the next round claims them all again.
        tokio::time::sleep(lease + Duration::from_millis(100)).await;
    }
    let records = h.store.milestones().await.expect("list");
    assert!(records.iter().all(|r| r.attempts == 3), "{records:?}");
}

async fn a_replica_clock_ten_minutes_ahead_takes_no_live_lease(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let sink = fault_free_sink().await;
    record_milestone(&h, "p").await;
    let claims = dispatcher(&h, &sink.url(), SECRET)
        .claim()
        .await
        .expect("claim");
    assert_eq!(claims.len(), 1);
    // Another replica, whatever its clock says (10 minutes ahead): a
    // claim takes no replica time at all, "due" and the lease's end are
    // the store's (before, it passed its own `now` and took this lease).
    let taken = h
        .store
        .claim(Duration::from_secs(60), 10)
        .await
        .expect("claim");
    assert!(taken.is_empty(), "a live lease was taken over: {taken:?}");
    // The lease as stored ends a lease after the store's time of the claim.
    let lease_end = claims[0].record.due_at.expect("leased until");
    let store_time = claims[0].leased_at;
    assert_eq!(lease_end - store_time, 800_000, "{:?}", claims[0]);
}

/// A settle the store fails once (UNAVAILABLE) is not left for the lease
/// to end: the receiver is called once, with no kill anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_the_store_fails_once_does_not_call_the_receiver_twice() {
    let h = Harness::start().await;
    let sink = fault_free_sink().await;
    record_milestone(&h, "p").await;
    let d = dispatcher(&h, &sink.url(), SECRET);
    // The claim's Commit goes through; the settle's fails once.
    let mut fault = FaultSpec::error("Commit", gcloud_sdk::tonic::Code::Unavailable).times(1);
    fault.skip = Some(1);
    h.emulators.firestore_faults().add(fault).expect("fault");
    let first = d.round().await;
    assert_eq!(first.claimed, 1, "{first:?}");
    // Past the lease: nothing is called again.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let again = d.round().await;
    assert_eq!(
        sink.requests().len(),
        1,
        "called twice: {first:?} {again:?}"
    );
    let records = h.store.milestones().await.expect("list");
    assert_eq!(records[0].status, MilestoneStatus::Done, "{records:?}");
}

/// Firestore milestone Commits that get no answer (the recording write,
/// a claim, a settle, `retry`) end within the call deadline; once the
/// store answers again nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firestore_milestone_commits_without_an_answer_end_within_the_deadline() {
    let h = Harness::start().await;
    let db = h.db.clone().with_call_timeout(Duration::from_millis(500));
    let bound = Duration::from_secs(5);
    let faults = h.emulators.firestore_faults();
    faults
        .add(FaultSpec::latency("Commit", Duration::from_secs(120)))
        .expect("fault");
    let write = RollupWrite {
        post_id: "p",
        likes: 101,
        as_of: micros_of(SystemTime::now()),
        shards: 1,
        previous: None,
        milestones: &[100],
    };
    let outcomes = tokio::time::timeout(bound, db.write_rollups(std::slice::from_ref(&write)))
        .await
        .expect("the recording Commit ends within its deadline");
    assert!(
        !matches!(outcomes.as_deref(), Ok([WriteOutcome::Written])),
        "{outcomes:?}"
    );
    let retried = tokio::time::timeout(
        bound,
        db.retry(&hotcount::store::milestone::RetrySelection::AllDead),
    )
    .await
    .expect("retry ends within its deadline");
    drop(retried);
    faults.clear();
    // The refresher writes again once the store answers: recorded.
    let outcomes = db.write_rollups(&[write]).await.expect("write");
    assert_eq!(outcomes, vec![WriteOutcome::Written]);
    assert_eq!(db.milestones().await.expect("list").len(), 1);
}

/// A replica killed between its claim's read and its commit (as an
/// autoscaler kills, or as a Commit cut at its deadline leaves it) can
/// leave a read-write transaction open on a record, its lock held until
/// Firestore expires it (60 s idle): the other due records are delivered
/// at once, the dispatcher leaves no transaction of its own open behind
/// it, and the held record is delivered once the abandoned transaction
/// has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_left_open_by_a_killed_replica_holds_up_no_other_milestone() {
    let h = Harness::start().await;
    let sink = fault_free_sink().await;
    record_milestone(&h, "held").await;
    record_milestone(&h, "free").await;
    // What the killed replica left: a read in a read-write transaction,
    // neither committed nor rolled back.
    let opened = Opened::default();
    let read = Read::ReadWrite {
        retry: None,
        opened: &opened,
    };
    let name = h.db.layout().milestone("held", 100);
    let abandoned =
        h.db.batch_get(vec![name], read, |_| {})
            .await
            .expect("read");
    assert!(!abandoned.is_empty());
    let firestore = h.emulators.firestore();
    assert_eq!(firestore.stats().active_transactions, 1);

    let d = dispatcher(&h, &sink.url(), SECRET);
    let bound = Duration::from_secs(3);
    rounds_until_processed(&d, &sink, "c1:free:100", bound).await;
    let keys: Vec<String> = sink.processed().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["c1:free:100"]);
    assert_eq!(
        firestore.stats().active_transactions,
        1,
        "the dispatcher left transactions open"
    );

    // Firestore ends the abandoned transaction after 60 s idle; the held
    // record is then claimed and delivered.
    h.emulators.clock().advance(Duration::from_secs(61));
    firestore.sweep();
    assert_eq!(firestore.stats().active_transactions, 0);
    rounds_until_processed(&d, &sink, "c1:held:100", bound).await;
    let records = h.store.milestones().await.expect("list");
    assert!(
        records.iter().all(|r| r.status == MilestoneStatus::Done),
        "{records:?}"
    );
    assert_eq!(sink.processed().len(), 2);
}

/// Runs `d`'s rounds until the receiver has processed `key`; fails if
/// that takes longer than `bound` (each round bounded by it too).
async fn rounds_until_processed(
    d: &Dispatcher<hotcount::store::selected::SelectedDb>,
    sink: &Sink,
    key: &str,
    bound: Duration,
) {
    let started = tokio::time::Instant::now();
    let mut reports = Vec::new();
    while !sink.processed().iter().any(|(k, _)| k == key) {
        assert!(
            started.elapsed() < bound,
            "{key} not delivered within {bound:?}: {reports:?}"
        );
        reports.push(tokio::time::timeout(bound, d.round()).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The p-th percentile (0..=100) of `sorted`.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) * p).div_ceil(100)]
}

/// [`milestone_flags`] for `url`, milestones 2, 4, 6 and 8, and leases of
/// 3 s: a claim on a loaded machine may take longer than the 1 s lease less
/// the 300 ms call (such a lease is not called on).
fn kill_test_flags(url: &str) -> Vec<&str> {
    let mut flags = milestone_flags(url, SECRET);
    flags.extend(["--milestones", "2,4,6,8", "--milestone-lease-secs", "3"]);
    flags
}

/// Two replicas, a receiver failing the first try of every fifth key, one
/// replica killed mid-run and started again: every milestone is delivered;
/// no key is acknowledged twice unless its first acknowledgement answered
/// a call of the killed replica (one in flight at the kill, whose lease
/// then lapsed: told by the webhook URL each replica is given, not by the
/// time, as the killed replica's last request may reach the receiver just
/// after the kill); and the
/// latency from the rollup that reached it (`reachedAt`) to the receiver
/// is measured (p50/p99, printed) and bounded by the rollup interval plus
/// 5 s for the keys answered at their first call.
async fn two_replicas_and_a_kill_acknowledge_each_key_once_and_deliver_within_the_interval_plus_5_s(
    backend: Backend,
) {
    let h = Harness::start_on(backend).await;
    let sink = Sink::start(SinkConfig {
        secret: Some(SECRET.into()),
        // Slow answers (within the call timeout), so the kill finds calls
        // in flight.
        faults: SinkFaults {
            fail_first_of_every: 5,
            hang_rate: 0.5,
            hang: Duration::from_millis(150),
            ..SinkFaults::default()
        },
    })
    .await
    .expect("sink");
    // Each replica calls its own URL, so the receiver tells whose call
    // each was.
    let url_of = |replica: &str| format!("{}?replica={replica}", sink.url());
    let (killed_url, b_url, restarted_url) = (url_of("a1"), url_of("b"), url_of("a2"));
    let a = h.spawn(h.run_args("c1", &kill_test_flags(&killed_url)));
    let b = h.spawn(h.run_args("c1", &kill_test_flags(&b_url)));
    let posts: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    let wave = |from: usize, to: usize| {
        let mut events = Vec::new();
        for post in &posts {
            for u in from..to {
                events.push(Ev::like(
                    &format!("{post}-{u}"),
                    post,
                    &format!("user-{u}"),
                    1,
                ));
            }
        }
        events
    };
    let first = wave(0, 5);
    h.publish(&first).await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let killed_at = SystemTime::now();
    a.kill().await;
    let second = wave(5, 9);
    h.publish(&second).await;
    let a = h.spawn(h.run_args("c1", &kill_test_flags(&restarted_url)));
    let mut all = first.clone();
    all.extend(second);
    let want = expected(&all);
    assert_eq!(
        h.wait_for_counts(&want, Duration::from_secs(60)).await,
        want
    );
    let n = posts.len() * 4;
    let records = wait_for_records(&h, n, MilestoneStatus::Done).await;
    assert_eq!(records.len(), n, "{records:?}");
    assert!(
        records.iter().all(|r| r.status == MilestoneStatus::Done),
        "{records:?}"
    );
    a.stop().await;
    b.stop().await;

    let requests = sink.requests();
    let acked = |f: Fate| {
        matches!(
            f,
            Fate::Processed | Fate::Replayed | Fate::ProcessedThenHung | Fate::ReplayedThenHung
        )
    };
    let mut twice = Vec::new();
    let mut latencies = Vec::new();
    let mut first_try = Vec::new();
    for record in &records {
        let key = format!("c1:{}", record.id());
        let calls: Vec<_> = requests.iter().filter(|r| r.key == key).collect();
        let acks: Vec<_> = calls.iter().filter(|r| acked(r.fate)).collect();
        assert!(!acks.is_empty(), "{key} acknowledged");
        let killed_call = acks[0].target.ends_with("replica=a1");
        if acks.len() > 1 && !killed_call {
            // Whose call, its fate, and when it came relative to the kill.
            let since_kill = |r: &Received| match r.received_at.duration_since(killed_at) {
                Ok(after) => format!("+{after:?}"),
                Err(before) => format!("-{:?}", before.duration()),
            };
            twice.push((
                key.clone(),
                calls
                    .iter()
                    .map(|r| format!("{} {:?} {}", r.target, r.fate, since_kill(r)))
                    .collect::<Vec<_>>(),
            ));
        }
        let reached = SystemTime::UNIX_EPOCH
            + Duration::from_micros(u64::try_from(record.reached_at).unwrap_or(0));
        let latency = acks[0]
            .received_at
            .duration_since(reached)
            .unwrap_or_default();
        latencies.push(latency);
        if calls.len() == 1 {
            first_try.push(latency);
        }
    }
    latencies.sort();
    first_try.sort();
    let repeated_in_flight = records
        .iter()
        .filter(|r| {
            let key = format!("c1:{}", r.id());
            requests
                .iter()
                .filter(|q| q.key == key && acked(q.fate))
                .count()
                > 1
        })
        .count();
    eprintln!(
        "{backend:?}: {repeated_in_flight} key(s) acknowledged again after a call in flight in the killed replica");
    eprintln!(
        "{backend:?}: {n} milestones; crossing (reachedAt) -> receiver: p50 {:?}, p99 {:?}, max {:?}; answered at the first call ({}): p50 {:?}, p99 {:?}; calls {}",
        percentile(&latencies, 50),
        percentile(&latencies, 99),
        latencies.last().copied().unwrap_or_default(),
        first_try.len(),
        percentile(&first_try, 50),
        percentile(&first_try, 99),
        requests.len(),
    );
    assert!(
        twice.is_empty(),
        "acknowledged twice, first by a replica that was not killed: {twice:?}"
    );
    let bound = Duration::from_millis(50) + Duration::from_secs(5);
    assert!(percentile(&first_try, 99) <= bound, "{first_try:?}");
}

/// A claim whose settle never came (its dispatcher stalled), then another
/// attempt, an operator's `retry` and a new claim: the stale settle still
/// changes nothing (`retry` keeps `attempts` counting, the fence of the
/// PostgreSQL settle; it reset them to 0, so the stale attempt's number
/// came round again).
async fn a_stale_settle_after_a_retry_changes_nothing(backend: Backend) {
    let h = Harness::start_on(backend).await;
    record_milestone(&h, "p").await;
    let lease = Duration::from_millis(300);
    let stale = h.store.claim(lease, 10).await.expect("claim");
    assert_eq!(stale.len(), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = h.store.claim(lease, 10).await.expect("claim");
    assert_eq!(second.len(), 1, "the lapsed lease is taken");
    let failed = hotcount::store::milestone::Settle::Retry {
        error: "HTTP 500".into(),
        after: Duration::ZERO,
    };
    assert!(h.store.settle(&second[0], &failed).await.expect("settle"));
    assert_eq!(
        ops::retry(&h.store, &["p:100".to_string()])
            .await
            .expect("retry"),
        1
    );
    let third = h
        .store
        .claim(Duration::from_secs(60), 10)
        .await
        .expect("claim");
    assert_eq!(third.len(), 1);
    let done = hotcount::store::milestone::Settle::Done { at: 1 };
    let applied = h.store.settle(&stale[0], &done).await.expect("settle");
    assert!(!applied, "a stale settle changed the record: {third:?}");
    let records = h.store.milestones().await.expect("list");
    assert_eq!(records[0].status, MilestoneStatus::Leased, "{records:?}");
}

/// A slow store (every Firestore Commit 300 ms) and eight due records: the
/// leases are taken together, each just before its call, so none lapses
/// before its call goes out and a second dispatcher two seconds later
/// takes none (claimed one at a time from a `now` read before the first,
/// the later leases had lapsed by then, and both dispatchers called them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_slow_store_no_lease_lapses_before_its_call_and_nothing_is_called_twice() {
    let h = Harness::start().await;
    let sink = fault_free_sink().await;
    for i in 0..8 {
        record_milestone(&h, &format!("p{i}")).await;
    }
    h.emulators
        .firestore_faults()
        .add(FaultSpec::latency("Commit", Duration::from_millis(300)))
        .expect("fault");
    let lease = Duration::from_secs(2);
    let first = dispatcher_leasing(&h, &sink.url(), SECRET, lease);
    let second = dispatcher_leasing(&h, &sink.url(), SECRET, lease);
    let (a, b) = tokio::join!(first.round(), async {
        tokio::time::sleep(Duration::from_millis(2200)).await;
        second.round().await
    });
    let requests = sink.requests();
    let keys: BTreeSet<&str> = requests.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys.len(), 8, "{a:?} {b:?}");
    assert_eq!(requests.len(), 8, "called twice: {a:?} {b:?}");
}

/// Writes `text` to a file of its own, as a mounted secret is; its path.
fn secret_file(text: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "hotcount-milestones-secret-{}-{n}",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("secret file written");
    path
}

/// Rotation: replicas sign with the new secret (`--milestone-webhook-secret-file`)
/// and the old one (`--milestone-webhook-previous-secret-file`); the
/// receiver moves from the old secret to the new at any time, so each of
/// a receiver that knows only the new one and one that knows only the old
/// one accepts every call, first try.
async fn while_a_secret_is_rotated_a_receiver_knowing_only_the_new_or_only_the_old_accepts_every_call(
    backend: Backend,
) {
    const NEW: &str = "rotated-in-secret";
    let h = Harness::start_on(backend).await;
    // As `echo` leaves them: a trailing line break, not part of the secret.
    let new_file = secret_file(&format!("{NEW}\n"));
    let old_file = secret_file(&format!("{SECRET}\n"));
    let knows_new = Sink::start(SinkConfig {
        secret: Some(NEW.into()),
        faults: SinkFaults::default(),
    })
    .await
    .expect("sink");
    let knows_old = fault_free_sink().await;
    let mut records = 0;
    for (sink, post) in [(&knows_new, "a"), (&knows_old, "b")] {
        let url = sink.url();
        let flags = [
            "--milestone-webhook",
            url.as_str(),
            "--milestone-webhook-secret-file",
            new_file.to_str().expect("a UTF-8 path"),
            "--milestone-webhook-previous-secret-file",
            old_file.to_str().expect("a UTF-8 path"),
            "--milestones",
            "5,20,40",
            "--rollup-interval-ms",
            "50",
            "--milestone-webhook-timeout-ms",
            "300",
            "--milestone-lease-secs",
            "1",
            "--milestone-retry-initial-ms",
            "50",
        ];
        let consumer = h.spawn(h.run_args("c1", &flags));
        let events = likes(post, 45, post);
        h.publish(&events).await;
        records += 3;
        let done = wait_for_records(&h, records, MilestoneStatus::Done).await;
        assert!(
            done.len() == records && done.iter().all(|r| r.status == MilestoneStatus::Done),
            "{done:?}"
        );
        consumer.stop().await;
        let requests = sink.requests();
        let keys: BTreeSet<String> = requests.iter().map(|r| r.key.clone()).collect();
        let want: BTreeSet<String> = [5, 20, 40]
            .iter()
            .map(|n| format!("c1:{post}:{n}"))
            .collect();
        assert_eq!(
            keys, want,
            "every milestone of {post} reached this receiver"
        );
        for r in &requests {
            assert_eq!(r.signature_ok, Some(true), "{}: signature refused", r.key);
            assert_eq!(r.fate, Fate::Processed, "{}: accepted first time", r.key);
        }
    }
    // The receiver that knows only the old secret refuses a call signed
    // with the new one alone: the previous secret is what it verified.
    let record = h.store.milestones().await.expect("list").remove(0);
    let new_only = Webhook::new(knows_old.url().parse().expect("url"), Some(NEW), "c1", WAIT)
        .expect("client")
        .call(&record)
        .await;
    assert!(
        matches!(
            new_only,
            hotcount::pipeline::milestones::Answer::Refused { .. }
        ),
        "{new_only:?}"
    );
    for file in [new_file, old_file] {
        let _ = std::fs::remove_file(file);
    }
}
