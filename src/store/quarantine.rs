//! Quarantine records as the stores keep them: the key a record is stored
//! under, the same in every store (a Firestore document id, PostgreSQL's
//! `record_id`), and what the quarantine commands ask of a store
//! ([`QuarantineStore`], implemented by each backend in its folder).
//!
//! Invariant: the id is stable (a record written twice, by a redelivery,
//! lands on the same key) and always a safe Firestore document id, so one
//! message is one record in either store and records move between stores
//! unchanged.

use std::future::Future;

use sha2::{Digest, Sha256};

use crate::model::poison::{hex, PoisonRecord};
use crate::store::StoreError;

/// The record's id: the message id when it is a safe Firestore document
/// id, else `sha256-{hex of the message id}`.
pub fn record_id(record: &PoisonRecord) -> String {
    if is_safe_doc_id(&record.message_id) {
        record.message_id.clone()
    } else {
        format!(
            "sha256-{}",
            hex(&Sha256::digest(record.message_id.as_bytes()))
        )
    }
}

/// Whether `id` can be used as (part of) a document id as it is: 1..=256
/// printable ASCII bytes without `/`, not `.` or `..`, not of the reserved
/// `__.*__` form.
fn is_safe_doc_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= PoisonRecord::MAX_ID_BYTES
        && id.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
        && id != "."
        && id != ".."
        && !(id.starts_with("__") && id.ends_with("__"))
}

/// One quarantine record as the operator commands show it, whichever
/// store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    id: String,
    /// The consumer that wrote it.
    pub consumer: String,
    /// The record's content.
    pub record: PoisonRecord,
    /// When it was written, if known.
    pub quarantined_at: Option<String>,
}

impl StoredRecord {
    /// The record `id` (`{consumer}:{record id}`) of `consumer`, as read.
    pub fn new(
        id: String,
        consumer: String,
        record: PoisonRecord,
        quarantined_at: Option<String>,
    ) -> Self {
        Self {
            id,
            consumer,
            record,
            quarantined_at,
        }
    }

    /// Its id, `{consumer}:{record id}` (`crate::store::quarantine::record_id`), as
    /// `list` prints it and `show` and `redrive` take it.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// What the quarantine commands (`list`, `show`, `redrive`) ask of a store.
pub trait QuarantineStore: Sync {
    /// Up to `limit` records, by id, of `consumer` only when given.
    fn list_quarantined(
        &self,
        consumer: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<StoredRecord>, StoreError>> + Send;

    /// The record `id` (`{consumer}:{record id}`), if any.
    fn quarantined(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<StoredRecord>, StoreError>> + Send;

    /// Deletes the record `id`; deleting a missing one is no error.
    fn delete_quarantined(&self, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A record id's consumer and its record id within it (a consumer name
/// never holds `:`); `None` for an id no record can have.
pub fn split_id(id: &str) -> Option<(&str, &str)> {
    id.split_once(':')
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn doc_id_is_the_message_id_when_safe_and_a_digest_otherwise() {
        let record = |id: &str| PoisonRecord::new(id.into(), "r".into(), b"", BTreeMap::new());
        assert_eq!(record_id(&record("1234567890")), "1234567890");
        assert_eq!(record_id(&record("event-abc")), "event-abc");
        for unsafe_id in ["", "a/b", "__x__", ".", "..", "sp ace", "é"] {
            let id = record_id(&record(unsafe_id));
            assert!(id.starts_with("sha256-") && id.len() == 71, "{unsafe_id:?}");
        }
        assert_ne!(record_id(&record("a/b")), record_id(&record("a/c")));
    }

    #[test]
    fn a_long_message_id_is_stored_under_its_digest() {
        let record = PoisonRecord::new("x".repeat(5000), "r".into(), b"", BTreeMap::new());
        assert!(record_id(&record).starts_with("sha256-"));
    }
}
