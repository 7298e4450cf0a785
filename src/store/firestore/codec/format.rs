//! Firestore values <-> the data-format record (`settings/format`): the
//! conditional write of a raise, and the stored format read back.
//!
//! Invariant: a raise is written only on the precondition that the record
//! is still what the raise read (absent, or its update time), so a raise
//! never overwrites one it did not see; what is written here is read back
//! unchanged (round-trip test).

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use fs::precondition::ConditionType;
use fs::value::ValueType;

use super::super::layout::fields::data_format as f;
use super::super::wire;
use super::super::Layout;
use super::{field, get, int, server_time};

/// The write that stores format `version`, on the precondition that the
/// record is still as read: absent (`read` is `None`) or last updated at
/// `read`.
pub fn data_format_write(layout: &Layout, version: u32, read: Option<Timestamp>) -> wire::Write {
    let condition = match read {
        Some(update_time) => ConditionType::UpdateTime(update_time),
        None => ConditionType::Exists(false),
    };
    wire::Write {
        update: Some(wire::Document {
            name: layout.data_format(),
            fields: vec![field(f::VERSION, int(i64::from(version)))],
            ..Default::default()
        }),
        update_transforms: vec![server_time(f::UPDATED_AT)],
        current_document: Some(fs::Precondition {
            condition_type: Some(condition),
        }),
        ..Default::default()
    }
}

/// The format `doc` holds; `None` when it is not a record hotcount wrote
/// (no positive integer `version`).
pub fn data_format_from_document(doc: &fs::Document) -> Option<u32> {
    match get(&doc.fields, f::VERSION) {
        Some(ValueType::IntegerValue(n)) => u32::try_from(*n).ok().filter(|&n| n >= 1),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_format_reads_back_as_written() {
        let layout = Layout::new("p", "(default)", "hc_");
        let write = data_format_write(&layout, 2, None);
        let doc = write.update.expect("an update");
        assert!(doc.name.ends_with("/hc_settings/format"), "{}", doc.name);
        let doc = fs::Document {
            name: doc.name,
            fields: doc
                .fields
                .into_iter()
                .filter_map(|f| Some((f.key, f.value?)))
                .collect(),
            ..Default::default()
        };
        assert_eq!(data_format_from_document(&doc), Some(2));
    }
}
