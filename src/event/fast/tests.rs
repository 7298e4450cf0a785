//! The fast path against the general decoder: canonical payloads take it
//! with the same result; unusual ones are left to the general decoder.

use super::super::parse_general;
use super::*;

const CANONICAL: &str = r#"{"version":1,"eventId":"01J9Z8Q7AB","type":"like.added","postId":"post-7","userId":"user-42","occurredAt":"2026-11-30T12:34:56.789012Z","seq":3,"producer":"web"}"#;

#[test]
fn canonical_payloads_take_the_fast_path_with_the_general_result() {
    for payload in [
        CANONICAL.to_string(),
        CANONICAL.replace(",", " ,\n\t").replace("\":", "\" : "),
        CANONICAL.replace(r#","seq":3"#, r#","seq":null"#),
        CANONICAL.replace(
            r#""producer":"web""#,
            r#""producer":null,"x":-12,"y":"z","t":true"#,
        ),
        CANONICAL.replace("12:34:56.789012Z", "12:34:56+05:30"),
        CANONICAL.replace("12:34:56.789012Z", "12:34:56.123456789-23:59"),
        CANONICAL.replace("2026-11-30", "2024-02-29"),
        CANONICAL.replace("post-7", "caf\u{e9}"),
        CANONICAL.replace("2026-11-30T12:34:56.789012Z", "0001-01-01T00:00:00Z"),
        CANONICAL.replace("2026-11-30T12:34:56.789012Z", "1969-12-31T23:59:59.999999Z"),
        CANONICAL.replace("2026-11-30T12:34:56.789012Z", "9999-12-31T23:59:59.999999Z"),
    ] {
        let fast = parse(payload.as_bytes());
        assert!(fast.is_some(), "fast path refused {payload}");
        assert_eq!(
            fast.ok_or(()),
            parse_general(payload.as_bytes()).map_err(drop)
        );
    }
}

#[test]
fn unusual_payloads_are_left_to_the_general_decoder() {
    for payload in [
        CANONICAL.replace("post-7", r"post\u002d7"),
        CANONICAL.replace(r#""seq":3"#, r#""seq":3,"seq":4"#),
        CANONICAL.replace(r#""seq":3"#, r#""seq":3.0"#),
        CANONICAL.replace(r#""seq":3"#, r#""seq":-3"#),
        CANONICAL.replace(r#""seq":3"#, r#""seq":03"#),
        CANONICAL.replace(r#""version":1"#, r#""version":2"#),
        CANONICAL.replace(r#""version":1"#, r#""version":1e0"#),
        CANONICAL.replace(r#""producer":"web""#, r#""producer":"web","n":{"a":1}"#),
        CANONICAL.replace(r#""producer":"web""#, r#""producer":"web","n":1.5"#),
        CANONICAL.replace("12:34:56", "12:34:60"),
        CANONICAL.replace("T12", "t12"),
        CANONICAL.replace("2026-11-30T12:34:56.789012Z", "0001-01-01T00:00:00+00:01"),
        CANONICAL.replace("2026-11-30", "2026-02-29"),
        CANONICAL.replace(".789012Z", ".7890123456Z"),
        CANONICAL.replace("post-7", "a/b"),
        CANONICAL.replace("like.added", "like.liked"),
        CANONICAL.replace(r#""userId":"user-42","#, ""),
        format!("{CANONICAL} x"),
        format!("{CANONICAL},"),
        "{}".to_string(),
    ] {
        assert!(
            parse(payload.as_bytes()).is_none(),
            "fast path took {payload}"
        );
    }
}

#[test]
fn a_string_that_is_not_utf8_is_left_to_the_general_decoder_which_names_it() {
    let with = |from: &str, to: &[u8]| -> Vec<u8> {
        let at = CANONICAL.find(from).expect("in the canonical payload");
        let mut bytes = CANONICAL.as_bytes()[..at].to_vec();
        bytes.extend_from_slice(to);
        bytes.extend_from_slice(&CANONICAL.as_bytes()[at + from.len()..]);
        bytes
    };
    for payload in [
        with("user-42", b"user-\xff42"),
        with("post-7", b"post-7\xe2\x82"), // truncated at the string's end
        with("web", b"w\xc3b"),
        with("01J9Z8Q7AB", b"01J9Z8Q7\xed\xa0\x80"), // a surrogate
        with(r#""producer":"web""#, b"\"producer\":\"web\",\"n\xff\":1"),
        with(
            r#""producer":"web""#,
            b"\"producer\":\"web\",\"n\":\"\xc0\xaf\"",
        ),
    ] {
        assert!(parse(&payload).is_none(), "fast path took {payload:?}");
        assert_eq!(parse_general(&payload), Err(super::super::Poison::NotUtf8));
    }
    // Valid non-ASCII is the fast path's, with the general result.
    let accented = with("user-42", "us\u{e9}r-\u{1f600}".as_bytes());
    assert_eq!(parse(&accented), parse_general(&accented).ok());
    assert!(parse(&accented).is_some());
}

#[test]
fn the_word_scan_flags_exactly_the_special_bytes_in_every_position() {
    let is_special = |b: u8| b == b'"' || b == b'\\' || b == b'/' || !(0x20..0x7f).contains(&b);
    for byte in 0..=255u8 {
        for at in 0..8 {
            // Plain neighbours on both sides, and the worst ones for a
            // carry or borrow (0x7e, 0x20, 0xff) around the byte.
            for fill in [b'a', 0x7e, 0x20, 0xff] {
                let mut w = [fill; 8];
                w[at] = byte;
                let got = word::special(u64::from_le_bytes(w));
                for (i, b) in w.iter().enumerate() {
                    let flagged = got >> (8 * i + 7) & 1 == 1;
                    assert_eq!(flagged, is_special(*b), "{w:02x?} byte {i}");
                }
            }
        }
    }
}
