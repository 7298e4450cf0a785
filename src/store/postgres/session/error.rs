//! Why no session could be opened: one error type for every step
//! (socket, TLS, authentication, the server's report, the timeout).
//!
//! Invariants: a cleartext-password request refused by the guard and a
//! server hotcount does not run on have variants of their own
//! ([`SessionError::Cleartext`], [`SessionError::Refused`]), so a caller
//! tells them from a failure that trying another host or again may cure;
//! the driver's failure is shown with its causes.

use std::io;
use std::time::Duration;

use super::server::ServerRefusal;
use crate::store::postgres::causes::with_causes;

/// Why no session could be opened.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The driver failed (the server refused, TLS failed, a broken stream).
    #[error("{}", with_causes(.0))]
    Driver(tokio_postgres::Error),
    /// No socket to `host`.
    #[error("connecting to {host}: {error}")]
    Socket {
        /// The host and port tried.
        host: String,
        /// Why.
        error: io::Error,
    },
    /// Opening took longer than the connect timeout.
    #[error("no session within {0:?} (the server does not answer)")]
    Timeout(Duration),
    /// The server asked for the password in cleartext where that is refused.
    #[error("the server asked for the password in cleartext, which sslmode={mode} does not protect (the server is not authenticated, so a machine in the middle could be the one asking); refused before sending it: use sslmode=verify-full with sslrootcert=..., or scram-sha-256 authentication on the server (sslmode=disable only on a network you trust)")]
    Cleartext {
        /// The `sslmode` in force.
        mode: &'static str,
    },
    /// The server or database is not one hotcount runs on.
    #[error(transparent)]
    Refused(ServerRefusal),
    /// The connection string names no host.
    #[error("the connection string names no host")]
    NoHost,
}
