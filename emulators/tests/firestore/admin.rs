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
