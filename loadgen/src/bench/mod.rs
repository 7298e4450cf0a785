//! The end-to-end benchmark: both strategies (`batched`, `per-event`) on the
//! same generated workload, each in a fresh pair of in-process emulators with
//! an injected round trip per Firestore RPC, printed side by side; or, with
//! `--store postgres://...`, against a real PostgreSQL server, emptied
//! before each run ([`crate::postgres::prepare`]).
//!
//! Invariant: every figure comes from outside the service under test (the
//! emulators' RPC and write counters, the Pub/Sub subscription's acks, the
//! membership documents' commit times, `/proc` through [`crate::procfs`];
//! with PostgreSQL, the round trips the stage's proxy relayed and the
//! server's logical decoding of the window: transactions committed and the
//! writes to each counter row),
//! and a count is called exact only for a run that published and drained
//! everything; a run stopped by `max_secs` is reported as partial, its
//! throughput measured over the messages it acked, and only the shard
//! invariant is checked for it.
//!
//! This file holds what a bench is (the cases, the runners, the settings,
//! each case's workload and each round's runners). Inside:
//! - `run`: carries a bench out, run by run, each in a fresh stage.
//! - `window`: the measured window (the baseline, every figure at the last ack).
//! - `result`: what a run measured, its verdict, the exit code's reading.
//! - `ops`: the store's and Pub/Sub's own operation counts; `ops_table`
//!   their table ([`render_ops`]).
//! - `render`: the progress lines, the settings line and the results tables.
//! - [`erase`]: `erase-rate`'s measurement.

use hotcount::config::{Delivery, RunArgs, Strategy};

use crate::workload::{self, as_python_client_publishes, generate, Workload, WorkloadConfig};

pub mod erase;
mod ops;
mod ops_table;
mod render;
mod result;
mod run;
mod window;

pub use ops::{FirestoreOps, PgOps, PubSubOps, StoreOps, TableOps};
pub use ops_table::render_ops;
pub use render::{render, render_progress, render_settings};
pub use result::{any_failed, LeaseCalls, RunResult, Verdict};
pub use run::run;

/// The workload shapes the benchmark runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Case {
    /// Zipf 1.1 over the posts.
    Zipf,
    /// One viral post takes about half the events (Zipf exponent chosen so
    /// that the most popular post's share is 50%).
    Viral,
    /// Real viral traffic's repetition: [`CONCENTRATED_POSTS`] posts (Zipf
    /// 1.1) and [`CONCENTRATED_USERS`] users whatever `--posts` and
    /// `--users` say, so most messages meet a membership already stored;
    /// 10 % publisher duplicates, an event on a liked pair an unlike with
    /// probability [`CONCENTRATED_UNLIKE_FRACTION`], a poison message in
    /// 10,000, and the events shuffled (many arrive after a newer event of
    /// their pair: stale). Published as a script publishing
    /// `json.dumps(event)` with Google's Python client publishes it: no
    /// attributes, Python's separators ([`as_python_client_publishes`]).
    Concentrated,
    /// [`Case::Concentrated`] as the load generator publishes its own
    /// workloads: compact JSON and a `loadgenOrigin` attribute on every
    /// message (what the concentrated case was before it took the Python
    /// client's shape; kept to measure the two side by side).
    ConcentratedTagged,
}

/// Posts of the [`Case::Concentrated`] workload.
pub const CONCENTRATED_POSTS: u32 = 300;
/// Users of the [`Case::Concentrated`] workload.
pub const CONCENTRATED_USERS: u32 = 3_000;

/// What consumes the workload in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// `hotcount run` with this strategy (pull delivery).
    Hotcount(Strategy),
    /// `hotcount run --delivery push` with this strategy: the subscription
    /// pushes to the consumer's endpoint (through a round-robin front with
    /// several replicas), tokens checked against the emulator's keys.
    Push(Strategy),
    /// `hotcount run` with this strategy, as the other build of
    /// [`BenchConfig::compare_bin`], right after [`Runner::Hotcount`] in
    /// each round: two builds side by side in one run.
    Compare(Strategy),
    /// [`Runner::Push`] as the other build of [`BenchConfig::compare_bin`],
    /// right after it in each round.
    ComparePush(Strategy),
    /// `hotcount run`, batched, with `--rollup-interval-ms 0`: the same
    /// run without rollups, beside the one with them (`--compare-rollups`).
    NoRollups,
    /// `hotcount-null-consumer`: receive and ack on hotcount's stream
    /// settings, nothing else; the delivery floor hotcount's CPU per event
    /// is compared with (the ceiling row).
    Null,
    /// `hotcount-null-consumer --commit-writes`: the write floor, right
    /// after [`Runner::Null`] (`--write-floor`): it parses each event and
    /// commits, per group of up to 1,000 messages, the memberships it
    /// changes, a counter increment per post and a marker, in one blind
    /// Commit, then acks the group. What writing the design's documents
    /// costs with no reads, checks or recovery: hotcount's CPU per message
    /// beside it is what all the rest costs.
    WriteFloor,
    /// `hotcount-null-consumer --commit-writes --preconditions --rollups`,
    /// right after [`Runner::WriteFloor`] (or the null consumer) with
    /// `--exact-floor`: the write floor with each write conditioned as it
    /// must be to stay exact beside other replicas (a membership's update
    /// time as its Commit answered, `exists = false` for a new one and for
    /// the marker; a membership in at most one Commit in flight), and the
    /// rollups of the posts it changes refreshed every second, as
    /// hotcount's defaults do. The least a consumer of this design that is
    /// exact with many replicas writes, reads and remembers.
    ExactFloor,
    /// `hotcount-null-consumer --delivery push`: an HTTP/1.1 endpoint that
    /// reads each pushed body and answers 204 at once, nothing else; the
    /// push floor (what one request per message costs by itself), with
    /// `--ceiling` and push among the deliveries.
    NullPush,
    /// `hotcount-null-consumer --delivery push --commit-writes
    /// --preconditions --rollups`, right after [`Runner::NullPush`] with
    /// `--exact-floor`: the exact floor fed by push, each request answered
    /// once its event's group has committed (groups taken as Commit slots
    /// free up): the least an exact push consumer of this design costs.
    ExactPushFloor,
}

/// What the benchmark runs.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Consumer settings shared by both strategies (the strategy is overridden per run).
    pub run: RunArgs,
    /// Messages per workload (valid + duplicates + poison).
    pub events: u64,
    /// Distinct posts.
    pub posts: u32,
    /// Distinct users.
    pub users: u32,
    /// Seed (the same workload for both strategies).
    pub seed: u64,
    /// Injected latency per Firestore RPC, in milliseconds.
    pub store_rtt_ms: u64,
    /// Longest run per strategy and case, in seconds (publish + drain).
    pub max_secs: u64,
    /// Publish rate, messages per second (0 = as fast as possible).
    pub rate_per_sec: u64,
    /// The workloads to run.
    pub cases: Vec<Case>,
    /// The strategies to run, in order.
    pub strategies: Vec<Strategy>,
    /// The deliveries to run each strategy with, in order (push: the
    /// subscription pushes to the consumer's endpoint, switched to push
    /// once the consumer is ready).
    pub deliveries: Vec<Delivery>,
    /// Publish the whole workload before the consumer starts, and measure
    /// from the consumer's start: the consumer's capacity on a backlog,
    /// without the publisher competing for the CPU.
    pub backlog: bool,
    /// Run the consumer as this `hotcount` binary in its own process (its
    /// peak RSS is then the consumer's alone) instead of in-process.
    pub consumer_bin: Option<std::path::PathBuf>,
    /// Also run `hotcount-null-consumer` (this binary, as a child process)
    /// on each case, first in each round: the ceiling row.
    pub null_consumer_bin: Option<std::path::PathBuf>,
    /// With `null_consumer_bin` and pull among the deliveries: also run
    /// the write floor ([`Runner::WriteFloor`]) right after the null
    /// consumer in each round.
    pub write_floor: bool,
    /// With `null_consumer_bin`: also run the exact floor
    /// ([`Runner::ExactFloor`]) after the null consumer (and the write
    /// floor) when pulling, and the exact push floor
    /// ([`Runner::ExactPushFloor`]) after the push floor when pushing, in
    /// each round.
    pub exact_floor: bool,
    /// Another `hotcount` binary (with `consumer_bin`), run after it on
    /// each strategy of each round and reported beside it: two builds
    /// measured side by side, round by round.
    pub compare_bin: Option<std::path::PathBuf>,
    /// Rounds: each case runs every runner this many times, interleaved
    /// (null, then each strategy, then again), so the medians compare runs
    /// made side by side.
    pub rounds: u32,
    /// Consumers (replicas) per run, on one subscription.
    pub replicas: usize,
    /// Also run batched with rollups off ([`Runner::NoRollups`]), last in
    /// each round.
    pub compare_rollups: bool,
    /// The data format each run's store is raised to before the consumers
    /// start (`hotcount setup --data-format`); `None`: left unrecorded
    /// (format 1), as a store an older build wrote.
    pub data_format: Option<u32>,
    /// The file child consumers append their log lines to (each run's
    /// marked by a heading line); `None` = this process's stderr.
    pub consumer_log: Option<std::path::PathBuf>,
}

/// The workload of `case`.
pub fn workload_config(config: &BenchConfig, case: Case) -> WorkloadConfig {
    let spread = WorkloadConfig {
        events: config.events,
        posts: config.posts,
        users: config.users,
        zipf_exponent: 1.1,
        unlike_fraction: 0.05,
        duplicate_fraction: 0.05,
        poison_fraction: 0.01,
        hostile_fraction: 0.0,
        shuffle: false,
        seed: config.seed,
    };
    match case {
        Case::Zipf => spread,
        Case::Viral => WorkloadConfig {
            zipf_exponent: workload::exponent_for_top_share(config.posts, 0.5),
            ..spread
        },
        Case::Concentrated | Case::ConcentratedTagged => WorkloadConfig {
            posts: CONCENTRATED_POSTS,
            users: CONCENTRATED_USERS,
            unlike_fraction: CONCENTRATED_UNLIKE_FRACTION,
            duplicate_fraction: 0.10,
            poison_fraction: 0.0001,
            shuffle: true,
            ..spread
        },
    }
}

/// Of the events on a liked pair of the [`Case::Concentrated`] workload,
/// the share that unlike it (the held-out backlog's 0.3;
/// `three_in_ten_events_on_a_liked_concentrated_pair_unlike_it`).
pub const CONCENTRATED_UNLIKE_FRACTION: f64 = 0.3;

/// The workload of `case`, its messages shaped as the case publishes them.
pub fn case_workload(config: &BenchConfig, case: Case) -> Workload {
    let mut workload = generate(&workload_config(config, case));
    if case == Case::Concentrated {
        as_python_client_publishes(&mut workload);
    }
    workload
}

/// The runners of one round, in order: the null consumer (when asked for:
/// pulling, when pull is among the deliveries, followed by the write floor
/// when asked for, then as the push floor, when push is) then each
/// strategy with each delivery of `deliveries` (pull is
/// [`Runner::Hotcount`], push [`Runner::Push`]), each run
/// followed by the compared build's run of it (when one is given), then
/// batched with rollups off (when asked for).
pub fn runners(config: &BenchConfig) -> Vec<Runner> {
    let compare = config.compare_bin.is_some() && config.consumer_bin.is_some();
    let no_rollups = config.compare_rollups.then_some(Runner::NoRollups);
    let deliveries = if config.deliveries.is_empty() {
        &[Delivery::Pull][..]
    } else {
        &config.deliveries[..]
    };
    let null = [
        (Delivery::Pull, Runner::Null),
        (Delivery::Push, Runner::NullPush),
    ]
    .into_iter()
    .filter(|(delivery, _)| config.null_consumer_bin.is_some() && deliveries.contains(delivery))
    .flat_map(|(_, runner)| {
        let pull = runner == Runner::Null;
        let floor = (pull && config.write_floor).then_some(Runner::WriteFloor);
        let exact = config.exact_floor.then_some(if pull {
            Runner::ExactFloor
        } else {
            Runner::ExactPushFloor
        });
        [Some(runner), floor, exact].into_iter().flatten()
    });
    let hotcount = config.strategies.iter().flat_map(|&s| {
        deliveries.iter().flat_map(move |&delivery| match delivery {
            Delivery::Pull => vec![Runner::Hotcount(s)]
                .into_iter()
                .chain(compare.then_some(Runner::Compare(s)))
                .collect::<Vec<_>>(),
            Delivery::Push => vec![Runner::Push(s)]
                .into_iter()
                .chain(compare.then_some(Runner::ComparePush(s)))
                .collect::<Vec<_>>(),
        })
    });
    null.chain(hotcount).chain(no_rollups).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Run {
        #[command(flatten)]
        run: RunArgs,
    }

    fn config(events: u64) -> BenchConfig {
        BenchConfig {
            run: <Run as clap::Parser>::parse_from(["run"]).run,
            events,
            posts: 100_000,
            users: 100_000,
            seed: 42,
            store_rtt_ms: 10,
            max_secs: 60,
            rate_per_sec: 0,
            cases: vec![Case::Concentrated],
            strategies: vec![Strategy::Batched],
            deliveries: vec![Delivery::Pull],
            backlog: true,
            consumer_bin: None,
            null_consumer_bin: None,
            write_floor: false,
            exact_floor: false,
            compare_bin: None,
            rounds: 1,
            replicas: 1,
            compare_rollups: false,
            data_format: None,
            consumer_log: None,
        }
    }

    #[test]
    fn three_in_ten_events_on_a_liked_concentrated_pair_unlike_it() {
        let workload = case_workload(&config(500_000), Case::Concentrated);
        let c = &workload.counts;
        let unliked = c.unlikes as f64 / (c.unlikes + c.double_likes) as f64;
        assert!((0.29..=0.31).contains(&unliked), "{unliked}");
        assert!(workload.messages.iter().all(|m| m.attributes.is_empty()));
        assert_eq!(c.posts, u64::from(CONCENTRATED_POSTS));
        assert!(c.memberships < u64::from(CONCENTRATED_POSTS * CONCENTRATED_USERS));
        assert_eq!(c.duplicates, 50_000);
        assert_eq!(c.poison, 50);
    }

    #[test]
    fn a_compared_build_runs_right_after_the_first_on_each_strategy() {
        let bin = Some(std::path::PathBuf::from("hotcount"));
        let mut config = BenchConfig {
            strategies: vec![Strategy::Batched, Strategy::PerEvent],
            consumer_bin: bin.clone(),
            compare_bin: bin.clone(),
            null_consumer_bin: bin,
            ..config(1)
        };
        use Strategy::{Batched, PerEvent};
        assert_eq!(
            runners(&config),
            [
                Runner::Null,
                Runner::Hotcount(Batched),
                Runner::Compare(Batched),
                Runner::Hotcount(PerEvent),
                Runner::Compare(PerEvent),
            ]
        );
        config.consumer_bin = None;
        config.null_consumer_bin = None;
        assert_eq!(
            runners(&config),
            [Runner::Hotcount(Batched), Runner::Hotcount(PerEvent)],
            "in-process, there is no second binary to run"
        );
        config.compare_rollups = true;
        assert_eq!(
            runners(&config),
            [
                Runner::Hotcount(Batched),
                Runner::Hotcount(PerEvent),
                Runner::NoRollups
            ],
            "rollups off last"
        );
        config.compare_rollups = false;
        config.deliveries = vec![Delivery::Push, Delivery::Pull];
        assert_eq!(
            runners(&config),
            [
                Runner::Push(Batched),
                Runner::Hotcount(Batched),
                Runner::Push(PerEvent),
                Runner::Hotcount(PerEvent)
            ],
            "each strategy pushed then pulled, side by side"
        );
        config.consumer_bin = Some("hotcount".into());
        config.compare_bin = Some("hotcount-before".into());
        config.null_consumer_bin = Some("hotcount-null-consumer".into());
        config.strategies = vec![Batched];
        assert_eq!(
            runners(&config),
            [
                Runner::Null,
                Runner::NullPush,
                Runner::Push(Batched),
                Runner::ComparePush(Batched),
                Runner::Hotcount(Batched),
                Runner::Compare(Batched),
            ],
            "both floors first, each run followed by the compared build's"
        );
        config.deliveries = vec![Delivery::Push];
        assert_eq!(
            runners(&config),
            [
                Runner::NullPush,
                Runner::Push(Batched),
                Runner::ComparePush(Batched)
            ],
            "push alone: only the push floor"
        );
    }

    #[test]
    fn the_write_floor_runs_right_after_the_null_consumer_pulling_and_the_exact_floors_after_each_delivery_floor(
    ) {
        use Strategy::Batched;
        let mut config = BenchConfig {
            consumer_bin: Some("hotcount".into()),
            null_consumer_bin: Some("hotcount-null-consumer".into()),
            write_floor: true,
            exact_floor: true,
            deliveries: vec![Delivery::Push, Delivery::Pull],
            ..config(1)
        };
        assert_eq!(
            runners(&config),
            [
                Runner::Null,
                Runner::WriteFloor,
                Runner::ExactFloor,
                Runner::NullPush,
                Runner::ExactPushFloor,
                Runner::Push(Batched),
                Runner::Hotcount(Batched),
            ]
        );
        config.deliveries = vec![Delivery::Push];
        assert_eq!(
            runners(&config),
            [
                Runner::NullPush,
                Runner::ExactPushFloor,
                Runner::Push(Batched)
            ],
            "the write floor pulls: beside push alone only the exact push floor"
        );
        config.exact_floor = false;
        assert_eq!(runners(&config), [Runner::NullPush, Runner::Push(Batched)]);
        config.deliveries = vec![Delivery::Pull];
        config.null_consumer_bin = None;
        assert_eq!(
            runners(&config),
            [Runner::Hotcount(Batched)],
            "no floors without the null consumer's binary"
        );
    }

    #[test]
    fn the_concentrated_case_ignores_the_spread_cases_posts_and_users() {
        let w = workload_config(&config(1_000), Case::Concentrated);
        assert_eq!((w.posts, w.users), (CONCENTRATED_POSTS, CONCENTRATED_USERS));
        assert!(w.shuffle);
        let z = workload_config(&config(1_000), Case::Zipf);
        assert_eq!((z.posts, z.users, z.shuffle), (100_000, 100_000, false));
    }
}
