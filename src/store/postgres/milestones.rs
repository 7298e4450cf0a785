//! Milestone rows on PostgreSQL (`milestones`): the [`MilestoneStore`] of
//! a [`PgDb`]. Rows are inserted by the rollup write (`rollups.rs`).
//!
//! Invariants: a claim is one statement that locks the due rows it takes
//! (`FOR UPDATE SKIP LOCKED`, so concurrent dispatchers take disjoint rows)
//! and leases them, on the server's clock (`now()`); a settle changes a
//! row only while it is leased to the same attempt, and `retry` keeps
//! `attempts` counting so that fence holds across it; every statement
//! here ends within the call timeout.

use std::time::{Duration, Instant};

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::errors::query_error;
use super::{schema, PgDb};
use crate::store::milestone::{
    Claim, MilestoneRecord, MilestoneSetting, MilestoneStatus, MilestoneStore, RetrySelection,
    Settle,
};
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
            .ok_or_else(|| StoreError::internal(op, "an unknown milestone status"))?,
        attempts: u32::try_from(attempts).unwrap_or(0),
        due_at: row.try_get(6).map_err(err)?,
        last_error: row.try_get(7).map_err(err)?,
        delivered_at: row.try_get(8).map_err(err)?,
    })
}

impl PgDb {
    /// Runs one milestone statement that changes rows, within the call
    /// timeout; how many rows it changed.
    async fn execute_bounded(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        self.bounded(op, self.call_timeout(), async {
            let conn = self.checkout(op).await?;
            let changed = conn
                .client()?
                .execute(sql, params)
                .await
                .map_err(|e| query_error(op, &e))?;
            conn.release();
            Ok(changed)
        })
        .await
    }
}

/// The setting a row of `milestone_settings` holds.
fn setting(op: &'static str, row: &Row) -> Result<MilestoneSetting, StoreError> {
    let err = |e: tokio_postgres::Error| query_error(op, &e);
    let enabled: bool = row.try_get(0).map_err(err)?;
    let list: Vec<i64> = row.try_get(1).map_err(err)?;
    Ok(if enabled {
        MilestoneSetting::On(list)
    } else {
        MilestoneSetting::Off
    })
}

impl MilestoneStore for PgDb {
    async fn claim(&self, lease: Duration, limit: usize) -> Result<Vec<Claim>, StoreError> {
        let op = "ClaimMilestones";
        let lease = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let params: [&(dyn ToSql + Sync); 2] = [&lease, &limit];
        let asked = Instant::now();
        let rows = self
            .query_rows(op, schema::CLAIM_MILESTONES, &params)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Claim {
                    record: record(op, row)?,
                    update_time: None,
                    leased_at: row.try_get(9).map_err(|e| query_error(op, &e))?,
                    // From before the statement: the store's time it
                    // tells is ahead of the server's, never behind.
                    taken: asked,
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
                Settle::Retry { error, after } => {
                    let after = i64::try_from(after.as_micros()).unwrap_or(i64::MAX);
                    (MilestoneStatus::Pending, Some(after), Some(error), None)
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
        let changed = self
            .execute_bounded(op, schema::SETTLE_MILESTONE, &params)
            .await?;
        Ok(changed == 1)
    }

    async fn milestones(&self) -> Result<Vec<MilestoneRecord>, StoreError> {
        let op = "ListMilestones";
        let rows = self.query_rows(op, schema::LIST_MILESTONES, &[]).await?;
        rows.iter().map(|row| record(op, row)).collect()
    }

    async fn retry(&self, selection: &RetrySelection) -> Result<u64, StoreError> {
        let op = "RetryMilestones";
        let (post, milestone): (Option<&str>, Option<i64>) = match selection {
            RetrySelection::AllDead => (None, None),
            RetrySelection::One { post_id, milestone } => (Some(post_id), Some(*milestone)),
        };
        let params: [&(dyn ToSql + Sync); 2] = [&post, &milestone];
        self.execute_bounded(op, schema::RETRY_MILESTONES, &params)
            .await
    }

    async fn milestone_setting(&self) -> Result<Option<MilestoneSetting>, StoreError> {
        let op = "ReadMilestoneSetting";
        let rows = self
            .query_rows(op, schema::READ_MILESTONE_SETTING, &[])
            .await?;
        rows.first().map(|row| setting(op, row)).transpose()
    }

    async fn store_milestone_setting(
        &self,
        wanted: &MilestoneSetting,
        only_if_unset: bool,
    ) -> Result<MilestoneSetting, StoreError> {
        let op = "StoreMilestoneSetting";
        let enabled = matches!(wanted, MilestoneSetting::On(_));
        let list = wanted.thresholds().to_vec();
        let params: [&(dyn ToSql + Sync); 2] = [&enabled, &list];
        let sql = if only_if_unset {
            schema::ADOPT_MILESTONE_SETTING
        } else {
            schema::STORE_MILESTONE_SETTING
        };
        let rows = self.query_rows(op, sql, &params).await?;
        match rows.first() {
            Some(row) => setting(op, row),
            None => self
                .milestone_setting()
                .await?
                .ok_or_else(|| StoreError::internal(op, "the milestone setting vanished")),
        }
    }
}
