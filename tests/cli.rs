//! The `hotcount` binary as an operator runs it: `setup` (idempotent),
//! `run` until SIGTERM (drains and exits 0), `count`, and start-up validation.

mod common;
#[path = "support/scrape.rs"]
mod scrape;

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{Ev, Harness};

fn hotcount(h: &Harness) -> Command {
    h.command()
}

fn output(mut cmd: Command) -> Output {
    cmd.output().expect("hotcount runs")
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([name, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_is_idempotent() {
    let h = Harness::start().await;
    let mut cmd = hotcount(&h);
    cmd.args(["setup", "--topic", "other", "--subscription", "other-sub"]);
    let first = output(cmd);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let text = String::from_utf8_lossy(&first.stdout);
    assert!(
        text.contains("created\tprojects/hotcount-test/topics/other"),
        "{text}"
    );
    let mut cmd = hotcount(&h);
    cmd.args(["setup", "--topic", "other", "--subscription", "other-sub"]);
    let second = output(cmd);
    assert!(second.status.success());
    let text = String::from_utf8_lossy(&second.stdout);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("exists\t")).count(),
        4,
        "{text}"
    );
}

/// `setup` on resources that exist with other settings (an older
/// deployment, a hand edit) brings them in line and says so: a topic
/// without retention gets it, the subscription gets the ack deadline,
/// retry and dead-letter policy and exactly-once delivery asked for. Only
/// a resource already as asked is reported `exists`; a subscription on
/// another topic, which Pub/Sub cannot move, is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_brings_existing_resources_in_line_and_refuses_what_it_cannot_change() {
    use google_cloud_pubsub::model::{Subscription, Topic};
    let h = Harness::start().await;
    let topics = hotcount::connect::topic_admin(&h.endpoints)
        .await
        .expect("topic admin");
    let subs = hotcount::connect::subscription_admin(&h.endpoints)
        .await
        .expect("subscription admin");
    let p = common::PROJECT;
    let old_topic = format!("projects/{p}/topics/old-likes");
    topics
        .create_topic()
        .with_request(Topic::new().set_name(&old_topic))
        .send()
        .await
        .expect("a topic without retention");
    let args = [
        "setup",
        "--topic",
        "old-likes",
        "--subscription",
        "old-likes-sub",
        "--exactly-once",
    ];
    let mut cmd = hotcount(&h);
    cmd.args(args);
    let first = output(cmd);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let text = String::from_utf8_lossy(&first.stdout);
    assert!(
        text.contains(&format!(
            "updated\t{old_topic}\tmessage_retention_duration: unset -> 604800s"
        )),
        "{text}"
    );
    let retention = topics
        .get_topic()
        .set_topic(&old_topic)
        .send()
        .await
        .expect("topic")
        .message_retention_duration
        .map(|d| d.seconds());
    assert_eq!(retention, Some(604_800), "the retention is really set");
    assert!(
        text.contains("skipped\tprojects/hotcount-test/subscriptions/old-likes-sub")
            || text.contains("skipped\tIAM"),
        "IAM is reported, never silently left out: {text}"
    );

    // The harness's own subscription: ack deadline 10, backoff 0..1 s, 100
    // attempts, at-least-once. Setup with the production defaults and
    // exactly-once changes each of them, and says so.
    let sub = format!("projects/{p}/subscriptions/{}", common::SUBSCRIPTION);
    let mut cmd = hotcount(&h);
    cmd.args(["setup", "--exactly-once"]);
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("updated\t{sub}\t")))
        .unwrap_or_else(|| panic!("the subscription is reported updated: {text}"));
    for change in [
        "ack_deadline_seconds: 10 -> 60",
        "retry_policy: 0s..1s -> 10s..600s",
        "after 100 attempts -> projects/hotcount-test/topics/likes-dead-letter after 10 attempts",
        "enable_exactly_once_delivery: false -> true",
    ] {
        assert!(line.contains(change), "{change} in {line}");
    }
    let now = subs
        .get_subscription()
        .set_subscription(&sub)
        .send()
        .await
        .expect("subscription");
    assert_eq!(now.ack_deadline_seconds, 60);
    assert!(now.enable_exactly_once_delivery);
    assert_eq!(
        now.dead_letter_policy.map(|d| d.max_delivery_attempts),
        Some(10)
    );

    // Again with the same flags: nothing left to change.
    let mut cmd = hotcount(&h);
    cmd.args(["setup", "--exactly-once"]);
    let again = output(cmd);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(!text.contains("updated"), "{text}");
    assert!(text.contains(&format!("exists\t{sub}")), "{text}");

    // A subscription of that name on another topic cannot be moved.
    subs.create_subscription()
        .with_request(
            Subscription::new()
                .set_name(format!("projects/{p}/subscriptions/elsewhere"))
                .set_topic(&old_topic),
        )
        .send()
        .await
        .expect("a subscription on another topic");
    let mut cmd = hotcount(&h);
    cmd.args(["setup", "--subscription", "elsewhere"]);
    let refused = output(cmd);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("refusing to change projects/hotcount-test/subscriptions/elsewhere"),
        "{err}"
    );
    assert!(err.contains("old-likes"), "{err}");
}

/// Against Google (no emulator), setup does not leave the roles out
/// silently: it asks for the project number and the consumer's service
/// account, or an explicit `--skip-iam`.
#[test]
fn setup_against_google_asks_for_the_principals_it_grants_roles_to() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hotcount"))
        .args(["setup", "--project", "my-project"])
        .env_remove("PUBSUB_EMULATOR_HOST")
        .env_remove("FIRESTORE_EMULATOR_HOST")
        .env_remove("HOTCOUNT_PROJECT_NUMBER")
        .env_remove("HOTCOUNT_CONSUMER_SERVICE_ACCOUNT")
        .output()
        .expect("hotcount runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for flag in [
        "--project-number",
        "--consumer-service-account",
        "--skip-iam",
    ] {
        assert!(err.contains(flag), "{flag} named in: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_acks_and_exits_zero() {
    let h = Harness::start().await;
    let events: Vec<Ev> = (0..200)
        .map(|i| {
            Ev::like(
                &format!("e{i}"),
                &format!("post-{}", i % 7),
                &format!("u{i}"),
                1,
            )
        })
        .collect();
    h.publish(&events).await;
    // A known port, so the test can read what the service itself received.
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let mut cmd = hotcount(&h);
    cmd.env("HOTCOUNT_METRICS_ADDR", metrics.to_string());
    // The longest flush interval and min wait the flags allow (60 s), twice
    // the longest the waits below may take: nothing is flushed before the
    // signal by construction, however slow the machine (else they fail).
    cmd.args([
        "run",
        "--consumer",
        "cli",
        "--flush-interval-ms",
        "60000",
        "--flush-min-wait-ms",
        "60000",
        "--max-batch-events",
        "10000",
        "--lease-extension-secs",
        "600",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut child = cmd.spawn().expect("hotcount run starts");
    // Nothing is committed yet (see the flush flags): wait until everything
    // is buffered, then ask for a graceful stop.
    let sub = format!(
        "projects/{}/subscriptions/{}",
        common::PROJECT,
        common::SUBSCRIPTION
    );
    while h
        .emulators
        .pubsub()
        .stats(&sub)
        .map_or(0, |s| s.outstanding)
        < 200
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "all messages leased"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Leased by the client library is not yet handed to the service: wait
    // until the service counted every message as received (buffered).
    loop {
        if let Ok(stream) = tokio::net::TcpStream::connect(metrics).await {
            drop(stream);
            let (_, body) = scrape::get(metrics, "/metrics").await;
            if scrape::value(&body, "hotcount_events_received_total") == Some(200.0) {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "every message received by the service"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        h.count("post-0").await,
        0,
        "nothing flushed before the signal"
    );
    signal(&child, "-TERM");
    let status = common::wait_with_timeout(&mut child, Duration::from_secs(30));
    assert!(status.success(), "exit status {status:?}");
    let want = common::expected(&events);
    assert_eq!(h.counts(want.keys()).await, want, "drained at shutdown");
    let stats = h.emulators.pubsub().stats(&sub).expect("subscription");
    assert_eq!(
        stats.unacked, 0,
        "every message acked before exit: {stats:?}"
    );

    let mut cmd = hotcount(&h);
    cmd.args(["count", "post-0", "post-1", "never-liked"]);
    let out = output(cmd);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        vec![
            format!("post-0\t{}", want["post-0"]),
            format!("post-1\t{}", want["post-1"]),
            "never-liked\t0".to_string()
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_settings_are_refused_at_start_with_the_flag_named() {
    let h = Harness::start().await;
    let mut cmd = hotcount(&h);
    cmd.args(["run", "--flush-interval-ms", "0"]);
    let out = output(cmd);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--flush-interval-ms"), "{err}");
    let mut cmd = hotcount(&h);
    cmd.args(["run", "--consumer", "a/b"]);
    let out = output(cmd);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--consumer"));
    // Trusting every request is refused off Cloud Run, saying why.
    let mut cmd = hotcount(&h);
    cmd.env_remove("K_SERVICE").args([
        "run",
        "--delivery",
        "push",
        "--push-auth",
        "cloud-run",
        "--push-addr",
        "0.0.0.0:0",
    ]);
    let out = output(cmd);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--push-auth") && err.contains("K_SERVICE"),
        "{err}"
    );
}

/// A poison storm (10,000 messages, five reasons) through `hotcount run`:
/// stderr holds a few lines per reason and interval plus one summary line
/// per reason and interval, while the metric and the quarantine records
/// hold every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_storm_logs_a_few_lines_while_every_message_is_counted_and_stored() {
    const STORM: usize = 10_000;
    let h = Harness::start().await;
    let shapes: [fn(usize) -> String; 5] = [
        |i| format!("not json {i}"),
        |i| format!(r#"{{"eventId":"p{i}","type":"like.added"}}"#),
        |i| {
            format!(
                r#"{{"eventId":"p{i}","type":"like.maybe","postId":"p","userId":"u","occurredAt":"2026-01-01T00:00:00Z"}}"#
            )
        },
        |i| {
            format!(
                r#"{{"eventId":"p{i}","type":"like.added","postId":"p","userId":"u","occurredAt":"2026-01-01T00:00:00Z","version":9}}"#
            )
        },
        |i| {
            format!(
                r#"{{"eventId":"p{i}","type":"like.added","postId":"a/b","userId":"u","occurredAt":"2026-01-01T00:00:00Z"}}"#
            )
        },
    ];
    let payloads: Vec<Vec<u8>> = (0..STORM)
        .map(|i| shapes[i % shapes.len()](i).into_bytes())
        .collect();
    for chunk in payloads.chunks(1000) {
        h.publish_raw(chunk).await;
    }
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let log_path = std::env::temp_dir().join(format!("hotcount-storm-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut cmd = hotcount(&h);
    cmd.env("HOTCOUNT_METRICS_ADDR", metrics.to_string())
        .env("RUST_LOG", "warn")
        .args(["run", "--consumer", "storm"])
        .stdout(Stdio::null())
        .stderr(log);
    let mut child = cmd.spawn().expect("hotcount run starts");
    let sub = format!(
        "projects/{}/subscriptions/{}",
        common::PROJECT,
        common::SUBSCRIPTION
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let poison = loop {
        if let Ok(stream) = tokio::net::TcpStream::connect(metrics).await {
            drop(stream);
            let (_, body) = scrape::get(metrics, "/metrics").await;
            let acked = h.emulators.pubsub().stats(&sub).map_or(0, |s| s.acks);
            if acked >= STORM as u64 {
                break scrape::value(&body, "hotcount_events_poison_total");
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the storm is drained"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    signal(&child, "-TERM");
    let status = common::wait_with_timeout(&mut child, Duration::from_secs(30));
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(
        poison,
        Some(STORM as f64),
        "the metric counts every message"
    );
    let records = hotcount::ops::quarantine::list(&h.store, Some("storm"), 2 * STORM)
        .await
        .expect("quarantine records");
    assert_eq!(records.len(), STORM, "a record for every message");

    let text = std::fs::read_to_string(&log_path).expect("log");
    let _ = std::fs::remove_file(&log_path);
    let lines: Vec<&str> = text.lines().collect();
    let full = lines
        .iter()
        .filter(|l| l.contains("message quarantined"))
        .count();
    let summaries: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("more messages quarantined"))
        .collect();
    assert!(lines.len() <= 100, "{} lines:\n{text}", lines.len());
    assert!(
        full >= shapes.len(),
        "each reason logged in full first:\n{text}"
    );
    let summed: u64 = summaries
        .iter()
        .map(|l| {
            let after = l.split("more=").nth(1).expect("more= field");
            after
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .expect("a count")
        })
        .sum();
    assert_eq!(
        full as u64 + summed,
        STORM as u64,
        "every quarantine is either logged or in a summary line:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_that_does_not_end_by_the_deadline_exits_non_zero() {
    let h = Harness::start().await;
    // Acks get no answer for a minute: the drain cannot flush them.
    h.emulators
        .pubsub_faults()
        .add(hotcount_emulators::FaultSpec::latency(
            "Acknowledge",
            Duration::from_secs(60),
        ))
        .expect("fault");
    let mut cmd = hotcount(&h);
    cmd.args(["run", "--consumer", "cli", "--shutdown-deadline-secs", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("hotcount run starts");
    h.publish(&[Ev::like("e1", "p", "u1", 1)]).await;
    let counted = std::collections::BTreeMap::from([("p".to_string(), 1)]);
    assert_eq!(
        h.wait_for_counts(&counted, Duration::from_secs(30)).await,
        counted
    );
    let signalled = std::time::Instant::now();
    signal(&child, "-TERM");
    let status = common::wait_with_timeout(&mut child, Duration::from_secs(30));
    let took = signalled.elapsed();
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        use std::io::Read;
        let _ = stderr.read_to_string(&mut err);
    }
    assert!(
        took < Duration::from_secs(10),
        "the backstop ends it 2 s after the deadline: {took:?}"
    );
    assert!(
        !status.success(),
        "an incomplete drain must not look like a clean exit: {status:?}\n{err}"
    );
    assert!(err.contains("drain did not end"), "{err}");
}
