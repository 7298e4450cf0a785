//! The milestones' side of the store: one record per (post, milestone)
//! (Firestore `milestones/{post}:{n}`, PostgreSQL `milestones`), created
//! by the rollup write that first shows the post's total at or above the
//! milestone, then claimed, delivered and settled by the dispatcher
//! ([`crate::pipeline::milestones`]). [`MilestoneStore`] is what the
//! dispatcher and `hotcount milestones` need of a store.
//!
//! Invariants: a record is created only in the same atomic write as the
//! rollup that decides it, and only if absent (Firestore: exists=false;
//! PostgreSQL: `ON CONFLICT DO NOTHING`), so each milestone of a post is
//! decided once, ever; a claim is exclusive until its lease ends (Firestore:
//! a read-write transaction; PostgreSQL: `FOR UPDATE SKIP LOCKED`) and
//! counts an attempt; a settle applies only while the record is still the
//! claim's (same attempt, still leased), so a worker whose lease was taken
//! over changes nothing.
//!
//! Whether milestones are recorded, and which, is a property of the data
//! ([`MilestoneSetting`], Firestore `settings/milestones`, PostgreSQL
//! `milestone_settings`): every writer of rollups records by it, whatever
//! its own flags. Every time a claim, a lease or a due time compares with
//! is the store's (Firestore: a read time; PostgreSQL: `now()`), never a
//! replica's clock.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};
use gcloud_sdk::prost_types::Timestamp;

use super::rollup::Micros;
use super::StoreError;

/// Where a milestone record is in its delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MilestoneStatus {
    /// Waiting for a (first or next) attempt at its `due_at`.
    Pending,
    /// Claimed by a dispatcher until `lease_until`; taken over after.
    Leased,
    /// Delivered: the webhook answered 2xx.
    Done,
    /// Given up: the webhook refused it (a 4xx other than 408/429);
    /// `hotcount milestones retry` makes it pending again.
    Dead,
}

impl MilestoneStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Leased => "leased",
            Self::Done => "done",
            Self::Dead => "dead",
        }
    }

    /// The status a stored name names.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => Self::Pending,
            "leased" => Self::Leased,
            "done" => Self::Done,
            "dead" => Self::Dead,
            _ => return None,
        })
    }
}

/// One milestone record as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MilestoneRecord {
    /// The post.
    pub post_id: String,
    /// The milestone reached (a like count from `--milestones`).
    pub milestone: i64,
    /// The post's total in the rollup that reached it.
    pub likes: i64,
    /// That rollup's read time (`asOf`): when the total was seen.
    pub reached_at: Micros,
    /// Where its delivery is.
    pub status: MilestoneStatus,
    /// Delivery attempts claimed so far.
    pub attempts: u32,
    /// When the next claim may take it (pending: its next attempt; leased:
    /// its lease's end); `None` once done or dead.
    pub due_at: Option<Micros>,
    /// Why the last attempt failed, or why it was given up.
    pub last_error: Option<String>,
    /// When the webhook accepted it.
    pub delivered_at: Option<Micros>,
}

impl MilestoneRecord {
    /// Its id: `{post}:{n}` (the Firestore document id; the tail of the
    /// `Idempotency-Key`).
    pub fn id(&self) -> String {
        format!("{}:{}", self.post_id, self.milestone)
    }
}

/// A record this dispatcher claimed: it alone may attempt it until
/// `record.due_at` (the lease's end, in the store's time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The record after the claim (leased, `attempts` counting this one).
    pub record: MilestoneRecord,
    /// Firestore: the document's update time after the claim, the
    /// condition of the settle. `None` on PostgreSQL (its condition is the
    /// attempt number).
    pub update_time: Option<Timestamp>,
    /// The store's time when the lease was taken.
    pub leased_at: Micros,
    /// This process's monotonic time when the claim's answer came: with
    /// `leased_at`, the store's time now, whatever this replica's clock says.
    pub taken: std::time::Instant,
}

impl Claim {
    /// The store's time now, as far as this process can tell (the lease's
    /// start plus the monotonic time since: no wall clock read).
    pub fn store_now(&self) -> Micros {
        let elapsed = i64::try_from(self.taken.elapsed().as_micros()).unwrap_or(i64::MAX);
        self.leased_at.saturating_add(elapsed)
    }

    /// How long the lease has left, as far as this process can tell.
    pub fn lease_left(&self) -> Duration {
        let until = self.record.due_at.unwrap_or(self.leased_at);
        Duration::from_micros(u64::try_from(until - self.store_now()).unwrap_or(0))
    }
}

/// How an attempt ended, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settle {
    /// Delivered at this time.
    Done {
        /// When the webhook answered 2xx.
        at: Micros,
    },
    /// Failed, to be tried again this long after the settle (the store's
    /// time).
    Retry {
        /// Why it failed.
        error: String,
        /// The wait before the next attempt.
        after: Duration,
    },
    /// Given up.
    Dead {
        /// Why.
        reason: String,
    },
}

/// What `hotcount milestones retry` makes pending again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetrySelection {
    /// Every dead record.
    AllDead,
    /// One record by id (`{post}:{n}`), dead or not yet delivered.
    One {
        /// The post.
        post_id: String,
        /// The milestone.
        milestone: i64,
    },
}

impl RetrySelection {
    /// Parses an id `{post}:{n}` (the last `:` splits it).
    pub fn parse_id(id: &str) -> Option<Self> {
        let (post, n) = id.rsplit_once(':')?;
        let milestone = n.parse().ok()?;
        (!post.is_empty()).then(|| Self::One {
            post_id: post.to_string(),
            milestone,
        })
    }
}

/// The milestones of `thresholds` a rollup write from `old` (the rollup
/// read; 0 without one) to `new` reaches for the first time: above both
/// `old` and the highest already recorded (`highest`), at most `new`.
/// `thresholds` is sorted ascending.
pub fn crossed(thresholds: &[i64], old: i64, highest: Option<i64>, new: i64) -> Vec<i64> {
    let floor = old.max(highest.unwrap_or(0));
    thresholds
        .iter()
        .copied()
        .filter(|&n| n > floor && n <= new)
        .collect()
}

/// Whether milestones are recorded, fleet-wide, and which: stored once
/// (`hotcount setup --milestones LIST` / `--no-milestones`, or adopted from
/// the first `run` that names them), read by every writer of rollups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MilestoneSetting {
    /// No milestone is recorded (those crossed meanwhile never will be).
    Off,
    /// These milestones (ascending) are recorded by every rollup write
    /// that first reaches them.
    On(Vec<i64>),
}

impl MilestoneSetting {
    /// The milestones recorded: none when off.
    pub fn thresholds(&self) -> &[i64] {
        match self {
            Self::Off => &[],
            Self::On(list) => list,
        }
    }

    /// As an operator writes it: `off`, or the list (`100,1000`).
    pub fn describe(&self) -> String {
        match self {
            Self::Off => "off".to_string(),
            Self::On(list) => list_text(list),
        }
    }
}

/// `100,1000`: a list as `--milestones` takes it.
pub fn list_text(list: &[i64]) -> String {
    let parts: Vec<String> = list.iter().map(i64::to_string).collect();
    parts.join(",")
}

/// The milestones the writers of one process record now: a cheap handle,
/// shared by the refresher and the task that re-reads the stored setting,
/// so a change applies without a restart.
#[derive(Clone, Debug, Default)]
pub struct Thresholds(Arc<RwLock<Arc<[i64]>>>);

impl Thresholds {
    /// A handle holding `list`.
    pub fn new(list: &[i64]) -> Self {
        Self(Arc::new(RwLock::new(Arc::from(list))))
    }

    /// The milestones recorded now (ascending; empty: none).
    pub fn current(&self) -> Arc<[i64]> {
        match self.0.read() {
            Ok(list) => list.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Records `list` from now on; whether it changed.
    pub fn set(&self, list: &[i64]) -> bool {
        let mut slot = match self.0.write() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        if **slot == *list {
            return false;
        }
        *slot = Arc::from(list);
        true
    }
}

/// What the dispatcher and the operator commands need of a store.
pub trait MilestoneStore: Send + Sync + 'static {
    /// Claims up to `limit` records due now in the store's time (pending
    /// ones whose next attempt has come, leased ones whose lease ended),
    /// each leased for `lease` from the store's time of its own claim,
    /// with one more attempt; records another dispatcher holds or claims
    /// first are skipped.
    fn claim(
        &self,
        lease: Duration,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Claim>, StoreError>> + Send;

    /// [`MilestoneStore::claim`], each claim handed over as it lands, so a
    /// slow one (a record a stale lock holds) delays no call for the
    /// others; a store failure is an `Err` item (a failed due query is the
    /// only item then).
    fn claim_each(
        &self,
        lease: Duration,
        limit: usize,
    ) -> BoxStream<'_, Result<Claim, StoreError>> {
        stream::once(self.claim(lease, limit))
            .flat_map(|claimed| match claimed {
                Ok(claims) => stream::iter(claims.into_iter().map(Ok)).left_stream(),
                Err(error) => stream::iter([Err(error)]).right_stream(),
            })
            .boxed()
    }

    /// Stores how the claimed attempt ended; `Ok(false)` when the claim
    /// was no longer the record's (its lease was taken over): nothing
    /// changed.
    fn settle(
        &self,
        claim: &Claim,
        settle: &Settle,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Every record, oldest first.
    fn milestones(&self) -> impl Future<Output = Result<Vec<MilestoneRecord>, StoreError>> + Send;

    /// Makes the selected records pending again, due at once (a done or
    /// leased record is left alone); returns how many. `attempts` keeps
    /// counting: it is the settles' fence (PostgreSQL).
    fn retry(
        &self,
        selection: &RetrySelection,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// The stored setting; `None` when none was ever stored.
    fn milestone_setting(
        &self,
    ) -> impl Future<Output = Result<Option<MilestoneSetting>, StoreError>> + Send;

    /// Stores `setting` for the whole fleet (`hotcount setup`), replacing
    /// any; with `only_if_unset`, only when none is stored (the first
    /// `run` that names milestones). Returns the setting stored after.
    fn store_milestone_setting(
        &self,
        setting: &MilestoneSetting,
        only_if_unset: bool,
    ) -> impl Future<Output = Result<MilestoneSetting, StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_milestone_is_crossed_once_from_below() {
        let t = [100, 1000, 10_000];
        assert_eq!(crossed(&t, 0, None, 99), Vec::<i64>::new());
        assert_eq!(crossed(&t, 99, None, 100), vec![100]);
        assert_eq!(crossed(&t, 50, None, 1500), vec![100, 1000]);
        assert_eq!(crossed(&t, 100, None, 150), Vec::<i64>::new());
    }

    #[test]
    fn a_post_that_falls_and_climbs_back_reaches_nothing_again() {
        let t = [100, 1000];
        // Recorded 100 earlier, fell to 99, climbs back to 101.
        assert_eq!(crossed(&t, 99, Some(100), 101), Vec::<i64>::new());
        assert_eq!(crossed(&t, 99, Some(100), 1000), vec![1000]);
    }

    #[test]
    fn a_replay_that_changes_no_count_reaches_nothing() {
        assert_eq!(crossed(&[100], 150, None, 150), Vec::<i64>::new());
    }

    #[test]
    fn ids_parse_at_the_last_colon() {
        assert_eq!(
            RetrySelection::parse_id("a:b:1000"),
            Some(RetrySelection::One {
                post_id: "a:b".into(),
                milestone: 1000
            })
        );
        assert_eq!(RetrySelection::parse_id("nocolon"), None);
        assert_eq!(RetrySelection::parse_id(":5"), None);
    }
}
