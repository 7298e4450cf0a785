//! The pure decision table: what one post's read calls for.

use std::time::Duration;

use super::super::{decide, Decision, Due};
use super::INTERVAL;
use crate::store::rollup::{Micros, PostRead, StoredRollup};

fn due(covered_at: Option<Micros>, shards: u32) -> Due {
    Due {
        post_id: "p".into(),
        covered_at,
        shards,
        generation: 1,
        changed: true,
        grow: 0,
    }
}

fn read(likes: i64, stored: Option<(i64, Micros, Option<u32>)>) -> PostRead {
    read_found(likes, stored, 1)
}

fn read_found(likes: i64, stored: Option<(i64, Micros, Option<u32>)>, found: u32) -> PostRead {
    PostRead {
        likes,
        found_shards: found,
        stored: stored.map(|(likes, as_of, shards)| StoredRollup {
            likes,
            as_of,
            shards,
            update_time: None,
            milestone: None,
        }),
    }
}

#[test]
fn the_decision_table() {
    let second = 1_000_000;
    let t = 100 * second;
    let write = |likes, shards| Decision::Write { likes, shards };
    // No rollup yet: write.
    assert_eq!(
        decide(&due(None, 1), &read(5, None), t, INTERVAL, true),
        write(5, 1)
    );
    // A rollup as of the change or later: nothing to do.
    let fresh = Some((5, t - 1, Some(1)));
    assert_eq!(
        decide(&due(Some(t - 2), 1), &read(5, fresh), t, INTERVAL, true),
        Decision::Covered
    );
    // Older than the change, younger than the interval: wait out the rest.
    assert_eq!(
        decide(
            &due(Some(t), 1),
            &read(6, Some((5, t - second / 4, Some(1)))),
            t,
            INTERVAL,
            true
        ),
        Decision::Defer {
            after: Duration::from_millis(750)
        }
    );
    // ... unless at shutdown.
    assert_eq!(
        decide(
            &due(Some(t), 1),
            &read(6, Some((5, t - second / 4, Some(1)))),
            t,
            INTERVAL,
            false
        ),
        write(6, 1)
    );
    // Old enough (within the slack): write, covering every shard found.
    assert_eq!(
        decide(
            &due(None, 2),
            &read_found(6, Some((5, t - second * 9 / 10, Some(1))), 2),
            t,
            INTERVAL,
            true
        ),
        write(6, 2)
    );
    // Read over every possible shard (a batch found already committed,
    // its shard unknown): only the shards that exist are registered.
    assert_eq!(
        decide(
            &due(None, 16),
            &read_found(6, Some((5, t - 5 * second, Some(1))), 1),
            t,
            INTERVAL,
            true
        ),
        write(6, 1)
    );
    // The rollup covers more shards than were read: read those too.
    assert_eq!(
        decide(
            &due(None, 2),
            &read(6, Some((5, t - 5 * second, Some(16)))),
            t,
            INTERVAL,
            true
        ),
        Decision::Incomplete { shards: 16 }
    );
    // A rollup as of the change but over fewer shards than this replica
    // wrote: not covered.
    assert_eq!(
        decide(
            &due(Some(t - 9 * second), 8),
            &read_found(6, Some((5, t - 5 * second, Some(2))), 8),
            t,
            INTERVAL,
            true
        ),
        write(6, 8)
    );
    // A hot post asks for more counter shards: the rollup registers them
    // (with the sum read: no shard beyond those registered exists yet)...
    let grow = Due {
        changed: false,
        grow: 8,
        ..due(None, 2)
    };
    assert_eq!(
        decide(
            &grow,
            &read(6, Some((6, t - 5 * second, Some(2)))),
            t,
            INTERVAL,
            true
        ),
        write(6, 8)
    );
    // ... once: a rollup registering them is all it needs.
    assert_eq!(
        decide(
            &grow,
            &read(6, Some((6, t - 5 * second, Some(8)))),
            t,
            INTERVAL,
            true
        ),
        Decision::Incomplete { shards: 8 },
        "read the registered shards first"
    );
    let grown = Due { shards: 8, ..grow };
    assert_eq!(
        decide(
            &grown,
            &read(6, Some((6, t - 5 * second, Some(8)))),
            t,
            INTERVAL,
            true
        ),
        Decision::Covered
    );
    // PostgreSQL sums every shard: a rollup covers them all.
    assert_eq!(
        decide(
            &due(Some(t - 9 * second), 8),
            &read(6, Some((6, t - 5 * second, None))),
            t,
            INTERVAL,
            true
        ),
        Decision::Covered
    );
}
