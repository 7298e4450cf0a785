//! Pessimistic transactions: no lost updates, older wins, wounding, lock
//! waits and timeouts, expiry, read-only transactions.

use std::time::{Duration, Instant};

use firestore::errors::{BackoffError, FirestoreError};
use firestore::FirestoreTransactionOptions;
use gcloud_sdk::google::firestore::v1::batch_get_documents_request::ConsistencySelector;
use gcloud_sdk::google::firestore::v1::transaction_options::{Mode, ReadOnly};
use gcloud_sdk::google::firestore::v1::{
    BatchGetDocumentsRequest, BeginTransactionRequest, RollbackRequest, TransactionOptions,
};
use hotcount_emulators::firestore::FirestoreConfig;
use serde::{Deserialize, Serialize};
use tonic::Code;

use crate::support::*;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Counter {
    value: i64,
}

const CONTENTION: &str = "Too much contention on these documents. Please try again.";
const EXPIRED: &str = "The referenced transaction has expired or is no longer valid.";

#[tokio::test]
async fn concurrent_read_modify_write_transactions_lose_no_update() {
    const N: i64 = 12;
    let emu = start().await;
    let db = client(&emu).await;
    let _: Counter = db
        .fluent()
        .insert()
        .into("counters")
        .document_id("hot")
        .object(&Counter { value: 0 })
        .execute()
        .await
        .unwrap();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..N {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let options = FirestoreTransactionOptions {
                max_retries: 200,
                ..FirestoreTransactionOptions::new()
            };
            db.run_transaction_with_options(
                |db, transaction| {
                    Box::pin(async move {
                        let current: Counter = db
                            .fluent()
                            .select()
                            .by_id_in("counters")
                            .obj()
                            .one("hot")
                            .await
                            .map_err(BackoffError::transient)?
                            .unwrap_or(Counter { value: 0 });
                        db.fluent()
                            .update()
                            .in_col("counters")
                            .document_id("hot")
                            .object(&Counter {
                                value: current.value + 1,
                            })
                            .add_to_transaction(transaction)
                            .map_err(BackoffError::permanent)?;
                        Ok::<(), BackoffError<FirestoreError>>(())
                    })
                },
                options,
            )
            .await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let end: Option<Counter> = db
        .fluent()
        .select()
        .by_id_in("counters")
        .obj()
        .one("hot")
        .await
        .unwrap();
    assert_eq!(end.unwrap().value, N);
    let name = doc_name("counters", "hot");
    assert_eq!(emu.firestore().document_writes(&name), N as u64 + 1);
    let stats = emu.firestore().stats();
    eprintln!(
        "{N} contending transactions done in {:?}: {stats:?}",
        started.elapsed()
    );
    assert_eq!(stats.active_transactions, 0);
    assert_eq!(stats.locked_documents, 0);
    emu.shutdown().await;
}

#[tokio::test]
async fn older_transaction_wins_and_the_waiting_younger_is_aborted_promptly() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("counters", "d");
    commit(&mut raw, vec![update(&name, &[("v", int(0))])], vec![])
        .await
        .unwrap();
    let older = begin(&mut raw).await;
    let younger = begin(&mut raw).await;
    read_in(&mut raw, &older, std::slice::from_ref(&name))
        .await
        .unwrap();
    read_in(&mut raw, &younger, std::slice::from_ref(&name))
        .await
        .unwrap();

    let mut raw2 = raw.clone();
    let name2 = name.clone();
    let young_commit = tokio::spawn(async move {
        commit(&mut raw2, vec![update(&name2, &[("v", int(2))])], younger).await
    });
    stats_until(&emu, "the younger commit waiting for a lock", |s| {
        s.lock_waits == 1
    })
    .await;
    assert!(
        !young_commit.is_finished(),
        "the younger waits for the older"
    );

    commit(&mut raw, vec![update(&name, &[("v", int(1))])], older)
        .await
        .expect("the older commits");
    let err = patiently("the waiting younger commit", young_commit)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    assert_eq!(err.message(), CONTENTION);
    let doc = emu.firestore().document(&name).unwrap();
    assert_eq!(int_field(&doc, "v"), Some(1));
    let stats = emu.firestore().stats();
    assert_eq!(stats.aborted_transactions, 1);
    // Promptly: aborted by the older's commit, not by running out its
    // 30 s lock wait.
    assert_eq!(stats.lock_timeouts, 0, "{stats:?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn older_commit_wounds_a_younger_lock_holder() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("counters", "w");
    let older = begin(&mut raw).await;
    let younger = begin(&mut raw).await;
    read_in(&mut raw, &younger, std::slice::from_ref(&name))
        .await
        .unwrap();
    commit(&mut raw, vec![update(&name, &[("v", int(1))])], older)
        .await
        .expect("the older commits");
    let stats = emu.firestore().stats();
    assert_eq!(
        (stats.lock_waits, stats.lock_timeouts),
        (0, 0),
        "the older does not wait for a younger holder: {stats:?}"
    );
    let err = read_in(&mut raw, &younger, std::slice::from_ref(&name))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    emu.shutdown().await;
}

#[tokio::test]
async fn younger_commit_waits_for_an_idle_older_holder_until_the_lock_timeout() {
    // An hour: only the emulated clock can run it out within the test.
    const LOCK_WAIT: Duration = Duration::from_secs(3600);
    let emu = start_with(FirestoreConfig {
        lock_wait_timeout: LOCK_WAIT,
        // The older holder must outlive the advance below.
        transaction_idle_timeout: 2 * LOCK_WAIT,
        transaction_max_lifetime: 2 * LOCK_WAIT,
        ..Default::default()
    })
    .await;
    let mut raw = raw(&emu).await;
    let name = doc_name("counters", "t");
    let older = begin(&mut raw).await;
    let younger = begin(&mut raw).await;
    read_in(&mut raw, &older, std::slice::from_ref(&name))
        .await
        .unwrap();
    let mut raw2 = raw.clone();
    let name2 = name.clone();
    let waiting = tokio::spawn(async move {
        commit(&mut raw2, vec![update(&name2, &[("v", int(1))])], younger).await
    });
    stats_until(&emu, "the younger commit waiting for a lock", |s| {
        s.lock_waits == 1
    })
    .await;
    assert!(!waiting.is_finished());
    emu.clock().advance(LOCK_WAIT + Duration::from_secs(1));
    let err = patiently("the lock wait ending on the emulated clock", waiting)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    let stats = emu.firestore().stats();
    assert_eq!(stats.lock_timeouts, 1);
    // The older one still holds its lock and can commit.
    commit(&mut raw, vec![update(&name, &[("v", int(2))])], older)
        .await
        .unwrap();
    emu.shutdown().await;
}

#[tokio::test]
async fn plain_write_waits_for_a_transaction_lock_until_rollback() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("counters", "p");
    let tx = begin(&mut raw).await;
    read_in(&mut raw, &tx, std::slice::from_ref(&name))
        .await
        .unwrap();
    let mut raw2 = raw.clone();
    let name2 = name.clone();
    let plain = tokio::spawn(async move {
        commit(&mut raw2, vec![update(&name2, &[("v", int(1))])], vec![]).await
    });
    stats_until(&emu, "the plain write waiting for the lock", |s| {
        s.lock_waits == 1
    })
    .await;
    assert!(!plain.is_finished(), "a plain write waits for the lock");
    raw.rollback(RollbackRequest {
        database: DATABASE.into(),
        transaction: tx,
        request_options: None,
    })
    .await
    .unwrap();
    patiently("the plain write released by rollback", plain)
        .await
        .unwrap()
        .expect("released by rollback, not timed out");
    let stats = emu.firestore().stats();
    assert_eq!((stats.lock_waits, stats.lock_timeouts), (1, 0), "{stats:?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn unknown_or_expired_transaction_is_invalid_argument_and_releases_locks() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("counters", "e");
    let err = commit(&mut raw, vec![], b"no-such-transaction".to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(err.message(), EXPIRED);

    let tx = begin(&mut raw).await;
    read_in(&mut raw, &tx, std::slice::from_ref(&name))
        .await
        .unwrap();
    emu.clock().advance(Duration::from_secs(61));
    // A plain write no longer waits: the idle transaction expired.
    patiently(
        "a plain write after the holder expired",
        commit(&mut raw, vec![update(&name, &[("v", int(1))])], vec![]),
    )
    .await
    .unwrap();
    assert_eq!(
        emu.firestore().stats().lock_waits,
        0,
        "not blocked by an expired transaction"
    );
    let err = commit(&mut raw, vec![update(&name, &[("v", int(2))])], tx)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(err.message(), EXPIRED);

    // Total lifetime: used every 50 s, still expires after 270 s.
    let tx = begin(&mut raw).await;
    for _ in 0..5 {
        emu.clock().advance(Duration::from_secs(50));
        read_in(&mut raw, &tx, std::slice::from_ref(&name))
            .await
            .unwrap();
    }
    emu.clock().advance(Duration::from_secs(30));
    let err = read_in(&mut raw, &tx, std::slice::from_ref(&name))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    emu.shutdown().await;
}

#[tokio::test]
async fn read_only_transaction_cannot_write_and_reads_its_snapshot() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("counters", "ro");
    commit(&mut raw, vec![update(&name, &[("v", int(1))])], vec![])
        .await
        .unwrap();
    let ro = raw
        .begin_transaction(BeginTransactionRequest {
            database: DATABASE.into(),
            options: Some(TransactionOptions {
                mode: Some(Mode::ReadOnly(ReadOnly {
                    consistency_selector: None,
                })),
            }),
            request_options: None,
        })
        .await
        .unwrap()
        .into_inner()
        .transaction;
    // A later write is not visible in the snapshot, and does not wait.
    commit(&mut raw, vec![update(&name, &[("v", int(2))])], vec![])
        .await
        .unwrap();
    let docs = read_in(&mut raw, &ro, std::slice::from_ref(&name))
        .await
        .unwrap();
    assert_eq!(int_field(&docs[0], "v"), Some(1));
    let err = commit(&mut raw, vec![update(&name, &[("v", int(3))])], ro)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    emu.shutdown().await;
}

#[tokio::test]
async fn batch_get_with_new_transaction_answers_the_transaction_first() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("counters", "n");
    let mut stream = raw
        .batch_get_documents(BatchGetDocumentsRequest {
            database: DATABASE.into(),
            documents: vec![name.clone(), name.clone()],
            mask: None,
            request_options: None,
            consistency_selector: Some(ConsistencySelector::NewTransaction(
                TransactionOptions::default(),
            )),
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert!(!first.transaction.is_empty());
    assert!(first.result.is_none() && first.read_time.is_none());
    let second = stream.message().await.unwrap().unwrap();
    assert!(second.transaction.is_empty());
    assert!(second.read_time.is_some());
    assert!(
        stream.message().await.unwrap().is_none(),
        "duplicates elided"
    );
    // The missing document is locked: commit in the transaction works.
    commit(
        &mut raw,
        vec![update(&name, &[("v", int(1))])],
        first.transaction,
    )
    .await
    .unwrap();
    emu.shutdown().await;
}

#[tokio::test]
async fn without_waiting_a_younger_commit_conflicting_with_an_older_is_aborted_at_once() {
    let emu = start_with(FirestoreConfig {
        younger_waits_for_older: false,
        ..Default::default()
    })
    .await;
    let mut raw = raw(&emu).await;
    let name = doc_name("counters", "die");
    let older = begin(&mut raw).await;
    let younger = begin(&mut raw).await;
    read_in(&mut raw, &older, std::slice::from_ref(&name))
        .await
        .unwrap();
    read_in(&mut raw, &younger, std::slice::from_ref(&name))
        .await
        .unwrap();
    let err = commit(&mut raw, vec![update(&name, &[("v", int(2))])], younger)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    let stats = emu.firestore().stats();
    assert_eq!(
        (stats.lock_waits, stats.lock_timeouts),
        (0, 0),
        "aborted at once, without waiting: {stats:?}"
    );
    commit(&mut raw, vec![update(&name, &[("v", int(1))])], older)
        .await
        .unwrap();
    emu.shutdown().await;
}

/// Reads `name` at the latest state or at `read_time`; returns (found, the response's read time).
async fn get_at(
    raw: &mut Raw,
    name: &str,
    read_time: Option<gcloud_sdk::prost_types::Timestamp>,
) -> (bool, gcloud_sdk::prost_types::Timestamp) {
    use gcloud_sdk::google::firestore::v1::batch_get_documents_response::Result as R;
    let mut stream = raw
        .batch_get_documents(BatchGetDocumentsRequest {
            database: DATABASE.to_string(),
            documents: vec![name.to_string()],
            mask: None,
            request_options: None,
            consistency_selector: read_time.map(ConsistencySelector::ReadTime),
        })
        .await
        .expect("batch get")
        .into_inner();
    let item = stream.message().await.expect("stream").expect("one result");
    (
        matches!(item.result, Some(R::Found(_))),
        item.read_time.expect("read time"),
    )
}

/// Found by the benchmark (a membership/shard mismatch read back while
/// commits still landed): a read at the latest state got read time T, a
/// commit in the same microsecond also got T, and a later read at T saw it.
#[tokio::test]
async fn a_commit_after_a_read_is_never_visible_at_that_reads_time() {
    let emu = start().await;
    // Emulated time all but stopped: the read and the commit share a microsecond.
    emu.clock().set_scale(1e-9);
    let mut raw = raw(&emu).await;
    let name = doc_name("snap", "a");
    let (found, t) = get_at(&mut raw, &name, None).await;
    assert!(!found);
    let committed = commit(&mut raw, vec![update(&name, &[("v", int(1))])], vec![])
        .await
        .expect("commit")
        .commit_time
        .expect("commit time");
    assert!(
        (committed.seconds, committed.nanos) > (t.seconds, t.nanos),
        "commit time {committed:?} must follow the read time {t:?}"
    );
    let (found_again, _) = get_at(&mut raw, &name, Some(t)).await;
    assert!(
        !found_again,
        "a read at {t:?} sees the same state as the first read"
    );
    emu.shutdown().await;
}

/// Runs a query over collection `collection` in `transaction`; the integer
/// field `v` of each document returned.
async fn query_in(
    raw: &mut Raw,
    transaction: &[u8],
    collection: &str,
) -> Result<Vec<i64>, tonic::Status> {
    use gcloud_sdk::google::firestore::v1::structured_query::CollectionSelector;
    use gcloud_sdk::google::firestore::v1::{run_query_request, RunQueryRequest, StructuredQuery};
    let mut stream = raw
        .run_query(RunQueryRequest {
            parent: format!("{DATABASE}/documents"),
            query_type: Some(run_query_request::QueryType::StructuredQuery(
                StructuredQuery {
                    from: vec![CollectionSelector {
                        collection_id: collection.to_string(),
                        all_descendants: false,
                    }],
                    ..Default::default()
                },
            )),
            consistency_selector: Some(run_query_request::ConsistencySelector::Transaction(
                transaction.to_vec(),
            )),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(item) = stream.message().await? {
        if let Some(d) = item.document {
            out.extend(int_field(&d, "v"));
        }
    }
    Ok(out)
}

/// Issue #16 item 2: once a commit waits for a write lock, a later read of
/// that document by a third transaction (BatchGetDocuments, and a query
/// returning it) queues behind the commit and sees the committed value.
#[tokio::test]
async fn a_read_queues_behind_a_commit_waiting_for_the_same_document() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("queued", "d");
    commit(&mut raw, vec![update(&name, &[("v", int(0))])], vec![])
        .await
        .unwrap();
    let holder = begin(&mut raw).await;
    read_in(&mut raw, &holder, std::slice::from_ref(&name))
        .await
        .unwrap();
    let writer = begin(&mut raw).await;
    let (mut r1, n1) = (raw.clone(), name.clone());
    let write =
        tokio::spawn(
            async move { commit(&mut r1, vec![update(&n1, &[("v", int(1))])], writer).await },
        );
    stats_until(&emu, "the commit waiting for the older holder", |s| {
        s.lock_waits == 1
    })
    .await;
    assert!(
        !write.is_finished(),
        "the commit waits for the older holder"
    );

    let reader = begin(&mut raw).await;
    let querier = begin(&mut raw).await;
    let (mut r2, n2, t2) = (raw.clone(), name.clone(), reader.clone());
    let read = tokio::spawn(async move { read_in(&mut r2, &t2, &[n2]).await });
    let (mut r3, t3) = (raw.clone(), querier.clone());
    let query = tokio::spawn(async move { query_in(&mut r3, &t3, "queued").await });
    stats_until(
        &emu,
        "the read and the query queued behind the commit",
        |s| s.read_waits == 2,
    )
    .await;
    assert!(
        !read.is_finished(),
        "a later read waits behind the waiting commit"
    );
    assert!(
        !query.is_finished(),
        "a later query returning the document waits too"
    );

    raw.rollback(RollbackRequest {
        database: DATABASE.to_string(),
        transaction: holder,
        request_options: None,
    })
    .await
    .unwrap();
    write
        .await
        .unwrap()
        .expect("the waiting commit goes through");
    let seen = read.await.unwrap().expect("the queued read");
    assert_eq!(int_field(&seen[0], "v"), Some(1), "it sees the commit");
    assert_eq!(query.await.unwrap().expect("the queued query"), [1]);
    for t in [reader, querier] {
        commit(&mut raw, vec![], t).await.unwrap();
    }
    let stats = emu.firestore().stats();
    assert_eq!(stats.active_transactions, 0);
    assert_eq!(stats.locked_documents, 0);
    emu.shutdown().await;
}

/// Issue #16 item 7: a plain write waiting for a transaction's lock is not
/// answered before that transaction's own commit: in Firestore the
/// contended write retries with backoff and finishes after it.
#[tokio::test]
async fn a_released_plain_write_is_answered_after_the_transaction_that_held_it() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    for round in 0..10 {
        let name = doc_name("released", &format!("d{round}"));
        commit(&mut raw, vec![update(&name, &[("v", int(0))])], vec![])
            .await
            .unwrap();
        let txn = begin(&mut raw).await;
        read_in(&mut raw, &txn, std::slice::from_ref(&name))
            .await
            .unwrap();
        let (mut other, n) = (raw.clone(), name.clone());
        let plain = tokio::spawn(async move {
            commit(&mut other, vec![update(&n, &[("v", int(2))])], vec![]).await?;
            Ok::<Instant, tonic::Status>(Instant::now())
        });
        stats_until(&emu, "the plain write waiting for the lock", |s| {
            s.lock_waits == round + 1
        })
        .await;
        assert!(!plain.is_finished(), "the plain write waits");
        commit(&mut raw, vec![update(&name, &[("v", int(1))])], txn)
            .await
            .expect("the transaction commits");
        let txn_answered = Instant::now();
        let plain_answered = plain.await.unwrap().expect("the plain write");
        assert!(
            plain_answered > txn_answered,
            "round {round}: the plain write was answered before the transaction"
        );
        let doc = emu.firestore().document(&name).unwrap();
        assert_eq!(int_field(&doc, "v"), Some(2), "and applied after it");
    }
    emu.shutdown().await;
}
