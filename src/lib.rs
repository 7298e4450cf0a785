//! hotcount: counts likes on posts that can go viral, exactly once, from
//! at-least-once Pub/Sub delivery into sharded Firestore counters.
//!
//! # Layout
//! The modules follow the pipeline:
//! - [`config`]: typed, validated settings (units in names).
//! - [`event`]: the like event schema v1, parsing (a fast path for the common
//!   shape, the general decoder for the rest) and validation -> [`event::Poison`].
//! - [`source`]: Pub/Sub StreamingPull -> (event or poison, ack handle).
//! - [`aggregator`]: sharded in-memory buffers by (post, user); pure, synchronous.
//! - [`poison`]: the quarantine record of a message that cannot be counted,
//!   bounded so the store accepts it.
//! - [`batch`]: a flush's events per (post, user) and the apply rules.
//! - [`flusher`]: when to flush; commit with retry and isolation; hands acks on.
//! - [`store`]: the [`store::CounterStore`] trait, Firestore and in-memory stores.
//! - [`acker`]: acks exactly the messages of a committed batch.
//! - [`service`]: wires the stages and shuts them down in order.
//! - [`connect`]: clients for Google or the emulators.
//! - [`telemetry`]: every metric name, the Prometheus exposition, and tracing setup.
//! - [`http`]: the `/metrics`, `/healthz` and `/readyz` endpoint (and the
//!   minimal client that scrapes it).
//!
//! Beside the pipeline, the operator commands ([`ops`]): `setup`,
//! `reconcile`, `replay`, `dlq` and `quarantine`.
//!
//! # Invariants
//! - An ack leaves the service only for a message whose effects, or whose
//!   quarantine record, are committed ([`acker`], called only by [`flusher`]
//!   after the store reports that part of the batch committed); a message
//!   whose record the store refuses is nacked.
//! - A (post, user) contributes at most +1 to its post, whatever is
//!   delivered, replayed or retried; its contribution always equals its
//!   latest `liked` ([`batch::Batch::plan`], read and written in one
//!   transaction by [`store::firestore`]).
//! - sum(counter shards of p) == number of membership documents of p with
//!   `liked == true`, at every commit boundary (deltas and memberships are
//!   written in the same commit).
//! - Memory is bounded: server-side flow control caps the messages and bytes
//!   each stream holds ([`source`]).
//! - Two batches in flight never contend inside one process: a (post, user)
//!   maps to one aggregator shard, a shard has one batch in flight
//!   ([`flusher`]), and batches in flight on one post increment distinct
//!   counter shards ([`store::counter_shards`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod acker;
pub mod aggregator;
pub mod batch;
pub mod config;
pub mod connect;
pub mod event;
pub mod flusher;
pub mod http;
pub mod ops;
pub mod poison;
pub mod service;
pub mod source;
pub mod store;
pub mod telemetry;
