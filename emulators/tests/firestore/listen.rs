//! The Listen RPC: document and query targets, their initial state and
//! changes, CURRENT and NO_CHANGE, resume tokens and read times, target
//! removal, existence filters, heartbeats and faults. The exact message
//! sequences are checked through gcloud-sdk's generated gRPC client; the
//! `firestore` crate's listener is checked to consume them as it consumes
//! Google's.

use std::sync::Arc;
use std::time::Duration;

use firestore::{
    FirestoreCollectionDocuments, FirestoreListenEvent, FirestoreListenerTarget,
    FirestoreListenerTargetParams, FirestoreMemListenStateStorage, FirestoreTargetType,
};
use gcloud_sdk::google::firestore::v1::listen_request::TargetChange as Change;
use gcloud_sdk::google::firestore::v1::listen_response::ResponseType as R;
use gcloud_sdk::google::firestore::v1::structured_query::{
    field_filter, filter::FilterType, CollectionSelector, Direction, FieldFilter, FieldReference,
    Filter, Order,
};
use gcloud_sdk::google::firestore::v1::target::{
    query_target, DocumentsTarget, QueryTarget, ResumeType, TargetType,
};
use gcloud_sdk::google::firestore::v1::target_change::TargetChangeType;
use gcloud_sdk::google::firestore::v1::{
    precondition::ConditionType, write::Operation, ListenRequest, ListenResponse, Precondition,
    StructuredQuery, Target, Write,
};
use hotcount_emulators::firestore::FirestoreConfig;
use hotcount_emulators::{Emulators, FaultKind, FaultSpec};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Streaming;

use crate::support::*;

/// One raw Listen stream: requests in, responses out.
struct Listen {
    requests: mpsc::UnboundedSender<ListenRequest>,
    responses: Streaming<ListenResponse>,
}

impl Listen {
    async fn open(emu: &Emulators) -> Self {
        let (requests, rx) = mpsc::unbounded_channel();
        let responses = raw(emu)
            .await
            .listen(UnboundedReceiverStream::new(rx))
            .await
            .expect("listen opens")
            .into_inner();
        Self {
            requests,
            responses,
        }
    }

    fn send(&self, change: Change) {
        self.requests
            .send(ListenRequest {
                database: DATABASE.to_string(),
                target_change: Some(change),
                ..Default::default()
            })
            .expect("stream open");
    }

    fn add(&self, target: Target) {
        self.send(Change::AddTarget(target));
    }

    async fn next(&mut self) -> Result<ListenResponse, tonic::Status> {
        patiently("a listen response", self.responses.message())
            .await
            .and_then(|r| r.ok_or_else(|| tonic::Status::ok("stream ended")))
    }

    /// Responses up to and including the next global NO_CHANGE, described.
    async fn snapshot(&mut self) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let r = self.next().await.expect("a response");
            let global = is_global_no_change(&r);
            seen.push(describe(&r));
            if global {
                return seen;
            }
        }
    }

    /// The next global NO_CHANGE's read time and resume token, skipping
    /// everything before it.
    async fn next_snapshot_point(&mut self) -> (prost_types::Timestamp, Vec<u8>) {
        loop {
            let r = self.next().await.expect("a response");
            if is_global_no_change(&r) {
                let Some(R::TargetChange(c)) = r.response_type else {
                    unreachable!()
                };
                return (c.read_time.expect("read time"), c.resume_token);
            }
        }
    }
}

fn is_global_no_change(r: &ListenResponse) -> bool {
    matches!(&r.response_type, Some(R::TargetChange(c))
        if c.target_change_type == TargetChangeType::NoChange as i32
            && c.target_ids.is_empty()
            && c.read_time.is_some())
}

fn short(name: &str) -> &str {
    name.strip_prefix(&format!("{DATABASE}/documents/"))
        .unwrap_or(name)
}

/// A compact description of a response, for sequence assertions.
fn describe(r: &ListenResponse) -> String {
    match &r.response_type {
        Some(R::TargetChange(c)) => {
            let kind = TargetChangeType::try_from(c.target_change_type)
                .map(|k| k.as_str_name())
                .unwrap_or("?");
            let cause = c
                .cause
                .as_ref()
                .map(|s| format!(" cause {:?}", tonic::Code::from(s.code)))
                .unwrap_or_default();
            let point = if c.read_time.is_some() && !c.resume_token.is_empty() {
                " @"
            } else {
                ""
            };
            format!("{kind} {:?}{cause}{point}", c.target_ids)
        }
        Some(R::DocumentChange(c)) => {
            let d = c.document.as_ref().expect("a document");
            let n = int_field(d, "n")
                .map(|n| format!(" n={n}"))
                .unwrap_or_default();
            if c.removed_target_ids.is_empty() {
                format!("change {} {:?}{n}", short(&d.name), c.target_ids)
            } else {
                format!(
                    "change {} {:?} -{:?}{n}",
                    short(&d.name),
                    c.target_ids,
                    c.removed_target_ids
                )
            }
        }
        Some(R::DocumentDelete(d)) => {
            assert!(d.read_time.is_some(), "a delete carries its read time");
            format!("delete {} -{:?}", short(&d.document), d.removed_target_ids)
        }
        Some(R::DocumentRemove(d)) => {
            assert!(d.read_time.is_some(), "a remove carries its read time");
            format!("remove {} -{:?}", short(&d.document), d.removed_target_ids)
        }
        Some(R::Filter(f)) => format!("filter {} count {}", f.target_id, f.count),
        None => "empty".into(),
    }
}

fn docs_target(id: i32, ids: &[&str]) -> Target {
    Target {
        target_id: id,
        target_type: Some(TargetType::Documents(DocumentsTarget {
            documents: ids.iter().map(|i| doc_name("counts", i)).collect(),
        })),
        ..Default::default()
    }
}

/// `items` where n >= 10, by n descending, at most `limit`.
fn items_query(limit: Option<i32>) -> StructuredQuery {
    StructuredQuery {
        from: vec![CollectionSelector {
            collection_id: "items".into(),
            all_descendants: false,
        }],
        r#where: Some(Filter {
            filter_type: Some(FilterType::FieldFilter(FieldFilter {
                field: Some(FieldReference {
                    field_path: "n".into(),
                }),
                op: field_filter::Operator::GreaterThanOrEqual as i32,
                value: Some(int(10)),
            })),
        }),
        order_by: vec![Order {
            field: Some(FieldReference {
                field_path: "n".into(),
            }),
            direction: Direction::Descending as i32,
        }],
        limit,
        ..Default::default()
    }
}

fn query_target(id: i32, query: StructuredQuery) -> Target {
    Target {
        target_id: id,
        target_type: Some(TargetType::Query(QueryTarget {
            parent: format!("{DATABASE}/documents"),
            query_type: Some(query_target::QueryType::StructuredQuery(query)),
        })),
        ..Default::default()
    }
}

async fn put(raw: &mut Raw, collection: &str, id: &str, n: i64) {
    commit(
        raw,
        vec![update(&doc_name(collection, id), &[("n", int(n))])],
        vec![],
    )
    .await
    .expect("write");
}

async fn delete(raw: &mut Raw, collection: &str, id: &str) {
    let write = Write {
        operation: Some(Operation::Delete(doc_name(collection, id))),
        ..Default::default()
    };
    commit(raw, vec![write], vec![]).await.expect("delete");
}

fn micros(t: &prost_types::Timestamp) -> i64 {
    t.seconds * 1_000_000 + i64::from(t.nanos) / 1000
}

#[tokio::test]
async fn document_target_sends_its_documents_then_current_then_each_change() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    put(&mut raw, "counts", "a", 1).await;
    let mut listen = Listen::open(&emu).await;
    listen.add(docs_target(7, &["a", "missing"]));
    // A missing document is simply absent from the initial state.
    assert_eq!(
        listen.snapshot().await,
        [
            "ADD [7]",
            "change counts/a [7] n=1",
            "CURRENT [7] @",
            "NO_CHANGE [] @"
        ]
    );
    put(&mut raw, "counts", "a", 2).await;
    assert_eq!(
        listen.snapshot().await,
        ["change counts/a [7] n=2", "NO_CHANGE [] @"]
    );
    put(&mut raw, "counts", "missing", 5).await;
    assert_eq!(
        listen.snapshot().await,
        ["change counts/missing [7] n=5", "NO_CHANGE [] @"]
    );
    delete(&mut raw, "counts", "a").await;
    assert_eq!(
        listen.snapshot().await,
        ["delete counts/a -[7]", "NO_CHANGE [] @"]
    );
    // Writes elsewhere, and a write that changes nothing, send nothing: the
    // next snapshot is the next real change.
    put(&mut raw, "other", "a", 1).await;
    put(&mut raw, "counts", "missing", 5).await;
    put(&mut raw, "counts", "missing", 6).await;
    assert_eq!(
        listen.snapshot().await,
        ["change counts/missing [7] n=6", "NO_CHANGE [] @"]
    );
}

#[tokio::test]
async fn current_and_no_change_carry_the_snapshot_read_time_and_a_resume_token() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let written = commit(
        &mut raw,
        vec![update(&doc_name("counts", "a"), &[("n", int(1))])],
        vec![],
    )
    .await
    .unwrap()
    .commit_time
    .unwrap();
    let mut listen = Listen::open(&emu).await;
    listen.add(docs_target(1, &["a"]));
    let mut current = None;
    let (read_time, token) = loop {
        let r = listen.next().await.unwrap();
        if let Some(R::TargetChange(c)) = &r.response_type {
            if c.target_change_type == TargetChangeType::Current as i32 {
                current = Some(c.clone());
            }
        }
        if is_global_no_change(&r) {
            let Some(R::TargetChange(c)) = r.response_type else {
                unreachable!()
            };
            break (c.read_time.unwrap(), c.resume_token);
        }
    };
    let current = current.expect("CURRENT before the snapshot");
    assert_eq!(current.read_time, Some(read_time));
    assert_eq!(current.resume_token, token);
    assert!(
        micros(&read_time) >= micros(&written),
        "the snapshot includes the write"
    );
    // Production's token shape: field 1 { field 1: varint time }.
    assert_eq!(&token[..2], &[0x0a, token.len() as u8 - 2]);
    assert_eq!(token[2], 0x08);

    // Each later snapshot's read time is at or after the change's commit.
    let second = commit(
        &mut raw,
        vec![update(&doc_name("counts", "a"), &[("n", int(2))])],
        vec![],
    )
    .await
    .unwrap()
    .commit_time
    .unwrap();
    let (later, later_token) = listen.next_snapshot_point().await;
    assert!(micros(&later) >= micros(&second));
    assert!(micros(&later) > micros(&read_time));
    assert_ne!(later_token, token);
}

#[tokio::test]
async fn query_target_follows_its_filter_order_and_limit() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    for (id, n) in [("a", 30), ("b", 20), ("c", 10), ("d", 5)] {
        put(&mut raw, "items", id, n).await;
    }
    let mut listen = Listen::open(&emu).await;
    listen.add(query_target(3, items_query(Some(2))));
    assert_eq!(
        listen.snapshot().await,
        [
            "ADD [3]",
            "change items/a [3] n=30",
            "change items/b [3] n=20",
            "CURRENT [3] @",
            "NO_CHANGE [] @"
        ]
    );
    // c rises into the top two and pushes b out of the window.
    put(&mut raw, "items", "c", 25).await;
    assert_eq!(
        listen.snapshot().await,
        [
            "remove items/b -[3]",
            "change items/c [3] n=25",
            "NO_CHANGE [] @"
        ]
    );
    // a no longer matches the filter: b comes back in.
    put(&mut raw, "items", "a", 1).await;
    assert_eq!(
        listen.snapshot().await,
        [
            "remove items/a -[3]",
            "change items/b [3] n=20",
            "NO_CHANGE [] @"
        ]
    );
    // A change inside the window, then a deletion.
    put(&mut raw, "items", "b", 21).await;
    assert_eq!(
        listen.snapshot().await,
        ["change items/b [3] n=21", "NO_CHANGE [] @"]
    );
    delete(&mut raw, "items", "c").await;
    assert_eq!(
        listen.snapshot().await,
        ["delete items/c -[3]", "NO_CHANGE [] @"]
    );
    // Below the filter, or in another collection: nothing.
    put(&mut raw, "items", "d", 6).await;
    put(&mut raw, "things", "x", 50).await;
    put(&mut raw, "items", "e", 40).await;
    assert_eq!(
        listen.snapshot().await,
        ["change items/e [3] n=40", "NO_CHANGE [] @"]
    );
}

#[tokio::test]
async fn a_query_without_a_limit_follows_each_document_in_and_out() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    put(&mut raw, "items", "a", 10).await;
    let mut listen = Listen::open(&emu).await;
    listen.add(query_target(1, items_query(None)));
    assert_eq!(
        listen.snapshot().await,
        [
            "ADD [1]",
            "change items/a [1] n=10",
            "CURRENT [1] @",
            "NO_CHANGE [] @"
        ]
    );
    // A second target on the stream: only its own state is sent.
    listen.add(docs_target(2, &["x"]));
    assert_eq!(
        listen.snapshot().await,
        ["ADD [2]", "CURRENT [2] @", "NO_CHANGE [] @"]
    );
    put(&mut raw, "items", "b", 11).await;
    assert_eq!(
        listen.snapshot().await,
        ["change items/b [1] n=11", "NO_CHANGE [] @"]
    );
    put(&mut raw, "items", "a", 9).await;
    assert_eq!(
        listen.snapshot().await,
        ["remove items/a -[1]", "NO_CHANGE [] @"]
    );
    put(&mut raw, "items", "a", 12).await;
    assert_eq!(
        listen.snapshot().await,
        ["change items/a [1] n=12", "NO_CHANGE [] @"]
    );
}

#[tokio::test]
async fn one_document_in_two_targets_is_one_message_naming_both() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let mut listen = Listen::open(&emu).await;
    let counts_query = |id| {
        let mut q = items_query(None);
        q.from[0].collection_id = "counts".into();
        query_target(id, q)
    };
    listen.add(counts_query(1));
    listen.snapshot().await;
    listen.add(docs_target(2, &["a"]));
    listen.snapshot().await;
    put(&mut raw, "counts", "a", 10).await;
    assert_eq!(
        listen.snapshot().await,
        ["change counts/a [1, 2] n=10", "NO_CHANGE [] @"]
    );
    // Left the query, still in the document target.
    put(&mut raw, "counts", "a", 3).await;
    assert_eq!(
        listen.snapshot().await,
        ["change counts/a [2] -[1] n=3", "NO_CHANGE [] @"]
    );
    put(&mut raw, "counts", "a", 11).await;
    listen.snapshot().await;
    delete(&mut raw, "counts", "a").await;
    assert_eq!(
        listen.snapshot().await,
        ["delete counts/a -[1, 2]", "NO_CHANGE [] @"]
    );
}

/// Writes the state a resumed listener is tested against: a and b in the
/// query, then (after the token) b changes, c is deleted, d is created and
/// e leaves the filter; a is untouched.
async fn changes_after_a_token(emu: &Emulators) -> (prost_types::Timestamp, Vec<u8>) {
    let mut raw = raw(emu).await;
    for (id, n) in [("a", 10), ("b", 20), ("c", 30), ("e", 40)] {
        put(&mut raw, "items", id, n).await;
    }
    let mut listen = Listen::open(emu).await;
    listen.add(query_target(4, items_query(None)));
    let point = listen.next_snapshot_point().await;
    drop(listen);
    put(&mut raw, "items", "b", 21).await;
    delete(&mut raw, "items", "c").await;
    put(&mut raw, "items", "d", 50).await;
    put(&mut raw, "items", "e", 4).await;
    point
}

#[tokio::test]
async fn resuming_with_a_token_sends_only_what_changed_since() {
    let emu = start().await;
    let (_, token) = changes_after_a_token(&emu).await;
    let mut listen = Listen::open(&emu).await;
    let mut target = query_target(4, items_query(None));
    target.resume_type = Some(ResumeType::ResumeToken(token));
    listen.add(target);
    assert_eq!(
        listen.snapshot().await,
        [
            "ADD [4]",
            "change items/b [4] n=21",
            "delete items/c -[4]",
            "change items/d [4] n=50",
            "remove items/e -[4]",
            "CURRENT [4] @",
            "NO_CHANGE [] @"
        ]
    );
}

#[tokio::test]
async fn resuming_from_a_read_time_sends_only_what_changed_since() {
    let emu = start().await;
    let (read_time, _) = changes_after_a_token(&emu).await;
    let mut listen = Listen::open(&emu).await;
    let mut target = query_target(4, items_query(None));
    target.resume_type = Some(ResumeType::ReadTime(read_time));
    listen.add(target);
    let seen = listen.snapshot().await;
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert!(!seen.iter().any(|s| s.contains("items/a")), "{seen:?}");
}

#[tokio::test]
async fn resuming_before_the_kept_history_sends_the_changes_and_an_existence_filter() {
    // Deletions are forgotten one second after they happen.
    let emu = start_with(FirestoreConfig {
        version_retention: Duration::from_secs(1),
        ..Default::default()
    })
    .await;
    let (_, token) = changes_after_a_token(&emu).await;
    emu.clock().advance(Duration::from_secs(5));
    emu.firestore().sweep();
    let mut listen = Listen::open(&emu).await;
    let mut target = query_target(4, items_query(None));
    target.resume_type = Some(ResumeType::ResumeToken(token.clone()));
    listen.add(target);
    // The deletion of c and the departure of e can no longer be told: the
    // filter's count (a, b, d) lets the client see it holds two too many.
    assert_eq!(
        listen.snapshot().await,
        [
            "ADD [4]",
            "change items/b [4] n=21",
            "change items/d [4] n=50",
            "filter 4 count 3",
            "CURRENT [4] @",
            "NO_CHANGE [] @"
        ]
    );
    // A document target resumed the same way gets its count too.
    let mut docs = docs_target(5, &[]);
    docs.target_type = Some(TargetType::Documents(DocumentsTarget {
        documents: vec![doc_name("items", "a"), doc_name("items", "c")],
    }));
    docs.resume_type = Some(ResumeType::ResumeToken(token));
    listen.add(docs);
    assert_eq!(
        listen.snapshot().await,
        [
            "ADD [5]",
            "filter 5 count 1",
            "CURRENT [5] @",
            "NO_CHANGE [] @"
        ]
    );
}

#[tokio::test]
async fn removed_targets_are_acknowledged_and_an_unknown_one_fails_the_stream() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let mut listen = Listen::open(&emu).await;
    listen.add(docs_target(1, &["a"]));
    listen.snapshot().await;
    listen.add(docs_target(2, &["b"]));
    listen.snapshot().await;
    listen.send(Change::RemoveTarget(1));
    assert_eq!(describe(&listen.next().await.unwrap()), "REMOVE [1]");
    put(&mut raw, "counts", "a", 1).await;
    put(&mut raw, "counts", "b", 1).await;
    assert_eq!(
        listen.snapshot().await,
        ["change counts/b [2] n=1", "NO_CHANGE [] @"]
    );
    listen.send(Change::RemoveTarget(1));
    let status = listen.next().await.expect_err("the stream fails");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
}

#[tokio::test]
async fn a_once_target_is_removed_after_its_snapshot() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    put(&mut raw, "counts", "a", 1).await;
    let mut listen = Listen::open(&emu).await;
    let mut target = docs_target(1, &["a"]);
    target.once = true;
    listen.add(target);
    assert_eq!(
        listen.snapshot().await,
        [
            "ADD [1]",
            "change counts/a [1] n=1",
            "CURRENT [1] @",
            "NO_CHANGE [] @"
        ]
    );
    assert_eq!(describe(&listen.next().await.unwrap()), "REMOVE [1]");
    // The stream stays open for other targets.
    listen.add(docs_target(2, &["a"]));
    assert_eq!(listen.snapshot().await[0], "ADD [2]");
}

#[tokio::test]
async fn targets_that_cannot_be_served_are_removed_with_a_cause() {
    let emu = start().await;
    let mut listen = Listen::open(&emu).await;
    let mut bad_query = items_query(None);
    bad_query.limit = Some(-1);
    listen.add(query_target(1, bad_query));
    assert_eq!(
        describe(&listen.next().await.unwrap()),
        "REMOVE [1] cause InvalidArgument"
    );
    let mut bad_token = docs_target(2, &["a"]);
    bad_token.resume_type = Some(ResumeType::ResumeToken(b"not a token".to_vec()));
    listen.add(bad_token);
    assert_eq!(
        describe(&listen.next().await.unwrap()),
        "REMOVE [2] cause InvalidArgument"
    );
    let mut elsewhere = docs_target(3, &[]);
    elsewhere.target_type = Some(TargetType::Documents(DocumentsTarget {
        documents: vec!["projects/other/databases/(default)/documents/c/d".into()],
    }));
    listen.add(elsewhere);
    assert_eq!(
        describe(&listen.next().await.unwrap()),
        "REMOVE [3] cause InvalidArgument"
    );
    let mut future = docs_target(4, &["a"]);
    let now = std::time::SystemTime::now() + Duration::from_secs(3600);
    future.resume_type = Some(ResumeType::ReadTime(prost_types::Timestamp::from(now)));
    listen.add(future);
    assert_eq!(
        listen.snapshot().await,
        [
            "ADD [4]",
            "REMOVE [4] cause InvalidArgument",
            "NO_CHANGE [] @"
        ]
    );
    // The stream still serves good targets.
    listen.add(docs_target(5, &["a"]));
    assert_eq!(
        listen.snapshot().await,
        ["ADD [5]", "CURRENT [5] @", "NO_CHANGE [] @"]
    );
}

#[tokio::test]
async fn malformed_requests_fail_the_stream() {
    let emu = start().await;
    let mut listen = Listen::open(&emu).await;
    listen.add(docs_target(1, &["a"]));
    listen.snapshot().await;
    listen.add(docs_target(1, &["b"]));
    let status = listen.next().await.expect_err("a duplicate target id");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");

    let mut listen = Listen::open(&emu).await;
    listen.add(docs_target(1, &["a"]));
    listen
        .requests
        .send(ListenRequest {
            database: "projects/other/databases/(default)".into(),
            target_change: Some(Change::RemoveTarget(1)),
            ..Default::default()
        })
        .unwrap();
    let status = loop {
        match listen.next().await {
            Ok(_) => continue,
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
}

#[tokio::test]
async fn target_id_zero_gets_an_id_from_the_server() {
    let emu = start().await;
    let mut listen = Listen::open(&emu).await;
    listen.add(docs_target(0, &["a"]));
    assert_eq!(listen.snapshot().await[0], "ADD [1]");
    listen.add(docs_target(0, &["b"]));
    assert_eq!(listen.snapshot().await[0], "ADD [2]");
    // firestore.proto: a client id after a server-assigned one is removed at once.
    listen.add(docs_target(9, &["c"]));
    assert_eq!(
        describe(&listen.next().await.unwrap()),
        "REMOVE [9] cause InvalidArgument"
    );
}

#[tokio::test]
async fn an_idle_stream_gets_a_heartbeat_with_a_new_resume_token() {
    let emu = start_with(FirestoreConfig {
        listen_heartbeat: Duration::from_millis(200),
        ..Default::default()
    })
    .await;
    let mut listen = Listen::open(&emu).await;
    listen.add(docs_target(1, &["a"]));
    let (first, first_token) = listen.next_snapshot_point().await;
    let r = listen.next().await.unwrap();
    assert!(is_global_no_change(&r), "{}", describe(&r));
    let Some(R::TargetChange(c)) = r.response_type else {
        unreachable!()
    };
    assert!(micros(&c.read_time.unwrap()) > micros(&first));
    assert_ne!(c.resume_token, first_token);
}

#[tokio::test]
async fn drop_stream_fault_and_shutdown_end_listen_streams_with_unavailable() {
    let emu = start().await;
    let mut listen = Listen::open(&emu).await;
    listen.add(docs_target(1, &["a"]));
    listen.snapshot().await;
    emu.firestore_faults()
        .add(
            FaultSpec::new(FaultKind::DropStream)
                .method("Listen")
                .times(1),
        )
        .unwrap();
    let status = listen.next().await.expect_err("dropped");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");

    let mut listen = Listen::open(&emu).await;
    listen.add(docs_target(1, &["a"]));
    listen.snapshot().await;
    assert_eq!(emu.firestore().listen_streams(), 1);
    emu.firestore().shutdown();
    let status = listen.next().await.expect_err("shut down");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    emu.shutdown().await;
}

/// Events a `firestore` crate listener delivered, as a channel.
async fn crate_listener(
    db: &firestore::FirestoreDb,
    target: FirestoreListenerTargetParams,
) -> (
    firestore::FirestoreListener<firestore::FirestoreDb, FirestoreMemListenStateStorage>,
    mpsc::UnboundedReceiver<FirestoreListenEvent>,
) {
    let mut listener = db
        .create_listener_with_params(
            FirestoreMemListenStateStorage::new(),
            firestore::FirestoreListenerParams::new().with_retry_delay(Duration::from_millis(50)),
        )
        .await
        .expect("listener");
    listener.add_target(target).expect("target");
    let (tx, rx) = mpsc::unbounded_channel();
    let tx = Arc::new(tx);
    listener
        .start(move |event| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(event);
                Ok(())
            }
        })
        .await
        .expect("listener starts");
    (listener, rx)
}

/// The `n` (or `likes`) field of the next document change, skipping other events.
async fn next_change(
    events: &mut mpsc::UnboundedReceiver<FirestoreListenEvent>,
    field: &str,
) -> i64 {
    loop {
        match patiently("a document change", events.recv()).await {
            Some(R::DocumentChange(c)) => {
                return int_field(c.document.as_ref().unwrap(), field).unwrap();
            }
            Some(_) => continue,
            None => panic!("listener ended"),
        }
    }
}

#[tokio::test]
async fn the_firestore_crate_listener_sees_precondition_writes_to_a_counts_document() {
    let emu = start().await;
    let db = client(&emu).await;
    let mut raw = raw(&emu).await;
    let name = doc_name("counts", "post-1");
    let target = FirestoreListenerTargetParams::new(
        FirestoreListenerTarget::new(1),
        FirestoreTargetType::Documents(FirestoreCollectionDocuments::new(
            "counts".into(),
            vec!["post-1".into()],
        )),
        Default::default(),
    );
    let (mut listener, mut events) = crate_listener(&db, target).await;
    // Created only if missing, then updated only if unchanged since it was read.
    let created = commit(
        &mut raw,
        vec![Write {
            current_document: Some(Precondition {
                condition_type: Some(ConditionType::Exists(false)),
            }),
            ..update(&name, &[("likes", int(3))])
        }],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(next_change(&mut events, "likes").await, 3);
    let update_time = created.write_results[0].update_time;
    commit(
        &mut raw,
        vec![Write {
            current_document: Some(Precondition {
                condition_type: update_time.map(ConditionType::UpdateTime),
            }),
            ..update(&name, &[("likes", int(7))])
        }],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(next_change(&mut events, "likes").await, 7);
    listener.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_firestore_crate_listener_resumes_after_a_dropped_stream_without_replaying() {
    let emu = start().await;
    let db = client(&emu).await;
    let mut raw = raw(&emu).await;
    put(&mut raw, "counts", "a", 1).await;
    put(&mut raw, "counts", "b", 1).await;
    let target = FirestoreListenerTargetParams::new(
        FirestoreListenerTarget::new(1),
        FirestoreTargetType::Documents(FirestoreCollectionDocuments::new(
            "counts".into(),
            vec!["a".into(), "b".into()],
        )),
        Default::default(),
    );
    let (mut listener, mut events) = crate_listener(&db, target).await;
    let mut initial = vec![
        next_change(&mut events, "n").await,
        next_change(&mut events, "n").await,
    ];
    initial.sort();
    assert_eq!(initial, [1, 1]);
    // Wait for the snapshot (the token the listener stores), then drop it.
    loop {
        if let Some(R::TargetChange(c)) = patiently("snapshot", events.recv()).await {
            if c.target_change_type == TargetChangeType::NoChange as i32 && c.read_time.is_some() {
                break;
            }
        }
    }
    emu.firestore_faults()
        .add(
            FaultSpec::new(FaultKind::DropStream)
                .method("Listen")
                .times(1),
        )
        .unwrap();
    put(&mut raw, "counts", "b", 2).await;
    // Only b's change arrives after the reconnect: a is not sent again.
    assert_eq!(next_change(&mut events, "n").await, 2);
    put(&mut raw, "counts", "a", 3).await;
    assert_eq!(next_change(&mut events, "n").await, 3);
    assert!(
        emu.firestore_counters().get("Listen") >= 2,
        "it reconnected"
    );
    listener.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_firestore_crate_listener_follows_a_query() {
    let emu = start().await;
    let db = client(&emu).await;
    let mut raw = raw(&emu).await;
    put(&mut raw, "items", "a", 30).await;
    let mut listener = db
        .create_listener(FirestoreMemListenStateStorage::new())
        .await
        .unwrap();
    db.fluent()
        .select()
        .from("items")
        .filter(|q| q.field("n").greater_than_or_equal(10))
        .order(|o| o.fields([o.field("n").desc()]))
        .limit(1)
        .listen()
        .add_target(FirestoreListenerTarget::new(2), &mut listener)
        .unwrap();
    let (tx, mut events) = mpsc::unbounded_channel();
    let tx = Arc::new(tx);
    listener
        .start(move |event| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(event);
                Ok(())
            }
        })
        .await
        .unwrap();
    assert_eq!(next_change(&mut events, "n").await, 30);
    put(&mut raw, "items", "b", 40).await;
    // b takes the one place: a is removed, b is sent.
    let mut removed = false;
    let n = loop {
        match patiently("events", events.recv()).await.unwrap() {
            R::DocumentRemove(r) => {
                assert_eq!(r.document, doc_name("items", "a"));
                removed = true;
            }
            R::DocumentChange(c) => break int_field(c.document.as_ref().unwrap(), "n").unwrap(),
            _ => {}
        }
    };
    assert_eq!(n, 40);
    if !removed {
        match patiently("the removal", events.recv()).await.unwrap() {
            R::DocumentRemove(r) => assert_eq!(r.document, doc_name("items", "a")),
            other => panic!("expected a removal, got {other:?}"),
        }
    }
    listener.shutdown().await.unwrap();
}

/// A Listen stream whose client sends many targets and reads nothing yet.
struct Unread {
    /// Requests the client's transport has taken to send.
    pulled: Arc<std::sync::atomic::AtomicUsize>,
    /// Kept so the client does not half-close the stream.
    _requests: mpsc::UnboundedSender<ListenRequest>,
    responses: Streaming<ListenResponse>,
}

impl Unread {
    /// Opens a stream on `raw`'s connection with 8 targets over `ids`, then
    /// 16 targets of 4,000 absent names each (about 300 KiB per request).
    async fn open(raw: &Raw, ids: &[&str]) -> Self {
        use std::sync::atomic::Ordering;
        use tokio_stream::StreamExt as _;
        let (requests, rx) = mpsc::unbounded_channel();
        let pulled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = {
            let pulled = pulled.clone();
            UnboundedReceiverStream::new(rx).map(move |r| {
                pulled.fetch_add(1, Ordering::Relaxed);
                r
            })
        };
        let responses = raw
            .clone()
            .listen(counted)
            .await
            .expect("listen opens")
            .into_inner();
        let add = |target: Target| {
            let request = ListenRequest {
                database: DATABASE.to_string(),
                target_change: Some(Change::AddTarget(target)),
                ..Default::default()
            };
            requests.send(request).expect("stream open");
        };
        for id in 1..=8 {
            add(docs_target(id, ids));
        }
        for id in 9..=24 {
            let absent: Vec<String> = (0..4000).map(|i| format!("absent-{id}-{i:04}")).collect();
            let absent: Vec<&str> = absent.iter().map(String::as_str).collect();
            add(docs_target(id, &absent));
        }
        Self {
            pulled,
            _requests: requests,
            responses,
        }
    }

    /// Reads until all 24 targets are current and targets 1 to 8 have sent
    /// `name` with `n` = `n`.
    async fn read_until_current_and(&mut self, name: &str, n: i64) {
        let mut current = std::collections::BTreeSet::new();
        let mut seen = std::collections::BTreeSet::new();
        while current.len() < 24 || seen.len() < 8 {
            let r = patiently("a listen response", self.responses.message())
                .await
                .expect("stream healthy")
                .expect("stream open");
            match r.response_type {
                Some(R::TargetChange(c))
                    if c.target_change_type == TargetChangeType::Current as i32 =>
                {
                    current.extend(c.target_ids);
                }
                Some(R::DocumentChange(c)) => {
                    let doc = c.document.expect("a document");
                    if doc.name == name && int_field(&doc, "n") == Some(n) {
                        seen.extend(c.target_ids);
                    }
                }
                _ => {}
            }
        }
        assert_eq!(seen, (1..=8).collect());
    }
}

/// Clients that multiplex many targets on a stream and are slow to read
/// them: two such streams on one connection, each with 8 targets over 300
/// documents of 2 KiB (4.8 MiB it does not read) and 16 targets of 4,000
/// names (about 4.7 MiB of requests; the server's connection window is
/// 1 MiB). The streams must keep reading their requests, so a commit on the
/// same connection goes through; once the clients read, every target is
/// current and sees the commit.
#[tokio::test]
async fn unread_streams_with_many_targets_stall_no_other_call_on_their_connection() {
    use std::sync::atomic::Ordering;
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let ids: Vec<String> = (0..300).map(|i| format!("d{i:03}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let pad = "x".repeat(2048);
    let writes = ids
        .iter()
        .map(|id| {
            update(
                &doc_name("counts", id),
                &[("n", int(0)), ("pad", string(&pad))],
            )
        })
        .collect();
    commit(&mut raw, writes, vec![]).await.expect("seed");

    // Clones of `raw`: the same HTTP/2 connection.
    let mut streams = [
        Unread::open(&raw, &ids).await,
        Unread::open(&raw, &ids).await,
    ];
    // Let the client's transport send what the server lets it (bounded:
    // when the server stops reading, it never gets further).
    let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
    while streams
        .iter()
        .any(|s| s.pulled.load(Ordering::Relaxed) < 24)
        && tokio::time::Instant::now() < give_up
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let write = update(&doc_name("counts", "d000"), &[("n", int(1))]);
    tokio::time::timeout(
        Duration::from_secs(10),
        commit(&mut raw, vec![write], vec![]),
    )
    .await
    .expect("a commit on the connection of unread listen streams: not done within 10 s")
    .expect("commit");
    for stream in &mut streams {
        stream
            .read_until_current_and(&doc_name("counts", "d000"), 1)
            .await;
    }
    emu.shutdown().await;
}

/// One stream multiplexing 300 document targets and 3 query targets (as
/// the Firebase SDKs and the `firestore` crate do; Google's Node and Python
/// server clients open a stream per listener instead, see `node_client`),
/// with every document then written through the same connection: each
/// target sees each change.
#[tokio::test]
async fn one_stream_with_hundreds_of_targets_sees_every_write_made_on_its_connection() {
    use std::collections::BTreeMap;
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let ids: Vec<String> = (0..300).map(|i| format!("i{i:03}")).collect();
    let seed = ids
        .iter()
        .map(|id| update(&doc_name("items", id), &[("n", int(10))]))
        .collect();
    commit(&mut raw, seed, vec![]).await.expect("seed");

    let (requests, rx) = mpsc::unbounded_channel();
    let mut responses = raw
        .clone()
        .listen(UnboundedReceiverStream::new(rx))
        .await
        .expect("listen opens")
        .into_inner();
    let add = |target: Target| {
        let request = ListenRequest {
            database: DATABASE.to_string(),
            target_change: Some(Change::AddTarget(target)),
            ..Default::default()
        };
        requests.send(request).expect("stream open");
    };
    // Target i+1 watches document i; 1001 to 1003 watch the query.
    let target_of: BTreeMap<i32, String> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (i32::try_from(i).expect("few") + 1, doc_name("items", id)))
        .collect();
    for (id, name) in &target_of {
        add(Target {
            target_id: *id,
            target_type: Some(TargetType::Documents(DocumentsTarget {
                documents: vec![name.clone()],
            })),
            ..Default::default()
        });
    }
    let queries = [1001, 1002, 1003];
    for id in queries {
        add(query_target(id, items_query(None)));
    }

    all_targets_at(&mut responses, &target_of, &queries, 10).await;
    // Every document written, one commit each, on the listening connection.
    for id in &ids {
        put(&mut raw, "items", id, 11).await;
    }
    all_targets_at(&mut responses, &target_of, &queries, 11).await;
    emu.shutdown().await;
}

/// Reads `responses` until each document target (id -> its one document)
/// and each query target (all of them) has been sent its documents at `n`.
async fn all_targets_at(
    responses: &mut Streaming<ListenResponse>,
    doc_targets: &std::collections::BTreeMap<i32, String>,
    queries: &[i32],
    n: i64,
) {
    use std::collections::{BTreeMap, BTreeSet};
    let mut seen: BTreeMap<i32, BTreeSet<String>> = BTreeMap::new();
    let complete = |seen: &BTreeMap<i32, BTreeSet<String>>| {
        doc_targets
            .keys()
            .all(|id| seen.get(id).is_some_and(|s| s.len() == 1))
            && queries
                .iter()
                .all(|id| seen.get(id).is_some_and(|s| s.len() == doc_targets.len()))
    };
    while !complete(&seen) {
        let r = patiently("a listen response", responses.message())
            .await
            .expect("stream healthy")
            .expect("stream open");
        if let Some(R::DocumentChange(c)) = r.response_type {
            let doc = c.document.expect("a document");
            if int_field(&doc, "n") == Some(n) {
                for id in c.target_ids {
                    seen.entry(id).or_default().insert(doc.name.clone());
                }
            }
        }
    }
}
