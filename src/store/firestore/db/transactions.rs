//! A transaction's begin and end without a commit: a read-only one begun
//! on its own, the options of a read-write one (opened by its first read),
//! and the rollback that ends either, releasing its locks.
//!
//! Invariants: a rollback is best effort and bounded (at most
//! [`ROLLBACK_TIMEOUT`], and within the call deadline), since it runs on
//! the way out; a read that fails after opening a transaction ends it and
//! names it in the error ([`FirestoreDb::abandon`]), so the next attempt
//! retries it.

use std::time::Duration;

use gcloud_sdk::google::firestore::v1 as fs;

use super::super::errors::status_error;
use super::deadline::answer_within;
use super::FirestoreDb;
use crate::store::{OpenedTransaction, StoreError};

/// Longest wait for a best-effort rollback.
const ROLLBACK_TIMEOUT: Duration = Duration::from_secs(2);

impl FirestoreDb {
    /// `error` ended a read: ends the `transaction` it opened too, if any,
    /// and names it in the error (the next attempt retries it).
    pub(super) async fn abandon(&self, transaction: Vec<u8>, mut error: StoreError) -> StoreError {
        if !transaction.is_empty() {
            self.rollback(transaction.clone()).await;
            error.transaction = Some(OpenedTransaction::new(transaction));
        }
        error
    }

    /// Begins a read-only transaction: every read in it sees one snapshot
    /// (its read time), and it locks nothing. End it with [`Self::rollback`].
    pub async fn begin_read_only(&self) -> Result<Vec<u8>, StoreError> {
        let mode = fs::transaction_options::Mode::ReadOnly(Default::default());
        let request = fs::BeginTransactionRequest {
            database: self.layout.database.clone(),
            options: Some(fs::TransactionOptions { mode: Some(mode) }),
            ..Default::default()
        };
        let op = "BeginTransaction";
        let limit = self.call_timeout;
        let mut client = self.client();
        let call = client.begin_transaction(Self::within(request, limit));
        let expires = "a transaction it opened expires by itself";
        let response = answer_within(limit, expires, call)
            .await
            .map_err(|s| status_error(op, &s))?;
        Ok(response.transaction)
    }

    /// Ends `transaction` without writing, releasing its locks (best effort:
    /// a failed rollback leaves the transaction to expire on its own).
    pub async fn rollback(&self, transaction: Vec<u8>) {
        let request = fs::RollbackRequest {
            database: self.layout.database.clone(),
            transaction,
            ..Default::default()
        };
        // Bounded: a rollback is best effort, and it runs on the way out.
        let limit = ROLLBACK_TIMEOUT.min(self.call_timeout);
        let mut client = self.client();
        let call = client.rollback(Self::within(request, limit));
        let rolled = tokio::time::timeout(limit, call).await;
        match rolled {
            Ok(Ok(_)) => {}
            Ok(Err(status)) => {
                tracing::debug!(code = ?status.code(), "rollback failed; the transaction expires on its own");
            }
            Err(_) => tracing::debug!("rollback timed out; the transaction expires on its own"),
        }
    }
}

/// The options of a read-write transaction that retries `retry`, if any
/// (opened by a read: see [`Read::ReadWrite`](super::Read::ReadWrite)).
pub(super) fn read_write(retry: Option<&[u8]>) -> fs::TransactionOptions {
    fs::TransactionOptions {
        mode: Some(fs::transaction_options::Mode::ReadWrite(
            fs::transaction_options::ReadWrite {
                retry_transaction: retry.map(<[u8]>::to_vec).unwrap_or_default(),
                ..Default::default()
            },
        )),
    }
}
