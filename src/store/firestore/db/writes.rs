//! The writes of the [`FirestoreDb`] handle: Commit (in a transaction or
//! on each write's preconditions alone, its writes built or already
//! encoded) and BatchWrite (each write applied on its own).
//!
//! Invariants: a write whose answer is lost says its outcome is unknown
//! (a batch's marker tells its next attempt); a transaction whose Commit
//! fails other than with ABORTED (which ended it) is rolled back, best
//! effort, and named in the error, so its locks do not outlive the attempt.

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost::Message;
use gcloud_sdk::prost_types::Timestamp;
use gcloud_sdk::tonic::{Code as GrpcCode, Status};

use super::super::errors::status_error;
use super::super::wire;
use super::deadline::answer_within;
use super::FirestoreDb;
use crate::store::{OpenedTransaction, StoreError};

impl FirestoreDb {
    /// Applies `writes` with BatchWrite: each on its own (not atomically),
    /// with its own precondition. Returns each write's status, in order
    /// (`Ok` when it applied); an error of the whole call leaves every
    /// write's outcome unknown.
    pub async fn batch_write(
        &self,
        writes: Vec<fs::Write>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut request = wire::EncodedCommit::new(&self.layout.database, 0);
        for write in &writes {
            request.push_encoded(write.encoded_len(), |buf| write.encode_raw(buf));
        }
        self.batch_write_encoded(request).await
    }

    /// [`Self::batch_write`] of writes already encoded (a refresh's
    /// rollups: see `codec::rollup_writes_request`).
    pub async fn batch_write_encoded(
        &self,
        request: wire::EncodedCommit,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let op = "BatchWrite";
        let count = request.writes();
        let limit = self.call_timeout;
        let mut channel = self.channel();
        let call = wire::batch_write(&mut channel, request.finish(&[]), limit);
        let unknown = "each write's outcome is unknown (a later refresh settles it)";
        let response = answer_within(limit, unknown, call)
            .await
            .map_err(|s| status_error(op, &s))?;
        if response.status.len() != count {
            return Err(StoreError::internal(
                op,
                "not one status per write in the BatchWrite response",
            ));
        }
        Ok(response
            .status
            .into_iter()
            .map(|status| match GrpcCode::from(status.code) {
                GrpcCode::Ok => Ok(()),
                code => Err(status_error(op, &Status::new(code, status.message))),
            })
            .collect())
    }

    /// Commits `writes`, in `transaction` when given (else each write's
    /// preconditions are the only condition). A transaction whose Commit
    /// fails other than with ABORTED (which ended it) may still be open, its
    /// answer lost on the wire: it is rolled back (best effort; a commit
    /// that did apply makes the rollback fail, harmlessly) and named in the
    /// error.
    pub async fn commit(
        &self,
        writes: Vec<wire::Write>,
        transaction: Option<Vec<u8>>,
    ) -> Result<(), StoreError> {
        let mut request = wire::EncodedCommit::new(&self.layout.database, 0);
        for write in &writes {
            request.push(write);
        }
        self.commit_encoded(request, transaction).await.map(drop)
    }

    /// [`Self::commit`] of writes already encoded (the store's batches:
    /// see `codec::encode_writes`); returns the commit time, when the
    /// server sent one.
    pub async fn commit_encoded(
        &self,
        request: wire::EncodedCommit,
        transaction: Option<Vec<u8>>,
    ) -> Result<Option<Timestamp>, StoreError> {
        let bytes = request.finish(transaction.as_deref().unwrap_or_default());
        let limit = self.call_timeout;
        let mut channel = self.channel();
        let unknown = "the Commit may have applied, so its outcome is unknown (the batch marker tells the next attempt)";
        let call = wire::commit(&mut channel, bytes, limit);
        let status = match answer_within(limit, unknown, call).await {
            Ok(response) => return Ok(response.commit_time),
            Err(status) => status,
        };
        let mut error = status_error("Commit", &status);
        if let Some(transaction) = transaction {
            if status.code() != GrpcCode::Aborted {
                self.rollback(transaction.clone()).await;
            }
            error.transaction = Some(OpenedTransaction::new(transaction));
        }
        Err(error)
    }
}
