//! Firestore values <-> hotcount's documents: how a document's fields are
//! read ([`Fields`], [`ScalarFields`]) and a value is built (as a message, or
//! straight to bytes), shared by the files beside it, each of which codes
//! one kind of document: `memberships.rs`, `counters.rs` (counter shards),
//! `tombstones.rs` (the tombstones' generation), `commit.rs` (the writes of
//! one batch's commit, its marker among them), `records.rs` (the operator
//! tools' quarantine records and reconcile guards), `rollups.rs`,
//! `milestones.rs` and `format.rs`.
//!
//! Invariant: what is written here, the readers here read back unchanged
//! (round-trip tests); a shard's `likes` and a membership's fields are
//! parsed in this folder only, each kind of document in its own file.

use std::collections::HashMap;
use std::hash::BuildHasher;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use fs::document_transform::field_transform::{ServerValue, TransformType};
use fs::document_transform::FieldTransform;
use fs::value::ValueType;

use super::frame::{FoundDocument, Scalar as FieldValue};
use super::wire::{self, Field};

mod commit;
mod counters;
mod format;
mod memberships;
mod milestones;
mod records;
mod rollups;
mod tombstones;

pub use commit::{effects_from_fields, encode_writes};
pub use counters::{counter_increment, counter_shard_likes, shard_likes_from_fields};
pub use format::{data_format_from_document, data_format_write};
pub use memberships::{
    membership_from_fields, membership_post, stored_membership, StoredMembership,
};
pub use milestones::{
    milestone_create, milestone_from_document, milestone_setting_from_document,
    milestone_setting_write, milestone_update,
};
pub use records::{
    correction_writes, guard_from_document, quarantine_from_document, quarantine_write, Correction,
    RepairGuard, StoredRecord,
};
pub use rollups::{
    due_claim, due_clear, rollup_from_fields, rollup_write, rollup_writes_request, stored_rollup,
    taken_record, DUE_FIELDS, READ_FIELDS as ROLLUP_READ_FIELDS,
};
pub use tombstones::{generation_bump, generation_from_fields};

/// A field's value, as the hot path's writes encode it straight to bytes
/// (`google.firestore.v1.Value`, one member of its `value_type` oneof): a
/// membership's (`memberships.rs`) and a counter shard's (`counters.rs`).
enum Scalar<'a> {
    Boolean(bool),
    Integer(i64),
    Timestamp(Timestamp),
    String(&'a str),
}

impl Scalar<'_> {
    /// The bytes of the `Value` message.
    fn len(&self) -> usize {
        match self {
            Self::Boolean(b) => wire::varint_field(1, u64::from(*b)),
            Self::Integer(n) => wire::varint_field(2, *n as u64),
            Self::Timestamp(t) => wire::len_field(10, wire::timestamp_len(t)),
            Self::String(s) => wire::len_field(17, s.len()),
        }
    }

    fn put(&self, buf: &mut Vec<u8>) {
        match self {
            Self::Boolean(b) => wire::put_varint(buf, 1, u64::from(*b)),
            Self::Integer(n) => wire::put_varint(buf, 2, *n as u64),
            Self::Timestamp(t) => {
                wire::put_header(buf, 10, wire::timestamp_len(t));
                wire::put_timestamp(buf, t);
            }
            Self::String(s) => wire::put_str(buf, 17, s),
        }
    }
}

/// An update write as the hot path encodes it straight into a request
/// ([`put_update`]): no `Write` message built, no name, field name or
/// value copied, each length computed once.
struct Update<'a> {
    /// The document's name, in parts written one after the other (a
    /// layout's prefix and an id, so the name is never built).
    name: [&'a str; 2],
    /// The fields it sets, each name once.
    fields: &'a [(&'a str, Scalar<'a>)],
    /// The field paths it sets, the rest of the document kept (`None`:
    /// the fields replace the whole document).
    mask: Option<&'a [&'a str]>,
    /// The precondition: the update time read (`None`: the document must
    /// not exist).
    read: Option<&'a Timestamp>,
    /// The field set to the server's time after the update.
    server_time: &'a str,
}

/// Appends `update` to `request` as a `google.firestore.v1.Write`: the
/// same bytes prost would encode for the message built (tests decode them
/// with gcloud-sdk's types).
#[inline]
fn put_update(request: &mut wire::EncodedCommit, update: &Update<'_>) {
    // Field entry {key = 1, value = 2}, Document {name = 1, fields = 2}.
    let entry_len =
        |(k, v): &(&str, Scalar)| wire::len_field(1, k.len()) + wire::len_field(2, v.len());
    let fields_len: usize = update
        .fields
        .iter()
        .map(|f| wire::len_field(2, entry_len(f)))
        .sum();
    let name_len = update.name[0].len() + update.name[1].len();
    let document_len = wire::len_field(1, name_len) + fields_len;
    // DocumentMask {field_paths = 1}.
    let mask_len = update.mask.map(|paths| {
        paths
            .iter()
            .map(|p| wire::len_field(1, p.len()))
            .sum::<usize>()
    });
    // Precondition {exists = 1 | update_time = 2}.
    let precondition_len = match update.read {
        Some(t) => wire::len_field(2, wire::timestamp_len(t)),
        None => wire::varint_field(1, 0),
    };
    // FieldTransform {field_path = 1, set_to_server_value = 2}.
    let request_time = ServerValue::RequestTime as u64;
    let transform_len =
        wire::len_field(1, update.server_time.len()) + wire::varint_field(2, request_time);
    // Write {update = 1, update_mask = 3, current_document = 4,
    // update_transforms = 7}.
    let write_len = wire::len_field(1, document_len)
        + mask_len.map_or(0, |len| wire::len_field(3, len))
        + wire::len_field(4, precondition_len)
        + wire::len_field(7, transform_len);
    request.push_encoded(write_len, |buf| {
        wire::put_header(buf, 1, document_len);
        wire::put_header(buf, 1, name_len);
        buf.extend_from_slice(update.name[0].as_bytes());
        buf.extend_from_slice(update.name[1].as_bytes());
        for field in update.fields {
            wire::put_header(buf, 2, entry_len(field));
            wire::put_str(buf, 1, field.0);
            wire::put_header(buf, 2, field.1.len());
            field.1.put(buf);
        }
        if let (Some(paths), Some(len)) = (update.mask, mask_len) {
            wire::put_header(buf, 3, len);
            for path in paths {
                wire::put_str(buf, 1, path);
            }
        }
        wire::put_header(buf, 4, precondition_len);
        match update.read {
            Some(t) => {
                wire::put_header(buf, 2, wire::timestamp_len(t));
                wire::put_timestamp(buf, t);
            }
            None => wire::put_varint(buf, 1, 0),
        }
        wire::put_header(buf, 7, transform_len);
        wire::put_str(buf, 1, update.server_time);
        wire::put_varint(buf, 2, request_time);
    });
}

/// A document's fields, as gcloud-sdk decodes them (a map) or as the
/// store's lean messages do (a list of entries).
pub trait Fields {
    /// The value of the field `name`, if set.
    fn value_of(&self, name: &str) -> Option<&ValueType>;
}

impl<S: BuildHasher> Fields for HashMap<String, fs::Value, S> {
    fn value_of(&self, name: &str) -> Option<&ValueType> {
        self.get(name).and_then(|v| v.value_type.as_ref())
    }
}

impl Fields for [Field] {
    /// A linear scan: a document of ours has at most a dozen fields.
    fn value_of(&self, name: &str) -> Option<&ValueType> {
        let found = self.iter().find(|f| f.key == name)?;
        found.value.as_ref().and_then(|v| v.value_type.as_ref())
    }
}

impl Fields for Vec<Field> {
    fn value_of(&self, name: &str) -> Option<&ValueType> {
        self.as_slice().value_of(name)
    }
}

/// A document's scalar fields by name, whatever holds them: a decoded
/// document's fields ([`Fields`]) or a read response's bytes
/// ([`FoundDocument`], read in place).
pub trait ScalarFields {
    /// The field `name`'s value, if set ([`FieldValue::Other`] when it is not
    /// a scalar).
    fn scalar(&self, name: &str) -> Option<FieldValue<'_>>;

    /// [`Self::scalar`] of each of `names`, in their order (in one pass
    /// where the fields are read in place).
    fn scalars<const N: usize>(&self, names: [&str; N]) -> [Option<FieldValue<'_>>; N] {
        names.map(|name| self.scalar(name))
    }
}

impl<T: Fields + ?Sized> ScalarFields for T {
    fn scalar(&self, name: &str) -> Option<FieldValue<'_>> {
        get(self, name).map(|v| match v {
            ValueType::BooleanValue(b) => FieldValue::Boolean(*b),
            ValueType::IntegerValue(n) => FieldValue::Integer(*n),
            ValueType::DoubleValue(d) => FieldValue::Double(*d),
            ValueType::TimestampValue(t) => FieldValue::Timestamp(*t),
            ValueType::StringValue(s) => FieldValue::String(s),
            _ => FieldValue::Other,
        })
    }
}

impl ScalarFields for FoundDocument<'_> {
    fn scalar(&self, name: &str) -> Option<FieldValue<'_>> {
        self.value(name)
    }

    fn scalars<const N: usize>(&self, names: [&str; N]) -> [Option<FieldValue<'_>>; N] {
        self.values(names)
    }
}

/// A field's value, if set.
pub(crate) fn get<'a>(fields: &'a (impl Fields + ?Sized), name: &str) -> Option<&'a ValueType> {
    fields.value_of(name)
}

/// A string field, if it is one.
pub(super) fn text(fields: &(impl Fields + ?Sized), name: &str) -> Option<String> {
    match get(fields, name) {
        Some(ValueType::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

/// The field `name` set to `value`.
pub(super) fn field(name: &str, value: fs::Value) -> Field {
    Field {
        key: name.to_string(),
        value: Some(value),
    }
}

/// A value of type `v`.
pub(super) fn value(v: ValueType) -> fs::Value {
    fs::Value {
        value_type: Some(v),
    }
}

/// A string value.
pub(super) fn string(s: &str) -> fs::Value {
    value(ValueType::StringValue(s.to_string()))
}

/// A boolean value.
pub(super) fn boolean(b: bool) -> fs::Value {
    value(ValueType::BooleanValue(b))
}

/// An integer value.
pub(super) fn int(n: i64) -> fs::Value {
    value(ValueType::IntegerValue(n))
}

/// An array value.
pub(super) fn array(values: Vec<fs::Value>) -> fs::Value {
    value(ValueType::ArrayValue(fs::ArrayValue { values }))
}

/// A timestamp value.
fn timestamp(t: Timestamp) -> fs::Value {
    value(ValueType::TimestampValue(t))
}

/// Sets `field` to the commit's server time.
pub(super) fn server_time(field: &str) -> FieldTransform {
    FieldTransform {
        field_path: field.to_string(),
        transform_type: Some(TransformType::SetToServerValue(
            ServerValue::RequestTime as i32,
        )),
    }
}

pub(crate) fn micros_to_timestamp(micros: i64) -> Timestamp {
    Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1000) as i32,
    }
}

pub(crate) fn timestamp_to_micros(t: &Timestamp) -> i64 {
    t.seconds * 1_000_000 + i64::from(t.nanos) / 1000
}

/// What a batch's read (through its field mask) gets back of `fields`.
#[cfg(test)]
fn through_the_read_mask(fields: &[Field]) -> Vec<Field> {
    let mask = super::documents::READ_FIELDS;
    let kept = fields.iter().filter(|f| mask.contains(&f.key.as_str()));
    kept.cloned().collect()
}
