//! Resource names and field paths: parsing and validating database, parent
//! and document names, collection and document ids (numeric document ids
//! `__id<int64>__` included), the order of names, and dotted field paths.
//!
//! Invariant: a [`DocName`] or [`Parent`] only exists with a well-formed
//! database prefix and valid ids (and a [`DocName`] within 6 KiB), so the
//! store never sees a malformed key; every rejection is an
//! INVALID_ARGUMENT, never a panic. Names order as Firestore orders
//! `__name__` ([`compare_names`]): segment by segment, numeric ids before
//! string ids.

use std::cmp::Ordering;

use tonic::Status;

/// Longest collection id, document id or field name, in bytes.
pub const MAX_ID_BYTES: usize = 1500;

/// Largest document name (6 KiB), measured as Google's storage size formula
/// measures it: each collection and document id's bytes + 1, plus 16.
pub const MAX_NAME_BYTES: usize = 6 * 1024;

/// Longest field path as sent (dots and backticks included), in bytes.
pub const MAX_FIELD_PATH_BYTES: usize = 1500;

/// The `projects/{p}/databases/{d}` part of every name, validated.
pub fn parse_database(database: &str) -> Result<String, Status> {
    let parts: Vec<&str> = database.split('/').collect();
    match parts.as_slice() {
        ["projects", p, "databases", d] if !p.is_empty() && !d.is_empty() => {
            Ok(database.to_string())
        }
        _ => Err(Status::invalid_argument(format!(
            "Invalid database name: {database:?}; expected projects/{{project}}/databases/{{database}}"
        ))),
    }
}

/// Checks a collection or document id (`what` is `"collection"` or
/// `"document"`; only a document id may be a numeric id `__id<int64>__`).
pub fn validate_id(id: &str, what: &str) -> Result<(), Status> {
    let reason = if id.is_empty() {
        Some("must not be empty")
    } else if id.len() > MAX_ID_BYTES {
        Some("must be at most 1500 bytes")
    } else if id.contains('/') {
        Some("must not contain '/'")
    } else if id == "." || id == ".." {
        Some("must not be '.' or '..'")
    } else if is_reserved(id) && what != "document" {
        Some("must not match __.+__")
    } else if is_reserved(id) && numeric_id(id).is_none() {
        Some("must not match __.+__ unless it is a numeric id __id<int64>__")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Status::invalid_argument(format!(
            "Invalid {what} id {:?}: {reason}.",
            truncate(id)
        ))),
        None => Ok(()),
    }
}

/// Whether a name has the reserved form `__.+__`: two underscores, at least
/// one character, two underscores (`____` itself is an ordinary name).
pub fn is_reserved(name: &str) -> bool {
    name.len() >= 5 && name.starts_with("__") && name.ends_with("__")
}

/// The number of a numeric document id: `__id`, a signed 64-bit integer in
/// canonical decimal (an optional `-`, no `+`, no leading zeros, not `-0`),
/// `__`. Firestore exposes Datastore's numeric entity ids this way
/// (<https://firebase.google.com/docs/firestore/quotas#collections_documents_and_fields>)
/// and accepts them from `__id-9223372036854775808__` to
/// `__id9223372036854775807__` (the int64 bounds Google's client libraries
/// and their integration tests use). Any other `__id...__` is not numeric.
pub fn numeric_id(id: &str) -> Option<i64> {
    let digits = id.strip_prefix("__id")?.strip_suffix("__")?;
    let magnitude = digits.strip_prefix('-').unwrap_or(digits);
    let canonical = match magnitude.as_bytes() {
        [b'0'] => magnitude.len() == digits.len(),
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if canonical {
        digits.parse().ok()
    } else {
        None
    }
}

/// The storage size of a document name from its ids: each id's bytes + 1,
/// plus 16 (<https://firebase.google.com/docs/firestore/storage-size>).
fn name_size<'a>(ids: impl IntoIterator<Item = &'a str>) -> usize {
    ids.into_iter().map(|id| id.len() + 1).sum::<usize>() + 16
}

/// The storage size of the full document name `name` (a reference value's
/// size too); names without `/documents/` count their whole length.
pub fn document_name_size(name: &str) -> usize {
    match name.split_once("/documents/") {
        Some((_, path)) => name_size(path.split('/')),
        None => name.len() + 1,
    }
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A place documents live under: the database root or a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parent {
    /// `projects/{p}/databases/{d}`.
    pub database: String,
    /// Ids below `documents/`: empty for the root, else an even number.
    pub segments: Vec<String>,
}

impl Parent {
    /// Parses `projects/{p}/databases/{d}/documents[/{coll}/{id}...]`.
    pub fn parse(name: &str) -> Result<Self, Status> {
        let (database, segments) = split(name)?;
        if segments.len() % 2 != 0 {
            return Err(Status::invalid_argument(format!(
                "Invalid parent {name:?}: it must be the database root or a document."
            )));
        }
        Ok(Self { database, segments })
    }

    /// The full name, `.../documents[/...]`.
    pub fn name(&self) -> String {
        join(&self.database, &self.segments)
    }

    /// The key prefix every document below this parent starts with.
    pub fn prefix(&self) -> String {
        let mut p = self.name();
        p.push('/');
        p
    }
}

/// A document name, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocName {
    /// `projects/{p}/databases/{d}`.
    pub database: String,
    /// Collection id, document id, ... (even length, at least 2).
    pub segments: Vec<String>,
}

impl DocName {
    /// Parses and validates a full document name.
    pub fn parse(name: &str) -> Result<Self, Status> {
        let (database, segments) = split(name)?;
        if segments.is_empty() || segments.len() % 2 != 0 {
            return Err(Status::invalid_argument(format!(
                "Document name {name:?} has {} segment(s) after documents/; a document name needs an even, non-zero number.",
                segments.len()
            )));
        }
        let size = name_size(segments.iter().map(String::as_str));
        if size > MAX_NAME_BYTES {
            return Err(Status::invalid_argument(format!(
                "Document name {:?}... is too long: its size is {size} bytes, over the maximum of 6 KiB ({MAX_NAME_BYTES} bytes).",
                truncate(name)
            )));
        }
        Ok(Self { database, segments })
    }

    /// Parses a name and checks it belongs to `database`.
    pub fn parse_in(name: &str, database: &str) -> Result<Self, Status> {
        let doc = Self::parse(name)?;
        if doc.database != database {
            return Err(Status::invalid_argument(format!(
                "Document {name:?} is not in database {database:?}."
            )));
        }
        Ok(doc)
    }

    /// The full name.
    pub fn name(&self) -> String {
        join(&self.database, &self.segments)
    }
}

fn join(database: &str, segments: &[String]) -> String {
    let mut s = format!("{database}/documents");
    for seg in segments {
        s.push('/');
        s.push_str(seg);
    }
    s
}

/// Splits `projects/p/databases/d/documents/a/b...` into the database and the
/// validated ids after `documents`.
fn split(name: &str) -> Result<(String, Vec<String>), Status> {
    let bad = || {
        Status::invalid_argument(format!(
            "Invalid resource name {:?}; expected projects/{{p}}/databases/{{d}}/documents[/...].",
            truncate(name)
        ))
    };
    let mut parts = name.split('/');
    let (Some("projects"), Some(p), Some("databases"), Some(d), Some("documents")) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(bad());
    };
    if p.is_empty() || d.is_empty() {
        return Err(bad());
    }
    let mut segments = Vec::new();
    for (i, seg) in parts.enumerate() {
        validate_id(seg, if i % 2 == 0 { "collection" } else { "document" })?;
        segments.push(seg.to_string());
    }
    Ok((format!("projects/{p}/databases/{d}"), segments))
}

/// Orders names segment by segment, as Firestore orders `__name__`: a
/// name that is a prefix of another comes first.
pub fn compare_names(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.split('/'), b.split('/'));
    loop {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) => match compare_segments(x, y) {
                Ordering::Equal => {}
                other => return other,
            },
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
        }
    }
}

/// Orders two ids: numeric ids (`__id<int64>__`) first, by their number;
/// then every other id by its UTF-8 bytes. The rule of Google's client
/// libraries, which match the backend's order (`compareSegments` in
/// nodejs-firestore `dev/src/path.ts`, java-firestore `BasePath.java`).
pub fn compare_segments(a: &str, b: &str) -> Ordering {
    match (numeric_id(a), numeric_id(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.as_bytes().cmp(b.as_bytes()),
    }
}

/// The path of `name` below `prefix` (which ends with `/`), split into ids.
pub fn relative<'a>(name: &'a str, prefix: &str) -> Option<Vec<&'a str>> {
    name.strip_prefix(prefix)
        .map(|rest| rest.split('/').collect())
}

/// Parses a field path: dot-separated names, each plain or backtick-quoted
/// (inside backticks, `\` escapes the next character).
pub fn parse_field_path(path: &str) -> Result<Vec<String>, Status> {
    let bad = |why: &str| {
        Status::invalid_argument(format!("Invalid field path {:?}: {why}.", truncate(path)))
    };
    if path.len() > MAX_FIELD_PATH_BYTES {
        return Err(bad("longer than 1,500 bytes"));
    }
    let mut out = Vec::new();
    let mut chars = path.chars().peekable();
    loop {
        let mut name = String::new();
        if chars.peek() == Some(&'`') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => name.push(chars.next().ok_or_else(|| bad("dangling escape"))?),
                    '`' => {
                        closed = true;
                        break;
                    }
                    c => name.push(c),
                }
            }
            if !closed {
                return Err(bad("unterminated backtick"));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' {
                    break;
                }
                if c == '`' {
                    return Err(bad("backtick inside an unquoted name"));
                }
                name.push(c);
                chars.next();
            }
        }
        if name.is_empty() {
            return Err(bad("empty field name"));
        }
        out.push(name);
        match chars.next() {
            None => return Ok(out),
            Some('.') => {}
            Some(_) => return Err(bad("expected '.' after a quoted name")),
        }
    }
}

/// Quotes one field name for a field path when it is not a plain identifier.
pub fn quote_field_name(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("`{}`", name.replace('\\', "\\\\").replace('`', "\\`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_document_names() {
        let d = DocName::parse("projects/p/databases/(default)/documents/c/x/s/y").unwrap();
        assert_eq!(d.database, "projects/p/databases/(default)");
        assert_eq!(d.segments, ["c", "x", "s", "y"]);
        assert!(DocName::parse("projects/p/databases/d/documents/c").is_err());
        assert!(DocName::parse("projects/p/databases/d/documents/c/..").is_err());
        assert!(DocName::parse("projects/p/databases/d/documents/c/__x__").is_err());
        assert!(DocName::parse("projects/p/databases/d/documents/c/_____").is_err());
        assert!(DocName::parse("projects/p/databases/d/documents/____/____").is_ok());
        assert!(DocName::parse("projects/p/databases/d/documents/c/___").is_ok());
        assert!(DocName::parse("projects/p/databases/d/documents/c/").is_err());
        assert!(DocName::parse(&format!(
            "projects/p/databases/d/documents/c/{}",
            "a".repeat(1501)
        ))
        .is_err());
    }

    #[test]
    fn measures_names_as_the_storage_size_formula_does() {
        // Google's example: users/jeff/tasks/my_task_id is 6 + 5 + 6 + 11 + 16.
        assert_eq!(
            document_name_size("projects/p/databases/d/documents/users/jeff/tasks/my_task_id"),
            44
        );
    }

    #[test]
    fn parses_field_paths() {
        assert_eq!(parse_field_path("a.b").unwrap(), ["a", "b"]);
        assert_eq!(parse_field_path("`a.b`.c").unwrap(), ["a.b", "c"]);
        assert_eq!(parse_field_path("`a\\`b`").unwrap(), ["a`b"]);
        assert!(parse_field_path("a..b").is_err());
        assert!(parse_field_path("").is_err());
        assert!(parse_field_path("`a").is_err());
        assert!(parse_field_path(&"a".repeat(1500)).is_ok());
        assert!(parse_field_path(&"a".repeat(1501)).is_err());
    }

    #[test]
    fn orders_names_by_segment() {
        assert_eq!(compare_names("a/b/c", "a/b-c"), Ordering::Less);
        assert_eq!(compare_names("a/b", "a/b/c"), Ordering::Less);
        assert_eq!(compare_names("a/b", "a/b"), Ordering::Equal);
    }

    #[test]
    fn numeric_ids_are_canonical_int64() {
        for (id, n) in [
            ("__id0__", Some(0)),
            ("__id42__", Some(42)),
            ("__id-5__", Some(-5)),
            ("__id9223372036854775807__", Some(i64::MAX)),
            ("__id-9223372036854775808__", Some(i64::MIN)),
            ("__id9223372036854775808__", None),
            ("__id-9223372036854775809__", None),
            ("__id__", None),
            ("__id-__", None),
            ("__id-0__", None),
            ("__id01__", None),
            ("__id+1__", None),
            ("__id 1__", None),
            ("__id1_", None),
            ("_id1__", None),
            ("__ID1__", None),
        ] {
            assert_eq!(numeric_id(id), n, "{id}");
        }
        assert!(validate_id("__id7__", "document").is_ok());
        assert!(validate_id("__id7__", "collection").is_err());
        assert!(validate_id("__id07__", "document").is_err());
    }

    #[test]
    fn numeric_ids_come_first_in_numeric_order() {
        let mut ids = vec![
            "a", "_id1__", "__id1_", "__id", "Aa", "A", "7", "12", "__id12__", "__id7__",
            "__id-2__",
        ];
        ids.sort_by(|a, b| compare_segments(a, b));
        // Google's expected order (java-firestore ITQueryWatchTest).
        assert_eq!(
            ids,
            [
                "__id-2__", "__id7__", "__id12__", "12", "7", "A", "Aa", "__id", "__id1_",
                "_id1__", "a"
            ]
        );
        assert_eq!(
            compare_names("d/c/__id-9223372036854775808__", "d/c/0abc"),
            Ordering::Less
        );
    }
}
