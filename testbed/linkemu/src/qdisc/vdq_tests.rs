//! Virtual-time tests of what defines VDQ-CSAQM (paper 004), through a real
//! [`Link`] with the discipline's own marker, next to pfifo where the
//! comparison says something: the CTV following the load, values below the
//! CTV dropped or marked (and the L4S packets held to the Classic CTV too,
//! the coupling), the Gold:Silver shares of the paper's policies, the L4S
//! queue's sub-millisecond delay with scalable senders, and an
//! unresponsive flow held to the responsive flows' share.
//!
//! The senders and the link harness are in `vdq_sim.rs`, shared with
//! `fq_dualpi2_tests.rs`.

use serde_json::Value;

use super::control::Scalar;
use super::vdq_sim::{run, Cc, Run, Sender, Sim};
use crate::time::{Nanos, NS_PER_MS, NS_PER_S};

const S: Nanos = NS_PER_S;

fn vdq(extra: &str) -> String {
    format!(r#"{{"kind": "vdq_csaqm"{extra}}}"#)
}

const PFIFO: &str = r#"{"kind": "pfifo", "limit_pkts": 1000}"#;

fn cbr_between(sport: u16, mbit: f64, start: Nanos, stop: Nanos) -> Sender {
    let mut c = Sender::cbr(sport, mbit);
    c.next_pkt = start + sport as Nanos;
    if let Cc::Cbr { gap, .. } = c.cc {
        c.cc = Cc::Cbr { gap, stop };
    }
    c
}

#[test]
fn ctv_rises_with_the_load_and_falls_back_to_zero() {
    // 100 Mbit/s.  A 50 Mbit/s flow all along; a 60 Mbit/s flow from 1 s to
    // 3 s (110 Mbit/s offered > C_v1 = 98.4).  Before 1 s VQ_1 holds nothing
    // (arrivals < C_v1): CTV_1 = 0.  From 1 s VQ_1 grows by 11.6 Mbit/s and
    // passes l_1 = 20 ms * 98.4 Mbit/s = 1.97 Mbit after 170 ms; from then
    // on the CTV is the value where VQ_1's top l_1 bits end, which rises as
    // the queue grows (the top l_1 is an ever smaller share of it).  After 3 s
    // (50 Mbit/s in) VQ_1 (at most vqmax_1 = 25 Mbit) drains at 48.4 Mbit/s:
    // below l_1 within 0.5 s, CTV_1 = 0 again.
    let r = run(&vdq(""), 100.0, &[cbr_between(1, 50.0, 0, 5 * S), cbr_between(2, 60.0, S, 3 * S)], 5 * S, 0);
    let at = |ms: Nanos| r.ctv1_at(ms * NS_PER_MS);
    assert!(r.ctv.iter().filter(|c| c.0 < S).all(|c| c.2 == 0), "no congestion, no CTV");
    assert_eq!(at(1_150), 0, "VQ_1 not yet above l_1");
    let (early, late) = (at(1_400), at(2_900));
    assert!(early > 0 && late > early, "CTV_1 rises with the backlog: {early} -> {late}");
    assert_eq!(at(3_600), 0, "back to 0 once VQ_1 drained below l_1");
    assert!(r.ctv.iter().all(|c| c.1 == 0), "no L4S traffic: CTV_0 stays 0");
    // While the CTV acts, the 60 Mbit/s flow loses more than the 50 Mbit/s one
    // (a larger share of its values is low: it is marked from a higher rate).
    let (a, b) = (&r.flows[&1], &r.flows[&2]);
    assert!(b.drops as f64 / 24_000.0 > a.drops as f64 / 41_667.0, "{} {}", a.drops, b.drops);
}

#[test]
fn gold_gets_more_than_silver_as_the_policy_orders() {
    // The paper's Figure 5/6 mix at its first phase: L4S Gold, L4S Silver
    // (DCTCP-like), Classic Gold, Classic Silver (Reno-like), 1 each, 5 ms
    // RTT, 200 Mbit/s, measured over 5..20 s.  The policy's target in this
    // region (Silver above 10 Mbit/s) is 1:4 Silver:Gold per class.
    let rules = r#", "policies": [{"policy": "silver", "sport": 2}, {"policy": "silver", "sport": 4}]"#;
    let senders = [Sender::dctcp(1), Sender::dctcp(2), Sender::reno(3), Sender::reno(4)];
    let r = run(&vdq(rules), 200.0, &senders, 20 * S, 5 * S);
    let (lg, ls, cg, cs) = (r.mbit(1), r.mbit(2), r.mbit(3), r.mbit(4));
    println!("gold:silver L4S {lg:.1}:{ls:.1}, Classic {cg:.1}:{cs:.1}, total {:.1}", r.total_mbit());
    assert!(r.total_mbit() > 0.95 * 196.8, "utilisation: {}", r.total_mbit());
    let agg = (lg + cg) / (ls + cs);
    // Tolerance: Gold must get at least 1.8x Silver in each class and in all
    // (the policy's order, well away from 1:1), and at most the policy's 4x
    // (+10 %): the paper's CTV is episodic (0 at most updates, below Gold's
    // rate too when set), so both classes are cut in the same episodes,
    // which pulls the ratio from 4 towards 2 (README; the next test).
    for (what, ratio) in [("L4S", lg / ls), ("Classic", cg / cs), ("all", agg)] {
        assert!((1.8..=4.4).contains(&ratio), "{what}: Gold/Silver = {ratio:.2}");
    }
    // The ideal shares at a steady CTV are exactly 4:1 (region III).
    use crate::qdisc::pv_marker::{gold_value, Policy};
    let c = gold_value(78.7e6);
    assert!((Policy::Gold.rate_at(c) / Policy::Silver.rate_at(c) - 4.0).abs() < 1e-3);
    // summary.json: per-flow policies and per-class counters.
    let st = r.stats.unwrap();
    let pol: Vec<_> =
        st["top_flows"].as_array().unwrap().iter().map(|f| (f["sport"].as_u64(), f["policy"].clone())).collect();
    assert!(pol.contains(&(Some(2), Value::from("silver"))) && pol.contains(&(Some(3), Value::from("gold"))));
    assert!(st["classes"]["l4s"]["aqm_marks"].as_u64().unwrap() > 0);
    assert!(st["classes"]["classic"]["aqm_drops"].as_u64().unwrap() > 0);
}

#[test]
fn l4s_queue_delay_stays_under_a_millisecond() {
    // DCTCP-like senders (ECT(1)), alone and next to a Reno-like Classic
    // flow, 100 Mbit/s, 5 ms RTT, over 5..20 s.  The paper: sub-millisecond
    // mean L4S delay; a single DCTCP flow reaching ~0.8 of C (VQ_0 is served
    // at 0.9 C).
    let r = run(&vdq(""), 100.0, &[Sender::dctcp(1), Sender::dctcp(2)], 20 * S, 5 * S);
    println!("L4S only: {:.1} + {:.1} Mbit/s, L4S sojourn {:.3} ms", r.mbit(1), r.mbit(2), r.l4s.sojourn_ms());
    assert!(r.l4s.sojourn_ms() < 1.0);
    assert!(r.total_mbit() > 75.0, "{}", r.total_mbit());
    let r = run(&vdq(""), 100.0, &[Sender::dctcp(1), Sender::dctcp(2), Sender::reno(3)], 20 * S, 5 * S);
    println!(
        "with Classic: {:.1} + {:.1} + {:.1} Mbit/s, L4S sojourn {:.3} ms, Classic {:.2} ms",
        r.mbit(1),
        r.mbit(2),
        r.mbit(3),
        r.l4s.sojourn_ms(),
        r.flows[&3].sojourn_ms()
    );
    assert!(r.l4s.sojourn_ms() < 1.0 && r.l4s.pkts_out > 80_000);
    assert!(r.flows[&3].sojourn_ms() < 20.0, "Classic below D_1");
    assert!(r.total_mbit() > 95.0);
    // The same senders through pfifo: the L4S packets wait behind the Classic queue.
    let p = run(PFIFO, 100.0, &[Sender::dctcp(1), Sender::dctcp(2), Sender::reno(3)], 20 * S, 5 * S);
    assert!(p.flows[&1].sojourn_ms() > 10.0, "pfifo: {}", p.flows[&1].sojourn_ms());
}

#[test]
fn an_unresponsive_flow_is_held_to_the_responsive_flows_share() {
    // 60 Mbit/s of Not-ECT UDP next to two Reno-like flows, all Gold, 100 Mbit/s.
    // pfifo: the UDP flow keeps its 60, the two TCPs share the rest, 100 ms of queue.
    // VDQ-CSAQM: a UDP packet passes only with a value above the CTV, i.e. at the
    // rate a Gold flow is entitled to, so it gets what each Reno flow gets (+-25 %:
    // the Reno sawtooth), and the queue stays short.  The price (the paper's
    // design: the VQ counts arrivals, and the UDP flow's dropped excess still
    // occupies C_v1): the entitled rate g solves 60 + 2 g = 98.4, g ~ 19 Mbit/s,
    // so the link runs at ~3 g.
    let senders = [Sender::cbr(1, 60.0), Sender::reno(2), Sender::reno(3)];
    let v = run(&vdq(""), 100.0, &senders, 30 * S, 10 * S);
    let p = run(PFIFO, 100.0, &senders, 30 * S, 10 * S);
    let tcp = |r: &Run| (r.mbit(2) + r.mbit(3)) / 2.0;
    println!("vdq: udp {:.1} tcp {:.1}; pfifo: udp {:.1} tcp {:.1}", v.mbit(1), tcp(&v), p.mbit(1), tcp(&p));
    assert!(v.mbit(1) < 1.25 * tcp(&v) && v.mbit(1) > 0.8 * tcp(&v), "{} vs {}", v.mbit(1), tcp(&v));
    assert!((v.total_mbit() / 3.0 - 19.2).abs() < 3.0, "{}", v.total_mbit());
    assert!(p.mbit(1) > 2.5 * tcp(&p));
    assert!(v.flows[&2].sojourn_ms() < 5.0 && p.flows[&2].sojourn_ms() > 50.0);
    // The steady CTV rule holds it as well (measured 28 Nov: UDP 18.6, Reno-like 18.2 each).
    let s = run(&vdq(r#", "ctv_rule": "steady""#), 100.0, &senders, 30 * S, 10 * S);
    println!("vdq steady: udp {:.1} tcp {:.1}", s.mbit(1), tcp(&s));
    assert!(s.mbit(1) < 1.25 * tcp(&s) && s.mbit(1) > 0.8 * tcp(&s), "{} vs {}", s.mbit(1), tcp(&s));
}

#[test]
fn control_state_shows_the_ctvs_and_the_marked_flows() {
    let rules = r#", "policies": [{"policy": "silver", "sport": 2}]"#;
    let mut sim = Sim::new(&vdq(rules), 100.0, &[Sender::reno(1), Sender::reno(2)], 0);
    for i in 0..2 {
        sim.pump(i, 0);
    }
    let st = sim.link.qdisc().control_state(0, 10);
    assert_eq!(st.kind, "vdq_csaqm");
    assert_eq!(st.flows_active, 2);
    let flows = st.flows.unwrap();
    let pol = |f: &crate::qdisc::control::FlowState| f.extra.iter().find(|e| e.0 == "policy").unwrap().1;
    assert_eq!((pol(&flows[0]), pol(&flows[1])), (Scalar::S("gold"), Scalar::S("silver")));
    assert_eq!(flows[0].queue, 1, "Classic");
    assert!(st.params.iter().any(|p| p == &("ctv_classic", Scalar::U(0))));
    assert!(st.params.iter().any(|p| p == &("ctv_classic_gold_mbit", Scalar::S("unlimited"))));
}

/// Gold:Silver of `n` Gold and `n` Silver senders of one kind (sports 1.., 101..)
/// at `rate_mbit`, over 5..20 s, with the CTV pinned at Gold's rate `pin_mbit`
/// if given: (Gold / Silver throughput, Gold's and Silver's share of packets
/// dropped or marked, the share of CTV_0/CTV_1 updates at 0, utilisation).
fn gold_silver(mk: fn(u16) -> Sender, n: u16, rate_mbit: f64, pin_mbit: Option<f64>) -> (f64, f64, f64, f64, f64) {
    gold_silver_with(mk, n, rate_mbit, pin_mbit, "")
}

/// [`gold_silver`] with more config fields (`extra`: `, "field": value...`).
fn gold_silver_with(
    mk: fn(u16) -> Sender,
    n: u16,
    rate_mbit: f64,
    pin_mbit: Option<f64>,
    extra: &str,
) -> (f64, f64, f64, f64, f64) {
    use crate::qdisc::pv_marker::gold_value;
    use crate::qdisc::vdq_csaqm::PINNED_CTV;
    let senders: Vec<Sender> = (0..n).flat_map(|i| [mk(1 + i), mk(101 + i)]).collect();
    let rules: Vec<String> = (0..n).map(|i| format!(r#"{{"policy": "silver", "sport": {}}}"#, 101 + i)).collect();
    let q = vdq(&format!(r#", "policies": [{}]{extra}"#, rules.join(", ")));
    PINNED_CTV.with(|p| p.set(pin_mbit.map(|g| gold_value(g * 1e6))));
    let r = run(&q, rate_mbit, &senders, 20 * S, 5 * S);
    PINNED_CTV.with(|p| p.set(None));
    let sum = |from: u16| (from..from + n).map(|s| r.mbit(s)).sum::<f64>();
    let hit = |from: u16| {
        let (mut acted, mut all) = (0, 0);
        for f in (from..from + n).map(|s| &r.flows[&s]) {
            acted += f.marks + f.drops;
            all += f.pkts_out + f.drops;
        }
        acted as f64 / all as f64
    };
    let late: Vec<_> = r.ctv.iter().filter(|c| c.0 >= 5 * S).collect();
    let idle = late.iter().filter(|c| c.1.max(c.2) == 0).count() as f64 / late.len() as f64;
    (sum(1) / sum(101), hit(1), hit(101), idle, r.total_mbit() / rate_mbit)
}

#[test]
fn a_steady_ctv_gives_four_to_one_the_papers_episodic_ctv_about_two() {
    // Why Gold:Silver is ~2:1 (Reno-like) and ~1.3:1 (DCTCP-like), not the
    // policy's 4:1 (README, vdq_csaqm).  Gold + Silver pairs, 60 Mbit/s per
    // pair, 5 ms RTT.  Measured: the paper's CTV Reno 2.40 (n=1), 2.67 (n=5),
    // DCTCP 1.36; the same senders and marker with the CTV pinned at Gold's
    // 0.8 C / n (0.7 for DCTCP): Reno 3.94, DCTCP 2.87.  At 50..70 Mbit/s per
    // pair (other packet timings) the paper's ratios stay within 2.27..2.67
    // (Reno) and 1.30..1.44 (DCTCP), the pinned Reno within 3.87..3.94: the
    // bounds are those +-25 %.  So the marker, the TVFs and the senders
    // realise ~4:1 under a steady CTV; the paper's CTV is 0 at most updates
    // and, when set, lies below Gold's rate too, so both classes are cut in
    // the same episodes and the depth of each cut, not the policy, sets the
    // ratio.
    let reno = Sender::reno as fn(u16) -> Sender;
    let dctcp = Sender::dctcp as fn(u16) -> Sender;
    let (ratio, _, _, idle, util) = gold_silver(reno, 1, 60.0, None);
    println!("reno paper: {ratio:.2}, CTV 0 at {idle:.2} of updates, utilisation {util:.2}");
    assert!((1.8..3.0).contains(&ratio) && idle > 0.5 && util > 0.95, "{ratio} {idle} {util}");
    let (ratio5, ..) = gold_silver(reno, 5, 300.0, None);
    println!("reno paper n=5: {ratio5:.2}");
    assert!((1.8..3.0).contains(&ratio5), "more flows per class do not approach 4:1: {ratio5}");
    let (pinned, ..) = gold_silver(reno, 1, 60.0, Some(0.8 * 60.0));
    println!("reno pinned: {pinned:.2}");
    assert!((3.0..5.0).contains(&pinned), "{pinned}");
    // DCTCP's window ~ 1 / (its marked fraction), so the ratio is Silver's
    // marked fraction over Gold's.  The paper's CTV_0 marks Gold almost as
    // often as Silver (30 % vs 37 %); pinned, Gold is marked only above its
    // entitlement (2.3 % vs 27 %).
    let (ratio, g, s, idle, _) = gold_silver(dctcp, 1, 60.0, None);
    println!("dctcp paper: {ratio:.2}, marked gold {g:.3} silver {s:.3}, CTV 0 at {idle:.2}");
    assert!((1.0..1.8).contains(&ratio) && g > 0.6 * s && idle > 0.3, "{ratio} {g} {s} {idle}");
    let (pinned, g, s, ..) = gold_silver(dctcp, 1, 60.0, Some(0.7 * 60.0));
    println!("dctcp pinned: {pinned:.2}, marked gold {g:.3} silver {s:.3}");
    assert!(pinned > 2.2 && g < 0.25 * s, "{pinned} {g} {s}");
}

#[test]
fn the_steady_ctv_rule_realises_the_policy() {
    // ctv_rule = "steady" (vdq_steady.rs, on VQ_1): the same senders and
    // marker as above, one Gold and one Silver.  Measured (28 Nov, setpoint
    // 0.5 l_1 under the paper's CTV) at 60 / 200 Mbit/s per pair, Reno-like:
    // 3.89 / 3.57 (the paper's rule 2.40 / 1.82).  The bound: the policy's
    // 4:1 +- 25 % (the issue's target).
    let steady = r#", "ctv_rule": "steady""#;
    let reno = Sender::reno as fn(u16) -> Sender;
    let dctcp = Sender::dctcp as fn(u16) -> Sender;
    for rate in [60.0, 200.0] {
        let (ratio, g, s, idle, util) = gold_silver_with(reno, 1, rate, None, steady);
        println!("reno at {rate}: Gold:Silver {ratio:.2}, hit {g:.3} / {s:.3}, CTV 0 at {idle:.2}, util {util:.3}");
        assert!((3.0..=5.0).contains(&ratio) && util > 0.95, "reno at {rate}: {ratio} {util}");
    }
    // Without `steady_l4s_gain`, VQ_0 keeps the paper's rule: L4S senders
    // alone never fill VQ_1 (VQ_0 holds them to 0.9 C < 0.984 C), so the run
    // is the paper's, packet for packet.
    let paper = gold_silver_with(dctcp, 1, 60.0, None, "");
    let ours = gold_silver_with(dctcp, 1, 60.0, None, steady);
    assert_eq!(format!("{paper:?}"), format!("{ours:?}"));
    // With it, VQ_0's shallow cut (g = 0.1 of the paper's depth;
    // vdq_steady.rs "The L4S cut").  One Gold + one Silver Prague-like flow
    // at 50 Mbit/s (the testbed's pair: Prague's 0.04 packet per round at 5
    // ms), measured 28 Nov: 2.99:1 at 88 % of C, the paper's rule 1.67:1 at
    // 81 % (the testbed: 2.90 and 1.75).  VQ_0 runs at 0.9 C, so the pair is
    // entitled 35:10 = 3.5:1; the bound asks for most of the way from the
    // paper's rule to that.  DCTCP-like at 200 Mbit/s: 3.49 (paper's 1.73).
    let cut = r#", "ctv_rule": "steady", "steady_l4s_gain": 0.1"#;
    let prague = Sender::prague as fn(u16) -> Sender;
    let (paper, _, _, _, paper_util) = gold_silver_with(prague, 1, 50.0, None, "");
    let (ours, g, s, _, util) = gold_silver_with(prague, 1, 50.0, None, cut);
    println!("prague pair at 50: Gold:Silver {ours:.2} (paper's rule {paper:.2}), hit {g:.3} / {s:.3}, util {util:.3} ({paper_util:.3})");
    assert!(paper < 2.0 && ours > 2.6 && util > paper_util, "{paper} {ours} {util} {paper_util}");
    let (ours, ..) = gold_silver_with(dctcp, 1, 200.0, None, cut);
    println!("dctcp pair at 200: Gold:Silver {ours:.2}");
    assert!((3.0..=5.0).contains(&ours), "{ours}");
    // One Prague-like flow alone keeps VQ_0's 0.9 C (measured 0.88; the paper's rule 0.83).
    let alone = run(&vdq(cut), 50.0, &[Sender::prague(1)], 20 * S, 5 * S);
    println!("prague alone: {:.3} of C", alone.total_mbit() / 50.0);
    assert!(alone.total_mbit() / 50.0 > 0.85, "{}", alone.total_mbit());
    // The L4S queue keeps its delay beside a steady-CTV Classic flow: 8
    // DCTCP-like flows and a Reno-like one at 50 Mbit/s (measured: mean
    // 0.37, max 1.68 ms; with the L4S cut 0.23 / 1.44; the paper's rule
    // 0.43 / 1.48).
    let senders: Vec<Sender> = (1..=8).map(Sender::dctcp).chain([Sender::reno(20)]).collect();
    let r = run(&vdq(steady), 50.0, &senders, 20 * S, 5 * S);
    let max_ms = r.l4s.sojourn_max as f64 / 1e6;
    println!("8 + 1: L4S sojourn {:.3} ms, max {max_ms:.2} ms, total {:.1}", r.l4s.sojourn_ms(), r.total_mbit());
    assert!(r.l4s.sojourn_ms() < 1.0 && max_ms <= 2.0, "{} {max_ms}", r.l4s.sojourn_ms());
    assert!(r.total_mbit() > 0.95 * 49.2 && r.mbit(20) > 1.0, "{} {}", r.total_mbit(), r.mbit(20));
    let st = r.stats.unwrap();
    assert_eq!(st["ctv_rule"], "steady");
    assert!(st["steady_p"].as_f64().unwrap() > 0.0, "{}", st["steady_p"]);
}

#[test]
fn the_steady_ctv_rule_keeps_the_classic_queue_where_l4s_shares() {
    // Where L4S and Classic share VQ_1, a PI alone swung with a ~4 s period
    // (vdq_steady.rs): one Reno-like and one Prague-like flow at 50 Mbit/s
    // (all Gold) had the Classic queue at 18.0 ms on average and the link at
    // 92.0 %, against the paper's rule 2.7 ms and 97.7 %.  With the setpoint
    // (0.5 l_1) and the paper's CTV as the ceiling, measured 28 Nov: 4.0 ms,
    // 97.6 %.  Bounds: under 10 ms (half the swinging loop's) and >= 95 %.
    let steady = r#", "ctv_rule": "steady""#;
    let pair = [Sender::reno(1), Sender::prague(2)];
    let paper = run(&vdq(""), 50.0, &pair, 30 * S, 5 * S);
    let ours = run(&vdq(steady), 50.0, &pair, 30 * S, 5 * S);
    let (cp, co) = (paper.classic_delay_mean_ms(5 * S), ours.classic_delay_mean_ms(5 * S));
    let (up, uo) = (paper.total_mbit() / 50.0, ours.total_mbit() / 50.0);
    println!("reno + prague: Classic queue {co:.2} ms (paper's rule {cp:.2}), utilisation {uo:.3} ({up:.3})");
    assert!(co < 10.0 && uo >= 0.95, "{co} {uo}");
    // Gold and Silver pairs of both classes at 200 Mbit/s (DCTCP-like L4S,
    // whose windows are large enough to resolve 4:1): measured Classic 3.88,
    // L4S 3.39, Classic queue 3.3 ms (with the L4S cut 3.86, 3.38, 4.3 ms);
    // the paper's rule 2.20, 2.12, 16.0 ms.
    let senders = [Sender::reno(1), Sender::reno(101), Sender::dctcp(2), Sender::dctcp(102)];
    let silver = r#", "policies": [{"policy": "silver", "sport": 101}, {"policy": "silver", "sport": 102}]"#;
    let paper = run(&vdq(silver), 200.0, &senders, 30 * S, 5 * S);
    let ours = run(&vdq(&format!("{silver}{steady}")), 200.0, &senders, 30 * S, 5 * S);
    for (name, r) in [("paper", &paper), ("steady", &ours)] {
        println!(
            "{name} at 200: Gold:Silver Classic {:.2}, L4S {:.2}, Classic queue {:.2} ms, utilisation {:.3}",
            r.mbit(1) / r.mbit(101),
            r.mbit(2) / r.mbit(102),
            r.classic_delay_mean_ms(5 * S),
            r.total_mbit() / 200.0
        );
    }
    for (g, s) in [(1, 101), (2, 102)] {
        let ratio = ours.mbit(g) / ours.mbit(s);
        assert!((3.0..=5.0).contains(&ratio), "{g}: {ratio}");
    }
    assert!(ours.classic_delay_mean_ms(5 * S) < paper.classic_delay_mean_ms(5 * S));
}
