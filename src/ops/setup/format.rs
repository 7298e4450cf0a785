//! `hotcount setup --data-format N`: raises the data format kept with the
//! data, the second step of an upgrade (after every replica runs a build
//! that knows format N).
//!
//! Invariants: the format is never lowered, and a format this build does
//! not know is never written (`store::format::raise`); a raise from below
//! [`DATA_FORMAT_TOMBSTONES`] to it or above first brings every rollup to
//! the sum of its post's counter shards (what `hotcount rollups refresh`
//! does), and writes the format only once that succeeded, so running the
//! raise again after a failure refreshes again.

use crate::ops::rollups::{self, RefreshReport};
use crate::store::format::{self, FormatError, Raised, DATA_FORMAT_TOMBSTONES};
use crate::store::selected::SelectedDb;
use crate::store::StoreError;

use super::Change;

/// A raise failed.
#[derive(Debug, thiserror::Error)]
pub enum RaiseError {
    /// The format refused it (unknown, lower, newer than this build) or
    /// could not be read or written.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// Refreshing the rollups before the raise failed; the format is
    /// unchanged.
    #[error("refreshing every rollup before raising the data format (the format is unchanged; run the command again): {0}")]
    Refresh(StoreError),
}

impl RaiseError {
    /// Whether running the raise again may succeed without a change.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Format(error) => error.is_retryable(),
            Self::Refresh(error) => error.is_retryable(),
        }
    }
}

/// What a raise did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaiseReport {
    /// The format before and after.
    pub raised: Raised,
    /// The rollups refreshed before the raise (a raise past
    /// [`DATA_FORMAT_TOMBSTONES`] only).
    pub refreshed: Option<RefreshReport>,
}

impl RaiseReport {
    /// The lines `setup` prints.
    pub fn lines(&self) -> Vec<(String, Change)> {
        let mut lines = Vec::new();
        if let Some(r) = &self.refreshed {
            lines.push((
                "rollups".to_string(),
                Change::Updated(vec![format!(
                    "{} posts read, {} rollups written (every rollup made exact before the raise)",
                    r.posts, r.written
                )]),
            ));
        }
        match self.raised {
            Raised::Unchanged(n) => lines.push((format!("data format {n}"), Change::Existed)),
            Raised::Raised { from, to } => lines.push((
                "data format".to_string(),
                Change::Updated(vec![format!("{from} -> {to}")]),
            )),
        }
        lines
    }
}

/// Raises `db`'s data format to `asked`; a raise that crosses
/// [`DATA_FORMAT_TOMBSTONES`] first refreshes every post's rollup over
/// `counter_shards` counter shards (builds before rollups change shards
/// without telling the rollups, and the raise says none of them runs any
/// more).
pub async fn raise_data_format(
    db: &SelectedDb,
    asked: u32,
    counter_shards: u32,
) -> Result<RaiseReport, RaiseError> {
    let mut refreshed = None;
    let raised = format::raise(db, asked, |from| {
        let refreshed = &mut refreshed;
        async move {
            if from < DATA_FORMAT_TOMBSTONES && asked >= DATA_FORMAT_TOMBSTONES {
                let report = rollups::refresh(db, Vec::new(), counter_shards)
                    .await
                    .map_err(RaiseError::Refresh)?;
                *refreshed = Some(report);
            }
            Ok::<(), RaiseError>(())
        }
    })
    .await?;
    Ok(RaiseReport { raised, refreshed })
}
