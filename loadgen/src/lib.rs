//! hotcount-loadgen: generates like workloads with a known exact answer,
//! publishes them to Pub/Sub, and checks and measures what hotcount wrote.
//!
//! # Layout
//! What a run is made of:
//! - [`workload`]: deterministic Zipf workloads with duplicates and poison
//!   (`generate`, `poison`, `zipf` inside), and their [`workload::truth`]:
//!   the exact expected count per post, and its JSON file.
//! - [`publish`]: paced, bounded, cancellable publishing with a report.
//! - [`readback`]: reads counter shards and memberships back, at one read
//!   time, from Firestore or PostgreSQL (one half each inside).
//! - [`verify`]: compares the store with the truth and checks the shard invariant.
//! - [`postgres`]: a PostgreSQL database made ready for a run (migrations,
//!   a clean state), reached through the run's proxy, and the server's own
//!   figures.
//! - [`report`]: end-to-end latency and throughput into Markdown and PNGs
//!   (measurements in `report`, charts and text in `report::render`).
//! - [`chart`]: the dependency-light PNG line chart.
//!
//! The runs, each a short composition of the three pieces below them:
//! - [`demo`]: the one-command demo (stage, consumer, workload, verify, report).
//! - [`milestones`]: the webhook sink of milestone notifications, checked against the truth.
//! - [`bench`]: both strategies side by side on the emulators (`hotcount-loadgen bench`).
//! - [`chaos`]: kill -9, injected faults and a replay against consumer processes, verified.
//! - [`stage`]: the world of a run: emulators in-process, store RTT, setup, teardown
//!   (and, for push consumers, the subscription switched to push).
//! - [`front`]: the front a push subscription posts to when several push
//!   consumers share it (round robin; can lose answers).
//! - [`consumer`]: the consumer under test, in-process or a `hotcount run`
//!   child process (start, kill, stop, log, exit status, its `/metrics`).
//! - [`procfs`]: the one reader of `/proc` (a process's CPU and peak RSS, the machine).
//! - [`run_error`]: why a `bench`, `chaos` or `demo` run could not be carried out.
//! - [`simulate`]: replicas following a viral spike under the HPA, by model
//!   (`hotcount-loadgen simulate`; no emulators, no consumer).
//!
//! The binary (`main.rs`, `commands/`) parses flags, calls these, prints
//! and chooses exit codes; the library only returns values.
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
//!     store: Default::default(),
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
//! // (with `true`, the rollups too: once the service has stopped)
//! let report = verify::connect_and_verify(&endpoints, &target, &workload.truth, false).await?;
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
pub mod consumer;
pub mod demo;
pub mod front;
pub mod milestones;
pub mod postgres;
pub mod procfs;
pub mod publish;
pub mod readback;
pub mod report;
pub mod rollup_lag;
pub mod run_error;
pub mod simulate;
pub mod stage;
pub mod verify;
pub mod workload;

pub use workload::{generate, Truth, Workload, WorkloadConfig};
