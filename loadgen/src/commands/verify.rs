//! `hotcount-loadgen verify`: compare every post's count and membership
//! documents with a truth file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use hotcount::config::{Endpoints, Target};
use hotcount_loadgen::{verify, Truth};

use super::print_verify;

/// `hotcount-loadgen verify`: the flags.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub target: Target,
    /// Truth file written by `publish`.
    #[arg(long, env = "LOADGEN_TRUTH", default_value = "truth.json")]
    pub truth: PathBuf,
    /// Mismatches printed at most (all are counted).
    #[arg(long, default_value_t = 50)]
    pub show: usize,
    /// Do not check the rollups (`counts/{post}`, `post_counts`): the
    /// service ran with `--rollup-interval-ms 0`. Checked by default: stop
    /// the service first (rollups are exact at rest).
    #[arg(long)]
    pub no_rollups: bool,
}

/// Verifies and prints the findings; exit 1 unless every count is exact.
pub async fn run(endpoints: &Endpoints, args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let truth = Truth::load(&args.truth)?;
    let rollups = !args.no_rollups;
    let report = verify::connect_and_verify(endpoints, &args.target, &truth, rollups).await?;
    print_verify(&report, args.show);
    Ok(if report.is_exact() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
