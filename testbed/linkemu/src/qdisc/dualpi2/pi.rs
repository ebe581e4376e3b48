//! DualPI2's base PI controller (header of `dualpi2.rs`, "Base PI
//! controller", "Coupling", "Overload"): p' and the probabilities derived
//! from it (p_C = p'^2, p_CL = k p'), its ceiling and the overload test, and
//! the update every tupdate, which also ends the leases an agent set through
//! the control socket (`control.rs`).

use super::{DualPi2, C, L};
use crate::time::Nanos;

impl DualPi2 {
    /// p' (base probability).
    pub fn p_prime(&self) -> f64 {
        self.p
    }

    /// p_C = p'^2.
    pub fn p_c(&self) -> f64 {
        self.p * self.p
    }

    /// p_CL = k p' (before the cap at 1).
    pub fn p_cl(&self) -> f64 {
        self.prm.k * self.p
    }

    /// The largest p' (1; 1/k without drop_on_overload).
    pub(super) fn p_ceiling(&self) -> f64 {
        if self.prm.drop_on_overload {
            1.0
        } else {
            (1.0 / self.prm.k).min(1.0)
        }
    }

    /// Overloaded: p_CL > 1, i.e. p_C > p_Cmax = 1/k^2.
    pub fn overloaded(&self) -> bool {
        self.prm.drop_on_overload && self.p_cl() > 1.0
    }

    /// Set p' (tests).
    pub fn set_p_prime(&mut self, p: f64) {
        self.p = p;
        self.p_pi = p;
    }

    /// One PI update (RFC 9332 Figure 5 with Linux's max over both heads).
    ///
    /// The integrator is `p_pi`; the applied p' is `p_pi` itself, or `p_pi`
    /// times a residual agent's `scale`, or a value fixed by an agent.
    pub fn update(&mut self, now: Nanos) {
        if self.k_until.is_some_and(|until| now >= until) {
            // The agent did not renew its k: the configured coupling is back from this update on
            // (before the PI step, so p' is capped with it).
            self.prm.k = self.k_conf;
            self.k_until = None;
            self.counters.k_lease_expiries += 1;
            self.p = self.p.min(self.p_ceiling());
            self.p_pi = self.p_pi.min(self.p_ceiling());
        }
        self.active.sweep(now);
        let qd = self.head_delay(C, now).max(self.head_delay(L, now));
        let s = |ns: Nanos| ns as f64 / 1e9;
        let mut p =
            self.p_pi + self.prm.alpha_hz * (s(qd) - s(self.prm.target)) + self.prm.beta_hz * (s(qd) - s(self.q_prev));
        p = p.clamp(0.0, self.p_ceiling());
        if self.manual && self.manual_until.is_some_and(|until| now >= until) {
            // The agent did not renew its lease: the PI controller takes over from this update.
            self.manual = false;
            self.manual_until = None;
            self.counters.lease_expiries += 1;
        }
        if self.scale != 1.0 && self.scale_until.is_some_and(|until| now >= until) {
            // Same for a residual agent's factor: PI alone again.
            self.scale = 1.0;
            self.scale_until = None;
            self.counters.lease_expiries += 1;
        }
        if self.manual {
            self.counters.manual_updates += 1;
            p = self.p; // fixed through the control socket: the PI controller only watches
            self.p_pi = p;
        } else {
            self.p_pi = p;
            if self.scale != 1.0 {
                self.counters.scaled_updates += 1;
                p = (p * self.scale).clamp(0.0, self.p_ceiling());
            }
        }
        self.p = p;
        self.q_prev = qd;
        let c = &mut self.counters;
        c.updates += 1;
        c.p_sum += p;
        c.p_max = c.p_max.max(p);
        if self.prm.drop_on_overload && self.prm.k * p > 1.0 {
            c.overload_updates += 1;
        }
    }
}
