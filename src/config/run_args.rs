//! `hotcount run`'s flags, as given on the command line or in the
//! environment ([`RunArgs`]: one group per component, flattened), and the
//! flags that reproduce them.
//!
//! Invariant: every flag is declared once, in its component's group (its
//! name, env var, default and help), and [`RunArgs::to_flags`] reproduces
//! every one.

use super::erasure::ErasureFlags;
use super::flush::FlushFlags;
use super::identity::IdentityFlags;
use super::milestones::MilestoneFlags;
use super::observability::ObservabilityFlags;
use super::push::PushFlags;
use super::rollup::RollupFlags;
use super::source::SourceFlags;
use super::store::Target;
use super::store_writes::StoreWriteFlags;

/// Settings of `hotcount run`, as given on the command line or in the
/// environment: each component's flags, listed under its own heading.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
pub struct RunArgs {
    /// Target project, database and collections.
    #[serde(flatten)]
    #[command(flatten, next_help_heading = "Store")]
    pub target: Target,
    /// Subscription and consumer name.
    #[serde(flatten)]
    #[command(flatten)]
    pub identity: IdentityFlags,
    /// StreamingPull streams and flow control.
    #[serde(flatten)]
    #[command(flatten)]
    pub source: SourceFlags,
    /// Delivery and the push endpoint.
    #[serde(flatten)]
    #[command(flatten)]
    pub push: PushFlags,
    /// Batching, commits in flight, retries, the shutdown deadline.
    #[serde(flatten)]
    #[command(flatten)]
    pub flush: FlushFlags,
    /// Counter shards, batch markers, store call timeout.
    #[serde(flatten)]
    #[command(flatten)]
    pub store_writes: StoreWriteFlags,
    /// Rollup refreshes and the start-up sweep.
    #[serde(flatten)]
    #[command(flatten)]
    pub rollups: RollupFlags,
    /// Milestones and their webhook.
    #[serde(flatten)]
    #[command(flatten)]
    pub milestones: MilestoneFlags,
    /// The erased users' tombstone check.
    #[serde(flatten)]
    #[command(flatten)]
    pub erasure: ErasureFlags,
    /// Metrics and health endpoint, stall watch, logs.
    #[serde(flatten)]
    #[command(flatten)]
    pub observability: ObservabilityFlags,
}

impl RunArgs {
    /// The `hotcount run` flags that reproduce these settings: every flag
    /// of [`RunArgs`], found by clap's own description of it (so a new flag
    /// is never forgotten), with its value from these settings.
    pub fn to_flags(&self) -> Vec<String> {
        use clap::Args as _;
        let values = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(values)) => values,
            _ => serde_json::Map::new(),
        };
        let command = RunArgs::augment_args(clap::Command::new("run"));
        let mut flags = Vec::new();
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else {
                continue;
            };
            match values.get(arg.get_id().as_str()) {
                Some(serde_json::Value::Bool(true)) => flags.push(format!("--{long}")),
                Some(serde_json::Value::String(v)) => flags.push(format!("--{long}={v}")),
                Some(serde_json::Value::Number(v)) => flags.push(format!("--{long}={v}")),
                _ => {}
            }
        }
        flags
    }
}
