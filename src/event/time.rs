//! `occurredAt`: Firestore's timestamp range and the two parsers of an
//! RFC 3339 timestamp, chrono's for any form (the general decoder) and a
//! hand-written one for the canonical form (the fast path).
//!
//! Invariant: both return microseconds since the epoch inside
//! [`MIN_MICROS`]`..=`[`MAX_MICROS`]; for any input the canonical parser
//! returns what chrono returns, or `None` (then the general decoder decides).

use chrono::{DateTime, Utc};

use super::Poison;

/// Firestore timestamps span years 1..=9999.
pub(super) const MIN_MICROS: i64 = -62_135_596_800_000_000;
/// The last microsecond of year 9999.
pub(super) const MAX_MICROS: i64 = 253_402_300_799_999_999;

/// Any RFC 3339 timestamp chrono accepts, inside Firestore's range.
pub(super) fn parse_timestamp(s: &str) -> Result<i64, Poison> {
    let t = DateTime::parse_from_rfc3339(s).map_err(|e| Poison::BadTimestamp(e.to_string()))?;
    let micros = t.with_timezone(&Utc).timestamp_micros();
    if !(MIN_MICROS..=MAX_MICROS).contains(&micros) {
        return Err(Poison::BadTimestamp("out of range".into()));
    }
    Ok(micros)
}

/// `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|+HH:MM|-HH:MM)` as microseconds since
/// the epoch, inside Firestore's range; `None` for any other form.
pub(super) fn timestamp_micros(s: &[u8]) -> Option<i64> {
    let head: &[u8; 19] = s.first_chunk()?;
    // The separators at their places, then every other byte a digit
    // (checked all at once, without a branch per digit).
    let seps = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if seps.iter().any(|&(at, byte)| head[at] != byte) {
        return None;
    }
    const DIGITS: [usize; 14] = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18];
    let digit = |i: usize| head[i].wrapping_sub(b'0');
    if DIGITS.iter().fold(0u8, |worst, &i| worst.max(digit(i))) > 9 {
        return None;
    }
    let two = |i: usize| i64::from(digit(i)) * 10 + i64::from(digit(i + 1));
    let (year, month, day) = (two(0) * 100 + two(2), two(5), two(8));
    let (hour, minute, second) = (two(11), two(14), two(17));
    if year == 0 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None; // 60 is a leap second: left to the general decoder
    }
    let sep = |at: usize, byte: u8| s.get(at) == Some(&byte);
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        s.get(range)?.iter().try_fold(0i64, |v, &b| {
            b.is_ascii_digit().then(|| v * 10 + i64::from(b - b'0'))
        })
    };
    let mut at = 19;
    let mut micros = 0;
    if sep(at, b'.') {
        let (mut digits, mut fraction) = (0u32, 0i64);
        while let Some(d) = s
            .get(at + 1 + digits as usize)
            .filter(|b| b.is_ascii_digit())
        {
            if digits == 9 {
                return None; // chrono drops digits past the ninth: left to it
            }
            fraction = fraction * 10 + i64::from(d - b'0');
            digits += 1;
        }
        if digits == 0 {
            return None;
        }
        // Scaled to nanoseconds by table (`pow` loops), then truncated.
        const SCALE: [i64; 10] = [
            1_000_000_000,
            100_000_000,
            10_000_000,
            1_000_000,
            100_000,
            10_000,
            1_000,
            100,
            10,
            1,
        ];
        micros = fraction * SCALE[digits as usize] / 1000;
        at += 1 + digits as usize;
    }
    let offset_secs = match s.get(at..)? {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (num(at + 1..at + 3)?, num(at + 4..at + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let secs = h * 3600 + m * 60;
            if *sign == b'-' {
                -secs
            } else {
                secs
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    let total = secs * 1_000_000 + micros;
    (MIN_MICROS..=MAX_MICROS).contains(&total).then_some(total)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_match_chrono_to_the_microsecond() {
        for text in [
            "1970-01-01T00:00:00Z",
            "2000-02-29T23:59:59.5+01:00",
            "1900-03-01T00:00:00.000001-00:30",
            "2026-11-30T12:34:56.999999999Z",
            "0004-02-29T12:00:00Z",
        ] {
            let want = chrono::DateTime::parse_from_rfc3339(text)
                .map(|t| t.timestamp_micros())
                .ok();
            assert_eq!(timestamp_micros(text.as_bytes()), want, "{text}");
        }
    }
}
