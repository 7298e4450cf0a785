//! Shared helpers of the Firestore emulator tests: one emulator per test on
//! an ephemeral loopback port, the `firestore` client crate pointed at it
//! explicitly (no environment variable), and a raw tonic client.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use firestore::{FirestoreDb, FirestoreDbOptions};
use gcloud_sdk::google::firestore::v1::firestore_client::FirestoreClient;
use gcloud_sdk::google::firestore::v1::{
    value::ValueType, write::Operation, BatchGetDocumentsRequest, BeginTransactionRequest,
    CommitRequest, CommitResponse, Document, Value, Write,
};
use hotcount_emulators::firestore::{FirestoreConfig, FirestoreStats};
use hotcount_emulators::{Emulators, EmulatorsConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

pub const PROJECT: &str = "test-project";
pub const DATABASE: &str = "projects/test-project/databases/(default)";

pub type Raw = FirestoreClient<Channel>;

/// Longest real time any single wait in these tests may take: generous, so
/// that two busy cores cannot make a correct emulator miss it. Tests never
/// assert how fast something happens (speed belongs in the benchmarks).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Waits (bounded by [`PATIENCE`]) until the emulator's stats satisfy `cond`,
/// e.g. until a commit is seen waiting for a lock; returns those stats.
/// Panics naming `what` and the last stats when they never do.
pub async fn stats_until(
    emu: &Emulators,
    what: &str,
    cond: impl Fn(&FirestoreStats) -> bool,
) -> FirestoreStats {
    let give_up = tokio::time::Instant::now() + PATIENCE;
    loop {
        let stats = emu.firestore().stats();
        if cond(&stats) {
            return stats;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "never observed {what} within {PATIENCE:?}: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `fut`, bounded by [`PATIENCE`] only so that a hang fails instead of
/// stalling the run; panics naming `what` when it does not finish.
pub async fn patiently<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {PATIENCE:?}"))
}

/// Starts the emulators with `firestore` settings.
pub async fn start_with(firestore: FirestoreConfig) -> Emulators {
    Emulators::start(EmulatorsConfig {
        firestore,
        ..Default::default()
    })
    .await
    .expect("emulators start")
}

/// Starts the emulators with default settings.
pub async fn start() -> Emulators {
    start_with(FirestoreConfig::default()).await
}

/// The `firestore` client crate pointed at this emulator, with no credentials.
pub async fn client(emu: &Emulators) -> FirestoreDb {
    let options = FirestoreDbOptions::new(PROJECT.to_string())
        .with_firebase_api_url(emu.firestore_endpoint());
    FirestoreDb::with_options_auth(
        options,
        gcloud_sdk::google_cloud_auth::credentials::anonymous::Builder::new().build(),
    )
    .await
    .expect("client connects")
}

/// A raw gRPC client of this emulator.
pub async fn raw(emu: &Emulators) -> Raw {
    FirestoreClient::connect(emu.firestore_endpoint())
        .await
        .expect("raw client connects")
}

pub fn doc_name(collection: &str, id: &str) -> String {
    format!("{DATABASE}/documents/{collection}/{id}")
}

pub fn int(i: i64) -> Value {
    Value {
        value_type: Some(ValueType::IntegerValue(i)),
    }
}

pub fn double(d: f64) -> Value {
    Value {
        value_type: Some(ValueType::DoubleValue(d)),
    }
}

pub fn string(s: &str) -> Value {
    Value {
        value_type: Some(ValueType::StringValue(s.to_string())),
    }
}

pub fn document(name: &str, fields: &[(&str, Value)]) -> Document {
    Document {
        name: name.to_string(),
        fields: fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<HashMap<_, _>>(),
        create_time: None,
        update_time: None,
    }
}

pub fn update(name: &str, fields: &[(&str, Value)]) -> Write {
    Write {
        operation: Some(Operation::Update(document(name, fields))),
        ..Default::default()
    }
}

/// Commits `writes` (in `transaction` if non-empty).
pub async fn commit(
    raw: &mut Raw,
    writes: Vec<Write>,
    transaction: Vec<u8>,
) -> Result<CommitResponse, tonic::Status> {
    raw.commit(CommitRequest {
        database: DATABASE.to_string(),
        writes,
        transaction,
        request_options: None,
    })
    .await
    .map(|r| r.into_inner())
}

/// Begins a read-write transaction.
pub async fn begin(raw: &mut Raw) -> Vec<u8> {
    raw.begin_transaction(BeginTransactionRequest {
        database: DATABASE.to_string(),
        options: None,
        request_options: None,
    })
    .await
    .expect("begin")
    .into_inner()
    .transaction
}

/// Reads `names` in `transaction` with BatchGetDocuments; returns found docs.
pub async fn read_in(
    raw: &mut Raw,
    transaction: &[u8],
    names: &[String],
) -> Result<Vec<Document>, tonic::Status> {
    use gcloud_sdk::google::firestore::v1::batch_get_documents_request::ConsistencySelector;
    use gcloud_sdk::google::firestore::v1::batch_get_documents_response::Result as R;
    let mut stream = raw
        .batch_get_documents(BatchGetDocumentsRequest {
            database: DATABASE.to_string(),
            documents: names.to_vec(),
            mask: None,
            request_options: None,
            consistency_selector: Some(ConsistencySelector::Transaction(transaction.to_vec())),
        })
        .await?
        .into_inner();
    let mut found = Vec::new();
    while let Some(item) = stream.message().await? {
        if let Some(R::Found(d)) = item.result {
            found.push(d);
        }
    }
    Ok(found)
}

/// The integer field `field` of `doc`.
pub fn int_field(doc: &Document, field: &str) -> Option<i64> {
    match doc.fields.get(field)?.value_type {
        Some(ValueType::IntegerValue(i)) => Some(i),
        _ => None,
    }
}

/// A minimal HTTP/1.1 request to the emulator's admin routes: (status, body).
pub async fn http(emu: &Emulators, method: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(emu.firestore_addr())
        .await
        .expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .expect("response in time")
        .expect("read");
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}
