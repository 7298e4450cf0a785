//! Firestore values <-> counter shards (`counters/{postId}/shards/{k}`):
//! the increment of one post's shard, built or encoded straight to bytes,
//! and a shard's `likes` read back.
//!
//! Invariant: an increment is the one way a count changes, and it stamps
//! the shard's `updatedAt` with the commit's time (what the rollup sweep
//! finds recently changed posts by); the increment encoded is exactly the
//! bytes of the message built (tests compare); a shard's `likes` is parsed
//! here only.

use gcloud_sdk::google::firestore::v1 as fs;

use fs::document_transform::field_transform::{ServerValue, TransformType};
use fs::document_transform::FieldTransform;

use super::super::frame::Scalar as FieldValue;
use super::super::layout::fields::counter_shard;
use super::super::wire;
use super::super::Layout;
use super::{field, int, server_time, string, Scalar, ScalarFields};

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

/// Appends [`counter_increment`] to `commit`: exactly the bytes prost gives
/// that write (tests compare), without building it (no field list, no
/// mask or transform strings to allocate). One per post per batch.
pub(super) fn put_counter_increment(
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
    shard_likes_from_fields(&doc.fields)
}

/// [`counter_shard_likes`] of a shard's fields (decoded, or read in place).
pub fn shard_likes_from_fields(fields: &(impl ScalarFields + ?Sized)) -> i64 {
    match fields.scalar(counter_shard::LIKES) {
        Some(FieldValue::Integer(n)) => n,
        // An increment that overflowed saturates; a double never comes from us.
        Some(FieldValue::Double(d)) => d as i64,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
