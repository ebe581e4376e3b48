//! Unit tests of DualPI2 on its own (no link): the PI controller holding
//! the Classic queue at target, Classic marks and drops with p_C, the L
//! queue's step and ramp, the coupling p_CL = k p', overload, the
//! classifier, the schedulers and the PI timer's grid.

use super::*;
use crate::config;
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
