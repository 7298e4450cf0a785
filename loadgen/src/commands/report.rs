//! `hotcount-loadgen report`: write report.md, latency.png and
//! throughput.png from the memberships.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use hotcount::config::{Endpoints, Target};
use hotcount_loadgen::report::{self, RunInfo};
use hotcount_loadgen::Truth;

use super::command_line;

/// `hotcount-loadgen report`: the flags.
#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub target: Target,
    /// Directory to write into (created if needed).
    #[arg(long, env = "LOADGEN_OUT", default_value = "loadgen-report")]
    pub out: PathBuf,
    /// Truth file, to record the workload's settings in the report.
    #[arg(long, env = "LOADGEN_TRUTH")]
    pub truth: Option<PathBuf>,
}

/// Writes the report and prints the files written.
pub async fn run(endpoints: &Endpoints, args: ReportArgs) -> anyhow::Result<ExitCode> {
    let ReportArgs { target, out, truth } = args;
    let workload = match &truth {
        Some(path) => Some(Truth::load(path)?.config),
        None => None,
    };
    let mut settings = vec![
        ("project".to_string(), target.project.clone()),
        ("database".to_string(), target.database.clone()),
        (
            "collection prefix".to_string(),
            target.collection_prefix.clone(),
        ),
        ("out".to_string(), out.display().to_string()),
    ];
    for (name, host) in [
        ("pubsub emulator", &endpoints.pubsub_emulator_host),
        ("firestore emulator", &endpoints.firestore_emulator_host),
    ] {
        if let Some(h) = host {
            settings.push((name.to_string(), h.clone()));
        }
    }
    let info = RunInfo {
        command_line: command_line(),
        settings,
        workload,
    };
    let files = report::connect_and_report(endpoints, &target, &out, &info).await?;
    println!("wrote {}", files.markdown.display());
    println!("wrote {}", files.latency_png.display());
    println!("wrote {}", files.throughput_png.display());
    Ok(ExitCode::SUCCESS)
}
