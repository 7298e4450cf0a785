//! Fault injection shared by both emulators: errors, latency and behaviours
//! the real services show under failure, switched on by tests or operators.
//!
//! Invariant: with no rule installed, every check is a no-op, so an emulator
//! without faults behaves exactly as the real service. Each rule fires at most
//! `count` times (when set) and with `probability` (default 1.0), and every
//! firing is counted so tests can prove a fault really happened.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tonic::{Code, Status};

/// What a fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Fail the RPC with `code` before it has any effect.
    Error,
    /// Perform the RPC, then answer with `code` (the outcome is unknown to
    /// the client): a publish that commits but errors, a Firestore commit
    /// applied but answered UNAVAILABLE.
    ErrorAfterApply,
    /// Add `latency_ms` before the RPC is handled (models real round trips).
    Latency,
    /// Close open StreamingPull (Pub/Sub) or Listen (Firestore) streams with UNAVAILABLE.
    DropStream,
    /// Answer an acknowledgement OK but forget it: the message comes back
    /// after its deadline.
    AckLost,
    /// Deliver an already acknowledged message again.
    SpuriousRedelivery,
}

/// One installed fault rule, as sent to the admin route or the library.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// What the rule does.
    pub kind: FaultKind,
    /// RPC method it applies to (e.g. `Commit`, `Publish`); `None` or `*` = every method.
    #[serde(default)]
    pub method: Option<String>,
    /// gRPC status code name for `error` kinds (e.g. `ABORTED`, `UNAVAILABLE`).
    #[serde(default)]
    pub code: Option<String>,
    /// Status message for `error` kinds.
    #[serde(default)]
    pub message: Option<String>,
    /// Fire at most this many times; `None` = unlimited.
    #[serde(default)]
    pub count: Option<u64>,
    /// Chance of firing on each eligible call, 0.0..=1.0; default 1.0.
    #[serde(default)]
    pub probability: Option<f64>,
    /// Added latency for `latency` rules, in milliseconds.
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// Let this many eligible calls through before the rule starts firing.
    #[serde(default)]
    pub skip: Option<u64>,
}

impl FaultSpec {
    /// A rule of `kind` that fires on every call of every method.
    pub fn new(kind: FaultKind) -> Self {
        Self {
            kind,
            method: None,
            code: None,
            message: None,
            count: None,
            probability: None,
            latency_ms: None,
            skip: None,
        }
    }

    /// An error rule: `method` fails with `code` before any effect.
    pub fn error(method: &str, code: Code) -> Self {
        Self::new(FaultKind::Error).method(method).code(code)
    }

    /// An "applied but answered with an error" rule on `method`.
    pub fn error_after_apply(method: &str, code: Code) -> Self {
        Self::new(FaultKind::ErrorAfterApply)
            .method(method)
            .code(code)
    }

    /// Added latency on `method` (`*` for all).
    pub fn latency(method: &str, latency: Duration) -> Self {
        let mut spec = Self::new(FaultKind::Latency).method(method);
        spec.latency_ms = Some(u64::try_from(latency.as_millis()).unwrap_or(u64::MAX));
        spec
    }

    /// Restricts the rule to one method.
    pub fn method(mut self, method: &str) -> Self {
        self.method = Some(method.to_string());
        self
    }

    /// Sets the status code of an error rule.
    pub fn code(mut self, code: Code) -> Self {
        self.code = Some(code_name(code).to_string());
        self
    }

    /// Fires at most `count` times.
    pub fn times(mut self, count: u64) -> Self {
        self.count = Some(count);
        self
    }

    /// Lets the first `calls` eligible calls through, then fires.
    pub fn after(mut self, calls: u64) -> Self {
        self.skip = Some(calls);
        self
    }

    /// Fires with this probability on each eligible call.
    pub fn probability(mut self, p: f64) -> Self {
        self.probability = Some(p);
        self
    }

    /// Checks the rule is well formed.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(p) = self.probability {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("probability must be within 0..=1, got {p}"));
            }
        }
        match self.kind {
            FaultKind::Error | FaultKind::ErrorAfterApply => {
                let code = self.code.as_deref().ok_or("error rules need a code")?;
                parse_code(code).ok_or_else(|| format!("unknown gRPC code {code:?}"))?;
            }
            FaultKind::Latency if self.latency_ms.is_none() => {
                return Err("latency rules need latency_ms".into());
            }
            _ => {}
        }
        Ok(())
    }

    fn applies_to(&self, method: &str) -> bool {
        match self.method.as_deref() {
            None | Some("*") => true,
            Some(m) => m == method,
        }
    }

    fn status(&self, method: &str) -> Status {
        let code = self
            .code
            .as_deref()
            .and_then(parse_code)
            .unwrap_or(Code::Unavailable);
        let message = self
            .message
            .clone()
            .unwrap_or_else(|| format!("injected fault on {method}"));
        Status::new(code, message)
    }
}

#[derive(Debug)]
struct Rule {
    spec: FaultSpec,
    remaining: Option<u64>,
    /// Eligible calls still to let through.
    skipping: u64,
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    fired: BTreeMap<FaultKind, u64>,
}

/// The fault rules of one emulator; a cheap cloneable handle.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    state: Arc<Mutex<State>>,
}

impl Faults {
    /// Installs a rule. Invalid rules are refused with the reason.
    pub fn add(&self, spec: FaultSpec) -> Result<(), String> {
        spec.validate()?;
        let remaining = spec.count;
        let skipping = spec.skip.unwrap_or(0);
        self.state.lock().rules.push(Rule {
            spec,
            remaining,
            skipping,
        });
        Ok(())
    }

    /// Removes every rule (the fired counters stay).
    pub fn clear(&self) {
        self.state.lock().rules.clear();
    }

    /// The rules installed now, with how many firings each has left.
    pub fn rules(&self) -> Vec<FaultSpec> {
        let state = self.state.lock();
        state
            .rules
            .iter()
            .map(|r| {
                let mut spec = r.spec.clone();
                spec.count = r.remaining;
                spec.skip = r.spec.skip.map(|_| r.skipping);
                spec
            })
            .collect()
    }

    /// How many times each kind of fault has fired since start.
    pub fn fired(&self) -> BTreeMap<FaultKind, u64> {
        self.state.lock().fired.clone()
    }

    /// Checks for a firing of `kind` on `method`; counts it when it fires.
    pub fn fire(&self, kind: FaultKind, method: &str) -> Option<FaultSpec> {
        let mut state = self.state.lock();
        let mut hit = None;
        for rule in state.rules.iter_mut() {
            if rule.spec.kind != kind || !rule.spec.applies_to(method) {
                continue;
            }
            if rule.remaining == Some(0) {
                continue;
            }
            if rule.skipping > 0 {
                rule.skipping -= 1;
                continue;
            }
            let p = rule.spec.probability.unwrap_or(1.0);
            if p < 1.0 && !rand::rng().random_bool(p) {
                continue;
            }
            if let Some(left) = rule.remaining.as_mut() {
                *left -= 1;
            }
            hit = Some(rule.spec.clone());
            break;
        }
        state.rules.retain(|r| r.remaining != Some(0));
        if hit.is_some() {
            *state.fired.entry(kind).or_default() += 1;
        }
        hit
    }

    /// Added latency and injected errors that apply before `method` runs.
    pub async fn before(&self, method: &str) -> Result<(), Status> {
        if let Some(spec) = self.fire(FaultKind::Latency, method) {
            let ms = spec.latency_ms.unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        match self.fire(FaultKind::Error, method) {
            Some(spec) => Err(spec.status(method)),
            None => Ok(()),
        }
    }

    /// The error to answer with after `method` has been applied, if a rule says so.
    pub fn after(&self, method: &str) -> Option<Status> {
        self.fire(FaultKind::ErrorAfterApply, method)
            .map(|spec| spec.status(method))
    }
}

/// The canonical name of a gRPC code (`ABORTED`, `UNAVAILABLE`, ...).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Parses a gRPC code from its canonical name (case-insensitive) or number.
pub fn parse_code(name: &str) -> Option<Code> {
    if let Ok(n) = name.parse::<i32>() {
        let code = Code::from_i32(n);
        return (code_name(code) != "UNKNOWN" || n == 2).then_some(code);
    }
    (0..=16)
        .map(Code::from_i32)
        .find(|c| code_name(*c).eq_ignore_ascii_case(name))
}

/// The HTTP status Google's REST (JSON) surface maps a gRPC code to.
pub fn http_status(code: Code) -> u16 {
    match code {
        Code::Ok => 200,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
        Code::Unauthenticated => 401,
        Code::PermissionDenied => 403,
        Code::NotFound => 404,
        Code::AlreadyExists | Code::Aborted => 409,
        Code::ResourceExhausted => 429,
        Code::Cancelled => 499,
        Code::Unimplemented => 501,
        Code::Unavailable => 503,
        Code::DeadlineExceeded => 504,
        Code::Unknown | Code::Internal | Code::DataLoss => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_rule_fires_exactly_count_times() {
        let faults = Faults::default();
        faults
            .add(FaultSpec::error("Commit", Code::Aborted).times(2))
            .unwrap();
        assert!(faults.fire(FaultKind::Error, "Commit").is_some());
        assert!(faults.fire(FaultKind::Error, "Get").is_none());
        assert!(faults.fire(FaultKind::Error, "Commit").is_some());
        assert!(faults.fire(FaultKind::Error, "Commit").is_none());
        assert_eq!(faults.fired()[&FaultKind::Error], 2);
        assert!(faults.rules().is_empty());
    }

    #[test]
    fn a_rule_after_n_calls_lets_them_through_first() {
        let faults = Faults::default();
        faults
            .add(
                FaultSpec::error("Commit", Code::Unavailable)
                    .after(2)
                    .times(1),
            )
            .unwrap();
        assert!(
            faults.fire(FaultKind::Error, "Get").is_none(),
            "not eligible"
        );
        assert!(faults.fire(FaultKind::Error, "Commit").is_none());
        assert!(faults.fire(FaultKind::Error, "Commit").is_none());
        assert!(faults.fire(FaultKind::Error, "Commit").is_some());
        assert!(faults.fire(FaultKind::Error, "Commit").is_none());
    }

    #[tokio::test]
    async fn error_rule_fails_before_with_its_code() {
        let faults = Faults::default();
        faults
            .add(FaultSpec::error("*", Code::Unavailable).times(1))
            .unwrap();
        let err = faults.before("Publish").await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable);
        assert!(faults.before("Publish").await.is_ok());
    }

    #[test]
    fn invalid_rules_are_refused() {
        let faults = Faults::default();
        assert!(faults.add(FaultSpec::new(FaultKind::Error)).is_err());
        assert!(faults.add(FaultSpec::new(FaultKind::Latency)).is_err());
        let bad = FaultSpec::new(FaultKind::AckLost).probability(1.5);
        assert!(faults.add(bad).is_err());
    }

    #[test]
    fn codes_round_trip_by_name() {
        for n in 0..=16 {
            let code = Code::from_i32(n);
            assert_eq!(parse_code(code_name(code)), Some(code));
        }
        assert_eq!(parse_code("aborted"), Some(Code::Aborted));
        assert_eq!(parse_code("NOPE"), None);
    }
}
