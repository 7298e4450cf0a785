//! The `hotcount` command: parse, set up telemetry, run, map errors to exit codes.

mod cli;

use std::process::ExitCode;

use clap::Parser;
use hotcount::telemetry;

/// mimalloc instead of the system allocator: the pipeline allocates many
/// small, short-lived objects on several threads, where glibc's malloc
/// spent ~45 % of the consumer's CPU (docs/benchmarks-history.md, profile).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let json = matches!(&cli.command, cli::Command::Run(args) if args.observability.log_json);
    telemetry::init_tracing(json);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// Flags that may carry a secret, each with its `-file` form.
    const SECRET_FLAGS: [&str; 4] = [
        "store",
        "milestone-webhook-secret",
        "milestone-webhook-previous-secret",
        "user-hash-key",
    ];

    /// `(command path, long flags)` for `command` and every subcommand.
    fn flags_of(command: &clap::Command, path: &str, out: &mut Vec<(String, Vec<String>)>) {
        let longs = command
            .get_arguments()
            .filter_map(clap::Arg::get_long)
            .map(str::to_string)
            .collect();
        out.push((path.to_string(), longs));
        for sub in command.get_subcommands() {
            flags_of(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_command_taking_a_secret_also_reads_it_from_a_file() {
        let mut commands = Vec::new();
        flags_of(&super::cli::Cli::command(), "hotcount", &mut commands);
        let mut checked = 0;
        for (path, longs) in &commands {
            for flag in SECRET_FLAGS
                .iter()
                .filter(|f| longs.iter().any(|l| l == *f))
            {
                let file = format!("{flag}-file");
                assert!(
                    longs.contains(&file),
                    "`{path}` takes --{flag} but not --{file}"
                );
                checked += 1;
            }
        }
        // run, count, setup, reconcile, replay, the store tools and `users`.
        assert!(checked > 15, "only {checked} secret flags found");
    }
}
