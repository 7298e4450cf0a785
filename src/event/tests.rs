//! The event schema's rules, through [`parse`]: valid payloads, every
//! poison reason, hostile input, and the version order.

use super::*;

fn payload(extra: &str) -> String {
    format!(
        r#"{{"eventId":"e1","type":"like.added","postId":"p1","userId":"u1","occurredAt":"2026-11-30T10:00:00Z"{extra}}}"#
    )
}

#[test]
fn valid_event_parses_with_defaults() {
    let e = parse(payload("").as_bytes()).unwrap();
    assert_eq!(e.kind, LikeKind::Added);
    assert_eq!(e.post_id(), "p1");
    assert_eq!(e.seq, 0);
    assert_eq!(e.event_id(), "e1");
}

#[test]
fn unknown_fields_are_ignored() {
    assert!(parse(payload(r#","color":"red","nested":{"a":[1,2]}"#).as_bytes()).is_ok());
}

#[test]
fn round_trips_through_to_json() {
    let e = parse(payload(r#","seq":7,"producer":"web","version":1"#).as_bytes()).unwrap();
    assert_eq!(parse(to_json(&e).as_bytes()).unwrap(), e);
}

#[test]
fn unsafe_ids_are_poison() {
    for (id, problem) in [
        ("a/b", IdProblem::Slash),
        (".", IdProblem::DotName),
        ("..", IdProblem::DotName),
        ("__x__", IdProblem::Reserved),
        ("", IdProblem::Empty),
        ("a\u{0}b", IdProblem::ControlChar),
        ("a\nb", IdProblem::ControlChar),
        ("a\u{7f}b", IdProblem::ControlChar),
        ("\u{e9}\u{85}", IdProblem::ControlChar),
    ] {
        let json = serde_json::json!({
            "eventId": "e", "type": "like.added", "postId": id, "userId": "u",
            "occurredAt": "2026-11-30T10:00:00Z"
        });
        let err = parse(json.to_string().as_bytes()).unwrap_err();
        assert_eq!(
            err,
            Poison::UnsafeId {
                field: "postId",
                reason: problem
            },
            "{id:?}"
        );
    }
    let long = "x".repeat(2048);
    let json = serde_json::json!({
        "eventId": "e", "type": "like.added", "postId": "p", "userId": long,
        "occurredAt": "2026-11-30T10:00:00Z"
    });
    assert_eq!(
        parse(json.to_string().as_bytes()).unwrap_err(),
        Poison::UnsafeId {
            field: "userId",
            reason: IdProblem::TooLong
        }
    );
}

#[test]
fn malformed_payloads_are_poison_with_reasons() {
    assert_eq!(parse(b"\xff\xfe").unwrap_err(), Poison::NotUtf8);
    assert!(matches!(
        parse(b"not json").unwrap_err(),
        Poison::NotJson(_)
    ));
    assert!(matches!(parse(b"[1,2]").unwrap_err(), Poison::NotJson(_)));
    assert_eq!(
        parse(br#"{"type":"like.added"}"#).unwrap_err(),
        Poison::MissingField("eventId")
    );
    assert_eq!(
        parse(payload(r#","type":"like.added""#).as_bytes()).unwrap_err(),
        Poison::DuplicateField("type".into())
    );
    let unknown = payload("").replace("like.added", "like.exploded");
    assert!(matches!(
        parse(unknown.as_bytes()).unwrap_err(),
        Poison::UnknownType(_)
    ));
    assert!(matches!(
        parse(payload(r#","version":2"#).as_bytes()).unwrap_err(),
        Poison::UnsupportedVersion(_)
    ));
    assert_eq!(
        parse(payload(r#","seq":-1"#).as_bytes()).unwrap_err(),
        Poison::BadSeq
    );
    assert_eq!(
        parse(payload(r#","seq":1e300"#).as_bytes()).unwrap_err(),
        Poison::BadSeq
    );
    let bad_time = payload("").replace("2026-11-30T10:00:00Z", "yesterday");
    assert!(matches!(
        parse(bad_time.as_bytes()).unwrap_err(),
        Poison::BadTimestamp(_)
    ));
    let num_id = payload("").replace(r#""postId":"p1""#, r#""postId":12"#);
    assert_eq!(
        parse(num_id.as_bytes()).unwrap_err(),
        Poison::WrongType {
            field: "postId",
            expected: "a string"
        }
    );
}

#[test]
fn duplicate_unknown_or_escaped_keys_are_poison() {
    assert_eq!(
        parse(payload(r#","x":1,"x":[2]"#).as_bytes()).unwrap_err(),
        Poison::DuplicateField("x".into())
    );
    assert_eq!(
        parse(payload(r#","post\u0049d":"p2""#).as_bytes()).unwrap_err(),
        Poison::DuplicateField("postId".into())
    );
    assert_eq!(
        parse(payload(r#","seq":1,"seq":2"#).as_bytes()).unwrap_err(),
        Poison::DuplicateField("seq".into())
    );
}

#[test]
fn null_or_escaped_string_fields_are_handled() {
    let null_user = payload("").replace(r#""userId":"u1""#, r#""userId":null"#);
    assert_eq!(
        parse(null_user.as_bytes()).unwrap_err(),
        Poison::MissingField("userId")
    );
    let escaped = payload("").replace(r#""postId":"p1""#, r#""postId":"p\u00e9\"x""#);
    assert_eq!(parse(escaped.as_bytes()).unwrap().post_id(), "p\u{e9}\"x");
    let obj_type = payload("").replace(r#""type":"like.added""#, r#""type":{"a":[1]}"#);
    assert_eq!(
        parse(obj_type.as_bytes()).unwrap_err(),
        Poison::WrongType {
            field: "type",
            expected: "a string"
        }
    );
    let null_seq = payload(r#","seq":null,"producer":null,"version":null"#);
    assert_eq!(parse(null_seq.as_bytes()).unwrap().seq, 0);
}

#[test]
fn huge_and_deep_payloads_are_poison_not_panics() {
    let huge = vec![b' '; MAX_PAYLOAD_BYTES + 1];
    assert_eq!(
        parse(&huge).unwrap_err(),
        Poison::TooLarge(MAX_PAYLOAD_BYTES + 1)
    );
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(matches!(
        parse(deep.as_bytes()).unwrap_err(),
        Poison::NotJson(_)
    ));
    let deep_field = payload(&format!(
        r#","x":{}1{}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    ));
    assert!(parse(deep_field.as_bytes()).is_err());
}

/// Found by the fuzz driver (tests/fuzz_parser.rs): reasons quoted
/// attacker-sized values verbatim.
#[test]
fn poison_reasons_stay_short_whatever_the_payload() {
    let big = "x".repeat(60_000);
    let cases = [
        payload(&format!(r#","version":"{big}""#)),
        payload(&format!(r#","{big}":1,"{big}":2"#)),
        format!(r#""{big}""#),
        payload("").replace("like.added", &big),
    ];
    for case in cases {
        let reason = parse(case.as_bytes()).unwrap_err().to_string();
        assert!(
            reason.len() <= 256,
            "{} bytes: {:.80}",
            reason.len(),
            reason
        );
    }
}

/// Found by libFuzzer (fuzz/, 2026-11-30): a type of 128 DEL characters
/// passed the 128-byte cut, then `{:?}` escaped each into `\u{7f}` and
/// the reason grew to 800+ bytes. Escaping now happens before the cut.
#[test]
fn escaped_reasons_stay_short_and_on_one_line() {
    let crash = include_bytes!("../../fuzz/corpus/parse/regression-escaped-type-reason");
    let reason = parse(crash).unwrap_err().to_string();
    assert!(reason.len() <= 256, "{} bytes: {reason}", reason.len());
    for hostile in [r"\u007f", "\x7f", r"\n", r"\u0000", r"\u001b[31m"] {
        let kind = hostile.repeat(200);
        for case in [
            payload("").replace("like.added", &kind),
            payload(&format!(r#","{kind}":1,"{kind}":2"#)),
        ] {
            let reason = parse(case.as_bytes()).unwrap_err().to_string();
            assert!(reason.len() <= 256, "{} bytes: {reason}", reason.len());
            assert!(!reason.chars().any(char::is_control), "{reason:?}");
        }
    }
}

#[test]
fn hostile_numbers_and_encodings_are_poison_not_panics() {
    for extra in [
        r#","seq":9223372036854775808"#,
        r#","seq":-9223372036854775809"#,
        r#","seq":1.5"#,
        r#","seq":"3""#,
        r#","version":1.0"#,
        r#","version":18446744073709551616"#,
    ] {
        assert!(parse(payload(extra).as_bytes()).is_err(), "{extra}");
    }
    let lone_surrogate = payload("").replace("u1", r"\ud800");
    assert!(parse(lone_surrogate.as_bytes()).is_err());
    let bom = format!("\u{feff}{}", payload(""));
    assert!(parse(bom.as_bytes()).is_err());
    let time = payload("").replace("2026-11-30T10:00:00Z", "+275760-09-13T00:00:00Z");
    assert!(matches!(
        parse(time.as_bytes()).unwrap_err(),
        Poison::BadTimestamp(_)
    ));
}

#[test]
fn versions_order_by_seq_then_time_then_id() {
    let v = |seq, t, id: &str| Version {
        seq,
        occurred_at_micros: t,
        event_id: id.into(),
    };
    assert!(v(2, 0, "a") > v(1, 9, "z"));
    assert!(v(1, 5, "a") > v(1, 4, "z"));
    assert!(v(1, 5, "b") > v(1, 5, "a"));
    assert_eq!(v(1, 5, "a").cmp(&v(1, 5, "a")), Ordering::Equal);
}
