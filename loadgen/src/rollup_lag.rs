//! What a reader of the rollups sees while a run goes on: the age of the
//! rollups of the most liked posts (now minus their `asOf`), sampled every
//! [`EVERY`] from the first publish until stopped.
//!
//! Invariant: reads only, through the store's own rollup read (one round
//! trip per sample for every post sampled), and counts its round trips so
//! a run's store figures can leave them out.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use hotcount::store::rollup::{micros_of, RollupKey, RollupStore};
use hotcount::store::selected::SelectedDb;
use tokio::sync::watch;

use crate::report::{self, Percentiles};
use crate::workload::Truth;

/// How often the rollups are read.
pub const EVERY: Duration = Duration::from_millis(100);

/// Posts sampled: the most liked ones.
pub const POSTS: usize = 3;

/// The ages a reader saw.
#[derive(Clone, Debug, Default)]
pub struct RollupLag {
    /// The age of each rollup read (posts with no rollup yet are left out).
    pub age: Percentiles,
    /// Reads of the store made (one per sample), to leave out of a run's
    /// store round trips.
    pub reads: u64,
}

/// The `POSTS` most liked posts of `truth`.
pub fn top_posts(truth: &Truth) -> Vec<String> {
    let mut posts: Vec<(&String, &i64)> = truth.counts.iter().collect();
    posts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    posts
        .into_iter()
        .take(POSTS)
        .map(|(p, _)| p.clone())
        .collect()
}

/// Samples the rollups of `posts` every [`EVERY`] until `stop` turns true.
pub async fn sample(
    db: Arc<SelectedDb>,
    posts: Vec<String>,
    mut stop: watch::Receiver<bool>,
) -> RollupLag {
    // Ages up to an hour, 3 significant digits.
    let mut ages =
        Histogram::<u64>::new_with_max(3_600_000_000, 3).expect("valid histogram bounds");
    let mut reads = 0;
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
        let keys: Vec<RollupKey<'_>> = posts
            .iter()
            .map(|p| RollupKey {
                post_id: p,
                shards: 1,
            })
            .collect();
        reads += 1;
        let Ok(snapshot) = db.read_rollups(&keys).await else {
            continue;
        };
        let now = micros_of(SystemTime::now());
        for stored in snapshot.posts.iter().filter_map(|p| p.stored.as_ref()) {
            let age = u64::try_from(now - stored.as_of).unwrap_or(0);
            let _ = ages.record(age.min(ages.high()));
        }
    }
    RollupLag {
        age: report::percentiles(&ages),
        reads,
    }
}
