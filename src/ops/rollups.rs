//! `hotcount rollups refresh`: every post's rollup (or the posts named)
//! brought to the sum of every counter shard the post has, created where
//! missing. For after an upgrade from a build before rollups, whose
//! replicas, while they ran beside this one, may have written counter
//! shards no rollup registers.
//!
//! Invariant: it writes rollups only through the refresher's own
//! conditional writes (each over the rollup it read), so it runs safely
//! beside live replicas; a rollup it writes registers only the counter
//! shards that exist.

use std::sync::Arc;

use crate::ops::reconcile::Reconcilable;
use crate::pipeline::rollup;
use crate::store::selected::SelectedDb;
use crate::store::StoreError;

/// What a refresh did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// Posts read.
    pub posts: usize,
    /// Rollups written (the others already showed their sums).
    pub written: usize,
}

/// Refreshes the rollups of `posts`, or of every post with counter shards
/// or likes when `posts` is empty, each read over `max_shards` counter
/// shards.
pub async fn refresh(
    db: &SelectedDb,
    posts: Vec<String>,
    max_shards: u32,
) -> Result<RefreshReport, StoreError> {
    let posts = if posts.is_empty() {
        (db.compare_all().await?.into_iter())
            .map(|report| report.post_id)
            .collect()
    } else {
        posts
    };
    // The fleet's milestones: a write that crosses one records it.
    let milestones = crate::ops::milestones::recorded(db).await?;
    let written =
        rollup::refresh_all(Arc::new(db.clone()), &posts, max_shards.max(1), &milestones).await;
    Ok(RefreshReport {
        posts: posts.len(),
        written,
    })
}
