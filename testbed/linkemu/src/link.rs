//! One direction of the bottleneck link: loss -> qdisc -> transmitter -> propagation.
//!
//! ```text
//!   enqueue(t) --loss--> [ qdisc ] --dequeue--> transmitter --+--> delay line --> departure
//!                 |           |                 (rate/trace)  |    (+delay_ms)
//!                 v           v
//!              drop:loss   drop:queue/aqm
//! ```
//!
//! The transmitter is one of:
//! * unlimited: a packet is dequeued as soon as it is enqueued (the qdisc never
//!   holds anything; only delay and loss apply);
//! * constant rate: a packet of L bytes (IP length + `overhead_bytes`) occupies
//!   the transmitter for L*8/rate seconds.  The next packet is dequeued when the
//!   previous one has been serialised, so the queue builds in the qdisc and the
//!   sojourn a qdisc sees is exactly the queueing delay.  Sub-nanosecond
//!   remainders are carried, so the long-run rate is exact;
//! * trace (Mahimahi): the transmitter may send only at the trace's delivery
//!   opportunities, each carrying `trace_bytes_per_opportunity` (1500) bytes.
//!   A packet is dequeued at the first opportunity that has room for it; bytes
//!   of an opportunity left unused when the queue runs empty are lost (there is
//!   no banking of capacity across idle periods), and a packet larger than the
//!   remaining bytes of an opportunity continues in the next one, as in
//!   Mahimahi's LinkQueue.
//!
//! After serialisation a packet spends `delay_ms` in the delay line
//! (propagation) and then departs.  All serialisation ends are ordered and the
//! delay is constant, so the delay line is a FIFO.
//!
//! Everything is in terms of the instant passed in by the caller; the link has
//! no clock of its own and reports the instant of its next internal event with
//! [`Link::next_event`].

use std::collections::VecDeque;

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

use crate::config::{LinkConfig, RateSpec};
use crate::loss::LossModel;
use crate::packet::Packet;
use crate::qdisc::{self, DropCause, Dropped, Qdisc};
use crate::time::{tx_time, Nanos};
use crate::trace::Trace;

/// What leaves a stage: a packet dropped at `t`, or a packet departing at `t`.
#[derive(Debug)]
pub enum Out {
    Drop { pkt: Packet, cause: DropCause, t: Nanos },
    Depart { pkt: Packet, t: Nanos },
}

enum Transmitter {
    Unlimited,
    Rate {
        bps: u64,
        busy_until: Nanos,
        carry: u64,
    },
    Trace {
        trace: Trace,
        bytes_per_opp: usize,
        /// Index of the next opportunity not yet used.
        next_opp: u64,
        /// Packet being carried over several opportunities, and its bytes left.
        inflight: Option<(Packet, usize)>,
    },
}

pub struct Link {
    loss: LossModel,
    rng: Pcg64Mcg,
    qdisc: Box<dyn Qdisc>,
    tx: Transmitter,
    overhead: usize,
    delay: Nanos,
    line: VecDeque<(Nanos, Packet)>,
    /// Time origin of the trace.
    origin: Nanos,
    scratch: Vec<Dropped>,
}

impl Link {
    /// A link as configured; `seed` feeds its loss stream; `origin` is the
    /// instant the trace (if any) starts.
    pub fn new(cfg: &LinkConfig, rate: RateSpec, seed: u64, origin: Nanos) -> Link {
        let tx = match rate {
            RateSpec::Unlimited => Transmitter::Unlimited,
            RateSpec::Constant { bps } => Transmitter::Rate { bps, busy_until: 0, carry: 0 },
            RateSpec::Trace(trace) => Transmitter::Trace {
                trace,
                bytes_per_opp: cfg.trace_bytes_per_opportunity,
                next_opp: 0,
                inflight: None,
            },
        };
        Link {
            loss: LossModel::new(cfg.loss.as_ref()),
            rng: Pcg64Mcg::seed_from_u64(seed),
            qdisc: qdisc::build(&cfg.qdisc.for_link(cfg.rate_mbit), seed ^ 0x05ee_d0f9_d15c),
            tx,
            overhead: cfg.overhead_bytes,
            delay: (cfg.delay_ms * 1e6).round() as Nanos,
            line: VecDeque::new(),
            origin,
            scratch: Vec::new(),
        }
    }

    /// Packets waiting in the qdisc.
    pub fn queue_len(&self) -> usize {
        self.qdisc.len()
    }

    /// Packets anywhere in the link (qdisc, transmitter, delay line).
    pub fn in_flight(&self) -> usize {
        let carried = matches!(self.tx, Transmitter::Trace { inflight: Some(_), .. }) as usize;
        self.qdisc.len() + carried + self.line.len()
    }

    pub fn qdisc_kind(&self) -> &'static str {
        self.qdisc.kind()
    }

    /// The bottleneck qdisc (per-class lengths, probabilities, counters).
    pub fn qdisc(&self) -> &dyn Qdisc {
        self.qdisc.as_ref()
    }

    /// The bottleneck qdisc, to change its parameters (control socket).
    pub fn qdisc_mut(&mut self) -> &mut dyn Qdisc {
        self.qdisc.as_mut()
    }

    /// A packet reaches the link at `now` (>= every instant processed so far).
    pub fn enqueue(&mut self, pkt: Packet, now: Nanos, out: &mut Vec<Out>) {
        if self.loss.lose(&mut self.rng) {
            out.push(Out::Drop { pkt, cause: DropCause::Loss, t: now });
            return;
        }
        if let Err(d) = self.qdisc.enqueue(pkt, now) {
            let Dropped { pkt, cause } = *d;
            out.push(Out::Drop { pkt, cause, t: now });
            return;
        }
        if let Transmitter::Trace { trace, next_opp, inflight: None, .. } = &mut self.tx {
            // Idle until now: skip the opportunities that passed unused.
            let first = trace.first_at_or_after(now.saturating_sub(self.origin));
            *next_opp = (*next_opp).max(first);
        }
        self.process(now, out);
    }

    /// Instant of the next thing this link has to do, if any.
    pub fn next_event(&self) -> Option<Nanos> {
        let mut next = self.line.front().map(|(t, _)| *t);
        let mut consider = |t: Nanos| next = Some(next.map_or(t, |n: Nanos| n.min(t)));
        if let Some(t) = self.qdisc.next_timer() {
            consider(t);
        }
        match &self.tx {
            Transmitter::Unlimited => {}
            Transmitter::Rate { busy_until, .. } => {
                if !self.qdisc.is_empty() {
                    consider(*busy_until);
                }
            }
            Transmitter::Trace { trace, next_opp, inflight, .. } => {
                if inflight.is_some() || !self.qdisc.is_empty() {
                    consider(self.origin + trace.time_of(*next_opp));
                }
            }
        }
        next
    }

    /// Do everything due at or before `now`; departures and drops go to `out`.
    pub fn process(&mut self, now: Nanos, out: &mut Vec<Out>) {
        if self.qdisc.next_timer().is_some_and(|t| t <= now) {
            self.qdisc.on_timer(now);
        }
        self.transmit(now, out);
        while self.line.front().is_some_and(|(t, _)| *t <= now) {
            let (t, pkt) = self.line.pop_front().unwrap();
            out.push(Out::Depart { pkt, t });
        }
    }

    fn dequeue(&mut self, at: Nanos, out: &mut Vec<Out>) -> Option<Packet> {
        let p = self.qdisc.dequeue(at, &mut self.scratch);
        for d in self.scratch.drain(..) {
            out.push(Out::Drop { pkt: d.pkt, cause: d.cause, t: at });
        }
        p.map(|mut p| {
            p.sojourn += at.saturating_sub(p.enqueued);
            p
        })
    }

    fn transmit(&mut self, now: Nanos, out: &mut Vec<Out>) {
        match self.tx {
            Transmitter::Unlimited => {
                while let Some(p) = self.dequeue(now, out) {
                    self.line.push_back((now + self.delay, p));
                }
                // A qdisc may drop everything it holds and return None while
                // packets remain in theory; it cannot here (it is emptied).
            }
            Transmitter::Rate { .. } => loop {
                let Transmitter::Rate { busy_until, .. } = self.tx else { unreachable!() };
                if busy_until > now || self.qdisc.is_empty() {
                    break;
                }
                // Start the next packet when the previous one ended, or now if
                // the transmitter has been idle.
                let start = busy_until.max(now);
                let Some(p) = self.dequeue(start, out) else {
                    if !self.qdisc.is_empty() {
                        // A discipline holding packets back (not done by pfifo
                        // or CoDel): look again a little later instead of
                        // reporting the same due instant forever.
                        if let Transmitter::Rate { busy_until, .. } = &mut self.tx {
                            *busy_until = start + 1_000;
                        }
                    }
                    break;
                };
                let bits = ((p.ip_len() + self.overhead) * 8) as u64;
                let Transmitter::Rate { bps, busy_until, carry } = &mut self.tx else { unreachable!() };
                let end = start + tx_time(bits, *bps, carry);
                *busy_until = end;
                self.line.push_back((end + self.delay, p));
            },
            Transmitter::Trace { .. } => self.serve_opportunities(now, out),
        }
    }

    fn serve_opportunities(&mut self, now: Nanos, out: &mut Vec<Out>) {
        loop {
            let Transmitter::Trace { trace, next_opp, inflight, .. } = &self.tx else { unreachable!() };
            let t = self.origin + trace.time_of(*next_opp);
            if t > now || (inflight.is_none() && self.qdisc.is_empty()) {
                return;
            }
            let Transmitter::Trace { bytes_per_opp, .. } = self.tx else { unreachable!() };
            let mut budget = bytes_per_opp;
            while budget > 0 {
                let carried = match &mut self.tx {
                    Transmitter::Trace { inflight, .. } => inflight.take(),
                    _ => unreachable!(),
                };
                let (p, left) = match carried {
                    Some(x) => x,
                    None => match self.dequeue(t, out) {
                        Some(p) => {
                            let l = (p.ip_len() + self.overhead).max(1);
                            (p, l)
                        }
                        None => break, // queue empty: the rest of this opportunity is wasted
                    },
                };
                let used = left.min(budget);
                budget -= used;
                if left == used {
                    self.line.push_back((t + self.delay, p));
                } else if let Transmitter::Trace { inflight, .. } = &mut self.tx {
                    *inflight = Some((p, left - used));
                }
            }
            if let Transmitter::Trace { next_opp, .. } = &mut self.tx {
                *next_opp += 1;
            }
        }
    }

    /// Take every packet still inside (shutdown accounting).
    pub fn drain(&mut self) -> Vec<Packet> {
        let mut v: Vec<Packet> = self.line.drain(..).map(|(_, p)| p).collect();
        if let Transmitter::Trace { inflight, .. } = &mut self.tx {
            if let Some((p, _)) = inflight.take() {
                v.push(p);
            }
        }
        v.extend(self.qdisc.drain());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Bernoulli, LossConfig, Pfifo, QdiscConfig};
    use crate::packet::{build, Ecn};
    use crate::time::{simulate, Simulated, NS_PER_MS, NS_PER_US};

    fn cfg(rate: Option<f64>, delay_ms: f64, limit: usize) -> LinkConfig {
        LinkConfig {
            rate_mbit: rate,
            trace: None,
            trace_bytes_per_opportunity: 1500,
            delay_ms,
            loss: None,
            qdisc: QdiscConfig::Pfifo(Pfifo { limit_pkts: limit }),
            overhead_bytes: 0,
        }
    }

    fn pkt(ip_len: usize, t: Nanos) -> Packet {
        Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], ip_len, Ecn::NotEct), t)
    }

    /// Arrivals are (instant, ip_len).
    impl Simulated for Link {
        type Arrival = (Nanos, usize);
        type Out = Out;
        fn arrival_time(a: &(Nanos, usize)) -> Nanos {
            a.0
        }
        fn next_event(&self) -> Option<Nanos> {
            Link::next_event(self)
        }
        fn process(&mut self, now: Nanos, out: &mut Vec<Out>) {
            Link::process(self, now, out)
        }
        fn arrive(&mut self, a: &(Nanos, usize), now: Nanos, out: &mut Vec<Out>) {
            self.enqueue(pkt(a.1, now), now, out)
        }
    }

    /// Run a link in virtual time: packets (arrival, ip_len) in, events out.
    fn drive(link: &mut Link, arrivals: &[(Nanos, usize)], until: Nanos) -> Vec<Out> {
        simulate(link, arrivals, until)
    }

    fn departures(out: &[Out]) -> Vec<Nanos> {
        out.iter().filter_map(|o| if let Out::Depart { t, .. } = o { Some(*t) } else { None }).collect()
    }

    #[test]
    fn rate_and_delay_arithmetic() {
        // 12 Mbit/s: a 1500-byte packet takes exactly 1 ms; delay 10 ms.
        let mut l = Link::new(&cfg(Some(12.0), 10.0, 100), RateSpec::Constant { bps: 12_000_000 }, 1, 0);
        let out = drive(&mut l, &[(0, 1500), (0, 1500), (0, 750), (5 * NS_PER_MS, 1500)], u64::MAX);
        let d = departures(&out);
        // The fourth arrives to an idle link at 5 ms: 1 ms on the wire + 10 ms.
        assert_eq!(d, vec![11 * NS_PER_MS, 12 * NS_PER_MS, 12_500 * NS_PER_US, 16 * NS_PER_MS]);
        // The second packet waited 1 ms in the queue, the third 2 ms, the fourth none.
        let soj: Vec<Nanos> =
            out.iter().filter_map(|o| if let Out::Depart { pkt, .. } = o { Some(pkt.sojourn) } else { None }).collect();
        assert_eq!(soj, vec![0, NS_PER_MS, 2 * NS_PER_MS, 0]);
    }

    #[test]
    fn saturated_rate_is_exact() {
        // Offered 2x the rate for 1 s: departures come exactly every L*8/rate.
        let bps = 7_300_000;
        let mut l = Link::new(&cfg(Some(7.3), 0.0, 1000), RateSpec::Constant { bps }, 1, 0);
        let gap = 1500 * 8 * 1_000_000_000 / (2 * bps);
        let arrivals: Vec<(Nanos, usize)> = (0..1217).map(|i| (i * gap, 1500)).collect();
        let d = departures(&drive(&mut l, &arrivals, u64::MAX));
        let span = (d[d.len() - 1] - d[0]) as f64 / 1e9;
        let rate = (d.len() - 1) as f64 * 1500.0 * 8.0 / span;
        assert!((rate / bps as f64 - 1.0).abs() < 1e-6, "{rate}");
    }

    #[test]
    fn pfifo_limit_drops_in_link() {
        let mut l = Link::new(&cfg(Some(12.0), 0.0, 5), RateSpec::Constant { bps: 12_000_000 }, 1, 0);
        let arrivals: Vec<(Nanos, usize)> = (0..20).map(|_| (0, 1500)).collect();
        let out = drive(&mut l, &arrivals, u64::MAX);
        // One goes straight onto the wire, five wait, fourteen are dropped.
        assert_eq!(departures(&out).len(), 6);
        let drops = out.iter().filter(|o| matches!(o, Out::Drop { cause: DropCause::Queue, .. })).count();
        assert_eq!(drops, 14);
    }

    #[test]
    fn unlimited_only_delays() {
        let mut l = Link::new(&cfg(None, 2.5, 10), RateSpec::Unlimited, 1, 0);
        let arrivals: Vec<(Nanos, usize)> = (0..100).map(|_| (7, 1500)).collect();
        let d = departures(&drive(&mut l, &arrivals, u64::MAX));
        assert_eq!(d.len(), 100);
        assert!(d.iter().all(|&t| t == 7 + 2_500_000));
    }

    #[test]
    fn trace_replay() {
        // Opportunities at 1, 1, 2, 4 ms, repeating every 4 ms; origin at 100 ms.
        let trace = Trace::parse("1\n1\n2\n4\n").unwrap();
        let o = 100 * NS_PER_MS;
        let mut l = Link::new(&cfg(None, 1.0, 100), RateSpec::Trace(trace), 1, o);
        let arrivals: Vec<(Nanos, usize)> = (0..6).map(|_| (o, 1500)).collect();
        let d = departures(&drive(&mut l, &arrivals, u64::MAX));
        let rel: Vec<u64> = d.iter().map(|t| (t - o) / NS_PER_MS).collect();
        assert_eq!(rel, vec![2, 2, 3, 5, 6, 6]); // opportunity + 1 ms delay

        // Small packets share an opportunity; a packet arriving after an idle
        // spell waits for the next opportunity; unused ones are not banked.
        let trace = Trace::parse("1\n1\n2\n4\n").unwrap();
        let mut l = Link::new(&cfg(None, 0.0, 100), RateSpec::Trace(trace), 1, 0);
        let arrivals = [(0, 500), (0, 500), (0, 500), (0, 500), (10 * NS_PER_MS + 1, 1500)];
        let rel: Vec<Nanos> = departures(&drive(&mut l, &arrivals, u64::MAX));
        assert_eq!(rel, vec![NS_PER_MS, NS_PER_MS, NS_PER_MS, NS_PER_MS, 12 * NS_PER_MS]);

        // A packet bigger than an opportunity spans two (overhead 1000 B -> 2500 B).
        let trace = Trace::parse("1\n2\n3\n4\n").unwrap();
        let mut c = cfg(None, 0.0, 100);
        c.overhead_bytes = 1000;
        let mut l = Link::new(&c, RateSpec::Trace(trace), 1, 0);
        let rel = departures(&drive(&mut l, &[(0, 1500), (0, 1500)], u64::MAX));
        assert_eq!(rel, vec![2 * NS_PER_MS, 4 * NS_PER_MS]);
    }

    #[test]
    fn trace_rate_over_many_periods() {
        // 10 opportunities per 2 ms = 60 Mbit/s with 1500-byte packets.
        let text: String = (0..5).map(|_| "1\n").chain((0..5).map(|_| "2\n")).collect();
        let trace = Trace::parse(&text).unwrap();
        let mut l = Link::new(&cfg(None, 0.0, 10_000), RateSpec::Trace(trace), 1, 0);
        let arrivals: Vec<(Nanos, usize)> = (0..10_000).map(|i| (i * 100 * NS_PER_US, 1500)).collect();
        let d = departures(&drive(&mut l, &arrivals, NS_PER_MS * 1000));
        let span = (d[d.len() - 1] - d[0]) as f64 / 1e9;
        let rate = (d.len() - 5) as f64 * 12_000.0 / span;
        assert!((rate / 60e6 - 1.0).abs() < 0.01, "{rate}");
    }

    #[test]
    fn loss_is_applied_before_the_queue() {
        let mut c = cfg(None, 0.0, 10);
        c.loss = Some(LossConfig::Bernoulli(Bernoulli { p: 1.0 }));
        let mut l = Link::new(&c, RateSpec::Unlimited, 1, 0);
        let out = drive(&mut l, &[(0, 100), (1, 100)], u64::MAX);
        assert!(out.iter().all(|o| matches!(o, Out::Drop { cause: DropCause::Loss, .. })));
        assert_eq!(l.in_flight(), 0);
    }
}
