//! DualPI2: the Dual-Queue Coupled AQM of L4S (RFC 9332, Appendix A; Linux
//! net/sched/sch_dualpi2.c, mainline since 6.17).
//!
//! Two FIFOs share the link.  The classifier puts L4S packets (ECN field
//! ECT(1) or CE, RFC 9331's identifier) into the L queue and everything else
//! (Not-ECT and classic ECN, ECT(0)) into the C queue.  Senders that cannot set
//! ECT(1) (e.g. a DCTCP-like BPF congestion control on a kernel that only sends
//! ECT(0)) can be steered by DSCP instead: with `classifier = "dscp"` a packet
//! goes to L iff its DSCP is in `l_dscp`, whatever its ECN field.
//!
//! **Base PI controller.**  Every `tupdate` (16 ms) a PI controller updates
//! the base probability p' from the queueing delay q (the sojourn so far of
//! the packet at the head of the queue; the larger of the two heads, as Linux
//! does):
//!
//! ```text
//!   p' <- p' + alpha * (q - target) + beta * (q - q_prev)        (q in seconds)
//!   p' clamped to [0, 1]    ([0, 1/k] when drop_on_overload is off)
//! ```
//!
//! alpha = 0.16 Hz and beta = 3.2 Hz (Linux's defaults, 41/256 and 819/256; RFC
//! 9332 Figure 2 derives alpha = 0.1 * Tupdate / RTT_max^2 = 0.16 Hz and beta =
//! 0.3 / RTT_max = 3 Hz for RTT_max = 100 ms and Tupdate = 16 ms; both give a
//! ~10 dB stability margin up to a 100 ms RTT), target = 15 ms.  The gains are
//! "per update": a queue 10 ms above target raises p' by 0.0016 every 16 ms.
//!
//! **Coupling.**  From p' come the two probabilities that make a Classic
//! (Reno/CUBIC, rate ~ 1/sqrt(p)) flow and a scalable (DCTCP/Prague, rate ~
//! 1/p) flow get roughly equal rates:
//!
//! ```text
//!   p_C  = p'^2          Classic drop (Not-ECT) or mark (ECT(0)) probability
//!   p_CL = k * p'        coupled L4S marking probability, k = 2
//!   p_L  = max(p_native, p_CL)
//! ```
//!
//! p_C is applied by "thinking twice": a Classic packet is hit when two
//! independent uniform draws are both below p' (Linux; the RFC's rand() < p'^2
//! is equivalent).  p_native is the L queue's own shallow AQM on the sojourn
//! time s of the packet leaving: a step (mark when s > `l_min_th` = 1 ms) or,
//! with `l_max_th` > `l_min_th`, a ramp from 0 at l_min_th to 1 at l_max_th.
//! It only acts while at least `l_min_qlen` (RFC's Th_len = 1) other packets
//! are in the L queue, so a lone packet is never marked for the time it waited
//! behind the transmitter.  L packets are marked with p_L using the RFC's
//! deterministic recur() accumulator (marks exactly every 1/p_L packets, no
//! randomness), counted per cause (native vs coupled).
//!
//! **Marking vs dropping.**  ECN-capable packets (ECT(0), ECT(1), CE) are
//! CE-marked instead of dropped (the IPv4 header checksum is fixed by
//! `Packet::mark_ce`); Not-ECT packets are dropped.  Drops happen at dequeue
//! (as RFC Figure 4 and Linux by default).  No PI drop or mark happens while
//! both queues together hold less than 2 MTU (Linux's heuristic, like RED's
//! min_th; the native L AQM is not affected).
//!
//! **Overload** (RFC 9332 section 4.2.1, Appendix A.2).  When p_CL = k p'
//! exceeds 1 (p_C > p_Cmax = 1/k^2 = 0.25), marking can no longer hold the
//! queue, and with `drop_on_overload` (default, Linux drop_overload=1) ECN is
//! disabled: Classic ECT packets hit with p_C are dropped instead of marked,
//! and L packets are dropped with probability p_C (then the rest marked with
//! p_L = 1), so unresponsive traffic cannot take the queue delay up to the
//! limit.  With it off, p' is capped at 1/k, everything keeps being marked and
//! the queues may grow up to `limit_pkts` (tail drop).
//!
//! **Scheduler** between the queues:
//! * `wrr` (default; Linux's "C protection"): the L queue has priority, but
//!   the C queue gets a `c_weight_pct` (10 %) share of the bytes when both are
//!   backlogged, by a credit counter: serving L adds wc * len, serving C
//!   subtracts wl * len (wl = 100 - wc), C is served while credit > 0; the
//!   credit resets to MTU * (wc - wl) whenever both queues are empty.
//! * `tsfifo` (RFC 9332 Appendix A's example): time-shifted FIFO, serve L
//!   unless the C head has waited more than `tshift` (50 ms, the value of the
//!   ns-3 implementation of the RFC's pseudocode) longer than the L head.
//!
//! **Limit.**  `limit_pkts` (10000, Linux) packets in both queues together;
//! beyond it arrivals are tail-dropped (`DropCause::Queue`).
//!
//! **Deviations from RFC 9332 / Linux**, all small: the PI input is max(C head,
//! L head) delay (Linux; the RFC uses the C head only); recur() fires when its
//! accumulator reaches 1 (the RFC: exceeds 1, which skips the first of a run of
//! certain marks); the limit counts packets (Linux) not bytes (RFC), there is
//! no memory limit; no GSO splitting (the emulator sees MTU-sized packets);
//! no drop-at-enqueue option; probabilities are f64 instead of Linux's u32
//! fixed point; the random stream is a seeded PCG (reproducible in virtual
//! time).  The PI timer runs on the link's clock (`next_timer`/`on_timer`), at
//! multiples of tupdate from its first call.
//!
//! **Control socket** (`dualpi2/control.rs`): an agent may fix p' (the PI
//! controller then only watches) or hand it back, and change k, at run time.
//! Its state also counts the active flows per class (`dualpi2/active_flows.rs`).

mod active_flows;
mod control;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde_json::{json, Value};

use super::control::{QdiscState, SetApplied, SetParams};
use super::fifo::Fifo;
use super::{DropCause, Dropped, Qdisc};
use crate::config;
use crate::packet::{Ecn, Packet, QClass};
use crate::time::Nanos;

/// MTU used by the 2-MTU no-drop rule and the WRR credit (Linux: psched_mtu of the device).
pub const MTU_BYTES: usize = 1500;

/// Which packets go to the L queue.
#[derive(Debug, Clone)]
pub enum Classifier {
    /// ECT(1) and CE (RFC 9331's L4S identifier).
    Ecn,
    /// The DSCPs marked true.
    Dscp(Box<[bool; 64]>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scheduler {
    /// Weighted round robin with credit; C weight in percent.
    Wrr { c_weight_pct: f64 },
    /// Time-shifted FIFO.
    TsFifo { tshift: Nanos },
}

/// The `wrr` scheduler's credit counter (module comment, "Scheduler"; Linux's
/// C protection), also fq_dualpi2's between the two queues of a pair.
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

/// Every parameter, in the emulator's units (see the module comment).
#[derive(Debug, Clone)]
pub struct Params {
    pub limit_pkts: usize,
    pub target: Nanos,
    pub tupdate: Nanos,
    pub alpha_hz: f64,
    pub beta_hz: f64,
    pub k: f64,
    pub l_min_th: Nanos,
    pub l_max_th: Nanos,
    pub l_min_qlen: usize,
    pub classifier: Classifier,
    pub scheduler: Scheduler,
    pub drop_on_overload: bool,
}

fn ms(v: f64) -> Nanos {
    (v * 1e6).round() as Nanos
}

impl Params {
    pub fn from_config(c: &config::DualPi2) -> Params {
        let classifier = if c.classifier == "dscp" {
            let mut set = Box::new([false; 64]);
            for &d in &c.l_dscp {
                set[(d & 63) as usize] = true;
            }
            Classifier::Dscp(set)
        } else {
            Classifier::Ecn
        };
        let scheduler = if c.scheduler == "tsfifo" {
            Scheduler::TsFifo { tshift: ms(c.tshift_ms) }
        } else {
            Scheduler::Wrr { c_weight_pct: c.c_weight_pct }
        };
        Params {
            limit_pkts: c.limit_pkts,
            target: ms(c.target_ms),
            tupdate: ms(c.tupdate_ms).max(1),
            alpha_hz: c.alpha_hz,
            beta_hz: c.beta_hz,
            k: c.k,
            l_min_th: ms(c.l_min_th_ms),
            l_max_th: ms(c.l_max_th_ms.unwrap_or(c.l_min_th_ms)),
            l_min_qlen: c.l_min_qlen_pkts,
            classifier,
            scheduler,
            drop_on_overload: c.drop_on_overload,
        }
    }
}

impl Default for Params {
    /// RFC 9332 / Linux defaults.
    fn default() -> Self {
        Params::from_config(&config::DualPi2::default())
    }
}

/// What the discipline did, for summary.json.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// Packets accepted per class [C, L].
    pub packets_in: [u64; 2],
    /// Tail drops at the limit per class [C, L].
    pub limit_drops: [u64; 2],
    /// L packets marked because of the native (step/ramp) AQM.
    pub l_native_marks: u64,
    /// L packets marked because of the coupled probability p_CL.
    pub l_coupled_marks: u64,
    /// L packets dropped in overload.
    pub l_overload_drops: u64,
    /// L packets the L queue wanted to mark but could not (Not-ECT via DSCP): dropped.
    pub l_unmarkable_drops: u64,
    /// Classic ECT packets marked with p_C.
    pub c_marks: u64,
    /// Classic packets dropped with p_C (Not-ECT, or ECT in overload).
    pub c_drops: u64,
    /// Of c_drops: ECT packets dropped because of overload.
    pub c_overload_drops: u64,
    /// PI updates, and those that ended overloaded (k p' > 1).
    pub updates: u64,
    pub overload_updates: u64,
    pub p_sum: f64,
    pub p_max: f64,
    /// Fixed p' values whose lease (`hold_ms`) ran out, handing p' back to the PI controller.
    pub lease_expiries: u64,
    /// PI updates during which p' was fixed through the control socket.
    pub manual_updates: u64,
    /// PI updates whose p' a residual agent scaled (`prob_scale` != 1).
    pub scaled_updates: u64,
    /// k values set with `hold_ms` whose lease ran out, putting the configured k back
    /// (apart from `lease_expiries`: see the control module's comment).
    pub k_lease_expiries: u64,
}

pub struct DualPi2 {
    prm: Params,
    /// [C, L]
    q: [Fifo; 2],
    /// Base probability p' (the one applied).
    p: f64,
    /// The PI controller's own p' (its integrator): equal to `p` unless a
    /// residual agent scales it (`prob_scale`), or `p` is fixed (`manual`).
    p_pi: f64,
    /// A residual agent's factor on the PI controller's p' (1: PI alone).
    scale: f64,
    /// ... until this instant (the `set`'s `hold_ms` lease), or for good (None).
    scale_until: Option<Nanos>,
    /// p' is fixed by the control socket (the PI controller is paused).
    manual: bool,
    /// ... until this instant (the `set`'s `hold_ms` lease), or for good (None).
    manual_until: Option<Nanos>,
    /// The configuration's k (`prm.k` is the one applied, which the control socket may change).
    k_conf: f64,
    /// A k set through the control socket with `hold_ms` holds until this
    /// instant, then `k_conf` is back (None: no lease; a k set without one stays).
    k_until: Option<Nanos>,
    q_prev: Nanos,
    next_update: Nanos,
    /// recur() accumulator of the L marking decision.
    recur_l: f64,
    wrr: WrrCredit,
    rng: Pcg64Mcg,
    pub counters: Counters,
    /// Flows per class with an arrival in the last 200 ms (the control state's `l4s_flows`, `classic_flows`).
    active: active_flows::ActiveFlows,
}

const C: usize = 0;
const L: usize = 1;

impl DualPi2 {
    pub fn new(prm: Params, seed: u64) -> DualPi2 {
        let c_weight_pct = match prm.scheduler {
            Scheduler::Wrr { c_weight_pct } => c_weight_pct,
            Scheduler::TsFifo { .. } => 0.0, // the credit is not used
        };
        DualPi2 {
            k_conf: prm.k,
            k_until: None,
            prm,
            q: [Fifo::default(), Fifo::default()],
            p: 0.0,
            p_pi: 0.0,
            scale: 1.0,
            scale_until: None,
            manual: false,
            manual_until: None,
            q_prev: 0,
            next_update: 0,
            recur_l: 0.0,
            wrr: WrrCredit::new(c_weight_pct),
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0xd0a1_9152_0000_0001),
            counters: Counters::default(),
            active: active_flows::ActiveFlows::default(),
        }
    }

    pub fn params(&self) -> &Params {
        &self.prm
    }

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
    fn p_ceiling(&self) -> f64 {
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

    /// The class a packet belongs to.
    pub fn classify(&self, pkt: &Packet) -> QClass {
        let l4s = match &self.prm.classifier {
            Classifier::Ecn => matches!(pkt.ecn(), Ecn::Ect1 | Ecn::Ce),
            Classifier::Dscp(set) => pkt.is_ip() && set[pkt.dscp() as usize],
        };
        if l4s {
            QClass::L4s
        } else {
            QClass::Classic
        }
    }

    /// Queue delay of a queue's head at `now`.
    fn head_delay(&self, i: usize, now: Nanos) -> Nanos {
        self.q[i].head_enqueued().map_or(0, |t| now.saturating_sub(t))
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

    /// Native L4S AQM probability for a sojourn of `s`.
    fn laqm(&self, s: Nanos) -> f64 {
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
    fn recur(&mut self, likelihood: f64) -> bool {
        self.recur_l += likelihood;
        if self.recur_l >= 1.0 {
            self.recur_l -= 1.0;
            true
        } else {
            false
        }
    }

    /// "Think twice": true with probability p'^2.
    fn roll_p_c(&mut self) -> bool {
        let p = self.p;
        self.rng.random::<f64>() < p && self.rng.random::<f64>() < p
    }

    /// Which queue the scheduler serves next (both not empty: at least one is).
    fn pick(&self, now: Nanos) -> usize {
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

    fn credit_change(&mut self, served: usize, len: usize, other_backlogged: bool) {
        if matches!(self.prm.scheduler, Scheduler::Wrr { .. }) && other_backlogged {
            self.wrr.served(served == L, len);
        }
    }

    /// Packets per class [C, L].
    pub fn lens(&self) -> [usize; 2] {
        [self.q[C].len(), self.q[L].len()]
    }
}

impl Qdisc for DualPi2 {
    fn enqueue(&mut self, mut pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        pkt.class = self.classify(&pkt);
        let i = if pkt.class == QClass::L4s { L } else { C };
        self.active.on_arrival(pkt.flow_key(), i, now);
        if self.len() >= self.prm.limit_pkts {
            self.counters.limit_drops[i] += 1;
            return Err(Box::new(Dropped { pkt, cause: DropCause::Queue }));
        }
        self.counters.packets_in[i] += 1;
        self.q[i].push(pkt, now);
        Ok(())
    }

    fn dequeue(&mut self, now: Nanos, drops: &mut Vec<Dropped>) -> Option<Packet> {
        loop {
            if self.q[C].is_empty() && self.q[L].is_empty() {
                self.wrr.reset();
                return None;
            }
            let i = self.pick(now);
            let other_backlogged = !self.q[1 - i].is_empty();
            let mut p = self.q[i].pop().expect("picked a non-empty queue");
            let len = p.ip_len();
            // Linux: no PI-based drop or mark below 2 MTU of backlog (both queues).
            let pi_active = self.bytes() >= 2 * MTU_BYTES;
            let overloaded = self.overloaded();
            if i == L {
                if pi_active && overloaded && self.roll_p_c() {
                    self.counters.l_overload_drops += 1;
                    drops.push(Dropped { pkt: p, cause: DropCause::Aqm });
                    continue;
                }
                let sojourn = now.saturating_sub(p.enqueued);
                let native = if self.q[L].len() >= self.prm.l_min_qlen { self.laqm(sojourn) } else { 0.0 };
                let coupled = if pi_active { self.p_cl().min(1.0) } else { 0.0 };
                let p_l = native.max(coupled);
                if p_l > 0.0 && self.recur(p_l) {
                    if p.mark_ce() {
                        if native >= coupled {
                            self.counters.l_native_marks += 1;
                        } else {
                            self.counters.l_coupled_marks += 1;
                        }
                    } else {
                        // Not-ECT steered into L by DSCP: it cannot carry a mark.
                        self.counters.l_unmarkable_drops += 1;
                        drops.push(Dropped { pkt: p, cause: DropCause::Aqm });
                        continue;
                    }
                }
            } else if pi_active && self.roll_p_c() {
                if !overloaded && p.mark_ce() {
                    self.counters.c_marks += 1;
                } else {
                    self.counters.c_drops += 1;
                    if p.ecn().capable() {
                        self.counters.c_overload_drops += 1;
                    }
                    drops.push(Dropped { pkt: p, cause: DropCause::Aqm });
                    continue;
                }
            }
            self.credit_change(i, len, other_backlogged);
            return Some(p);
        }
    }

    /// [C, L]
    fn queues(&self) -> &[Fifo] {
        &self.q
    }

    fn next_timer(&self) -> Option<Nanos> {
        Some(self.next_update)
    }

    fn on_timer(&mut self, now: Nanos) {
        if self.next_update > 0 {
            self.update(now);
        }
        // Keep the grid of multiples of tupdate; skip ahead if the loop was late.
        self.next_update =
            if self.next_update == 0 { now + self.prm.tupdate } else { self.next_update + self.prm.tupdate };
        if self.next_update <= now {
            self.next_update = now + self.prm.tupdate;
        }
    }

    fn kind(&self) -> &'static str {
        "dualpi2"
    }

    fn class_lens(&self) -> Option<[usize; 2]> {
        Some(self.lens())
    }

    fn base_prob(&self) -> Option<f64> {
        Some(self.p)
    }

    fn stats_json(&self) -> Option<Value> {
        let c = &self.counters;
        Some(json!({
            "kind": "dualpi2",
            "p_prime": self.p,
            "p_prime_mean": if c.updates > 0 { c.p_sum / c.updates as f64 } else { 0.0 },
            "p_prime_max": c.p_max,
            "pi_updates": c.updates,
            "overload_updates": c.overload_updates,
            "manual_updates": c.manual_updates,
            "scaled_updates": c.scaled_updates,
            "lease_expiries": c.lease_expiries,
            "k_lease_expiries": c.k_lease_expiries,
            "packets_in": {"classic": c.packets_in[C], "l4s": c.packets_in[L]},
            "limit_drops": {"classic": c.limit_drops[C], "l4s": c.limit_drops[L]},
            "l4s_native_marks": c.l_native_marks,
            "l4s_coupled_marks": c.l_coupled_marks,
            "l4s_overload_drops": c.l_overload_drops,
            "l4s_unmarkable_drops": c.l_unmarkable_drops,
            "classic_marks": c.c_marks,
            "classic_drops": c.c_drops,
            "classic_overload_drops": c.c_overload_drops,
        }))
    }

    fn control_state(&self, now: Nanos, _max_flows: usize) -> QdiscState {
        self.state_for_control(now)
    }

    fn control_set(&mut self, set: &SetParams, now: Nanos) -> Result<SetApplied, String> {
        self.set_from_control(set, now)
    }

    fn drain(&mut self) -> Vec<Packet> {
        let mut v: Vec<Packet> = self.q[C].take_all().collect();
        v.extend(self.q[L].take_all());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::build;
    use crate::time::{NS_PER_MS, NS_PER_US};

    fn pkt(ecn: Ecn) -> Packet {
        Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], 1500, ecn), 0)
    }

    fn params() -> Params {
        Params::default()
    }

    #[derive(Default, Debug)]
    struct Tally {
        out: [u64; 2],
        marks: [u64; 2],
        drops: [u64; 2],
        /// Sum and count of sojourns per class (ns).
        soj_sum: [u128; 2],
        /// Sum of k p' over L packets served (expected coupled marks).
        p_cl_sum: f64,
        /// Sum of p'^2 over C packets served or dropped by the AQM.
        p_c_sum: f64,
    }

    /// A constant-rate server (one packet per `service`) fed by `arrivals`
    /// (instant, ECN) in order; the PI timer runs; tallies from `measure_from` on.
    fn run(
        q: &mut DualPi2,
        arrivals: impl Iterator<Item = (Nanos, Ecn)>,
        service: Nanos,
        until: Nanos,
        measure_from: Nanos,
    ) -> Tally {
        let mut t = Tally::default();
        let mut arrivals = arrivals.peekable();
        let mut next_out: Nanos = 0;
        let mut drops = vec![];
        loop {
            let na = arrivals.peek().map(|a| a.0).unwrap_or(Nanos::MAX);
            let nt = q.next_timer().unwrap();
            let now = na.min(nt).min(next_out);
            if now >= until {
                break;
            }
            if nt == now {
                q.on_timer(now);
            } else if na == now {
                let (_, ecn) = arrivals.next().unwrap();
                let _ = q.enqueue(pkt(ecn), now);
            } else {
                let before = (q.p_cl(), q.p_c());
                let got = q.dequeue(now, &mut drops);
                if now >= measure_from {
                    for d in &drops {
                        let i = (d.pkt.class == QClass::L4s) as usize;
                        t.drops[i] += 1;
                        if i == 0 {
                            t.p_c_sum += before.1;
                        }
                    }
                    if let Some(p) = &got {
                        let i = (p.class == QClass::L4s) as usize;
                        t.out[i] += 1;
                        t.marks[i] += p.marked as u64;
                        t.soj_sum[i] += now.saturating_sub(p.enqueued) as u128;
                        if i == 1 {
                            t.p_cl_sum += before.0.min(1.0);
                        } else {
                            t.p_c_sum += before.1;
                        }
                    }
                }
                drops.clear();
                next_out = now + service;
                if got.is_none() {
                    // Idle: poll again at the next arrival.
                    next_out = arrivals.peek().map(|a| a.0).unwrap_or(Nanos::MAX).max(now + 1);
                }
            }
        }
        t
    }

    /// Periodic arrivals every `gap` from 0 with a fixed ECN codepoint.
    fn periodic(gap: Nanos, ecn: Ecn) -> impl Iterator<Item = (Nanos, Ecn)> {
        (0..).map(move |i| (i * gap, ecn))
    }

    #[test]
    fn pi_holds_the_classic_queue_at_target_under_overload() {
        // Unresponsive Not-ECT traffic at 1.25x a 10 kpps link for 60 s: a
        // FIFO would grow without bound.  The PI must find the drop rate that
        // removes the excess (p_C = 0.2, p' = sqrt(0.2) = 0.447) with the C
        // queue sitting at its 15 ms target.
        let mut q = DualPi2::new(params(), 1);
        let service = 100 * NS_PER_US;
        let t = run(&mut q, periodic(80 * NS_PER_US, Ecn::NotEct), service, 60_000 * NS_PER_MS, 20_000 * NS_PER_MS);
        let mean_ms = t.soj_sum[0] as f64 / t.out[0] as f64 / 1e6;
        assert!((mean_ms - 15.0).abs() < 1.0, "mean C sojourn {mean_ms:.2} ms");
        let p = q.p_prime();
        assert!((p - 0.2f64.sqrt()).abs() < 0.03, "p' = {p}");
        let drop_frac = t.drops[0] as f64 / (t.drops[0] + t.out[0]) as f64;
        assert!((drop_frac - 0.2).abs() < 0.01, "drop fraction {drop_frac}");
        assert_eq!(t.marks[0], 0);
        assert!(!q.overloaded(), "p_C = 0.2 < 1/k^2: not overloaded once converged");
    }

    /// p' frozen at `p` (no timer), a standing queue of 20 packets of one
    /// codepoint, sojourn 0: (marks, AQM drops) over `n` packets served.
    fn frozen(p: f64, ecn: Ecn, n: usize) -> (usize, usize, DualPi2) {
        let mut q = DualPi2::new(params(), 2);
        q.set_p_prime(p);
        let mut d = vec![];
        let mut marks = 0;
        let mut served = 0;
        while served < n {
            while q.len() < 20 {
                q.enqueue(pkt(ecn), 0).unwrap();
            }
            if let Some(x) = q.dequeue(0, &mut d) {
                marks += x.marked as usize;
                served += 1;
            }
        }
        (marks, d.len(), q)
    }

    #[test]
    fn classic_ect_is_marked_until_overload() {
        // p' = 0.3: p_C = 0.09, not overloaded (k p' = 0.6 < 1).  Binomial sd of
        // the fraction over 40000 packets ~0.0015: 4 sd tolerance.
        let n = 40_000;
        let (marks, drops, _) = frozen(0.3, Ecn::Ect0, n);
        assert_eq!(drops, 0);
        assert!((marks as f64 / n as f64 - 0.09).abs() < 0.006, "{marks}");
        let (marks, drops, _) = frozen(0.3, Ecn::NotEct, n);
        assert_eq!(marks, 0);
        assert!((drops as f64 / (n + drops) as f64 - 0.09).abs() < 0.006, "{drops}");
        // p' = 0.6: k p' = 1.2 > 1, overloaded: ECT classic is dropped, not marked.
        let (marks, drops, q) = frozen(0.6, Ecn::Ect0, n);
        assert_eq!(marks, 0);
        assert!((drops as f64 / (n + drops) as f64 - 0.36).abs() < 0.01, "{drops}");
        assert_eq!(q.counters.c_overload_drops, drops as u64);
    }

    #[test]
    fn l_step_marks_above_the_threshold_only() {
        // 25 L packets at t = 0, served one every 100 us from 50 us: sojourns
        // 0.05, 0.15, ..., 2.45 ms.  p' = 0 (no PI update), so only the 1 ms
        // step marks: the packets with sojourn > 1 ms, except the last one
        // (alone in the queue: Th_len = 1).
        let mut q = DualPi2::new(params(), 3);
        for _ in 0..25 {
            q.enqueue(pkt(Ecn::Ect1), 0).unwrap();
        }
        let mut d = vec![];
        let mut marked = vec![];
        for i in 0..25u64 {
            let now = 50 * NS_PER_US + i * 100 * NS_PER_US;
            let p = q.dequeue(now, &mut d).unwrap();
            assert_eq!(p.class, QClass::L4s);
            if p.marked {
                marked.push(i);
                assert_eq!(p.ecn(), Ecn::Ce);
            }
        }
        assert!(d.is_empty());
        assert_eq!(marked, (10..24).collect::<Vec<u64>>());
        assert_eq!(q.counters.l_native_marks, 14);

        // A ramp from 0.5 to 1.5 ms: sojourns 0.55..1.45 ms are marked with
        // (s - 0.5)/1.0, i.e. 0.05, 0.15, ..., 0.95: recur() turns that into
        // exactly floor(sum) = 5 marks among those ten, then all above 1.5 ms.
        let mut prm = params();
        prm.l_min_th = 500 * NS_PER_US;
        prm.l_max_th = 1500 * NS_PER_US;
        let mut q = DualPi2::new(prm, 3);
        for _ in 0..25 {
            q.enqueue(pkt(Ecn::Ect1), 0).unwrap();
        }
        let marks: Vec<bool> =
            (0..25u64).map(|i| q.dequeue(50 * NS_PER_US + i * 100 * NS_PER_US, &mut d).unwrap().marked).collect();
        assert!(marks[..5].iter().all(|m| !m));
        // Sum of the ramp probabilities is 5.0 (4.999.. in floating point).
        assert!((4..=5).contains(&marks[5..15].iter().filter(|m| **m).count()), "{marks:?}");
        assert!(marks[15..24].iter().all(|m| *m));
    }

    #[test]
    fn coupling_p_cl_is_k_times_p_prime() {
        // Frozen p' = 0.1 with a standing L queue below the step threshold:
        // L packets are marked with p_CL = k p' = 0.2, exactly (recur()).
        let n = 40_000;
        let (marks, drops, q) = frozen(0.1, Ecn::Ect1, n);
        assert_eq!(drops, 0);
        assert!((marks as f64 / n as f64 - 0.2).abs() <= 1.0 / n as f64, "{marks}");
        assert_eq!(q.counters.l_coupled_marks, marks as u64);
        assert_eq!(q.p_cl(), 2.0 * q.p_prime());
        // Same p': classic ECT(0) marked with p_C = p'^2 = 0.01 (sd 0.0005; 5 sd).
        let (marks, _, _) = frozen(0.1, Ecn::Ect0, n);
        assert!((marks as f64 / n as f64 - 0.01).abs() < 0.0025, "{marks}");
        // k = 3: p_CL = 0.3.
        let mut prm = params();
        prm.k = 3.0;
        let mut q = DualPi2::new(prm, 2);
        q.set_p_prime(0.1);
        assert!((q.p_cl() - 0.3).abs() < 1e-12);
    }

    #[test]
    fn coupling_holds_with_the_controller_running() {
        // Classic Not-ECT overload (1.1x) plus a light (0.1x) L4S stream: the PI
        // moves p' and the L marks track k p' at every packet.
        let mut q = DualPi2::new(params(), 5);
        let c = periodic(91 * NS_PER_US, Ecn::NotEct);
        let l = periodic(1_000 * NS_PER_US, Ecn::Ect1).map(|(t, e)| (t + 7, e));
        let mut merged: Vec<(Nanos, Ecn)> =
            c.take_while(|a| a.0 < 40_000 * NS_PER_MS).chain(l.take_while(|a| a.0 < 40_000 * NS_PER_MS)).collect();
        merged.sort_by_key(|a| a.0);
        let t = run(&mut q, merged.into_iter(), 100 * NS_PER_US, 40_000 * NS_PER_MS, 10_000 * NS_PER_MS);
        // recur() is deterministic: marks = sum of p_L within 1 (the L queue
        // never reaches the 1 ms step here: L has priority).
        assert!(t.out[1] > 25_000);
        assert!((t.marks[1] as f64 - t.p_cl_sum).abs() <= 1.0, "{} marks vs {}", t.marks[1], t.p_cl_sum);
        let l_frac = t.marks[1] as f64 / t.out[1] as f64;
        let c_frac = t.drops[0] as f64 / (t.drops[0] + t.out[0]) as f64;
        // p_CL = k p' = k sqrt(p_C) for the average p' (p' varies little).
        assert!((l_frac - 2.0 * c_frac.sqrt()).abs() < 0.03, "L marks {l_frac}, C drops {c_frac}");
    }

    #[test]
    fn overload_switches_to_drop() {
        // Unresponsive ECT(1) and ECT(0) traffic, each at 1.5x the link (3x
        // in total): marking cannot help, p' rises past 1/k = 0.5, and then
        // both queues drop (L with p_C, ECT classic instead of marking), so
        // the queue delay stays bounded instead of filling the 10000-packet
        // limit (1 s at this rate).
        let mut q = DualPi2::new(params(), 6);
        let mut arr: Vec<(Nanos, Ecn)> =
            (0..20_000 * 15).flat_map(|i| [(i * 66_667, Ecn::Ect1), (i * 66_667 + 1, Ecn::Ect0)]).collect();
        arr.sort_by_key(|a| a.0);
        let t = run(&mut q, arr.into_iter(), 100 * NS_PER_US, 20_000 * NS_PER_MS, 5_000 * NS_PER_MS);
        assert!(q.p_prime() > 0.5, "p' = {}", q.p_prime());
        assert!(q.counters.overload_updates > 500);
        assert!(t.drops[1] > 10_000, "L drops {}", t.drops[1]);
        assert!(t.drops[0] > 10_000, "C drops {}", t.drops[0]);
        assert!(q.counters.c_overload_drops > 10_000);
        assert_eq!(q.counters.limit_drops, [0, 0]);
        let mean_c_ms = t.soj_sum[0] as f64 / t.out[0].max(1) as f64 / 1e6;
        assert!(mean_c_ms < 100.0, "C sojourn {mean_c_ms} ms");

        // Without drop_on_overload: p' stops at 1/k, nothing is dropped by the
        // AQM, the queues fill up to the limit.
        let mut prm = params();
        prm.drop_on_overload = false;
        prm.limit_pkts = 2_000;
        let mut q = DualPi2::new(prm, 6);
        let mut arr: Vec<(Nanos, Ecn)> =
            (0..5_000 * 15).flat_map(|i| [(i * 66_667, Ecn::Ect1), (i * 66_667 + 1, Ecn::Ect0)]).collect();
        arr.sort_by_key(|a| a.0);
        let t = run(&mut q, arr.into_iter(), 100 * NS_PER_US, 5_000 * NS_PER_MS, 0);
        assert_eq!(t.drops, [0, 0]);
        assert!(q.p_prime() <= 0.5 + 1e-12);
        assert!(q.counters.limit_drops[0] + q.counters.limit_drops[1] > 10_000);
        assert!(t.marks[1] > 0 && t.marks[0] > 0);
    }

    #[test]
    fn classifier_ecn_and_dscp() {
        let q = DualPi2::new(params(), 7);
        assert_eq!(q.classify(&pkt(Ecn::Ect1)), QClass::L4s);
        assert_eq!(q.classify(&pkt(Ecn::Ce)), QClass::L4s);
        assert_eq!(q.classify(&pkt(Ecn::Ect0)), QClass::Classic);
        assert_eq!(q.classify(&pkt(Ecn::NotEct)), QClass::Classic);
        let arp = Packet::from_frame(&build::arp([4; 6]), 0);
        assert_eq!(q.classify(&arp), QClass::Classic);

        let cfg: config::DualPi2 = serde_json::from_str(r#"{"classifier": "dscp", "l_dscp": [46, 1]}"#).unwrap();
        let mut q = DualPi2::new(Params::from_config(&cfg), 7);
        let d = |ecn, dscp| Packet::from_frame(&build::ipv4_udp_dscp([2; 6], [4; 6], 1500, ecn, dscp), 0);
        assert_eq!(q.classify(&d(Ecn::NotEct, 46)), QClass::L4s);
        assert_eq!(q.classify(&d(Ecn::Ect0, 1)), QClass::L4s);
        assert_eq!(q.classify(&d(Ecn::Ect1, 0)), QClass::Classic);
        assert_eq!(q.classify(&d(Ecn::Ect1, 10)), QClass::Classic);
        q.enqueue(d(Ecn::NotEct, 46), 0).unwrap();
        q.enqueue(d(Ecn::Ect1, 0), 0).unwrap();
        q.enqueue(d(Ecn::Ect0, 0), 0).unwrap();
        assert_eq!(q.lens(), [2, 1]);
    }

    #[test]
    fn wrr_gives_classic_its_weight_and_tsfifo_its_shift() {
        // Both queues always backlogged: WRR serves C 10 % of the bytes.
        let mut q = DualPi2::new(params(), 8);
        let mut d = vec![];
        let mut served = [0u64; 2];
        for i in 0..10_000u64 {
            while q.lens()[0] < 5 {
                q.enqueue(pkt(Ecn::NotEct), i).unwrap();
            }
            while q.lens()[1] < 5 {
                q.enqueue(pkt(Ecn::Ect1), i).unwrap();
            }
            let p = q.dequeue(i, &mut d).unwrap();
            served[(p.class == QClass::L4s) as usize] += 1;
        }
        let c_share = served[0] as f64 / 10_000.0;
        assert!((c_share - 0.1).abs() < 0.002, "C share {c_share}");

        // TS-FIFO, tshift 50 ms: L goes first until the C head is 50 ms older.
        let mut prm = params();
        prm.scheduler = Scheduler::TsFifo { tshift: 50 * NS_PER_MS };
        let mut q = DualPi2::new(prm, 8);
        q.enqueue(pkt(Ecn::NotEct), 0).unwrap();
        q.enqueue(pkt(Ecn::Ect1), 10 * NS_PER_MS).unwrap();
        q.enqueue(pkt(Ecn::Ect1), 70 * NS_PER_MS).unwrap();
        let now = 71 * NS_PER_MS;
        assert_eq!(q.dequeue(now, &mut d).unwrap().class, QClass::L4s); // C head 71 ms, L head 61 + 50
        assert_eq!(q.dequeue(now, &mut d).unwrap().class, QClass::Classic); // L head 1 + 50 < 71
        assert_eq!(q.dequeue(now, &mut d).unwrap().class, QClass::L4s);
        assert!(q.dequeue(now, &mut d).is_none());
    }

    #[test]
    fn timer_keeps_its_grid() {
        let mut q = DualPi2::new(params(), 9);
        q.on_timer(5);
        assert_eq!(q.next_timer(), Some(5 + 16 * NS_PER_MS));
        q.on_timer(5 + 16 * NS_PER_MS + 100);
        assert_eq!(q.next_timer(), Some(5 + 32 * NS_PER_MS));
        q.on_timer(200 * NS_PER_MS);
        assert_eq!(q.next_timer(), Some(216 * NS_PER_MS));
        assert_eq!(q.counters.updates, 2);
    }
}
