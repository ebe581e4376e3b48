//! Per-flow queues served by deficit round robin: the scheduler that
//! fq_codel, fq, lfq and fq_pie share (RFC 8290 section 4; Linux
//! net/sched/sch_fq_codel.c).
//!
//! **Classification.**  A packet goes to queue `hash(5-tuple) * flows >> 32`
//! of `flows` (1024) FIFOs, with a seeded hash ([`crate::flow`]); packets
//! without a 5-tuple go to queue 0.  Flows that hash alike share a queue, as
//! in Linux ("stochastic" fairness).
//!
//! **Two lists.**  Queues holding packets are on one of two round-robin
//! lists, *new* and *old*.  A queue that receives a packet while on neither
//! list joins the tail of new with a deficit of one `quantum` (1514 bytes).
//!
//! **Dequeue.**  Take the queue at the head of new (else old):
//! * deficit <= 0: it has used its quantum for this round; add a quantum,
//!   move it to the tail of old, look again;
//! * otherwise ask it for a packet (an AQM may drop some first).  A packet:
//!   deficit -= its length, return it (the queue stays at the head, so it
//!   sends up to a quantum's worth in a row).  None (it ran empty): a queue
//!   taken from new moves to the tail of old if old is not empty, so a flow
//!   cannot keep its priority by sending one packet at a time (RFC 8290
//!   section 4.2); otherwise it leaves the lists; look again.
//!
//! The effect: a flow sending less than its share, whose queue empties
//! between its packets, re-enters as new each time and is served ahead of the
//! backlogged (old) flows, so it sees almost no queueing delay; backlogged
//! flows share the rest byte-fairly, a quantum per round, whatever their
//! packet sizes.  Lengths are IP bytes (the emulator's unit everywhere; Linux
//! counts the 14-byte Ethernet header too, hence its 1514 quantum: one
//! quantum still covers one full-size packet).
//!
//! Each queue carries the discipline's per-queue state `V` (fq_codel: its
//! CoDel variables; fq_pie: its PIE controller; fq: nothing).  Counters per
//! 5-tuple are kept in [`FlowStats`].
//!
//! **Classes.**  A DRR slot (what the hash picks, what the lists rotate,
//! what owns the deficit) holds one FIFO per class: one for fq_codel, fq,
//! lfq and fq_pie, where slot and queue are the same thing; two for
//! fq_dualpi2, whose slots are pairs of a Classic and an L4S FIFO
//! ([`FlowQueues::with_classes`], [`FlowQueues::push_class`]).  The slot is
//! listed, active or empty as a whole; `serve` sees all its FIFOs and picks
//! (fq_dualpi2's L precedence).  [`FlowQueues::queues`] lists every FIFO,
//! slot `i`'s class `c` at `i * classes + c` (the queue index itself with one
//! class).

use std::collections::VecDeque;

use serde_json::Value;

use super::codel::CodelQueue;
use super::control::FlowState;
use super::fifo::Fifo;
use super::flow_stats::{FlowDrop, FlowStats};
use super::Dropped;
use crate::flow::FlowKey;
use crate::packet::Packet;
use crate::time::Nanos;

#[derive(Default)]
struct Slot<V> {
    deficit: i64,
    /// On the new or the old list.
    listed: bool,
    /// The 5-tuple of the last packet classified into it (control socket).
    last_key: Option<FlowKey>,
    vars: V,
}

/// One flow queue as a discipline's per-queue AQM sees it: its FIFO(s), and
/// the backlog of the whole discipline (CoDel's one-MTU rule, as Linux fq_codel).
pub struct FlowSource<'a> {
    q: &'a mut [Fifo],
    others: usize,
}

impl FlowSource<'_> {
    /// Bytes left in this slot's own FIFOs (fq_pie's per-flow PIE).
    pub fn flow_bytes(&self) -> usize {
        self.q.iter().map(Fifo::bytes).sum()
    }

    /// The slot's FIFOs, one per class (fq_dualpi2: [Classic, L4S]).
    pub fn classes(&mut self) -> &mut [Fifo] {
        self.q
    }

    /// Bytes in the other slots.
    pub fn others(&self) -> usize {
        self.others
    }
}

impl CodelQueue for FlowSource<'_> {
    /// The head of the slot's first FIFO (the only one of the one-class disciplines).
    fn pop(&mut self) -> Option<Packet> {
        self.q[0].pop()
    }
    fn backlog(&self) -> usize {
        self.others + self.flow_bytes()
    }
}

pub struct FlowQueues<V> {
    quantum: i64,
    seed: u64,
    /// FIFOs per slot.
    classes: usize,
    /// `classes` per slot, slot by slot.
    queues: Vec<Fifo>,
    slots: Vec<Slot<V>>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    len: usize,
    bytes: usize,
    /// Queues holding packets.
    active: usize,
    pub stats: FlowStats,
}

impl<V: Default> FlowQueues<V> {
    /// `flows` queues, `quantum` bytes per round, flow hash seeded with `seed`.
    pub fn new(flows: usize, quantum: usize, seed: u64) -> Self {
        Self::with_classes(flows, 1, quantum, seed)
    }

    /// `flows` slots of `classes` FIFOs each (module comment, "Classes").
    pub fn with_classes(flows: usize, classes: usize, quantum: usize, seed: u64) -> Self {
        assert!(classes >= 1);
        Self {
            quantum: quantum as i64,
            seed,
            classes,
            queues: (0..flows * classes).map(|_| Fifo::default()).collect(),
            slots: (0..flows).map(|_| Slot::default()).collect(),
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            len: 0,
            bytes: 0,
            active: 0,
            stats: FlowStats::default(),
        }
    }

    /// The queue of an arriving packet; counts the arrival under its flow.
    pub fn classify(&mut self, pkt: &mut Packet) -> usize {
        self.classify_key(pkt).0
    }

    /// [`FlowQueues::classify`], also giving the packet's 5-tuple.
    pub fn classify_key(&mut self, pkt: &mut Packet) -> (usize, Option<FlowKey>) {
        let key = pkt.flow_key();
        let idx = key.map_or(0, |k| self.bucket_of(&k));
        self.stats.on_arrival(pkt, key, idx);
        self.slots[idx].last_key = key;
        (idx, key)
    }

    /// The queue (slot) a 5-tuple hashes to.
    pub fn bucket_of(&self, key: &FlowKey) -> usize {
        key.bucket(self.seed, self.slots.len())
    }

    /// The FIFOs of slot `idx`.
    fn slot_fifos(&self, idx: usize) -> &[Fifo] {
        &self.queues[idx * self.classes..(idx + 1) * self.classes]
    }

    /// FIFO `class` of slot `idx`.
    pub fn fifo(&self, idx: usize, class: usize) -> &Fifo {
        &self.queues[idx * self.classes + class]
    }

    /// Slots (hash buckets).
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Packets in queue (slot) `idx`, all classes.
    pub fn queue_len(&self, idx: usize) -> usize {
        self.slot_fifos(idx).iter().map(Fifo::len).sum()
    }

    /// Bytes in queue (slot) `idx`, all classes.
    pub fn queue_bytes(&self, idx: usize) -> usize {
        self.slot_fifos(idx).iter().map(Fifo::bytes).sum()
    }

    fn slot_empty(&self, idx: usize) -> bool {
        self.slot_fifos(idx).iter().all(Fifo::is_empty)
    }

    /// Append `pkt` to queue `idx`; a queue on no list joins the new list.
    pub fn push(&mut self, idx: usize, pkt: Packet, now: Nanos) {
        self.push_class(idx, 0, pkt, now);
    }

    /// Append `pkt` to FIFO `class` of slot `idx`; a slot on no list joins the new list.
    pub fn push_class(&mut self, idx: usize, class: usize, pkt: Packet, now: Nanos) {
        self.len += 1;
        self.bytes += pkt.ip_len();
        if self.slot_empty(idx) {
            self.active += 1;
            self.stats.on_active(self.active);
        }
        self.queues[idx * self.classes + class].push(pkt, now);
        let slot = &mut self.slots[idx];
        if !slot.listed {
            slot.listed = true;
            slot.deficit = self.quantum;
            self.new_flows.push_back(idx);
            self.stats.on_new_flow();
        }
    }

    /// The queue with the most bytes (the lowest index among equals, as
    /// Linux's scan), None if all are empty.  Only listed queues can hold
    /// packets, so only they are looked at.
    pub fn fattest(&self) -> Option<usize> {
        self.new_flows
            .iter()
            .chain(self.old_flows.iter())
            .copied()
            .filter(|&i| !self.slot_empty(i))
            .max_by(|&a, &b| self.queue_bytes(a).cmp(&self.queue_bytes(b)).then(b.cmp(&a)))
    }

    /// Take the head packet of queue `idx` (its first class) as a drop for `cause`.
    pub fn drop_head(&mut self, idx: usize, cause: FlowDrop) -> Option<Packet> {
        let p = self.queues[idx * self.classes].pop()?;
        self.took(idx, 1, p.ip_len());
        self.stats.on_drop(&p, cause);
        Some(p)
    }

    /// The per-queue state of queue `idx`.
    pub fn vars_mut(&mut self, idx: usize) -> &mut V {
        &mut self.slots[idx].vars
    }

    pub fn vars(&self, idx: usize) -> &V {
        &self.slots[idx].vars
    }

    /// Queues holding packets right now.
    pub fn active(&self) -> usize {
        self.active
    }

    /// The control socket's view of the queues holding packets (fq,
    /// fq_codel), by queue index, at most `max`; `limit`: the per-queue limit.
    pub fn flow_states(&self, limit: Option<usize>, max: usize) -> Vec<FlowState> {
        let mut idx: Vec<usize> =
            self.new_flows.iter().chain(self.old_flows.iter()).copied().filter(|&i| !self.slot_empty(i)).collect();
        idx.sort_unstable();
        idx.truncate(max);
        idx.into_iter()
            .map(|i| FlowState {
                queue: i,
                key: self.slots[i].last_key,
                shared: None,
                limit_pkts: limit,
                backlog_pkts: self.queue_len(i),
                backlog_bytes: self.queue_bytes(i),
                extra: vec![],
                features: None,
            })
            .collect()
    }

    fn took(&mut self, idx: usize, pkts: usize, bytes: usize) {
        self.len -= pkts;
        self.bytes -= bytes;
        if pkts > 0 && self.slot_empty(idx) {
            self.active -= 1;
        }
    }

    /// The DRR dequeue (module comment).  `serve` takes a packet from a
    /// queue, possibly after AQM drops (pushed to `drops`), and says whether
    /// it CE-marked it.
    pub fn dequeue<F>(&mut self, now: Nanos, drops: &mut Vec<Dropped>, mut serve: F) -> Option<Packet>
    where
        F: FnMut(&mut V, &mut FlowSource<'_>, Nanos, &mut Vec<Dropped>) -> Option<(Packet, bool)>,
    {
        loop {
            let (from_new, idx) = match self.new_flows.front() {
                Some(&i) => (true, i),
                None => (false, *self.old_flows.front()?),
            };
            if self.slots[idx].deficit <= 0 {
                self.slots[idx].deficit += self.quantum;
                self.pop_list(from_new);
                self.old_flows.push_back(idx);
                continue;
            }
            let first_drop = drops.len();
            let (before_len, before_bytes) = (self.queue_len(idx), self.queue_bytes(idx));
            let k = self.classes;
            let q = &mut self.queues[idx * k..(idx + 1) * k];
            let mut src = FlowSource { others: self.bytes - before_bytes, q };
            let served = serve(&mut self.slots[idx].vars, &mut src, now, drops);
            let (after_len, after_bytes) = (self.queue_len(idx), self.queue_bytes(idx));
            self.took(idx, before_len - after_len, before_bytes - after_bytes);
            for d in &drops[first_drop..] {
                self.stats.on_drop(&d.pkt, FlowDrop::Aqm);
            }
            match served {
                Some((p, marked)) => {
                    self.slots[idx].deficit -= p.ip_len() as i64;
                    self.stats.on_dequeue(&p, now, marked);
                    return Some(p);
                }
                None => {
                    self.pop_list(from_new);
                    if from_new && !self.old_flows.is_empty() {
                        self.old_flows.push_back(idx);
                    } else {
                        self.slots[idx].listed = false;
                    }
                }
            }
        }
    }

    fn pop_list(&mut self, from_new: bool) {
        if from_new {
            self.new_flows.pop_front();
        } else {
            self.old_flows.pop_front();
        }
    }

    /// Every FIFO (indexed like the flow buckets with one class; module comment).
    pub fn queues(&self) -> &[Fifo] {
        &self.queues
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Enqueue instant of the oldest packet (listed queues only).
    pub fn head_enqueued(&self) -> Option<Nanos> {
        self.new_flows
            .iter()
            .chain(self.old_flows.iter())
            .flat_map(|&i| self.slot_fifos(i).iter().filter_map(Fifo::head_enqueued))
            .min()
    }

    /// Take every queued packet without verdicts; the lists are emptied.
    pub fn drain(&mut self) -> Vec<Packet> {
        let mut v = Vec::with_capacity(self.len);
        let k = self.classes;
        for i in self.new_flows.drain(..).chain(self.old_flows.drain(..)) {
            for q in &mut self.queues[i * k..(i + 1) * k] {
                v.extend(q.take_all());
            }
            self.slots[i].listed = false;
        }
        (self.len, self.bytes, self.active) = (0, 0, 0);
        v
    }

    /// Queues on the [new, old] lists (tests).
    pub fn list_lens(&self) -> [usize; 2] {
        [self.new_flows.len(), self.old_flows.len()]
    }

    /// summary.json's `qdisc_stats` (see [`FlowStats::to_json`]).
    pub fn stats_json(&self, kind: &str, params: Value) -> Value {
        self.stats.to_json(kind, params)
    }
}
