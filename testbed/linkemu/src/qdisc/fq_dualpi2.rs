//! fq_dualpi2: paper 000's "L4S" AQM for FreeBSD (sections 3.1 and 4):
//! FQ-PIE turned into hashed *pairs* of an L4S and a Classic queue, each
//! pair a coupled dual-queue AQM (RFC 9332's structure, PIE as the base
//! controller).
//!
//! **Classification** (paper Algorithm 5).  `flows` FIFOs in all (paper: 6),
//! `flows` / 2 pairs.  A packet's 5-tuple hash picks its pair (the paper uses
//! Jenkins; here the seeded hash of [`crate::flow`], as fq_pie; packets
//! without a 5-tuple go to pair 0); a packet whose ECN field is not zero
//! (ECT(0), ECT(1) or CE: the paper's `(ip_tos & IPTOS_ECN_MASK) != 0`) goes
//! to the pair's L queue, a Not-ECT packet to its C queue.  The paper's
//! FIFO index `idx` (C) / `idx + flows/2` (L) is the `queue` of the state and
//! statistics below as a pair index; [`Qdisc::queues`] lists pair `i`'s C
//! FIFO at `2 i` and its L FIFO at `2 i + 1`.
//!
//! **Base probability** (Algorithms 6-7).  Each pair has a PIE controller
//! ([`PieVars`], the code of `pie` and `fq_pie`, auto-tuning included)
//! updated every `tupdate` from its **C queue's** delay (the sojourn of the
//! last packet that left the C queue, 0 if it emptied it): its p is the
//! pair's p' (the paper's `drop_prob_Pdash_flow_i`).  From it:
//!
//! ```text
//!   p_C  = p'^2                 Classic (Not-ECT) packets: dropped
//!   p_CL = k p'                 coupled L4S marking probability, k = 2
//!   p_L  = max(p_native, p_CL)  L4S packets: CE-marked
//! ```
//!
//! * **Classic** packets are dropped at enqueue (PIE decides at enqueue, so
//!   does the paper's pie_enqueue()) with probability p'^2 by two
//!   independent draws below p' (DualPI2's "think twice"), under PIE's
//!   enqueue rules ([`PieVars::may_drop_early`]): not while the burst
//!   allowance lasts, not while the C delay is below target/2 with p' < 20 %,
//!   not while the C queue holds less than 2 MTU.  PIE's de-randomisation is
//!   *not* applied to p_C (it would make the drop rate ~p'^2 / 1.85 and undo
//!   the coupling's square law).  Classic packets are never ECN-capable
//!   under this classifier, so they are never marked.
//! * **L4S** packets are decided at dequeue, where their sojourn is known
//!   (RFC 9332 / Linux DualPI2): the native AQM is a step, p_native = 1 when
//!   the packet waited more than `l_min_th` (1 ms) and at least one more L
//!   packet is queued behind it (RFC 9332's Th_len = 1), else 0; the coupled
//!   part k p' counts while the pair holds 2 MTU (Linux DualPI2's rule, the
//!   leaving packet excluded); one uniform draw below p_L marks CE (a
//!   Bernoulli draw, as PIE's; DualPI2's deterministic recur() is not used).
//! * **Overload** (`drop_on_overload`, as `dualpi2`): while k p' > 1 an L
//!   packet is first dropped with probability p'^2, then the rest marked
//!   (p_L = 1).  Without it, p' is capped at 1/k after each update.
//!
//! **Scheduler.**  fq_pie's deficit round robin ([`super::drr`], `quantum`
//! 1514 bytes, new and old lists) rotates over the *pairs* (the paper's "flow
//! queueing scheduler ... across our three DualPi2 L4S AQMs"); within a pair
//! the L queue has precedence, conditionally: DualPI2's WRR credit
//! ([`WrrCredit`]) gives the C queue `c_weight_pct` (10 %) of the pair's
//! bytes while both are backlogged (the paper's "conditional priority ...
//! small weight ... for C traffic").  A pair's quantum is spent by whichever
//! of its queues sends.
//!
//! **Limit.**  `limit_pkts` packets in all queues together; an arrival beyond
//! it is dropped (fq_pie's rule), counted per class.
//!
//! **Updates.**  Every pair's controller is updated on one fixed-grid timer
//! (PIE's [`tick`]); a pair at rest with empty queues is skipped (the update
//! would change nothing), as in fq_pie.
//!
//! **Statistics** (summary.json `qdisc_stats`): fq_pie's per-flow counters
//! ([`super::flow_stats`]: L4S marks counted as the packet leaves, Classic
//! p_C drops and L overload drops as `aqm`, limit drops as `overflow`), per
//! class (`classic`, `l4s`) packets in/out, limit and AQM drops, marks (L:
//! native / coupled), sojourn mean and max, and per pair p' (now, mean and
//! largest over the updates), p_C, p_CL.  `base_prob` (intervals.csv's
//! `p_prime`) is the largest p' of the pairs.
//!
//! **Control socket**: read-only state (per pair holding packets its p',
//! p_C, p_CL, per-class backlog and head delay; the parameters and
//! counters); every `set` is refused.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde_json::{json, Value};

use super::control::{QdiscState, Scalar};
use super::drr::FlowQueues;
use super::dualpi2::{WrrCredit, MTU_BYTES};
use super::fifo::Fifo;
use super::flow_stats::FlowDrop;
use super::pie::{tick, PieParams, PieVars};
use super::{DropCause, Dropped, Qdisc};
use crate::config;
use crate::packet::{Packet, QClass};
use crate::time::Nanos;

/// FIFO of a pair: Classic, L4S.
pub const C: usize = 0;
pub const L: usize = 1;

/// One pair's state: its base PIE controller, its WRR credit, p' statistics.
#[derive(Debug, Clone)]
pub struct Pair {
    pub pie: PieVars,
    wrr: WrrCredit,
    p_sum: f64,
    p_max: f64,
}

impl Default for Pair {
    fn default() -> Self {
        Pair { pie: PieVars::default(), wrr: WrrCredit::new(10.0), p_sum: 0.0, p_max: 0.0 }
    }
}

/// What the discipline did, per class [C, L].
#[derive(Debug, Default, Clone)]
pub struct Counters {
    pub packets_in: [u64; 2],
    pub packets_out: [u64; 2],
    pub limit_drops: [u64; 2],
    /// Classic packets dropped with p_C at enqueue.
    pub c_drops: u64,
    /// L packets marked by the native step / by the coupled k p'.
    pub l_native_marks: u64,
    pub l_coupled_marks: u64,
    /// L packets dropped in overload (k p' > 1).
    pub l_overload_drops: u64,
    pub sojourn_sum: [u128; 2],
    pub sojourn_max: [Nanos; 2],
}

pub struct FqDualPi2 {
    prm: PieParams,
    k: f64,
    l_min_th: Nanos,
    c_weight_pct: f64,
    drop_on_overload: bool,
    limit: usize,
    fq: FlowQueues<Pair>,
    next_update: Nanos,
    rng: Pcg64Mcg,
    updates: u64,
    pub counters: Counters,
}

fn ms(v: f64) -> Nanos {
    (v * 1e6).round() as Nanos
}

fn to_ms(ns: Nanos) -> f64 {
    ns as f64 / 1e6
}

impl FqDualPi2 {
    /// The discipline a validated config describes; `seed` seeds the flow hash and the draws.
    pub fn from_config(c: &config::FqDualPi2, seed: u64) -> Self {
        let prm = PieParams {
            target: ms(c.target_ms),
            tupdate: ms(c.tupdate_ms).max(1),
            alpha: c.alpha,
            beta: c.beta,
            max_burst: ms(c.max_burst_ms),
            ecn: false,
            ecn_prob: 0.0,
            bytemode: false,
        };
        let pairs = c.flows / 2;
        let mut fq: FlowQueues<Pair> = FlowQueues::with_classes(pairs, 2, c.quantum, seed);
        for i in 0..pairs {
            fq.vars_mut(i).wrr = WrrCredit::new(c.c_weight_pct);
        }
        Self {
            prm,
            k: c.k,
            l_min_th: ms(c.l_min_th_ms),
            c_weight_pct: c.c_weight_pct,
            drop_on_overload: c.drop_on_overload,
            limit: c.limit_pkts,
            fq,
            next_update: 0,
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0xf9d2_9152_0000_0001),
            updates: 0,
            counters: Counters::default(),
        }
    }

    pub fn pairs(&self) -> usize {
        self.fq.slot_count()
    }

    /// The pair a packet goes to (its 5-tuple's hash; 0 without one).
    pub fn pair_of(&self, pkt: &Packet) -> usize {
        pkt.flow_key().map_or(0, |k| self.fq.bucket_of(&k))
    }

    /// Paper 000's classifier: L4S iff the ECN field is not zero.
    pub fn class_of(pkt: &Packet) -> QClass {
        if pkt.ecn().capable() {
            QClass::L4s
        } else {
            QClass::Classic
        }
    }

    /// p' of pair `i`.
    pub fn p_prime(&self, i: usize) -> f64 {
        self.fq.vars(i).pie.prob()
    }

    /// Set p' of pair `i` (tests: without timer calls it stays).
    pub fn set_p_prime(&mut self, i: usize, p: f64) {
        self.fq.vars_mut(i).pie.set_prob(p);
    }

    /// The parameters of the pairs' PIE controllers.
    pub fn pie_params(&self) -> &PieParams {
        &self.prm
    }

    /// The base controller of pair `i`.
    pub fn pie(&self, i: usize) -> &PieVars {
        &self.fq.vars(i).pie
    }

    /// Packets in pair `i`'s [C, L] queues.
    pub fn pair_lens(&self, i: usize) -> [usize; 2] {
        [self.fq.fifo(i, C).len(), self.fq.fifo(i, L).len()]
    }

    fn head_delay(&self, i: usize, class: usize, now: Nanos) -> Nanos {
        self.fq.fifo(i, class).head_enqueued().map_or(0, |t| now.saturating_sub(t))
    }

    /// One update of every pair's controller not at rest.
    fn update_all(&mut self) {
        let cap = if self.drop_on_overload { 1.0 } else { (1.0 / self.k).min(1.0) };
        for i in 0..self.fq.slot_count() {
            let (backlog, empty) = (self.fq.fifo(i, C).bytes(), self.fq.queue_len(i) == 0);
            let v = self.fq.vars_mut(i);
            if !(empty && v.pie.at_rest()) {
                v.pie.update(&self.prm, backlog);
                if v.pie.prob() > cap {
                    v.pie.set_prob(cap);
                }
            }
            let p = v.pie.prob();
            v.p_sum += p;
            v.p_max = v.p_max.max(p);
        }
        self.updates += 1;
    }

    fn class_json(&self, i: usize) -> Value {
        let c = &self.counters;
        let mean_us = if c.packets_out[i] > 0 { c.sojourn_sum[i] as f64 / c.packets_out[i] as f64 / 1e3 } else { 0.0 };
        let mut v = json!({
            "packets_in": c.packets_in[i],
            "packets_out": c.packets_out[i],
            "limit_drops": c.limit_drops[i],
            "sojourn_us": {"mean": mean_us, "max": c.sojourn_max[i] as f64 / 1e3},
        });
        let m = v.as_object_mut().expect("an object");
        if i == C {
            m.insert("aqm_drops".into(), json!(c.c_drops));
        } else {
            m.insert("native_marks".into(), json!(c.l_native_marks));
            m.insert("coupled_marks".into(), json!(c.l_coupled_marks));
            m.insert("overload_drops".into(), json!(c.l_overload_drops));
        }
        v
    }
}

impl Qdisc for FqDualPi2 {
    fn enqueue(&mut self, mut pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        let idx = self.fq.classify(&mut pkt);
        pkt.class = Self::class_of(&pkt);
        let i = if pkt.class == QClass::L4s { L } else { C };
        if self.fq.len() >= self.limit {
            self.counters.limit_drops[i] += 1;
            if i == C {
                self.fq.vars_mut(idx).pie.refused();
            }
            self.fq.stats.on_drop(&pkt, FlowDrop::Overflow);
            return Err(Box::new(Dropped { pkt, cause: DropCause::Queue }));
        }
        if i == C {
            let backlog = self.fq.fifo(idx, C).bytes();
            let pie = &self.fq.vars(idx).pie;
            let p = pie.prob();
            if pie.may_drop_early(&self.prm, backlog) && self.rng.random::<f64>() < p && self.rng.random::<f64>() < p {
                self.counters.c_drops += 1;
                self.fq.stats.on_drop(&pkt, FlowDrop::Aqm);
                return Err(Box::new(Dropped { pkt, cause: DropCause::Aqm }));
            }
        }
        self.counters.packets_in[i] += 1;
        self.fq.push_class(idx, i, pkt, now);
        Ok(())
    }

    fn dequeue(&mut self, now: Nanos, drops: &mut Vec<Dropped>) -> Option<Packet> {
        let (k, l_min_th, dool) = (self.k, self.l_min_th, self.drop_on_overload);
        let (rng, c) = (&mut self.rng, &mut self.counters);
        self.fq.dequeue(now, drops, |pair, src, now, drops| {
            let q = src.classes();
            loop {
                let (nc, nl) = (q[C].len(), q[L].len());
                if nc == 0 && nl == 0 {
                    pair.wrr.reset();
                    return None;
                }
                let i = if nl == 0 {
                    C
                } else if nc == 0 || pair.wrr.serve_l() {
                    L
                } else {
                    C
                };
                let other_backlogged = !q[1 - i].is_empty();
                let mut p = q[i].pop().expect("picked a non-empty queue");
                let sojourn = now.saturating_sub(p.enqueued);
                let len = p.ip_len();
                let mut marked = false;
                if i == C {
                    pair.pie.on_dequeue(sojourn, q[C].bytes(), now);
                } else {
                    let pp = pair.pie.prob();
                    let pi_active = q[C].bytes() + q[L].bytes() >= 2 * MTU_BYTES;
                    if pi_active && dool && k * pp > 1.0 && rng.random::<f64>() < pp && rng.random::<f64>() < pp {
                        c.l_overload_drops += 1;
                        drops.push(Dropped { pkt: p, cause: DropCause::Aqm });
                        continue;
                    }
                    let native: f64 = if !q[L].is_empty() && sojourn > l_min_th { 1.0 } else { 0.0 };
                    let coupled = if pi_active { (k * pp).min(1.0) } else { 0.0 };
                    let p_l = native.max(coupled);
                    if p_l > 0.0 && (p_l >= 1.0 || rng.random::<f64>() < p_l) && p.mark_ce() {
                        marked = true;
                        if native >= coupled {
                            c.l_native_marks += 1;
                        } else {
                            c.l_coupled_marks += 1;
                        }
                    }
                }
                if other_backlogged {
                    pair.wrr.served(i == L, len);
                }
                c.packets_out[i] += 1;
                c.sojourn_sum[i] += sojourn as u128;
                c.sojourn_max[i] = c.sojourn_max[i].max(sojourn);
                return Some((p, marked));
            }
        })
    }

    /// Pair `i`'s C FIFO at `2 i`, its L FIFO at `2 i + 1`.
    fn queues(&self) -> &[Fifo] {
        self.fq.queues()
    }

    fn len(&self) -> usize {
        self.fq.len()
    }

    fn bytes(&self) -> usize {
        self.fq.bytes()
    }

    fn head_enqueued(&self) -> Option<Nanos> {
        self.fq.head_enqueued()
    }

    fn next_timer(&self) -> Option<Nanos> {
        Some(self.next_update)
    }

    fn on_timer(&mut self, now: Nanos) {
        if tick(&mut self.next_update, self.prm.tupdate, now) {
            self.update_all();
        }
    }

    fn kind(&self) -> &'static str {
        "fq_dualpi2"
    }

    fn class_lens(&self) -> Option<[usize; 2]> {
        let mut n = [0, 0];
        for i in 0..self.pairs() {
            let l = self.pair_lens(i);
            n[0] += l[C];
            n[1] += l[L];
        }
        Some(n)
    }

    /// The largest p' of the pairs.
    fn base_prob(&self) -> Option<f64> {
        Some((0..self.pairs()).map(|i| self.p_prime(i)).fold(0.0, f64::max))
    }

    fn stats_json(&self) -> Option<Value> {
        let n = self.updates.max(1) as f64;
        let pairs: Vec<Value> = (0..self.pairs())
            .map(|i| {
                let v = self.fq.vars(i);
                let p = v.pie.prob();
                json!({"pair": i, "p_prime": p, "p_prime_mean": v.p_sum / n, "p_prime_max": v.p_max,
                       "p_c": p * p, "p_cl": (self.k * p).min(1.0)})
            })
            .collect();
        let extra = json!({
            "flow_queues": self.pairs() * 2,
            "k": self.k,
            "updates": self.updates,
            "classes": {"classic": self.class_json(C), "l4s": self.class_json(L)},
            "pairs": pairs,
        });
        Some(self.fq.stats_json("fq_dualpi2", extra))
    }

    fn drain(&mut self) -> Vec<Packet> {
        self.fq.drain()
    }

    fn control_state(&self, now: Nanos, max_flows: usize) -> QdiscState {
        let mut flows = self.fq.flow_states(None, max_flows);
        for f in &mut flows {
            let i = f.queue;
            let p = self.p_prime(i);
            let [nc, nl] = self.pair_lens(i);
            f.extra = vec![
                ("p_prime", Scalar::F(p)),
                ("p_c", Scalar::F(p * p)),
                ("p_cl", Scalar::F((self.k * p).min(1.0))),
                ("qdelay_ms", Scalar::F(to_ms(self.pie(i).qdelay()))),
                ("classic_pkts", Scalar::U(nc as u64)),
                ("l4s_pkts", Scalar::U(nl as u64)),
                ("classic_delay_ms", Scalar::F(to_ms(self.head_delay(i, C, now)))),
                ("l4s_delay_ms", Scalar::F(to_ms(self.head_delay(i, L, now)))),
            ];
        }
        let (p, c) = (&self.prm, &self.counters);
        let lens = self.class_lens().unwrap_or_default();
        let mut s = QdiscState::basic("fq_dualpi2", self.len(), self.bytes());
        s.flows = Some(flows);
        s.flows_active = self.fq.active();
        s.params = vec![
            ("pairs", Scalar::U(self.pairs() as u64)),
            ("flow_queues", Scalar::U(2 * self.pairs() as u64)),
            ("limit_pkts", Scalar::U(self.limit as u64)),
            ("k", Scalar::F(self.k)),
            ("l_min_th_ms", Scalar::F(to_ms(self.l_min_th))),
            ("c_weight_pct", Scalar::F(self.c_weight_pct)),
            ("drop_on_overload", Scalar::B(self.drop_on_overload)),
            ("target_ms", Scalar::F(to_ms(p.target))),
            ("tupdate_ms", Scalar::F(to_ms(p.tupdate))),
            ("alpha", Scalar::F(p.alpha)),
            ("beta", Scalar::F(p.beta)),
            ("p_prime_max", Scalar::F(self.base_prob().unwrap_or(0.0))),
            ("classic_pkts", Scalar::U(lens[C] as u64)),
            ("l4s_pkts", Scalar::U(lens[L] as u64)),
            ("updates", Scalar::U(self.updates)),
            ("classic_packets_in", Scalar::U(c.packets_in[C])),
            ("l4s_packets_in", Scalar::U(c.packets_in[L])),
            ("classic_limit_drops", Scalar::U(c.limit_drops[C])),
            ("l4s_limit_drops", Scalar::U(c.limit_drops[L])),
            ("classic_drops", Scalar::U(c.c_drops)),
            ("l4s_native_marks", Scalar::U(c.l_native_marks)),
            ("l4s_coupled_marks", Scalar::U(c.l_coupled_marks)),
            ("l4s_overload_drops", Scalar::U(c.l_overload_drops)),
        ];
        s
    }
}
