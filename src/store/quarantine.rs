//! The key a quarantine record is stored under, the same in every store:
//! a Firestore document id, and PostgreSQL's `record_id`.
//!
//! Invariant: the id is stable (a record written twice, by a redelivery,
//! lands on the same key) and always a safe Firestore document id, so one
//! message is one record in either store and records move between stores
//! unchanged.

use sha2::{Digest, Sha256};

use crate::model::poison::{hex, PoisonRecord};

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
