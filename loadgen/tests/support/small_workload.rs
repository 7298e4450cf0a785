//! The small workload the flow tests run: 3,000 events over 200 posts with
//! every hazard but hostile content, so a test drains in seconds.

use hotcount_loadgen::WorkloadConfig;

/// 3,000 events, Zipf 1.1 over 200 posts, 5 % unlikes and duplicates, 1 % poison.
pub fn small_workload(seed: u64) -> WorkloadConfig {
    WorkloadConfig {
        events: 3_000,
        posts: 200,
        users: 2_000,
        zipf_exponent: 1.1,
        unlike_fraction: 0.05,
        duplicate_fraction: 0.05,
        poison_fraction: 0.01,
        hostile_fraction: 0.0,
        shuffle: false,
        seed,
    }
}
