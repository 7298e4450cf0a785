//! A PostgreSQL connection string as the operator wrote it, and the form
//! of it that may be shown: every password the driver could read hidden.
//!
//! Invariant: [`redact`] hides every span the driver (or libpq, which
//! reads the user info differently) could take for a password: in a URL,
//! the user info from its first `:` up to the *last* `@` (a password may
//! hold an unencoded `/`, `?`, `:` or `@`), and the value of every
//! `password` parameter (its key percent-encoded or not); in `key=value`
//! words, the value of `password`, quoted or not. Nothing else that can
//! reach a log, an error or a `Debug` prints a connection string.

use std::borrow::Cow;

/// What a hidden password is replaced with.
const HIDDEN: &str = "***";

/// `conninfo` (a `postgres://` URL or `key=value` words) with every
/// password replaced by `***` (see the module invariant).
pub fn redact(conninfo: &str) -> String {
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = conninfo.strip_prefix(scheme) {
            return format!("{scheme}{}", redact_url_rest(rest));
        }
    }
    redact_words(conninfo)
}

/// Refuses a URL whose user info holds an unencoded `@`: the driver (as
/// libpq) ends the user info at the first `@`, so the rest of such a
/// password would be taken for the host name.
pub fn check_url(url: &str) -> Result<(), &'static str> {
    let rest = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme))
        .unwrap_or(url);
    let Some(first_at) = rest.find('@') else {
        return Ok(());
    };
    let authority_end = rest[first_at..]
        .find('?')
        .map_or(rest.len(), |i| first_at + i);
    if rest[..authority_end].matches('@').count() > 1 {
        return Err("its user info holds an unencoded `@`: write it as %40");
    }
    Ok(())
}

/// Whether the connection string carries a password anywhere.
pub fn has_password(conninfo: &str) -> bool {
    redact(conninfo) != conninfo
}

/// A URL after its scheme: the user info's password, then the query's.
fn redact_url_rest(rest: &str) -> String {
    let (mut out, tail) = match (rest.find('@'), rest.rfind('@')) {
        (Some(first_at), Some(last_at)) => match rest[..first_at].find(':') {
            Some(colon) => (format!("{}{HIDDEN}", &rest[..=colon]), &rest[last_at..]),
            None => (String::new(), rest),
        },
        _ => (String::new(), rest),
    };
    let Some((before, query)) = tail.split_once('?') else {
        out.push_str(tail);
        return out;
    };
    out.push_str(before);
    out.push('?');
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((key, _)) if is_password_key(key) => format!("{key}={HIDDEN}"),
            _ => param.to_string(),
        })
        .collect();
    out.push_str(&params.join("&"));
    out
}

/// Whether a URL parameter's key (as written: the driver decodes it) is `password`.
fn is_password_key(key: &str) -> bool {
    let decoded: Cow<'_, str> = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
    decoded.trim() == "password"
}

/// `key=value` words (libpq's other form) with the value of `password` hidden.
fn redact_words(words: &str) -> String {
    let mut out = String::with_capacity(words.len());
    let mut rest = words;
    loop {
        let start = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        if rest.is_empty() {
            return out;
        }
        let key_end = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let key = &rest[..key_end];
        out.push_str(key);
        rest = &rest[key_end..];
        let eq = rest.len() - rest.trim_start().len();
        if !rest[eq..].starts_with('=') {
            continue;
        }
        let after_eq = eq + 1;
        let value_at = after_eq + (rest[after_eq..].len() - rest[after_eq..].trim_start().len());
        out.push_str(&rest[..value_at]);
        rest = &rest[value_at..];
        let value_len = word_value_len(rest);
        if key == "password" {
            out.push_str(HIDDEN);
        } else {
            out.push_str(&rest[..value_len]);
        }
        rest = &rest[value_len..];
    }
}

/// The length of the value at the start of `s`: quoted (`'...'`, with
/// `\` escapes) or up to the next unescaped whitespace.
fn word_value_len(s: &str) -> usize {
    let mut chars = s.char_indices().peekable();
    let quoted = s.starts_with('\'');
    if quoted {
        chars.next();
    }
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return i + 1,
            c if !quoted && c.is_whitespace() => return i,
            _ => {}
        }
    }
    s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_password_form_is_hidden_and_the_rest_kept() {
        let cases = [
            (
                "postgres://hc:s3cret@db:5432/hc?sslmode=require",
                "postgres://hc:***@db:5432/hc?sslmode=require",
            ),
            ("postgres://hc:Ab/9x@db/hc", "postgres://hc:***@db/hc"),
            (
                "postgresql://hc:p@ss:w?rd@db/hc",
                "postgresql://hc:***@db/hc",
            ),
            ("postgres://:s3cret@db/hc", "postgres://:***@db/hc"),
            (
                "postgres://hc@db/hc?sslmode=require&password=s3cret&application_name=x",
                "postgres://hc@db/hc?sslmode=require&password=***&application_name=x",
            ),
            (
                "postgres://db/hc?pass%77ord=s3cret",
                "postgres://db/hc?pass%77ord=***",
            ),
            (
                "postgres://hc:one@db/hc?password=two",
                "postgres://hc:***@db/hc?password=***",
            ),
            ("postgres://hc@db/hc", "postgres://hc@db/hc"),
            (
                "host=db user=hc password=s3cret dbname=hc",
                "host=db user=hc password=*** dbname=hc",
            ),
            (
                "host=db password = 'a b\\' c' dbname=hc",
                "host=db password = *** dbname=hc",
            ),
        ];
        for (given, shown) in cases {
            assert_eq!(redact(given), shown, "{given}");
            assert_eq!(has_password(given), given != shown, "{given}");
        }
    }

    #[test]
    fn an_unencoded_at_in_the_user_info_is_refused() {
        assert!(check_url("postgres://hc:p@ss@db/hc").is_err());
        assert!(check_url("postgres://hc:p%40ss@db/hc").is_ok());
        assert!(check_url("postgres://hc:pw@db/hc?application_name=a@b").is_ok());
        assert!(check_url("postgres://hc:p?s@db/hc").is_ok());
    }
}
