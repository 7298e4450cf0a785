//! `hotcount quarantine list|show|redrive`: the quarantine records an
//! operator reads, and re-drives back through the pipeline once the cause
//! of a quarantine is fixed (e.g. an event the store refused).
//!
//! Invariants: `list` and `show` never write; `redrive` deletes a record
//! only after its copy is published to the main topic (a failed publish
//! leaves it in place), never re-drives a record whose payload or
//! attributes were truncated (their full content is gone: that would
//! publish a different message), and marks each copy with
//! [`REDRIVEN_FROM_ATTRIBUTE`]. A re-driven event takes the normal path,
//! where an event already counted is a duplicate and a no-op.
//!
//! The commands have one code path for both stores: records come back as
//! one [`StoredRecord`] whichever store holds them, through the selected
//! store's [`QuarantineStore`].

use std::collections::BTreeMap;

use google_cloud_pubsub::client::Publisher;
use google_cloud_pubsub::model::Message;

use crate::store::quarantine::QuarantineStore;
pub use crate::store::quarantine::StoredRecord;
use crate::store::selected::SelectedDb;
use crate::store::StoreError;

/// The attribute naming the quarantine record a re-driven message came from.
pub const REDRIVEN_FROM_ATTRIBUTE: &str = "hotcountQuarantineRedriveOf";

/// A quarantine tool failure.
#[derive(Debug, thiserror::Error)]
pub enum QuarantineError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Publishing a re-driven copy failed; the record is kept.
    #[error("publishing the copy of {id}: {message}")]
    Publish {
        /// The record.
        id: String,
        /// The publisher's error.
        message: String,
    },
}

/// Deletes `record` from the store that holds it.
pub async fn delete(db: &SelectedDb, record: &StoredRecord) -> Result<(), StoreError> {
    db.delete_quarantined(record.id()).await
}

/// What became of one record asked to be re-driven.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redrive {
    /// Published to the main topic as `message_id`; the record is deleted.
    Published {
        /// The new message id.
        message_id: String,
    },
    /// No such record.
    Missing,
    /// Not re-driven: the record does not hold the whole message.
    Refused(String),
}

/// Up to `limit` quarantine records, by document id, of `consumer` only
/// when given.
pub async fn list(
    db: &SelectedDb,
    consumer: Option<&str>,
    limit: usize,
) -> Result<Vec<StoredRecord>, StoreError> {
    db.list_quarantined(consumer, limit).await
}

/// The record `id` (`{consumer}:{record id}` as `list` prints it), if any.
pub async fn show(db: &SelectedDb, id: &str) -> Result<Option<StoredRecord>, StoreError> {
    db.quarantined(id).await
}

/// Re-drives each record of `ids` to the main topic through `publisher`,
/// then deletes it (see the module invariants). Stops at the first failed
/// publish, returning what was done before it in the error's place.
pub async fn redrive(
    db: &SelectedDb,
    publisher: &Publisher,
    ids: &[String],
) -> Result<Vec<(String, Redrive)>, QuarantineError> {
    let mut done = Vec::new();
    for id in ids {
        let Some(stored) = show(db, id).await? else {
            done.push((id.clone(), Redrive::Missing));
            continue;
        };
        if let Some(why) = incomplete(&stored) {
            tracing::warn!(record = %id, why, "not re-driven");
            done.push((id.clone(), Redrive::Refused(why.into())));
            continue;
        }
        let mut attributes: BTreeMap<String, String> =
            stored.record.attributes.iter().cloned().collect();
        attributes.insert(REDRIVEN_FROM_ATTRIBUTE.into(), id.clone());
        let message = Message::new()
            .set_data(stored.record.data.clone())
            .set_attributes(attributes);
        let message_id =
            publisher
                .publish(message)
                .await
                .map_err(|e| QuarantineError::Publish {
                    id: id.clone(),
                    message: e.to_string(),
                })?;
        delete(db, &stored).await?;
        tracing::info!(record = %id, %message_id, "quarantine record re-driven and deleted");
        done.push((id.clone(), Redrive::Published { message_id }));
    }
    Ok(done)
}

/// Why `stored` cannot be re-driven as the message it came from, if so.
fn incomplete(stored: &StoredRecord) -> Option<&'static str> {
    let record = &stored.record;
    if record.data.len() != record.data_len {
        Some("the payload was truncated when quarantined")
    } else if record.attributes_truncated || record.attributes.len() != record.attribute_count {
        Some("attributes were truncated when quarantined")
    } else {
        None
    }
}
