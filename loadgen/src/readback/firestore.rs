//! Reads back what hotcount wrote under one collection prefix of Firestore,
//! through hotcount's own [`FirestoreDb`]: memberships, counter shards
//! summed per post, quarantine records and rollups.
//!
//! Invariant: only documents of the database's layout are returned (a
//! collection group query on `shards` is filtered to
//! `{prefix}counters/*/shards/*`); [`read_snapshot`] reads the shards at
//! the memberships' read time when the server allows it, and says when it
//! could not; nothing is ever written.

use std::collections::BTreeMap;

use hotcount::store::firestore::layout::collections;
use hotcount::store::firestore::{FirestoreDb, Read};
use hotcount::store::Code;
use hotcount::store::StoreError;

use super::{by_reason, MembershipRow, ReadError, Snapshot};

/// Reads memberships, then counter shards at the memberships' read time.
pub(super) async fn read_snapshot(db: &FirestoreDb) -> Result<Snapshot, ReadError> {
    let shards = ReadError::query(collections::SHARDS.to_string());
    let (memberships, read_time) = db
        .memberships(None, Read::Latest)
        .await
        .map_err(ReadError::query(db.layout().collection(collections::LIKES)))?;
    let rollups_at = |read| async move {
        let rollups = db.rollups(read).await?;
        Ok::<_, StoreError>(
            rollups
                .into_iter()
                .map(|(p, (likes, _))| (p, likes))
                .collect(),
        )
    };
    let (sums, rollups, consistent) = match read_time {
        Some(t) => match db.counter_sums(Read::At(t)).await {
            Ok(sums) => (sums, rollups_at(Read::At(t)).await.map_err(&shards)?, true),
            Err(e)
                if matches!(
                    e.code,
                    Code::InvalidArgument | Code::FailedPrecondition | Code::Unimplemented
                ) =>
            {
                tracing::warn!(
                    code = ?e.code,
                    "reading at a fixed time was refused; reading the shards now"
                );
                let sums = db.counter_sums(Read::Latest).await.map_err(&shards)?;
                let rollups = rollups_at(Read::Latest).await.map_err(&shards)?;
                (sums, rollups, false)
            }
            Err(e) => return Err(shards(e)),
        },
        None => (
            db.counter_sums(Read::Latest).await.map_err(&shards)?,
            rollups_at(Read::Latest).await.map_err(&shards)?,
            false,
        ),
    };
    let records = db
        .quarantine_records(None, None)
        .await
        .map_err(ReadError::query(
            db.layout().collection(collections::QUARANTINE),
        ))?;
    let quarantined_events = records
        .iter()
        .filter(|r| r.record.message_id.starts_with("event-"))
        .count();
    Ok(Snapshot {
        counts: sums.per_post,
        shards_read: sums.shards,
        memberships: memberships.into_iter().map(MembershipRow::from).collect(),
        quarantined: records.len(),
        quarantined_events,
        quarantined_by_reason: by_reason(records.iter().map(|r| &r.record)),
        consistent,
        rollups,
    })
}

/// Sum of the counter shards per post, and how many shard documents were read.
pub(super) async fn read_counts(
    db: &FirestoreDb,
) -> Result<(BTreeMap<String, i64>, usize), ReadError> {
    let sums = db
        .counter_sums(Read::Latest)
        .await
        .map_err(ReadError::query(collections::SHARDS.to_string()))?;
    Ok((sums.per_post, sums.shards))
}

/// Every membership document of the database's layout.
pub(super) async fn read_memberships(db: &FirestoreDb) -> Result<Vec<MembershipRow>, ReadError> {
    let (memberships, _) = db
        .memberships(None, Read::Latest)
        .await
        .map_err(ReadError::query(db.layout().collection(collections::LIKES)))?;
    Ok(memberships.into_iter().map(MembershipRow::from).collect())
}
