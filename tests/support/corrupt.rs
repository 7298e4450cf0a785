//! Writes behind hotcount's back, to give the operator tools something to find.
#![allow(dead_code)]

use gcloud_sdk::google::firestore::v1 as fs;
use hotcount::store::firestore::FirestoreStore;

/// Adds `delta` to counter shard `k` of `post` outside any hotcount batch.
pub async fn counter_shard(store: &FirestoreStore, post: &str, k: u32, delta: i64) {
    use fs::document_transform::field_transform::TransformType;
    let name = store.layout().counter_shard(post, k);
    let write = fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name,
            ..Default::default()
        })),
        update_mask: Some(fs::DocumentMask {
            field_paths: vec![],
        }),
        update_transforms: vec![fs::document_transform::FieldTransform {
            field_path: "likes".into(),
            transform_type: Some(TransformType::Increment(fs::Value {
                value_type: Some(fs::value::ValueType::IntegerValue(delta)),
            })),
        }],
        current_document: None,
    };
    store
        .client()
        .commit(fs::CommitRequest {
            database: store.layout().database.clone(),
            writes: vec![write],
            ..Default::default()
        })
        .await
        .expect("corrupting commit");
}
