//! The data-format record on PostgreSQL (`data_format`, one row at most):
//! read, and raised by one statement that keeps the larger format (see
//! `store::format`).
//!
//! Invariant: a raise never lowers the stored format (`greatest` in the
//! upsert, so concurrent raises end at the highest asked); every statement
//! ends within the call timeout.

use tokio_postgres::types::ToSql;

use super::errors::query_error;
use super::{schema, PgDb};
use crate::store::StoreError;

/// A stored `version` as a format (the table's CHECK keeps it >= 1).
fn format_of(op: &'static str, row: &tokio_postgres::Row) -> Result<u32, StoreError> {
    let version: i32 = row.try_get(0).map_err(|e| query_error(op, &e))?;
    u32::try_from(version).map_err(|_| StoreError::internal(op, "a negative data format"))
}

impl PgDb {
    /// The stored data format; `None` when no row exists.
    pub async fn data_format(&self) -> Result<Option<u32>, StoreError> {
        let op = "ReadDataFormat";
        let rows = self.query_rows(op, schema::READ_DATA_FORMAT, &[]).await?;
        rows.first().map(|row| format_of(op, row)).transpose()
    }

    /// Stores format `to` unless the stored one is as high; returns the
    /// stored format after.
    pub async fn raise_data_format(&self, to: u32) -> Result<u32, StoreError> {
        let op = "RaiseDataFormat";
        let version = i32::try_from(to)
            .map_err(|_| StoreError::internal(op, "a data format out of range"))?;
        let params: [&(dyn ToSql + Sync); 1] = [&version];
        let rows = self
            .query_rows(op, schema::RAISE_DATA_FORMAT, &params)
            .await?;
        match rows.first() {
            Some(row) => format_of(op, row),
            None => Err(StoreError::internal(op, "the raise returned no row")),
        }
    }
}
