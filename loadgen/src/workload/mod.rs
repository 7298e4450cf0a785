//! Deterministic like workloads: Zipf-skewed valid events, publisher-retry
//! duplicates and poison, with the exact expected count of every post.
//! This file holds what a workload is (settings, messages, counts, ids);
//! [`generate`] makes one, `poison` the payloads that must never count,
//! `zipf` the shape of post popularity, [`truth`] its exact answer.
//!
//! Invariant: for a given [`WorkloadConfig`] (seed included) [`generate`]
//! yields the same messages, ids and [`Truth`] every time (only `occurredAt`
//! follows the clock), and the [`Truth`] is computed from the generated
//! events alone: per (post, user), the state of its newest event.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod generate;
mod poison;
mod shape;
pub mod truth;
mod zipf;

pub use generate::generate;
pub use poison::{hostile_attributes, poison_payload, PoisonKind, HUGE_PAYLOAD_EVERY};
pub use shape::as_python_client_publishes;
pub use truth::Truth;
pub use zipf::{exponent_for_top_share, Zipf};

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
    /// Publish the valid events in a random order instead of generation
    /// order: a pair's events then arrive in any order, so some are stale
    /// (older than one already applied). Duplicates still follow their
    /// originals.
    #[serde(default)]
    pub shuffle: bool,
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
            shuffle: false,
            seed: 42,
        }
    }
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

    /// The attributes a message of this origin carries: its label.
    pub(crate) fn attributes(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(ORIGIN_ATTRIBUTE.to_string(), self.label().to_string())])
    }
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

/// The id of post rank `k`.
pub fn post_id(k: usize) -> String {
    format!("post-{k:06}")
}

/// The id of user `k`.
pub fn user_id(k: u32) -> String {
    format!("user-{k:07}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small workload with every kind of message.
    pub(super) fn config(seed: u64) -> WorkloadConfig {
        WorkloadConfig {
            events: 5_000,
            posts: 50,
            users: 200,
            zipf_exponent: 1.0,
            unlike_fraction: 0.3,
            duplicate_fraction: 0.1,
            poison_fraction: 0.05,
            hostile_fraction: 0.0,
            shuffle: false,
            seed,
        }
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
