//! The request size limit of Google's front end, one rule for every RPC:
//! the unary and streaming reads of [`super::grpc`] and each request of a
//! Listen stream ([`super::listen`]).
//!
//! Invariant: a request is refused only when its encoded message is larger
//! than [`MAX_REQUEST_BYTES`], with the status and message Google gives.

use tonic::Status;

/// Largest request Firestore accepts: 10 MiB of encoded request message
/// (<https://firebase.google.com/docs/firestore/quotas>).
pub(super) const MAX_REQUEST_BYTES: usize = 10 * 1024 * 1024;

/// `Ok` if a request of `encoded_len` bytes is within [`MAX_REQUEST_BYTES`];
/// otherwise the `InvalidArgument` Google's front end answers with.
pub(super) fn check_request_size(encoded_len: usize) -> Result<(), Status> {
    if encoded_len > MAX_REQUEST_BYTES {
        return Err(Status::invalid_argument(format!(
            "Request payload size exceeds the limit: {MAX_REQUEST_BYTES} bytes."
        )));
    }
    Ok(())
}
