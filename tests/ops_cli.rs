//! The operator commands as an operator runs them: `reconcile` (exit status
//! and report), `replay --dry-run`, `dlq inspect|replay`.

mod common;
#[path = "support/corrupt.rs"]
mod corrupt;

use std::process::{Command, Output};
use std::time::Duration;

use common::{expected, Ev, Harness};

fn hotcount(h: &Harness, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hotcount"))
        .env(
            "PUBSUB_EMULATOR_HOST",
            h.emulators.pubsub_addr().to_string(),
        )
        .env(
            "FIRESTORE_EMULATOR_HOST",
            h.emulators.firestore_addr().to_string(),
        )
        .env("HOTCOUNT_PROJECT", common::PROJECT)
        .env("RUST_LOG", "warn")
        .args(args)
        .output()
        .expect("hotcount runs")
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

    corrupt::counter_shard(&h.store, "p", 3, 2).await;
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
