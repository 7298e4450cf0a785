//! Generation: valid events drawn by post popularity, duplicates placed
//! after their originals, poison anywhere; then the truth.
//!
//! Invariant: the same [`WorkloadConfig`] yields the same messages in the
//! same order (only `occurredAt` follows the clock); a duplicate always
//! comes after its original; unshuffled, a pair's events come in `seq`
//! order.

use std::collections::HashMap;

use chrono::Utc;
use hotcount::event::{to_json, LikeEvent, LikeKind, Version};
use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{Rng, SeedableRng};

use super::poison::generate_poison;
use super::truth::Truth;
use super::{
    post_id, user_id, Origin, OutMessage, Workload, WorkloadConfig, WorkloadCounts, Zipf, PRODUCER,
};

/// Generates the workload of `config` (validate it first; an invalid config
/// yields what it can, e.g. no duplicates when there is no valid event).
pub fn generate(config: &WorkloadConfig) -> Workload {
    let plan = config.plan();
    let mut rng = StdRng::seed_from_u64(config.seed);
    let now_micros = Utc::now().timestamp_micros();
    let mut counts = WorkloadCounts::default();
    let mut originals: Vec<Option<OutMessage>> =
        generate_events(config, plan.valid, now_micros, &mut rng, &mut counts)
            .into_iter()
            .map(Some)
            .collect();
    let poison = generate_poison(config, plan, now_micros, &mut rng);

    // Order: valid event i sits at position i (shuffled: at a random
    // position, so a pair's events arrive in any order); poison anywhere; a
    // duplicate of i strictly after i (a publisher retry is later, and may
    // overtake others).
    let n = originals.len() as f64;
    let mut position: Vec<f64> = (0..originals.len()).map(|i| i as f64).collect();
    if config.shuffle {
        position.shuffle(&mut rng);
    }
    let mut slots: Vec<(f64, usize)> = Vec::with_capacity(config.events as usize);
    for &at in &position {
        slots.push((at, slots.len()));
    }
    for _ in 0..poison.len() {
        slots.push((rng.random::<f64>() * n, slots.len()));
    }
    let mut duplicate_of = Vec::with_capacity(plan.duplicates as usize);
    for _ in 0..plan.duplicates {
        let of = rng.random_range(0..originals.len());
        let at = position[of] + 0.5 + rng.random::<f64>() * (n - position[of]);
        duplicate_of.push(of);
        slots.push((at, slots.len()));
    }
    slots.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));

    // Slot ids: 0..valid originals, then poison, then duplicates.
    let valid = originals.len();
    let mut position_of_original = vec![0usize; valid];
    let mut poison = poison.into_iter().map(Some).collect::<Vec<_>>();
    let mut messages = Vec::with_capacity(slots.len());
    for (_, id) in &slots {
        let message = if *id < valid {
            position_of_original[*id] = messages.len();
            originals[*id]
                .take()
                .expect("each original slot is placed exactly once")
        } else if *id < valid + poison.len() {
            poison[*id - valid]
                .take()
                .expect("each poison slot is placed exactly once")
        } else {
            let of = position_of_original[duplicate_of[*id - valid - poison.len()]];
            let original: &OutMessage = &messages[of];
            OutMessage {
                data: original.data.clone(),
                attributes: Origin::Duplicate { of }.attributes(),
                origin: Origin::Duplicate { of },
            }
        };
        messages.push(message);
    }
    counts.messages = messages.len() as u64;
    counts.duplicates = plan.duplicates;
    counts.poison = plan.poison;
    let truth = Truth::compute(config.clone(), &messages);
    counts.posts = truth.counts.len() as u64;
    Workload {
        config: config.clone(),
        messages,
        truth,
        counts,
    }
}

fn event_id(seed: u64, n: u64) -> String {
    format!("lg-{seed:016x}-{n:09}")
}

/// Per (post, user): the last seq and whether it is liked.
#[derive(Default)]
struct KeyState {
    seq: i64,
    liked: bool,
    ever_liked: bool,
}

fn generate_events(
    config: &WorkloadConfig,
    valid: u64,
    now_micros: i64,
    rng: &mut StdRng,
    counts: &mut WorkloadCounts,
) -> Vec<OutMessage> {
    let zipf = Zipf::new(config.posts, config.zipf_exponent);
    let mut state: HashMap<(usize, u32), KeyState> = HashMap::new();
    let mut out = Vec::with_capacity(valid as usize);
    for n in 0..valid {
        let post = zipf.sample(rng);
        let user = rng.random_range(0..config.users);
        let key = state.entry((post, user)).or_default();
        key.seq += 1;
        let kind = if key.liked && rng.random_bool(config.unlike_fraction) {
            counts.unlikes += 1;
            LikeKind::Removed
        } else if key.liked {
            counts.double_likes += 1;
            LikeKind::Added
        } else {
            counts.likes += 1;
            if key.ever_liked {
                counts.relikes += 1;
            }
            LikeKind::Added
        };
        key.liked = kind == LikeKind::Added;
        key.ever_liked |= key.liked;
        let version = Version {
            seq: key.seq,
            occurred_at_micros: now_micros,
            event_id: event_id(config.seed, n),
        };
        let (post_id, user_id) = (post_id(post), user_id(user));
        let event = LikeEvent::new(kind, &post_id, &user_id, &version, Some(PRODUCER))
            .expect("generated ids are safe (a prefix, a dash, digits) and now is in range");
        let origin = Origin::Event {
            post_id,
            user_id,
            seq: key.seq,
            liked: key.liked,
        };
        out.push(OutMessage {
            data: to_json(&event).into_bytes(),
            attributes: origin.attributes(),
            origin,
        });
    }
    counts.valid = valid;
    counts.memberships = state.len() as u64;
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::config;
    use super::super::ORIGIN_ATTRIBUTE;
    use super::*;

    /// Everything but `occurredAt`, which follows the clock.
    fn fingerprint(w: &Workload) -> Vec<(Origin, String)> {
        w.messages
            .iter()
            .map(|m| {
                let text = String::from_utf8_lossy(&m.data);
                let stable = match serde_json::from_str::<serde_json::Value>(&text) {
                    Ok(mut v) if v.is_object() => {
                        v["occurredAt"] = serde_json::Value::Null;
                        v.to_string()
                    }
                    _ => text.into_owned(),
                };
                (m.origin.clone(), stable)
            })
            .collect()
    }

    #[test]
    fn same_seed_generates_the_same_workload() {
        let a = generate(&config(7));
        let b = generate(&config(7));
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_eq!(a.truth.counts, b.truth.counts);
        assert_eq!(a.counts, b.counts);
        let c = generate(&config(8));
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }

    #[test]
    fn fractions_are_accounted_for_exactly() {
        let w = generate(&config(1));
        let c = &w.counts;
        assert_eq!(c.messages, 5_000);
        assert_eq!(c.duplicates, 500);
        assert_eq!(c.poison, 250);
        assert_eq!(c.valid, 4_250);
        assert_eq!(c.valid + c.duplicates + c.poison, c.messages);
        assert_eq!(c.likes + c.double_likes + c.unlikes, c.valid);
        assert!(c.relikes <= c.likes && c.relikes > 0);
        assert!(c.unlikes > 0 && c.double_likes > 0);
        let by_label = |l: &str| {
            w.messages
                .iter()
                .filter(|m| m.attributes[ORIGIN_ATTRIBUTE] == l)
                .count() as u64
        };
        assert_eq!(by_label("valid"), c.valid);
        assert_eq!(by_label("duplicate"), c.duplicates);
        assert_eq!(by_label("poison"), c.poison);
    }

    #[test]
    fn duplicates_repeat_an_earlier_payload_verbatim() {
        let w = generate(&config(4));
        let mut later_than_next = 0;
        for (i, m) in w.messages.iter().enumerate() {
            if let Origin::Duplicate { of } = m.origin {
                assert!(of < i);
                assert_eq!(m.data, w.messages[of].data);
                assert!(matches!(w.messages[of].origin, Origin::Event { .. }));
                later_than_next += usize::from(i > of + 1);
            }
        }
        assert!(later_than_next > 0, "some duplicates arrive out of order");
    }

    #[test]
    fn seq_increases_per_post_and_user() {
        let w = generate(&config(5));
        let mut last: HashMap<(String, String), i64> = HashMap::new();
        for m in &w.messages {
            if let Origin::Event {
                post_id,
                user_id,
                seq,
                ..
            } = &m.origin
            {
                let prev = last.insert((post_id.clone(), user_id.clone()), *seq);
                assert_eq!(prev.unwrap_or(0) + 1, *seq);
            }
        }
    }

    #[test]
    fn a_shuffled_workload_has_the_same_events_out_of_order_and_the_same_truth() {
        let plain = generate(&config(9));
        let shuffled = generate(&WorkloadConfig {
            shuffle: true,
            ..config(9)
        });
        assert_eq!(shuffled.truth.counts, plain.truth.counts);
        assert_eq!(shuffled.counts, plain.counts);
        let events = |w: &Workload| {
            let mut e: Vec<Origin> = w
                .messages
                .iter()
                .filter(|m| matches!(m.origin, Origin::Event { .. }))
                .map(|m| m.origin.clone())
                .collect();
            e.sort_by_key(|o| format!("{o:?}"));
            e
        };
        assert_eq!(events(&shuffled), events(&plain));
        // Some pair's events now arrive after a newer one of the same pair.
        let mut newest: HashMap<(String, String), i64> = HashMap::new();
        let mut late = 0;
        for (i, m) in shuffled.messages.iter().enumerate() {
            match &m.origin {
                Origin::Event {
                    post_id,
                    user_id,
                    seq,
                    ..
                } => {
                    let seen = newest
                        .entry((post_id.clone(), user_id.clone()))
                        .or_default();
                    late += usize::from(*seq < *seen);
                    *seen = (*seen).max(*seq);
                }
                Origin::Duplicate { of } => assert!(*of < i, "a duplicate follows its original"),
                Origin::Poison { .. } => {}
            }
        }
        assert!(late > 0, "shuffled events arrive out of order");
    }

    fn top_post_share(s: f64) -> f64 {
        let w = generate(&WorkloadConfig {
            events: 20_000,
            posts: 1_000,
            users: 100_000,
            zipf_exponent: s,
            unlike_fraction: 0.0,
            duplicate_fraction: 0.0,
            poison_fraction: 0.0,
            hostile_fraction: 0.0,
            shuffle: false,
            seed: 11,
        });
        let top = post_id(0);
        let n = w
            .messages
            .iter()
            .filter(|m| matches!(&m.origin, Origin::Event { post_id, .. } if *post_id == top))
            .count();
        n as f64 / w.messages.len() as f64
    }

    #[test]
    fn top_post_share_grows_with_the_zipf_exponent() {
        let uniform = top_post_share(0.0);
        let mild = top_post_share(1.0);
        let viral = top_post_share(2.0);
        assert!(uniform < 0.005, "{uniform}");
        assert!(mild > uniform * 10.0, "{mild} vs {uniform}");
        assert!(viral > 0.5, "one viral post takes most traffic: {viral}");
        assert!(viral > mild);
        let z = Zipf::new(1_000, 2.0);
        assert!((viral - z.probability(0)).abs() < 0.02);
    }
}
