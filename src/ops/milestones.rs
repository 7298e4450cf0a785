//! `hotcount milestones list|retry`: the milestone records an operator
//! reads (what was delivered, what is waiting and why, what was given up
//! and why), and makes pending again once the cause of a give-up is fixed
//! (a wrong secret, a receiver that refused the call).
//!
//! Invariants: `list` never writes; `retry` touches only dead records (or
//! the one named, if dead or pending), never a leased one (a dispatcher is
//! calling for it) nor a done one (delivered), so a running dispatcher
//! takes each retried record again under a fresh lease, with the same
//! `Idempotency-Key`.

use crate::store::milestone::{MilestoneRecord, MilestoneStore, RetrySelection};
use crate::store::rollup::Micros;
use crate::store::selected::SelectedDb;
use crate::store::StoreError;

/// A milestone tool failure.
#[derive(Debug, thiserror::Error)]
pub enum MilestonesError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record id is not `{post}:{n}`.
    #[error("{0:?} is not a milestone id ({{post}}:{{n}}, as `milestones list` prints it)")]
    BadId(String),
}

/// Every record, oldest first (only those of `status` when given).
pub async fn list(
    db: &SelectedDb,
    status: Option<&str>,
) -> Result<Vec<MilestoneRecord>, MilestonesError> {
    let mut records = db.milestones().await?;
    if let Some(status) = status {
        records.retain(|r| r.status.as_str() == status);
    }
    Ok(records)
}

/// Makes the records `ids` names (every dead one when `ids` is empty)
/// pending again, due now; returns how many.
pub async fn retry(db: &SelectedDb, ids: &[String]) -> Result<u64, MilestonesError> {
    if ids.is_empty() {
        return Ok(db.retry(&RetrySelection::AllDead).await?);
    }
    let mut selections = Vec::new();
    for id in ids {
        selections
            .push(RetrySelection::parse_id(id).ok_or_else(|| MilestonesError::BadId(id.clone()))?);
    }
    let mut retried = 0;
    for selection in &selections {
        retried += db.retry(selection).await?;
    }
    Ok(retried)
}

/// The milestones every rollup write records now: the fleet's stored
/// setting (none when off, or when none was ever stored).
pub async fn recorded(db: &impl MilestoneStore) -> Result<Vec<i64>, StoreError> {
    let setting = db.milestone_setting().await?;
    Ok(setting.map(|s| s.thresholds().to_vec()).unwrap_or_default())
}

/// A time as `list` prints it (RFC 3339, UTC, milliseconds), `-` if none.
pub fn show_time(micros: Option<Micros>) -> String {
    micros
        .and_then(chrono::DateTime::from_timestamp_micros)
        .map_or_else(
            || "-".to_string(),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        )
}
