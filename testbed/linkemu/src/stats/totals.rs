//! Run totals for summary.json: departures (packets, bytes, marks, sojourn
//! and delay histograms), arrivals and drops per cause of a direction or a
//! client, the span their average rate is taken over, the dual-queue
//! classes' totals, and the per-direction part of summary.json.

use serde_json::{json, Value};

use super::{Stats, CLASS_NAMES};
use crate::histogram::{FineHistogram, Histogram};
use crate::packet::{Dir, Packet};
use crate::qdisc::DropCause;
use crate::time::Nanos;

/// Departures counted into one set of counters (run totals or an interval):
/// packets, bytes (IP), CE marks, sojourn in the queue and delay from
/// arrival to departure.
#[derive(Debug, Default, Clone)]
pub(super) struct Departures {
    pub(super) packets: u64,
    pub(super) bytes: u64,
    pub(super) marks: u64,
    pub(super) sojourn: Histogram,
    pub(super) delay: Histogram,
}

impl Departures {
    pub(super) fn record(&mut self, len: u64, pkt: &Packet, delay: Nanos) {
        self.packets += 1;
        self.bytes += len;
        self.marks += pkt.marked as u64;
        self.sojourn.record(pkt.sojourn);
        self.delay.record(delay);
    }

    pub(super) fn clear(&mut self) {
        self.packets = 0;
        self.bytes = 0;
        self.marks = 0;
        self.sojourn.clear();
        self.delay.clear();
    }
}

#[derive(Debug, Default, Clone)]
pub(super) struct Totals {
    pub(super) packets_in: u64,
    pub(super) bytes_in: u64,
    pub(super) out: Departures,
    pub(super) drops: [u64; DropCause::ALL.len()],
    pub(super) wifi: Histogram,
    pub(super) span: Span,
}

/// The span of a run's departures: the first one (instant, its bytes) and
/// the instant of the last one, over which its average rate is taken.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Span {
    first: Option<(Nanos, u64)>,
    last: Nanos,
}

impl Span {
    pub(super) fn departure(&mut self, t: Nanos, len: u64) {
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
pub(super) struct ClassTotals {
    pub(super) packets_out: u64,
    pub(super) bytes_out: u64,
    pub(super) marks: u64,
    pub(super) drops: [u64; DropCause::ALL.len()],
    pub(super) sojourn: FineHistogram,
    pub(super) span: Span,
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

impl Stats {
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
}
