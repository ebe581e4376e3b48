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
//!
//! **Files** (`stats/`): this file holds [`Stats`], which takes the facts
//! above; `rows.rs` the packets.csv and intervals.csv rows, their headers and
//! CSV text; `sink.rs` where rows go; `totals.rs` the run totals and the
//! per-direction part of summary.json; `intervals.rs` the interval
//! accumulators and closing an interval into rows.

mod intervals;
mod rows;
mod sink;
mod totals;

pub use intervals::Snapshot;
pub use rows::{ClassRow, IntervalRow, PacketRecord, Verdict, CLASS_NAMES, INTERVAL_HEADER, PACKET_HEADER};
pub use sink::{MemorySink, NullSink, Sink};

use self::intervals::Acc;
use self::totals::{ClassTotals, Totals};
use crate::packet::{Dir, Packet, QClass};
use crate::qdisc::DropCause;
use crate::time::Nanos;

fn class_index(c: QClass) -> Option<usize> {
    match c {
        QClass::None => None,
        QClass::Classic => Some(0),
        QClass::L4s => Some(1),
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
