//! The data-format version kept with the data, as an operator meets it
//! through the `hotcount` binary, on both stores: a build refuses to start
//! against a format newer than it knows and names both; `setup
//! --data-format 2` raises it once, refreshing a rollup an older build
//! left stale, and never lowers it; an erasure tombstone is refused until
//! the store is at format 2; a replica exports the format it started on.

mod common;
#[path = "support/corrupt.rs"]
mod corrupt;
#[path = "support/scrape.rs"]
mod scrape;

use std::process::{Output, Stdio};
use std::time::Duration;

use common::{Backend, Ev, Harness};
use hotcount::store::format::{DATA_FORMAT_KNOWN, DATA_FORMAT_TOMBSTONES};

const WAIT: Duration = Duration::from_secs(30);

/// `hotcount args...` against the harness's store (`HOTCOUNT_STORE`).
fn hotcount(h: &Harness, args: &[&str]) -> Output {
    h.command()
        .env("HOTCOUNT_STORE", h.postgres_url().unwrap_or("firestore"))
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

/// `setup` on Pub/Sub resources of its own (the harness's subscription is
/// left as the harness made it), with `extra` flags.
fn setup(h: &Harness, extra: &[&str]) -> Output {
    let mut args = vec!["setup", "--topic", "other", "--subscription", "other-sub"];
    args.extend(extra);
    hotcount(h, &args)
}

/// Writes data format `version` straight into the store, as a newer build
/// would (PostgreSQL: SQL of its own, not hotcount's statements).
async fn store_format(h: &Harness, version: u32) {
    match h.postgres_url() {
        Some(url) => {
            let client = common::pg::connect(url).await;
            let version = i32::try_from(version).expect("a small format");
            client
                .execute(
                    "INSERT INTO data_format (version) VALUES ($1)
                     ON CONFLICT (singleton) DO UPDATE SET version = excluded.version",
                    &[&version],
                )
                .await
                .expect("store the format");
        }
        None => {
            let after = h.store.raise_data_format(version).await.expect("raise");
            assert_eq!(after, version);
        }
    }
}

/// Adds `delta` likes to counter shard 3 of `post` and nothing else, as a
/// build before rollups does: the post's rollup is left stale.
async fn increment_without_rollup(h: &Harness, post: &str, delta: i64) {
    match h.postgres_url() {
        Some(url) => {
            let client = common::pg::connect(url).await;
            client
                .execute(
                    "INSERT INTO counter_shards (post_id, shard, likes) VALUES ($1, 3, $2)
                     ON CONFLICT (post_id, shard) DO UPDATE SET likes = counter_shards.likes + $2",
                    &[&post, &delta],
                )
                .await
                .expect("increment a shard");
        }
        None => corrupt::counter_shard(&h.db, post, 3, delta).await,
    }
}

async fn processed(h: &Harness, events: &[Ev]) {
    let consumer = h.spawn(h.run_args("hotcount", &[]));
    h.publish(events).await;
    assert!(consumer.wait_for_acks(events.len() as u64, WAIT).await);
    consumer.stop().await;
}

async fn rollup_of(h: &Harness, post: &str) -> Option<i64> {
    let rollups = h.store.rollups().await.expect("read the rollups");
    rollups.get(post).map(|(likes, _)| *likes)
}

async fn a_newer_data_format_is_refused_by_run_and_every_writing_command(backend: Backend) {
    let h = Harness::start_on(backend).await;
    processed(&h, &common::likes("p", 2, "p")).await;
    let newer = DATA_FORMAT_KNOWN + 1;
    store_format(&h, newer).await;
    let refusal = format!(
        "the store's data format is {newer}; this build knows up to {DATA_FORMAT_KNOWN}: upgrade the build"
    );

    let mut child = h
        .command()
        .env("HOTCOUNT_STORE", h.postgres_url().unwrap_or("firestore"))
        .args(["run", "--subscription", common::SUBSCRIPTION])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hotcount starts");
    let status = common::wait_with_timeout(&mut child, WAIT);
    let out = child.wait_with_output().expect("output");
    assert!(!status.success(), "run starts against format {newer}");
    assert!(stderr(&out).contains(&refusal), "{}", stderr(&out));

    let commands: [&[&str]; 4] = [
        &["rollups", "refresh"],
        &["reconcile", "--repair"],
        &["users", "erase", "user-0"],
        &["milestones", "retry"],
    ];
    for args in commands {
        let out = hotcount(&h, args);
        assert!(
            !out.status.success(),
            "{args:?} runs against format {newer}"
        );
        assert!(
            stderr(&out).contains(&refusal),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // A setup that writes the store (on PostgreSQL every setup does; on
    // Firestore one that stores a setting): refused before Pub/Sub.
    let mut writing_setups: Vec<&[&str]> = vec![&["--data-format", "2"], &["--milestones", "10"]];
    if backend == Backend::Postgres {
        writing_setups.push(&[]);
    }
    for extra in writing_setups {
        let out = setup(&h, extra);
        assert!(
            !out.status.success(),
            "setup {extra:?} runs against format {newer}"
        );
        assert!(
            stderr(&out).contains(&refusal),
            "{extra:?}: {}",
            stderr(&out)
        );
        assert!(
            !stdout(&out).contains("other-sub"),
            "setup refused before it touched Pub/Sub: {}",
            stdout(&out)
        );
    }

    // Reading is harmless: counts are still counts.
    let out = hotcount(&h, &["count", "p"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "p\t2\n");
    assert_eq!(h.count("p").await, 2, "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_data_format_is_refused_by_run_and_every_writing_command_firestore() {
    a_newer_data_format_is_refused_by_run_and_every_writing_command(Backend::Firestore).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_data_format_is_refused_by_run_and_every_writing_command_postgres() {
    a_newer_data_format_is_refused_by_run_and_every_writing_command(Backend::Postgres).await;
}

async fn raising_the_format_to_2_refreshes_a_stale_rollup_once_and_never_lowers_it(
    backend: Backend,
) {
    let h = Harness::start_on(backend).await;
    processed(&h, &common::likes("p", 3, "p")).await;
    assert_eq!(rollup_of(&h, "p").await, Some(3));

    // A plain setup leaves the format unrecorded (format 1).
    let out = setup(&h, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("\tdata format"), "{}", stdout(&out));
    assert_eq!(h.store.data_format().await.expect("read"), None);

    // An older build's like: counted in a shard, not in the rollup.
    increment_without_rollup(&h, "p", 2).await;
    assert_eq!(h.count("p").await, 5);
    assert_eq!(rollup_of(&h, "p").await, Some(3), "the rollup is stale");

    let out = setup(&h, &["--data-format", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("updated\tdata format\t1 -> 2"), "{text}");
    assert!(
        text.contains("updated\trollups\t1 posts read, 1 rollups written"),
        "{text}"
    );
    assert_eq!(rollup_of(&h, "p").await, Some(5), "the raise refreshed it");
    assert_eq!(h.store.data_format().await.expect("read"), Some(2));

    // The same format again changes nothing and refreshes nothing.
    let out = setup(&h, &["--data-format", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("exists\tdata format 2"),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("\trollups\t"), "{}", stdout(&out));

    // Lower: refused, both named; the format stays.
    let out = setup(&h, &["--data-format", "1"]);
    assert!(!out.status.success(), "a lower format is written");
    assert!(
        stderr(&out).contains(
            "the store's data format is 2; --data-format 1 would lower it, and a data format is never lowered"
        ),
        "{}",
        stderr(&out)
    );
    // Above what this build knows: refused, nothing written.
    let unknown = (DATA_FORMAT_KNOWN + 1).to_string();
    let out = setup(&h, &["--data-format", &unknown]);
    assert!(!out.status.success(), "an unknown format is written");
    assert!(
        stderr(&out).contains(&format!(
            "--data-format {unknown}: this build knows data formats up to {DATA_FORMAT_KNOWN}"
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(h.store.data_format().await.expect("read"), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_the_format_to_2_refreshes_a_stale_rollup_once_and_never_lowers_it_firestore() {
    raising_the_format_to_2_refreshes_a_stale_rollup_once_and_never_lowers_it(Backend::Firestore)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_the_format_to_2_refreshes_a_stale_rollup_once_and_never_lowers_it_postgres() {
    raising_the_format_to_2_refreshes_a_stale_rollup_once_and_never_lowers_it(Backend::Postgres)
        .await;
}

/// `setup --store-only --data-format 2`, a new deployment's step after
/// `deploy/setup.sh`: the store is raised and nothing else is touched (no
/// topic or subscription created, no role granted); Pub/Sub flags that
/// only make sense with Pub/Sub are refused with it.
async fn the_store_alone_is_raised_with_store_only(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let out = setup(&h, &["--store-only", "--data-format", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("updated\tdata format\t1 -> 2"), "{text}");
    assert!(!text.contains("projects/"), "no Pub/Sub resource: {text}");
    assert_eq!(h.store.data_format().await.expect("read"), Some(2));
    // A full setup after it still creates the topic: the first made none.
    let out = setup(&h, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("created\tprojects/hotcount-test/topics/other"),
        "{}",
        stdout(&out)
    );
    let out = setup(&h, &["--store-only", "--exactly-once"]);
    assert!(!out.status.success(), "a Pub/Sub flag with --store-only");
    assert!(stderr(&out).contains("--store-only"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_alone_is_raised_with_store_only_firestore() {
    the_store_alone_is_raised_with_store_only(Backend::Firestore).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_alone_is_raised_with_store_only_postgres() {
    the_store_alone_is_raised_with_store_only(Backend::Postgres).await;
}

async fn an_erasure_tombstone_is_refused_at_format_1_and_written_at_2(backend: Backend) {
    let h = Harness::start_on(backend).await;
    processed(&h, &[Ev::like("a1", "p", "alice", 1)]).await;
    let erase = [
        "users",
        "erase",
        "--user-hash-key",
        "k3y",
        "--tombstone-refresh-ms",
        "100",
        "alice",
    ];

    let out = hotcount(&h, &erase);
    assert!(!out.status.success(), "a tombstone is written at format 1");
    assert!(
        stderr(&out).contains(&format!(
            "erasure tombstones need data format {DATA_FORMAT_TOMBSTONES}; the store's is 1"
        )),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("hotcount setup --data-format 2"),
        "{}",
        stderr(&out)
    );
    assert_eq!(h.count("p").await, 1, "nothing was erased");
    let out = hotcount(&h, &["users", "tombstones"]);
    assert_eq!(stdout(&out), "", "no tombstone was written");

    let out = setup(&h, &["--data-format", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = hotcount(&h, &erase);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(h.count("p").await, 0);
    let out = hotcount(&h, &["users", "tombstones"]);
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_tombstone_is_refused_at_format_1_and_written_at_2_firestore() {
    an_erasure_tombstone_is_refused_at_format_1_and_written_at_2(Backend::Firestore).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_tombstone_is_refused_at_format_1_and_written_at_2_postgres() {
    an_erasure_tombstone_is_refused_at_format_1_and_written_at_2(Backend::Postgres).await;
}

/// `hotcount_data_format` of a replica started on `h`'s store, read while
/// it runs.
async fn exported_format(h: &Harness) -> Option<f64> {
    let consumer = h.spawn(h.run_args("hotcount", &[]));
    let addr = scrape::metrics_addr(&consumer.stats).await;
    let events = common::likes("f", 1, "f");
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(1, WAIT).await);
    let (_, body) = scrape::get(addr, "/metrics").await;
    consumer.stop().await;
    scrape::value(&body, "hotcount_data_format")
}

async fn a_replica_exports_the_data_format_it_started_on(backend: Backend) {
    let h = Harness::start_on(backend).await;
    assert_eq!(exported_format(&h).await, Some(1.0), "no record: format 1");
    store_format(&h, 2).await;
    assert_eq!(exported_format(&h).await, Some(2.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_exports_the_data_format_it_started_on_firestore() {
    a_replica_exports_the_data_format_it_started_on(Backend::Firestore).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_exports_the_data_format_it_started_on_postgres() {
    a_replica_exports_the_data_format_it_started_on(Backend::Postgres).await;
}
