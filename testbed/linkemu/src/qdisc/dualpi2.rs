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
//!
//! **Files** (`dualpi2/`): this file holds the queue pair, the classifier and
//! the enqueue/dequeue path that applies the verdicts; `params.rs` the
//! parameters in the emulator's units; `pi.rs` the base PI controller and the
//! probabilities coupled to p'; `marking.rs` the draws behind a packet's
//! verdict (native L AQM, recur(), think twice); `scheduler.rs` which queue
//! is served next (WRR credit, TS-FIFO); `counters.rs` what it did, for
//! summary.json; `control.rs` and `active_flows.rs` the control socket;
//! `tests.rs` the unit tests.

mod active_flows;
mod control;
mod counters;
mod marking;
mod params;
mod pi;
mod scheduler;
#[cfg(test)]
mod tests;

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use serde_json::Value;

pub use counters::Counters;
pub use params::{Classifier, Params, Scheduler};
pub use scheduler::WrrCredit;

use super::control::{QdiscState, SetApplied, SetParams};
use super::fifo::Fifo;
use super::{DropCause, Dropped, Qdisc};
use crate::packet::{Ecn, Packet, QClass};
use crate::time::Nanos;

/// MTU used by the 2-MTU no-drop rule and the WRR credit (Linux: psched_mtu of the device).
pub const MTU_BYTES: usize = 1500;

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
        Some(self.counters_json())
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
