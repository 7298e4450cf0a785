//! What a PostgreSQL failure proves: the one table that decides whether a
//! batch is retried (then nacked) or split to quarantine what the server
//! refuses.
//!
//! Invariant: only a data exception raised by the values a batch carried
//! is [`ErrorClass::Content`]; every other failure (contention, a lost
//! connection, a missing table, credentials, an unknown commit outcome) is
//! transient, so nothing else can lead to a quarantine.

use super::causes::with_causes;
use super::session::SessionError;
use crate::store::{Code, ErrorClass, StoreError};

/// A failure of the driver or the pool during `op`, as a [`StoreError`]
/// classed by [`classify`]. Failures without a SQLSTATE (the connection
/// broke, timed out or could not be opened) are transient `Unavailable`:
/// an attempt that was committing when it happened has an unknown outcome,
/// which the batch marker resolves on the next attempt.
pub fn query_error(op: &'static str, error: &tokio_postgres::Error) -> StoreError {
    match error.as_db_error() {
        Some(db) => {
            let sqlstate = db.code().code();
            let (class, code) = classify(sqlstate);
            StoreError {
                op,
                code,
                message: format!("SQLSTATE {sqlstate}: {}", db.message()),
                class,
                transaction: None,
            }
        }
        None => unavailable(op, error),
    }
}

/// A pool failure (no connection within the wait, or opening one failed).
pub fn pool_error(
    op: &'static str,
    error: &deadpool::managed::PoolError<SessionError>,
) -> StoreError {
    match error {
        deadpool::managed::PoolError::Backend(e) => session_error(op, e),
        other => unavailable(op, other),
    }
}

/// A session that could not be opened: the driver's failure as
/// [`query_error`] classes it; a refused cleartext request as
/// `Unauthenticated` and a refused server as `FailedPrecondition` (both
/// transient: an operator fixes them, the content is not at fault).
pub fn session_error(op: &'static str, error: &SessionError) -> StoreError {
    let code = match error {
        SessionError::Driver(e) => return query_error(op, e),
        SessionError::Cleartext { .. } => Code::Unauthenticated,
        SessionError::Refused(_) => Code::FailedPrecondition,
        SessionError::Timeout(_) => Code::DeadlineExceeded,
        SessionError::Socket { .. } | SessionError::NoHost => Code::Unavailable,
    };
    StoreError {
        op,
        code,
        message: error.to_string(),
        class: ErrorClass::Transient,
        transaction: None,
    }
}

/// A call abandoned after `limit`: transient `DeadlineExceeded`, with what
/// became of it (`what`).
pub fn timed_out(op: &'static str, limit: std::time::Duration, what: &str) -> StoreError {
    StoreError {
        op,
        code: Code::DeadlineExceeded,
        message: format!("no answer within {limit:?}: {what}"),
        class: ErrorClass::Transient,
        transaction: None,
    }
}

/// A transient failure that proves nothing: the connection or the pool.
/// The message carries the error's causes (the driver's `Display` says
/// only "error connecting to server"; why is in its source).
pub fn unavailable(op: &'static str, error: impl std::error::Error) -> StoreError {
    StoreError {
        op,
        code: Code::Unavailable,
        message: with_causes(&error),
        class: ErrorClass::Transient,
        transaction: None,
    }
}

/// A failure without an error value: `message` as a transient `Unavailable`.
pub fn unavailable_because(op: &'static str, message: impl Into<String>) -> StoreError {
    StoreError {
        op,
        code: Code::Unavailable,
        message: message.into(),
        class: ErrorClass::Transient,
        transaction: None,
    }
}

/// What a SQLSTATE proves about a batch, and the code name it is reported
/// under (the names [`StoreError::code`] uses for every store, so the
/// flusher's contention rule, [`StoreError::is_contention`], applies as is):
///
/// | SQLSTATE | class | code | why |
/// |---|---|---|---|
/// | `22P05` untranslatable character | Transient | `FailedPrecondition` | a valid id the database's encoding cannot hold: a deployment detail (a database not in UTF-8, which `run` and `setup` refuse), never the content's fault |
/// | `22xxx` data exception, `54000` program limit exceeded | Content | `InvalidArgument` | a value the batch carried cannot be stored (too long for an index entry, out of range, a byte `text` cannot hold): every value in the store's statements comes from the batch, except settings bounded at startup |
/// | `40001` serialization failure, `40P01` deadlock, `55P03` lock not available, `23505` unique violation | Transient | `Aborted` | contention: another transaction won a row this one needed; `23505` is a competing replica inserting the same membership (or an earlier attempt of this batch committing its marker) after this attempt read |
/// | `57014` query canceled | Transient | `DeadlineExceeded` | a statement timeout or the attempt's own cancel |
/// | `08xxx`, `57P0x`, `53xxx` | Transient | `Unavailable` / `ResourceExhausted` | the connection, a server restart, memory, disk or connections ran out |
/// | `28xxx`, `42501` | Transient | `Unauthenticated` / `PermissionDenied` | credentials or grants: an operator fixes them |
/// | `3D000`, `42P01`, `42703`, `42883` | Transient | `NotFound` | no such database, table, column or function: `setup` was not run (configuration, not content) |
/// | `23xxx` other than `23505` | Transient | `FailedPrecondition` | the schema is not the one this build migrated: the store writes every constrained column itself |
/// | anything else | Transient | `Internal` | proves nothing about the content |
///
/// Only a refusal of the content may lead to a quarantine; everything else
/// is retried with backoff, then the batch is nacked and redelivered, so a
/// wrong password or a missing table never quarantines a valid event.
pub fn classify(sqlstate: &str) -> (ErrorClass, Code) {
    use ErrorClass::{Content, Transient};
    let class_of = sqlstate.get(..2).unwrap_or_default();
    match (class_of, sqlstate) {
        (_, "22P05") => (Transient, Code::FailedPrecondition),
        ("22", _) | (_, "54000") => (Content, Code::InvalidArgument),
        (_, "40001" | "40P01" | "55P03" | "23505") => (Transient, Code::Aborted),
        (_, "57014") => (Transient, Code::DeadlineExceeded),
        ("08" | "57", _) => (Transient, Code::Unavailable),
        ("53", _) => (Transient, Code::ResourceExhausted),
        ("28", _) => (Transient, Code::Unauthenticated),
        (_, "42501") => (Transient, Code::PermissionDenied),
        (_, "3D000" | "42P01" | "42703" | "42883") => (Transient, Code::NotFound),
        ("23", _) => (Transient, Code::FailedPrecondition),
        _ => (Transient, Code::Internal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(sqlstate: &str) -> StoreError {
        let (class, code) = classify(sqlstate);
        StoreError {
            op: "Commit",
            code,
            message: String::new(),
            class,
            transaction: None,
        }
    }

    #[test]
    fn serialization_failures_deadlocks_and_lock_timeouts_are_contention() {
        for sqlstate in ["40001", "40P01", "55P03", "23505"] {
            let e = error(sqlstate);
            assert!(e.is_retryable() && e.is_contention(), "{sqlstate}");
        }
    }

    #[test]
    fn only_a_data_exception_proves_the_content_bad() {
        for sqlstate in ["22021", "22003", "22001", "54000"] {
            assert!(error(sqlstate).proves_content(), "{sqlstate}");
        }
        let everything_else = [
            "22P05", "08006", "08001", "57P01", "57014", "53300", "28P01", "42501", "3D000",
            "42P01", "23502", "23514", "25P02", "XX000", "0A000", "42601", "",
        ];
        for sqlstate in everything_else {
            let e = error(sqlstate);
            assert!(e.is_retryable() && !e.is_contention(), "{sqlstate}");
        }
    }
}
