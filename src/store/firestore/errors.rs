//! What a Firestore failure proves: the one table that decides whether a
//! batch is retried (then nacked) or split to quarantine what the store
//! refuses.
//!
//! Invariant: only a refusal of the content is [`ErrorClass::Content`];
//! nothing else can lead to a quarantine.

use gcloud_sdk::tonic::{Code, Status};

use crate::store::{self, ErrorClass, StoreError};

/// A gRPC failure of `op` as a [`StoreError`], classed by [`classify`].
pub fn status_error(op: &'static str, status: &Status) -> StoreError {
    StoreError {
        op,
        code: store_code(status.code()),
        message: status.message().to_string(),
        class: classify(status.code(), status.message()),
        transaction: None,
    }
}

/// What a gRPC failure proves about a batch: the one table of it.
///
/// | code | class | why |
/// |---|---|---|
/// | `INVALID_ARGUMENT` | Content | the request's names or values are refused (reserved name, size, depth) |
/// | `INVALID_ARGUMENT` "transaction has expired / is no longer valid" | Transient | the transaction outlived its lease (a stall); Google's SDKs retry the whole transaction |
/// | `ABORTED` | Transient | contention: another transaction won the lock |
/// | `FAILED_PRECONDITION`, `ALREADY_EXISTS` | Transient | a precondition on what this transaction read failed: another writer got in between; re-read |
/// | `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `CANCELLED`, `UNKNOWN`, `INTERNAL` | Transient | the call may or may not have applied; the batch marker resolves it |
/// | `RESOURCE_EXHAUSTED` | Transient | quota or rate: back off |
/// | `UNAUTHENTICATED`, `PERMISSION_DENIED` | Transient | credentials or IAM: an operator fixes them; the content is not at fault |
/// | `NOT_FOUND` | Transient | the database (or project) is missing: configuration, not content |
/// | `OUT_OF_RANGE`, `UNIMPLEMENTED`, `DATA_LOSS`, `OK` | Transient | proves nothing about the content |
///
/// Only a refusal of the content may lead to a quarantine; everything else
/// is retried with backoff, then the batch is nacked and Pub/Sub redelivers
/// it, so a wrong credential or a missing database never quarantines a
/// valid event.
pub fn classify(code: Code, message: &str) -> ErrorClass {
    match code {
        Code::InvalidArgument if !is_expired_transaction(message) => ErrorClass::Content,
        _ => ErrorClass::Transient,
    }
}

/// gRPC's code as the store's (the same numbering: `google.rpc.Code`).
pub fn store_code(code: Code) -> store::Code {
    store::Code::from_number(code as i32)
}

/// Whether `message` is Firestore's "transaction expired" INVALID_ARGUMENT.
fn is_expired_transaction(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("transaction has expired")
        || message.contains("transaction is no longer valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contention_and_unavailability_are_retryable() {
        assert!(status_error("Commit", &Status::aborted("x")).is_retryable());
        assert!(status_error("Commit", &Status::unavailable("x")).is_retryable());
        assert!(!status_error("Commit", &Status::invalid_argument("x")).is_retryable());
    }

    #[test]
    fn only_a_refused_content_is_isolated_every_other_code_is_retried() {
        let every_code = (0..=16).map(Code::from_i32);
        for code in every_code {
            let error = status_error("Commit", &Status::new(code, "x"));
            let expected = if code == Code::InvalidArgument {
                ErrorClass::Content
            } else {
                ErrorClass::Transient
            };
            assert_eq!(error.class, expected, "{code:?}");
            assert_eq!(error.is_retryable(), expected == ErrorClass::Transient);
        }
    }

    #[test]
    fn every_grpc_code_keeps_its_name_as_a_store_code() {
        for n in 0..=16 {
            let grpc = Code::from_i32(n);
            assert_eq!(format!("{:?}", store_code(grpc)), format!("{grpc:?}"));
        }
        assert_eq!(store::Code::from_number(99), store::Code::Unknown);
    }

    #[test]
    fn expired_transaction_is_retried_not_quarantined() {
        let expired = Status::invalid_argument(
            "The referenced transaction has expired or is no longer valid.",
        );
        assert!(status_error("Commit", &expired).is_retryable());
        assert!(
            !status_error("Commit", &Status::invalid_argument("bad document id")).is_retryable()
        );
    }
}
