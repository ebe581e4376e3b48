//! Which of DualPI2's two queues is served next (header of `dualpi2.rs`,
//! "Scheduler"): the `wrr` credit counter ([`WrrCredit`], also fq_dualpi2's
//! between the two queues of a pair) and the `tsfifo` time shift.

use super::{DualPi2, Scheduler, C, L, MTU_BYTES};
use crate::time::Nanos;

/// The `wrr` scheduler's credit counter (header of `dualpi2.rs`, "Scheduler";
/// Linux's C protection), also fq_dualpi2's between the two queues of a pair.
#[derive(Debug, Clone)]
pub struct WrrCredit {
    c_weight_pct: f64,
    credit: f64,
}

impl WrrCredit {
    /// A counter giving the C queue `c_weight_pct` % of the bytes when both are backlogged.
    pub fn new(c_weight_pct: f64) -> WrrCredit {
        let mut w = WrrCredit { c_weight_pct, credit: 0.0 };
        w.reset();
        w
    }

    /// Both queues empty: back to MTU * (wc - wl).
    pub fn reset(&mut self) {
        self.credit = MTU_BYTES as f64 * (self.c_weight_pct - (100.0 - self.c_weight_pct));
    }

    /// Both queues backlogged: serve L (else C).
    pub fn serve_l(&self) -> bool {
        self.credit <= 0.0
    }

    /// `len` bytes were served from L (`l`) or C while the other queue was backlogged.
    pub fn served(&mut self, l: bool, len: usize) {
        let wc = self.c_weight_pct;
        self.credit += if l { wc * len as f64 } else { -(100.0 - wc) * len as f64 };
    }
}

impl DualPi2 {
    /// Which queue the scheduler serves next (both not empty: at least one is).
    pub(super) fn pick(&self, now: Nanos) -> usize {
        let (nc, nl) = (self.q[C].len(), self.q[L].len());
        if nl == 0 {
            return C;
        }
        if nc == 0 {
            return L;
        }
        match self.prm.scheduler {
            Scheduler::Wrr { .. } => {
                if self.wrr.serve_l() {
                    L
                } else {
                    C
                }
            }
            Scheduler::TsFifo { tshift } => {
                if self.head_delay(L, now) + tshift >= self.head_delay(C, now) {
                    L
                } else {
                    C
                }
            }
        }
    }

    pub(super) fn credit_change(&mut self, served: usize, len: usize, other_backlogged: bool) {
        if matches!(self.prm.scheduler, Scheduler::Wrr { .. }) && other_backlogged {
            self.wrr.served(served == L, len);
        }
    }
}
