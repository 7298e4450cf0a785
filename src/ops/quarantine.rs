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

use std::collections::BTreeMap;

use gcloud_sdk::google::firestore::v1 as fs;
use google_cloud_pubsub::client::Publisher;
use google_cloud_pubsub::model::Message;

use crate::store::firestore::{quarantine_from_document, FirestoreStore, StoredRecord};
use crate::store::StoreError;

/// The attribute naming the quarantine record a re-driven message came from.
pub const REDRIVEN_FROM_ATTRIBUTE: &str = "hotcountQuarantineRedriveOf";

/// A quarantine tool failure.
#[derive(Debug, thiserror::Error)]
pub enum QuarantineError {
    /// Firestore failed.
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
    store: &FirestoreStore,
    consumer: Option<&str>,
    limit: usize,
) -> Result<Vec<StoredRecord>, StoreError> {
    use fs::structured_query::{field_filter, filter, FieldFilter, FieldReference, Filter};
    let layout = store.layout();
    let filter = consumer.map(|c| Filter {
        filter_type: Some(filter::FilterType::FieldFilter(FieldFilter {
            field: Some(FieldReference {
                field_path: "consumer".into(),
            }),
            op: field_filter::Operator::Equal as i32,
            value: Some(fs::Value {
                value_type: Some(fs::value::ValueType::StringValue(c.to_string())),
            }),
        })),
    });
    let query = fs::StructuredQuery {
        from: vec![fs::structured_query::CollectionSelector {
            collection_id: layout.collection("quarantine"),
            all_descendants: false,
        }],
        r#where: filter,
        limit: Some(i32::try_from(limit).unwrap_or(i32::MAX)),
        ..Default::default()
    };
    let documents = store.run_query(&layout.root(), query, None).await?;
    Ok(documents.iter().map(quarantine_from_document).collect())
}

/// The record with document id `id` (`{consumer}:{message id}` as `list`
/// prints it), if any.
pub async fn show(store: &FirestoreStore, id: &str) -> Result<Option<StoredRecord>, StoreError> {
    if id.is_empty() || id.contains('/') {
        return Ok(None);
    }
    let name = store.layout().quarantine_record(id);
    Ok(store
        .get(&name)
        .await?
        .as_ref()
        .map(quarantine_from_document))
}

/// Re-drives each record of `ids` to the main topic through `publisher`,
/// then deletes it (see the module invariants). Stops at the first failed
/// publish, returning what was done before it in the error's place.
pub async fn redrive(
    store: &FirestoreStore,
    publisher: &Publisher,
    ids: &[String],
) -> Result<Vec<(String, Redrive)>, QuarantineError> {
    let mut done = Vec::new();
    for id in ids {
        let Some(stored) = show(store, id).await? else {
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
        delete(store, &stored.name).await?;
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

/// Deletes the document `name` (it must exist).
async fn delete(store: &FirestoreStore, name: &str) -> Result<(), StoreError> {
    let request = fs::CommitRequest {
        database: store.layout().database.clone(),
        writes: vec![fs::Write {
            operation: Some(fs::write::Operation::Delete(name.to_string())),
            current_document: Some(fs::Precondition {
                condition_type: Some(fs::precondition::ConditionType::Exists(true)),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    store
        .client()
        .commit(request)
        .await
        .map_err(|s| crate::store::firestore::status_error("Commit", &s))?;
    Ok(())
}
