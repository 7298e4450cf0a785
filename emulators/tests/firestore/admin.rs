//! Stats and reset routes, and the library methods behind them.

use crate::support::*;

#[tokio::test]
async fn stats_count_writes_per_document_and_reset_clears_a_database() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let hot = doc_name("posts", "hot");
    let cold = doc_name("posts", "cold");
    for i in 0..3 {
        commit(&mut raw, vec![update(&hot, &[("v", int(i))])], vec![])
            .await
            .unwrap();
    }
    commit(
        &mut raw,
        vec![
            update(&cold, &[("v", int(1))]),
            update(&hot, &[("v", int(9))]),
        ],
        vec![],
    )
    .await
    .unwrap();
    let fs = emu.firestore();
    assert_eq!(fs.document_writes(&hot), 4);
    assert_eq!(fs.hottest_documents(1)[0].name, hot);
    let stats = fs.stats();
    assert_eq!(stats.commits, 4);
    assert_eq!(stats.documents_written, 5);
    assert_eq!(stats.documents, 2);

    let (status, body) = http(&emu, "GET", "/emulator/v1/firestore/stats?top=1").await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["totals"]["commits"], 4);
    assert_eq!(json["hottest_documents"][0]["name"], hot.as_str());
    assert_eq!(json["hottest_documents"][0]["writes"], 4);

    let (status, _) = http(
        &emu,
        "DELETE",
        "/emulator/v1/projects/other/databases/(default)/documents",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(fs.stats().documents, 2, "another project is untouched");
    let (status, _) = http(
        &emu,
        "DELETE",
        &format!("/emulator/v1/projects/{PROJECT}/databases/(default)/documents"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(fs.stats().documents, 0);
    assert!(fs.document(&hot).is_none());

    let (status, _) = http(&emu, "DELETE", "/emulator/v1/firestore/stats").await;
    assert_eq!(status, 200);
    assert_eq!(fs.stats().commits, 0);
    assert_eq!(fs.document_writes(&hot), 0);
    emu.shutdown().await;
}

#[tokio::test]
async fn stats_count_reads_writes_deletes_and_index_entries_by_collection_group() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let like = doc_name("likes", "p1_u1");
    let shard = format!("{DATABASE}/documents/counters/p1/shards/0");
    let delete = gcloud_sdk::google::firestore::v1::Write {
        operation: Some(gcloud_sdk::google::firestore::v1::write::Operation::Delete(
            like.clone(),
        )),
        ..Default::default()
    };
    commit(
        &mut raw,
        vec![
            update(&like, &[("postId", string("p1")), ("liked", int(1))]),
            update(&shard, &[("likes", int(1))]),
        ],
        vec![],
    )
    .await
    .unwrap();
    let txn = begin(&mut raw).await;
    let missing = doc_name("likes", "p2_u1");
    let found = read_in(&mut raw, &txn, &[like.clone(), missing])
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    commit(&mut raw, vec![delete], txn).await.unwrap();

    let fs = emu.firestore();
    let stats = fs.stats();
    assert_eq!(
        stats.documents_written, 3,
        "deletes are among the writes applied"
    );
    assert_eq!(stats.documents_deleted, 1);
    assert_eq!(stats.index_entries_written, 2 * 2 + 2);
    let likes = stats.by_collection["likes"];
    assert_eq!(
        (
            likes.reads,
            likes.writes,
            likes.deletes,
            likes.index_entries
        ),
        (2, 1, 1, 4),
        "a missing document a batch get looked up is a billed read"
    );
    let shards = stats.by_collection["shards"];
    assert_eq!((shards.reads, shards.writes, shards.deletes), (0, 1, 0));

    let storage = fs.storage();
    assert!(!storage.contains_key("likes"), "the like was deleted");
    let stored = storage["shards"];
    // counters/p1/shards/0: 9 + 3 + 7 + 2 + 16 name bytes, `likes` 6 + 8, 32.
    assert_eq!((stored.documents, stored.document_bytes), (1, 37 + 14 + 32));

    let (_, body) = http(&emu, "GET", "/emulator/v1/firestore/stats").await;
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["totals"]["by_collection"]["likes"]["deletes"], 1);
    fs.reset_stats();
    assert!(fs.stats().by_collection.is_empty());
    emu.shutdown().await;
}
