//! Resource names (`projects/{p}/topics/{t}`, `projects/{p}/subscriptions/{s}`)
//! and their validation.
//!
//! Invariant: every name stored in the emulator passed [`parse`] here, so the
//! rest of the emulator can split names without checking them again.

use tonic::Status;

/// The kind of resource a name points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `projects/{p}/topics/{t}`.
    Topic,
    /// `projects/{p}/subscriptions/{s}`.
    Subscription,
    /// `projects/{p}/snapshots/{s}`.
    Snapshot,
}

impl Kind {
    fn collection(self) -> &'static str {
        match self {
            Kind::Topic => "topics",
            Kind::Subscription => "subscriptions",
            Kind::Snapshot => "snapshots",
        }
    }
}

/// A parsed resource name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name<'a> {
    /// Project id.
    pub project: &'a str,
    /// Resource id (the last segment).
    pub id: &'a str,
}

/// The name of the topic of subscriptions whose topic was deleted.
pub const DELETED_TOPIC: &str = "_deleted-topic_";

/// Parses and validates `name` as a resource of `kind`; INVALID_ARGUMENT otherwise.
pub fn parse(name: &str, kind: Kind) -> Result<Name<'_>, Status> {
    let invalid = || {
        Status::invalid_argument(format!(
            "Invalid resource name given (name={name}). Refer to https://cloud.google.com/pubsub/docs/pubsub-basics#resource_names for more information."
        ))
    };
    let mut parts = name.split('/');
    let (Some("projects"), Some(project), Some(collection), Some(id), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(invalid());
    };
    if collection != kind.collection() || project.is_empty() || !valid_id(id) {
        return Err(invalid());
    }
    Ok(Name { project, id })
}

/// Parses `projects/{p}`; INVALID_ARGUMENT otherwise.
pub fn parse_project(name: &str) -> Result<&str, Status> {
    match name.strip_prefix("projects/") {
        Some(p) if !p.is_empty() && !p.contains('/') => Ok(p),
        _ => Err(Status::invalid_argument(format!(
            "Invalid project name given (name={name})."
        ))),
    }
}

/// Whether `id` is a valid topic or subscription id: starts with a letter,
/// 3..=255 characters of `[A-Za-z0-9-_.~+%]`, not starting with `goog`.
pub fn valid_id(id: &str) -> bool {
    let len_ok = (3..=255).contains(&id.len());
    let first_ok = id.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    let chars_ok = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.~+%".contains(c));
    let prefix_ok = !id.to_ascii_lowercase().starts_with("goog");
    len_ok && first_ok && chars_ok && prefix_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_names() {
        let n = parse("projects/p1/topics/likes-v1", Kind::Topic).unwrap();
        assert_eq!((n.project, n.id), ("p1", "likes-v1"));
        assert!(parse("projects/p/subscriptions/abc", Kind::Subscription).is_ok());
    }

    #[test]
    fn rejects_invalid_names() {
        for bad in [
            "projects/p/topics/ab",
            "projects/p/topics/1abc",
            "projects/p/topics/googabc",
            "projects/p/topics/a b c",
            "projects/p/subscriptions/abc",
            "projects//topics/abc",
            "topics/abc",
            "projects/p/topics/abc/extra",
        ] {
            let err = parse(bad, Kind::Topic).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bad}");
        }
    }
}
