//! The virtual-time harness of the VDQ-CSAQM tests (`vdq_tests.rs`) and the
//! FQ-DualPI2 tests (`fq_dualpi2_tests.rs`): a real [`Link`] with a
//! discipline from its JSON config, driven by the tests' own sender models
//! (ACK-clocked, one ACK per packet `ACK_DELAY` after it leaves the link, i.e.
//! the paper's 5 ms base RTT): constant-rate UDP-like sources; Reno-like AIMD
//! (slow start, +1 packet per RTT, halved on a loss or a CE echo, at most once
//! per RTT); and a DCTCP-like scalable sender (ECT(1), +1 per RTT, once per RTT
//! of ACKs alpha <- (1 - 1/16) alpha + F/16 with F the marked fraction, and
//! cwnd <- cwnd (1 - alpha / 2) if anything was marked), and the same with
//! TCP Prague's RTT-independent increase (0.04 packet per round at 5 ms, as
//! ccswitch's Prague: docs/l4s.md "Prague fidelity").  A [`Run`] has each
//! flow's tally, the L4S class's sojourn, the CTVs and the Classic queue's
//! head delay every 10 ms, and the discipline's statistics.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use serde_json::Value;

use crate::config::{LinkConfig, QdiscConfig, RateSpec};
use crate::link::{Link, Out};
use crate::packet::{build, Ecn, Packet, QClass};
use crate::qdisc::control::Scalar;
use crate::qdisc::DropCause;
use crate::time::{Nanos, NS_PER_MS};

pub(super) const LEN: usize = 1500;
const ACK_DELAY: Nanos = 5 * NS_PER_MS;
/// [`Cc::Prague`]'s additive increase per round: TCP Prague's RTT independence
/// below 25 ms scales it by (RTT / 25 ms)^2, 0.04 at the 5 ms RTT.
const PRAGUE_AI: f64 = 0.04;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Cc {
    Cbr { gap: Nanos, stop: Nanos },
    Reno,
    Dctcp,
    Prague,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Sender {
    sport: u16,
    ecn: Ecn,
    pub(super) cc: Cc,
    cwnd: f64,
    ssthresh: f64,
    inflight: usize,
    last_cut: Nanos,
    alpha: f64,
    win_acked: f64,
    win_marked: f64,
    pub(super) next_pkt: Nanos,
}

impl Sender {
    fn new(sport: u16, ecn: Ecn, cc: Cc) -> Sender {
        Sender {
            sport,
            ecn,
            cc,
            cwnd: 2.0,
            ssthresh: f64::INFINITY,
            inflight: 0,
            last_cut: 0,
            alpha: 1.0,
            win_acked: 0.0,
            win_marked: 0.0,
            next_pkt: sport as Nanos,
        }
    }
    pub(super) fn cbr(sport: u16, mbit: f64) -> Sender {
        let gap = (LEN as f64 * 8.0 / mbit * 1e3) as Nanos;
        Sender::new(sport, Ecn::NotEct, Cc::Cbr { gap, stop: Nanos::MAX })
    }
    pub(super) fn reno(sport: u16) -> Sender {
        Sender::new(sport, Ecn::NotEct, Cc::Reno)
    }
    pub(super) fn dctcp(sport: u16) -> Sender {
        Sender::new(sport, Ecn::Ect1, Cc::Dctcp)
    }
    /// DCTCP-like with Prague's additive increase ([`PRAGUE_AI`]).
    pub(super) fn prague(sport: u16) -> Sender {
        Sender::new(sport, Ecn::Ect1, Cc::Prague)
    }

    fn halve(&mut self, t: Nanos) {
        if t >= self.last_cut + 2 * ACK_DELAY {
            self.cwnd = (self.cwnd / 2.0).max(2.0);
            self.ssthresh = self.cwnd;
            self.last_cut = t;
        }
    }

    fn ack(&mut self, t: Nanos, marked: bool) {
        self.inflight -= 1;
        if matches!(self.cc, Cc::Dctcp | Cc::Prague) {
            self.win_acked += 1.0;
            self.win_marked += marked as u8 as f64;
            if self.win_acked >= self.cwnd {
                let f = self.win_marked / self.win_acked;
                self.alpha = (1.0 - 1.0 / 16.0) * self.alpha + f / 16.0;
                if self.win_marked > 0.0 {
                    self.cwnd = (self.cwnd * (1.0 - self.alpha / 2.0)).max(2.0);
                    self.ssthresh = self.cwnd;
                }
                self.win_acked = 0.0;
                self.win_marked = 0.0;
            }
        } else if marked {
            self.halve(t);
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd += 1.0;
        } else if self.cc == Cc::Prague {
            self.cwnd += PRAGUE_AI / self.cwnd;
        } else {
            self.cwnd += 1.0 / self.cwnd;
        }
    }
}

#[derive(Debug, Default, Clone)]
pub(super) struct Tally {
    pub(super) bytes_out: u64,
    pub(super) pkts_out: u64,
    pub(super) marks: u64,
    pub(super) drops: u64,
    sojourn_sum: u128,
    pub(super) sojourn_max: Nanos,
}

impl Tally {
    fn mbit(&self, secs: f64) -> f64 {
        self.bytes_out as f64 * 8.0 / secs / 1e6
    }
    pub(super) fn sojourn_ms(&self) -> f64 {
        self.sojourn_sum as f64 / self.pkts_out.max(1) as f64 / 1e6
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Ack { sender: usize, marked: bool },
    Loss { sender: usize },
}

pub(super) struct Sim {
    pub(super) link: Link,
    senders: Vec<Sender>,
    events: BinaryHeap<Reverse<(Nanos, Ev)>>,
    from: Nanos,
    flows: BTreeMap<u16, Tally>,
    /// L4S-class sojourn (from `from`).
    l4s: Tally,
    out: Vec<Out>,
    /// (t, CTV_0, CTV_1) every 10 ms.
    ctv: Vec<(Nanos, u64, u64)>,
    /// (t, the Classic queue's head delay in ms) every 10 ms.
    classic_delay: Vec<(Nanos, f64)>,
}

pub(super) struct Run {
    pub(super) flows: BTreeMap<u16, Tally>,
    pub(super) l4s: Tally,
    secs: f64,
    pub(super) ctv: Vec<(Nanos, u64, u64)>,
    classic_delay: Vec<(Nanos, f64)>,
    pub(super) stats: Option<Value>,
}

impl Run {
    pub(super) fn mbit(&self, sport: u16) -> f64 {
        self.flows[&sport].mbit(self.secs)
    }
    pub(super) fn total_mbit(&self) -> f64 {
        self.flows.values().map(|f| f.mbit(self.secs)).sum()
    }
    /// The Classic queue's head delay (ms) averaged over the 10 ms samples from `from`.
    pub(super) fn classic_delay_mean_ms(&self, from: Nanos) -> f64 {
        let (sum, n) =
            self.classic_delay.iter().filter(|x| x.0 >= from).fold((0.0, 0), |(sum, n), x| (sum + x.1, n + 1));
        sum / n.max(1) as f64
    }
    /// CTV_1 at the last sample at or before `t`.
    pub(super) fn ctv1_at(&self, t: Nanos) -> u64 {
        self.ctv.iter().rev().find(|c| c.0 <= t).map_or(0, |c| c.2)
    }
}

/// A control-state parameter by name.
fn param(s: &[(&'static str, Scalar)], name: &str) -> Option<Scalar> {
    s.iter().find(|p| p.0 == name).map(|p| p.1)
}

fn ctv_param(s: &[(&'static str, Scalar)], name: &str) -> u64 {
    match param(s, name) {
        Some(Scalar::U(v)) => v,
        _ => 0,
    }
}

impl Sim {
    pub(super) fn new(qdisc: &str, rate_mbit: f64, senders: &[Sender], from: Nanos) -> Sim {
        let cfg = LinkConfig {
            rate_mbit: Some(rate_mbit),
            trace: None,
            trace_bytes_per_opportunity: 1500,
            delay_ms: 0.0,
            loss: None,
            qdisc: serde_json::from_str::<QdiscConfig>(qdisc).unwrap(),
            overhead_bytes: 0,
        };
        let link = Link::new(&cfg, RateSpec::Constant { bps: (rate_mbit * 1e6) as u64 }, 1, 0);
        let flows = senders.iter().map(|s| (s.sport, Tally::default())).collect();
        Sim {
            link,
            senders: senders.to_vec(),
            events: BinaryHeap::new(),
            from,
            flows,
            l4s: Tally::default(),
            out: vec![],
            ctv: vec![],
            classic_delay: vec![],
        }
    }

    fn send(&mut self, i: usize, t: Nanos) {
        let s = &self.senders[i];
        let frame = build::ipv4_udp_ports([2; 6], [4; 6], LEN, s.ecn, s.sport, 5201);
        self.link.enqueue(Packet::from_frame(&frame, t), t, &mut self.out);
        self.absorb();
    }

    pub(super) fn pump(&mut self, i: usize, t: Nanos) {
        if matches!(self.senders[i].cc, Cc::Cbr { .. }) {
            return;
        }
        while self.senders[i].inflight < self.senders[i].cwnd as usize {
            self.senders[i].inflight += 1;
            self.send(i, t);
        }
    }

    fn absorb(&mut self) {
        for o in std::mem::take(&mut self.out) {
            let (pkt, t) = match &o {
                Out::Depart { pkt, t } | Out::Drop { pkt, t, .. } => (pkt, *t),
            };
            let sport = pkt.flow_key().unwrap().sport;
            let i = self.senders.iter().position(|s| s.sport == sport).unwrap();
            let window = !matches!(self.senders[i].cc, Cc::Cbr { .. });
            let f = self.flows.get_mut(&sport).unwrap();
            match &o {
                Out::Depart { .. } => {
                    if t >= self.from {
                        f.bytes_out += pkt.ip_len() as u64;
                        f.pkts_out += 1;
                        f.marks += pkt.marked as u64;
                        f.sojourn_sum += pkt.sojourn as u128;
                        if pkt.class == QClass::L4s {
                            self.l4s.pkts_out += 1;
                            self.l4s.sojourn_sum += pkt.sojourn as u128;
                            self.l4s.sojourn_max = self.l4s.sojourn_max.max(pkt.sojourn);
                        }
                    }
                    if window {
                        self.events.push(Reverse((t + ACK_DELAY, Ev::Ack { sender: i, marked: pkt.marked })));
                    }
                }
                Out::Drop { cause, .. } => {
                    assert!(matches!(cause, DropCause::Aqm | DropCause::Queue));
                    if t >= self.from {
                        f.drops += 1;
                    }
                    if window {
                        self.events.push(Reverse((t + 2 * ACK_DELAY, Ev::Loss { sender: i })));
                    }
                }
            }
        }
    }

    pub(super) fn run(mut self, until: Nanos) -> Run {
        for i in 0..self.senders.len() {
            self.pump(i, 0);
        }
        let mut next_sample = 0;
        loop {
            let t_link = self.link.next_event().unwrap_or(Nanos::MAX);
            let t_cbr = self
                .senders
                .iter()
                .filter_map(|s| match s.cc {
                    Cc::Cbr { stop, .. } if s.next_pkt < stop => Some(s.next_pkt),
                    _ => None,
                })
                .min()
                .unwrap_or(Nanos::MAX);
            let t_ev = self.events.peek().map_or(Nanos::MAX, |e| e.0 .0);
            let t = t_link.min(t_cbr).min(t_ev).min(next_sample);
            if t > until {
                break;
            }
            self.link.process(t, &mut self.out);
            self.absorb();
            if t == next_sample {
                let p = self.link.qdisc().control_state(t, 0).params;
                self.ctv.push((t, ctv_param(&p, "ctv_l4s"), ctv_param(&p, "ctv_classic")));
                if let Some(Scalar::F(d)) = param(&p, "classic_delay_ms") {
                    self.classic_delay.push((t, d));
                }
                next_sample += 10 * NS_PER_MS;
            }
            while self.events.peek().is_some_and(|e| e.0 .0 == t) {
                let Reverse((_, ev)) = self.events.pop().unwrap();
                let i = match ev {
                    Ev::Ack { sender, marked } => {
                        self.senders[sender].ack(t, marked);
                        sender
                    }
                    Ev::Loss { sender } => {
                        self.senders[sender].inflight -= 1;
                        self.senders[sender].halve(t);
                        sender
                    }
                };
                self.pump(i, t);
            }
            for i in 0..self.senders.len() {
                if let Cc::Cbr { gap, stop } = self.senders[i].cc {
                    let n = self.senders[i].next_pkt;
                    if n == t && n < stop {
                        self.senders[i].next_pkt += gap;
                        self.send(i, t);
                    }
                }
            }
        }
        let secs = (until - self.from) as f64 / 1e9;
        Run {
            flows: self.flows,
            l4s: self.l4s,
            secs,
            ctv: self.ctv,
            classic_delay: self.classic_delay,
            stats: self.link.qdisc().stats_json(),
        }
    }
}

pub(super) fn run(qdisc: &str, rate_mbit: f64, senders: &[Sender], until: Nanos, from: Nanos) -> Run {
    Sim::new(qdisc, rate_mbit, senders, from).run(until)
}
