//! The `hotcount` binary on PostgreSQL as an operator runs it (a real
//! throwaway server per test): `setup --store` migrates, `run` refuses a
//! database `setup` has not migrated, `count`, `reconcile` and
//! `quarantine` read and repair it, `users export|erase` export and erase
//! a user; and `run` deletes expired batch markers periodically.

mod common;

use std::process::{Output, Stdio};
use std::time::Duration;

use common::{pg, Backend, Ev, Harness};
use hotcount::store::postgres::{migrations, PgDb, PgDbConfig};

const WAIT: Duration = Duration::from_secs(30);

/// Runs `hotcount args...` with `--store` given in the environment.
fn hotcount(h: &Harness, url: &str, args: &[&str]) -> Output {
    h.command()
        .env("HOTCOUNT_STORE", url)
        .args(args)
        .output()
        .expect("hotcount runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

async fn schema_version(url: &str) -> Option<i32> {
    let db = PgDb::new(&PgDbConfig::new(url)).expect("valid settings");
    db.schema_version().await.expect("read the schema version")
}

async fn processed(h: &Harness, events: &[Ev]) {
    let consumer = h.spawn(h.run_args("hotcount", &[]));
    h.publish(events).await;
    assert!(consumer.wait_for_acks(events.len() as u64, WAIT).await);
    consumer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_applies_the_migrations_once_and_reports_them_present_after() {
    let h = Harness::start().await;
    let (_cluster, url) = common::unmigrated_postgres().await;
    let migration = format!(
        "postgres schema migration {} ({})",
        migrations::MIGRATIONS[0].version,
        migrations::MIGRATIONS[0].name
    );
    let args = ["setup", "--topic", "other", "--subscription", "other-sub"];
    let first = hotcount(&h, &url, &args);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stdout(&first).contains(&format!("created\t{migration}")),
        "{}",
        stdout(&first)
    );
    assert!(
        stdout(&first).contains("created\tprojects/hotcount-test/topics/other"),
        "Pub/Sub is set up as before: {}",
        stdout(&first)
    );
    assert_eq!(
        schema_version(&url).await,
        Some(migrations::latest_version())
    );

    let again = hotcount(&h, &url, &args);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stdout(&again).contains(&format!("exists\t{migration}")),
        "{}",
        stdout(&again)
    );
    assert!(!stdout(&again).contains("created"), "{}", stdout(&again));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_an_unmigrated_database_names_setup_and_migrates_nothing() {
    let h = Harness::start().await;
    let (_cluster, url) = common::unmigrated_postgres().await;
    let mut child = h
        .command()
        .args(["run", "--store", &url])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hotcount starts");
    let status = common::wait_with_timeout(&mut child, WAIT);
    let out = child.wait_with_output().expect("output");
    assert!(!status.success());
    let err = stderr(&out);
    assert!(err.contains("no hotcount schema"), "{err}");
    assert!(err.contains("hotcount setup --store"), "{err}");
    assert_eq!(schema_version(&url).await, None, "run never migrates");

    // The operator commands refuse it the same way.
    let out = hotcount(&h, &url, &["count", "p"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("hotcount setup --store"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_and_reconcile_read_and_repair_postgres() {
    let h = Harness::start_on(Backend::Postgres).await;
    let url = h.postgres_url().expect("postgres").to_string();
    processed(&h, &common::likes("p", 6, "p")).await;

    let out = hotcount(&h, &url, &["count", "p", "nobody"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "p\t6\nnobody\t0\n");
    let out = hotcount(&h, &url, &["reconcile"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("p\t6\t6\t+0\tok"), "{}", stdout(&out));

    // Drift no consumer wrote: two likes too many on another shard.
    let client = common::pg::connect(&url).await;
    client
        .execute(
            "INSERT INTO counter_shards (post_id, shard, likes) VALUES ('p', 7, 2)
             ON CONFLICT (post_id, shard) DO UPDATE SET likes = counter_shards.likes + 2",
            &[],
        )
        .await
        .expect("corrupt a shard");
    let out = hotcount(&h, &url, &["reconcile", "--post", "p"]);
    assert!(!out.status.success(), "a difference fails the command");
    assert!(
        stdout(&out).contains("p\t8\t6\t-2\tdiffers"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("--repair"), "{}", stderr(&out));

    let out = hotcount(&h, &url, &["reconcile", "--repair"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("p\t8\t6\t-2\trepaired"),
        "{}",
        stdout(&out)
    );
    let out = hotcount(&h, &url, &["reconcile"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("p\t6\t6\t+0\tok"), "{}", stdout(&out));
    assert_eq!(h.count("p").await, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_lists_shows_and_redrives_postgres_records() {
    let h = Harness::start_on(Backend::Postgres).await;
    let url = h.postgres_url().expect("postgres").to_string();
    let consumer = h.spawn(h.run_args("hotcount", &[]));
    let ids = h.publish_raw(&[b"{not json".to_vec()]).await;
    assert!(consumer.wait_for_acks(1, WAIT).await);
    consumer.stop().await;

    let out = hotcount(&h, &url, &["quarantine", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = stdout(&out);
    assert!(listed.contains("1 record(s)"), "{listed}");
    let line = listed
        .lines()
        .find(|l| l.starts_with("hotcount:"))
        .expect("a record line");
    let id = line.split('\t').next().expect("the id column").to_string();
    assert!(line.contains("not a JSON object"), "{line}");

    let out = hotcount(&h, &url, &["quarantine", "show", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains(&format!("message id: {}", ids[0])),
        "{shown}"
    );
    assert!(shown.contains("{not json"), "{shown}");

    let out = hotcount(&h, &url, &["quarantine", "redrive", &id, "hotcount:nope"]);
    assert!(!out.status.success(), "an unknown id fails the command");
    assert!(
        stdout(&out).contains(&format!("redriven\t{id}\t")),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("not found\thotcount:nope"));
    let out = hotcount(&h, &url, &["quarantine", "show", &id]);
    assert!(
        !out.status.success(),
        "the record is deleted once re-driven"
    );
    let out = hotcount(&h, &url, &["quarantine", "list"]);
    assert!(stdout(&out).contains("0 record(s)"), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_deletes_expired_batch_markers_periodically_and_counts_them() {
    let h = Harness::start_on(Backend::Postgres).await;
    let url = h.postgres_url().expect("postgres").to_string();
    let consumer = h.spawn(h.run_args(
        "hotcount",
        &[
            "--marker-cleanup-interval-secs",
            "1",
            "--marker-cleanup-batch-rows",
            "2",
            "--max-batch-events",
            "3",
        ],
    ));
    let events = common::likes("p", 30, "p");
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(30, WAIT).await);
    let client = common::pg::connect(&url).await;
    let markers = |sql: &'static str| {
        let client = &client;
        async move {
            let row = client.query_one(sql, &[]).await.expect("query markers");
            row.get::<_, i64>(0)
        }
    };
    let written = markers("SELECT count(*) FROM batch_markers").await;
    assert!(written >= 10, "{written} batches of at most 3 events");
    assert_eq!(consumer.stats.markers_deleted.get(), 0, "none expired yet");

    // All but one expire now.
    client
        .execute(
            "UPDATE batch_markers SET expires_at = now() - interval '1 hour'
             WHERE batch_id <> (SELECT min(batch_id) FROM batch_markers)",
            &[],
        )
        .await
        .expect("expire markers");
    let deadline = tokio::time::Instant::now() + WAIT;
    while markers("SELECT count(*) FROM batch_markers").await > 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "expired markers deleted within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stats = consumer.stop().await;
    assert_eq!(stats.markers_deleted.get(), (written - 1).unsigned_abs());
    assert_eq!(markers("SELECT count(*) FROM batch_markers").await, 1);
    assert_eq!(h.count("p").await, 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_cleanup_stuck_at_shutdown_never_holds_up_the_drain() {
    let h = Harness::start_on(Backend::Postgres).await;
    let url = h.postgres_url().expect("postgres").to_string();
    // The cleanup's DELETE waits for this lock (lock_timeout, 5 s).
    let blocker = common::pg::connect(&url).await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE batch_markers IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock the markers");
    let consumer = h.spawn(h.run_args(
        "hotcount",
        &[
            "--marker-cleanup-interval-secs",
            "1",
            "--shutdown-deadline-secs",
            "1",
            "--store-call-timeout-ms",
            "60000",
            "--stuck-commit-threshold-secs",
            "60",
        ],
    ));
    let monitor = common::pg::connect(&h.postgres.as_ref().expect("pg").0.url("postgres")).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let row = monitor
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hotcount' AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .expect("activity");
        if row.get::<_, i64>(0) > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cleanup never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopping = std::time::Instant::now();
    consumer.stop().await;
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the drain waited {took:?} for the cleanup"
    );
    blocker.batch_execute("ROLLBACK").await.expect("unlock");
}

/// `hotcount args...` with no emulator: `setup` and `run` open the store
/// before they touch Pub/Sub, so a refused store ends them first.
fn hotcount_alone(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hotcount"))
        .env_clear()
        .env("HOTCOUNT_METRICS_ADDR", "off")
        .env("RUST_LOG", "warn")
        .args(args)
        .output()
        .expect("hotcount runs")
}

/// Whether `url`'s database has hotcount's migrations table.
async fn has_migrations(url: &str) -> bool {
    let client = pg::connect(url).await;
    let row = client
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .await
        .expect("read the catalog");
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_and_run_refuse_a_database_not_in_utf8_and_name_the_fix() {
    let cluster = tokio::task::spawn_blocking(pg::PgCluster::start)
        .await
        .expect("start the test cluster");
    let admin = pg::connect(&cluster.url("postgres")).await;
    for (database, encoding) in [("latin", "LATIN1"), ("ascii", "SQL_ASCII")] {
        admin
            .batch_execute(&format!(
                "CREATE DATABASE {database} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
            ))
            .await
            .expect("create the database");
        let url = cluster.url(database);
        for args in [vec!["setup", "--store", &url], vec!["run", "--store", &url]] {
            let out = hotcount_alone(&args);
            assert!(!out.status.success(), "{args:?} accepted {encoding}");
            let err = stderr(&out);
            assert!(
                err.contains(&format!("server_encoding {encoding}")),
                "{err}"
            );
            assert!(err.contains("ENCODING 'UTF8'"), "names the fix: {err}");
        }
        assert!(
            !has_migrations(&url).await,
            "nothing migrated on {encoding}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_and_run_refuse_a_server_older_than_the_oldest_supported_and_name_the_fix() {
    let cluster = tokio::task::spawn_blocking(pg::PgCluster::start)
        .await
        .expect("start the test cluster");
    cluster.create_database("old").await;
    // The proxy tells the client what a PostgreSQL 13 says at start.
    let proxy = pg::Proxy::start(cluster.addr()).await;
    proxy.report_server_version(Some("13.16 (Debian 13.16-1)"));
    let url = proxy.url("old");
    for args in [vec!["setup", "--store", &url], vec!["run", "--store", &url]] {
        let out = hotcount_alone(&args);
        assert!(!out.status.success(), "{args:?} accepted PostgreSQL 13");
        let err = stderr(&out);
        assert!(err.contains("PostgreSQL 13.16"), "{err}");
        assert!(
            err.contains("PostgreSQL 14 or newer"),
            "names the fix: {err}"
        );
    }
    assert!(
        !has_migrations(&cluster.url("old")).await,
        "nothing migrated"
    );
    // The same server, reported as it is, is served.
    proxy.report_server_version(None);
    let db = PgDb::new(&PgDbConfig::new(url.clone())).expect("valid settings");
    db.migrate().await.expect("PostgreSQL 15 is served");
    assert!(has_migrations(&cluster.url("old")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_export_prints_one_json_line_per_post_the_user_likes_now_postgres() {
    let h = Harness::start_on(Backend::Postgres).await;
    let url = h.postgres_url().expect("postgres").to_string();
    let events = [
        Ev::like("a1", "p1", "alice", 1),
        Ev::like("a2", "p2", "alice", 1),
        Ev::like("a3", "p3", "alice", 1),
        Ev::unlike("a4", "p2", "alice", 2),
        Ev::like("b1", "p1", "bob", 1),
    ];
    processed(&h, &events).await;
    let out = hotcount(&h, &url, &["users", "export", "alice"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let posts: Vec<&str> = lines.iter().filter_map(|v| v["post"].as_str()).collect();
    assert_eq!(posts, ["p1", "p3"], "{}", stdout(&out));
    assert!(lines
        .iter()
        .all(|v| v["since"].is_string() && v["recordedAt"].is_string()));
    let out = hotcount(&h, &url, &["users", "export", "nobody"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_erase_removes_each_like_exactly_once_and_the_users_later_events_change_no_count_postgres(
) {
    let h = Harness::start_on(Backend::Postgres).await;
    let url = h.postgres_url().expect("postgres").to_string();
    let run = |args: &[&str]| hotcount(&h, &url, args);
    let err = stderr;
    let events = [
        Ev::like("a1", "p1", "alice", 1),
        Ev::like("a2", "p2", "alice", 1),
        Ev::like("a3", "p3", "alice", 1),
        Ev::unlike("a4", "p2", "alice", 2),
        Ev::like("b1", "p1", "bob", 1),
        Ev::like("c1", "p3", "carol", 1),
    ];
    let consumer = h.spawn(h.run_args("hotcount", &[]));
    h.publish(&events).await;
    // Two poison messages: one carries alice's id, one a longer id.
    h.publish_raw(&[
        br#"{"version":1,"type":"like.added","userId":"alice"}"#.to_vec(),
        br#"{"version":1,"type":"like.added","userId":"alicex"}"#.to_vec(),
    ])
    .await;
    assert!(consumer.wait_for_acks(events.len() as u64 + 2, WAIT).await);
    consumer.stop().await;
    let posts: Vec<String> = ["p1", "p2", "p3"].map(String::from).to_vec();
    let before = h.counts(&posts).await;
    assert_eq!(before.values().copied().collect::<Vec<_>>(), [2, 0, 2]);

    let out = run(&["users", "erase", "--dry-run", "alice"]);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(
        stdout(&out),
        "would erase\talice\tlikes removed 2\tunliked memberships 1\talready erased 0\tmemberships deleted 0\tquarantine records 1\n"
    );
    assert_eq!(h.counts(&posts).await, before, "a dry run writes nothing");

    let out = run(&["users", "erase", "--chunk", "1", "alice"]);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(
        stdout(&out),
        "erased\talice\tlikes removed 2\tunliked memberships 1\talready erased 0\tmemberships deleted 0\tquarantine records 1\n"
    );
    assert!(
        err(&out).contains("alice: 3/3 memberships erased"),
        "{}",
        err(&out)
    );
    let after = h.counts(&posts).await;
    assert_eq!(after.values().copied().collect::<Vec<_>>(), [1, 0, 1]);
    let out = run(&["users", "export", "alice"]);
    assert_eq!(stdout(&out), "", "alice likes nothing now");
    let out = run(&["quarantine", "list"]);
    assert!(stdout(&out).contains("1 record(s)"), "{}", stdout(&out));

    // Again: nothing left to do, nothing decremented twice.
    let out = run(&["users", "erase", "alice"]);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(
        stdout(&out),
        "erased\talice\tlikes removed 0\tunliked memberships 0\talready erased 3\tmemberships deleted 0\tquarantine records 0\n"
    );
    assert_eq!(h.counts(&posts).await, after);

    // Her old events redelivered, and newer ones on the erased posts: stale.
    let late = [
        Ev::like("a1", "p1", "alice", 1),
        Ev::like("a5", "p2", "alice", 7),
        Ev::unlike("a6", "p3", "alice", 8),
    ];
    let consumer = h.spawn(h.run_args("hotcount", &[]));
    h.publish(&late).await;
    assert!(consumer.wait_for_acks(late.len() as u64, WAIT).await);
    consumer.stop().await;
    assert_eq!(h.counts(&posts).await, after);
    let out = run(&["reconcile"]);
    assert!(out.status.success(), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_erase_killed_midway_then_run_again_is_exact_and_never_decrements_twice_postgres() {
    let h = Harness::start_on(Backend::Postgres).await;
    let url = h.postgres_url().expect("postgres").to_string();
    let run = |args: &[&str]| hotcount(&h, &url, args);
    let err = stderr;
    let mut command = h.command();
    command.env("HOTCOUNT_STORE", &url);
    let mut events = Vec::new();
    for i in 0..40 {
        let post = format!("q{i:02}");
        events.push(Ev::like(&format!("a{i}"), &post, "alice", 1));
        events.push(Ev::like(&format!("b{i}"), &post, "bob", 1));
    }
    let consumer = h.spawn(h.run_args("hotcount", &[]));
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(events.len() as u64, WAIT).await);
    consumer.stop().await;
    let posts: Vec<String> = (0..40).map(|i| format!("q{i:02}")).collect();

    // Killed (SIGKILL) once its second transaction has committed.
    let mut child = command
        .args(["users", "erase", "--chunk", "4", "alice"])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("hotcount starts");
    let stderr = child.stderr.take().expect("piped");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("stderr");
        seen.push(line.clone());
        if line.contains("alice: 8/40") {
            break;
        }
    }
    child.kill().expect("killed");
    let _ = child.wait();
    let mid = h.counts(&posts).await;
    let erased = mid.values().filter(|&&n| n == 1).count();
    assert!(
        (2..40).contains(&erased),
        "killed mid-erasure: {erased} posts erased; stderr {seen:?}"
    );
    assert!(mid.values().all(|&n| n == 1 || n == 2), "{mid:?}");

    let out = run(&["users", "erase", "alice"]);
    assert!(out.status.success(), "{}", err(&out));
    assert!(
        stdout(&out).contains(&format!(
            "likes removed {}\tunliked memberships 0\talready erased {erased}\t",
            40 - erased
        )),
        "{}",
        stdout(&out)
    );
    let at_rest = h.counts(&posts).await;
    assert!(
        at_rest.values().all(|&n| n == 1),
        "bob's likes only: {at_rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_erase_beside_a_running_consumer_delivering_the_users_events_is_exact_at_rest_postgres(
) {
    let h = Harness::start_on(Backend::Postgres).await;
    let url = h.postgres_url().expect("postgres").to_string();
    let run = |args: &[&str]| hotcount(&h, &url, args);
    let mut command = h.command();
    command.env("HOTCOUNT_STORE", &url);
    let posts: Vec<String> = (0..20).map(|i| format!("r{i:02}")).collect();
    let mut before = Vec::new();
    for (i, post) in posts.iter().enumerate() {
        before.push(Ev::like(&format!("a{i}"), post, "alice", 1));
        before.push(Ev::like(&format!("b{i}"), post, "bob", 1));
    }
    let consumer = h.spawn(h.run_args("hotcount", &["--max-batch-events", "4"]));
    h.publish(&before).await;
    assert!(consumer.wait_for_acks(before.len() as u64, WAIT).await);

    // Alice's later events and carol's likes still being delivered while
    // the erasure runs beside the consumer.
    let mut during = Vec::new();
    for (i, post) in posts.iter().enumerate() {
        for seq in 2..6 {
            let ev = if seq % 2 == 0 { Ev::unlike } else { Ev::like };
            during.push(ev(&format!("a{i}-{seq}"), post, "alice", seq));
        }
        during.push(Ev::like(&format!("c{i}"), post, "carol", 1));
    }
    h.publish(&during).await;
    let erase = tokio::task::spawn_blocking(move || {
        let out = command
            .args(["users", "erase", "--chunk", "3", "alice"])
            .output()
            .expect("hotcount runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    });
    let (ok, stderr_text) = erase.await.expect("joined");
    assert!(ok, "{stderr_text}");
    let total = (before.len() + during.len()) as u64;
    assert!(consumer.wait_for_acks(total, WAIT).await);
    consumer.stop().await;

    let at_rest = h.counts(&posts).await;
    assert!(
        at_rest.values().all(|&n| n == 2),
        "bob's and carol's likes only: {at_rest:?}"
    );
    let out = run(&["users", "export", "alice"]);
    assert_eq!(stdout(&out), "");
    let out = run(&["reconcile"]);
    assert!(out.status.success(), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_users_every_event_is_dropped_until_restored_and_their_memberships_are_gone_postgres(
) {
    let h = Harness::start_on(Backend::Postgres).await;
    h.allow_tombstones().await;
    let url = h.postgres_url().expect("postgres").to_string();
    let run = |args: &[&str]| hotcount(&h, &url, args);
    let err = stderr;
    let key = ["--user-hash-key", "k3y", "--tombstone-refresh-ms", "100"];
    let consumer = h.spawn(h.run_args("hotcount", &key));
    let events = [
        Ev::like("a1", "p1", "alice", 1),
        Ev::like("a2", "p2", "alice", 1),
        Ev::like("b1", "p1", "bob", 1),
    ];
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(3, WAIT).await);

    let mut erase = vec!["users", "erase"];
    erase.extend(key);
    erase.push("alice");
    let out = run(&erase);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(
        stdout(&out),
        "erased\talice\tlikes removed 2\tunliked memberships 0\talready erased 0\tmemberships deleted 2\tquarantine records 0\n"
    );
    let posts: Vec<String> = ["p1", "p2", "p9"].map(String::from).to_vec();
    assert_eq!(
        h.counts(&posts).await.into_values().collect::<Vec<_>>(),
        [1, 0, 0]
    );
    // No membership of hers is left: a dry run finds nothing at all.
    let mut dry = vec!["users", "erase", "--dry-run"];
    dry.extend(key);
    dry.push("alice");
    let out = run(&dry);
    assert_eq!(
        stdout(&out),
        "would erase\talice\tlikes removed 0\tunliked memberships 0\talready erased 0\tmemberships deleted 0\tquarantine records 0\n"
    );

    // Her old like redelivered, and a new like of hers on a post she never
    // liked: both dropped; bob's like on that post counts.
    let late = [
        Ev::like("a1", "p1", "alice", 1),
        Ev::like("a9", "p9", "alice", 1),
        Ev::like("b9", "p9", "bob", 1),
    ];
    h.publish(&late).await;
    assert!(consumer.wait_for_acks(6, WAIT).await);
    assert_eq!(
        h.counts(&posts).await.into_values().collect::<Vec<_>>(),
        [1, 0, 1]
    );
    assert_eq!(consumer.stats.erased_dropped.get(), 2);

    // Lifted: her events count again.
    let mut restore = vec!["users", "restore"];
    restore.extend(key);
    restore.push("alice");
    let out = run(&restore);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(stdout(&out), "restored\talice\n");
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.publish(&[Ev::like("a10", "p9", "alice", 2)]).await;
    assert!(consumer.wait_for_acks(7, WAIT).await);
    consumer.stop().await;
    assert_eq!(h.count("p9").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_erase_with_a_tombstone_beside_a_running_consumer_delivering_the_users_events_is_exact_at_rest_postgres(
) {
    let h = Harness::start_on(Backend::Postgres).await;
    h.allow_tombstones().await;
    let url = h.postgres_url().expect("postgres").to_string();
    let run = |args: &[&str]| hotcount(&h, &url, args);
    let mut command = h.command();
    command.env("HOTCOUNT_STORE", &url);
    let posts: Vec<String> = (0..20).map(|i| format!("r{i:02}")).collect();
    let mut before = Vec::new();
    for (i, post) in posts.iter().enumerate() {
        before.push(Ev::like(&format!("a{i}"), post, "alice", 1));
        before.push(Ev::like(&format!("b{i}"), post, "bob", 1));
    }
    let consumer = h.spawn(h.run_args(
        "hotcount",
        &[
            "--max-batch-events",
            "4",
            "--user-hash-key",
            "k3y",
            "--tombstone-refresh-ms",
            "100",
        ],
    ));
    h.publish(&before).await;
    assert!(consumer.wait_for_acks(before.len() as u64, WAIT).await);

    // Alice's later events and carol's likes still being delivered while
    // the erasure runs beside the consumer.
    let mut during = Vec::new();
    for (i, post) in posts.iter().enumerate() {
        for seq in 2..6 {
            let ev = if seq % 2 == 0 { Ev::unlike } else { Ev::like };
            during.push(ev(&format!("a{i}-{seq}"), post, "alice", seq));
        }
        during.push(Ev::like(&format!("c{i}"), post, "carol", 1));
    }
    h.publish(&during).await;
    let erase = tokio::task::spawn_blocking(move || {
        let out = command
            .args([
                "users",
                "erase",
                "--chunk",
                "3",
                "--user-hash-key",
                "k3y",
                "--tombstone-refresh-ms",
                "100",
                "alice",
            ])
            .output()
            .expect("hotcount runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    });
    let (ok, stderr_text) = erase.await.expect("joined");
    assert!(ok, "{stderr_text}");
    let total = (before.len() + during.len()) as u64;
    assert!(consumer.wait_for_acks(total, WAIT).await);
    consumer.stop().await;

    let at_rest = h.counts(&posts).await;
    assert!(
        at_rest.values().all(|&n| n == 2),
        "bob's and carol's likes only: {at_rest:?}"
    );
    let out = run(&["users", "export", "alice"]);
    assert_eq!(stdout(&out), "");
    let out = run(&["reconcile"]);
    assert!(out.status.success(), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_backup_from_before_an_erasure_is_restored_reapply_erases_the_user_again_from_the_kept_tombstones_postgres(
) {
    let h = Harness::start_on(Backend::Postgres).await;
    h.allow_tombstones().await;
    let url = h.postgres_url().expect("postgres").to_string();
    let run = |args: &[&str]| hotcount(&h, &url, args);
    let err = stderr;
    let key = ["--user-hash-key", "k3y", "--tombstone-refresh-ms", "100"];
    let consumer = h.spawn(h.run_args("hotcount", &key));
    let events = [
        Ev::like("a1", "p1", "alice", 1),
        Ev::like("a2", "p2", "alice", 1),
        Ev::like("b1", "p1", "bob", 1),
    ];
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(3, WAIT).await);
    consumer.stop().await;
    let with_key = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(key);
        run(&all)
    };
    let out = with_key(&["users", "erase", "alice"]);
    assert!(out.status.success(), "{}", err(&out));
    let out = run(&["users", "tombstones"]);
    assert!(out.status.success(), "{}", err(&out));
    let listed = stdout(&out);
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(
        !listed.contains("alice"),
        "a tombstone holds no id: {listed}"
    );
    let file = std::env::temp_dir().join(format!("tombstones-{}", std::process::id()));
    std::fs::write(&file, &listed).expect("written");

    // A backup from before the erasure is restored: no tombstone, and her
    // likes counted again.
    let out = with_key(&["users", "restore", "alice"]);
    assert_eq!(stdout(&out), "restored\talice\n", "{}", err(&out));
    let consumer = h.spawn(h.run_args("hotcount", &[]));
    let restored = [
        Ev::like("r1", "p1", "alice", 1),
        Ev::like("r2", "p2", "alice", 1),
    ];
    h.publish(&restored).await;
    assert!(consumer.wait_for_acks(2, WAIT).await);
    consumer.stop().await;
    let posts: Vec<String> = ["p1", "p2"].map(String::from).to_vec();
    assert_eq!(
        h.counts(&posts).await.into_values().collect::<Vec<_>>(),
        [2, 1]
    );

    let path = file.to_string_lossy().into_owned();
    let out = with_key(&["users", "reapply", "--tombstones", &path]);
    assert!(out.status.success(), "{}", err(&out));
    let hash = listed.trim();
    assert_eq!(
        stdout(&out),
        format!("erased\t{hash}\tlikes removed 2\tunliked memberships 0\talready erased 0\tmemberships deleted 2\tquarantine records 0\n1 tombstone(s); 1 user(s) found and erased\n")
    );
    assert_eq!(
        h.counts(&posts).await.into_values().collect::<Vec<_>>(),
        [1, 0]
    );
    assert_eq!(stdout(&run(&["users", "tombstones"])), listed);
    let _ = std::fs::remove_file(&file);
}
