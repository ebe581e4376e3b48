//! The emulator core: an L2 bridge whose IP traffic crosses the emulated links.
//!
//! Ports: 0..N-1 are the clients (in `client_ifs` order), N is the server.
//!
//! ```text
//!  client i --(wifi: station i queue, medium)--> uplink link ----------------------> server
//!  client i <--(client delay i)--(wifi: AP queue i, medium)-- downlink link <------ server
//! ```
//!
//! The per-client delay (`client_delay_ms`, default 0) is a FIFO delay line per
//! client after everything else on the downlink: it lengthens that client's
//! RTT (its flows' ACKs arrive later) without touching the shared bottleneck.
//!
//! Bridging rules (a learning switch with one special port):
//! * a client's source MAC is learned on its port; it identifies the client of
//!   server -> client frames;
//! * client -> server: every unicast IP frame not addressed to another client
//!   takes the uplink (WiFi hop, then the uplink link);
//! * server -> client: a unicast IP frame for a learned client MAC takes the
//!   downlink (link, then the WiFi hop to that client);
//! * everything else is forwarded at once, without impairment ("passthrough"):
//!   ARP and other non-IP frames, broadcast/multicast (flooded to every other
//!   port), frames for an unknown MAC (flooded to the clients), and frames
//!   between two clients;
//! * a frame longer than MTU + Ethernet header (+ up to two VLAN tags), or
//!   flagged as a GSO super-packet, is dropped and counted as "oversize": the
//!   endpoints must have TSO/GSO/GRO off for the links to see real packets.
//!
//! The engine is a discrete-event simulation in nanoseconds: [`Engine::ingress`]
//! and [`Engine::advance_to`] take the current instant, [`Engine::next_event`]
//! says when something happens next, and every frame to send is emitted with
//! the ideal instant it is due ([`Emit::due`]).  Arrivals must come in time
//! order, after `advance_to` has processed everything before them; the
//! real-time loop (runtime.rs) and the tests (virtual time) both do that.

use std::collections::{HashMap, VecDeque};

use crate::config::Config;
use crate::link::{Link, Out};
use crate::packet::{is_multicast, Dir, Mac, Packet, ETH_HLEN};
use crate::qdisc::DropCause;
use crate::stats::{Sink, Snapshot, Stats};
use crate::time::Nanos;
use crate::wifi::Wifi;

/// A frame to send.
#[derive(Debug)]
pub struct Emit {
    pub port: usize,
    pub pkt: Packet,
    /// When it should leave (ideal instant).
    pub due: Nanos,
    /// Direction it crossed (None for passthrough).
    pub dir: Option<Dir>,
}

pub struct Engine {
    n: usize,
    max_frame: usize,
    macs: HashMap<Mac, u16>,
    links: [Link; 2],
    wifi: Option<Wifi>,
    pub stats: Stats,
    now: Nanos,
    origin: Nanos,
    emit: Vec<Emit>,
    lout: Vec<Out>,
    wout: Vec<(Dir, Out)>,
    /// Extra downlink delay per client (empty: none).
    client_delay: Vec<Nanos>,
    /// Per client: downlink frames in its delay line, (due, frame), FIFO.
    client_lines: Vec<VecDeque<(Nanos, Packet)>>,
}

/// Derive independent seeds for the random streams of each component.
pub fn substream(seed: u64, k: u64) -> u64 {
    // splitmix64 of (seed, k).
    let mut z = seed.wrapping_add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Engine {
    /// Build from a validated config; `origin` is the start instant.
    pub fn new(cfg: &Config, origin: Nanos, sink: Box<dyn Sink>) -> Result<Engine, crate::config::ConfigError> {
        let n = cfg.client_ifs.len();
        let up = Link::new(&cfg.uplink, cfg.uplink.rate_spec("uplink")?, substream(cfg.seed, 1), origin);
        let down = Link::new(&cfg.downlink, cfg.downlink.rate_spec("downlink")?, substream(cfg.seed, 2), origin);
        let wifi = cfg.wifi.as_ref().map(|w| Wifi::new(w, substream(cfg.seed, 3), origin));
        let (interval, per_packet) = match &cfg.stats {
            Some(s) => ((s.interval_ms * 1e6).round().max(1.0) as Nanos, s.per_packet),
            None => (1_000_000_000, false),
        };
        let mut stats = Stats::new(origin, n, interval, per_packet, wifi.is_some(), sink);
        stats.set_dual_queue(Dir::Up, up.qdisc().class_lens().is_some());
        stats.set_dual_queue(Dir::Down, down.qdisc().class_lens().is_some());
        Ok(Engine {
            n,
            max_frame: cfg.mtu + ETH_HLEN + 8,
            macs: HashMap::new(),
            links: [up, down],
            wifi,
            stats,
            now: origin,
            origin,
            emit: Vec::new(),
            lout: Vec::new(),
            wout: Vec::new(),
            client_delay: cfg.client_delay_ms.iter().map(|&d| (d * 1e6).round() as Nanos).collect(),
            client_lines: (0..n).map(|_| VecDeque::new()).collect(),
        })
    }

    pub fn n_clients(&self) -> usize {
        self.n
    }

    pub fn server_port(&self) -> usize {
        self.n
    }

    pub fn now(&self) -> Nanos {
        self.now
    }

    pub fn link(&self, dir: Dir) -> &Link {
        &self.links[dir.index()]
    }

    /// One direction's link, to change its qdisc's parameters (control socket).
    pub fn link_mut(&mut self, dir: Dir) -> &mut Link {
        &mut self.links[dir.index()]
    }

    pub fn wifi(&self) -> Option<&Wifi> {
        self.wifi.as_ref()
    }

    /// Frames ready to be sent (drain after every call).
    pub fn take_emits(&mut self) -> std::vec::Drain<'_, Emit> {
        self.emit.drain(..)
    }

    pub fn pending_emits(&self) -> usize {
        self.emit.len()
    }

    /// When the engine next has something to do (including closing a stats interval).
    pub fn next_event(&self) -> Nanos {
        let mut t = self.stats.next_close();
        for l in &self.links {
            if let Some(e) = l.next_event() {
                t = t.min(e);
            }
        }
        if let Some(w) = &self.wifi {
            if let Some(e) = w.next_event() {
                t = t.min(e);
            }
        }
        for line in &self.client_lines {
            if let Some(&(due, _)) = line.front() {
                t = t.min(due);
            }
        }
        t
    }

    /// Process every event up to and including `t`.
    pub fn advance_to(&mut self, t: Nanos) {
        loop {
            let e = self.next_event();
            if e > t {
                break;
            }
            let e = e.max(self.now);
            self.now = e;
            if let Some(w) = &mut self.wifi {
                w.process(e, &mut self.wout);
            }
            self.route_wifi();
            for d in Dir::BOTH {
                self.links[d.index()].process(e, &mut self.lout);
                self.route_link(d);
            }
            self.release_client_lines(e);
            if self.stats.next_close() <= e {
                let snap = self.snapshot();
                self.stats.close_interval(self.stats.next_close(), &snap);
            }
        }
        self.now = self.now.max(t);
    }

    fn snapshot(&self) -> Snapshot {
        let lens = |l: &Link| l.qdisc().class_lens().map(|c| [c[0] as u64, c[1] as u64]);
        let mut s = Snapshot {
            link_queue: [self.links[0].queue_len() as u64, self.links[1].queue_len() as u64],
            class_queue: [lens(&self.links[0]), lens(&self.links[1])],
            p_prime: [self.links[0].qdisc().base_prob(), self.links[1].qdisc().base_prob()],
            ..Default::default()
        };
        if let Some(w) = &self.wifi {
            for d in Dir::BOTH {
                s.wifi_queue[d.index()] = w.queue_lens(d);
                s.wifi_airtime[d.index()] = w.airtime(d);
            }
        }
        s
    }

    fn passthrough(&mut self, port: usize, pkt: Packet, t: Nanos) {
        self.stats.on_passthrough(pkt.frame_len());
        self.emit.push(Emit { port, pkt, due: t, dir: None });
    }

    fn flood(&mut self, from: usize, pkt: Packet, t: Nanos, clients_only: bool) {
        let ports: Vec<usize> = (0..=self.n).filter(|&p| p != from && !(clients_only && p == self.n)).collect();
        if let Some((&last, rest)) = ports.split_last() {
            for &p in rest {
                self.passthrough(p, pkt.clone(), t);
            }
            self.passthrough(last, pkt, t);
        }
    }

    /// A frame arrived on `port` at `t` (t >= every instant seen so far; earlier
    /// instants are clamped).
    pub fn ingress(&mut self, port: usize, mut pkt: Packet, t: Nanos) {
        let t = t.max(self.now);
        self.advance_to(t);
        pkt.arrival = t;
        pkt.enqueued = t;
        let from_client = port < self.n;
        let dst = pkt.dst_mac();
        if from_client {
            let src = pkt.src_mac();
            if !is_multicast(&src) {
                self.macs.insert(src, port as u16);
            }
        }
        if pkt.is_gso() || pkt.frame_len() > self.max_frame {
            let (dir, client) =
                if from_client { (Dir::Up, Some(port as u16)) } else { (Dir::Down, self.macs.get(&dst).copied()) };
            self.stats.on_oversize(dir, client, pkt.frame_len(), t);
            return;
        }
        if is_multicast(&dst) {
            self.flood(port, pkt, t, false);
            return;
        }
        if from_client {
            match self.macs.get(&dst) {
                Some(&c) => {
                    // Client to client (or a frame back to its own port): bridge it.
                    if c as usize != port {
                        self.passthrough(c as usize, pkt, t);
                    }
                }
                None if pkt.is_ip() => {
                    pkt.client = port as u16;
                    self.stats.on_in(Dir::Up, pkt.client, pkt.ip_len());
                    match &mut self.wifi {
                        Some(w) => {
                            w.enqueue_up(port, pkt, t, &mut self.wout);
                            self.route_wifi();
                        }
                        None => {
                            self.links[0].enqueue(pkt, t, &mut self.lout);
                            self.route_link(Dir::Up);
                        }
                    }
                }
                None => self.passthrough(self.n, pkt, t),
            }
        } else {
            match self.macs.get(&dst) {
                Some(&c) if pkt.is_ip() => {
                    pkt.client = c;
                    self.stats.on_in(Dir::Down, c, pkt.ip_len());
                    self.links[1].enqueue(pkt, t, &mut self.lout);
                    self.route_link(Dir::Down);
                }
                Some(&c) => self.passthrough(c as usize, pkt, t),
                None => self.flood(port, pkt, t, true),
            }
        }
    }

    /// Route what the links produced (may cascade into the WiFi hop).
    fn route_link(&mut self, dir: Dir) {
        while !self.lout.is_empty() {
            let outs: Vec<Out> = self.lout.drain(..).collect();
            for o in outs {
                match o {
                    Out::Drop { pkt, cause, t } => self.stats.on_drop(dir, &pkt, cause, t),
                    Out::Depart { pkt, t } => match dir {
                        Dir::Up => {
                            self.stats.on_out(Dir::Up, &pkt, t);
                            self.emit.push(Emit { port: self.n, pkt, due: t, dir: Some(Dir::Up) });
                        }
                        Dir::Down => match &mut self.wifi {
                            Some(w) => {
                                let c = pkt.client as usize;
                                w.enqueue_down(c, pkt, t, &mut self.wout);
                                self.route_wifi();
                            }
                            None => self.deliver_down(pkt, t),
                        },
                    },
                }
            }
        }
    }

    /// Route what the WiFi medium produced (uplink frames continue into the uplink link).
    fn route_wifi(&mut self) {
        while !self.wout.is_empty() {
            let outs: Vec<(Dir, Out)> = self.wout.drain(..).collect();
            for (dir, o) in outs {
                match o {
                    Out::Drop { pkt, cause, t } => self.stats.on_drop(dir, &pkt, cause, t),
                    Out::Depart { pkt, t } => match dir {
                        Dir::Up => {
                            self.links[0].enqueue(pkt, t, &mut self.lout);
                            self.route_link(Dir::Up);
                        }
                        Dir::Down => self.deliver_down(pkt, t),
                    },
                }
            }
        }
    }

    /// A downlink frame has crossed the link (and WiFi hop) at `t`: send it,
    /// or put it in its client's delay line.
    fn deliver_down(&mut self, pkt: Packet, t: Nanos) {
        let c = pkt.client as usize;
        match self.client_delay.get(c) {
            Some(&d) if d > 0 => self.client_lines[c].push_back((t + d, pkt)),
            _ => {
                self.stats.on_out(Dir::Down, &pkt, t);
                self.emit.push(Emit { port: c, pkt, due: t, dir: Some(Dir::Down) });
            }
        }
    }

    /// Send the frames whose per-client delay has passed by `now`.
    fn release_client_lines(&mut self, now: Nanos) {
        for c in 0..self.client_lines.len() {
            while self.client_lines[c].front().is_some_and(|&(due, _)| due <= now) {
                let (due, pkt) = self.client_lines[c].pop_front().expect("front checked");
                self.stats.on_out(Dir::Down, &pkt, due);
                self.emit.push(Emit { port: c, pkt, due, dir: Some(Dir::Down) });
            }
        }
    }

    /// The runtime could not send a frame the engine emitted.
    pub fn tx_failed(&mut self, e: &Emit, t: Nanos) {
        if let Some(dir) = e.dir {
            self.stats.on_drop(dir, &e.pkt, DropCause::TxError, t);
        }
    }

    /// End of the run at `t`: process what is due, close the last (partial)
    /// interval, and count what is still inside per direction.
    pub fn finish(&mut self, t: Nanos) -> [usize; 2] {
        self.advance_to(t);
        let snap = self.snapshot();
        if t > self.stats.last_close() {
            self.stats.close_interval(t, &snap);
        }
        let mut inside = [self.links[0].drain().len(), self.links[1].drain().len()];
        if let Some(w) = &mut self.wifi {
            for (d, _) in w.drain() {
                inside[d.index()] += 1;
            }
        }
        for line in &mut self.client_lines {
            inside[Dir::Down.index()] += line.len();
            line.clear();
        }
        inside
    }

    /// Elapsed run time at `t`, seconds.
    pub fn elapsed_s(&self, t: Nanos) -> f64 {
        t.saturating_sub(self.origin) as f64 / 1e9
    }
}
