//! `hotcount run` replicas as child processes of any build, each logging
//! (at info) to a file of its own, stopped by SIGKILL or by SIGTERM and a
//! drain; and the rollup checks the tests that run them share: which
//! posts' rollups differ from the expected counts, now or after a bound.
//! A replica's log file is removed when it is stopped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{Ev, Harness};

/// Longest wait for a replica to start, show a log line or drain.
const WAIT: Duration = Duration::from_secs(60);

/// One `hotcount run` child process.
pub struct Replica {
    child: Child,
    log: PathBuf,
    name: String,
}

impl Replica {
    /// Starts `command` (a `hotcount run ...`), its stderr in a log file
    /// named after `name`, at `RUST_LOG=info`.
    pub fn spawn(mut command: Command, name: &str) -> Self {
        let log = std::env::temp_dir().join(format!(
            "hotcount-replica-{name}-{}-{}.log",
            std::process::id(),
            rand::random::<u32>()
        ));
        let file = std::fs::File::create(&log).expect("log file");
        command
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(file);
        let child = command.spawn().expect("hotcount runs");
        Self {
            child,
            log,
            name: name.to_string(),
        }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log holds `text`; fails the test if the
    /// process exits first.
    pub async fn wait_for_log(&mut self, text: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !self.log().contains(text) {
            if let Some(status) = self.child.try_wait().expect("wait") {
                panic!("{} exited {status}:\n{}", self.name, self.log());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: no {text:?} in the log: {}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (bounded) until it is consuming.
    pub async fn running(mut self) -> Self {
        self.wait_for_log("hotcount running").await;
        self
    }

    /// SIGKILL: nothing drains.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }

    /// SIGTERM once it is consuming; it drains and exits 0.
    pub async fn stop(self) {
        self.running().await.terminate();
    }

    /// SIGTERM now; it drains and exits 0.
    pub fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let exited = super::wait_with_timeout(&mut self.child, WAIT);
        assert!(
            exited.success(),
            "{} drained and exited 0: {exited:?}\n{}",
            self.name,
            self.log()
        );
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `bin` (any build) pointed at `h`'s emulators and project as
/// [`Harness::command`] points this build.
pub fn command_of(h: &Harness, bin: &Path) -> Command {
    let template = h.command();
    let mut command = Command::new(bin);
    for (key, value) in template.get_envs() {
        if let Some(value) = value {
            command.env(key, value);
        }
    }
    command
}

/// `hotcount run` of `bin` against `h`, with the consumer, subscription,
/// flush and shard flags for tests, and `--store` on PostgreSQL.
pub fn run_command(h: &Harness, bin: &Path) -> Command {
    let mut command = command_of(h, bin);
    command
        .args([
            "run",
            "--consumer",
            "c1",
            "--subscription",
            super::SUBSCRIPTION,
        ])
        .args(["--flush-interval-ms", "20", "--shards", "4"]);
    if let Some(url) = h.postgres_url() {
        command.args(["--store", url]);
    }
    command
}

/// Likes over `posts` posts (post 0 the busiest: `users / (p + 1)` users
/// on post `p`), every `unlike_every`-th of them taken back; users and
/// event ids tagged `tag`, so each call's events change the counts.
pub fn workload(posts: usize, users: usize, unlike_every: usize, tag: &str) -> Vec<Ev> {
    let mut events = Vec::new();
    for p in 0..posts {
        let post = format!("post-{p}");
        for u in 0..users / (p + 1) {
            let user = format!("{tag}-user-{u}");
            events.push(Ev::like(&format!("{tag}-{p}-{u}"), &post, &user, 1));
            if u % unlike_every == 0 {
                events.push(Ev::unlike(&format!("{tag}-{p}-{u}-x"), &post, &user, 2));
            }
        }
    }
    events
}

/// The posts of `want` whose rollup is missing or differs from it.
pub async fn wrong_rollups(h: &Harness, want: &BTreeMap<String, i64>) -> Vec<String> {
    let rollups = h.store.rollups().await.expect("rollups");
    want.iter()
        .filter(|(post, count)| rollups.get(*post).map(|r| r.0) != Some(**count))
        .map(|(post, _)| post.clone())
        .collect()
}

/// Waits (bounded by `bound`) until every rollup of `want` is exact;
/// returns the posts still wrong then.
pub async fn wrong_after(
    h: &Harness,
    want: &BTreeMap<String, i64>,
    bound: Duration,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let wrong = wrong_rollups(h, want).await;
        if wrong.is_empty() || tokio::time::Instant::now() > deadline {
            return wrong;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
