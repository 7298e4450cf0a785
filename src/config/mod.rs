//! Typed, validated settings of `hotcount run`, and where the services are.
//!
//! Invariant: a [`Config`] only exists validated ([`RunArgs::validate`]);
//! every duration and size carries its unit in its name. Each component
//! owns its flags (one clap group, flattened into [`RunArgs`]), their
//! defaults and their validation, which builds the component's settings
//! that [`Config`] holds: `identity.rs` (subscription, consumer name),
//! `source.rs` (pull), `push.rs` (push delivery), `flush.rs` (batching
//! and commits), `store_writes.rs` (counter shards, markers, call
//! timeout), `rollup.rs`, `milestones.rs`, `erasure.rs` (tombstones),
//! `observability.rs` (metrics endpoint, stall watch, logs);
//! `run_args.rs` flattens them, `validate.rs` composes their checks. Also
//! here: the store flags every command shares (`store.rs`), secrets and
//! `--…-file` flags (`secret.rs`), Pub/Sub names (`pubsub_names.rs`).

mod erasure;
mod flush;
mod identity;
mod milestones;
mod observability;
mod pubsub_names;
mod push;
mod rollup;
mod run_args;
mod secret;
mod source;
mod store;
mod store_writes;
mod validate;

pub use erasure::{ErasureConfig, ErasureFlags, UserHashKeyFlags};
pub use flush::{FlushConfig, FlushFlags, FlushSettings, Strategy};
pub use identity::{Identity, IdentityFlags};
pub use milestones::{
    parse_milestones, DispatchConfig, MilestoneConfig, MilestoneFlags, MilestoneSettings,
    DEFAULT_MILESTONES,
};
pub use observability::{metrics_addr, Observability, ObservabilityFlags};
pub use pubsub_names::{check_pubsub_id, subscription_name};
pub use push::{
    AuthConfig, Delivery, GoogleAuth, PushAuthMode, PushConfig, PushFlags, CLOUD_RUN_SERVICE_ENV,
    DEFAULT_PUSH_JWKS_URL, MIN_ACK_DEADLINE,
};
pub use rollup::{RollupConfig, RollupFlags, RollupSettings, TAKEOVER_MARGIN};
pub use run_args::RunArgs;
pub use secret::{read_secret_file, FileParser, FromFile, Secret};
pub use source::{SourceConfig, SourceFlags};
pub use store::{
    Endpoints, StoreFlags, StoreLocation, StoreLocationParser, Target, TargetFlags,
    DEFAULT_COUNTER_SHARDS, DEFAULT_COUNTER_SHARD_TARGET_WRITES_PER_SEC,
};
pub use store_writes::{StoreConfig, StoreWriteFlags};

/// Validated settings: what each component's flags validated into, and
/// the names several components share.
#[derive(Clone, Debug)]
pub struct Config {
    /// The store, project, database and collection prefix.
    pub target: Target,
    /// Full subscription name (the source's, the push endpoint's, and the
    /// one whose dead-letter policy and ack deadline are read at start).
    pub subscription: String,
    /// Consumer name (the store's, and the milestone webhook's keys).
    pub consumer: String,
    /// The pull source's settings (read with pull delivery only).
    pub source: SourceConfig,
    /// With `--delivery push`, the push endpoint's settings; `None` = pull.
    pub push: Option<PushConfig>,
    /// The aggregator's shape and the flusher's settings.
    pub flush: FlushSettings,
    /// The store's settings, call timeout and marker cleanup.
    pub store: StoreConfig,
    /// Rollup refreshes ([`Config::rollup`] adds the counter shards).
    pub rollups: RollupSettings,
    /// The `--milestones` given and milestone notifications.
    pub milestones: MilestoneConfig,
    /// The tombstone check of erased users.
    pub erasure: ErasureConfig,
    /// The metrics endpoint and the stall threshold.
    pub observability: Observability,
}

/// A setting that is out of range, with what is allowed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid --{flag}: {reason}")]
pub struct ConfigError {
    /// The flag.
    pub flag: &'static str,
    /// What is wrong and what is allowed.
    pub reason: String,
}

fn range<T: PartialOrd + std::fmt::Display>(
    flag: &'static str,
    v: T,
    lo: T,
    hi: T,
) -> Result<T, ConfigError> {
    if v < lo || v > hi {
        return Err(ConfigError {
            flag,
            reason: format!("{v} is outside {lo}..={hi}"),
        });
    }
    Ok(v)
}

#[cfg(test)]
mod tests;
