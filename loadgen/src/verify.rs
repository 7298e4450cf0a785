//! Compares what hotcount stored with the [`Truth`], post by post, and checks
//! the shard invariant of every post seen anywhere.
//!
//! Invariant: a [`VerifyReport`] is exact only if every post in the truth,
//! the counter shards or the memberships has sum(shards) == expected, and
//! sum(shards) == its memberships with `liked == true`.

use std::collections::{BTreeMap, BTreeSet};

use hotcount::config::{Endpoints, Target};

use crate::readback::{self, MembershipRow, ReadError, Reader};
use crate::workload::Truth;

/// A post whose stored count differs from the truth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The post.
    pub post_id: String,
    /// Count from the truth (0 for a post absent from it).
    pub expected: i64,
    /// Sum of its counter shards.
    pub actual: i64,
    /// Its membership documents with `liked == true`.
    pub liked_members: i64,
}

/// A post whose shards disagree with its memberships.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvariantViolation {
    /// The post.
    pub post_id: String,
    /// Sum of its counter shards.
    pub shard_sum: i64,
    /// Its membership documents with `liked == true`.
    pub liked_members: i64,
}

/// A post whose rollup differs from the truth at rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollupMismatch {
    /// The post.
    pub post_id: String,
    /// Count from the truth (0 for a post absent from it).
    pub expected: i64,
    /// Its rollup's `likes`; `None` without a rollup.
    pub rollup: Option<i64>,
}

/// The outcome of a verification.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Posts compared (truth, shards and memberships together).
    pub posts_checked: usize,
    /// Posts whose count is exact.
    pub posts_exact: usize,
    /// Posts whose count differs from the truth, by post id.
    pub mismatches: Vec<Mismatch>,
    /// Posts where sum(shards) != liked memberships, by post id.
    pub invariant_violations: Vec<InvariantViolation>,
    /// Expected likes, all posts together.
    pub expected_total: i64,
    /// Stored likes (sum of all shards), all posts together.
    pub actual_total: i64,
    /// Counter shard documents read.
    pub shards_read: usize,
    /// Membership documents read.
    pub memberships_read: usize,
    /// Membership documents the truth expects (one per (post, user) touched).
    pub memberships_expected: u64,
    /// Membership documents of a user the truth says was erased (should be
    /// none: an erasure with a tombstone deletes them, and a later event of
    /// the user writes none).
    pub erased_memberships: usize,
    /// Quarantine records found under the prefix (informational: not part of
    /// [`VerifyReport::is_exact`]).
    pub quarantined: usize,
    /// Of those, valid events the store refused (should be none).
    pub quarantined_events: usize,
    /// Quarantine records by their reason's kind.
    pub quarantined_by_reason: std::collections::BTreeMap<&'static str, usize>,
    /// Poison messages the truth covers (each should be quarantined once).
    pub poison_expected: u64,
    /// Whether shards and memberships were read at one read time; if not,
    /// invariant violations may be an artefact of commits between the reads.
    pub consistent_snapshot: bool,
    /// Whether rollups were checked (the service ran with them on).
    pub rollups_checked: bool,
    /// Posts whose rollup equals the truth (of the posts checked).
    pub rollups_exact: usize,
    /// Posts whose rollup differs from the truth (missing for a post whose
    /// count is not 0), by post id; empty unless `rollups_checked`.
    pub rollup_mismatches: Vec<RollupMismatch>,
}

impl VerifyReport {
    /// "N of M" rollups exact at rest, for a summary table; `None` when
    /// the rollups were not checked.
    pub fn rollups_exact_cell(&self) -> Option<String> {
        self.rollups_checked.then(|| {
            format!(
                "{} of {}",
                self.rollups_exact,
                self.rollups_exact + self.rollup_mismatches.len()
            )
        })
    }

    /// Every post exact and the invariant kept everywhere (and, when
    /// checked, every rollup equal to the truth).
    pub fn is_exact(&self) -> bool {
        self.mismatches.is_empty()
            && self.invariant_violations.is_empty()
            && self.rollup_mismatches.is_empty()
    }
}

/// Verification could not read what it needs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("verify: {0}")]
pub struct VerifyError(#[from] pub ReadError);

impl VerifyError {
    /// Whether reading again may succeed.
    pub fn is_retryable(&self) -> bool {
        self.0.is_retryable()
    }
}

/// Connects to the store of `target` (Firestore or PostgreSQL) and verifies
/// it against `truth`; with `rollups`, every post's rollup too (run with the
/// service stopped: rollups are exact at rest).
pub async fn connect_and_verify(
    endpoints: &Endpoints,
    target: &Target,
    truth: &Truth,
    rollups: bool,
) -> Result<VerifyReport, VerifyError> {
    let db = readback::connect(endpoints, target).await?;
    verify(&db, truth, rollups).await
}

/// Reads every counter shard and membership (and rollup) of the store and
/// compares them with `truth`; with `rollups`, each rollup too.
pub async fn verify(
    db: &Reader,
    truth: &Truth,
    rollups: bool,
) -> Result<VerifyReport, VerifyError> {
    let snapshot = readback::read_snapshot(db).await?;
    let mut report = compare(truth, &snapshot.counts, &snapshot.memberships);
    report.shards_read = snapshot.shards_read;
    report.consistent_snapshot = snapshot.consistent;
    report.quarantined = snapshot.quarantined;
    report.quarantined_events = snapshot.quarantined_events;
    report.quarantined_by_reason = snapshot.quarantined_by_reason.clone();
    if rollups {
        compare_rollups(&mut report, truth, &snapshot.counts, &snapshot.rollups);
    }
    Ok(report)
}

/// Checks every post of the truth, the shards or the rollups: its rollup
/// equals the truth (a post whose count is 0 may have none).
pub fn compare_rollups(
    report: &mut VerifyReport,
    truth: &Truth,
    counts: &BTreeMap<String, i64>,
    rollups: &BTreeMap<String, i64>,
) {
    let mut posts: BTreeSet<&str> = truth.counts.keys().map(String::as_str).collect();
    posts.extend(counts.keys().map(String::as_str));
    posts.extend(rollups.keys().map(String::as_str));
    report.rollups_checked = true;
    for post in posts {
        let expected = truth.expected(post);
        let rollup = rollups.get(post).copied();
        if rollup.unwrap_or(0) == expected && (rollup.is_some() || expected == 0) {
            report.rollups_exact += 1;
        } else {
            report.rollup_mismatches.push(RollupMismatch {
                post_id: post.to_string(),
                expected,
                rollup,
            });
        }
    }
}

/// Compares stored shard sums and memberships with `truth` (pure).
pub fn compare(
    truth: &Truth,
    counts: &BTreeMap<String, i64>,
    memberships: &[MembershipRow],
) -> VerifyReport {
    let liked = readback::liked_per_post(memberships);
    let mut posts: BTreeSet<&str> = truth.counts.keys().map(String::as_str).collect();
    posts.extend(counts.keys().map(String::as_str));
    posts.extend(liked.keys().copied());
    let mut report = VerifyReport {
        posts_checked: posts.len(),
        expected_total: truth.total,
        actual_total: counts.values().sum(),
        memberships_read: memberships.len(),
        memberships_expected: truth.memberships,
        erased_memberships: memberships
            .iter()
            .filter(|m| truth.erased_users.contains(&m.user_id))
            .count(),
        poison_expected: truth.poison,
        ..Default::default()
    };
    for post in posts {
        let expected = truth.expected(post);
        let actual = counts.get(post).copied().unwrap_or(0);
        let liked_members = liked.get(post).copied().unwrap_or(0);
        if actual != liked_members {
            report.invariant_violations.push(InvariantViolation {
                post_id: post.to_string(),
                shard_sum: actual,
                liked_members,
            });
        }
        if actual == expected {
            report.posts_exact += 1;
        } else {
            report.mismatches.push(Mismatch {
                post_id: post.to_string(),
                expected,
                actual,
                liked_members,
            });
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::WorkloadConfig;

    fn truth(counts: &[(&str, i64)]) -> Truth {
        let counts: BTreeMap<String, i64> =
            counts.iter().map(|(p, n)| (p.to_string(), *n)).collect();
        Truth {
            config: WorkloadConfig::default(),
            messages: 0,
            memberships: 0,
            poison: 0,
            total: counts.values().sum(),
            counts,
            erased_users: BTreeSet::new(),
        }
    }

    fn row(post: &str, user: &str, liked: bool) -> MembershipRow {
        MembershipRow {
            post_id: post.into(),
            user_id: user.into(),
            liked,
            occurred_at_micros: 0,
            updated_at_micros: None,
        }
    }

    #[test]
    fn exact_store_verifies() {
        let t = truth(&[("a", 2), ("b", 0)]);
        let counts = BTreeMap::from([("a".to_string(), 2)]);
        let rows = [
            row("a", "1", true),
            row("a", "2", true),
            row("b", "1", false),
        ];
        let r = compare(&t, &counts, &rows);
        assert!(r.is_exact(), "{r:?}");
        assert_eq!((r.posts_checked, r.posts_exact), (2, 2));
    }

    #[test]
    fn overcount_is_a_mismatch_and_an_invariant_violation() {
        let t = truth(&[("a", 1)]);
        let counts = BTreeMap::from([("a".to_string(), 2)]);
        let r = compare(&t, &counts, &[row("a", "1", true)]);
        assert!(!r.is_exact());
        assert_eq!(
            r.mismatches,
            vec![Mismatch {
                post_id: "a".into(),
                expected: 1,
                actual: 2,
                liked_members: 1
            }]
        );
        assert_eq!(r.invariant_violations.len(), 1);
    }

    #[test]
    fn a_rollup_must_equal_the_truth_and_exist_for_a_post_counted() {
        let t = truth(&[("a", 2), ("b", 1), ("c", 0)]);
        let counts = BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 1)]);
        let rollups = BTreeMap::from([("a".to_string(), 2), ("z".to_string(), 4)]);
        let mut r = VerifyReport::default();
        compare_rollups(&mut r, &t, &counts, &rollups);
        assert!(!r.is_exact());
        assert_eq!(r.rollups_exact, 2, "a exact, c has none and needs none");
        let wrong: Vec<(&str, i64, Option<i64>)> = (r.rollup_mismatches.iter())
            .map(|m| (m.post_id.as_str(), m.expected, m.rollup))
            .collect();
        assert_eq!(wrong, [("b", 1, None), ("z", 0, Some(4))]);
    }

    #[test]
    fn a_membership_of_an_erased_user_is_counted_even_when_unliked() {
        let mut t = truth(&[("a", 1)]);
        t.erased_users.insert("gone".into());
        let counts = BTreeMap::from([("a".to_string(), 1)]);
        let rows = [row("a", "1", true), row("a", "gone", false)];
        let r = compare(&t, &counts, &rows);
        assert!(r.is_exact(), "the counts are right: {r:?}");
        assert_eq!(r.erased_memberships, 1);
    }

    #[test]
    fn posts_unknown_to_the_truth_are_checked() {
        let t = truth(&[]);
        let counts = BTreeMap::from([("ghost".to_string(), 1)]);
        let r = compare(&t, &counts, &[row("ghost", "1", true)]);
        assert_eq!(r.mismatches[0].post_id, "ghost");
        assert!(r.invariant_violations.is_empty());
    }
}
