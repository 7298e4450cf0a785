//! The erasures of the chaos run: `hotcount users erase` as separate
//! processes, for a few users chosen by seed (the first a heavy user the
//! workload is given), started while those users' events are still being
//! published and delivered, the first one SIGKILLed midway and run again.
//!
//! Invariant: the users erased are fixed before anything is published (so
//! the truth can leave every event of theirs out), and an erasure counts as
//! ended only when its last process exited 0: a process killed here is run
//! again, one that fails by itself is reported with the tail of its output,
//! never run again silently.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use hotcount::config::{Endpoints, StoreLocation};
use hotcount::event::{to_json, LikeEvent, LikeKind, Version};
use hotcount_emulators::Emulators;
use rand::seq::SliceRandom as _;
use rand::Rng;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};

use super::config::{CONSUMER, PREFIX, PROJECT};
use crate::verify::VerifyReport;
use crate::workload::{post_id, Origin, OutMessage, Workload, PRODUCER};

/// The consumers' and the erasures' `--user-hash-key`.
pub const USER_HASH_KEY: &str = "hotcount-chaos-user-hash-key";

/// The consumers' and the erasures' `--tombstone-refresh-ms`: short, so an
/// erasure's wait for every replica to hold its tombstone (twice this)
/// stays well under a second.
pub const TOMBSTONE_REFRESH_MS: u64 = 200;

/// The heavy user the workload is given when erasures are on: a like on
/// every post, some undone and redone, spread over the whole publish.
pub const HEAVY_USER: &str = "user-heavy";

/// Longest one `users erase` process may take before it is killed and
/// reported as failed.
const ERASE_TIMEOUT: Duration = Duration::from_secs(60);

/// The consumers' flags for erasures: the key and the refresh interval.
pub(super) fn consumer_flags() -> Vec<String> {
    [
        "--user-hash-key",
        USER_HASH_KEY,
        "--tombstone-refresh-ms",
        &TOMBSTONE_REFRESH_MS.to_string(),
    ]
    .iter()
    .map(|f| f.to_string())
    .collect()
}

/// Gives `workload` the [`HEAVY_USER`]: a like on each of its posts, an
/// unlike on every third, a like again on every sixth, spread evenly
/// among the messages (each duplicate keeps pointing at its original).
/// The truth is left for the caller to recompute.
pub(super) fn add_heavy_user(workload: &mut Workload) {
    let now = Utc::now().timestamp_micros();
    let posts = workload.config.posts as usize;
    let mut heavy = Vec::new();
    for (seq, every) in [(1, 1), (2, 3), (3, 6)] {
        for post in (0..posts).filter(|p| p % every == 0) {
            heavy.push(heavy_event(post, seq, now));
        }
    }
    let old = std::mem::take(&mut workload.messages);
    let (n, h) = (old.len(), heavy.len());
    // Heavy event j goes right before original message (j + 1) * n / (h + 1).
    let place = |j: usize| (j + 1) * n / (h + 1);
    let mut new_index = Vec::with_capacity(n);
    let mut messages = Vec::with_capacity(n + h);
    let mut heavy = heavy.into_iter().enumerate().peekable();
    for (i, message) in old.into_iter().enumerate() {
        while let Some((_, event)) = heavy.next_if(|(j, _)| place(*j) <= i) {
            messages.push(event);
        }
        new_index.push(messages.len());
        messages.push(message);
    }
    let heavy = heavy.map(|(_, event)| event);
    messages.extend(heavy);
    for message in &mut messages {
        if let Origin::Duplicate { of } = &mut message.origin {
            *of = new_index[*of];
        }
    }
    workload.messages = messages;
}

/// The heavy user's event `seq` on post `post`: odd seqs like, even unlike.
fn heavy_event(post: usize, seq: i64, now_micros: i64) -> OutMessage {
    let liked = seq % 2 == 1;
    let kind = if liked {
        LikeKind::Added
    } else {
        LikeKind::Removed
    };
    let version = Version {
        seq,
        occurred_at_micros: now_micros,
        event_id: format!("lg-heavy-{post:05}-{seq}"),
    };
    let post_id = post_id(post);
    let event = LikeEvent::new(kind, &post_id, HEAVY_USER, &version, Some(PRODUCER))
        .expect("the heavy user's ids are safe (a prefix, a dash, letters or digits)");
    let origin = Origin::Event {
        post_id,
        user_id: HEAVY_USER.to_string(),
        seq,
        liked,
    };
    OutMessage {
        data: to_json(&event).into_bytes(),
        attributes: origin.attributes(),
        origin,
    }
}

/// The `n` users to erase: the [`HEAVY_USER`] first, then users drawn by
/// `rng` among those with at least three events of their own, leaving out
/// any id a poison message carries (its quarantine record would be
/// erased with it, and the poison count would no longer be the truth's).
pub(super) fn choose(workload: &Workload, n: usize, rng: &mut impl Rng) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    let mut events: BTreeMap<&str, u32> = BTreeMap::new();
    let mut poison = Vec::new();
    for message in &workload.messages {
        match &message.origin {
            Origin::Event { user_id, .. } => *events.entry(user_id.as_str()).or_default() += 1,
            Origin::Poison { .. } => poison.push(String::from_utf8_lossy(&message.data)),
            Origin::Duplicate { .. } => {}
        }
    }
    let mut candidates: Vec<&str> = events
        .into_iter()
        .filter(|(user, n)| *n >= 3 && *user != HEAVY_USER)
        .map(|(user, _)| user)
        .collect();
    candidates.shuffle(rng);
    // Poison payloads can be megabytes: only the users drawn are searched.
    let named = |user: &&str| poison.iter().any(|p| p.contains(*user));
    let mut users = vec![HEAVY_USER.to_string()];
    let others = candidates.into_iter().filter(|u| !named(u)).take(n - 1);
    users.extend(others.map(str::to_string));
    users
}

/// How to start `hotcount users erase` on the stage.
#[derive(Clone, Debug)]
pub(super) struct EraseSpec {
    /// The `hotcount` binary.
    pub(super) bin: PathBuf,
    /// The emulators, passed as `*_EMULATOR_HOST`.
    pub(super) endpoints: Endpoints,
    /// The store as the consumers reach it (a PostgreSQL one through the
    /// stage's proxy, so its cuts meet the erasure's commits too).
    pub(super) store: StoreLocation,
    /// Every process's output is appended here.
    pub(super) log: PathBuf,
}

/// What the erasures did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErasureReport {
    /// The users erased, the heavy one first.
    pub users: Vec<String>,
    /// `users erase` processes started (reruns included).
    pub runs: u64,
    /// Of those, SIGKILLed here midway (after a commit, before the last).
    pub killed_midway: u64,
    /// Runs again of an erasure killed midway.
    pub reruns: u64,
    /// Users whose erasure ended with its last process exiting 0.
    pub ended: usize,
    /// Each erasure that did not end so, with the tail of its output.
    pub failures: Vec<String>,
    /// When the first erasure started, seconds into the run.
    pub started_at_secs: f64,
    /// Wall time of all the erasures together.
    pub elapsed: Duration,
    /// (post, user) likes of the erased users in the truth with them: the
    /// likes the erasures had to remove (or the tombstones to keep out).
    pub likes_to_remove: usize,
    /// Posts holding those likes.
    pub posts: usize,
    /// Of those posts, the ones exact at rest against the truth without
    /// the erased users (set after the verification).
    pub posts_exact: usize,
}

/// When the erasures start: once this many messages are done with (the
/// erased users' earlier events counted, the rest still to come), or at
/// `give_up` whatever the count.
pub(super) struct Start {
    /// Messages published and no longer outstanding (pulled or pushed
    /// alike).
    pub(super) after_done: u64,
    /// The latest start.
    pub(super) give_up: Instant,
}

/// Waits for `start`, then erases each user in turn; the first is
/// SIGKILLed midway and run again.
pub(super) async fn run(
    spec: EraseSpec,
    users: Vec<String>,
    emulators: Arc<Emulators>,
    subscription: String,
    start: Start,
    started: Instant,
) -> ErasureReport {
    let mut report = ErasureReport {
        users: users.clone(),
        ..ErasureReport::default()
    };
    loop {
        let stats = emulators.pubsub().stats(&subscription).unwrap_or_default();
        let done = stats.published.saturating_sub(stats.unacked);
        if done >= start.after_done || Instant::now() > start.give_up {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let began = Instant::now();
    report.started_at_secs = (began - started).as_secs_f64();
    for (i, user) in users.iter().enumerate() {
        // The first erasure commits a few memberships per transaction, so
        // there is a "midway" to kill it at (the heavy user has ~150 by now).
        let first = i == 0;
        let chunk = if first { 4 } else { 20 };
        report.runs += 1;
        let mut end = erase_once(&spec, user, chunk, first).await;
        if end == End::Killed {
            report.killed_midway += 1;
            report.runs += 1;
            report.reruns += 1;
            end = erase_once(&spec, user, 20, false).await;
        }
        match end {
            End::Done => report.ended += 1,
            End::Killed => report.failures.push(format!("{user}: killed on its rerun")),
            End::Failed(why) => report.failures.push(format!("{user}: {why}")),
        }
    }
    report.elapsed = began.elapsed();
    report
}

/// How one `users erase` process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum End {
    /// Exit 0.
    Done,
    /// SIGKILLed here midway.
    Killed,
    /// Anything else, with the tail of its output.
    Failed(String),
}

/// Runs `hotcount users erase --chunk CHUNK USER`; with `kill_midway`,
/// SIGKILLs it at the first progress line a quarter of the way or more
/// (but before the end) of a pass.
async fn erase_once(spec: &EraseSpec, user: &str, chunk: usize, kill_midway: bool) -> End {
    let mut cmd = tokio::process::Command::new(&spec.bin);
    cmd.args(["users", "erase"])
        .args(crate::consumer::store_flag(&spec.store))
        .args(["--project", PROJECT])
        .args(["--collection-prefix", PREFIX, "--consumer", CONSUMER])
        .args(["--user-hash-key", USER_HASH_KEY])
        .args(["--tombstone-refresh-ms", &TOMBSTONE_REFRESH_MS.to_string()])
        .args(["--chunk", &chunk.to_string(), user]);
    crate::consumer::toward_emulators(&mut cmd, &spec.endpoints);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return End::Failed(format!("spawning {}: {e}", spec.bin.display())),
    };
    let mut stdout = child.stdout.take();
    let stdout_task = tokio::spawn(async move {
        let mut text = String::new();
        if let Some(out) = stdout.as_mut() {
            let _ = out.read_to_string(&mut text).await;
        }
        text
    });
    let mut lines = Vec::new();
    let mut killed = false;
    let watched = async {
        if let Some(stderr) = child.stderr.take() {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if kill_midway && !killed && is_midway(&line, user) {
                    killed = child.start_kill().is_ok();
                }
                lines.push(line);
            }
        }
        child.wait().await
    };
    let status = tokio::time::timeout(ERASE_TIMEOUT, watched).await;
    let stdout = stdout_task.await.unwrap_or_default();
    lines.extend(stdout.lines().map(str::to_string));
    append_log(&spec.log, user, chunk, &lines);
    let tail = || lines[lines.len().saturating_sub(8)..].join("\n");
    match status {
        _ if killed => End::Killed,
        Ok(Ok(status)) if status.success() => End::Done,
        Ok(Ok(status)) => End::Failed(format!("exited {status}; its output ends:\n{}", tail())),
        Ok(Err(e)) => End::Failed(format!("waiting for it: {e}")),
        Err(_) => End::Failed(format!(
            "still running after {ERASE_TIMEOUT:?}; its output ends:\n{}",
            tail()
        )),
    }
}

/// Whether `line` is a progress line of `user` ("USER: D/T memberships
/// erased") a quarter of the way or more into a pass, before its end.
fn is_midway(line: &str, user: &str) -> bool {
    let Some(rest) = line.strip_prefix(user).and_then(|r| r.strip_prefix(": ")) else {
        return false;
    };
    let Some((done, rest)) = rest.split_once('/') else {
        return false;
    };
    let total = rest.split_whitespace().next().unwrap_or_default();
    match (done.parse::<u64>(), total.parse::<u64>()) {
        (Ok(done), Ok(total)) => done < total && done * 4 >= total,
        _ => false,
    }
}

/// Appends one run's output to the erasures' log (best effort: the log is
/// for reading after a failure, the verdict does not depend on it).
fn append_log(log: &std::path::Path, user: &str, chunk: usize, lines: &[String]) {
    use std::io::Write as _;
    let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    else {
        return;
    };
    let _ = writeln!(file, "== users erase --chunk {chunk} {user}");
    for line in lines {
        let _ = writeln!(file, "{line}");
    }
}

/// Fills in `report`'s check at rest: the likes the erased `users` hold in
/// the truth with them (`messages`), the posts holding them, and how many
/// of those posts `verify` found exact, counts and rollups, against the
/// truth without them.
pub(super) fn check_posts(
    report: &mut ErasureReport,
    messages: &[OutMessage],
    users: &BTreeSet<String>,
    verify: &VerifyReport,
) {
    let likes = crate::workload::Truth::final_likes_of(messages, users);
    let posts: BTreeSet<&str> = likes.iter().map(|(post, _)| post.as_str()).collect();
    let mut wrong: BTreeSet<&str> = BTreeSet::new();
    wrong.extend(verify.mismatches.iter().map(|m| m.post_id.as_str()));
    wrong.extend(verify.rollup_mismatches.iter().map(|m| m.post_id.as_str()));
    report.likes_to_remove = likes.len();
    report.posts = posts.len();
    report.posts_exact = posts.iter().filter(|p| !wrong.contains(*p)).count();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{generate, WorkloadConfig};
    use rand::rngs::StdRng;
    use rand::SeedableRng as _;

    fn workload() -> Workload {
        let mut w = generate(&WorkloadConfig {
            events: 3_000,
            posts: 50,
            users: 300,
            ..WorkloadConfig::default()
        });
        add_heavy_user(&mut w);
        w
    }

    #[test]
    fn the_heavy_user_likes_every_post_spread_over_the_publish_and_duplicates_keep_their_originals()
    {
        let plain = generate(&WorkloadConfig {
            events: 3_000,
            posts: 50,
            users: 300,
            ..WorkloadConfig::default()
        });
        let w = workload();
        assert_eq!(w.messages.len(), plain.messages.len() + 50 + 17 + 9);
        let heavy: Vec<usize> = (w.messages.iter().enumerate())
            .filter(|(_, m)| matches!(&m.origin, Origin::Event { user_id, .. } if user_id == HEAVY_USER))
            .map(|(i, _)| i)
            .collect();
        let n = w.messages.len();
        assert!(heavy[0] < n / 10 && heavy[heavy.len() - 1] > n * 9 / 10);
        for m in &w.messages {
            if let Origin::Duplicate { of } = m.origin {
                assert_eq!(w.messages[of].data, m.data);
            }
        }
        let with_heavy = crate::workload::Truth::compute(w.config.clone(), &w.messages);
        let liked: i64 = with_heavy.total - plain.truth.total;
        assert_eq!(liked, 50 - 17 + 9, "liked, unliked on every third, relikes");
    }

    #[test]
    fn the_users_chosen_are_the_heavy_one_then_users_no_poison_names_by_seed() {
        let w = workload();
        let a = choose(&w, 3, &mut StdRng::seed_from_u64(1));
        let b = choose(&w, 3, &mut StdRng::seed_from_u64(1));
        assert_eq!(a, b);
        assert_eq!(a.len(), 3);
        assert_eq!(a[0], HEAVY_USER);
        for user in &a[1..] {
            for m in &w.messages {
                if matches!(m.origin, Origin::Poison { .. }) {
                    assert!(!String::from_utf8_lossy(&m.data).contains(user.as_str()));
                }
            }
        }
        assert!(choose(&w, 0, &mut StdRng::seed_from_u64(1)).is_empty());
    }

    #[test]
    fn a_kill_waits_for_a_quarter_of_a_pass_and_never_comes_at_its_end() {
        let at = |line: &str| is_midway(line, "u-1");
        assert!(!at("u-1: 1/40 memberships erased"));
        assert!(at("u-1: 10/40 memberships erased"));
        assert!(!at("u-1: 40/40 memberships erased"));
        assert!(!at("u-1: 1/1 memberships erased"));
        assert!(!at("u-10: 20/40 memberships erased"));
        assert!(!at("likes removed 3"));
    }
}
