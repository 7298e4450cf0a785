//! Writes behind hotcount's back, to give the operator tools something to find.
#![allow(dead_code)]

use hotcount::store::firestore::{codec, FirestoreDb};

/// Adds `delta` to counter shard `k` of `post` outside any hotcount batch.
pub async fn counter_shard(db: &FirestoreDb, post: &str, k: u32, delta: i64) {
    let write = codec::counter_increment(db.layout(), post, k, delta);
    db.commit(vec![write], None)
        .await
        .expect("corrupting commit");
}
