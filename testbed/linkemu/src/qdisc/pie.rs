//! PIE: Proportional Integral controller Enhanced (RFC 8033; Linux
//! net/sched/sch_pie.c and pie.c, which fq_pie shares).
//!
//! PIE drops (or CE-marks) arriving packets at random with a probability p
//! that a PI controller updates every `tupdate` (15 ms) from the queue delay:
//!
//! ```text
//!   p <- p + s(p) * [alpha * (qdelay - target) + beta * (qdelay - qdelay_old)]   (delays in s)
//! ```
//!
//! with `target` 15 ms, alpha 0.125 Hz and beta 1.25 Hz (Linux's `alpha 2`,
//! `beta 20`, in sixteenths).  The rest follows Linux's
//! pie_calculate_probability(), pie_drop_early() and pie_process_dequeue():
//!
//! * **Queue delay** is Linux's estimate with `dq_rate_estimator` off (its
//!   default; RFC 8033 section 4.3's timestamps): the sojourn of the packet
//!   that last left the queue, 0 if that departure emptied it.  The
//!   departure-rate estimator (Little's law, section 5.2) is not implemented.
//! * **Auto-tuning** (RFC 8033 section 4.2): the gains are scaled by s(p) =
//!   1 for p >= 10 %, 1/2 for p in [1 %, 10 %), then a further 1/4 per
//!   decade below 1 % (1/8, 1/32, 1/128, 1/512, and 1/2048 below 0.0001 %),
//!   so a small p moves in small steps.  While p >= 10 % one update raises it
//!   by at most 2 % (section 5.5); a qdelay above 250 ms adds 2 % on top.  p stays in
//!   [0, 1].  Two updates in a row with qdelay 0 decay p by 1/64.
//! * **Rest and burst allowance** (RFC 8033 section 4.4): when qdelay and
//!   the previous qdelay are both below target/2 and p is 0, the controller
//!   rests: the burst allowance is refilled to `max_burst` (150 ms), the
//!   derandomisation sum cleared.  The allowance runs down by the time
//!   between consecutive dequeues (Linux counts dequeue time, not wall
//!   time); while any is left nothing is dropped early.
//! * **Drop decision at enqueue** (Linux pie_drop_early()): no early drop
//!   while the allowance lasts, while qdelay < target/2 and p < 20 %, or
//!   while the queue holds less than 2 MTU (3000 IP bytes, like RED's
//!   min_th).  Otherwise the **de-randomised** drop of RFC 8033 section 5.4,
//!   which Linux always applies and so does this code: p accumulates per
//!   arrival; below 0.85 nothing is dropped, at 8.5 a drop is certain, in
//!   between a packet is dropped with probability p; a drop clears the sum.
//!   (The long-run drop rate is therefore below p: about p / (1 + 0.85) for
//!   small p; the controller finds whatever p gives the rate it needs.)
//!   `bytemode` scales p by the packet's length / 1500 first.
//! * **ECN** (section 5.1): with `ecn`, a packet the decision hits is
//!   CE-marked instead of dropped if it is ECN-capable and p <= 10 % (Linux's
//!   rule; fq_pie's `ecn_prob_pct`); above that it is dropped, so
//!   unresponsive ECN traffic cannot fill the queue.
//! * `limit_pkts` (1000) tail-drops arrivals beyond it (Linux's limit).
//!
//! **Deviations from Linux**, all small: probabilities are f64 (Linux: 56-bit
//! fixed point, whose value may run past its maximum before its overflow
//! check clamps it; here p is clamped to [0, 1] as in RFC 8033); the
//! derandomisation sum is cleared after a CE mark too (Linux leaves it when
//! the "certain at 8.5" rule hit the marked packet, after which every ECT
//! arrival is marked until a drop); the first update comes one `tupdate`
//! after the link starts (Linux: 500 ms after the qdisc is created), then on
//! a fixed grid (DualPI2's timer); MTU and lengths are IP bytes (Linux:
//! 1514 with the Ethernet header); `max_burst_ms` is configurable (Linux: a
//! constant 150 ms; FreeBSD's max_burst); the random stream is a seeded
//! PCG.  The controller is [`PieVars`], one per managed queue, so fq_pie
//! ([`super::fq_pie`]) runs one per flow queue with the same code.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde_json::{json, Value};

use super::control::{QdiscState, Scalar};
use super::fifo::Fifo;
use super::{DropCause, Dropped, Qdisc};
use crate::config;
use crate::packet::Packet;
use crate::time::{Nanos, NS_PER_MS};

/// Linux's psched_mtu in IP bytes: the 2-MTU rule and bytemode's scale.
pub const MTU_BYTES: usize = 1500;

/// A qdelay above this adds 2 % per update (Linux's 250 ms).
const QDELAY_PANIC: Nanos = 250 * NS_PER_MS;

/// PIE's parameters, shared by every queue a discipline manages.
#[derive(Debug, Clone, Copy)]
pub struct PieParams {
    pub target: Nanos,
    pub tupdate: Nanos,
    /// Gains in Hz before auto-tuning.
    pub alpha: f64,
    pub beta: f64,
    pub max_burst: Nanos,
    pub ecn: bool,
    /// With `ecn`: mark while p <= this (pie: 0.1; fq_pie: ecn_prob_pct / 100).
    pub ecn_prob: f64,
    pub bytemode: bool,
}

fn ms(v: f64) -> Nanos {
    (v * 1e6).round() as Nanos
}

fn secs(ns: Nanos) -> f64 {
    ns as f64 / 1e9
}

impl PieParams {
    pub fn from_config(c: &config::Pie) -> Self {
        PieParams {
            target: ms(c.target_ms),
            tupdate: ms(c.tupdate_ms).max(1),
            alpha: c.alpha,
            beta: c.beta,
            max_burst: ms(c.max_burst_ms),
            ecn: c.ecn,
            ecn_prob: 0.1,
            bytemode: c.bytemode,
        }
    }

    pub fn from_fq_config(c: &config::FqPie) -> Self {
        PieParams {
            target: ms(c.target_ms),
            tupdate: ms(c.tupdate_ms).max(1),
            alpha: c.alpha,
            beta: c.beta,
            max_burst: ms(c.max_burst_ms),
            ecn: c.ecn,
            ecn_prob: c.ecn_prob_pct / 100.0,
            bytemode: c.bytemode,
        }
    }
}

/// RFC 8033 section 4.2's auto-tuning factor of the gains at probability `p`.
pub fn gain_scale(p: f64) -> f64 {
    if p >= 0.1 {
        return 1.0;
    }
    // Linux: power = 100, 1000, ... 10^6 while p < 1 / power.
    let (mut s, mut power) = (0.5, 100u32);
    while p < 1.0 / power as f64 && power <= 1_000_000 {
        s /= 4.0;
        power *= 10;
    }
    s
}

/// What PIE does with an arriving packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Enqueue,
    /// CE-marked, then enqueued.
    Mark,
    Drop,
}

/// Control state of one PIE-managed queue (Linux struct pie_vars).  The
/// default is a resting controller with its full burst allowance.
#[derive(Debug, Clone, Default)]
pub struct PieVars {
    prob: f64,
    accu_prob: f64,
    qdelay: Nanos,
    qdelay_old: Nanos,
    /// Burst allowance used since the last rest (Linux counts what is left).
    burst_used: Nanos,
    /// Instant of the last dequeue since the last rest.
    dq_tstamp: Option<Nanos>,
}

impl PieVars {
    /// The drop probability p.
    pub fn prob(&self) -> f64 {
        self.prob
    }

    /// The queue delay estimate (sojourn of the last packet out, 0 if it emptied the queue).
    pub fn qdelay(&self) -> Nanos {
        self.qdelay
    }

    /// Burst allowance left.
    pub fn burst_left(&self, prm: &PieParams) -> Nanos {
        prm.max_burst.saturating_sub(self.burst_used)
    }

    /// Set p (tests; fq_dualpi2's cap of p' at 1/k).
    pub fn set_prob(&mut self, p: f64) {
        self.prob = p;
    }

    /// Linux pie_vars_init() as pie_calculate_probability() calls it.
    fn rest(&mut self) {
        self.burst_used = 0;
        self.dq_tstamp = None;
        self.accu_prob = 0.0;
    }

    /// Resting with nothing to remember: an update would change nothing.
    pub fn at_rest(&self) -> bool {
        self.prob == 0.0
            && self.qdelay == 0
            && self.qdelay_old == 0
            && self.burst_used == 0
            && self.dq_tstamp.is_none()
            && self.accu_prob == 0.0
    }

    /// The rules of Linux pie_drop_early() before its draw: no early drop
    /// while the burst allowance lasts, while qdelay < target/2 and p < 20 %,
    /// or while the queue holds less than 2 MTU (`backlog` bytes).  fq_dualpi2
    /// gates its Classic drops (p'^2) with them.
    pub fn may_drop_early(&self, prm: &PieParams, backlog: usize) -> bool {
        self.burst_used >= prm.max_burst
            && !(self.qdelay < prm.target / 2 && self.prob < 0.2)
            && backlog >= 2 * MTU_BYTES
    }

    /// Linux pie_drop_early(): whether to signal congestion on a packet of
    /// `len` bytes arriving to a queue holding `backlog` bytes.
    fn drop_early(&mut self, prm: &PieParams, backlog: usize, len: usize, rng: &mut Pcg64Mcg) -> bool {
        if !self.may_drop_early(prm, backlog) {
            return false;
        }
        let p = if prm.bytemode && len <= MTU_BYTES { self.prob * len as f64 / MTU_BYTES as f64 } else { self.prob };
        if p == 0.0 {
            self.accu_prob = 0.0;
        } else {
            self.accu_prob += p;
        }
        if self.accu_prob < 0.85 {
            return false;
        }
        if self.accu_prob >= 8.5 {
            return true;
        }
        rng.random::<f64>() < p
    }

    /// The enqueue decision for `pkt` (Linux pie_qdisc_enqueue() after its
    /// limit check): CE-marks it on [`Verdict::Mark`].
    pub fn verdict(&mut self, prm: &PieParams, backlog: usize, pkt: &mut Packet, rng: &mut Pcg64Mcg) -> Verdict {
        if !self.drop_early(prm, backlog, pkt.ip_len(), rng) {
            return Verdict::Enqueue;
        }
        self.accu_prob = 0.0;
        if prm.ecn && self.prob <= prm.ecn_prob && pkt.mark_ce() {
            Verdict::Mark
        } else {
            Verdict::Drop
        }
    }

    /// A packet was refused for another reason (the limit): Linux clears the sum too.
    pub fn refused(&mut self) {
        self.accu_prob = 0.0;
    }

    /// Linux pie_process_dequeue() with timestamps: a packet that waited
    /// `sojourn` left at `now`, `backlog` bytes remain.
    pub fn on_dequeue(&mut self, sojourn: Nanos, backlog: usize, now: Nanos) {
        self.qdelay = if backlog == 0 { 0 } else { sojourn };
        let dtime = self.dq_tstamp.map_or(0, |t| now.saturating_sub(t));
        self.dq_tstamp = Some(now);
        self.burst_used = self.burst_used.saturating_add(dtime);
    }

    /// Linux pie_calculate_probability() with timestamps; `backlog`: bytes queued.
    pub fn update(&mut self, prm: &PieParams, backlog: usize) {
        let (qdelay, qdelay_old) = (self.qdelay, self.qdelay_old);
        // A zero delay with packets queued: too few to measure; no decay this round.
        let decay_ok = !(qdelay == 0 && backlog != 0);
        let s = gain_scale(self.prob);
        let mut delta =
            s * prm.alpha * (secs(qdelay) - secs(prm.target)) + s * prm.beta * (secs(qdelay) - secs(qdelay_old));
        if delta > 0.02 && self.prob >= 0.1 {
            delta = 0.02;
        }
        if qdelay > QDELAY_PANIC {
            delta += 0.02;
        }
        let mut p = (self.prob + delta).clamp(0.0, 1.0);
        if qdelay == 0 && qdelay_old == 0 && decay_ok {
            p -= p / 64.0;
        }
        self.prob = p;
        if qdelay < prm.target / 2 && qdelay_old < prm.target / 2 && p == 0.0 {
            self.rest();
        }
        self.qdelay_old = qdelay;
    }
}

/// Fixed-grid timer of a PIE discipline (DualPI2's): the first call arms it.
/// Returns whether an update is due now.
pub fn tick(next_update: &mut Nanos, tupdate: Nanos, now: Nanos) -> bool {
    let due = *next_update > 0;
    *next_update = if *next_update == 0 { now + tupdate } else { *next_update + tupdate };
    if *next_update <= now {
        *next_update = now + tupdate;
    }
    due
}

/// What the `pie` discipline did (Linux's tc_pie_xstats and more).
#[derive(Debug, Default, Clone)]
pub struct Counters {
    pub packets_in: u64,
    /// Tail drops at `limit_pkts`.
    pub overlimit: u64,
    pub aqm_drops: u64,
    pub ecn_marks: u64,
    /// Most packets queued at an arrival.
    pub maxq: usize,
    pub updates: u64,
    pub prob_sum: f64,
    pub prob_max: f64,
}

/// The `pie` discipline: one FIFO under PIE.
pub struct Pie {
    prm: PieParams,
    limit: usize,
    q: Fifo,
    vars: PieVars,
    next_update: Nanos,
    rng: Pcg64Mcg,
    pub counters: Counters,
}

impl Pie {
    pub fn new(prm: PieParams, limit_pkts: usize, seed: u64) -> Pie {
        Pie {
            prm,
            limit: limit_pkts,
            q: Fifo::default(),
            vars: PieVars::default(),
            next_update: 0,
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0x91e0_2013_8033_0001),
            counters: Counters::default(),
        }
    }

    pub fn from_config(c: &config::Pie, seed: u64) -> Pie {
        Pie::new(PieParams::from_config(c), c.limit_pkts, seed)
    }

    pub fn vars(&self) -> &PieVars {
        &self.vars
    }

    pub fn vars_mut(&mut self) -> &mut PieVars {
        &mut self.vars
    }
}

impl Qdisc for Pie {
    fn enqueue(&mut self, mut pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        if self.q.len() >= self.limit {
            self.counters.overlimit += 1;
            self.vars.refused();
            return Err(Box::new(Dropped { pkt, cause: DropCause::Queue }));
        }
        match self.vars.verdict(&self.prm, self.q.bytes(), &mut pkt, &mut self.rng) {
            Verdict::Drop => {
                self.counters.aqm_drops += 1;
                return Err(Box::new(Dropped { pkt, cause: DropCause::Aqm }));
            }
            Verdict::Mark => self.counters.ecn_marks += 1,
            Verdict::Enqueue => {}
        }
        self.counters.packets_in += 1;
        self.counters.maxq = self.counters.maxq.max(self.q.len());
        self.q.push(pkt, now);
        Ok(())
    }

    fn dequeue(&mut self, now: Nanos, _drops: &mut Vec<Dropped>) -> Option<Packet> {
        let p = self.q.pop()?;
        self.vars.on_dequeue(now.saturating_sub(p.enqueued), self.q.bytes(), now);
        Some(p)
    }

    fn queues(&self) -> &[Fifo] {
        std::slice::from_ref(&self.q)
    }

    fn next_timer(&self) -> Option<Nanos> {
        Some(self.next_update)
    }

    fn on_timer(&mut self, now: Nanos) {
        if tick(&mut self.next_update, self.prm.tupdate, now) {
            self.vars.update(&self.prm, self.q.bytes());
            let c = &mut self.counters;
            c.updates += 1;
            c.prob_sum += self.vars.prob;
            c.prob_max = c.prob_max.max(self.vars.prob);
        }
    }

    fn kind(&self) -> &'static str {
        "pie"
    }

    fn base_prob(&self) -> Option<f64> {
        Some(self.vars.prob)
    }

    fn stats_json(&self) -> Option<Value> {
        let c = &self.counters;
        Some(json!({
            "kind": "pie",
            "prob": self.vars.prob,
            "prob_mean": if c.updates > 0 { c.prob_sum / c.updates as f64 } else { 0.0 },
            "prob_max": c.prob_max,
            "qdelay_us": self.vars.qdelay as f64 / 1e3,
            "updates": c.updates,
            "packets_in": c.packets_in,
            "overlimit_drops": c.overlimit,
            "aqm_drops": c.aqm_drops,
            "ecn_marks": c.ecn_marks,
            "max_queue_pkts": c.maxq,
        }))
    }

    fn control_state(&self, _now: Nanos, _max_flows: usize) -> QdiscState {
        let (c, v, p) = (&self.counters, &self.vars, &self.prm);
        let mut s = QdiscState::basic("pie", self.len(), self.bytes());
        s.params = vec![
            ("prob", Scalar::F(v.prob)),
            ("qdelay_ms", Scalar::F(v.qdelay as f64 / 1e6)),
            ("qdelay_old_ms", Scalar::F(v.qdelay_old as f64 / 1e6)),
            ("burst_allowance_ms", Scalar::F(v.burst_left(p) as f64 / 1e6)),
            ("target_ms", Scalar::F(p.target as f64 / 1e6)),
            ("tupdate_ms", Scalar::F(p.tupdate as f64 / 1e6)),
            ("alpha", Scalar::F(p.alpha)),
            ("beta", Scalar::F(p.beta)),
            ("ecn", Scalar::B(p.ecn)),
            ("bytemode", Scalar::B(p.bytemode)),
            ("limit_pkts", Scalar::U(self.limit as u64)),
            ("updates", Scalar::U(c.updates)),
            ("enqueued_pkts", Scalar::U(c.packets_in)), // "packets_in" is the direction's
            ("overlimit_drops", Scalar::U(c.overlimit)),
            ("aqm_drops", Scalar::U(c.aqm_drops)),
            ("ecn_marks", Scalar::U(c.ecn_marks)),
        ];
        s
    }

    fn drain(&mut self) -> Vec<Packet> {
        self.q.take_all().collect()
    }
}

#[cfg(test)]
mod tests;
