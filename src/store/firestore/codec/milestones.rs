//! Firestore values <-> milestone records (`milestones/{post}:{n}`): the
//! create that goes with a rollup write, the dispatcher's updates, and the
//! record read back.
//!
//! Invariant: a record is created only with the precondition that it does
//! not exist; an update names every delivery field in its mask, so a field
//! left unset (`dueAt` once done or dead) is removed; what is written here
//! is read back unchanged (round-trip test).

use std::collections::HashMap;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use fs::precondition::ConditionType;
use fs::value::ValueType;

use super::super::layout::fields::milestone as f;
use super::super::layout::fields::milestone_setting as sf;
use super::super::Layout;
use super::{
    boolean, get, int, micros_to_timestamp, server_time, string, text, timestamp_to_micros, value,
};
use crate::store::milestone::{MilestoneRecord, MilestoneSetting, MilestoneStatus};
use crate::store::rollup::Micros;

fn time(micros: Micros) -> fs::Value {
    value(ValueType::TimestampValue(micros_to_timestamp(micros)))
}

/// The create of a pending record of `milestone` reached by `post_id`'s
/// rollup at `reached_at` with `likes`, due at once (`dueAt` the epoch, so
/// whatever the replicas' clocks say against the store's); only if absent.
pub fn milestone_create(
    layout: &Layout,
    post_id: &str,
    milestone: i64,
    likes: i64,
    reached_at: Micros,
) -> fs::Write {
    let record = MilestoneRecord {
        post_id: post_id.to_string(),
        milestone,
        likes,
        reached_at,
        status: MilestoneStatus::Pending,
        attempts: 0,
        due_at: Some(0),
        last_error: None,
        delivered_at: None,
    };
    let mut fields = delivery_fields(&record, None);
    fields.insert(f::POST_ID.to_string(), string(post_id));
    fields.insert(f::MILESTONE.to_string(), int(milestone));
    fields.insert(f::LIKES.to_string(), int(likes));
    fields.insert(f::REACHED_AT.to_string(), time(reached_at));
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: layout.milestone(post_id, milestone),
            fields,
            ..Default::default()
        })),
        update_transforms: vec![server_time(f::UPDATED_AT)],
        current_document: Some(fs::Precondition {
            condition_type: Some(ConditionType::Exists(false)),
        }),
        ..Default::default()
    }
}

/// The delivery fields of `record` (status, attempts, due, lease, error,
/// delivery time), the unset ones left out.
fn delivery_fields(
    record: &MilestoneRecord,
    lease_until: Option<Micros>,
) -> HashMap<String, fs::Value> {
    let mut fields = HashMap::from([
        (f::STATUS.to_string(), string(record.status.as_str())),
        (f::ATTEMPTS.to_string(), int(i64::from(record.attempts))),
    ]);
    let optional = [
        (f::DUE_AT, record.due_at.map(time)),
        (f::LEASE_UNTIL, lease_until.map(time)),
        (f::LAST_ERROR, record.last_error.as_deref().map(string)),
        (f::DELIVERED_AT, record.delivered_at.map(time)),
    ];
    for (name, v) in optional {
        if let Some(v) = v {
            fields.insert(name.to_string(), v);
        }
    }
    fields
}

/// The update of `record`'s delivery fields to what `record` says (with
/// `leaseUntil` when leased), on the condition that the document's update
/// time is still `condition` (`None`: only that it exists).
pub fn milestone_update(
    layout: &Layout,
    record: &MilestoneRecord,
    condition: Option<Timestamp>,
) -> fs::Write {
    let leased = record.status == MilestoneStatus::Leased;
    let lease_until = if leased { record.due_at } else { None };
    let condition = match condition {
        Some(t) => ConditionType::UpdateTime(t),
        None => ConditionType::Exists(true),
    };
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: layout.milestone(&record.post_id, record.milestone),
            fields: delivery_fields(record, lease_until),
            ..Default::default()
        })),
        update_mask: Some(fs::DocumentMask {
            field_paths: [
                f::STATUS,
                f::ATTEMPTS,
                f::DUE_AT,
                f::LEASE_UNTIL,
                f::LAST_ERROR,
                f::DELIVERED_AT,
            ]
            .map(String::from)
            .to_vec(),
        }),
        update_transforms: vec![server_time(f::UPDATED_AT)],
        current_document: Some(fs::Precondition {
            condition_type: Some(condition),
        }),
    }
}

/// The record `doc` holds; `None` when it is not one hotcount wrote.
pub fn milestone_from_document(doc: &fs::Document) -> Option<MilestoneRecord> {
    let integer = |name| match get(&doc.fields, name) {
        Some(ValueType::IntegerValue(n)) => Some(*n),
        _ => None,
    };
    let at = |name| match get(&doc.fields, name) {
        Some(ValueType::TimestampValue(t)) => Some(timestamp_to_micros(t)),
        _ => None,
    };
    Some(MilestoneRecord {
        post_id: text(&doc.fields, f::POST_ID)?,
        milestone: integer(f::MILESTONE)?,
        likes: integer(f::LIKES)?,
        reached_at: at(f::REACHED_AT)?,
        status: MilestoneStatus::parse(&text(&doc.fields, f::STATUS)?)?,
        attempts: u32::try_from(integer(f::ATTEMPTS)?).unwrap_or(u32::MAX),
        due_at: at(f::DUE_AT),
        last_error: text(&doc.fields, f::LAST_ERROR),
        delivered_at: at(f::DELIVERED_AT),
    })
}

/// The write of the fleet's milestone setting: replacing any, or (with
/// `only_if_unset`) only if none is stored.
pub fn milestone_setting_write(
    layout: &Layout,
    setting: &MilestoneSetting,
    only_if_unset: bool,
) -> fs::Write {
    let list = setting.thresholds().iter().map(|&n| int(n)).collect();
    let fields = HashMap::from([
        (
            sf::ENABLED.to_string(),
            boolean(matches!(setting, MilestoneSetting::On(_))),
        ),
        (
            sf::MILESTONES.to_string(),
            value(ValueType::ArrayValue(fs::ArrayValue { values: list })),
        ),
    ]);
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: layout.milestone_setting(),
            fields,
            ..Default::default()
        })),
        update_transforms: vec![server_time(sf::UPDATED_AT)],
        current_document: only_if_unset.then_some(fs::Precondition {
            condition_type: Some(ConditionType::Exists(false)),
        }),
        ..Default::default()
    }
}

/// The setting `doc` holds; `None` when it is not one hotcount wrote.
pub fn milestone_setting_from_document(doc: &fs::Document) -> Option<MilestoneSetting> {
    let Some(ValueType::BooleanValue(enabled)) = get(&doc.fields, sf::ENABLED) else {
        return None;
    };
    if !enabled {
        return Some(MilestoneSetting::Off);
    }
    let Some(ValueType::ArrayValue(list)) = get(&doc.fields, sf::MILESTONES) else {
        return None;
    };
    let mut out = Vec::with_capacity(list.values.len());
    for v in &list.values {
        match &v.value_type {
            Some(ValueType::IntegerValue(n)) => out.push(*n),
            _ => return None,
        }
    }
    Some(MilestoneSetting::On(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_milestone_setting_reads_back_as_written() {
        let layout = Layout::new("p", "(default)", "hc_");
        for setting in [MilestoneSetting::Off, MilestoneSetting::On(vec![5, 20, 40])] {
            let write = milestone_setting_write(&layout, &setting, true);
            assert!(write.current_document.is_some());
            let doc = doc_of(write);
            assert!(
                doc.name.ends_with("/hc_settings/milestones"),
                "{}",
                doc.name
            );
            assert_eq!(milestone_setting_from_document(&doc), Some(setting));
        }
    }

    fn doc_of(write: fs::Write) -> fs::Document {
        match write.operation {
            Some(fs::write::Operation::Update(doc)) => doc,
            _ => panic!("an update"),
        }
    }

    #[test]
    fn a_created_record_reads_back_pending_and_due() {
        let layout = Layout::new("p", "(default)", "hc_");
        let write = milestone_create(&layout, "post-1", 1000, 1003, 1_700_000_000_000_001);
        assert_eq!(
            write.current_document.and_then(|c| c.condition_type),
            Some(ConditionType::Exists(false))
        );
        let doc = doc_of(write);
        assert!(doc.name.ends_with("/hc_milestones/post-1:1000"));
        let record = milestone_from_document(&doc).expect("a record");
        assert_eq!(record.status, MilestoneStatus::Pending);
        assert_eq!((record.likes, record.attempts), (1003, 0));
        assert_eq!(record.reached_at, 1_700_000_000_000_001);
        assert_eq!(record.due_at, Some(0), "due at once, whatever the clocks");
        assert_eq!(record.id(), "post-1:1000");
    }

    #[test]
    fn an_update_reads_back_and_clears_what_it_leaves_unset() {
        let layout = Layout::new("p", "(default)", "hc_");
        let record = MilestoneRecord {
            post_id: "p".into(),
            milestone: 100,
            likes: 101,
            reached_at: 5,
            status: MilestoneStatus::Dead,
            attempts: 3,
            due_at: None,
            last_error: Some("HTTP 404".into()),
            delivered_at: None,
        };
        let write = milestone_update(&layout, &record, None);
        let mask = write.update_mask.clone().expect("a mask").field_paths;
        assert!(mask.contains(&f::DUE_AT.to_string()));
        let mut doc = doc_of(write);
        assert!(!doc.fields.contains_key(f::DUE_AT));
        // The create's fields stay (not in the mask).
        doc.fields.insert(f::POST_ID.into(), string("p"));
        doc.fields.insert(f::MILESTONE.into(), int(100));
        doc.fields.insert(f::LIKES.into(), int(101));
        doc.fields.insert(f::REACHED_AT.into(), time(5));
        assert_eq!(milestone_from_document(&doc), Some(record));
    }
}
