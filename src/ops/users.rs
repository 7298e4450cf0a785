//! `hotcount users export|erase`: one user's data, exported for an access
//! request, and erased exactly while the service runs.
//!
//! Both read the user's memberships by user id (Firestore: the query
//! `likes where userId == U`, which needs `likes.userId` indexed;
//! PostgreSQL: the index `memberships_user_id`), through one code path for
//! both stores ([`SelectedDb`], [`SelectedStore`]).
//!
//! Invariants: `export` and `erase --dry-run` never write. `erase` changes
//! counts only through [`CounterStore::commit`], the pipeline's own
//! conditional transaction, under the service's consumer name: each of the
//! user's memberships is met by an erasure event (`like.removed` at the
//! highest version there is, [`ERASED_SEQ`]), so a liked one loses exactly
//! its like (-1 on its post, in the same commit as the membership write,
//! conditioned on what was read), an unliked one changes no count, and a
//! retry of an unknown outcome is settled by the batch marker. A membership
//! already erased is skipped, so running `erase` again after a kill finishes
//! the job and never decrements twice. Every later event of the user on an
//! erased membership is older than the erasure, so stale: it changes no count.
//!
//! With the service's key ([`TombstoneSettings`]), the user's tombstone
//! (the keyed hash of the id, never the id) is written before any
//! membership is touched, the command waits until every replica holds it
//! (then the flusher drops each of the user's events), and the erased
//! memberships are deleted at the end, each only while still in the
//! erasure's state: the id is then in no membership.

use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::event::{LikeEvent, LikeKind, Version};
use crate::model::batch::{Batch, MembershipKey};
use crate::pipeline::flusher::{backoff, FlushConfig};
use crate::pipeline::rollup;
use crate::store::erasure::ErasureStore;
pub use crate::store::erasure::{is_erased, UserMembership, ERASED_SEQ, ERASURE_EVENT_ID};
use crate::store::format::{self, FormatError, DATA_FORMAT_TOMBSTONES};
use crate::store::selected::{SelectedDb, SelectedStore, StoreSettings};
use crate::store::{Attempt, CommitReport, CounterStore, StoreError};

/// Every membership of `user_id` (liked or not), by post, read without
/// locking anything.
pub async fn memberships(
    db: &SelectedDb,
    user_id: &str,
) -> Result<Vec<UserMembership>, StoreError> {
    db.memberships_of_user(user_id).await
}

/// One line of `users export`: a post the user likes now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExportLine {
    /// The post.
    pub post: String,
    /// The `occurredAt` of the like the count holds (RFC 3339, UTC): the
    /// store keeps only the latest event per (post, user), so an earlier
    /// like that was undone and redone is not told apart.
    pub since: String,
    /// The event time of the latest event of this user on this post that
    /// the store applied (RFC 3339, UTC); equal to `since` while the like
    /// stands, as only a newer event changes the record.
    #[serde(rename = "lastEventAt")]
    pub last_event_at: String,
    /// When the store last wrote the record (RFC 3339, UTC), if known.
    #[serde(rename = "recordedAt", skip_serializing_if = "Option::is_none")]
    pub recorded_at: Option<String>,
}

/// The posts `user_id` likes now, one [`ExportLine`] each, by post.
pub async fn export(db: &SelectedDb, user_id: &str) -> Result<Vec<ExportLine>, StoreError> {
    let mut lines = Vec::new();
    for m in memberships(db, user_id).await? {
        if !m.membership.liked {
            continue;
        }
        let at = rfc3339(m.membership.version.occurred_at_micros);
        lines.push(ExportLine {
            post: m.key.post_id,
            since: at.clone(),
            last_event_at: at,
            recorded_at: m.updated_at_micros.map(rfc3339),
        });
    }
    Ok(lines)
}

/// `micros` since the epoch as RFC 3339 in UTC, microsecond precision.
fn rfc3339(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros).map_or_else(
        || micros.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
    )
}

/// Memberships erased per transaction: each writes its membership and at
/// most one counter increment, plus the marker, well inside Firestore's 500
/// writes per commit.
pub const ERASE_CHUNK: usize = 200;

/// How `erase` runs.
#[derive(Clone, Debug)]
pub struct EraseSettings {
    /// Report what would change; write nothing.
    pub dry_run: bool,
    /// Memberships per transaction (at most [`ERASE_CHUNK`]).
    pub chunk: usize,
    /// Counter shards per post at most (the service's `--counter-shards`).
    pub counter_shards: u32,
    /// With a key: write the user's tombstone first, wait, and delete the
    /// erased memberships at the end; without: keep them (erased state).
    pub tombstone: Option<TombstoneSettings>,
}

/// The tombstone side of an erasure: the key of the keyed hash, and how
/// long to wait after writing a tombstone before removing memberships.
#[derive(Clone)]
pub struct TombstoneSettings {
    /// The key (the service's `--user-hash-key`).
    pub key: Vec<u8>,
    /// Two of the service's `--tombstone-refresh-ms`: by then every running
    /// replica holds the tombstone.
    pub settle: Duration,
}

impl std::fmt::Debug for TombstoneSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TombstoneSettings")
            .field("settle", &self.settle)
            .finish_non_exhaustive()
    }
}

/// Refuses tombstones while the store's data format is below
/// [`DATA_FORMAT_TOMBSTONES`]: builds before it never check them, so an
/// erased user's events would count again on such a replica. The
/// commands that write tombstones (`erase`, `reapply` with the key) ask
/// this first.
pub async fn require_tombstone_format(db: &SelectedDb) -> Result<(), FormatError> {
    format::require(db, DATA_FORMAT_TOMBSTONES, "erasure tombstones").await
}

/// Writes the tombstone of `user_id` (its keyed hash).
pub async fn write_tombstone(db: &SelectedDb, key: &[u8], user_id: &str) -> Result<(), StoreError> {
    let hash = crate::event::user_hash(key, user_id);
    db.put_tombstone(&hash).await
}

/// Every tombstone: the keyed hashes of the erased users (no id).
pub async fn tombstones(db: &SelectedDb) -> Result<Vec<String>, StoreError> {
    let mut hashes = db.tombstone_hashes().await?;
    hashes.sort();
    Ok(hashes)
}

/// After a backup taken before some erasures is restored: writes back
/// each tombstone of `hashes` (kept outside the backups), waits until
/// every replica holds them, then erases ([`erase`]) every user with a
/// membership whose keyed hash is among them. Returns, per hash found,
/// what was erased (the id itself is never returned).
pub async fn reapply(
    store: &SelectedStore,
    hashes: &[String],
    settings: &EraseSettings,
) -> Result<Vec<(String, Erased)>, EraseError> {
    let Some(tombstone) = &settings.tombstone else {
        return Ok(Vec::new());
    };
    let db = store.db();
    let wanted: std::collections::HashSet<&str> = hashes.iter().map(String::as_str).collect();
    if !settings.dry_run {
        for hash in hashes {
            db.put_tombstone(hash).await?;
        }
        tokio::time::sleep(tombstone.settle).await;
    }
    let ids = db.membership_user_ids().await?;
    // The tombstones are in place and held: no second wait per user.
    let mut each = settings.clone();
    each.tombstone = Some(TombstoneSettings {
        key: tombstone.key.clone(),
        settle: Duration::ZERO,
    });
    let mut done = Vec::new();
    for id in ids {
        let hash = crate::event::user_hash(&tombstone.key, &id);
        if !wanted.contains(hash.as_str()) {
            continue;
        }
        let erased = erase(store, &id, &each, |_, _| {}).await?;
        done.push((hash, erased));
    }
    Ok(done)
}

/// Lifts the tombstone of `user_id`; whether there was one. The user's
/// events count again from then on (within a refresh interval).
pub async fn restore(db: &SelectedDb, key: &[u8], user_id: &str) -> Result<bool, StoreError> {
    let hash = crate::event::user_hash(key, user_id);
    db.lift_tombstone(&hash).await
}

/// Deletes the memberships among `found` that are in an erasure's state,
/// `chunk` per statement or commit, each only while still in that state;
/// how many.
async fn delete_erased(
    db: &SelectedDb,
    user_id: &str,
    found: &[UserMembership],
    chunk: usize,
) -> Result<u64, StoreError> {
    let erased: Vec<&UserMembership> = found.iter().filter(|m| is_erased(&m.membership)).collect();
    let mut deleted = 0;
    for part in erased.chunks(chunk) {
        // Each attempt reads again what is still in the erasure's state, so
        // a retry after an unknown outcome deletes only what is left.
        let keys: Vec<MembershipKey> = part.iter().map(|m| m.key.clone()).collect();
        deleted += retried("membership delete", || db.delete_erased(user_id, &keys)).await?;
    }
    Ok(deleted)
}

/// What `erase` did (or, dry, would do) for one user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Erased {
    /// Likes removed: memberships found liked and erased (each -1 on its post).
    pub likes: u64,
    /// Memberships erased that were not liked (no count changes).
    pub unliked: u64,
    /// Memberships found already erased (an earlier run), left alone.
    pub already: u64,
    /// Memberships deleted (with a tombstone only).
    pub deleted: u64,
    /// Quarantine records that carried the user id, deleted.
    pub quarantine: u64,
    /// Transactions committed.
    pub commits: u64,
}

/// An `erase` failure.
#[derive(Debug, thiserror::Error)]
pub enum EraseError {
    /// The store failed (after the retries a retryable error gets);
    /// running `erase` again resumes where it stopped.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The user id is not one an event can carry.
    #[error("not a user id events can carry: {0}")]
    BadUserId(String),
    /// New likes of the user kept arriving pass after pass.
    #[error("likes of the user were still arriving after {0} passes; stop their publisher and run erase again")]
    StillArriving(u32),
}

impl EraseError {
    /// Whether running the command again may succeed as it is.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(e) => e.is_retryable(),
            Self::BadUserId(_) => false,
            Self::StillArriving(_) => true,
        }
    }
}

/// Passes over the user's memberships at most: a pass finds the likes the
/// previous one could not see (events of the user committed meanwhile).
const MAX_PASSES: u32 = 5;

/// The store `erase` commits through ([`erase_store`]).
pub type EraseStore = SelectedStore;

/// The store `erase` commits through: the service's consumer name, and a
/// rollup due record in each commit that changes counts, so the rollups
/// follow even if the command is killed before it refreshes them.
pub fn erase_store(
    db: SelectedDb,
    consumer: &str,
    counter_shards: u32,
    marker_ttl: Duration,
) -> SelectedStore {
    let store = SelectedStore::new(
        db,
        StoreSettings {
            consumer: consumer.to_string(),
            counter_shards: counter_shards.max(1),
            counter_shard_target_writes_per_sec:
                crate::config::DEFAULT_COUNTER_SHARD_TARGET_WRITES_PER_SEC,
            marker_ttl,
            due_records: true,
            // Reads every membership it erases: none is assumed.
            known_memberships: 0,
        },
    );
    // Only the counter shards each post's rollup registers (Firestore), as
    // replay: the command makes no shard a rollup does not cover.
    let _ = store.shard_registry();
    store
}

/// Erases `user_id` (see the module invariants): removes each of its likes
/// exactly, in transactions of `settings.chunk` memberships, pass after
/// pass until none is left liked, then deletes the quarantine records that
/// carry the id and refreshes the rollups of the posts changed.
/// `progress(done, total)` is called after each transaction.
pub async fn erase(
    store: &SelectedStore,
    user_id: &str,
    settings: &EraseSettings,
    mut progress: impl FnMut(u64, u64),
) -> Result<Erased, EraseError> {
    let now = micros_now();
    let erasure = |post: &str| {
        let version = Version {
            seq: ERASED_SEQ,
            occurred_at_micros: now,
            event_id: ERASURE_EVENT_ID.to_string(),
        };
        LikeEvent::new(LikeKind::Removed, post, user_id, &version, None)
            .map_err(|e| EraseError::BadUserId(e.to_string()))
    };
    let db = store.db();
    let mut erased = Erased::default();
    if let (Some(t), false) = (&settings.tombstone, settings.dry_run) {
        // Before any membership is removed: from here every replica drops
        // the user's events within one refresh interval; after the wait,
        // none of them is let through any more.
        retried("tombstone write", || write_tombstone(&db, &t.key, user_id)).await?;
        tokio::time::sleep(t.settle).await;
    }
    let mut posts_changed: Vec<String> = Vec::new();
    let chunk = settings.chunk.clamp(1, ERASE_CHUNK);
    let mut pass = 0;
    loop {
        let found = memberships(&db, user_id).await?;
        let (done, todo): (Vec<_>, Vec<_>) =
            found.into_iter().partition(|m| is_erased(&m.membership));
        if pass == 0 {
            erased.already = done.len() as u64;
        }
        if todo.is_empty() {
            break;
        }
        if settings.dry_run {
            erased.likes = todo.iter().filter(|m| m.membership.liked).count() as u64;
            erased.unliked = todo.len() as u64 - erased.likes;
            break;
        }
        pass += 1;
        if pass > MAX_PASSES {
            return Err(EraseError::StillArriving(MAX_PASSES));
        }
        let total = todo.len() as u64;
        let mut done_now = 0;
        for part in todo.chunks(chunk) {
            let mut events = Vec::with_capacity(part.len());
            for m in part {
                events.push(erasure(&m.key.post_id)?);
            }
            let batch = Batch::new(events, Vec::new());
            commit(store, &batch).await?;
            erased.commits += 1;
            for m in part {
                if m.membership.liked {
                    erased.likes += 1;
                    posts_changed.push(m.key.post_id.clone());
                } else {
                    erased.unliked += 1;
                }
            }
            done_now += part.len() as u64;
            progress(done_now, total);
        }
    }
    if settings.tombstone.is_some() && !settings.dry_run {
        let found = memberships(&db, user_id).await?;
        erased.deleted = delete_erased(&db, user_id, &found, chunk).await?;
    }
    erased.quarantine = erase_quarantine(&db, user_id, settings.dry_run).await?;
    posts_changed.sort();
    posts_changed.dedup();
    if !posts_changed.is_empty() {
        // Their due records refresh them too; this is sooner. An erasure
        // lowers counts, so it crosses no milestone; the fleet's list is
        // passed all the same, as every writer of rollups does.
        let milestones = crate::ops::milestones::recorded(&db)
            .await
            .unwrap_or_default();
        rollup::refresh_existing(
            std::sync::Arc::new(db),
            &posts_changed,
            settings.counter_shards,
            &milestones,
        )
        .await;
    }
    Ok(erased)
}

/// Commits `batch` as the consumer does: a failure that proves nothing
/// about the content is retried with backoff under the same batch id (the
/// next attempt names the transaction it retries; the batch marker settles
/// an unknown outcome).
async fn commit(store: &SelectedStore, batch: &Batch) -> Result<CommitReport, StoreError> {
    let retry = FlushConfig::default();
    let mut attempt = 1;
    let mut this = Attempt::first();
    loop {
        match store.commit(batch, &this).await {
            Ok(report) => return Ok(report),
            Err(error) if error.is_retryable() && attempt < retry.commit_max_attempts => {
                tracing::warn!(%error, attempt, "erasure commit failed; retrying");
                tokio::time::sleep(backoff(&retry, attempt)).await;
                this = Attempt::after(&error);
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Runs `write` until it succeeds, a failure that proves nothing about
/// the content retried with the consumer's backoff and attempts, as
/// [`commit`] does; for writes that are the same whatever an earlier
/// attempt did (a tombstone upsert, deletes conditioned on what is read).
async fn retried<T, F, Fut>(what: &str, mut write: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let retry = FlushConfig::default();
    let mut attempt = 1;
    loop {
        match write().await {
            Ok(done) => return Ok(done),
            Err(error) if error.is_retryable() && attempt < retry.commit_max_attempts => {
                tracing::warn!(%error, attempt, what, "erasure write failed; retrying");
                tokio::time::sleep(backoff(&retry, attempt)).await;
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Deletes (dry: counts) the quarantine records whose payload holds
/// `user_id` as a JSON string or whose attributes have it as a value.
async fn erase_quarantine(
    db: &SelectedDb,
    user_id: &str,
    dry_run: bool,
) -> Result<u64, StoreError> {
    let quoted = serde_json::to_string(user_id).unwrap_or_default();
    let mut deleted = 0;
    for stored in crate::ops::quarantine::list(db, None, usize::MAX).await? {
        let record = &stored.record;
        let in_data = contains(&record.data, quoted.as_bytes());
        let in_attributes = record.attributes.iter().any(|(_, v)| v == user_id);
        if !(in_data || in_attributes) {
            continue;
        }
        if !dry_run {
            retried("quarantine delete", || {
                crate::ops::quarantine::delete(db, &stored)
            })
            .await?;
        }
        deleted += 1;
    }
    Ok(deleted)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn micros_now() -> i64 {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarantined_payload_matches_the_user_id_only_as_a_whole_json_string() {
        let quoted = serde_json::to_string("alice").expect("a string");
        let payload = br#"{"userId":"alice","postId":"p"}"#;
        assert!(contains(payload, quoted.as_bytes()));
        let longer = br#"{"userId":"alicex","postId":"p"}"#;
        assert!(!contains(longer, quoted.as_bytes()));
        assert!(!contains(b"", quoted.as_bytes()));
    }
}
