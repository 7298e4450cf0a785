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
