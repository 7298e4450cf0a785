//! How a workload's messages look on the wire when another publisher sends
//! them: [`as_python_client_publishes`] gives them the shape of a script
//! publishing `json.dumps(event)` with Google's Python client (no
//! attributes; `", "` and `": "` between JSON tokens).
//!
//! Invariant: only the bytes' layout changes, never what a message means:
//! a valid event parses to the same event (same fields in the same order,
//! whitespace added only outside strings), a poison message keeps its
//! bytes, and every message keeps its origin, so the truth is unchanged.

use super::{Origin, Workload};

/// Drops every message's attributes and re-spaces each valid event's and
/// duplicate's JSON as Python's `json.dumps` does by default.
pub fn as_python_client_publishes(workload: &mut Workload) {
    for message in &mut workload.messages {
        message.attributes.clear();
        if matches!(
            message.origin,
            Origin::Event { .. } | Origin::Duplicate { .. }
        ) {
            message.data = python_separators(&message.data);
        }
    }
}

/// `json` with a space after each `,` and `:` outside strings.
fn python_separators(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + json.len() / 8);
    let (mut in_string, mut escaped) = (false, false);
    for &b in json {
        out.push(b);
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b':' => out.push(b' '),
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{generate, WorkloadConfig};

    #[test]
    fn separators_get_a_space_outside_strings_only() {
        let compact = br#"{"a":"x, y: \"z\"","b":[1,2],"c":{"d":null}}"#;
        let spaced = br#"{"a": "x, y: \"z\"", "b": [1, 2], "c": {"d": null}}"#;
        assert_eq!(python_separators(compact), spaced.to_vec());
    }

    #[test]
    fn a_python_shaped_workload_parses_to_the_same_events_without_attributes() {
        let config = WorkloadConfig {
            events: 2_000,
            ..WorkloadConfig::default()
        };
        let tagged = generate(&config);
        let mut plain = tagged.clone();
        as_python_client_publishes(&mut plain);
        assert_eq!(plain.truth.counts, tagged.truth.counts);
        for (p, t) in plain.messages.iter().zip(&tagged.messages) {
            assert!(p.attributes.is_empty());
            assert_eq!(p.origin, t.origin);
            match t.origin {
                Origin::Poison { .. } => assert_eq!(p.data, t.data),
                _ => {
                    assert_ne!(p.data, t.data, "re-spaced");
                    assert_eq!(
                        hotcount::event::parse(&p.data).expect("valid"),
                        hotcount::event::parse(&t.data).expect("valid")
                    );
                }
            }
        }
    }
}
