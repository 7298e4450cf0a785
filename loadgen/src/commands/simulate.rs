//! `hotcount-loadgen simulate`: the flags of the scaling model (each
//! defaulting to [`SimulateConfig::DEFAULT`]), the report printed, and exit
//! code 1 when no candidate meets the target.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use hotcount_loadgen::simulate::{self, SimulateConfig};

/// `hotcount-loadgen simulate`: the flags; every default is the figure the
/// shipped settings were chosen with.
#[derive(Args, Clone, Debug)]
pub struct SimulateArgs {
    /// Seed of the noise (arrivals, replica start-up and capacity spread, metric delays).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.seed)]
    pub seed: u64,
    /// Seeds each candidate is tried with (`--seed`, `--seed` + 1, ...); it must meet the target with all.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.seeds)]
    pub seeds: u32,
    /// Directory for simulation.md and the PNGs (created if needed).
    #[arg(long, default_value = "reports/simulate")]
    pub out: PathBuf,
    /// Arrivals before and after the spike, events per second.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.base_events_per_sec)]
    pub base_events_per_sec: f64,
    /// Arrivals at the top of the 1x spike, events per second.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.peak_events_per_sec)]
    pub peak_events_per_sec: f64,
    /// When the spike starts, seconds into the run.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.spike_start_secs)]
    pub spike_start_secs: u32,
    /// Ramp from base to peak, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.ramp_secs)]
    pub ramp_secs: u32,
    /// Time at the peak, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.hold_secs)]
    pub hold_secs: u32,
    /// Decay back to base, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.decay_secs)]
    pub decay_secs: u32,
    /// Simulated time after the decay, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.tail_secs)]
    pub tail_secs: u32,
    /// Random variation of each second's arrivals (fraction).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.noise_fraction)]
    pub noise_fraction: f64,
    /// One replica's capacity under a backlog, events per second (measured: docs/BENCHMARKS.md).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.replica_events_per_sec)]
    pub replica_events_per_sec: f64,
    /// Spread of capacity between replicas (fraction).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.replica_capacity_jitter_fraction)]
    pub replica_capacity_jitter_fraction: f64,
    /// Decision to pulling for a new replica, in seconds (scheduling, image pull, start, /readyz).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.replica_start_secs)]
    pub replica_start_secs: u32,
    /// Extra start-up time per replica, up to this many seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.replica_start_jitter_secs)]
    pub replica_start_jitter_secs: u32,
    /// StreamingPull streams per replica (`hotcount run --streams`).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.streams)]
    pub streams: u32,
    /// Commits per 1,000 events while a replica keeps up (measured at half
    /// the peak: 4.1-5.0 store RPCs per 1,000 events, two per commit).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.commits_per_1k_events)]
    pub commits_per_1k_events: f64,
    /// Commits per second one replica makes at most (measured: ~45/s
    /// under a backlog, 1,000-event batches; ~50/s at half the peak).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.max_commits_per_replica_per_sec)]
    pub max_commits_per_replica_per_sec: f64,
    /// Pub/Sub metric sampling period, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.metric_sample_secs)]
    pub metric_sample_secs: u32,
    /// Shortest delay before a metric sample is visible, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.metric_delay_min_secs)]
    pub metric_delay_min_secs: u32,
    /// Longest delay before a metric sample is visible, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.metric_delay_max_secs)]
    pub metric_delay_max_secs: u32,
    /// Fraction of the events on the hottest post.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.hot_post_share)]
    pub hot_post_share: f64,
    /// Bytes per message on a stream (payload and attributes; the generated
    /// events are ~195 bytes of JSON and a ~20-byte origin attribute).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.message_bytes)]
    pub message_bytes: f64,
    /// `hotcount run --counter-shards`.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.counter_shards)]
    pub counter_shards: u32,
    /// `hotcount run --counter-shard-target-writes-per-sec`.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.counter_shard_target_writes_per_sec)]
    pub counter_shard_target_writes_per_sec: u32,
    /// HPA `minReplicas`.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.min_replicas)]
    pub min_replicas: u32,
    /// HPA `maxReplicas` for the 1x spike (scaled with the spike for 10x and 100x).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.max_replicas)]
    pub max_replicas: u32,
    /// HPA scale-down stabilization window, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.scale_down_window_secs)]
    pub scale_down_window_secs: u32,
    /// Publish-rate target per replica, as a fraction of its capacity.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.publish_rate_utilization)]
    pub publish_rate_utilization: f64,
    /// Peak held this long in the long-hold profile, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.long_hold_secs)]
    pub long_hold_secs: u32,
    /// How much slower replicas are than the HPA assumes, in the slow-replica profile (fraction).
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.slow_replica_fraction)]
    pub slow_replica_fraction: f64,
    /// The backlog-age alert's threshold (dashboards/alerts/backlog-age.json), in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.alert_age_secs)]
    pub alert_age_secs: u32,
    /// The oldest unacked message's age to stay under, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.age_target_secs)]
    pub age_target_secs: u32,
    /// How soon after the spike starts the age must be under the target for good, in seconds.
    #[arg(long, default_value_t = SimulateConfig::DEFAULT.settle_within_secs)]
    pub settle_within_secs: u32,
}

impl SimulateArgs {
    /// The simulation's settings.
    fn config(&self) -> SimulateConfig {
        SimulateConfig {
            seed: self.seed,
            seeds: self.seeds,
            base_events_per_sec: self.base_events_per_sec,
            peak_events_per_sec: self.peak_events_per_sec,
            spike_start_secs: self.spike_start_secs,
            ramp_secs: self.ramp_secs,
            hold_secs: self.hold_secs,
            decay_secs: self.decay_secs,
            tail_secs: self.tail_secs,
            noise_fraction: self.noise_fraction,
            replica_events_per_sec: self.replica_events_per_sec,
            replica_capacity_jitter_fraction: self.replica_capacity_jitter_fraction,
            replica_start_secs: self.replica_start_secs,
            replica_start_jitter_secs: self.replica_start_jitter_secs,
            streams: self.streams,
            commits_per_1k_events: self.commits_per_1k_events,
            max_commits_per_replica_per_sec: self.max_commits_per_replica_per_sec,
            metric_sample_secs: self.metric_sample_secs,
            metric_delay_min_secs: self.metric_delay_min_secs,
            metric_delay_max_secs: self.metric_delay_max_secs,
            hot_post_share: self.hot_post_share,
            message_bytes: self.message_bytes,
            counter_shards: self.counter_shards,
            counter_shard_target_writes_per_sec: self.counter_shard_target_writes_per_sec,
            min_replicas: self.min_replicas,
            max_replicas: self.max_replicas,
            scale_down_window_secs: self.scale_down_window_secs,
            publish_rate_utilization: self.publish_rate_utilization,
            long_hold_secs: self.long_hold_secs,
            slow_replica_fraction: self.slow_replica_fraction,
            alert_age_secs: self.alert_age_secs,
            age_target_secs: self.age_target_secs,
            settle_within_secs: self.settle_within_secs,
        }
    }
}

/// Runs the simulation, writes its files under `--out` and prints the
/// report; exit 1 when no candidate meets the target.
pub fn run(args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let written = simulate::write_report(&args.config(), &args.out)?;
    println!("{}", written.markdown);
    println!("wrote {}", written.path.display());
    Ok(if written.outcome.picked.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
