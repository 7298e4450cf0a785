//! The shape of post popularity: a Zipf sampler, and the exponent that
//! gives the most popular post a chosen share.
//!
//! Invariant: rank 0 is the most popular; probabilities sum to 1.

use rand::Rng;

/// Post popularity: rank `k` (from 0) has weight `1 / (k + 1)^s`.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// A sampler over `n` ranks (at least 1) with exponent `s`.
    pub fn new(n: u32, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n.max(1) as usize);
        let mut total = 0.0;
        for k in 0..n.max(1) {
            total += 1.0 / f64::from(k + 1).powf(s);
            cdf.push(total);
        }
        Self { cdf }
    }

    /// Draws a rank in `0..n`. Cost: one binary search.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let total = self.cdf.last().copied().unwrap_or(1.0);
        let u = rng.random::<f64>() * total;
        self.cdf
            .partition_point(|c| *c <= u)
            .min(self.cdf.len() - 1)
    }

    /// The probability of rank `k`.
    pub fn probability(&self, k: usize) -> f64 {
        let total = self.cdf.last().copied().unwrap_or(1.0);
        let below = if k == 0 { 0.0 } else { self.cdf[k - 1] };
        (self.cdf[k] - below) / total
    }
}

/// The Zipf exponent that gives the most popular of `posts` posts the
/// share `share` of the events (bisection; 0 when one post).
pub fn exponent_for_top_share(posts: u32, share: f64) -> f64 {
    let top = |s: f64| {
        let total: f64 = (1..=posts).map(|k| 1.0 / f64::from(k).powf(s)).sum();
        1.0 / total
    };
    let (mut lo, mut hi) = (0.0_f64, 10.0_f64);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if top(mid) < share {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viral_exponent_gives_the_top_post_half_the_events() {
        let s = exponent_for_top_share(100_000, 0.5);
        let total: f64 = (1..=100_000u32).map(|k| 1.0 / f64::from(k).powf(s)).sum();
        assert!((1.0 / total - 0.5).abs() < 1e-6, "share {}", 1.0 / total);
    }
}
