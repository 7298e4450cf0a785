//! The operator commands as an operator runs them: `reconcile` (exit status
//! and report), `replay --dry-run`, `dlq inspect|replay`, `users
//! export|erase`.

mod common;
#[path = "support/corrupt.rs"]
mod corrupt;

use std::process::{Command, Output};
use std::time::Duration;

use common::{expected, Ev, Harness};
use gcloud_sdk::tonic::Code;

/// The `hotcount` binary pointed at the harness's emulators and project.
fn command(h: &Harness) -> Command {
    h.command()
}

fn hotcount(h: &Harness, args: &[&str]) -> Output {
    command(h).args(args).output().expect("hotcount runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn processed(h: &Harness, events: &[Ev]) {
    let consumer = h.spawn(h.run_args("hotcount", &[]));
    h.publish(events).await;
    assert!(
        consumer
            .wait_for_acks(events.len() as u64, Duration::from_secs(30))
            .await
    );
    consumer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_exits_non_zero_on_a_difference_and_zero_once_repaired() {
    let h = Harness::start().await;
    let events: Vec<Ev> = (0..6)
        .map(|i| Ev::like(&format!("e{i}"), "p", &format!("u{i}"), 1))
        .collect();
    processed(&h, &events).await;
    let out = hotcount(&h, &["reconcile"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout(&out).contains("p\t6\t6\t+0\tok"), "{}", stdout(&out));

    corrupt::counter_shard(&h.db, "p", 3, 2).await;
    let out = hotcount(&h, &["reconcile", "--post", "p"]);
    assert!(!out.status.success(), "a difference fails the command");
    assert!(
        stdout(&out).contains("p\t8\t6\t-2\tdiffers"),
        "{}",
        stdout(&out)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--repair"));

    let out = hotcount(&h, &["reconcile", "--repair"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout(&out).contains("p\t8\t6\t-2\trepaired"),
        "{}",
        stdout(&out)
    );
    assert_eq!(h.counts(expected(&events).keys()).await, expected(&events));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_dry_run_and_dlq_commands_report_without_changing_anything() {
    let h = Harness::start().await;
    let from = chrono::DateTime::<chrono::Utc>::from(h.emulators.clock().now_wall()).to_rfc3339();
    let events: Vec<Ev> = (0..4)
        .map(|i| Ev::like(&format!("e{i}"), "p", &format!("u{i}"), 1))
        .collect();
    processed(&h, &events).await;
    let to = chrono::DateTime::<chrono::Utc>::from(
        h.emulators.clock().now_wall() + Duration::from_secs(1),
    )
    .to_rfc3339();

    let out = hotcount(
        &h,
        &[
            "replay",
            "--from",
            &from,
            "--to",
            &to,
            "--dry-run",
            "--idle-ms",
            "300",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(text.contains("replay\tdry run (nothing written)"), "{text}");
    assert!(text.contains("(deleted)"), "{text}");
    assert!(text.contains("ending\tDrained"), "{text}");

    let out = hotcount(&h, &["replay", "--from", &to, "--to", &from]);
    assert!(!out.status.success(), "an empty window is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--to"));

    let out = hotcount(&h, &["dlq", "inspect", "--wait-ms", "300"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout(&out).contains("0 dead letter(s); none acked"),
        "{}",
        stdout(&out)
    );

    let out = hotcount(&h, &["dlq", "replay"]);
    assert!(!out.status.success(), "replay needs --message-id or --all");
    let out = hotcount(
        &h,
        &["dlq", "replay", "--message-id", "404", "--wait-ms", "300"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout(&out).contains("not found\t404"), "{}", stdout(&out));
    assert_eq!(h.count("p").await, 4);
}

/// `hotcount run` as a child process of `args`, its stderr (the log) in a file.
struct RunningCli {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl Drop for RunningCli {
    /// A test that fails half-way leaves no `hotcount run` behind.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl RunningCli {
    fn start(h: &Harness, name: &str, args: &[&str]) -> Self {
        let log = std::env::temp_dir().join(format!("hotcount-{name}-{}.log", std::process::id()));
        let file = std::fs::File::create(&log).expect("log file");
        let child = command(h)
            .args(["run", "--metrics-addr", "off"])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(file)
            .spawn()
            .expect("hotcount run starts");
        Self { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log holds `text`.
    async fn wait_for_log(&self, text: &str) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !self.log().contains(text) {
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        true
    }

    /// SIGTERM, then the exit status (bounded wait).
    async fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "hotcount run did not stop"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_is_logged_at_warn_and_listed_and_shown_by_the_cli() {
    let h = Harness::start().await;
    let run = RunningCli::start(&h, "quarantine", &["--subscription", common::SUBSCRIPTION]);
    let ids = h.publish_raw(&[b"{not json".to_vec()]).await;
    assert!(
        run.wait_for_log(&ids[0]).await,
        "the quarantine is logged with its message id: {}",
        run.log()
    );
    let log = run.log();
    assert!(
        log.contains("WARN") && log.contains("message quarantined"),
        "{log}"
    );
    assert!(run.stop().await.success());

    let out = hotcount(&h, &["quarantine", "list"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = format!("hotcount:{}", ids[0]);
    assert!(stdout(&out).contains(&id), "{}", stdout(&out));
    assert!(stdout(&out).contains("1 record(s)"), "{}", stdout(&out));
    let out = hotcount(&h, &["quarantine", "show", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout(&out).contains("not a JSON object"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_warns_at_start_when_the_subscription_has_no_dead_letter_policy() {
    use google_cloud_pubsub::model::Subscription;
    let h = Harness::start().await;
    let admin = hotcount::connect::subscription_admin(&h.endpoints)
        .await
        .expect("admin");
    let bare = "likes-no-dead-letters";
    admin
        .create_subscription()
        .with_request(
            Subscription::new()
                .set_name(format!("projects/{}/subscriptions/{bare}", common::PROJECT))
                .set_topic(format!(
                    "projects/{}/topics/{}",
                    common::PROJECT,
                    common::TOPIC
                )),
        )
        .send()
        .await
        .expect("subscription without a dead-letter policy");
    let run = RunningCli::start(&h, "no-dlq", &["--subscription", bare]);
    assert!(
        run.wait_for_log("no dead-letter policy").await,
        "a warning at start: {}",
        run.log()
    );
    assert!(run.log().contains("WARN"));
    assert!(run.stop().await.success());
    // With the policy `hotcount setup` gives it: running (a like counted,
    // so start-up is over), and no such warning.
    let run = RunningCli::start(&h, "with-dlq", &["--subscription", common::SUBSCRIPTION]);
    let events = [Ev::like("e1", "p", "u1", 1)];
    h.publish(&events).await;
    let want = expected(&events);
    assert_eq!(
        h.wait_for_counts(&want, Duration::from_secs(30)).await,
        want
    );
    assert!(
        !run.log().contains("no dead-letter policy"),
        "{}",
        run.log()
    );
    assert!(run.stop().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_repair_goes_on_past_a_failed_post_and_reports_each() {
    let h = Harness::start().await;
    let mut events = common::likes("a", 3, "a");
    events.extend(common::likes("b", 4, "b"));
    processed(&h, &events).await;
    corrupt::counter_shard(&h.db, "a", 1, 2).await;
    corrupt::counter_shard(&h.db, "b", 2, -1).await;
    // The first correction (post a, in post order) is refused.
    let refuse_once = || {
        h.emulators
            .firestore_faults()
            .add(hotcount_emulators::FaultSpec::error("Commit", Code::InvalidArgument).times(1))
            .expect("fault");
    };
    refuse_once();
    let out = hotcount(&h, &["reconcile", "--repair"]);
    let text = stdout(&out);
    assert!(!out.status.success(), "a failed post fails the command");
    assert!(text.contains("a\t5\t3\t-2\tfailed: "), "{text}");
    assert!(
        text.contains("b\t3\t4\t+1\trepaired"),
        "the next post still: {text}"
    );
    assert_eq!(h.count("b").await, 4);
    assert_eq!(h.count("a").await, 5, "a is left as it was");

    // The same with the posts named.
    corrupt::counter_shard(&h.db, "b", 2, 5).await;
    refuse_once();
    let out = hotcount(&h, &["reconcile", "--repair", "--post", "a", "--post", "b"]);
    let text = stdout(&out);
    assert!(!out.status.success());
    assert!(text.contains("a\t0\t0\t+0\tfailed: "), "{text}");
    assert!(text.contains("b\t9\t4\t-5\trepaired"), "{text}");
    assert_eq!(h.counts(expected(&events).keys()).await.get("b"), Some(&4));
}

/// `hotcount replay` of everything published since `from` through the
/// archive subscription, applying what was never counted.
fn replay(h: &Harness, from: std::time::SystemTime) -> Output {
    let to = h.emulators.clock().now_wall() + Duration::from_secs(1);
    let (from, to) = (common::rfc3339(from), common::rfc3339(to));
    hotcount(
        h,
        &[
            "replay",
            "--consumer",
            "c1",
            "--from",
            &from,
            "--to",
            &to,
            "--replay-subscription",
            "likes-archive",
            "--chunk-events",
            "7",
            "--max-divergence",
            "1",
            "--idle-ms",
            "1500",
            "--end-grace-ms",
            "200",
            "--max-events-per-sec",
            "10000",
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_retries_a_chunk_like_the_consumer_and_reports_what_it_committed_when_it_stops() {
    let h = Harness::start().await;
    common::archive(&h, "likes-archive").await;
    let from = h.emulators.clock().now_wall() - Duration::from_secs(1);
    // Never processed: the replay applies it, 7 events a chunk.
    let events = common::likes("r", 14, "r");
    h.publish(&events).await;
    let faults = h.emulators.firestore_faults();
    // The second chunk's commit is refused (its content, as far as the
    // store says): the replay stops there.
    faults
        .add(
            hotcount_emulators::FaultSpec::error("Commit", Code::InvalidArgument)
                .after(1)
                .times(1),
        )
        .expect("fault");
    let out = replay(&h, from);
    let text = stdout(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("ending\tFailed"), "{text}");
    assert!(text.contains("messages\t7\t"), "what it committed: {text}");
    assert!(text.contains("applied\t7\t"), "{text}");
    assert!(text.contains("delta\tr\t+7"), "{text}");
    assert!(err.contains("replay stopped"), "{err}");
    assert_eq!(h.count("r").await, 7);

    // Commits that fail and then go through are retried, as the consumer does.
    faults
        .add(hotcount_emulators::FaultSpec::error("Commit", Code::Unavailable).times(2))
        .expect("fault");
    let out = replay(&h, from);
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(h.count("r").await, 14, "every event once: {text}");
}

/// The posts `out` (a `users export`) lists, in order, each line checked
/// to be one JSON object with the fields an access request answers with.
fn exported_posts(out: &Output) -> Vec<String> {
    let mut posts = Vec::new();
    for line in stdout(out).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("one JSON object per line");
        for field in ["since", "lastEventAt", "recordedAt"] {
            assert!(v[field].as_str().is_some(), "{field} in {line}");
        }
        posts.push(v["post"].as_str().expect("post").to_string());
    }
    posts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_export_prints_one_json_line_per_post_the_user_likes_now() {
    let h = Harness::start().await;
    let events = [
        Ev::like("a1", "p1", "alice", 1),
        Ev::like("a2", "p2", "alice", 1),
        Ev::like("a3", "p3", "alice", 1),
        Ev::unlike("a4", "p2", "alice", 2),
        Ev::like("b1", "p1", "bob", 1),
    ];
    processed(&h, &events).await;
    let out = hotcount(&h, &["users", "export", "alice"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(exported_posts(&out), ["p1", "p3"], "{}", stdout(&out));
    let out = hotcount(&h, &["users", "export", "nobody"]);
    assert!(out.status.success());
    assert_eq!(stdout(&out), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_erase_removes_each_like_exactly_once_and_the_users_later_events_change_no_count() {
    const WAIT: Duration = Duration::from_secs(30);
    let h = Harness::start().await;
    let run = |args: &[&str]| hotcount(&h, args);
    let err = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
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
async fn users_erase_killed_midway_then_run_again_is_exact_and_never_decrements_twice() {
    const WAIT: Duration = Duration::from_secs(30);
    let h = Harness::start().await;
    let run = |args: &[&str]| hotcount(&h, args);
    let err = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let mut command = h.command();
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
async fn users_erase_beside_a_running_consumer_delivering_the_users_events_is_exact_at_rest() {
    const WAIT: Duration = Duration::from_secs(30);
    let h = Harness::start().await;
    let run = |args: &[&str]| hotcount(&h, args);
    let mut command = h.command();
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
async fn an_erased_users_every_event_is_dropped_until_restored_and_their_memberships_are_gone() {
    const WAIT: Duration = Duration::from_secs(30);
    let h = Harness::start().await;
    h.allow_tombstones().await;
    let run = |args: &[&str]| hotcount(&h, args);
    let err = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
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
async fn a_seek_replay_after_an_erasure_counts_none_of_the_erased_users_events() {
    const WAIT: Duration = Duration::from_secs(30);
    let h = Harness::start().await;
    h.allow_tombstones().await;
    common::archive(&h, "likes-archive").await;
    let from = h.emulators.clock().now_wall() - Duration::from_secs(1);
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
    let out = hotcount(
        &h,
        &["users", "erase", key[0], key[1], key[2], key[3], "alice"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let to = h.emulators.clock().now_wall() + Duration::from_secs(1);
    let (from, to) = (common::rfc3339(from), common::rfc3339(to));
    let out = hotcount(
        &h,
        &[
            "replay",
            "--from",
            &from,
            "--to",
            &to,
            "--replay-subscription",
            "likes-archive",
            "--idle-ms",
            "1500",
            "--end-grace-ms",
            "200",
            "--max-divergence",
            "1",
            "--max-events-per-sec",
            "10000",
            "--user-hash-key",
            "k3y",
        ],
    );
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("erased users' events dropped\t2"), "{text}");
    let posts: Vec<String> = ["p1", "p2"].map(String::from).to_vec();
    assert_eq!(
        h.counts(&posts).await.into_values().collect::<Vec<_>>(),
        [1, 0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_erase_with_a_tombstone_beside_a_running_consumer_delivering_the_users_events_is_exact_at_rest(
) {
    const WAIT: Duration = Duration::from_secs(30);
    let h = Harness::start().await;
    h.allow_tombstones().await;
    let run = |args: &[&str]| hotcount(&h, args);
    let mut command = h.command();
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
async fn users_erase_rides_out_an_aborted_tombstone_write_and_an_aborted_membership_delete_in_one_run(
) {
    const WAIT: Duration = Duration::from_secs(30);
    let h = Harness::start().await;
    h.allow_tombstones().await;
    let run = |args: &[&str]| hotcount(&h, args);
    let err = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let key = ["--user-hash-key", "k3y", "--tombstone-refresh-ms", "100"];
    let consumer = h.spawn(h.run_args("hotcount", &key));
    let events = [
        Ev::like("a1", "p1", "alice", 1),
        Ev::like("a2", "p2", "alice", 1),
        Ev::like("b1", "p1", "bob", 1),
        Ev::like("b2", "p2", "bob", 1),
    ];
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(4, WAIT).await);
    consumer.stop().await;
    let erase = |user: &str| {
        let mut args = vec!["users", "erase"];
        args.extend(key);
        args.push(user);
        run(&args)
    };
    let faults = h.emulators.firestore_faults();

    // Alice: the erasure's first commit, her tombstone's write, is aborted once.
    faults
        .add(hotcount_emulators::FaultSpec::error("Commit", Code::Aborted).times(1))
        .expect("fault");
    let out = erase("alice");
    assert!(out.status.success(), "{}", err(&out));
    assert!(
        stdout(&out).contains("likes removed 2\t"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("memberships deleted 2\t"),
        "{}",
        stdout(&out)
    );

    // Bob: his third commit (tombstone, erasure, then the delete of his
    // erased memberships) is aborted once.
    faults
        .add(
            hotcount_emulators::FaultSpec::error("Commit", Code::Aborted)
                .after(2)
                .times(1),
        )
        .expect("fault");
    let out = erase("bob");
    assert!(out.status.success(), "{}", err(&out));
    assert!(
        stdout(&out).contains("memberships deleted 2\t"),
        "{}",
        stdout(&out)
    );

    let posts: Vec<String> = ["p1", "p2"].map(String::from).to_vec();
    assert_eq!(
        h.counts(&posts).await.into_values().collect::<Vec<_>>(),
        [0, 0]
    );
    for user in ["alice", "bob"] {
        let mut dry = vec!["users", "erase", "--dry-run"];
        dry.extend(key);
        dry.push(user);
        assert!(
            stdout(&run(&dry)).contains("already erased 0\tmemberships deleted 0\t"),
            "no membership of {user} left"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_backup_from_before_an_erasure_is_restored_reapply_erases_the_user_again_from_the_kept_tombstones(
) {
    const WAIT: Duration = Duration::from_secs(30);
    let h = Harness::start().await;
    h.allow_tombstones().await;
    let run = |args: &[&str]| hotcount(&h, args);
    let err = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_replay_of_an_erased_users_dead_letters_counts_nothing() {
    use google_cloud_pubsub::model::Message;
    const WAIT: Duration = Duration::from_secs(30);
    let h = Harness::start().await;
    h.allow_tombstones().await;
    let key = ["--user-hash-key", "k3y", "--tombstone-refresh-ms", "100"];
    let consumer = h.spawn(h.run_args("hotcount", &key));
    h.publish(&[
        Ev::like("a1", "p1", "alice", 1),
        Ev::like("b1", "p1", "bob", 1),
    ])
    .await;
    assert!(consumer.wait_for_acks(2, WAIT).await);
    let out = hotcount(
        &h,
        &["users", "erase", key[0], key[1], key[2], key[3], "alice"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(h.count("p1").await, 1);

    // Her messages in the dead-letter topic, replayed to the main topic.
    let dead_letters = hotcount::connect::publisher(
        &h.endpoints,
        "projects/hotcount-test/topics/likes-dead-letter",
    )
    .await
    .expect("publisher");
    for ev in [
        Ev::like("a1", "p1", "alice", 1),
        Ev::like("a9", "p9", "alice", 1),
    ] {
        let message = Message::new().set_data(ev.json().into_bytes());
        dead_letters.publish(message).await.expect("published");
    }
    let out = hotcount(&h, &["dlq", "replay", "--all", "--wait-ms", "1000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout(&out).matches("replayed\t").count(),
        2,
        "{}",
        stdout(&out)
    );
    assert!(consumer.wait_for_acks(4, WAIT).await);
    consumer.stop().await;
    assert_eq!(h.count("p1").await, 1);
    assert_eq!(h.count("p9").await, 0);
}
