//! A stable-toolchain fuzz driver for the event parser (the cargo-fuzz
//! target in `fuzz/` needs nightly): mutates the seed corpus in
//! `fuzz/corpus/parse` and generates structured events for
//! `HOTCOUNT_FUZZ_SECS` seconds (default 3), catching panics.
//!
//! Checked for every input: no panic; `parse` (fast path + general decoder)
//! and `parse_general` return the same result; a parsed event has ids safe as
//! Firestore document ids (so is its membership document id) and round-trips
//! through `to_json`; a poison reason is non-empty and short.
//!
//! Long run: `HOTCOUNT_FUZZ_SECS=600 cargo test --test fuzz_parser -- --nocapture`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use hotcount::event::{
    check_id, parse, parse_fast, parse_general, to_json, LikeEvent, MAX_EVENT_ID_BYTES,
    MAX_ID_BYTES,
};
use hotcount::model::batch::MembershipKey;
use hotcount::store::firestore::layout::membership_doc_id;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Longest poison reason allowed (it is stored in the quarantine record and logged).
const MAX_REASON_BYTES: usize = 512;

fn check(data: &[u8]) {
    let result = parse(data);
    assert_eq!(
        result,
        parse_general(data),
        "the fast path and the general decoder disagree"
    );
    match result {
        Ok(event) => {
            assert!(check_id(event.post_id(), MAX_ID_BYTES).is_ok());
            assert!(check_id(event.user_id(), MAX_ID_BYTES).is_ok());
            assert!(check_id(event.event_id(), MAX_EVENT_ID_BYTES).is_ok());
            let doc_id = membership_doc_id(&MembershipKey::of(&event));
            assert!(check_id(&doc_id, 1500).is_ok(), "unsafe doc id {doc_id:?}");
            assert_eq!(parse(to_json(&event).as_bytes()).as_ref(), Ok(&event));
            let rebuilt = LikeEvent::new(
                event.kind,
                event.post_id(),
                event.user_id(),
                &event.version(),
                event.producer(),
            );
            assert_eq!(
                rebuilt.as_ref(),
                Ok(&event),
                "the constructor accepts what parses"
            );
        }
        Err(poison) => {
            let reason = poison.to_string();
            assert!(
                !reason.is_empty() && reason.len() <= MAX_REASON_BYTES,
                "reason of {} bytes: {:.200}",
                reason.len(),
                reason
            );
        }
    }
}

fn corpus() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parse");
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .expect("fuzz/corpus/parse exists")
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 10, "seed corpus too small");
    seeds
}

const TOKENS: &[&str] = &[
    "\"postId\"",
    "\"userId\"",
    "\"eventId\"",
    "\"type\"",
    "\"seq\"",
    "\"version\"",
    "\"occurredAt\"",
    "\"producer\"",
    "\"like.added\"",
    "\"like.removed\"",
    "\"/\"",
    "\"..\"",
    "\".\"",
    "\"__x__\"",
    "\"__\"",
    "\"\\u0000\"",
    "\"\\n\"",
    "\"\\ud800\"",
    "1e309",
    "-1",
    "9223372036854775807",
    "9223372036854775808",
    "-0",
    "0.5",
    "null",
    "true",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "\"",
    "\\",
    "\"2026-11-30T10:00:00Z\"",
    "\"0000-01-01T00:00:00Z\"",
    "\"9999-12-31T23:59:59.999999999+23:59\"",
    "\u{feff}",
    "\u{202e}",
    "\u{10ffff}",
];

fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    for _ in 0..rng.random_range(1..=4) {
        let len = input.len();
        match rng.random_range(0..9) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                input[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                input[i] = rng.random();
            }
            2 if len > 0 => {
                let a = rng.random_range(0..len);
                let b = (a + rng.random_range(0..16)).min(len);
                input.drain(a..b);
            }
            3 => {
                let i = rng.random_range(0..=len);
                let token = TOKENS[rng.random_range(0..TOKENS.len())].as_bytes();
                input.splice(i..i, token.iter().copied());
            }
            4 if len > 0 => {
                // Duplicate a slice (duplicated keys, deep nesting).
                let a = rng.random_range(0..len);
                let b = (a + rng.random_range(1..64)).min(len);
                let piece = input[a..b].to_vec();
                let times = rng.random_range(1..=8);
                for _ in 0..times {
                    input.splice(b..b, piece.iter().copied());
                }
            }
            5 => {
                // Splice with another seed.
                let other = &seeds[rng.random_range(0..seeds.len())];
                let cut = rng.random_range(0..=len);
                let from = rng.random_range(0..=other.len());
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            6 => {
                let i = rng.random_range(0..=len);
                let n = rng.random_range(1..8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                input.splice(i..i, bytes);
            }
            7 if len > 0 && rng.random_bool(0.05) => {
                // Blow up: a huge run of one byte.
                let i = rng.random_range(0..len);
                let n = rng.random_range(1_000..80_000);
                input.splice(i..i, std::iter::repeat_n(input[i], n));
            }
            _ => {
                let digits = rng.random_range(1..40);
                let i = rng.random_range(0..=len);
                let num: String = (0..digits)
                    .map(|_| char::from(b'0' + rng.random_range(0..10u8)))
                    .collect();
                input.splice(i..i, num.into_bytes());
            }
        }
    }
    input.truncate(200_000);
}

/// An RFC 3339-like timestamp, each part near or past its range (leap
/// days and seconds, long fractions, offsets, lowercase separators), so the
/// fast path's date arithmetic is held against chrono's.
fn timestamp(rng: &mut StdRng) -> String {
    let frac = match rng.random_range(0..12) {
        0 => String::new(),
        n => format!(
            ".{:0>n$}",
            rng.random_range(0..1_000_000_000u64) % 10u64.pow(n.min(9) as u32)
        ),
    };
    let offset = match rng.random_range(0..5) {
        0 => "Z".to_string(),
        1 => "z".to_string(),
        2 => String::new(),
        _ => format!(
            "{}{:02}:{:02}",
            ["+", "-"][rng.random_range(0..2)],
            rng.random_range(0..25),
            rng.random_range(0..61)
        ),
    };
    format!(
        "{:04}-{:02}-{:02}{}{:02}:{:02}:{:02}{frac}{offset}",
        [rng.random_range(0..=9999), 0, 1, 1970, 2000, 2100, 9999][rng.random_range(0..7)],
        rng.random_range(0..14),
        rng.random_range(0..33),
        ["T", "T", "T", "t", " "][rng.random_range(0..5)],
        rng.random_range(0..25),
        rng.random_range(0..61),
        rng.random_range(0..62),
    )
}

/// A structured event with hostile values in random fields.
fn structured(rng: &mut StdRng) -> Vec<u8> {
    let ids = [
        "p1",
        "a/b",
        "..",
        ".",
        "__x__",
        "__",
        "____",
        "",
        "a\u{1}b",
        "x\u{7f}",
        "\u{0}",
        "é中😀",
        "\u{202e}rtl",
        "a.b.c",
        "5.p.u",
    ];
    let pick = |rng: &mut StdRng| -> serde_json::Value {
        match rng.random_range(0..8) {
            0 => serde_json::Value::Null,
            1 => rng.random::<i64>().into(),
            2 => rng.random::<f64>().into(),
            3 => "x".repeat(rng.random_range(0..3000)).into(),
            4 => serde_json::json!([1, {"a": null}]),
            _ => ids[rng.random_range(0..ids.len())].into(),
        }
    };
    let mut o = serde_json::Map::new();
    for field in [
        "eventId",
        "type",
        "postId",
        "userId",
        "occurredAt",
        "seq",
        "version",
        "producer",
    ] {
        let value = if rng.random_bool(0.6) {
            match field {
                "type" => "like.added".into(),
                "occurredAt" => timestamp(rng).into(),
                "seq" => rng.random_range(-2i64..5).into(),
                "version" => 1.into(),
                _ => format!("{field}-{}", rng.random_range(0..9)).into(),
            }
        } else {
            pick(rng)
        };
        if rng.random_bool(0.95) {
            o.insert(field.into(), value);
        }
    }
    serde_json::Value::Object(o).to_string().into_bytes()
}

#[test]
fn parser_survives_mutated_and_structured_hostile_input() {
    let secs: u64 = std::env::var("HOTCOUNT_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("HOTCOUNT_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    let seeds = corpus();
    for s in &seeds {
        check(s);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    // Failures are collected and reported below; keep the hook quiet meanwhile.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    let budget = Duration::from_secs(secs);
    let (mut execs, mut parsed) = (0u64, 0u64);
    let mut failures = Vec::new();
    while started.elapsed() < budget && failures.len() < 5 {
        for _ in 0..256 {
            let input = if rng.random_bool(0.2) {
                structured(&mut rng)
            } else {
                let mut input = seeds[rng.random_range(0..seeds.len())].clone();
                mutate(&mut rng, &mut input, &seeds);
                input
            };
            execs += 1;
            parsed += u64::from(parse(&input).is_ok());
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(&input))) {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!(
                    "{what}\n  input ({} bytes): {:?}",
                    input.len(),
                    String::from_utf8_lossy(&input[..input.len().min(300)])
                ));
            }
        }
    }
    std::panic::set_hook(hook);
    println!(
        "fuzz_parser: {execs} inputs in {:.1}s (seed {seed:#x}), {parsed} parsed as events, {} failures",
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
}

/// Valid events whose only variable part is the timestamp: most take the
/// fast path, so its calendar arithmetic is held against chrono's on
/// hundreds of thousands of dates, offsets and fractions.
#[test]
fn fast_path_timestamps_agree_with_the_general_decoder() {
    let mut rng = StdRng::seed_from_u64(0x7173);
    let (mut parsed, mut refused) = (0u32, 0u32);
    for _ in 0..200_000 {
        let payload = serde_json::json!({
            "eventId": "e1", "type": "like.added", "postId": "p1", "userId": "u1",
            "occurredAt": timestamp(&mut rng),
        })
        .to_string();
        let result = parse(payload.as_bytes());
        assert_eq!(result, parse_general(payload.as_bytes()), "{payload}");
        match result {
            Ok(_) => parsed += 1,
            Err(_) => refused += 1,
        }
    }
    // Both outcomes must be common, or the comparison proves little.
    assert!(
        parsed > 20_000 && refused > 20_000,
        "{parsed} parsed, {refused} refused"
    );
}

/// Payloads close to the fast path's shape, each part drawn from values on
/// both sides of its rules (field order, whitespace, unknown scalars,
/// `null`s, escapes, ids with `/`, DEL, dots, non-ASCII and the reserved
/// pattern, integers at their limits, duplicated keys, trailing bytes):
/// `parse` must agree with the general decoder on every one.
#[test]
fn fast_path_shapes_agree_with_the_general_decoder() {
    let mut rng = StdRng::seed_from_u64(0xfa57);
    let ids = [
        "p1",
        "post-0042",
        "a/b",
        ".",
        "..",
        "...",
        "__x__",
        "__",
        "___",
        "a\u{7f}b",
        "caf\u{e9}",
        "x\u{85}y",
        "\u{202e}r",
        "",
        "e\\u0041",
        "q\\\"",
        "tab\\t",
        "émoji😀",
    ];
    let ints = [
        "0",
        "1",
        "7",
        "01",
        "-1",
        "-0",
        "1.0",
        "1e2",
        "999999999999999999",
        "9999999999999999999",
        "null",
        "true",
        "\"3\"",
    ];
    let ws = ["", " ", "\n", "\t ", "\r\n"];
    let (mut fast, mut declined_valid, mut refused) = (0u32, 0u32, 0u32);
    for _ in 0..200_000 {
        let mut members: Vec<String> = Vec::new();
        let pick =
            |rng: &mut StdRng, from: &[&str]| from[rng.random_range(0..from.len())].to_string();
        let id = |rng: &mut StdRng| {
            if rng.random_bool(0.7) {
                format!("\"id-{}\"", rng.random_range(0..1000))
            } else {
                format!("\"{}\"", pick(rng, &ids))
            }
        };
        let kind = [
            "\"like.added\"",
            "\"like.removed\"",
            "\"like.other\"",
            "null",
            "3",
        ];
        for (key, value) in [
            (
                "type",
                if rng.random_bool(0.9) {
                    pick(&mut rng, &kind[..2])
                } else {
                    pick(&mut rng, &kind)
                },
            ),
            ("eventId", id(&mut rng)),
            ("postId", id(&mut rng)),
            ("userId", id(&mut rng)),
            (
                "occurredAt",
                if rng.random_bool(0.7) {
                    "\"2026-11-30T12:00:00.5+01:00\"".to_string()
                } else {
                    format!("\"{}\"", timestamp(&mut rng))
                },
            ),
            (
                "seq",
                if rng.random_bool(0.7) {
                    pick(&mut rng, &ints[..3])
                } else {
                    pick(&mut rng, &ints)
                },
            ),
            (
                "version",
                if rng.random_bool(0.7) {
                    "1".to_string()
                } else {
                    pick(&mut rng, &ints)
                },
            ),
            (
                "producer",
                if rng.random_bool(0.8) {
                    id(&mut rng)
                } else {
                    pick(&mut rng, &ints)
                },
            ),
            ("extra", pick(&mut rng, &ints)),
            ("note", id(&mut rng)),
        ] {
            let present = match key {
                "type" | "eventId" | "postId" | "userId" | "occurredAt" => rng.random_bool(0.97),
                _ => rng.random_bool(0.5),
            };
            if present {
                let w = |rng: &mut StdRng| pick(rng, &ws);
                members.push(format!(
                    "{}\"{key}\"{}:{}{value}{}",
                    w(&mut rng),
                    w(&mut rng),
                    w(&mut rng),
                    w(&mut rng)
                ));
                if rng.random_bool(0.01) {
                    members.push(format!("\"{key}\":{value}"));
                }
            }
        }
        members.shuffle(&mut rng);
        let tail = ["", "", "", " ", "\n", "x", ",", "}"][rng.random_range(0..8)];
        let payload = format!("{{{}}}{tail}", members.join(","));
        let result = parse(payload.as_bytes());
        let general = parse_general(payload.as_bytes());
        assert_eq!(result, general, "{payload}");
        match parse_fast(payload.as_bytes()) {
            Some(event) => {
                assert_eq!(Ok(&event), general.as_ref(), "{payload}");
                fast += 1;
            }
            None if general.is_ok() => declined_valid += 1,
            None => refused += 1,
        }
    }
    // The fast path must take most valid payloads here (escapes, floats,
    // `-0`, lowercase or leap-second timestamps are left to the general
    // decoder), and invalid ones must be common too, or the comparison
    // proves little.
    assert!(
        fast > 20_000 && fast > declined_valid && refused > 20_000,
        "{fast} fast, {declined_valid} valid but declined, {refused} refused"
    );
}
