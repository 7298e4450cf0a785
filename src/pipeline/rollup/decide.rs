//! What one post's read calls for ([`decide`], pure), and the write it
//! plans ([`PlannedWrite`]).
//!
//! Invariants: a write is planned only over the rollup read (its
//! condition), with the sum read at the read time; a rollup younger than
//! the interval (less the slack) is deferred unless the refresh is the
//! last one at shutdown; a rollup registers only counter shards that exist
//! among those read or that a commit asked for.

use std::time::Duration;

use super::marks::Due;
use crate::store::rollup::{Micros, PostRead, RollupWrite, StoredRollup};

/// A rollup younger than this share of the interval is not written again:
/// the slack lets a refresher that ticks every interval write a post at
/// each tick despite timer jitter, while replicas together still write it
/// at most about once per interval.
const FRESH_SHARE: f64 = 0.9;

/// What one post's read says to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The stored rollup already shows every change marked.
    Covered,
    /// The rollup covers more counter shards than were read: read again.
    Incomplete {
        /// Counter shards the rollup covers.
        shards: u32,
    },
    /// The rollup is younger than the interval: wait this long.
    Defer {
        /// Until the rollup is one interval old.
        after: Duration,
    },
    /// Write the sum read.
    Write {
        /// The new total.
        likes: i64,
        /// Counter shards it covers.
        shards: u32,
    },
}

/// Decides one post's refresh from what was read at `read_time` (pure).
/// With `rate_limited` false (the last refresh at shutdown) a young rollup
/// is written anyway.
pub fn decide(
    due: &Due,
    read: &PostRead,
    read_time: Micros,
    interval: Duration,
    rate_limited: bool,
) -> Decision {
    // The counter shards the rollup must register: every one that exists
    // among those read (which is every one registered, and every one this
    // process wrote) and those asked for; never more than that, so a
    // post read over more shards than it has (a batch whose shard is not
    // known) does not register, and from then on read, shards nobody wrote.
    let register = read.found_shards.max(due.grow).max(1);
    let Some(stored) = &read.stored else {
        return Decision::Write {
            likes: read.likes,
            shards: register,
        };
    };
    if let Some(shards) = stored.shards.filter(|&s| s > due.shards) {
        return Decision::Incomplete { shards };
    }
    let registers = stored.shards.is_none_or(|s| s >= register);
    let covered_at = due.covered_at.unwrap_or(read_time);
    if registers && (!due.changed || stored.as_of >= covered_at) {
        return Decision::Covered;
    }
    let age = Duration::from_micros(u64::try_from(read_time - stored.as_of).unwrap_or(0));
    if rate_limited && age < interval.mul_f64(FRESH_SHARE) {
        return Decision::Defer {
            after: interval.saturating_sub(age),
        };
    }
    Decision::Write {
        likes: read.likes,
        shards: register.max(stored.shards.unwrap_or(0)),
    }
}

/// A rollup write a read called for, with the mark it settles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedWrite {
    /// The mark.
    pub due: Due,
    /// The sum read.
    pub likes: i64,
    /// The read time.
    pub as_of: Micros,
    /// Counter shards the sum covers.
    pub shards: u32,
    /// The rollup read (the write's condition; its `likes` is the old total).
    pub previous: Option<StoredRollup>,
    /// The milestones the write reaches first (their records go with it).
    pub milestones: Vec<i64>,
}

impl PlannedWrite {
    /// The write, borrowed.
    pub fn write(&self) -> RollupWrite<'_> {
        RollupWrite {
            post_id: &self.due.post_id,
            likes: self.likes,
            as_of: self.as_of,
            shards: self.shards,
            previous: self.previous.as_ref(),
            milestones: &self.milestones,
        }
    }
}
