//! The CI-sized chaos run: three `hotcount run` processes (the debug
//! binary), one of them killed with SIGKILL again and again, every fault kind
//! injected, a Seek replay, and exact counts at the end.

use std::time::Duration;

use hotcount_loadgen::chaos::{self, ChaosConfig};

#[path = "support/hotcount_bin.rs"]
mod hotcount_bin;

use hotcount_bin::hotcount_bin;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_consumers_stay_exact_under_kills_faults_hostile_content_and_replay() {
    // Smaller than the pull run's by default: each message is its own HTTP
    // request here, and every fault kind still fires at this size.
    let events = std::env::var("CHAOS_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8_000);
    let mut config = ChaosConfig::ci(events, hotcount_bin());
    config.timeout = Duration::from_secs(150);
    config.delivery = hotcount::config::Delivery::Push;
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let summary = chaos::run(&config, cancel).await.expect("chaos run");
    println!("{}", chaos::render(&summary));
    for kind in chaos::PUSH_FAULT_KINDS {
        assert!(
            summary.faults.get(kind).copied().unwrap_or(0) > 0,
            "{kind} fired"
        );
    }
    let failures = summary.failures();
    assert!(
        failures.is_empty(),
        "chaos claims that failed: {failures:#?}"
    );
}
