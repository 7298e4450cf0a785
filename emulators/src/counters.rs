//! Counters of every RPC an emulator served, by method name.
//!
//! Invariant: a counter is bumped once per RPC received (before faults apply),
//! so benchmarks can count store round trips from the server's side.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// RPC counts by method; a cheap cloneable handle.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    by_method: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl Counters {
    /// Counts one call of `method`.
    pub fn bump(&self, method: &str) {
        self.add(method, 1);
    }

    /// Adds `n` to `method`'s counter (also used for non-RPC tallies such as `writes`).
    pub fn add(&self, method: &str, n: u64) {
        let mut map = self.by_method.lock();
        match map.get_mut(method) {
            Some(v) => *v += n,
            None => {
                map.insert(method.to_string(), n);
            }
        }
    }

    /// How many calls of `method` were served.
    pub fn get(&self, method: &str) -> u64 {
        self.by_method.lock().get(method).copied().unwrap_or(0)
    }

    /// All counters.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.by_method.lock().clone()
    }

    /// Sum of every RPC counter (method names only, as counted by [`Counters::bump`]).
    pub fn total(&self) -> u64 {
        self.by_method.lock().values().sum()
    }

    /// Sets every counter back to zero.
    pub fn reset(&self) {
        self.by_method.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_method() {
        let c = Counters::default();
        c.bump("Commit");
        c.bump("Commit");
        c.bump("Publish");
        assert_eq!(c.get("Commit"), 2);
        assert_eq!(c.get("Missing"), 0);
        assert_eq!(c.total(), 3);
        c.reset();
        assert_eq!(c.total(), 0);
    }
}
