//! Injected faults, observed from the client side.

use std::time::{Duration, Instant};

use gcloud_sdk::google::firestore::v1::GetDocumentRequest;
use hotcount_emulators::{FaultKind, FaultSpec};
use tonic::Code;

use crate::support::*;

#[tokio::test]
async fn injected_aborted_commit_is_seen_by_the_client_and_releases_locks() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("faults", "a");
    emu.firestore_faults()
        .add(FaultSpec::error("Commit", Code::Aborted).times(1))
        .unwrap();
    let tx = begin(&mut raw).await;
    read_in(&mut raw, &tx, std::slice::from_ref(&name))
        .await
        .unwrap();
    let err = commit(&mut raw, vec![update(&name, &[("v", int(1))])], tx)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    assert!(emu.firestore().document(&name).is_none());
    // The failed commit released the read lock: a plain write does not wait.
    patiently(
        "a plain write after the failed commit",
        commit(&mut raw, vec![update(&name, &[("v", int(2))])], vec![]),
    )
    .await
    .unwrap();
    assert_eq!(emu.firestore().stats().lock_waits, 0, "no lock left behind");
    assert_eq!(emu.firestore().stats().active_transactions, 0);
    assert_eq!(emu.firestore_faults().fired()[&FaultKind::Error], 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn commit_applied_but_answered_unavailable_is_applied() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("faults", "u");
    emu.firestore_faults()
        .add(
            FaultSpec::new(FaultKind::ErrorAfterApply)
                .method("Commit")
                .code(Code::Unavailable)
                .times(1),
        )
        .unwrap();
    let tx = begin(&mut raw).await;
    let err = commit(&mut raw, vec![update(&name, &[("v", int(7))])], tx)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    let doc = emu
        .firestore()
        .document(&name)
        .expect("the write was applied");
    assert_eq!(int_field(&doc, "v"), Some(7));
    assert_eq!(emu.firestore().stats().commits, 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn latency_fault_delays_the_rpc() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let mut spec = FaultSpec::new(FaultKind::Latency).method("GetDocument");
    spec.latency_ms = Some(150);
    emu.firestore_faults().add(spec).unwrap();
    let started = Instant::now();
    let err = raw
        .get_document(GetDocumentRequest {
            name: doc_name("faults", "l"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(emu.firestore_counters().get("GetDocument"), 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn transaction_begun_by_a_read_answered_with_an_error_holds_no_lock() {
    use gcloud_sdk::google::firestore::v1::batch_get_documents_request::ConsistencySelector;
    use gcloud_sdk::google::firestore::v1::{BatchGetDocumentsRequest, TransactionOptions};
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("faults", "b");
    emu.firestore_faults()
        .add(
            FaultSpec::new(FaultKind::ErrorAfterApply)
                .method("BatchGetDocuments")
                .code(Code::Unavailable)
                .times(1),
        )
        .unwrap();
    let err = raw
        .batch_get_documents(BatchGetDocumentsRequest {
            database: DATABASE.into(),
            documents: vec![name.clone()],
            mask: None,
            request_options: None,
            consistency_selector: Some(ConsistencySelector::NewTransaction(
                TransactionOptions::default(),
            )),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    patiently(
        "a plain write after the failed read",
        commit(&mut raw, vec![update(&name, &[("v", int(1))])], vec![]),
    )
    .await
    .unwrap();
    assert_eq!(emu.firestore().stats().lock_waits, 0, "no lock left behind");
    assert_eq!(emu.firestore().stats().active_transactions, 0);
    emu.shutdown().await;
}
