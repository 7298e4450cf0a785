//! `hotcount reconcile`: compares each post's counter shards with the number
//! of its liked memberships at one snapshot and, with `--repair`, corrects
//! a difference, through the selected store's [`Reconcilable`]
//! (`store/reconcile.rs` states what each store guarantees; Firestore's
//! repair is `store/firestore/repair.rs`, PostgreSQL's `store/postgres/`).
//!
//! Invariant: one post failing to compare or repair is reported on that
//! post and the others are still done; the rollups of repaired posts are
//! refreshed after, as the refresher would.

use crate::pipeline::rollup;
pub use crate::store::reconcile::{
    NoHook, PostReport, Reconcilable, RepairHook, RepairStep, REPAIR_MAX_ATTEMPTS,
};
use crate::store::selected::SelectedDb;
use crate::store::StoreError;

/// Compares (and with `repair`, fixes) one post.
pub async fn reconcile_post(
    db: &impl Reconcilable,
    post_id: &str,
    repair: bool,
) -> Result<PostReport, StoreError> {
    db.compare_post(post_id, repair).await
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
