//! hotcount: counts likes on posts that can go viral, exactly once, from
//! at-least-once Pub/Sub delivery into sharded Firestore counters.
//!
//! # Layout
//! - [`event`]: the like event schema v1, parsing (a fast path for the common
//!   shape, the general decoder for the rest) and validation -> [`event::Poison`].
//! - [`pipeline`]: the stages in the order a message travels:
//!   - [`source`](pipeline::source): Pub/Sub StreamingPull -> (event or
//!     poison, ack handle); or [`push`](pipeline::push): `POST
//!     /pubsub/push` (authenticated) -> (event or poison, a handle whose
//!     ack is the 204);
//!   - [`aggregator`](pipeline::aggregator): sharded in-memory buffers by
//!     (post, user); pure, synchronous;
//!   - [`flusher`](pipeline::flusher): when to flush; commit with retry and
//!     isolation; hands acks on;
//!   - [`acker`](pipeline::acker): acks exactly the messages of a committed
//!     batch;
//!   - beside them, [`rollup`](pipeline::rollup) (one live count per post)
//!     and [`milestones`](pipeline::milestones) (the webhook dispatcher of
//!     the milestones the rollup writes record).
//! - [`model`]: the values that travel, below both the pipeline and the
//!   stores: [`item`](model::item) (a message parsed: event or poison),
//!   [`batch`](model::batch) (a flush's events per (post, user) and the
//!   apply rules) and [`poison`](model::poison) (the bounded quarantine
//!   record).
//! - [`store`]: the [`store::CounterStore`] trait; the Firestore, PostgreSQL
//!   and in-memory stores; the data-format version kept with the data
//!   ([`store::format`]).
//! - [`service`]: wires the stages and shuts them down in order.
//! - [`config`]: typed, validated settings (units in names); [`connect`]:
//!   clients for Google or the emulators, and the database `--store`
//!   selects (a PostgreSQL one only once `setup` migrated it).
//! - [`telemetry`] (a leaf): every metric name and HELP text, one
//!   `prometheus-client` registry, and tracing setup; [`http`]: the
//!   `/metrics`, `/healthz` and `/readyz` endpoint.
//! - Beside the pipeline, the operator commands ([`ops`]): `setup`,
//!   `reconcile`, `replay`, `dlq`, `quarantine`, `milestones` and `users`.
//!
//! # Invariants
//! - An ack leaves the service only for a message whose effects, or whose
//!   quarantine record, are committed ([`acker`](pipeline::acker), called only by [`flusher`](pipeline::flusher)
//!   after the store reports that part of the batch committed), or for an
//!   event of an erased user, dropped by design (`flusher::Tombstones`); a
//!   message whose record the store refuses is nacked.
//! - A (post, user) contributes at most +1 to its post, whatever is
//!   delivered, replayed or retried; its contribution always equals its
//!   latest `liked` ([`Batch::plan`](model::batch::Batch::plan), read and written in one
//!   transaction by [`store::firestore`]).
//! - sum(counter shards of p) == number of membership documents of p with
//!   `liked == true`, at every commit boundary (deltas and memberships are
//!   written in the same commit).
//! - Memory is bounded: server-side flow control caps the messages and bytes
//!   each stream holds ([`source`](pipeline::source)); with push,
//!   `--push-max-in-flight` slots held until each handle is settled
//!   ([`push`](pipeline::push)).
//! - Two batches in flight never contend inside one process: a (post, user)
//!   maps to one aggregator shard, a shard has one batch in flight
//!   ([`flusher`](pipeline::flusher)), and batches in flight on one post increment distinct
//!   counter shards ([`store::counter_shards`]).
//! - A milestone is decided once per post, ever, in the rollup write that
//!   first shows it ([`store::milestone`]), and called for under a lease
//!   with the same `Idempotency-Key` every time ([`pipeline::milestones`]).
//! - A build writes nothing to a store whose data format is newer than it
//!   knows, and writes a record older builds would not check (an erasure
//!   tombstone) only once the stored format says none runs
//!   ([`store::format`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod connect;
pub mod event;
pub mod http;
pub mod model;
pub mod ops;
pub mod pipeline;
pub mod service;
pub mod store;
pub mod telemetry;
