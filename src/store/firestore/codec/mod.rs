//! Firestore values <-> hotcount's documents: memberships, counter shards
//! and batch markers, and the writes of one batch's commit; the operator
//! tools' documents (quarantine records, reconcile guards) in `records.rs`.
//!
//! Invariant: what is written here, the readers here read back unchanged
//! (round-trip tests); a shard's `likes` and a membership's fields are
//! parsed in this module only.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasher;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use fs::document_transform::field_transform::{ServerValue, TransformType};
use fs::document_transform::FieldTransform;
use fs::value::ValueType;

use super::frame::{FoundDocument, Scalar as FieldValue};
use super::layout::fields::{counter_shard, marker, membership, tombstone_setting};
use super::wire::{self, Field};
use super::{FirestoreStoreConfig, Layout};
use crate::event::Version;
use crate::model::batch::{Batch, Effects, Membership, MembershipKey, Plan, Planned};

mod format;
mod milestones;
mod records;
mod rollups;

pub use format::{data_format_from_document, data_format_write};
pub use milestones::{
    milestone_create, milestone_from_document, milestone_setting_from_document,
    milestone_setting_write, milestone_update,
};
pub use records::{
    correction_writes, guard_from_document, quarantine_from_document, quarantine_write, Correction,
    RepairGuard, StoredRecord,
};
pub use rollups::{due_claim, due_clear, rollup_write, stored_rollup, taken_record, DUE_FIELDS};

/// Appends the writes of one batch's commit to `commit`: changed
/// memberships (each named `names[i]` and with the precondition
/// `update_times[i]`, what was read, for the batch's `i`-th key), one increment
/// per post on the counter shard `counter_shard_of(i)` picks for the `i`-th
/// post of `plan.deltas`, the marker (create-if-absent) and quarantine
/// records. Memberships, most of the writes, are encoded straight to
/// protobuf bytes ([`put_membership_write`]), the rest through [`wire`].
#[allow(clippy::too_many_arguments)]
pub fn encode_writes(
    commit: &mut wire::EncodedCommit,
    layout: &Layout,
    config: &FirestoreStoreConfig,
    batch: &Batch,
    plan: &Plan,
    names: &[String],
    update_times: &[Option<Timestamp>],
    marker: &str,
    counter_shard_of: impl Fn(usize) -> u32,
) {
    for planned in &plan.memberships {
        let read = update_times.get(planned.index).and_then(Option::as_ref);
        // The name the read built; built again only if `names` is short.
        let name = match names.get(planned.index) {
            Some(name) => Cow::Borrowed(name.as_str()),
            None => Cow::Owned(layout.membership(planned.key)),
        };
        let state = NewState::from(planned);
        put_membership_write(commit, &name, planned.key, &state, &batch.id, read);
    }
    for (i, (post, delta)) in plan.deltas.iter().enumerate() {
        put_counter_increment(commit, layout, post, counter_shard_of(i), *delta);
    }
    commit.push(&marker_write(config, batch, plan, marker, counter_shard_of));
    for poison in &batch.poison {
        commit.push(&quarantine_write(layout, &config.consumer, &poison.item));
    }
}

/// A membership field's value, as [`put_membership_write`] encodes it
/// (`google.firestore.v1.Value`, one member of its `value_type` oneof).
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

/// A membership's new state as [`put_membership_write`] writes it, borrowed
/// from where it is (a planned event; a stored membership in tests).
#[derive(Clone, Copy, Debug)]
struct NewState<'a> {
    liked: bool,
    seq: i64,
    occurred_at_micros: i64,
    event_id: &'a str,
}

impl<'a> From<&Planned<'a>> for NewState<'a> {
    fn from(p: &Planned<'a>) -> Self {
        Self {
            liked: p.liked,
            seq: p.event.seq,
            occurred_at_micros: p.event.occurred_at_micros,
            event_id: p.event.event_id(),
        }
    }
}

#[cfg(test)]
impl<'a> From<&'a Membership> for NewState<'a> {
    fn from(m: &'a Membership) -> Self {
        Self {
            liked: m.liked,
            seq: m.version.seq,
            occurred_at_micros: m.version.occurred_at_micros,
            event_id: &m.version.event_id,
        }
    }
}

/// Appends the write of membership `m` of `key`, named `name`, to
/// `commit`: exactly the bytes prost gives the [`wire::Write`] with
/// [`membership_fields`] (in that order), the transform of `updatedAt` to
/// the server time, and the precondition `read` (the update time read; none:
/// the document must not exist). Without building that message: no field
/// list, no copies of the ids, each length computed once.
fn put_membership_write(
    commit: &mut wire::EncodedCommit,
    name: &str,
    key: &MembershipKey,
    m: &NewState,
    batch_id: &str,
    read: Option<&Timestamp>,
) {
    let fields = [
        (membership::POST_ID, Scalar::String(&key.post_id)),
        (membership::USER_ID, Scalar::String(&key.user_id)),
        (membership::LIKED, Scalar::Boolean(m.liked)),
        (membership::SEQ, Scalar::Integer(m.seq)),
        (
            membership::OCCURRED_AT,
            Scalar::Timestamp(micros_to_timestamp(m.occurred_at_micros)),
        ),
        (membership::EVENT_ID, Scalar::String(m.event_id)),
        (membership::BATCH_ID, Scalar::String(batch_id)),
    ];
    // Field entry {key = 1, value = 2}, Document {name = 1, fields = 2}.
    let entry_len =
        |(k, v): &(&str, Scalar)| wire::len_field(1, k.len()) + wire::len_field(2, v.len());
    let fields_len: usize = fields
        .iter()
        .map(|f| wire::len_field(2, entry_len(f)))
        .sum();
    let document_len = wire::len_field(1, name.len()) + fields_len;
    // Precondition {exists = 1 | update_time = 2}.
    let precondition_len = match read {
        Some(t) => wire::len_field(2, wire::timestamp_len(t)),
        None => wire::varint_field(1, 0),
    };
    // FieldTransform {field_path = 1, set_to_server_value = 2}.
    let request_time = ServerValue::RequestTime as u64;
    let transform_len =
        wire::len_field(1, membership::UPDATED_AT.len()) + wire::varint_field(2, request_time);
    // Write {update = 1, current_document = 4, update_transforms = 7}.
    let write_len = wire::len_field(1, document_len)
        + wire::len_field(4, precondition_len)
        + wire::len_field(7, transform_len);
    commit.push_encoded(write_len, |buf| {
        wire::put_header(buf, 1, document_len);
        wire::put_str(buf, 1, name);
        for field in &fields {
            wire::put_header(buf, 2, entry_len(field));
            wire::put_str(buf, 1, field.0);
            wire::put_header(buf, 2, field.1.len());
            field.1.put(buf);
        }
        wire::put_header(buf, 4, precondition_len);
        match read {
            Some(t) => {
                wire::put_header(buf, 2, wire::timestamp_len(t));
                wire::put_timestamp(buf, t);
            }
            None => wire::put_varint(buf, 1, 0),
        }
        wire::put_header(buf, 7, transform_len);
        wire::put_str(buf, 1, membership::UPDATED_AT);
        wire::put_varint(buf, 2, request_time);
    });
}

/// Adds `delta` to counter shard `k` of `post_id` (creating it), keeping
/// its other fields, and sets its `updatedAt` to the commit's time (what the
/// rollup sweep finds recently changed posts by): the one way a count
/// changes.
pub fn counter_increment(layout: &Layout, post_id: &str, k: u32, delta: i64) -> wire::Write {
    wire::Write {
        update: Some(wire::Document {
            name: layout.counter_shard(post_id, k),
            fields: vec![field(counter_shard::POST_ID, string(post_id))],
            update_time: None,
        }),
        delete: None,
        update_mask: Some(fs::DocumentMask {
            field_paths: vec![counter_shard::POST_ID.into()],
        }),
        update_transforms: vec![
            FieldTransform {
                field_path: counter_shard::LIKES.into(),
                transform_type: Some(TransformType::Increment(int(delta))),
            },
            server_time(counter_shard::UPDATED_AT),
        ],
        current_document: None,
    }
}

/// Adds one to the tombstones' generation (creating its document at 1),
/// keeping nothing else, and stamps the commit's time.
pub fn generation_bump(layout: &Layout) -> wire::Write {
    wire::Write {
        update: Some(wire::Document {
            name: layout.tombstone_generation(),
            fields: Vec::new(),
            update_time: None,
        }),
        delete: None,
        update_mask: Some(fs::DocumentMask {
            field_paths: Vec::new(),
        }),
        update_transforms: vec![
            FieldTransform {
                field_path: tombstone_setting::GENERATION.into(),
                transform_type: Some(TransformType::Increment(int(1))),
            },
            server_time(tombstone_setting::UPDATED_AT),
        ],
        current_document: None,
    }
}

/// The tombstones' generation a document holds (0 when it holds none).
pub fn generation_from_fields(fields: &(impl ScalarFields + ?Sized)) -> i64 {
    match fields.scalar(tombstone_setting::GENERATION) {
        Some(FieldValue::Integer(n)) => n,
        _ => 0,
    }
}

/// Appends [`counter_increment`] to `commit`: exactly the bytes prost gives
/// that write (tests compare), without building it (no field list, no
/// mask or transform strings to allocate). One per post per batch.
fn put_counter_increment(
    commit: &mut wire::EncodedCommit,
    layout: &Layout,
    post_id: &str,
    k: u32,
    delta: i64,
) {
    let name = layout.counter_shard(post_id, k);
    let post = Scalar::String(post_id);
    let increment = Scalar::Integer(delta);
    // Field entry {key = 1, value = 2}; Document {name = 1, fields = 2}.
    let entry_len =
        wire::len_field(1, counter_shard::POST_ID.len()) + wire::len_field(2, post.len());
    let document_len = wire::len_field(1, name.len()) + wire::len_field(2, entry_len);
    // DocumentMask {field_paths = 1}.
    let mask_len = wire::len_field(1, counter_shard::POST_ID.len());
    // FieldTransform {field_path = 1, increment = 3}.
    let transform_len =
        wire::len_field(1, counter_shard::LIKES.len()) + wire::len_field(3, increment.len());
    // FieldTransform {field_path = 1, set_to_server_value = 2}.
    let request_time = ServerValue::RequestTime as u64;
    let stamp_len =
        wire::len_field(1, counter_shard::UPDATED_AT.len()) + wire::varint_field(2, request_time);
    // Write {update = 1, update_mask = 3, update_transforms = 7 (twice)}.
    let write_len = wire::len_field(1, document_len)
        + wire::len_field(3, mask_len)
        + wire::len_field(7, transform_len)
        + wire::len_field(7, stamp_len);
    commit.push_encoded(write_len, |buf| {
        wire::put_header(buf, 1, document_len);
        wire::put_str(buf, 1, &name);
        wire::put_header(buf, 2, entry_len);
        wire::put_str(buf, 1, counter_shard::POST_ID);
        wire::put_header(buf, 2, post.len());
        post.put(buf);
        wire::put_header(buf, 3, mask_len);
        wire::put_str(buf, 1, counter_shard::POST_ID);
        wire::put_header(buf, 7, transform_len);
        wire::put_str(buf, 1, counter_shard::LIKES);
        wire::put_header(buf, 3, increment.len());
        increment.put(buf);
        wire::put_header(buf, 7, stamp_len);
        wire::put_str(buf, 1, counter_shard::UPDATED_AT);
        wire::put_varint(buf, 2, request_time);
    });
}

/// A counter shard's `likes`: 0 when absent.
pub fn counter_shard_likes(doc: &fs::Document) -> i64 {
    match get(&doc.fields, counter_shard::LIKES) {
        Some(ValueType::IntegerValue(n)) => *n,
        // An increment that overflowed saturates; a double never comes from us.
        Some(ValueType::DoubleValue(d)) => *d as i64,
        _ => 0,
    }
}

fn marker_write(
    config: &FirestoreStoreConfig,
    batch: &Batch,
    plan: &Plan,
    name: &str,
    counter_shard_of: impl Fn(usize) -> u32,
) -> wire::Write {
    let expire = std::time::SystemTime::now() + config.marker_ttl;
    let e = plan.effects;
    let mut fields = vec![
        field(marker::CONSUMER, string(&config.consumer)),
        field(marker::BATCH_ID, string(&batch.id)),
        field(marker::MESSAGES, int(batch.message_count as i64)),
        field(marker::APPLIED, int(e.applied as i64)),
        field(marker::DUPLICATES, int(e.duplicates as i64)),
        field(marker::STALE, int(e.stale as i64)),
        field(marker::POISON, int(e.poison as i64)),
        field(marker::POSTS, int(plan.deltas.len() as i64)),
        field(marker::EXPIRE_AT, timestamp(expire.into())),
    ];
    let mut update_transforms = vec![server_time(marker::COMMITTED_AT)];
    // The rollup due record, in the same commit as the increments.
    if config.due_records && !plan.deltas.is_empty() {
        let posts = plan.deltas.keys().map(|p| string(p)).collect();
        let shards = (0..plan.deltas.len())
            .map(|i| int(i64::from(counter_shard_of(i))))
            .collect();
        fields.push(field(marker::ROLLUP_POSTS, array(posts)));
        fields.push(field(marker::ROLLUP_SHARDS, array(shards)));
        update_transforms.push(server_time(marker::ROLLUP_DUE));
    }
    wire::Write {
        update: Some(wire::Document {
            name: name.to_string(),
            fields,
            update_time: None,
        }),
        update_transforms,
        current_document: Some(fs::Precondition {
            condition_type: Some(fs::precondition::ConditionType::Exists(false)),
        }),
        ..Default::default()
    }
}

/// The effects a batch marker recorded.
pub fn effects_from_fields(fields: &(impl ScalarFields + ?Sized)) -> Effects {
    let count = |name: &str| match fields.scalar(name) {
        Some(FieldValue::Integer(n)) => u64::try_from(n).unwrap_or(0),
        _ => 0,
    };
    Effects {
        applied: count(marker::APPLIED),
        duplicates: count(marker::DUPLICATES),
        stale: count(marker::STALE),
        poison: count(marker::POISON),
    }
}

/// A membership's fields as a list (the reference [`put_membership_write`]
/// encodes without building it; tests compare the two).
#[cfg(test)]
fn membership_fields(key: &MembershipKey, m: &Membership, batch_id: &str) -> Vec<Field> {
    let occurred_at = micros_to_timestamp(m.version.occurred_at_micros);
    vec![
        field(membership::POST_ID, string(&key.post_id)),
        field(membership::USER_ID, string(&key.user_id)),
        field(membership::LIKED, boolean(m.liked)),
        field(membership::SEQ, int(m.version.seq)),
        field(membership::OCCURRED_AT, timestamp(occurred_at)),
        field(membership::EVENT_ID, string(&m.version.event_id)),
        field(membership::BATCH_ID, string(batch_id)),
    ]
}

/// Reads a membership document's state; `None` if it is not one of ours.
pub fn membership_from_fields(fields: &(impl ScalarFields + ?Sized)) -> Option<Membership> {
    let [liked, seq, occurred_at, event_id] = fields.scalars([
        membership::LIKED,
        membership::SEQ,
        membership::OCCURRED_AT,
        membership::EVENT_ID,
    ]);
    let liked = match liked? {
        FieldValue::Boolean(b) => b,
        _ => return None,
    };
    let seq = match seq {
        Some(FieldValue::Integer(n)) => n,
        _ => 0,
    };
    let occurred_at_micros = match occurred_at {
        Some(FieldValue::Timestamp(t)) => timestamp_to_micros(&t),
        _ => 0,
    };
    let event_id = match event_id {
        Some(FieldValue::String(s)) => s.to_string(),
        _ => String::new(),
    };
    Some(Membership {
        liked,
        version: Version {
            seq,
            occurred_at_micros,
            event_id,
        },
    })
}

/// A membership document as the tools read it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMembership {
    /// Its (post, user).
    pub key: MembershipKey,
    /// Its state.
    pub membership: Membership,
    /// `updatedAt` (the commit's server time), microseconds since the
    /// epoch; `None` if absent.
    pub updated_at_micros: Option<i64>,
}

/// Reads a membership document whole; `None` unless it names its post and
/// user and holds a state.
pub fn stored_membership(doc: &fs::Document) -> Option<StoredMembership> {
    let membership = membership_from_fields(&doc.fields)?;
    let key = MembershipKey {
        post_id: text(&doc.fields, membership::POST_ID)?,
        user_id: text(&doc.fields, membership::USER_ID)?,
    };
    let updated_at_micros = match get(&doc.fields, membership::UPDATED_AT) {
        Some(ValueType::TimestampValue(t)) => Some(timestamp_to_micros(t)),
        _ => None,
    };
    Some(StoredMembership {
        key,
        membership,
        updated_at_micros,
    })
}

/// The post a membership document names (read by a query projecting it).
pub fn membership_post(doc: &fs::Document) -> Option<String> {
    text(&doc.fields, membership::POST_ID)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn membership_fields_round_trip() {
        let key = MembershipKey {
            post_id: "p".into(),
            user_id: "u".into(),
        };
        let m = Membership {
            liked: true,
            version: Version {
                seq: 3,
                occurred_at_micros: -1_500_001,
                event_id: "e".into(),
            },
        };
        let fields = membership_fields(&key, &m, "b");
        assert_eq!(membership_from_fields(&fields), Some(m.clone()));
        let masked = through_the_read_mask(&fields);
        assert!(masked.len() < fields.len(), "the ids are not read back");
        assert_eq!(membership_from_fields(&masked), Some(m.clone()));
        let doc = fs::Document {
            fields: fields
                .into_iter()
                .map(|f| (f.key, f.value.unwrap_or_default()))
                .collect(),
            ..Default::default()
        };
        assert_eq!(membership_from_fields(&doc.fields), Some(m.clone()));
        let stored = stored_membership(&doc).expect("a membership");
        assert_eq!((stored.key, stored.membership), (key, m));
        assert_eq!(membership_post(&doc).as_deref(), Some("p"));
    }

    /// The [`wire::Write`] that [`put_membership_write`] encodes directly.
    fn membership_write(
        name: &str,
        key: &MembershipKey,
        m: &Membership,
        read: Option<&Timestamp>,
    ) -> wire::Write {
        let precondition = match read {
            Some(time) => fs::precondition::ConditionType::UpdateTime(*time),
            None => fs::precondition::ConditionType::Exists(false),
        };
        wire::Write {
            update: Some(wire::Document {
                name: name.into(),
                fields: membership_fields(key, m, "batch-1"),
                update_time: None,
            }),
            update_transforms: vec![server_time(membership::UPDATED_AT)],
            current_document: Some(fs::Precondition {
                condition_type: Some(precondition),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn counter_increments_encode_as_the_message_they_stand_for() {
        let layout = Layout::new("p", "(default)", "hc_");
        for post in ["post-1", "", "é/x"] {
            for k in [0, 7, u32::MAX] {
                for delta in [1, -1, 0, 300, i64::MIN, i64::MAX] {
                    let mut direct = wire::EncodedCommit::new("d", 0);
                    put_counter_increment(&mut direct, &layout, post, k, delta);
                    let mut built = wire::EncodedCommit::new("d", 0);
                    built.push(&counter_increment(&layout, post, k, delta));
                    assert_eq!(direct.writes(), 1);
                    assert_eq!(
                        direct.finish(b"t"),
                        built.finish(b"t"),
                        "{post} {k} {delta}"
                    );
                }
            }
        }
    }

    #[test]
    fn membership_writes_encode_as_the_message_they_stand_for() {
        let key = MembershipKey {
            post_id: "post-1".into(),
            user_id: "u".repeat(200),
        };
        let times = [
            None,
            Some(Timestamp::default()),
            Some(Timestamp {
                seconds: 1_700_000_000,
                nanos: 123_456_000,
            }),
        ];
        for (liked, seq, micros) in [(true, 0, 0), (false, -7, -1_500_001), (true, i64::MAX, 1)] {
            let m = Membership {
                liked,
                version: Version {
                    seq,
                    occurred_at_micros: micros,
                    event_id: "01J9Z8Q7ABCDEF".into(),
                },
            };
            for read in &times {
                let name = "projects/p/databases/d/documents/likes/x";
                let mut direct = wire::EncodedCommit::new("d", 0);
                put_membership_write(
                    &mut direct,
                    name,
                    &key,
                    &NewState::from(&m),
                    "batch-1",
                    read.as_ref(),
                );
                let mut built = wire::EncodedCommit::new("d", 0);
                built.push(&membership_write(name, &key, &m, read.as_ref()));
                assert_eq!(direct.finish(b"t"), built.finish(b"t"), "{m:?} {read:?}");
            }
        }
    }

    #[test]
    fn stored_memberships_need_post_user_and_liked() {
        let mut doc = fs::Document {
            fields: HashMap::from([
                (membership::POST_ID.into(), string("p")),
                (membership::USER_ID.into(), string("u")),
                (membership::LIKED.into(), boolean(true)),
                (
                    membership::UPDATED_AT.into(),
                    timestamp(Timestamp {
                        seconds: 2,
                        nanos: 5_000,
                    }),
                ),
            ]),
            ..Default::default()
        };
        let row = stored_membership(&doc).expect("a membership");
        assert_eq!(row.updated_at_micros, Some(2_000_005));
        assert!(row.membership.liked);
        doc.fields.remove(membership::POST_ID);
        assert_eq!(stored_membership(&doc), None);
    }

    #[test]
    fn markers_record_the_effects_they_are_read_back_with() {
        let config = FirestoreStoreConfig {
            consumer: "c1".into(),
            counter_shards: 1,
            counter_shard_target_writes_per_sec: 0,
            marker_ttl: Duration::ZERO,
            due_records: false,
        };
        let batch = Batch::new(Vec::new(), Vec::new());
        let mut plan = batch.plan(&HashMap::<MembershipKey, Membership>::new());
        plan.effects = Effects {
            applied: 1,
            duplicates: 2,
            stale: 3,
            poison: 4,
        };
        let write = marker_write(&config, &batch, &plan, "m", |_| 0);
        let Some(doc) = write.update else {
            panic!("an update");
        };
        assert_eq!(effects_from_fields(&doc.fields), plan.effects);
        let masked = through_the_read_mask(&doc.fields);
        assert!(masked.len() < doc.fields.len());
        assert_eq!(effects_from_fields(&masked), plan.effects);
    }

    /// What a batch's read (through its field mask) gets back of `fields`.
    fn through_the_read_mask(fields: &[Field]) -> Vec<Field> {
        let mask = super::super::documents::READ_FIELDS;
        let kept = fields.iter().filter(|f| mask.contains(&f.key.as_str()));
        kept.cloned().collect()
    }
}
