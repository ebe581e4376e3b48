//! Virtual-time tests of lfq through a real [`Link`] (constant-rate
//! transmitter, no delay), with its control surface driven as the control
//! socket drives it (`control_state` / `control_set` at chosen instants):
//! the per-flow limit, the rate and loss features, and the flow life cycle.
//!
//! Sources are unresponsive (constant-rate or jittered UDP-like), so the
//! expected values follow from the arithmetic in each test.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::control::{FlowLimit, FlowSel, FlowState, QdiscState, Scalar, SetParams};
use crate::config::{LinkConfig, QdiscConfig, RateSpec};
use crate::link::{Link, Out};
use crate::packet::{build, Ecn, Packet};
use crate::time::{simulate, Nanos, Simulated, NS_PER_MS, NS_PER_S};

/// (arrival instant, source port, IP length).
type Arrival = (Nanos, u16, usize);

struct Bottleneck(Link);

impl Simulated for Bottleneck {
    type Arrival = Arrival;
    type Out = Out;
    fn arrival_time(a: &Arrival) -> Nanos {
        a.0
    }
    fn next_event(&self) -> Option<Nanos> {
        self.0.next_event()
    }
    fn process(&mut self, now: Nanos, out: &mut Vec<Out>) {
        self.0.process(now, out)
    }
    fn arrive(&mut self, &(_, sport, len): &Arrival, now: Nanos, out: &mut Vec<Out>) {
        let frame = build::ipv4_udp_ports([2; 6], [4; 6], len, Ecn::NotEct, sport, 5201);
        self.0.enqueue(Packet::from_frame(&frame, now), now, out)
    }
}

/// A link behind an lfq, fed from a sorted arrival list in steps.
struct Driver {
    link: Bottleneck,
    arrivals: Vec<Arrival>,
    next: usize,
    out: Vec<Out>,
    now: Nanos,
}

impl Driver {
    fn new(lfq: &str, rate_mbit: f64, mut arrivals: Vec<Arrival>) -> Driver {
        let cfg = LinkConfig {
            rate_mbit: Some(rate_mbit),
            trace: None,
            trace_bytes_per_opportunity: 1500,
            delay_ms: 0.0,
            loss: None,
            qdisc: serde_json::from_str::<QdiscConfig>(lfq).unwrap(),
            overhead_bytes: 0,
        };
        arrivals.sort_by_key(|a| a.0);
        let link = Bottleneck(Link::new(&cfg, RateSpec::Constant { bps: (rate_mbit * 1e6) as u64 }, 1, 0));
        Driver { link, arrivals, next: 0, out: vec![], now: 0 }
    }

    /// Everything up to and including `t`.
    fn run_to(&mut self, t: Nanos) {
        let end = self.next + self.arrivals[self.next..].partition_point(|a| a.0 <= t);
        let out = simulate(&mut self.link, &self.arrivals[self.next..end], t);
        self.out.extend(out);
        self.next = end;
        self.now = t;
    }

    fn state(&self) -> QdiscState {
        self.link.0.qdisc().control_state(self.now, 1024)
    }

    fn flow(&self, sport: u16) -> FlowState {
        let s = self.state();
        s.flows
            .unwrap()
            .into_iter()
            .find(|f| f.key.unwrap().sport == sport)
            .unwrap_or_else(|| panic!("no flow {sport}"))
    }

    fn set(&mut self, p: SetParams) -> Result<super::control::SetApplied, String> {
        self.link.0.qdisc_mut().control_set(&p, self.now)
    }

    /// Departures of `sport` after `from`: (count, mean sojourn in ms).
    fn departures(&self, sport: u16, from: Nanos) -> (usize, f64) {
        let s: Vec<Nanos> = self
            .out
            .iter()
            .filter_map(|o| match o {
                Out::Depart { pkt, t } if *t >= from && pkt.flow_key().unwrap().sport == sport => Some(pkt.sojourn),
                _ => None,
            })
            .collect();
        (s.len(), s.iter().sum::<Nanos>() as f64 / s.len().max(1) as f64 / 1e6)
    }
}

fn extra(f: &FlowState, name: &str) -> Scalar {
    f.extra.iter().find(|(n, _)| *n == name).unwrap().1
}

fn extra_f(f: &FlowState, name: &str) -> f64 {
    match extra(f, name) {
        Scalar::F(x) => x,
        other => panic!("{name}: {other:?}"),
    }
}

fn periodic(sport: u16, len: usize, gap: Nanos, from: Nanos, until: Nanos) -> impl Iterator<Item = Arrival> {
    (0..).map(move |i| (from + i * gap, sport, len)).take_while(move |a| a.0 < until)
}

fn limit_of(key_port: u16, limit_pkts: usize) -> SetParams {
    let key = build::ipv4_udp_ports([2; 6], [4; 6], 100, Ecn::NotEct, key_port, 5201);
    let key = Packet::from_frame(&key, 0).flow_key().unwrap();
    SetParams { flows: vec![FlowLimit { sel: FlowSel::Key(key), limit_pkts }], ..Default::default() }
}

const LFQ: &str = r#"{"kind": "lfq"}"#;

#[test]
fn a_flow_limited_to_10_tail_drops_at_10_while_another_keeps_100() {
    // 10 Mbit/s, 1250-byte packets (1 ms each on the wire); two flows
    // offering 1.5x their share each (750 pps), default limit 100.  At 1 s the
    // agent sets flow 1's limit to 10.  From 2 s on (flow 1's queue has long
    // drained to 10), sample both queues every 5 ms.
    let gap = NS_PER_S / 750;
    let arrivals = periodic(1, 1250, gap, 0, 6 * NS_PER_S).chain(periodic(2, 1250, gap, 333, 6 * NS_PER_S)).collect();
    let mut d = Driver::new(LFQ, 10.0, arrivals);
    d.run_to(NS_PER_S);
    assert_eq!((d.flow(1).limit_pkts, d.flow(2).limit_pkts), (Some(100), Some(100)));
    let a = d.set(limit_of(1, 10)).unwrap();
    assert_eq!((a.flows[0].limit_pkts, a.flows[0].was, a.flows[0].queue), (10, 100, d.flow(1).queue));
    let mut max = [0, 0];
    for step in 1..=800 {
        d.run_to(2 * NS_PER_S + step * 5 * NS_PER_MS);
        for (i, sport) in [1, 2].into_iter().enumerate() {
            max[i] = max[i].max(d.flow(sport).backlog_pkts);
        }
    }
    // Each queue fills up to its own limit and never beyond it.
    assert_eq!(max, [10, 100]);
    let (f1, f2) = (d.flow(1), d.flow(2));
    assert_eq!((f1.limit_pkts, f2.limit_pkts), (Some(10), Some(100)));
    // Both keep their fair share (500 pps, +-1 %), the excess is tail-dropped:
    // 250 pps each.  Waiting time is the queue over the share: 10 and 100
    // packets at 2 ms per packet of each flow: 20 and 200 ms (+-5 %).
    for sport in [1, 2] {
        let (n, _) = d.departures(sport, 2 * NS_PER_S);
        assert!((n as f64 / 4.0 - 500.0).abs() < 5.0, "flow {sport}: {n} departures in 4 s");
    }
    let (_, w1) = d.departures(1, 2 * NS_PER_S);
    let (_, w2) = d.departures(2, 2 * NS_PER_S);
    assert!((w1 - 20.0).abs() < 1.0 && (w2 - 200.0).abs() < 10.0, "sojourn {w1:.1} / {w2:.1} ms");
    // The per-5-tuple statistics count the drops as flow_limit drops.
    let s = d.link.0.qdisc().stats_json().unwrap();
    assert_eq!(s["kind"], "lfq");
    assert_eq!(s["limit_sets"], 1);
    assert_eq!(s["drops"]["overflow"], 0);
    let drops = |p: u16| {
        s["top_flows"].as_array().unwrap().iter().find(|f| f["sport"] == p).unwrap()["drops"]["flow_limit"]
            .as_u64()
            .unwrap()
    };
    assert!(drops(1) > 1300 && drops(2) > 1300, "{s}");
    assert_eq!(extra(&f1, "drops"), Scalar::U(drops(1)));
}

#[test]
fn rates_converge_to_the_offered_and_the_link_rate() {
    // 10 Mbit/s of 1250-byte packets is 1000 pps out; the flow offers 1500 pps
    // with inter-arrival times uniform in [0.5, 1.5] x 1/1500 s, for 40 s
    // (60000 arrivals: every average is past its guard of 2^(k+5) samples).
    let mut rng = Pcg64Mcg::seed_from_u64(7);
    let mean = NS_PER_S as f64 / 1500.0;
    let mut t = 0.0;
    let mut arrivals = vec![];
    while t < 40e9 {
        arrivals.push((t as Nanos, 1, 1250));
        t += mean * rng.random_range(0.5..1.5);
    }
    let mut d = Driver::new(LFQ, 10.0, arrivals);
    d.run_to(40 * NS_PER_S);
    let f = d.flow(1);
    let x = f.features.as_ref().unwrap();
    // In: the EWMA of inter-arrival times with weight w has a standard
    // deviation of (1/sqrt(12)) sqrt(w / (2 - w)) of the mean: 3.6 % for
    // w = 1/32, 1.3 % for 1/256, 0.32 % for 1/4096.  Tolerances: 3 of those
    // (12 % for k = 0..2, 4 % for k = 3..6, 1 % for k = 7..9).
    for (k, r) in x.in_rate_pps.iter().enumerate() {
        let tol = if k < 3 {
            0.12
        } else if k < 7 {
            0.04
        } else {
            0.01
        };
        assert!((r / 1500.0 - 1.0).abs() < tol, "in_rate_pps[{k}] = {r}");
    }
    // Out: the link sends back to back, one packet per ms exactly.
    for (k, r) in x.out_rate_pps.iter().enumerate() {
        assert!((r / 1000.0 - 1.0).abs() < 1e-3, "out_rate_pps[{k}] = {r}");
    }
    // The queue sits at its limit (it loses a third of the arrivals).
    for k in 0..10 {
        assert!(x.queue_pkts[k] > 95.0 && x.queue_pkts[k] <= 100.0, "queue_pkts[{k}] = {}", x.queue_pkts[k]);
        assert_eq!(x.limit_pkts[k], 100.0);
        assert!(x.since_loss_s[k] < 0.05, "since_loss_s[{k}] = {}", x.since_loss_s[k]);
    }
    // Before 2^(k+5) samples a rate average is 0 (the paper's guard): at
    // 100 ms (about 150 arrivals, 100 departures) only k = 0..1 report.
    let mut d = Driver::new(LFQ, 10.0, d.arrivals.clone());
    d.run_to(100 * NS_PER_MS);
    let x = d.flow(1).features.unwrap();
    assert!(x.in_rate_pps[..2].iter().all(|&r| r > 0.0) && x.in_rate_pps[3..].iter().all(|&r| r == 0.0), "{x:?}");
    assert!(x.out_rate_pps[..1].iter().all(|&r| r > 0.0) && x.out_rate_pps[2..].iter().all(|&r| r == 0.0), "{x:?}");
}

#[test]
fn empty_frac_tells_a_flow_below_its_share_from_a_backlogged_one() {
    // 10 Mbit/s of 1250-byte packets (1 ms each).  Flow 1 offers 300 pps,
    // below its half: each packet leaves before the next arrives, so every
    // arrival finds its queue empty.  Flow 2 offers 1500 pps and keeps a
    // standing queue at its limit: no arrival finds it empty.
    let arrivals = periodic(1, 1250, NS_PER_S / 300, 0, 20 * NS_PER_S)
        .chain(periodic(2, 1250, NS_PER_S / 1500, 1000, 20 * NS_PER_S))
        .collect();
    let mut d = Driver::new(LFQ, 10.0, arrivals);
    d.run_to(20 * NS_PER_S);
    let (below, backlogged) = (d.flow(1).features.unwrap(), d.flow(2).features.unwrap());
    // The first sample of each average is 1 (an empty queue starts every
    // flow); 6000 (flow 2: 30000) samples later, the slowest average
    // (w = 1/16384) keeps (1 - w)^n of it: 0.69 (flow 2: 0.16).
    for k in 0..7 {
        assert_eq!(below.empty_frac[k], 1.0, "flow 1, empty_frac[{k}]");
        assert!(backlogged.empty_frac[k] < 0.01, "flow 2, empty_frac[{k}] = {}", backlogged.empty_frac[k]);
    }
    assert!(backlogged.empty_frac[9] < 0.2 && below.empty_frac[9] == 1.0, "{backlogged:?}");
}

#[test]
fn time_since_loss_grows_and_resets_on_a_drop() {
    // 1 Mbit/s, 125-byte packets (1 ms on the wire) every 10 ms: no queue,
    // no loss; at 2 s two more packets, 1 and 2 ns later.
    let extra_pkts = [(2 * NS_PER_S + 1, 1, 125), (2 * NS_PER_S + 2, 1, 125)];
    let arrivals: Vec<Arrival> = periodic(1, 125, 10 * NS_PER_MS, 0, 3 * NS_PER_S).chain(extra_pkts).collect();
    let mut d = Driver::new(LFQ, 1.0, arrivals);
    d.run_to(2 * NS_PER_S - 1);
    let f = d.flow(1);
    // No loss yet: the flow's age (2 s - 1 ns, the first packet came at 0).
    assert!((extra_f(&f, "since_loss_s") - 2.0).abs() < 1e-8);
    let before = f.features.unwrap().since_loss_s;
    // The averages trail the age (fast ones closer): all in (0, 2), decreasing in k.
    assert!(before.iter().all(|&s| s > 0.0 && s < 2.0) && before.windows(2).all(|w| w[0] > w[1]), "{before:?}");
    // Limit 1.  The packet at 2 s goes on the wire, the one at 2 s + 1 ns
    // waits in the queue, the one at 2 s + 2 ns finds the queue full.
    d.set(limit_of(1, 1)).unwrap();
    d.run_to(2 * NS_PER_S + 1);
    assert_eq!(extra(&d.flow(1), "drops"), Scalar::U(0));
    let mid = d.flow(1).features.unwrap().since_loss_s;
    d.run_to(2 * NS_PER_S + 2);
    let f = d.flow(1);
    assert_eq!(extra(&f, "drops"), Scalar::U(1));
    assert_eq!(extra_f(&f, "since_loss_s"), 0.0);
    let after = f.features.unwrap().since_loss_s;
    for k in 0..10 {
        // The drop's sample (0 s) pulls every average down by its weight w.
        let w = super::lfq_features::WEIGHTS[k];
        assert!((after[k] - mid[k] * (1.0 - w)).abs() < 1e-12, "{k}: {} -> {}", mid[k], after[k]);
    }
    // Then the clock runs again from the drop.
    d.run_to(2 * NS_PER_S + 500 * NS_PER_MS + 2);
    assert_eq!(extra_f(&d.flow(1), "since_loss_s"), 0.5);
    assert_eq!(extra(&d.flow(1), "drops"), Scalar::U(1));
}

#[test]
fn new_flows_start_with_the_default_limit_and_sets_need_an_active_flow() {
    let cfg = r#"{"kind": "lfq", "default_limit_pkts": 30, "limit_pkts": 500, "idle_timeout_ms": 1000}"#;
    // Flow 1 from 0 to 1 s; flow 2 from 2 s on (1 ms gaps, 100-byte packets, 10 Mbit/s).
    let arrivals = periodic(1, 100, NS_PER_MS, 0, NS_PER_S)
        .chain(periodic(2, 100, NS_PER_MS, 2 * NS_PER_S, 4 * NS_PER_S))
        .collect();
    let mut d = Driver::new(cfg, 10.0, arrivals);
    d.run_to(500 * NS_PER_MS);
    assert_eq!(d.flow(1).limit_pkts, Some(30));
    d.set(limit_of(1, 7)).unwrap();
    let a = d.set(SetParams { default_limit_pkts: Some(40), ..Default::default() }).unwrap();
    assert!(a.params.contains(&("default_limit_pkts_was", Scalar::U(30))));
    assert_eq!(d.flow(1).limit_pkts, Some(7), "a running flow keeps its own limit");
    // Errors name the field and change nothing.
    let q1 = d.flow(1).queue;
    let bad = |sel, limit_pkts| SetParams {
        default_limit_pkts: Some(5),
        flows: vec![FlowLimit { sel, limit_pkts }],
        ..Default::default()
    };
    for (p, want) in [
        (bad(FlowSel::Queue(q1), 0), "flows[0].limit_pkts: must be 1..500 (limit_pkts), got 0".to_string()),
        (bad(FlowSel::Queue(q1), 501), "flows[0].limit_pkts: must be 1..500 (limit_pkts), got 501".into()),
        (bad(FlowSel::Queue(5000), 9), "flows[0].queue: 5000 is not a queue (0..1023)".into()),
        (
            bad(FlowSel::Queue((q1 + 1) % 1024), 9),
            format!("flows[0].queue: no active flow in queue {}", (q1 + 1) % 1024),
        ),
        (
            SetParams { k: Some(2.0), ..Default::default() },
            "k: not settable on lfq (settable: default_limit_pkts, flows)".into(),
        ),
    ] {
        assert_eq!(d.set(p).unwrap_err(), want);
    }
    assert_eq!((d.flow(1).limit_pkts, d.state().params[0]), (Some(7), ("default_limit_pkts", Scalar::U(40))));
    // Flow 1 stops at 1 s; it is listed until its queue has been idle 1 s.
    d.run_to(1900 * NS_PER_MS);
    assert_eq!(d.state().flows_active, 1);
    d.run_to(2001 * NS_PER_MS);
    let s = d.state();
    assert_eq!(s.flows_active, 1);
    let f2 = &s.flows.as_ref().unwrap()[0];
    assert_eq!((f2.key.unwrap().sport, f2.limit_pkts), (2, Some(40)), "a new flow takes the new default");
    assert!(d.set(limit_of(1, 9)).unwrap_err().starts_with("flows[0].key: no active flow in its queue"));
}

#[test]
fn a_colliding_5_tuple_joins_the_active_flow_and_an_idle_queue_starts_a_new_one() {
    use crate::config;
    use crate::qdisc::lfq::Lfq;
    use crate::qdisc::Qdisc;
    let pkt = |sport: u16| Packet::from_frame(&build::ipv4_udp_ports([2; 6], [4; 6], 100, Ecn::NotEct, sport, 5201), 0);
    let mut q = Lfq::from_config(&config::Lfq::default(), 1);
    let queue = |q: &Lfq, p: u16| q.queue_of(&pkt(p).flow_key().unwrap());
    let other = (2..).find(|&p| queue(&q, p) == queue(&q, 1)).unwrap();
    q.enqueue(pkt(1), 0).unwrap();
    q.enqueue(pkt(other), NS_PER_MS).unwrap();
    let s = q.control_state(NS_PER_MS, 10);
    let f = &s.flows.as_ref().unwrap()[0];
    assert_eq!((s.flows_active, f.key.unwrap().sport, f.shared, f.backlog_pkts), (1, 1, Some(true), 2));
    let mut drops = vec![];
    while q.dequeue(2 * NS_PER_MS, &mut drops).is_some() {}
    // Empty, but within the idle timeout (3 s): still the same flow.
    q.enqueue(pkt(other), NS_PER_S).unwrap();
    assert_eq!(q.control_state(NS_PER_S, 10).params[4], ("flows_started", Scalar::U(1)));
    while q.dequeue(NS_PER_S, &mut drops).is_some() {}
    // Idle for more than 3 s: the next packet starts a new flow, its own.
    q.enqueue(pkt(other), 5 * NS_PER_S).unwrap();
    let s = q.control_state(5 * NS_PER_S, 10);
    let f = &s.flows.as_ref().unwrap()[0];
    assert_eq!((f.key.unwrap().sport, f.shared, s.params[4]), (other, Some(false), ("flows_started", Scalar::U(2))));
    assert!(drops.is_empty());
}

#[test]
fn a_tcp_flow_s_handshake_rtt_is_its_syn_to_its_next_packet_and_only_that() {
    use crate::config;
    use crate::flow::{TCP_ACK, TCP_SYN};
    use crate::qdisc::lfq::Lfq;
    use crate::qdisc::Qdisc;
    let tcp = |sport: u16, len: usize, flags: u8| {
        Packet::from_frame(&build::ipv4_tcp([2; 6], [4; 6], len, sport, 5201, flags), 0)
    };
    let rtt = |q: &Lfq, sport: u16, now: Nanos| {
        let s = q.control_state(now, 10);
        let f = s.flows.unwrap().into_iter().find(|f| f.key.unwrap().sport == sport).unwrap();
        f.extra.iter().find(|(n, _)| *n == "handshake_rtt_s").map(|(_, v)| match v {
            Scalar::F(x) => *x,
            other => panic!("{other:?}"),
        })
    };
    let mut q = Lfq::from_config(&config::Lfq::default(), 1);
    let mut drops = vec![];
    // A SYN, then 17 ms later the handshake's ACK, then data: 17 ms, kept through the data.
    q.enqueue(tcp(1, 60, TCP_SYN), 0).unwrap();
    assert_eq!(rtt(&q, 1, NS_PER_MS), None, "not measured before the next packet");
    q.enqueue(tcp(1, 52, TCP_ACK), 17 * NS_PER_MS).unwrap();
    for i in 0..5 {
        q.enqueue(tcp(1, 1500, TCP_ACK), 17 * NS_PER_MS + i * 100_000).unwrap();
    }
    assert_eq!(rtt(&q, 1, 20 * NS_PER_MS), Some(0.017));
    // The SYN sent again before any other packet: ambiguous (Karn), no estimate.
    q.enqueue(tcp(2, 60, TCP_SYN), 0).unwrap();
    q.enqueue(tcp(2, 60, TCP_SYN), 1000 * NS_PER_MS).unwrap();
    q.enqueue(tcp(2, 52, TCP_ACK), 1010 * NS_PER_MS).unwrap();
    assert_eq!(rtt(&q, 2, 1010 * NS_PER_MS), None);
    // A flow seen from the middle (no SYN) and a UDP flow: none.
    q.enqueue(tcp(3, 1500, TCP_ACK), 0).unwrap();
    q.enqueue(tcp(3, 1500, TCP_ACK), 5 * NS_PER_MS).unwrap();
    assert_eq!(rtt(&q, 3, 5 * NS_PER_MS), None);
    let udp = Packet::from_frame(&build::ipv4_udp_ports([2; 6], [4; 6], 100, Ecn::NotEct, 4, 5201), 0);
    q.enqueue(udp, 0).unwrap();
    assert_eq!(rtt(&q, 4, 5 * NS_PER_MS), None);
    // The same connection resuming after the idle timeout (no SYN; an RTO backoff) keeps its 17 ms, as a
    // new flow (flows_started counts it); one seen from its middle still has none after a restart.
    while q.dequeue(2000 * NS_PER_MS, &mut drops).is_some() {}
    let started = |q: &Lfq| q.control_state(0, 10).params.iter().find(|(n, _)| *n == "flows_started").unwrap().1;
    let before = started(&q);
    q.enqueue(tcp(1, 1500, TCP_ACK), 4 * NS_PER_S).unwrap();
    q.enqueue(tcp(3, 1500, TCP_ACK), 4 * NS_PER_S).unwrap();
    assert_ne!(started(&q), before, "the idle flows restarted");
    assert_eq!(rtt(&q, 1, 4 * NS_PER_S), Some(0.017));
    assert_eq!(rtt(&q, 3, 4 * NS_PER_S), None);
    // A new connection in the same queue after the idle timeout gets its own measurement.
    while q.dequeue(5 * NS_PER_S, &mut drops).is_some() {}
    q.enqueue(tcp(1, 60, TCP_SYN), 9 * NS_PER_S).unwrap();
    q.enqueue(tcp(1, 52, TCP_ACK), 9 * NS_PER_S + 6 * NS_PER_MS).unwrap();
    assert_eq!(rtt(&q, 1, 9 * NS_PER_S + 6 * NS_PER_MS), Some(0.006));
}
