//! The `hotcount-loadgen` command: parse, dispatch to one of `commands/`,
//! map an error to exit code 2.
//!
//! Exit codes: 0 success (verify: every post exact and the invariant kept);
//! 1 verify found mismatches, or some publishes failed; 2 error; 130 cancelled.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hotcount::config::Endpoints;

mod commands;

use commands::{bench, chaos, demo, erase_rate, publish, report, simulate, verify};

/// mimalloc instead of the system allocator: the pipeline allocates many
/// small, short-lived objects on several threads, where glibc's malloc
/// spent ~45 % of the consumer's CPU (docs/benchmarks-history.md, profile).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Load generator for hotcount: publish a workload with a known exact answer,
/// verify what the service stored, report latency and throughput.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main job: emulators in-process, consumer, viral workload, counts verified.
    Demo(demo::DemoArgs),
    /// Both strategies side by side on the same workload, emulators with an injected store RTT.
    Bench(bench::BenchArgs),
    /// Generate a workload, write its truth file, publish it to a topic.
    Publish(publish::PublishArgs),
    /// Consumer processes under kill -9, injected faults and a replay; counts verified.
    Chaos(chaos::ChaosArgs),
    /// Replicas following a viral spike under the HPA, by model: PNG and tables.
    Simulate(simulate::SimulateArgs),
    /// Likes erased per second for one heavy user, beside the pipeline's rate, on both stores.
    EraseRate(erase_rate::EraseRateArgs),
    /// Compare every post's count and membership documents with a truth file.
    Verify(verify::VerifyArgs),
    /// Write report.md, latency.png and throughput.png from the memberships.
    Report(report::ReportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        // The demo's terminal shows the demo (progress, then the summary):
        // the in-process consumer's logs go to a file the summary names.
        Command::Demo(args) => match demo::open_log(&args.out) {
            Ok((path, file)) => init_tracing("info", std::sync::Mutex::new(file), Some(path)),
            Err(e) => {
                eprintln!("hotcount demo: cannot write the consumer log ({e}); logging to stderr");
                init_tracing("warn", std::io::stderr, None);
            }
        },
        // The bench's terminal shows progress and the tables: the
        // consumers' warnings (in-process, and the children's) go to a file.
        Command::Bench(args) => match bench::open_log(&args.consumer_log) {
            Ok(file) => init_tracing(
                "warn",
                std::sync::Mutex::new(file),
                Some(args.consumer_log.clone()),
            ),
            Err(e) => {
                eprintln!("hotcount bench: cannot write the consumer log ({e}); logging to stderr");
                init_tracing("warn", std::io::stderr, None);
            }
        },
        _ => init_tracing("warn", std::io::stderr, None),
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Installs the global tracing subscriber: `RUST_LOG`, else `default`, to
/// `writer`; a file (`log`) gets no colour codes and is named in
/// [`commands::LOG_FILE`].
fn init_tracing<W>(default: &str, writer: W, log: Option<std::path::PathBuf>)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_ansi(log.is_none())
        .with_writer(writer)
        .init();
    if let Some(path) = log {
        let _ = commands::LOG_FILE.set(path);
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Chaos(args) => chaos::run(args).await,
        Command::Publish(args) => publish::run(&cli.endpoints, args).await,
        Command::Simulate(args) => simulate::run(&args),
        Command::EraseRate(args) => erase_rate::run(args).await,
        Command::Verify(args) => verify::run(&cli.endpoints, args).await,
        Command::Report(args) => report::run(&cli.endpoints, args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let mut all = vec!["hotcount-loadgen"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
    }

    #[test]
    fn publish_flags_map_onto_the_workload() {
        let cli = parse(&[
            "publish",
            "--events",
            "7",
            "--zipf",
            "2",
            "--unlike-fraction",
            "0.5",
            "--seed",
            "9",
        ])
        .unwrap();
        let Command::Publish(args) = cli.command else {
            panic!("publish expected");
        };
        let w = args.workload();
        assert_eq!((w.events, w.seed), (7, 9));
        assert_eq!((w.zipf_exponent, w.unlike_fraction), (2.0, 0.5));
    }

    #[test]
    fn demo_and_chaos_map_the_shared_mix_flags_onto_the_workload() {
        let mix = ["--duplicate-fraction", "0.1", "--poison-fraction", "0.02"];
        let cli = parse(&[&["demo"][..], &mix[..]].concat()).unwrap();
        let Command::Demo(args) = cli.command else {
            panic!("demo expected");
        };
        assert_eq!(
            (args.mix.duplicate_fraction, args.mix.poison_fraction),
            (0.1, 0.02)
        );
        let cli = parse(&[&["chaos"][..], &mix[..]].concat()).unwrap();
        let Command::Chaos(args) = cli.command else {
            panic!("chaos expected");
        };
        let w = args.config().workload;
        assert_eq!((w.duplicate_fraction, w.poison_fraction), (0.1, 0.02));
        assert_eq!((w.posts, w.seed), (200, 6), "chaos keeps its own defaults");
    }

    #[test]
    fn out_of_range_fraction_is_rejected_with_its_flag() {
        let cli = parse(&["publish", "--poison-fraction", "1.5"]).unwrap();
        let Command::Publish(args) = cli.command else {
            panic!("publish expected");
        };
        let err = args.workload().validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid --poison-fraction: 1.5 is outside 0..=1"
        );
    }
}
