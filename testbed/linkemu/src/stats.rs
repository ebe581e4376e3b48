//! Statistics: what happened to every packet, per direction and per client.
//!
//! The engine reports three kinds of facts:
//! * a packet entered a direction ([`Stats::on_in`]);
//! * a packet left the emulator ([`Stats::on_out`]): its IP length, the time
//!   it spent in the bottleneck qdisc (sojourn), in the WiFi hop, and in the
//!   emulator overall (delay), and whether it was CE-marked;
//! * a packet was dropped ([`Stats::on_drop`]) with its cause.
//!
//! They feed run totals (summary.json), per-interval accumulators (one
//! intervals.csv row per direction for all clients, client = -1, and one per
//! client; closed by the engine at every interval boundary of virtual time) and,
//! when enabled, one packets.csv row per packet.  Rows go to a [`Sink`]: the
//! CSV writer thread in the real emulator ([`crate::output`]), a vector in tests.
//!
//! Bytes are IP bytes (from the IP header on), the unit the links charge.
//! Times in records are relative to the start of the run.

use serde_json::{json, Value};

use crate::histogram::{round1, FineHistogram, Histogram};
use crate::packet::{Dir, Packet, QClass};
use crate::qdisc::DropCause;
use crate::time::Nanos;

/// What finally happened to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Forward,
    /// Forwarded with CE set by an AQM.
    Mark,
    Drop(DropCause),
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Forward => "forward",
            Verdict::Mark => "mark",
            Verdict::Drop(DropCause::Queue) => "drop_queue",
            Verdict::Drop(DropCause::Aqm) => "drop_aqm",
            Verdict::Drop(DropCause::Loss) => "drop_loss",
            Verdict::Drop(DropCause::Oversize) => "drop_oversize",
            Verdict::Drop(DropCause::WifiQueue) => "drop_wifi_queue",
            Verdict::Drop(DropCause::WifiRetry) => "drop_wifi_retry",
            Verdict::Drop(DropCause::TxError) => "drop_tx_error",
        }
    }
}

/// One packets.csv row.
#[derive(Debug, Clone, Copy)]
pub struct PacketRecord {
    /// Time of the verdict (departure or drop), ns since the start.
    pub t: Nanos,
    pub dir: Dir,
    pub client: u16,
    /// IP length.
    pub len: u32,
    /// Bottleneck qdisc sojourn, ns.
    pub sojourn: Nanos,
    /// WiFi hop (queue + access + airtime), ns.
    pub wifi: Nanos,
    /// Arrival to verdict, ns.
    pub delay: Nanos,
    pub verdict: Verdict,
}

/// One intervals.csv row.
#[derive(Debug, Clone)]
pub struct IntervalRow {
    /// End of the interval, seconds since the start.
    pub t_s: f64,
    pub dir: Dir,
    /// Client index, or -1 for all clients of the direction.
    pub client: i32,
    /// IP bytes that entered the direction in the interval (offered load).
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub rate_mbit: f64,
    pub drops: u64,
    pub marks: u64,
    pub sojourn_mean_us: f64,
    pub sojourn_p99_us: f64,
    pub delay_mean_us: f64,
    pub delay_p99_us: f64,
    /// Packets queued at the end of the interval: the bottleneck qdisc for
    /// client = -1, the client's WiFi queue otherwise (None without WiFi).
    pub queue_pkts: Option<u64>,
    /// Share of the interval the medium carried this client's transmissions
    /// in this direction (None without WiFi; for -1 the sum over clients).
    pub airtime_frac: Option<f64>,
    /// Per class [Classic, L4S] when the direction's qdisc is dual-queue (DualPI2).
    pub classes: Option<[ClassRow; 2]>,
    /// The qdisc's base probability at the end of the interval (DualPI2's p',
    /// PIE's p; -1 rows only).
    pub p_prime: Option<f64>,
}

/// The per-class columns of an intervals.csv row.
#[derive(Debug, Clone, Default)]
pub struct ClassRow {
    pub bytes_out: u64,
    pub rate_mbit: f64,
    pub marks: u64,
    pub drops: u64,
    pub sojourn_mean_us: f64,
    pub sojourn_p90_us: f64,
    pub sojourn_p99_us: f64,
    pub sojourn_max_us: f64,
    /// Packets in the class's queue at the end of the interval (-1 rows only).
    pub queue_pkts: Option<u64>,
}

/// Names of the class prefixes in CSV columns and summary keys, in class-index order.
pub const CLASS_NAMES: [&str; 2] = ["classic", "l4s"];

fn class_index(c: QClass) -> Option<usize> {
    match c {
        QClass::None => None,
        QClass::Classic => Some(0),
        QClass::L4s => Some(1),
    }
}

/// The contract's columns first (t_s ... queue_pkts), then the additions.
/// The c_* and l_* columns are the DualPI2 classes (Classic and L4S queue), empty
/// for single-queue disciplines.
pub const INTERVAL_HEADER: &str = "t_s,direction,client,bytes_out,rate_mbit,drops,marks,sojourn_mean_us,\
sojourn_p99_us,queue_pkts,bytes_in,packets_out,delay_mean_us,delay_p99_us,airtime_frac,\
c_bytes_out,c_rate_mbit,c_marks,c_drops,c_sojourn_mean_us,c_sojourn_p90_us,c_sojourn_p99_us,c_sojourn_max_us,c_queue_pkts,\
l_bytes_out,l_rate_mbit,l_marks,l_drops,l_sojourn_mean_us,l_sojourn_p90_us,l_sojourn_p99_us,l_sojourn_max_us,l_queue_pkts,\
p_prime";
/// The contract's columns first (t_us ... verdict), then the additions.
pub const PACKET_HEADER: &str = "t_us,direction,client,len,sojourn_us,verdict,wifi_us,delay_us";

impl IntervalRow {
    pub fn csv(&self) -> String {
        let opt_u = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
        let opt_f = |v: Option<f64>| v.map(|x| format!("{x:.4}")).unwrap_or_default();
        let class = |c: Option<&ClassRow>| match c {
            Some(c) => format!(
                "{},{:.4},{},{},{:.1},{:.1},{:.1},{:.1},{}",
                c.bytes_out,
                c.rate_mbit,
                c.marks,
                c.drops,
                c.sojourn_mean_us,
                c.sojourn_p90_us,
                c.sojourn_p99_us,
                c.sojourn_max_us,
                opt_u(c.queue_pkts)
            ),
            None => ",,,,,,,,".to_string(),
        };
        format!(
            "{:.3},{},{},{},{:.4},{},{},{:.1},{:.1},{},{},{},{:.1},{:.1},{},{},{},{}",
            self.t_s,
            self.dir.name(),
            self.client,
            self.bytes_out,
            self.rate_mbit,
            self.drops,
            self.marks,
            self.sojourn_mean_us,
            self.sojourn_p99_us,
            opt_u(self.queue_pkts),
            self.bytes_in,
            self.packets_out,
            self.delay_mean_us,
            self.delay_p99_us,
            opt_f(self.airtime_frac),
            class(self.classes.as_ref().map(|c| &c[0])),
            class(self.classes.as_ref().map(|c| &c[1])),
            self.p_prime.map(|x| format!("{x:.6}")).unwrap_or_default(),
        )
    }
}

impl PacketRecord {
    pub fn csv(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "{:.1},{},{},{},{:.1},{},{:.1},{:.1}",
            self.t as f64 / 1000.0,
            self.dir.name(),
            if self.client == u16::MAX { -1 } else { self.client as i32 },
            self.len,
            self.sojourn as f64 / 1000.0,
            self.verdict.name(),
            self.wifi as f64 / 1000.0,
            self.delay as f64 / 1000.0,
        );
    }
}

/// Where rows go.
pub trait Sink: Send {
    fn packet(&mut self, rec: PacketRecord);
    fn intervals(&mut self, rows: Vec<IntervalRow>);
    /// Flush and close (called once, at the end).
    fn finish(&mut self) {}
}

/// Keeps everything in memory (tests).
#[derive(Default)]
pub struct MemorySink {
    pub packets: std::sync::Arc<std::sync::Mutex<Vec<PacketRecord>>>,
    pub rows: std::sync::Arc<std::sync::Mutex<Vec<IntervalRow>>>,
}

impl Sink for MemorySink {
    fn packet(&mut self, rec: PacketRecord) {
        self.packets.lock().unwrap().push(rec);
    }
    fn intervals(&mut self, rows: Vec<IntervalRow>) {
        self.rows.lock().unwrap().extend(rows);
    }
}

/// Drops everything (no stats.dir configured).
pub struct NullSink;

impl Sink for NullSink {
    fn packet(&mut self, _rec: PacketRecord) {}
    fn intervals(&mut self, _rows: Vec<IntervalRow>) {}
}

/// Departures counted into one set of counters (run totals or an interval):
/// packets, bytes (IP), CE marks, sojourn in the queue and delay from
/// arrival to departure.
#[derive(Debug, Default, Clone)]
struct Departures {
    packets: u64,
    bytes: u64,
    marks: u64,
    sojourn: Histogram,
    delay: Histogram,
}

impl Departures {
    fn record(&mut self, len: u64, pkt: &Packet, delay: Nanos) {
        self.packets += 1;
        self.bytes += len;
        self.marks += pkt.marked as u64;
        self.sojourn.record(pkt.sojourn);
        self.delay.record(delay);
    }

    fn clear(&mut self) {
        self.packets = 0;
        self.bytes = 0;
        self.marks = 0;
        self.sojourn.clear();
        self.delay.clear();
    }
}

#[derive(Debug, Default, Clone)]
struct Totals {
    packets_in: u64,
    bytes_in: u64,
    out: Departures,
    drops: [u64; DropCause::ALL.len()],
    wifi: Histogram,
    span: Span,
}

/// The span of a run's departures: the first one (instant, its bytes) and
/// the instant of the last one, over which its average rate is taken.
#[derive(Debug, Default, Clone, Copy)]
struct Span {
    first: Option<(Nanos, u64)>,
    last: Nanos,
}

impl Span {
    fn departure(&mut self, t: Nanos, len: u64) {
        if self.first.is_none() {
            self.first = Some((t, len));
        }
        self.last = t;
    }

    /// Average rate (Mbit/s) of `bytes` (all departures' bytes) over the span;
    /// the first packet's bytes belong before it.
    fn rate_mbit(&self, bytes: u64) -> f64 {
        match self.first {
            Some((t0, len0)) if self.last > t0 => (bytes - len0) as f64 * 8.0 / ((self.last - t0) as f64 / 1e9) / 1e6,
            _ => 0.0,
        }
    }
}

/// {"queue": n, "aqm": n, ...}: drops per cause.
fn drops_json(drops: &[u64; DropCause::ALL.len()]) -> Value {
    let mut m = serde_json::Map::new();
    for c in DropCause::ALL {
        m.insert(c.name().into(), json!(drops[c.index()]));
    }
    Value::Object(m)
}

impl Totals {
    fn rate_mbit(&self) -> f64 {
        self.span.rate_mbit(self.out.bytes)
    }

    fn json(&self, wifi: bool) -> Value {
        let drops = drops_json(&self.drops);
        let mut v = json!({
            "packets_in": self.packets_in,
            "bytes_in": self.bytes_in,
            "packets_out": self.out.packets,
            "bytes_out": self.out.bytes,
            "drops": drops,
            "drops_total": self.drops.iter().sum::<u64>(),
            "ecn_marks": self.out.marks,
            "sojourn_us": self.out.sojourn.summary(),
            "delay_us": self.out.delay.summary(),
            "rate_mbit": (self.rate_mbit() * 1e4).round() / 1e4,
        });
        if wifi {
            v["wifi_us"] = self.wifi.summary();
        }
        v
    }
}

/// Run totals of one DualPI2 class.
#[derive(Debug, Default, Clone)]
struct ClassTotals {
    packets_out: u64,
    bytes_out: u64,
    marks: u64,
    drops: [u64; DropCause::ALL.len()],
    sojourn: FineHistogram,
    span: Span,
}

impl ClassTotals {
    fn json(&self) -> Value {
        let drops = drops_json(&self.drops);
        let rate = self.span.rate_mbit(self.bytes_out);
        json!({
            "packets_out": self.packets_out,
            "bytes_out": self.bytes_out,
            "rate_mbit": (rate * 1e4).round() / 1e4,
            "ecn_marks": self.marks,
            "drops": drops,
            "drops_total": self.drops.iter().sum::<u64>(),
            "sojourn_us": self.sojourn.summary(),
        })
    }
}

/// Interval accumulator of one DualPI2 class.
#[derive(Default, Clone)]
struct ClassAcc {
    bytes_out: u64,
    marks: u64,
    drops: u64,
    sojourn: FineHistogram,
}

impl ClassAcc {
    fn reset(&mut self) {
        self.bytes_out = 0;
        self.marks = 0;
        self.drops = 0;
        self.sojourn.clear();
    }
}

#[derive(Default, Clone)]
struct Acc {
    bytes_in: u64,
    out: Departures,
    drops: u64,
    cls: [ClassAcc; 2],
}

impl Acc {
    fn reset(&mut self) {
        self.bytes_in = 0;
        self.out.clear();
        self.drops = 0;
        for c in &mut self.cls {
            c.reset();
        }
    }
}

struct DirStats {
    total: Totals,
    clients: Vec<Totals>,
    acc_all: Acc,
    acc: Vec<Acc>,
    /// The direction's qdisc is dual-queue: keep and report per-class statistics.
    dual: bool,
    classes: [ClassTotals; 2],
}

/// Queue and airtime state sampled at an interval boundary.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Bottleneck qdisc length per direction.
    pub link_queue: [u64; 2],
    /// Per direction, per client: WiFi queue length (empty without WiFi).
    pub wifi_queue: [Vec<u64>; 2],
    /// Per direction, per client: cumulative airtime, ns (empty without WiFi).
    pub wifi_airtime: [Vec<Nanos>; 2],
    /// Per direction: the dual-queue qdisc's [Classic, L4S] lengths (None: single queue).
    pub class_queue: [Option<[u64; 2]>; 2],
    /// Per direction: the qdisc's base probability (DualPI2's p', PIE's p), if any.
    pub p_prime: [Option<f64>; 2],
}

pub struct Stats {
    origin: Nanos,
    n: usize,
    interval: Nanos,
    next_close: Nanos,
    last_close: Nanos,
    per_packet: bool,
    wifi: bool,
    dirs: [DirStats; 2],
    prev_airtime: [Vec<Nanos>; 2],
    /// Non-IP frames (ARP, ...) and floods forwarded without impairment.
    pub passthrough_frames: u64,
    pub passthrough_bytes: u64,
    sink: Box<dyn Sink>,
}

impl Stats {
    pub fn new(
        origin: Nanos,
        n_clients: usize,
        interval: Nanos,
        per_packet: bool,
        wifi: bool,
        sink: Box<dyn Sink>,
    ) -> Self {
        let dir = || DirStats {
            total: Totals::default(),
            clients: vec![Totals::default(); n_clients],
            acc_all: Acc::default(),
            acc: vec![Acc::default(); n_clients],
            dual: false,
            classes: Default::default(),
        };
        Stats {
            origin,
            n: n_clients,
            interval,
            next_close: origin + interval,
            last_close: origin,
            per_packet,
            wifi,
            dirs: [dir(), dir()],
            prev_airtime: [vec![0; n_clients], vec![0; n_clients]],
            passthrough_frames: 0,
            passthrough_bytes: 0,
            sink,
        }
    }

    /// Keep per-class (DualPI2 Classic/L4S) statistics for a direction.
    pub fn set_dual_queue(&mut self, dir: Dir, dual: bool) {
        self.dirs[dir.index()].dual = dual;
    }

    /// Instant of the next interval boundary.
    pub fn next_close(&self) -> Nanos {
        self.next_close
    }

    /// End of the last closed interval.
    pub fn last_close(&self) -> Nanos {
        self.last_close
    }

    pub fn on_in(&mut self, dir: Dir, client: u16, len: usize) {
        let d = &mut self.dirs[dir.index()];
        for t in [&mut d.total, &mut d.clients[client as usize]] {
            t.packets_in += 1;
            t.bytes_in += len as u64;
        }
        d.acc_all.bytes_in += len as u64;
        d.acc[client as usize].bytes_in += len as u64;
    }

    pub fn on_out(&mut self, dir: Dir, pkt: &Packet, t: Nanos) {
        let len = pkt.ip_len() as u64;
        let delay = t.saturating_sub(pkt.arrival);
        let c = pkt.client as usize;
        let d = &mut self.dirs[dir.index()];
        for tot in [&mut d.total, &mut d.clients[c]] {
            tot.out.record(len, pkt, delay);
            if self.wifi {
                tot.wifi.record(pkt.wifi_wait);
            }
            tot.span.departure(t, len);
        }
        for a in [&mut d.acc_all, &mut d.acc[c]] {
            a.out.record(len, pkt, delay);
        }
        if let (true, Some(k)) = (d.dual, class_index(pkt.class)) {
            let ct = &mut d.classes[k];
            ct.packets_out += 1;
            ct.bytes_out += len;
            ct.marks += pkt.marked as u64;
            ct.sojourn.record(pkt.sojourn);
            ct.span.departure(t, len);
            for a in [&mut d.acc_all, &mut d.acc[c]] {
                let ca = &mut a.cls[k];
                ca.bytes_out += len;
                ca.marks += pkt.marked as u64;
                ca.sojourn.record(pkt.sojourn);
            }
        }
        if self.per_packet {
            self.sink.packet(PacketRecord {
                t: t.saturating_sub(self.origin),
                dir,
                client: pkt.client,
                len: len as u32,
                sojourn: pkt.sojourn,
                wifi: pkt.wifi_wait,
                delay,
                verdict: if pkt.marked { Verdict::Mark } else { Verdict::Forward },
            });
        }
    }

    pub fn on_drop(&mut self, dir: Dir, pkt: &Packet, cause: DropCause, t: Nanos) {
        let c = pkt.client as usize;
        let d = &mut self.dirs[dir.index()];
        d.total.drops[cause.index()] += 1;
        if c < self.n {
            d.clients[c].drops[cause.index()] += 1;
            d.acc[c].drops += 1;
        }
        d.acc_all.drops += 1;
        if let (true, Some(k)) = (d.dual, class_index(pkt.class)) {
            d.classes[k].drops[cause.index()] += 1;
            d.acc_all.cls[k].drops += 1;
            if c < self.n {
                d.acc[c].cls[k].drops += 1;
            }
        }
        if self.per_packet {
            self.sink.packet(PacketRecord {
                t: t.saturating_sub(self.origin),
                dir,
                client: pkt.client,
                len: pkt.ip_len() as u32,
                sojourn: pkt.sojourn,
                wifi: pkt.wifi_wait,
                delay: t.saturating_sub(pkt.arrival),
                verdict: Verdict::Drop(cause),
            });
        }
    }

    /// An oversize frame that never became a directional packet (counted in
    /// the direction it would have taken).
    pub fn on_oversize(&mut self, dir: Dir, client: Option<u16>, frame_len: usize, t: Nanos) {
        let d = &mut self.dirs[dir.index()];
        d.total.drops[DropCause::Oversize.index()] += 1;
        d.acc_all.drops += 1;
        if let Some(c) = client {
            d.clients[c as usize].drops[DropCause::Oversize.index()] += 1;
            d.acc[c as usize].drops += 1;
        }
        if self.per_packet {
            self.sink.packet(PacketRecord {
                t: t.saturating_sub(self.origin),
                dir,
                client: client.unwrap_or(u16::MAX),
                len: frame_len as u32,
                sojourn: 0,
                wifi: 0,
                delay: 0,
                verdict: Verdict::Drop(DropCause::Oversize),
            });
        }
    }

    pub fn on_passthrough(&mut self, frame_len: usize) {
        self.passthrough_frames += 1;
        self.passthrough_bytes += frame_len as u64;
    }

    /// Close the interval ending at `t` (a boundary, or the end of the run).
    pub fn close_interval(&mut self, t: Nanos, snap: &Snapshot) {
        let secs = (t - self.last_close) as f64 / 1e9;
        let t_s = (t - self.origin) as f64 / 1e9;
        let mut rows = Vec::with_capacity(2 * (self.n + 1));
        for dir in Dir::BOTH {
            let di = dir.index();
            let airtime: Option<Vec<Nanos>> = if self.wifi {
                let cur = &snap.wifi_airtime[di];
                let v: Vec<Nanos> = (0..self.n).map(|c| cur[c] - self.prev_airtime[di][c]).collect();
                self.prev_airtime[di].clone_from(cur);
                Some(v)
            } else {
                None
            };
            let frac = |ns: Nanos| if secs > 0.0 { ns as f64 / 1e9 / secs } else { 0.0 };
            let d = &mut self.dirs[di];
            let dual = d.dual;
            let rate = |bytes: u64| if secs > 0.0 { bytes as f64 * 8.0 / secs / 1e6 } else { 0.0 };
            let classes = |a: &Acc, queues: Option<[u64; 2]>| -> Option<[ClassRow; 2]> {
                if !dual {
                    return None;
                }
                let one = |k: usize| {
                    let c = &a.cls[k];
                    ClassRow {
                        bytes_out: c.bytes_out,
                        rate_mbit: rate(c.bytes_out),
                        marks: c.marks,
                        drops: c.drops,
                        sojourn_mean_us: round1(c.sojourn.mean_us()),
                        sojourn_p90_us: round1(c.sojourn.quantile_us(0.90)),
                        sojourn_p99_us: round1(c.sojourn.quantile_us(0.99)),
                        sojourn_max_us: round1(c.sojourn.max_us()),
                        queue_pkts: queues.map(|q| q[k]),
                    }
                };
                Some([one(0), one(1)])
            };
            let row = |a: &Acc, client: i32, queue: Option<u64>, air: Option<f64>| IntervalRow {
                t_s,
                dir,
                client,
                bytes_in: a.bytes_in,
                packets_out: a.out.packets,
                bytes_out: a.out.bytes,
                rate_mbit: rate(a.out.bytes),
                drops: a.drops,
                marks: a.out.marks,
                sojourn_mean_us: round1(a.out.sojourn.mean_us()),
                sojourn_p99_us: round1(a.out.sojourn.quantile_us(0.99)),
                delay_mean_us: round1(a.out.delay.mean_us()),
                delay_p99_us: round1(a.out.delay.quantile_us(0.99)),
                queue_pkts: queue,
                airtime_frac: air,
                classes: None,
                p_prime: None,
            };
            let mut all =
                row(&d.acc_all, -1, Some(snap.link_queue[di]), airtime.as_ref().map(|v| frac(v.iter().sum())));
            all.classes = classes(&d.acc_all, snap.class_queue[di]);
            all.p_prime = snap.p_prime[di]; // DualPI2's p', PIE's p; None for the others
            rows.push(all);
            for c in 0..self.n {
                let q = if self.wifi { snap.wifi_queue[di].get(c).copied() } else { None };
                let mut r = row(&d.acc[c], c as i32, q, airtime.as_ref().map(|v| frac(v[c])));
                r.classes = classes(&d.acc[c], None);
                rows.push(r);
            }
            d.acc_all.reset();
            for a in &mut d.acc {
                a.reset();
            }
        }
        self.sink.intervals(rows);
        self.last_close = t;
        while self.next_close <= t {
            self.next_close += self.interval;
        }
    }

    /// Per-direction part of summary.json.
    pub fn direction_json(&self, dir: Dir, in_flight_at_exit: usize) -> Value {
        let d = &self.dirs[dir.index()];
        let mut v = d.total.json(self.wifi);
        v["in_flight_at_exit"] = json!(in_flight_at_exit);
        v["clients"] = Value::Array(d.clients.iter().map(|t| t.json(self.wifi)).collect());
        v["classes"] = if d.dual {
            json!({CLASS_NAMES[0]: d.classes[0].json(), CLASS_NAMES[1]: d.classes[1].json()})
        } else {
            Value::Null
        };
        v
    }

    /// Packets and bytes out and drops of a direction (tests, benchmarks).
    pub fn totals(&self, dir: Dir) -> (u64, u64, u64) {
        let t = &self.dirs[dir.index()].total;
        (t.out.packets, t.out.bytes, t.drops.iter().sum())
    }

    pub fn drops(&self, dir: Dir, cause: DropCause) -> u64 {
        self.dirs[dir.index()].total.drops[cause.index()]
    }

    /// Packets and bytes that entered a direction (control socket).
    pub fn totals_in(&self, dir: Dir) -> (u64, u64) {
        let t = &self.dirs[dir.index()].total;
        (t.packets_in, t.bytes_in)
    }

    pub fn finish(&mut self) {
        self.sink.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_match_their_headers() {
        let row = IntervalRow {
            t_s: 1.0,
            dir: Dir::Up,
            client: -1,
            bytes_in: 1,
            packets_out: 2,
            bytes_out: 3,
            rate_mbit: 4.0,
            drops: 5,
            marks: 6,
            sojourn_mean_us: 7.0,
            sojourn_p99_us: 8.0,
            delay_mean_us: 9.0,
            delay_p99_us: 10.0,
            queue_pkts: None,
            airtime_frac: Some(0.5),
            classes: None,
            p_prime: None,
        };
        let cols: Vec<&str> = INTERVAL_HEADER.split(',').collect();
        let line = row.csv();
        let vals: Vec<&str> = line.split(',').collect();
        assert_eq!(cols.len(), vals.len());
        let get = |c: &str| vals[cols.iter().position(|x| *x == c).unwrap()];
        assert_eq!((get("bytes_out"), get("queue_pkts"), get("airtime_frac")), ("3", "", "0.5000"));
        assert_eq!((get("c_marks"), get("l_queue_pkts"), get("p_prime")), ("", "", ""));
        let mut dual = row.clone();
        dual.classes = Some([
            ClassRow { marks: 7, ..Default::default() },
            ClassRow { sojourn_p90_us: 1050.0, queue_pkts: Some(3), ..Default::default() },
        ]);
        dual.p_prime = Some(0.25);
        let line = dual.csv();
        let vals: Vec<&str> = line.split(',').collect();
        assert_eq!(cols.len(), vals.len());
        let get = |c: &str| vals[cols.iter().position(|x| *x == c).unwrap()];
        assert_eq!((get("c_marks"), get("l_sojourn_p90_us"), get("l_queue_pkts")), ("7", "1050.0", "3"));
        assert_eq!((get("c_queue_pkts"), get("p_prime")), ("", "0.250000"));
        let mut s = String::new();
        PacketRecord {
            t: 1500,
            dir: Dir::Down,
            client: 1,
            len: 100,
            sojourn: 2000,
            wifi: 0,
            delay: 3000,
            verdict: Verdict::Drop(DropCause::Queue),
        }
        .csv(&mut s);
        let cols: Vec<&str> = PACKET_HEADER.split(',').collect();
        let vals: Vec<&str> = s.trim_end().split(',').collect();
        assert_eq!(cols.len(), vals.len());
        assert_eq!(vals[cols.iter().position(|x| *x == "verdict").unwrap()], "drop_queue");
        assert_eq!(vals[0], "1.5");
    }
}
