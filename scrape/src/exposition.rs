//! The Prometheus text exposition (format 0.0.4), read: each sample's
//! name, labels and value; the families' TYPE; a histogram's quantile.
//!
//! Invariant: a line that is not a sample or a `# TYPE` comment is skipped,
//! never an error: a reader asks for the series it needs and gets `None`
//! when it is absent or malformed.

/// One sample line: `name{label="value",...} value [timestamp]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The series name (a histogram's carry `_bucket`, `_sum`, `_count`).
    pub name: String,
    /// The labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether this is the series `name` with exactly `labels` (any order).
    fn is(&self, name: &str, labels: &[(String, String)]) -> bool {
        self.name == name
            && self.labels.len() == labels.len()
            && labels.iter().all(|(k, v)| self.label(k) == Some(v))
    }
}

/// A parsed exposition.
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    samples: Vec<Sample>,
    families: Vec<(String, String)>,
}

impl Exposition {
    /// Parses `text`, skipping what is not a sample or a `# TYPE` line.
    pub fn parse(text: &str) -> Self {
        let mut out = Self::default();
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                if let Some((name, kind)) = rest.split_once(' ') {
                    out.families
                        .push((name.to_string(), kind.trim().to_string()));
                }
            } else if !line.is_empty() && !line.starts_with('#') {
                out.samples.extend(parse_sample(line));
            }
        }
        out
    }

    /// Every sample, in the order written.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Every family declared by a `# TYPE` line: (name, type).
    pub fn families(&self) -> &[(String, String)] {
        &self.families
    }

    /// The value of `series`, written as exported: a name alone
    /// (`hotcount_acks_total`) or with all its labels, in any order
    /// (`hotcount_commits_total{outcome="failed"}`).
    pub fn value(&self, series: &str) -> Option<f64> {
        let (name, labels) = parse_series(series)?;
        if !labels.rest.trim().is_empty() {
            return None;
        }
        self.samples
            .iter()
            .find(|s| s.is(name, &labels.pairs))
            .map(|s| s.value)
    }

    /// The `q` quantile (0..=1) of histogram `name`, estimated from its
    /// `name_bucket` samples summed by `le` over any other labels, as
    /// PromQL's `histogram_quantile` does; `None` without samples.
    pub fn histogram_quantile(&self, name: &str, q: f64) -> Option<f64> {
        let bucket = format!("{name}_bucket");
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        for sample in self.samples.iter().filter(|s| s.name == bucket) {
            let le: f64 = sample.label("le")?.parse().ok()?;
            match buckets.iter_mut().find(|(bound, _)| *bound == le) {
                Some((_, count)) => *count += sample.value,
                None => buckets.push((le, sample.value)),
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        histogram_quantile(q, &buckets)
    }
}

/// The `q` quantile (0..=1) of a histogram given as cumulative buckets
/// (upper bound, observations at or below it), sorted by bound and ending
/// with `+Inf`. Within the bucket that holds the rank, the estimate is
/// interpolated linearly (so a bucket's width bounds its error); in the
/// `+Inf` bucket it is the highest finite bound. `None` when nothing was
/// observed, `q` is outside 0..=1, or the `+Inf` bucket is missing.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    if !(0.0..=1.0).contains(&q) {
        return None;
    }
    let &(last_bound, total) = buckets.last()?;
    if last_bound != f64::INFINITY || total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(bound, count) in buckets {
        if count >= rank {
            if bound == f64::INFINITY {
                // Only a bound below +Inf says anything about the value.
                return Some(lower.0);
            }
            let in_bucket = count - lower.1;
            if in_bucket <= 0.0 {
                return Some(lower.0);
            }
            return Some(lower.0 + (bound - lower.0) * (rank - lower.1) / in_bucket);
        }
        lower = (bound, count);
    }
    None
}

/// Parses one sample line.
fn parse_sample(line: &str) -> Option<Sample> {
    let (name, labels) = parse_series(line)?;
    // The value, then an optional timestamp.
    let value = labels.rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name: name.to_string(),
        labels: labels.pairs,
        value,
    })
}

/// Labels read from `{...}` and what follows them.
struct Labels<'a> {
    pairs: Vec<(String, String)>,
    rest: &'a str,
}

/// Splits `name{labels} rest` (the braces optional).
fn parse_series(text: &str) -> Option<(&str, Labels<'_>)> {
    let end = text.find(['{', ' ', '\t']).unwrap_or(text.len());
    let (name, rest) = text.split_at(end);
    if name.is_empty() {
        return None;
    }
    let Some(inside) = rest.strip_prefix('{') else {
        let pairs = Vec::new();
        return Some((name, Labels { pairs, rest }));
    };
    Some((name, parse_labels(inside)?))
}

/// Parses `key="value",...}` (escapes `\\`, `\"`, `\n` in values) and
/// returns the labels with the text after the closing brace.
fn parse_labels(mut text: &str) -> Option<Labels<'_>> {
    let mut pairs = Vec::new();
    loop {
        text = text.trim_start();
        if let Some(rest) = text.strip_prefix('}') {
            return Some(Labels { pairs, rest });
        }
        let (key, after) = text.split_once('=')?;
        let mut chars = after.trim_start().strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let close = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        pairs.push((key.trim().to_string(), value));
        let after_value = &after.trim_start()[1 + close + 1..];
        text = after_value.trim_start();
        text = text.strip_prefix(',').unwrap_or(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP req_seconds Request time.
# TYPE req_seconds histogram
req_seconds_bucket{le="0.1"} 2
req_seconds_bucket{le="0.2"} 6
req_seconds_bucket{le="0.5"} 8
req_seconds_bucket{le="+Inf"} 10
req_seconds_sum 3.5
req_seconds_count 10
# TYPE outcomes_total counter
outcomes_total{outcome="ok",shard="1"} 7
outcomes_total{outcome="a \"quoted\", \\ value"} 1 1700000000000
plain_total 3
"#;

    #[test]
    fn a_series_is_found_by_name_and_labels_in_any_order() {
        let e = Exposition::parse(TEXT);
        assert_eq!(e.value("plain_total"), Some(3.0));
        assert_eq!(
            e.value("outcomes_total{outcome=\"ok\",shard=\"1\"}"),
            Some(7.0)
        );
        assert_eq!(
            e.value("outcomes_total{shard=\"1\", outcome=\"ok\"}"),
            Some(7.0)
        );
        assert_eq!(
            e.value(r#"outcomes_total{outcome="a \"quoted\", \\ value"}"#),
            Some(1.0),
            "escapes are read and the timestamp skipped"
        );
        assert_eq!(
            e.value("outcomes_total{outcome=\"ok\"}"),
            None,
            "labels must all match"
        );
        assert_eq!(e.value("outcomes_total"), None);
        assert_eq!(e.value("missing_total"), None);
        assert_eq!(e.value("req_seconds_count"), Some(10.0));
        let families: Vec<_> = e
            .families()
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        assert_eq!(
            families,
            [("req_seconds", "histogram"), ("outcomes_total", "counter")]
        );
    }

    #[test]
    fn quantile_is_interpolated_inside_the_bucket_that_holds_the_rank() {
        let e = Exposition::parse(TEXT);
        let q = |q| e.histogram_quantile("req_seconds", q).expect("buckets");
        // rank 5 of 10: in (0.1, 0.2], which holds observations 3..=6.
        assert!((q(0.5) - 0.175).abs() < 1e-9, "{}", q(0.5));
        // rank 1 of 10: in the first bucket, interpolated from 0.
        assert!((q(0.1) - 0.05).abs() < 1e-9, "{}", q(0.1));
        // rank 8 of 10: the top of (0.2, 0.5].
        assert!((q(0.8) - 0.5).abs() < 1e-9, "{}", q(0.8));
        // rank 9.9 of 10: in +Inf, so the highest finite bound.
        assert_eq!(q(0.99), 0.5);
        assert_eq!(e.histogram_quantile("missing", 0.5), None);
        assert_eq!(e.histogram_quantile("req_seconds", 1.5), None);
    }

    #[test]
    fn quantile_sums_buckets_over_other_labels_and_needs_observations() {
        let text = "h_bucket{le=\"1\",r=\"a\"} 1\nh_bucket{le=\"+Inf\",r=\"a\"} 1\n\
                    h_bucket{le=\"1\",r=\"b\"} 0\nh_bucket{le=\"+Inf\",r=\"b\"} 3\n";
        let e = Exposition::parse(text);
        // 4 observations: 1 at or below 1, 3 above: the median is in +Inf.
        assert_eq!(e.histogram_quantile("h", 0.5), Some(1.0));
        assert_eq!(e.histogram_quantile("h", 0.25), Some(1.0));
        let empty = [(1.0, 0.0), (f64::INFINITY, 0.0)];
        assert_eq!(histogram_quantile(0.5, &empty), None);
        assert_eq!(
            histogram_quantile(0.5, &[(1.0, 3.0)]),
            None,
            "no +Inf bucket"
        );
    }
}
