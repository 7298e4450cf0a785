//! What the operator tools read and change outside the batch transaction,
//! one statement each: a post's count, stored memberships (replay, the
//! user commands), tombstones, erased memberships, quarantine records,
//! expired batch markers.
//!
//! Invariants: each call is one statement on a pooled connection, outside
//! any transaction, bounded by the call timeout (a scan of every user or
//! record by the scan timeout); reads take no lock; a delete removes only
//! the rows its parameters name (an erased membership only while it is
//! still in the erasure's state).

use std::collections::HashMap;

use tokio_postgres::Row;

use super::codec::{membership_from_row, quarantine_from_row, StoredRecord};
use super::db::PgDb;
use super::errors::query_error;
use super::schema;
use crate::model::batch::{Membership, MembershipKey};
use crate::store::StoreError;

impl PgDb {
    /// The like count of `post_id`: the sum of its counter shards.
    pub async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        let op = "Count";
        let rows = self.query_rows(op, schema::COUNT, &[&post_id]).await?;
        match rows.first() {
            Some(row) => row.try_get(0).map_err(|e| query_error(op, &e)),
            None => Ok(0),
        }
    }

    /// The stored memberships of `keys` (absent ones are left out), read
    /// without locking (replay's dry run).
    pub async fn memberships(
        &self,
        keys: &[MembershipKey],
    ) -> Result<HashMap<MembershipKey, Membership>, StoreError> {
        let op = "ReadMemberships";
        let post_ids: Vec<&str> = keys.iter().map(|k| k.post_id.as_str()).collect();
        let user_ids: Vec<&str> = keys.iter().map(|k| k.user_id.as_str()).collect();
        let rows = self
            .query_rows(op, schema::READ_MEMBERSHIPS, &[&post_ids, &user_ids])
            .await?;
        rows.iter().map(membership_from_row).collect()
    }

    /// Every membership of `user_id` (liked or not), by post, with its
    /// `updated_at` in microseconds since the epoch; read without locking
    /// (`users export`, and `users erase` finding what to remove).
    pub async fn user_memberships(
        &self,
        user_id: &str,
    ) -> Result<Vec<(MembershipKey, Membership, i64)>, StoreError> {
        let op = "ReadUserMemberships";
        let rows = self
            .query_rows_within(
                op,
                self.scan_timeout(),
                schema::READ_USER_MEMBERSHIPS,
                &[&user_id],
            )
            .await?;
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let (key, membership) = membership_from_row(row)?;
            let updated: i64 = row.try_get(6).map_err(|e| query_error(op, &e))?;
            found.push((key, membership, updated));
        }
        Ok(found)
    }

    /// Every user id that has a membership.
    pub async fn user_ids(&self) -> Result<Vec<String>, StoreError> {
        let op = "ReadUserIds";
        let rows = self
            .query_rows_within(op, self.scan_timeout(), schema::READ_USER_IDS, &[])
            .await?;
        first_column(op, &rows)
    }

    /// Every erased user's keyed hash.
    pub async fn tombstones(&self) -> Result<Vec<String>, StoreError> {
        let op = "ReadTombstones";
        let rows = self.query_rows(op, schema::READ_TOMBSTONES, &[]).await?;
        first_column(op, &rows)
    }

    /// The tombstones' generation and every tombstone, in one snapshot.
    pub async fn tombstone_state(&self) -> Result<crate::store::TombstoneState, StoreError> {
        let op = "ReadTombstones";
        let rows = self
            .query_rows(op, schema::READ_TOMBSTONE_STATE, &[])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(crate::store::TombstoneState::default());
        };
        Ok(crate::store::TombstoneState {
            generation: row.try_get(0).map_err(|e| query_error(op, &e))?,
            hashes: row.try_get(1).map_err(|e| query_error(op, &e))?,
        })
    }

    /// Writes the tombstone `user_hash` (idempotent) and bumps the
    /// tombstones' generation, in one statement: it waits for every batch
    /// transaction that read the generation before it, and every batch
    /// checked against the old generation that reads it after applies
    /// nothing.
    pub async fn write_tombstone(&self, user_hash: &str) -> Result<(), StoreError> {
        let op = "WriteTombstone";
        self.query_rows(op, schema::WRITE_TOMBSTONE, &[&user_hash])
            .await?;
        Ok(())
    }

    /// Deletes the tombstone `user_hash`; whether it existed.
    pub async fn delete_tombstone(&self, user_hash: &str) -> Result<bool, StoreError> {
        let op = "DeleteTombstone";
        let rows = self
            .query_rows(op, schema::DELETE_TOMBSTONE, &[&user_hash])
            .await?;
        Ok(!rows.is_empty())
    }

    /// Deletes `user_id`'s memberships on `posts` that are still in the
    /// erasure's state (`seq`, `event_id`, not liked); how many.
    pub async fn delete_erased_memberships(
        &self,
        user_id: &str,
        posts: &[&str],
        seq: i64,
        event_id: &str,
    ) -> Result<u64, StoreError> {
        let op = "DeleteErasedMemberships";
        let rows = self
            .query_rows(
                op,
                &format!("{} RETURNING 1", schema::DELETE_ERASED_MEMBERSHIPS),
                &[&user_id, &posts, &seq, &event_id],
            )
            .await?;
        Ok(rows.len() as u64)
    }

    /// Quarantine records, oldest first: of `consumer`, or every consumer's.
    pub async fn quarantine(
        &self,
        consumer: Option<&str>,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        self.quarantine_records(consumer, None).await
    }

    /// Up to `limit` (all when `None`) quarantine records, oldest first: of
    /// `consumer`, or every consumer's.
    pub async fn quarantine_records(
        &self,
        consumer: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let op = "ListQuarantine";
        let limit = limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows = self
            .query_rows_within(
                op,
                self.scan_timeout(),
                schema::LIST_QUARANTINE,
                &[&consumer, &limit],
            )
            .await?;
        rows.iter().map(quarantine_from_row).collect()
    }

    /// The quarantine record `record_id` of `consumer`, if any.
    pub async fn quarantine_record(
        &self,
        consumer: &str,
        record_id: &str,
    ) -> Result<Option<StoredRecord>, StoreError> {
        let op = "ReadQuarantine";
        let rows = self
            .query_rows(op, schema::READ_QUARANTINE_RECORD, &[&consumer, &record_id])
            .await?;
        rows.first().map(quarantine_from_row).transpose()
    }

    /// Deletes the quarantine record `record_id` of `consumer`; whether it
    /// existed.
    pub async fn delete_quarantine_record(
        &self,
        consumer: &str,
        record_id: &str,
    ) -> Result<bool, StoreError> {
        let op = "DeleteQuarantine";
        let rows = self
            .query_rows(
                op,
                schema::DELETE_QUARANTINE_RECORD,
                &[&consumer, &record_id],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    /// Deletes up to `limit` expired batch markers, oldest first; returns
    /// how many. Run it periodically (a marker only resolves retries of
    /// its own batch, so expired ones are dead weight); from SQL alone the
    /// same statement can run from `pg_cron`.
    pub async fn delete_expired_markers(&self, limit: i64) -> Result<u64, StoreError> {
        let op = "DeleteExpiredMarkers";
        // One row returned per marker deleted.
        let deleted = self
            .query_rows(op, schema::DELETE_EXPIRED_MARKERS, &[&limit])
            .await?;
        Ok(deleted.len() as u64)
    }
}

/// The first column of each of `rows`, in order.
fn first_column(op: &'static str, rows: &[Row]) -> Result<Vec<String>, StoreError> {
    rows.iter()
        .map(|row| row.try_get(0).map_err(|e| query_error(op, &e)))
        .collect()
}
