//! Poison: the malformed and hostile payloads that must never count, each
//! kind aimed at a real post and user.
//!
//! Invariant: every payload here fails `hotcount::event::parse`, and every
//! message stays within Pub/Sub's limits (100 attributes of at most 1 KiB,
//! 10 MB of data).

use std::collections::BTreeMap;

use chrono::Utc;
use rand::rngs::StdRng;
use rand::Rng;

use super::{post_id, user_id, MessagePlan, Origin, OutMessage, WorkloadConfig};

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

pub(super) fn generate_poison(
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
        let mut attributes = origin.attributes();
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
    use hotcount::event::LikeKind;

    use super::super::tests::config;
    use super::super::{generate, WorkloadConfig};
    use super::*;

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
    fn hostile_messages_are_poison_within_pubsub_limits_and_of_every_kind() {
        let w = generate(&WorkloadConfig {
            events: 5_000,
            hostile_fraction: 0.04,
            shuffle: false,
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
}
