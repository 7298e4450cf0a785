//! Firestore values <-> the documents the operator tools read and write:
//! quarantine records (written by a batch's commit, then listed, re-driven
//! and deleted by `hotcount quarantine`) and reconcile guards, with the
//! writes of one repair (`hotcount reconcile`).
//!
//! Invariant: a quarantine record never turns a key the message carried
//! into a field name; what is written here is read back unchanged
//! (round-trip tests).

use std::collections::HashMap;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use fs::value::ValueType;

use super::super::layout::fields::{guard, quarantine};
use super::super::wire;
use super::super::Layout;
use super::{boolean, counter_increment, field, get, int, server_time, string, text, value};
use crate::model::poison::PoisonRecord;

/// The quarantine record of `poison` written by `consumer`. Attribute keys
/// are stored as values (`attributes` is an array of `{key, value}` maps),
/// so no key the message carried becomes a field name; every part is
/// bounded by [`PoisonRecord`].
pub fn quarantine_write(layout: &Layout, consumer: &str, poison: &PoisonRecord) -> wire::Write {
    let attributes = poison
        .attributes
        .iter()
        .map(|(k, v)| {
            value(ValueType::MapValue(fs::MapValue {
                fields: HashMap::from([
                    (quarantine::ATTRIBUTE_KEY.to_string(), string(k)),
                    (quarantine::ATTRIBUTE_VALUE.to_string(), string(v)),
                ]),
            }))
        })
        .collect();
    let data = value(ValueType::BytesValue(poison.data.clone()));
    let attributes = value(ValueType::ArrayValue(fs::ArrayValue { values: attributes }));
    let fields = vec![
        field(quarantine::CONSUMER, string(consumer)),
        field(quarantine::MESSAGE_ID, string(poison.stored_message_id())),
        field(quarantine::REASON, string(&poison.reason)),
        field(quarantine::DATA, data),
        field(quarantine::DATA_BYTES, int(poison.data_len as i64)),
        field(quarantine::DATA_SHA256, string(&poison.data_sha256)),
        field(quarantine::ATTRIBUTES, attributes),
        field(
            quarantine::ATTRIBUTE_COUNT,
            int(poison.attribute_count as i64),
        ),
        field(
            quarantine::ATTRIBUTES_TRUNCATED,
            boolean(poison.attributes_truncated),
        ),
    ];
    wire::Write {
        update: Some(wire::Document {
            name: layout.quarantine(consumer, &crate::store::quarantine::record_id(poison)),
            fields,
            update_time: None,
        }),
        update_transforms: vec![server_time(quarantine::QUARANTINED_AT)],
        ..Default::default()
    }
}

/// A quarantine record as stored, read back by the operator tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    /// Full document name.
    pub name: String,
    /// The consumer that wrote it.
    pub consumer: String,
    /// The record's content.
    pub record: PoisonRecord,
    /// When it was written (RFC 3339), if known.
    pub quarantined_at: Option<String>,
}

impl StoredRecord {
    /// The document id (`{consumer}:{doc_id}`), the last segment of the name.
    pub fn id(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }
}

/// Reads a quarantine record back ([`quarantine_write`]'s fields).
pub fn quarantine_from_document(doc: &fs::Document) -> StoredRecord {
    let fields = &doc.fields;
    let number = |name: &str| match get(fields, name) {
        Some(ValueType::IntegerValue(n)) => usize::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    let mut attributes = Vec::new();
    if let Some(ValueType::ArrayValue(array)) = get(fields, quarantine::ATTRIBUTES) {
        for entry in &array.values {
            if let Some(ValueType::MapValue(map)) = &entry.value_type {
                let part = |k: &str| text(&map.fields, k).unwrap_or_default();
                attributes.push((
                    part(quarantine::ATTRIBUTE_KEY),
                    part(quarantine::ATTRIBUTE_VALUE),
                ));
            }
        }
    }
    let data = match get(fields, quarantine::DATA) {
        Some(ValueType::BytesValue(b)) => b.clone(),
        _ => Vec::new(),
    };
    let quarantined_at = match get(fields, quarantine::QUARANTINED_AT) {
        Some(ValueType::TimestampValue(t)) => {
            let nanos = u32::try_from(t.nanos).unwrap_or(0);
            chrono::DateTime::from_timestamp(t.seconds, nanos).map(|d| d.to_rfc3339())
        }
        _ => None,
    };
    let text = |name: &str| text(fields, name).unwrap_or_default();
    StoredRecord {
        name: doc.name.clone(),
        consumer: text(quarantine::CONSUMER),
        record: PoisonRecord {
            message_id: text(quarantine::MESSAGE_ID),
            reason: text(quarantine::REASON),
            data,
            data_len: number(quarantine::DATA_BYTES),
            data_sha256: text(quarantine::DATA_SHA256),
            attributes,
            attribute_count: number(quarantine::ATTRIBUTE_COUNT),
            attributes_truncated: matches!(
                get(fields, quarantine::ATTRIBUTES_TRUNCATED),
                Some(ValueType::BooleanValue(true))
            ),
            kind: PoisonRecord::STORED,
        },
        quarantined_at,
    }
}

/// A post's reconcile guard as a repair's snapshot saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairGuard {
    /// Its update time; `None` when it did not exist.
    pub update_time: Option<Timestamp>,
    /// The repair that wrote it last.
    pub repair_id: Option<String>,
}

/// Reads a reconcile guard back; `None` if it has no update time (a
/// document the server returned cannot lack one).
pub fn guard_from_document(doc: &fs::Document) -> Option<RepairGuard> {
    Some(RepairGuard {
        update_time: Some(doc.update_time?),
        repair_id: text(&doc.fields, guard::REPAIR_ID),
    })
}

/// One repair of a post's count, as its guard records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Correction<'a> {
    /// The post.
    pub post_id: &'a str,
    /// Names the repair (so a retry can tell it applied).
    pub repair_id: &'a str,
    /// Liked memberships compared.
    pub liked: i64,
    /// Counter shard sum compared.
    pub shards_sum: i64,
}

impl Correction<'_> {
    /// `liked - shards_sum`: the increment that makes the count right.
    pub fn difference(&self) -> i64 {
        self.liked - self.shards_sum
    }
}

/// The writes of a correction: its increment on counter shard 0, and the
/// guard recording it, on the precondition that the guard is still what
/// the repair's snapshot saw (`seen`: so no other correction of the post
/// committed since).
pub fn correction_writes(layout: &Layout, c: &Correction, seen: &RepairGuard) -> Vec<wire::Write> {
    let precondition = match seen.update_time {
        Some(time) => fs::precondition::ConditionType::UpdateTime(time),
        None => fs::precondition::ConditionType::Exists(false),
    };
    let guard = wire::Write {
        update: Some(wire::Document {
            name: layout.reconcile_guard(c.post_id),
            fields: vec![
                field(guard::POST_ID, string(c.post_id)),
                field(guard::REPAIR_ID, string(c.repair_id)),
                field(guard::DIFFERENCE, int(c.difference())),
                field(guard::LIKED, int(c.liked)),
                field(guard::SHARDS_SUM, int(c.shards_sum)),
            ],
            update_time: None,
        }),
        update_transforms: vec![server_time(guard::REPAIRED_AT)],
        current_document: Some(fs::Precondition {
            condition_type: Some(precondition),
        }),
        ..Default::default()
    };
    vec![
        counter_increment(layout, c.post_id, 0, c.difference()),
        guard,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use fs::document_transform::field_transform::TransformType;

    use super::super::super::layout::fields::counter_shard;

    #[test]
    fn quarantine_records_round_trip_with_hostile_attributes_as_values() {
        let layout = Layout::new("proj", "(default)", "");
        let attributes = BTreeMap::from([
            ("__name__".to_string(), "a".to_string()),
            ("x.y".to_string(), "b".to_string()),
        ]);
        let record = PoisonRecord::new("42".into(), "bad".into(), b"{nope", attributes)
            .of_kind(PoisonRecord::STORED);
        // Read back as the SDK decodes it off the wire.
        let write = wire::to_sdk(&quarantine_write(&layout, "c1", &record));
        let Some(fs::write::Operation::Update(doc)) = write.operation else {
            panic!("an update");
        };
        assert!(doc.name.ends_with("/quarantine/c1:42"), "{}", doc.name);
        // No key of the message became a field name.
        let names: Vec<&String> = doc.fields.keys().collect();
        assert!(
            names
                .iter()
                .all(|n| !n.starts_with("__") && !n.contains('.')),
            "{names:?}"
        );
        let back = quarantine_from_document(&doc);
        assert_eq!(back.record, record);
        assert_eq!(back.consumer, "c1");
        assert_eq!(back.id(), "c1:42");
    }

    #[test]
    fn a_correction_increments_likes_keeps_other_fields_and_records_its_guard() {
        let layout = Layout::new("proj", "(default)", "");
        let c = Correction {
            post_id: "p",
            repair_id: "r1",
            liked: 5,
            shards_sum: 7,
        };
        let writes: Vec<fs::Write> = correction_writes(&layout, &c, &RepairGuard::default())
            .iter()
            .map(wire::to_sdk)
            .collect();
        let increment = &writes[0];
        assert_eq!(
            increment
                .update_mask
                .as_ref()
                .map(|m| m.field_paths.clone()),
            Some(vec![counter_shard::POST_ID.to_string()])
        );
        let transform = &increment.update_transforms[0];
        assert_eq!(transform.field_path, counter_shard::LIKES);
        assert!(matches!(
            &transform.transform_type,
            Some(TransformType::Increment(fs::Value {
                value_type: Some(ValueType::IntegerValue(-2))
            }))
        ));
        let Some(fs::write::Operation::Update(doc)) = &writes[1].operation else {
            panic!("an update");
        };
        assert_eq!(doc.name, layout.reconcile_guard("p"));
        let read = guard_from_document(&fs::Document {
            update_time: Some(Timestamp::default()),
            ..doc.clone()
        });
        assert_eq!(read.and_then(|g| g.repair_id).as_deref(), Some("r1"));
        assert!(matches!(
            writes[1].current_document,
            Some(fs::Precondition {
                condition_type: Some(fs::precondition::ConditionType::Exists(false))
            })
        ));
    }
}
