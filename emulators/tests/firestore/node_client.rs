//! Google's Node client (`@google-cloud/firestore`, pinned in
//! `tests/node/package-lock.json`) against the emulator: one client instance
//! watches many documents and a few queries, then writes through the same
//! instance, and every listener must see every change. That client opens one
//! Listen stream per `onSnapshot`, all on one HTTP/2 connection shared with
//! its writes (issue 38: 200 listeners stalled the client's first update).
//!
//! Needs `node` and `npm ci --prefix emulators/tests/node` (CI's `.ci/run`
//! does it); without them the tests fail and say so.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use hotcount_emulators::Emulators;

use crate::support::*;

/// The whole script, 1,000 listeners included, takes a few seconds; this
/// bound only turns a hang into a failure.
const SCRIPT_LIMIT: Duration = Duration::from_secs(60);

fn project_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node")
}

/// Runs `watch_many.js` with `docs` watched documents and `queries` bucket
/// queries (plus one over the whole collection) against `emu`; panics with
/// the script's output unless it reports success.
async fn watch_many(emu: &Emulators, docs: usize, queries: usize) -> String {
    let dir = project_dir();
    assert!(
        dir.join("node_modules/@google-cloud/firestore").is_dir(),
        "Google's Node client is not installed: run `npm ci --prefix emulators/tests/node` \
         (needs node and npm; .ci/run does it)"
    );
    let child = tokio::process::Command::new("node")
        .arg("watch_many.js")
        .arg(docs.to_string())
        .arg(queries.to_string())
        .current_dir(&dir)
        .env("FIRESTORE_EMULATOR_HOST", emu.firestore_addr().to_string())
        .env("WATCH_MANY_DEADLINE_MS", "45000")
        // Loopback only: no probe of the GCE metadata server.
        .env("METADATA_SERVER_DETECTION", "none")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("`node` runs (Node.js 18 or later must be on PATH)");
    let out = tokio::time::timeout(SCRIPT_LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!("watch_many.js {docs} {queries}: not done within {SCRIPT_LIMIT:?}")
        })
        .expect("watch_many.js output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "watch_many.js {docs} {queries} failed ({}):\n{stdout}{stderr}",
        out.status
    );
    stdout.into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_client_watching_200_documents_writes_through_the_same_connection() {
    let emu = start().await;
    let out = watch_many(&emu, 200, 3).await;
    assert!(out.starts_with("ok: 200 documents and 4 queries"), "{out}");
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_client_watching_1000_documents_writes_through_the_same_connection() {
    let emu = start().await;
    let out = watch_many(&emu, 1000, 3).await;
    assert!(out.starts_with("ok: 1000 documents and 4 queries"), "{out}");
    emu.shutdown().await;
}
