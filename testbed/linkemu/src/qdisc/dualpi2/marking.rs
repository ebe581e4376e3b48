//! The random and deterministic draws behind DualPI2's per-packet verdicts at
//! dequeue (header of `dualpi2.rs`, "Coupling"): the native L AQM's step or
//! ramp on the sojourn, RFC 9332's recur() that spaces the L marks evenly,
//! and "think twice" for the Classic probability p_C = p'^2.

use rand::Rng;

use super::DualPi2;
use crate::time::Nanos;

impl DualPi2 {
    /// Native L4S AQM probability for a sojourn of `s`.
    pub(super) fn laqm(&self, s: Nanos) -> f64 {
        let (lo, hi) = (self.prm.l_min_th, self.prm.l_max_th);
        if s > hi || (hi > lo && s == hi) {
            1.0
        } else if s > lo {
            (s - lo) as f64 / (hi - lo) as f64
        } else {
            0.0
        }
    }

    /// RFC 9332's recur(): true with long-run frequency `likelihood`, evenly spaced.
    pub(super) fn recur(&mut self, likelihood: f64) -> bool {
        self.recur_l += likelihood;
        if self.recur_l >= 1.0 {
            self.recur_l -= 1.0;
            true
        } else {
            false
        }
    }

    /// "Think twice": true with probability p'^2.
    pub(super) fn roll_p_c(&mut self) -> bool {
        let p = self.p;
        self.rng.random::<f64>() < p && self.rng.random::<f64>() < p
    }
}
