//! `hotcount count --live`: each change of some posts' rollups, as it
//! happens (Firestore: the Listen RPC on `counts/{post}`; PostgreSQL:
//! `LISTEN hotcount_counts`, then the row of each post notified).
//!
//! Invariant: reads only; a lost stream or connection is opened again
//! (resuming from the last resume token on Firestore, from scratch when
//! the server removes the target or an existence filter disagrees;
//! re-reading every row on PostgreSQL), and only a state that differs from
//! the last one printed for its post is handed on, so nothing is shown
//! twice and an unchanged post keeps its value across streams.

use std::collections::HashMap;
use std::time::Duration;

pub use crate::store::rollup::RollupChange;
use crate::store::selected::{ListenResume, SelectedDb};

/// Longest wait before a lost stream is opened again.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(10);

/// Hands each new state of the rollups of `posts` to `each`, until `each`
/// returns false; a failed stream is logged and opened again with backoff.
pub async fn watch(db: &SelectedDb, posts: &[String], mut each: impl FnMut(&RollupChange) -> bool) {
    let mut last: HashMap<String, Option<(i64, i64)>> = HashMap::new();
    // Across streams: the last state printed per post, and where the next
    // stream resumes (a resumed stream sends only what changed).
    let mut resume = ListenResume::default();
    let mut delay = Duration::from_millis(100);
    loop {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let listening = db.listen_rollups(posts, &mut resume, &tx);
        tokio::pin!(listening);
        let ended = loop {
            tokio::select! {
                ended = &mut listening => break ended,
                Some(change) = rx.recv() => {
                    delay = Duration::from_millis(100);
                    if last.get(&change.post_id) == Some(&change.rollup) {
                        continue;
                    }
                    last.insert(change.post_id.clone(), change.rollup);
                    if !each(&change) {
                        return;
                    }
                }
            }
        };
        // What the stream sent before it ended.
        while let Ok(change) = rx.try_recv() {
            if last.get(&change.post_id) != Some(&change.rollup) {
                last.insert(change.post_id.clone(), change.rollup);
                if !each(&change) {
                    return;
                }
            }
        }
        match ended {
            Ok(()) => tracing::warn!("the rollup stream ended; opening it again"),
            Err(error) => tracing::warn!(%error, "the rollup stream failed; opening it again"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RECONNECT_DELAY);
    }
}

/// One line of `count --live`: `POST<TAB>likes<TAB>asOf` (RFC 3339, in
/// microseconds), or `POST<TAB>0<TAB>-` while the post has no rollup.
pub fn line(change: &RollupChange) -> String {
    match change.rollup {
        Some((likes, as_of)) => {
            let at = chrono::DateTime::from_timestamp_micros(as_of)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
                .unwrap_or_else(|| as_of.to_string());
            format!("{}\t{likes}\t{at}", change.post_id)
        }
        None => format!("{}\t0\t-", change.post_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_shows_the_count_and_its_read_time() {
        let change = RollupChange {
            post_id: "p1".into(),
            rollup: Some((42, 1_764_633_600_000_001)),
        };
        assert_eq!(line(&change), "p1\t42\t2025-12-02T00:00:00.000001Z");
        let none = RollupChange {
            post_id: "p2".into(),
            rollup: None,
        };
        assert_eq!(line(&none), "p2\t0\t-");
    }
}
