//! Unit tests of the PIE controller (pie.rs): the arithmetic of one update,
//! the burst allowance, the de-randomised drop, the enqueue rules, ECN.

use super::*;
use crate::packet::{build, Ecn};

fn pkt(ecn: Ecn) -> Packet {
    Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], 1500, ecn), 0)
}

fn prm() -> PieParams {
    PieParams::from_config(&config::Pie::default())
}

const MS: Nanos = NS_PER_MS;

#[test]
fn gains_scale_with_the_probability_as_rfc_8033() {
    for (p, s) in [
        (1.0, 1.0),
        (0.1, 1.0),
        (0.099, 0.5),
        (0.01, 0.5),
        (0.005, 1.0 / 8.0),
        (5e-4, 1.0 / 32.0),
        (5e-5, 1.0 / 128.0),
        (5e-6, 1.0 / 512.0),
        (1e-6, 1.0 / 512.0),
        (5e-7, 1.0 / 2048.0),
        (0.0, 1.0 / 2048.0),
    ] {
        assert_eq!(gain_scale(p), s, "p = {p}");
    }
}

#[test]
fn update_follows_linux() {
    let prm = prm();
    let mut v = PieVars::default();
    // The last packet out waited 30 ms, packets remain: from p = 0 (gains / 2048).
    v.on_dequeue(30 * MS, 3000, 0);
    v.update(&prm, 3000);
    let want = (0.125 * 0.015 + 1.25 * 0.030) / 2048.0;
    assert!((v.prob - want).abs() < 1e-15, "{}", v.prob);
    // p >= 10 %: a step up is capped at 2 %; above 250 ms 2 % more.
    v.prob = 0.5;
    v.on_dequeue(100 * MS, 3000, 1);
    v.update(&prm, 3000);
    assert!((v.prob - 0.52).abs() < 1e-12, "{}", v.prob);
    v.on_dequeue(300 * MS, 3000, 2);
    v.update(&prm, 3000);
    assert!((v.prob - 0.56).abs() < 1e-12, "{}", v.prob);
    // Clamped at 1.
    v.prob = 0.99;
    v.update(&prm, 3000);
    assert_eq!(v.prob, 1.0);
    // Queue emptied (qdelay 0) twice: linear step down, then the 1/64 decay.
    v.on_dequeue(5 * MS, 0, 3);
    assert_eq!(v.qdelay(), 0);
    v.prob = 0.5;
    v.update(&prm, 0); // qdelay_old was 300 ms: no decay yet
    let p1: f64 = 0.5 + 0.125 * (0.0 - 0.015) + 1.25 * (0.0 - 0.3);
    assert!((v.prob - p1.max(0.0)).abs() < 1e-12);
    v.prob = 0.5;
    v.update(&prm, 0);
    let p2 = (0.5 - 0.125 * 0.015) * (1.0 - 1.0 / 64.0);
    assert!((v.prob - p2).abs() < 1e-12, "{} vs {p2}", v.prob);
    // Zero delay with packets queued: no decay.
    v.prob = 0.5;
    v.update(&prm, 1500);
    assert!((v.prob - (0.5 - 0.125 * 0.015)).abs() < 1e-12);
}

#[test]
fn rest_refills_the_burst_allowance() {
    let prm = prm();
    let mut v = PieVars::default();
    assert_eq!(v.burst_left(&prm), 150 * MS);
    // Dequeues 10 ms apart use it up (the first only starts the clock).
    for i in 0..16 {
        v.on_dequeue(20 * MS, 3000, i * 10 * MS);
    }
    assert_eq!(v.burst_left(&prm), 0);
    // Delay low twice with p = 0: rest, allowance back.
    v.qdelay_old = 20 * MS;
    v.on_dequeue(MS, 3000, 200 * MS);
    v.update(&prm, 3000);
    assert_eq!(v.burst_left(&prm), 0, "qdelay_old was 20 ms: not yet");
    v.update(&prm, 3000);
    assert_eq!(v.burst_left(&prm), 150 * MS);
    assert_eq!(v.dq_tstamp, None);
}

#[test]
fn derandomised_drops_are_spaced_between_0_85_and_8_5_over_p() {
    // p fixed at 5 %, qdelay 20 ms, 10 packets queued, no allowance:
    // gaps between drops are 17..170 packets; 16 + 1/p = 36 on average
    // (a geometric wait after the first 16; sd 19.5, ~2700 drops: 5 se = 1.9).
    let prm = PieParams { max_burst: 0, ..prm() };
    let mut v = PieVars { prob: 0.05, qdelay: 20 * MS, ..Default::default() };
    let mut rng = Pcg64Mcg::seed_from_u64(4);
    let mut gaps = vec![];
    let mut gap = 0;
    for _ in 0..100_000 {
        gap += 1;
        if v.verdict(&prm, 15_000, &mut pkt(Ecn::NotEct), &mut rng) == Verdict::Drop {
            gaps.push(gap);
            gap = 0;
        }
    }
    let (min, max) = (*gaps.iter().min().unwrap(), *gaps.iter().max().unwrap());
    let mean = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
    assert!(min >= 17 && max <= 171, "{min} {max}"); // 171: the sum may round below 8.5
    assert!((mean - 36.0).abs() < 2.0, "{mean}");
}

#[test]
fn no_early_drop_below_half_target_or_two_mtu_or_within_the_burst() {
    let prm = PieParams { max_burst: 0, ..prm() };
    let mut rng = Pcg64Mcg::seed_from_u64(1);
    let hits = |v: &mut PieVars, backlog: usize, rng: &mut Pcg64Mcg| {
        (0..1000).filter(|_| v.verdict(&prm, backlog, &mut pkt(Ecn::NotEct), rng) == Verdict::Drop).count()
    };
    // qdelay 7 ms < 7.5 ms and p 19 %: nothing; p 20 %: drops.
    let mut v = PieVars { prob: 0.19, qdelay: 7 * MS, ..Default::default() };
    assert_eq!(hits(&mut v, 15_000, &mut rng), 0);
    v.prob = 0.2;
    // ~111: one in 4 + 1/0.2.
    assert!(hits(&mut v, 15_000, &mut rng) > 80);
    // Less than 2 MTU queued: nothing, whatever p.
    let mut v = PieVars { prob: 1.0, qdelay: 100 * MS, ..Default::default() };
    assert_eq!(hits(&mut v, 2999, &mut rng), 0);
    assert_eq!(hits(&mut v, 3000, &mut rng), 1000);
    // Within the burst allowance: nothing.
    let mut v = PieVars { prob: 1.0, qdelay: 100 * MS, ..Default::default() };
    assert_eq!(hits(&mut v, 15_000, &mut rng), 1000);
    let with_burst = super::tests::prm();
    assert!((0..1000).all(|_| v.verdict(&with_burst, 15_000, &mut pkt(Ecn::NotEct), &mut rng) == Verdict::Enqueue));
    // bytemode: a 150-byte packet sees p / 10.
    let small = PieParams { bytemode: true, ..prm };
    let mut v = PieVars { prob: 0.5, qdelay: 100 * MS, ..Default::default() };
    let mut p = Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], 150, Ecn::NotEct), 0);
    let n = (0..20_000).filter(|_| v.verdict(&small, 15_000, &mut p, &mut rng) == Verdict::Drop).count();
    assert!((n as f64 / 20_000.0 - 0.05 / 1.85).abs() < 0.01, "{n}");
}

#[test]
fn ecn_marks_up_to_ten_percent_then_drops() {
    let mut rng = Pcg64Mcg::seed_from_u64(2);
    let prm = PieParams { max_burst: 0, ecn: true, ..prm() };
    let mut run = |p: f64, ecn: Ecn, prm: &PieParams| {
        let mut v = PieVars { prob: p, qdelay: 20 * MS, ..Default::default() };
        let mut tally = [0usize; 3];
        for _ in 0..5000 {
            tally[v.verdict(prm, 15_000, &mut pkt(ecn), &mut rng) as usize] += 1;
        }
        tally // [enqueue, mark, drop]
    };
    let t = run(0.1, Ecn::Ect0, &prm);
    assert!(t[1] > 100 && t[2] == 0, "{t:?}");
    let t = run(0.1001, Ecn::Ect1, &prm);
    assert!(t[1] == 0 && t[2] > 100, "{t:?}");
    let t = run(0.05, Ecn::NotEct, &prm);
    assert!(t[1] == 0 && t[2] > 100, "{t:?}");
    let t = run(0.05, Ecn::Ect0, &PieParams { ecn: false, ..prm });
    assert!(t[1] == 0 && t[2] > 100, "{t:?}");
}

#[test]
fn the_limit_tail_drops_and_clears_the_sum() {
    let mut q = Pie::from_config(&config::Pie { limit_pkts: 2, ..Default::default() }, 1);
    q.enqueue(pkt(Ecn::NotEct), 0).unwrap();
    q.enqueue(pkt(Ecn::NotEct), 0).unwrap();
    q.vars.accu_prob = 0.5;
    assert_eq!(q.enqueue(pkt(Ecn::NotEct), 0).unwrap_err().cause, DropCause::Queue);
    assert_eq!((q.vars.accu_prob, q.counters.overlimit, q.counters.packets_in), (0.0, 1, 2));
    // The timer: armed at its first call, then a fixed grid.
    assert_eq!(q.next_timer(), Some(0));
    q.on_timer(5);
    assert_eq!((q.next_timer(), q.counters.updates), (Some(5 + 15 * MS), 0));
    q.on_timer(5 + 15 * MS + 100);
    assert_eq!((q.next_timer(), q.counters.updates), (Some(5 + 30 * MS), 1));
    assert_eq!(q.drain().len(), 2);
}
