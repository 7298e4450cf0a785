//! Property test of the flusher's isolation: for any batch mixing valid
//! events and poison, with any subset of users whose events the store
//! refuses and any subset of quarantine records it refuses,
//! - every valid event the store accepts is committed exactly once, and
//!   its message acked;
//! - every refused event has a quarantine record and its message is acked,
//!   or its record was refused too and its message is nacked;
//! - every poison message has a record and is acked, or is nacked;
//! - nothing else is acked, and every message gets exactly one fate.

#[path = "support/events.rs"]
mod events;
#[path = "support/fates.rs"]
mod fates;

use fates::{Fate, Fates, Handle};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hotcount::event::LikeKind;
use hotcount::model::item::Item;
use hotcount::model::poison::PoisonRecord;
use hotcount::pipeline::acker::Acker;
use hotcount::pipeline::aggregator::{Aggregator, Pending};
use hotcount::pipeline::flusher::{FlushConfig, Flusher};
use hotcount::store::memory::{InjectedFailure, MemoryStore};
use hotcount::store::CounterStore;
use hotcount::telemetry::Stats;
use proptest::prelude::*;

/// A message of the generated batch.
#[derive(Clone, Debug)]
enum Msg {
    /// (post, user, added, seq)
    Event(u8, u8, bool, i64),
    Poison,
}

fn message() -> impl Strategy<Value = Msg> {
    prop_oneof![
        4 => (0u8..4, 0u8..6, any::<bool>(), 1i64..5)
            .prop_map(|(p, u, a, s)| Msg::Event(p, u, a, s)),
        1 => Just(Msg::Poison),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_message_is_committed_or_recorded_or_nacked_never_acked_without_either(
        messages in proptest::collection::vec(message(), 1..40),
        refused_users in proptest::collection::btree_set(0u8..6, 0..3),
        refused_records in proptest::collection::btree_set(0usize..40, 0..10),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let store = Arc::new(MemoryStore::default());
        for user in &refused_users {
            store.inject(InjectedFailure::RejectUser(format!("u{user}")));
        }
        // A refused record id: `m{i}` for poison, `event-e{i}` for an event.
        for i in &refused_records {
            store.inject(InjectedFailure::RejectRecord(format!("m{i}")));
            store.inject(InjectedFailure::RejectRecord(format!("event-e{i}")));
        }
        let agg = Arc::new(Aggregator::new(1, 1000));
        let stats = Arc::new(Stats::default());
        let flusher = Flusher::new(
            agg.clone(),
            store.clone(),
            Arc::new(Acker::new(stats.clone())),
            stats,
            FlushConfig { commit_max_attempts: 1, ..FlushConfig::default() },
        );
        let fates: Fates = Default::default();
        let mut accepted = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let item = match m {
                Msg::Event(p, u, a, s) => {
                    let e = events::like(*p, *u, *a, *s, 0, &format!("e{i}"));
                    if !refused_users.contains(u) {
                        accepted.push(e.clone());
                    }
                    Item::Event(e)
                }
                Msg::Poison => Item::Poison(Box::new(PoisonRecord::new(
                    format!("m{i}"), "bad".into(), b"x", Default::default(),
                ))),
            };
            agg.add(Pending { handle: Handle(i, fates.clone()), item, bytes: 1, published: None });
        }
        runtime.block_on(flusher.flush(0));

        let fates = fates.lock().clone();
        let quarantined: BTreeSet<String> =
            store.quarantine().into_iter().map(|r| r.message_id).collect();
        for (i, m) in messages.iter().enumerate() {
            let fate = fates.get(&i).cloned().unwrap_or_default();
            prop_assert_eq!(fate.len(), 1, "message {} has one fate: {:?}", i, fate);
            let record = match m {
                Msg::Event(_, u, ..) if refused_users.contains(u) => Some(format!("event-e{i}")),
                Msg::Event(..) => None,
                Msg::Poison => Some(format!("m{i}")),
            };
            match record {
                // A valid event the store takes: committed, acked.
                None => prop_assert_eq!(fate[0], Fate::Acked, "valid event {}", i),
                Some(id) => {
                    let refused = refused_records.contains(&i);
                    prop_assert_eq!(quarantined.contains(&id), !refused, "record {}", id);
                    let want = if refused { Fate::Nacked } else { Fate::Acked };
                    prop_assert_eq!(fate[0], want, "message {} with record {}", i, id);
                }
            }
        }
        // Exactly the accepted events are counted, once each.
        let mut newest: BTreeMap<(String, String), (i64, String, bool)> = BTreeMap::new();
        for e in &accepted {
            let key = (e.post_id().to_owned(), e.user_id().to_owned());
            let candidate = (e.version().seq, e.event_id().to_owned(), e.kind == LikeKind::Added);
            match newest.get(&key) {
                Some(c) if (c.0, &c.1) >= (candidate.0, &candidate.1) => {}
                _ => {
                    newest.insert(key, candidate);
                }
            }
        }
        let mut want: BTreeMap<String, i64> = BTreeMap::new();
        for ((post, _), (_, _, liked)) in newest {
            *want.entry(post).or_default() += i64::from(liked);
        }
        for post in 0..4 {
            let post = format!("p{post}");
            let got = runtime.block_on(store.count(&post)).expect("count");
            prop_assert_eq!(got, want.get(&post).copied().unwrap_or(0), "post {}", post);
        }
    }
}
