//! The CI-sized chaos run: three `hotcount run` processes (the debug
//! binary), one of them killed with SIGKILL again and again, every fault kind
//! injected, a Seek replay, and exact counts at the end.

use std::path::PathBuf;
use std::time::Duration;

use hotcount_loadgen::chaos::{self, ChaosConfig};

/// The `hotcount` binary of this build; built on demand when only the
/// loadgen package's targets were built.
fn hotcount_bin() -> PathBuf {
    let loadgen = PathBuf::from(env!("CARGO_BIN_EXE_hotcount-loadgen"));
    let bin = loadgen.with_file_name(format!("hotcount{}", std::env::consts::EXE_SUFFIX));
    if !bin.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = std::process::Command::new(cargo);
        cmd.args(["build", "-p", "hotcount", "--bin", "hotcount"]);
        if loadgen.parent().and_then(|d| d.file_name()) == Some("release".as_ref()) {
            cmd.arg("--release");
        }
        let status = cmd
            .status()
            .expect("running cargo build for the hotcount binary");
        assert!(status.success(), "cargo build -p hotcount failed");
    }
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_under_kills_faults_and_replay() {
    let events = std::env::var("CHAOS_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut config = ChaosConfig::ci(events, hotcount_bin());
    config.timeout = Duration::from_secs(120);
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let summary = chaos::run(&config, cancel).await.expect("chaos run");
    println!("{}", chaos::render(&summary));

    let v = &summary.verify;
    assert!(summary.drained, "subscription did not drain");
    assert!(v.mismatches.is_empty(), "mismatches: {:?}", v.mismatches);
    assert!(
        v.invariant_violations.is_empty(),
        "invariant: {:?}",
        v.invariant_violations
    );
    assert_eq!(
        v.quarantined as u64, v.poison_expected,
        "quarantine != poison"
    );
    assert_eq!(v.memberships_read as u64, v.memberships_expected);
    assert_eq!(summary.publish.failed, 0);
    assert!(
        summary.kills >= config.min_kills,
        "kills: {}",
        summary.kills
    );
    assert!(summary.kills_after_commit > 0);
    assert!(summary.replayed > 0, "the Seek replayed nothing");
    assert!(
        summary.subscription.redeliveries > 0,
        "no redelivery: the faults did not fire"
    );
    for kind in [
        "ack lost",
        "spurious redelivery",
        "stream dropped",
        "commit ABORTED",
        "commit applied, answered UNAVAILABLE",
        "commit latency spike",
    ] {
        assert!(
            summary.faults.get(kind).copied().unwrap_or(0) > 0,
            "fault {kind} never fired: {:?}",
            summary.faults
        );
    }
    assert_eq!(summary.subscription.dead_lettered, 0);
    assert!(summary.is_success());
}
