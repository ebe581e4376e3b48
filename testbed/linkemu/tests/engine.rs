//! The whole emulator core (bridge + links + WiFi + stats) in virtual time.

use std::sync::{Arc, Mutex};

use linkemu::config::Config;
use linkemu::engine::{Emit, Engine};
use linkemu::packet::{build, Dir, Ecn, Mac, Packet};
use linkemu::qdisc::DropCause;
use linkemu::stats::{IntervalRow, MemorySink, PacketRecord};
use linkemu::time::{Clock, Nanos, VirtualClock, NS_PER_MS, NS_PER_S, NS_PER_US};

const C0: Mac = [2, 0, 0, 0, 0, 0x10];
const C1: Mac = [2, 0, 0, 0, 0, 0x11];
const SRV: Mac = [2, 0, 0, 0, 0, 0x01];
const T0: Nanos = 1_000 * NS_PER_S; // virtual runs start at an arbitrary instant

/// The engine driven by a virtual clock, collecting what it emits.
struct Sim {
    clock: VirtualClock,
    engine: Engine,
    sent: Vec<Emit>,
    packets: Arc<Mutex<Vec<PacketRecord>>>,
    rows: Arc<Mutex<Vec<IntervalRow>>>,
}

impl Sim {
    fn new(json: &str) -> Sim {
        let cfg = Config::from_json(json).unwrap();
        cfg.validate().unwrap();
        let sink = MemorySink::default();
        let (packets, rows) = (sink.packets.clone(), sink.rows.clone());
        let clock = VirtualClock::new(T0);
        let engine = Engine::new(&cfg, clock.now(), Box::new(sink)).unwrap();
        Sim { clock, engine, sent: vec![], packets, rows }
    }

    /// Run the engine until virtual time `t`.
    fn run_until(&mut self, t: Nanos) {
        loop {
            let e = self.engine.next_event();
            if e > t {
                break;
            }
            self.clock.set(e.max(self.clock.now()));
            self.engine.advance_to(self.clock.now());
            self.sent.extend(self.engine.take_emits());
        }
        self.clock.set(t);
        self.engine.advance_to(t);
        self.sent.extend(self.engine.take_emits());
    }

    fn inject(&mut self, t: Nanos, port: usize, frame: Vec<u8>) {
        self.run_until(t);
        self.engine.ingress(port, Packet::from_frame(&frame, 0), t);
        self.sent.extend(self.engine.take_emits());
    }

    fn sent_to(&self, port: usize) -> Vec<&Emit> {
        self.sent.iter().filter(|e| e.port == port).collect()
    }
}

fn cfg(extra: &str) -> String {
    format!(
        r#"{{"client_ifs": ["c1", "c2"], "server_if": "srv", "seed": 1,
            "uplink": {{"rate_mbit": 12.0, "delay_ms": 5, "qdisc": {{"kind": "pfifo", "limit_pkts": 10}}}},
            "downlink": {{"rate_mbit": 24.0, "delay_ms": 3, "qdisc": {{"kind": "pfifo", "limit_pkts": 50}}}},
            "stats": {{"dir": "/nonexistent", "interval_ms": 100, "per_packet": true}} {extra}}}"#
    )
}

fn udp(dst: Mac, src: Mac, ip_len: usize) -> Vec<u8> {
    build::ipv4_udp(dst, src, ip_len, Ecn::NotEct)
}

#[test]
fn bridges_arp_and_learns_clients() {
    let mut s = Sim::new(&cfg(""));
    // A client's ARP request is flooded at once, unimpaired, to the server and the other client.
    s.inject(T0, 0, build::arp(C0));
    let ports: Vec<usize> = s.sent.iter().map(|e| e.port).collect();
    assert_eq!(ports, vec![1, 2]);
    assert!(s.sent.iter().all(|e| e.due == T0 && e.dir.is_none()));
    // The server's IP reply to the learned client takes the downlink: 3 ms + 1500 B at 24 Mbit/s.
    s.inject(T0 + NS_PER_MS, 2, udp(C0, SRV, 1500));
    s.run_until(T0 + NS_PER_S);
    let d = s.sent_to(0);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].due, T0 + NS_PER_MS + 500 * NS_PER_US + 3 * NS_PER_MS);
    assert_eq!(d[0].dir, Some(Dir::Down));
    // A frame for an unknown MAC is flooded to the clients only.
    s.sent.clear();
    s.inject(T0 + 2 * NS_PER_S, 2, udp([2, 9, 9, 9, 9, 9], SRV, 100));
    assert_eq!(s.sent.iter().map(|e| e.port).collect::<Vec<_>>(), vec![0, 1]);
}

#[test]
fn uplink_rate_delay_and_queue() {
    let mut s = Sim::new(&cfg(""));
    // 20 full packets at once from client 1: 1 ms each at 12 Mbit/s; 1 on the
    // wire + 10 queued, 9 dropped by pfifo(10).
    for _ in 0..20 {
        s.inject(T0, 1, udp(SRV, C1, 1500));
    }
    s.run_until(T0 + NS_PER_S);
    let up = s.sent_to(2);
    assert_eq!(up.len(), 11);
    for (i, e) in up.iter().enumerate() {
        assert_eq!(e.due, T0 + (i as u64 + 1) * NS_PER_MS + 5 * NS_PER_MS);
        assert_eq!(e.pkt.client, 1);
    }
    assert_eq!(s.engine.stats.drops(Dir::Up, DropCause::Queue), 9);
    // Per-packet records: 11 forwarded with sojourn 0..10 ms, 9 queue drops.
    let recs = s.packets.lock().unwrap().clone();
    let fwd: Vec<&PacketRecord> = recs.iter().filter(|r| r.verdict.name() == "forward").collect();
    assert_eq!(fwd.len(), 11);
    assert_eq!(fwd[10].sojourn, 10 * NS_PER_MS);
    assert_eq!(fwd[10].delay, 16 * NS_PER_MS);
    assert_eq!(recs.iter().filter(|r| r.verdict.name() == "drop_queue").count(), 9);
}

#[test]
fn interval_rows_and_summary() {
    let mut s = Sim::new(&cfg(""));
    // 6 Mbit/s of 1000-byte packets from client 0 for 1 s (half the uplink rate).
    for i in 0..750u64 {
        s.inject(T0 + i * 1333 * NS_PER_US, 0, udp(SRV, C0, 1000));
    }
    s.run_until(T0 + NS_PER_S + 50 * NS_PER_MS);
    let inside = s.engine.finish(s.clock.now());
    assert_eq!(inside, [0, 0]);
    let rows = s.rows.lock().unwrap().clone();
    // 10 full intervals + one partial; per interval 2 directions x (all + 2 clients).
    assert_eq!(rows.len(), 11 * 6);
    let mid: Vec<&IntervalRow> = rows.iter().filter(|r| (r.t_s - 0.5).abs() < 1e-9).collect();
    let all_up = mid.iter().find(|r| r.dir == Dir::Up && r.client == -1).unwrap();
    assert!((all_up.rate_mbit - 6.0).abs() < 0.2, "{}", all_up.rate_mbit);
    assert_eq!(all_up.queue_pkts, Some(0));
    assert!(all_up.airtime_frac.is_none());
    let c1_up = mid.iter().find(|r| r.dir == Dir::Up && r.client == 1).unwrap();
    assert_eq!(c1_up.bytes_out, 0);
    let j = s.engine.stats.direction_json(Dir::Up, inside[0]);
    assert_eq!(j["packets_out"], 750);
    assert_eq!(j["bytes_out"], 750_000);
    assert_eq!(j["drops_total"], 0);
    assert!((j["rate_mbit"].as_f64().unwrap() - 6.0).abs() < 0.05);
    assert!((j["delay_us"]["p50"].as_f64().unwrap() - 5_666.7).abs() < 60.0);
    assert_eq!(j["clients"][0]["packets_out"], 750);
}

#[test]
fn oversize_frames_are_dropped_and_counted() {
    let mut s = Sim::new(&cfg(""));
    s.inject(T0, 0, udp(SRV, C0, 3000));
    let mut gso = Packet::from_frame(&udp(SRV, C0, 1400), 0);
    gso.buf[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4
    s.engine.ingress(0, gso, T0);
    s.run_until(T0 + NS_PER_S);
    assert!(s.sent.is_empty());
    assert_eq!(s.engine.stats.drops(Dir::Up, DropCause::Oversize), 2);
}

#[test]
fn wifi_then_link_in_both_directions() {
    let wifi = r#", "wifi": {"clients": [{"phy_rate_mbit": 100}, {"phy_rate_mbit": 10}]}"#;
    let mut s = Sim::new(&cfg(wifi));
    s.inject(T0, 0, build::arp(C0));
    s.inject(T0, 1, build::arp(C1));
    s.sent.clear();
    // Uplink: WiFi hop first (>= AIFS + airtime), then 1 ms at 12 Mbit/s + 5 ms.
    s.inject(T0 + NS_PER_MS, 0, udp(SRV, C0, 1500));
    s.run_until(T0 + NS_PER_S);
    let up = s.sent_to(2);
    assert_eq!(up.len(), 1);
    let air = 40 * NS_PER_US + 1544 * 8 * 10; // preamble + 1544 B at 100 Mbit/s
    let lo = T0 + NS_PER_MS + 43 * NS_PER_US + air + 6 * NS_PER_MS;
    assert!(up[0].due >= lo && up[0].due <= lo + 135 * NS_PER_US, "{}", up[0].due - lo);
    assert!(up[0].pkt.wifi_wait >= 43 * NS_PER_US + air);
    // Downlink burst to client 1 leaves the link spaced at 24 Mbit/s (0.5 ms),
    // faster than a 10 Mbit/s PHY sends single frames (~1.4 ms each): the AP
    // aggregates what queued while the medium was busy.
    for _ in 0..30 {
        s.inject(T0 + 2 * NS_PER_S, 2, udp(C1, SRV, 1500));
    }
    s.run_until(T0 + 3 * NS_PER_S);
    let down = s.sent_to(1);
    assert_eq!(down.len(), 30);
    let distinct: std::collections::BTreeSet<Nanos> = down.iter().map(|e| e.due).collect();
    assert!(distinct.len() < 30, "no aggregation: {}", distinct.len());
    let w = s.engine.wifi().unwrap().summary(s.clock.now());
    assert!(w["airtime_utilisation"].as_f64().unwrap() > 0.0);
    assert_eq!(w["clients"][1]["aggregates"]["uplink"], 0);
    // Interval rows carry airtime and WiFi queue lengths per client.
    let rows = s.rows.lock().unwrap().clone();
    assert!(rows.iter().any(|r| r.client == 1 && r.dir == Dir::Down && r.airtime_frac.unwrap_or(0.0) > 0.0));
    assert!(rows.iter().all(|r| r.client == -1 || r.queue_pkts.is_some()));
}

#[test]
fn same_seed_same_run() {
    let run = |seed: u64| {
        let json = cfg(r#", "wifi": {"clients": [{"phy_rate_mbit": 100}, {"phy_rate_mbit": 50}]}"#)
            .replace("\"seed\": 1", &format!("\"seed\": {seed}"))
            .replace(
                "\"delay_ms\": 5,",
                "\"delay_ms\": 5, \"loss\": {\"model\": \"gilbert\", \"p_gb\": 0.05, \"p_bg\": 0.3},",
            );
        let mut s = Sim::new(&json);
        s.inject(T0, 0, build::arp(C0));
        s.inject(T0, 1, build::arp(C1));
        for i in 0..2000u64 {
            let c = (i % 2) as usize;
            s.inject(T0 + i * 300 * NS_PER_US, c, udp(SRV, [C0, C1][c], 1200));
        }
        s.run_until(T0 + 2 * NS_PER_S);
        s.sent.iter().map(|e| (e.port, e.due)).collect::<Vec<_>>()
    };
    let a = run(5);
    assert_eq!(a, run(5));
    assert_ne!(a, run(6));
}

#[test]
fn finishing_on_a_boundary_adds_no_empty_interval() {
    let mut s = Sim::new(&cfg(""));
    s.inject(T0 + NS_PER_MS, 0, udp(SRV, C0, 500));
    s.run_until(T0 + 300 * NS_PER_MS);
    s.engine.finish(T0 + 300 * NS_PER_MS);
    let rows = s.rows.lock().unwrap().clone();
    assert_eq!(rows.len(), 3 * 6);
    assert!(rows.iter().all(|r| r.t_s > 0.0));
    // A partial interval at the end is reported with its own length.
    let mut s = Sim::new(&cfg(""));
    for i in 0..25u64 {
        s.inject(T0 + i * 10 * NS_PER_MS, 0, udp(SRV, C0, 1000));
    }
    s.run_until(T0 + 250 * NS_PER_MS);
    s.engine.finish(T0 + 250 * NS_PER_MS);
    let rows = s.rows.lock().unwrap().clone();
    let last = rows.iter().rfind(|r| r.dir == Dir::Up && r.client == -1).unwrap();
    assert!((last.t_s - 0.25).abs() < 1e-9);
    assert!((last.rate_mbit - 0.8).abs() < 0.2, "{}", last.rate_mbit); // 5 packets x 8 kbit in 50 ms
}

#[test]
fn dualpi2_uplink_per_class_statistics() {
    // Uplink: DualPI2 at 12 Mbit/s (one 1500-byte packet per ms).  Client 0
    // sends unresponsive Not-ECT UDP at 1.1x the rate (Classic queue), client
    // 1 a light (0.1x) ECT(1) stream (L queue): the C traffic must lose 18 %
    // (p_C = 0.18, p' = 0.43, below overload at p' = 0.5).  The PI holds the C queue near its
    // 15 ms target by dropping; the L packets pass with little queueing and
    // are CE-marked with p_CL = 2 p' (about 0.85).
    let up = r#""uplink": {"rate_mbit": 12.0, "delay_ms": 5, "qdisc": {"kind": "dualpi2"}}"#;
    let json = cfg("")
        .replace(r#""uplink": {"rate_mbit": 12.0, "delay_ms": 5, "qdisc": {"kind": "pfifo", "limit_pkts": 10}}"#, up);
    let mut s = Sim::new(&json.replace("\"per_packet\": true", "\"per_packet\": false"));
    let dur = 20 * NS_PER_S;
    let (mut tc, mut tl) = (T0, T0 + 3 * NS_PER_US);
    while tc.min(tl) < T0 + dur {
        if tc <= tl {
            s.inject(tc, 0, udp(SRV, C0, 1500));
            tc += 910 * NS_PER_US;
        } else {
            s.inject(tl, 1, build::ipv4_udp(SRV, C1, 1500, Ecn::Ect1));
            tl += 10 * NS_PER_MS + 333; // drifts across the 1-ms transmission grid
        }
    }
    s.run_until(T0 + dur + 100 * NS_PER_MS);
    let inside = s.engine.finish(s.clock.now());
    let j = s.engine.stats.direction_json(Dir::Up, inside[0]);
    let classic = &j["classes"]["classic"];
    let l4s = &j["classes"]["l4s"];
    let c_mean = classic["sojourn_us"]["mean"].as_f64().unwrap();
    assert!((c_mean - 15_000.0).abs() < 2_000.0, "classic sojourn {c_mean} us");
    assert!(classic["drops"]["aqm"].as_u64().unwrap() > 2_000, "{classic}");
    assert_eq!(classic["ecn_marks"], 0);
    // L waits for the packet on the wire (0-1 ms), sometimes for one C packet
    // more (WRR gives C 10 %), never behind the C queue.
    assert!(l4s["drops_total"].as_u64().unwrap() < 40, "overload drops in the start transient only: {l4s}");
    assert!(l4s["sojourn_us"]["mean"].as_f64().unwrap() < 800.0, "{l4s}");
    assert!(l4s["sojourn_us"]["p99"].as_f64().unwrap() < 2_100.0, "{l4s}");
    let (l_out, l_marks) = (l4s["packets_out"].as_u64().unwrap(), l4s["ecn_marks"].as_u64().unwrap());
    assert!(l_out > 1_900 && l_marks as f64 > 0.7 * l_out as f64, "{l4s}");
    // Classes add up to the direction's totals.
    let sum = classic["packets_out"].as_u64().unwrap() + l_out;
    assert_eq!(sum, j["packets_out"].as_u64().unwrap());
    // Both classes share the 12 Mbit/s; the L stream gets what it sends (1.2 Mbit/s).
    assert!((l4s["rate_mbit"].as_f64().unwrap() - 1.2).abs() < 0.05, "{l4s}");
    assert!((j["rate_mbit"].as_f64().unwrap() - 12.0).abs() < 0.1);
    // The frames that left carry CE with a valid IPv4 header checksum.
    let ce: Vec<&Emit> = s.sent_to(2).into_iter().filter(|e| e.pkt.ecn() == Ecn::Ce).collect();
    assert_eq!(ce.len() as u64, l_marks);
    assert!(ce.iter().all(|e| linkemu::packet::ipv4_checksum(&e.pkt.frame()[14..34]) == 0));
    // Interval rows (100 ms): per-class columns on the uplink only; queues and p' on -1 rows.
    let rows = s.rows.lock().unwrap().clone();
    let last_full = rows.iter().filter(|r| (r.t_s - 15.0).abs() < 1e-9).collect::<Vec<_>>();
    let all_up = last_full.iter().find(|r| r.dir == Dir::Up && r.client == -1).unwrap();
    let cls = all_up.classes.as_ref().unwrap();
    assert!((cls[0].sojourn_mean_us - 15_000.0).abs() < 3_000.0, "{cls:?}");
    assert!(cls[0].sojourn_p90_us >= cls[0].sojourn_mean_us && cls[0].sojourn_max_us >= cls[0].sojourn_p99_us);
    assert!(cls[0].queue_pkts.unwrap() > 5 && cls[1].queue_pkts.is_some());
    let p = all_up.p_prime.unwrap();
    assert!(p > 0.3 && p < 0.6, "p' {p}");
    let c1_up = last_full.iter().find(|r| r.dir == Dir::Up && r.client == 1).unwrap();
    assert!(c1_up.classes.as_ref().unwrap()[1].marks >= 5 && c1_up.classes.as_ref().unwrap()[1].queue_pkts.is_none());
    let all_down = last_full.iter().find(|r| r.dir == Dir::Down && r.client == -1).unwrap();
    assert!(all_down.classes.is_none() && all_down.p_prime.is_none());
    let j = s.engine.stats.direction_json(Dir::Down, inside[1]);
    assert!(j["classes"].is_null());
    let q = s.engine.link(Dir::Up).qdisc().stats_json().unwrap();
    assert_eq!(q["l4s_coupled_marks"].as_u64().unwrap() + q["l4s_native_marks"].as_u64().unwrap(), l_marks);
}

#[test]
fn client_delay_lengthens_only_that_clients_downlink() {
    // Client 1 (port 1) gets 35 ms more on the downlink; client 0 none; the uplink is untouched.
    let mut s = Sim::new(&cfg(r#", "client_delay_ms": [0, 35]"#));
    s.inject(T0, 0, build::arp(C0));
    s.inject(T0, 1, build::arp(C1));
    s.sent.clear();
    // Server -> each client, two frames each, 1 ms apart: 3 ms link delay + 0.5 ms at 24 Mbit/s.
    for (t_ms, dst) in [(10, C0), (11, C0), (20, C1), (21, C1)] {
        s.inject(T0 + t_ms * NS_PER_MS, 2, udp(dst, SRV, 1500));
    }
    s.run_until(T0 + NS_PER_S);
    let due0: Vec<Nanos> = s.sent_to(0).iter().map(|e| e.due).collect();
    let due1: Vec<Nanos> = s.sent_to(1).iter().map(|e| e.due).collect();
    let base = |t_ms: u64| T0 + t_ms * NS_PER_MS + 500 * NS_PER_US + 3 * NS_PER_MS;
    assert_eq!(due0, vec![base(10), base(11)]);
    assert_eq!(due1, vec![base(20) + 35 * NS_PER_MS, base(21) + 35 * NS_PER_MS]);
    // The uplink of the delayed client is not delayed: 1 ms at 12 Mbit/s + 5 ms.
    s.sent.clear();
    s.inject(T0 + 2 * NS_PER_S, 1, udp(SRV, C1, 1500));
    s.run_until(T0 + 3 * NS_PER_S);
    assert_eq!(s.sent_to(2)[0].due, T0 + 2 * NS_PER_S + 6 * NS_PER_MS);
    // Frames still in a client's delay line at the end count as in flight (downlink).
    s.inject(T0 + 4 * NS_PER_S, 2, udp(C1, SRV, 1500));
    let inside = s.engine.finish(T0 + 4 * NS_PER_S + 10 * NS_PER_MS);
    assert_eq!(inside, [0, 1]);
}

#[test]
fn client_delay_needs_one_value_per_client() {
    let short = Config::from_json(&cfg(r#", "client_delay_ms": [5]"#)).unwrap();
    assert_eq!(short.validate().unwrap_err().field, "client_delay_ms");
    let negative = Config::from_json(&cfg(r#", "client_delay_ms": [0, -1]"#)).unwrap();
    assert_eq!(negative.validate().unwrap_err().field, "client_delay_ms[1]");
}

#[test]
fn fq_codel_uplink_isolates_clients_and_reports_flows() {
    // Uplink: fq_codel at 12 Mbit/s.  Client 0 floods at 2x the rate from
    // port 1; client 1 sends 1 Mbit/s from port 2.  Client 1 loses nothing and
    // queues for the packet on the wire (1 ms; 2 ms at the start, when both
    // flows are new and the flood still has deficit left); summary.json's
    // qdisc_stats lists both flows with their verdicts.
    let up = r#""uplink": {"rate_mbit": 12.0, "delay_ms": 5, "qdisc": {"kind": "fq_codel"}}"#;
    let json = cfg("")
        .replace(r#""uplink": {"rate_mbit": 12.0, "delay_ms": 5, "qdisc": {"kind": "pfifo", "limit_pkts": 10}}"#, up);
    let mut s = Sim::new(&json.replace("\"per_packet\": true", "\"per_packet\": false"));
    let dur = 5 * NS_PER_S;
    let (mut th, mut tl) = (T0, T0 + 7 * NS_PER_US);
    while th.min(tl) < T0 + dur {
        if th <= tl {
            s.inject(th, 0, build::ipv4_udp_ports(SRV, C0, 1500, Ecn::NotEct, 1, 5201));
            th += 500 * NS_PER_US;
        } else {
            s.inject(tl, 1, build::ipv4_udp_ports(SRV, C1, 1500, Ecn::NotEct, 2, 5201));
            tl += 12 * NS_PER_MS;
        }
    }
    s.run_until(T0 + dur + 100 * NS_PER_MS);
    let inside = s.engine.finish(s.clock.now());
    let j = s.engine.stats.direction_json(Dir::Up, inside[0]);
    let (c0, c1) = (&j["clients"][0], &j["clients"][1]);
    assert_eq!(c1["drops_total"], 0, "{c1}");
    assert!(c1["sojourn_us"]["p99"].as_f64().unwrap() <= 1_000.0, "{c1}");
    assert!(c1["sojourn_us"]["max"].as_f64().unwrap() <= 2_000.0, "{c1}");
    // The flood builds a queue of its own (below the 10240-packet limit in
    // 5 s) and CoDel drops from it.
    assert!(c0["drops"]["aqm"].as_u64().unwrap() > 500, "{c0}");
    let q = s.engine.link(Dir::Up).qdisc().stats_json().unwrap();
    assert_eq!(
        (q["kind"].as_str(), q["flows_seen"].as_u64(), q["shared_queues"].as_u64()),
        (Some("fq_codel"), Some(2), Some(0))
    );
    let flows = q["top_flows"].as_array().unwrap();
    assert_eq!((flows[0]["sport"].as_u64(), flows[1]["sport"].as_u64()), (Some(1), Some(2)));
    assert_eq!(flows[1]["drops"], serde_json::json!({"overflow": 0, "flow_limit": 0, "aqm": 0}));
    let dropped = q["drops"]["overflow"].as_u64().unwrap() + q["drops"]["aqm"].as_u64().unwrap();
    assert_eq!(dropped, c0["drops_total"].as_u64().unwrap());
    assert_eq!(s.engine.link(Dir::Up).qdisc_kind(), "fq_codel");
}

#[test]
fn pie_uplink_reports_its_probability() {
    // Uplink: PIE at 12 Mbit/s (one 1500-byte packet per ms), client 0 sends
    // unresponsive UDP at 1.2x: PIE drops 1/6 and holds the queue near 15 ms;
    // intervals.csv's p_prime carries PIE's p, summary.json its counters, the
    // control socket's state its p and queue delay.
    let up = r#""uplink": {"rate_mbit": 12.0, "delay_ms": 5, "qdisc": {"kind": "pie"}}"#;
    let json = cfg("")
        .replace(r#""uplink": {"rate_mbit": 12.0, "delay_ms": 5, "qdisc": {"kind": "pfifo", "limit_pkts": 10}}"#, up);
    let mut s = Sim::new(&json.replace("\"per_packet\": true", "\"per_packet\": false"));
    let dur = 20 * NS_PER_S;
    let mut t = T0;
    while t < T0 + dur {
        s.inject(t, 0, udp(SRV, C0, 1500));
        t += 833_333;
    }
    s.run_until(T0 + dur + 100 * NS_PER_MS);
    let q = s.engine.link(Dir::Up).qdisc().stats_json().unwrap();
    let state = s.engine.link(Dir::Up).qdisc().control_state(s.clock.now(), 16);
    let inside = s.engine.finish(s.clock.now());
    let j = s.engine.stats.direction_json(Dir::Up, inside[0]);
    assert_eq!(q["kind"], "pie");
    assert_eq!(q["aqm_drops"].as_u64(), j["drops"]["aqm"].as_u64());
    assert!(q["prob_mean"].as_f64().unwrap() > 0.1, "{q}");
    let rows = s.rows.lock().unwrap().clone();
    // Once p has climbed (it starts at 0 with tiny auto-tuned gains): the
    // 100-ms rows of the last 10 s average 15 ms (+-1 ms, see pie_tests.rs).
    let late: Vec<f64> = rows
        .iter()
        .filter(|r| r.dir == Dir::Up && r.client == -1 && r.t_s > 10.0 && r.t_s <= 20.0)
        .map(|r| r.sojourn_mean_us)
        .collect();
    let mean = late.iter().sum::<f64>() / late.len() as f64;
    assert!(late.len() == 100 && (mean - 15_000.0).abs() < 1_000.0, "sojourn {mean} us");
    let at15 = |d: Dir| rows.iter().find(|r| (r.t_s - 15.0).abs() < 1e-9 && r.dir == d && r.client == -1).unwrap();
    let p = at15(Dir::Up).p_prime.unwrap();
    assert!(p > 0.2 && p < 0.4, "p {p}");
    assert!(at15(Dir::Up).classes.is_none() && at15(Dir::Down).p_prime.is_none());
    assert_eq!((state.kind, state.params[0].0), ("pie", "prob"));
    assert!(state.params.iter().any(|(n, _)| *n == "qdelay_ms"));
}

#[test]
fn vdq_csaqm_uplink_per_class_and_per_flow_statistics() {
    // Uplink: VDQ-CSAQM at the link's 12 Mbit/s (its C comes from the link).
    // Client 0 sends 6 Mbit/s of Not-ECT UDP (Classic queue), client 1 a
    // 1.2 Mbit/s ECT(1) stream (L4S queue), port 2, made Silver by a rule:
    // no congestion (7.2 < C_v1 = 11.8 Mbit/s), so nothing is dropped or
    // marked, the CTVs stay 0, and the statistics are split per class and flow.
    let up = r#""uplink": {"rate_mbit": 12.0, "delay_ms": 5,
        "qdisc": {"kind": "vdq_csaqm", "policies": [{"policy": "silver", "sport": 2}]}}"#;
    let json = cfg("")
        .replace(r#""uplink": {"rate_mbit": 12.0, "delay_ms": 5, "qdisc": {"kind": "pfifo", "limit_pkts": 10}}"#, up);
    let mut s = Sim::new(&json.replace("\"per_packet\": true", "\"per_packet\": false"));
    let dur = 5 * NS_PER_S;
    let (mut tc, mut tl) = (T0, T0 + 3 * NS_PER_US);
    while tc.min(tl) < T0 + dur {
        if tc <= tl {
            s.inject(tc, 0, build::ipv4_udp_ports(SRV, C0, 1500, Ecn::NotEct, 1, 5201));
            tc += 2 * NS_PER_MS;
        } else {
            s.inject(tl, 1, build::ipv4_udp_ports(SRV, C1, 1500, Ecn::Ect1, 2, 5201));
            tl += 10 * NS_PER_MS + 333;
        }
    }
    s.run_until(T0 + dur + 100 * NS_PER_MS);
    let q = s.engine.link(Dir::Up).qdisc().stats_json().unwrap();
    let inside = s.engine.finish(s.clock.now());
    let j = s.engine.stats.direction_json(Dir::Up, inside[0]);
    let (classic, l4s) = (&j["classes"]["classic"], &j["classes"]["l4s"]);
    assert_eq!((classic["packets_out"].as_u64(), l4s["packets_out"].as_u64()), (Some(2500), Some(500)));
    assert_eq!((j["drops_total"].as_u64(), j["ecn_marks"].as_u64()), (Some(0), Some(0)));
    assert!(l4s["sojourn_us"]["mean"].as_f64().unwrap() < 1_000.0, "{l4s}");
    assert_eq!((q["kind"].as_str(), q["rate_mbit"].as_f64()), (Some("vdq_csaqm"), Some(12.0)));
    assert_eq!(
        (q["classes"]["classic"]["ctv_max"].as_u64(), q["classes"]["l4s"]["ctv_max"].as_u64()),
        (Some(0), Some(0))
    );
    let flows = q["top_flows"].as_array().unwrap();
    let pol: Vec<_> = flows
        .iter()
        .map(|f| (f["sport"].as_u64().unwrap(), f["policy"].as_str().unwrap(), f["queue"].as_u64().unwrap()))
        .collect();
    assert_eq!(pol, vec![(1, "gold", 1), (2, "silver", 0)]);
}
