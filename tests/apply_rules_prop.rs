//! Property tests of the apply rules ([`Batch::plan`]) and the aggregator:
//! for any interleaving, duplication, reordering and batching of a set of
//! events (and any replay of them), the committed state equals the state
//! from applying each (post, user)'s newest event once.

#[path = "support/events.rs"]
mod events;

use std::collections::{BTreeMap, HashMap};

use hotcount::event::{LikeEvent, LikeKind};
use hotcount::model::batch::{Batch, Membership, MembershipKey};
use hotcount::model::item::Item;
use hotcount::model::poison::PoisonRecord;
use hotcount::pipeline::aggregator::{Aggregator, Pending};
use proptest::prelude::*;

/// One distinct event: (post, user, added, seq, occurred); its id is its index.
type Spec = (u8, u8, bool, i64, i64);

fn events(specs: &[Spec]) -> Vec<LikeEvent> {
    specs
        .iter()
        .enumerate()
        .map(|(i, (post, user, added, seq, occurred))| {
            events::like(*post, *user, *added, *seq, *occurred, &format!("e{i:04}"))
        })
        .collect()
}

/// The model: per (post, user) the newest event decides; count = liked keys.
fn model(events: &[LikeEvent]) -> (HashMap<MembershipKey, Membership>, BTreeMap<String, i64>) {
    let mut newest: HashMap<MembershipKey, Membership> = HashMap::new();
    for e in events {
        let key = MembershipKey::of(e);
        let state = Membership {
            liked: e.kind == LikeKind::Added,
            version: e.version(),
        };
        match newest.get(&key) {
            Some(current) if current.version >= state.version => {}
            _ => {
                newest.insert(key, state);
            }
        }
    }
    let mut counts = BTreeMap::new();
    for (key, m) in &newest {
        *counts.entry(key.post_id.clone()).or_insert(0) += i64::from(m.liked);
    }
    counts.retain(|_, c| *c != 0);
    (newest, counts)
}

/// The store: memberships and counters, changed only by applying a plan
/// (one serialised transaction per batch, as Firestore does).
#[derive(Default)]
struct Store {
    memberships: HashMap<MembershipKey, Membership>,
    counts: BTreeMap<String, i64>,
}

impl Store {
    fn commit(&mut self, batch: &Batch) {
        let plan = batch.plan(&self.memberships);
        // The store's read gives the states aligned with the batch's keys
        // instead of by key: the same plan.
        let aligned: Vec<Option<Membership>> = batch
            .keys()
            .map(|k| self.memberships.get(k).cloned())
            .collect();
        assert_eq!(batch.plan(aligned.as_slice()), plan);
        for (post, delta) in &plan.deltas {
            assert!(delta.abs() <= batch.events.len() as i64);
            *self.counts.entry(post.clone()).or_insert(0) += delta;
        }
        for planned in &plan.memberships {
            let state = planned.membership();
            let stored = self.memberships.get(planned.key);
            assert!(
                stored.is_none_or(|s| s.version < state.version),
                "a membership only moves forward"
            );
            self.memberships.insert(planned.key.clone(), state);
        }
        self.counts.retain(|_, c| *c != 0);
    }

    fn check_invariant(&self) {
        let mut liked: BTreeMap<String, i64> = BTreeMap::new();
        for (key, m) in &self.memberships {
            if m.liked {
                *liked.entry(key.post_id.clone()).or_insert(0) += 1;
            }
        }
        assert_eq!(self.counts, liked, "sum(shards) == liked memberships");
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    (0u8..3, 0u8..4, any::<bool>(), 0i64..4, 0i64..3)
}

/// A delivery: each event index 1..=3 times, in a random order, cut into batches.
fn delivery(n: usize) -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    let copies = proptest::collection::vec(1usize..=3, n);
    copies
        .prop_flat_map(|copies| {
            let order: Vec<usize> = copies
                .iter()
                .enumerate()
                .flat_map(|(i, c)| std::iter::repeat_n(i, *c))
                .collect();
            let len = order.len();
            (
                Just(order).prop_shuffle(),
                proptest::collection::vec(1usize..=8, len.max(1)),
            )
        })
        .boxed()
}

fn specs_and_delivery() -> impl Strategy<Value = (Vec<Spec>, Vec<usize>, Vec<usize>)> {
    proptest::collection::vec(spec(), 1..40).prop_flat_map(|specs| {
        let n = specs.len();
        (Just(specs), delivery(n)).prop_map(|(s, (order, cuts))| (s, order, cuts))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_interleaving_duplication_and_batching_commits_the_newest_state(
        (specs, order, cuts) in specs_and_delivery(),
        replay in any::<bool>(),
    ) {
        let all = events(&specs);
        let (want_memberships, want_counts) = model(&all);
        let mut store = Store::default();
        let mut rounds = vec![order];
        if replay {
            // A Seek replays everything, in reverse this time.
            let mut again = rounds[0].clone();
            again.reverse();
            rounds.push(again);
        }
        for round in &rounds {
            let mut rest = round.as_slice();
            let mut cut = cuts.iter().cycle();
            while !rest.is_empty() {
                let take = (*cut.next().unwrap()).min(rest.len());
                let (now, later) = rest.split_at(take);
                let batch = Batch::new(now.iter().map(|i| all[*i].clone()).collect(), vec![]);
                store.commit(&batch);
                store.check_invariant();
                rest = later;
            }
        }
        prop_assert_eq!(&store.counts, &want_counts);
        prop_assert_eq!(&store.memberships, &want_memberships);
    }

    #[test]
    fn redelivering_a_committed_batch_changes_nothing(
        (specs, order, _cuts) in specs_and_delivery(),
    ) {
        let all = events(&specs);
        let batch = Batch::new(order.iter().map(|i| all[*i].clone()).collect(), vec![]);
        let mut store = Store::default();
        store.commit(&batch);
        // Unknown commit outcome: the retry re-reads and finds nothing new.
        let again = batch.plan(&store.memberships);
        prop_assert!(again.deltas.is_empty());
        prop_assert!(again.memberships.is_empty());
        prop_assert_eq!(again.effects.applied, 0);
    }

    #[test]
    fn aggregator_hands_out_each_message_once_and_batches_commit_exactly(
        (specs, order, cuts) in specs_and_delivery(),
        shards in 1usize..6,
        max_batch in 1usize..10,
        poison_every in 2usize..9,
    ) {
        let all = events(&specs);
        let (_, want_counts) = model(&all);
        let agg: Aggregator<usize> = Aggregator::new(shards, max_batch);
        let mut store = Store::default();
        let mut taken_handles = Vec::new();
        let mut cut = cuts.iter().cycle();
        let mut key_shard: HashMap<(String, String), usize> = HashMap::new();
        let mut take_some = |agg: &Aggregator<usize>, store: &mut Store, shard: usize| {
            let t = agg.take(shard);
            prop_assert!(t.len() <= max_batch);
            taken_handles.extend(t.handles.iter().copied());
            let batch = Batch::of_messages(t.events, t.poison);
            store.commit(&batch);
            Ok(())
        };
        for (handle, index) in order.iter().enumerate() {
            let item = if handle % poison_every == 0 {
                Item::Poison(Box::new(PoisonRecord::new(
                    format!("m{handle}"),
                    "bad".into(),
                    b"x",
                    Default::default(),
                )))
            } else {
                Item::Event(all[*index].clone())
            };
            let key = match &item {
                Item::Event(e) => Some((e.post_id().to_owned(), e.user_id().to_owned())),
                Item::Poison(_) => None,
            };
            // Events whose message was replaced by poison are re-added below.
            let shard = agg.add(Pending { handle, item, bytes: 1, published: None });
            if let Some(key) = key {
                let first = *key_shard.entry(key).or_insert(shard);
                prop_assert_eq!(first, shard, "one membership, one shard");
            }
            if *cut.next().unwrap() % 3 == 0 {
                take_some(&agg, &mut store, handle % shards)?;
            }
        }
        // Every distinct event once more as a valid message (poison replaced some copies).
        let base = order.len();
        for (i, e) in all.iter().enumerate() {
            agg.add(Pending { handle: base + i, item: Item::Event(e.clone()), bytes: 1, published: None });
        }
        for shard in 0..shards {
            while agg.len(shard) > 0 {
                take_some(&agg, &mut store, shard)?;
            }
        }
        prop_assert_eq!(agg.total_len(), 0);
        prop_assert_eq!(agg.total_bytes(), 0);
        taken_handles.sort_unstable();
        let expected: Vec<usize> = (0..base + all.len()).collect();
        prop_assert_eq!(taken_handles, expected, "every handle taken exactly once");
        store.check_invariant();
        prop_assert_eq!(store.counts, want_counts);
    }
}
