//! Unit tests of VDQ-CSAQM's verdicts and limits with pinned packet values
//! (the marker skipped: [`VdqCsaqm::enqueue_valued`]); its behaviour with
//! the marker and senders is tested in `../vdq_tests.rs`.

use super::*;
use crate::packet::build;
use crate::time::NS_PER_MS;

const LEN: usize = 1500;

#[test]
fn values_below_the_ctv_are_dropped_or_marked_and_l4s_is_held_to_both_ctvs() {
    let mk = |classic_ecn: bool| {
        let c = crate::config::VdqCsaqm { rate_mbit: Some(100.0), classic_ecn, ..Default::default() };
        VdqCsaqm::from_config(&c, 1)
    };
    let pkt = |ecn: Ecn, sport: u16| Packet::from_frame(&build::ipv4_udp_ports([2; 6], [4; 6], LEN, ecn, sport, 9), 0);
    // Classic load: 100 packets at v = 40000 and 100 at 20000 = 300 kB in VQ_1
    // (l_1 = 246 kB = 164 packets): the 40000s fit, the 20000s do not: CTV_1 = 20001.
    for classic_ecn in [true, false] {
        let mut q = mk(classic_ecn);
        for k in 0..200 {
            q.enqueue_valued(pkt(Ecn::NotEct, 1), if k % 2 == 0 { 40_000 } else { 20_000 }, 0).unwrap();
        }
        q.update_ctvs(0);
        assert_eq!(q.ctvs(), [0, 20_001]);
        let probes =
            [(Ecn::NotEct, 30_000, 10), (Ecn::NotEct, 10_000, 11), (Ecn::Ect0, 10_000, 12), (Ecn::Ect1, 10_000, 13)];
        for (ecn, v, sport) in probes {
            q.enqueue_valued(pkt(ecn, sport), v, 0).unwrap();
        }
        q.enqueue_valued(pkt(Ecn::Ect1, 14), 20_001, 0).unwrap();
        let mut drops = vec![];
        let mut out = vec![];
        while let Some(p) = q.dequeue(0, &mut drops) {
            out.push(p);
        }
        let sent = |sport: u16| out.iter().find(|p| p.flow_key().unwrap().sport == sport);
        let dropped = |sport: u16| drops.iter().any(|d| d.pkt.flow_key().unwrap().sport == sport);
        // The L4S packets leave first (strict priority); below CTV_1 they are marked although VQ_0 is empty.
        assert_eq!(out[0].flow_key().unwrap().sport, 13);
        assert!(out[0].marked && !out[1].marked && out[1].flow_key().unwrap().sport == 14);
        assert!(sent(10).is_some_and(|p| !p.marked), "above CTV_1: unchanged");
        assert!(dropped(11), "below CTV_1, Not-ECT: dropped");
        if classic_ecn {
            assert!(sent(12).is_some_and(|p| p.marked), "below CTV_1, ECT(0): marked");
        } else {
            assert!(dropped(12), "classic_ecn off: ECT(0) below CTV_1 dropped");
        }
        assert_eq!(out.iter().filter(|p| p.flow_key().unwrap().sport == 1).count(), 100, "the 40000s pass");
        assert_eq!(drops.iter().filter(|d| d.pkt.flow_key().unwrap().sport == 1).count(), 100, "the 20000s go");
    }
    // L4S load alone: 100 packets (150 kB) at 40000 overfill VQ_0 (l_0 = 0.9 * 100 Mbit/s * 1 ms
    // = 11.25 kB) but not VQ_1: CTV_0 = 40001 acts on L4S packets only.
    let mut q = mk(true);
    for _ in 0..100 {
        q.enqueue_valued(pkt(Ecn::Ect1, 1), 40_000, 0).unwrap();
    }
    q.update_ctvs(0);
    assert_eq!(q.ctvs(), [40_001, 0]);
    q.enqueue_valued(pkt(Ecn::NotEct, 2), 5, 0).unwrap();
    let mut drops = vec![];
    let mut out = vec![];
    while let Some(p) = q.dequeue(0, &mut drops) {
        out.push(p);
    }
    assert!(drops.is_empty() && out.len() == 101);
    assert_eq!(out.iter().filter(|p| p.marked).count(), 100, "every L4S packet below CTV_0 marked");
    assert!(!out[100].marked, "the Classic packet only answers to CTV_1 = 0");
}

#[test]
fn vq_and_queue_limits_refuse_arrivals_and_vqs_drain_at_their_rates() {
    // 10 Mbit/s, VQs at half of C: qmax_0 = vqmax_0 = 50 ms = 62.5 kB (41
    // packets), qmax_1 = 200 ms = 250 kB (166), vqmax_1 = 312.5 kB.
    let c = crate::config::VdqCsaqm { rate_mbit: Some(10.0), vq0_rate: 0.5, vq1_rate: 0.5, ..Default::default() };
    let mut q = VdqCsaqm::from_config(&c, 1);
    let pkt = |ecn: Ecn| Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], LEN, ecn), 0);
    let l_ok = (0..100).filter(|_| q.enqueue_valued(pkt(Ecn::Ect1), 1, 0).is_ok()).count();
    let c_ok = (0..300).filter(|_| q.enqueue_valued(pkt(Ecn::NotEct), 1, 0).is_ok()).count();
    assert_eq!((l_ok, c_ok), (41, 166));
    assert_eq!((q.counters[0].queue_drops, q.counters[1].queue_drops), (59, 134));
    // Sending everything takes ps * C_vi / C = half of each packet from the VQs.
    let mut drops = vec![];
    while q.dequeue(0, &mut drops).is_some() {}
    assert_eq!(q.vq_bits(), [0, 207 * 1500 * 8 / 2]);
    // Idle from the end of the last transmission (1.2 ms): at 100 ms VQ_1
    // was served at 5 Mbit/s for 98.8 ms = 61.75 kB.
    q.update_ctvs(100 * NS_PER_MS);
    let vq1 = q.vq_bits()[1] as f64 / 8.0;
    assert!((vq1 - (155_250.0 - 61_750.0)).abs() < 1.0, "{vq1}");
    // Now VQ_1, not the empty physical queue, refuses: 312.5 - 93.5 kB = 146 packets.
    let ok = (0..200).filter(|_| q.enqueue_valued(pkt(Ecn::NotEct), 1, 100 * NS_PER_MS).is_ok()).count();
    assert_eq!((ok, q.counters[1].vq_drops), (146, 54));
}

#[test]
fn with_the_l4s_cut_the_steady_pi_also_holds_the_classic_sojourn() {
    // 20 Classic packets (30 kB, far below l_1 = 246 kB at 100 Mbit/s) that
    // have waited 15 ms: VQ_1 alone reads as short (e < 0), the Classic
    // sojourn as 15 / 20 of l_1, above the setpoint's 10 ms.  Only with
    // `steady_l4s_gain` set does the PI's p rise.
    let pkt = Packet::from_frame(&build::ipv4_udp_ports([2; 6], [4; 6], LEN, Ecn::NotEct, 1, 9), 0);
    let p_after = |gain: Option<f64>| {
        let c = crate::config::VdqCsaqm {
            rate_mbit: Some(100.0),
            ctv_rule: "steady".into(),
            steady_l4s_gain: gain,
            ..Default::default()
        };
        let mut q = VdqCsaqm::from_config(&c, 1);
        for _ in 0..20 {
            q.enqueue_valued(pkt.clone(), 30_000, 0).unwrap();
        }
        for t in 1..=5 {
            q.update_ctvs((10 + t) * NS_PER_MS);
        }
        q.steady_p()
    };
    assert_eq!(p_after(None), 0.0, "VQ_1 below its setpoint: nothing to do");
    assert!(p_after(Some(0.1)) > 0.0, "the Classic sojourn above s D_1 raises p");
}
