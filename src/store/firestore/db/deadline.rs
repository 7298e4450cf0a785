//! The deadline of every Firestore call: sent to the server as
//! `grpc-timeout` and enforced here too, so a server or network that stops
//! answering costs a transient DEADLINE_EXCEEDED, never a stalled caller.
//!
//! Invariants: every RPC ends within its limit (the handle's
//! [`FirestoreDb::call_timeout`], set by [`FirestoreDb::with_call_timeout`];
//! a query over a whole collection [`SCAN_TIMEOUT`](super::SCAN_TIMEOUT));
//! the client library's own expiry of that deadline and ours are one and
//! the same DEADLINE_EXCEEDED, which says what became of the call.

use std::time::Duration;

use gcloud_sdk::tonic::{Code as GrpcCode, Status};

use super::super::errors::status_error;
use super::FirestoreDb;
use crate::store::StoreError;

impl FirestoreDb {
    /// `request` carrying `limit` as its `grpc-timeout`.
    pub(in crate::store::firestore) fn within<R>(
        request: R,
        limit: Duration,
    ) -> gcloud_sdk::tonic::Request<R> {
        let mut request = gcloud_sdk::tonic::Request::new(request);
        request.set_timeout(limit);
        request
    }
}

/// What the client library answers when a request's own deadline (its
/// `grpc-timeout`) passes first: CANCELLED with this message.
pub(super) const TIMEOUT_EXPIRED: &str = "Timeout expired";

/// Whether `status` is the client library's own deadline passing (the
/// same deadline as ours, which may fire a moment later).
fn expired(status: &Status) -> bool {
    status.code() == GrpcCode::Cancelled && status.message() == TIMEOUT_EXPIRED
}

/// An RPC of `op` that got no answer within `limit`: a transient
/// DEADLINE_EXCEEDED saying what became of it (`what`).
pub(super) fn no_answer(op: &'static str, limit: Duration, what: &str) -> StoreError {
    status_error(op, &unanswered(limit, what))
}

/// The DEADLINE_EXCEEDED status of a call that got no answer within
/// `limit`, saying what became of it (`what`).
fn unanswered(limit: Duration, what: &str) -> Status {
    Status::deadline_exceeded(format!(
        "no answer within the store call timeout ({limit:?}); {what}"
    ))
}

/// Awaits the unary `call` for at most `limit`: its answer, or its error
/// status, where our deadline or the client library's own expiry of it
/// is the DEADLINE_EXCEEDED of [`unanswered`] (`what` says what became of
/// the call).
pub(in crate::store::firestore) async fn answer_within<T>(
    limit: Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<gcloud_sdk::tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) if !expired(&status) => Err(status),
        _ => Err(unanswered(limit, what)),
    }
}
