//! What `hotcount reconcile` asks of a store: compare each post's counter
//! shards with the number of its liked memberships at one snapshot, and
//! repair a difference exactly ([`Reconcilable`]); each backend implements
//! it in its own folder (`firestore/repair.rs`, `postgres/`), and the
//! selected store dispatches to them (`selected.rs`).
//!
//! Invariant (each implementation's): both sides of a comparison are read
//! at one snapshot, and a repair commits the increment `liked - shards` only
//! if no other correction of the post committed since that snapshot, so
//! concurrent repairs of a post never both apply and a consumer's like is
//! never subtracted or counted twice.

use std::future::Future;

use futures::future::BoxFuture;

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
    /// The report of one post as read: `liked` memberships, counter shards
    /// summing to `shards_sum`, and whether a correction was committed.
    pub fn read(post_id: String, liked: i64, shards_sum: i64, repaired: bool) -> Self {
        Self {
            post_id,
            shards_sum,
            liked,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn difference_is_the_correcting_increment() {
        let report = PostReport::read("p".into(), 5, 7, false);
        assert_eq!(report.difference(), -2);
    }
}
