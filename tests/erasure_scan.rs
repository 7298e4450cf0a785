//! After `users erase`, the user id is nowhere in the store: every
//! Firestore document of every collection, listed recursively through the
//! emulator's own API (ListCollectionIds, ListDocuments with the missing
//! parents of subcollections), every value of every field (strings, bytes,
//! maps, arrays, references) and every document name; every row of every
//! PostgreSQL table of the schema (`information_schema`), every column as
//! text (bytea as its escaped bytes).

mod common;

use std::process::Output;
use std::time::Duration;

use common::{Backend, Ev, Harness};
use gcloud_sdk::google::firestore::v1::firestore_client::FirestoreClient;
use gcloud_sdk::google::firestore::v1::value::ValueType;
use gcloud_sdk::google::firestore::v1::{ListCollectionIdsRequest, ListDocumentsRequest, Value};

const WAIT: Duration = Duration::from_secs(30);

/// The erased user: an id no other id of the test contains.
const USER: &str = "u-erase-me-7f3a";

fn hotcount(h: &Harness, args: &[&str]) -> Output {
    let mut command = h.command();
    if let Some(url) = h.postgres_url() {
        command.env("HOTCOUNT_STORE", url);
    }
    command.args(args).output().expect("hotcount runs")
}

/// Whether `needle` occurs anywhere in `value` (nested values included).
fn value_holds(value: &Value, needle: &str) -> bool {
    match &value.value_type {
        Some(ValueType::StringValue(s)) | Some(ValueType::ReferenceValue(s)) => s.contains(needle),
        Some(ValueType::BytesValue(b)) => b.windows(needle.len()).any(|w| w == needle.as_bytes()),
        Some(ValueType::ArrayValue(a)) => a.values.iter().any(|v| value_holds(v, needle)),
        Some(ValueType::MapValue(m)) => m
            .fields
            .iter()
            .any(|(k, v)| k.contains(needle) || value_holds(v, needle)),
        _ => false,
    }
}

/// Every document under `root` (recursively, missing parents included)
/// whose name or any value holds `needle`; and how many documents were read.
async fn firestore_documents_holding(h: &Harness, needle: &str) -> (Vec<String>, usize) {
    let mut raw = FirestoreClient::connect(h.emulators.firestore_endpoint())
        .await
        .expect("raw client connects");
    let root = h.db.layout().root();
    let mut parents = vec![root.to_string()];
    let (mut found, mut read) = (Vec::new(), 0);
    while let Some(parent) = parents.pop() {
        let ids = raw
            .list_collection_ids(ListCollectionIdsRequest {
                parent: parent.clone(),
                ..Default::default()
            })
            .await
            .expect("list collection ids")
            .into_inner()
            .collection_ids;
        for collection in ids {
            let documents = raw
                .list_documents(ListDocumentsRequest {
                    parent: parent.clone(),
                    collection_id: collection.clone(),
                    show_missing: true,
                    ..Default::default()
                })
                .await
                .expect("list documents")
                .into_inner()
                .documents;
            for doc in documents {
                read += 1;
                let holds = doc.name.contains(needle)
                    || doc
                        .fields
                        .iter()
                        .any(|(k, v)| k.contains(needle) || value_holds(v, needle));
                if holds {
                    found.push(format!("{}: {:?}", doc.name, doc.fields));
                }
                parents.push(doc.name);
            }
        }
    }
    (found, read)
}

/// Every row of every table of the schema holding `needle` in any column
/// (as text; bytea as its escaped bytes), as `table: row`; and the tables.
async fn postgres_rows_holding(url: &str, needle: &str) -> (Vec<String>, Vec<String>) {
    let client = common::pg::connect(url).await;
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
             ORDER BY table_name",
            &[],
        )
        .await
        .expect("list tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut found = Vec::new();
    for table in &tables {
        let columns = client
            .query(
                "SELECT column_name::text, data_type::text FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = $1
                 ORDER BY ordinal_position",
                &[table],
            )
            .await
            .expect("list columns");
        let texts: Vec<String> = columns
            .iter()
            .map(|c| {
                let (name, kind): (String, String) = (c.get(0), c.get(1));
                let quoted = format!("\"{}\"", name.replace('"', "\"\""));
                if kind == "bytea" {
                    format!("encode({quoted}, 'escape')")
                } else {
                    format!("{quoted}::text")
                }
            })
            .collect();
        let sql = format!(
            "SELECT concat_ws(' | ', {}) FROM \"{}\"",
            texts.join(", "),
            table.replace('"', "\"\"")
        );
        for row in client.query(&sql, &[]).await.expect("scan a table") {
            let text: String = row.get(0);
            if text.contains(needle) {
                found.push(format!("{table}: {text}"));
            }
        }
    }
    (found, tables)
}

async fn after_users_erase_the_id_is_in_no_document_and_no_row(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.allow_tombstones().await;
    let key = ["--user-hash-key", "k3y", "--tombstone-refresh-ms", "100"];
    let mut args = key.to_vec();
    args.extend(["--rollup-interval-ms", "100"]);
    let consumer = h.spawn(h.run_args("hotcount", &args));
    let mut events: Vec<Ev> = (0..6)
        .map(|i| Ev::like(&format!("e{i}"), &format!("p{i}"), USER, 1))
        .collect();
    events.push(Ev::unlike("e9", "p5", USER, 2));
    events.push(Ev::like("b1", "p1", "bob", 1));
    events.push(Ev::like("c1", "p2", "carol", 1));
    h.publish(&events).await;
    // Poison carrying the id: in a field the schema knows, and elsewhere.
    let poison = [
        format!(r#"{{"version":1,"type":"like.added","userId":"{USER}"}}"#),
        format!(r#"{{"version":1,"type":"like.removed","note":"{USER}","postId":"p1"}}"#),
        r#"{"version":1,"type":"like.added","userId":"bob"}"#.to_string(),
    ];
    let total = (events.len() + poison.len()) as u64;
    h.publish_raw(&poison.map(String::into_bytes)).await;
    assert!(consumer.wait_for_acks(total, WAIT).await);
    let before = match h.postgres_url() {
        Some(url) => postgres_rows_holding(url, USER).await.0,
        None => firestore_documents_holding(&h, USER).await.0,
    };
    assert!(
        before.len() >= 8,
        "the scan finds the id before the erasure: {before:#?}"
    );

    let mut erase = vec!["users", "erase"];
    erase.extend(key);
    erase.push(USER);
    let out = hotcount(&h, &erase);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("erased\t{USER}\tlikes removed 5\tunliked memberships 1\talready erased 0\tmemberships deleted 6\tquarantine records 2\n")
    );
    consumer.stop().await;

    match h.postgres_url() {
        Some(url) => {
            let (found, tables) = postgres_rows_holding(url, USER).await;
            assert!(tables.len() >= 9, "every table scanned: {tables:?}");
            assert!(found.is_empty(), "the id is still in: {found:#?}");
        }
        None => {
            let (found, read) = firestore_documents_holding(&h, USER).await;
            assert!(read > 10, "documents scanned: {read}");
            assert!(found.is_empty(), "the id is still in: {found:#?}");
        }
    }
    // bob's and carol's likes stand; the user's are gone.
    let posts: Vec<String> = (0..6).map(|i| format!("p{i}")).collect();
    let counts = h.counts(&posts).await;
    assert_eq!(counts.into_values().collect::<Vec<_>>(), [0, 1, 1, 0, 0, 0]);
}

on_each_store!(after_users_erase_the_id_is_in_no_document_and_no_row);
