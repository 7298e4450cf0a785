//! The CI-sized chaos run: three `hotcount run` processes (the debug
//! binary), one of them killed with SIGKILL again and again, every fault kind
//! injected, a Seek replay, and exact counts at the end.

use std::path::PathBuf;
use std::time::Duration;

use hotcount_loadgen::chaos::{self, ChaosConfig};

/// The `hotcount` binary of this build, built now: `cargo build` of an
/// up-to-date binary is a no-op, and a stale one would test old code.
fn hotcount_bin() -> PathBuf {
    let loadgen = PathBuf::from(env!("CARGO_BIN_EXE_hotcount-loadgen"));
    let bin = loadgen.with_file_name(format!("hotcount{}", std::env::consts::EXE_SUFFIX));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    // The whole workspace's feature set, as `cargo test --workspace` builds it,
    // so the dependencies built for the tests are reused.
    cmd.args(["build", "--workspace", "--bin", "hotcount"]);
    if loadgen.parent().and_then(|d| d.file_name()) == Some("release".as_ref()) {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .expect("running cargo build for the hotcount binary");
    assert!(status.success(), "cargo build -p hotcount failed");
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_under_kills_faults_hostile_content_and_replay() {
    let events = std::env::var("CHAOS_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut config = ChaosConfig::ci(events, hotcount_bin());
    config.timeout = Duration::from_secs(120);
    assert!(
        config.workload.hostile_fraction > 0.0,
        "hostile content in the mix"
    );
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let summary = chaos::run(&config, cancel).await.expect("chaos run");
    println!("{}", chaos::render(&summary));
    // The same verdict as the chaos command's PASS.
    let failures = summary.failures();
    assert!(
        failures.is_empty(),
        "chaos claims that failed: {failures:#?}"
    );
    assert!(summary.is_success());
}
