//! PostgreSQL's [`Reconcilable`]: each post's liked memberships and
//! counter sum read at one snapshot ([`PgDb::tally`], [`PgDb::tally_post`])
//! and the repair transaction that adds the difference to shard 0
//! ([`PgDb::repair_post`]).
//!
//! Invariants: both sides of a tally come from one REPEATABLE READ READ
//! ONLY transaction, so commits landing meanwhile never show half; a
//! repair reads and writes at one REPEATABLE READ snapshot, so a write to
//! shard 0 since the snapshot fails it (40001) and it starts again from a
//! fresh one, at most [`REPAIR_MAX_ATTEMPTS`] times; a correction is
//! committed once, even when its COMMIT answer is lost (the next attempt
//! reads a difference of 0). Consumers are never locked out.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_postgres::types::ToSql;

use super::db::PgDb;
use super::errors::query_error;
use super::schema;
use crate::store::reconcile::{PostReport, Reconcilable, REPAIR_MAX_ATTEMPTS};
use crate::store::StoreError;

/// One post's two sides, read at one snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostTally {
    /// The post.
    pub post_id: String,
    /// Memberships of the post with `liked`.
    pub liked: i64,
    /// Sum of its counter shards.
    pub shards_sum: i64,
}

impl PostTally {
    /// `liked - shards_sum`: the increment that makes the count right.
    pub fn difference(&self) -> i64 {
        self.liked - self.shards_sum
    }
}

impl PgDb {
    /// Every post with liked memberships or counter shards, both sides read
    /// in one REPEATABLE READ READ ONLY transaction (one snapshot, however
    /// many commits land meanwhile), in one round trip. Sorted by post.
    pub async fn tally(&self) -> Result<Vec<PostTally>, StoreError> {
        let op = "Tally";
        let [liked, shards] = self
            .bounded(
                op,
                self.scan_timeout(),
                self.snapshot_pair(op, [schema::LIKED_PER_POST, schema::SHARDS_PER_POST], &[]),
            )
            .await?;
        let err = |e: tokio_postgres::Error| query_error(op, &e);
        let mut posts: BTreeMap<String, PostTally> = BTreeMap::new();
        for row in liked {
            let post_id: String = row.try_get(0).map_err(err)?;
            let tally = posts.entry(post_id.clone()).or_default();
            tally.post_id = post_id;
            tally.liked = row.try_get(1).map_err(err)?;
        }
        for row in shards {
            let post_id: String = row.try_get(0).map_err(err)?;
            let tally = posts.entry(post_id.clone()).or_default();
            tally.post_id = post_id;
            tally.shards_sum = row.try_get(1).map_err(err)?;
        }
        Ok(posts.into_values().collect())
    }

    /// Runs two queries with the same `params` in one REPEATABLE READ READ
    /// ONLY transaction (one snapshot), pipelined in one round trip.
    async fn snapshot_pair(
        &self,
        op: &'static str,
        sqls: [&str; 2],
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<[Vec<tokio_postgres::Row>; 2], StoreError> {
        let conn = self.checkout(op).await?;
        let [first, second] = conn.statements(op, sqls).await?;
        let client = conn.client()?;
        let (begun, first, second, ended) = tokio::join!(
            biased;
            client.batch_execute(schema::BEGIN_SNAPSHOT),
            client.query(&first, params),
            client.query(&second, params),
            client.batch_execute(schema::COMMIT),
        );
        let err = |e: tokio_postgres::Error| query_error(op, &e);
        begun.map_err(err)?;
        let rows = [first.map_err(err)?, second.map_err(err)?];
        ended.map_err(err)?;
        conn.release();
        Ok(rows)
    }

    /// One post's [`PostTally`], read at one snapshot.
    pub async fn tally_post(&self, post_id: &str) -> Result<PostTally, StoreError> {
        let op = "TallyPost";
        let [liked, shards] = self
            .bounded(
                op,
                self.call_timeout(),
                self.snapshot_pair(op, [schema::LIKED_OF_POST, schema::COUNT], &[&post_id]),
            )
            .await?;
        // Both are aggregates: exactly one row each.
        let first = |rows: &[tokio_postgres::Row]| -> Result<i64, StoreError> {
            match rows.first() {
                Some(row) => row.try_get(0).map_err(|e| query_error(op, &e)),
                None => Ok(0),
            }
        };
        Ok(PostTally {
            post_id: post_id.to_string(),
            liked: first(&liked)?,
            shards_sum: first(&shards)?,
        })
    }

    /// Compares one post's counter with its liked memberships and, if they
    /// differ, adds the difference to its shard 0; returns the tally as
    /// found and the correction committed (0 when none was needed).
    ///
    /// Why this is exact while consumers commit, without locking them out:
    /// every consumer commit writes a post's memberships and the matching
    /// increments together, so it leaves `liked - shards` unchanged; the
    /// difference read at the repair's snapshot is therefore still the
    /// difference when the correction commits, except for a correction or
    /// another write to shard 0 since the snapshot. That one is caught:
    /// the repair runs at REPEATABLE READ, so writing a row that changed
    /// since its snapshot fails (40001) and the repair starts again from a
    /// fresh snapshot. A repair whose COMMIT answer was lost is not applied
    /// twice either: the next attempt reads the corrected difference, 0.
    pub async fn repair_post(&self, post_id: &str) -> Result<(PostTally, i64), StoreError> {
        let mut attempt = 1;
        loop {
            let attempt_once = self.repair_attempt(post_id);
            match self
                .bounded("Repair", self.call_timeout(), attempt_once)
                .await
            {
                Err(e) if e.is_retryable() && attempt < REPAIR_MAX_ATTEMPTS => {
                    tracing::debug!(error = %e, attempt, "repair attempt failed; retrying");
                    tokio::time::sleep(Duration::from_millis(10 << attempt)).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn repair_attempt(&self, post_id: &str) -> Result<(PostTally, i64), StoreError> {
        let op = "Repair";
        let err = |e: tokio_postgres::Error| query_error(op, &e);
        let conn = self.checkout(op).await?;
        let [liked, shards, correct] = conn
            .statements(
                op,
                [
                    schema::LIKED_OF_POST,
                    schema::COUNT,
                    schema::CORRECT_SHARD_ZERO,
                ],
            )
            .await?;
        let client = conn.client()?;
        let by_post: [&(dyn ToSql + Sync); 1] = [&post_id];
        let (begun, liked, shards) = tokio::join!(
            biased;
            client.batch_execute(schema::BEGIN_REPAIR),
            client.query_one(&liked, &by_post),
            client.query_one(&shards, &by_post),
        );
        begun.map_err(err)?;
        let tally = PostTally {
            post_id: post_id.to_string(),
            liked: liked.map_err(err)?.try_get(0).map_err(err)?,
            shards_sum: shards.map_err(err)?.try_get(0).map_err(err)?,
        };
        let correction = tally.difference();
        if correction == 0 {
            client.batch_execute(schema::ROLLBACK).await.map_err(err)?;
            conn.release();
            return Ok((tally, 0));
        }
        let params: [&(dyn ToSql + Sync); 2] = [&post_id, &correction];
        let (corrected, ended) = tokio::join!(
            biased;
            client.execute(&correct, &params),
            client.batch_execute(schema::COMMIT),
        );
        corrected.map_err(err)?;
        ended.map_err(err)?;
        conn.release();
        tracing::info!(post_id, correction, "counter repaired");
        Ok((tally, correction))
    }
}

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
