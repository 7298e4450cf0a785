//! The PostgreSQL schema against a real server: migrations (idempotent,
//! safe to run concurrently, refusing a database they do not match) and
//! the maintenance and reads the operator tools use.

#[path = "support/postgres.rs"]
mod pg;

use std::time::Duration;

use hotcount::event::{LikeEvent, LikeKind, Version};
use hotcount::model::batch::{Batch, MembershipKey};
use hotcount::store::postgres::{
    migrate, migrations, MigrateError, PgDb, PgDbConfig, PostgresStore, PostgresStoreConfig,
};
use hotcount::store::{Attempt, CounterStore};
use pg::PgCluster;

/// Every migration this build knows, in order.
fn all_versions() -> Vec<i32> {
    migrations::MIGRATIONS.iter().map(|m| m.version).collect()
}

async fn cluster() -> PgCluster {
    tokio::task::spawn_blocking(PgCluster::start)
        .await
        .expect("start the test cluster")
}

fn db(url: &str) -> PgDb {
    PgDb::new(&PgDbConfig::new(url)).expect("valid settings")
}

fn like(post: &str, user: &str, id: &str) -> LikeEvent {
    let version = Version {
        seq: 1,
        occurred_at_micros: 0,
        event_id: id.into(),
    };
    LikeEvent::new(LikeKind::Added, post, user, &version, None).expect("valid event")
}

#[tokio::test]
async fn migrating_twice_applies_each_migration_once() {
    let cluster = cluster().await;
    let db = db(&cluster.create_database("twice").await);
    assert_eq!(db.schema_version().await.expect("version"), None);
    let first = db.migrate().await.expect("first");
    assert_eq!((first.applied, first.present), (all_versions(), vec![]));
    let second = db.migrate().await.expect("second");
    assert_eq!((second.applied, second.present), (vec![], all_versions()));
    assert_eq!(
        db.schema_version().await.expect("version"),
        all_versions().last().copied()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_setups_apply_each_migration_once() {
    let cluster = cluster().await;
    let url = cluster.create_database("concurrent").await;
    let mut runs = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let url = url.clone();
        runs.spawn(async move {
            let client = pg::connect(&url).await;
            migrate(&client).await.expect("migrate")
        });
    }
    let mut applied = Vec::new();
    while let Some(report) = runs.join_next().await {
        applied.extend(report.expect("run").applied);
    }
    applied.sort_unstable();
    assert_eq!(
        applied,
        all_versions(),
        "each migration applied by one run, found by the others"
    );
}

#[tokio::test]
async fn a_database_that_does_not_match_this_build_is_refused() {
    let cluster = cluster().await;
    let url = cluster.create_database("mismatch").await;
    let client = pg::connect(&url).await;
    migrate(&client).await.expect("migrate");

    client
        .batch_execute("UPDATE schema_migrations SET sha256 = 'edited' WHERE version = 1")
        .await
        .expect("tamper");
    let changed = migrate(&client).await.expect_err("an edited migration");
    assert!(
        matches!(changed, MigrateError::Changed { version: 1, .. }),
        "{changed}"
    );
    assert!(!changed.is_retryable());

    let fresh = pg::connect(&cluster.create_database("newer").await).await;
    migrate(&fresh).await.expect("migrate");
    fresh
        .batch_execute(
            "INSERT INTO schema_migrations (version, name, sha256) VALUES (99, 'future', 'x')",
        )
        .await
        .expect("a newer build's migration");
    let newer = migrate(&fresh).await.expect_err("a newer schema");
    assert!(
        matches!(
            newer,
            MigrateError::Newer {
                found: 99,
                known
            } if all_versions().last() == Some(&known)
        ),
        "{newer}"
    );
}

#[tokio::test]
async fn a_store_without_its_tables_fails_transient_never_as_content() {
    let cluster = cluster().await;
    let db = db(&cluster.create_database("empty").await);
    let store = PostgresStore::new(db, config(Duration::from_secs(60)));
    let batch = Batch::new(vec![like("p", "u", "e")], vec![]);
    let error = store
        .commit(&batch, &Attempt::first())
        .await
        .expect_err("no tables: setup was not run");
    assert!(error.is_retryable() && !error.proves_content(), "{error}");
    assert_eq!(error.code, hotcount::store::Code::NotFound);
}

fn config(marker_ttl: Duration) -> PostgresStoreConfig {
    PostgresStoreConfig {
        consumer: "c1".into(),
        counter_shards: 4,
        counter_shard_target_writes_per_sec: 0,
        marker_ttl,
        due_records: false,
        known_memberships: 0,
    }
}

#[tokio::test]
async fn expired_batch_markers_are_deleted_oldest_first_and_live_ones_kept() {
    let cluster = cluster().await;
    let db = db(&cluster.create_database("markers").await);
    db.migrate().await.expect("migrate");
    let expiring = PostgresStore::new(db.clone(), config(Duration::ZERO));
    let kept = PostgresStore::new(db.clone(), config(Duration::from_secs(3600)));
    for i in 0..3 {
        let batch = Batch::new(vec![like("p", &format!("x{i}"), &format!("x{i}"))], vec![]);
        expiring
            .commit(&batch, &Attempt::first())
            .await
            .expect("commit");
    }
    let live = Batch::new(vec![like("p", "k", "k")], vec![]);
    kept.commit(&live, &Attempt::first()).await.expect("commit");
    tokio::time::sleep(Duration::from_millis(20)).await;

    assert_eq!(
        db.delete_expired_markers(2).await.expect("delete"),
        2,
        "bounded"
    );
    assert_eq!(db.delete_expired_markers(100).await.expect("delete"), 1);
    assert_eq!(db.delete_expired_markers(100).await.expect("delete"), 0);
    // The live marker still answers a retry of its batch.
    let again = kept.commit(&live, &Attempt::first()).await.expect("retry");
    assert_eq!(
        again.outcome,
        hotcount::store::CommitOutcome::AlreadyCommitted
    );
    assert_eq!(db.count("p").await.expect("count"), 4);
}

#[tokio::test]
async fn replay_reads_the_stored_memberships_of_any_keys() {
    let cluster = cluster().await;
    let db = db(&cluster.create_database("replay").await);
    db.migrate().await.expect("migrate");
    let store = PostgresStore::new(db.clone(), config(Duration::from_secs(60)));
    let batch = Batch::new(vec![like("p", "u1", "a"), like("q", "u1", "b")], vec![]);
    store
        .commit(&batch, &Attempt::first())
        .await
        .expect("commit");
    let key = |post: &str, user: &str| MembershipKey {
        post_id: post.into(),
        user_id: user.into(),
    };
    let keys = [key("p", "u1"), key("p", "absent"), key("q", "u1")];
    let stored = db.memberships(&keys).await.expect("read");
    assert_eq!(stored.len(), 2);
    assert!(stored[&keys[0]].liked);
    assert_eq!(stored[&keys[2]].version.event_id, "b");
}
