//! The rollup refresher, beside the pipeline after the flusher: keeps one
//! rollup per post (`counts/{post}`, `post_counts`) equal to the sum of the
//! post's counter shards, refreshing the posts this process changed
//! ([`Marks`], filled by the flusher once per committed batch) at most once
//! per `interval` per post fleet-wide, in a few shared round trips per
//! cycle: reads of the due posts' shards and rollups (each at one read
//! time), then write calls of the rollups to write, each on its own
//! condition (small calls while a cycle is young, large ones once it has
//! run half its interval: `RollupConfig::small_posts_per_read`).
//!
//! Invariants (how each is kept is in `ARCHITECTURE.md`, "The rollups"):
//! - nothing here runs inside a batch's transaction, and a commit gains no
//!   round trip: the flusher only marks;
//! - a value written is the sum of the post's shards at the read time
//!   written with it (`asOf`), and only over the rollup that was read, so
//!   `asOf` never goes backwards;
//! - a mark is cleared only when a rollup as of a time that includes every
//!   change it marks is stored (written by this refresh, or found), so a
//!   lost race, a lost answer or a failing store leaves the post marked and
//!   it is read again; a mark lost with its process (a kill) is found again
//!   by the sweep of recently changed posts when a process starts;
//! - a rollup younger than `interval` (less the slack) is not written again
//!   (the refresh is deferred until it is that old), so replicas together
//!   write one post at most about once per interval;
//! - with milestones on, a write whose total reaches a milestone above the
//!   rollup read (and above the highest one recorded) creates its record
//!   in the same atomic write ([`crate::store::milestone::crossed`]): a
//!   refresh that changes no total (a replay) decides nothing.
//!
//! The settings are `config/rollup.rs`'s. The parts: `marks.rs` (the posts waiting),
//! `decide.rs` (one post's decision, pure), `refresher.rs` (one process's
//! refresher), `run.rs` (its life: sweep, cycles, drain), `round.rs` (one
//! cycle's reads and writes), `records.rs` (due records taken over and
//! cleared), `on_demand.rs` (the operator tools' refreshes).

mod decide;
mod marks;
mod on_demand;
mod records;
mod refresher;
mod round;
mod run;

pub use crate::config::{RollupConfig, TAKEOVER_MARGIN};
pub use decide::{decide, Decision, PlannedWrite};
pub use marks::{Due, Marks, Settled};
pub use on_demand::{refresh_all, refresh_existing};
pub use refresher::Refresher;
pub use round::{CycleReport, PEEK_ABOVE};
pub use run::SWEEP_ATTEMPTS;

#[cfg(test)]
mod tests;
