//! The operator commands, beside the pipeline rather than between its
//! stages: they use the store and the Pub/Sub clients the way the service
//! does, and none of them is on the path of a live message.
//!
//! - [`setup`]: creates the topics, subscriptions and dead-letter topic or
//!   brings them in line, grants the roles on them, and applies the
//!   PostgreSQL schema migrations (idempotent; every change reported).
//! - [`reconcile`]: counter shards vs liked memberships, reported and repaired.
//! - [`replay`]: a time window re-read through an isolated, Seeked subscription.
//! - [`dlq`]: dead letters inspected and replayed to the main topic.
//! - [`quarantine`]: quarantine records listed, shown and re-driven.
//! - [`live`]: `count --live`, each change of posts' rollups as it happens.
//! - [`milestones`]: milestone records listed, and given-up ones retried.
//! - [`rollups`]: every rollup brought to the sum of every counter shard
//!   its post has (after an upgrade from a build before rollups).
//! - [`users`]: one user's data exported (an access request) or erased
//!   exactly (through the pipeline's commit).
//!
//! Each runs on the store `--store` selects, through one code path: a
//! trait implemented for both stores (`reconcile::Reconcilable`), or a
//! dispatch on the selected database or store (`quarantine`, `replay`).
//!
//! Invariant: each writes only through the same transactions and
//! preconditions as the pipeline (replay through `CounterStore::commit`
//! under the service's consumer name), so running one beside live
//! consumers never breaks the counting invariants.

pub mod dlq;
pub mod live;
pub mod milestones;
pub mod quarantine;
pub mod reconcile;
pub mod replay;
pub mod rollups;
pub mod setup;
pub mod users;
