//! Queries (filters, order, limit, offset, cursors, projection) and
//! aggregations (count, sum, avg).

use firestore::{FirestoreQueryCursor, FirestoreValue};
use gcloud_sdk::google::firestore::v1::structured_aggregation_query::aggregation::{
    Avg, Count, Operator, Sum,
};
use gcloud_sdk::google::firestore::v1::structured_aggregation_query::{
    Aggregation, QueryType as AggQueryType,
};
use gcloud_sdk::google::firestore::v1::structured_query::{
    composite_filter, field_filter, filter::FilterType, CollectionSelector, CompositeFilter,
    FieldFilter, FieldReference, Filter,
};
use gcloud_sdk::google::firestore::v1::{
    run_aggregation_query_request, run_query_request, value::ValueType, ArrayValue,
    RunAggregationQueryRequest, RunQueryRequest, StructuredAggregationQuery, StructuredQuery,
    Value,
};
use serde::{Deserialize, Serialize};

use crate::support::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Item {
    n: i64,
    tag: String,
    tags: Vec<String>,
}

async fn seed(emu: &hotcount_emulators::Emulators) -> firestore::FirestoreDb {
    let db = client(emu).await;
    for n in 0..10i64 {
        let item = Item {
            n,
            tag: if n % 2 == 0 { "even" } else { "odd" }.to_string(),
            tags: vec![format!("t{}", n % 3)],
        };
        let _: Item = db
            .fluent()
            .insert()
            .into("items")
            .document_id(format!("i{n:02}"))
            .object(&item)
            .execute()
            .await
            .unwrap();
    }
    db
}

fn field_filter(field: &str, op: field_filter::Operator, value: Value) -> Filter {
    Filter {
        filter_type: Some(FilterType::FieldFilter(FieldFilter {
            field: Some(FieldReference {
                field_path: field.to_string(),
            }),
            op: op as i32,
            value: Some(value),
        })),
    }
}

fn array(values: Vec<Value>) -> Value {
    Value {
        value_type: Some(ValueType::ArrayValue(ArrayValue { values })),
    }
}

fn items_query(filter: Option<Filter>) -> StructuredQuery {
    StructuredQuery {
        from: vec![CollectionSelector {
            collection_id: "items".into(),
            all_descendants: false,
        }],
        r#where: filter,
        ..Default::default()
    }
}

async fn run(raw: &mut Raw, query: StructuredQuery) -> (Vec<i64>, usize) {
    let mut stream = raw
        .run_query(RunQueryRequest {
            parent: format!("{DATABASE}/documents"),
            query_type: Some(run_query_request::QueryType::StructuredQuery(query)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut ns = Vec::new();
    let mut responses = 0;
    while let Some(r) = stream.message().await.unwrap() {
        responses += 1;
        assert!(r.read_time.is_some());
        if let Some(d) = r.document {
            ns.push(int_field(&d, "n").unwrap_or(-1));
        }
    }
    (ns, responses)
}

#[tokio::test]
async fn queries_filter_order_limit_and_offset() {
    let emu = start().await;
    let db = seed(&emu).await;
    let got: Vec<Item> = db
        .fluent()
        .select()
        .from("items")
        .filter(|q| {
            q.for_all([
                q.field("n").greater_than_or_equal(3),
                q.field("tag").eq("odd"),
            ])
        })
        .order(|o| o.fields([o.field("n").desc()]))
        .limit(2)
        .offset(1)
        .obj()
        .query()
        .await
        .unwrap();
    let ns: Vec<i64> = got.iter().map(|i| i.n).collect();
    assert_eq!(ns, vec![7, 5]);

    let any: Vec<Item> = db
        .fluent()
        .select()
        .from("items")
        .filter(|q| q.for_any([q.field("n").eq(1), q.field("n").eq(8)]))
        .obj()
        .query()
        .await
        .unwrap();
    assert_eq!(any.len(), 2);

    let after: Vec<Item> = db
        .fluent()
        .select()
        .from("items")
        .order(|o| o.fields([o.field("n").asc()]))
        .start_at(FirestoreQueryCursor::AfterValue(vec![
            FirestoreValue::from(Value {
                value_type: Some(ValueType::IntegerValue(7)),
            }),
        ]))
        .obj()
        .query()
        .await
        .unwrap();
    assert_eq!(after.iter().map(|i| i.n).collect::<Vec<_>>(), vec![8, 9]);
    emu.shutdown().await;
}

#[tokio::test]
async fn membership_filters_and_empty_results_answer_with_read_time() {
    let emu = start().await;
    let _db = seed(&emu).await;
    let mut raw = raw(&emu).await;
    use field_filter::Operator as O;
    let (ns, _) = run(
        &mut raw,
        items_query(Some(field_filter("n", O::In, array(vec![int(1), int(4)])))),
    )
    .await;
    assert_eq!(ns, vec![1, 4]);
    let (ns, _) = run(
        &mut raw,
        items_query(Some(field_filter(
            "n",
            O::NotIn,
            array((0..8).map(int).collect()),
        ))),
    )
    .await;
    assert_eq!(ns, vec![8, 9]);
    let (ns, _) = run(
        &mut raw,
        items_query(Some(field_filter("tags", O::ArrayContains, string("t2")))),
    )
    .await;
    assert_eq!(ns, vec![2, 5, 8]);
    let (ns, _) = run(
        &mut raw,
        items_query(Some(field_filter("n", O::NotEqual, int(0)))),
    )
    .await;
    assert_eq!(ns.len(), 9);
    let (ns, responses) = run(
        &mut raw,
        items_query(Some(field_filter("n", O::GreaterThan, int(100)))),
    )
    .await;
    assert!(ns.is_empty());
    assert_eq!(responses, 1, "an empty result still answers once");
    // Type classes: a string bound matches no numbers.
    let (ns, _) = run(
        &mut raw,
        items_query(Some(field_filter("n", O::LessThan, string("z")))),
    )
    .await;
    assert!(ns.is_empty());
    emu.shutdown().await;
}

#[derive(Debug, Deserialize)]
struct Aggs {
    count: usize,
    total: i64,
    mean: f64,
}

#[tokio::test]
async fn aggregations_count_sum_and_avg() {
    let emu = start().await;
    let db = seed(&emu).await;
    let aggs: Vec<Aggs> = db
        .fluent()
        .select()
        .from("items")
        .aggregate(|a| {
            a.fields([
                a.field("count").count(),
                a.field("total").sum("n"),
                a.field("mean").avg("n"),
            ])
        })
        .obj()
        .query()
        .await
        .unwrap();
    assert_eq!(aggs.len(), 1);
    assert_eq!(aggs[0].count, 10);
    assert_eq!(aggs[0].total, 45);
    assert!((aggs[0].mean - 4.5).abs() < 1e-9);

    let mut raw = raw(&emu).await;
    let field = |f: &str| {
        Some(FieldReference {
            field_path: f.to_string(),
        })
    };
    let query = StructuredAggregationQuery {
        aggregations: vec![
            Aggregation {
                alias: "c".into(),
                operator: Some(Operator::Count(Count { up_to: Some(3) })),
            },
            Aggregation {
                alias: "s".into(),
                operator: Some(Operator::Sum(Sum {
                    field: field("tag"),
                })),
            },
            Aggregation {
                alias: "a".into(),
                operator: Some(Operator::Avg(Avg {
                    field: field("nope"),
                })),
            },
        ],
        query_type: Some(AggQueryType::StructuredQuery(items_query(None))),
    };
    let mut stream = raw
        .run_aggregation_query(RunAggregationQueryRequest {
            parent: format!("{DATABASE}/documents"),
            query_type: Some(
                run_aggregation_query_request::QueryType::StructuredAggregationQuery(query),
            ),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let r = stream.message().await.unwrap().unwrap();
    let fields = r.result.unwrap().aggregate_fields;
    assert_eq!(fields["c"], int(3));
    assert_eq!(
        fields["s"],
        int(0),
        "non-numbers are skipped; empty sum is 0"
    );
    assert_eq!(
        fields["a"].value_type,
        Some(ValueType::NullValue(0)),
        "avg of nothing is null"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn collection_groups_listing_pages_and_projection() {
    use gcloud_sdk::google::firestore::v1::structured_query::{Direction, Order, Projection};
    use gcloud_sdk::google::firestore::v1::{
        Cursor, ListCollectionIdsRequest, ListDocumentsRequest,
    };
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let mut writes = Vec::new();
    for (path, n) in [
        ("posts/a", 1),
        ("posts/b", 2),
        ("posts/c", 3),
        ("posts/a/likes/x", 10),
        ("posts/b/likes/y", 20),
        ("users/u/likes/z", 30),
    ] {
        writes.push(update(
            &format!("{DATABASE}/documents/{path}"),
            &[("n", int(n)), ("other", string("o"))],
        ));
    }
    commit(&mut raw, writes, vec![]).await.unwrap();

    let mut group = items_query(None);
    group.from = vec![CollectionSelector {
        collection_id: "likes".into(),
        all_descendants: true,
    }];
    let (ns, _) = run(&mut raw, group.clone()).await;
    assert_eq!(ns, vec![10, 20, 30]);

    // Descending order, end_before cursor, projection.
    let mut q = items_query(None);
    q.from[0].collection_id = "posts".into();
    q.order_by = vec![Order {
        field: Some(FieldReference {
            field_path: "n".into(),
        }),
        direction: Direction::Descending as i32,
    }];
    q.end_at = Some(Cursor {
        values: vec![int(1)],
        before: true,
    });
    q.select = Some(Projection {
        fields: vec![FieldReference {
            field_path: "n".into(),
        }],
    });
    let mut stream = raw
        .run_query(RunQueryRequest {
            parent: format!("{DATABASE}/documents"),
            query_type: Some(run_query_request::QueryType::StructuredQuery(q)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while let Some(r) = stream.message().await.unwrap() {
        let d = r.document.unwrap();
        assert_eq!(d.fields.len(), 1, "projection keeps only n");
        got.push(int_field(&d, "n").unwrap());
    }
    assert_eq!(got, vec![3, 2]);

    let page = raw
        .list_documents(ListDocumentsRequest {
            parent: format!("{DATABASE}/documents"),
            collection_id: "posts".into(),
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.documents.len(), 2);
    let rest = raw
        .list_documents(ListDocumentsRequest {
            parent: format!("{DATABASE}/documents"),
            collection_id: "posts".into(),
            page_size: 2,
            page_token: page.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rest.documents.len(), 1);
    assert!(rest.documents[0].name.ends_with("posts/c"));
    assert!(rest.next_page_token.is_empty());

    let ids = raw
        .list_collection_ids(ListCollectionIdsRequest {
            parent: format!("{DATABASE}/documents"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .collection_ids;
    assert_eq!(ids, vec!["posts", "users"]);
    let ids = raw
        .list_collection_ids(ListCollectionIdsRequest {
            parent: format!("{DATABASE}/documents/posts/a"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .collection_ids;
    assert_eq!(ids, vec!["likes"]);
    emu.shutdown().await;
}

#[tokio::test]
async fn a_query_in_a_transaction_locks_the_documents_it_returns() {
    let emu = start().await;
    let _db = seed(&emu).await;
    let mut raw = raw(&emu).await;
    let tx = begin(&mut raw).await;
    let mut stream = raw
        .run_query(RunQueryRequest {
            parent: format!("{DATABASE}/documents"),
            query_type: Some(run_query_request::QueryType::StructuredQuery(items_query(
                Some(field_filter("n", field_filter::Operator::Equal, int(3))),
            ))),
            consistency_selector: Some(run_query_request::ConsistencySelector::Transaction(
                tx.clone(),
            )),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    while stream.message().await.unwrap().is_some() {}
    assert_eq!(emu.firestore().stats().locked_documents, 1);
    let mut raw2 = raw.clone();
    let plain = tokio::spawn(async move {
        commit(
            &mut raw2,
            vec![update(&doc_name("items", "i03"), &[("n", int(33))])],
            vec![],
        )
        .await
    });
    stats_until(&emu, "the plain write waiting for the lock", |s| {
        s.lock_waits == 1
    })
    .await;
    assert!(!plain.is_finished(), "the returned document is locked");
    commit(&mut raw, vec![], tx).await.unwrap();
    patiently("the plain write released by the commit", plain)
        .await
        .unwrap()
        .unwrap();
    emu.shutdown().await;
}

async fn try_run(raw: &mut Raw, query: StructuredQuery) -> Result<Vec<i64>, tonic::Status> {
    let mut stream = raw
        .run_query(RunQueryRequest {
            parent: format!("{DATABASE}/documents"),
            query_type: Some(run_query_request::QueryType::StructuredQuery(query)),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut ns = Vec::new();
    while let Some(r) = stream.message().await? {
        if let Some(d) = r.document {
            ns.push(int_field(&d, "n").unwrap_or(-1));
        }
    }
    Ok(ns)
}

fn composite(op: composite_filter::Operator, filters: Vec<Filter>) -> Filter {
    Filter {
        filter_type: Some(FilterType::CompositeFilter(CompositeFilter {
            op: op as i32,
            filters,
        })),
    }
}

fn and(filters: Vec<Filter>) -> Filter {
    composite(composite_filter::Operator::And, filters)
}

fn or(filters: Vec<Filter>) -> Filter {
    composite(composite_filter::Operator::Or, filters)
}

fn ints(range: std::ops::Range<i64>) -> Value {
    array(range.map(int).collect())
}

fn strings(items: &[&str]) -> Value {
    array(items.iter().map(|s| string(s)).collect())
}

/// Issue #16 item 5: the documented query limits (the filter operators'
/// requirements in `google/firestore/v1/query.proto`, and Firebase's
/// "Query limitations" and "Limits on OR queries"), each met and crossed.
#[tokio::test]
async fn documented_query_limits_are_invalid_argument() {
    use field_filter::Operator as O;
    let emu = start().await;
    let db = seed(&emu).await;
    let mut raw = raw(&emu).await;

    // Through the client crate: two array-contains in one conjunction.
    let twice = db
        .fluent()
        .select()
        .from("items")
        .filter(|q| {
            q.for_all([
                q.field("tags").array_contains("t0"),
                q.field("tags").array_contains("t1"),
            ])
        })
        .query()
        .await;
    assert!(twice.is_err(), "two array-contains are refused: {twice:?}");

    let ac = |v: &str| field_filter("tags", O::ArrayContains, string(v));
    let aca = |v: &[&str]| field_filter("tags", O::ArrayContainsAny, strings(v));
    let refused: Vec<(&str, Filter)> = vec![
        ("two ARRAY_CONTAINS", and(vec![ac("t0"), ac("t1")])),
        (
            "ARRAY_CONTAINS with ARRAY_CONTAINS_ANY",
            and(vec![ac("t0"), aca(&["t1"])]),
        ),
        (
            "two ARRAY_CONTAINS_ANY",
            and(vec![aca(&["t0"]), aca(&["t1"])]),
        ),
        ("IN of 31", field_filter("n", O::In, ints(0..31))),
        ("ARRAY_CONTAINS_ANY of 31", {
            let many: Vec<String> = (0..31).map(|i| format!("t{i}")).collect();
            let refs: Vec<&str> = many.iter().map(String::as_str).collect();
            aca(&refs)
        }),
        (
            "6 x 6 = 36 disjunctions",
            and(vec![
                field_filter("n", O::In, ints(0..6)),
                field_filter("tag", O::In, ints(0..6)),
            ]),
        ),
        (
            "OR of 31",
            or((0..31)
                .map(|i| field_filter("n", O::Equal, int(i)))
                .collect()),
        ),
        ("NOT_IN of 11", field_filter("n", O::NotIn, ints(0..11))),
        (
            "NOT_IN with IN",
            and(vec![
                field_filter("n", O::NotIn, ints(0..2)),
                field_filter("tag", O::In, strings(&["odd"])),
            ]),
        ),
        (
            "NOT_IN with ARRAY_CONTAINS_ANY",
            and(vec![field_filter("n", O::NotIn, ints(0..2)), aca(&["t0"])]),
        ),
        (
            "NOT_IN with OR",
            and(vec![
                field_filter("n", O::NotIn, ints(0..2)),
                or(vec![ac("t0"), ac("t1")]),
            ]),
        ),
        (
            "NOT_IN with NOT_EQUAL",
            and(vec![
                field_filter("n", O::NotIn, ints(0..2)),
                field_filter("tag", O::NotEqual, string("odd")),
            ]),
        ),
        (
            "two NOT_IN",
            and(vec![
                field_filter("n", O::NotIn, ints(0..2)),
                field_filter("tag", O::NotIn, strings(&["odd"])),
            ]),
        ),
        (
            "two NOT_EQUAL",
            and(vec![
                field_filter("n", O::NotEqual, int(1)),
                field_filter("tag", O::NotEqual, string("odd")),
            ]),
        ),
    ];
    for (what, filter) in refused {
        let err = try_run(&mut raw, items_query(Some(filter)))
            .await
            .expect_err(what);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{what}: {err:?}");
    }

    let many: Vec<String> = (0..30).map(|i| format!("t{i}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let accepted: Vec<(&str, Filter, usize)> = vec![
        (
            "ARRAY_CONTAINS in each disjunct",
            or(vec![ac("t0"), ac("t1")]),
            7,
        ),
        ("ARRAY_CONTAINS_ANY of 30", aca(&refs), 10),
        ("IN of 30", field_filter("n", O::In, ints(0..30)), 10),
        (
            "IN with ARRAY_CONTAINS_ANY, 5 x 6 = 30",
            and(vec![
                field_filter("n", O::In, ints(0..5)),
                aca(&["t0", "t1", "t2", "t3", "t4", "t5"]),
            ]),
            5,
        ),
        (
            "OR of 30",
            or((0..30)
                .map(|i| field_filter("n", O::Equal, int(i)))
                .collect()),
            10,
        ),
        ("NOT_IN of 10", field_filter("n", O::NotIn, ints(0..10)), 0),
        (
            "NOT_EQUAL with range filters",
            and(vec![
                field_filter("n", O::NotEqual, int(1)),
                field_filter("n", O::GreaterThan, int(0)),
            ]),
            8,
        ),
    ];
    for (what, filter, n) in accepted {
        let got = try_run(&mut raw, items_query(Some(filter)))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert_eq!(got.len(), n, "{what}");
    }
    emu.shutdown().await;
}

/// Inequality fields missing from an explicit `order_by` are appended after
/// it, in field name order, with the last order's direction, then
/// `__name__` (query.proto, `StructuredQuery.order_by`).
#[tokio::test]
async fn inequality_fields_missing_from_order_by_are_appended() {
    use field_filter::Operator as O;
    use gcloud_sdk::google::firestore::v1::structured_query::{Direction, Order};
    let emu = start().await;
    let mut raw = raw(&emu).await;
    // Names in the opposite order of `n`, all with the same `g`.
    for (id, n) in [("a", 3), ("b", 2), ("c", 1)] {
        let name = doc_name("ordered", id);
        commit(
            &mut raw,
            vec![update(&name, &[("n", int(n)), ("g", int(0))])],
            vec![],
        )
        .await
        .unwrap();
    }
    let query = StructuredQuery {
        from: vec![CollectionSelector {
            collection_id: "ordered".into(),
            all_descendants: false,
        }],
        r#where: Some(field_filter("n", O::GreaterThan, int(0))),
        order_by: vec![Order {
            field: Some(FieldReference {
                field_path: "g".into(),
            }),
            direction: Direction::Ascending as i32,
        }],
        ..Default::default()
    };
    assert_eq!(try_run(&mut raw, query).await.unwrap(), [1, 2, 3]);
    emu.shutdown().await;
}

/// Issue #16 item 6: an error on a streaming read comes after response
/// headers (the call opens, then its first message is the error), not as a
/// trailers-only response: Google's Node client (gax's retry-request) takes
/// an error before any response headers for "no response" and resends the
/// request twice with backoff.
#[tokio::test]
async fn streaming_read_errors_come_after_response_headers() {
    use field_filter::Operator as O;
    use gcloud_sdk::google::firestore::v1::{
        batch_get_documents_request, BatchGetDocumentsRequest,
    };
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let ac = |v: &str| field_filter("tags", O::ArrayContains, string(v));
    let bad = items_query(Some(and(vec![ac("t0"), ac("t1")])));

    let mut query = raw
        .run_query(RunQueryRequest {
            parent: format!("{DATABASE}/documents"),
            query_type: Some(run_query_request::QueryType::StructuredQuery(bad.clone())),
            ..Default::default()
        })
        .await
        .expect("RunQuery answers with headers first")
        .into_inner();
    let err = query.message().await.expect_err("then the error");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    let mut aggregation = raw
        .run_aggregation_query(RunAggregationQueryRequest {
            parent: format!("{DATABASE}/documents"),
            query_type: Some(
                run_aggregation_query_request::QueryType::StructuredAggregationQuery(
                    StructuredAggregationQuery {
                        aggregations: vec![Aggregation {
                            alias: "n".into(),
                            operator: Some(Operator::Count(Count { up_to: None })),
                        }],
                        query_type: Some(AggQueryType::StructuredQuery(bad)),
                    },
                ),
            ),
            ..Default::default()
        })
        .await
        .expect("RunAggregationQuery answers with headers first")
        .into_inner();
    let err = aggregation.message().await.expect_err("then the error");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    let mut get = raw
        .batch_get_documents(BatchGetDocumentsRequest {
            database: DATABASE.to_string(),
            documents: vec![doc_name("items", "i00")],
            consistency_selector: Some(
                batch_get_documents_request::ConsistencySelector::Transaction(b"gone".to_vec()),
            ),
            ..Default::default()
        })
        .await
        .expect("BatchGetDocuments answers with headers first")
        .into_inner();
    let err = get.message().await.expect_err("then the error");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    emu.shutdown().await;
}
