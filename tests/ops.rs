//! Operations features against the in-process emulators: the metrics
//! endpoint, reconcile, replay and the dead-letter tools. The replays run
//! on each store (`name::firestore`, `name::postgres`).

mod common;
#[path = "support/corrupt.rs"]
mod corrupt;
#[path = "support/scrape.rs"]
mod scrape;

use std::time::Duration;

use common::{expected, Backend, Ev, Harness};
use hotcount::ops::{dlq, reconcile, replay};
use hotcount::store::firestore::Read;

const WAIT: Duration = Duration::from_secs(30);

fn likes(post: &str, users: usize, prefix: &str) -> Vec<Ev> {
    (0..users)
        .map(|u| Ev::like(&format!("{prefix}-{u}"), post, &format!("user-{u}"), 1))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_exports_counts_and_readiness() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("c1", &[]));
    let addr = scrape::metrics_addr(&consumer.stats).await;
    assert_eq!(scrape::get(addr, "/healthz").await.0, 200);
    let events = likes("p", 12, "m");
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(12, WAIT).await);
    let (status, _) = scrape::get(addr, "/readyz").await;
    assert_eq!(status, 200, "ready while the source runs");
    let (status, body) = scrape::get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        scrape::value(&body, "hotcount_events_received_total"),
        Some(12.0)
    );
    assert_eq!(
        scrape::value(&body, "hotcount_events_applied_total"),
        Some(12.0)
    );
    assert_eq!(scrape::value(&body, "hotcount_acks_total"), Some(12.0));
    assert!(scrape::value(&body, "hotcount_commits_total{outcome=\"committed\"}").unwrap() >= 1.0);
    assert!(scrape::value(&body, "hotcount_batch_size_messages_count").unwrap() >= 1.0);
    assert!(scrape::value(&body, "hotcount_buffered_events{shard=\"3\"}").is_some());
    assert_eq!(scrape::value(&body, "hotcount_ready"), Some(1.0));
    consumer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_finds_and_repairs_a_corrupted_shard() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("c1", &[]));
    let mut events = likes("hot", 9, "a");
    events.extend(likes("calm", 3, "b"));
    events.push(Ev::unlike("b-0-off", "calm", "user-0", 2));
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(events.len() as u64, WAIT).await);
    consumer.stop().await;
    let want = expected(&events);
    assert_eq!(h.counts(want.keys()).await, want);

    let clean = reconcile::reconcile_all(&h.db, false).await.unwrap();
    assert_eq!(clean.len(), 2);
    assert!(clean.iter().all(|r| r.difference() == 0), "{clean:?}");

    // Corrupt: a lost increment on one shard, a phantom one on another post.
    corrupt::counter_shard(&h.db, "hot", 0, -4).await;
    corrupt::counter_shard(&h.db, "calm", 5, 3).await;
    assert_eq!(h.count("hot").await, 5);

    let report = reconcile::reconcile_post(&h.db, "hot", false)
        .await
        .unwrap();
    assert_eq!(
        (report.liked, report.shards_sum, report.repaired),
        (9, 5, false)
    );
    assert_eq!(h.count("hot").await, 5, "a report changes nothing");

    let all = reconcile::reconcile_all(&h.db, true).await.unwrap();
    let repaired: Vec<_> = all
        .iter()
        .filter(|r| r.repaired)
        .map(|r| (r.post_id.as_str(), r.difference()))
        .collect();
    assert_eq!(repaired, vec![("calm", -3), ("hot", 4)]);
    assert_eq!(
        h.counts(want.keys()).await,
        want,
        "counts equal liked memberships again"
    );
    let again = reconcile::reconcile_all(&h.db, true).await.unwrap();
    assert!(
        again.iter().all(|r| r.difference() == 0 && !r.repaired),
        "{again:?}"
    );
}

/// Holds a repair's first attempt at one [`reconcile::RepairStep`] until released.
struct Pause {
    at: reconcile::RepairStep,
    reached: tokio::sync::mpsc::UnboundedSender<()>,
    go: tokio::sync::Semaphore,
}

impl reconcile::RepairHook for Pause {
    fn reached(
        &self,
        step: reconcile::RepairStep,
        attempt: u32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            if step == self.at && attempt == 1 {
                let _ = self.reached.send(());
                if let Ok(permit) = self.go.acquire().await {
                    permit.forget();
                }
            }
        })
    }
}

/// A repair of one post running as a task, held at a step of its first attempt.
struct HeldRepair {
    pause: std::sync::Arc<Pause>,
    reached: tokio::sync::mpsc::UnboundedReceiver<()>,
    task: tokio::task::JoinHandle<Result<reconcile::PostReport, hotcount::store::StoreError>>,
}

impl HeldRepair {
    fn start(h: &Harness, post: &str, at: reconcile::RepairStep) -> Self {
        let (tx, reached) = tokio::sync::mpsc::unbounded_channel();
        let pause = std::sync::Arc::new(Pause {
            at,
            reached: tx,
            go: tokio::sync::Semaphore::new(0),
        });
        let (db, post, hook) = (h.db.clone(), post.to_string(), pause.clone());
        let task = tokio::spawn(async move {
            hotcount::store::firestore::repair::reconcile_post_with(&db, &post, true, &*hook).await
        });
        Self {
            pause,
            reached,
            task,
        }
    }

    /// Waits (bounded) until the repair is held at its step.
    async fn held(&mut self) {
        tokio::time::timeout(WAIT, self.reached.recv())
            .await
            .expect("the repair reaches its step in time")
            .expect("the repair is running");
    }

    /// Lets it go on and waits (bounded) for its report.
    async fn finish(self) -> reconcile::PostReport {
        self.pause.go.add_permits(1);
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the repair ends in time")
            .expect("repair task")
            .expect("repair")
    }
}

/// Liked memberships of `post` in the database, counted by a plain query.
async fn liked_memberships(h: &Harness, post: &str) -> i64 {
    let (memberships, _) =
        h.db.memberships(Some(post), Read::Latest)
            .await
            .expect("memberships");
    memberships.iter().filter(|m| m.membership.liked).count() as i64
}

/// A like the consumer commits between the repair's reads (a new membership
/// and its increment, in one commit) is neither subtracted nor counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_like_committed_between_a_repairs_reads_is_not_subtracted() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("c1", &[]));
    let mut events = likes("p", 3, "a");
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(3, WAIT).await);
    corrupt::counter_shard(&h.db, "p", 7, -2).await;
    assert_eq!(h.count("p").await, 1);

    let mut repair = HeldRepair::start(&h, "p", reconcile::RepairStep::FirstRead);
    repair.held().await;
    let late = Ev::like("late", "p", "late-user", 1);
    h.publish(std::slice::from_ref(&late)).await;
    events.push(late);
    assert!(
        consumer.wait_for_acks(4, WAIT).await,
        "the like commits while the repair is held between its reads"
    );
    let report = repair.finish().await;
    consumer.stop().await;

    assert_eq!(liked_memberships(&h, "p").await, 4);
    assert_eq!(
        h.count("p").await,
        4,
        "sum of shards == liked memberships after the repair ({report:?})"
    );
    assert!(report.repaired, "{report:?}");
    assert_eq!(report.difference(), 2, "{report:?}");
    assert_eq!(h.counts(expected(&events).keys()).await, expected(&events));
}

/// A like the consumer commits after the repair compared, before it
/// commits, leaves the count exact too (whether the consumer had to wait
/// for the repair or not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_like_committed_after_a_repair_compared_keeps_the_count_exact() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("c1", &[]));
    h.publish(&likes("p", 3, "a")).await;
    assert!(consumer.wait_for_acks(3, WAIT).await);
    corrupt::counter_shard(&h.db, "p", 7, 5).await;

    let mut repair = HeldRepair::start(&h, "p", reconcile::RepairStep::Compared);
    repair.held().await;
    let waits_before = h.emulators.firestore().stats().lock_waits;
    h.publish(&[Ev::like("late", "p", "late-user", 1)]).await;
    // Either the consumer commits at once, or it waits for the repair's locks.
    let deadline = tokio::time::Instant::now() + WAIT;
    while consumer.stats.acks.get() < 4
        && h.emulators.firestore().stats().lock_waits == waits_before
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the like is processed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let report = repair.finish().await;
    assert!(consumer.wait_for_acks(4, WAIT).await);
    consumer.stop().await;

    assert_eq!(report.difference(), -5, "{report:?}");
    assert_eq!(liked_memberships(&h, "p").await, 4);
    assert_eq!(h.count("p").await, 4, "{report:?}");
}

/// Two repairs of one corrupted post that both compared before either
/// committed: one correction applies, the other retries from fresh reads
/// and finds nothing to do, in either commit order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_repairs_of_one_post_apply_one_correction() {
    let h = Harness::start().await;
    // A phantom increment on shard 3 of posts with no likes (shard 0 absent).
    for post in ["older-first", "younger-first"] {
        corrupt::counter_shard(&h.db, post, 3, 2).await;
        let mut older = HeldRepair::start(&h, post, reconcile::RepairStep::Compared);
        older.held().await;
        let mut younger = HeldRepair::start(&h, post, reconcile::RepairStep::Compared);
        younger.held().await;
        let (first, second) = if post == "older-first" {
            (older, younger)
        } else {
            (younger, older)
        };
        let first = first.finish().await;
        let second = second.finish().await;
        assert_eq!(
            h.count(post).await,
            0,
            "{post}: corrected once ({first:?}, {second:?})"
        );
        let applied = [&first, &second].iter().filter(|r| r.repaired).count();
        assert_eq!(applied, 1, "{post}: {first:?}, {second:?}");
    }
}

/// A correction that committed but was answered UNAVAILABLE is not applied
/// again by the retry, and the report still says what was repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_applied_but_answered_unavailable_applies_once_and_reports_it() {
    use hotcount_emulators::{FaultKind, FaultSpec};
    let h = Harness::start().await;
    corrupt::counter_shard(&h.db, "p", 3, 4).await;
    let faults = h.emulators.firestore_faults();
    faults
        .add(FaultSpec::error_after_apply("Commit", gcloud_sdk::tonic::Code::Unavailable).times(1))
        .unwrap();
    let report = reconcile::reconcile_post(&h.db, "p", true)
        .await
        .expect("repair");
    assert_eq!(faults.fired().get(&FaultKind::ErrorAfterApply), Some(&1));
    assert_eq!(h.count("p").await, 0, "corrected once");
    assert!(report.repaired, "{report:?}");
    assert_eq!(report.difference(), -4, "{report:?}");
}

use common::{archive, rfc3339};

fn replay_args(
    h: &Harness,
    from: std::time::SystemTime,
    to: std::time::SystemTime,
    extra: &[&str],
) -> replay::ReplayArgs {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        replay: replay::ReplayArgs,
    }
    let (from, to) = (rfc3339(from), rfc3339(to));
    let mut flags: Vec<(&str, &str)> = vec![
        ("--store", h.postgres_url().unwrap_or("firestore")),
        ("--project", common::PROJECT),
        ("--consumer", "c1"),
        ("--from", &from),
        ("--to", &to),
        ("--idle-ms", "1500"),
        ("--end-grace-ms", "200"),
        ("--max-events-per-sec", "10000"),
        ("--chunk-events", "7"),
    ];
    let mut switches = Vec::new();
    let mut rest = extra.iter();
    while let Some(flag) = rest.next() {
        if *flag == "--dry-run" {
            switches.push(*flag);
            continue;
        }
        let value = rest.next().expect("flag value");
        match flags.iter_mut().find(|(f, _)| f == flag) {
            Some(slot) => slot.1 = value,
            None => flags.push((flag, value)),
        }
    }
    let mut argv = vec!["hotcount"];
    for (flag, value) in flags {
        argv.push(flag);
        argv.push(value);
    }
    argv.extend(switches);
    <Cli as clap::Parser>::parse_from(argv).replay
}

fn history() -> Vec<Ev> {
    let mut events = likes("r1", 15, "r");
    events.extend(likes("r2", 4, "s"));
    events.push(Ev::unlike("s-1-off", "r2", "user-1", 2));
    events.push(events[2].clone()); // a publisher retry
    events
}

crate::on_each_store!(
    a_replay_moving_a_post_across_a_milestone_records_it,
    replaying_processed_traffic_leaves_every_count_unchanged,
    dry_run_reports_changes_and_writes_nothing_and_divergence_pauses,
    a_user_erased_while_a_replay_runs_has_none_of_their_replayed_events_counted,
    a_replay_without_the_user_hash_key_refuses_a_store_holding_tombstones,
);

/// Commits the store has seen: Firestore `Commit` calls (the emulator's
/// count), PostgreSQL batch markers (one per committed batch).
async fn commits(h: &Harness) -> u64 {
    match &h.postgres {
        None => h.emulators.firestore_counters().get("Commit"),
        Some((_, url)) => {
            let client = common::pg::connect(url).await;
            let row = client
                .query_one("SELECT count(*) FROM batch_markers", &[])
                .await
                .expect("count markers");
            row.get::<_, i64>(0).unsigned_abs()
        }
    }
}

async fn replaying_processed_traffic_leaves_every_count_unchanged(backend: Backend) {
    let h = Harness::start_on(backend).await;
    archive(&h, "likes-archive").await;
    let from = h.emulators.clock().now_wall() - Duration::from_secs(1);
    let consumer = h.spawn(h.run_args("c1", &[]));
    let events = history();
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(events.len() as u64, WAIT).await);
    consumer.stop().await;
    let want = expected(&events);
    assert_eq!(h.counts(want.keys()).await, want);
    let to = h.emulators.clock().now_wall() + Duration::from_secs(1);
    // Traffic after the window: never processed, and the replay must not apply it.
    h.emulators.clock().advance(Duration::from_secs(2));
    h.publish(&[Ev::like("late", "r1", "late-user", 1)]).await;

    let args = replay_args(
        &h,
        from,
        to,
        &[
            "--replay-subscription",
            "likes-archive",
            "--max-events-per-sec",
            "20",
        ],
    );
    let started = std::time::Instant::now();
    let report = replay::run(&h.endpoints, &args).await.expect("replay");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "21 messages at 20 per second take over a second"
    );
    assert_eq!(report.ending, replay::Ending::WindowEnd, "{report:?}");
    assert_eq!(report.skipped, 1, "the late message is outside the window");
    assert_eq!(report.messages, events.len() as u64, "{report:?}");
    assert_eq!(report.effects.applied, 0, "{report:?}");
    assert_eq!(
        report.effects.duplicates + report.effects.stale,
        events.len() as u64
    );
    assert!(report.deltas.is_empty());
    assert!(!report.deleted, "an existing subscription is kept");
    assert_eq!(
        h.counts(want.keys()).await,
        want,
        "counts unchanged by the replay"
    );

    // Without a name, replay creates its own subscription and deletes it.
    let args = replay_args(&h, from, to, &["--idle-ms", "300"]);
    let report = replay::run(&h.endpoints, &args).await.expect("replay");
    assert!(
        report.subscription.contains("/likes-hotcount-replay-"),
        "{}",
        report.subscription
    );
    assert!(report.deleted);
    assert!(
        h.emulators.pubsub().stats(&report.subscription).is_none(),
        "cleaned up"
    );
    assert_eq!(h.counts(want.keys()).await, want);
}

async fn dry_run_reports_changes_and_writes_nothing_and_divergence_pauses(backend: Backend) {
    let h = Harness::start_on(backend).await;
    archive(&h, "likes-archive").await;
    let from = h.emulators.clock().now_wall() - Duration::from_secs(1);
    // Never processed by a consumer: replaying it would change counts.
    let events = history();
    h.publish(&events).await;
    let to = h.emulators.clock().now_wall() + Duration::from_secs(1);
    let want = expected(&events);
    let zero: std::collections::BTreeMap<String, i64> =
        want.keys().map(|k| (k.clone(), 0)).collect();

    let commits_before = commits(&h).await;
    let dry = replay_args(
        &h,
        from,
        to,
        &["--replay-subscription", "likes-archive", "--dry-run"],
    );
    let report = replay::run(&h.endpoints, &dry).await.expect("dry run");
    assert!(report.dry_run);
    assert_eq!(report.messages, events.len() as u64);
    assert_eq!(report.deltas, want, "reports exactly what would change");
    assert_eq!(report.effects.duplicates, 1, "the publisher retry");
    assert_eq!(
        h.counts(want.keys()).await,
        zero,
        "a dry run changes nothing"
    );
    assert_eq!(commits(&h).await, commits_before, "no commit at all");

    let guarded = replay_args(
        &h,
        from,
        to,
        &[
            "--replay-subscription",
            "likes-archive",
            "--max-divergence",
            "0.5",
        ],
    );
    let report = replay::run(&h.endpoints, &guarded)
        .await
        .expect("guarded replay");
    assert_eq!(report.ending, replay::Ending::Paused);
    assert_eq!(report.messages, 0, "the diverging chunk was not committed");
    assert_eq!(h.counts(want.keys()).await, zero);

    let full = replay_args(
        &h,
        from,
        to,
        &[
            "--replay-subscription",
            "likes-archive",
            "--max-divergence",
            "1",
        ],
    );
    let report = replay::run(&h.endpoints, &full).await.expect("replay");
    assert_eq!(report.ending, replay::Ending::Drained);
    assert_eq!(report.deltas, want);
    assert_eq!(
        h.counts(want.keys()).await,
        want,
        "the real run applies what the dry run showed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_shown_with_their_source_and_selected_ones_replay_through_the_normal_path()
{
    let h = Harness::start_with(common::SubscriptionOptions {
        max_delivery_attempts: 5,
        ..Default::default()
    })
    .await;
    let events = likes("dl", 3, "d");
    h.publish(&events).await;
    // A consumer that fails every message: Pub/Sub dead-letters each after 5 deliveries.
    let subscriber = hotcount::connect::subscriber(&h.endpoints).await.unwrap();
    let main = format!(
        "projects/{}/subscriptions/{}",
        common::PROJECT,
        common::SUBSCRIPTION
    );
    let inspect_sub = format!(
        "projects/{}/subscriptions/likes-dead-letter-inspect",
        common::PROJECT
    );
    let mut stream = subscriber.subscribe(main).build();
    let deadline = tokio::time::Instant::now() + WAIT;
    while h
        .emulators
        .pubsub()
        .stats(&inspect_sub)
        .map_or(0, |s| s.unacked)
        < 3
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "dead-lettered in time"
        );
        if let Ok(Some(Ok((_, handler)))) =
            tokio::time::timeout(Duration::from_millis(100), stream.next()).await
        {
            handler.nack();
        }
    }
    drop(stream);

    let args = dlq_args();
    let letters = dlq::inspect(&h.endpoints, &args).await.expect("inspect");
    assert_eq!(letters.len(), 3);
    for letter in &letters {
        assert_eq!(letter.source_delivery_count, Some(5), "{letter:?}");
        assert_eq!(
            letter
                .attributes
                .get("CloudPubSubDeadLetterSourceSubscription")
                .map(String::as_str),
            Some(common::SUBSCRIPTION)
        );
        assert!(
            letter.preview(200).contains("\"postId\":\"dl\""),
            "{}",
            letter.preview(200)
        );
    }
    assert_eq!(
        dlq::inspect(&h.endpoints, &args).await.unwrap().len(),
        3,
        "inspect acks nothing"
    );

    let consumer = h.spawn(h.run_args("c1", &[]));
    let chosen: std::collections::BTreeSet<String> = letters
        .iter()
        .take(2)
        .map(|l| l.message_id.clone())
        .collect();
    let replayed = dlq::replay(&h.endpoints, &args, &dlq::Selection::Ids(chosen.clone()))
        .await
        .expect("replay");
    assert_eq!(
        replayed
            .iter()
            .map(|r| r.dead_letter_id.clone())
            .collect::<std::collections::BTreeSet<_>>(),
        chosen
    );
    assert!(consumer.wait_for_acks(2, WAIT).await);
    assert_eq!(h.count("dl").await, 2, "the two replayed likes counted");
    consumer.stop().await;
    let left = dlq::inspect(&h.endpoints, &args).await.unwrap();
    assert_eq!(left.len(), 1, "the unselected dead letter stays");
    assert!(!chosen.contains(&left[0].message_id));
}

fn dlq_args() -> dlq::DlqArgs {
    dlq::DlqArgs {
        project: common::PROJECT.into(),
        dead_letter_subscription: "likes-dead-letter-inspect".into(),
        topic: common::TOPIC.into(),
        max_messages: 100,
        wait_ms: 1000,
    }
}

/// A replay that applies events the consumer never processed moves a post
/// from 3 to 9 likes: its rollup refresh records milestone 5 (the fleet's
/// stored list), as the running refresher would have.
async fn a_replay_moving_a_post_across_a_milestone_records_it(backend: Backend) {
    use hotcount::store::milestone::{MilestoneSetting, MilestoneStore};
    let h = Harness::start_on(backend).await;
    archive(&h, "likes-archive").await;
    h.store
        .store_milestone_setting(&MilestoneSetting::On(vec![5]), false)
        .await
        .expect("setting");
    let from = h.emulators.clock().now_wall() - Duration::from_secs(1);
    let all = likes("m", 9, "m");
    let consumer = h.spawn(h.run_args("c1", &["--rollup-interval-ms", "50"]));
    h.publish(&all[..3]).await;
    assert!(consumer.wait_for_acks(3, WAIT).await);
    consumer.stop().await;
    // Never processed by a consumer: only the archive keeps them.
    h.publish(&all[3..]).await;
    let to = h.emulators.clock().now_wall() + Duration::from_secs(1);
    assert!(h.store.milestones().await.expect("list").is_empty());

    let flags = [
        "--replay-subscription",
        "likes-archive",
        "--max-divergence",
        "1",
    ];
    let report = replay::run(&h.endpoints, &replay_args(&h, from, to, &flags))
        .await
        .expect("replay");
    assert_eq!(report.effects.applied, 6, "{report:?}");
    assert_eq!(h.count("m").await, 9);
    let records = h.store.milestones().await.expect("list");
    let ids: Vec<String> = records.iter().map(|r| r.id()).collect();
    assert_eq!(
        ids,
        ["m:5"],
        "the replay's rollup write records what it crosses"
    );
}

/// A user erased after the replay read the tombstones, while it still
/// has their events to go: the chunk holding them was checked against the
/// older set, and its commit (labelled with the generation read at the
/// start) must find the tombstone and drop them, not count them.
async fn a_user_erased_while_a_replay_runs_has_none_of_their_replayed_events_counted(
    backend: Backend,
) {
    use hotcount::ops::users::{self, EraseSettings, TombstoneSettings};
    const KEY: &str = "k3y";
    let h = Harness::start_on(backend).await;
    h.allow_tombstones().await;
    archive(&h, "likes-archive").await;
    let from = h.emulators.clock().now_wall() - Duration::from_secs(1);
    // Never processed: the replay applies them, one a second, carol's two
    // first, then alice's.
    let events = vec![
        Ev::like("c1", "early-1", "carol", 1),
        Ev::like("c2", "early-2", "carol", 1),
        Ev::like("a1", "late", "alice", 1),
        Ev::like("d1", "late", "dave", 1),
    ];
    for event in &events {
        h.publish(std::slice::from_ref(event)).await;
    }
    let to = h.emulators.clock().now_wall() + Duration::from_secs(1);
    let args = replay_args(
        &h,
        from,
        to,
        &[
            "--replay-subscription",
            "likes-archive",
            "--max-events-per-sec",
            "1",
            "--chunk-events",
            "1",
            "--idle-ms",
            "3000",
            "--max-divergence",
            "1",
            "--user-hash-key",
            KEY,
        ],
    );
    let endpoints = h.endpoints.clone();
    let replaying = tokio::spawn(async move { replay::run(&endpoints, &args).await });
    // Carol's first like committed: the replay has read the tombstones
    // (none yet) and is paced before alice's.
    let deadline = std::time::Instant::now() + WAIT;
    while h.count("early-1").await != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the replay's first chunk"
        );
        if replaying.is_finished() {
            panic!("the replay ended first: {:?}", replaying.await);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(h.count("late").await, 0, "alice's like not replayed yet");
    let store = users::erase_store(h.store.clone(), "c1", 4, Duration::from_secs(3600));
    let settings = EraseSettings {
        dry_run: false,
        chunk: 200,
        counter_shards: 4,
        tombstone: Some(TombstoneSettings {
            key: KEY.as_bytes().to_vec(),
            settle: Duration::from_millis(50),
        }),
    };
    users::erase(&store, "alice", &settings, |_, _| {})
        .await
        .expect("the erasure runs");

    let report = tokio::time::timeout(WAIT, replaying)
        .await
        .expect("the replay ends")
        .expect("joined")
        .expect("replay");
    assert_eq!(report.messages, events.len() as u64, "{report:?}");
    assert_eq!(report.erased, 1, "alice's like dropped: {report:?}");
    assert_eq!(h.count("early-2").await, 1);
    assert_eq!(
        h.count("late").await,
        1,
        "dave's like only: alice was erased before her like's chunk committed"
    );
    let left = users::memberships(&h.store, "alice").await.expect("read");
    assert!(left.is_empty(), "alice left memberships: {left:?}");
}

/// Without the key a replay cannot tell an erased user's events apart:
/// with a tombstone in the store it refuses to start, naming the flag.
async fn a_replay_without_the_user_hash_key_refuses_a_store_holding_tombstones(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.allow_tombstones().await;
    archive(&h, "likes-archive").await;
    let from = h.emulators.clock().now_wall() - Duration::from_secs(1);
    h.publish(&[Ev::like("a1", "p", "alice", 1)]).await;
    let to = h.emulators.clock().now_wall() + Duration::from_secs(1);
    hotcount::ops::users::write_tombstone(&h.store, b"k3y", "alice")
        .await
        .expect("a tombstone");
    let args = replay_args(&h, from, to, &["--replay-subscription", "likes-archive"]);
    let error = replay::run(&h.endpoints, &args)
        .await
        .expect_err("refused without the key");
    assert!(matches!(error, replay::ReplayError::Unkeyed), "{error}");
    assert!(error.to_string().contains("--user-hash-key"), "{error}");
    assert_eq!(h.count("p").await, 0, "nothing replayed");
}
