//! How many counter shard documents a post spreads its increments over:
//! one for a quiet post, more as the post's observed counter-write rate
//! grows, up to a maximum; and which shard each batch in flight writes.
//!
//! Invariants: the rate table's memory is fixed (a table of [`SLOTS`] slots
//! by post hash; two posts in one slot only over-estimate, which costs an
//! extra shard, never a count); a pick is always `< max_shards`; readers sum
//! every shard document that exists (`counters/{post}/shards/*`), so growing
//! or shrinking the number in use never changes a count. While a
//! [`CounterLease`] lives, no other lease of this process holds the same
//! (post, shard), as long as fewer than `max_shards` batches in flight
//! increment one post: batches in flight never write one counter document.
//! The rate is what this process writes: with R replicas a hot document can
//! see up to R times the target.
//!
//! With a [`ShardRegistry`] (Firestore with rollups on), a post's shards
//! are also capped at what its rollup registers (`counts/{post}.shards`):
//! a post that needs more asks the registry, and uses them once the rollup
//! refresher has registered them. So no counter shard exists that its
//! post's rollup does not cover, and a refresh that reads the shards the
//! rollup names reads them all.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::event::fnv1a64;

/// Slots of the rate table.
pub const SLOTS: usize = 4096;

/// How long a rate is measured over before the shard count is revised.
pub const WINDOW: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    started: Option<Instant>,
    writes: u32,
    shards: u32,
}

/// Posts remembered by a [`ShardRegistry`] at most (each kind); past it,
/// its oldest knowledge is dropped (a dropped post falls back to one
/// shard until its rollup is read again: fewer shards, never too many).
pub const REGISTRY_POSTS: usize = 65_536;

/// The counter shards each post's rollup registers, as this process knows
/// them (only ever more), and the posts that need more.
///
/// Invariant: [`Self::allowed`] never exceeds what a rollup of the post
/// registered (written or read by this process's refresher); rollups'
/// `shards` only grow, so every refresher reads them all.
#[derive(Debug, Default)]
pub struct ShardRegistry {
    state: Mutex<RegistryState>,
}

#[derive(Debug, Default)]
struct RegistryState {
    /// Posts with more than one shard registered.
    registered: FxHashMap<String, u32>,
    /// Posts that need more shards than registered: how many.
    wanted: FxHashMap<String, u32>,
}

impl ShardRegistry {
    /// Counter shards `post` may use now: what its rollup registers (1 when
    /// unknown: shard 0 is always registered).
    pub fn allowed(&self, post: &str) -> u32 {
        let state = self.state.lock();
        state.registered.get(post).copied().unwrap_or(1).max(1)
    }

    /// `post` needs `shards` counter shards (registered by the rollup
    /// refresher at its next cycle).
    pub fn want(&self, post: &str, shards: u32) {
        let mut state = self.state.lock();
        let full = state.wanted.len() >= REGISTRY_POSTS;
        match state.wanted.get_mut(post) {
            Some(wanted) => *wanted = (*wanted).max(shards),
            None if !full => {
                state.wanted.insert(post.to_string(), shards);
            }
            None => {}
        }
    }

    /// A rollup of `post` registers `shards` (written, or read).
    pub fn confirm(&self, post: &str, shards: u32) {
        if shards <= 1 {
            return;
        }
        let mut state = self.state.lock();
        if state.wanted.get(post).is_some_and(|&w| w <= shards) {
            state.wanted.remove(post);
        }
        match state.registered.get_mut(post) {
            Some(known) => *known = (*known).max(shards),
            None => {
                if state.registered.len() >= REGISTRY_POSTS {
                    state.registered.clear();
                }
                state.registered.insert(post.to_string(), shards);
            }
        }
    }

    /// The posts that need more shards, and how many (taken: asked again
    /// by the next commits if still needed).
    pub fn take_wanted(&self) -> Vec<(String, u32)> {
        std::mem::take(&mut self.state.lock().wanted)
            .into_iter()
            .collect()
    }
}

/// Chooses the counter shard of each increment.
pub struct CounterShardPlanner {
    max_shards: u32,
    target_writes_per_sec: u32,
    slots: Box<[Mutex<Slot>]>,
    /// (post hash, shard) held by a live [`CounterLease`].
    leased: Mutex<FxHashSet<(u64, u32)>>,
    /// When set, each post's shards are capped at what it registers.
    registry: OnceLock<Arc<ShardRegistry>>,
}

/// The counter shards one batch in flight increments, one per post; held
/// until the batch's commit has ended (dropping the lease releases them).
pub struct CounterLease<'a> {
    planner: &'a CounterShardPlanner,
    /// The shard of each post, in the order given.
    picks: Vec<u32>,
    /// What this lease holds in the planner's set.
    held: Vec<(u64, u32)>,
}

impl CounterLease<'_> {
    /// The shard picked for the `i`-th post given to [`CounterShardPlanner::lease`].
    pub fn shard(&self, i: usize) -> u32 {
        self.picks.get(i).copied().unwrap_or(0)
    }
}

impl Drop for CounterLease<'_> {
    fn drop(&mut self) {
        let mut leased = self.planner.leased.lock();
        for pick in &self.held {
            leased.remove(pick);
        }
    }
}

impl CounterShardPlanner {
    /// Up to `max_shards` shards per post, each meant to take at most
    /// `target_writes_per_sec` increments per second; a target of 0 spreads
    /// every post over all `max_shards` (a fixed shard count).
    pub fn new(max_shards: u32, target_writes_per_sec: u32) -> Self {
        Self {
            max_shards: max_shards.max(1),
            target_writes_per_sec,
            slots: (0..SLOTS).map(|_| Mutex::new(Slot::default())).collect(),
            leased: Mutex::new(FxHashSet::default()),
            registry: OnceLock::new(),
        }
    }

    /// From now on, caps each post's shards at what `registry` allows (and
    /// asks it for more when a post needs them); returns the registry in
    /// use (the first one given).
    pub fn register_in(&self, registry: Arc<ShardRegistry>) -> Arc<ShardRegistry> {
        self.registry.get_or_init(|| registry).clone()
    }

    /// Records one increment of each of `posts` at `now` and picks its shard:
    /// a random one among the shards the post's rate calls for that no
    /// other live lease holds; if those are all held (several batches in
    /// flight on one post), the lowest free shard above them; if every
    /// shard up to the maximum is held, a random one (the only case where
    /// two batches in flight write one counter document). With a registry,
    /// "the maximum" is what the post's rollup registers, and a post that
    /// needs more (by its rate, or for a batch that found every shard held)
    /// asks the registry for them.
    pub fn lease<'p>(
        &self,
        posts: impl IntoIterator<Item = &'p str>,
        now: Instant,
    ) -> CounterLease<'_> {
        let registry = self.registry.get();
        // The posts, kept only to ask the registry for more shards.
        let mut names: Vec<&str> = Vec::new();
        // (post key, shards it may use, the most it may use).
        let wanted: Vec<(u64, u32, u32)> = posts
            .into_iter()
            .map(|post| {
                if registry.is_some() {
                    names.push(post);
                }
                let key = post_key(post);
                let shards = self.shards_for_key(key, now);
                let Some(registry) = registry else {
                    return (key, shards, self.max_shards);
                };
                let allowed = registry.allowed(post).min(self.max_shards);
                if shards > allowed {
                    registry.want(post, shards);
                }
                (key, shards.min(allowed), allowed)
            })
            .collect();
        let mut picks = Vec::with_capacity(wanted.len());
        let mut held = Vec::with_capacity(wanted.len());
        let mut leased = self.leased.lock();
        for (i, (key, shards, cap)) in wanted.into_iter().enumerate() {
            let start = if shards <= 1 {
                0
            } else {
                rand::random_range(0..shards)
            };
            let free = |k: &u32| !leased.contains(&(key, *k));
            let pick = (0..shards)
                .map(|i| (start + i) % shards)
                .find(free)
                .or_else(|| (shards..cap).find(free));
            match pick {
                Some(k) => {
                    leased.insert((key, k));
                    held.push((key, k));
                    picks.push(k);
                }
                // Every shard is held: share one, without holding it (and
                // ask the registry for one more).
                None => {
                    if let (Some(registry), Some(post)) = (registry, names.get(i)) {
                        if cap < self.max_shards {
                            registry.want(post, cap + 1);
                        }
                    }
                    picks.push(start);
                }
            }
        }
        drop(leased);
        CounterLease {
            planner: self,
            picks,
            held,
        }
    }

    /// Records one increment of `post` at `now`; returns how many shards
    /// the post uses now.
    pub fn shards_for(&self, post: &str, now: Instant) -> u32 {
        self.shards_for_key(post_key(post), now)
    }

    /// [`Self::shards_for`] by the post's [`post_key`] (a lease has it already).
    fn shards_for_key(&self, key: u64, now: Instant) -> u32 {
        if self.target_writes_per_sec == 0 {
            return self.max_shards;
        }
        let index = (key % SLOTS as u64) as usize;
        let mut slot = self.slots[index].lock();
        let started = *slot.started.get_or_insert(now);
        slot.shards = slot.shards.max(1);
        let elapsed = now.saturating_duration_since(started);
        let target = f64::from(self.target_writes_per_sec);
        if elapsed >= WINDOW {
            // Revise from the rate of the window that just ended.
            // (A 5 % slack keeps timer jitter from adding a shard.)
            let rate = f64::from(slot.writes) / elapsed.as_secs_f64();
            slot.shards = ((rate / target - 0.05).ceil() as u32).clamp(1, self.max_shards);
            slot.started = Some(now);
            slot.writes = 0;
        }
        slot.writes = slot.writes.saturating_add(1);
        if f64::from(slot.writes) > f64::from(slot.shards) * target * WINDOW.as_secs_f64() {
            // A burst already beyond what the current shards should take in
            // a whole window: grow at once rather than at the window's end.
            slot.shards = slot.shards.saturating_mul(2).min(self.max_shards);
        }
        slot.shards
    }
}

/// The key of `post` in the rate table and the lease set.
fn post_key(post: &str) -> u64 {
    fnv1a64(post.as_bytes(), b"counter-shards")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(planner: &CounterShardPlanner, post: &str, per_sec: u32, secs: u32) -> u32 {
        let t0 = Instant::now();
        let step = Duration::from_secs(1) / per_sec;
        let mut shards = 0;
        for i in 0..per_sec * secs {
            shards = planner.shards_for(post, t0 + step * i);
        }
        shards
    }

    #[test]
    fn a_quiet_post_keeps_one_shard_and_always_writes_shard_zero() {
        let planner = CounterShardPlanner::new(16, 1);
        assert_eq!(drive(&planner, "quiet", 1, 30), 1);
        let t0 = Instant::now() + Duration::from_secs(30);
        assert!((0..100).all(|i| planner
            .lease(["quiet"], t0 + Duration::from_secs(i))
            .shard(0)
            == 0));
    }

    #[test]
    fn a_hot_post_grows_to_its_rate_and_no_further_than_the_maximum() {
        let planner = CounterShardPlanner::new(16, 1);
        assert_eq!(drive(&planner, "warm", 6, 5), 6, "6 writes/s -> 6 shards");
        assert_eq!(
            drive(&planner, "viral", 200, 3),
            16,
            "capped at the maximum"
        );
        let picks: Vec<u32> = (0..500)
            .map(|_| planner.lease(["viral"], Instant::now()).shard(0))
            .collect();
        assert!(picks.iter().all(|&s| s < 16));
        assert!(picks.iter().collect::<std::collections::HashSet<_>>().len() > 8);
    }

    #[test]
    fn a_burst_grows_within_the_window() {
        let planner = CounterShardPlanner::new(64, 1);
        let t0 = Instant::now();
        let mut shards = 0;
        for _ in 0..40 {
            shards = planner.shards_for("burst", t0);
        }
        assert!(shards >= 32, "40 writes in no time -> {shards} shards");
    }

    #[test]
    fn a_cooled_post_shrinks_back() {
        let planner = CounterShardPlanner::new(16, 2);
        assert_eq!(drive(&planner, "p", 100, 2), 16);
        let t = Instant::now() + Duration::from_secs(10);
        planner.shards_for("p", t);
        assert_eq!(planner.shards_for("p", t + Duration::from_secs(5)), 1);
    }

    #[test]
    fn batches_in_flight_on_one_quiet_post_get_distinct_counter_shards() {
        let planner = CounterShardPlanner::new(16, 1);
        let now = Instant::now();
        let first = planner.lease(["quiet"], now);
        assert_eq!(first.shard(0), 0, "a quiet post alone writes shard 0");
        let second = planner.lease(["quiet", "other"], now);
        let third = planner.lease(["quiet"], now);
        let picks = [first.shard(0), second.shard(0), third.shard(0)];
        assert_eq!(
            picks.iter().collect::<std::collections::HashSet<_>>().len(),
            3,
            "{picks:?}"
        );
        assert!(picks.iter().all(|&k| k < 16));
        assert_eq!(second.shard(1), 0, "another post is not affected");
        drop((first, second, third));
        assert!(planner.leased.lock().is_empty(), "released");
    }

    #[test]
    fn concurrent_leases_on_a_viral_post_never_share_a_shard() {
        let planner = CounterShardPlanner::new(16, 1);
        let now = Instant::now();
        for _ in 0..100 {
            planner.shards_for("viral", now);
        }
        for _ in 0..50 {
            let leases: Vec<_> = (0..8).map(|_| planner.lease(["viral"], now)).collect();
            let picks: std::collections::HashSet<u32> = leases.iter().map(|l| l.shard(0)).collect();
            assert_eq!(picks.len(), 8);
        }
        assert!(planner.leased.lock().is_empty(), "every lease released");
    }

    #[test]
    fn more_batches_than_shards_share_one_instead_of_failing() {
        let planner = CounterShardPlanner::new(2, 1);
        let now = Instant::now();
        let leases: Vec<_> = (0..3).map(|_| planner.lease(["p"], now)).collect();
        let picks: Vec<u32> = leases.iter().map(|l| l.shard(0)).collect();
        assert!(picks.iter().all(|&k| k < 2), "{picks:?}");
        drop(leases);
        assert!(planner.leased.lock().is_empty());
    }

    #[test]
    fn with_a_registry_a_post_uses_only_the_shards_its_rollup_registers() {
        let planner = CounterShardPlanner::new(16, 1);
        let registry = planner.register_in(Arc::default());
        let now = Instant::now();
        for _ in 0..100 {
            planner.shards_for("viral", now);
        }
        let leases: Vec<_> = (0..4).map(|_| planner.lease(["viral"], now)).collect();
        assert!(
            leases.iter().all(|l| l.shard(0) == 0),
            "only shard 0 registered"
        );
        drop(leases);
        let wanted = registry.take_wanted();
        assert_eq!(wanted.len(), 1);
        assert!(wanted[0].1 > 1, "{wanted:?}");
        registry.confirm("viral", 4);
        let leases: Vec<_> = (0..8).map(|_| planner.lease(["viral"], now)).collect();
        let picks: std::collections::HashSet<u32> = leases.iter().map(|l| l.shard(0)).collect();
        assert!(picks.iter().all(|&k| k < 4), "{picks:?}");
        assert_eq!(picks.len(), 4, "every registered shard used");
        assert_eq!(registry.allowed("quiet"), 1);
    }

    #[test]
    fn with_a_registry_batches_that_find_every_shard_held_ask_for_one_more() {
        // A rate target no rate reaches: only batches in flight need shards.
        let planner = CounterShardPlanner::new(16, 10_000);
        let registry = planner.register_in(Arc::default());
        registry.confirm("p", 2);
        let now = Instant::now();
        let held: Vec<_> = (0..2).map(|_| planner.lease(["p"], now)).collect();
        assert!(registry.take_wanted().is_empty(), "two shards, two leases");
        let third = planner.lease(["p"], now);
        assert!(third.shard(0) < 2, "shares a registered shard");
        assert_eq!(registry.take_wanted(), vec![("p".to_string(), 3)]);
        drop((held, third));
    }

    #[test]
    fn target_zero_is_a_fixed_shard_count() {
        let planner = CounterShardPlanner::new(8, 0);
        assert_eq!(drive(&planner, "p", 1, 3), 8);
    }
}
