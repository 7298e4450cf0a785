//! hotcount-loadgen: generates like workloads with a known exact answer,
//! publishes them to Pub/Sub, and checks and measures what hotcount wrote.
//!
//! # Layout
//! - [`workload`]: deterministic Zipf workloads with duplicates and poison.
//! - [`truth`]: the exact expected count per post, and its JSON file.
//! - [`publish`]: paced, bounded, cancellable publishing with a report.
//! - [`readback`]: reads counter shards and memberships back, at one read time.
//! - [`verify`]: compares Firestore with the truth and checks the shard invariant.
//! - [`report`]: end-to-end latency and throughput into Markdown and a PNG.
//! - [`bench`]: both strategies side by side on the emulators (`hotcount-loadgen bench`).
//! - [`chaos`]: kill -9, injected faults and a replay against consumer processes, verified.
//! - [`chart`]: the dependency-light PNG percentile plot.
//! - [`demo`]: the one-command demo (emulators, consumer, workload, verify, report).
//! - [`simulate`]: replicas following a viral spike under the HPA, by model (`hotcount-loadgen simulate`).
//! - [`run_error`]: why a `bench`, `chaos` or `demo` run could not be carried out.
//!
//! # Use from code (`hotcount demo`, tests)
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use hotcount::config::{Endpoints, Target};
//! use hotcount_loadgen::{generate, publish, verify, WorkloadConfig};
//! let endpoints = Endpoints {
//!     pubsub_emulator_host: Some("127.0.0.1:8681".into()),
//!     firestore_emulator_host: Some("127.0.0.1:8682".into()),
//! };
//! let target = Target {
//!     project: "hotcount-local".into(),
//!     database: "(default)".into(),
//!     collection_prefix: "demo_".into(),
//! };
//! let config = WorkloadConfig { events: 5_000, ..WorkloadConfig::default() };
//! config.validate()?;
//! let workload = generate(&config);
//! let (_stop_tx, stop) = tokio::sync::watch::channel(false);
//! let options = publish::PublishOptions { progress: false, ..Default::default() };
//! let topic = "projects/hotcount-local/topics/likes";
//! let sent = publish::connect_and_publish(&endpoints, topic, &workload, &options, stop).await?;
//! assert_eq!(sent.failed, 0);
//! // ... once the service has drained the subscription:
//! let report = verify::connect_and_verify(&endpoints, &target, &workload.truth).await?;
//! assert!(report.is_exact(), "{:?}", report.mismatches);
//! # Ok(()) }
//! ```
//!
//! # Invariants
//! - The truth depends only on the generated events, never on the service's code.
//! - A publish that fails after the client's retries is counted and reported,
//!   never dropped silently.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bench;
pub mod chaos;
pub mod chart;
pub mod demo;
pub mod publish;
pub mod readback;
pub mod report;
pub mod run_error;
pub mod simulate;
pub mod truth;
pub mod verify;
pub mod workload;

pub use truth::Truth;
pub use workload::{generate, Workload, WorkloadConfig};
