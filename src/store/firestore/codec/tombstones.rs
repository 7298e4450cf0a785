//! Firestore values <-> the tombstones' generation
//! (`settings/erasedUsers`): its bump, in the commit that writes a
//! tombstone, and the generation read back (by every checked batch's read).
//!
//! Invariant: the generation only grows: a bump is a server-side increment
//! (creating the document at 1), never a value written over another.

use gcloud_sdk::google::firestore::v1 as fs;

use fs::document_transform::field_transform::TransformType;
use fs::document_transform::FieldTransform;

use super::super::frame::Scalar as FieldValue;
use super::super::layout::fields::tombstone_setting;
use super::super::wire;
use super::super::Layout;
use super::{int, server_time, ScalarFields};

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
