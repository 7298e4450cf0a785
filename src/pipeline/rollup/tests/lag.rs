//! The rollup lag a refresh reports: from the first change its rollup did
//! not show yet to the rollup showing it, for a busy post too.

use std::time::Duration;

use tokio::time::Instant;

use super::super::{Marks, Settled};
use crate::store::ChangedCounter;

fn change(post: &str) -> Vec<ChangedCounter> {
    vec![ChangedCounter {
        post_id: post.to_string(),
        shard: Some(0),
    }]
}

/// A post changed again while its refresh runs: that refresh's rollup
/// shows the first change (its wait is recorded then, not held back until
/// a refresh finds the post quiet), and the next wait counts from the
/// change it did not show, not from the first change ever.
#[tokio::test(start_paused = true)]
async fn a_busy_posts_lag_runs_from_the_first_change_its_rollup_does_not_show() {
    let ms = Duration::from_millis;
    let marks = Marks::new(16, Duration::from_secs(10));
    let t0 = Instant::now();
    marks.mark(&change("p"), Some(1), None, t0);
    let first = marks.take_due(t0 + ms(100), false, 10);
    assert_eq!(first.len(), 1);
    marks.mark(&change("p"), Some(2), None, t0 + ms(150));
    assert_eq!(
        marks.settle(&first[0], Some(10), Settled::Done, t0 + ms(200)),
        Some(ms(200)),
        "the first change waited 200 ms for a rollup showing it"
    );
    assert_eq!(marks.len(), 1, "the second change is not in that rollup");
    let second = marks.take_due(t0 + ms(1_000), false, 10);
    assert_eq!(second.len(), 1);
    assert_eq!(
        marks.settle(&second[0], Some(20), Settled::Done, t0 + ms(1_050)),
        Some(ms(900)),
        "the second change, made at 150 ms, waited 900 ms"
    );
    assert!(marks.is_empty());
}

/// A refresh that did not show the post's changes (a failed store, a
/// deferral) records no wait and leaves the first change's time as it was.
#[tokio::test(start_paused = true)]
async fn a_refresh_that_shows_nothing_leaves_the_wait_running() {
    let ms = Duration::from_millis;
    let marks = Marks::new(16, Duration::from_secs(10));
    let t0 = Instant::now();
    marks.mark(&change("p"), Some(1), None, t0);
    let first = marks.take_due(t0, false, 10);
    marks.mark(&change("p"), Some(2), None, t0 + ms(50));
    assert_eq!(
        marks.settle(&first[0], None, Settled::Failed, t0 + ms(100)),
        None
    );
    let again = marks.take_due(t0 + ms(2_000), false, 10);
    assert_eq!(again.len(), 1);
    assert_eq!(
        marks.settle(&again[0], Some(5), Settled::Done, t0 + ms(2_000)),
        Some(ms(2_000)),
        "still counted from the first change"
    );
}
