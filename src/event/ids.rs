//! What makes an id safe inside a Firestore document id, and the
//! building blocks of the document ids derived from event ids (a stable
//! hash, decimal digits).
//!
//! Invariant: [`check_id`] accepts only ids that are valid as (part of) a
//! Firestore document id: non-empty, within their byte limit, no `/`, not
//! `.` or `..`, not `__.*__`, no control character. [`fnv1a64`] never
//! changes across builds or platforms (stored document names depend on it).

use std::fmt;

/// Why an id cannot be used as (part of) a Firestore document id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdProblem {
    /// Empty string.
    Empty,
    /// Longer than allowed.
    TooLong,
    /// Contains `/`.
    Slash,
    /// Is `.` or `..`.
    DotName,
    /// Matches `__.*__` (reserved by Firestore).
    Reserved,
    /// Contains a control character.
    ControlChar,
}

impl fmt::Display for IdProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdProblem::Empty => "empty",
            IdProblem::TooLong => "too long",
            IdProblem::Slash => "contains '/'",
            IdProblem::DotName => "is '.' or '..'",
            IdProblem::Reserved => "matches the reserved pattern __.*__",
            IdProblem::ControlChar => "contains a control character",
        })
    }
}

/// Checks that `id` is usable as a Firestore document id of at most `max_bytes`.
pub fn check_id(id: &str, max_bytes: usize) -> Result<(), IdProblem> {
    check_scanned_id(id.as_bytes(), max_bytes, || IdBytes::of(id))
}

/// What one pass over an id's bytes found, for the rules of [`check_id`]
/// (the fast path gathers it while scanning the string).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IdBytes {
    slash: bool,
    /// A C0 control or DEL.
    control: bool,
    pub(super) non_ascii: bool,
}

impl IdBytes {
    fn of(id: &str) -> Self {
        let mut found = Self::default();
        for &b in id.as_bytes() {
            found.add(b);
        }
        found
    }

    #[inline(always)]
    pub(super) fn add(&mut self, b: u8) {
        match b {
            b'/' => self.slash = true,
            0..=0x1f | 0x7f => self.control = true,
            0x80.. => self.non_ascii = true,
            _ => {}
        }
    }
}

/// [`check_id`]'s rules, in the order its problems are reported, with the
/// byte scan of `id` (`scan`) done only once the length is known to be
/// acceptable.
pub(super) fn check_scanned_id(
    id: &[u8],
    max_bytes: usize,
    scan: impl FnOnce() -> IdBytes,
) -> Result<(), IdProblem> {
    if id.is_empty() {
        return Err(IdProblem::Empty);
    }
    if id.len() > max_bytes {
        return Err(IdProblem::TooLong);
    }
    let bytes = scan();
    if bytes.slash {
        return Err(IdProblem::Slash);
    }
    if id == b"." || id == b".." {
        return Err(IdProblem::DotName);
    }
    if id.len() >= 4 && id.starts_with(b"__") && id.ends_with(b"__") {
        return Err(IdProblem::Reserved);
    }
    // Outside ASCII, every char: this also catches the C1 controls
    // U+0080..=U+009F. `id` is UTF-8 here (a `str`'s bytes, or a string the
    // fast path has validated), so the lossy view borrows and replaces nothing.
    let non_ascii_control = || String::from_utf8_lossy(id).chars().any(char::is_control);
    if bytes.control || (bytes.non_ascii && non_ascii_control()) {
        return Err(IdProblem::ControlChar);
    }
    Ok(())
}

/// Appends `n` in decimal to `out` (document names are built on the commit
/// path, where `write!` costs more than the digits).
pub(crate) fn push_decimal(out: &mut String, n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for d in &digits[at..] {
        out.push(char::from(*d));
    }
}

/// FNV-1a over two byte strings with a separator: stable across builds and
/// platforms, unlike `std`'s hasher.
pub fn fnv1a64(a: &[u8], b: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in a.iter().chain(&[0xff]).chain(b) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The keyed hash of a user id that an erasure's tombstone holds instead
/// of the id: lowercase hex HMAC-SHA256(`key`, `user_id`). Without the key
/// it cannot be recomputed from a guessed id; with it, the same id always
/// gives the same hash, so the pipeline can recognise an erased user.
pub fn user_hash(key: &[u8], user_id: &str) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key)
        .expect("HMAC takes a key of any length");
    mac.update(user_id.as_bytes());
    let digest = mac.finalize().into_bytes();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(digest.len() * 2);
    for byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    hex
}
