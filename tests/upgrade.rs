//! A rolling upgrade and a rollback, on each store: replicas of the build
//! before rollups (0.1.0, commit 577d72f) and of this build consume one
//! subscription and write one store, replaced one by one with SIGTERM and
//! SIGKILL mid-stream, one rolled back to the older build and forward
//! again; this build's `setup` migrates the store while older replicas
//! run. At rest, once the operator raises the data format (the statement
//! that no older build runs any more), every count, rollup and milestone
//! is exact.
//!
//! The older binary is built by `scripts/old-build.sh` (`.ci/run` builds
//! it before the tests); `HOTCOUNT_OLD_BIN` names another one.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::replica::{self, wrong_rollups, Replica};
use common::{expected, Backend, Ev, Harness};
use hotcount_emulators::webhook::{Sink, SinkConfig, SinkFaults};

/// The build before rollups, durable due records, stored milestone
/// settings and tombstones: what a deployment upgrading in place runs.
const OLD_COMMIT: &str = "577d72f";

/// `setup`'s Pub/Sub settings as the harness made them (a short ack
/// deadline, so a killed replica's messages come back soon).
const SUBSCRIPTION_FLAGS: [&str; 6] = [
    "--ack-deadline-secs",
    "10",
    "--min-retry-backoff-secs",
    "0",
    "--max-retry-backoff-secs",
    "1",
];

const WAIT: Duration = Duration::from_secs(90);
const SECRET: &str = "upgrade-secret";
const MILESTONES: [i64; 3] = [5, 20, 40];

/// Each wave's posts and users: about 2,900 events, so each replacement
/// happens while a wave is still being consumed.
const WAVE_POSTS: usize = 40;
const WAVE_USERS: usize = 600;

crate::on_each_store!(a_rolling_upgrade_from_the_build_before_rollups_and_a_rollback_end_exact);

/// The older binary: `HOTCOUNT_OLD_BIN`, or the one `scripts/old-build.sh`
/// made (built here, in a target directory of its own, when missing).
fn old_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("HOTCOUNT_OLD_BIN") {
        return PathBuf::from(path);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join(format!("target/old-builds/{OLD_COMMIT}/hotcount"));
    if !bin.is_file() {
        let status = std::process::Command::new("bash")
            .arg(root.join("scripts/old-build.sh"))
            .arg(OLD_COMMIT)
            .status()
            .expect("bash runs");
        assert!(
            status.success(),
            "scripts/old-build.sh {OLD_COMMIT} failed (see its output)"
        );
    }
    bin
}

/// Which build a replica runs.
#[derive(Clone, Copy, Debug)]
enum Build {
    Old,
    New,
}

/// A replica of `build`, consuming once it returns. Both builds spread
/// posts over 8 counter shards; a killed replica's leases end soon.
async fn start(h: &Harness, build: Build, name: &str, sink: &Sink) -> Replica {
    let bin = match build {
        Build::Old => old_bin(),
        Build::New => PathBuf::from(env!("CARGO_BIN_EXE_hotcount")),
    };
    let mut command = replica::run_command(h, &bin);
    command.args(["--counter-shards", "8", "--lease-extension-secs", "10"]);
    match build {
        // Every post on all 8 shards: shards no rollup registers.
        Build::Old => {
            command.args(["--counter-shard-target-writes-per-sec", "0"]);
        }
        // No start-up sweep: the older build's increments leave no
        // `updatedAt` to find, so nothing but this build's own due records
        // and the step after the roll may make the rollups right.
        Build::New => {
            command.args([
                "--rollup-interval-ms",
                "300",
                "--rollup-sweep-lookback-secs",
                "0",
                "--milestone-webhook",
                &sink.url(),
                "--milestone-webhook-secret",
                SECRET,
                "--milestone-webhook-timeout-ms",
                "500",
                "--milestone-lease-secs",
                "2",
                "--milestone-retry-initial-ms",
                "100",
            ]);
        }
    }
    Replica::spawn(command, &format!("{name}-{build:?}"))
        .running()
        .await
}

/// Runs one CLI command of this build against `h`'s store; its output.
fn cli(h: &Harness, args: &[&str]) -> String {
    let mut command = h.command();
    command.args(args);
    if let Some(url) = h.postgres_url() {
        command.args(["--store", url]);
    }
    let output = command.output().expect("hotcount runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "hotcount {args:?}: {text}");
    text
}

/// One wave of likes and unlikes, tagged `tag`.
fn wave(tag: &str) -> Vec<Ev> {
    replica::workload(WAVE_POSTS, WAVE_USERS, 7, tag)
}

/// The milestone keys (`{post}:{n}`) the counts in `want` cross.
fn milestones_crossed(want: &BTreeMap<String, i64>) -> BTreeSet<String> {
    want.iter()
        .flat_map(|(post, count)| {
            MILESTONES
                .iter()
                .filter(move |n| *count >= **n)
                .map(move |n| format!("{post}:{n}"))
        })
        .collect()
}

/// The keys (`{post}:{n}`) `sink` accepted, without the consumer.
fn milestones_delivered(sink: &Sink) -> BTreeSet<String> {
    sink.processed()
        .into_iter()
        .filter_map(|(key, _)| key.split_once(':').map(|(_, rest)| rest.to_string()))
        .collect()
}

/// Publishes `events`, keeps them in `all`, and waits until some of them
/// are acknowledged, so what follows happens mid-stream.
async fn publish_mid_stream(h: &Harness, all: &mut Vec<Ev>, events: Vec<Ev>) {
    let before = h.subscription_stats().acks;
    let events_len = events.len() as u64;
    h.publish(&events).await;
    all.extend(events);
    let deadline = tokio::time::Instant::now() + WAIT;
    while h.subscription_stats().acks < before + events_len / 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "some of the wave acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_rolling_upgrade_from_the_build_before_rollups_and_a_rollback_end_exact(
    backend: Backend,
) {
    let old = old_bin();
    let h = Harness::start_on_unmigrated(backend).await;
    let sink = Sink::start(SinkConfig {
        secret: Some(SECRET.into()),
        faults: SinkFaults::default(),
    })
    .await
    .expect("sink");
    // The deployment as the older build set it up.
    if let Some(url) = h.postgres_url() {
        let output = replica::command_of(&h, &old)
            .args(["setup", "--store", url])
            .args(SUBSCRIPTION_FLAGS)
            .output()
            .expect("the older hotcount runs");
        assert!(
            output.status.success(),
            "the older setup: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut all = Vec::new();
    let mut a = start(&h, Build::Old, "a0", &sink).await;
    let mut b = start(&h, Build::Old, "b0", &sink).await;
    publish_mid_stream(&h, &mut all, wave("w1")).await;

    // This build's setup while the older replicas run: PostgreSQL's
    // migrations, and the fleet's milestone setting.
    let list = MILESTONES.map(|n| n.to_string()).join(",");
    let mut setup = vec!["setup", "--milestones", &list];
    setup.extend(SUBSCRIPTION_FLAGS);
    cli(&h, &setup);

    // The roll: one replica SIGTERMed and replaced (the fleet mixed), the
    // other SIGKILLed and replaced, each mid-stream.
    a.terminate();
    a = start(&h, Build::New, "a1", &sink).await;
    publish_mid_stream(&h, &mut all, wave("w2")).await;
    b.kill();
    b = start(&h, Build::New, "b1", &sink).await;
    publish_mid_stream(&h, &mut all, wave("w3")).await;

    // A rollback, mid-stream: one replica SIGKILLed (the fleet mixed
    // again), the other SIGTERMed, both replaced by the older build.
    a.kill();
    a = start(&h, Build::Old, "a2", &sink).await;
    publish_mid_stream(&h, &mut all, wave("w4")).await;
    b.terminate();
    b = start(&h, Build::Old, "b2", &sink).await;
    // Fresh posts liked once each, counted by the older build alone: no
    // due record, no rollup, until the operator's raise.
    let once: Vec<Ev> = (0..200)
        .map(|p| Ev::like(&format!("once-{p}"), &format!("once-{p}"), "u", 1))
        .collect();
    h.publish(&once).await;
    all.extend(once);
    assert!(
        h.wait_until_all_acked(WAIT).await,
        "the rollback's backlog drained"
    );

    // Forward again, mid-stream (SIGTERM, then SIGKILL).
    a.terminate();
    a = start(&h, Build::New, "a3", &sink).await;
    publish_mid_stream(&h, &mut all, wave("w5")).await;
    b.kill();
    b = start(&h, Build::New, "b3", &sink).await;
    publish_mid_stream(&h, &mut all, wave("w6")).await;

    let want = expected(&all);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want, "counts exact");
    assert!(h.wait_until_all_acked(WAIT).await, "the backlog drained");
    // What the older replicas changed without a due record, before the
    // operator's step: at least the posts only they counted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stale = wrong_rollups(&h, &want).await;
    eprintln!(
        "before the format raise: {} of {} rollups differ from their count",
        stale.len(),
        want.len()
    );
    assert!(
        !stale.is_empty(),
        "the older replica counted posts no rollup shows yet"
    );

    // Every replica runs this build: the operator raises the format, which
    // refreshes every rollup from every counter shard (8: the most any
    // build used here) before it records the raise.
    let mut raise = vec!["setup", "--data-format", "2", "--counter-shards", "8"];
    raise.extend(SUBSCRIPTION_FLAGS);
    let raised = cli(&h, &raise);
    assert!(
        raised.contains("data format\t1 -> 2"),
        "the format raised: {raised}"
    );
    let wrong = wrong_rollups(&h, &want).await;
    assert!(
        wrong.is_empty(),
        "{} of {} rollups wrong at rest after the raise: {:?}",
        wrong.len(),
        want.len(),
        &wrong[..wrong.len().min(10)]
    );

    // Every milestone the counts cross delivered, once the raise recorded
    // the ones the older build's increments crossed.
    let crossed = milestones_crossed(&want);
    let deadline = tokio::time::Instant::now() + WAIT;
    while !crossed.is_subset(&milestones_delivered(&sink)) && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let delivered = milestones_delivered(&sink);
    let missing: Vec<_> = crossed.difference(&delivered).collect();
    // A post may cross a milestone and fall back below it by an unlike;
    // none is crossed that its likes alone never reach.
    let likes_only: Vec<Ev> = all.iter().filter(|e| e.added).cloned().collect();
    let reachable = milestones_crossed(&expected(&likes_only));
    let extra: Vec<_> = delivered.difference(&reachable).collect();
    assert!(
        missing.is_empty(),
        "milestones never delivered: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "milestones the counts never crossed: {extra:?}"
    );
    a.terminate();
    b.terminate();
    // And still exact once the last replicas have drained.
    assert_eq!(h.counts(want.keys()).await, want, "counts exact at the end");
    assert!(wrong_rollups(&h, &want).await.is_empty());
}
