//! The load generator's webhook sink for milestone notifications (the
//! emulators' receiver that keys on `Idempotency-Key`, on loopback) and
//! the check of what it received against the truth.
//!
//! Invariant: the verdict comes from the truth (the milestones each post's
//! final count is at or above) and from what the sink recorded, never from
//! the service's own counters.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use hotcount_emulators::webhook::{Fate, Sink, SinkConfig, SinkFaults};

use crate::run_error::RunError;
use crate::workload::Truth;

/// The secret the load generator's consumers sign with.
pub const SECRET: &str = "hotcount-loadgen-milestones";

/// Starts a sink on loopback with `faults`, checking [`SECRET`].
pub async fn start_sink(faults: SinkFaults) -> Result<Sink, RunError> {
    Sink::start(SinkConfig {
        secret: Some(SECRET.to_string()),
        faults,
    })
    .await
    .map_err(|e| RunError::Start(format!("milestone sink: {e}")))
}

/// The keys the truth says must be delivered: `{consumer}:{post}:{n}` for
/// each milestone at or below each post's final count.
pub fn expected_keys(truth: &Truth, thresholds: &[i64], consumer: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for (post, &count) in &truth.counts {
        for &n in thresholds.iter().filter(|&&n| n <= count) {
            keys.insert(format!("{consumer}:{post}:{n}"));
        }
    }
    keys
}

/// What the sink received, against the truth.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MilestoneReport {
    /// Keys the truth crosses.
    pub expected: usize,
    /// Keys processed by the sink (each once: its dedupe).
    pub delivered: usize,
    /// Expected keys not processed.
    pub missing: Vec<String>,
    /// Processed keys the truth's final counts do not reach (a post that
    /// reached a milestone and then fell below it, by unlikes or an
    /// erasure: allowed, reported).
    pub above_final: usize,
    /// Processed keys above every count the post could ever have had
    /// (its distinct likers, erased ones included): never allowed. Set by
    /// [`beyond_reach`]'s caller.
    pub beyond_reach: Vec<String>,
    /// Requests that reached the sink, in all.
    pub requests: usize,
    /// Requests repeating a key the sink had processed (the receiver's
    /// dedupe answered them).
    pub repeats: usize,
    /// Requests whose signature did not verify.
    pub bad_signatures: usize,
    /// Requests the sink failed on purpose (500, hang, close).
    pub faults: usize,
    /// Requests whose body differs from the body processed for their key
    /// (a repeated call must be the same call).
    pub differing_bodies: usize,
    /// Delivered keys per post, for the most liked posts (post, milestones).
    pub top: Vec<(String, Vec<i64>)>,
    /// Milestone records in the store (set by the caller that reads them).
    pub records: usize,
    /// Of those, not done (set by the caller that reads them).
    pub records_not_done: usize,
    /// The first record not done, described (set by the caller).
    pub first_not_done: Option<String>,
}

impl MilestoneReport {
    /// Every expected key delivered and every request signed.
    pub fn is_exact(&self) -> bool {
        self.missing.is_empty() && self.bad_signatures == 0 && self.differing_bodies == 0
    }
}

/// Compares what `sink` received with `expected`.
pub fn check(sink: &Sink, expected: &BTreeSet<String>, truth: &Truth) -> MilestoneReport {
    let bodies: BTreeMap<String, _> = sink.processed().into_iter().collect();
    let processed: BTreeSet<String> = bodies.keys().cloned().collect();
    let requests = sink.requests();
    let differing_bodies = requests
        .iter()
        .filter(|r| bodies.get(&r.key).is_some_and(|b| *b != r.body))
        .count();
    let mut per_post: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for key in &processed {
        if let Some((post, n)) = parse_key(key) {
            per_post.entry(post.to_string()).or_default().push(n);
        }
    }
    for reached in per_post.values_mut() {
        reached.sort_unstable();
    }
    let mut top: Vec<(String, Vec<i64>)> = per_post.into_iter().collect();
    top.sort_by_key(|(post, _)| std::cmp::Reverse(truth.expected(post)));
    top.truncate(3);
    MilestoneReport {
        expected: expected.len(),
        delivered: processed.len(),
        missing: expected.difference(&processed).cloned().collect(),
        above_final: processed.difference(expected).count(),
        requests: requests.len(),
        repeats: requests
            .iter()
            .filter(|r| matches!(r.fate, Fate::Replayed | Fate::ReplayedThenHung))
            .count(),
        bad_signatures: requests
            .iter()
            .filter(|r| r.signature_ok == Some(false))
            .count(),
        faults: requests
            .iter()
            .filter(|r| {
                matches!(
                    r.fate,
                    Fate::Failed | Fate::Closed | Fate::ProcessedThenHung | Fate::ReplayedThenHung
                )
            })
            .count(),
        differing_bodies,
        top,
        beyond_reach: Vec::new(),
        records: 0,
        records_not_done: 0,
        first_not_done: None,
    }
}

/// The keys `sink` processed whose milestone is above `reach` (per post,
/// the highest count it could ever have had): a milestone sent for a count
/// that never was.
pub fn beyond_reach(sink: &Sink, reach: &BTreeMap<String, i64>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, _) in sink.processed() {
        let above =
            parse_key(&key).is_none_or(|(post, n)| n > reach.get(post).copied().unwrap_or(0));
        if above {
            out.push(key);
        }
    }
    out.sort();
    out
}

/// `{consumer}:{post}:{n}` as (post, n).
fn parse_key(key: &str) -> Option<(&str, i64)> {
    let (rest, n) = key.rsplit_once(':')?;
    let n = n.parse::<i64>().ok()?;
    let post = rest.split_once(':').map_or(rest, |(_, post)| post);
    Some((post, n))
}

/// Waits (bounded by `timeout`) until `sink` has processed every key of
/// `expected`; returns whether it did.
pub async fn wait_for(sink: &Sink, expected: &BTreeSet<String>, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let processed: BTreeSet<String> = sink.processed().into_iter().map(|(k, _)| k).collect();
        if expected.is_subset(&processed) {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
