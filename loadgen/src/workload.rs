//! Deterministic like workloads: Zipf-skewed valid events, publisher-retry
//! duplicates and poison, with the exact expected count of every post.
//!
//! Invariant: for a given [`WorkloadConfig`] (seed included) [`generate`]
//! yields the same messages, ids and [`Truth`] every time (only `occurredAt`
//! follows the clock), and the [`Truth`] is computed from the generated
//! events alone: per (post, user), the state of its newest event.

use std::collections::{BTreeMap, HashMap};

use chrono::Utc;
use hotcount::event::{to_json, LikeEvent, LikeKind, Version};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::truth::Truth;

/// The producer name written into every valid event.
pub const PRODUCER: &str = "hotcount-loadgen";
/// Message attribute saying what a message is (`valid`, `duplicate`, `poison`).
pub const ORIGIN_ATTRIBUTE: &str = "loadgenOrigin";

/// What to generate. Fractions are of the total number of messages
/// (`events`), except `unlike_fraction`, see below.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadConfig {
    /// Messages to publish in total: valid events + duplicates + poison.
    pub events: u64,
    /// Distinct posts (ids `post-000000`.., rank 0 the most popular).
    pub posts: u32,
    /// Distinct users, chosen uniformly.
    pub users: u32,
    /// Zipf exponent of post popularity (0 = uniform; 1.2+ = one viral post).
    pub zipf_exponent: f64,
    /// Probability that an event on a (post, user) currently liked is a
    /// `like.removed`; otherwise it is a double like (`like.added` again).
    pub unlike_fraction: f64,
    /// Fraction of messages that republish an earlier message verbatim
    /// (same `eventId`), as a publisher retry does, at a later position.
    pub duplicate_fraction: f64,
    /// Fraction of messages that are poison (malformed or unsafe).
    pub poison_fraction: f64,
    /// Fraction of messages that are hostile poison (reserved attribute
    /// keys, 100 large attributes, multi-MB payloads, deep JSON,
    /// overflowing numbers), on top of `poison_fraction`.
    #[serde(default)]
    pub hostile_fraction: f64,
    /// Seed of every random choice.
    pub seed: u64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            events: 10_000,
            posts: 100,
            users: 5_000,
            zipf_exponent: 1.1,
            unlike_fraction: 0.2,
            duplicate_fraction: 0.05,
            poison_fraction: 0.01,
            hostile_fraction: 0.0,
            seed: 42,
        }
    }
}

/// The `--duplicate-fraction` and `--poison-fraction` flags of `chaos` and
/// `demo`, which take them with the same defaults (`publish` words them
/// differently, so it keeps its own; every other workload flag has
/// per-command defaults).
#[derive(clap::Args, Clone, Debug)]
pub struct MessageMixArgs {
    /// Fraction of messages republished verbatim (publisher retries).
    #[arg(long, default_value_t = 0.05)]
    pub duplicate_fraction: f64,
    /// Fraction of poison messages.
    #[arg(long, default_value_t = 0.01)]
    pub poison_fraction: f64,
    /// Fraction of hostile poison messages on top (reserved attribute keys,
    /// 100 x 1 KiB attributes, multi-MB payloads, deep JSON, overflowing
    /// numbers).
    #[arg(long, default_value_t = 0.0)]
    pub hostile_fraction: f64,
}

/// A setting that cannot produce a workload.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid --{flag}: {reason}")]
pub struct WorkloadError {
    /// The flag at fault.
    pub flag: &'static str,
    /// What is wrong and what is allowed.
    pub reason: String,
}

/// Most messages one workload holds (they are all kept in memory).
pub const MAX_EVENTS: u64 = 50_000_000;

impl WorkloadConfig {
    /// Checks every setting; the first problem is reported with its flag.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let err = |flag, reason: String| Err(WorkloadError { flag, reason });
        if self.events == 0 || self.events > MAX_EVENTS {
            return err(
                "events",
                format!("{} is outside 1..={MAX_EVENTS}", self.events),
            );
        }
        if self.posts == 0 {
            return err("posts", "must be at least 1".into());
        }
        if self.users == 0 {
            return err("users", "must be at least 1".into());
        }
        if !(0.0..=10.0).contains(&self.zipf_exponent) {
            return err("zipf", format!("{} is outside 0..=10", self.zipf_exponent));
        }
        for (flag, v) in [
            ("unlike-fraction", self.unlike_fraction),
            ("duplicate-fraction", self.duplicate_fraction),
            ("poison-fraction", self.poison_fraction),
            ("hostile-fraction", self.hostile_fraction),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return err(flag, format!("{v} is outside 0..=1"));
            }
        }
        if self.duplicate_fraction + self.poison_fraction + self.hostile_fraction >= 1.0 {
            return err(
                "duplicate-fraction",
                format!(
                    "duplicate ({}) + poison ({}) + hostile ({}) fractions must leave room for valid events (sum < 1)",
                    self.duplicate_fraction, self.poison_fraction, self.hostile_fraction
                ),
            );
        }
        if self.plan().valid == 0 {
            return err(
                "events",
                "too few events for the fractions given: no valid event would remain".into(),
            );
        }
        Ok(())
    }

    /// How many messages of each kind the settings ask for.
    pub fn plan(&self) -> MessagePlan {
        let duplicates = (self.events as f64 * self.duplicate_fraction).round() as u64;
        let hostile = (self.events as f64 * self.hostile_fraction).round() as u64;
        let poison = (self.events as f64 * self.poison_fraction).round() as u64 + hostile;
        let valid = self.events.saturating_sub(duplicates + poison);
        let duplicates = if valid == 0 { 0 } else { duplicates };
        MessagePlan {
            valid,
            duplicates,
            poison,
            hostile,
        }
    }
}

/// Message counts by kind, before generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessagePlan {
    /// Of `poison`, the hostile messages.
    pub hostile: u64,
    /// Distinct valid events.
    pub valid: u64,
    /// Republished copies of valid events.
    pub duplicates: u64,
    /// Poison messages.
    pub poison: u64,
}

/// Where a message comes from; lets the truth and the publisher tell kinds apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A distinct valid event.
    Event {
        /// Post id.
        post_id: String,
        /// User id.
        user_id: String,
        /// Per (post, user) sequence, from 1.
        seq: i64,
        /// `like.added` (true) or `like.removed` (false).
        liked: bool,
    },
    /// A verbatim copy of the message at index `of` (always earlier).
    Duplicate {
        /// Index of the original in [`Workload::messages`].
        of: usize,
    },
    /// A malformed or unsafe payload that must never count.
    Poison {
        /// Which kind of poison.
        kind: PoisonKind,
    },
}

impl Origin {
    /// The attribute value naming this origin.
    pub fn label(&self) -> &'static str {
        match self {
            Origin::Event { .. } => "valid",
            Origin::Duplicate { .. } => "duplicate",
            Origin::Poison { .. } => "poison",
        }
    }
}

/// The kinds of poison generated, in rotation chosen at random.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoisonKind {
    /// Truncated JSON.
    BadJson,
    /// JSON that is not an object.
    NotObject,
    /// `postId` absent.
    MissingField,
    /// `postId` contains `/`.
    SlashId,
    /// `postId` is `..`.
    DotDotId,
    /// `userId` is `__x__` (reserved by Firestore).
    ReservedId,
    /// `userId` contains a control character.
    ControlCharId,
    /// `userId` is 2 KB long.
    LongId,
    /// `type` is not a known event type.
    UnknownType,
    /// `version` is 2.
    WrongVersion,
    /// Not valid UTF-8.
    InvalidUtf8,
    /// Attribute keys of the reserved `__...__` form, a dot and backquotes.
    ReservedAttributeKeys,
    /// 99 attributes of 1 KiB each (with the origin attribute, Pub/Sub's 100).
    ManyLargeAttributes,
    /// A 2 MiB payload.
    HugePayload,
    /// JSON nested 20,000 levels deep.
    DeepJson,
    /// `seq` and `version` far outside the integer range.
    OverflowingNumbers,
}

/// Every this many hostile messages, one is a [`PoisonKind::HugePayload`].
pub const HUGE_PAYLOAD_EVERY: u64 = 100;

impl PoisonKind {
    /// The hostile kinds (`--hostile-fraction`), in the order they are
    /// drawn; [`PoisonKind::HugePayload`] only every
    /// [`HUGE_PAYLOAD_EVERY`]th time, so a large run stays within memory.
    pub const HOSTILE: [PoisonKind; 4] = [
        PoisonKind::ReservedAttributeKeys,
        PoisonKind::ManyLargeAttributes,
        PoisonKind::DeepJson,
        PoisonKind::OverflowingNumbers,
    ];

    /// Every classic kind (drawn at random for `--poison-fraction`).
    pub const ALL: [PoisonKind; 11] = [
        PoisonKind::BadJson,
        PoisonKind::NotObject,
        PoisonKind::MissingField,
        PoisonKind::SlashId,
        PoisonKind::DotDotId,
        PoisonKind::ReservedId,
        PoisonKind::ControlCharId,
        PoisonKind::LongId,
        PoisonKind::UnknownType,
        PoisonKind::WrongVersion,
        PoisonKind::InvalidUtf8,
    ];
}

/// One message to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutMessage {
    /// The payload.
    pub data: Vec<u8>,
    /// Pub/Sub attributes.
    pub attributes: BTreeMap<String, String>,
    /// What the message is.
    pub origin: Origin,
}

/// Message counts by kind, after generation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadCounts {
    /// All messages.
    pub messages: u64,
    /// Distinct valid events (likes + double likes + unlikes).
    pub valid: u64,
    /// `like.added` on a (post, user) not liked at the time (first likes and re-likes).
    pub likes: u64,
    /// Of `likes`, those on a (post, user) that had been unliked (re-likes).
    pub relikes: u64,
    /// `like.added` on a (post, user) already liked (a double click).
    pub double_likes: u64,
    /// `like.removed` on a liked (post, user).
    pub unlikes: u64,
    /// Verbatim republished copies (same `eventId`).
    pub duplicates: u64,
    /// Poison messages.
    pub poison: u64,
    /// Distinct (post, user) pairs touched.
    pub memberships: u64,
    /// Distinct posts touched.
    pub posts: u64,
}

/// A generated workload: the messages in publish order, the expected counts.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The settings it was generated from.
    pub config: WorkloadConfig,
    /// Messages in publish order.
    pub messages: Vec<OutMessage>,
    /// Expected count per post after every message is processed.
    pub truth: Truth,
    /// Messages by kind.
    pub counts: WorkloadCounts,
}

/// Post popularity: rank `k` (from 0) has weight `1 / (k + 1)^s`.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// A sampler over `n` ranks (at least 1) with exponent `s`.
    pub fn new(n: u32, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n.max(1) as usize);
        let mut total = 0.0;
        for k in 0..n.max(1) {
            total += 1.0 / f64::from(k + 1).powf(s);
            cdf.push(total);
        }
        Self { cdf }
    }

    /// Draws a rank in `0..n`. Cost: one binary search.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let total = self.cdf.last().copied().unwrap_or(1.0);
        let u = rng.random::<f64>() * total;
        self.cdf
            .partition_point(|c| *c <= u)
            .min(self.cdf.len() - 1)
    }

    /// The probability of rank `k`.
    pub fn probability(&self, k: usize) -> f64 {
        let total = self.cdf.last().copied().unwrap_or(1.0);
        let below = if k == 0 { 0.0 } else { self.cdf[k - 1] };
        (self.cdf[k] - below) / total
    }
}

/// The id of post rank `k`.
pub fn post_id(k: usize) -> String {
    format!("post-{k:06}")
}

/// The id of user `k`.
pub fn user_id(k: u32) -> String {
    format!("user-{k:07}")
}

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

    // Order: valid event i sits at position i; poison anywhere; a duplicate of
    // i strictly after i (a publisher retry is later, and may overtake others).
    let n = originals.len() as f64;
    let mut slots: Vec<(f64, usize)> = Vec::with_capacity(config.events as usize);
    for i in 0..originals.len() {
        slots.push((i as f64, slots.len()));
    }
    for _ in 0..poison.len() {
        slots.push((rng.random::<f64>() * n, slots.len()));
    }
    let mut duplicate_of = Vec::with_capacity(plan.duplicates as usize);
    for _ in 0..plan.duplicates {
        let of = rng.random_range(0..originals.len());
        let at = of as f64 + 0.5 + rng.random::<f64>() * (n - of as f64);
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
                attributes: attributes(&Origin::Duplicate { of }),
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

fn attributes(origin: &Origin) -> BTreeMap<String, String> {
    BTreeMap::from([(ORIGIN_ATTRIBUTE.to_string(), origin.label().to_string())])
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
            attributes: attributes(&origin),
            origin,
        });
    }
    counts.valid = valid;
    counts.memberships = state.len() as u64;
    out
}

fn generate_poison(
    config: &WorkloadConfig,
    plan: MessagePlan,
    now_micros: i64,
    rng: &mut StdRng,
) -> Vec<OutMessage> {
    let poison = plan.poison;
    let occurred = chrono::DateTime::<Utc>::from_timestamp_micros(now_micros)
        .unwrap_or_default()
        .to_rfc3339();
    let mut out = Vec::with_capacity(poison as usize);
    for n in 0..poison {
        let kind = if n >= plan.hostile {
            PoisonKind::ALL[rng.random_range(0..PoisonKind::ALL.len())]
        } else if n % HUGE_PAYLOAD_EVERY == HUGE_PAYLOAD_EVERY - 1 {
            PoisonKind::HugePayload
        } else {
            PoisonKind::HOSTILE[n as usize % PoisonKind::HOSTILE.len()]
        };
        // Poison aimed at real posts and users proves it never touches them.
        let post = post_id(rng.random_range(0..config.posts as usize));
        let user = user_id(rng.random_range(0..config.users));
        let id = format!("lg-{:016x}-poison-{n:09}", config.seed);
        let origin = Origin::Poison { kind };
        let mut attributes = attributes(&origin);
        attributes.extend(hostile_attributes(kind));
        out.push(OutMessage {
            data: poison_payload(kind, &id, &post, &user, &occurred),
            attributes,
            origin,
        });
    }
    out
}

/// The attributes a hostile message of `kind` carries besides its origin.
pub fn hostile_attributes(kind: PoisonKind) -> BTreeMap<String, String> {
    match kind {
        PoisonKind::ReservedAttributeKeys => ["__name__", "__key__", "a.b", "`quoted`", "____"]
            .iter()
            .map(|k| (k.to_string(), "hostile".to_string()))
            .collect(),
        PoisonKind::ManyLargeAttributes => (0..99)
            .map(|i| (format!("attr-{i:02}"), "v".repeat(1024)))
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// The payload of one poison message of `kind`.
pub fn poison_payload(kind: PoisonKind, id: &str, post: &str, user: &str, at: &str) -> Vec<u8> {
    let event = |post: &str, user: &str, kind: &str| {
        serde_json::json!({
            "version": 1, "eventId": id, "type": kind, "postId": post,
            "userId": user, "occurredAt": at, "seq": 1,
        })
    };
    let json = match kind {
        PoisonKind::BadJson => {
            return format!(
                r#"{{"version":1,"eventId":"{id}","type":"like.added","postId":"{post}""#
            )
            .into_bytes()
        }
        PoisonKind::NotObject => serde_json::json!([id, post, user]),
        PoisonKind::MissingField => {
            let mut v = event(post, user, "like.added");
            if let Some(o) = v.as_object_mut() {
                o.remove("postId");
            }
            v
        }
        PoisonKind::SlashId => event(&format!("{post}/../x"), user, "like.added"),
        PoisonKind::DotDotId => event("..", user, "like.added"),
        PoisonKind::ReservedId => event(post, "__x__", "like.added"),
        PoisonKind::ControlCharId => event(post, &format!("{user}\u{7}\n"), "like.added"),
        PoisonKind::LongId => event(post, &"u".repeat(2048), "like.added"),
        PoisonKind::UnknownType => event(post, user, "like.toggled"),
        PoisonKind::WrongVersion => {
            let mut v = event(post, user, "like.added");
            v["version"] = 2.into();
            v
        }
        PoisonKind::InvalidUtf8 => {
            let mut bytes = event(post, user, "like.added").to_string().into_bytes();
            let at = bytes.len() / 2;
            bytes.splice(at..at, [0xff, 0xfe, 0xc3]);
            return bytes;
        }
        // Valid-looking events whose attributes are the hostile part: the
        // post id makes them poison.
        PoisonKind::ReservedAttributeKeys | PoisonKind::ManyLargeAttributes => {
            event(&format!("{post}/x"), user, "like.added")
        }
        PoisonKind::HugePayload => {
            let mut v = event(post, user, "like.added");
            v["pad"] = "x".repeat(2 << 20).into();
            v
        }
        PoisonKind::DeepJson => {
            let depth = 20_000;
            let mut bytes = format!(r#"{{"eventId":"{id}","nested":"#).into_bytes();
            bytes.extend(std::iter::repeat_n(b'[', depth));
            bytes.extend(std::iter::repeat_n(b']', depth));
            bytes.push(b'}');
            return bytes;
        }
        PoisonKind::OverflowingNumbers => {
            return format!(
                r#"{{"version":1e400,"eventId":"{id}","type":"like.added","postId":"{post}","userId":"{user}","occurredAt":"{at}","seq":123456789012345678901234567890}}"#
            )
            .into_bytes()
        }
    };
    json.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(seed: u64) -> WorkloadConfig {
        WorkloadConfig {
            events: 5_000,
            posts: 50,
            users: 200,
            zipf_exponent: 1.0,
            unlike_fraction: 0.3,
            duplicate_fraction: 0.1,
            poison_fraction: 0.05,
            hostile_fraction: 0.0,
            seed,
        }
    }

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
    fn valid_events_parse_and_poison_does_not() {
        let w = generate(&config(3));
        let mut seen_kinds = std::collections::BTreeSet::new();
        let mut ids = std::collections::HashSet::new();
        for m in &w.messages {
            let parsed = hotcount::event::parse(&m.data);
            match &m.origin {
                Origin::Event {
                    post_id,
                    user_id,
                    seq,
                    liked,
                } => {
                    let e = parsed.expect("valid events parse");
                    assert_eq!((e.post_id(), e.user_id()), (&post_id[..], &user_id[..]));
                    assert_eq!(e.seq, *seq);
                    assert_eq!(e.kind == LikeKind::Added, *liked);
                    assert!(ids.insert(e.event_id().to_owned()), "event ids are unique");
                }
                Origin::Duplicate { .. } => assert!(parsed.is_ok()),
                Origin::Poison { kind } => {
                    assert!(parsed.is_err(), "{kind:?} must be poison");
                    seen_kinds.insert(*kind);
                }
            }
        }
        assert_eq!(seen_kinds.len(), PoisonKind::ALL.len());
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
    fn hostile_messages_are_poison_within_pubsub_limits_and_of_every_kind() {
        let w = generate(&WorkloadConfig {
            events: 5_000,
            hostile_fraction: 0.04,
            ..config(3)
        });
        let hostile: Vec<&OutMessage> = w
            .messages
            .iter()
            .filter(
                |m| matches!(m.origin, Origin::Poison { kind } if !PoisonKind::ALL.contains(&kind)),
            )
            .collect();
        assert_eq!(hostile.len(), 200);
        let poison = w
            .messages
            .iter()
            .filter(|m| m.origin.label() == "poison")
            .count();
        assert_eq!(poison as u64, w.counts.poison);
        assert_eq!(w.counts.poison, 250 + 200);
        let mut kinds = std::collections::BTreeSet::new();
        for m in hostile {
            let Origin::Poison { kind } = m.origin else {
                unreachable!()
            };
            kinds.insert(kind);
            assert!(
                hotcount::event::parse(&m.data).is_err(),
                "{kind:?} is poison"
            );
            assert!(m.data.len() < 10_000_000, "{kind:?} publishable");
            assert!(m.attributes.len() <= 100, "{kind:?}");
            for (k, v) in &m.attributes {
                assert!(k.len() <= 256 && v.len() <= 1024 && !k.starts_with("goog"));
            }
        }
        let mut want: Vec<PoisonKind> = PoisonKind::HOSTILE.to_vec();
        want.push(PoisonKind::HugePayload);
        want.sort();
        assert_eq!(kinds.into_iter().collect::<Vec<_>>(), want);
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

    #[test]
    fn invalid_settings_name_their_flag() {
        let flag = |f: fn(&mut WorkloadConfig)| {
            let mut c = WorkloadConfig::default();
            f(&mut c);
            c.validate().map_err(|e| e.flag)
        };
        assert_eq!(flag(|_| {}), Ok(()));
        assert_eq!(flag(|c| c.events = 0), Err("events"));
        assert_eq!(flag(|c| c.posts = 0), Err("posts"));
        assert_eq!(flag(|c| c.unlike_fraction = 1.5), Err("unlike-fraction"));
        assert_eq!(flag(|c| c.poison_fraction = -0.1), Err("poison-fraction"));
        assert_eq!(flag(|c| c.zipf_exponent = f64::NAN), Err("zipf"));
        assert_eq!(
            flag(|c| {
                c.duplicate_fraction = 0.6;
                c.poison_fraction = 0.4
            }),
            Err("duplicate-fraction")
        );
        assert_eq!(
            flag(|c| {
                c.events = 1;
                c.poison_fraction = 0.6
            }),
            Err("events")
        );
    }
}
