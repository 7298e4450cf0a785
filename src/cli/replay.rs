//! `hotcount replay`: replay a window of the topic, print what it did,
//! and fail when it paused or stopped.
//!
//! Invariant: the report is printed whole before any failure.

use hotcount::config::Endpoints;
use hotcount::ops::replay;

/// Runs the replay `args` asks for and prints its report.
pub async fn replay(endpoints: &Endpoints, args: &replay::ReplayArgs) -> anyhow::Result<()> {
    let report = replay::run(endpoints, args).await?;
    print_replay(&report);
    match report.ending {
        replay::Ending::Paused => anyhow::bail!(
            "replay paused: divergence {:.4} exceeds --max-divergence {}",
            report.divergence(),
            args.max_divergence
        ),
        replay::Ending::Failed => anyhow::bail!(
            "replay stopped: {}; what it committed before is above (replaying again is safe: processed events are duplicates)",
            report.failure.as_deref().unwrap_or("unknown failure")
        ),
        replay::Ending::WindowEnd | replay::Ending::Drained => Ok(()),
    }
}

fn print_replay(report: &replay::ReplayReport) {
    let e = &report.effects;
    let mode = if report.dry_run {
        "dry run (nothing written)"
    } else {
        "committed"
    };
    println!("replay\t{mode}");
    println!(
        "subscription\t{} ({})",
        report.subscription,
        if report.deleted { "deleted" } else { "kept" }
    );
    println!("ending\t{:?}", report.ending);
    println!(
        "messages\t{}\tskipped outside the window\t{}\terased users' events dropped\t{}",
        report.messages, report.skipped, report.erased
    );
    println!(
        "applied\t{}\tduplicates\t{}\tstale\t{}\tpoison\t{}\tdivergence\t{:.4}",
        e.applied,
        e.duplicates,
        e.stale,
        e.poison,
        report.divergence()
    );
    for (post, delta) in &report.deltas {
        println!("delta\t{post}\t{delta:+}");
    }
}
