//! Rows <-> hotcount's values: memberships, batch-marker effects and
//! quarantine records, and the parameter arrays one statement takes for a
//! whole batch.
//!
//! Invariants: what the store writes, these readers read back unchanged,
//! except that `text` cannot hold U+0000: a NUL in a quarantine record's
//! message id, reason or attributes is stored as U+FFFD (the payload is
//! stored as bytes, whole up to its bound, with its full SHA-256), and an
//! attribute so changed sets `attributes_truncated`. So every
//! [`PoisonRecord`] is a record the server accepts.

use std::borrow::Cow;

use tokio_postgres::Row;

use super::errors::query_error;
use crate::event::Version;
use crate::model::batch::{Effects, Membership, MembershipKey, Planned};
use crate::model::poison::PoisonRecord;
use crate::store::StoreError;

/// A membership row ([`super::schema::LOCK_MEMBERSHIPS`]'s columns).
pub fn membership_from_row(row: &Row) -> Result<(MembershipKey, Membership), StoreError> {
    let err = |e: tokio_postgres::Error| query_error("ReadMembership", &e);
    let key = MembershipKey {
        post_id: row.try_get(0).map_err(err)?,
        user_id: row.try_get(1).map_err(err)?,
    };
    let membership = Membership {
        liked: row.try_get(2).map_err(err)?,
        version: Version {
            seq: row.try_get(3).map_err(err)?,
            occurred_at_micros: row.try_get(4).map_err(err)?,
            event_id: row.try_get(5).map_err(err)?,
        },
    };
    Ok((key, membership))
}

/// The effects a batch marker row recorded ([`super::schema::READ_MARKER`]).
pub fn effects_from_row(row: &Row) -> Result<Effects, StoreError> {
    let err = |e: tokio_postgres::Error| query_error("ReadMarker", &e);
    let get = |i: usize| -> Result<u64, StoreError> {
        let n: i64 = row.try_get(i).map_err(err)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    Ok(Effects {
        applied: get(0)?,
        duplicates: get(1)?,
        stale: get(2)?,
        poison: get(3)?,
    })
}

/// Memberships as the column arrays of [`super::schema::UPDATE_MEMBERSHIPS`]
/// and [`super::schema::INSERT_MEMBERSHIPS`] (one element per row).
#[derive(Debug, Default)]
pub struct MembershipColumns<'a> {
    /// Post ids.
    pub post_ids: Vec<&'a str>,
    /// User ids.
    pub user_ids: Vec<&'a str>,
    /// New `liked`.
    pub liked: Vec<bool>,
    /// New version: seq.
    pub seqs: Vec<i64>,
    /// New version: occurred-at, microseconds.
    pub occurred_at_micros: Vec<i64>,
    /// New version: event id.
    pub event_ids: Vec<&'a str>,
}

impl<'a> MembershipColumns<'a> {
    /// Appends one row.
    pub fn push(&mut self, planned: &Planned<'a>) {
        self.post_ids.push(&planned.key.post_id);
        self.user_ids.push(&planned.key.user_id);
        self.liked.push(planned.liked);
        self.seqs.push(planned.event.seq);
        self.occurred_at_micros
            .push(planned.event.occurred_at_micros);
        self.event_ids.push(planned.event.event_id());
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.post_ids.is_empty()
    }
}

/// A quarantine record's column values ([`super::schema::UPSERT_QUARANTINE`]
/// `$2..=$11`), NULs replaced (see the module invariants).
#[derive(Debug)]
pub struct QuarantineColumns<'a> {
    /// The record id (`crate::store::quarantine::record_id`).
    pub record_id: String,
    /// The message id, bounded.
    pub message_id: Cow<'a, str>,
    /// Why.
    pub reason: Cow<'a, str>,
    /// The payload, bounded.
    pub data: &'a [u8],
    /// The payload's full length.
    pub data_bytes: i64,
    /// SHA-256 of the full payload.
    pub data_sha256: &'a str,
    /// Attribute keys.
    pub keys: Vec<Cow<'a, str>>,
    /// Attribute values, pairwise with `keys`.
    pub values: Vec<Cow<'a, str>>,
    /// How many attributes the message had.
    pub attribute_count: i32,
    /// Whether any attribute was dropped, truncated or had a NUL replaced.
    pub attributes_truncated: bool,
}

impl<'a> QuarantineColumns<'a> {
    /// The columns of `record`.
    pub fn of(record: &'a PoisonRecord) -> Self {
        let mut replaced = false;
        let mut keys = Vec::with_capacity(record.attributes.len());
        let mut values = Vec::with_capacity(record.attributes.len());
        for (key, value) in &record.attributes {
            keys.push(storable(key, &mut replaced));
            values.push(storable(value, &mut replaced));
        }
        let mut ignored = false;
        Self {
            record_id: crate::store::quarantine::record_id(record),
            message_id: storable(record.stored_message_id(), &mut ignored),
            reason: storable(&record.reason, &mut ignored),
            data: &record.data,
            data_bytes: i64::try_from(record.data_len).unwrap_or(i64::MAX),
            data_sha256: &record.data_sha256,
            keys,
            values,
            attribute_count: i32::try_from(record.attribute_count).unwrap_or(i32::MAX),
            attributes_truncated: record.attributes_truncated || replaced,
        }
    }
}

/// `text` as PostgreSQL can store it: U+0000 replaced by U+FFFD; sets
/// `replaced` when anything was.
fn storable<'a>(text: &'a str, replaced: &mut bool) -> Cow<'a, str> {
    if text.contains('\0') {
        *replaced = true;
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// A quarantine record as stored, read back by the operator tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    /// The consumer that wrote it.
    pub consumer: String,
    /// Its id within the consumer (`crate::store::quarantine::record_id`).
    pub record_id: String,
    /// The batch that wrote it last.
    pub batch_id: String,
    /// The record's content.
    pub record: PoisonRecord,
    /// When it was written (the server's text form).
    pub quarantined_at: String,
}

/// A quarantine row ([`super::schema::LIST_QUARANTINE`]'s columns).
pub fn quarantine_from_row(row: &Row) -> Result<StoredRecord, StoreError> {
    let err = |e: tokio_postgres::Error| query_error("ReadQuarantine", &e);
    let keys: Vec<String> = row.try_get(7).map_err(err)?;
    let values: Vec<String> = row.try_get(8).map_err(err)?;
    let data_bytes: i64 = row.try_get(5).map_err(err)?;
    let attribute_count: i32 = row.try_get(9).map_err(err)?;
    Ok(StoredRecord {
        consumer: row.try_get(0).map_err(err)?,
        record_id: row.try_get(1).map_err(err)?,
        batch_id: row.try_get(11).map_err(err)?,
        record: PoisonRecord {
            message_id: row.try_get(2).map_err(err)?,
            reason: row.try_get(3).map_err(err)?,
            data: row.try_get(4).map_err(err)?,
            data_len: usize::try_from(data_bytes).unwrap_or(0),
            data_sha256: row.try_get(6).map_err(err)?,
            attributes: keys.into_iter().zip(values).collect(),
            attribute_count: usize::try_from(attribute_count).unwrap_or(0),
            attributes_truncated: row.try_get(10).map_err(err)?,
            kind: PoisonRecord::STORED,
        },
        quarantined_at: row.try_get(12).map_err(err)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_is_replaced_and_flagged_everything_else_is_kept() {
        let attributes = [("k\0".to_string(), "v".to_string())].into_iter().collect();
        let record = PoisonRecord::new("m\0".into(), "r\0".into(), b"\0x", attributes);
        let columns = QuarantineColumns::of(&record);
        assert_eq!(columns.keys, ["k\u{FFFD}"]);
        assert_eq!(columns.values, ["v"]);
        assert!(columns.attributes_truncated);
        assert_eq!(columns.message_id, "m\u{FFFD}");
        assert_eq!(columns.reason, "r\u{FFFD}");
        assert_eq!(columns.data, b"\0x", "bytes are stored as they are");

        let clean = PoisonRecord::new("m".into(), "r".into(), b"x", Default::default());
        let columns = QuarantineColumns::of(&clean);
        assert!(!columns.attributes_truncated);
        assert!(matches!(columns.reason, Cow::Borrowed("r")));
    }
}
