//! WiFi: one shared half-duplex medium between the clients and the AP.
//!
//! Why: on WiFi, delay varies for reasons that have nothing to do with
//! congestion.  A station must win the channel before it sends, and it sends
//! an aggregate of many frames at once, so packets arrive in bursts separated
//! by gaps, and ACKs are compressed.  Arun et al. (SIGCOMM 2022, "Starvation
//! in end-to-end congestion control") show that such non-congestive delay
//! variation can starve delay-based algorithms (BBR, Copa, Vegas, PCC Vivace's
//! latency term); paper 002 (section 3) builds on that.  This model produces
//! exactly those effects, from 802.11's own rules rather than from a jitter
//! distribution.
//!
//! The model (figures: IEEE Std 802.11-2020; defaults are 5 GHz OFDM, AC_BE):
//!
//! * Contenders: every client station (its uplink queue) and the AP (one
//!   contender holding one downlink queue per client, served round robin, as
//!   mac80211's per-station TXQs are).  All of them, in both directions,
//!   share one medium: at most one transmission at a time.
//! * Channel access (EDCA, 10.23.2): a contender with frames waits until the
//!   medium has been idle for AIFS = SIFS + AIFSN x aSlotTime (AC_BE: 16 +
//!   3 x 9 = 43 us), then counts down a backoff of uniform [0, CW] slots of
//!   9 us (aSlotTime, Table 17-21), CW starting at CWmin = 15.  The counter
//!   freezes while another station transmits and resumes afterwards.  After a
//!   successful exchange the winner draws a new backoff (post-backoff) with
//!   CW = CWmin.
//! * Collisions: contenders whose countdowns end less than one slot apart
//!   cannot hear each other and transmit together; the medium is busy for the
//!   longest of their PPDUs, nothing is delivered, each doubles CW (up to
//!   CWmax = 1023) and retries the same aggregate; after `retry_limit`
//!   (dot11ShortRetryLimit = 7) retries the aggregate is dropped.
//! * Extra access delay (optional distribution): a per-access deferral added
//!   to the countdown, standing for everything outside the emulated BSS that
//!   keeps the channel busy (neighbouring networks, interference, power-save
//!   wake-ups).  It freezes like the backoff.
//! * Aggregation (A-MPDU, 10.12): the winner sends up to `max_frames` MPDUs
//!   (Block Ack window: 64 for HT/VHT, 256 for HE), `max_bytes` (A-MPDU
//!   length limit: 65,535 B for HT, 1,048,575 B for VHT, 6,500,631 B for HE)
//!   and `max_ppdu_us` of airtime (aPPDUMaxTime 5.484 ms) from the head of its
//!   queue, in one PPDU.  AC_BE's default TXOP limit is 0 (one PPDU per
//!   access), which is what the model does.  With `max_wait_us` > 0 a
//!   station holds its first frame up to that long while the aggregate fills.
//! * Airtime of an exchange: PHY preamble (VHT: 20 us legacy + VHT-SIG/STF/LTF,
//!   ~40 us; HE SU ~48 us) + sum over MPDUs of (IP length + 42 B: QoS MAC
//!   header 26, LLC/SNAP 8, FCS 4, A-MPDU delimiter 4, padded to 4 B) x 8 /
//!   PHY rate, then SIFS (16 us) and a Block Ack (32 B at a 24 Mbit/s basic
//!   rate plus a 20 us preamble, ~32 us).  PHY rates are per client, e.g.
//!   802.11ac at 80 MHz: 433.3 Mbit/s for 1 SS MCS9, 866.7 for 2 SS;
//!   802.11ax at 80 MHz, 2 SS MCS11: 1201 Mbit/s; 802.11n at 20 MHz, 1 SS
//!   MCS7: 65 (72.2 with short GI) Mbit/s.
//! * Delivery: all MPDUs of an A-MPDU reach the receiver together at the end
//!   of the PPDU (the burst), the medium stays busy through SIFS + Block Ack.
//!
//! Not modelled: rate adaptation, per-MPDU errors (use the link's loss
//! models), RTS/CTS, TXOP bursting, OFDMA/MU-MIMO, beacons.  Frame
//! timestamps: `Packet::wifi_wait` is the time from entering the WiFi queue to
//! delivery (queueing + access + retries + airtime).

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};
use rand_pcg::Pcg64Mcg;

use crate::config::{Dist, WifiConfig};
use crate::histogram::Histogram;
use crate::link::Out;
use crate::packet::{Dir, Packet};
use crate::qdisc::{self, DropCause, Dropped, Qdisc};
use crate::time::Nanos;

/// A queue plus the one packet the driver may have pulled from it that did
/// not fit into the previous aggregate.
struct TxQueue {
    q: Box<dyn Qdisc>,
    stash: Option<Packet>,
}

impl TxQueue {
    fn is_empty(&self) -> bool {
        self.stash.is_none() && self.q.is_empty()
    }
    fn len(&self) -> usize {
        self.stash.is_some() as usize + self.q.len()
    }
    fn bytes(&self) -> usize {
        self.stash.as_ref().map_or(0, |p| p.ip_len()) + self.q.bytes()
    }
    fn head_enqueued(&self) -> Option<Nanos> {
        match &self.stash {
            Some(p) => Some(p.enqueued),
            None => self.q.head_enqueued(),
        }
    }
}

struct Aggregate {
    pkts: Vec<Packet>,
    frames: usize,
    client: usize,
    dir: Dir,
    /// PPDU duration (preamble + payload).
    ppdu: Nanos,
}

#[derive(Default)]
struct Contender {
    /// Remaining backoff slots; None: not contending.
    slots: Option<u32>,
    /// Remaining extra deferral.
    extra: Nanos,
    cw: u32,
    retries: u32,
    /// When this contender started (or resumed) waiting for the medium.
    ready_at: Nanos,
    /// When the current access attempt began (for the access-delay statistic).
    attempt_since: Nanos,
    /// Aggregate that collided and waits for its retransmission.
    retry: Option<Aggregate>,
}

struct Exchange {
    txs: Vec<(usize, Aggregate)>,
    collided: bool,
    /// End of the PPDU (successful exchange: delivery).
    deliver_at: Nanos,
    delivered: bool,
    /// End of the exchange (medium idle again).
    end: Nanos,
}

/// Per-client WiFi counters.
#[derive(Debug, Default, Clone)]
pub struct ClientAir {
    /// Medium time of this client's exchanges, per direction (ns).
    pub airtime: [Nanos; 2],
    pub aggregates: [u64; 2],
    pub frames: [u64; 2],
    pub collisions: [u64; 2],
}

pub struct Wifi {
    n: usize,
    phy_bps: [Vec<f64>; 2],
    up: Vec<TxQueue>,
    down: Vec<TxQueue>,
    cont: Vec<Contender>,
    ap_rr: usize,
    busy: Option<Exchange>,
    idle_since: Nanos,
    // Parameters, ns.
    slot: Nanos,
    aifs: Nanos,
    cw_min: u32,
    cw_max: u32,
    retry_limit: u32,
    collisions: bool,
    extra: Option<Dist>,
    preamble: Nanos,
    sifs_ba: Nanos,
    mpdu_overhead: usize,
    max_frames: usize,
    max_bytes: usize,
    max_wait: Nanos,
    max_ppdu: Nanos,
    rng: Pcg64Mcg,
    scratch: Vec<Dropped>,
    // Statistics.
    origin: Nanos,
    pub busy_ns: Nanos,
    pub clients: Vec<ClientAir>,
    pub access_delay: Histogram,
    pub aggregate_frames: Histogram,
    pub collision_events: u64,
}

fn us(x: f64) -> Nanos {
    (x * 1000.0).round() as Nanos
}

impl Wifi {
    pub fn new(cfg: &WifiConfig, seed: u64, origin: Nanos) -> Wifi {
        let n = cfg.clients.len();
        let down_bps: Vec<f64> = cfg.clients.iter().map(|c| c.phy_rate_mbit * 1e6).collect();
        let up_bps: Vec<f64> =
            cfg.clients.iter().map(|c| c.uplink_phy_rate_mbit.unwrap_or(c.phy_rate_mbit) * 1e6).collect();
        let mkq = || TxQueue { q: qdisc::build(&cfg.queue, seed), stash: None };
        let a = &cfg.access_delay_us;
        let cont = (0..=n).map(|_| Contender { cw: a.cw_min, ..Default::default() }).collect();
        Wifi {
            n,
            phy_bps: [up_bps, down_bps],
            up: (0..n).map(|_| mkq()).collect(),
            down: (0..n).map(|_| mkq()).collect(),
            cont,
            ap_rr: 0,
            busy: None,
            idle_since: origin,
            slot: us(a.slot_us),
            aifs: us(a.aifs_us),
            cw_min: a.cw_min,
            cw_max: a.cw_max,
            retry_limit: a.retry_limit,
            collisions: a.collisions,
            extra: a.extra.clone(),
            preamble: us(cfg.phy.preamble_us),
            sifs_ba: us(cfg.phy.sifs_us + cfg.phy.block_ack_us),
            mpdu_overhead: cfg.phy.mpdu_overhead_bytes,
            max_frames: cfg.aggregation.max_frames,
            max_bytes: cfg.aggregation.max_bytes,
            max_wait: us(cfg.aggregation.max_wait_us),
            max_ppdu: us(cfg.aggregation.max_ppdu_us),
            rng: Pcg64Mcg::seed_from_u64(seed),
            scratch: Vec::new(),
            origin,
            busy_ns: 0,
            clients: vec![ClientAir::default(); n],
            access_delay: Histogram::new(),
            aggregate_frames: Histogram::new(),
            collision_events: 0,
        }
    }

    fn ap(&self) -> usize {
        self.n
    }

    /// Packets queued for `client` in `dir` (station queue up, AP queue down).
    pub fn queue_len(&self, dir: Dir, client: usize) -> usize {
        let q = match dir {
            Dir::Up => &self.up[client],
            Dir::Down => &self.down[client],
        };
        q.len() + self.cont_for(dir, client).retry.as_ref().map_or(0, |a| a.pkts.len())
    }

    fn cont_for(&self, dir: Dir, client: usize) -> &Contender {
        match dir {
            Dir::Up => &self.cont[client],
            Dir::Down => &self.cont[self.ap()],
        }
    }

    /// Uplink: a client hands a frame to its WiFi interface.
    pub fn enqueue_up(&mut self, client: usize, pkt: Packet, now: Nanos, out: &mut Vec<(Dir, Out)>) {
        self.enqueue(Dir::Up, client, pkt, now, out);
    }

    /// Downlink: the AP has a frame for `client`.
    pub fn enqueue_down(&mut self, client: usize, pkt: Packet, now: Nanos, out: &mut Vec<(Dir, Out)>) {
        self.enqueue(Dir::Down, client, pkt, now, out);
    }

    fn enqueue(&mut self, dir: Dir, client: usize, mut pkt: Packet, now: Nanos, out: &mut Vec<(Dir, Out)>) {
        // wifi_wait temporarily holds the instant the packet entered the WiFi hop.
        pkt.wifi_wait = now;
        let saved_enqueued = pkt.enqueued;
        let q = match dir {
            Dir::Up => &mut self.up[client],
            Dir::Down => &mut self.down[client],
        };
        if let Err(d) = q.q.enqueue(pkt, now) {
            let Dropped { mut pkt, cause } = *d;
            pkt.wifi_wait = 0;
            pkt.enqueued = saved_enqueued;
            let cause = if cause == DropCause::Queue { DropCause::WifiQueue } else { cause };
            out.push((dir, Out::Drop { pkt, cause, t: now }));
            return;
        }
        self.process(now, out);
    }

    /// A queue is ready to contend: it has frames, and it either has a full
    /// aggregate or its oldest frame has waited `max_wait`.
    fn queue_ready_at(&self, q: &TxQueue) -> Option<Nanos> {
        if q.is_empty() {
            return None;
        }
        if self.max_wait == 0 || q.len() >= self.max_frames || q.bytes() >= self.max_bytes {
            return Some(0);
        }
        q.head_enqueued().map(|t| t + self.max_wait)
    }

    /// When contender `c` will have something to send (Some(0): now).
    fn ready_at(&self, c: usize) -> Option<Nanos> {
        if self.cont[c].retry.is_some() {
            return Some(0);
        }
        if c < self.n {
            self.queue_ready_at(&self.up[c])
        } else {
            self.down.iter().filter_map(|q| self.queue_ready_at(q)).min()
        }
    }

    fn draw_extra(&mut self) -> Nanos {
        let Some(d) = &self.extra else { return 0 };
        let v = match d {
            Dist::Constant(c) => c.us,
            Dist::Uniform(u) => {
                if u.max_us > u.min_us {
                    self.rng.random_range(u.min_us..u.max_us)
                } else {
                    u.min_us
                }
            }
            Dist::Exponential(e) => {
                if e.mean_us > 0.0 {
                    Exp::new(1.0 / e.mean_us).map(|x| x.sample(&mut self.rng)).unwrap_or(0.0)
                } else {
                    0.0
                }
            }
            Dist::Lognormal(l) => {
                LogNormal::new(l.median_us.ln(), l.sigma).map(|x| x.sample(&mut self.rng)).unwrap_or(l.median_us)
            }
        };
        us(v.max(0.0))
    }

    /// Start contention for every contender that has become ready by `now`.
    fn arm(&mut self, now: Nanos) {
        for c in 0..=self.n {
            if self.cont[c].slots.is_some() {
                continue;
            }
            if self.ready_at(c).is_some_and(|r| r <= now) {
                let cw = self.cont[c].cw;
                let slots = self.rng.random_range(0..=cw);
                let extra = self.draw_extra();
                let k = &mut self.cont[c];
                k.slots = Some(slots);
                k.extra = extra;
                k.ready_at = now;
                if k.retries == 0 {
                    k.attempt_since = now;
                }
            }
        }
    }

    /// When contender `c`'s countdown ends, if it is contending and the medium is idle.
    fn fire_time(&self, c: usize) -> Option<Nanos> {
        let k = &self.cont[c];
        let slots = k.slots?;
        let start = self.idle_since.max(k.ready_at);
        Some(start + self.aifs + k.extra + slots as Nanos * self.slot)
    }

    /// Instant of the next thing the medium has to do.
    pub fn next_event(&self) -> Option<Nanos> {
        if let Some(x) = &self.busy {
            return Some(if x.delivered || x.collided { x.end } else { x.deliver_at });
        }
        let mut next: Option<Nanos> = None;
        for c in 0..=self.n {
            let t = if self.cont[c].slots.is_some() {
                self.fire_time(c)
            } else {
                // Waiting for its aggregate to fill.
                self.ready_at(c).map(|t| t.max(self.idle_since))
            };
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }

    /// Do everything due at or before `now`.
    pub fn process(&mut self, now: Nanos, out: &mut Vec<(Dir, Out)>) {
        loop {
            if let Some(x) = &mut self.busy {
                if !x.delivered && !x.collided && x.deliver_at <= now {
                    x.delivered = true;
                    let t = x.deliver_at;
                    for (_, agg) in &mut x.txs {
                        for mut p in agg.pkts.drain(..) {
                            p.wifi_wait = t.saturating_sub(p.wifi_wait);
                            out.push((agg.dir, Out::Depart { pkt: p, t }));
                        }
                    }
                }
                let x = self.busy.as_ref().unwrap();
                if (x.delivered || x.collided) && x.end <= now {
                    self.finish_exchange(out);
                    continue;
                }
                return;
            }
            self.arm(now);
            // Earliest countdown end among contenders.
            let mut first: Option<(Nanos, usize)> = None;
            for c in 0..=self.n {
                if let Some(t) = self.fire_time(c) {
                    if first.is_none_or(|(ft, _)| t < ft) {
                        first = Some((t, c));
                    }
                }
            }
            let Some((t0, c0)) = first else { return };
            if t0 > now {
                return;
            }
            let winners: Vec<usize> = if self.collisions {
                (0..=self.n).filter(|&c| self.fire_time(c).is_some_and(|t| t < t0 + self.slot)).collect()
            } else {
                vec![c0]
            };
            self.start_exchange(t0, winners, out);
        }
    }

    fn start_exchange(&mut self, t0: Nanos, winners: Vec<usize>, out: &mut Vec<(Dir, Out)>) {
        // Everybody else freezes its countdown.
        for c in 0..=self.n {
            if winners.contains(&c) {
                continue;
            }
            let start = self.idle_since.max(self.cont[c].ready_at);
            let (aifs, slot) = (self.aifs, self.slot);
            let k = &mut self.cont[c];
            let Some(slots) = k.slots else { continue };
            if t0 > start + aifs {
                let mut e = t0 - start - aifs;
                if e < k.extra {
                    k.extra -= e;
                } else {
                    e -= k.extra;
                    k.extra = 0;
                    k.slots = Some(slots - ((e / slot) as u32).min(slots));
                }
            }
        }
        let mut txs = Vec::with_capacity(winners.len());
        for &c in &winners {
            self.cont[c].slots = None;
            let agg = match self.cont[c].retry.take() {
                Some(a) => a,
                None => match self.build_aggregate(c, t0, out) {
                    Some(a) => a,
                    None => continue, // an AQM dropped everything it held
                },
            };
            if self.cont[c].retries == 0 {
                self.access_delay.record(t0.saturating_sub(self.cont[c].attempt_since));
            }
            txs.push((c, agg));
        }
        if txs.is_empty() {
            return;
        }
        let collided = txs.len() > 1;
        let ppdu = txs.iter().map(|(_, a)| a.ppdu).max().unwrap();
        let end = t0 + ppdu + self.sifs_ba;
        let share = end - t0;
        self.busy_ns += share;
        for (_, a) in &txs {
            let ca = &mut self.clients[a.client];
            ca.airtime[a.dir.index()] += share / txs.len() as Nanos;
            if collided {
                ca.collisions[a.dir.index()] += 1;
            }
        }
        if collided {
            self.collision_events += 1;
        }
        self.busy = Some(Exchange { txs, collided, deliver_at: t0 + ppdu, delivered: false, end });
    }

    fn finish_exchange(&mut self, out: &mut Vec<(Dir, Out)>) {
        let x = self.busy.take().unwrap();
        self.idle_since = x.end;
        for (c, agg) in x.txs {
            let k = &mut self.cont[c];
            if x.collided {
                k.retries += 1;
                k.cw = (2 * k.cw + 1).min(self.cw_max);
                if k.retries > self.retry_limit {
                    k.retries = 0;
                    k.cw = self.cw_min;
                    for mut p in agg.pkts {
                        p.wifi_wait = x.end.saturating_sub(p.wifi_wait);
                        out.push((agg.dir, Out::Drop { pkt: p, cause: DropCause::WifiRetry, t: x.end }));
                    }
                } else {
                    k.retry = Some(agg);
                }
            } else {
                k.retries = 0;
                k.cw = self.cw_min;
                let ca = &mut self.clients[agg.client];
                ca.aggregates[agg.dir.index()] += 1;
                ca.frames[agg.dir.index()] += agg.frames as u64;
            }
        }
    }

    fn mpdu_bytes(&self, p: &Packet) -> usize {
        (p.ip_len() + self.mpdu_overhead + 3) & !3
    }

    fn ppdu_time(&self, bytes: usize, bps: f64) -> Nanos {
        self.preamble + (bytes as f64 * 8.0 / bps * 1e9).ceil() as Nanos
    }

    /// Pull frames for contender `c`'s next A-MPDU at `t`.
    fn build_aggregate(&mut self, c: usize, t: Nanos, out: &mut Vec<(Dir, Out)>) -> Option<Aggregate> {
        let (dir, client) = if c < self.n {
            (Dir::Up, c)
        } else {
            // Round robin over the clients with a ready downlink queue.
            let n = self.n;
            let pick = (0..n)
                .map(|i| (self.ap_rr + i) % n)
                .find(|&i| self.queue_ready_at(&self.down[i]).is_some_and(|r| r <= t))?;
            self.ap_rr = (pick + 1) % n;
            (Dir::Down, pick)
        };
        let bps = self.phy_bps[dir.index()][client];
        let mut pkts = Vec::new();
        let mut bytes = 0;
        loop {
            if pkts.len() >= self.max_frames {
                break;
            }
            let q = match dir {
                Dir::Up => &mut self.up[client],
                Dir::Down => &mut self.down[client],
            };
            let next = match q.stash.take() {
                Some(p) => Some(p),
                None => q.q.dequeue(t, &mut self.scratch),
            };
            for d in self.scratch.drain(..) {
                let mut pkt = d.pkt;
                pkt.wifi_wait = t.saturating_sub(pkt.wifi_wait);
                out.push((dir, Out::Drop { pkt, cause: d.cause, t }));
            }
            let Some(p) = next else { break };
            let b = self.mpdu_bytes(&p);
            if !pkts.is_empty() && (bytes + b > self.max_bytes || self.ppdu_time(bytes + b, bps) > self.max_ppdu) {
                let q = match dir {
                    Dir::Up => &mut self.up[client],
                    Dir::Down => &mut self.down[client],
                };
                q.stash = Some(p);
                break;
            }
            bytes += b;
            pkts.push(p);
        }
        if pkts.is_empty() {
            return None;
        }
        self.aggregate_frames.record(pkts.len() as Nanos * 1000);
        Some(Aggregate { ppdu: self.ppdu_time(bytes, bps), frames: pkts.len(), pkts, client, dir })
    }

    /// Share of time the medium was busy since the start.
    pub fn utilisation(&self, now: Nanos) -> f64 {
        let el = now.saturating_sub(self.origin);
        if el == 0 {
            0.0
        } else {
            self.busy_ns as f64 / el as f64
        }
    }

    /// Cumulative airtime per client for `dir` (interval statistics).
    pub fn airtime(&self, dir: Dir) -> Vec<Nanos> {
        self.clients.iter().map(|c| c.airtime[dir.index()]).collect()
    }

    pub fn queue_lens(&self, dir: Dir) -> Vec<u64> {
        (0..self.n).map(|c| self.queue_len(dir, c) as u64).collect()
    }

    /// Every packet still inside (shutdown accounting), with its direction.
    pub fn drain(&mut self) -> Vec<(Dir, Packet)> {
        let mut v = Vec::new();
        if let Some(x) = self.busy.take() {
            for (_, a) in x.txs {
                v.extend(a.pkts.into_iter().map(|p| (a.dir, p)));
            }
        }
        for k in &mut self.cont {
            if let Some(a) = k.retry.take() {
                v.extend(a.pkts.into_iter().map(|p| (a.dir, p)));
            }
        }
        let mut scratch = Vec::new();
        for (dir, qs) in [(Dir::Up, &mut self.up), (Dir::Down, &mut self.down)] {
            for q in qs.iter_mut() {
                if let Some(p) = q.stash.take() {
                    v.push((dir, p));
                }
                while let Some(p) = q.q.dequeue(Nanos::MAX / 2, &mut scratch) {
                    v.push((dir, p));
                }
            }
        }
        v
    }

    /// summary.json's "wifi" object.
    pub fn summary(&self, now: Nanos) -> serde_json::Value {
        let el = now.saturating_sub(self.origin).max(1) as f64;
        let clients: Vec<serde_json::Value> = self
            .clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mean =
                    |d: usize| if c.aggregates[d] > 0 { c.frames[d] as f64 / c.aggregates[d] as f64 } else { 0.0 };
                serde_json::json!({
                    "client": i,
                    "phy_rate_mbit": {"uplink": self.phy_bps[0][i] / 1e6, "downlink": self.phy_bps[1][i] / 1e6},
                    "airtime_frac": {"uplink": c.airtime[0] as f64 / el, "downlink": c.airtime[1] as f64 / el},
                    "aggregates": {"uplink": c.aggregates[0], "downlink": c.aggregates[1]},
                    "mean_aggregate_frames": {"uplink": mean(0), "downlink": mean(1)},
                    "collisions": {"uplink": c.collisions[0], "downlink": c.collisions[1]},
                })
            })
            .collect();
        serde_json::json!({
            "airtime_utilisation": self.utilisation(now),
            "busy_s": self.busy_ns as f64 / 1e9,
            "collisions": self.collision_events,
            "access_delay_us": self.access_delay.summary(),
            "aggregate_frames": {
                "mean": self.aggregate_frames.mean_us(),
                "p50": self.aggregate_frames.quantile_us(0.5),
                "max": self.aggregate_frames.max_us(),
            },
            "clients": clients,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AccessDelay, Aggregation, ConstantDist, Pfifo, PhyOverheads, QdiscConfig, WifiClient};
    use crate::packet::{build, Ecn};
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
}
