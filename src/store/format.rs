//! The data-format version kept with the data (Firestore `settings/format`,
//! PostgreSQL `data_format`): which kinds of record the store may hold that
//! a build older than the format does not handle safely. Every build knows
//! the highest format it understands ([`DATA_FORMAT_KNOWN`]); the operator
//! raises the stored one (`hotcount setup --data-format N`) once every
//! replica runs a build that knows it, the second step of a two-step
//! upgrade.
//!
//! Invariants: a store without the record is at [`DATA_FORMAT_UNRECORDED`]
//! (what every build writes without it); the stored format only ever
//! grows (the store's own write keeps the larger of the two, so two
//! raises racing never lower it); `run` and every command that writes
//! refuse to start against a format above [`DATA_FORMAT_KNOWN`]
//! ([`check_known`]); a record that an older build would not check is
//! written only once the stored format says no older build runs
//! ([`require`]).

use std::time::Duration;

use super::selected::SelectedDb;
use super::StoreError;

/// The highest data format this build understands. Raise it (and name it
/// in `CHANGELOG.md`) with each new kind of record an older build would
/// mishandle rather than ignore.
pub const DATA_FORMAT_KNOWN: u32 = 2;

/// The format of a store that holds no format record: what every build
/// before the record existed wrote, and what a store stays at until the
/// operator raises it.
pub const DATA_FORMAT_UNRECORDED: u32 = 1;

/// The format that allows erasure tombstones (`hotcount users erase
/// --user-hash-key`): builds before it do not check them, so an erased
/// user's later events would count again on such a replica.
pub const DATA_FORMAT_TOMBSTONES: u32 = 2;

/// The format from which no build that writes counter shards no rollup
/// registers runs (0.1.0 does; the raise to 2 states none runs and makes
/// every rollup exact first): a post without a rollup then has only the
/// shards its due records name, and its first refresh reads just those.
pub const DATA_FORMAT_REGISTERED_SHARDS: u32 = 2;

/// How long a start retries the format read's transient failures (as the
/// milestone setting's read at start).
pub const FORMAT_READ_RETRY_FOR: Duration = Duration::from_secs(120);

/// The data format refuses what was asked.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The store is at a format this build does not know.
    #[error(
        "the store's data format is {stored}; this build knows up to {known}: upgrade the build"
    )]
    Newer {
        /// The stored format.
        stored: u32,
        /// [`DATA_FORMAT_KNOWN`].
        known: u32,
    },
    /// A raise asked for a format this build does not know.
    #[error("--data-format {asked}: this build knows data formats up to {known}")]
    Unknown {
        /// The format asked for.
        asked: u32,
        /// [`DATA_FORMAT_KNOWN`].
        known: u32,
    },
    /// A raise asked for a format below the stored one.
    #[error("the store's data format is {stored}; --data-format {asked} would lower it, and a data format is never lowered")]
    Lower {
        /// The stored format.
        stored: u32,
        /// The format asked for.
        asked: u32,
    },
    /// A write needs a format the store is not at yet.
    #[error("{what} need data format {needed}; the store's is {stored}: once every replica runs this build, raise it with `hotcount setup --data-format {needed}`")]
    Below {
        /// What the write is (`erasure tombstones`).
        what: &'static str,
        /// The format it needs.
        needed: u32,
        /// The stored format.
        stored: u32,
    },
    /// The store failed to read or write the format.
    #[error("the store's data format: {0}")]
    Store(#[from] StoreError),
}

impl FormatError {
    /// Whether trying again may succeed without an operator's change.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(error) => error.is_retryable(),
            Self::Newer { .. } | Self::Unknown { .. } | Self::Lower { .. } | Self::Below { .. } => {
                false
            }
        }
    }
}

/// What a raise did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Raised {
    /// The store was at the format asked for already.
    Unchanged(u32),
    /// The store went from one format to the other.
    Raised {
        /// The format before.
        from: u32,
        /// The format now.
        to: u32,
    },
}

/// The stored format, or [`DATA_FORMAT_UNRECORDED`] without a record.
pub async fn stored(db: &SelectedDb) -> Result<u32, StoreError> {
    Ok(db.data_format().await?.unwrap_or(DATA_FORMAT_UNRECORDED))
}

/// The stored format, refused when above [`DATA_FORMAT_KNOWN`]; a
/// transient failure is retried for [`FORMAT_READ_RETRY_FOR`] (a store
/// failing over delays a start, it does not stop it).
pub async fn check_known(db: &SelectedDb) -> Result<u32, FormatError> {
    let deadline = tokio::time::Instant::now() + FORMAT_READ_RETRY_FOR;
    let mut pause = Duration::from_millis(100);
    loop {
        match stored(db).await {
            Ok(format) if format > DATA_FORMAT_KNOWN => {
                return Err(FormatError::Newer {
                    stored: format,
                    known: DATA_FORMAT_KNOWN,
                })
            }
            Ok(format) => return Ok(format),
            Err(error)
                if error.is_retryable() && tokio::time::Instant::now() + pause < deadline =>
            {
                tracing::warn!(%error, "reading the store's data format failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Refuses unless the stored format is at least `needed`, for writing
/// `what` (records builds below `needed` would not check).
pub async fn require(db: &SelectedDb, needed: u32, what: &'static str) -> Result<(), FormatError> {
    let stored = check_known(db).await?;
    if stored < needed {
        return Err(FormatError::Below {
            what,
            needed,
            stored,
        });
    }
    Ok(())
}

/// Raises the stored format to `asked`: refused above
/// [`DATA_FORMAT_KNOWN`] or below the stored format, nothing done at it.
/// `before_raise` runs only when the format will change, before the
/// record is written (so a failure there leaves the format as it was, and
/// running the raise again runs it again).
pub async fn raise<F, Fut, E>(db: &SelectedDb, asked: u32, before_raise: F) -> Result<Raised, E>
where
    F: FnOnce(u32) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
    E: From<FormatError>,
{
    if asked > DATA_FORMAT_KNOWN {
        return Err(FormatError::Unknown {
            asked,
            known: DATA_FORMAT_KNOWN,
        }
        .into());
    }
    let from = check_known(db).await?;
    if asked < from {
        return Err(FormatError::Lower {
            stored: from,
            asked,
        }
        .into());
    }
    if asked == from {
        return Ok(Raised::Unchanged(from));
    }
    before_raise(from).await?;
    let after = db
        .raise_data_format(asked)
        .await
        .map_err(FormatError::from)?;
    if after > asked {
        // Another raise went further meanwhile: nothing is lowered.
        return Err(FormatError::Lower {
            stored: after,
            asked,
        }
        .into());
    }
    Ok(Raised::Raised { from, to: after })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_format_names_both_versions_and_the_fix() {
        let error = FormatError::Newer {
            stored: DATA_FORMAT_KNOWN + 1,
            known: DATA_FORMAT_KNOWN,
        };
        assert_eq!(
            error.to_string(),
            format!(
                "the store's data format is {}; this build knows up to {}: upgrade the build",
                DATA_FORMAT_KNOWN + 1,
                DATA_FORMAT_KNOWN
            )
        );
        assert!(!error.is_retryable());
    }

    #[test]
    fn tombstones_need_a_format_this_build_knows() {
        const { assert!(DATA_FORMAT_TOMBSTONES <= DATA_FORMAT_KNOWN) };
        const { assert!(DATA_FORMAT_UNRECORDED < DATA_FORMAT_TOMBSTONES) };
    }
}
