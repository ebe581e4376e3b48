//! intervals.csv: the accumulators of the interval in progress (per
//! direction for all clients and per client, with the dual-queue classes),
//! the queue and airtime [`Snapshot`] the engine takes at a boundary, and
//! closing an interval into its rows.

use super::totals::Departures;
use super::{ClassRow, IntervalRow, Stats};
use crate::histogram::{round1, FineHistogram};
use crate::packet::Dir;
use crate::time::Nanos;

/// Interval accumulator of one DualPI2 class.
#[derive(Default, Clone)]
pub(super) struct ClassAcc {
    pub(super) bytes_out: u64,
    pub(super) marks: u64,
    pub(super) drops: u64,
    pub(super) sojourn: FineHistogram,
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
pub(super) struct Acc {
    pub(super) bytes_in: u64,
    pub(super) out: Departures,
    pub(super) drops: u64,
    pub(super) cls: [ClassAcc; 2],
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

impl Stats {
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
}
