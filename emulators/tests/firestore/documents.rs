//! Documents: CRUD through the client crate, preconditions, atomic commits,
//! transforms, and validation of ids and values.

use futures::StreamExt;
use gcloud_sdk::google::firestore::v1::document_transform::field_transform::{
    ServerValue, TransformType,
};
use gcloud_sdk::google::firestore::v1::document_transform::FieldTransform;
use gcloud_sdk::google::firestore::v1::precondition::ConditionType;
use gcloud_sdk::google::firestore::v1::value::ValueType;
use gcloud_sdk::google::firestore::v1::{
    write::Operation, ArrayValue, DocumentMask, DocumentTransform, GetDocumentRequest,
    Precondition, Value, Write,
};
use serde::{Deserialize, Serialize};
use tonic::Code;

use crate::support::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Post {
    title: String,
    likes: i64,
}

#[tokio::test]
async fn crud_round_trips_through_the_client_crate() {
    let emu = start().await;
    let db = client(&emu).await;
    let post = Post {
        title: "hello".into(),
        likes: 3,
    };
    let created: Post = db
        .fluent()
        .insert()
        .into("posts")
        .document_id("p1")
        .object(&post)
        .execute()
        .await
        .unwrap();
    assert_eq!(created, post);

    let read: Option<Post> = db
        .fluent()
        .select()
        .by_id_in("posts")
        .obj()
        .one("p1")
        .await
        .unwrap();
    assert_eq!(read, Some(post.clone()));

    let updated = Post {
        title: "hello".into(),
        likes: 4,
    };
    let _: Post = db
        .fluent()
        .update()
        .in_col("posts")
        .document_id("p1")
        .object(&updated)
        .execute()
        .await
        .unwrap();
    let read: Vec<Post> = db
        .fluent()
        .select()
        .by_id_in("posts")
        .obj()
        .batch(["p1", "missing"])
        .await
        .unwrap()
        .filter_map(|(_, p)| async move { p })
        .collect()
        .await;
    assert_eq!(read, vec![updated]);

    let listed: Vec<Post> = db
        .fluent()
        .select()
        .from("posts")
        .order(|o| o.fields([o.field("likes").asc()]))
        .obj()
        .query()
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);

    db.fluent()
        .delete()
        .from("posts")
        .document_id("p1")
        .execute()
        .await
        .unwrap();
    let gone: Option<Post> = db
        .fluent()
        .select()
        .by_id_in("posts")
        .obj()
        .one("p1")
        .await
        .unwrap();
    assert_eq!(gone, None);
    emu.shutdown().await;
}

#[tokio::test]
async fn get_of_a_missing_document_is_not_found() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let err = raw
        .get_document(GetDocumentRequest {
            name: doc_name("posts", "nope"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    emu.shutdown().await;
}

#[tokio::test]
async fn create_if_absent_conflict_is_already_exists() {
    let emu = start().await;
    let db = client(&emu).await;
    let post = Post {
        title: "a".into(),
        likes: 0,
    };
    let _: Post = db
        .fluent()
        .insert()
        .into("posts")
        .document_id("dup")
        .object(&post)
        .execute()
        .await
        .unwrap();
    let again: Result<Post, _> = db
        .fluent()
        .insert()
        .into("posts")
        .document_id("dup")
        .object(&post)
        .execute()
        .await;
    assert!(again.is_err());

    let mut raw = raw(&emu).await;
    let mut w = update(&doc_name("posts", "dup"), &[("likes", int(1))]);
    w.current_document = Some(Precondition {
        condition_type: Some(ConditionType::Exists(false)),
    });
    let err = commit(&mut raw, vec![w], vec![]).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    emu.shutdown().await;
}

#[tokio::test]
async fn update_preconditions_fail_with_the_real_codes_and_nothing_applies() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("posts", "pre");
    let first = commit(&mut raw, vec![update(&name, &[("likes", int(1))])], vec![])
        .await
        .unwrap();
    let stale = first.write_results[0].update_time.unwrap();
    commit(&mut raw, vec![update(&name, &[("likes", int(2))])], vec![])
        .await
        .unwrap();

    let mut missing = update(&doc_name("posts", "absent"), &[("likes", int(1))]);
    missing.current_document = Some(Precondition {
        condition_type: Some(ConditionType::Exists(true)),
    });
    let err = commit(&mut raw, vec![missing], vec![]).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // A stale update_time fails the whole commit, including the first write.
    let other = doc_name("posts", "other");
    let mut w = update(&name, &[("likes", int(9))]);
    w.current_document = Some(Precondition {
        condition_type: Some(ConditionType::UpdateTime(stale)),
    });
    let err = commit(
        &mut raw,
        vec![update(&other, &[("likes", int(1))]), w],
        vec![],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(emu.firestore().document(&other).is_none());
    let doc = emu.firestore().document(&name).unwrap();
    assert_eq!(int_field(&doc, "likes"), Some(2));
    emu.shutdown().await;
}

#[tokio::test]
async fn update_mask_changes_only_masked_fields_and_a_no_op_keeps_update_time() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("posts", "mask");
    let nested = Value {
        value_type: Some(ValueType::MapValue(
            gcloud_sdk::google::firestore::v1::MapValue {
                fields: [("x.y".to_string(), int(1))].into_iter().collect(),
            },
        )),
    };
    commit(
        &mut raw,
        vec![update(
            &name,
            &[("a", int(1)), ("b", int(1)), ("m", nested.clone())],
        )],
        vec![],
    )
    .await
    .unwrap();
    let mut w = update(&name, &[("a", int(5))]);
    w.update_mask = Some(DocumentMask {
        field_paths: vec!["a".into(), "b".into(), "m.`x.y`".into()],
    });
    let r = commit(&mut raw, vec![w.clone()], vec![]).await.unwrap();
    let doc = emu.firestore().document(&name).unwrap();
    assert_eq!(int_field(&doc, "a"), Some(5));
    assert!(!doc.fields.contains_key("b"));
    assert_eq!(
        doc.fields["m"],
        Value {
            value_type: Some(ValueType::MapValue(Default::default()))
        }
    );
    let again = commit(&mut raw, vec![w], vec![]).await.unwrap();
    assert_eq!(
        again.write_results[0].update_time,
        r.write_results[0].update_time
    );
    assert_ne!(again.commit_time, r.commit_time);
    emu.shutdown().await;
}

fn transform(path: &str, t: TransformType) -> FieldTransform {
    FieldTransform {
        field_path: path.to_string(),
        transform_type: Some(t),
    }
}

#[tokio::test]
async fn increment_transforms_follow_the_numeric_rules() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("counters", "c");
    commit(
        &mut raw,
        vec![update(
            &name,
            &[
                ("i", int(2)),
                ("d", double(1.5)),
                ("big", int(i64::MAX - 1)),
                ("s", string("text")),
            ],
        )],
        vec![],
    )
    .await
    .unwrap();
    let w = Write {
        operation: Some(Operation::Transform(DocumentTransform {
            document: name.clone(),
            field_transforms: vec![
                transform("i", TransformType::Increment(int(3))),
                transform("d", TransformType::Increment(int(1))),
                transform("big", TransformType::Increment(int(10))),
                transform("s", TransformType::Increment(int(7))),
                transform("missing", TransformType::Increment(double(0.5))),
                transform("i2", TransformType::Maximum(int(4))),
                transform(
                    "t",
                    TransformType::SetToServerValue(ServerValue::RequestTime as i32),
                ),
                transform(
                    "arr",
                    TransformType::AppendMissingElements(ArrayValue {
                        values: vec![int(1), int(2), int(1)],
                    }),
                ),
            ],
        })),
        ..Default::default()
    };
    let r = commit(&mut raw, vec![w], vec![]).await.unwrap();
    let results = &r.write_results[0].transform_results;
    assert_eq!(results[0], int(5));
    assert_eq!(results[1], double(2.5));
    assert_eq!(results[2], int(i64::MAX));
    assert_eq!(results[3], int(7));
    assert_eq!(results[4], double(0.5));
    assert_eq!(results[5], int(4));
    assert_eq!(
        results[6].value_type,
        Some(ValueType::TimestampValue(r.commit_time.unwrap()))
    );
    let doc = emu.firestore().document(&name).unwrap();
    assert_eq!(int_field(&doc, "i"), Some(5));
    assert_eq!(
        doc.fields["arr"].value_type,
        Some(ValueType::ArrayValue(ArrayValue {
            values: vec![int(1), int(2)]
        }))
    );

    // Update + update_transforms with the client crate, in a transaction.
    let db = client(&emu).await;
    let mut tx = db.begin_transaction().await.unwrap();
    db.fluent()
        .update()
        .in_col("counters")
        .document_id("c")
        .transforms(|t| t.fields([t.field("i").increment(10)]))
        .only_transform()
        .add_to_transaction(&mut tx)
        .unwrap();
    tx.commit().await.unwrap();
    let doc = emu.firestore().document(&name).unwrap();
    assert_eq!(int_field(&doc, "i"), Some(15));
    emu.shutdown().await;
}

#[tokio::test]
async fn invalid_ids_and_values_are_rejected() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let long = "x".repeat(1501);
    for bad in [".", "..", "__id__", long.as_str()] {
        let err = commit(
            &mut raw,
            vec![update(&doc_name("posts", bad), &[("a", int(1))])],
            vec![],
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "id {bad:?}");
    }
    let err = commit(
        &mut raw,
        vec![update(
            &format!("{DATABASE}/documents/posts/a/b"),
            &[("a", int(1))],
        )],
        vec![],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = commit(
        &mut raw,
        vec![update(&format!("{DATABASE}/documents/posts/"), &[])],
        vec![],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    let nested = Value {
        value_type: Some(ValueType::ArrayValue(ArrayValue {
            values: vec![Value {
                value_type: Some(ValueType::ArrayValue(ArrayValue { values: vec![] })),
            }],
        })),
    };
    let err = commit(
        &mut raw,
        vec![update(&doc_name("posts", "n"), &[("a", nested)])],
        vec![],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    let big = string(&"y".repeat(1024 * 1024 + 10));
    let err = commit(
        &mut raw,
        vec![update(&doc_name("posts", "big"), &[("a", big)])],
        vec![],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(emu.firestore().stats().documents, 0);
    emu.shutdown().await;
}

#[tokio::test]
async fn batch_write_is_not_atomic_and_answers_per_write() {
    use gcloud_sdk::google::firestore::v1::BatchWriteRequest;
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let taken = doc_name("posts", "taken");
    commit(&mut raw, vec![update(&taken, &[("v", int(1))])], vec![])
        .await
        .unwrap();
    let mut conflict = update(&taken, &[("v", int(2))]);
    conflict.current_document = Some(Precondition {
        condition_type: Some(ConditionType::Exists(false)),
    });
    let fresh = doc_name("posts", "fresh");
    let response = raw
        .batch_write(BatchWriteRequest {
            database: DATABASE.into(),
            writes: vec![conflict, update(&fresh, &[("v", int(3))])],
            labels: Default::default(),
            request_options: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.status.len(), 2);
    assert_eq!(response.status[0].code, Code::AlreadyExists as i32);
    assert_eq!(response.status[1].code, Code::Ok as i32);
    assert!(response.write_results[1].update_time.is_some());
    assert!(emu.firestore().document(&fresh).is_some());
    assert_eq!(
        int_field(&emu.firestore().document(&taken).unwrap(), "v"),
        Some(1)
    );
    emu.shutdown().await;
}

/// BatchWrite refuses a request that writes one document twice
/// (INVALID_ARGUMENT, nothing applied), as Google's backend does (its
/// client libraries' bulk writers split such writes into separate
/// batches for that reason).
#[tokio::test]
async fn batch_write_refuses_two_writes_to_one_document() {
    use gcloud_sdk::google::firestore::v1::BatchWriteRequest;
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let twice = doc_name("posts", "twice");
    let other = doc_name("posts", "other");
    let err = raw
        .batch_write(BatchWriteRequest {
            database: DATABASE.into(),
            writes: vec![
                update(&twice, &[("v", int(1))]),
                update(&other, &[("v", int(2))]),
                update(&twice, &[("v", int(3))]),
            ],
            labels: Default::default(),
            request_options: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(emu.firestore().stats().documents, 0, "nothing applied");
    emu.shutdown().await;
}

/// Issue #16 item 4: `ListDocuments` with `show_missing` also lists the
/// documents that exist only through their subcollections, with only their
/// name (no fields, no create or update time), in name order and pages.
#[tokio::test]
async fn list_documents_show_missing_lists_parents_of_subcollections() {
    use gcloud_sdk::google::firestore::v1::ListDocumentsRequest;
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let db = |path: &str| format!("{DATABASE}/documents/{path}");
    for path in [
        "rooms/a",
        "rooms/b/msgs/1",
        "rooms/b/msgs/2",
        "rooms/c/x/y/z/w",
    ] {
        commit(&mut raw, vec![update(&db(path), &[("v", int(1))])], vec![])
            .await
            .unwrap();
    }
    let list = |show_missing: bool, page_size: i32, page_token: String| {
        let mut raw = raw.clone();
        async move {
            raw.list_documents(ListDocumentsRequest {
                parent: format!("{DATABASE}/documents"),
                collection_id: "rooms".into(),
                page_size,
                page_token,
                show_missing,
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner()
        }
    };
    let plain = list(false, 0, String::new()).await;
    assert_eq!(
        plain.documents.len(),
        1,
        "without show_missing: only rooms/a"
    );

    let all = list(true, 0, String::new()).await;
    let names: Vec<&str> = all.documents.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, [db("rooms/a"), db("rooms/b"), db("rooms/c")]);
    assert!(all.documents[0].create_time.is_some());
    for missing in &all.documents[1..] {
        assert!(missing.fields.is_empty());
        assert!(missing.create_time.is_none() && missing.update_time.is_none());
    }

    let first = list(true, 2, String::new()).await;
    assert_eq!(first.documents.len(), 2);
    let second = list(true, 2, first.next_page_token).await;
    let names: Vec<&str> = second.documents.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, [db("rooms/c")]);
    emu.shutdown().await;
}
