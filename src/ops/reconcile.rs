//! `hotcount reconcile`: compares each post's counter shards with the number
//! of its liked memberships in one snapshot, and repairs a difference with a
//! correction that commits only if no other correction of the post did since.
//!
//! Invariant: a repair attempt reads the post's liked memberships (count),
//! its counter shards and its guard document `reconcile/{post}` in one
//! read-only transaction, so both sides of the comparison are the state at
//! one read time `t`, whatever commits meanwhile. It then commits, in one
//! non-transactional Commit, the increment `d = liked - shards` on shard 0
//! and the guard, on the precondition that the guard is unchanged since `t`
//! (`update_time` as read, or `exists = false`). So the commit applies only
//! if no correction of the post committed after `t`: two repairs of a post
//! that read before either committed cannot both apply; the loser gets
//! FAILED_PRECONDITION / ALREADY_EXISTS and retries from fresh reads.
//!
//! Why consumers need no lock and no precondition: every consumer commit
//! writes a post's memberships and the matching increments together
//! (`store::firestore`), so it leaves `liked - shards` of every post
//! unchanged, even when it creates a new membership (a phantom no query
//! could have locked) or a new counter shard. Hence `liked - shards` at the
//! correction's commit is `d` plus whatever non-hotcount writes (the drift
//! being repaired) landed after `t`, and the correction leaves exactly that
//! later drift, never a consumer's like subtracted or counted twice. The
//! repair takes no lock, so it never makes a consumer wait or abort, and a
//! busy post's traffic cannot starve it. An attempt whose Commit answer was
//! lost finds its own `repairId` in the guard and is not applied twice.
//! Reports without repair read in one read-only transaction too.
//!
//! The same command runs on PostgreSQL ([`Reconcilable`] for [`PgDb`]):
//! both sides read in one REPEATABLE READ READ ONLY snapshot, a repair in
//! one REPEATABLE READ transaction whose write to shard 0 fails (and is
//! retried from a fresh snapshot) if another correction wrote it since
//! ([`PgDb::repair_post`] states why that is exact).

use std::collections::BTreeMap;
use std::future::Future;

use futures::future::BoxFuture;

use crate::pipeline::rollup;
use crate::store::firestore::codec::Correction;
use crate::store::firestore::{FirestoreDb, Read};
use crate::store::postgres::{PgDb, PostTally};
use crate::store::selected::SelectedDb;
use crate::store::StoreError;

/// A store reconcile compares and repairs: one per store, so the command
/// has one code path ([`reconcile_all`], [`reconcile_post`]).
pub trait Reconcilable: Sync {
    /// Every post with counter shards or liked memberships, both sides read
    /// at one snapshot, none repaired; sorted by post id.
    fn compare_all(&self) -> impl Future<Output = Result<Vec<PostReport>, StoreError>> + Send;

    /// One post compared at one snapshot and, with `repair`, corrected.
    fn compare_post(
        &self,
        post_id: &str,
        repair: bool,
    ) -> impl Future<Output = Result<PostReport, StoreError>> + Send;
}

impl Reconcilable for FirestoreDb {
    fn compare_all(&self) -> impl Future<Output = Result<Vec<PostReport>, StoreError>> + Send {
        compare_all_firestore(self)
    }

    fn compare_post(
        &self,
        post_id: &str,
        repair: bool,
    ) -> impl Future<Output = Result<PostReport, StoreError>> + Send {
        reconcile_post_with(self, post_id, repair, &NoHook)
    }
}

impl Reconcilable for PgDb {
    async fn compare_all(&self) -> Result<Vec<PostReport>, StoreError> {
        let tallies = self.tally().await?;
        Ok(tallies
            .into_iter()
            .map(|t| PostReport::of(t, false))
            .collect())
    }

    async fn compare_post(&self, post_id: &str, repair: bool) -> Result<PostReport, StoreError> {
        if !repair {
            return Ok(PostReport::of(self.tally_post(post_id).await?, false));
        }
        let (tally, correction) = self.repair_post(post_id).await?;
        Ok(PostReport::of(tally, correction != 0))
    }
}

impl Reconcilable for SelectedDb {
    async fn compare_all(&self) -> Result<Vec<PostReport>, StoreError> {
        match self {
            SelectedDb::Firestore(db) => db.compare_all().await,
            SelectedDb::Postgres(db) => db.compare_all().await,
        }
    }

    async fn compare_post(&self, post_id: &str, repair: bool) -> Result<PostReport, StoreError> {
        match self {
            SelectedDb::Firestore(db) => db.compare_post(post_id, repair).await,
            SelectedDb::Postgres(db) => db.compare_post(post_id, repair).await,
        }
    }
}

/// Attempts of one post's repair (snapshot, then conditional commit) before giving up.
pub const REPAIR_MAX_ATTEMPTS: u32 = 5;

/// One post's comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostReport {
    /// The post.
    pub post_id: String,
    /// Sum of its counter shards.
    pub shards_sum: i64,
    /// Membership documents of the post with `liked == true`.
    pub liked: i64,
    /// Whether a correcting increment was committed.
    pub repaired: bool,
    /// Why comparing or repairing this post failed (the others went on).
    pub error: Option<String>,
}

impl PostReport {
    /// The report of `tally` (both sides as read).
    fn of(tally: PostTally, repaired: bool) -> Self {
        Self {
            post_id: tally.post_id,
            shards_sum: tally.shards_sum,
            liked: tally.liked,
            repaired,
            error: None,
        }
    }

    /// The report of a post that could not be compared: nothing known but
    /// the error.
    pub fn failed(post_id: &str, error: &StoreError) -> Self {
        Self {
            post_id: post_id.to_string(),
            shards_sum: 0,
            liked: 0,
            repaired: false,
            error: Some(error.to_string()),
        }
    }

    /// `liked - shards_sum`: the increment that makes the count right.
    pub fn difference(&self) -> i64 {
        self.liked - self.shards_sum
    }
}

/// A point of a repair attempt where its [`RepairHook`] is awaited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairStep {
    /// The attempt's first read returned; its other reads have not begun.
    FirstRead,
    /// Everything is read and compared; the correction (if any) is not yet committed.
    Compared,
}

/// Awaited at each [`RepairStep`] of each repair attempt (numbered from 1):
/// lets a test hold a repair at a precise point while other writers run.
pub trait RepairHook: Send + Sync {
    /// Returns when the attempt may go on.
    fn reached(&self, step: RepairStep, attempt: u32) -> BoxFuture<'_, ()>;
}

/// The hook of [`reconcile_post`]: never holds anything.
pub struct NoHook;

impl RepairHook for NoHook {
    fn reached(&self, _step: RepairStep, _attempt: u32) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// Compares (and with `repair`, fixes) one post.
pub async fn reconcile_post(
    db: &impl Reconcilable,
    post_id: &str,
    repair: bool,
) -> Result<PostReport, StoreError> {
    db.compare_post(post_id, repair).await
}

/// [`reconcile_post`] on Firestore, awaiting `hook` at each [`RepairStep`]
/// of a repair.
pub async fn reconcile_post_with(
    db: &FirestoreDb,
    post_id: &str,
    repair: bool,
    hook: &dyn RepairHook,
) -> Result<PostReport, StoreError> {
    if !repair {
        let txn = db.begin_read_only().await?;
        let result = read_post(db, post_id, &txn, None).await;
        db.rollback(txn).await;
        let (liked, shards) = result?;
        return Ok(PostReport {
            post_id: post_id.to_string(),
            shards_sum: shards.values().sum(),
            liked,
            repaired: false,
            error: None,
        });
    }
    // Names this call's corrections in the guard document, so an attempt
    // can tell that an earlier one whose answer was lost did commit.
    let repair_id = format!("{:016x}", rand::random::<u64>());
    let mut unanswered: Option<PostReport> = None;
    let mut attempt = 1;
    loop {
        let result = repair_once(db, post_id, &repair_id, hook, attempt).await;
        let error = match result {
            Ok(Outcome::Done(report)) => return Ok(report),
            Ok(Outcome::AlreadyApplied) => {
                // Only reachable after a failed Commit, which left its report.
                return unanswered
                    .ok_or_else(|| StoreError::internal("Commit", "a repair without a report"));
            }
            Err((error, sent)) => {
                if sent.is_some() {
                    unanswered = sent;
                }
                error
            }
        };
        if !error.is_retryable() || attempt >= REPAIR_MAX_ATTEMPTS {
            return Err(error);
        }
        tracing::debug!(%error, post = post_id, attempt, "repair not applied; retrying from fresh reads");
        tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
        attempt += 1;
    }
}

/// How one repair attempt ended.
enum Outcome {
    /// Compared, and corrected if needed.
    Done(PostReport),
    /// The guard names this repair: an earlier attempt's correction committed.
    AlreadyApplied,
}

/// A failed attempt: the error, and the report of the correction it sent
/// if the Commit was sent (its outcome may be unknown).
type AttemptError = (StoreError, Option<PostReport>);

/// One attempt: reads the post's liked memberships (count), its counter
/// shards and its guard in one read-only snapshot, then commits the
/// correction with the guard, on the precondition that the guard is as read.
async fn repair_once(
    db: &FirestoreDb,
    post_id: &str,
    repair_id: &str,
    hook: &dyn RepairHook,
    attempt: u32,
) -> Result<Outcome, AttemptError> {
    let txn = db.begin_read_only().await.map_err(|e| (e, None))?;
    let read = async {
        let (liked, shards) = read_post(db, post_id, &txn, Some((hook, attempt))).await?;
        let guard = db.repair_guard(post_id, Read::In(&txn)).await?;
        Ok::<_, StoreError>((liked, shards, guard))
    }
    .await;
    db.rollback(txn).await;
    let (liked, shards, guard) = read.map_err(|e| (e, None))?;
    if guard.repair_id.as_deref() == Some(repair_id) {
        return Ok(Outcome::AlreadyApplied);
    }
    let mut report = PostReport {
        post_id: post_id.to_string(),
        shards_sum: shards.values().sum(),
        liked,
        repaired: false,
        error: None,
    };
    let difference = report.difference();
    hook.reached(RepairStep::Compared, attempt).await;
    if difference == 0 {
        return Ok(Outcome::Done(report));
    }
    let correction = Correction {
        post_id,
        repair_id,
        liked: report.liked,
        shards_sum: report.shards_sum,
    };
    report.repaired = true;
    // No transaction: the snapshot was read-only and nothing is locked;
    // the guard's precondition makes the commit conditional instead.
    if let Err(error) = db.commit_correction(&correction, &guard).await {
        return Err((error, Some(report)));
    }
    tracing::info!(post = post_id, difference, "counter repaired");
    Ok(Outcome::Done(report))
}

/// Compares every post that has counter shards or liked memberships, in one
/// read-only snapshot; with `repair`, each differing post is then repaired
/// in its own snapshot and conditional commit (which re-read it). A repair
/// that fails is reported on its post ([`PostReport::error`], the
/// comparison as read) and the next post is repaired still. Sorted by post id.
pub async fn reconcile_all(
    db: &impl Reconcilable,
    repair: bool,
) -> Result<Vec<PostReport>, StoreError> {
    let mut reports = db.compare_all().await?;
    if repair {
        for report in &mut reports {
            if report.difference() == 0 {
                continue;
            }
            match db.compare_post(&report.post_id, true).await {
                Ok(repaired) => *report = repaired,
                Err(error) => {
                    tracing::warn!(post = %report.post_id, %error, "repair failed; going on with the next post");
                    report.error = Some(error.to_string());
                }
            }
        }
    }
    Ok(reports)
}

/// After repairs: refreshes the rollups of the posts repaired (those that
/// have one), whose counts changed; returns how many were written.
pub async fn refresh_rollups(db: &SelectedDb, reports: &[PostReport]) -> usize {
    let repaired: Vec<String> = (reports.iter())
        .filter(|r| r.repaired)
        .map(|r| r.post_id.clone())
        .collect();
    if repaired.is_empty() {
        return 0;
    }
    // The fleet's milestones: a write that crosses one records it, as the
    // refresher's would (refreshed without them, it would be skipped for
    // good: the next write's floor is this rollup).
    let milestones = match crate::ops::milestones::recorded(db).await {
        Ok(milestones) => milestones,
        Err(error) => {
            tracing::warn!(%error, posts = repaired.len(), "reading the milestone setting failed; the repaired posts' rollups are left to the running service's refresher");
            return 0;
        }
    };
    rollup::refresh_existing(std::sync::Arc::new(db.clone()), &repaired, 1, &milestones).await
}

/// Compares (and with `repair`, fixes) each of `posts` in turn; a post that
/// fails is reported with its error and the next one is still done.
pub async fn reconcile_posts(
    db: &impl Reconcilable,
    posts: &[String],
    repair: bool,
) -> Vec<PostReport> {
    let mut reports = Vec::with_capacity(posts.len());
    for post in posts {
        let report = match db.compare_post(post, repair).await {
            Ok(report) => report,
            Err(error) => {
                tracing::warn!(%post, %error, "reconciling the post failed; going on with the next");
                PostReport::failed(post, &error)
            }
        };
        reports.push(report);
    }
    reports
}

/// Firestore's [`Reconcilable::compare_all`]: both sides in one read-only
/// transaction.
async fn compare_all_firestore(db: &FirestoreDb) -> Result<Vec<PostReport>, StoreError> {
    let txn = db.begin_read_only().await?;
    let scanned = async {
        let liked = db.liked_per_post(Read::In(&txn)).await?;
        let sums = db.counter_sums(Read::In(&txn)).await?;
        Ok::<_, StoreError>((liked, sums.per_post))
    }
    .await;
    db.rollback(txn).await;
    let (liked, sums) = scanned?;
    let mut posts: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (post, n) in liked {
        posts.entry(post).or_default().0 = n;
    }
    for (post, sum) in sums {
        posts.entry(post).or_default().1 = sum;
    }
    let reports = posts
        .into_iter()
        .map(|(post_id, (liked, shards_sum))| PostReport {
            post_id,
            shards_sum,
            liked,
            repaired: false,
            error: None,
        })
        .collect();
    Ok(reports)
}

/// Liked memberships (count) and counter shards of one post, in `txn`.
async fn read_post(
    db: &FirestoreDb,
    post_id: &str,
    txn: &[u8],
    hook: Option<(&dyn RepairHook, u32)>,
) -> Result<(i64, BTreeMap<String, i64>), StoreError> {
    let liked = db.liked_count(post_id, Read::In(txn)).await?;
    if let Some((hook, attempt)) = hook {
        hook.reached(RepairStep::FirstRead, attempt).await;
    }
    let shards = db.counter_shards(post_id, Read::In(txn)).await?;
    Ok((liked, shards))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn difference_is_the_correcting_increment() {
        let report = PostReport {
            post_id: "p".into(),
            shards_sum: 7,
            liked: 5,
            repaired: false,
            error: None,
        };
        assert_eq!(report.difference(), -2);
    }
}
