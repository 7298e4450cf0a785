//! Why a `bench`, `chaos` or `demo` run could not be carried out: the one
//! error those three runs return, and the [`crate::stage`] and
//! [`crate::consumer`] they are built from.
//!
//! Invariant: a wrong count is never a [`RunError`]; it is the run's verdict
//! ([`crate::bench::Verdict`], [`crate::chaos::ChaosSummary::is_success`],
//! [`crate::demo::DemoSummary::is_success`]).

use crate::{publish, report, verify};

/// A run failed before it could give a verdict.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Emulators, setup, clients, the consumer (task or child process).
    #[error("starting: {0}")]
    Start(String),
    /// Settings.
    #[error("invalid settings: {0}")]
    Invalid(String),
    /// Publishing.
    #[error(transparent)]
    Publish(#[from] publish::PublishError),
    /// Verifying, or reading counts and memberships back.
    #[error(transparent)]
    Verify(#[from] verify::VerifyError),
    /// Writing the report (`demo`).
    #[error(transparent)]
    Report(#[from] report::ReportError),
}

impl RunError {
    /// Whether running again may succeed.
    ///
    /// - `Verify`: as the wrapped error says.
    /// - `Publish`: no; a configuration or client-construction failure
    ///   does not heal by retrying.
    /// - `Start`: yes; an emulator, a port or a child process may start on a
    ///   second try.
    /// - `Invalid`: no; the same settings fail the same way.
    /// - `Report`: no; the runs only write files and encode charts there,
    ///   which a retry does not heal.
    pub fn is_retryable(&self) -> bool {
        match self {
            RunError::Verify(e) => e.is_retryable(),
            RunError::Start(_) => true,
            RunError::Invalid(_) | RunError::Report(_) | RunError::Publish(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_start_and_retryable_inner_errors_are_retryable() {
        assert!(RunError::Start("emulators: address in use".into()).is_retryable());
        assert!(!RunError::Invalid("need at least one consumer".into()).is_retryable());
        assert!(!RunError::Publish(publish::PublishError::Options("x".into())).is_retryable());
        let io = report::ReportError::Io {
            path: "report.md".into(),
            source: std::io::Error::other("disk full"),
        };
        assert!(!RunError::Report(io).is_retryable());
    }

    #[test]
    fn display_names_the_stage() {
        assert_eq!(RunError::Start("seek".into()).to_string(), "starting: seek");
        assert_eq!(
            RunError::Invalid("no hotcount binary".into()).to_string(),
            "invalid settings: no hotcount binary"
        );
        let publish = publish::PublishError::Options("max_in_flight is 0".into());
        assert_eq!(
            RunError::from(publish).to_string(),
            "invalid publish options: max_in_flight is 0"
        );
    }
}
