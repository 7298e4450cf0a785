//! The counting pipeline, one module per stage, in the order a message
//! travels: [`source`] (pull) or [`push`] -> [`aggregator`] -> [`flusher`] (which builds a
//! [`crate::model::batch`] and commits it through a [`crate::store::CounterStore`]) ->
//! [`acker`]; beside them, after the flusher, [`rollup`] refreshes the
//! per-post rollups of the posts the flusher's commits changed, and
//! [`milestones`] delivers the milestones those rollup writes record.
//!
//! Arrows run one way: a stage uses the stages after it (the source hands
//! items to the aggregator and ack handles on; the flusher takes from the
//! aggregator, commits, then acks), never the ones before it. The values
//! that travel ([`crate::model`]) live below the pipeline and the stores.
//!
//! Invariant kept across the stages: a message's ack leaves only after the
//! store reported its effects (or its quarantine record) committed.

pub mod acker;
pub mod aggregator;
pub mod flusher;
pub mod milestones;
pub mod push;
pub mod rollup;
pub mod source;
