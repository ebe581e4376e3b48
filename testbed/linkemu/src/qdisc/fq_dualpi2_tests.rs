//! Tests of what defines fq_dualpi2 (paper 000's hashed L4S/Classic pairs):
//! the classifier (a non-zero ECN field to the L queue of the 5-tuple's
//! pair, Not-ECT to its C queue), the isolation of pairs, the coupling
//! (L4S marks follow k p', Classic drops p'^2) and, through a real link with
//! the DCTCP-like and Reno-like senders of `vdq_sim.rs`, the L queue held
//! near its 1 ms step while the C queue sits near the PIE target.

use super::control::{Scalar, SetParams};
use super::fq_dualpi2::{FqDualPi2, C, L};
use super::vdq_sim::{run, Sender, LEN};
use super::Qdisc;
use crate::config::QdiscConfig;
use crate::packet::{build, Ecn, Packet, QClass};
use crate::time::{Nanos, NS_PER_MS, NS_PER_S, NS_PER_US};

fn pkt(sport: u16, ecn: Ecn) -> Packet {
    Packet::from_frame(&build::ipv4_udp_ports([2; 6], [4; 6], LEN, ecn, sport, 5201), 0)
}

fn q(json: &str, seed: u64) -> FqDualPi2 {
    let QdiscConfig::FqDualPi2(c) = serde_json::from_str::<QdiscConfig>(json).unwrap() else { panic!("{json}") };
    FqDualPi2::from_config(&c, seed)
}

/// The seed a test link (`Link::new(.., 1, 0)`) gives its qdisc.
const LINK_SEED: u64 = 1 ^ 0x05ee_d0f9_d15c;

/// Source ports from `from` on whose flows go to pair `pair` of the default 3.
fn ports_in_pair(pair: usize, from: u16, seed: u64) -> impl Iterator<Item = u16> {
    let probe = q(r#"{"kind": "fq_dualpi2"}"#, seed);
    (from..).filter(move |&s| probe.pair_of(&pkt(s, Ecn::NotEct)) == pair)
}

#[test]
fn ecn_capable_packets_go_to_the_l_queue_of_their_pair() {
    let mut d = q(r#"{"kind": "fq_dualpi2"}"#, 1);
    assert_eq!(d.pairs(), 3);
    assert_eq!(d.queues().len(), 6);
    let a = 3000;
    let pa = d.pair_of(&pkt(a, Ecn::NotEct));
    let b = (3001..).find(|&s| d.pair_of(&pkt(s, Ecn::NotEct)) != pa).unwrap();
    let pb = d.pair_of(&pkt(b, Ecn::NotEct));
    // The pair is the 5-tuple's, whatever the ECN field; the class is the ECN field's.
    for ecn in [Ecn::NotEct, Ecn::Ect0, Ecn::Ect1, Ecn::Ce] {
        assert_eq!(d.pair_of(&pkt(a, ecn)), pa);
        let want = if ecn == Ecn::NotEct { QClass::Classic } else { QClass::L4s };
        assert_eq!(FqDualPi2::class_of(&pkt(a, ecn)), want, "{ecn:?}");
        d.enqueue(pkt(a, ecn), 0).unwrap();
    }
    d.enqueue(pkt(b, Ecn::NotEct), 0).unwrap();
    d.enqueue(pkt(b, Ecn::Ect1), 0).unwrap();
    // Not IP: no 5-tuple, Not-ECT: pair 0's C queue.
    d.enqueue(Packet::from_frame(&build::arp([4; 6]), 0), 0).unwrap();
    assert_eq!(d.pair_lens(pa), [1 + usize::from(pa == 0), 3]);
    assert_eq!(d.pair_lens(pb), [1 + usize::from(pb == 0), 1]);
    assert_eq!(d.queues()[2 * pa + C].len() + d.queues()[2 * pa + L].len(), 4 + usize::from(pa == 0));
    assert_eq!(d.class_lens(), Some([3, 4]));
    // Every packet leaves tagged with its class, nothing marked (p' = 0, no queue above 1 ms).
    let mut drops = vec![];
    let mut classes = vec![];
    while let Some(p) = d.dequeue(100 * NS_PER_US, &mut drops) {
        assert!(!p.marked);
        classes.push((p.flow_key().map(|k| k.sport), p.ecn(), p.class));
    }
    assert!(drops.is_empty());
    assert_eq!(classes.len(), 7);
    for (sport, ecn, class) in classes {
        let l = sport.is_some() && ecn != Ecn::NotEct;
        assert_eq!(class, if l { QClass::L4s } else { QClass::Classic }, "{sport:?} {ecn:?}");
    }
    let s = d.stats_json().unwrap();
    assert_eq!(s["kind"], "fq_dualpi2");
    assert_eq!(
        (s["classes"]["classic"]["packets_in"].as_u64(), s["classes"]["l4s"]["packets_in"].as_u64()),
        (Some(3), Some(4))
    );
    assert_eq!(s["pairs"].as_array().unwrap().len(), 3);
    // Within a pair the L queue goes first: C, C, L, L queued at once -> L, L, C, C.
    let mut d = q(r#"{"kind": "fq_dualpi2"}"#, 1);
    for ecn in [Ecn::NotEct, Ecn::NotEct, Ecn::Ect1, Ecn::Ect1] {
        d.enqueue(pkt(a, ecn), 0).unwrap();
    }
    let order: Vec<QClass> = std::iter::from_fn(|| d.dequeue(0, &mut drops)).map(|p| p.class).collect();
    assert_eq!(order, [QClass::L4s, QClass::L4s, QClass::Classic, QClass::Classic]);
}

#[test]
fn pairs_isolate_flows_hashed_apart() {
    // 10 Mbit/s shared by an unresponsive 20 Mbit/s Not-ECT flow and a sparse
    // 1 Mbit/s one hashed to another pair, 30 s, measured over the last 20.
    let heavy = ports_in_pair(0, 1, LINK_SEED).next().unwrap();
    let sparse = ports_in_pair(1, 1, LINK_SEED).next().unwrap();
    let (until, from) = (30 * NS_PER_S, 10 * NS_PER_S);
    let r = run(r#"{"kind": "fq_dualpi2"}"#, 10.0, &[Sender::cbr(heavy, 20.0), Sender::cbr(sparse, 1.0)], until, from);
    let (h, s) = (&r.flows[&heavy], &r.flows[&sparse]);
    // The sparse flow's pair never holds 2 MTU: never dropped, p' stays 0;
    // it waits at most for the heavy packet on the wire and one more (2.4 ms).
    assert_eq!(s.drops, 0, "{s:?}");
    assert!(s.sojourn_ms() < 2.4, "{s:?}");
    let st = r.stats.unwrap();
    let pairs = st["pairs"].as_array().unwrap();
    assert_eq!(pairs[1]["p_prime_max"], 0.0, "{st}");
    // The heavy flow's own pair holds its C queue at the PIE target (+-1.5 ms)
    // and drops its excess (11 of 20 Mbit/s, +-0.01) with p_C = p'^2.
    let drop_frac = h.drops as f64 / (h.drops + h.pkts_out) as f64;
    println!("heavy {h:?} {:.2} ms, sparse {s:?} {:.2} ms, pairs {}", h.sojourn_ms(), s.sojourn_ms(), st["pairs"]);
    assert!((drop_frac - 0.55).abs() < 0.01, "{h:?}");
    assert!((h.sojourn_ms() - 15.0).abs() < 1.5, "{}", h.sojourn_ms());
    // p' (its mean over the whole run, the first seconds' rise included) near sqrt(0.55).
    let p0 = pairs[0]["p_prime_mean"].as_f64().unwrap();
    assert!((p0 - 0.55f64.sqrt()).abs() < 0.1, "p' {p0}");
    assert!(st["classes"]["classic"]["aqm_drops"].as_u64().unwrap() >= h.drops);
    assert_eq!(st["classes"]["l4s"]["packets_in"], 0);
}

/// Tallies of a constant-rate server run of [`coupled_run`].
#[derive(Debug, Default)]
struct Coupling {
    l_out: u64,
    l_marks: u64,
    /// Sum over L packets out of the coupled probability min(1, k p') in force (and its variance).
    l_expect: f64,
    l_var: f64,
    c_in: u64,
    c_drops: u64,
    /// Sum over C arrivals PIE's rules let through to the draw of p'^2 (and its variance).
    c_expect: f64,
    c_var: f64,
    p_sum: f64,
    c_sojourn_sum: u128,
    c_out: u64,
}

/// One pair: Not-ECT arrivals every `c_gap`, ECT(1) every `l_gap`, served
/// one packet per 100 us, the controller running; tallies from `from`.
fn coupled_run(c_gap: Nanos, l_gap: Nanos, until: Nanos, from: Nanos) -> Coupling {
    let mut d = q(r#"{"kind": "fq_dualpi2"}"#, 5);
    let sc = 4000;
    let pair = d.pair_of(&pkt(sc, Ecn::NotEct));
    let sl = (4001..).find(|&s| d.pair_of(&pkt(s, Ecn::NotEct)) == pair).unwrap();
    let prm = *d.pie_params();
    let mut t = Coupling::default();
    let (mut next_c, mut next_l, mut next_out) = (0, 7, 0);
    let mut drops = vec![];
    loop {
        let nt = d.next_timer().unwrap();
        let now = next_c.min(next_l).min(nt).min(next_out);
        if now >= until {
            break;
        }
        let measuring = now >= from;
        let p = d.p_prime(pair);
        if nt == now {
            d.on_timer(now);
        } else if next_c == now {
            next_c += c_gap;
            let gate = d.pie(pair).may_drop_early(&prm, d.queues()[2 * pair + C].bytes());
            let dropped = d.enqueue(pkt(sc, Ecn::NotEct), now).is_err();
            if measuring {
                t.c_in += 1;
                t.c_drops += dropped as u64;
                if gate {
                    t.c_expect += p * p;
                    t.c_var += p * p * (1.0 - p * p);
                }
            }
        } else if next_l == now {
            next_l += l_gap;
            d.enqueue(pkt(sl, Ecn::Ect1), now).unwrap();
        } else {
            let got = d.dequeue(now, &mut drops);
            assert!(!measuring || drops.is_empty(), "no overload here");
            drops.clear();
            next_out = if got.is_some() { now + 100 * NS_PER_US } else { next_c.min(next_l) };
            if let (Some(x), true) = (got, measuring) {
                t.p_sum += p;
                if x.class == QClass::L4s {
                    t.l_out += 1;
                    t.l_marks += x.marked as u64;
                    // The coupled part counts while the pair holds 2 MTU after the packet left.
                    if d.bytes() >= 3000 {
                        let pl = (2.0 * p).min(1.0);
                        t.l_expect += pl;
                        t.l_var += pl * (1.0 - pl);
                    }
                } else {
                    t.c_out += 1;
                    t.c_sojourn_sum += now.saturating_sub(x.enqueued) as u128;
                }
            }
        }
    }
    let s = d.stats_json().unwrap();
    assert_eq!(s["classes"]["l4s"]["native_marks"], 0, "the L queue never reaches its 1 ms step: {s}");
    t
}

#[test]
fn l4s_marks_follow_k_p_prime_and_classic_drops_its_square() {
    // A 10 kpps server; unresponsive Not-ECT at 1.1x (every 91 us) builds a
    // standing C queue, the pair's PIE raises p' until the C queue sits at
    // its 15 ms target.  A light ECT(1) stream (200 pps) in the same pair
    // goes first (L precedence) and never waits 1 ms, so every mark is a
    // coupled one; C gets the other 9.8 kpps: a drop rate p_C = p'^2 =
    // 1 - 9.8 / 10.99 = 0.108 (p' ~ 0.33) removes its excess.  40 s,
    // measured over the last 30 (~330k C arrivals, 6000 L packets).
    let t = coupled_run(91 * NS_PER_US, 5 * NS_PER_MS, 40 * NS_PER_S, 10 * NS_PER_S);
    let p_mean = t.p_sum / (t.l_out + t.c_out) as f64;
    println!("{t:?} p' mean {p_mean:.4}");
    assert!(p_mean > 0.25, "the standing C queue raised p': {p_mean}");
    // Each verdict against the probability in force at it: the counts are sums
    // of independent Bernoulli draws; 4 standard deviations (+1).
    let sd = |v: f64| 4.0 * v.sqrt() + 1.0;
    assert!((t.l_marks as f64 - t.l_expect).abs() < sd(t.l_var), "L marks {} vs {:.0}", t.l_marks, t.l_expect);
    assert!((t.c_drops as f64 - t.c_expect).abs() < sd(t.c_var), "C drops {} vs {:.0}", t.c_drops, t.c_expect);
    // In aggregate: L marked with at least k p' (the mean of p'), C dropped at ~p'^2.
    let l_frac = t.l_marks as f64 / t.l_out as f64;
    let c_frac = t.c_drops as f64 / t.c_in as f64;
    assert!(l_frac >= 2.0 * p_mean - 0.02, "L marks {l_frac} vs k p' {}", 2.0 * p_mean);
    let want = 1.0 - 9_800.0 / (1e9 / 91_000.0);
    assert!((c_frac - want).abs() < 0.005, "C drops {c_frac} vs {want}");
    // p_CL = k sqrt(p_C): the coupling's square law (p' varies little: +-0.03).
    assert!((l_frac - 2.0 * c_frac.sqrt()).abs() < 0.03, "L marks {l_frac}, C drops {c_frac}");
    let c_ms = t.c_sojourn_sum as f64 / t.c_out as f64 / 1e6;
    assert!((c_ms - 15.0).abs() < 1.5, "C sojourn {c_ms:.2} ms");
}

#[test]
fn frozen_p_prime_gives_k_p_and_p_squared() {
    // p' fixed at 0.3 (no timer): L packets are marked with k p' = 0.6, Classic
    // packets dropped with p'^2 = 0.09 (PIE's rules pass: p' >= 20 %, 2 MTU
    // queued, the burst allowance spent after 150 ms of dequeues).  A queue
    // of 20, one packet out per 100 us: the L step is moved out of the way
    // (1 s) so the marks are the coupled ones.  Binomial sd over 40000
    // packets: 0.0025 and 0.0015; 4 sd.
    for (ecn, want) in [(Ecn::Ect1, 0.6), (Ecn::Ect0, 0.6), (Ecn::Ce, 0.6), (Ecn::NotEct, 0.09)] {
        let mut d = q(r#"{"kind": "fq_dualpi2", "l_min_th_ms": 1000}"#, 2);
        let pair = d.pair_of(&pkt(1, ecn));
        d.set_p_prime(pair, 0.3);
        let (mut hits, mut n, mut now) = (0usize, 0usize, 0);
        let mut drops = vec![];
        while n < 40_000 {
            while d.len() < 20 {
                // Sojourn 0 (enqueued now): the native step never fires.
                hits += d.enqueue(pkt(1, ecn), now).is_err() as usize;
                n += (ecn == Ecn::NotEct) as usize;
            }
            let x = d.dequeue(now, &mut drops).unwrap();
            now += 100 * NS_PER_US;
            if ecn != Ecn::NotEct {
                n += 1;
                hits += x.marked as usize;
                assert_eq!(x.ecn(), if x.marked { Ecn::Ce } else { ecn });
            }
            if now == 200 * NS_PER_MS {
                (hits, n) = (0, 0); // the burst allowance is spent by now
            }
        }
        assert!(drops.is_empty());
        let frac = hits as f64 / n as f64;
        let tol = if ecn == Ecn::NotEct { 0.006 } else { 0.01 };
        assert!((frac - want).abs() < tol, "{ecn:?}: {frac}");
    }
    // k = 3: p_CL = 0.9.
    let mut d = q(r#"{"kind": "fq_dualpi2", "k": 3}"#, 2);
    let pair = d.pair_of(&pkt(1, Ecn::Ect1));
    d.set_p_prime(pair, 0.3);
    let (mut marks, mut drops) = (0, vec![]);
    for i in 0..10_000u64 {
        while d.len() < 20 {
            d.enqueue(pkt(1, Ecn::Ect1), i).unwrap();
        }
        marks += d.dequeue(i, &mut drops).unwrap().marked as u32;
    }
    assert!((marks as f64 / 10_000.0 - 0.9).abs() < 0.012, "{marks}");
}

#[test]
fn dctcp_sits_near_the_step_and_reno_near_the_pie_target() {
    // A DCTCP-like (ECT(1)) and a Reno-like (Not-ECT) sender in the same pair,
    // 40 Mbit/s, 5 ms base RTT, 30 s, measured over the last 20.  The L queue
    // is held by its 1 ms step (and the coupled marks), the C queue by the
    // pair's PIE at 15 ms.
    let mut ports = ports_in_pair(0, 1, LINK_SEED);
    let (l, c) = (ports.next().unwrap(), ports.next().unwrap());
    let (until, from) = (30 * NS_PER_S, 10 * NS_PER_S);
    let senders = [Sender::dctcp(l), Sender::reno(c)];
    let r = run(r#"{"kind": "fq_dualpi2"}"#, 40.0, &senders, until, from);
    let (lf, cf) = (&r.flows[&l], &r.flows[&c]);
    println!(
        "L {:.1} Mbit/s {:.3} ms, C {:.1} Mbit/s {:.2} ms; total {:.1}",
        r.mbit(l),
        lf.sojourn_ms(),
        r.mbit(c),
        cf.sojourn_ms(),
        r.total_mbit()
    );
    // L: near (below) the 1 ms step; never dropped.
    assert!(lf.sojourn_ms() < 1.5, "L sojourn {}", lf.sojourn_ms());
    assert_eq!(lf.drops, 0);
    assert!(lf.marks > 1_000);
    // C: near the PIE target (+-5 ms: the Reno sawtooth around it).
    assert!((cf.sojourn_ms() - 15.0).abs() < 5.0, "C sojourn {}", cf.sojourn_ms());
    assert!(cf.drops > 10);
    // The link is used; the coupling leaves neither sender starved.
    assert!(r.total_mbit() > 0.95 * 40.0, "{}", r.total_mbit());
    assert!(r.mbit(l) > 0.15 * 40.0 && r.mbit(c) > 0.15 * 40.0, "{} {}", r.mbit(l), r.mbit(c));
    let st = r.stats.unwrap();
    assert!(st["classes"]["l4s"]["coupled_marks"].as_u64().unwrap() > 0, "{st}");
    // The same senders through one pie: the DCTCP packets wait in the C queue's 15 ms.
    let p = run(r#"{"kind": "pie"}"#, 40.0, &senders, until, from);
    assert!(p.flows[&l].sojourn_ms() > 5.0, "pie: {}", p.flows[&l].sojourn_ms());
}

#[test]
fn state_shows_the_pairs_and_set_is_refused() {
    let mut d = q(r#"{"kind": "fq_dualpi2", "flows": 4}"#, 1);
    let pair = d.pair_of(&pkt(1, Ecn::NotEct));
    d.set_p_prime(pair, 0.2);
    d.enqueue(pkt(1, Ecn::NotEct), 0).unwrap();
    d.enqueue(pkt(1, Ecn::Ect1), 0).unwrap();
    let s = d.control_state(2 * NS_PER_MS, 16);
    assert_eq!((s.kind, s.backlog_pkts, s.flows_active), ("fq_dualpi2", 2, 1));
    assert!(s.params.contains(&("pairs", Scalar::U(2))));
    assert!(s.params.contains(&("k", Scalar::F(2.0))));
    let f = &s.flows.unwrap()[0];
    assert_eq!((f.queue, f.backlog_pkts), (pair, 2));
    let get = |n: &str| f.extra.iter().find(|e| e.0 == n).unwrap().1;
    assert_eq!(get("p_prime"), Scalar::F(0.2));
    assert_eq!(get("p_cl"), Scalar::F(0.4));
    assert_eq!((get("classic_pkts"), get("l4s_pkts")), (Scalar::U(1), Scalar::U(1)));
    assert_eq!(get("l4s_delay_ms"), Scalar::F(2.0));
    let e = d.control_set(&SetParams { k: Some(3.0), ..Default::default() }, 0).unwrap_err();
    assert!(e.starts_with("k: fq_dualpi2 has no parameters settable at run time (lfq:"), "{e}");
}
