//! Unit tests of the WiFi medium in virtual time: the timing of one frame,
//! aggregation bursts, how saturated stations and the AP share the medium,
//! access delay without congestion, the extra deferral, and collisions
//! until the retry limit.

use super::*;
use crate::config::{AccessDelay, Aggregation, ConstantDist, Pfifo, PhyOverheads, QdiscConfig, WifiClient};
use crate::link::Out;
use crate::packet::{build, Dir, Ecn, Packet};
use crate::qdisc::DropCause;
use crate::time::{simulate, Simulated, NS_PER_MS, NS_PER_US};

fn cfg(n: usize, phy: f64) -> WifiConfig {
    WifiConfig {
        clients: (0..n).map(|_| WifiClient { phy_rate_mbit: phy, uplink_phy_rate_mbit: None }).collect(),
        aggregation: Aggregation::default(),
        access_delay_us: AccessDelay::default(),
        phy: PhyOverheads::default(),
        queue: QdiscConfig::Pfifo(Pfifo { limit_pkts: 1000 }),
    }
}

fn pkt(client: u16, t: Nanos) -> Packet {
    let mut p = Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], 1500, Ecn::NotEct), t);
    p.client = client;
    p
}

/// Arrivals are (instant, direction, client).
impl Simulated for Wifi {
    type Arrival = (Nanos, Dir, usize);
    type Out = (Dir, Out);
    fn arrival_time(a: &(Nanos, Dir, usize)) -> Nanos {
        a.0
    }
    fn next_event(&self) -> Option<Nanos> {
        Wifi::next_event(self)
    }
    fn process(&mut self, now: Nanos, out: &mut Vec<(Dir, Out)>) {
        Wifi::process(self, now, out)
    }
    fn arrive(&mut self, &(_, dir, c): &(Nanos, Dir, usize), now: Nanos, out: &mut Vec<(Dir, Out)>) {
        self.enqueue(dir, c, pkt(c as u16, now), now, out)
    }
}

/// Drive the medium in virtual time with (t, dir, client) arrivals.
fn drive(w: &mut Wifi, arrivals: &[(Nanos, Dir, usize)], until: Nanos) -> Vec<(Dir, Out)> {
    simulate(w, arrivals, until)
}

fn departures(out: &[(Dir, Out)]) -> Vec<(Dir, Nanos, u16)> {
    out.iter()
        .filter_map(|(d, o)| if let Out::Depart { t, pkt } = o { Some((*d, *t, pkt.client)) } else { None })
        .collect()
}

#[test]
fn single_frame_timing() {
    // One 1500-byte frame on an idle medium at 100 Mbit/s: AIFS + backoff
    // (0..15 slots) + preamble + (1500 + 42 -> 1544 B) * 8 / 100e6.
    let mut w = Wifi::new(&cfg(1, 100.0), 1, 0);
    let out = drive(&mut w, &[(0, Dir::Up, 0)], u64::MAX);
    let d = departures(&out);
    assert_eq!(d.len(), 1);
    let air = 40 * NS_PER_US + 1544 * 8 * 10;
    let t = d[0].1;
    assert!(t >= 43 * NS_PER_US + air && t <= (43 + 15 * 9) * NS_PER_US + air, "{t}");
}

#[test]
fn aggregation_bursts() {
    // 100 frames arrive at once: they leave in A-MPDUs of at most 64 frames,
    // all frames of one aggregate at the same instant.
    let mut w = Wifi::new(&cfg(1, 300.0), 1, 0);
    let arrivals: Vec<(Nanos, Dir, usize)> = (0..100).map(|_| (0, Dir::Down, 0)).collect();
    let d = departures(&drive(&mut w, &arrivals, u64::MAX));
    assert_eq!(d.len(), 100);
    let mut bursts: Vec<(Nanos, usize)> = vec![];
    for (_, t, _) in &d {
        match bursts.last_mut() {
            Some((bt, n)) if bt == t => *n += 1,
            _ => bursts.push((*t, 1)),
        }
    }
    // 65,535-byte A-MPDU limit: 42 frames of 1544 B = 64,848 B.
    assert_eq!(bursts.iter().map(|b| b.1).collect::<Vec<_>>(), vec![42, 42, 16]);

    // max_frames caps the burst.
    let mut c = cfg(1, 300.0);
    c.aggregation.max_frames = 8;
    let mut w = Wifi::new(&c, 1, 0);
    let arrivals: Vec<(Nanos, Dir, usize)> = (0..20).map(|_| (0, Dir::Up, 0)).collect();
    let d = departures(&drive(&mut w, &arrivals, u64::MAX));
    let firsts = d.iter().filter(|x| x.1 == d[0].1).count();
    assert_eq!(firsts, 8);

    // max_wait holds the first frame for more: frames 50 us apart, wait
    // 400 us: the first aggregate carries the 9 frames seen by then.
    let mut c = cfg(1, 300.0);
    c.aggregation.max_wait_us = 400.0;
    let mut w = Wifi::new(&c, 1, 0);
    let arrivals: Vec<(Nanos, Dir, usize)> = (0..20).map(|i| (i * 50 * NS_PER_US, Dir::Up, 0)).collect();
    let d = departures(&drive(&mut w, &arrivals, u64::MAX));
    assert!(d.iter().filter(|x| x.1 == d[0].1).count() >= 9);
}

#[test]
fn shared_medium_rate_and_fairness() {
    // Two saturated stations (uplink) and the AP to both (downlink) at
    // 200 Mbit/s PHY share one medium: total goodput is below the PHY rate,
    // each of the four flows gets a similar share, the medium is ~always busy.
    let mut w = Wifi::new(&cfg(2, 200.0), 7, 0);
    let mut arrivals = vec![];
    for i in 0..20_000u64 {
        let t = i * 20 * NS_PER_US; // 4 x 600 Mbit/s offered: saturating
        for (dir, c) in [(Dir::Up, 0), (Dir::Up, 1), (Dir::Down, 0), (Dir::Down, 1)] {
            arrivals.push((t, dir, c));
        }
    }
    let out = drive(&mut w, &arrivals, 400 * NS_PER_MS);
    let d = departures(&out);
    let mut per = [[0u64; 2]; 2];
    for (dir, _, c) in &d {
        per[dir.index()][*c as usize] += 1;
    }
    let total_mbit = d.len() as f64 * 1500.0 * 8.0 / 0.4 / 1e6;
    eprintln!(
        "total {total_mbit:.1} Mbit/s, flows {per:?}, collisions {}, util {:.3}",
        w.collision_events,
        w.utilisation(400 * NS_PER_MS)
    );
    assert!(total_mbit < 200.0 && total_mbit > 120.0, "{total_mbit}");
    let flows = [per[0][0], per[0][1], per[1][0], per[1][1]];
    let max = *flows.iter().max().unwrap() as f64;
    let min = *flows.iter().min().unwrap() as f64;
    // Three contenders (2 STAs + AP) win about equally; the AP splits its
    // share between two clients: stations get ~1/3, AP flows ~1/6 each.
    assert!(per[0][0] as f64 / per[1][0] as f64 > 1.4, "{flows:?}");
    assert!(min / max > 0.3, "{flows:?}");
    assert!(w.utilisation(400 * NS_PER_MS) > 0.95);
    assert!(w.collision_events > 0);
    let drops = out.iter().filter(|(_, o)| matches!(o, Out::Drop { cause: DropCause::WifiQueue, .. })).count();
    assert!(drops > 0);
}

#[test]
fn access_delay_varies_without_congestion() {
    // A lone station sending one small packet every 2 ms: no queueing, yet
    // the WiFi hop delay varies by the backoff (0..15 slots = 0..135 us).
    let mut w = Wifi::new(&cfg(1, 300.0), 3, 0);
    let arrivals: Vec<(Nanos, Dir, usize)> = (0..500).map(|i| (i * 2 * NS_PER_MS, Dir::Up, 0)).collect();
    let out = drive(&mut w, &arrivals, u64::MAX);
    let waits: Vec<Nanos> = out
        .iter()
        .filter_map(|(_, o)| if let Out::Depart { pkt, .. } = o { Some(pkt.wifi_wait) } else { None })
        .collect();
    let min = *waits.iter().min().unwrap();
    let max = *waits.iter().max().unwrap();
    assert!(max - min > 100 * NS_PER_US && max - min <= 135 * NS_PER_US, "{min} {max}");
    assert_eq!(w.collision_events, 0);
}

#[test]
fn extra_delay_distribution_adds_deferral() {
    let mut c = cfg(1, 300.0);
    c.access_delay_us.extra = Some(Dist::Constant(ConstantDist { us: 500.0 }));
    let mut w = Wifi::new(&c, 3, 0);
    let out = drive(&mut w, &[(0, Dir::Up, 0)], u64::MAX);
    let d = departures(&out);
    assert!(d[0].1 >= 543 * NS_PER_US);
}

#[test]
fn collisions_exhaust_retries() {
    // cw_max = 0: both stations always pick slot 0 and always collide.
    let mut c = cfg(2, 100.0);
    c.access_delay_us.cw_min = 0;
    c.access_delay_us.cw_max = 0;
    let mut w = Wifi::new(&c, 3, 0);
    let out = drive(&mut w, &[(0, Dir::Up, 0), (0, Dir::Up, 1)], u64::MAX);
    let retry = out.iter().filter(|(_, o)| matches!(o, Out::Drop { cause: DropCause::WifiRetry, .. })).count();
    assert_eq!(retry, 2);
    assert_eq!(w.collision_events, 8); // first attempt + 7 retries
}
