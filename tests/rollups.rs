//! The rollups end to end (`counts/{post}` on Firestore in the emulator,
//! `post_counts` on a real PostgreSQL server): every rollup equals its
//! post's count and the truth at rest, through competing replicas, SIGKILLs
//! with restarts (the start-up sweep), lost answers and store faults; a
//! viral post's rollup is written about once per interval fleet-wide; the
//! batch commit gains no round trip.

mod common;
#[path = "support/corrupt.rs"]
mod corrupt;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};

use std::time::Duration;

use common::replica::{self, wrong_after, wrong_rollups, Replica};
use common::{expected, Backend, Ev, Harness};
use gcloud_sdk::tonic::Code;
use hotcount::telemetry::names;
use hotcount_emulators::{FaultKind, FaultSpec};
use hotcount_scrape::Exposition;

const WAIT: Duration = Duration::from_secs(60);

crate::on_each_store!(
    every_rollup_equals_its_count_and_the_truth_at_rest,
    three_replicas_killed_and_restarted_leave_every_rollup_exact,
    replicas_killed_and_never_restarted_leave_every_rollup_exact,
    count_live_prints_each_change_of_a_rollup,
);

/// Likes and unlikes over `posts` posts by `users` users (fewer on later
/// posts: post 0 the busiest); users and event ids tagged `tag`, so each
/// call's events change the counts.
fn workload(posts: usize, users: usize, tag: &str) -> Vec<Ev> {
    replica::workload(posts, users, 5, tag)
}

/// Waits (bounded) until every post of `want` has a rollup equal to its
/// count there; returns the rollups' values (posts with a rollup).
async fn wait_for_rollups(h: &Harness, want: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let rollups: BTreeMap<String, i64> = h
            .store
            .rollups()
            .await
            .expect("read the rollups")
            .into_iter()
            .map(|(post, (likes, _))| (post, likes))
            .collect();
        let shown: BTreeMap<String, i64> = want
            .keys()
            .filter_map(|p| Some((p.clone(), *rollups.get(p)?)))
            .collect();
        if &shown == want || tokio::time::Instant::now() > deadline {
            return rollups;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The counts (sums of shards) of `want`'s posts.
async fn counts(h: &Harness, want: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    h.counts(want.keys()).await
}

async fn every_rollup_equals_its_count_and_the_truth_at_rest(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let args = ["--rollup-interval-ms", "200"];
    let a = h.spawn(h.run_args("c1", &args));
    let b = h.spawn(h.run_args("c1", &args));
    let events = workload(8, 60, "e");
    let want = expected(&events);
    h.publish(&events).await;
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    let shown = wait_for_rollups(&h, &want).await;
    let stats = [a.stop().await, b.stop().await];
    let rollups = h.store.rollups().await.expect("rollups");
    for (post, count) in &want {
        assert_eq!(
            rollups.get(post).map(|r| r.0),
            Some(*count),
            "{post}: {shown:?}"
        );
    }
    assert_eq!(
        rollups.len(),
        want.len(),
        "a rollup per post changed, no other"
    );
    let refreshes: u64 = stats.iter().map(|s| s.rollup_refreshes.get()).sum();
    assert!(refreshes >= want.len() as u64, "{refreshes}");
    assert!(stats.iter().all(|s| s.rollup_failures.get() == 0));
    assert!(stats.iter().all(|s| s.rollup_pending.get() == 0));
    let lag: f64 = stats
        .iter()
        .map(|s| {
            let exposition = Exposition::parse(&s.render_prometheus());
            let name = format!("{}_count", names::ROLLUP_LAG.name);
            exposition.value(&name).unwrap_or(0.0)
        })
        .sum();
    assert!(lag >= want.len() as f64, "each post's lag recorded: {lag}");
}

/// A replica of this build with `--rollup-interval-ms interval_ms`.
fn start(h: &Harness, name: &str, interval_ms: &str) -> Replica {
    start_with(h, name, &["--rollup-interval-ms", interval_ms])
}

/// A replica of this build with `extra` flags.
fn start_with(h: &Harness, name: &str, extra: &[&str]) -> Replica {
    let mut command = replica::run_command(h, Path::new(env!("CARGO_BIN_EXE_hotcount")));
    command.args(extra);
    Replica::spawn(command, name)
}

async fn three_replicas_killed_and_restarted_leave_every_rollup_exact(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let mut replicas: Vec<Replica> = (0..3).map(|i| start(&h, &format!("r{i}"), "300")).collect();
    let mut events = Vec::new();
    for round in 0..6 {
        let wave = workload(6, 40, &format!("w{round}"));
        h.publish(&wave).await;
        events.extend(wave);
        tokio::time::sleep(Duration::from_millis(300)).await;
        // SIGKILL one replica each round (its marks die with it), restart it.
        let victim = round % 3;
        let restarted = start(&h, &format!("r{victim}-{round}"), "300");
        std::mem::replace(&mut replicas[victim], restarted).kill();
    }
    let mut want = expected(&events);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    // Every replica SIGKILLed at once: nothing drains, their marks are lost.
    for replica in replicas {
        replica.kill();
    }
    // A last wave counted with rollups off: changes no process marked, as
    // if their replicas had died before refreshing.
    let silent = start(&h, "silent", "0");
    let last = workload(3, 30, "last");
    h.publish(&last).await;
    events.extend(last);
    want = expected(&events);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    silent.stop().await;
    let stale: Vec<&String> = {
        let rollups = h.store.rollups().await.expect("rollups");
        want.iter()
            .filter(|(post, count)| rollups.get(*post).map(|r| r.0) != Some(**count))
            .map(|(post, _)| post)
            .collect()
    };
    assert!(!stale.is_empty(), "the last wave left rollups behind");
    // A fresh replica's sweep finds what the others left.
    let mut fresh = start(&h, "fresh", "300");
    fresh.wait_for_log("rollup sweep").await;
    let shown = wait_for_rollups(&h, &want).await;
    fresh.stop().await;
    let rollups = h.store.rollups().await.expect("rollups");
    assert_eq!(counts(&h, &want).await, want, "counts exact");
    for (post, count) in &want {
        assert_eq!(
            rollups.get(post).map(|r| r.0),
            Some(*count),
            "{post} (stale before the sweep: {stale:?}): {shown:?}"
        );
    }
}

/// Fresh posts liked once each (they never change again), tagged `tag`.
fn fresh_posts(posts: usize, tag: &str) -> Vec<Ev> {
    (0..posts)
        .map(|p| Ev::like(&format!("{tag}-{p}"), &format!("{tag}-post-{p}"), "u", 1))
        .collect()
}

/// A scale-down: replicas SIGKILLed mid-burst are never restarted, and no
/// start-up sweep can help (it is off, or its lookback has passed); only
/// the due records each commit wrote bring every rollup to its count,
/// within the rollup interval plus 10 s of the last change.
async fn replicas_killed_and_never_restarted_leave_every_rollup_exact(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let no_sweep = ["--rollup-sweep-lookback-secs", "0"];
    // Within the interval (1 s) plus 10 s of the last change, and a margin
    // for a loaded machine.
    let bound = Duration::from_secs(11 + 4);
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| start_with(&h, &format!("k{i}"), &no_sweep))
        .collect();
    let mut events = fresh_posts(1500, "a");
    events.extend(workload(5, 60, "a"));
    h.publish(&events).await;
    // Mid-burst: two of three SIGKILLed once some of it is acked.
    let deadline = tokio::time::Instant::now() + WAIT;
    while h.subscription_stats().acks < 300 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "some of the burst acked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    replicas.pop().expect("a replica").kill();
    replicas.pop().expect("a replica").kill();
    let want = expected(&events);
    // The killed replicas' leases run out before their messages come back.
    assert_eq!(
        h.wait_for_counts(&want, 3 * WAIT).await,
        want,
        "counts exact"
    );
    let wrong = wrong_after(&h, &want, bound).await;
    assert!(
        wrong.is_empty(),
        "{} of {} rollups wrong {bound:?} after the counts were exact: {:?}",
        wrong.len(),
        want.len(),
        &wrong[..wrong.len().min(10)]
    );

    // The survivor SIGKILLed too, after a replica whose marks wait a minute
    // counted a second burst; a fresh replica starts only once its sweep's
    // lookback (1 s) has passed.
    replicas.pop().expect("the survivor").kill();
    let slow = start_with(
        &h,
        "slow",
        &[
            "--rollup-interval-ms",
            "60000",
            "--rollup-sweep-lookback-secs",
            "0",
        ],
    );
    let mut second = fresh_posts(500, "b");
    second.extend(workload(3, 40, "b"));
    h.publish(&second).await;
    events.extend(second);
    let want = expected(&events);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want, "counts exact");
    slow.kill();
    let left = wrong_rollups(&h, &want).await;
    assert!(!left.is_empty(), "the slow replica left rollups to refresh");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let fresh = start_with(&h, "fresh", &["--rollup-sweep-lookback-secs", "1"]);
    let wrong = wrong_after(&h, &want, bound).await;
    fresh.stop().await;
    assert!(
        wrong.is_empty(),
        "{} of {} rollups wrong (left by the killed: {}): {:?}",
        wrong.len(),
        want.len(),
        left.len(),
        &wrong[..wrong.len().min(10)]
    );
}

/// A post a build before rollups counted, on counter shards no rollup
/// registers (here 0 and 5), gets a rollup that sums them all once this
/// build changes it: its first refresh reads every shard a post may have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posts_first_rollup_sums_every_counter_shard_an_older_build_wrote() {
    let h = Harness::start().await;
    corrupt::counter_shard(&h.db, "old", 0, 3).await;
    corrupt::counter_shard(&h.db, "old", 5, 7).await;
    // No sweep: an older build's increments leave no `updatedAt` to find.
    let args = [
        "--rollup-interval-ms",
        "200",
        "--rollup-sweep-lookback-secs",
        "0",
    ];
    let consumer = h.spawn(h.run_args("c1", &args));
    h.publish(&[Ev::like("o-1", "old", "u-1", 1)]).await;
    let want = BTreeMap::from([("old".to_string(), 11)]);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    let wrong = wrong_after(&h, &want, Duration::from_secs(10)).await;
    let stats = consumer.stop().await;
    assert!(wrong.is_empty(), "{:?}", h.store.rollups().await);
    assert_eq!(stats.rollup_failures.get(), 0);
    // It registers the shards that exist, not every shard it read.
    let stored = h.db.rollup("old").await.expect("read").expect("a rollup");
    assert_eq!(stored.shards, Some(6));
}

/// After a mixed fleet: a replica of a build before rollups wrote a counter
/// shard the post's rollup does not register, and no due record marks it.
/// `hotcount rollups refresh` brings the rollup to every shard the post has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollups_refresh_sums_counter_shards_an_older_replica_wrote_beside_this_build() {
    let h = Harness::start().await;
    let args = [
        "--rollup-interval-ms",
        "200",
        "--rollup-sweep-lookback-secs",
        "0",
    ];
    let consumer = h.spawn(h.run_args("c1", &args));
    h.publish(&[Ev::like("m-1", "mixed", "u-1", 1)]).await;
    let one = BTreeMap::from([("mixed".to_string(), 1)]);
    assert!(wrong_after(&h, &one, WAIT).await.is_empty());
    consumer.stop().await;
    // The older replica's increment, on a shard no rollup registers.
    corrupt::counter_shard(&h.db, "mixed", 7, 5).await;
    let six = BTreeMap::from([("mixed".to_string(), 6)]);
    assert_eq!(wrong_rollups(&h, &six).await, ["mixed"], "stale before");
    let output = h
        .command()
        .args(["rollups", "refresh"])
        .output()
        .expect("hotcount runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("1 rollups written"), "{stdout}");
    assert!(wrong_rollups(&h, &six).await.is_empty());
    let stored = h.db.rollup("mixed").await.expect("read").expect("a rollup");
    assert_eq!(stored.shards, Some(8));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_and_failing_reads_leave_every_rollup_exact() {
    let h = Harness::start().await;
    let faults = h.emulators.firestore_faults();
    // The first two rollup writes fail outright, the third is applied but
    // answered UNAVAILABLE; a quarter of all reads fail.
    faults
        .add(FaultSpec::error("BatchWrite", Code::Unavailable).times(2))
        .unwrap();
    faults
        .add(FaultSpec::error_after_apply("BatchWrite", Code::Unavailable).times(1))
        .unwrap();
    faults
        .add(FaultSpec::error("BatchGetDocuments", Code::Unavailable).probability(0.25))
        .unwrap();
    let args = ["--rollup-interval-ms", "100", "--commit-max-attempts", "30"];
    let consumer = h.spawn(h.run_args("c1", &args));
    let events = workload(6, 50, "f");
    let want = expected(&events);
    h.publish(&events).await;
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    let shown = wait_for_rollups(&h, &want).await;
    let stats = consumer.stop().await;
    let fired = faults.fired();
    assert_eq!(
        fired.get(&FaultKind::ErrorAfterApply),
        Some(&1),
        "{fired:?}"
    );
    assert!(
        stats.rollup_failures.get() >= 3,
        "the three failed writes met the refresher: {fired:?}"
    );
    let rollups = h.store.rollups().await.expect("rollups");
    for (post, count) in &want {
        assert_eq!(
            rollups.get(post).map(|r| r.0),
            Some(*count),
            "{post}: {shown:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viral_posts_rollup_is_written_about_once_per_interval_by_three_replicas() {
    let h = Harness::start().await;
    let args = [
        "--rollup-interval-ms",
        "500",
        "--max-outstanding-messages",
        "50",
    ];
    let replicas: Vec<_> = (0..3).map(|_| h.spawn(h.run_args("c1", &args))).collect();
    let started = tokio::time::Instant::now();
    let mut events = Vec::new();
    // About 4 s of likes on one post, in waves every 100 ms.
    for wave in 0..40 {
        let likes: Vec<Ev> = (0..25)
            .map(|u| Ev::like(&format!("v{wave}-{u}"), "viral", &format!("u{wave}-{u}"), 1))
            .collect();
        h.publish(&likes).await;
        events.extend(likes);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let want = expected(&events);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    wait_for_rollups(&h, &want).await;
    let elapsed = started.elapsed();
    let rollup = h.db.layout().rollup("viral");
    let writes = h.emulators.firestore().document_writes(&rollup);
    let (mut deferred, mut skipped, mut writers) = (0, 0, 0);
    for r in replicas {
        let stats = r.stop().await;
        deferred += stats.rollup_deferred.get();
        skipped += stats.rollup_skipped.get();
        // A replica that had the post to refresh: it wrote, deferred or lost.
        let active =
            stats.rollup_refreshes.get() + stats.rollup_deferred.get() + stats.rollup_skipped.get();
        writers += u32::from(active > 0);
    }
    // The post grew past one counter shard once its rollup registered more.
    let stored = h.db.rollup("viral").await.expect("read").expect("a rollup");
    let shards = stored.shards.unwrap_or(0);
    assert!(shards > 1, "registered {shards} counter shards");
    let layout = h.db.layout();
    let used = (0..16)
        .filter(|&k| {
            h.emulators
                .firestore()
                .document(&layout.counter_shard("viral", k))
                .is_some()
        })
        .count() as u32;
    assert!(
        used > 1 && used <= shards,
        "{used} shards used, {shards} registered"
    );
    // One write per 500 ms interval fleet-wide (a few more where two
    // replicas raced, or at shutdown), not one per replica per interval.
    let intervals = elapsed.as_secs_f64() / 0.5;
    assert!(
        (writes as f64) <= intervals * 1.5 + 3.0,
        "{writes} writes of the viral rollup in {elapsed:?}"
    );
    // Where Pub/Sub gave the post's messages to more than one replica,
    // they shared its rollup: deferred to a younger one or lost a race.
    // (On a loaded machine one replica may happen to get all of them.)
    assert!(
        writers < 2 || deferred + skipped > 0,
        "{writers} replicas refreshed the post without deferring to each other"
    );
}

/// Reads of a viral post's rollup and counter shards per rollup interval
/// while `replicas` replicas count a steady stream of likes on it.
async fn viral_reads_per_interval(replicas: usize) -> (f64, u32) {
    let h = Harness::start().await;
    let args = [
        "--rollup-interval-ms",
        "500",
        "--max-outstanding-messages",
        "50",
        "--counter-shard-target-writes-per-sec",
        "1",
        "--rollup-sweep-lookback-secs",
        "0",
    ];
    let running: Vec<_> = (0..replicas)
        .map(|_| h.spawn(h.run_args("c1", &args)))
        .collect();
    let layout = h.db.layout();
    let firestore = h.emulators.firestore();
    let names: Vec<String> = std::iter::once(layout.rollup("viral"))
        .chain((0..16).map(|k| layout.counter_shard("viral", k)))
        .collect();
    let reads = || {
        names
            .iter()
            .map(|n| firestore.document_reads(n))
            .sum::<u64>()
    };
    // A warm-up second (the post grows its shards), then 4 s measured.
    let mut events = Vec::new();
    let mut before = (0, tokio::time::Instant::now());
    for wave in 0..50 {
        if wave == 10 {
            before = (reads(), tokio::time::Instant::now());
        }
        let likes: Vec<Ev> = (0..20)
            .map(|u| Ev::like(&format!("v{wave}-{u}"), "viral", &format!("u{wave}-{u}"), 1))
            .collect();
        h.publish(&likes).await;
        events.extend(likes);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let measured = reads() - before.0;
    let intervals = before.1.elapsed().as_secs_f64() / 0.5;
    let want = expected(&events);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    wait_for_rollups(&h, &want).await;
    for r in running {
        r.stop().await;
    }
    let stored = h.db.rollup("viral").await.expect("read").expect("a rollup");
    (measured as f64 / intervals, stored.shards.unwrap_or(0))
}

/// Three replicas sharing a viral post read its rollup and counter shards
/// at most about 1.5 times as often as one replica alone: a replica first
/// reads the rollup alone, and one another replica refreshed since the
/// change (or within the interval) settles it without its shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_a_viral_post_read_its_shards_about_once_per_interval_fleet_wide() {
    let (one, shards_one) = viral_reads_per_interval(1).await;
    let (three, shards_three) = viral_reads_per_interval(3).await;
    println!(
        "document reads of the viral post per 500 ms interval: 1 replica {one:.1} \
         ({shards_one} shards), 3 replicas {three:.1} ({shards_three} shards), x{:.2}",
        three / one
    );
    assert!(
        shards_one > PEEK && shards_three > PEEK,
        "{shards_one} {shards_three}"
    );
    assert!(
        three <= 1.5 * one,
        "x{:.2}: {three:.1} vs {one:.1}",
        three / one
    );
}

/// Counter shards above which a refresh first reads the rollup alone.
const PEEK: u32 = hotcount::pipeline::rollup::PEEK_ABOVE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_commit_gains_no_round_trip_with_rollups_on() {
    let h = Harness::start().await;
    let args = [
        "--rollup-interval-ms",
        "100",
        "--rollup-sweep-lookback-secs",
        "0",
    ];
    let consumer = h.spawn(h.run_args("c1", &args));
    let events = workload(4, 40, "n");
    let want = expected(&events);
    h.publish(&events).await;
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    wait_for_rollups(&h, &want).await;
    let stats = consumer.stop().await;
    // Every batch: one Commit, and one BatchGetDocuments unless its
    // memberships were known (none refused here), as without rollups.
    let counters = h.emulators.firestore_counters();
    assert_eq!(counters.get("Commit"), stats.batches.get());
    assert_eq!(stats.known_refusals.get(), 0);
    let batch_reads = stats.batches.get() - stats.known_commits.get();
    assert_eq!(stats.store_rpcs.get(), stats.batches.get() + batch_reads);
    // The refresher's reads are the only other BatchGetDocuments; the rest
    // of its round trips are queries for due records to take over (among
    // this test's own RunQuery polls).
    let reads = counters.get("BatchGetDocuments") - batch_reads;
    let writes = counters.get("BatchWrite");
    let queries = stats.rollup_rpcs.get() - (reads + writes);
    assert!(queries <= counters.get("RunQuery"), "{queries}");
    // Each batch that changed counts left a due record, cleared once its
    // posts' rollups showed it: none is left at rest.
    assert!(stats.rollup_cleared.get() > 0);
    assert_eq!(stats.rollup_taken_over.get(), 0);
    use hotcount::store::rollup::{micros_of, RollupStore};
    let far = micros_of(std::time::SystemTime::now()) + 3_600_000_000;
    let waiting =
        h.db.take_over_due(Duration::ZERO, far, 100)
            .await
            .expect("query due records");
    assert!(waiting.is_empty(), "due records left: {waiting:?}");
}

/// `hotcount count --live` as a child process: its stdout lines arrive on
/// the returned receiver.
fn count_live(h: &Harness, posts: &[&str]) -> (Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut command = h.command();
    command.args(["count", "--live"]).args(posts);
    if let Some(url) = h.postgres_url() {
        command.args(["--store", url]);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("hotcount count --live runs");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// The next line of `lines` that starts with `prefix` (bounded wait).
async fn next_line(lines: &std::sync::mpsc::Receiver<String>, prefix: &str) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match lines.try_recv() {
            Ok(line) if line.starts_with(prefix) => return line,
            Ok(_) => continue,
            Err(std::sync::mpsc::TryRecvError::Empty) => {
                assert!(tokio::time::Instant::now() < deadline, "no line {prefix:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(std::sync::mpsc::TryRecvError::Disconnected) => panic!("count --live exited"),
        }
    }
}

async fn count_live_prints_each_change_of_a_rollup(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let (mut live, lines) = count_live(&h, &["p1", "p2"]);
    // Each post's state first: no rollup yet.
    assert_eq!(next_line(&lines, "p1\t").await, "p1\t0\t-");
    assert_eq!(next_line(&lines, "p2\t").await, "p2\t0\t-");
    let consumer = h.spawn(h.run_args("c1", &["--rollup-interval-ms", "200"]));
    let likes: Vec<Ev> = (0..3)
        .map(|u| Ev::like(&format!("l{u}"), "p1", &format!("u{u}"), 1))
        .collect();
    h.publish(&likes).await;
    let first = next_line(&lines, "p1\t3\t").await;
    // The change after: an unlike.
    h.publish(&[Ev::unlike("x0", "p1", "u0", 2)]).await;
    let second = next_line(&lines, "p1\t2\t").await;
    let as_of = |line: &str| line.rsplit('\t').next().map(str::to_string);
    assert!(
        as_of(&second) > as_of(&first),
        "a later asOf: {first} then {second}"
    );
    consumer.stop().await;
    live.kill().expect("stop count --live");
    let _ = live.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_live_resumes_after_its_listen_stream_is_dropped() {
    let h = Harness::start().await;
    let (mut live, lines) = count_live(&h, &["p1"]);
    assert_eq!(next_line(&lines, "p1\t").await, "p1\t0\t-");
    let consumer = h.spawn(h.run_args("c1", &["--rollup-interval-ms", "200"]));
    h.publish(&[Ev::like("a", "p1", "u1", 1)]).await;
    next_line(&lines, "p1\t1\t").await;
    // The server closes the stream (UNAVAILABLE): count --live opens it
    // again from its resume token and misses nothing.
    h.emulators
        .firestore_faults()
        .add(
            FaultSpec::new(FaultKind::DropStream)
                .method("Listen")
                .times(1),
        )
        .unwrap();
    h.publish(&[Ev::like("b", "p1", "u2", 1)]).await;
    next_line(&lines, "p1\t2\t").await;
    assert_eq!(
        h.emulators
            .firestore_faults()
            .fired()
            .get(&FaultKind::DropStream),
        Some(&1)
    );
    consumer.stop().await;
    live.kill().expect("stop count --live");
    let _ = live.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_repair_refreshes_the_rollup_of_the_post_it_repairs() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("c1", &["--rollup-interval-ms", "100"]));
    let events = workload(2, 10, "r");
    let want = expected(&events);
    h.publish(&events).await;
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    wait_for_rollups(&h, &want).await;
    consumer.stop().await;
    // Shard 0 of post-0 corrupted behind hotcount's back: the count is off
    // (the rollup still shows the true total), then repaired.
    corrupt::counter_shard(&h.db, "post-0", 0, 5).await;
    let out = h
        .command()
        .args(["reconcile", "--post", "post-0", "--repair"])
        .output()
        .expect("reconcile runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(h.count("post-0").await, want["post-0"]);
    let rollups = h.store.rollups().await.expect("rollups");
    assert_eq!(rollups.get("post-0").map(|r| r.0), Some(want["post-0"]));
    // Corrupted the other way round: the rollup shows the corrupted sum
    // once refreshed, and the repair refreshes it back.
    corrupt::counter_shard(&h.db, "post-1", 0, 3).await;
    let refreshed = hotcount::pipeline::rollup::refresh_existing(
        std::sync::Arc::new(h.store.clone()),
        &["post-1".to_string()],
        16,
        &[],
    )
    .await;
    assert_eq!(refreshed, 1);
    let before = h.store.rollups().await.expect("rollups")["post-1"].0;
    assert_eq!(before, want["post-1"] + 3);
    let out = h
        .command()
        .args(["reconcile", "--post", "post-1", "--repair"])
        .output()
        .expect("reconcile runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = h.store.rollups().await.expect("rollups")["post-1"].0;
    assert_eq!(after, want["post-1"], "the repair refreshed the rollup");
}

/// Counter shard documents read for `posts` fresh posts liked once each,
/// until each shows its rollup (the default counter shards, 16).
async fn shard_reads_for_fresh_posts(h: &Harness, posts: usize) -> u64 {
    let args = [
        "--rollup-interval-ms",
        "200",
        "--rollup-sweep-lookback-secs",
        "0",
    ];
    let consumer = h.spawn(h.run_args("c1", &args));
    let events: Vec<Ev> = (0..posts)
        .map(|p| Ev::like(&format!("f-{p}"), &format!("fresh-{p}"), "u", 1))
        .collect();
    let want = expected(&events);
    h.publish(&events).await;
    assert!(
        wrong_after(h, &want, WAIT).await.is_empty(),
        "rollups exact"
    );
    consumer.stop().await;
    let layout = h.db.layout();
    let firestore = h.emulators.firestore();
    (0..posts)
        .flat_map(|p| (0..16).map(move |k| (p, k)))
        .map(|(p, k)| firestore.document_reads(&layout.counter_shard(&format!("fresh-{p}"), k)))
        .sum()
}

/// Once the data format is 2 (no build before rollups runs), a fresh
/// post's first refresh reads the shards its due records name, not every
/// shard a post may have; below it, it reads all 16 (an older build may
/// have written any of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_data_format_2_a_fresh_posts_first_refresh_reads_only_its_registered_shards() {
    let posts = 20;
    let h = Harness::start().await;
    h.allow_tombstones().await;
    let registered = shard_reads_for_fresh_posts(&h, posts).await;
    let h = Harness::start().await;
    let every = shard_reads_for_fresh_posts(&h, posts).await;
    assert!(
        registered <= 2 * posts as u64,
        "format 2: {registered} shard reads for {posts} fresh posts"
    );
    assert!(
        every >= 16 * posts as u64,
        "format 1: {every} shard reads for {posts} fresh posts"
    );
}
