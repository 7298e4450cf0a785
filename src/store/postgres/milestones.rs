//! Milestone rows on PostgreSQL (`milestones`): the [`MilestoneStore`] of
//! a [`PgDb`]. Rows are inserted by the rollup write (`rollups.rs`).
//!
//! Invariants: a claim is one statement that locks the due rows it takes
//! (`FOR UPDATE SKIP LOCKED`, so concurrent dispatchers take disjoint rows)
//! and leases them; a settle changes a row only while it is leased to the
//! same attempt.

use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::errors::query_error;
use super::{schema, PgDb};
use crate::store::firestore::errors::internal;
use crate::store::milestone::{
    Claim, MilestoneRecord, MilestoneStatus, MilestoneStore, RetrySelection, Settle,
};
use crate::store::rollup::Micros;
use crate::store::StoreError;

fn record(op: &'static str, row: &Row) -> Result<MilestoneRecord, StoreError> {
    let err = |e: tokio_postgres::Error| query_error(op, &e);
    let status: String = row.try_get(4).map_err(err)?;
    let attempts: i32 = row.try_get(5).map_err(err)?;
    Ok(MilestoneRecord {
        post_id: row.try_get(0).map_err(err)?,
        milestone: row.try_get(1).map_err(err)?,
        likes: row.try_get(2).map_err(err)?,
        reached_at: row.try_get(3).map_err(err)?,
        status: MilestoneStatus::parse(&status)
            .ok_or_else(|| internal(op, "an unknown milestone status"))?,
        attempts: u32::try_from(attempts).unwrap_or(0),
        due_at: row.try_get(6).map_err(err)?,
        last_error: row.try_get(7).map_err(err)?,
        delivered_at: row.try_get(8).map_err(err)?,
    })
}

impl MilestoneStore for PgDb {
    async fn claim(
        &self,
        now: Micros,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claim>, StoreError> {
        let op = "ClaimMilestones";
        let lease = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let params: [&(dyn ToSql + Sync); 3] = [&now, &lease, &limit];
        let rows = self
            .query_rows(op, schema::CLAIM_MILESTONES, &params)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Claim {
                    record: record(op, row)?,
                    update_time: None,
                })
            })
            .collect()
    }

    async fn settle(&self, claim: &Claim, settle: &Settle) -> Result<bool, StoreError> {
        let op = "SettleMilestone";
        let r = &claim.record;
        let attempts = i32::try_from(r.attempts).unwrap_or(i32::MAX);
        let (status, due, error, delivered): (_, Option<i64>, Option<&str>, Option<i64>) =
            match settle {
                Settle::Done { at } => (MilestoneStatus::Done, None, None, Some(*at)),
                Settle::Retry { error, at } => {
                    (MilestoneStatus::Pending, Some(*at), Some(error), None)
                }
                Settle::Dead { reason } => (MilestoneStatus::Dead, None, Some(reason), None),
            };
        let status = status.as_str();
        let params: [&(dyn ToSql + Sync); 7] = [
            &r.post_id,
            &r.milestone,
            &attempts,
            &status,
            &due,
            &error,
            &delivered,
        ];
        let conn = self.checkout(op).await?;
        let changed = conn
            .client()?
            .execute(schema::SETTLE_MILESTONE, &params)
            .await
            .map_err(|e| query_error(op, &e))?;
        conn.release();
        Ok(changed == 1)
    }

    async fn milestones(&self) -> Result<Vec<MilestoneRecord>, StoreError> {
        let op = "ListMilestones";
        let rows = self.query_rows(op, schema::LIST_MILESTONES, &[]).await?;
        rows.iter().map(|row| record(op, row)).collect()
    }

    async fn retry(&self, selection: &RetrySelection, now: Micros) -> Result<u64, StoreError> {
        let op = "RetryMilestones";
        let (post, milestone): (Option<&str>, Option<i64>) = match selection {
            RetrySelection::AllDead => (None, None),
            RetrySelection::One { post_id, milestone } => (Some(post_id), Some(*milestone)),
        };
        let params: [&(dyn ToSql + Sync); 3] = [&now, &post, &milestone];
        let conn = self.checkout(op).await?;
        let changed = conn
            .client()?
            .execute(schema::RETRY_MILESTONES, &params)
            .await
            .map_err(|e| query_error(op, &e))?;
        conn.release();
        Ok(changed)
    }
}
