//! Counters with one label of a few fixed values (the push endpoint's
//! outcomes and refusal reasons): each value a typed enum variant, so a
//! caller cannot count under a value the dashboards do not know.
//!
//! Invariant: every value of a family is exported from start (at 0), so a
//! rate or an alert over it has a series before the first occurrence.

use std::marker::PhantomData;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use super::instruments::Counter;
use super::names::Metric;

/// A label whose values are the variants of a small enum.
pub trait Label: Copy + 'static {
    /// The label's name.
    const NAME: &'static str;
    /// Every value, in variant order.
    const VALUES: &'static [Self];
    /// The value as exported.
    fn value(self) -> &'static str;
}

/// One counter per value of `L`.
#[derive(Debug)]
pub struct Labelled<L> {
    counters: Arc<[Counter]>,
    label: PhantomData<L>,
}

impl<L: Label + PartialEq> Labelled<L> {
    pub(super) fn new() -> Self {
        Self {
            counters: L::VALUES.iter().map(|_| Counter::default()).collect(),
            label: PhantomData,
        }
    }

    fn index(value: L) -> usize {
        L::VALUES.iter().position(|v| *v == value).unwrap_or(0)
    }

    /// Adds `n` to the counter of `value`.
    pub fn add(&self, value: L, n: u64) {
        if let Some(counter) = self.counters.get(Self::index(value)) {
            counter.add(n);
        }
    }

    /// The count of `value`.
    pub fn get(&self, value: L) -> u64 {
        self.counters
            .get(Self::index(value))
            .map_or(0, Counter::get)
    }

    /// The collector that exports this family under `metric`.
    pub(super) fn collector(&self, metric: Metric) -> LabelledCollector {
        LabelledCollector {
            metric,
            label: L::NAME,
            values: L::VALUES.iter().map(|v| v.value()).collect(),
            counters: self.counters.clone(),
        }
    }
}

/// Exports one [`Labelled`] family at scrape time.
#[derive(Debug)]
pub(super) struct LabelledCollector {
    metric: Metric,
    label: &'static str,
    values: Vec<&'static str>,
    counters: Arc<[Counter]>,
}

impl Collector for LabelledCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            self.metric.family(),
            self.metric.help,
            None,
            MetricType::Counter,
        )?;
        for (value, counter) in self.values.iter().zip(self.counters.iter()) {
            ConstCounter::new(counter.get())
                .encode(family.encode_family(&[(self.label, *value)])?)?;
        }
        Ok(())
    }
}

/// How a push request was answered (`outcome` of
/// [`super::names::PUSH_REQUESTS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushOutcome {
    /// 204: its batch committed, or its quarantine record did.
    Acked,
    /// 503: its batch was given up on (or its record refused).
    Nacked,
    /// 503: not settled before the hold cap (its batch may still commit;
    /// the redelivery is then a duplicate).
    TimedOut,
    /// 503: the endpoint is not taking messages (starting, or stopping).
    Closed,
    /// 503: the body did not arrive whole (the client went away).
    Unread,
    /// 503: the token signing keys could not be fetched.
    KeysUnavailable,
    /// 429: `--push-max-in-flight` requests already held.
    OverCapacity,
    /// 401: no valid token.
    Unauthenticated,
    /// 403: a valid token of a principal that is not allowed.
    Forbidden,
}

impl Label for PushOutcome {
    const NAME: &'static str = "outcome";
    const VALUES: &'static [Self] = &[
        Self::Acked,
        Self::Nacked,
        Self::TimedOut,
        Self::Closed,
        Self::Unread,
        Self::KeysUnavailable,
        Self::OverCapacity,
        Self::Unauthenticated,
        Self::Forbidden,
    ];

    fn value(self) -> &'static str {
        match self {
            Self::Acked => "acked",
            Self::Nacked => "nacked",
            Self::TimedOut => "timed_out",
            Self::Closed => "closed",
            Self::Unread => "unread",
            Self::KeysUnavailable => "keys_unavailable",
            Self::OverCapacity => "over_capacity",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
        }
    }
}

/// Why the push endpoint closed a connection (`reason` of
/// [`super::names::PUSH_CONNECTIONS_CLOSED`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionClose {
    /// Its request's headers did not all arrive within the header read
    /// timeout (counted from its opening or its last answer: idle too).
    HeaderTimeout,
    /// Idle (or still sending headers) the longest when a new connection
    /// arrived at the cap: closed to make room for it.
    Evicted,
    /// A new connection at the cap while every other was in a request.
    Refused,
}

impl Label for ConnectionClose {
    const NAME: &'static str = "reason";
    const VALUES: &'static [Self] = &[Self::HeaderTimeout, Self::Evicted, Self::Refused];

    fn value(self) -> &'static str {
        match self {
            Self::HeaderTimeout => "header_timeout",
            Self::Evicted => "evicted",
            Self::Refused => "refused",
        }
    }
}

/// Why authentication refused a push request (`reason` of
/// [`super::names::PUSH_AUTH_FAILURES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Authorization: Bearer` token.
    Missing,
    /// Not a JWT, an algorithm other than RS256, no `kid`, claims of the
    /// wrong type or missing.
    Malformed,
    /// Signed with a key the key set does not hold (even after a refresh).
    UnknownKey,
    /// The signature does not verify.
    Signature,
    /// Expired (past `exp` beyond the allowed skew) or issued in the future.
    Expired,
    /// Not issued by Google.
    Issuer,
    /// Meant for another audience.
    Audience,
    /// A principal other than `--push-service-account`, or its email not verified.
    Email,
}

impl Label for AuthFailure {
    const NAME: &'static str = "reason";
    const VALUES: &'static [Self] = &[
        Self::Missing,
        Self::Malformed,
        Self::UnknownKey,
        Self::Signature,
        Self::Expired,
        Self::Issuer,
        Self::Audience,
        Self::Email,
    ];

    fn value(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::UnknownKey => "unknown_key",
            Self::Signature => "signature",
            Self::Expired => "expired",
            Self::Issuer => "issuer",
            Self::Audience => "audience",
            Self::Email => "email",
        }
    }
}

/// How a fetch of the signing keys ended (`outcome` of
/// [`super::names::PUSH_JWKS_FETCHES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchOutcome {
    /// The key set was read.
    Ok,
    /// Unreachable, a non-2xx answer, or not a key set.
    Failed,
}

impl Label for FetchOutcome {
    const NAME: &'static str = "outcome";
    const VALUES: &'static [Self] = &[Self::Ok, Self::Failed];

    fn value(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Failed => "failed",
        }
    }
}
