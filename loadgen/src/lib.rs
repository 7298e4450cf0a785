//! hotcount-loadgen: generates like workloads with a known exact answer,
//! publishes them to Pub/Sub, and checks and measures what hotcount wrote.
//!
//! # Layout
//! - [`workload`]: deterministic Zipf workloads with duplicates and poison.
//! - [`truth`]: the exact expected count per post, and its JSON file.
//! - [`publish`]: paced, bounded, cancellable publishing with a report.
//! - [`readback`]: reads counter shards and memberships back.
//! - [`verify`]: compares Firestore with the truth and checks the shard invariant.
//! - [`report`]: end-to-end latency and throughput into Markdown and a PNG.
//! - [`chart`]: the dependency-light PNG percentile plot.
//!
//! # Invariants
//! - The truth depends only on the generated events, never on the service's code.
//! - A publish that fails after the client's retries is counted and reported,
//!   never dropped silently.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chart;
pub mod publish;
pub mod readback;
pub mod report;
pub mod truth;
pub mod verify;
pub mod workload;

pub use truth::Truth;
pub use workload::{generate, Workload, WorkloadConfig};
