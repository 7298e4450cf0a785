//! What the store refuses is isolated: a refused event is quarantined
//! and the rest commits, a refused record nacks its message alone, a
//! contended batch that cannot be split is nacked, and a failure that
//! proves nothing nacks and never quarantines.

use super::super::isolate::Settlement;
use super::{Fate, Rig};
use crate::model::batch::Batch;
use crate::store::memory::InjectedFailure;
use crate::store::{CounterStore, ErrorClass, StoreError};

#[tokio::test]
async fn a_contended_batch_that_cannot_be_split_is_nacked_not_dropped() {
    let mut rig = Rig::new();
    rig.like("p", "u1", 1);
    let taken = rig.agg.take(0);
    let batch = Batch::of_messages(taken.events, taken.poison);
    assert!(!batch.can_split(), "one event: nothing to split");
    let error = StoreError {
        op: "Commit",
        code: crate::store::Code::Aborted,
        message: "contention".into(),
        class: ErrorClass::Transient,
        transaction: None,
    };
    let (mut work, mut settled) = (Vec::new(), Settlement::default());
    rig.flusher
        .split_contended(batch, error, &mut work, &mut settled);
    assert!(work.is_empty(), "nothing left to commit");
    assert_eq!(settled.nack, vec![0], "its message is nacked, never acked");
    assert!(settled.gave_up.is_some_and(|e| e.is_contention()));
}

#[tokio::test]
async fn permanent_error_is_isolated_and_the_rest_commits() {
    let mut rig = Rig::new();
    for i in 0..7 {
        rig.like("p", &format!("u{i}"), 1);
    }
    rig.like("p", "bad", 1);
    rig.store.inject(InjectedFailure::RejectUser("bad".into()));
    rig.flusher.flush(0).await;
    assert_eq!(rig.store.count("p").await.unwrap(), 7);
    let quarantine = rig.store.quarantine();
    assert_eq!(quarantine.len(), 1);
    assert!(quarantine[0].reason.contains("rejected by the store"));
    assert_eq!(rig.fates.lock().len(), 8);
    assert!(rig.fates.lock().iter().all(|(_, f)| *f == Fate::Acked));
}

#[tokio::test]
async fn a_refused_quarantine_record_nacks_its_message_alone_and_every_valid_event_counts() {
    let mut rig = Rig::new();
    let mut valid = Vec::new();
    for i in 0..20 {
        valid.push(rig.like("p", &format!("u{i}"), 1));
    }
    let bad = [rig.poison(), rig.poison()];
    let good = rig.poison();
    for handle in bad {
        rig.store
            .inject(InjectedFailure::RejectRecord(format!("m{handle}")));
    }
    rig.flusher.flush(0).await;
    assert_eq!(
        rig.store.count("p").await.unwrap(),
        20,
        "no valid like lost"
    );
    for handle in valid.into_iter().chain([good]) {
        assert_eq!(rig.fate(handle), [Fate::Acked], "handle {handle}");
    }
    for handle in bad {
        assert_eq!(rig.fate(handle), [Fate::Nacked], "handle {handle}");
    }
    let quarantine = rig.store.quarantine();
    assert_eq!(quarantine.len(), 1, "{quarantine:?}");
    assert_eq!(quarantine[0].message_id, format!("m{good}"));
    assert_eq!(rig.flusher.stats.quarantine_refused.get(), 2);
    assert_eq!(rig.flusher.stats.isolated.get(), 0);
}

#[tokio::test]
async fn a_refused_event_whose_record_is_refused_too_is_nacked_alone() {
    let mut rig = Rig::new();
    let good = rig.like("p", "u1", 1);
    let bad = rig.like("p", "bad", 1);
    rig.store.inject(InjectedFailure::RejectUser("bad".into()));
    rig.store
        .inject(InjectedFailure::RejectRecord("event-bad-1".into()));
    rig.flusher.flush(0).await;
    assert_eq!(rig.store.count("p").await.unwrap(), 1);
    assert_eq!(rig.fate(good), [Fate::Acked]);
    assert_eq!(rig.fate(bad), [Fate::Nacked]);
    assert!(rig.store.quarantine().is_empty());
}

#[tokio::test]
async fn a_failure_that_proves_nothing_nacks_and_never_quarantines() {
    let mut rig = Rig::new();
    rig.like("p", "u1", 1);
    rig.poison();
    for _ in 0..3 {
        rig.store
            .inject(InjectedFailure::Before(ErrorClass::Transient));
    }
    rig.flusher.flush(0).await;
    assert!(rig.store.quarantine().is_empty());
    assert_eq!(rig.flusher.stats.isolated.get(), 0);
    assert_eq!(rig.fate(1), [Fate::Nacked]);
    assert_eq!(rig.fate(2), [Fate::Nacked]);
}
