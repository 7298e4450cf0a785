//! Issue #16 item 3: numeric document ids `__id<int64>__`.
//!
//! Firestore exposes the numeric ids of entities imported from Datastore as
//! `__id<n>__` document ids (quotas page), accepts them although they match
//! the reserved `__.*__`, and orders them before every string id, in numeric
//! order: Google's own integration tests write `__id-2__`, `__id7__`,
//! `__id12__`, `__id9223372036854775807__` and `__id-9223372036854775808__`
//! and assert the order the backend answers (java-firestore `ITQueryWatchTest`
//! `snapshotListenerSortsQueryByDocumentIdInTheSameOrderAsServer`). The
//! client libraries' recursive delete uses `__id-9223372036854775808__` as the
//! lowest possible document id, so a string order loses every id that sorts
//! below `_` (digits and upper-case letters).

use firestore::{FirestoreQueryCursor, FirestoreReference, FirestoreValue};
use gcloud_sdk::google::firestore::v1::structured_query::{
    composite_filter, field_filter, filter::FilterType, CollectionSelector, CompositeFilter,
    Direction, FieldFilter, FieldReference, Filter, Order,
};
use gcloud_sdk::google::firestore::v1::{
    run_query_request, value::ValueType, Cursor, ListDocumentsRequest, RunQueryRequest,
    StructuredQuery, Value,
};
use serde::{Deserialize, Serialize};
use tonic::Code;

use crate::support::*;

/// The lowest numeric id, the client libraries' `REFERENCE_NAME_MIN_ID`.
const MIN_ID: &str = "__id-9223372036854775808__";
const MAX_ID: &str = "__id9223372036854775807__";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Row {
    n: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Link {
    target: FirestoreReference,
}

fn reference(name: &str) -> Value {
    Value {
        value_type: Some(ValueType::ReferenceValue(name.to_string())),
    }
}

fn name_filter(op: field_filter::Operator, name: &str) -> Filter {
    Filter {
        filter_type: Some(FilterType::FieldFilter(FieldFilter {
            field: Some(FieldReference {
                field_path: "__name__".into(),
            }),
            op: op as i32,
            value: Some(reference(name)),
        })),
    }
}

fn id_of(name: &str) -> String {
    name.rsplit('/').next().unwrap_or_default().to_string()
}

/// Runs `query` under `parent`; the names it returns, in order.
async fn run_names(raw: &mut Raw, parent: &str, query: StructuredQuery) -> Vec<String> {
    let mut stream = raw
        .run_query(RunQueryRequest {
            parent: parent.to_string(),
            query_type: Some(run_query_request::QueryType::StructuredQuery(query)),
            ..Default::default()
        })
        .await
        .expect("run_query")
        .into_inner();
    let mut names = Vec::new();
    while let Some(r) = stream.message().await.expect("query stream") {
        if let Some(d) = r.document {
            names.push(d.name);
        }
    }
    names
}

fn collection_query(collection: &str) -> StructuredQuery {
    StructuredQuery {
        from: vec![CollectionSelector {
            collection_id: collection.into(),
            all_descendants: false,
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn numeric_document_ids_round_trip_through_the_client_crate() {
    let emu = start().await;
    let db = client(&emu).await;
    for (i, id) in ["__id42__", "__id-5__", "__id0__", MIN_ID, MAX_ID]
        .into_iter()
        .enumerate()
    {
        let row = Row { n: i as i64 };
        let created: Row = db
            .fluent()
            .insert()
            .into("rows")
            .document_id(id)
            .object(&row)
            .execute()
            .await
            .unwrap_or_else(|e| panic!("create {id}: {e}"));
        assert_eq!(created, row);
        let read: Option<Row> = db
            .fluent()
            .select()
            .by_id_in("rows")
            .obj()
            .one(id)
            .await
            .unwrap();
        assert_eq!(read, Some(row), "read {id}");
    }

    // A subcollection below a numeric id, and a reference value to one.
    let target = doc_name("rows", "__id42__");
    let link = Link {
        target: FirestoreReference(target.clone()),
    };
    let _: Link = db
        .fluent()
        .insert()
        .into("links")
        .document_id("l1")
        .parent(db.parent_path("rows", "__id42__").unwrap())
        .object(&link)
        .execute()
        .await
        .expect("a reference to a numeric id below a numeric id");
    let stored = emu
        .firestore()
        .document(&format!("{target}/links/l1"))
        .expect("stored below __id42__");
    assert!(matches!(
        stored.fields.get("target").and_then(|v| v.value_type.as_ref()),
        Some(ValueType::ReferenceValue(r)) if *r == target
    ));

    for id in ["__id42__", "__id-5__", "__id0__", MIN_ID, MAX_ID] {
        db.fluent()
            .delete()
            .from("rows")
            .document_id(id)
            .execute()
            .await
            .unwrap_or_else(|e| panic!("delete {id}: {e}"));
        let gone: Option<Row> = db
            .fluent()
            .select()
            .by_id_in("rows")
            .obj()
            .one(id)
            .await
            .unwrap();
        assert_eq!(gone, None, "{id} deleted");
    }
    emu.shutdown().await;
}

#[tokio::test]
async fn malformed_numeric_ids_stay_reserved() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let bad_ids = [
        "__id9223372036854775808__",  // over i64::MAX
        "__id-9223372036854775809__", // under i64::MIN
        "__id__",
        "__id-__",
        "__id+1__",
        "__id01__",
        "__id-0__",
        "__id 1__",
        "__id1.5__",
        "__idx__",
        "__ID1__",
    ];
    for bad in bad_ids {
        let err = commit(
            &mut raw,
            vec![update(&doc_name("rows", bad), &[("a", int(1))])],
            vec![],
        )
        .await
        .expect_err(bad);
        assert_eq!(err.code(), Code::InvalidArgument, "document id {bad:?}");
        let err = commit(
            &mut raw,
            vec![update(
                &doc_name("rows", "ok"),
                &[("r", reference(&doc_name("rows", bad)))],
            )],
            vec![],
        )
        .await
        .expect_err(bad);
        assert_eq!(err.code(), Code::InvalidArgument, "reference to {bad:?}");
    }
    // Numeric ids are document ids only: a collection id or a field name of
    // that form is still reserved.
    let err = commit(
        &mut raw,
        vec![update(
            &format!("{DATABASE}/documents/__id1__/x"),
            &[("a", int(1))],
        )],
        vec![],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "collection id __id1__");
    let err = commit(
        &mut raw,
        vec![update(&doc_name("rows", "f"), &[("__id1__", int(1))])],
        vec![],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "field name __id1__");
    assert_eq!(emu.firestore().stats().documents, 0);
    emu.shutdown().await;
}

/// Google's ids and expected order (java-firestore `ITQueryWatchTest`), plus
/// the int64 extremes and the issue's `__id-5__ < __id2__ < __id10__`.
const ORDERED_IDS: [&str; 16] = [
    MIN_ID, "__id-5__", "__id-2__", "__id2__", "__id7__", "__id10__", "__id12__", MAX_ID, "12",
    "7", "A", "Aa", "__id", "__id1_", "_id1__", "a",
];

#[tokio::test]
async fn name_order_puts_numeric_ids_first_in_numeric_order() {
    let emu = start().await;
    let db = client(&emu).await;
    let mut raw = raw(&emu).await;
    // Written in reverse so no order falls out of the writes.
    let writes = ORDERED_IDS
        .iter()
        .rev()
        .map(|id| update(&doc_name("ids", id), &[("n", int(1))]))
        .collect();
    commit(&mut raw, writes, vec![]).await.unwrap();
    let expected: Vec<String> = ORDERED_IDS.iter().map(|s| s.to_string()).collect();

    // The client crate ordering by __name__.
    let docs = db
        .fluent()
        .select()
        .from("ids")
        .order(|o| o.fields([o.field("__name__").asc()]))
        .query()
        .await
        .unwrap();
    let ids: Vec<String> = docs.iter().map(|d| id_of(&d.name)).collect();
    assert_eq!(ids, expected, "order_by __name__");

    // RunQuery's default order, and descending.
    let root = format!("{DATABASE}/documents");
    let names = run_names(&mut raw, &root, collection_query("ids")).await;
    assert_eq!(
        names.iter().map(|n| id_of(n)).collect::<Vec<_>>(),
        expected,
        "default order"
    );
    let mut desc = collection_query("ids");
    desc.order_by = vec![Order {
        field: Some(FieldReference {
            field_path: "__name__".into(),
        }),
        direction: Direction::Descending as i32,
    }];
    let names = run_names(&mut raw, &root, desc).await;
    let mut reversed = expected.clone();
    reversed.reverse();
    assert_eq!(
        names.iter().map(|n| id_of(n)).collect::<Vec<_>>(),
        reversed,
        "descending"
    );

    // ListDocuments, in pages of 5 (page tokens compare the same way).
    let mut listed = Vec::new();
    let mut token = String::new();
    loop {
        let page = raw
            .list_documents(ListDocumentsRequest {
                parent: root.clone(),
                collection_id: "ids".into(),
                page_size: 5,
                page_token: token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        listed.extend(page.documents.iter().map(|d| id_of(&d.name)));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(listed, expected, "ListDocuments");

    // Google's filtered case: __name__ > __id7__ AND __name__ <= A.
    let mut filtered = collection_query("ids");
    filtered.r#where = Some(Filter {
        filter_type: Some(FilterType::CompositeFilter(CompositeFilter {
            op: composite_filter::Operator::And as i32,
            filters: vec![
                name_filter(
                    field_filter::Operator::GreaterThan,
                    &doc_name("ids", "__id7__"),
                ),
                name_filter(
                    field_filter::Operator::LessThanOrEqual,
                    &doc_name("ids", "A"),
                ),
            ],
        })),
    });
    let names = run_names(&mut raw, &root, filtered).await;
    assert_eq!(
        names.iter().map(|n| id_of(n)).collect::<Vec<_>>(),
        ["__id10__", "__id12__", MAX_ID, "12", "7", "A"],
        "__id7__ < name <= A"
    );

    // A cursor through the client crate: start after __id2__.
    let docs = db
        .fluent()
        .select()
        .from("ids")
        .order(|o| o.fields([o.field("__name__").asc()]))
        .start_at(FirestoreQueryCursor::AfterValue(vec![
            FirestoreValue::from(reference(&doc_name("ids", "__id2__"))),
        ]))
        .limit(3)
        .query()
        .await
        .unwrap();
    assert_eq!(
        docs.iter().map(|d| id_of(&d.name)).collect::<Vec<_>>(),
        ["__id7__", "__id10__", "__id12__"],
        "start after __id2__"
    );
    emu.shutdown().await;
}

/// The recursive delete of a collection: every descendant of `coll`,
/// selected as the client libraries select them (Node and Java
/// `RecursiveDelete`: a kindless all-descendants query from the parent with
/// `__name__ >= coll/__id-9223372036854775808__` and
/// `__name__ < coll\0/__id-9223372036854775808__`; Python: the same bounds as
/// `start_at` / `end_at` cursors).
#[tokio::test]
async fn the_recursive_delete_lower_bound_selects_every_document() {
    let emu = start().await;
    let db = client(&emu).await;
    let mut raw = raw(&emu).await;
    // Auto ids (20 characters of [A-Za-z0-9]) made by the server, plus one
    // of each first-character class so the case never depends on chance.
    let mut ids = Vec::new();
    for n in 0..30 {
        let doc = db
            .fluent()
            .insert()
            .into("coll")
            .generate_document_id()
            .document(document("", &[("n", int(n))]))
            .execute()
            .await
            .unwrap();
        ids.push(id_of(&doc.name));
    }
    for fixed in [
        "0PcJ3qzWbYx1TnLk8sRa",
        "ZpR4vK2mQw8NcXy6TbLe",
        "kq7WmN2xPa9RcV5tYbZd",
    ] {
        commit(
            &mut raw,
            vec![update(&doc_name("coll", fixed), &[("n", int(-1))])],
            vec![],
        )
        .await
        .unwrap();
        ids.push(fixed.to_string());
    }
    assert!(ids
        .iter()
        .all(|id| id.len() == 20 && id.chars().all(|c| c.is_ascii_alphanumeric())));
    let below_underscore = ids.iter().filter(|id| id.as_bytes()[0] < b'_').count();
    assert!(below_underscore > 0);
    // A subcollection document, and neighbours that must stay.
    let sub = format!("{DATABASE}/documents/coll/{}/sub/s1", ids[0]);
    let neighbours = [doc_name("col", "Z"), doc_name("coll2", "x")];
    for name in std::iter::once(&sub).chain(&neighbours) {
        commit(&mut raw, vec![update(name, &[("n", int(0))])], vec![])
            .await
            .unwrap();
    }
    let mut expected: Vec<String> = ids.iter().map(|id| doc_name("coll", id)).collect();
    expected.push(sub.clone());
    expected.sort();

    let root = format!("{DATABASE}/documents");
    let lower = doc_name("coll", MIN_ID);
    let upper = format!("{DATABASE}/documents/coll\0/{MIN_ID}");
    let kindless = |filter: Option<Filter>| StructuredQuery {
        from: vec![CollectionSelector {
            collection_id: String::new(),
            all_descendants: true,
        }],
        r#where: filter,
        ..Default::default()
    };

    // The client crate: __name__ >= coll/__id-9223372036854775808__.
    let docs = db
        .fluent()
        .select()
        .from("coll")
        .filter(|q| {
            q.for_all([q
                .field("__name__")
                .greater_than_or_equal(FirestoreValue::from(reference(&lower)))])
        })
        .query()
        .await
        .unwrap();
    assert_eq!(
        docs.len(),
        ids.len(),
        "every document of coll ({below_underscore} ids begin below '_')"
    );

    // Node and Java RecursiveDelete.
    let bounds = Filter {
        filter_type: Some(FilterType::CompositeFilter(CompositeFilter {
            op: composite_filter::Operator::And as i32,
            filters: vec![
                name_filter(field_filter::Operator::GreaterThanOrEqual, &lower),
                name_filter(field_filter::Operator::LessThan, &upper),
            ],
        })),
    };
    let mut names = run_names(&mut raw, &root, kindless(Some(bounds))).await;
    names.sort();
    assert_eq!(names, expected, "filters >= lower, < upper");

    // Python's recursive query: the same bounds as cursors.
    let mut cursors = kindless(None);
    cursors.order_by = vec![Order {
        field: Some(FieldReference {
            field_path: "__name__".into(),
        }),
        direction: Direction::Ascending as i32,
    }];
    cursors.start_at = Some(Cursor {
        values: vec![reference(&lower)],
        before: true,
    });
    cursors.end_at = Some(Cursor {
        values: vec![reference(&upper)],
        before: false,
    });
    let found = run_names(&mut raw, &root, cursors.clone()).await;
    let mut sorted = found.clone();
    sorted.sort();
    assert_eq!(sorted, expected, "start_at lower, end_at upper");

    // A numeric id is inside the bounds too, and comes first.
    let numeric = doc_name("coll", "__id7__");
    commit(&mut raw, vec![update(&numeric, &[("n", int(0))])], vec![])
        .await
        .unwrap();
    let found = run_names(&mut raw, &root, cursors).await;
    assert_eq!(found.len(), expected.len() + 1);
    assert_eq!(found[0], numeric, "numeric ids come first");

    // Deleting what the query found leaves nothing of coll behind.
    for name in &found {
        commit(
            &mut raw,
            vec![gcloud_sdk::google::firestore::v1::Write {
                operation: Some(gcloud_sdk::google::firestore::v1::write::Operation::Delete(
                    name.clone(),
                )),
                ..Default::default()
            }],
            vec![],
        )
        .await
        .unwrap();
    }
    let left = run_names(&mut raw, &root, kindless(None)).await;
    assert_eq!(left, neighbours.to_vec(), "only the neighbours are left");
    emu.shutdown().await;
}
