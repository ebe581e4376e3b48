//! The steady CTV rule of VDQ-CSAQM (`ctv_rule = "steady"`), a documented
//! deviation from paper 004 beside its own rule ([`super::vdq_vq`]).
//!
//! **Why.**  The paper's CTV_i is 0 while vqlen_i <= l_i and, above, the
//! value where the VQ's top l_i bits end.  It has no memory: it is 0 at most
//! updates and, when set, cuts Gold's values as well as Silver's, so the
//! classes are cut in the same episodes and Gold:Silver comes out ~2:1, not
//! the policy's 4:1.  The same senders and marker under a CTV held steady at
//! Gold's entitlement give 3.9:1 (README, `vdq_tests.rs`).  So this rule
//! keeps a CTV that moves slowly and stays where the load puts it.
//!
//! **Where.**  VQ_1 (Classic and L4S together, the coupling) gets the PI
//! below.  VQ_0 keeps the paper's rule, or, with `steady_l4s_gain` set, a
//! memoryless cut of its own ([`L4sCut`]): a PI on VQ_0 failed there.  An L4S sender smooths the congestion signal itself and
//! expects the queue not to (RFC 9332's immediate L4S marking), and VQ_0's
//! threshold is a few packets at our rates (1 ms at 50 Mbit/s: 4 packets):
//! with the PI on VQ_0 too, Prague's bursts kept p high and one Prague flow
//! alone got 35-40 % of C in the testbed (28 Nov; the virtual-time
//! DCTCP-like senders, ACK-clocked one packet at a time, did not show it).
//! Reading VQ_0's trough between updates instead of its length still left
//! Prague alone at 57 % and the L4S Gold:Silver at 1.9:1 (one seed): an
//! integrator winds up on bursts, and Prague's increase of 0.04 packet per
//! round at 5 ms takes seconds to win back what it cut (README).
//!
//! **The L4S cut** (28 Nov, afternoon).  The paper's CTV_0 cuts, at once, every bit of
//! VQ_0 beyond l_0: the share x = (vqlen_0 - l_0) / vqlen_0 of the lowest
//! values.  VQ_0 gains up to 0.1 C x 10 ms = 1.1 l_0 per update while the
//! L4S senders fill C_v0, so x is often 0.3-0.5 and the cut reaches deep
//! into Gold's values: Gold is marked almost as often as Silver and the
//! pair shares ~1.7:1, at any rate (README).  A scalable sender answers each
//! mark in proportion, so it needs a small, well-placed mark rate, not a
//! deep one.  [`L4sCut`] keeps the paper's condition (nothing while vqlen_0
//! <= l_0) and cuts g x of the bits that arrived at VQ_0 in the last
//! `steady_window_ms`, lowest values first (g = `steady_l4s_gain`, unset by
//! default; 0.1 measured): a shallow cut that lands on the flows above their
//! share.  No state but the
//! window, so nothing winds up.  Measured in virtual time (`vdq_tests.rs`,
//! 5 ms RTT, one Gold + one Silver Prague-like flow, 50 Mbit/s): 2.99:1
//! (the paper's cut 1.67; g = 1, the paper's depth read from the window:
//! 1.70), one Prague-like flow alone 88 % of C (83 %), 8 of them 0.03 ms
//! mean L4S sojourn (0.04).  g = 0.05 gave 3.18:1 but, with DCTCP-like
//! senders, 1.65:1 and a 2.2 ms L4S max; 0.2 gave 2.66:1.  In the testbed
//! (paper 004's set, 3 seeds, docs/l4s.md) it realises the L4S pair's
//! policy far better (2.85:1 against 1.75:1), but alone it let the Classic
//! queue rise above DualPI2's where four Prague flows share with one
//! Classic (15.6 and 16.2 ms against 14.8 and 15.0): the paper's deep
//! CTV_0 cuts had left gaps the Classic FIFO drained into, and steady L4S
//! flows leave none under strict priority.  So with the cut the PI on VQ_1
//! also reads the Classic FIFO's head sojourn d_C, as a VQ_1 length of
//! (d_C / D_1) l_1: e is the larger of the two, and the Classic queue is
//! held at `steady_setpoint` D_1 too (`vdq_csaqm.rs`; then 8.8 and 6.2 ms
//! there, the pair still 2.89:1).  An option: unset, VQ_0 and the PI are
//! as above.
//!
//! **How** (VQ_1).  Every T_update,ctv:
//! 1. the normalised excess of the VQ over its setpoint,
//!    e = (vqlen_1 - s l_1) / l_1 (the paper's l_1 = C_v1 D_1; s =
//!    `steady_setpoint`, 0.5 by default);
//! 2. a proportional-integral step on the fraction of arriving bits to act
//!    upon, p <- clamp(p + alpha e + beta (e - e_prev), 0, 1) (PIE's form,
//!    RFC 8033, with the error in units of l_1; with PIE's step scaled by
//!    the size of p, its cap of 0.02 per update above p = 0.1 and its decay
//!    of 2 % per update while the queue stays empty);
//! 3. the steady CTV = the p-quantile by bits of the values that arrived at
//!    VQ_1 in the last `steady_window_ms` (an arrival histogram beside the
//!    VQ's): the smallest v with at least p of the window's bits below it;
//! 4. CTV_1 = the larger of it and the paper's CTV_1 (`vdq_csaqm.rs`).
//!
//! So p settles where the arrivals match C_v1 with the VQ at s l_1, and the
//! CTV where the lowest-valued p of the traffic is cut: each flow's share of
//! values above it, i.e. its policy, sets its rate.  The paper's CTV is the
//! ceiling.  It acts only above l_1, which the PI keeps the VQ below, so it
//! is 0 at most updates.  Without it (s = 1, PI alone, 28 Nov) the loop
//! swung with a ~4 s period wherever L4S and Classic flows shared VQ_1.
//! p wound down while the VQ was short of l_1 and Prague crept up (its
//! additive increase is 0.04 packet per round at 5 ms); the Classic queue
//! then grew to 40-60 ms before p, moving in RFC 8033's small steps at
//! small p, caught up; then both classes were cut and the link ran idle.
//! In the testbed that put the Classic queue above DualPI2's in 13 of 28
//! template-phases; in virtual time (Reno-like + Prague-like, 50 Mbit/s)
//! it took the Classic queue from 2.7 ms (paper's rule) to 18 ms, and the
//! setpoint and ceiling bring it back to 4.0 ms
//! (`the_steady_ctv_rule_keeps_the_classic_queue_where_l4s_shares`).
//! Mapping p through the
//! value distribution, rather than integrating the coded value itself, makes
//! the step size independent of where on the log-coded scale the traffic
//! lies.  The idea of a controller's drop probability turned into a CTV by
//! the distribution of arriving values is the packet-value group's PPOV-AQM
//! (Laki et al., "Take your own share of the PIE", ANRW '17); the gains,
//! error and window here are ours.

use std::collections::VecDeque;

use super::vdq_vq::ValueHistogram;
use crate::time::Nanos;

/// The values of the bits that arrived in the last `span`.
struct ArrivalWindow {
    /// (arrival time, coded value, bits) from the oldest.
    records: VecDeque<(Nanos, u16, u64)>,
    hist: ValueHistogram,
    span: Nanos,
}

impl ArrivalWindow {
    fn new(span: Nanos) -> ArrivalWindow {
        ArrivalWindow { records: VecDeque::new(), hist: ValueHistogram::default(), span: span.max(1) }
    }

    /// The smallest v with at least the fraction p of the window's bits below it.
    fn quantile(&self, p: f64) -> u32 {
        self.hist.head_cut((p * self.hist.total() as f64).round() as u64)
    }

    fn push(&mut self, now: Nanos, v: u16, bits: u64) {
        self.records.push_back((now, v, bits));
        self.hist.add(v, bits as i64);
    }

    /// Forget arrivals older than the span.
    fn expire(&mut self, now: Nanos) {
        while let Some(&(t, v, bits)) = self.records.front() {
            if t + self.span > now {
                break;
            }
            self.records.pop_front();
            self.hist.add(v, -(bits as i64));
        }
    }
}

/// RFC 8033 (section 4.2): the largest rise of p per update once p >= 0.1,
/// and its decay per update while the queue stays empty (p halves in ~0.35 s
/// at 10 ms updates).  Without them a start-up flood wound p up to ~1 in a
/// second, and e >= -1 let it down by only alpha per update: ~8 s of cutting
/// most Classic packets (PCC starved in the testbed, 28 Nov).
const MAX_STEP: f64 = 0.02;
const EMPTY_DECAY: f64 = 0.98;

/// RFC 8033's auto-tuning of PIE's step by the size of p (section 4.2): a
/// small p moves in small steps, so the ~0.1-1 % of a large window that
/// holds it is not wiped out by one drained update.
fn pie_scale(p: f64) -> f64 {
    match p {
        p if p < 1e-6 => 1.0 / 2048.0,
        p if p < 1e-5 => 1.0 / 512.0,
        p if p < 1e-4 => 1.0 / 128.0,
        p if p < 1e-3 => 1.0 / 32.0,
        p if p < 1e-2 => 1.0 / 8.0,
        p if p < 1e-1 => 1.0 / 2.0,
        _ => 1.0,
    }
}

/// VQ_0's shallow cut (module comment, "The L4S cut"): nothing while the VQ
/// is at or below l_0, else the CTV under which lie g x of the window's
/// arrivals, x = the VQ's share beyond l_0.
pub struct L4sCut {
    window: ArrivalWindow,
    gain: f64,
    /// The fraction of arriving bits cut at the last update.
    p: f64,
}

impl L4sCut {
    pub fn new(window: Nanos, gain: f64) -> L4sCut {
        L4sCut { window: ArrivalWindow::new(window), gain, p: 0.0 }
    }

    /// A packet of coded value v and `bits` entered VQ_0.
    pub fn on_arrival(&mut self, v: u16, bits: u64, now: Nanos) {
        self.window.push(now, v, bits);
    }

    pub fn p(&self) -> f64 {
        self.p
    }

    /// The CTV from VQ_0's length and threshold l_0 (bits).
    pub fn update(&mut self, vqlen: u64, threshold: u64, now: Nanos) -> u32 {
        self.window.expire(now);
        self.p = if vqlen > threshold { self.gain * (vqlen - threshold) as f64 / vqlen as f64 } else { 0.0 };
        self.window.quantile(self.p)
    }
}

/// One virtual queue's steady CTV (module comment).
pub struct SteadyCtv {
    window: ArrivalWindow,
    /// The fraction of arriving bits acted upon, 0..=1.
    p: f64,
    e_prev: f64,
    alpha: f64,
    beta: f64,
    /// The VQ length held, as a fraction of the threshold.
    setpoint: f64,
    /// The VQ was empty at the last update.
    was_empty: bool,
}

impl SteadyCtv {
    pub fn new(window: Nanos, alpha: f64, beta: f64, setpoint: f64) -> SteadyCtv {
        SteadyCtv { window: ArrivalWindow::new(window), p: 0.0, e_prev: 0.0, alpha, beta, setpoint, was_empty: false }
    }

    /// A packet of coded value v and `bits` entered this VQ.
    pub fn on_arrival(&mut self, v: u16, bits: u64, now: Nanos) {
        self.window.push(now, v, bits);
    }

    /// The fraction of arriving bits the CTV is set to act upon.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// One update from the VQ's length and threshold l (bits): the PI step
    /// toward `setpoint` l, then the CTV at the p-quantile of the window's
    /// arrivals.
    pub fn update(&mut self, vqlen: u64, threshold: u64, now: Nanos) -> u32 {
        self.window.expire(now);
        let l = threshold.max(1) as f64;
        let e = (vqlen as f64 - self.setpoint * l) / l;
        let mut step = (self.alpha * e + self.beta * (e - self.e_prev)) * pie_scale(self.p);
        if self.p >= 0.1 && step > MAX_STEP {
            step = MAX_STEP; // RFC 8033: no big jumps once p is large
        }
        self.p = (self.p + step).clamp(0.0, 1.0);
        if vqlen == 0 && self.was_empty {
            self.p *= EMPTY_DECAY; // RFC 8033: the VQ stayed empty, let p go
        }
        self.was_empty = vqlen == 0;
        self.e_prev = e;
        self.window.quantile(self.p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NS_PER_MS;

    #[test]
    fn the_ctv_is_the_p_quantile_of_the_window() {
        let mut s = SteadyCtv::new(100 * NS_PER_MS, 0.0, 0.0, 1.0);
        for i in 0..100u16 {
            s.on_arrival(1000 + 10 * i, 8000, 0);
        }
        assert_eq!(s.update(5000, 1000, NS_PER_MS), 0, "p = 0: nothing acted upon");
        s.p = 0.04;
        assert_eq!(s.update(5000, 1000, 2 * NS_PER_MS), 1031, "above the lowest 4 of 100 values");
        s.p = 0.44;
        assert_eq!(s.update(5000, 1000, 3 * NS_PER_MS), 1000 + 10 * 43 + 1);
        s.p = 1.0;
        assert_eq!(s.update(5000, 1000, 4 * NS_PER_MS), 1000 + 10 * 99 + 1, "everything");
    }

    #[test]
    fn p_integrates_the_excess_in_steps_scaled_by_its_size() {
        let mut s = SteadyCtv::new(100 * NS_PER_MS, 0.01, 0.0, 1.0);
        s.update(1000, 1000, 0);
        assert_eq!(s.p(), 0.0, "at the threshold: no step");
        s.update(5000, 1000, NS_PER_MS); // e = 4: 0.04 / 2048 from p = 0
        assert!((s.p() - 0.04 / 2048.0).abs() < 1e-12, "{}", s.p());
        // Held at 5x the threshold, p climbs through RFC 8033's bins, each faster.
        let mut t = 2;
        while s.p() < 0.5 {
            s.update(5000, 1000, t * NS_PER_MS);
            t += 1;
        }
        assert!((20..60).contains(&t), "{t} updates from 0 to 0.5");
        // At p >= 0.1 the unscaled step, 0.04, is capped at 0.02.
        let before = s.p();
        s.update(5000, 1000, t * NS_PER_MS);
        assert!((s.p() - before - 0.02).abs() < 1e-9);
        // An empty VQ (e = -1) winds p down to 0, not below: the 0.01 steps
        // of alpha and, from the second empty update on, 2 % per update.
        let mut n = 0;
        while s.p() > 0.0 && n < 100_000 {
            s.update(0, 1000, (t + n) * NS_PER_MS);
            n += 1;
        }
        assert_eq!(s.p(), 0.0);
        assert!((25..=60).contains(&n), "{n} updates down to 0");
    }

    #[test]
    fn a_flood_raises_p_by_at_most_two_percent_per_update_and_an_empty_queue_lets_it_go() {
        let mut s = SteadyCtv::new(100 * NS_PER_MS, 0.01, 0.0, 1.0);
        s.p = 0.5;
        s.update(12_000, 1000, 0); // e = 11: 0.11 without the cap
        assert!((s.p() - 0.52).abs() < 1e-9, "{}", s.p());
        let mut s = SteadyCtv::new(100 * NS_PER_MS, 0.0, 0.0, 1.0);
        s.p = 0.5;
        s.update(0, 1000, 0); // the first empty update: e_prev was 0
        assert!((s.p() - 0.5).abs() < 1e-9);
        for t in 1..=35 {
            s.update(0, 1000, t * NS_PER_MS);
        }
        assert!((s.p() - 0.5 * 0.98f64.powi(35)).abs() < 1e-9, "{}", s.p()); // ~0.25
    }

    #[test]
    fn the_window_forgets_old_arrivals() {
        let mut s = SteadyCtv::new(100 * NS_PER_MS, 0.0, 0.0, 1.0);
        s.p = 1.0;
        s.on_arrival(5, 8000, 0);
        s.on_arrival(50_000, 8000, 60 * NS_PER_MS);
        assert_eq!(s.update(10_000, 1000, 99 * NS_PER_MS), 50_001, "p = 1: above the highest value in the window");
        s.on_arrival(7, 8000, 120 * NS_PER_MS);
        // At 161 ms the value-5 arrival (0 ms) and the 50000 one (60 ms) are gone.
        assert_eq!(s.update(10_000, 1000, 161 * NS_PER_MS), 8);
        assert_eq!(s.update(10_000, 1000, 221 * NS_PER_MS), 0, "nothing arrived in the window");
    }

    #[test]
    fn the_l4s_cut_is_a_share_of_the_excess_and_nothing_at_or_below_the_threshold() {
        let mut c = L4sCut::new(100 * NS_PER_MS, 0.1);
        for i in 0..100u16 {
            c.on_arrival(1000 + 10 * i, 8000, 0);
        }
        assert_eq!(c.update(1000, 1000, NS_PER_MS), 0, "at l_0: the paper's condition, nothing cut");
        assert_eq!(c.p(), 0.0);
        // vqlen = 2 l_0: half the VQ is excess, g x = 5 % of the window: above the lowest 5 values.
        assert_eq!(c.update(2000, 1000, 2 * NS_PER_MS), 1041);
        assert!((c.p() - 0.05).abs() < 1e-12);
        // Far beyond l_0 the cut approaches g, never more.
        assert_eq!(c.update(1_000_000, 1000, 3 * NS_PER_MS), 1000 + 10 * 9 + 1);
        let mut paper = L4sCut::new(100 * NS_PER_MS, 1.0);
        for i in 0..100u16 {
            paper.on_arrival(1000 + 10 * i, 8000, 0);
        }
        assert_eq!(paper.update(2000, 1000, NS_PER_MS), 1000 + 10 * 49 + 1, "g = 1: the paper's depth, half");
        assert_eq!(paper.update(2000, 1000, 101 * NS_PER_MS), 0, "the window is empty");
    }

    #[test]
    fn the_derivative_term_answers_a_change_at_once() {
        let mut s = SteadyCtv::new(100 * NS_PER_MS, 0.0, 0.005, 1.0);
        s.p = 0.5;
        s.update(1000, 1000, 0);
        s.update(3000, 1000, NS_PER_MS); // e: 0 -> 2
        assert!((s.p() - 0.51).abs() < 1e-9);
        s.update(3000, 1000, 2 * NS_PER_MS); // e unchanged: no drift without alpha
        assert!((s.p() - 0.51).abs() < 1e-9);
        s.update(1000, 1000, 3 * NS_PER_MS); // back: p returns
        assert!((s.p() - 0.5).abs() < 1e-9);
    }
}
