//! One flush worth of work: events grouped per (post, user), poison records,
//! and the apply rules that turn stored memberships into the writes of one
//! transaction.
//!
//! Invariants (ARCHITECTURE.md, "Where each invariant is kept"):
//! - a (post, user) contributes at most +1 to its post, and its contribution
//!   always equals its latest `liked`: [`Batch::plan`] only moves a key from
//!   not-liked to liked (+1) or back (-1), and only for a strictly newer event;
//! - a duplicate or stale event (not newer than the stored version) is a no-op.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use crate::event::{LikeEvent, LikeKind, Version};
use crate::model::poison::PoisonRecord;

/// Identifies one membership document: one (post, user) pair.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MembershipKey {
    /// The post.
    pub post_id: String,
    /// The user.
    pub user_id: String,
}

impl MembershipKey {
    /// The key of `event`.
    pub fn of(event: &LikeEvent) -> Self {
        Self {
            post_id: event.post_id().to_owned(),
            user_id: event.user_id().to_owned(),
        }
    }
}

/// The stored state of one (post, user).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// Whether the user likes the post now.
    pub liked: bool,
    /// The version of the event that set this state.
    pub version: Version,
}

/// The position of a message's ack handle in the take its batch came from,
/// so a batch part can be acked or nacked alone.
pub type MessageIndex = u32;

/// The events of one membership in a batch, in version order: inline when
/// there is one (most memberships in a batch have one), so grouping a
/// batch allocates per membership only where events repeat.
pub type KeyEvents = smallvec::SmallVec<[Tagged<LikeEvent>; 1]>;

/// A batch's events per membership, in key order, each key once: a list
/// the grouping builds already sorted (no tree is built over it; a key is
/// found by binary search, which only the replay tool's dry run does).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grouped(Vec<(MembershipKey, KeyEvents)>);

impl Grouped {
    /// The keys, in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &MembershipKey> {
        self.0.iter().map(|(key, _)| key)
    }

    /// Each key's events, in key order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &KeyEvents> {
        self.0.iter().map(|(_, events)| events)
    }

    /// Each key with its events, in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&MembershipKey, &KeyEvents)> {
        self.0.iter().map(|(key, events)| (key, events))
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each key's events, owned, in key order.
    pub fn into_values(self) -> impl Iterator<Item = KeyEvents> {
        self.0.into_iter().map(|(_, events)| events)
    }

    /// Whether it holds `key`.
    pub fn contains_key(&self, key: &MembershipKey) -> bool {
        self.0.binary_search_by(|(k, _)| k.cmp(key)).is_ok()
    }

    /// One key's events.
    fn one(key: MembershipKey, events: KeyEvents) -> Self {
        Self(vec![(key, events)])
    }
}

/// An item of a batch with the message it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tagged<T> {
    /// The event or poison record.
    pub item: T,
    /// Its message.
    pub message: MessageIndex,
}

/// What applying a batch did, per event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Events that changed a membership.
    pub applied: u64,
    /// Events already applied (same event id as the state they met).
    pub duplicates: u64,
    /// Events older than the state they met.
    pub stale: u64,
    /// Poison messages quarantined.
    pub poison: u64,
}

impl Effects {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: Effects) {
        self.applied += other.applied;
        self.duplicates += other.duplicates;
        self.stale += other.stale;
        self.poison += other.poison;
    }
}

/// A membership whose state a batch changes: borrowed from the batch, so
/// planning copies no id (the writers read them where they are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned<'b> {
    /// The position of its key in [`Batch::keys`] (what an index-aligned
    /// read, like [`StoredStates`] for a slice, is indexed by).
    pub index: usize,
    /// Its (post, user).
    pub key: &'b MembershipKey,
    /// Whether the user likes the post after the batch.
    pub liked: bool,
    /// The newest event applied: its version is the new state's.
    pub event: &'b LikeEvent,
}

impl Planned<'_> {
    /// The new state, owned (copies the event id).
    pub fn membership(&self) -> Membership {
        Membership {
            liked: self.liked,
            version: self.event.version(),
        }
    }
}

/// The stored memberships a batch is planned against: `state(index, key)`
/// is the stored state of the batch's `index`-th key `key` (absent: never
/// seen). Implemented by a map (by key) and by a slice aligned with
/// [`Batch::keys`] (by index: no hashing, no key to own).
pub trait StoredStates {
    /// The stored state of the `index`-th key, `key`, of the batch.
    fn state(&self, index: usize, key: &MembershipKey) -> Option<&Membership>;
}

impl<S: BuildHasher> StoredStates for HashMap<MembershipKey, Membership, S> {
    fn state(&self, _index: usize, key: &MembershipKey) -> Option<&Membership> {
        self.get(key)
    }
}

impl StoredStates for [Option<Membership>] {
    fn state(&self, index: usize, _key: &MembershipKey) -> Option<&Membership> {
        self.get(index).and_then(Option::as_ref)
    }
}

/// The writes one batch needs, given the stored memberships.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan<'b> {
    /// Memberships whose state changes, with the new state, in key order.
    pub memberships: Vec<Planned<'b>>,
    /// Net like delta per post (zero deltas omitted).
    pub deltas: BTreeMap<String, i64>,
    /// Per-event outcome counts.
    pub effects: Effects,
}

/// Where each of `events` goes when grouped: by (post, user), then version,
/// then arrival (`events` come in message order, so among equal versions
/// the index keeps arrival order). What is sorted is each event's two ids,
/// sliced once, and its index: a comparison reads two slices instead of
/// finding four fields in two events, and the events themselves move once,
/// after. The version is read only where a (post, user) repeats.
fn grouping_order(events: &[Tagged<LikeEvent>]) -> Vec<u32> {
    // A batch never holds 2^32 messages (max_batch_events is far smaller).
    let mut keys: Vec<(&str, &str, u32)> = (0..)
        .zip(events)
        .map(|(i, e)| (e.item.post_id(), e.item.user_id(), i))
        .collect();
    let version = |i: u32| events.get(i as usize).map(|e| &e.item);
    keys.sort_unstable_by(|a, b| {
        (a.0, a.1).cmp(&(b.0, b.1)).then_with(|| {
            let versions = match (version(a.2), version(b.2)) {
                (Some(x), Some(y)) => x.cmp_versions(y),
                _ => std::cmp::Ordering::Equal,
            };
            versions.then(a.2.cmp(&b.2))
        })
    });
    keys.into_iter().map(|(_, _, i)| i).collect()
}

/// The events and poison of one flush.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// Unique id; the batch marker's dedupe key is `{consumer}:{id}`.
    pub id: String,
    /// Events per (post, user), each list sorted by version.
    pub events: Grouped,
    /// Poison messages.
    pub poison: Vec<Tagged<PoisonRecord>>,
    /// Pub/Sub messages this batch covers (events + poison).
    pub message_count: usize,
    /// The generation of the erased users' tombstones its events were
    /// checked against ([`crate::store::TombstoneState`]); `None`: not
    /// checked (no hash key, or a tool's batch). A commit applies a checked
    /// batch only while the store holds that generation.
    pub tombstone_generation: Option<i64>,
}

impl Batch {
    /// Groups `events` and `poison` into a batch with a fresh random id;
    /// their messages are numbered in that order, events first.
    pub fn new(events: Vec<LikeEvent>, poison: Vec<PoisonRecord>) -> Self {
        // A batch never holds 2^32 messages (max_batch_events is far smaller).
        let first_poison = events.len() as MessageIndex;
        let events = (0..).zip(events).map(tag).collect();
        let poison = (first_poison..).zip(poison).map(tag).collect();
        Self::of_messages(events, poison)
    }

    /// Groups tagged `events` and `poison` into a batch with a fresh random id.
    /// `events` come in message order (as a take and [`Batch::new`] give
    /// them): among equal versions of one membership the earlier message
    /// is applied first.
    pub fn of_messages(events: Vec<Tagged<LikeEvent>>, poison: Vec<Tagged<PoisonRecord>>) -> Self {
        let message_count = events.len() + poison.len();
        debug_assert!(events.is_sorted_by_key(|e| e.message));
        let order = grouping_order(&events);
        let mut runs: Vec<(MembershipKey, KeyEvents)> = Vec::with_capacity(order.len());
        // Moved out in that order: each event once, no per-event search.
        let mut slots: Vec<Option<Tagged<LikeEvent>>> = events.into_iter().map(Some).collect();
        let mut sorted = order
            .into_iter()
            .filter_map(|i| slots.get_mut(i as usize)?.take())
            .peekable();
        while let Some(first) = sorted.next() {
            let key = MembershipKey::of(&first.item);
            let mut list = KeyEvents::new();
            list.push(first);
            let same = |e: &Tagged<LikeEvent>| {
                e.item.post_id() == key.post_id && e.item.user_id() == key.user_id
            };
            while let Some(next) = sorted.next_if(same) {
                list.push(next);
            }
            runs.push((key, list));
        }
        Self {
            id: new_batch_id(),
            events: Grouped(runs),
            poison,
            message_count,
            tombstone_generation: None,
        }
    }

    /// The messages this batch covers, events and poison.
    pub fn messages(&self) -> impl Iterator<Item = MessageIndex> + '_ {
        let events = self.events.values().flatten().map(|e| e.message);
        events.chain(self.poison.iter().map(|p| p.message))
    }

    /// Number of events (not counting poison).
    pub fn event_count(&self) -> usize {
        self.events.values().map(|list| list.len()).sum()
    }

    /// The membership keys to read.
    pub fn keys(&self) -> impl Iterator<Item = &MembershipKey> {
        self.events.keys()
    }

    /// Applies the events, per key in version order, to `stored` (absent =
    /// never seen: not liked, older than any event).
    pub fn plan(&self, stored: &(impl StoredStates + ?Sized)) -> Plan<'_> {
        let mut plan = Plan {
            effects: Effects {
                poison: self.poison.len() as u64,
                ..Effects::default()
            },
            ..Plan::default()
        };
        // The keys come in (post, user) order, so one post's memberships
        // are consecutive: its delta is summed here and put in the map
        // once, when the next post begins (not looked up per event), and
        // only when it is not zero.
        let mut post_delta: Option<(&String, i64)> = None;
        for (index, (key, events)) in self.events.iter().enumerate() {
            if post_delta.is_some_and(|(post, _)| *post != key.post_id) {
                put_delta(&mut plan.deltas, post_delta.take());
            }
            let stored = stored.state(index, key);
            let mut liked = stored.is_some_and(|s| s.liked);
            // The newest event applied so far; before any, the stored state.
            let mut newest: Option<&LikeEvent> = None;
            for event in events.iter().map(|e| &e.item) {
                let met = match (newest, stored) {
                    (Some(prev), _) => Some((event.cmp_versions(prev), prev.event_id())),
                    (None, Some(s)) => Some((event.cmp_version(&s.version), &*s.version.event_id)),
                    (None, None) => None,
                };
                if let Some((order, met_id)) = met {
                    if order.is_le() {
                        if event.event_id() == met_id {
                            plan.effects.duplicates += 1;
                        } else {
                            plan.effects.stale += 1;
                        }
                        continue;
                    }
                }
                let now_liked = event.kind == LikeKind::Added;
                let delta = i64::from(now_liked) - i64::from(liked);
                if delta != 0 {
                    post_delta.get_or_insert((&key.post_id, 0)).1 += delta;
                }
                liked = now_liked;
                newest = Some(event);
                plan.effects.applied += 1;
            }
            if let Some(event) = newest {
                plan.memberships.push(Planned {
                    index,
                    key,
                    liked,
                    event,
                });
            }
        }
        put_delta(&mut plan.deltas, post_delta);
        plan
    }

    /// Removes the events of every (post, user) for which `drop` says so,
    /// keeping the id (an earlier attempt's marker still settles it);
    /// returns how many events went. Their messages are then in no part
    /// of the batch, so the flusher acks them with the take.
    pub fn drop_events(&mut self, mut drop: impl FnMut(&MembershipKey) -> bool) -> usize {
        let before = self.message_count;
        self.events.0.retain(|(key, events)| {
            if drop(key) {
                self.message_count -= events.len();
                false
            } else {
                true
            }
        });
        before - self.message_count
    }

    /// Whether [`Batch::split`] would split it (it holds more than one
    /// event or poison record).
    pub fn can_split(&self) -> bool {
        self.message_count > 1
    }

    /// Splits a batch the store refused into two smaller parts, both with
    /// fresh ids, or gives it back (`Err`) when it holds one event or one
    /// poison record at most (then that item is the culprit). Events and poison are separated
    /// first (poison is isolated on its own path: a refused quarantine
    /// record never takes a valid event with it); then the keys are halved;
    /// then one key's events; then the poison records.
    pub fn split(self) -> Result<(Batch, Batch), Batch> {
        let tombstone_generation = self.tombstone_generation;
        let part = |events: Grouped, poison: Vec<Tagged<PoisonRecord>>| {
            let events_len: usize = events.values().map(|list| list.len()).sum();
            Batch {
                id: new_batch_id(),
                message_count: events_len + poison.len(),
                events,
                poison,
                tombstone_generation,
            }
        };
        let one_key_events = self.events.values().next().map_or(0, |list| list.len());
        let Batch {
            mut events,
            mut poison,
            ..
        } = self;
        if !events.is_empty() && !poison.is_empty() {
            return Ok((part(events, Vec::new()), part(Grouped::default(), poison)));
        }
        if events.len() > 1 {
            let second = Grouped(events.0.split_off(events.len() / 2));
            return Ok((part(events, Vec::new()), part(second, Vec::new())));
        }
        if events.len() == 1 && one_key_events > 1 {
            if let Some((key, mut list)) = events.0.pop() {
                // In version order: the older half commits first.
                let newer: KeyEvents = list.drain(list.len() / 2..).collect();
                return Ok((
                    part(Grouped::one(key.clone(), list), Vec::new()),
                    part(Grouped::one(key, newer), Vec::new()),
                ));
            }
        }
        if poison.len() > 1 {
            let second = poison.split_off(poison.len() / 2);
            return Ok((
                part(Grouped::default(), poison),
                part(Grouped::default(), second),
            ));
        }
        Err(part(events, poison))
    }
}

/// Puts one post's summed delta in `deltas`, unless there is none or it
/// sums to zero (zero deltas are omitted). Each post comes once: its
/// memberships are consecutive in key order.
fn put_delta(deltas: &mut BTreeMap<String, i64>, post_delta: Option<(&String, i64)>) {
    if let Some((post, delta)) = post_delta.filter(|&(_, delta)| delta != 0) {
        let earlier = deltas.insert(post.clone(), delta);
        debug_assert!(earlier.is_none(), "a post's memberships are consecutive");
    }
}

/// `item` tagged with `message`.
fn tag<T>((message, item): (MessageIndex, T)) -> Tagged<T> {
    Tagged { item, message }
}

/// 128 random bits as 32 hex digits.
pub fn new_batch_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: LikeKind, post: &str, user: &str, seq: i64, id: &str) -> LikeEvent {
        let version = Version {
            seq,
            occurred_at_micros: 0,
            event_id: id.into(),
        };
        LikeEvent::new(kind, post, user, &version, None).expect("valid test event")
    }

    use LikeKind::{Added, Removed};

    /// No membership stored yet.
    fn nothing_stored() -> HashMap<MembershipKey, Membership> {
        HashMap::new()
    }

    #[test]
    fn a_batch_holds_each_membership_once_in_key_order_and_finds_it_by_key() {
        let batch = Batch::new(
            vec![
                ev(Added, "p", "v", 1, "a"),
                ev(Added, "b", "u", 1, "b"),
                ev(Added, "p", "u", 1, "c"),
                ev(Removed, "p", "v", 2, "d"),
                ev(Added, "pp", "a", 1, "e"),
            ],
            vec![],
        );
        let keys: Vec<_> = batch.keys().cloned().collect();
        let mut expected: Vec<_> = keys.clone();
        expected.sort();
        expected.dedup();
        assert_eq!(keys, expected, "sorted, each once");
        assert_eq!(batch.events.len(), 4);
        for key in &keys {
            assert!(batch.events.contains_key(key), "{key:?}");
        }
        let absent = MembershipKey::of(&ev(Added, "p", "w", 1, "f"));
        assert!(!batch.events.contains_key(&absent));
        let lists: Vec<usize> = batch.events.values().map(|list| list.len()).collect();
        assert_eq!(lists, [1, 1, 2, 1], "b/u, p/u, p/v (twice), pp/a");
    }

    #[test]
    fn double_like_by_one_user_counts_once() {
        let batch = Batch::new(
            vec![ev(Added, "p", "u", 1, "a"), ev(Added, "p", "u", 2, "b")],
            vec![],
        );
        let plan = batch.plan(&nothing_stored());
        assert_eq!(plan.deltas["p"], 1);
        assert_eq!(plan.effects.applied, 2);
        assert_eq!(plan.memberships.len(), 1);
    }

    #[test]
    fn a_post_whose_changes_cancel_out_has_no_delta_beside_posts_that_change() {
        let stored = HashMap::from([(
            MembershipKey::of(&ev(Added, "p", "v", 1, "s")),
            Membership {
                liked: true,
                version: ev(Added, "p", "v", 1, "s").version(),
            },
        )]);
        let batch = Batch::new(
            vec![
                ev(Added, "a", "u", 1, "a1"),
                ev(Added, "p", "u", 1, "p1"),
                ev(Removed, "p", "u", 2, "p2"),
                ev(Added, "p", "w", 1, "p3"),
                ev(Removed, "p", "v", 2, "p4"),
                ev(Added, "z", "u", 1, "z1"),
            ],
            vec![],
        );
        let plan = batch.plan(&stored);
        assert_eq!(plan.effects.applied, 6);
        assert_eq!(
            plan.deltas,
            BTreeMap::from([("a".into(), 1), ("z".into(), 1)]),
            "p: +1 -1 (u), +1 (w), -1 (v): no entry"
        );
    }

    #[test]
    fn duplicate_event_in_batch_is_a_no_op() {
        let batch = Batch::new(
            vec![ev(Added, "p", "u", 1, "a"), ev(Added, "p", "u", 1, "a")],
            vec![],
        );
        let plan = batch.plan(&nothing_stored());
        assert_eq!(plan.deltas["p"], 1);
        assert_eq!(plan.effects.duplicates, 1);
    }

    #[test]
    fn out_of_order_like_unlike_like_ends_liked() {
        let batch = Batch::new(
            vec![
                ev(Added, "p", "u", 3, "c"),
                ev(Added, "p", "u", 1, "a"),
                ev(Removed, "p", "u", 2, "b"),
            ],
            vec![],
        );
        let plan = batch.plan(&nothing_stored());
        assert_eq!(plan.deltas["p"], 1);
        assert!(plan.memberships[0].liked);
        assert_eq!(plan.memberships[0].event.seq, 3);
    }

    #[test]
    fn stale_event_after_stored_state_is_a_no_op() {
        let key = MembershipKey {
            post_id: "p".into(),
            user_id: "u".into(),
        };
        let stored = HashMap::from([(
            key,
            Membership {
                liked: false,
                version: ev(Removed, "p", "u", 5, "x").version(),
            },
        )]);
        let batch = Batch::new(vec![ev(Added, "p", "u", 4, "old")], vec![]);
        let plan = batch.plan(&stored);
        assert!(plan.deltas.is_empty());
        assert!(plan.memberships.is_empty());
        assert_eq!(plan.effects.stale, 1);
    }

    #[test]
    fn redelivered_batch_changes_nothing() {
        let events = vec![ev(Added, "p", "u1", 1, "a"), ev(Added, "p", "u2", 1, "b")];
        let first_batch = Batch::new(events.clone(), vec![]);
        let first = first_batch.plan(&nothing_stored());
        let stored: HashMap<_, _> = first
            .memberships
            .iter()
            .map(|p| (p.key.clone(), p.membership()))
            .collect();
        let again_batch = Batch::new(events, vec![]);
        let again = again_batch.plan(&stored);
        assert!(again.deltas.is_empty());
        assert!(again.memberships.is_empty());
        assert_eq!(again.effects.duplicates, 2);
    }

    #[test]
    fn unlike_of_unknown_key_is_recorded_without_delta() {
        let batch = Batch::new(vec![ev(Removed, "p", "u", 1, "r")], vec![]);
        let plan = batch.plan(&nothing_stored());
        assert!(plan.deltas.is_empty());
        assert_eq!(plan.memberships.len(), 1);
        assert!(!plan.memberships[0].liked);
    }

    #[test]
    fn events_group_by_post_and_user_then_version_then_arrival() {
        let events = vec![
            ev(Added, "p", "v", 3, "late"),
            ev(Added, "b", "u", 1, "b1"),
            ev(Removed, "p", "u", 2, "same-first"),
            ev(Added, "p", "v", 1, "early"),
            ev(Added, "p", "u", 2, "same-second"),
            ev(Added, "a", "z", 1, "a1"),
            ev(Added, "p", "u", 1, "u1"),
        ];
        let batch = Batch::new(events, vec![]);
        // (post, user, [(event id, message)]) per membership, in order.
        type Group<'a> = (String, String, Vec<(&'a str, MessageIndex)>);
        let grouped: Vec<Group> = batch
            .events
            .iter()
            .map(|(k, list)| {
                let ids = list.iter().map(|e| (e.item.event_id(), e.message));
                (k.post_id.clone(), k.user_id.clone(), ids.collect())
            })
            .collect();
        let group = |p: &str, u: &str, ids: &[(&'static str, MessageIndex)]| {
            (p.to_owned(), u.to_owned(), ids.to_vec())
        };
        assert_eq!(
            grouped,
            vec![
                group("a", "z", &[("a1", 5)]),
                group("b", "u", &[("b1", 1)]),
                // Equal seq: the event id orders them; "same-first" < "same-second".
                group(
                    "p",
                    "u",
                    &[("u1", 6), ("same-first", 2), ("same-second", 4)]
                ),
                group("p", "v", &[("early", 3), ("late", 0)]),
            ]
        );
    }

    #[test]
    fn equal_versions_of_one_membership_apply_in_arrival_order() {
        // One version delivered twice with different kinds (a conflicting
        // replay): the earlier message is applied, the later is its duplicate.
        let batch = Batch::new(
            vec![ev(Removed, "p", "u", 1, "x"), ev(Added, "p", "u", 1, "x")],
            vec![],
        );
        let messages: Vec<MessageIndex> =
            batch.events.values().flatten().map(|e| e.message).collect();
        assert_eq!(messages, vec![0, 1]);
        let plan = batch.plan(&nothing_stored());
        assert_eq!((plan.effects.applied, plan.effects.duplicates), (1, 1));
        assert!(
            !plan.memberships[0].liked,
            "the first message's unlike is what stands"
        );
        let reversed = Batch::new(
            vec![ev(Added, "p", "u", 1, "x"), ev(Removed, "p", "u", 1, "x")],
            vec![],
        );
        assert!(reversed.plan(&nothing_stored()).memberships[0].liked);
    }

    #[test]
    fn split_keeps_every_event_once() {
        let events: Vec<_> = (0..9)
            .map(|i| ev(Added, "p", &format!("u{i}"), 1, &format!("e{i}")))
            .collect();
        let batch = Batch::new(events, vec![]);
        let (a, b) = batch.split().expect("nine keys split");
        assert_eq!(a.event_count() + b.event_count(), 9);
        assert!(a.event_count() >= 4 && b.event_count() >= 4);
        assert_ne!(a.id, b.id);
    }
}
