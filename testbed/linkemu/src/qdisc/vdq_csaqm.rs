//! VDQ-CSAQM: the Virtual Dual Queue Core-Stateless AQM of paper 004
//! (Nádas, Gombos, Fejes, Laki, "A Congestion Control Independent L4S
//! Scheduler", ANRW '20, section 3), with the edge packet marker of section
//! 2 in front of it ([`super::pv_marker`]: each flow's packets get a packet
//! value (PV) from its policy's throughput-value function and its measured
//! rate; in the testbed the edge and the bottleneck are the same box, so
//! the marker runs at enqueue, before the AQM sees the packet).
//!
//! **Queues.**  Two physical FIFOs: Queue 0 (L4S: ECT(1)/CE, or the DSCPs in
//! `l_dscp` as DualPI2's classifier) and Queue 1 (Classic: everything else),
//! of qmax_0 = C * 50 ms and qmax_1 = C * 200 ms bytes; and two virtual
//! queues ([`super::vdq_vq`]) of packet records (coded PV, size): VQ_0 holds
//! the L4S packets only, VQ_1 both classes (the coupling: Classic and L4S
//! traffic share VQ_1's threshold), served at C_v0 = 0.9 C and C_v1 = 0.984 C,
//! of vqmax_0 = qmax_0 and vqmax_1 = qmax_0 + qmax_1.
//!
//! **Arrival** of packet p (size ps, coded value v) classified to queue i:
//! enqueued iff qlen_i + ps <= qmax_i and vqlen_j + ps <= vqmax_j for all
//! j >= i; then (v, ps) is added to every VQ_j, j >= i.  Otherwise it is
//! dropped (`DropCause::Queue`; the paper: no PV-based arrival drop).
//!
//! **Dequeue**: strict priority, Queue 0 first.  A packet of queue i passes
//! unchanged iff v >= CTV_j for all j >= i (an L4S packet is checked against
//! CTV_0 and CTV_1, a Classic one against CTV_1); otherwise an ECT packet is
//! CE-marked and sent, a Not-ECT one dropped (`DropCause::Aqm`) and the next
//! packet dequeued.  With `classic_ecn = false` Classic ECT packets are
//! dropped instead (the paper's setting for BBRv2 in the Classic queue).
//!
//! **VQ service**: every transmitted packet of ps bits removes ps * C_vi / C
//! bits from every VQ_i (a packet dropped at dequeue takes no link time and
//! removes nothing); while both physical queues are empty (from the end of
//! the last transmission), the VQs are served at C_vi.  C is `rate_mbit`
//! (default: the link's rate).  With a trace-driven link the per-packet rule
//! follows the real capacity while busy; the idle rule uses `rate_mbit`.
//!
//! **CTV update**, every T_update,ctv = 10 ms: l_i = C_vi * D_i (D_0 = 1 ms,
//! D_1 = 20 ms); CTV_i = 0 if vqlen_i <= l_i, else the smallest v whose
//! histogram tail sum_{j >= v} H_IN_i(j) still fits l_i.  So the CTV rises
//! while the arrivals outrun the VQ's slightly-below-capacity service and
//! falls back to 0 once the VQ drains below D_i: only the lowest-valued
//! share of the traffic is hit, and a flow's share of packets above the CTV
//! (its policy and rate) sets its throughput - if the CTV were steady.  It
//! is not: it is 0 at most updates and, when set, usually cuts into Gold's
//! values as well as Silver's, so Gold:Silver comes out ~2:1, not 4:1
//! (README).  `ctv_rule = "steady"` adds a rule with memory on VQ_1
//! ([`super::vdq_steady`], a deviation): a PI controller's fraction of
//! arriving bits, holding VQ_1 at `steady_setpoint` l_1 and turned into a
//! CTV by the values that arrived lately; CTV_1 is the larger of it and the
//! paper's CTV_1, which so still acts at once above l_1.  VQ_0 keeps the
//! paper's rule unless `steady_l4s_gain` g is set: then CTV_0 keeps the
//! paper's condition (vqlen_0 > l_0) but cuts only g of the paper's depth,
//! from the values that arrived lately (a scalable sender needs a shallow,
//! well-placed mark rate; a PI there wound up on Prague's bursts), and the
//! PI on VQ_1 also holds the Classic FIFO's sojourn at `steady_setpoint` D_1.
//!
//! **Deviations** (all documented in README.md): the marker's rate is an
//! exponentially decaying average (the paper: "a short timescale"); the TVF
//! curves are ours, built from the paper's description of Figure 1 (see
//! `pv_marker.rs`); sizes are IP bytes (the link's `overhead_bytes` is not
//! charged to the VQs); the per-flow policy is chosen by 5-tuple rules.
//! Statistics: per class (Classic / L4S: arrivals, arrival drops by
//! physical or virtual queue, AQM marks and drops), the CTVs (now, mean,
//! max, as codes and as the Gold rate they entitle), and per flow
//! ([`super::flow_stats`], plus each flow's policy).  Links only.

#[cfg(test)]
mod tests;

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use serde_json::{json, Value};

use super::control::{FlowState, QdiscState, Scalar};
use super::fifo::Fifo;
use super::flow_stats::{FlowDrop, FlowStats};
use super::pv_marker::{gold_rate, Marker, Policy, V_MAX};
use super::vdq_steady::{L4sCut, SteadyCtv};
use super::vdq_vq::VirtualQueue;
use super::{DropCause, Dropped, Qdisc};
use crate::config;
use crate::packet::{Ecn, Packet, QClass};
use crate::time::Nanos;

/// Queue 0: L4S; Queue 1: Classic (the paper's numbering).
pub const L: usize = 0;
pub const C: usize = 1;

#[cfg(test)]
thread_local! {
    /// Tests only: both CTVs held at this coded value instead of the VQs'
    /// (a steady CTV, to tell the marker's shares from the CTV's dynamics).
    pub(super) static PINNED_CTV: std::cell::Cell<Option<u16>> = const { std::cell::Cell::new(None) };
}

/// The CTV a test pinned, if any.
fn pinned_ctv() -> Option<u32> {
    #[cfg(test)]
    return PINNED_CTV.with(|p| p.get()).map(u32::from);
    #[cfg(not(test))]
    None
}

/// Per-class counters for summary.json.
#[derive(Debug, Default, Clone)]
pub struct ClassCounters {
    pub packets_in: u64,
    /// Arrival drops: the physical queue, a virtual queue was full.
    pub queue_drops: u64,
    pub vq_drops: u64,
    pub aqm_marks: u64,
    pub aqm_drops: u64,
}

pub struct VdqCsaqm {
    /// C, bit/s.
    rate_bps: f64,
    q: [Fifo; 2],
    /// Coded value of each queued packet, in the FIFOs' order.
    vals: [std::collections::VecDeque<u16>; 2],
    qmax_bytes: [usize; 2],
    vq: [VirtualQueue; 2],
    /// `ctv_rule = "steady"`: VQ_1's steady CTV and, with `steady_l4s_gain`, VQ_0's shallow
    /// cut (None: the paper's rule).
    steady: Option<(SteadyCtv, Option<L4sCut>)>,
    ctv: [u32; 2],
    tupdate: Nanos,
    /// D_1, against which the PI reads the Classic FIFO's head sojourn when the L4S cut is on.
    d1: Nanos,
    next_update: Nanos,
    l_dscp: Option<Box<[bool; 64]>>,
    classic_ecn: bool,
    marker: Marker,
    rng: Pcg64Mcg,
    /// Both physical queues empty: the VQs are served at their rates from this instant.
    idle_from: Option<Nanos>,
    flows: FlowStats,
    pub counters: [ClassCounters; 2],
    updates: u64,
    ctv_sum: [f64; 2],
    ctv_max: [u32; 2],
}

fn ms(v: f64) -> Nanos {
    (v * 1e6).round() as Nanos
}

impl VdqCsaqm {
    /// The discipline a validated config describes (`rate_mbit` filled in
    /// from the link, [`config::QdiscConfig::for_link`]); `seed` seeds the marker.
    pub fn from_config(c: &config::VdqCsaqm, seed: u64) -> VdqCsaqm {
        let rate_bps = c.rate_mbit.expect("vdq_csaqm needs C: validated with the link's rate") * 1e6;
        let bytes_in = |t_ms: f64| (rate_bps * t_ms / 1e3 / 8.0) as usize;
        let qmax_bytes = [bytes_in(c.qmax0_ms), bytes_in(c.qmax1_ms)];
        let vq = |frac: f64, max_bytes: usize, d_ms: f64| {
            let r = rate_bps * frac;
            VirtualQueue::new(r, max_bytes as u64 * 8, (r * d_ms / 1e3) as u64)
        };
        let l_dscp = (c.classifier == "dscp").then(|| {
            let mut set = Box::new([false; 64]);
            for &d in &c.l_dscp {
                set[(d & 63) as usize] = true;
            }
            set
        });
        VdqCsaqm {
            rate_bps,
            q: [Fifo::default(), Fifo::default()],
            vals: Default::default(),
            qmax_bytes,
            vq: [
                vq(c.vq0_rate, qmax_bytes[L], c.target0_ms),
                vq(c.vq1_rate, qmax_bytes[L] + qmax_bytes[C], c.target1_ms),
            ],
            steady: (c.ctv_rule == "steady").then(|| {
                let window = ms(c.steady_window_ms);
                let cut = c.steady_l4s_gain.map(|g| L4sCut::new(window, g));
                (SteadyCtv::new(window, c.steady_alpha, c.steady_beta, c.steady_setpoint), cut)
            }),
            ctv: [0, 0],
            tupdate: ms(c.tupdate_ms).max(1),
            d1: ms(c.target1_ms).max(1),
            next_update: 0,
            l_dscp,
            classic_ecn: c.classic_ecn,
            marker: Marker::from_config(c),
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0x0dd_c5a9_2020_0004),
            idle_from: Some(0),
            flows: FlowStats::default(),
            counters: Default::default(),
            updates: 0,
            ctv_sum: [0.0; 2],
            ctv_max: [0; 2],
        }
    }

    /// Queue 0 (L4S) or 1 (Classic).
    pub fn classify(&self, pkt: &Packet) -> usize {
        let l4s = match &self.l_dscp {
            None => matches!(pkt.ecn(), Ecn::Ect1 | Ecn::Ce),
            Some(set) => pkt.is_ip() && set[pkt.dscp() as usize],
        };
        if l4s {
            L
        } else {
            C
        }
    }

    /// The VQs a packet of queue i goes through: VQ_j for j >= i.
    fn vqs_of(i: usize) -> std::ops::Range<usize> {
        i..2
    }

    /// CTV_0, CTV_1 (coded; 65536: everything is acted upon).
    pub fn ctvs(&self) -> [u32; 2] {
        self.ctv
    }

    /// vqlen_0, vqlen_1 in bits.
    pub fn vq_bits(&self) -> [u64; 2] {
        [self.vq[0].len_bits(), self.vq[1].len_bits()]
    }

    /// The Gold throughput (bit/s) a CTV entitles a flow to (0: unlimited).
    pub fn gold_rate_at(ctv: u32) -> f64 {
        match ctv {
            0 => f64::INFINITY,
            c if c > V_MAX as u32 => 0.0,
            c => gold_rate(c as u16),
        }
    }

    /// Serve the VQs at C_vi for the time both physical queues have been empty.
    fn serve_idle(&mut self, now: Nanos) {
        if let Some(t0) = self.idle_from {
            if now > t0 {
                let secs = (now - t0) as f64 / 1e9;
                for vq in &mut self.vq {
                    vq.serve(vq.rate_bps * secs);
                }
                self.idle_from = Some(now);
            }
        }
    }

    /// A transmitted packet of `bytes` takes ps * C_vi / C from every VQ_i.
    fn serve_sent(&mut self, bytes: usize) {
        let bits = bytes as f64 * 8.0;
        for vq in &mut self.vq {
            vq.serve(bits * vq.rate_bps / self.rate_bps);
        }
    }

    /// Room for a packet of `bytes` in queue i and its VQs: None, or the full queue's drop reason.
    fn arrival_refusal(&self, i: usize, bytes: usize) -> Option<bool> {
        if self.q[i].bytes() + bytes > self.qmax_bytes[i] {
            return Some(false);
        }
        let bits = bytes as u64 * 8;
        Self::vqs_of(i).any(|j| !self.vq[j].fits(bits)).then_some(true)
    }

    /// Whether a packet of queue i with coded value v passes the CTVs.
    fn passes(&self, i: usize, v: u16) -> bool {
        Self::vqs_of(i).all(|j| v as u32 >= self.ctv[j])
    }

    /// Recompute both CTVs (the periodic update).
    pub fn update_ctvs(&mut self, now: Nanos) {
        self.serve_idle(now);
        // With the L4S cut, the Classic sojourn counts as a VQ_1 length of d_C / D_1 l_1: steady
        // L4S flows leave the Classic FIFO no gaps to drain into (vdq_steady.rs "The L4S cut").
        let classic_as_vq = match self.steady {
            Some((_, Some(_))) => {
                let d = self.q[C].head_enqueued().map_or(0, |t| now.saturating_sub(t));
                (d as f64 / self.d1 as f64 * self.vq[C].threshold_bits as f64) as u64
            }
            _ => 0,
        };
        for j in 0..2 {
            let vq = &self.vq[j];
            let rule = match &mut self.steady {
                // The paper's CTV stays as the ceiling: above l_1 it acts at once.
                Some((s, _)) if j == C => {
                    s.update(vq.len_bits().max(classic_as_vq), vq.threshold_bits, now).max(vq.ctv())
                }
                Some((_, Some(cut))) => cut.update(vq.len_bits(), vq.threshold_bits, now),
                _ => vq.ctv(),
            };
            self.ctv[j] = pinned_ctv().unwrap_or(rule);
            self.ctv_sum[j] += self.ctv[j] as f64;
            self.ctv_max[j] = self.ctv_max[j].max(self.ctv[j]);
        }
        self.updates += 1;
    }

    /// Enqueue `pkt` with a given coded value (the marker skipped; tests).
    pub fn enqueue_valued(&mut self, mut pkt: Packet, v: u16, now: Nanos) -> Result<(), Box<Dropped>> {
        self.serve_idle(now);
        let i = self.classify(&pkt);
        pkt.class = if i == L { QClass::L4s } else { QClass::Classic };
        let key = pkt.flow_key();
        self.flows.on_arrival(&mut pkt, key, i);
        let len = pkt.ip_len();
        if let Some(vq_full) = self.arrival_refusal(i, len) {
            let c = &mut self.counters[i];
            if vq_full {
                c.vq_drops += 1;
            } else {
                c.queue_drops += 1;
            }
            self.flows.on_drop(&pkt, FlowDrop::Overflow);
            return Err(Box::new(Dropped { pkt, cause: DropCause::Queue }));
        }
        self.counters[i].packets_in += 1;
        for j in Self::vqs_of(i) {
            self.vq[j].push(v, len as u64 * 8);
        }
        if let Some((s, cut)) = &mut self.steady {
            s.on_arrival(v, len as u64 * 8, now); // every packet enters VQ_1
            if let (L, Some(cut)) = (i, cut) {
                cut.on_arrival(v, len as u64 * 8, now);
            }
        }
        self.q[i].push(pkt, now);
        self.vals[i].push_back(v);
        self.idle_from = None;
        Ok(())
    }

    fn state_params(&self, now: Nanos) -> Vec<(&'static str, Scalar)> {
        let head_ms = |i: usize| self.q[i].head_enqueued().map_or(0.0, |t| now.saturating_sub(t) as f64 / 1e6);
        let mbit = |c: u32| {
            let r = Self::gold_rate_at(c);
            if r.is_finite() {
                Scalar::F(r / 1e6)
            } else {
                Scalar::S("unlimited")
            }
        };
        let k = &self.counters;
        vec![
            ("ctv_l4s", Scalar::U(self.ctv[L] as u64)),
            ("ctv_classic", Scalar::U(self.ctv[C] as u64)),
            ("ctv_l4s_gold_mbit", mbit(self.ctv[L])),
            ("ctv_classic_gold_mbit", mbit(self.ctv[C])),
            ("vq_l4s_bytes", Scalar::U(self.vq[L].len_bits() / 8)),
            ("vq_classic_bytes", Scalar::U(self.vq[C].len_bits() / 8)),
            ("vq_l4s_threshold_bytes", Scalar::U(self.vq[L].threshold_bits / 8)),
            ("vq_classic_threshold_bytes", Scalar::U(self.vq[C].threshold_bits / 8)),
            ("l4s_pkts", Scalar::U(self.q[L].len() as u64)),
            ("classic_pkts", Scalar::U(self.q[C].len() as u64)),
            ("l4s_delay_ms", Scalar::F(head_ms(L))),
            ("classic_delay_ms", Scalar::F(head_ms(C))),
            ("rate_mbit", Scalar::F(self.rate_bps / 1e6)),
            ("ctv_updates", Scalar::U(self.updates)),
            ("ctv_rule", Scalar::S(self.rule_name())),
            ("steady_p", Scalar::F(self.steady_p())),
            ("steady_l4s_p", Scalar::F(self.steady.as_ref().and_then(|s| s.1.as_ref()).map_or(0.0, L4sCut::p))),
            ("l4s_marks", Scalar::U(k[L].aqm_marks)),
            ("l4s_drops", Scalar::U(k[L].aqm_drops)),
            ("classic_marks", Scalar::U(k[C].aqm_marks)),
            ("classic_drops", Scalar::U(k[C].aqm_drops)),
            ("flows_started", Scalar::U(self.marker.flows_started)),
        ]
    }
}

impl Qdisc for VdqCsaqm {
    fn enqueue(&mut self, pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        let i = self.classify(&pkt);
        let v = self.marker.mark(pkt.flow_key(), pkt.ip_len(), i, now, &mut self.rng);
        self.enqueue_valued(pkt, v, now)
    }

    fn dequeue(&mut self, now: Nanos, drops: &mut Vec<Dropped>) -> Option<Packet> {
        self.serve_idle(now);
        loop {
            let i = if !self.q[L].is_empty() { L } else { C };
            let Some(mut p) = self.q[i].pop() else {
                self.idle_from.get_or_insert(now);
                return None;
            };
            let v = self.vals[i].pop_front().expect("one value per queued packet");
            let mut marked = false;
            if !self.passes(i, v) {
                let may_mark = i == L || self.classic_ecn;
                if may_mark && p.mark_ce() {
                    self.counters[i].aqm_marks += 1;
                    marked = true;
                } else {
                    self.counters[i].aqm_drops += 1;
                    self.flows.on_drop(&p, FlowDrop::Aqm);
                    drops.push(Dropped { pkt: p, cause: DropCause::Aqm });
                    continue;
                }
            }
            let len = p.ip_len();
            self.serve_sent(len);
            self.flows.on_dequeue(&p, now, marked);
            if self.is_empty() {
                // Idle service starts once this packet is on the wire.
                self.idle_from = Some(now + (len as f64 * 8.0 / self.rate_bps * 1e9) as Nanos);
            }
            return Some(p);
        }
    }

    /// [L4S, Classic]
    fn queues(&self) -> &[Fifo] {
        &self.q
    }

    fn next_timer(&self) -> Option<Nanos> {
        Some(self.next_update)
    }

    fn on_timer(&mut self, now: Nanos) {
        if self.next_update > 0 {
            self.update_ctvs(now);
        }
        self.next_update = if self.next_update == 0 { now + self.tupdate } else { self.next_update + self.tupdate };
        if self.next_update <= now {
            self.next_update = now + self.tupdate;
        }
    }

    fn kind(&self) -> &'static str {
        "vdq_csaqm"
    }

    /// [Classic, L4S] (the trait's order).
    fn class_lens(&self) -> Option<[usize; 2]> {
        Some([self.q[C].len(), self.q[L].len()])
    }

    fn stats_json(&self) -> Option<Value> {
        let class = |i: usize| {
            let c = &self.counters[i];
            json!({
                "packets_in": c.packets_in, "queue_drops": c.queue_drops, "vq_drops": c.vq_drops,
                "aqm_marks": c.aqm_marks, "aqm_drops": c.aqm_drops,
                "ctv": self.ctv[i],
                "ctv_mean": if self.updates > 0 { self.ctv_sum[i] / self.updates as f64 } else { 0.0 },
                "ctv_max": self.ctv_max[i],
                "vq_bytes": self.vq[i].len_bits() / 8,
            })
        };
        let params = json!({
            "rate_mbit": self.rate_bps / 1e6,
            "ctv_updates": self.updates,
            "ctv_rule": self.rule_name(),
            "steady_p": self.steady_p(),
            "marker_flows_started": self.marker.flows_started,
            "classes": {"l4s": class(L), "classic": class(C)},
        });
        let mut v = self.flows.to_json("vdq_csaqm", params);
        if let Some(m) = v.as_object_mut() {
            // Queue-sharing counters of the hashed disciplines: meaningless here.
            for k in ["shared_queues", "new_flow_count", "max_active_flows"] {
                m.remove(k);
            }
        }
        if let Some(top) = v.get_mut("top_flows").and_then(Value::as_array_mut) {
            for f in top {
                let key = key_of(f);
                let policy = self.marker.policy_of(key.as_ref());
                f["policy"] = json!(policy.name());
            }
        }
        Some(v)
    }

    fn control_state(&self, now: Nanos, max_flows: usize) -> QdiscState {
        let mut s = QdiscState::basic("vdq_csaqm", self.len(), self.bytes());
        s.params = self.state_params(now);
        let all = self.marker.flows();
        s.flows_active = all.len();
        s.flows = Some(
            all.into_iter()
                .take(max_flows)
                .map(|(key, f)| FlowState {
                    queue: f.queue,
                    key,
                    shared: Some(key.is_none()),
                    limit_pkts: None,
                    backlog_pkts: 0,
                    backlog_bytes: 0,
                    extra: vec![
                        ("policy", Scalar::S(f.policy.name())),
                        ("rate_mbit", Scalar::F(self.marker.rate_now(f, now) / 1e6)),
                        ("entitled_mbit", entitled(f.policy, self.ctv_for(f.queue))),
                        ("mean_value", Scalar::F(f.value_sum as f64 / f.packets.max(1) as f64)),
                        ("packets_in", Scalar::U(f.packets)),
                        ("bytes_in", Scalar::U(f.bytes)),
                        ("age_s", Scalar::F(now.saturating_sub(f.first) as f64 / 1e9)),
                    ],
                    features: None,
                })
                .collect(),
        );
        s
    }

    fn drain(&mut self) -> Vec<Packet> {
        let mut v: Vec<Packet> = self.q[L].take_all().collect();
        v.extend(self.q[C].take_all());
        self.vals = Default::default();
        v
    }
}

impl VdqCsaqm {
    /// The steady rule's fraction p on VQ_1 (0 under the paper's rule).
    fn steady_p(&self) -> f64 {
        self.steady.as_ref().map_or(0.0, |s| s.0.p())
    }

    fn rule_name(&self) -> &'static str {
        if self.steady.is_some() {
            "steady"
        } else {
            "paper"
        }
    }

    /// The CTV that acts on a packet of queue i (the larger of those of VQ_j, j >= i).
    fn ctv_for(&self, i: usize) -> u32 {
        Self::vqs_of(i).map(|j| self.ctv[j]).max().unwrap_or(0)
    }
}

/// A policy's throughput at a CTV, Mbit/s ("unlimited" at CTV 0).
fn entitled(p: Policy, ctv: u32) -> Scalar {
    if ctv == 0 {
        return Scalar::S("unlimited");
    }
    if ctv > V_MAX as u32 {
        return Scalar::F(0.0);
    }
    Scalar::F(p.rate_at(ctv as u16) / 1e6)
}

/// The 5-tuple of a `top_flows` entry of the per-flow statistics.
fn key_of(f: &Value) -> Option<crate::flow::FlowKey> {
    Some(crate::flow::FlowKey {
        src: f["src"].as_str()?.parse().ok()?,
        dst: f["dst"].as_str()?.parse().ok()?,
        proto: f["proto"].as_u64()? as u8,
        sport: f["sport"].as_u64()? as u16,
        dport: f["dport"].as_u64()? as u16,
    })
}
