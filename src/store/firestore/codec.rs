//! Firestore values <-> hotcount's documents: membership fields, batch
//! markers, counter increments and quarantine records, and the writes of
//! one batch's commit.
//!
//! Invariant: what [`build_writes`] writes, the readers here read back
//! unchanged (round-trip tests); a quarantine record never turns a key the
//! message carried into a field name.

use std::collections::HashMap;
use std::hash::BuildHasher;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use fs::document_transform::field_transform::{ServerValue, TransformType};
use fs::document_transform::FieldTransform;
use fs::value::ValueType;

use super::FirestoreStoreConfig;
use crate::event::Version;
use crate::pipeline::batch::{Batch, Effects, Membership, MembershipKey, Plan};
use crate::pipeline::poison::PoisonRecord;

/// The writes of one batch's commit: changed memberships (each with a
/// precondition on what was read), one increment per post on the counter
/// shard `counter_shard_of(i)` picks for the `i`-th post of `plan.deltas`,
/// the marker (create-if-absent) and quarantine records.
pub fn build_writes(
    config: &FirestoreStoreConfig,
    batch: &Batch,
    plan: &Plan,
    update_times: &HashMap<MembershipKey, Option<Timestamp>, impl BuildHasher>,
    marker: &str,
    counter_shard_of: impl Fn(usize) -> u32,
) -> Vec<fs::Write> {
    let layout = &config.layout;
    let mut writes = Vec::with_capacity(plan.memberships.len() + plan.deltas.len() + 2);
    for (key, membership) in &plan.memberships {
        let precondition = match update_times.get(key) {
            Some(Some(time)) => fs::precondition::ConditionType::UpdateTime(*time),
            _ => fs::precondition::ConditionType::Exists(false),
        };
        writes.push(fs::Write {
            operation: Some(fs::write::Operation::Update(fs::Document {
                name: layout.membership(key),
                fields: membership_fields(key, membership, &batch.id),
                ..Default::default()
            })),
            update_mask: None,
            update_transforms: vec![server_time("updatedAt")],
            current_document: Some(fs::Precondition {
                condition_type: Some(precondition),
            }),
        });
    }
    for (i, (post, delta)) in plan.deltas.iter().enumerate() {
        let shard = counter_shard_of(i);
        writes.push(fs::Write {
            operation: Some(fs::write::Operation::Update(fs::Document {
                name: layout.counter_shard(post, shard),
                fields: HashMap::from([("postId".to_string(), string(post))]),
                ..Default::default()
            })),
            update_mask: Some(fs::DocumentMask {
                field_paths: vec!["postId".into()],
            }),
            update_transforms: vec![FieldTransform {
                field_path: "likes".into(),
                transform_type: Some(TransformType::Increment(int(*delta))),
            }],
            current_document: None,
        });
    }
    writes.push(marker_write(config, batch, plan, marker));
    for poison in &batch.poison {
        writes.push(quarantine_write(config, &poison.item));
    }
    writes
}

fn marker_write(
    config: &FirestoreStoreConfig,
    batch: &Batch,
    plan: &Plan,
    marker: &str,
) -> fs::Write {
    let expire = std::time::SystemTime::now() + config.marker_ttl;
    let e = plan.effects;
    let fields = HashMap::from([
        ("consumer".to_string(), string(&config.consumer)),
        ("batchId".to_string(), string(&batch.id)),
        ("messages".to_string(), int(batch.message_count as i64)),
        ("applied".to_string(), int(e.applied as i64)),
        ("duplicates".to_string(), int(e.duplicates as i64)),
        ("stale".to_string(), int(e.stale as i64)),
        ("poison".to_string(), int(e.poison as i64)),
        ("posts".to_string(), int(plan.deltas.len() as i64)),
        ("expireAt".to_string(), timestamp(expire.into())),
    ]);
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: marker.to_string(),
            fields,
            ..Default::default()
        })),
        update_mask: None,
        update_transforms: vec![server_time("committedAt")],
        current_document: Some(fs::Precondition {
            condition_type: Some(fs::precondition::ConditionType::Exists(false)),
        }),
    }
}

/// The quarantine record of `poison`. Attribute keys are stored as values
/// (`attributes` is an array of `{key, value}` maps), so no key the message
/// carried becomes a field name; every part is bounded by [`PoisonRecord`].
pub fn quarantine_write(config: &FirestoreStoreConfig, poison: &PoisonRecord) -> fs::Write {
    let attributes = poison
        .attributes
        .iter()
        .map(|(k, v)| {
            value(ValueType::MapValue(fs::MapValue {
                fields: HashMap::from([
                    ("key".to_string(), string(k)),
                    ("value".to_string(), string(v)),
                ]),
            }))
        })
        .collect();
    let fields = HashMap::from([
        ("consumer".to_string(), string(&config.consumer)),
        ("messageId".to_string(), string(poison.stored_message_id())),
        ("reason".to_string(), string(&poison.reason)),
        (
            "data".to_string(),
            value(ValueType::BytesValue(poison.data.clone())),
        ),
        ("dataBytes".to_string(), int(poison.data_len as i64)),
        ("dataSha256".to_string(), string(&poison.data_sha256)),
        (
            "attributes".to_string(),
            value(ValueType::ArrayValue(fs::ArrayValue { values: attributes })),
        ),
        (
            "attributeCount".to_string(),
            int(poison.attribute_count as i64),
        ),
        (
            "attributesTruncated".to_string(),
            value(ValueType::BooleanValue(poison.attributes_truncated)),
        ),
    ]);
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: config.layout.quarantine(&config.consumer, &poison.doc_id()),
            fields,
            ..Default::default()
        })),
        update_mask: None,
        update_transforms: vec![server_time("quarantinedAt")],
        current_document: None,
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
    let get = |name: &str| doc.fields.get(name).and_then(|v| v.value_type.as_ref());
    let text = |name: &str| match get(name) {
        Some(ValueType::StringValue(s)) => s.clone(),
        _ => String::new(),
    };
    let number = |name: &str| match get(name) {
        Some(ValueType::IntegerValue(n)) => usize::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    let mut attributes = Vec::new();
    if let Some(ValueType::ArrayValue(array)) = get("attributes") {
        for entry in &array.values {
            if let Some(ValueType::MapValue(map)) = &entry.value_type {
                let part = |k: &str| match map.fields.get(k).and_then(|v| v.value_type.as_ref()) {
                    Some(ValueType::StringValue(s)) => s.clone(),
                    _ => String::new(),
                };
                attributes.push((part("key"), part("value")));
            }
        }
    }
    let data = match get("data") {
        Some(ValueType::BytesValue(b)) => b.clone(),
        _ => Vec::new(),
    };
    let quarantined_at = match get("quarantinedAt") {
        Some(ValueType::TimestampValue(t)) => {
            let nanos = u32::try_from(t.nanos).unwrap_or(0);
            chrono::DateTime::from_timestamp(t.seconds, nanos).map(|d| d.to_rfc3339())
        }
        _ => None,
    };
    StoredRecord {
        name: doc.name.clone(),
        consumer: text("consumer"),
        record: PoisonRecord {
            message_id: text("messageId"),
            reason: text("reason"),
            data,
            data_len: number("dataBytes"),
            data_sha256: text("dataSha256"),
            attributes,
            attribute_count: number("attributeCount"),
            attributes_truncated: matches!(
                get("attributesTruncated"),
                Some(ValueType::BooleanValue(true))
            ),
        },
        quarantined_at,
    }
}

fn value(v: ValueType) -> fs::Value {
    fs::Value {
        value_type: Some(v),
    }
}

fn string(s: &str) -> fs::Value {
    value(ValueType::StringValue(s.to_string()))
}

fn int(n: i64) -> fs::Value {
    value(ValueType::IntegerValue(n))
}

fn timestamp(t: Timestamp) -> fs::Value {
    value(ValueType::TimestampValue(t))
}

fn server_time(field: &str) -> FieldTransform {
    FieldTransform {
        field_path: field.to_string(),
        transform_type: Some(TransformType::SetToServerValue(
            ServerValue::RequestTime as i32,
        )),
    }
}

fn micros_to_timestamp(micros: i64) -> Timestamp {
    Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1000) as i32,
    }
}

fn timestamp_to_micros(t: &Timestamp) -> i64 {
    t.seconds * 1_000_000 + i64::from(t.nanos) / 1000
}

fn membership_fields(
    key: &MembershipKey,
    m: &Membership,
    batch_id: &str,
) -> HashMap<String, fs::Value> {
    HashMap::from([
        ("postId".to_string(), string(&key.post_id)),
        ("userId".to_string(), string(&key.user_id)),
        ("liked".to_string(), value(ValueType::BooleanValue(m.liked))),
        ("seq".to_string(), int(m.version.seq)),
        (
            "occurredAt".to_string(),
            timestamp(micros_to_timestamp(m.version.occurred_at_micros)),
        ),
        ("eventId".to_string(), string(&m.version.event_id)),
        ("batchId".to_string(), string(batch_id)),
    ])
}

/// The effects a batch marker recorded.
pub(super) fn effects_from_fields(fields: &HashMap<String, fs::Value>) -> Effects {
    let get = |name: &str| match fields.get(name).and_then(|v| v.value_type.as_ref()) {
        Some(ValueType::IntegerValue(n)) => u64::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    Effects {
        applied: get("applied"),
        duplicates: get("duplicates"),
        stale: get("stale"),
        poison: get("poison"),
    }
}

/// Reads a membership document's state; `None` if it is not one of ours.
pub fn membership_from_fields(fields: &HashMap<String, fs::Value>) -> Option<Membership> {
    let get = |name: &str| fields.get(name).and_then(|v| v.value_type.as_ref());
    let liked = match get("liked")? {
        ValueType::BooleanValue(b) => *b,
        _ => return None,
    };
    let seq = match get("seq") {
        Some(ValueType::IntegerValue(n)) => *n,
        _ => 0,
    };
    let occurred_at_micros = match get("occurredAt") {
        Some(ValueType::TimestampValue(t)) => timestamp_to_micros(t),
        _ => 0,
    };
    let event_id = match get("eventId") {
        Some(ValueType::StringValue(s)) => s.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::super::Layout;
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
        assert_eq!(membership_from_fields(&fields), Some(m));
    }

    #[test]
    fn quarantine_records_round_trip_with_hostile_attributes_as_values() {
        let config = FirestoreStoreConfig {
            layout: Layout::new("proj", "(default)", ""),
            consumer: "c1".into(),
            counter_shards: 1,
            counter_shard_target_writes_per_sec: 0,
            marker_ttl: Duration::ZERO,
        };
        let attributes = BTreeMap::from([
            ("__name__".to_string(), "a".to_string()),
            ("x.y".to_string(), "b".to_string()),
        ]);
        let record = PoisonRecord::new("42".into(), "bad".into(), b"{nope", attributes);
        let write = quarantine_write(&config, &record);
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
}
