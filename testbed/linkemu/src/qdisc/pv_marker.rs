//! The edge packet marker of Per Packet Value (PPV) resource sharing, as
//! paper 004 (Nádas et al., "A Congestion Control Independent L4S
//! Scheduler", ANRW '20, section 2) describes it; the core AQM that reads
//! the values is [`super::vdq_csaqm`].
//!
//! **Marking.**  Every flow (5-tuple, [`crate::flow`]) has a policy, a
//! throughput-value function (TVF) V(r): the packet value (PV) of the
//! traffic a flow sends "at" throughput r.  The marker measures the flow's
//! rate R on a short timescale and gives each packet
//!
//! ```text
//!   PV = V(x),  x uniform in [0, R]
//! ```
//!
//! so the rate of a flow's packets with PV >= c is min(R, V^-1(c)): a core
//! that forwards exactly the packets with PV >= CTV gives each flow
//! V^-1(CTV), whatever its congestion control, and the TVFs' shapes set the
//! shares.  R is an exponentially decaying byte count (time constant
//! `rate_window_ms`, 100 ms): R <- R exp(-dt / tau) + bits / tau, which equals
//! a constant rate's value after a few tau and starts at 0, so a new or
//! short flow's first packets carry high values.
//!
//! **Coding** (the paper's): PV is carried as a 16-bit code
//! v = ceil(ln PV / ln PV_max * 65535), v = 0 for PV = 0 (and PV < 1).
//!
//! **Policies** (paper 004 Figure 1; the paper gives the shapes in words,
//! not formulas, so the curves here are ours and fit those words exactly):
//! * `gold`: PV = PV_max * r_min / r, a straight line of slope -1 on the
//!   log-log plot, from PV_max = 10^8 at r_min = 1 kbit/s down to PV = 1 at
//!   100 Gbit/s (v = 65535 * (1 - log10(r / 1 kbit/s) / 8)).  Only Gold
//!   flows: equal shares at every CTV.
//! * `silver`: V_S(r) = V_G(2 r) below 10 Mbit/s and V_G(4 r) from 10 Mbit/s
//!   on (a vertical step at 10 Mbit/s).  Against Gold, at a CTV c: while
//!   Silver gets less than 10 Mbit/s Gold gets twice as much (region I);
//!   then Silver stays at 10 Mbit/s while Gold goes from 20 to 40 Mbit/s
//!   (II, "a rate limiter at 10 Mbit/s"); above, Gold gets four times
//!   Silver's throughput (III) - the paper's 1:4 Silver:Gold.
//! * `voice`: PV_max up to 64 kbit/s, 0 above ("strict priority up to 64
//!   kbit/s").
//!
//! The paper's fourth curve, Background, is only drawn, not described, and
//! is not provided.  A flow's policy comes from the first configured rule
//! whose given 5-tuple fields all match, else `default_policy`; it is fixed
//! at the flow's first packet.  Flows idle for `idle_timeout_ms` (3 s) are
//! forgotten (looked at once a second); at most [`MAX_MARKED_FLOWS`] are
//! kept, beyond which new 5-tuples share one state (and the default
//! policy), as do non-IP packets.

use std::collections::HashMap;
use std::f64::consts::LN_10;

use rand::Rng;
use rand_pcg::Pcg64Mcg;

use crate::config::{PolicyRule, VdqCsaqm};
use crate::flow::FlowKey;
use crate::time::{Nanos, NS_PER_S};

/// Largest coded packet value.
pub const V_MAX: u16 = u16::MAX;
/// Gold's TVF: PV_max below this rate (bit/s).
pub const GOLD_R_MIN_BPS: f64 = 1e3;
/// Gold's TVF spans this many decades of rate (PV_max = 10^8).
pub const GOLD_DECADES: f64 = 8.0;
/// Silver's step (bit/s).
pub const SILVER_KNEE_BPS: f64 = 10e6;
/// Voice's strict-priority rate (bit/s).
pub const VOICE_BPS: f64 = 64e3;
/// 5-tuples marked one by one.
pub const MAX_MARKED_FLOWS: usize = 65_536;
const GC_EVERY: Nanos = NS_PER_S;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Gold,
    Silver,
    Voice,
}

impl Policy {
    pub fn parse(name: &str) -> Policy {
        match name {
            "silver" => Policy::Silver,
            "voice" => Policy::Voice,
            _ => Policy::Gold,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::Gold => "gold",
            Policy::Silver => "silver",
            Policy::Voice => "voice",
        }
    }

    /// The coded packet value of this policy's TVF at throughput `r_bps`.
    pub fn value(self, r_bps: f64) -> u16 {
        match self {
            Policy::Gold => gold_value(r_bps),
            Policy::Silver if r_bps < SILVER_KNEE_BPS => gold_value(2.0 * r_bps),
            Policy::Silver => gold_value(4.0 * r_bps),
            Policy::Voice if r_bps < VOICE_BPS => V_MAX,
            Policy::Voice => 0,
        }
    }

    /// The throughput (bit/s) this policy is entitled to at a CTV `ctv`:
    /// the rate of its packets with value >= ctv (inverse of `value`).
    pub fn rate_at(self, ctv: u16) -> f64 {
        let g = gold_rate(ctv);
        match self {
            Policy::Gold => g,
            Policy::Silver if g / 2.0 < SILVER_KNEE_BPS => g / 2.0,
            Policy::Silver if g / 4.0 < SILVER_KNEE_BPS => SILVER_KNEE_BPS,
            Policy::Silver => g / 4.0,
            Policy::Voice if ctv == 0 => f64::INFINITY,
            Policy::Voice => VOICE_BPS,
        }
    }
}

/// Gold's TVF, coded: v = 65535 (1 - log10(r / r_min) / 8), clamped.
pub fn gold_value(r_bps: f64) -> u16 {
    if r_bps <= GOLD_R_MIN_BPS {
        return V_MAX;
    }
    let x = 1.0 - (r_bps / GOLD_R_MIN_BPS).ln() / (GOLD_DECADES * LN_10);
    (x * V_MAX as f64).ceil().clamp(0.0, V_MAX as f64) as u16
}

/// The rate at which Gold's TVF reaches the code `v` (its inverse).
pub fn gold_rate(v: u16) -> f64 {
    GOLD_R_MIN_BPS * (GOLD_DECADES * LN_10 * (1.0 - v as f64 / V_MAX as f64)).exp()
}

fn rule_matches(r: &PolicyRule, k: &FlowKey) -> bool {
    r.src.is_none_or(|a| a == k.src)
        && r.dst.is_none_or(|a| a == k.dst)
        && r.proto.is_none_or(|p| p == k.proto)
        && r.sport.is_none_or(|p| p == k.sport)
        && r.dport.is_none_or(|p| p == k.dport)
}

/// One flow's marker state.
#[derive(Debug, Clone)]
pub struct MarkedFlow {
    pub policy: Policy,
    /// Measured rate R, bit/s (as of `last`).
    pub rate_bps: f64,
    pub last: Nanos,
    pub first: Nanos,
    pub packets: u64,
    pub bytes: u64,
    /// Sum of the coded values given (for the mean).
    pub value_sum: u64,
    /// The core's queue of its last packet (VDQ-CSAQM: 0 L4S, 1 Classic).
    pub queue: usize,
}

impl MarkedFlow {
    fn new(policy: Policy, now: Nanos) -> MarkedFlow {
        MarkedFlow { policy, rate_bps: 0.0, last: now, first: now, packets: 0, bytes: 0, value_sum: 0, queue: 0 }
    }

    /// Fold a packet of `bits` at `now` into R (exponential decay, time constant `tau_s`).
    fn measure(&mut self, bits: f64, now: Nanos, tau_s: f64) {
        let dt = now.saturating_sub(self.last) as f64 / 1e9;
        self.rate_bps = self.rate_bps * (-dt / tau_s).exp() + bits / tau_s;
        self.last = now;
    }
}

/// Who a packet belongs to in the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Who {
    Tuple(FlowKey),
    /// Non-IP packets, and 5-tuples beyond MAX_MARKED_FLOWS.
    Shared,
}

pub struct Marker {
    rules: Vec<PolicyRule>,
    default: Policy,
    tau_s: f64,
    idle: Nanos,
    flows: HashMap<Who, MarkedFlow>,
    next_gc: Nanos,
    /// Flows that got a state (forgotten ones that come back count again).
    pub flows_started: u64,
}

impl Marker {
    pub fn from_config(c: &VdqCsaqm) -> Marker {
        Marker {
            rules: c.policies.clone(),
            default: Policy::parse(&c.default_policy),
            tau_s: c.rate_window_ms / 1e3,
            idle: (c.idle_timeout_ms * 1e6) as Nanos,
            flows: HashMap::new(),
            next_gc: 0,
            flows_started: 0,
        }
    }

    /// The policy a new flow with 5-tuple `key` gets.
    pub fn policy_of(&self, key: Option<&FlowKey>) -> Policy {
        key.and_then(|k| self.rules.iter().find(|r| rule_matches(r, k)))
            .map_or(self.default, |r| Policy::parse(&r.policy))
    }

    /// Measure the flow of a `len`-byte packet with 5-tuple `key`, bound
    /// for the core's `queue`, at `now`, and draw its coded value.
    pub fn mark(&mut self, key: Option<FlowKey>, len: usize, queue: usize, now: Nanos, rng: &mut Pcg64Mcg) -> u16 {
        self.collect_idle(now);
        let who = match key {
            Some(k) if self.flows.len() < MAX_MARKED_FLOWS || self.flows.contains_key(&Who::Tuple(k)) => Who::Tuple(k),
            _ => Who::Shared,
        };
        let policy = if self.flows.contains_key(&who) {
            None
        } else {
            Some(if who == Who::Shared { self.default } else { self.policy_of(key.as_ref()) })
        };
        let f = self.flows.entry(who).or_insert_with(|| MarkedFlow::new(policy.unwrap_or(Policy::Gold), now));
        if f.packets == 0 {
            self.flows_started += 1;
        }
        f.measure(len as f64 * 8.0, now, self.tau_s);
        let x = rng.random::<f64>() * f.rate_bps;
        let v = f.policy.value(x);
        f.packets += 1;
        f.bytes += len as u64;
        f.value_sum += v as u64;
        f.queue = queue;
        v
    }

    /// Forget flows idle for longer than the timeout (at most once a second).
    fn collect_idle(&mut self, now: Nanos) {
        if now < self.next_gc {
            return;
        }
        self.next_gc = now + GC_EVERY;
        let idle = self.idle;
        self.flows.retain(|_, f| now.saturating_sub(f.last) <= idle);
    }

    /// The flow state of a 5-tuple, if the marker holds one.
    pub fn flow(&self, key: &FlowKey) -> Option<&MarkedFlow> {
        self.flows.get(&Who::Tuple(*key))
    }

    /// Flows with a state, 5-tuple (None: the shared state) first by key.
    pub fn flows(&self) -> Vec<(Option<FlowKey>, &MarkedFlow)> {
        let mut v: Vec<_> =
            self.flows.iter().map(|(w, f)| (if let Who::Tuple(k) = w { Some(*k) } else { None }, f)).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    /// R of a flow decayed to `now` (what its next packet would see, before its own bits).
    pub fn rate_now(&self, f: &MarkedFlow, now: Nanos) -> f64 {
        f.rate_bps * (-(now.saturating_sub(f.last) as f64 / 1e9) / self.tau_s).exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn silver_gets_half_then_ten_mbit_then_a_quarter_of_gold() {
        // Region I: Gold at 8 Mbit/s -> Silver 4; II: Gold 20..40 -> Silver 10; III: Gold 80 -> Silver 20.
        for (gold, silver) in [(8e6, 4e6), (30e6, 10e6), (80e6, 20e6), (400e6, 100e6)] {
            let ctv = gold_value(gold);
            let (g, s) = (Policy::Gold.rate_at(ctv), Policy::Silver.rate_at(ctv));
            assert!((g / gold - 1.0).abs() < 1e-3, "{gold}: {g}");
            assert!((s / silver - 1.0).abs() < 1e-3, "{gold}: {s}");
        }
        assert_eq!((gold_value(1e3), gold_value(1e11), gold_value(1e12)), (V_MAX, 0, 0));
        assert!(Policy::Silver.value(9.99e6) > Policy::Gold.value(20e6 - 1e4));
        assert!(Policy::Silver.value(10e6) <= Policy::Gold.value(40e6));
        assert_eq!((Policy::Voice.value(60e3), Policy::Voice.value(70e3)), (V_MAX, 0));
    }

    #[test]
    fn a_constant_rate_flow_gets_values_above_c_at_its_entitled_rate() {
        // 10 Mbit/s of 1500-byte packets for 20 s; after the first second the
        // share of packets with value >= V_G(2.5 Mbit/s) must be 2.5 / 10.06
        // (R right after a packet: rate + bits / (2 tau)), +-0.01: 3 standard
        // deviations (0.0034) of 15833 draws.
        let cfg = VdqCsaqm::default();
        let mut m = Marker::from_config(&cfg);
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        let key = FlowKey { src: [10, 0, 0, 1].into(), dst: [10, 0, 0, 2].into(), proto: 17, sport: 1, dport: 2 };
        let gap = 1_200_000; // 1.2 ms
        let c = gold_value(2.5e6);
        let (mut above, mut n) = (0, 0);
        for i in 0..16_667u64 {
            let v = m.mark(Some(key), 1500, 1, i * gap, &mut rng);
            if i >= 833 {
                n += 1;
                above += (v >= c) as u32;
            }
        }
        let f = m.flow(&key).unwrap();
        assert!((f.rate_bps / 10e6 - 1.0).abs() < 0.01, "R = {}", f.rate_bps);
        let share = above as f64 / n as f64;
        assert!((share - 2.5 / 10.06).abs() < 0.01, "{share}");
    }

    #[test]
    fn rules_pick_the_policy_and_idle_flows_are_forgotten() {
        let cfg = VdqCsaqm {
            policies: vec![PolicyRule {
                policy: "silver".into(),
                src: None,
                dst: None,
                proto: Some(17),
                sport: None,
                dport: Some(5202),
            }],
            ..Default::default()
        };
        let mut m = Marker::from_config(&cfg);
        let k = |dport| FlowKey { src: [10, 0, 0, 1].into(), dst: [10, 0, 0, 2].into(), proto: 17, sport: 9, dport };
        assert_eq!(
            (m.policy_of(Some(&k(5202))), m.policy_of(Some(&k(5201))), m.policy_of(None)),
            (Policy::Silver, Policy::Gold, Policy::Gold)
        );
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        m.mark(Some(k(5202)), 1500, 1, 0, &mut rng);
        m.mark(None, 60, 1, 0, &mut rng);
        assert_eq!(m.flows().len(), 2);
        m.mark(Some(k(5201)), 1500, 1, 5 * NS_PER_S, &mut rng);
        assert_eq!(m.flows().len(), 1);
        assert_eq!(m.flows_started, 3);
    }
}
