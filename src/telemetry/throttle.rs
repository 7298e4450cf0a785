//! Rate-limited warnings: a warning that can repeat thousands of times (a
//! poison storm, a flood of refused requests) is logged in full for the
//! first few occurrences of each kind per interval, then summed up in one
//! line per interval that says how many more there were.
//!
//! Invariant: every occurrence offered to [`LogThrottle::admit`] is either
//! logged in full by its caller (`admit` returned true) or counted in
//! [`names::LOG_LINES_SUPPRESSED`](super::names::LOG_LINES_SUPPRESSED) and
//! in exactly one summary line (written when its interval has ended, by the
//! next `admit` of that kind or by [`LogThrottle::flush`]). The throttle
//! decides only what is *printed*: callers count and store every
//! occurrence as before.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::Counter;

/// Occurrences of one kind logged in full per interval, by default.
pub const DEFAULT_FIRST_PER_INTERVAL: u32 = 5;
/// The default interval, after which a kind's budget starts again.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// Decides which warnings are printed in full; see the module doc.
#[derive(Debug)]
pub struct LogThrottle {
    first_per_interval: u32,
    interval: Duration,
    windows: Mutex<HashMap<(&'static str, &'static str), Window>>,
    suppressed: Counter,
}

/// One kind's current interval.
#[derive(Debug)]
struct Window {
    started: Instant,
    logged: u32,
    suppressed: u64,
}

impl LogThrottle {
    /// A throttle that prints `first_per_interval` occurrences of each
    /// kind per `interval` and counts the rest in `suppressed`.
    pub fn new(first_per_interval: u32, interval: Duration, suppressed: Counter) -> Self {
        Self {
            first_per_interval,
            interval,
            windows: Mutex::new(HashMap::new()),
            suppressed,
        }
    }

    /// Whether the caller should log this occurrence in full. `what` names
    /// the warning in the summary line (e.g. "messages quarantined") and
    /// `kind` is its low-cardinality key (e.g. a poison reason's kind);
    /// each (what, kind) has its own budget.
    ///
    /// A `false` counts the occurrence for the summary line. Cost: one
    /// short lock and a hash of two static strings.
    pub fn admit(&self, what: &'static str, kind: &'static str) -> bool {
        let now = Instant::now();
        let mut windows = self.windows.lock();
        let window = windows.entry((what, kind)).or_insert(Window {
            started: now,
            logged: 0,
            suppressed: 0,
        });
        if now.duration_since(window.started) >= self.interval {
            summarise(what, kind, window, now);
            *window = Window {
                started: now,
                logged: 0,
                suppressed: 0,
            };
        }
        if window.logged < self.first_per_interval {
            window.logged += 1;
            return true;
        }
        window.suppressed += 1;
        self.suppressed.add(1);
        false
    }

    /// Writes the summary line of every interval that has ended (and, with
    /// `all`, of every interval still open, as at shutdown) and forgets
    /// kinds with nothing to report. Called every interval by the service,
    /// so a storm's last count is printed even when nothing follows it.
    pub fn flush(&self, all: bool) {
        let now = Instant::now();
        let mut windows = self.windows.lock();
        windows.retain(|(what, kind), window| {
            let ended = now.duration_since(window.started) >= self.interval;
            if ended || all {
                summarise(what, kind, window, now);
                window.suppressed = 0;
            }
            !ended
        });
    }

    /// The count of occurrences not printed one by one.
    pub fn suppressed(&self) -> &Counter {
        &self.suppressed
    }

    /// The interval of each kind's budget.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

/// The one line that stands for a window's suppressed occurrences.
fn summarise(what: &str, kind: &str, window: &Window, now: Instant) {
    if window.suppressed == 0 {
        return;
    }
    tracing::warn!(
        kind,
        more = window.suppressed,
        logged = window.logged,
        seconds = now.duration_since(window.started).as_secs_f64().round(),
        "{} more {what} ({kind}) in this interval, not logged one by one (each counted in its metric)",
        window.suppressed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throttle() -> LogThrottle {
        LogThrottle::new(3, Duration::from_secs(10), Counter::default())
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_few_of_a_kind_are_admitted_then_the_rest_counted() {
        let t = throttle();
        let admitted = (0..100).filter(|_| t.admit("x", "a")).count();
        assert_eq!(admitted, 3);
        assert_eq!(t.suppressed.get(), 97);
        assert_eq!(
            (0..10).filter(|_| t.admit("x", "b")).count(),
            3,
            "each kind has its own budget"
        );
        assert_eq!(
            (0..10).filter(|_| t.admit("y", "a")).count(),
            3,
            "each warning has its own budget"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_starts_again_after_the_interval() {
        let t = throttle();
        assert_eq!((0..10).filter(|_| t.admit("x", "a")).count(), 3);
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(!t.admit("x", "a"));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!((0..10).filter(|_| t.admit("x", "a")).count(), 3);
        assert_eq!(t.suppressed.get(), 7 + 1 + 7);
    }

    #[tokio::test(start_paused = true)]
    async fn flush_forgets_ended_intervals_and_keeps_open_ones() {
        let t = throttle();
        for _ in 0..5 {
            t.admit("x", "a");
        }
        t.flush(false);
        assert_eq!(t.windows.lock().len(), 1, "still open");
        tokio::time::advance(Duration::from_secs(10)).await;
        t.flush(false);
        assert!(t.windows.lock().is_empty(), "ended and reported");
        for _ in 0..5 {
            t.admit("x", "a");
        }
        t.flush(true);
        assert_eq!(t.windows.lock()[&("x", "a")].suppressed, 0, "reported");
    }
}
