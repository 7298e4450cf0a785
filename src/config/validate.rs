//! Validation of `hotcount run`'s flags into a [`Config`]: each group
//! checks its own flags; this composes them, passing on what one group
//! needs of another (the project, the subscription, whether rollups are
//! on, the store's call timeout), each validated before it is used.
//!
//! Invariant: the first problem found is reported with its flag and what
//! is allowed; nothing else builds a [`Config`].

use super::identity::Identity;
use super::push::CLOUD_RUN_SERVICE_ENV;
use super::{Config, ConfigError, RunArgs, Target};

impl RunArgs {
    /// Checks every setting; the first problem is reported with its flag.
    /// Reads whether this runs on Cloud Run ([`CLOUD_RUN_SERVICE_ENV`]).
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let on_cloud_run = std::env::var_os(CLOUD_RUN_SERVICE_ENV).is_some_and(|v| !v.is_empty());
        self.validate_where(on_cloud_run)
    }

    /// [`RunArgs::validate`] on Cloud Run (`on_cloud_run`) or off it.
    pub(super) fn validate_where(&self, on_cloud_run: bool) -> Result<Config, ConfigError> {
        let target = checked_target(&self.target)?;
        let Identity {
            subscription,
            consumer,
        } = self.identity.validate(&target.project)?;
        let push = self.push.validate(&subscription, on_cloud_run)?;
        let flush = self.flush.validate()?;
        let source = self.source.validate(&subscription)?;
        let rollups = self.rollups.validate()?;
        let rollups_on = rollups.interval.is_some();
        let store = self.store_writes.validate(&consumer, rollups_on)?;
        // After the store's: the stall threshold is bounded by its call timeout.
        let observability = self.observability.validate(store.call_timeout)?;
        let milestones = self.milestones.validate(rollups_on)?;
        let erasure = self.erasure.validate()?;
        Ok(Config {
            target,
            subscription,
            consumer,
            source,
            push,
            flush,
            store,
            rollups,
            milestones,
            erasure,
            observability,
        })
    }
}

/// The target `run` writes: a project id, a collection prefix without `/`.
fn checked_target(target: &Target) -> Result<Target, ConfigError> {
    if target.project.is_empty() || target.project.contains('/') {
        return Err(ConfigError {
            flag: "project",
            reason: "must be a project id".into(),
        });
    }
    if target.collection_prefix.contains('/') {
        return Err(ConfigError {
            flag: "collection-prefix",
            reason: "must not contain '/'".into(),
        });
    }
    Ok(target.clone())
}
