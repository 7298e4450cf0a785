//! Firestore values <-> rollups (`counts/{post}`): the write of one refresh
//! (encoded straight into its request) and the rollup read back.
//!
//! Invariant: a rollup write carries the condition that the document is
//! still the one read (its update time, or absent), and sets `updatedAt` to
//! the server's time; its bytes are the ones prost gives the message built
//! field by field (test); what is written here is read back unchanged
//! (round-trip test).

use std::collections::HashMap;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use fs::precondition::ConditionType;
use fs::value::ValueType;

use super::super::frame::Scalar as FieldValue;
use super::super::layout::fields::{marker, rollup};
use super::super::{wire, Layout};
use super::{
    get, int, micros_to_timestamp, put_update, server_time, string, timestamp_to_micros, value,
    Scalar, ScalarFields, Update,
};
use crate::store::rollup::{DueRecord, RollupWrite, StoredRollup, TakenRecord};
use crate::store::ChangedCounter;

/// The fields of a rollup due record in its batch marker.
pub const DUE_FIELDS: [&str; 3] = [
    marker::ROLLUP_POSTS,
    marker::ROLLUP_SHARDS,
    marker::ROLLUP_DUE,
];

/// The claim of a due record found waiting: its wait restarts at `now`
/// (the store's read time of the query that found it), on the condition
/// that the marker is still the one found (its update time).
pub fn due_claim(doc: &fs::Document, now: gcloud_sdk::prost_types::Timestamp) -> fs::Write {
    let fields = HashMap::from([(
        marker::ROLLUP_DUE.to_string(),
        value(ValueType::TimestampValue(now)),
    )]);
    let condition = match doc.update_time {
        Some(t) => ConditionType::UpdateTime(t),
        None => ConditionType::Exists(true),
    };
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: doc.name.clone(),
            fields,
            ..Default::default()
        })),
        update_mask: Some(fs::DocumentMask {
            field_paths: vec![marker::ROLLUP_DUE.to_string()],
        }),
        update_transforms: Vec::new(),
        current_document: Some(fs::Precondition {
            condition_type: Some(condition),
        }),
    }
}

/// The clearing of a due record: its fields removed from the marker (the
/// rest kept), if the marker still exists.
pub fn due_clear(layout: &Layout, record: &DueRecord) -> fs::Write {
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: layout.marker(&record.consumer, &record.batch_id),
            ..Default::default()
        })),
        update_mask: Some(fs::DocumentMask {
            field_paths: DUE_FIELDS.map(String::from).to_vec(),
        }),
        update_transforms: Vec::new(),
        current_document: Some(fs::Precondition {
            condition_type: Some(ConditionType::Exists(true)),
        }),
    }
}

/// The due record a marker document holds; `None` without its fields.
pub fn taken_record(doc: &fs::Document) -> Option<TakenRecord> {
    let text = |name: &str| match get(&doc.fields, name) {
        Some(ValueType::StringValue(s)) => Some(s.clone()),
        _ => None,
    };
    let array = |name: &str| match get(&doc.fields, name) {
        Some(ValueType::ArrayValue(a)) => a.values.clone(),
        _ => Vec::new(),
    };
    let shards = array(marker::ROLLUP_SHARDS);
    let posts = array(marker::ROLLUP_POSTS)
        .into_iter()
        .enumerate()
        .filter_map(|(i, v)| match v.value_type {
            Some(ValueType::StringValue(post_id)) => Some(ChangedCounter {
                post_id,
                shard: match shards.get(i).and_then(|s| s.value_type.as_ref()) {
                    Some(ValueType::IntegerValue(k)) => u32::try_from(*k).ok(),
                    _ => None,
                },
            }),
            _ => None,
        })
        .collect();
    let committed_at = match get(&doc.fields, marker::COMMITTED_AT) {
        Some(ValueType::TimestampValue(t)) => Some(timestamp_to_micros(t)),
        _ => None,
    };
    Some(TakenRecord {
        record: DueRecord {
            consumer: text(marker::CONSUMER)?,
            batch_id: text(marker::BATCH_ID)?,
        },
        posts,
        committed_at,
    })
}

/// The BatchWrite request of refreshed rollups `writes` on `layout`'s
/// database, each write encoded in place ([`put_rollup_write`]).
pub fn rollup_writes_request<'w, 'a: 'w>(
    layout: &Layout,
    writes: impl Iterator<Item = &'w RollupWrite<'a>> + Clone,
) -> wire::EncodedCommit {
    // ~200 bytes a rollup write, besides its post id.
    let size = writes.clone().map(|w| 200 + w.post_id.len()).sum();
    let mut request = wire::EncodedCommit::new(&layout.database, size);
    for write in writes {
        put_rollup_write(&mut request, layout, write);
    }
    request
}

/// Appends the write of one refreshed rollup to `request` (a Commit's or
/// a BatchWrite's: their writes are the same field): `postId`, `likes`,
/// `asOf` and `shards`, and `milestone` when it records milestones (other
/// fields of the document are kept), `updatedAt` set to the server time,
/// on the condition that the document is the one read. Encoded in place,
/// as a batch's membership writes are: no field map, name or mask built.
fn put_rollup_write(request: &mut wire::EncodedCommit, layout: &Layout, write: &RollupWrite<'_>) {
    // The highest milestone it records, so a post that falls below it and
    // climbs back reaches nothing again (kept by writes that record none).
    let highest = write.milestones.iter().max().copied();
    let fields = [
        (rollup::POST_ID, Scalar::String(write.post_id)),
        (rollup::LIKES, Scalar::Integer(write.likes)),
        (
            rollup::AS_OF,
            Scalar::Timestamp(micros_to_timestamp(write.as_of)),
        ),
        (rollup::SHARDS, Scalar::Integer(i64::from(write.shards))),
        (rollup::MILESTONE, Scalar::Integer(highest.unwrap_or(0))),
    ];
    let mask = [
        rollup::POST_ID,
        rollup::LIKES,
        rollup::AS_OF,
        rollup::SHARDS,
        rollup::MILESTONE,
    ];
    let set = if highest.is_some() { 5 } else { 4 };
    put_update(
        request,
        &Update {
            name: layout.rollup_parts(write.post_id),
            fields: &fields[..set],
            mask: Some(&mask[..set]),
            read: write.previous.and_then(|p| p.update_time.as_ref()),
            server_time: rollup::UPDATED_AT,
        },
    );
}

/// [`put_rollup_write`]'s write built of gcloud-sdk's messages, field by
/// field: for a Commit built of messages (a rollup that records
/// milestones, with their records), and what the encoding in place is
/// tested and measured against.
pub fn rollup_write(layout: &Layout, write: &RollupWrite<'_>) -> fs::Write {
    let mut fields = HashMap::from([
        (rollup::POST_ID.to_string(), string(write.post_id)),
        (rollup::LIKES.to_string(), int(write.likes)),
        (
            rollup::AS_OF.to_string(),
            value(ValueType::TimestampValue(micros_to_timestamp(write.as_of))),
        ),
        (rollup::SHARDS.to_string(), int(i64::from(write.shards))),
    ]);
    let mut mask: Vec<String> = [
        rollup::POST_ID,
        rollup::LIKES,
        rollup::AS_OF,
        rollup::SHARDS,
    ]
    .map(String::from)
    .to_vec();
    if let Some(&highest) = write.milestones.iter().max() {
        fields.insert(rollup::MILESTONE.to_string(), int(highest));
        mask.push(rollup::MILESTONE.to_string());
    }
    let condition = match write.previous.and_then(|p| p.update_time) {
        Some(read) => ConditionType::UpdateTime(read),
        None => ConditionType::Exists(false),
    };
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: layout.rollup(write.post_id),
            fields,
            ..Default::default()
        })),
        update_mask: Some(fs::DocumentMask { field_paths: mask }),
        update_transforms: vec![server_time(rollup::UPDATED_AT)],
        current_document: Some(fs::Precondition {
            condition_type: Some(condition),
        }),
    }
}

/// The rollup `doc` holds; `None` without `likes` and `asOf` (not a rollup
/// hotcount wrote).
pub fn stored_rollup(doc: &fs::Document) -> Option<StoredRollup> {
    rollup_from_fields(&doc.fields, doc.update_time)
}

/// The rollup whose fields are `fields` (decoded, or read in place) and
/// whose update time is `update_time`; `None` without `likes` and `asOf`.
pub fn rollup_from_fields(
    fields: &(impl ScalarFields + ?Sized),
    update_time: Option<Timestamp>,
) -> Option<StoredRollup> {
    let [likes, as_of, shards, milestone] = fields.scalars(READ_FIELDS);
    let likes = match likes? {
        FieldValue::Integer(n) => n,
        _ => return None,
    };
    let as_of = match as_of? {
        FieldValue::Timestamp(t) => timestamp_to_micros(&t),
        _ => return None,
    };
    let shards = match shards {
        Some(FieldValue::Integer(n)) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
        _ => Some(0),
    };
    let milestone = match milestone {
        Some(FieldValue::Integer(n)) => Some(n),
        _ => None,
    };
    Some(StoredRollup {
        likes,
        as_of,
        shards,
        update_time,
        milestone,
    })
}

/// The fields of a rollup that [`rollup_from_fields`] reads (a read of
/// rollups can ask for these alone).
pub const READ_FIELDS: [&str; 4] = [
    rollup::LIKES,
    rollup::AS_OF,
    rollup::SHARDS,
    rollup::MILESTONE,
];

#[cfg(test)]
mod tests {
    use super::*;
    use gcloud_sdk::prost::Message;
    use gcloud_sdk::prost_types::Timestamp;

    /// A rollup read before a write, updated at `seconds`.`nanos`.
    fn stored(seconds: i64, nanos: i32, milestone: Option<i64>) -> StoredRollup {
        StoredRollup {
            likes: 3,
            as_of: 1_700_000_000_123_456,
            shards: Some(2),
            update_time: Some(Timestamp { seconds, nanos }),
            milestone,
        }
    }

    #[test]
    fn a_rollup_reads_back_as_written_with_its_condition() {
        let layout = Layout::new("p", "(default)", "hc_");
        let read = stored(9, 7, None);
        for previous in [None, Some(&read)] {
            let write = RollupWrite {
                post_id: "post-1",
                likes: 41,
                as_of: 1_700_000_001_000_001,
                shards: 16,
                previous,
                milestones: &[100, 1000],
            };
            let sdk = rollup_write(&layout, &write);
            let Some(fs::write::Operation::Update(doc)) = sdk.operation.clone() else {
                panic!("an update");
            };
            assert_eq!(doc.name, layout.rollup("post-1"));
            let stored = stored_rollup(&fs::Document {
                update_time: Some(Timestamp {
                    seconds: 1,
                    nanos: 0,
                }),
                ..doc
            })
            .expect("a rollup");
            assert_eq!(
                (stored.likes, stored.as_of, stored.shards, stored.milestone),
                (41, 1_700_000_001_000_001, Some(16), Some(1000))
            );
            let condition = sdk.current_document.and_then(|c| c.condition_type);
            match previous {
                None => assert_eq!(condition, Some(ConditionType::Exists(false))),
                Some(p) => assert_eq!(condition, p.update_time.map(ConditionType::UpdateTime)),
            }
            assert_eq!(sdk.update_transforms, vec![server_time(rollup::UPDATED_AT)]);
        }
    }

    #[test]
    fn a_rollup_write_encoded_in_place_is_the_message_built_field_by_field() {
        let layout = Layout::new("p", "(default)", "hc_");
        let read = stored(1_700_000_000, 999_999_999, Some(100));
        let post = "p".repeat(300);
        let mut writes = Vec::new();
        for post_id in ["post-1", post.as_str()] {
            for previous in [None, Some(&read)] {
                for milestones in [&[][..], &[100, 1000, 10][..]] {
                    for (likes, shards) in [(0, 1), (-5, 16), (i64::MAX, u32::MAX)] {
                        writes.push(RollupWrite {
                            post_id,
                            likes,
                            as_of: 1_700_000_001_000_001,
                            shards,
                            previous,
                            milestones,
                        });
                    }
                }
            }
        }
        let request = rollup_writes_request(&layout, writes.iter());
        let expected: Vec<fs::Write> = writes.iter().map(|w| rollup_write(&layout, w)).collect();
        // A BatchWrite's request, as the refresher sends it.
        let sent = fs::BatchWriteRequest::decode(request.finish(&[]).as_slice()).expect("decodes");
        assert_eq!(sent.database, layout.database);
        assert_eq!(sent.writes, expected);
    }
}
