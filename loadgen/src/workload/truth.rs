//! The exact expected like count of every post, from the generated events alone.
//!
//! Invariant: a post's expected count is the number of its (post, user)
//! pairs whose newest event (highest `seq`) is a `like.added`; duplicates
//! and poison never change it, and neither does any event of an erased
//! user ([`Truth::compute_without`]). No code of the service is used to
//! compute it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Origin, OutMessage, WorkloadConfig};

/// Expected counts, serialisable as the `--truth` file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Truth {
    /// The settings the workload was generated from, for the record.
    pub config: WorkloadConfig,
    /// Messages the truth covers (a prefix of the workload when publishing stopped early).
    pub messages: u64,
    /// Expected count per post touched by a valid event (zero included).
    pub counts: BTreeMap<String, i64>,
    /// Expected number of liked memberships, all posts together.
    pub total: i64,
    /// Expected membership documents: distinct (post, user) pairs touched
    /// (the first event of a pair is always a like, so each gets a document).
    #[serde(default)]
    pub memberships: u64,
    /// Poison messages covered (each should leave one quarantine record).
    #[serde(default)]
    pub poison: u64,
    /// Users erased: none of their events counts, and none of their
    /// memberships is expected (an erasure with a tombstone deletes them).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub erased_users: BTreeSet<String>,
}

/// The truth file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TruthError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a truth file.
    #[error("{path} is not a truth file: {source}")]
    Format {
        /// The file.
        path: String,
        /// Why.
        source: serde_json::Error,
    },
}

impl Truth {
    /// Computes the expected counts of `messages` (all of them).
    pub fn compute(config: WorkloadConfig, messages: &[OutMessage]) -> Self {
        Self::compute_without(config, messages, &BTreeSet::new())
    }

    /// Computes the expected counts of `messages` as if every event of
    /// the users in `erased` had never been published: what the store must
    /// hold at rest once they are erased, whenever their events arrive.
    pub fn compute_without(
        config: WorkloadConfig,
        messages: &[OutMessage],
        erased: &BTreeSet<String>,
    ) -> Self {
        let newest = newest_states(messages);
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        let mut memberships = 0;
        for ((post, user), (_, liked)) in &newest {
            if erased.contains(*user) {
                continue;
            }
            memberships += 1;
            *counts.entry((*post).to_string()).or_default() += i64::from(*liked);
        }
        let total = counts.values().sum();
        let poison = messages
            .iter()
            .filter(|m| matches!(m.origin, Origin::Poison { .. }))
            .count() as u64;
        Self {
            config,
            messages: messages.len() as u64,
            counts,
            total,
            memberships,
            poison,
            erased_users: erased.clone(),
        }
    }

    /// The (post, user) pairs of `users` whose newest event in `messages`
    /// is a like: the likes an erasure of them must remove, by post.
    pub fn final_likes_of(
        messages: &[OutMessage],
        users: &BTreeSet<String>,
    ) -> BTreeSet<(String, String)> {
        newest_states(messages)
            .into_iter()
            .filter(|((_, user), (_, liked))| *liked && users.contains(*user))
            .map(|((post, user), _)| (post.to_string(), user.to_string()))
            .collect()
    }

    /// Per post, the distinct users with at least one like event on it
    /// (erased or not): no count of the post can ever have been higher.
    pub fn reach(messages: &[OutMessage]) -> BTreeMap<String, i64> {
        let mut likers: BTreeSet<(&str, &str)> = BTreeSet::new();
        for message in messages {
            if let Some((post, user, _, true)) = event_of(messages, message) {
                likers.insert((post, user));
            }
        }
        let mut reach: BTreeMap<String, i64> = BTreeMap::new();
        for (post, _) in likers {
            *reach.entry(post.to_string()).or_default() += 1;
        }
        reach
    }

    /// The expected count of `post_id` (0 for a post never touched).
    pub fn expected(&self, post_id: &str) -> i64 {
        self.counts.get(post_id).copied().unwrap_or(0)
    }

    /// Writes the truth as pretty JSON to `path`.
    pub fn save(&self, path: &Path) -> Result<(), TruthError> {
        let text = serde_json::to_string_pretty(self).map_err(|source| TruthError::Format {
            path: path.display().to_string(),
            source,
        })?;
        std::fs::write(path, text).map_err(|source| TruthError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads a truth file written by [`Truth::save`].
    pub fn load(path: &Path) -> Result<Self, TruthError> {
        let text = std::fs::read_to_string(path).map_err(|source| TruthError::Io {
            path: path.display().to_string(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| TruthError::Format {
            path: path.display().to_string(),
            source,
        })
    }
}

/// The event a message carries (a duplicate: its original's), as
/// (post, user, seq, liked); `None` for poison.
fn event_of<'a>(
    messages: &'a [OutMessage],
    message: &'a OutMessage,
) -> Option<(&'a str, &'a str, i64, bool)> {
    let origin = match &message.origin {
        Origin::Duplicate { of } => &messages.get(*of)?.origin,
        other => other,
    };
    match origin {
        Origin::Event {
            post_id,
            user_id,
            seq,
            liked,
        } => Some((post_id, user_id, *seq, *liked)),
        _ => None,
    }
}

/// Per (post, user): the newest `seq` and whether it is a like.
fn newest_states(messages: &[OutMessage]) -> HashMap<(&str, &str), (i64, bool)> {
    let mut newest: HashMap<(&str, &str), (i64, bool)> = HashMap::new();
    for message in messages {
        let Some((post, user, seq, liked)) = event_of(messages, message) else {
            continue;
        };
        let entry = newest.entry((post, user)).or_insert((seq, liked));
        if seq > entry.0 {
            *entry = (seq, liked);
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::PoisonKind;

    fn event(post: &str, user: &str, seq: i64, liked: bool) -> OutMessage {
        OutMessage {
            data: Vec::new(),
            attributes: BTreeMap::new(),
            origin: Origin::Event {
                post_id: post.into(),
                user_id: user.into(),
                seq,
                liked,
            },
        }
    }

    fn duplicate(of: usize) -> OutMessage {
        OutMessage {
            data: Vec::new(),
            attributes: BTreeMap::new(),
            origin: Origin::Duplicate { of },
        }
    }

    fn poison() -> OutMessage {
        OutMessage {
            data: b"{".to_vec(),
            attributes: BTreeMap::new(),
            origin: Origin::Poison {
                kind: PoisonKind::BadJson,
            },
        }
    }

    fn truth(messages: &[OutMessage]) -> Truth {
        Truth::compute(WorkloadConfig::default(), messages)
    }

    #[test]
    fn like_unlike_relike_counts_the_newest_state() {
        let t = truth(&[
            event("p", "a", 1, true),
            event("p", "a", 2, false),
            event("p", "b", 1, true),
            event("p", "a", 3, true),
            event("q", "a", 1, true),
            event("q", "a", 2, false),
        ]);
        assert_eq!(t.expected("p"), 2);
        assert_eq!(t.expected("q"), 0);
        assert!(t.counts.contains_key("q"), "touched posts are checked too");
        assert_eq!(t.total, 2);
        assert_eq!(t.memberships, 3);
    }

    #[test]
    fn an_erased_users_every_event_counts_nothing_and_leaves_no_membership() {
        let messages = [
            event("p", "a", 1, true),
            event("p", "erased", 1, true),
            event("q", "erased", 1, true),
            event("q", "erased", 2, false),
            duplicate(1),
            event("r", "erased", 1, true),
        ];
        let erased = BTreeSet::from(["erased".to_string()]);
        let t = Truth::compute_without(WorkloadConfig::default(), &messages, &erased);
        assert_eq!(t.counts, BTreeMap::from([("p".to_string(), 1)]));
        assert_eq!((t.total, t.memberships), (1, 1));
        assert_eq!(t.erased_users, erased);
        let likes = Truth::final_likes_of(&messages, &erased);
        let posts: Vec<&str> = likes.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(posts, ["p", "r"], "q was unliked at the end");
        let reach = Truth::reach(&messages);
        assert_eq!(reach.get("p"), Some(&2));
        assert_eq!(reach.get("q"), Some(&1), "liked once, then unliked");
    }

    #[test]
    fn double_like_counts_once() {
        let t = truth(&[event("p", "a", 1, true), event("p", "a", 2, true)]);
        assert_eq!(t.expected("p"), 1);
    }

    #[test]
    fn late_duplicate_of_an_old_event_changes_nothing() {
        let t = truth(&[
            event("p", "a", 1, true),
            event("p", "a", 2, false),
            duplicate(0),
            duplicate(1),
            duplicate(0),
        ]);
        assert_eq!(t.expected("p"), 0);
    }

    #[test]
    fn out_of_order_events_use_the_highest_seq() {
        let t = truth(&[event("p", "a", 2, false), event("p", "a", 1, true)]);
        assert_eq!(t.expected("p"), 0);
    }

    #[test]
    fn poison_is_excluded() {
        let t = truth(&[poison(), event("p", "a", 1, true), poison()]);
        assert_eq!(t.counts, BTreeMap::from([("p".to_string(), 1)]));
        assert_eq!((t.messages, t.poison), (3, 2));
    }

    #[test]
    fn truth_file_round_trips() {
        let w = crate::workload::generate(&WorkloadConfig {
            events: 500,
            ..WorkloadConfig::default()
        });
        let dir = std::env::temp_dir().join(format!("hotcount-truth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("truth.json");
        w.truth.save(&path).unwrap();
        let loaded = Truth::load(&path).unwrap();
        assert_eq!(loaded.counts, w.truth.counts);
        assert_eq!((loaded.total, loaded.messages), (w.truth.total, 500));
        assert_eq!(loaded.config.seed, w.truth.config.seed);
        assert!((loaded.config.zipf_exponent - w.truth.config.zipf_exponent).abs() < 1e-12);
        std::fs::write(&path, "[]").unwrap();
        assert!(matches!(Truth::load(&path), Err(TruthError::Format { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
