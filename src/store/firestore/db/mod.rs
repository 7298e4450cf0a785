//! The one handle to hotcount's Firestore database, opened once from the
//! endpoints and the target: every Firestore call in the repo (the store's
//! transactions, the operator tools, the load generator's read-back, the
//! tests) goes through a [`FirestoreDb`]. This file holds the handle and
//! what a call is told (its deadline, the state a read sees); its RPCs
//! stand beside it, one concern a file: `deadline.rs` every call's deadline,
//! `reads.rs` the reads and queries, `stream.rs` a streamed read's
//! responses, `transactions.rs` a transaction's begin and rollback,
//! `writes.rs` Commit and BatchWrite; `../documents.rs` the reads and
//! writes of hotcount's documents.
//!
//! Invariants: every name comes from [`Layout`] and every value from
//! [`codec`](super::codec); a read or a commit that fails after a
//! transaction was opened for it ends that transaction (best effort) and
//! names it in the error, so its locks do not outlive the attempt; every
//! failure is a [`StoreError`](crate::store::StoreError) classed by
//! [`classify`](super::classify); every RPC ends within its deadline
//! (`deadline.rs`; a query over a whole collection has [`SCAN_TIMEOUT`]).

use std::time::Duration;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use super::{wire, Layout};

mod deadline;
mod reads;
mod stream;
mod transactions;
mod writes;

pub(super) use deadline::answer_within;

/// The deadline of an RPC unless [`FirestoreDb::with_call_timeout`] says
/// otherwise (the service passes `--store-call-timeout-ms`).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The deadline of a query over a whole collection (reconcile's scans,
/// quarantine listings).
pub const SCAN_TIMEOUT: Duration = Duration::from_secs(600);

/// The one handle to a Firestore database and hotcount's layout in it.
/// Cheap to clone (the connection is shared).
#[derive(Clone)]
pub struct FirestoreDb {
    client: ::firestore::FirestoreDb,
    layout: Layout,
    call_timeout: Duration,
}

/// Which state a read sees.
#[derive(Clone, Copy, Debug)]
pub enum Read<'a> {
    /// The latest committed state, outside any transaction (locks nothing).
    Latest,
    /// Inside the transaction `t`.
    In(&'a [u8]),
    /// The state at a read time.
    At(Timestamp),
    /// Opens a read-write transaction, naming the one it retries (if any)
    /// so it keeps that one's age and wins lock conflicts against younger
    /// ones; its id is left in `opened` as soon as the server sends it.
    ReadWrite {
        /// The transaction this one retries.
        retry: Option<&'a [u8]>,
        /// Where the new transaction's id is left.
        opened: &'a Opened,
    },
}

/// Where a read that opens a transaction leaves its id as soon as it
/// arrives, so a caller that abandons the read mid-way can still end it.
#[derive(Debug, Default)]
pub struct Opened(parking_lot::Mutex<Option<Vec<u8>>>);

impl Opened {
    /// The transaction opened, if any (taken: a second call returns `None`).
    pub fn take(&self) -> Option<Vec<u8>> {
        self.0.lock().take()
    }
}

/// What a query returned.
#[derive(Clone, Debug, Default)]
pub struct Queried {
    /// Every document the query yielded.
    pub documents: Vec<fs::Document>,
    /// The read time the server reported first, if any.
    pub read_time: Option<Timestamp>,
}

impl FirestoreDb {
    /// The handle over a connected client and the layout of its database
    /// (opened by `crate::connect::firestore_db`).
    pub fn new(client: firestore::FirestoreDb, layout: Layout) -> Self {
        Self {
            client,
            layout,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// This handle with every RPC (but a scan's) ending within `timeout`.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The deadline of one RPC.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The layout in use.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(super) fn client(
        &self,
    ) -> fs::firestore_client::FirestoreClient<gcloud_sdk::GoogleAuthMiddleware> {
        self.client.client().get()
    }

    /// The same authenticated channel, for the lean messages of [`wire`].
    fn channel(&self) -> wire::Channel {
        self.client.client().get_with(wire::Channel::new)
    }
}
