//! `hotcount count --live` across dropped Listen streams (Firestore in the
//! emulator): a resumed stream sends only what changed since its token, so
//! every post keeps the value last printed; nothing unchanged is printed
//! again, least of all as `POST 0 -`; a deletion the server can no longer
//! replay is found through the existence filter.

mod common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::{Ev, Harness, SubscriptionOptions};
use gcloud_sdk::google::firestore::v1::firestore_client::FirestoreClient;
use gcloud_sdk::google::firestore::v1::{write::Operation, CommitRequest, Write};
use gcloud_sdk::tonic::Code;
use hotcount_emulators::firestore::FirestoreConfig;
use hotcount_emulators::{EmulatorsConfig, FaultKind, FaultSpec};

const WAIT: Duration = Duration::from_secs(60);

/// `hotcount count --live POSTS` as a child process: its stdout lines
/// arrive on the returned receiver.
fn count_live(h: &Harness, posts: &[&str]) -> (Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = h
        .command()
        .args(["count", "--live"])
        .args(posts)
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

/// Every line of `lines` up to and including the first equal to `until`
/// (bounded wait).
async fn lines_until(lines: &std::sync::mpsc::Receiver<String>, until: &str) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        match lines.try_recv() {
            Ok(line) => {
                let last = line.starts_with(until);
                seen.push(line);
                if last {
                    return seen;
                }
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no line {until:?}; saw {seen:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                panic!("count --live exited; saw {seen:?}")
            }
        }
    }
}

fn drop_listen_stream_once(h: &Harness) {
    h.emulators
        .firestore_faults()
        .add(
            FaultSpec::new(FaultKind::DropStream)
                .method("Listen")
                .times(1),
        )
        .expect("fault rule");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_live_keeps_each_posts_value_across_a_dropped_stream() {
    let h = Harness::start().await;
    let (mut live, lines) = count_live(&h, &["p1", "p2"]);
    let consumer = h.spawn(h.run_args("c1", &["--rollup-interval-ms", "200"]));
    h.publish(&[Ev::like("a", "p1", "u1", 1), Ev::like("b", "p2", "u1", 1)])
        .await;
    lines_until(&lines, "p1\t1\t").await;
    lines_until(&lines, "p2\t1\t").await;

    // The stream is dropped; count --live resumes from its token. Only p1
    // changes afterwards: p2 still has its like and must not be printed.
    drop_listen_stream_once(&h);
    let give_up = tokio::time::Instant::now() + WAIT;
    while h
        .emulators
        .firestore_faults()
        .fired()
        .get(&FaultKind::DropStream)
        != Some(&1)
    {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the stream was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.publish(&[Ev::like("c", "p1", "u2", 1)]).await;
    let mut after = lines_until(&lines, "p1\t2\t").await;
    h.publish(&[Ev::like("d", "p1", "u3", 1)]).await;
    after.extend(lines_until(&lines, "p1\t3\t").await);
    let p2: Vec<&String> = after.iter().filter(|l| l.starts_with("p2\t")).collect();
    assert!(
        p2.is_empty(),
        "p2 did not change, yet count --live printed {p2:?}"
    );

    consumer.stop().await;
    live.kill().expect("stop count --live");
    let _ = live.wait();
}

/// Deletes `name` straight through the emulator's gRPC API.
async fn delete_document(h: &Harness, name: &str) {
    let mut raw = FirestoreClient::connect(h.emulators.firestore_endpoint())
        .await
        .expect("raw client connects");
    raw.commit(CommitRequest {
        database: h.db.layout().database.clone(),
        writes: vec![Write {
            operation: Some(Operation::Delete(name.to_string())),
            ..Default::default()
        }],
        ..Default::default()
    })
    .await
    .expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_live_finds_a_deletion_it_missed_through_the_existence_filter() {
    // Deletions are forgotten one (emulated) second after they happen.
    let config = EmulatorsConfig {
        firestore: FirestoreConfig {
            version_retention: Duration::from_secs(1),
            ..Default::default()
        },
        ..Default::default()
    };
    let h = Harness::start_with_emulators(SubscriptionOptions::default(), config).await;
    let (mut live, lines) = count_live(&h, &["p1", "p2"]);
    let consumer = h.spawn(h.run_args("c1", &["--rollup-interval-ms", "200"]));
    h.publish(&[Ev::like("a", "p1", "u1", 1), Ev::like("b", "p2", "u1", 1)])
        .await;
    lines_until(&lines, "p1\t1\t").await;
    lines_until(&lines, "p2\t1\t").await;
    consumer.stop().await;

    // While count --live cannot listen, p2's rollup is deleted and the
    // deletion forgotten: its resumed stream can only send the target's
    // count (1, p1), which disagrees with the 2 documents it holds.
    let faults = h.emulators.firestore_faults();
    faults
        .add(FaultSpec::error("Listen", Code::Unavailable))
        .expect("fault rule");
    drop_listen_stream_once(&h);
    let give_up = tokio::time::Instant::now() + WAIT;
    while faults.fired().get(&FaultKind::DropStream) != Some(&1) {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the stream was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    delete_document(&h, &h.db.layout().rollup("p2")).await;
    h.emulators.clock().advance(Duration::from_secs(5));
    h.emulators.firestore().sweep();
    faults.clear();

    let after = lines_until(&lines, "p2\t").await;
    assert_eq!(after, ["p2\t0\t-"], "p1 unchanged, p2 gone");
    live.kill().expect("stop count --live");
    let _ = live.wait();
}
