//! `hotcount-loadgen simulate`: how consumer replicas follow a viral
//! spike under a backlog-driven autoscaler, and where the next limit is
//! as the spike grows; deterministic for a seed, so the HPA settings
//! `deploy/gke/hpa.yaml` ships with are the ones it picks.
//!
//! Invariants: no I/O but writing the report files at the end (nothing is
//! printed: the command, `commands/simulate.rs` of the binary, prints what
//! [`write_report`] returns); the same settings and seed give
//! byte-identical files. The per-replica figures
//! default to measured ones (docs/BENCHMARKS.md, `bench --backlog
//! --consumer-process`); Google's limits are in [`limits`].
//!
//! # Layout
//! - [`model`]: the second-by-second model (spike, replicas, metric delay, backlog).
//! - [`hpa`]: the HorizontalPodAutoscaler's decision rules.
//! - [`limits`]: Firestore and Pub/Sub limits and hotcount's counter-shard arithmetic.
//! - [`render`]: the PNG and the Markdown tables.

pub mod choose;
pub mod hpa;
pub mod limits;
pub mod model;
pub mod render;

use std::path::{Path, PathBuf};

pub use choose::{candidates, evaluate, Candidate, CandidateResult, Outcome, Profile};
use hpa::{HpaSpec, Policy, Rules, Select};
use model::{Autoscaler, Load, MetricPipeline, ReplicaModel, Scenario, Spike, Trace};

/// What the shipped HPA (`deploy/gke/hpa.yaml`) says, as the simulation
/// picked it with the default arguments.
pub mod shipped {
    /// `minReplicas`.
    pub const MIN_REPLICAS: u32 = 2;
    /// `maxReplicas`.
    pub const MAX_REPLICAS: u32 = 30;
    /// Backlog target per replica, in seconds of one replica's capacity.
    pub const BACKLOG_SECS: u32 = 60;
    /// Publish-rate target per replica, as a fraction of one replica's capacity.
    pub const PUBLISH_RATE_UTILIZATION: f64 = 0.7;
    /// `behavior.scaleDown.stabilizationWindowSeconds`.
    pub const SCALE_DOWN_WINDOW_SECS: u32 = 300;
}

/// The settings of a simulation; [`SimulateConfig::DEFAULT`] holds the
/// figures the shipped settings were chosen with.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulateConfig {
    /// Seed of the noise (arrivals, replica start-up and capacity spread, metric delays).
    pub seed: u64,
    /// Seeds each candidate is tried with (`--seed`, `--seed` + 1, ...); it must meet the target with all.
    pub seeds: u32,
    /// Arrivals before and after the spike, events per second.
    pub base_events_per_sec: f64,
    /// Arrivals at the top of the 1x spike, events per second.
    pub peak_events_per_sec: f64,
    /// When the spike starts, seconds into the run.
    pub spike_start_secs: u32,
    /// Ramp from base to peak, in seconds.
    pub ramp_secs: u32,
    /// Time at the peak, in seconds.
    pub hold_secs: u32,
    /// Decay back to base, in seconds.
    pub decay_secs: u32,
    /// Simulated time after the decay, in seconds.
    pub tail_secs: u32,
    /// Random variation of each second's arrivals (fraction).
    pub noise_fraction: f64,
    /// One replica's capacity under a backlog, events per second (measured: docs/BENCHMARKS.md).
    pub replica_events_per_sec: f64,
    /// Spread of capacity between replicas (fraction).
    pub replica_capacity_jitter_fraction: f64,
    /// Decision to pulling for a new replica, in seconds (scheduling, image pull, start, /readyz).
    pub replica_start_secs: u32,
    /// Extra start-up time per replica, up to this many seconds.
    pub replica_start_jitter_secs: u32,
    /// StreamingPull streams per replica (`hotcount run --streams`).
    pub streams: u32,
    /// Commits per 1,000 events while a replica keeps up (measured at half
    /// the peak: 4.1-5.0 store RPCs per 1,000 events, two per commit).
    pub commits_per_1k_events: f64,
    /// Commits per second one replica makes at most (measured: ~45/s
    /// under a backlog, 1,000-event batches; ~50/s at half the peak).
    pub max_commits_per_replica_per_sec: f64,
    /// Pub/Sub metric sampling period, in seconds.
    pub metric_sample_secs: u32,
    /// Shortest delay before a metric sample is visible, in seconds.
    pub metric_delay_min_secs: u32,
    /// Longest delay before a metric sample is visible, in seconds.
    pub metric_delay_max_secs: u32,
    /// Fraction of the events on the hottest post.
    pub hot_post_share: f64,
    /// Bytes per message on a stream (payload and attributes; the generated
    /// events are ~195 bytes of JSON and a ~20-byte origin attribute).
    pub message_bytes: f64,
    /// `hotcount run --counter-shards`.
    pub counter_shards: u32,
    /// `hotcount run --counter-shard-target-writes-per-sec`.
    pub counter_shard_target_writes_per_sec: u32,
    /// HPA `minReplicas`.
    pub min_replicas: u32,
    /// HPA `maxReplicas` for the 1x spike (scaled with the spike for 10x and 100x).
    pub max_replicas: u32,
    /// HPA scale-down stabilization window, in seconds.
    pub scale_down_window_secs: u32,
    /// Publish-rate target per replica, as a fraction of its capacity.
    pub publish_rate_utilization: f64,
    /// Peak held this long in the long-hold profile, in seconds.
    pub long_hold_secs: u32,
    /// How much slower replicas are than the HPA assumes, in the slow-replica profile (fraction).
    pub slow_replica_fraction: f64,
    /// The backlog-age alert's threshold (dashboards/alerts/backlog-age.json), in seconds.
    pub alert_age_secs: u32,
    /// The oldest unacked message's age to stay under, in seconds.
    pub age_target_secs: u32,
    /// How soon after the spike starts the age must be under the target for good, in seconds.
    pub settle_within_secs: u32,
}

impl SimulateConfig {
    /// The figures the shipped settings were chosen with (the flags'
    /// defaults).
    pub const DEFAULT: SimulateConfig = SimulateConfig {
        seed: 42,
        seeds: 5,
        base_events_per_sec: 2_000.0,
        peak_events_per_sec: 200_000.0,
        spike_start_secs: 60,
        ramp_secs: 120,
        hold_secs: 600,
        decay_secs: 600,
        tail_secs: 900,
        noise_fraction: 0.05,
        replica_events_per_sec: 40_000.0,
        replica_capacity_jitter_fraction: 0.1,
        replica_start_secs: 30,
        replica_start_jitter_secs: 15,
        streams: 2,
        commits_per_1k_events: 2.5,
        max_commits_per_replica_per_sec: 50.0,
        metric_sample_secs: 60,
        metric_delay_min_secs: 60,
        metric_delay_max_secs: 120,
        hot_post_share: 0.5,
        message_bytes: 220.0,
        counter_shards: 16,
        counter_shard_target_writes_per_sec: 1,
        min_replicas: shipped::MIN_REPLICAS,
        max_replicas: shipped::MAX_REPLICAS,
        scale_down_window_secs: shipped::SCALE_DOWN_WINDOW_SECS,
        publish_rate_utilization: shipped::PUBLISH_RATE_UTILIZATION,
        long_hold_secs: 1800,
        slow_replica_fraction: 0.5,
        alert_age_secs: 300,
        age_target_secs: 120,
        settle_within_secs: 600,
    };
}

impl Default for SimulateConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A simulation that could not be run or written.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// Arguments out of range.
    #[error("invalid settings: {0}")]
    Invalid(String),
    /// Drawing a PNG.
    #[error(transparent)]
    Render(#[from] render::RenderError),
    /// Writing a file.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl SimulateConfig {
    fn validate(&self) -> Result<(), SimulateError> {
        let bad = |what: &str| Err(SimulateError::Invalid(what.to_string()));
        if self.seeds == 0 {
            return bad("--seeds must be at least 1");
        }
        if self.replica_events_per_sec <= 0.0 || !self.replica_events_per_sec.is_finite() {
            return bad("--replica-events-per-sec must be above 0");
        }
        if self.min_replicas == 0 || self.max_replicas < self.min_replicas {
            return bad("--min-replicas must be at least 1 and at most --max-replicas");
        }
        if self.metric_delay_max_secs < self.metric_delay_min_secs || self.metric_sample_secs == 0 {
            return bad(
                "metric delays must satisfy min <= max, and the sampling period be above 0",
            );
        }
        let fractions = [
            self.noise_fraction,
            self.hot_post_share,
            self.replica_capacity_jitter_fraction,
            self.publish_rate_utilization,
            self.slow_replica_fraction,
        ];
        if fractions.iter().any(|f| !(0.0..=1.0).contains(f))
            || self.slow_replica_fraction >= 1.0
            || self.replica_capacity_jitter_fraction >= 1.0
        {
            return bad(
                "fractions must be within 0..=1 (the slow-replica and capacity spreads below 1)",
            );
        }
        if self.counter_shards == 0 || self.streams == 0 || self.message_bytes <= 0.0 {
            return bad("--counter-shards, --streams and --message-bytes must be above 0");
        }
        Ok(())
    }

    /// The scenario of `autoscaler` on the spike grown `factor` times, under `profile`.
    pub fn scenario(
        &self,
        name: String,
        autoscaler: Autoscaler,
        factor: u32,
        profile: Profile,
    ) -> Scenario {
        let hold_secs = match profile {
            Profile::LongHold => self.long_hold_secs,
            _ => self.hold_secs,
        };
        let speed = match profile {
            Profile::SlowReplicas => 1.0 - self.slow_replica_fraction,
            _ => 1.0,
        };
        Scenario {
            name,
            spike: Spike {
                base_events_per_sec: self.base_events_per_sec,
                peak_events_per_sec: self.peak_events_per_sec * f64::from(factor),
                start_secs: self.spike_start_secs,
                ramp_secs: self.ramp_secs,
                hold_secs,
                decay_secs: self.decay_secs,
                noise_fraction: self.noise_fraction,
            },
            replica: ReplicaModel {
                events_per_sec: self.replica_events_per_sec * speed,
                capacity_jitter_fraction: self.replica_capacity_jitter_fraction,
                start_secs: self.replica_start_secs,
                start_jitter_secs: self.replica_start_jitter_secs,
                streams: self.streams,
                commits_per_1k_events: self.commits_per_1k_events,
                max_commits_per_sec: self.max_commits_per_replica_per_sec,
            },
            metrics: MetricPipeline {
                sample_period_secs: self.metric_sample_secs,
                visibility_delay_min_secs: self.metric_delay_min_secs,
                visibility_delay_max_secs: self.metric_delay_max_secs,
            },
            autoscaler,
            load: Load {
                hot_post_share: self.hot_post_share,
                message_bytes: self.message_bytes,
                membership_writes_per_event: 1.0,
                counter_shards: self.counter_shards,
                counter_shard_target_writes_per_sec: self.counter_shard_target_writes_per_sec,
            },
            tail_secs: self.tail_secs,
            age_target_secs: self.age_target_secs,
        }
    }

    /// The autoscaler of `candidate` with `max_replicas`; its targets are
    /// computed from `--replica-events-per-sec` whatever the profile.
    pub fn autoscaler(&self, candidate: Candidate, max_replicas: u32) -> Autoscaler {
        let Candidate::Hpa {
            backlog_secs,
            publish_rate,
        } = candidate
        else {
            return Autoscaler::Fixed {
                replicas: self.min_replicas,
            };
        };
        Autoscaler::Hpa(HpaSpec {
            min_replicas: self.min_replicas,
            max_replicas,
            backlog_messages_per_replica: backlog_secs
                .map(|secs| self.replica_events_per_sec * f64::from(secs)),
            publish_rate_per_replica: publish_rate
                .then_some(self.replica_events_per_sec * self.publish_rate_utilization),
            scale_up: Rules::default_scale_up(),
            scale_down: Rules {
                stabilization_window_secs: self.scale_down_window_secs,
                policies: vec![Policy::Percent {
                    value: 100,
                    period_secs: 15,
                }],
                select: Select::Max,
            },
            sync_period_secs: 15,
            tolerance: 0.1,
        })
    }

    /// Whether a run met the target: the oldest unacked age never reached
    /// the alert, was under the target for good within the settle time,
    /// and the backlog drained by the end.
    pub fn meets_target(&self, trace: &Trace) -> bool {
        let s = &trace.summary;
        let drained = s.final_backlog <= self.base_events_per_sec;
        let settled = matches!(s.settled_after_secs, Some(secs) if secs <= self.settle_within_secs);
        s.max_age_secs < self.alert_age_secs && settled && drained
    }

    fn candidate_name(&self, c: Candidate) -> String {
        match c {
            Candidate::Fixed => format!("fixed {} replicas, no autoscaler", self.min_replicas),
            Candidate::Hpa {
                backlog_secs,
                publish_rate,
            } => {
                let mut parts = Vec::new();
                if let Some(secs) = backlog_secs {
                    parts.push(format!("backlog {secs} s/replica"));
                }
                if publish_rate {
                    parts.push(format!(
                        "publish rate {:.0} %/replica",
                        self.publish_rate_utilization * 100.0
                    ));
                }
                format!("HPA: {}", parts.join(" + "))
            }
        }
    }
}

/// The report: settings, candidates, spike growth, timeline.
pub fn markdown(config: &SimulateConfig, outcome: &Outcome) -> String {
    let mut md = String::from("# Scaling simulation\n\n");
    md.push_str(&format!(
        "`hotcount-loadgen simulate --seed {}` (defaults otherwise). Spike: {:.0} -> {:.0} events/s over {} s from t = {} s, held {} s ({} s in the long-hold profile), back to base over {} s. One replica: {:.0} events/s ({:.0} in the slow-replica profile), pulling {}-{} s after the decision. Metrics sampled every {} s, visible {}-{} s later; HPA sync 15 s, tolerance 0.1, scale-down window {} s. Target: oldest unacked age always under {} s (the backlog alert), under {} s for good within {} s of the spike's start, backlog drained by the end, under every profile.\n\n",
        config.seed,
        config.base_events_per_sec,
        config.peak_events_per_sec,
        config.ramp_secs,
        config.spike_start_secs,
        config.hold_secs,
        config.long_hold_secs,
        config.decay_secs,
        config.replica_events_per_sec,
        config.replica_events_per_sec * (1.0 - config.slow_replica_fraction),
        config.replica_start_secs,
        config.replica_start_secs + config.replica_start_jitter_secs,
        config.metric_sample_secs,
        config.metric_delay_min_secs,
        config.metric_delay_max_secs,
        config.scale_down_window_secs,
        config.alert_age_secs,
        config.age_target_secs,
        config.settle_within_secs,
    ));
    md.push_str("## Autoscalers on the 1x spike\n\n");
    md.push_str(&render::candidate_header(config));
    md.push('\n');
    for (i, result) in outcome.candidates.iter().enumerate() {
        md.push_str(&render::candidate_row(result, outcome.picked == Some(i)));
        md.push('\n');
    }
    match outcome.picked {
        Some(_) => md.push_str(
            "\nPicked: the fewest replica-minutes on the spike among those meeting the target under every profile.\n",
        ),
        None => md.push_str("\nNo candidate met the target under every profile.\n"),
    }
    if !outcome.growth.is_empty() {
        md.push_str("\n## The picked HPA as the spike grows (maxReplicas grown alike)\n\n");
        md.push_str(&render::growth_header());
        md.push('\n');
        for (factor, trace) in &outcome.growth {
            md.push_str(&render::growth_row(&format!("{factor}x"), trace));
            md.push('\n');
        }
    }
    if let Some((_, trace)) = outcome.growth.first() {
        md.push_str("\n## Timeline of the picked HPA, 1x spike (every minute)\n\n");
        md.push_str(&render::timeline(trace, 60));
    }
    md
}

/// A simulation run and written: what it found, and its report.
pub struct Written {
    /// The candidates, the one picked and its growth.
    pub outcome: Outcome,
    /// `simulation.md`'s text.
    pub markdown: String,
    /// Where `simulation.md` was written.
    pub path: PathBuf,
}

/// Runs the simulation and writes `simulation.md`, `scaling.png` (the
/// picked HPA, 1x) and `scaling-10x.png`, `scaling-100x.png` into `out`
/// (created if needed).
pub fn write_report(config: &SimulateConfig, out: &Path) -> Result<Written, SimulateError> {
    let outcome = evaluate(config)?;
    let markdown = markdown(config, &outcome);
    create_dir(out)?;
    let path = out.join("simulation.md");
    write(&path, markdown.as_bytes())?;
    for (factor, trace) in &outcome.growth {
        let name = if *factor == 1 {
            "scaling.png".to_string()
        } else {
            format!("scaling-{factor}x.png")
        };
        write(&out.join(name), &render::render_png(trace)?)?;
    }
    Ok(Written {
        outcome,
        markdown,
        path,
    })
}

fn create_dir(dir: &Path) -> Result<(), SimulateError> {
    std::fs::create_dir_all(dir).map_err(|source| SimulateError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), SimulateError> {
    std::fs::write(path, bytes).map_err(|source| SimulateError::Io {
        path: path.to_path_buf(),
        source,
    })
}
