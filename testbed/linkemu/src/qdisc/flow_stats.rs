//! Per-flow counters of the fair-queuing disciplines (fq_codel, fq, lfq,
//! fq_pie), for summary.json's `qdisc_stats`.
//!
//! Every arriving packet is counted under its 5-tuple ([`crate::flow`]),
//! whatever queue it hashes to, so hash collisions show up (`shared_queues`:
//! queues that carried more than one 5-tuple).  Each flow gets an id at its
//! first packet, stored in [`Packet::flow`] so later verdicts (dequeue, AQM
//! or overflow drop) find its counters without parsing the packet again.
//! Packets without a key (not IP) share one "unparsed" entry; after
//! [`MAX_TRACKED_FLOWS`] distinct 5-tuples, new ones share one "untracked"
//! entry (memory stays bounded under a port scan).  summary.json lists the
//! [`TOP_FLOWS`] flows with the most bytes offered.
//!
//! Per flow: packets/bytes offered (`packets_in`, `bytes_in`, every arrival,
//! refused or not) and sent (`packets_out`, `bytes_out`), drops by cause
//! (`overflow`: the discipline's packet limit; `flow_limit`: fq's per-flow
//! limit; `aqm`: CoDel or PIE), CE marks (fq_codel: counted as the packet
//! leaves; fq_pie: when it marks, at enqueue), and the mean and largest
//! sojourn of its packets in the discipline.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::flow::FlowKey;
use crate::packet::{Packet, NO_FLOW};
use crate::time::Nanos;

/// Distinct 5-tuples counted one by one.
pub const MAX_TRACKED_FLOWS: usize = 65_536;
/// Flows listed in summary.json (most bytes offered first).
pub const TOP_FLOWS: usize = 64;

/// Why a fair-queuing discipline dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowDrop {
    /// The discipline's packet limit (fq_codel: head of the fattest flow; fq, fq_pie: the arrival).
    Overflow = 0,
    /// fq's per-flow packet limit (the arrival).
    FlowLimit = 1,
    /// The AQM: CoDel's control law (fq_codel), PIE's drop at enqueue (fq_pie).
    Aqm = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Ident {
    Tuple(FlowKey),
    Unparsed,
    Untracked,
}

#[derive(Debug, Clone, Default)]
struct Counters {
    packets_in: u64,
    bytes_in: u64,
    packets_out: u64,
    bytes_out: u64,
    drops: [u64; 3],
    ecn_marks: u64,
    sojourn_sum: u128,
    sojourn_max: Nanos,
}

impl Counters {
    fn to_json(&self) -> Value {
        let mean_us = if self.packets_out > 0 { self.sojourn_sum as f64 / self.packets_out as f64 / 1e3 } else { 0.0 };
        json!({
            "packets_in": self.packets_in,
            "bytes_in": self.bytes_in,
            "packets_out": self.packets_out,
            "bytes_out": self.bytes_out,
            "drops": {"overflow": self.drops[0], "flow_limit": self.drops[1], "aqm": self.drops[2]},
            "ecn_marks": self.ecn_marks,
            "sojourn_us": {"mean": mean_us, "max": self.sojourn_max as f64 / 1e3},
        })
    }
}

struct Entry {
    ident: Ident,
    /// Queue of its first packet (all its packets, for a 5-tuple).
    queue: usize,
    c: Counters,
}

#[derive(Default)]
pub struct FlowStats {
    ids: HashMap<Ident, u32>,
    entries: Vec<Entry>,
    total: Counters,
    /// Distinct 5-tuples with their own entry.
    tuples: usize,
    max_active: usize,
    new_flow_count: u64,
}

impl FlowStats {
    /// Count an arrival (5-tuple `key`, for queue `queue`) and tag the
    /// packet with its flow id.
    pub fn on_arrival(&mut self, pkt: &mut Packet, key: Option<FlowKey>, queue: usize) {
        let ident = match key {
            Some(k) if self.tuples < MAX_TRACKED_FLOWS || self.ids.contains_key(&Ident::Tuple(k)) => Ident::Tuple(k),
            Some(_) => Ident::Untracked,
            None => Ident::Unparsed,
        };
        let next = self.entries.len() as u32;
        let id = *self.ids.entry(ident).or_insert(next);
        if id == next {
            self.tuples += matches!(ident, Ident::Tuple(_)) as usize;
            self.entries.push(Entry { ident, queue, c: Counters::default() });
        }
        pkt.flow = id;
        let len = pkt.ip_len() as u64;
        for c in [&mut self.entries[id as usize].c, &mut self.total] {
            c.packets_in += 1;
            c.bytes_in += len;
        }
    }

    fn both(&mut self, pkt: &Packet, mut f: impl FnMut(&mut Counters)) {
        f(&mut self.total);
        if pkt.flow != NO_FLOW {
            if let Some(e) = self.entries.get_mut(pkt.flow as usize) {
                f(&mut e.c);
            }
        }
    }

    /// `pkt` leaves the discipline at `now`; `marked`: CE-marked by it.
    pub fn on_dequeue(&mut self, pkt: &Packet, now: Nanos, marked: bool) {
        let (len, sojourn) = (pkt.ip_len() as u64, now.saturating_sub(pkt.enqueued));
        self.both(pkt, |c| {
            c.packets_out += 1;
            c.bytes_out += len;
            c.ecn_marks += marked as u64;
            c.sojourn_sum += sojourn as u128;
            c.sojourn_max = c.sojourn_max.max(sojourn);
        });
    }

    /// `pkt` was CE-marked at enqueue (fq_pie; fq_codel marks at dequeue, see `on_dequeue`).
    pub fn on_mark(&mut self, pkt: &Packet) {
        self.both(pkt, |c| c.ecn_marks += 1);
    }

    pub fn on_drop(&mut self, pkt: &Packet, cause: FlowDrop) {
        self.both(pkt, |c| c.drops[cause as usize] += 1);
    }

    /// A queue joined the new-flows list.
    pub fn on_new_flow(&mut self) {
        self.new_flow_count += 1;
    }

    /// Queues holding packets right now.
    pub fn on_active(&mut self, active: usize) {
        self.max_active = self.max_active.max(active);
    }

    /// Queues that carried packets of more than one 5-tuple (hash collisions).
    fn shared_queues(&self) -> usize {
        let mut per_queue: HashMap<usize, usize> = HashMap::new();
        for e in self.entries.iter().filter(|e| matches!(e.ident, Ident::Tuple(_))) {
            *per_queue.entry(e.queue).or_default() += 1;
        }
        per_queue.values().filter(|&&n| n > 1).count()
    }

    fn entry_json(e: &Entry) -> Value {
        let (kind, key) = match e.ident {
            Ident::Tuple(k) => ("tuple", Some(k)),
            Ident::Unparsed => ("unparsed", None),
            Ident::Untracked => ("untracked", None),
        };
        let mut v = e.c.to_json();
        let m = v.as_object_mut().expect("counters are an object");
        m.insert("key".into(), json!(kind));
        m.insert("src".into(), json!(key.map(|k| k.src.to_string())));
        m.insert("dst".into(), json!(key.map(|k| k.dst.to_string())));
        m.insert("proto".into(), json!(key.map(|k| k.proto)));
        m.insert("sport".into(), json!(key.map(|k| k.sport)));
        m.insert("dport".into(), json!(key.map(|k| k.dport)));
        m.insert("queue".into(), json!(key.map(|_| e.queue)));
        v
    }

    /// The summary.json object; `params` (the discipline's own fields) are merged in.
    pub fn to_json(&self, kind: &str, params: Value) -> Value {
        let mut top: Vec<&Entry> = self.entries.iter().collect();
        top.sort_by_key(|e| std::cmp::Reverse(e.c.bytes_in)); // stable: first seen first among equals
        top.truncate(TOP_FLOWS);
        let mut v = self.total.to_json();
        let m = v.as_object_mut().expect("counters are an object");
        m.insert("kind".into(), json!(kind));
        m.insert("flows_seen".into(), json!(self.tuples));
        m.insert("max_active_flows".into(), json!(self.max_active));
        m.insert("new_flow_count".into(), json!(self.new_flow_count));
        m.insert("shared_queues".into(), json!(self.shared_queues()));
        m.insert("top_flows".into(), Value::Array(top.into_iter().map(Self::entry_json).collect()));
        if let Value::Object(p) = params {
            m.extend(p);
        }
        v
    }
}
