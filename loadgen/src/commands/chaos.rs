//! `hotcount-loadgen chaos`: consumer processes under kill -9, injected
//! faults and a replay, verified; Ctrl-C or SIGTERM ends it early.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use hotcount::config::{Delivery, StoreLocation};
use hotcount_loadgen::chaos::{self, ChaosConfig};
use hotcount_loadgen::{consumer, WorkloadConfig};
use tokio::sync::watch;

use super::{wait_for_signal, MessageMixArgs};

/// The `chaos` command's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct ChaosArgs {
    /// Messages to publish (valid + duplicates + poison).
    #[arg(long, default_value_t = 20_000)]
    pub events: u64,
    /// Distinct posts.
    #[arg(long, default_value_t = 200)]
    pub posts: u32,
    /// Distinct users.
    #[arg(long, default_value_t = 3_000)]
    pub users: u32,
    /// Zipf exponent of post popularity.
    #[arg(long, default_value_t = 1.2)]
    pub zipf: f64,
    /// Probability that an event on a liked (post, user) is an unlike.
    #[arg(long, default_value_t = 0.3)]
    pub unlike_fraction: f64,
    /// Duplicate and poison fractions (shared with `demo`).
    #[command(flatten)]
    pub mix: MessageMixArgs,
    /// Seed of the workload, the shuffle and the kill schedule.
    #[arg(long, default_value_t = 6)]
    pub seed: u64,
    /// Consumer processes on the subscription (the first is killed repeatedly).
    #[arg(long, default_value_t = 3)]
    pub consumers: usize,
    /// Shortest pause between two kills, in milliseconds.
    #[arg(long, default_value_t = 300)]
    pub kill_min_ms: u64,
    /// Longest pause between two kills, in milliseconds.
    #[arg(long, default_value_t = 900)]
    pub kill_max_ms: u64,
    /// Keep the chaos going until at least this many kills.
    #[arg(long, default_value_t = 6)]
    pub min_kills: u64,
    /// Shuffle window for out-of-order publishing (1 = in order).
    #[arg(long, default_value_t = 64)]
    pub reorder_window: usize,
    /// Skip the Seek replay.
    #[arg(long)]
    pub no_replay: bool,
    /// No milestone notifications (by default the consumers send them to
    /// a webhook sink that fails, hangs and closes at a rate, and the run
    /// checks every milestone the truth crosses arrived once per key).
    #[arg(long)]
    pub no_milestones: bool,
    /// Seconds between latency spikes (with a clock jump past the leases).
    #[arg(long, default_value_t = 5)]
    pub spike_every_secs: u64,
    /// Publish rate, messages per second (0 = as fast as possible).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Bound on the whole run, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// The hotcount binary (default: next to this executable).
    #[arg(long)]
    pub hotcount_bin: Option<PathBuf>,
    /// Directory for consumer logs (default: a temporary directory).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
    /// Where the consumers count: `firestore` (the emulator) or a
    /// `postgres://` URL of a database the run may empty.
    #[arg(long, env = "HOTCOUNT_STORE", default_value = "firestore")]
    pub store: StoreLocation,
    /// How the consumers get their messages: `pull`, or `push` (each
    /// consumer an endpoint behind one round-robin front, tokens checked;
    /// the Pub/Sub faults then act on the pushes).
    #[arg(long, value_enum, default_value_t = Delivery::Pull)]
    pub delivery: Delivery,
    /// When the chaos calms, SIGKILL this many consumers (never the victim)
    /// and never restart them, as a scale-down does; rollups and
    /// milestones are still checked at rest.
    #[arg(long, default_value_t = 1)]
    pub scale_down: usize,
    /// Users erased (`hotcount users erase`) while the chaos runs, the first
    /// a heavy user added to the workload (a like on every post), the others
    /// drawn by the seed; the first erasure is SIGKILLed midway and run
    /// again. The consumers check tombstones. 0 = no erasure.
    #[arg(long, default_value_t = 3)]
    pub erase_users: usize,
}

impl ChaosArgs {
    /// The run these flags describe.
    pub fn config(&self) -> ChaosConfig {
        ChaosConfig {
            workload: WorkloadConfig {
                events: self.events,
                posts: self.posts,
                users: self.users,
                zipf_exponent: self.zipf,
                unlike_fraction: self.unlike_fraction,
                duplicate_fraction: self.mix.duplicate_fraction,
                poison_fraction: self.mix.poison_fraction,
                hostile_fraction: self.mix.hostile_fraction,
                shuffle: false,
                seed: self.seed,
            },
            hotcount_bin: self
                .hotcount_bin
                .clone()
                .unwrap_or_else(consumer::default_hotcount_bin),
            consumers: self.consumers,
            kill_every: (
                Duration::from_millis(self.kill_min_ms),
                Duration::from_millis(self.kill_max_ms),
            ),
            min_kills: self.min_kills,
            reorder_window: self.reorder_window,
            replay: !self.no_replay,
            spike_every: Duration::from_secs(self.spike_every_secs.max(1)),
            rate_per_sec: self.rate,
            timeout: Duration::from_secs(self.timeout_secs),
            log_dir: self.log_dir.clone(),
            seed: self.seed,
            progress: true,
            store: self.store.clone(),
            delivery: self.delivery,
            scale_down: self.scale_down,
            erase_users: self.erase_users,
            milestones: (!self.no_milestones).then(hotcount_loadgen::chaos::ChaosMilestones::ci),
        }
    }
}

/// Runs the chaos scenario and prints its table; exit 1 unless PASS.
pub async fn run(args: ChaosArgs) -> anyhow::Result<ExitCode> {
    let config = args.config();
    let (cancel_tx, cancel) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        let _ = cancel_tx.send(true);
    });
    eprintln!(
        "hotcount chaos: {} messages, {} consumer processes ({}), emulators in-process...",
        config.workload.events,
        config.consumers,
        config.hotcount_bin.display()
    );
    let summary = chaos::run(&config, cancel).await?;
    print!("{}", chaos::render(&summary));
    Ok(if summary.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
