//! What this replica knows of the memberships it read or committed: each
//! one's state and update time, so a batch whose every membership is known
//! commits in ONE round trip, a Commit with no read and no transaction,
//! whose every membership write carries a precondition on the state
//! assumed (`update_time` as known, or `exists = false`). Memberships seen
//! but no longer known (evicted, or their Commit failed) are read first,
//! outside a transaction, and the Commit's preconditions hold what was
//! read: two round trips, reading only those.
//!
//! Invariants:
//! - An entry is a state the store held at the entry's update time (read
//!   then, or written by a Commit that applied). A membership's version only
//!   grows (the apply rules write only strictly newer events; only `users
//!   erase` deletes, and it runs with tombstones, whose checked batches never
//!   take this path). So an event not newer than an entry is not newer than
//!   the stored state either: a no-op both ways, with no write. An event
//!   that is newer writes on the precondition `update_time` = the entry's,
//!   which fails, failing the whole Commit, if the document changed since.
//!   A state read outside a transaction is such an entry too (the store
//!   held it at its update time).
//! - A key this replica did not see lately is assumed absent (`exists =
//!   false`: the Commit fails if another replica or an earlier run wrote
//!   it). A key is recorded as seen before any Commit that may write it is
//!   sent, and stays seen when its entry is forgotten or evicted, for at
//!   least the last `SEEN_PER_ENTRY / 2 x` capacity keys recorded: the
//!   record keeps two generations and drops the older when the newer is
//!   full, so a long-running replica's guesses about keys seen long ago may
//!   be wrong. Exactness never rests on the record, only the cost does: a
//!   wrong guess is refused like any other.
//! - A Commit refused on a precondition applied nothing (Commit is atomic);
//!   its keys are forgotten and the batch goes the transactional way. After
//!   `n` refusals in a row the next `2^n` batches (at most 64) go that way
//!   directly, so a replica whose guesses fail (others write the same
//!   memberships; a restart over old data) pays ~1 wasted round trip in 64.

use std::collections::hash_map::Entry;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, Ordering};

use gcloud_sdk::prost_types::Timestamp;
use parking_lot::Mutex;
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};
use smallvec::SmallVec;

use crate::event::Version;
use crate::model::batch::{Membership, MembershipKey, Plan};

/// Shards of the map (locks taken per key, one commit's keys at a time).
const SHARDS: usize = 64;

/// Seen keys recorded per entry of capacity (8 bytes and a control byte
/// each, against ~160 bytes an entry).
const SEEN_PER_ENTRY: usize = 4;

/// The most batches sent the transactional way after refusals in a row.
const MAX_SKIP: u32 = 64;

/// Bytes of a slot's ids held in the slot itself: a post id, user id and
/// event id of usual lengths (a UUID event id is 36) fit, longer ones
/// move to the heap.
const INLINE_TEXT: usize = 64;

/// One membership as this replica last knew it, under its key's hash:
/// the key (to tell two keys of one hash apart: the one not in the slot
/// counts as seen, not known), its state and its document's update time.
/// The post id, user id and the state's event id are held back to back in
/// the slot itself when they fit [`INLINE_TEXT`]: learning a key then
/// allocates nothing, and telling whether a slot is a key's reads no
/// memory beyond the slot (a second cache miss per lookup, in a table far
/// larger than the caches, when the ids lived on the heap).
struct Slot {
    /// The post id, the user id, then (when the document exists) the
    /// event id of its state's version: whole `str`s, back to back.
    text: SmallVec<[u8; INLINE_TEXT]>,
    post_len: u32,
    user_len: u32,
    /// Its state (`None`: the document did not exist); the event id is
    /// the rest of `text`.
    state: Option<Known>,
    /// Its document's update time (`None` when it did not exist).
    update_time: Option<Timestamp>,
}

/// A state's fields besides its event id.
#[derive(Clone, Copy)]
struct Known {
    liked: bool,
    seq: i64,
    occurred_at_micros: i64,
}

impl Known {
    /// The fields of `state` (whether the user likes the post, the
    /// version's event id, seq and time) besides its event id.
    fn of(state: Option<(bool, &str, i64, i64)>) -> Option<Self> {
        state.map(|(liked, _, seq, occurred_at_micros)| Self {
            liked,
            seq,
            occurred_at_micros,
        })
    }
}

impl Slot {
    /// A slot for `key` in `state` at `update_time` (`state` gives whether
    /// the user likes the post and the version's event id, seq and time).
    fn new(
        key: &MembershipKey,
        state: Option<(bool, &str, i64, i64)>,
        update_time: Option<Timestamp>,
    ) -> Self {
        let event_id = state.map_or("", |(_, id, _, _)| id);
        let mut text =
            SmallVec::with_capacity(key.post_id.len() + key.user_id.len() + event_id.len());
        text.extend_from_slice(key.post_id.as_bytes());
        text.extend_from_slice(key.user_id.as_bytes());
        text.extend_from_slice(event_id.as_bytes());
        Self {
            text,
            // Ids are far below 4 GiB (a payload is at most 64 KiB).
            post_len: key.post_id.len() as u32,
            user_len: key.user_id.len() as u32,
            state: Known::of(state),
            update_time,
        }
    }

    /// Puts `state` at `update_time` in this slot (its key unchanged), in
    /// place.
    fn set(&mut self, state: Option<(bool, &str, i64, i64)>, update_time: Option<Timestamp>) {
        let event_id = state.map_or("", |(_, id, _, _)| id);
        self.text.truncate((self.post_len + self.user_len) as usize);
        self.text.extend_from_slice(event_id.as_bytes());
        self.state = Known::of(state);
        self.update_time = update_time;
    }

    /// Whether this is `key`'s slot.
    fn is(&self, key: &MembershipKey) -> bool {
        let (post, rest) = self.text.split_at(self.post_len as usize);
        post == key.post_id.as_bytes()
            && rest.get(..self.user_len as usize) == Some(key.user_id.as_bytes())
    }

    /// Its state, owned: `Some(None)` when its document did not exist;
    /// `None` if its event id were not text (it always is: the slot holds
    /// whole `str`s), so the key would be read, never guessed.
    fn membership(&self) -> Option<Option<Membership>> {
        let event_id = self.text.get((self.post_len + self.user_len) as usize..)?;
        let event_id = std::str::from_utf8(event_id).ok()?;
        Some(self.state.map(|known| Membership {
            liked: known.liked,
            version: Version {
                seq: known.seq,
                occurred_at_micros: known.occurred_at_micros,
                event_id: event_id.to_owned(),
            },
        }))
    }
}

#[derive(Default)]
struct Shard {
    entries: FxHashMap<u64, Slot>,
    /// Keys seen lately: recorded here until it holds half the record's
    /// capacity, then it becomes `seen_before` (dropping the one there).
    seen: FxHashSet<u64>,
    /// The generation of seen keys before `seen`.
    seen_before: FxHashSet<u64>,
}

impl Shard {
    /// Whether the key of `hash` is recorded as seen.
    fn saw(&self, hash: u64) -> bool {
        self.seen.contains(&hash) || self.seen_before.contains(&hash)
    }
}

/// A batch's keys hashed once, in its order: what [`KnownMemberships`]
/// finds them by.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct KeyHashes(Vec<u64>);

/// The states a batch is planned against, recalled instead of read:
/// aligned with the batch's keys, as a read returns them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recalled {
    /// Per key: its state, when its document exists (or is assumed absent).
    pub found: Vec<Option<Membership>>,
    /// Per key: its update time (the precondition of its write); `None`:
    /// written only if absent.
    pub update_times: Vec<Option<Timestamp>>,
    /// Keys assumed absent because this replica did not see them lately.
    pub assumed_absent: usize,
    /// Positions of the keys seen but not known (evicted, or their last
    /// Commit failed): read, outside a transaction, before the Commit,
    /// whose preconditions then hold what was read. Their `found` and
    /// `update_times` are `None` until then.
    pub forgotten: Vec<usize>,
    /// The keys' hashes.
    pub hashes: KeyHashes,
}

/// What this replica knows of memberships (see the module's invariants).
pub struct KnownMemberships {
    shards: Box<[Mutex<Shard>]>,
    entries_per_shard: usize,
    seen_per_shard: usize,
    /// Refusals in a row (capped).
    refusals: AtomicU32,
    /// Batches still to send the transactional way before trying again.
    skip: AtomicU32,
}

impl KnownMemberships {
    /// Knows at most ~`entries` memberships (0: knows none, and every
    /// batch is read in its transaction).
    pub fn new(entries: usize) -> Self {
        let entries_per_shard = entries.div_ceil(SHARDS);
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            entries_per_shard,
            seen_per_shard: entries_per_shard * SEEN_PER_ENTRY,
            refusals: AtomicU32::new(0),
            skip: AtomicU32::new(0),
        }
    }

    /// Whether it may know anything.
    pub fn enabled(&self) -> bool {
        self.entries_per_shard > 0
    }

    /// The hashes of `keys` (a batch's, in order).
    pub fn hashes<'k>(&self, keys: impl Iterator<Item = &'k MembershipKey>) -> KeyHashes {
        if !self.enabled() {
            return KeyHashes::default();
        }
        KeyHashes(keys.map(hash).collect())
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        // The high bits: FxHash's low bits are the weaker.
        &self.shards[(hash >> 58) as usize % SHARDS]
    }

    /// The states of `keys` (a batch's, in order), each known, assumed
    /// absent or to be read ([`Recalled::forgotten`]: seen, not known), when
    /// refusals do not say to read them all in a transaction (`None`).
    pub fn recall<'k>(&self, keys: impl Iterator<Item = &'k MembershipKey>) -> Option<Recalled> {
        if !self.enabled() {
            return None;
        }
        let skip = self.skip.load(Ordering::Relaxed);
        if skip > 0 {
            // Racing commits may both take one off: a few more tries sooner.
            self.skip.store(skip - 1, Ordering::Relaxed);
            return None;
        }
        let (count, _) = keys.size_hint();
        let mut recalled = Recalled {
            found: Vec::with_capacity(count),
            update_times: Vec::with_capacity(count),
            assumed_absent: 0,
            forgotten: Vec::new(),
            hashes: KeyHashes(Vec::with_capacity(count)),
        };
        for (index, key) in keys.enumerate() {
            let hash = hash(key);
            let shard = self.shard(hash).lock();
            let slot = shard.entries.get(&hash);
            let state = slot.filter(|slot| slot.is(key)).and_then(|slot| {
                let update_time = slot.update_time;
                slot.membership().map(|state| (state, update_time))
            });
            match state {
                Some((state, update_time)) => {
                    recalled.found.push(state);
                    recalled.update_times.push(update_time);
                }
                None => {
                    recalled.found.push(None);
                    recalled.update_times.push(None);
                    // Seen and not known (another key of its hash may be).
                    if slot.is_some() || shard.saw(hash) {
                        recalled.forgotten.push(index);
                    } else {
                        recalled.assumed_absent += 1;
                    }
                }
            }
            recalled.hashes.0.push(hash);
        }
        Some(recalled)
    }

    /// Records the keys of `hashes` as seen: called before a Commit that
    /// may write them is sent, so none of them is assumed absent after it.
    pub fn see(&self, hashes: &KeyHashes) {
        for &hash in &hashes.0 {
            let mut shard = self.shard(hash).lock();
            if shard.saw(hash) {
                continue;
            }
            if shard.seen.len() >= self.seen_per_shard / 2 {
                let newer = std::mem::take(&mut shard.seen);
                shard.seen_before = newer;
            }
            shard.seen.insert(hash);
        }
    }

    /// Forgets what is known of `keys` (their Commit failed or its outcome
    /// is unknown); they stay seen.
    pub fn forget<'k>(&self, keys: impl Iterator<Item = &'k MembershipKey>, hashes: &KeyHashes) {
        for (key, &hash) in keys.zip(&hashes.0) {
            let mut shard = self.shard(hash).lock();
            if shard.entries.get(&hash).is_some_and(|slot| slot.is(key)) {
                shard.entries.remove(&hash);
            }
        }
    }

    /// Learns what a committed batch left: for each of `keys` (the batch's,
    /// in order, seen with [`Self::see`] before its Commit was sent) the
    /// planned state written at `commit_time`, or, unchanged, the state it
    /// was planned against when that was read ([`Unchanged::Read`]; from
    /// known memberships, each key it did not write was known and still is).
    ///
    /// Sound only for a Commit that applied with a precondition on each
    /// planned write (a changed document takes the Commit's time as its
    /// update time: every planned write changes the version it stores).
    /// Without the Commit's time (`None`: the store did not say), nothing
    /// written can be known: `keys` are forgotten instead.
    pub fn learn<'k>(
        &self,
        keys: impl Iterator<Item = &'k MembershipKey>,
        hashes: &KeyHashes,
        plan: &Plan,
        commit_time: Option<Timestamp>,
        unchanged: Unchanged,
    ) {
        let Some(commit_time) = commit_time else {
            return self.forget(keys, hashes);
        };
        let mut planned = plan.memberships.iter().peekable();
        for (index, (key, &hash)) in keys.zip(&hashes.0).enumerate() {
            let (state, update_time) = match planned.next_if(|p| p.index == index) {
                Some(p) => {
                    let event = p.event;
                    let state = (
                        p.liked,
                        event.event_id(),
                        event.seq,
                        event.occurred_at_micros,
                    );
                    (Some(state), Some(commit_time))
                }
                None => match unchanged {
                    Unchanged::AlreadyKnown => continue,
                    Unchanged::Read {
                        found,
                        update_times,
                    } => {
                        let state = found.get(index).and_then(Option::as_ref).map(|m| {
                            let v = &m.version;
                            (m.liked, v.event_id.as_str(), v.seq, v.occurred_at_micros)
                        });
                        (state, update_times.get(index).copied().flatten())
                    }
                },
            };
            let mut shard = self.shard(hash).lock();
            // The size first: a full shard is rare (it empties when full),
            // so a key is usually found or placed with one probe.
            if shard.entries.len() >= self.entries_per_shard && !shard.entries.contains_key(&hash) {
                // Evicted all at once: their keys stay seen.
                shard.entries.clear();
            }
            match shard.entries.entry(hash) {
                // Known already (most keys, where the same users act
                // again): updated where it is, with no allocation.
                Entry::Occupied(mut slot) if slot.get().is(key) => {
                    slot.get_mut().set(state, update_time);
                }
                Entry::Occupied(mut slot) => *slot.get_mut() = Slot::new(key, state, update_time),
                Entry::Vacant(slot) => {
                    slot.insert(Slot::new(key, state, update_time));
                }
            }
        }
    }

    /// A batch committed from what was known: guesses are good again.
    pub fn confirmed(&self) {
        self.refusals.store(0, Ordering::Relaxed);
    }

    /// A batch's Commit from what was known was refused on a precondition:
    /// send the next batches the transactional way, twice as many as after
    /// the last refusal in a row.
    pub fn refused(&self) {
        let refusals = (self.refusals.load(Ordering::Relaxed) + 1).min(MAX_SKIP.trailing_zeros());
        self.refusals.store(refusals, Ordering::Relaxed);
        self.skip.store(1 << refusals, Ordering::Relaxed);
    }
}

/// The states of the keys a commit did not write: where they came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unchanged<'a> {
    /// Read in the commit's transaction, per key: learnt.
    Read {
        /// Its state, when its document exists.
        found: &'a [Option<Membership>],
        /// Its document's update time, when it exists.
        update_times: &'a [Option<Timestamp>],
    },
    /// Recalled from what is known: nothing to learn.
    AlreadyKnown,
}

/// A key's hash (FxHash of its post and user).
fn hash(key: &MembershipKey) -> u64 {
    FxBuildHasher.hash_one(key)
}

impl std::fmt::Debug for KnownMemberships {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnownMemberships")
            .field("entries_per_shard", &self.entries_per_shard)
            .finish_non_exhaustive()
    }
}

/// Whether a Commit from known memberships failed on a precondition (a
/// membership changed, or one assumed absent exists, or the batch's marker
/// exists): it applied nothing, and the batch's transaction will tell why.
pub fn refused_on_precondition(error: &crate::store::StoreError) -> bool {
    use crate::store::Code;
    error.op == "Commit" && matches!(error.code, Code::FailedPrecondition | Code::AlreadyExists)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{LikeEvent, LikeKind, Version};
    use crate::model::batch::Batch;

    fn key(user: &str) -> MembershipKey {
        MembershipKey {
            post_id: "p".into(),
            user_id: user.into(),
        }
    }

    fn like(user: &str, seq: i64) -> LikeEvent {
        let version = Version {
            seq,
            occurred_at_micros: seq,
            event_id: format!("{user}-{seq}"),
        };
        LikeEvent::new(LikeKind::Added, "p", user, &version, None).expect("valid")
    }

    /// Whether `key` alone would be read before its Commit.
    fn forgotten(known: &KnownMemberships, key: &MembershipKey) -> bool {
        let recalled = known.recall(std::iter::once(key)).expect("no refusal");
        !recalled.forgotten.is_empty()
    }

    fn time(seconds: i64) -> Timestamp {
        Timestamp { seconds, nanos: 0 }
    }

    #[test]
    fn keys_never_seen_are_assumed_absent_and_seen_ones_not_known_are_read() {
        let known = KnownMemberships::new(1_000);
        let keys = [key("a"), key("b")];
        let recalled = known.recall(keys.iter()).expect("none seen");
        assert_eq!(recalled.assumed_absent, 2);
        assert_eq!(recalled.found, [None, None]);
        assert_eq!(recalled.update_times, [None, None]);
        known.see(&known.hashes(keys[..1].iter()));
        let recalled = known.recall(keys.iter()).expect("no refusal");
        assert_eq!(recalled.forgotten, [0], "a was seen, is not known: read");
        assert_eq!(recalled.assumed_absent, 1);
    }

    #[test]
    fn a_committed_batch_leaves_its_written_states_at_the_commit_time_and_the_rest_as_read() {
        let known = KnownMemberships::new(1_000);
        let batch = Batch::new(vec![like("a", 2)], Vec::new());
        let keys: Vec<MembershipKey> = batch.keys().cloned().chain([key("b")]).collect();
        let stored_b = Membership {
            liked: true,
            version: like("b", 7).version(),
        };
        let found = [None, Some(stored_b.clone())];
        let read_times = [None, Some(time(5))];
        let plan = batch.plan(&found[..1]);
        let hashes = known.hashes(keys.iter());
        known.see(&hashes);
        let unchanged = Unchanged::Read {
            found: &found,
            update_times: &read_times,
        };
        known.learn(keys.iter(), &hashes, &plan, Some(time(9)), unchanged);
        let recalled = known.recall(keys.iter()).expect("both known");
        assert_eq!(recalled.assumed_absent, 0);
        assert_eq!(recalled.found[0], Some(plan.memberships[0].membership()));
        assert_eq!(recalled.found[1], Some(stored_b));
        assert_eq!(recalled.update_times, [Some(time(9)), Some(time(5))]);
        // From known memberships, what it did not write is left as known.
        let plan = batch.plan(&found[..0]);
        let unchanged = Unchanged::AlreadyKnown;
        known.learn(keys.iter(), &hashes, &plan, Some(time(11)), unchanged);
        let recalled = known.recall(keys.iter()).expect("both known");
        assert_eq!(recalled.update_times, [Some(time(11)), Some(time(5))]);
        known.forget(keys[..1].iter(), &hashes);
        let recalled = known.recall(keys.iter()).expect("no refusal");
        assert_eq!(recalled.forgotten, [0], "forgotten, still seen");
    }

    #[test]
    fn a_known_key_learnt_again_holds_its_newest_state_whatever_its_event_ids_length() {
        let known = KnownMemberships::new(1_000);
        let learn_one = |event: LikeEvent, at: i64| {
            let batch = Batch::new(vec![event], Vec::new());
            let plan = batch.plan(&[None][..]);
            let hashes = known.hashes(batch.keys());
            known.see(&hashes);
            let unchanged = Unchanged::AlreadyKnown;
            known.learn(batch.keys(), &hashes, &plan, Some(time(at)), unchanged);
            plan.memberships[0].membership()
        };
        let recall = || {
            let recalled = known.recall(std::iter::once(&key("a"))).expect("known");
            (recalled.found[0].clone(), recalled.update_times[0])
        };
        // The same length of event id, then longer (twice), then shorter.
        let long = "é".repeat(64);
        let mut longest = 0;
        for (seq, id) in [
            (2, "a-2"),
            (3, "a-3"),
            (4, "a-the-fourth"),
            (5, &long),
            (6, "6"),
        ] {
            let version = Version {
                seq,
                occurred_at_micros: seq,
                event_id: id.into(),
            };
            let event = LikeEvent::new(LikeKind::Added, "p", "a", &version, None).expect("valid");
            let learnt = learn_one(event, 10 + seq);
            assert_eq!(recall(), (Some(learnt), Some(time(10 + seq))), "after {id}");
            // Held in the slot itself until an event id too long for it
            // (then in the heap room that one took).
            longest = longest.max(id.len());
            let hash = hash(&key("a"));
            let spilled = known.shard(hash).lock().entries[&hash].text.spilled();
            assert_eq!(spilled, "pa".len() + longest > INLINE_TEXT, "after {id}");
        }
        // A UUID event id with a post and user id of usual lengths fits.
        assert!("post-000123".len() + "user-0004567".len() + 36 <= INLINE_TEXT);
        // Then read as absent (its document gone): known as absent.
        let batch = Batch::new(Vec::new(), Vec::new());
        let plan = batch.plan(&[][..]);
        let keys = [key("a")];
        let hashes = known.hashes(keys.iter());
        let unchanged = Unchanged::Read {
            found: &[None],
            update_times: &[None],
        };
        known.learn(keys.iter(), &hashes, &plan, Some(time(30)), unchanged);
        assert_eq!(recall(), (None, None));
        let recalled = known.recall(keys.iter()).expect("known");
        assert!(recalled.forgotten.is_empty(), "known absent, not read");
    }

    #[test]
    fn refusals_in_a_row_send_twice_as_many_batches_to_the_transaction_up_to_64() {
        let known = KnownMemberships::new(1_000);
        let keys = [key("a")];
        let tries = |n: usize| {
            (0..n)
                .map(|_| known.recall(keys.iter()).is_some())
                .collect::<Vec<_>>()
        };
        known.refused();
        assert_eq!(tries(3), [false, false, true]);
        known.refused();
        assert_eq!(tries(5), [false, false, false, false, true]);
        for _ in 0..10 {
            known.refused();
        }
        assert_eq!(tries(65).iter().filter(|t| !**t).count(), 64);
        known.confirmed();
        known.refused();
        assert_eq!(tries(3), [false, false, true], "a success starts over");
    }

    #[test]
    fn a_full_shard_forgets_its_entries_but_not_that_it_saw_them() {
        // One entry per shard: a second key of a shard evicts the first;
        // room to record every key seen.
        let mut known = KnownMemberships::new(SHARDS);
        known.seen_per_shard = 1_000;
        let keys: Vec<MembershipKey> = (0..4 * SHARDS).map(|i| key(&format!("u{i}"))).collect();
        let batch = Batch::new(Vec::new(), Vec::new());
        let plan = batch.plan(&[][..]);
        let found = vec![None; keys.len()];
        let times = vec![Some(time(1)); keys.len()];
        let hashes = known.hashes(keys.iter());
        known.see(&hashes);
        let unchanged = Unchanged::Read {
            found: &found,
            update_times: &times,
        };
        known.learn(keys.iter(), &hashes, &plan, Some(time(1)), unchanged);
        let entries: usize = known.shards.iter().map(|s| s.lock().entries.len()).sum();
        assert!(entries <= SHARDS, "{entries}");
        let forgotten = keys.iter().filter(|k| forgotten(&known, k)).count();
        assert_eq!(
            forgotten,
            keys.len() - entries,
            "each evicted key is read, not assumed absent"
        );
    }

    #[test]
    fn the_record_of_seen_keys_drops_its_older_half_when_full_never_the_newest() {
        // SHARDS entries: SEEN_PER_ENTRY seen keys per shard, two generations.
        let known = KnownMemberships::new(SHARDS);
        let keys: Vec<MembershipKey> = (0..64 * SHARDS).map(|i| key(&format!("u{i}"))).collect();
        for key in &keys {
            known.see(&known.hashes(std::iter::once(key)));
        }
        let held: usize = known
            .shards
            .iter()
            .map(|s| {
                let s = s.lock();
                s.seen.len() + s.seen_before.len()
            })
            .sum();
        assert!(held <= SEEN_PER_ENTRY * SHARDS, "{held}");
        // The newest keys of every shard are still seen (read, not guessed).
        let newest = &keys[keys.len() - SHARDS / 4..];
        assert!(newest.iter().all(|k| forgotten(&known, k)));
        // The oldest may be guessed again: the Commit's precondition decides.
        let guessed = keys.iter().filter(|k| !forgotten(&known, k)).count();
        assert!(guessed >= keys.len() - SEEN_PER_ENTRY * SHARDS, "{guessed}");
    }

    #[test]
    fn knowing_nothing_recalls_nothing() {
        let known = KnownMemberships::new(0);
        assert!(!known.enabled());
        assert_eq!(known.recall([key("a")].iter()), None);
    }
}
