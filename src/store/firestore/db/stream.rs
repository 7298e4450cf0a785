//! A streamed read's responses (BatchGetDocuments, RunQuery,
//! RunAggregationQuery), read one by one within the call's deadline, and
//! the transaction the read opens, taken from the first response that
//! carries it.
//!
//! Invariants: a read that opens a transaction leaves its id in
//! [`Opened`](super::Opened) as soon as it arrives and fails without one;
//! a failure after it was opened (the deadline passing included) ends it
//! and names it in the error, so its locks do not outlive the attempt.

use std::time::Duration;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::tonic::Status;

use super::super::errors::status_error;
use super::super::frame::BatchGetFrame;
use super::deadline::{no_answer, TIMEOUT_EXPIRED};
use super::{FirestoreDb, Read};
use crate::store::{Code, StoreError};

impl FirestoreDb {
    /// Reads the responses of the streaming call `op`, handing each to
    /// `each` until it returns false or the stream ends, all within
    /// `limit`. Returns the transaction the read opened (see
    /// [`Self::batch_get`]); a failure after it was opened (its deadline
    /// passing included) ends it.
    pub(super) async fn stream<T: Streamed>(
        &self,
        op: &'static str,
        read: Read<'_>,
        limit: Duration,
        call: impl std::future::Future<
            Output = Result<gcloud_sdk::tonic::Response<gcloud_sdk::tonic::Streaming<T>>, Status>,
        >,
        each: impl FnMut(T) -> bool,
    ) -> Result<Vec<u8>, StoreError> {
        let within = tokio::time::timeout(limit, self.stream_all(op, read, call, each)).await;
        match within {
            Ok(Err(error)) if error.code == Code::Cancelled && error.message == TIMEOUT_EXPIRED => {
                Err(StoreError {
                    code: Code::DeadlineExceeded,
                    message: no_answer(op, limit, "nothing was written").message,
                    ..error
                })
            }
            Ok(result) => result,
            Err(_) => {
                let opened = match read {
                    Read::ReadWrite { opened, .. } => opened.take().unwrap_or_default(),
                    _ => Vec::new(),
                };
                let error = no_answer(op, limit, "nothing was written");
                Err(self.abandon(opened, error).await)
            }
        }
    }

    /// [`Self::stream`] without its deadline.
    async fn stream_all<T: Streamed>(
        &self,
        op: &'static str,
        read: Read<'_>,
        call: impl std::future::Future<
            Output = Result<gcloud_sdk::tonic::Response<gcloud_sdk::tonic::Streaming<T>>, Status>,
        >,
        mut each: impl FnMut(T) -> bool,
    ) -> Result<Vec<u8>, StoreError> {
        let mut stream = call.await.map_err(|s| status_error(op, &s))?.into_inner();
        let mut transaction = Vec::new();
        loop {
            let mut response = match stream.message().await {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(status) => {
                    let error = status_error(op, &status);
                    return Err(self.abandon(transaction, error).await);
                }
            };
            let opened = response.take_transaction();
            if !opened.is_empty() {
                if let Read::ReadWrite { opened: slot, .. } = read {
                    *slot.0.lock() = Some(opened.clone());
                }
                transaction = opened;
            }
            if !each(response) {
                break;
            }
        }
        if matches!(read, Read::ReadWrite { .. }) && transaction.is_empty() {
            return Err(StoreError::internal(
                op,
                &format!("no transaction id in the {op} response"),
            ));
        }
        Ok(transaction)
    }
}

/// A streamed response, which may carry the transaction its read opened.
pub(super) trait Streamed {
    /// The transaction id it carries (empty when none).
    fn take_transaction(&mut self) -> Vec<u8>;
}

macro_rules! streamed {
    ($($response:ty),*) => {$(
        impl Streamed for $response {
            fn take_transaction(&mut self) -> Vec<u8> {
                std::mem::take(&mut self.transaction)
            }
        }
    )*};
}

streamed!(
    fs::BatchGetDocumentsResponse,
    fs::RunQueryResponse,
    fs::RunAggregationQueryResponse
);

impl Streamed for BatchGetFrame {
    fn take_transaction(&mut self) -> Vec<u8> {
        self.transaction().to_vec()
    }
}
