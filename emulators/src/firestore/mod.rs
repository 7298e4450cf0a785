//! The Firestore emulator: `google.firestore.v1.Firestore` over gRPC with
//! production (Standard edition) pessimistic transactions, per-document
//! write counters, and Google-emulator-style reset.
//!
//! Invariant: all state lives in one [`engine::Engine`]; the gRPC service,
//! the admin routes and the library methods are views of it, so what a test
//! reads through [`Firestore`] is exactly what clients see.
//!
//! # Pointing the `firestore` client crate at it
//! Without touching the process environment (tests run in parallel):
//! ```ignore
//! let options = firestore::FirestoreDbOptions::new("my-project".to_string())
//!     .with_firebase_api_url(emulators.firestore_endpoint());
//! let db = firestore::FirestoreDb::with_options_auth(
//!     options,
//!     gcloud_sdk::google_cloud_auth::credentials::anonymous::Builder::new().build(),
//! )
//! .await?;
//! ```
//! or set `FIRESTORE_EMULATOR_HOST` to [`crate::Emulators::firestore_addr`].
//! See `emulators/docs/firestore.md` for the locking rule and admin routes.
//!
//! # Layout
//! - [`names`]: resource names, ids, field paths.
//! - [`values`]: value order, equality, validation, field-path access.
//! - [`store`]: versioned documents by name.
//! - [`locks`]: the shared-lock table.
//! - [`transactions`]: transaction ids, age, expiry.
//! - [`writes`]: one write checked and applied (preconditions, masks).
//! - [`transforms`]: increment, maximum, minimum, server time, arrays.
//! - [`query`]: structured queries and aggregations.
//! - [`engine`]: the state and the wound-wait locking rule.
//! - [`limits`]: the request size limit every RPC is held to.
//! - [`listen`]: the Listen RPC (targets, changes, resume tokens).
//! - [`grpc`]: the gRPC service.
//! - [`usage`]: what Google would bill, by collection group.
//! - [`admin`]: HTTP routes (stats, reset).

pub mod admin;
pub mod engine;
pub mod grpc;
pub mod limits;
pub mod listen;
pub mod locks;
pub mod names;
pub mod query;
pub mod store;
pub mod transactions;
pub mod transforms;
pub mod usage;
pub mod values;
pub mod writes;

use std::sync::Arc;
use std::time::Duration;

use axum::middleware;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

pub use engine::{DocumentWrites, FirestoreStats};
pub use usage::{CollectionStorage, CollectionUsage};

use crate::proto::firestore::firestore_server::FirestoreServer;
use crate::proto::firestore_v1::Document;
use crate::server::Context;

/// Largest message the gRPC service decodes or encodes. Firestore's request
/// limit is 10 MiB: requests up to this size decode and are refused with
/// INVALID_ARGUMENT (`grpc::accept`); larger ones get tonic's
/// RESOURCE_EXHAUSTED.
const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// How often (real time) expired transactions are swept.
const SWEEP_INTERVAL: Duration = Duration::from_millis(250);

/// Firestore behaviour settings. Durations are on the emulated clock.
#[derive(Clone, Debug)]
pub struct FirestoreConfig {
    /// How long a commit waits for an older transaction's lock (and a plain
    /// write for any transaction's lock) before it is ABORTED. Default 30 s,
    /// Google's emulator's value.
    pub lock_wait_timeout: Duration,
    /// When a transaction's commit finds an *older* transaction holding a
    /// lock on a document it writes: `true` (default, production's
    /// wound-wait) waits until the older one ends (then proceeds) or wounds
    /// it by writing the document (then gets ABORTED), bounded by
    /// `lock_wait_timeout`; `false` answers ABORTED at once (wait-die), for
    /// tests that want contention to fail fast.
    pub younger_waits_for_older: bool,
    /// A transaction unused this long expires (default 60 s, as in production).
    pub transaction_idle_timeout: Duration,
    /// A transaction expires this long after it began (default 270 s).
    pub transaction_max_lifetime: Duration,
    /// How long superseded document versions stay readable with `read_time`
    /// (default 60 s).
    pub version_retention: Duration,
    /// Most versions kept per document, bounding memory on hot documents
    /// (default 1024; older `read_time` reads then see the oldest kept).
    pub max_versions_per_document: usize,
    /// Refuse commits creating documents beyond this many (RESOURCE_EXHAUSTED);
    /// `None` = unlimited (default).
    pub max_documents: Option<usize>,
    /// How long (real time) a plain write that waited for a lock holds off
    /// once the lock is released, before it applies: in Firestore the
    /// contended write retries with backoff, so it finishes after the
    /// transaction that held the lock has had its answer. Default 25 ms.
    pub released_write_backoff: Duration,
    /// A Listen stream with nothing to send sends a global `NO_CHANGE`
    /// (a fresh resume token and read time) after this long. Default 30 s.
    pub listen_heartbeat: Duration,
}

impl Default for FirestoreConfig {
    fn default() -> Self {
        Self {
            lock_wait_timeout: Duration::from_secs(30),
            younger_waits_for_older: true,
            transaction_idle_timeout: Duration::from_secs(60),
            transaction_max_lifetime: Duration::from_secs(270),
            version_retention: Duration::from_secs(60),
            max_versions_per_document: 1024,
            max_documents: None,
            released_write_backoff: Duration::from_millis(25),
            listen_heartbeat: Duration::from_secs(30),
        }
    }
}

/// The Firestore emulator's state and controls; a cheap cloneable handle.
#[derive(Clone)]
pub struct Firestore {
    ctx: Arc<Context>,
    engine: Arc<engine::Engine>,
    listeners: Arc<listen::Listeners>,
    sweeper: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl Firestore {
    /// A new, empty emulator; starts the expiry sweeper when inside a Tokio runtime.
    pub fn new(ctx: Arc<Context>, config: FirestoreConfig) -> Self {
        let heartbeat = config.listen_heartbeat;
        let engine = Arc::new(engine::Engine::new(ctx.clone(), config));
        let listeners = Arc::new(listen::Listeners::new(
            engine.clone(),
            ctx.clone(),
            heartbeat,
        ));
        let sweeper = tokio::runtime::Handle::try_current().ok().map(|rt| {
            let weak = Arc::downgrade(&engine);
            rt.spawn(async move {
                let mut tick = tokio::time::interval(SWEEP_INTERVAL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    match weak.upgrade() {
                        Some(engine) => engine.sweep(),
                        None => break,
                    }
                }
            })
        });
        Self {
            ctx,
            engine,
            listeners,
            sweeper: Arc::new(Mutex::new(sweeper)),
        }
    }

    /// gRPC and HTTP routes of this emulator: the Firestore service (counted
    /// and fault-injected), the shared admin routes, stats and reset.
    pub fn router(&self) -> axum::Router {
        let service = FirestoreServer::new(grpc::Service::new(
            self.engine.clone(),
            self.listeners.clone(),
        ))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let routes = tonic::service::Routes::new(service).into_axum_router();
        crate::server::grpc_layer(routes, self.ctx.clone())
            .layer(middleware::from_fn_with_state(
                self.engine.clone(),
                grpc::end_failed_commits,
            ))
            .merge(crate::server::admin_routes(self.ctx.clone()))
            .merge(admin::routes(self.engine.clone()))
    }

    /// Stops the expiry sweeper and ends every Listen stream with UNAVAILABLE.
    pub fn shutdown(&self) {
        if let Some(task) = self.sweeper.lock().take() {
            task.abort();
        }
        self.listeners.shutdown();
    }

    /// Listen streams open now.
    pub fn listen_streams(&self) -> usize {
        self.listeners.open_streams()
    }

    /// Totals (commits, documents written, aborted transactions...) and current sizes.
    pub fn stats(&self) -> FirestoreStats {
        self.engine.stats()
    }

    /// The `n` most written documents (by commits that wrote them), most first.
    pub fn hottest_documents(&self, n: usize) -> Vec<DocumentWrites> {
        self.engine.hottest(n)
    }

    /// How many reads returned or looked up the document `name` (full
    /// resource name), as Google bills them.
    pub fn document_reads(&self, name: &str) -> u64 {
        self.engine.document_reads(name)
    }

    /// What each collection group stores now: documents, their storage
    /// size and estimated index entries (walks every document).
    pub fn storage(&self) -> std::collections::BTreeMap<String, CollectionStorage> {
        self.engine.storage()
    }

    /// How many commits wrote the document `name` (full resource name).
    pub fn document_writes(&self, name: &str) -> u64 {
        self.engine.document_writes(name)
    }

    /// Zeroes the totals and the per-document write counters.
    pub fn reset_stats(&self) {
        self.engine.reset_stats();
    }

    /// Deletes every document of `projects/{project}/databases/{database}` and
    /// ends its transactions, as Google's emulator's reset route does.
    pub fn reset_database(&self, project: &str, database: &str) -> usize {
        self.engine
            .reset_database(&format!("projects/{project}/databases/{database}"))
    }

    /// Deletes every document of every database and ends every transaction.
    pub fn reset(&self) -> usize {
        self.engine.reset_all()
    }

    /// The current state of a document (full resource name), if it exists.
    pub fn document(&self, name: &str) -> Option<Document> {
        self.engine.document(name).map(|d| (*d).clone())
    }

    /// Ends expired transactions now (the sweeper does it every 250 ms);
    /// useful right after advancing the clock.
    pub fn sweep(&self) {
        self.engine.sweep();
    }
}
