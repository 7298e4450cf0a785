//! The fast path of [`super::parse`]: a hand-written scanner for the common
//! shape of a v1 payload (one flat object, strings without escapes, scalar
//! values, an RFC 3339 timestamp in its canonical form).
//!
//! Invariant: for any bytes it returns either exactly the event the general
//! decoder ([`super::parse_general`]) returns, or `None` ("not sure"), and the
//! caller then runs the general decoder. It never produces a poison, so every
//! quarantine reason still comes from one place. Anything unusual (an escape,
//! a duplicate or nested field, a missing field, a number that is not a small
//! integer, a leap second, a lowercase `t`, a timestamp out of range, an
//! unsafe id) is "not sure". The agreement of both paths is checked on every
//! input `tests/fuzz_parser.rs` and the `fuzz/` targets generate.

use super::ids::{check_scanned_id, IdBytes};
use super::time::timestamp_micros;
use super::{LikeEvent, LikeKind, MAX_EVENT_ID_BYTES, MAX_ID_BYTES, MAX_PAYLOAD_BYTES};

/// Unknown keys remembered for the duplicate check; a payload with more is
/// left to the general decoder.
const MAX_UNKNOWN_KEYS: usize = 4;
/// Longest integer read as `seq` (18 digits always fit an `i64`).
const MAX_SEQ_DIGITS: usize = 18;

/// Decodes `data` when it has the common shape; `None` otherwise.
pub(super) fn parse(data: &[u8]) -> Option<LikeEvent> {
    if data.len() > MAX_PAYLOAD_BYTES {
        return None;
    }
    // The general decoder rejects a payload that is not UTF-8. Here every
    // byte outside a string must be one of JSON's ASCII tokens, and every
    // string holding a non-ASCII byte is validated on its own ([`Cursor::close`]):
    // together that is the whole payload, without a pass over all of it.
    let mut c = Cursor { b: data, i: 0 };
    let mut f = Fields::default();
    let mut seen = 0u8;
    let mut unknown: [&[u8]; MAX_UNKNOWN_KEYS] = [&[]; MAX_UNKNOWN_KEYS];
    let mut unknown_len = 0;
    c.ws();
    c.eat(b'{')?;
    c.ws();
    if c.peek() != Some(b'"') {
        return None; // `{}` or junk: the general decoder says which
    }
    loop {
        let key = c.key()?;
        c.ws();
        c.eat(b':')?;
        c.ws();
        match key {
            Key::Known(field) => {
                let bit = 1u8 << field as u8;
                if seen & bit != 0 {
                    return None; // a duplicate key: the general decoder names it
                }
                seen |= bit;
                match field {
                    Field::Version => {
                        if !c.null() {
                            (c.integer(1)? == 1).then_some(())?;
                        }
                    }
                    Field::Seq => {
                        f.seq = if c.null() {
                            0
                        } else {
                            c.integer(MAX_SEQ_DIGITS)?
                        }
                    }
                    // `producer: null` is the same as no producer.
                    Field::Producer if c.null() => {}
                    _ => f.strs[field as usize] = Some(c.string()?),
                }
            }
            Key::Unknown(name) => {
                if unknown[..unknown_len].contains(&name) || unknown_len == MAX_UNKNOWN_KEYS {
                    return None;
                }
                unknown[unknown_len] = name;
                unknown_len += 1;
                c.skip_scalar()?;
            }
        }
        c.ws();
        if !c.next_member()? {
            break;
        }
    }
    c.ws();
    if c.i != data.len() {
        return None;
    }
    f.into_event()
}

/// The known fields, numbered as their bit in the set of keys seen and
/// their slot in [`Fields::strs`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Kind = 0,
    EventId,
    PostId,
    UserId,
    OccurredAt,
    Producer,
    Version,
    Seq,
}

/// An object key: a known field, or any other name (raw bytes).
enum Key<'a> {
    Known(Field),
    Unknown(&'a [u8]),
}

/// The known keys with their quotes, matched as literals: a payload's keys
/// are compared, never scanned.
const KEYS: [KeyLiteral; 8] = [
    KeyLiteral::new(b"\"type\"", Field::Kind),
    KeyLiteral::new(b"\"eventId\"", Field::EventId),
    KeyLiteral::new(b"\"postId\"", Field::PostId),
    KeyLiteral::new(b"\"userId\"", Field::UserId),
    KeyLiteral::new(b"\"occurredAt\"", Field::OccurredAt),
    KeyLiteral::new(b"\"producer\"", Field::Producer),
    KeyLiteral::new(b"\"version\"", Field::Version),
    KeyLiteral::new(b"\"seq\"", Field::Seq),
];

/// A quoted key (at most 16 bytes) as a little-endian word and the mask of
/// its bytes, so that matching it is one load, one AND and one compare.
struct KeyLiteral {
    bytes: &'static [u8],
    word: u128,
    mask: u128,
    field: Field,
}

impl KeyLiteral {
    const fn new(bytes: &'static [u8], field: Field) -> Self {
        let mut word = [0u8; 16];
        let mut i = 0;
        while i < bytes.len() {
            word[i] = bytes[i];
            i += 1;
        }
        Self {
            bytes,
            word: u128::from_le_bytes(word),
            mask: u128::MAX >> (8 * (16 - bytes.len())),
            field,
        }
    }

    /// Whether `rest` starts with this key.
    fn starts(&self, rest: &[u8]) -> bool {
        match rest.first_chunk::<16>() {
            Some(chunk) => u128::from_le_bytes(*chunk) & self.mask == self.word,
            None => rest.starts_with(self.bytes),
        }
    }
}

/// A string found without escapes (valid UTF-8), with what the id rules
/// need to know of it.
#[derive(Clone, Copy)]
struct Found<'a> {
    raw: &'a [u8],
    /// Gathered while scanning, so the id rules need no second pass.
    bytes: IdBytes,
}

impl Found<'_> {
    /// Whether it is a valid id of at most `max_bytes` (the rules of
    /// [`super::check_id`]).
    fn is_id(&self, max_bytes: usize) -> bool {
        check_scanned_id(self.raw, max_bytes, || self.bytes).is_ok()
    }
}

/// The fields as found (borrowed, unescaped, valid UTF-8) and `seq`.
#[derive(Default)]
struct Fields<'a> {
    /// Indexed by [`Field`] (the string ones).
    strs: [Option<Found<'a>>; 6],
    seq: i64,
}

impl Fields<'_> {
    /// The same checks as the general decoder, any failure being "not sure".
    fn into_event(self) -> Option<LikeEvent> {
        let [kind, event_id, post_id, user_id, occurred_at, producer] = self.strs;
        let kind = match kind?.raw {
            b"like.added" => LikeKind::Added,
            b"like.removed" => LikeKind::Removed,
            _ => return None,
        };
        let (event_id, post_id, user_id) = (event_id?, post_id?, user_id?);
        let ids_ok = event_id.is_id(MAX_EVENT_ID_BYTES)
            && post_id.is_id(MAX_ID_BYTES)
            && user_id.is_id(MAX_ID_BYTES);
        if !ids_ok {
            return None;
        }
        let occurred_at_micros = timestamp_micros(occurred_at?.raw)?;
        let producer = match producer {
            Some(p) if p.raw.len() > MAX_EVENT_ID_BYTES => return None,
            p => p.map(|p| p.raw),
        };
        LikeEvent::checked(
            kind,
            [post_id.raw, user_id.raw, event_id.raw],
            self.seq,
            occurred_at_micros,
            producer,
        )
    }
}

/// Byte-parallel tests on a little-endian 8-byte word, each byte tested on
/// its own (no carry or borrow crosses bytes, so every set bit is exact).
mod word {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const LOW7: u64 = !HIGH;

    /// Bit 7 of each byte whose low 7 bits differ from `byte` (ASCII).
    fn differs(low7: u64, byte: u8) -> u64 {
        // Each byte of the XOR is at most 0x7f: adding 0x7f sets bit 7
        // exactly when it is not zero, and never carries out of the byte.
        (low7 ^ (ONES * u64::from(byte))) + LOW7
    }

    /// Bit 7 of every byte a string scan must look at: the quote, `\`, a
    /// control character (below 0x20, or DEL), `/` and every non-ASCII byte.
    /// A word of plain bytes gives 0.
    pub fn special(w: u64) -> u64 {
        let low7 = w & LOW7;
        // low7 + 0x60 has bit 7 when low7 >= 0x20; low7 + 1 when low7 == 0x7f.
        let plain =
            differs(low7, b'"') & differs(low7, b'\\') & differs(low7, b'/') & (low7 + ONES * 0x60);
        (w | (low7 + ONES) | !plain) & HIGH
    }
}

/// Bytes that end the fast scan of a string: the closing quote, an escape,
/// or a control character (invalid inside a JSON string).
fn is_stop(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// A position in the payload.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Skips JSON whitespace.
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    /// `,` (another member follows: true) or `}` (the object ends: false).
    fn next_member(&mut self) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.i += 1;
                self.ws();
                Some(true)
            }
            b'}' => {
                self.i += 1;
                Some(false)
            }
            _ => None,
        }
    }

    /// An object key: a known one by literal comparison, else scanned.
    fn key(&mut self) -> Option<Key<'a>> {
        let rest = &self.b[self.i..];
        let candidate = match rest.get(1)? {
            b't' => 0,
            b'e' => 1,
            b'p' if rest.get(2) == Some(&b'o') => 2,
            b'u' => 3,
            b'o' => 4,
            b'p' => 5,
            b'v' => 6,
            b's' => 7,
            _ => usize::MAX,
        };
        if let Some(key) = KEYS.get(candidate) {
            if key.starts(rest) {
                self.i += key.bytes.len();
                return Some(Key::Known(key.field));
            }
        }
        Some(Key::Unknown(self.string()?.raw))
    }

    /// A string without escapes or control characters, scanned a word at a
    /// time.
    #[inline(always)]
    fn string(&mut self) -> Option<Found<'a>> {
        self.eat(b'"')?;
        let start = self.i;
        let mut at = start;
        let mut bytes = IdBytes::default();
        // A word at a time while its bytes are plain; a special byte (or the
        // tail shorter than a word) one at a time.
        loop {
            if let Some(chunk) = self.b.get(at..).and_then(<[u8]>::first_chunk::<8>) {
                let special = word::special(u64::from_le_bytes(*chunk));
                if special == 0 {
                    at += 8;
                    continue;
                }
                at += (special.trailing_zeros() / 8) as usize;
            }
            let byte = *self.b.get(at)?;
            if is_stop(byte) {
                break;
            }
            bytes.add(byte);
            at += 1;
        }
        self.close(start, at, bytes)
    }

    /// Ends a string at the stop byte `at`, which must be its closing quote.
    /// A string with a non-ASCII byte must be valid UTF-8 (otherwise the
    /// general decoder names the payload `NotUtf8`); an ASCII one is.
    #[inline(always)]
    fn close(&mut self, start: usize, at: usize, bytes: IdBytes) -> Option<Found<'a>> {
        if self.b[at] != b'"' {
            return None;
        }
        self.i = at + 1;
        let raw = self.b.get(start..at)?;
        if bytes.non_ascii {
            std::str::from_utf8(raw).ok()?;
        }
        Some(Found { raw, bytes })
    }

    /// The literal `null`, consumed when present.
    fn null(&mut self) -> bool {
        let found = self.peek() == Some(b'n')
            && self.b[self.i..].starts_with(b"null")
            && self.scalar_ends_at(self.i + 4);
        if found {
            self.i += 4;
        }
        found
    }

    /// True when a scalar ending before `at` is complete (what follows it
    /// cannot continue a number or a literal).
    fn scalar_ends_at(&self, at: usize) -> bool {
        !matches!(
            self.b.get(at),
            Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-' | b'a'..=b'z')
        )
    }

    /// A non-negative JSON integer of at most `max_digits` digits (no sign,
    /// fraction or exponent, no leading zero).
    fn integer(&mut self, max_digits: usize) -> Option<i64> {
        let rest = &self.b[self.i..];
        let n = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 || n > max_digits || (n > 1 && rest[0] == b'0') {
            return None;
        }
        if !self.scalar_ends_at(self.i + n) {
            return None;
        }
        let value = rest[..n]
            .iter()
            .fold(0i64, |v, d| v * 10 + i64::from(d - b'0'));
        self.i += n;
        Some(value)
    }

    /// The value of an unknown field, read and dropped: a string without
    /// escapes, an integer, `true`, `false` or `null`.
    fn skip_scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'-' => {
                self.i += 1;
                self.integer(MAX_SEQ_DIGITS).map(drop)
            }
            b'0'..=b'9' => self.integer(MAX_SEQ_DIGITS).map(drop),
            _ => {
                for word in [&b"true"[..], b"false", b"null"] {
                    if self.b[self.i..].starts_with(word)
                        && self.scalar_ends_at(self.i + word.len())
                    {
                        self.i += word.len();
                        return Some(());
                    }
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
