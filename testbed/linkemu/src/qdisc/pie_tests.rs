//! Virtual-time tests of what defines PIE and fq_pie, through a real
//! [`Link`] (10 Mbit/s, 1500-byte packets: 1.2 ms each on the wire), next
//! to pfifo (or pie for fq_pie), which fails the same checks: the delay held
//! at the 15 ms target under unresponsive overload and with a responsive
//! sender, the burst allowance, ECN marking under the 10 % rule, and fq_pie's
//! isolation of a sparse flow.
//!
//! Sources: constant-rate UDP-like senders, and an AIMD window sender (the
//! test's own Reno-like model: slow start to the first loss, then one packet
//! more per round trip, the window halved on a loss or an echoed CE mark, at
//! most once per round trip; ACKs come back 20 ms after a packet leaves the
//! link, which adds 20 ms of propagation: a 40 ms base RTT).  Every packet
//! carries a sequence number, so a verdict can be checked against the drop
//! probability at its enqueue.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use serde_json::Value;

use crate::config::{LinkConfig, QdiscConfig, RateSpec};
use crate::link::{Link, Out};
use crate::packet::{build, Ecn, Packet};
use crate::qdisc::DropCause;
use crate::time::{Nanos, NS_PER_MS, NS_PER_S};
use crate::trace::Trace;

const LEN: usize = 1500;
/// Payload offset of the sequence number (Ethernet 14 + IPv4 20 + UDP 8).
const SEQ_AT: usize = 42;
const RATE_MBIT: f64 = 10.0;

/// A constant-rate source of `LEN`-byte packets from `start` to `stop`.
#[derive(Clone, Copy)]
struct Cbr {
    sport: u16,
    gap: Nanos,
    ecn: Ecn,
    start: Nanos,
    stop: Nanos,
}

impl Cbr {
    fn mbit(sport: u16, mbit: f64) -> Cbr {
        let gap = (LEN as f64 * 8.0 / mbit * 1e3) as Nanos;
        Cbr { sport, gap, ecn: Ecn::NotEct, start: sport as Nanos, stop: Nanos::MAX }
    }
}

/// The AIMD sender (module comment).
#[derive(Clone, Copy)]
struct Aimd {
    sport: u16,
    ecn: Ecn,
    cwnd: f64,
    ssthresh: f64,
    inflight: usize,
    last_cut: Nanos,
}

const ACK_DELAY: Nanos = 20 * NS_PER_MS;
const BASE_RTT: Nanos = 40 * NS_PER_MS;

impl Aimd {
    fn new(sport: u16, ecn: Ecn) -> Aimd {
        Aimd { sport, ecn, cwnd: 2.0, ssthresh: f64::INFINITY, inflight: 0, last_cut: 0 }
    }

    fn congestion(&mut self, t: Nanos) {
        if t >= self.last_cut + BASE_RTT {
            self.cwnd = (self.cwnd / 2.0).max(2.0);
            self.ssthresh = self.cwnd;
            self.last_cut = t;
        }
    }

    fn ack(&mut self, t: Nanos, marked: bool) {
        self.inflight -= 1;
        if marked {
            self.congestion(t);
        } else if self.cwnd < self.ssthresh {
            self.cwnd += 1.0;
        } else {
            self.cwnd += 1.0 / self.cwnd;
        }
    }
}

/// What one source got from `from` on.
#[derive(Debug, Default)]
struct Tally {
    pkts_in: u64,
    pkts_out: u64,
    drops_queue: u64,
    drops_aqm: u64,
    marks: u64,
    sojourn_sum: u128,
    sojourn_max: Nanos,
    /// Whole run: CE marks made while p > 10 %, AQM drops while p <= 10 % (the ECN rule).
    marks_above_10: u64,
    drops_at_or_below_10: u64,
    /// Whole run: instant of the first drop.
    first_drop: Option<Nanos>,
}

impl Tally {
    fn sojourn_mean_ms(&self) -> f64 {
        self.sojourn_sum as f64 / self.pkts_out.max(1) as f64 / 1e6
    }
    fn drops(&self) -> u64 {
        self.drops_queue + self.drops_aqm
    }
    fn drop_frac(&self) -> f64 {
        self.drops() as f64 / self.pkts_in.max(1) as f64
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Ack { sender: usize, marked: bool },
    Loss { sender: usize },
}

struct Sim {
    link: Link,
    cbrs: Vec<(Cbr, Nanos)>,
    aimds: Vec<Aimd>,
    events: BinaryHeap<Reverse<(Nanos, Ev)>>,
    /// Drop probability at each packet's enqueue (NaN: the qdisc has none).
    p_at: Vec<f64>,
    from: Nanos,
    flows: BTreeMap<u16, Tally>,
    out: Vec<Out>,
    /// IP bytes that left the link from `from` on.
    bytes_out: u64,
}

/// The outcome of a run: per-source tallies and the qdisc's statistics.
struct Run {
    flows: BTreeMap<u16, Tally>,
    stats: Option<Value>,
    /// Bytes sent on the link from `from` on, as a share of its capacity.
    utilisation: f64,
}

impl Sim {
    fn new(qdisc: &str, cbrs: &[Cbr], aimds: &[Aimd], from: Nanos) -> Sim {
        Sim::with_rate(qdisc, RateSpec::Constant { bps: (RATE_MBIT * 1e6) as u64 }, cbrs, aimds, from)
    }

    /// [`Sim::new`] with another transmitter (a trace).
    fn with_rate(qdisc: &str, rate: RateSpec, cbrs: &[Cbr], aimds: &[Aimd], from: Nanos) -> Sim {
        let cfg = LinkConfig {
            rate_mbit: Some(RATE_MBIT),
            trace: None,
            trace_bytes_per_opportunity: 1500,
            delay_ms: (ACK_DELAY / NS_PER_MS) as f64,
            loss: None,
            qdisc: serde_json::from_str::<QdiscConfig>(qdisc).unwrap(),
            overhead_bytes: 0,
        };
        let link = Link::new(&cfg, rate, 1, 0);
        let mut flows = BTreeMap::new();
        for s in cbrs.iter().map(|c| c.sport).chain(aimds.iter().map(|a| a.sport)) {
            flows.insert(s, Tally::default());
        }
        Sim {
            link,
            cbrs: cbrs.iter().map(|&c| (c, c.start)).collect(),
            aimds: aimds.to_vec(),
            events: BinaryHeap::new(),
            p_at: vec![],
            from,
            flows,
            out: vec![],
            bytes_out: 0,
        }
    }

    fn send(&mut self, sport: u16, ecn: Ecn, t: Nanos) {
        let mut frame = build::ipv4_udp_ports([2; 6], [4; 6], LEN, ecn, sport, 5201);
        let seq = self.p_at.len() as u64;
        frame[SEQ_AT..SEQ_AT + 8].copy_from_slice(&seq.to_be_bytes());
        self.p_at.push(self.link.qdisc().base_prob().unwrap_or(f64::NAN));
        if t >= self.from {
            self.flows.get_mut(&sport).unwrap().pkts_in += 1;
        }
        self.link.enqueue(Packet::from_frame(&frame, t), t, &mut self.out);
        self.absorb();
    }

    /// Send what sender `i`'s window allows.
    fn pump(&mut self, i: usize, t: Nanos) {
        while self.aimds[i].inflight < self.aimds[i].cwnd as usize {
            self.aimds[i].inflight += 1;
            let (sport, ecn) = (self.aimds[i].sport, self.aimds[i].ecn);
            self.send(sport, ecn, t);
        }
    }

    /// Tally what the link emitted; AIMD packets schedule their ACK or loss notice.
    fn absorb(&mut self) {
        for o in std::mem::take(&mut self.out) {
            let (pkt, t) = match &o {
                Out::Depart { pkt, t } | Out::Drop { pkt, t, .. } => (pkt, *t),
            };
            let sport = pkt.flow_key().unwrap().sport;
            let seq = u64::from_be_bytes(pkt.frame()[SEQ_AT..SEQ_AT + 8].try_into().unwrap()) as usize;
            let p = self.p_at[seq];
            let sender = self.aimds.iter().position(|a| a.sport == sport);
            let f = self.flows.get_mut(&sport).unwrap();
            match &o {
                Out::Depart { .. } => {
                    f.marks_above_10 += (pkt.marked && p > 0.1) as u64;
                    if t >= self.from {
                        self.bytes_out += pkt.ip_len() as u64;
                        f.pkts_out += 1;
                        f.marks += pkt.marked as u64;
                        f.sojourn_sum += pkt.sojourn as u128;
                        f.sojourn_max = f.sojourn_max.max(pkt.sojourn);
                    }
                    if let Some(sender) = sender {
                        self.events.push(Reverse((t + ACK_DELAY, Ev::Ack { sender, marked: pkt.marked })));
                    }
                }
                Out::Drop { cause, .. } => {
                    f.drops_at_or_below_10 += (*cause == DropCause::Aqm && p <= 0.1) as u64;
                    f.first_drop = f.first_drop.or(Some(t));
                    if t >= self.from {
                        f.drops_aqm += (*cause == DropCause::Aqm) as u64;
                        f.drops_queue += (*cause == DropCause::Queue) as u64;
                    }
                    if let Some(sender) = sender {
                        self.events.push(Reverse((t + BASE_RTT, Ev::Loss { sender })));
                    }
                }
            }
        }
    }

    fn run(mut self, until: Nanos) -> Run {
        for i in 0..self.aimds.len() {
            self.pump(i, 0);
        }
        loop {
            let t_link = self.link.next_event().unwrap_or(Nanos::MAX);
            let t_cbr = self.cbrs.iter().filter(|(c, n)| *n < c.stop).map(|c| c.1).min().unwrap_or(Nanos::MAX);
            let t_ev = self.events.peek().map_or(Nanos::MAX, |e| e.0 .0);
            let t = t_link.min(t_cbr).min(t_ev);
            if t > until {
                break;
            }
            self.link.process(t, &mut self.out);
            self.absorb();
            while self.events.peek().is_some_and(|e| e.0 .0 == t) {
                let Reverse((_, ev)) = self.events.pop().unwrap();
                let i = match ev {
                    Ev::Ack { sender, marked } => {
                        self.aimds[sender].ack(t, marked);
                        sender
                    }
                    Ev::Loss { sender } => {
                        self.aimds[sender].inflight -= 1;
                        self.aimds[sender].congestion(t);
                        sender
                    }
                };
                self.pump(i, t);
            }
            for k in 0..self.cbrs.len() {
                let (c, next) = self.cbrs[k];
                if next == t && next < c.stop {
                    self.cbrs[k].1 += c.gap;
                    self.send(c.sport, c.ecn, t);
                }
            }
        }
        let secs = (until - self.from) as f64 / 1e9;
        let utilisation = self.bytes_out as f64 * 8.0 / secs / (RATE_MBIT * 1e6);
        Run { flows: self.flows, stats: self.link.qdisc().stats_json(), utilisation }
    }
}

fn run(qdisc: &str, cbrs: &[Cbr], aimds: &[Aimd], until: Nanos, from: Nanos) -> Run {
    Sim::new(qdisc, cbrs, aimds, from).run(until)
}

const PIE: &str = r#"{"kind": "pie"}"#;
const PFIFO: &str = r#"{"kind": "pfifo", "limit_pkts": 1000}"#;

#[test]
fn pie_holds_an_unresponsive_overload_at_its_target() {
    // 12 Mbit/s of UDP into 10 Mbit/s for 60 s, measured over the last 40 s:
    // 1/6 of the packets must go.  Tolerances: the drop fraction +-0.005
    // (the queue changes by a few packets of 40000 arrivals; the rest is
    // the controller's wander); the mean sojourn 15 ms +-1 ms: PIE's
    // integral term makes the sum of its updates, p_end - p_start =
    // sum(alpha (q_i - target)) + beta (q_N - q_0), so over the 2667 updates
    // (all at p >= 10 %, unscaled gains) the qdelay samples average target
    // within (0.2 + 1.25 * 0.05) / (0.125 * 2667) = 0.8 ms, and the samples
    // (the last departure's sojourn, every 15 ms) stand for the packets on
    // a link that never idles.
    let (until, from) = (60 * NS_PER_S, 20 * NS_PER_S);
    let r = run(PIE, &[Cbr::mbit(1, 12.0)], &[], until, from);
    let f = &r.flows[&1];
    assert!((f.drop_frac() - 1.0 / 6.0).abs() < 0.005, "{f:?}");
    assert_eq!(f.drops_queue, 0, "the 1000-packet limit is never reached");
    assert!((f.sojourn_mean_ms() - 15.0).abs() < 1.0, "mean sojourn {:.2} ms", f.sojourn_mean_ms());
    assert!(r.utilisation > 0.999, "{}", r.utilisation);
    let s = r.stats.unwrap();
    assert_eq!(s["kind"], "pie");
    // De-randomised drops come less often than p: after the packets whose
    // summed p stays below 0.85, then one in 1/p (pie/tests.rs): one in
    // 3 + 1/p packets up to p = 0.283, 2 + 1/p above, so one in 6 needs p
    // to dither around 0.28 (measured at the end: 0.30).
    let p = s["prob"].as_f64().unwrap();
    assert!(p > 0.2 && p < 0.35, "p = {p}");
    // pfifo, the same load: full (1000 packets, 1.2 s), tail drops.
    let r = run(PFIFO, &[Cbr::mbit(1, 12.0)], &[], until, from);
    let f = &r.flows[&1];
    assert!(f.sojourn_mean_ms() > 1_150.0, "{f:?}");
    assert!((f.drop_frac() - 1.0 / 6.0).abs() < 0.005, "{f:?}");
}

#[test]
fn pie_holds_an_aimd_sender_near_its_target() {
    // One AIMD sender, 40 ms base RTT (BDP 33 packets), 60 s, measured over
    // the last 40 s (~25 sawtooth cycles, one drop each).  Tolerance +-3 ms
    // (measured 16.1): the integral identity of the overload test holds for
    // the updates weighted by their auto-tuned gain, and here p (~0.4 %)
    // moves across the 0.1 % and 1 % steps of the tuning (gains x1/32, x1/8,
    // x1/2), so the low-p samples of each cycle's trough weigh less and the
    // plain mean sits a little above target; each cycle swings the queue by
    // about W/2 = 23 packets (28 ms) around it.
    let (until, from) = (60 * NS_PER_S, 20 * NS_PER_S);
    let r = run(PIE, &[], &[Aimd::new(1, Ecn::NotEct)], until, from);
    let f = &r.flows[&1];
    assert!((f.sojourn_mean_ms() - 15.0).abs() < 3.0, "mean sojourn {:.2} ms", f.sojourn_mean_ms());
    assert!(f.drops_aqm >= 10 && f.drops_queue == 0, "{f:?}");
    assert!(f.sojourn_max < 60 * NS_PER_MS, "{f:?}");
    assert!(r.utilisation > 0.98, "{}", r.utilisation);
    // pfifo: the sender fills the 1000-packet buffer before it backs off;
    // its queue never drains (mean sojourn 0.67 s measured).
    let r = run(PFIFO, &[], &[Aimd::new(1, Ecn::NotEct)], until, from);
    let f = &r.flows[&1];
    assert!(f.sojourn_mean_ms() > 300.0, "{f:?}");
}

/// A trace link with one 1500-byte opportunity per ms (12 Mbit/s) and an
/// outage of `outage_ms` from 1 s on.
fn outage(outage_ms: u64) -> RateSpec {
    let times: Vec<u64> = (1..=5_000).filter(|t| !(1_000..1_000 + outage_ms).contains(t)).collect();
    RateSpec::Trace(Trace::from_times(times).unwrap())
}

#[test]
fn the_burst_allowance_lets_a_burst_through() {
    // A 4 Mbit/s stream (one packet per 3 ms) through a 12 Mbit/s link whose
    // transmitter stops for 450 ms at 1 s (a trace gap, a radio outage):
    // PIE rests before it (delay ~0, p = 0); the outage turns the stream into
    // a burst of 150 packets the link drains in 225 ms, first packet out after
    // 450 ms.  The queue delay estimate (the last departure's sojourn) only
    // sees the burst once the link sends again; above 250 ms it adds 2 % to
    // p per update (the auto-tuned gains alone would keep p below 0.1 % for
    // ~100 ms after a rest, so a burst into a working link never grows p
    // enough: the allowance matters when the delay jumps, as here).  With the
    // 150 ms allowance (Linux's) nothing is dropped; without it, PIE drops
    // (measured: 4) while p is high and the queue still long.
    let src = Cbr { gap: 3 * NS_PER_MS, ..Cbr::mbit(1, 4.0) };
    let q = |burst: u64| format!(r#"{{"kind": "pie", "max_burst_ms": {burst}}}"#);
    let with = Sim::with_rate(&q(150), outage(450), &[src], &[], 0).run(4 * NS_PER_S);
    let f = &with.flows[&1];
    assert_eq!(f.drops(), 0, "{f:?}");
    assert!(f.sojourn_max > 440 * NS_PER_MS, "a real burst: {f:?}");
    let without = Sim::with_rate(&q(0), outage(450), &[src], &[], 0).run(4 * NS_PER_S);
    let f = &without.flows[&1];
    assert!(f.drops_aqm >= 1 && f.drops_queue == 0, "{f:?}");
    // A longer outage (800 ms, a 400-ms drain): the allowance does not save
    // every packet, but it holds every drop back for 150 ms of dequeuing
    // after the outage (which ends at 1.8 s); without it drops start earlier.
    let end = 1_800 * NS_PER_MS;
    let with = Sim::with_rate(&q(150), outage(800), &[src], &[], 0).run(4 * NS_PER_S);
    let without = Sim::with_rate(&q(0), outage(800), &[src], &[], 0).run(4 * NS_PER_S);
    let (w, wo) = (&with.flows[&1], &without.flows[&1]);
    assert!(w.first_drop.unwrap() >= end + 150 * NS_PER_MS, "{w:?}");
    assert!(wo.first_drop.unwrap() < end + 150 * NS_PER_MS, "{wo:?}");
    assert!(w.drops() < wo.drops(), "{w:?} {wo:?}");
}

#[test]
fn pie_marks_ect_packets_while_p_is_at_most_ten_percent() {
    let (until, from) = (60 * NS_PER_S, 20 * NS_PER_S);
    // An ECN-capable AIMD sender that halves on echoed CE: p stays far below
    // 10 %, so every signal is a mark, none a drop, and the delay is held as
    // with drops (the +-3 ms band of the AIMD test).
    let r = run(r#"{"kind": "pie", "ecn": true}"#, &[], &[Aimd::new(1, Ecn::Ect0)], until, from);
    let f = &r.flows[&1];
    assert_eq!(f.drops(), 0, "{f:?}");
    assert!(f.marks >= 10, "one per sawtooth, ~1.6 s apart (measured 24): {f:?}");
    assert!((f.sojourn_mean_ms() - 15.0).abs() < 3.0, "mean sojourn {:.2} ms", f.sojourn_mean_ms());
    assert_eq!(f.marks_above_10, 0);
    // The same sender without `ecn`: drops instead.
    let r = run(PIE, &[], &[Aimd::new(1, Ecn::Ect0)], until, from);
    assert!(r.flows[&1].marks == 0 && r.flows[&1].drops_aqm > 20, "{:?}", r.flows[&1]);
    // Unresponsive ECT(0) at 12 Mbit/s: marks cannot shed the excess, p
    // climbs past 10 % and PIE drops instead (Linux's rule; otherwise the
    // queue would fill).  Every mark was made at p <= 10 %, every drop at
    // p > 10 %; the excess (1/6) is dropped and the delay held as in the
    // Not-ECT overload test (+-1 ms).
    let ect = Cbr { ecn: Ecn::Ect0, ..Cbr::mbit(1, 12.0) };
    let r = run(r#"{"kind": "pie", "ecn": true}"#, &[ect], &[], until, from);
    let f = &r.flows[&1];
    assert_eq!((f.marks_above_10, f.drops_at_or_below_10), (0, 0), "{f:?}");
    assert!((f.drop_frac() - 1.0 / 6.0).abs() < 0.005, "{f:?}");
    assert!((f.sojourn_mean_ms() - 15.0).abs() < 1.0, "mean sojourn {:.2} ms", f.sojourn_mean_ms());
    let s = r.stats.unwrap();
    assert!(s["ecn_marks"].as_u64().unwrap() > 0, "marks while p rose to 10 %: {s}");
}

#[test]
fn fq_pie_isolates_a_sparse_flow_from_a_heavy_one() {
    // 10 Mbit/s shared by an unresponsive 20 Mbit/s flow and a sparse 1 Mbit/s
    // one (both 1500-byte packets), 30 s, measured over the last 20.
    let heavy = Cbr::mbit(1, 20.0);
    let sparse = Cbr::mbit(2, 1.0);
    let (until, from) = (30 * NS_PER_S, 10 * NS_PER_S);
    let r = run(r#"{"kind": "fq_pie"}"#, &[heavy, sparse], &[], until, from);
    let (h, s) = (&r.flows[&1], &r.flows[&2]);
    // The sparse flow never queues 2 MTU of its own: never dropped; it waits
    // at most for the heavy packet on the wire and one more (2.4 ms, as fq_codel).
    assert_eq!(s.drops(), 0, "{s:?}");
    assert!(s.sojourn_max <= 2_400_000, "{s:?}");
    // The heavy flow's own PIE holds its queue at the target (+-1 ms, the
    // argument of the pie overload test) and drops its excess: it gets the
    // other 9 Mbit/s of 20, 55 % dropped (+-0.005).
    assert!((h.sojourn_mean_ms() - 15.0).abs() < 1.0, "{h:?} {}", h.sojourn_mean_ms());
    assert!((h.drop_frac() - 0.55).abs() < 0.005, "{h:?}");
    let st = r.stats.unwrap();
    assert_eq!((st["kind"].as_str(), st["shared_queues"].as_u64()), (Some("fq_pie"), Some(0)));
    let flow = |p: u16| st["top_flows"].as_array().unwrap().iter().find(|f| f["sport"] == p).unwrap().clone();
    assert_eq!(flow(2)["drops"], serde_json::json!({"overflow": 0, "flow_limit": 0, "aqm": 0}));
    assert!(flow(1)["drops"]["aqm"].as_u64().unwrap() > 20_000);
    // One PIE for both (the same traffic): the sparse flow shares the heavy
    // flow's 15 ms queue and its drop probability.
    let r = run(PIE, &[heavy, sparse], &[], until, from);
    let s = &r.flows[&2];
    assert!(s.drop_frac() > 0.3, "{s:?}");
    assert!(s.sojourn_mean_ms() > 10.0, "{s:?}");
}
