//! The emulators' clock: real time, optionally sped up or advanced by hand.
//!
//! Invariant: emulated time never goes backwards. Deadlines (ack deadlines,
//! retry backoff, transaction expiry, retention) are measured on this clock so
//! tests can make a 10 s ack deadline pass in a fraction of a real second
//! without changing the protocol-visible values.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::time::Instant;

/// A cheap, cloneable handle on one emulated clock.
#[derive(Clone, Debug)]
pub struct Clock {
    inner: Arc<Mutex<ClockState>>,
}

#[derive(Debug)]
struct ClockState {
    /// Real instant at which the current segment started.
    segment_start_real: Instant,
    /// Emulated time (since the clock's epoch) at the segment start.
    segment_start_emulated: Duration,
    /// Emulated seconds per real second.
    scale: f64,
    /// Wall-clock time at the clock's epoch.
    epoch_wall: SystemTime,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new(1.0)
    }
}

impl Clock {
    /// A clock that runs `scale` emulated seconds per real second (1.0 = real time).
    pub fn new(scale: f64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(ClockState {
                segment_start_real: Instant::now(),
                segment_start_emulated: Duration::ZERO,
                scale: sanitize_scale(scale),
                epoch_wall: SystemTime::now(),
            })),
        }
    }

    /// Emulated time elapsed since the clock was created.
    pub fn elapsed(&self) -> Duration {
        let state = self.inner.lock();
        state.now_emulated()
    }

    /// Emulated wall-clock time (what `publish_time`, `commit_time` and the like carry).
    pub fn now_wall(&self) -> SystemTime {
        let state = self.inner.lock();
        state.epoch_wall + state.now_emulated()
    }

    /// Moves emulated time forward by `by` at once.
    pub fn advance(&self, by: Duration) {
        let mut state = self.inner.lock();
        let now = state.now_emulated();
        state.segment_start_real = Instant::now();
        state.segment_start_emulated = now + by;
    }

    /// Changes the speed of emulated time from now on.
    pub fn set_scale(&self, scale: f64) {
        let mut state = self.inner.lock();
        let now = state.now_emulated();
        state.segment_start_real = Instant::now();
        state.segment_start_emulated = now;
        state.scale = sanitize_scale(scale);
    }

    /// Current speed (emulated seconds per real second).
    pub fn scale(&self) -> f64 {
        self.inner.lock().scale
    }

    /// Real duration that corresponds to `emulated` at the current scale.
    pub fn real_duration(&self, emulated: Duration) -> Duration {
        emulated.div_f64(self.scale())
    }

    /// Sleeps until `emulated` time has passed on this clock (approximately:
    /// a later `advance` or `set_scale` is not observed by a running sleep).
    pub async fn sleep(&self, emulated: Duration) {
        tokio::time::sleep(self.real_duration(emulated)).await;
    }
}

impl ClockState {
    fn now_emulated(&self) -> Duration {
        let real = self.segment_start_real.elapsed();
        self.segment_start_emulated + real.mul_f64(self.scale)
    }
}

fn sanitize_scale(scale: f64) -> f64 {
    if scale.is_finite() && scale > 0.0 {
        scale
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_moves_emulated_time_forward() {
        let clock = Clock::new(1.0);
        let before = clock.elapsed();
        clock.advance(Duration::from_secs(60));
        assert!(clock.elapsed() >= before + Duration::from_secs(60));
    }

    #[test]
    fn scale_speeds_up_elapsed_time() {
        let clock = Clock::new(1000.0);
        std::thread::sleep(Duration::from_millis(20));
        assert!(clock.elapsed() >= Duration::from_secs(10));
    }

    #[test]
    fn invalid_scale_falls_back_to_real_time() {
        assert_eq!(Clock::new(f64::NAN).scale(), 1.0);
        assert_eq!(Clock::new(-3.0).scale(), 1.0);
    }
}
