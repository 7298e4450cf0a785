//! `hotcount users export`: what the store holds about one user, for an
//! access request: one JSON line per post the user likes now.
//!
//! Invariant: `export` never writes. It reads the user's memberships by
//! user id (Firestore: the query `likes where userId == U`, which needs
//! `likes.userId` indexed; PostgreSQL: the index `memberships_user_id`),
//! through one code path for both stores ([`SelectedDb`]).

use serde::Serialize;

use crate::pipeline::batch::{Membership, MembershipKey};
use crate::store::firestore::Read;
use crate::store::selected::SelectedDb;
use crate::store::StoreError;

/// One membership of the user, whichever store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserMembership {
    /// Its (post, user).
    pub key: MembershipKey,
    /// Its state and the version of the event that set it.
    pub membership: Membership,
    /// When the store last wrote it (microseconds since the epoch), if known.
    pub updated_at_micros: Option<i64>,
}

/// Every membership of `user_id` (liked or not), by post, read without
/// locking anything.
pub async fn memberships(
    db: &SelectedDb,
    user_id: &str,
) -> Result<Vec<UserMembership>, StoreError> {
    let found = match db {
        SelectedDb::Firestore(db) => db
            .user_memberships(user_id, Read::Latest)
            .await?
            .into_iter()
            .map(|m| UserMembership {
                key: m.key,
                membership: m.membership,
                updated_at_micros: m.updated_at_micros,
            })
            .collect(),
        SelectedDb::Postgres(db) => db
            .user_memberships(user_id)
            .await?
            .into_iter()
            .map(|(key, membership, updated)| UserMembership {
                key,
                membership,
                updated_at_micros: Some(updated),
            })
            .collect(),
    };
    Ok(found)
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
