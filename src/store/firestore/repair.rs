//! Firestore's [`Reconcilable`]: compares each post's counter shards with the
//! number of its liked memberships in one snapshot, and repairs a difference
//! with a correction that commits only if no other correction of the post
//! did since.
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

use std::collections::BTreeMap;
use std::future::Future;

use super::codec::Correction;
use super::{FirestoreDb, Read};
use crate::store::reconcile::{
    NoHook, PostReport, Reconcilable, RepairHook, RepairStep, REPAIR_MAX_ATTEMPTS,
};
use crate::store::StoreError;

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

/// [`Reconcilable::compare_post`] on Firestore, awaiting `hook` at each
/// [`RepairStep`] of a repair.
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
