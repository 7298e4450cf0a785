//! `hotcount-loadgen bench`: both strategies side by side, printed as
//! Markdown tables (and written to `--out`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hotcount::config::{Delivery, RunArgs, StoreLocation, Strategy};
use hotcount_loadgen::bench::{self, BenchConfig, Case};
use hotcount_loadgen::{consumer, postgres};

/// `hotcount-loadgen bench`: the flags.
// `--delivery` is the bench's list of deliveries; the consumer's own flag
// of that name (in `RunArgs`) is set per run, so it is renamed and hidden.
#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("delivery", |a| a.long("run-delivery").env(None::<&str>).hide(true)))]
pub struct BenchArgs {
    /// Consumer settings shared by both strategies (`--strategy` is ignored: see `--strategies`).
    #[command(flatten)]
    pub run: RunArgs,
    /// Strategies to run, in order.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Strategy::Batched, Strategy::PerEvent])]
    pub strategies: Vec<Strategy>,
    /// Deliveries to run each strategy with, side by side in each round
    /// (`push,pull`: the same workload pushed to the consumer's endpoint,
    /// then pulled). Push consumers check the emulator's OIDC tokens.
    #[arg(long = "delivery", id = "deliveries", value_enum, value_delimiter = ',', default_values_t = [Delivery::Pull])]
    pub deliveries: Vec<Delivery>,
    /// Workloads to run (`concentrated`: 300 posts and 3,000 users whatever
    /// `--posts` and `--users` say, 10 % duplicates, shuffled).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Case::Zipf, Case::Viral, Case::Concentrated])]
    pub cases: Vec<Case>,
    /// Messages per workload (valid + duplicates + poison); default
    /// 100,000, or 500,000 with `--ceiling` (a backlog long enough that the
    /// consumers' start-up is noise in their CPU per message).
    #[arg(long)]
    pub events: Option<u64>,
    /// Distinct posts (Zipf and viral).
    #[arg(long, default_value_t = 100_000)]
    pub posts: u32,
    /// Distinct users (Zipf and viral).
    #[arg(long, default_value_t = 100_000)]
    pub users: u32,
    /// Seed of the workload (the same for every strategy).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Injected latency per Firestore RPC, in milliseconds (models the real round trip).
    #[arg(long, default_value_t = 10)]
    pub store_rtt_ms: u64,
    /// Longest run per strategy and workload, in seconds; a slower run is
    /// stopped and measured over what it acked (reported as partial).
    #[arg(long, default_value_t = 60)]
    pub max_secs: u64,
    /// Publish rate in messages per second (0 = as fast as possible).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Also write the tables to this Markdown file.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Publish the whole workload first, then start the consumer and
    /// measure from its start (the consumer's capacity on a backlog).
    #[arg(long)]
    pub backlog: bool,
    /// Run the consumer as the `hotcount` binary in a child process (its
    /// own peak RSS is reported) instead of in this process.
    #[arg(long)]
    pub consumer_process: bool,
    /// The `hotcount` binary for `--consumer-process` (default: next to this one).
    #[arg(long)]
    pub hotcount_bin: Option<std::path::PathBuf>,
    /// With `--consumer-process`: another `hotcount` binary (e.g. the
    /// build before a change), run right after the first on each strategy
    /// and delivery of each round and reported beside it as "(compared
    /// build)".
    #[arg(long)]
    pub compare_bin: Option<std::path::PathBuf>,
    /// With `--consumer-process`: also run `hotcount-null-consumer`
    /// (receive and ack, nothing else) first in each round, and print each
    /// strategy's CPU per message as a multiple of it (the ceiling row);
    /// with push among the deliveries, also its push floor (`--delivery
    /// push`: read each pushed body, answer 204), which push runs are
    /// compared with.
    #[arg(long)]
    pub ceiling: bool,
    /// With `--ceiling`: also run the write floor right after the null
    /// consumer in each round (`hotcount-null-consumer --commit-writes`:
    /// parse each event, commit the memberships it changes, a counter
    /// increment per post and a marker per group of up to 1,000 messages,
    /// then ack), and print CPU per message as a multiple of it too.
    #[arg(long, requires = "ceiling")]
    pub write_floor: bool,
    /// With `--ceiling`: also run the exact floor right after the null
    /// consumer (and the write floor) in each round: the write floor with
    /// each write conditioned as it must be to stay exact beside other
    /// replicas and the changed posts' rollups refreshed every second
    /// (`--commit-writes --preconditions --rollups`), and print CPU per
    /// message as a multiple of it too. With push among the deliveries,
    /// the exact push floor runs right after the push floor as well (the
    /// same writes, each pushed request answered once its group
    /// committed), and push runs are printed as multiples of it.
    #[arg(long, requires = "ceiling")]
    pub exact_floor: bool,
    /// The `hotcount-null-consumer` binary for `--ceiling` (default: next to this one).
    #[arg(long)]
    pub null_consumer_bin: Option<std::path::PathBuf>,
    /// Rounds per case: every runner runs this many times, interleaved,
    /// and the tables add the medians.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// Count in a throwaway PostgreSQL server started for the bench
    /// (durable settings, `wal_level=logical`; needs the server binaries)
    /// instead of `--store`.
    #[arg(long, conflicts_with = "store")]
    pub temp_postgres: bool,
    /// Consumers (replicas of `hotcount run`) per run, on one subscription.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Also run batched with `--rollup-interval-ms 0`, last in each round:
    /// the rollups' cost side by side with none.
    #[arg(long)]
    pub compare_rollups: bool,
    /// Raise each run's store to this data format before the consumers
    /// start, as `hotcount setup --data-format` does (e.g. 2: a deployment
    /// after its upgrade); unset: format 1, as an older build left it.
    #[arg(long)]
    pub data_format: Option<u32>,
    /// Where the consumers' log lines go (their warnings, in-process or
    /// from the child processes, each run under a heading line), instead of
    /// between the progress lines and the tables; truncated at the start.
    #[arg(long, default_value = "reports/bench/consumer.log")]
    pub consumer_log: PathBuf,
}

/// Creates the consumer log `path` (and its directory), empty, open for
/// appending: the child consumers append their stderr to it too.
pub fn open_log(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    File::create(path)?;
    std::fs::OpenOptions::new().append(true).open(path)
}

/// Messages per workload by default.
const DEFAULT_EVENTS: u64 = 100_000;
/// ... with `--ceiling`: at ~250,000 messages/s for the null consumer, a
/// few tens of milliseconds of start-up are then under 5 % of its CPU.
const CEILING_EVENTS: u64 = 500_000;

/// The `hotcount` binary `--consumer-process` runs: the one given, else
/// the one next to this binary; an error naming the command that builds it
/// when it is not there.
fn hotcount_bin(given: Option<std::path::PathBuf>) -> anyhow::Result<std::path::PathBuf> {
    let bin = given.unwrap_or_else(consumer::default_hotcount_bin);
    if !bin.is_file() {
        anyhow::bail!(
            "--consumer-process runs the hotcount binary, but {} does not exist: build it with \
             `cargo build --release -p hotcount` (or name one with --hotcount-bin)",
            bin.display()
        );
    }
    Ok(bin)
}

/// The null consumer binary `--ceiling` runs: the one given, else the one
/// next to this binary; an error naming the command that builds it when
/// it is not there.
fn null_consumer_bin(given: Option<std::path::PathBuf>) -> anyhow::Result<std::path::PathBuf> {
    let bin = given.unwrap_or_else(consumer::default_null_consumer_bin);
    if !bin.is_file() {
        anyhow::bail!(
            "--ceiling runs the null consumer, but {} does not exist: build it with \
             `cargo build --release -p hotcount-null-consumer` (or name one with --null-consumer-bin)",
            bin.display()
        );
    }
    Ok(bin)
}

/// Runs the benchmark and prints the tables; exit 1 when a completed
/// run's counts are wrong or a partial run broke the invariant.
pub async fn run(mut args: BenchArgs) -> anyhow::Result<ExitCode> {
    // Kept until the bench ends; dropping it stops and removes the server.
    let _cluster = match args.temp_postgres {
        true => {
            let (cluster, store) = super::temp_postgres("bench").await?;
            args.run.target.store = store;
            Some(cluster)
        }
        false => None,
    };
    let server = match &args.run.target.store {
        StoreLocation::Postgres { url } => Some(postgres::server_settings(url).await?),
        StoreLocation::Firestore => None,
    };
    if args.ceiling && !args.consumer_process {
        anyhow::bail!("--ceiling compares CPU of child processes: add --consumer-process");
    }
    let default_events = if args.ceiling {
        CEILING_EVENTS
    } else {
        DEFAULT_EVENTS
    };
    let config = BenchConfig {
        run: args.run,
        events: args.events.unwrap_or(default_events),
        posts: args.posts,
        users: args.users,
        seed: args.seed,
        store_rtt_ms: args.store_rtt_ms,
        max_secs: args.max_secs,
        rate_per_sec: args.rate,
        cases: args.cases,
        strategies: args.strategies,
        deliveries: args.deliveries,
        backlog: args.backlog,
        consumer_bin: match args.consumer_process {
            true => Some(hotcount_bin(args.hotcount_bin.clone())?),
            false => None,
        },
        compare_bin: match (&args.compare_bin, args.consumer_process) {
            (Some(bin), true) => Some(hotcount_bin(Some(bin.clone()))?),
            (Some(_), false) => {
                anyhow::bail!("--compare-bin runs a second child process: add --consumer-process")
            }
            (None, _) => None,
        },
        null_consumer_bin: match args.ceiling {
            true => Some(null_consumer_bin(args.null_consumer_bin.clone())?),
            false => None,
        },
        write_floor: args.write_floor,
        exact_floor: args.exact_floor,
        rounds: args.rounds.max(1),
        replicas: args.replicas.max(1),
        compare_rollups: args.compare_rollups,
        data_format: args.data_format,
        consumer_log: super::LOG_FILE.get().cloned(),
    };
    let store = match &config.run.target.store {
        StoreLocation::Firestore => format!("store RTT {} ms", config.store_rtt_ms),
        postgres => format!("store {postgres}"),
    };
    eprintln!(
        "hotcount bench: {} messages over {} posts, {store}, at most {} s per run",
        config.events, config.posts, config.max_secs
    );
    let results = bench::run(&config, |r| eprintln!("{}", bench::render_progress(r))).await?;
    let mut tables = bench::render_settings(&config);
    if let Some(server) = server {
        tables.push_str(&format!("\nserver: {server}\n"));
    }
    for &case in &config.cases {
        tables.push_str(&bench::render(&results, case));
        tables.push_str(&bench::render_ops(&results, case));
    }
    print!("{tables}");
    if let Some(path) = &args.out {
        if let Err(e) = std::fs::write(path, &tables) {
            eprintln!("warning: writing {}: {e}", path.display());
        }
    }
    if let Some(log) = super::LOG_FILE.get() {
        println!(
            "\nconsumer log (the consumers' warnings): {}",
            log.display()
        );
    }
    Ok(if bench::any_failed(&results) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_consumer_binary_is_refused_with_the_command_that_builds_it() {
        let missing = std::path::PathBuf::from("/nonexistent/hotcount-null-consumer");
        let error = null_consumer_bin(Some(missing))
            .expect_err("missing")
            .to_string();
        assert!(
            error.contains("cargo build --release -p hotcount-null-consumer"),
            "{error}"
        );
        let missing = std::path::PathBuf::from("/nonexistent/hotcount");
        let error = hotcount_bin(Some(missing))
            .expect_err("missing")
            .to_string();
        assert!(
            error.contains("cargo build --release -p hotcount`"),
            "{error}"
        );
        let here = std::env::current_exe().expect("the test binary");
        assert_eq!(null_consumer_bin(Some(here.clone())).ok(), Some(here));
    }

    #[test]
    fn the_consumer_log_starts_empty_in_its_own_directory_and_every_writer_appends() {
        use std::io::Write as _;
        let dir = std::env::temp_dir().join(format!("hotcount-bench-log-{}", std::process::id()));
        let path = dir.join("bench").join("consumer.log");
        std::fs::create_dir_all(path.parent().expect("a directory")).expect("made");
        std::fs::write(&path, "an earlier run\n").expect("written");
        let mut ours = open_log(&path).expect("opened");
        // A child consumer appends to the same file.
        let mut child = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("opened by a child");
        writeln!(ours, "ours").expect("written");
        writeln!(child, "the child's").expect("written");
        writeln!(ours, "ours again").expect("written");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, "ours\nthe child's\nours again\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
