//! The PostgreSQL store against a real server (a throwaway cluster per
//! test, `support/postgres.rs`): the exactness properties the Firestore
//! store has, the round trips a batch takes, and what a broken connection,
//! a held lock or a competing replica leaves behind.

#[path = "support/events.rs"]
mod events;
#[path = "support/fates.rs"]
mod fates;
#[path = "support/postgres.rs"]
mod pg;

use fates::{Fate, Fates, Handle};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use hotcount::event::LikeEvent;
use hotcount::model::batch::{Batch, Effects, MembershipKey};
use hotcount::model::item::Item;
use hotcount::model::poison::PoisonRecord;
use hotcount::pipeline::acker::Acker;
use hotcount::pipeline::aggregator::{Aggregator, Pending};
use hotcount::pipeline::flusher::{FlushConfig, Flusher};
use hotcount::store::memory::MemoryStore;
use hotcount::store::postgres::{PgDb, PgDbConfig, PostgresStore, PostgresStoreConfig};
use hotcount::store::{Attempt, CommitOutcome, CommitReport, CounterStore, Deadline};
use hotcount::telemetry::Stats;
use pg::{Cut, PgCluster, Proxy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CONSUMER: &str = "hotcount";

async fn cluster() -> PgCluster {
    tokio::task::spawn_blocking(PgCluster::start)
        .await
        .expect("start the test cluster")
}

fn db_config(url: &str, max_connections: usize) -> PgDbConfig {
    PgDbConfig {
        max_connections,
        ..PgDbConfig::new(url)
    }
}

fn store_config() -> PostgresStoreConfig {
    PostgresStoreConfig {
        consumer: CONSUMER.into(),
        counter_shards: 8,
        counter_shard_target_writes_per_sec: 1,
        marker_ttl: Duration::from_secs(86_400),
        due_records: false,
        known_memberships: 0,
    }
}

/// A store over `config`, its schema migrated.
async fn open_with(config: PgDbConfig) -> PostgresStore {
    let db = PgDb::new(&config).expect("valid settings");
    db.migrate().await.expect("migrate");
    PostgresStore::new(db, store_config())
}

async fn open(url: &str, max_connections: usize) -> PostgresStore {
    open_with(db_config(url, max_connections)).await
}

fn event(added: bool, post: &str, user: &str, seq: i64, id: &str) -> LikeEvent {
    events::event_of(added, post, user, seq, 1_700_000_000_000_000, id)
}

fn like(post: &str, user: &str, seq: i64, id: &str) -> LikeEvent {
    event(true, post, user, seq, id)
}

fn unlike(post: &str, user: &str, seq: i64, id: &str) -> LikeEvent {
    event(false, post, user, seq, id)
}

fn poison(message_id: &str) -> PoisonRecord {
    PoisonRecord::new(
        message_id.into(),
        "payload is not a JSON object".into(),
        b"{nope",
        BTreeMap::from([("origin".to_string(), "test".to_string())]),
    )
}

/// Commits `batch` as the flusher would: retrying what proves nothing
/// about the content. Returns the report and the attempts that failed.
async fn commit(store: &PostgresStore, batch: &Batch) -> (CommitReport, u32) {
    let mut attempt = Attempt::first();
    let mut failed = 0;
    loop {
        match store.commit(batch, &attempt).await {
            Ok(report) => return (report, failed),
            Err(e) if e.is_retryable() && failed < 50 => {
                failed += 1;
                attempt = Attempt::after(&e);
                tokio::time::sleep(Duration::from_millis(rand::random_range(1..20))).await;
            }
            Err(e) => panic!("commit failed: {e}"),
        }
    }
}

async fn count(store: &PostgresStore, post: &str) -> i64 {
    store.count(post).await.expect("count")
}

/// Every post's liked memberships equal its counter sum, at one snapshot.
async fn assert_consistent(store: &PostgresStore) {
    for tally in store.db().tally().await.expect("tally") {
        assert_eq!(tally.liked, tally.shards_sum, "{tally:?}");
    }
}

#[tokio::test]
async fn duplicates_are_no_ops_and_a_recommitted_batch_reports_its_first_effects() {
    let cluster = cluster().await;
    let store = open(&cluster.create_database("dups").await, 2).await;
    let batch = Batch::new(
        vec![
            like("p", "u1", 1, "e1"),
            like("p", "u2", 1, "e2"),
            like("p", "u1", 1, "e1"),
        ],
        vec![],
    );
    let (first, _) = commit(&store, &batch).await;
    assert_eq!(first.outcome, CommitOutcome::Committed);
    let effects = Effects {
        applied: 2,
        duplicates: 1,
        ..Effects::default()
    };
    assert_eq!(first.effects, effects);
    assert_eq!(count(&store, "p").await, 2);

    let (again, _) = commit(&store, &batch).await;
    assert_eq!(again.outcome, CommitOutcome::AlreadyCommitted);
    assert_eq!(again.effects, effects, "the marker's effects");
    assert_eq!(count(&store, "p").await, 2);

    let redelivered = Batch::new(
        vec![like("p", "u1", 1, "e1"), like("p", "u2", 1, "e2")],
        vec![],
    );
    let (third, _) = commit(&store, &redelivered).await;
    assert_eq!(third.outcome, CommitOutcome::Committed);
    assert_eq!(third.effects.duplicates, 2);
    assert_eq!(third.effects.applied, 0);
    assert_eq!(third.increments, 0);
    assert_eq!(count(&store, "p").await, 2);
    assert_consistent(&store).await;
}

#[tokio::test]
async fn out_of_order_unlikes_and_likes_settle_by_version() {
    let cluster = cluster().await;
    let store = open(&cluster.create_database("order").await, 2).await;
    // Within one batch: like(3) arrives before like(1) and unlike(2).
    let batch = Batch::new(
        vec![
            like("p", "u", 3, "c"),
            like("p", "u", 1, "a"),
            unlike("p", "u", 2, "b"),
        ],
        vec![],
    );
    commit(&store, &batch).await;
    assert_eq!(count(&store, "p").await, 1);
    // Across batches: an older unlike is stale, a newer one applies, an
    // older like after it is stale again.
    let (stale, _) = commit(&store, &Batch::new(vec![unlike("p", "u", 2, "b2")], vec![])).await;
    assert_eq!(stale.effects.stale, 1);
    assert_eq!(count(&store, "p").await, 1);
    commit(&store, &Batch::new(vec![unlike("p", "u", 4, "d")], vec![])).await;
    assert_eq!(count(&store, "p").await, 0);
    let (late, _) = commit(&store, &Batch::new(vec![like("p", "u", 1, "a")], vec![])).await;
    assert_eq!(late.effects.stale + late.effects.duplicates, 1);
    assert_eq!(count(&store, "p").await, 0);

    let key = MembershipKey {
        post_id: "p".into(),
        user_id: "u".into(),
    };
    let stored = store
        .db()
        .memberships(std::slice::from_ref(&key))
        .await
        .expect("read");
    let membership = &stored[&key];
    assert!(!membership.liked);
    assert_eq!(membership.version.seq, 4);
    assert_eq!(membership.version.event_id, "d");
    assert_consistent(&store).await;
}

#[tokio::test]
async fn a_batch_commits_in_two_round_trips() {
    let cluster = cluster().await;
    cluster.create_database("trips").await;
    let proxy = Proxy::start(cluster.addr()).await;
    let store = open(&proxy.url("trips"), 1).await;
    let (first, _) = commit(&store, &Batch::new(vec![like("p", "u1", 1, "a")], vec![])).await;
    assert_eq!(
        first.rpcs, 3,
        "a connection's first commit prepares its statements"
    );

    // Updates a read membership, inserts two, increments two posts,
    // writes the marker and two quarantine records.
    let batch = Batch::new(
        vec![
            unlike("p", "u1", 2, "b"),
            like("p", "u2", 1, "c"),
            like("q", "u3", 1, "d"),
        ],
        vec![poison("m1"), poison("m2")],
    );
    proxy.reset_round_trips();
    let (report, failed) = commit(&store, &batch).await;
    assert_eq!(failed, 0);
    assert_eq!(report.outcome, CommitOutcome::Committed);
    assert_eq!(report.increments, 1, "p's -1 and +1 cancel; q gets +1");
    assert_eq!(report.rpcs, 2);
    assert_eq!(proxy.round_trips(), 2, "as the server saw them");

    proxy.reset_round_trips();
    let (again, _) = commit(&store, &batch).await;
    assert_eq!(again.outcome, CommitOutcome::AlreadyCommitted);
    assert_eq!((again.rpcs, proxy.round_trips()), (2, 2));
    assert_eq!(count(&store, "p").await, 1);
    assert_eq!(count(&store, "q").await, 1);
}

#[tokio::test]
async fn a_batch_checked_against_the_tombstones_still_commits_in_two_round_trips() {
    let cluster = cluster().await;
    cluster.create_database("checked").await;
    let proxy = Proxy::start(cluster.addr()).await;
    let store = open(&proxy.url("checked"), 1).await;
    let _ = commit(&store, &Batch::new(vec![like("p", "u0", 1, "z")], vec![])).await;

    let mut batch = Batch::new(
        vec![like("p", "u1", 1, "a"), like("q", "u2", 1, "b")],
        vec![poison("m1")],
    );
    batch.tombstone_generation = Some(0);
    proxy.reset_round_trips();
    let (report, failed) = commit(&store, &batch).await;
    assert_eq!((failed, report.outcome), (0, CommitOutcome::Committed));
    assert_eq!((report.rpcs, proxy.round_trips()), (2, 2));

    // A tombstone moves the generation: a batch checked against the old one
    // applies nothing, in the same round trips, and says why.
    store.db().write_tombstone("h1").await.expect("a tombstone");
    let mut stale = Batch::new(vec![like("p", "u3", 1, "c")], vec![]);
    stale.tombstone_generation = Some(0);
    proxy.reset_round_trips();
    let error = store
        .commit(&stale, &Attempt::first())
        .await
        .expect_err("checked against generation 0, the store holds 1");
    assert!(
        error.is_tombstones_changed() && error.is_retryable(),
        "{error}"
    );
    assert!(!error.is_contention(), "not split as contention: {error}");
    assert_eq!(proxy.round_trips(), 2, "the read, then the rollback");
    assert_eq!(count(&store, "p").await, 2);
    stale.tombstone_generation = Some(1);
    let (report, _) = commit(&store, &stale).await;
    assert_eq!(report.outcome, CommitOutcome::Committed);
    assert_eq!(count(&store, "p").await, 3);
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_resolved_by_its_marker() {
    let cluster = cluster().await;
    cluster.create_database("lost").await;
    let proxy = Proxy::start(cluster.addr()).await;
    let store = open(&proxy.url("lost"), 1).await;
    let batch = Batch::new(
        vec![like("p", "u1", 1, "a"), like("p", "u2", 1, "b")],
        vec![poison("m1")],
    );
    proxy.arm(Cut::AfterCommit);
    let error = store
        .commit(&batch, &Attempt::first())
        .await
        .expect_err("the answer to COMMIT never arrives");
    assert_eq!(proxy.cuts(), 1);
    assert!(error.is_retryable() && !error.proves_content(), "{error}");
    assert_eq!(count(&store, "p").await, 2, "it did commit");

    let again = store
        .commit(&batch, &Attempt::after(&error))
        .await
        .expect("the retry");
    assert_eq!(again.outcome, CommitOutcome::AlreadyCommitted);
    let effects = Effects {
        applied: 2,
        poison: 1,
        ..Effects::default()
    };
    assert_eq!(again.effects, effects, "from the marker");
    assert_eq!(count(&store, "p").await, 2, "counted once");
    assert_eq!(
        store
            .db()
            .quarantine(Some(CONSUMER))
            .await
            .expect("list")
            .len(),
        1
    );
    assert_consistent(&store).await;
}

#[tokio::test]
async fn a_commit_cut_before_the_server_saw_it_applies_nothing_then_once() {
    let cluster = cluster().await;
    cluster.create_database("cut").await;
    let proxy = Proxy::start(cluster.addr()).await;
    let store = open(&proxy.url("cut"), 1).await;
    let batch = Batch::new(
        vec![like("p", "u1", 1, "a"), like("q", "u2", 1, "b")],
        vec![poison("m1")],
    );
    proxy.arm(Cut::BeforeCommit);
    let error = store
        .commit(&batch, &Attempt::first())
        .await
        .expect_err("the connection breaks before COMMIT");
    assert!(error.is_retryable(), "{error}");
    assert_eq!(proxy.cuts(), 1);
    // Memberships, increments, marker and record: none of them.
    assert_eq!(count(&store, "p").await, 0);
    assert!(store.db().tally().await.expect("tally").is_empty());
    assert!(store.db().quarantine(None).await.expect("list").is_empty());

    let (again, _) = commit(&store, &batch).await;
    assert_eq!(again.outcome, CommitOutcome::Committed);
    assert_eq!(again.effects.applied, 2);
    assert_eq!(count(&store, "p").await, 1);
    assert_eq!(count(&store, "q").await, 1);
    assert_eq!(store.db().quarantine(None).await.expect("list").len(), 1);
}

#[tokio::test]
async fn poison_is_quarantined_in_the_batch_transaction_whatever_it_holds() {
    let cluster = cluster().await;
    let store = open(&cluster.create_database("poison").await, 2).await;
    let hostile = PoisonRecord::new(
        "m\0/..".into(),
        "reason with a NUL\0".into(),
        &[0, 159, 146, 150, 0xff],
        BTreeMap::from([
            ("__name__".to_string(), "x\0y".to_string()),
            ("a.b`c".to_string(), "é".repeat(600)),
        ]),
    );
    let batch = Batch::new(
        vec![like("p", "u1", 1, "a")],
        vec![poison("m1"), hostile.clone()],
    );
    let (report, _) = commit(&store, &batch).await;
    assert_eq!(report.effects.poison, 2);
    let records = store.db().quarantine(Some(CONSUMER)).await.expect("list");
    assert_eq!(records.len(), 2);
    let stored = records
        .iter()
        .find(|r| r.record_id == hotcount::store::quarantine::record_id(&hostile))
        .expect("the hostile record");
    assert_eq!(
        stored.batch_id, batch.id,
        "written by the batch's transaction"
    );
    assert_eq!(stored.record.data, hostile.data, "bytes kept as they are");
    assert_eq!(stored.record.data_sha256, hostile.data_sha256);
    assert_eq!(stored.record.reason, "reason with a NUL\u{FFFD}");
    assert!(stored.record.attributes_truncated, "a NUL was replaced");
    assert_eq!(stored.record.attributes.len(), 2);
    assert_eq!(count(&store, "p").await, 1);

    // A redelivered poison message rewrites its record, never duplicates it.
    commit(&store, &Batch::new(vec![], vec![poison("m1")])).await;
    assert_eq!(store.db().quarantine(None).await.expect("list").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_replicas_on_one_post_both_commit_exactly() {
    let cluster = cluster().await;
    let url = cluster.create_database("replicas").await;
    // Two replicas: two pools, two shard planners, one consumer name.
    let (a, b) = (open(&url, 4).await, open(&url, 4).await);
    let mut rng = StdRng::seed_from_u64(7);
    let mut newest: BTreeMap<String, (i64, String, bool)> = BTreeMap::new();
    let mut contended = 0;
    for round in 0..40i64 {
        let (mut to_a, mut to_b) = (Vec::new(), Vec::new());
        for i in 0..24 {
            // Half the events are of users new this round: both replicas
            // may read one as absent and insert it (23505 for the loser).
            let user = if rng.random_bool(0.5) {
                format!("n{round}-{}", rng.random_range(0..4))
            } else {
                format!("u{}", rng.random_range(0..16))
            };
            let added = rng.random_bool(0.7);
            let seq = round * 10 + rng.random_range(0..10);
            let id = format!("r{round}-{i}");
            let e = event(added, "hot", &user, seq, &id);
            match newest.get(&user) {
                Some((s, old_id, _)) if (*s, old_id.as_str()) >= (seq, id.as_str()) => {}
                _ => {
                    newest.insert(user.clone(), (seq, id.clone(), added));
                }
            }
            // Each message goes to one replica, or (redelivered) to both.
            match rng.random_range(0..5) {
                0 => {
                    to_a.push(e.clone());
                    to_b.push(e);
                }
                1 | 2 => to_a.push(e),
                _ => to_b.push(e),
            }
        }
        let (batch_a, batch_b) = (Batch::new(to_a, vec![]), Batch::new(to_b, vec![]));
        let ((_, failed_a), (_, failed_b)) =
            tokio::join!(commit(&a, &batch_a), commit(&b, &batch_b));
        contended += failed_a + failed_b;
    }
    let expected = newest.values().filter(|(_, _, liked)| *liked).count() as i64;
    assert_eq!(count(&a, "hot").await, expected);
    assert_consistent(&a).await;
    println!("competing replicas: {contended} attempts met contention and were retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_snapshot_during_commits_has_shards_summing_to_liked() {
    let cluster = cluster().await;
    let url = cluster.create_database("snapshots").await;
    let store = open(&url, 4).await;
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(11);
            for round in 0..80i64 {
                let events = (0..30)
                    .map(|i| {
                        let post = format!("p{}", rng.random_range(0..3));
                        let user = format!("u{}", rng.random_range(0..40));
                        event(
                            rng.random_bool(0.6),
                            &post,
                            &user,
                            round,
                            &format!("{round}-{i}"),
                        )
                    })
                    .collect();
                commit(&store, &Batch::new(events, vec![])).await;
            }
        })
    };
    let mut snapshots = 0;
    while !writer.is_finished() {
        assert_consistent(&store).await;
        snapshots += 1;
    }
    writer.await.expect("writer");
    assert_consistent(&store).await;
    assert!(
        snapshots > 1,
        "{snapshots} snapshots taken while committing"
    );
}

#[tokio::test]
async fn random_runs_match_the_memory_store_and_shards_sum_to_liked() {
    let cluster = cluster().await;
    for seed in 0..6u64 {
        let url = cluster.create_database(&format!("seed{seed}")).await;
        let store = open(&url, 2).await;
        let memory = MemoryStore::default();
        let mut rng = StdRng::seed_from_u64(seed);
        let events: Vec<LikeEvent> = (0..300)
            .map(|_| {
                let added = rng.random_bool(0.6);
                let (post, user) = (rng.random_range(0..5), rng.random_range(0..10));
                let seq = rng.random_range(1..8);
                // One id per (post, user, seq, kind): the same message
                // delivered again has the same id.
                let id = format!("p{post}-u{user}-{seq}-{added}");
                event(added, &format!("p{post}"), &format!("u{user}"), seq, &id)
            })
            .collect();
        let mut rest = &events[..];
        let mut sent: Vec<Batch> = Vec::new();
        while !rest.is_empty() {
            let take = rng.random_range(1..=30).min(rest.len());
            let (chunk, tail) = rest.split_at(take);
            rest = tail;
            let poison = if rng.random_bool(0.2) {
                vec![poison(&format!("m{}", sent.len()))]
            } else {
                vec![]
            };
            let batch = Batch::new(chunk.to_vec(), poison);
            let expected = memory
                .commit(&batch, &Attempt::first())
                .await
                .expect("memory");
            let (got, _) = commit(&store, &batch).await;
            assert_eq!(
                got.effects,
                expected.effects,
                "seed {seed}, batch {}",
                sent.len()
            );
            assert_eq!(got.outcome, expected.outcome);
            if rng.random_bool(0.2) {
                // The same batch again (an unknown outcome's retry).
                let (again, _) = commit(&store, &batch).await;
                assert_eq!(again.outcome, CommitOutcome::AlreadyCommitted);
                assert_eq!(again.effects, expected.effects);
            }
            if rng.random_bool(0.2) && !sent.is_empty() {
                // An earlier batch's messages redelivered in a new batch.
                let old = &sent[rng.random_range(0..sent.len())];
                let events = old
                    .events
                    .values()
                    .flatten()
                    .map(|e| e.item.clone())
                    .collect();
                let redelivered = Batch::new(events, vec![]);
                let expected = memory
                    .commit(&redelivered, &Attempt::first())
                    .await
                    .expect("memory");
                let (got, _) = commit(&store, &redelivered).await;
                assert_eq!(got.effects, expected.effects);
            }
            sent.push(batch);
        }
        let tallies = store.db().tally().await.expect("tally");
        for post in 0..5 {
            let post = format!("p{post}");
            let want = memory.count(&post).await.expect("memory count");
            assert_eq!(count(&store, &post).await, want, "seed {seed}, {post}");
            let liked = tallies
                .iter()
                .find(|t| t.post_id == post)
                .map_or(0, |t| t.liked);
            assert_eq!(liked, want, "seed {seed}, {post}: liked memberships");
        }
        assert_consistent(&store).await;
    }
}

#[tokio::test]
async fn a_held_row_lock_past_lock_timeout_is_contention() {
    let cluster = cluster().await;
    let url = cluster.create_database("locked").await;
    let store = open_with(PgDbConfig {
        lock_timeout: Duration::from_millis(200),
        ..db_config(&url, 2)
    })
    .await;
    commit(&store, &Batch::new(vec![like("p", "u", 1, "a")], vec![])).await;
    let blocker = hold_every_membership(&url).await;
    let batch = Batch::new(vec![unlike("p", "u", 2, "b")], vec![]);
    let error = store
        .commit(&batch, &Attempt::first())
        .await
        .expect_err("the row stays locked");
    assert!(error.is_contention(), "{error}");
    assert!(error.message.contains("55P03"), "{error}");
    blocker.batch_execute("COMMIT").await.expect("release");
    let (report, _) = commit(&store, &batch).await;
    assert_eq!(report.effects.applied, 1);
    assert_eq!(count(&store, "p").await, 0);
}

/// Sessions of the store's pools in `state` (`active`, ...) or waiting
/// for a lock (`Lock`), as `monitor` sees them: it must not be inside a
/// transaction (which would keep showing its first view of the sessions).
async fn hotcount_sessions(monitor: &tokio_postgres::Client, what: &str) -> i64 {
    let sql = "SELECT count(*) FROM pg_stat_activity
        WHERE application_name = 'hotcount' AND (state = $1 OR wait_event_type = $1)";
    let row = monitor.query_one(sql, &[&what]).await.expect("activity");
    row.get(0)
}

/// Waits up to 20 s until `hotcount_sessions(what)` is `n`.
async fn until_sessions(monitor: &tokio_postgres::Client, what: &str, n: i64) {
    for _ in 0..1000 {
        if hotcount_sessions(monitor, what).await == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never {n} hotcount sessions {what}");
}

async fn hold_every_membership(url: &str) -> tokio_postgres::Client {
    let blocker = pg::connect(url).await;
    blocker
        .batch_execute("BEGIN; SELECT * FROM memberships FOR UPDATE")
        .await
        .expect("hold the rows");
    blocker
}

#[tokio::test]
async fn an_attempt_past_its_deadline_is_cancelled_and_holds_nothing() {
    let cluster = cluster().await;
    let url = cluster.create_database("deadline").await;
    // Only the cancel (or the closed connection) can end the lock wait.
    let store = open_with(PgDbConfig {
        lock_timeout: Duration::from_secs(60),
        ..db_config(&url, 2)
    })
    .await;
    commit(&store, &Batch::new(vec![like("p", "u", 1, "a")], vec![])).await;
    let blocker = hold_every_membership(&url).await;
    let batch = Batch::new(
        vec![like("p", "u0", 1, "n"), unlike("p", "u", 2, "b")],
        vec![],
    );
    let (set, deadline) = Deadline::channel();
    let attempt = {
        let (store, batch) = (store.clone(), batch.clone());
        tokio::spawn(async move {
            store
                .commit(&batch, &Attempt::first().until(deadline))
                .await
        })
    };
    let monitor = pg::connect(&url).await;
    until_sessions(&monitor, "Lock", 1).await;
    // The shutdown deadline is set while the attempt waits.
    set.send_replace(Some(tokio::time::Instant::now()));
    let error = attempt
        .await
        .expect("attempt task")
        .expect_err("the deadline passed during the lock wait");
    assert_eq!(error.code, hotcount::store::Code::DeadlineExceeded);
    // Its session is gone (cancelled, closed): it holds nothing.
    until_sessions(&monitor, "active", 0).await;
    until_sessions(&monitor, "idle in transaction (aborted)", 0).await;
    blocker.batch_execute("COMMIT").await.expect("release");
    let (report, failed) = commit(&store, &batch).await;
    assert_eq!((report.effects.applied, failed), (2, 0));
    assert_eq!(count(&store, "p").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_a_competing_replica_created_after_the_read_is_never_overwritten() {
    let cluster = cluster().await;
    let url = cluster.create_database("phantom").await;
    let (a, b) = (open(&url, 2).await, open(&url, 2).await);
    commit(&a, &Batch::new(vec![like("p", "x", 1, "x1")], vec![])).await;
    // Both replicas' batches hold x (existing) and n (new). Each locking
    // read waits for x; the first to get it creates n and commits; the
    // other's read was started before n existed, so it plans n as absent:
    // its insert must fail (23505) rather than overwrite n.
    let blocker = hold_every_membership(&url).await;
    let batch_a = Batch::new(
        vec![unlike("p", "x", 2, "a1"), like("p", "n", 1, "a2")],
        vec![],
    );
    let batch_b = Batch::new(
        vec![like("p", "x", 3, "b1"), unlike("p", "n", 2, "b2")],
        vec![],
    );
    let spawn = |store: &PostgresStore, batch: Batch| {
        let store = store.clone();
        tokio::spawn(async move { commit(&store, &batch).await })
    };
    let (first, second) = (spawn(&a, batch_a), spawn(&b, batch_b));
    until_sessions(&pg::connect(&url).await, "Lock", 2).await;
    blocker.batch_execute("COMMIT").await.expect("release");
    let (first, second) = (first.await.expect("a"), second.await.expect("b"));
    assert_eq!(first.1 + second.1, 1, "exactly the later reader retried");
    // x: liked at 3; n: unliked at 2, whichever order they committed in.
    assert_eq!(count(&a, "p").await, 1);
    assert_consistent(&a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_corrects_drift_once_while_consumers_commit() {
    let cluster = cluster().await;
    let url = cluster.create_database("repair").await;
    let store = open(&url, 4).await;
    let likes = (0..10)
        .map(|u| like("p", &format!("u{u}"), 1, &format!("e{u}")))
        .collect();
    commit(&store, &Batch::new(likes, vec![])).await;
    // Drift: a write that is not hotcount's.
    let raw = pg::connect(&url).await;
    raw.batch_execute("UPDATE counter_shards SET likes = likes + 5 WHERE post_id = 'p'")
        .await
        .expect("drift");
    let tally = store.db().tally_post("p").await.expect("tally");
    assert_eq!((tally.liked, tally.shards_sum), (10, 15));

    // Consumers keep committing while two repairs race.
    let consumer = {
        let store = store.clone();
        tokio::spawn(async move {
            for round in 1..=20 {
                let events = (0..5)
                    .map(|u| {
                        let user = format!("v{u}");
                        event(round % 2 == 1, "p", &user, round, &format!("{round}-{u}"))
                    })
                    .collect();
                commit(&store, &Batch::new(events, vec![])).await;
            }
        })
    };
    let (first, second) = tokio::join!(store.db().repair_post("p"), store.db().repair_post("p"));
    let corrections = [first.expect("repair").1, second.expect("repair").1];
    consumer.await.expect("consumer");
    assert_eq!(corrections.iter().sum::<i64>(), -5, "{corrections:?}");
    let tally = store.db().tally_post("p").await.expect("tally");
    assert_eq!(tally.difference(), 0, "{tally:?}");
    assert_eq!(count(&store, "p").await, 10, "the 20 rounds end unliked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flusher_commits_into_postgres_and_acks_each_message_once() {
    let cluster = cluster().await;
    let url = cluster.create_database("flusher").await;
    let store = Arc::new(open(&url, 4).await);
    let aggregator = Arc::new(Aggregator::new(4, 64));
    let stats = Arc::new(Stats::default());
    let flusher = Flusher::new(
        aggregator.clone(),
        store.clone(),
        Arc::new(Acker::new(stats.clone())),
        stats,
        FlushConfig::default(),
    );
    let fates: Fates = Default::default();
    let mut items: Vec<Item> = Vec::new();
    for u in 0..300 {
        items.push(Item::Event(like(
            "viral",
            &format!("u{u}"),
            1,
            &format!("l{u}"),
        )));
    }
    for u in 0..60 {
        // Redelivered likes and later unlikes of 60 users.
        items.push(Item::Event(like(
            "viral",
            &format!("u{u}"),
            1,
            &format!("l{u}"),
        )));
        items.push(Item::Event(unlike(
            "viral",
            &format!("u{u}"),
            2,
            &format!("r{u}"),
        )));
    }
    for m in 0..3 {
        items.push(Item::Poison(Box::new(poison(&format!("m{m}")))));
    }
    let total = items.len();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(flusher.run(stopped));
    for (i, item) in items.into_iter().enumerate() {
        aggregator.add(Pending {
            handle: Handle(i, fates.clone()),
            item,
            bytes: 1,
            published: None,
        });
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while fates.lock().len() < total && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send_replace(true);
    run.await.expect("flusher");
    let fates = fates.lock().clone();
    assert_eq!(fates.len(), total);
    assert!(
        fates.values().all(|f| f == &[Fate::Acked]),
        "each acked once"
    );
    assert_eq!(count(&store, "viral").await, 240);
    let records: BTreeSet<String> = store
        .db()
        .quarantine(Some(CONSUMER))
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.record_id)
        .collect();
    assert_eq!(records.len(), 3);
    assert_consistent(&store).await;
}

/// A store through `proxy` whose calls end after `call_timeout`, with one
/// connection, warmed up (its statements prepared).
async fn through(proxy: &Proxy, database: &str, call_timeout: Duration) -> PostgresStore {
    let mut config = db_config(&proxy.url(database), 1);
    config.call_timeout = call_timeout;
    config.session.connect_timeout = call_timeout;
    config.session.idle_check_after = Duration::from_millis(100);
    config.session.idle_check_timeout = Duration::from_millis(200);
    let store = open_with(config).await;
    commit(&store, &Batch::new(vec![like("warm", "u", 1, "w")], vec![])).await;
    store
}

#[tokio::test]
async fn a_commit_into_a_silent_server_ends_at_the_call_timeout_and_counts_once_after() {
    let cluster = cluster().await;
    cluster.create_database("silent").await;
    let proxy = Proxy::start(cluster.addr()).await;
    let store = through(&proxy, "silent", Duration::from_millis(500)).await;
    let batch = Batch::new(
        vec![like("p", "u1", 1, "a"), like("p", "u2", 1, "b")],
        vec![],
    );
    proxy.black_hole();
    let started = tokio::time::Instant::now();
    let error = tokio::time::timeout(
        Duration::from_secs(10),
        store.commit(&batch, &Attempt::first()),
    )
    .await
    .expect("the commit ends while the server is silent")
    .expect_err("nothing answers");
    assert_eq!(
        error.code,
        hotcount::store::Code::DeadlineExceeded,
        "{error}"
    );
    assert!(error.is_retryable() && !error.proves_content(), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The server answers again: the batch commits once, whatever the
    // abandoned attempt left behind.
    proxy.resume();
    let (report, _) = commit(&store, &batch).await;
    assert_eq!(report.effects.applied + report.effects.duplicates, 2);
    assert_eq!(count(&store, "p").await, 2);
    assert_consistent(&store).await;
}

#[tokio::test]
async fn an_idle_connection_to_a_silent_server_is_checked_not_handed_out() {
    let cluster = cluster().await;
    cluster.create_database("idle").await;
    let proxy = Proxy::start(cluster.addr()).await;
    let store = through(&proxy, "idle", Duration::from_millis(500)).await;
    // The pool's one connection sits idle past the check while the server
    // goes silent without closing it (a failover, a partition).
    proxy.black_hole();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let checkout = tokio::time::timeout(Duration::from_secs(10), store.db().checkout("Test"))
        .await
        .expect("the checkout ends");
    assert!(
        checkout.is_err(),
        "a connection the server no longer answers on was handed out"
    );
    proxy.resume();
    let conn = store
        .db()
        .checkout("Test")
        .await
        .expect("a fresh connection");
    conn.client()
        .expect("client")
        .simple_query("SELECT 1")
        .await
        .expect("it answers");
    conn.release();
}

#[tokio::test]
async fn a_commit_abandoned_after_its_commit_was_sent_is_reported_with_its_outcome_unknown() {
    let cluster = cluster().await;
    cluster.create_database("unknown").await;
    let proxy = Proxy::start(cluster.addr()).await;
    let store = through(&proxy, "unknown", Duration::from_secs(30)).await;
    let batch = Batch::new(vec![like("p", "u1", 1, "a")], vec![]);
    // The network goes silent as the COMMIT leaves; then shutdown comes.
    proxy.stall_at_next_commit();
    let (set, deadline) = Deadline::channel();
    let attempt = {
        let (store, batch) = (store.clone(), batch.clone());
        tokio::spawn(async move {
            store
                .commit(&batch, &Attempt::first().until(deadline))
                .await
        })
    };
    while !proxy.is_black_hole() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    set.send_replace(Some(tokio::time::Instant::now()));
    let error = tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .expect("abandoned at the deadline")
        .expect("attempt task")
        .expect_err("no answer to COMMIT");
    assert!(error.message.contains("outcome is unknown"), "{error}");
    assert!(!error.message.contains("rolled back"), "{error}");
    // It did commit: the server got the COMMIT once the network healed.
    proxy.resume();
    let (report, _) = commit(&store, &batch).await;
    assert_eq!(report.effects.applied + report.effects.duplicates, 1);
    assert_eq!(count(&store, "p").await, 1, "counted once");

    // Abandoned before its COMMIT left: nothing applied, and said so.
    let other = Batch::new(vec![like("q", "u1", 1, "c")], vec![]);
    proxy.black_hole();
    let (set, deadline) = Deadline::channel();
    set.send_replace(Some(
        tokio::time::Instant::now() + Duration::from_millis(300),
    ));
    let error = store
        .commit(&other, &Attempt::first().until(deadline))
        .await
        .expect_err("silent");
    assert!(error.message.contains("nothing applied"), "{error}");
    proxy.resume();
    assert_eq!(count(&store, "q").await, 0);
}

#[tokio::test]
async fn an_encoding_error_on_a_valid_id_proves_nothing_about_the_content() {
    let cluster = cluster().await;
    let admin = pg::connect(&cluster.url("postgres")).await;
    admin
        .batch_execute(
            "CREATE DATABASE latin ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0",
        )
        .await
        .expect("create a LATIN1 database");
    let latin = pg::connect(&cluster.url("latin")).await;
    // A valid post id LATIN1 cannot hold: the server refuses it with 22P05.
    let error = latin
        .query_one("SELECT $1::text", &[&"пост-1"])
        .await
        .expect_err("LATIN1 cannot hold it");
    let sqlstate = error
        .code()
        .map(|c| c.code().to_string())
        .unwrap_or_default();
    assert_eq!(sqlstate, "22P05", "{error}");
    let classed = hotcount::store::postgres::errors::query_error("Commit", &error);
    assert!(
        !classed.proves_content() && classed.is_retryable(),
        "a deployment detail must never quarantine a valid event: {classed}"
    );
}
