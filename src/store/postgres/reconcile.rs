//! PostgreSQL's [`Reconcilable`]: both sides read in one REPEATABLE READ
//! READ ONLY snapshot, a repair in one REPEATABLE READ transaction whose
//! write to shard 0 fails (and is retried from a fresh snapshot) if another
//! correction wrote it since ([`PgDb::repair_post`] states why that is
//! exact).

use super::{PgDb, PostTally};
use crate::store::reconcile::{PostReport, Reconcilable};
use crate::store::StoreError;

/// The report of `tally` (both sides as read).
fn report(tally: PostTally, repaired: bool) -> PostReport {
    PostReport::read(tally.post_id, tally.liked, tally.shards_sum, repaired)
}

impl Reconcilable for PgDb {
    async fn compare_all(&self) -> Result<Vec<PostReport>, StoreError> {
        let tallies = self.tally().await?;
        Ok(tallies.into_iter().map(|t| report(t, false)).collect())
    }

    async fn compare_post(&self, post_id: &str, repair: bool) -> Result<PostReport, StoreError> {
        if !repair {
            return Ok(report(self.tally_post(post_id).await?, false));
        }
        let (tally, correction) = self.repair_post(post_id).await?;
        Ok(report(tally, correction != 0))
    }
}
