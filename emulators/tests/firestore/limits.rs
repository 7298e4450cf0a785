//! The limits of Google's "Usage and limits" page
//! (<https://firebase.google.com/docs/firestore/quotas>), each crossed from
//! the client side: a write exactly at the limit is accepted, one byte (or
//! level, or character) over it is refused with INVALID_ARGUMENT. Sizes
//! follow Google's storage size formula
//! (<https://firebase.google.com/docs/firestore/storage-size>).

use std::collections::HashMap;

use firestore::errors::FirestoreError;
use gcloud_sdk::google::firestore::v1::document_transform::field_transform::TransformType;
use gcloud_sdk::google::firestore::v1::document_transform::FieldTransform;
use gcloud_sdk::google::firestore::v1::value::ValueType;
use gcloud_sdk::google::firestore::v1::{
    ArrayValue, CommitRequest, DocumentMask, MapValue, Value, Write,
};
use prost::Message as _;
use serde::{Deserialize, Serialize};
use tonic::Code;

use crate::support::*;

/// The code a `firestore` crate error carries (`"InvalidArgument"`, ...).
fn crate_code(err: &FirestoreError) -> String {
    match err {
        FirestoreError::DatabaseError(e) => e.public.code.clone(),
        FirestoreError::DataConflictError(e) => e.public.code.clone(),
        FirestoreError::DataNotFoundError(e) => e.public.code.clone(),
        other => format!("{other:?}"),
    }
}

fn map(fields: &[(&str, Value)]) -> Value {
    Value {
        value_type: Some(ValueType::MapValue(MapValue {
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        })),
    }
}

fn array(values: Vec<Value>) -> Value {
    Value {
        value_type: Some(ValueType::ArrayValue(ArrayValue { values })),
    }
}

/// `leaf` inside `levels` nested maps (`{"f": {"f": ... leaf}}`).
fn nest(levels: usize, leaf: Value) -> Value {
    (0..levels).fold(leaf, |inner, _| map(&[("f", inner)]))
}

/// Commits one `update` of `name` with `fields`; the status code.
async fn write_code(raw: &mut Raw, name: &str, fields: &[(&str, Value)]) -> Code {
    match commit(raw, vec![update(name, fields)], vec![]).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Four {
    #[serde(rename = "____")]
    value: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Five {
    #[serde(rename = "_____")]
    value: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Nested {
    m: HashMap<String, HashMap<String, i64>>,
}

/// `____` does not match `__.*__` with something between the pairs, so it is
/// an ordinary id and field name; `_____` and `__x__` are reserved, at the
/// top level and as map keys at any depth.
#[tokio::test]
async fn reserved_names_need_a_character_between_the_double_underscores() {
    let emu = start().await;
    let db = client(&emu).await;
    let four = Four { value: 4 };
    let created: Four = db
        .fluent()
        .insert()
        .into("____")
        .document_id("____")
        .object(&four)
        .execute()
        .await
        .expect("four underscores are an ordinary collection id, document id and field name");
    assert_eq!(created, four);
    let read: Option<Four> = db
        .fluent()
        .select()
        .by_id_in("____")
        .obj()
        .one("____")
        .await
        .unwrap();
    assert_eq!(read, Some(four.clone()));

    let err = db
        .fluent()
        .insert()
        .into("posts")
        .document_id("_____")
        .object(&four)
        .execute::<Four>()
        .await
        .unwrap_err();
    assert_eq!(crate_code(&err), "InvalidArgument", "{err:?}");
    let err = db
        .fluent()
        .insert()
        .into("_____")
        .document_id("p")
        .object(&four)
        .execute::<Four>()
        .await
        .unwrap_err();
    assert_eq!(crate_code(&err), "InvalidArgument", "{err:?}");
    let err = db
        .fluent()
        .insert()
        .into("posts")
        .document_id("five")
        .object(&Five { value: 5 })
        .execute::<Five>()
        .await
        .unwrap_err();
    assert_eq!(crate_code(&err), "InvalidArgument", "{err:?}");

    let deep = |key: &str| Nested {
        m: HashMap::from([("n".to_string(), HashMap::from([(key.to_string(), 1)]))]),
    };
    let _: Nested = db
        .fluent()
        .insert()
        .into("posts")
        .document_id("deep-four")
        .object(&deep("____"))
        .execute()
        .await
        .expect("a nested `____` key is ordinary");
    for reserved in ["_____", "__x__", "__name__"] {
        let err = db
            .fluent()
            .insert()
            .into("posts")
            .document_id(format!("deep{}", reserved.len()))
            .object(&deep(reserved))
            .execute::<Nested>()
            .await
            .unwrap_err();
        assert_eq!(crate_code(&err), "InvalidArgument", "{reserved}: {err:?}");
    }
    assert!(emu
        .firestore()
        .document(&format!("{DATABASE}/documents/posts/five"))
        .is_none());
    emu.shutdown().await;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Blob {
    s: String,
}

/// Storage size of `big/{id}` holding `{s: <len bytes>}`: the name
/// ("big" 4 + id + 1 + 16), the field name "s" (2), the string (len + 1) and
/// 32 bytes per document.
fn blob_size(id: &str, len: usize) -> usize {
    (4 + id.len() + 1 + 16) + 2 + (len + 1) + 32
}

/// A document of exactly 1 MiB (1,048,576 bytes, by Google's storage size
/// formula) is written; one byte more is refused.
#[tokio::test]
async fn document_of_one_mib_is_accepted_and_one_byte_more_refused() {
    let emu = start().await;
    let db = client(&emu).await;
    let at_limit = 1_048_576 - blob_size("d", 0);
    assert_eq!(blob_size("d", at_limit), 1_048_576);
    let blob = Blob {
        s: "x".repeat(at_limit),
    };
    let _: Blob = db
        .fluent()
        .insert()
        .into("big")
        .document_id("d")
        .object(&blob)
        .execute()
        .await
        .expect("a document of exactly 1 MiB is accepted");
    let over = Blob {
        s: "x".repeat(at_limit + 1),
    };
    let err = db
        .fluent()
        .update()
        .in_col("big")
        .document_id("d")
        .object(&over)
        .execute::<Blob>()
        .await
        .unwrap_err();
    assert_eq!(crate_code(&err), "InvalidArgument", "{err:?}");
    let stored = emu
        .firestore()
        .document(&format!("{DATABASE}/documents/big/d"))
        .unwrap();
    assert!(
        matches!(&stored.fields["s"].value_type, Some(ValueType::StringValue(s)) if s.len() == at_limit)
    );
    emu.shutdown().await;
}

/// A document name of 6 KiB (6,144 bytes: each id's bytes + 1, plus 16) is
/// accepted; one byte more is refused.
#[tokio::test]
async fn document_name_of_six_kib_is_accepted_and_one_byte_more_refused() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = |last: usize| {
        let ids = [
            "a".repeat(1500),
            "b".repeat(1500),
            "c".repeat(1500),
            "d".repeat(1500),
            "e".repeat(61),
            "f".repeat(last),
        ];
        let size: usize = ids.iter().map(|id| id.len() + 1).sum::<usize>() + 16;
        (format!("{DATABASE}/documents/{}", ids.join("/")), size)
    };
    let (at_limit, size) = name(61);
    assert_eq!(size, 6 * 1024);
    assert_eq!(
        write_code(&mut raw, &at_limit, &[("v", int(1))]).await,
        Code::Ok
    );
    let (over, size) = name(62);
    assert_eq!(size, 6 * 1024 + 1);
    assert_eq!(
        write_code(&mut raw, &over, &[("v", int(1))]).await,
        Code::InvalidArgument
    );
    emu.shutdown().await;
}

/// Collection ids, document ids and field names (at any depth) of 1,500
/// bytes are accepted; 1,501 bytes are refused (sent raw: the client crate
/// refuses long ids itself).
#[tokio::test]
async fn ids_and_field_names_of_1500_bytes_are_accepted_and_1501_refused() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let ok = "k".repeat(1500);
    let long = "k".repeat(1501);
    assert_eq!(
        write_code(&mut raw, &doc_name(&ok, &ok), &[(&ok, int(1))]).await,
        Code::Ok
    );
    assert_eq!(
        write_code(
            &mut raw,
            &doc_name("c", "nested"),
            &[("m", map(&[(&ok, int(1))]))]
        )
        .await,
        Code::Ok
    );
    for (name, field) in [
        (doc_name(&long, "d"), "v"),
        (doc_name("c", &long), "v"),
        (doc_name("c", "d"), long.as_str()),
    ] {
        assert_eq!(
            write_code(&mut raw, &name, &[(field, int(1))]).await,
            Code::InvalidArgument
        );
    }
    assert_eq!(
        write_code(
            &mut raw,
            &doc_name("c", "d"),
            &[("m", map(&[(&long, int(1))]))]
        )
        .await,
        Code::InvalidArgument
    );
    emu.shutdown().await;
}

/// A field path (as sent, e.g. in an update mask) of 1,500 bytes is
/// accepted; 1,501 bytes are refused.
#[tokio::test]
async fn field_path_of_1500_bytes_is_accepted_and_1501_refused() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let masked = |inner: usize| {
        let outer = "a".repeat(749);
        let inner_name = "b".repeat(inner);
        let path = format!("{outer}.{inner_name}");
        let mut write = update(
            &doc_name("c", "d"),
            &[(&outer, map(&[(&inner_name, int(1))]))],
        );
        write.update_mask = Some(DocumentMask {
            field_paths: vec![path.clone()],
        });
        (write, path.len())
    };
    let (write, len) = masked(750);
    assert_eq!(len, 1500);
    commit(&mut raw, vec![write], vec![])
        .await
        .expect("a 1,500-byte field path is accepted");
    let (write, len) = masked(751);
    assert_eq!(len, 1501);
    let err = commit(&mut raw, vec![write], vec![]).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    emu.shutdown().await;
}

/// A value may sit inside at most 20 maps or arrays: `{a: {f: ... 1}}` with
/// 20 maps around `1` is accepted, 21 are refused; an array counts as a
/// level; a transform that would set a value 21 levels deep is refused.
#[tokio::test]
async fn values_nest_20_levels_deep_and_21_are_refused() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let name = doc_name("c", "deep");
    assert_eq!(
        write_code(&mut raw, &name, &[("a", nest(20, int(1)))]).await,
        Code::Ok
    );
    assert_eq!(
        write_code(&mut raw, &name, &[("a", nest(21, int(1)))]).await,
        Code::InvalidArgument
    );
    assert_eq!(
        write_code(&mut raw, &name, &[("a", array(vec![nest(19, int(1))]))]).await,
        Code::Ok
    );
    assert_eq!(
        write_code(&mut raw, &name, &[("a", array(vec![nest(20, int(1))]))]).await,
        Code::InvalidArgument
    );
    let increment_at = |segments: usize| {
        let path = std::iter::once("t")
            .chain(std::iter::repeat_n("f", segments - 1))
            .collect::<Vec<_>>()
            .join(".");
        let mut write = update(&doc_name("c", "counter"), &[]);
        write.update_mask = Some(DocumentMask {
            field_paths: vec![],
        });
        write.update_transforms = vec![FieldTransform {
            field_path: path,
            transform_type: Some(TransformType::Increment(int(1))),
        }];
        write
    };
    commit(&mut raw, vec![increment_at(21)], vec![])
        .await
        .expect("an increment 20 maps deep is accepted");
    let err = commit(&mut raw, vec![increment_at(22)], vec![])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    emu.shutdown().await;
}

/// A request of exactly 10 MiB (10,485,760 bytes of encoded CommitRequest)
/// is accepted; one byte more is refused.
#[tokio::test]
async fn request_of_ten_mib_is_accepted_and_one_byte_more_refused() {
    let emu = start().await;
    let mut raw = raw(&emu).await;
    let request = |pad: usize| {
        let mut writes: Vec<Write> = (0..10)
            .map(|i| {
                update(
                    &doc_name("bulk", &format!("d{i}")),
                    &[("s", string(&"x".repeat(1_000_000)))],
                )
            })
            .collect();
        writes.push(update(
            &doc_name("bulk", "pad"),
            &[("s", string(&"x".repeat(pad)))],
        ));
        CommitRequest {
            database: DATABASE.to_string(),
            writes,
            transaction: vec![],
            request_options: None,
        }
    };
    const LIMIT: usize = 10 * 1024 * 1024;
    // Length prefixes grow with the pad, so step down from an estimate.
    let mut pad = LIMIT - request(0).encoded_len();
    while request(pad).encoded_len() > LIMIT {
        pad -= 1;
    }
    let at_limit = request(pad);
    assert_eq!(at_limit.encoded_len(), LIMIT);
    raw.commit(at_limit)
        .await
        .expect("a 10 MiB request is accepted");
    let over = request(pad + 1);
    assert_eq!(over.encoded_len(), LIMIT + 1);
    let err = raw.commit(over).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    emu.shutdown().await;
}
