//! Which messages a replica consumes and under which name it writes: the
//! flags [`IdentityFlags`] (`--subscription`, `--consumer`), validated
//! into [`Identity`].
//!
//! Invariants: the subscription is a full name Pub/Sub accepts; the
//! consumer name is a safe document id without `:` (it namespaces batch
//! markers, quarantine records and webhook idempotency keys).

use super::pubsub_names::subscription_name;
use super::ConfigError;
use crate::event::{check_id, MAX_EVENT_ID_BYTES};

/// `hotcount run`'s subscription and consumer name.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
#[command(next_help_heading = "Subscription and consumer")]
pub struct IdentityFlags {
    /// Subscription id (or full `projects/*/subscriptions/*` name).
    #[arg(long, env = "HOTCOUNT_SUBSCRIPTION", default_value = "likes-hotcount")]
    pub subscription: String,
    /// Consumer name: namespaces batch markers and quarantine records.
    /// Replicas on one subscription share it; another subscription needs another.
    #[arg(long, env = "HOTCOUNT_CONSUMER", default_value = "hotcount")]
    pub consumer: String,
}

/// What the identity flags validate into.
#[derive(Clone, Debug)]
pub struct Identity {
    /// Full subscription name.
    pub subscription: String,
    /// Consumer name.
    pub consumer: String,
}

impl IdentityFlags {
    /// Checks the consumer name, and the subscription as a full name (an
    /// id is taken to be in `project`).
    pub fn validate(&self, project: &str) -> Result<Identity, ConfigError> {
        check_id(&self.consumer, MAX_EVENT_ID_BYTES).map_err(|p| ConfigError {
            flag: "consumer",
            reason: format!("not a safe document id: {p}"),
        })?;
        if self.consumer.contains(':') {
            return Err(ConfigError {
                flag: "consumer",
                reason: "must not contain ':'".into(),
            });
        }
        let subscription =
            subscription_name(project, &self.subscription).map_err(|reason| ConfigError {
                flag: "subscription",
                reason,
            })?;
        Ok(Identity {
            subscription,
            consumer: self.consumer.clone(),
        })
    }
}
