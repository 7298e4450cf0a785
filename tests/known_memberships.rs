//! Commits from known memberships (`store::firestore::known`): a batch
//! whose memberships this replica knows, or never saw, commits in one round
//! trip with no read; a guess another writer made wrong is refused by its
//! precondition and the batch is read in its transaction, counted exactly.

mod common;
#[path = "support/events.rs"]
mod events;

use std::time::Duration;

use common::Harness;
use hotcount::model::batch::Batch;
use hotcount::store::firestore::FirestoreStore;
use hotcount::store::{Attempt, CommitOutcome, CommitReport, CounterStore, KnownUse};

/// A Firestore store over the harness's database, knowing up to `known`
/// memberships (0: every batch read in its transaction).
fn store(h: &Harness, consumer: &str, known: usize) -> FirestoreStore {
    FirestoreStore::new(
        h.db.clone(),
        hotcount::store::StoreSettings {
            consumer: consumer.into(),
            counter_shards: 4,
            counter_shard_target_writes_per_sec: 1,
            marker_ttl: Duration::from_secs(86_400),
            due_records: false,
            known_memberships: known,
        },
    )
}

/// `user` likes (`added`) or unlikes `post` at `seq`, as event `id`.
fn batch_of(events: &[(bool, &str, &str, i64, &str)]) -> Batch {
    let events = events
        .iter()
        .map(|&(added, post, user, seq, id)| {
            events::event_of(added, post, user, seq, 1_700_000_000_000_000 + seq, id)
        })
        .collect();
    Batch::new(events, Vec::new())
}

async fn commit(store: &FirestoreStore, batch: &Batch) -> CommitReport {
    store
        .commit(batch, &Attempt::first())
        .await
        .expect("commits")
}

fn reads(h: &Harness) -> u64 {
    h.emulators.firestore_counters().get("BatchGetDocuments")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memberships_never_seen_or_known_commit_in_one_round_trip_with_no_read() {
    let h = Harness::start().await;
    let s = store(&h, "c1", 1_000);
    let first = commit(
        &s,
        &batch_of(&[(true, "p", "u1", 1, "e1"), (true, "p", "u2", 1, "e2")]),
    )
    .await;
    assert_eq!((first.rpcs, first.effects.applied), (1, 2), "{first:?}");
    // u1 known (liked at 1): unliked at 2; a duplicate of e2 is a no-op.
    let second = commit(
        &s,
        &batch_of(&[(false, "p", "u1", 2, "e3"), (true, "p", "u2", 1, "e2")]),
    )
    .await;
    assert_eq!(second.rpcs, 1, "{second:?}");
    assert_eq!((second.effects.applied, second.effects.duplicates), (1, 1));
    assert_eq!(reads(&h), 0, "nothing was read");
    assert_eq!(h.count("p").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_another_writer_changed_is_refused_then_read_and_counted_exactly() {
    let h = Harness::start().await;
    let a = store(&h, "a", 1_000);
    let b = store(&h, "b", 1_000);
    commit(&a, &batch_of(&[(true, "p", "u1", 1, "e1")])).await;
    // b never saw u1 and assumes it absent: its Commit is refused (the
    // document exists), its transaction reads it and unlikes.
    let by_b = commit(&b, &batch_of(&[(false, "p", "u1", 2, "e2")])).await;
    assert_eq!((by_b.rpcs, by_b.effects.applied), (3, 1), "{by_b:?}");
    assert_eq!(h.count("p").await, 0);
    // a still knows "liked at 1": a like at 3 is no change against that,
    // but it writes the newer version on the known update time, which b's
    // commit changed: refused, read, and counted (+1), not lost.
    let by_a = commit(&a, &batch_of(&[(true, "p", "u1", 3, "e3")])).await;
    assert_eq!((by_a.rpcs, by_a.effects.applied), (3, 1), "{by_a:?}");
    assert_eq!(h.count("p").await, 1);
    // An event older than what a knows is a no-op whatever changed since
    // (read in its transaction: the refusal sends a's next two batches there).
    let stale = commit(&a, &batch_of(&[(false, "p", "u1", 2, "e2")])).await;
    assert_eq!((stale.rpcs, stale.effects.stale), (2, 1), "{stale:?}");
    assert_eq!(h.count("p").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_committed_before_is_found_by_its_marker_not_applied_twice() {
    let h = Harness::start().await;
    let s = store(&h, "c1", 1_000);
    let batch = batch_of(&[(true, "p", "u1", 1, "e1"), (true, "q", "u1", 1, "e2")]);
    commit(&s, &batch).await;
    // The same batch again (its answer lost, say): every event is a no-op
    // against what is known, and the marker, written only if absent,
    // exists: refused, and the transaction finds the marker.
    let again = commit(&s, &batch).await;
    assert_eq!(again.outcome, CommitOutcome::AlreadyCommitted, "{again:?}");
    assert_eq!(again.effects.applied, 2, "the first commit's effects");
    assert_eq!((h.count("p").await, h.count("q").await), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_refusal_the_next_batches_are_read_in_their_transaction() {
    let h = Harness::start().await;
    let a = store(&h, "a", 1_000);
    let b = store(&h, "b", 1_000);
    for user in ["u1", "u2", "u3"] {
        commit(&a, &batch_of(&[(true, "p", user, 1, &format!("a-{user}"))])).await;
    }
    // b guesses u1 absent: refused (1 + 2 round trips); the next two
    // batches go to the transaction directly (2 each), then b guesses again.
    let mut rpcs = Vec::new();
    for (user, id) in [("u1", "b1"), ("u2", "b2"), ("u3", "b3"), ("u4", "b4")] {
        rpcs.push(
            commit(&b, &batch_of(&[(false, "p", user, 2, id)]))
                .await
                .rpcs,
        );
    }
    assert_eq!(rpcs, [3, 2, 2, 1]);
    assert_eq!(
        h.count("p").await,
        0,
        "3 liked by a, all 3 unliked by b, u4 unliked from nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_known_memberships_every_batch_is_read_in_its_transaction() {
    let h = Harness::start().await;
    let s = store(&h, "c1", 0);
    let report = commit(&s, &batch_of(&[(true, "p", "u1", 1, "e1")])).await;
    assert_eq!(report.rpcs, 2);
    let report = commit(&s, &batch_of(&[(false, "p", "u1", 2, "e2")])).await;
    assert_eq!(report.rpcs, 2);
    assert_eq!(reads(&h), 2);
    assert_eq!(h.count("p").await, 0);
}

/// Commits `batch` through `store`, retrying transient failures as the
/// flusher does; the report of the attempt that ended it.
async fn commit_retrying(store: &FirestoreStore, batch: &Batch) -> (CommitReport, u32) {
    let mut attempt = Attempt::first();
    for failed in 0.. {
        match store.commit(batch, &attempt).await {
            Ok(report) => return (report, failed),
            Err(e) if e.is_retryable() && failed < 5 => attempt = Attempt::after(&e),
            Err(e) => panic!("{e}"),
        }
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_commit_lost_before_or_after_it_applied_is_counted_once_by_its_retry() {
    use gcloud_sdk::tonic::Code;
    use hotcount_emulators::FaultSpec;
    let h = Harness::start().await;
    let s = store(&h, "c1", 1_000);
    let faults = h.emulators.firestore_faults();
    // Refused before it applied: the retry reads the key (seen, so not
    // assumed absent again), outside a transaction, and commits alone.
    faults
        .add(FaultSpec::error("Commit", Code::Unavailable).times(1))
        .expect("fault");
    let (report, failed) = commit_retrying(&s, &batch_of(&[(true, "p", "u1", 1, "e1")])).await;
    assert_eq!(
        (failed, report.outcome, report.rpcs),
        (1, CommitOutcome::Committed, 2)
    );
    let read_then_alone = KnownUse::Committed;
    assert_eq!(
        report.known, read_then_alone,
        "read (seen, forgotten), no transaction"
    );
    // Applied, its answer lost: the retry reads the membership (now
    // liked), finds its event a duplicate, and its Commit is refused on the
    // marker (it exists); its transaction finds the marker.
    faults
        .add(FaultSpec::error_after_apply("Commit", Code::Unavailable).times(1))
        .expect("fault");
    let (report, failed) = commit_retrying(&s, &batch_of(&[(true, "p", "u2", 1, "e2")])).await;
    assert_eq!(
        (failed, report.outcome, report.known),
        (1, CommitOutcome::AlreadyCommitted, KnownUse::Refused)
    );
    assert_eq!(h.count("p").await, 2);
    // The refusal sends the next two batches to their transaction; then u1,
    // learnt from what was read, changes in one round trip.
    for user in ["u3", "u4"] {
        let report = commit(&s, &batch_of(&[(true, "p", user, 1, user)])).await;
        assert_eq!(report.rpcs, 2, "{report:?}");
    }
    let report = commit(&s, &batch_of(&[(false, "p", "u1", 2, "e3")])).await;
    assert_eq!(report.rpcs, 1, "{report:?}");
    assert_eq!(h.count("p").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_over_memberships_another_wrote_counts_its_refusals_and_stays_exact() {
    use common::Ev;
    const WAIT: Duration = Duration::from_secs(30);
    let h = Harness::start().await;
    let likes: Vec<Ev> = (0..40)
        .map(|u| Ev::like(&format!("l{u}"), "p", &format!("u{u}"), 1))
        .collect();
    let first = h.spawn(h.run_args("c1", &[]));
    h.publish(&likes).await;
    assert!(first.wait_for_acks(40, WAIT).await);
    let first = first.stop().await;
    assert!(first.known_commits.get() > 0, "never seen: guessed absent");
    assert_eq!(first.known_refusals.get(), 0);
    // A new replica knows none of them: it guesses them absent, is
    // refused, reads them, and unlikes each exactly once.
    let unlikes: Vec<Ev> = (0..40)
        .map(|u| Ev::unlike(&format!("x{u}"), "p", &format!("u{u}"), 2))
        .collect();
    let second = h.spawn(h.run_args("c1", &[]));
    h.publish(&unlikes).await;
    assert!(second.wait_for_acks(40, WAIT).await);
    let second = second.stop().await;
    assert!(second.known_refusals.get() > 0, "its guesses were refused");
    assert_eq!(h.count("p").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memberships_evicted_from_a_small_store_are_read_alone_without_a_transaction() {
    let h = Harness::start().await;
    // 640 entries (10 in each of 64 shards) for 960 memberships (~15 a
    // shard): each shard evicts, and its record of seen keys (20-40 a
    // shard) still holds every key, so none is guessed absent.
    let s = store(&h, "c1", 640);
    // Every user likes (at 1) or unlikes (at 2) the post, in one batch.
    let every_user = |added: bool, seq: i64| {
        let events = (0..960)
            .map(|u| {
                let id = format!("{added}-{u}");
                events::event_of(
                    added,
                    "p",
                    &format!("u{u}"),
                    seq,
                    1_700_000_000_000_000,
                    &id,
                )
            })
            .collect();
        Batch::new(events, Vec::new())
    };
    let first = commit(&s, &every_user(true, 1)).await;
    assert_eq!((first.rpcs, first.known), (1, KnownUse::Committed));
    let second = commit(&s, &every_user(false, 2)).await;
    assert_eq!(
        (second.rpcs, second.known),
        (2, KnownUse::Committed),
        "{second:?}"
    );
    assert_eq!(second.effects.applied, 960);
    assert_eq!(reads(&h), 1, "one read, of the forgotten ones");
    let stats = h.emulators.firestore().stats();
    assert_eq!(stats.transactions_begun, 0, "{stats:?}");
    assert!(
        (1..960).contains(&stats.documents_read),
        "the forgotten ones only: {stats:?}"
    );
    assert_eq!(h.count("p").await, 0);
}
