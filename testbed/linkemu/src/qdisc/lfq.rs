//! lfq: fair queuing with a per-flow limit an agent sets while the emulator
//! runs (the queue of paper 001's LFQ, "Learning Fair Qdisc").
//!
//! **Queues and scheduler** exactly as fq ([`super::fq`], [`super::drr`]):
//! 5-tuples hash into `flows` (1024) FIFOs served by deficit round robin
//! (`quantum` 1514 bytes, new flows first once); no AQM, nothing is dropped
//! or marked at dequeue; an arrival is tail-dropped when all queues together
//! hold `limit_pkts` (10240, `overflow`) or when its own queue holds its
//! flow's limit (`flow_limit`).
//!
//! **Per-flow limit.**  Unlike fq's one `flow_limit_pkts`, every flow has its
//! own limit (the paper's "maximum buffer size"): `default_limit_pkts` (100)
//! when the flow starts, then whatever the agent sets through the control
//! socket ([`crate::control`]: `set` with `flows: [{queue | key,
//! limit_pkts}]`, 1..`limit_pkts`; and `default_limit_pkts` for flows that
//! start later).  Lowering a limit below the queue's length drops nothing
//! queued: arrivals are refused until the queue has drained below it.
//!
//! **Flows.**  A flow lives in its queue: it starts with the first packet
//! into a queue that has none, and it is over once the queue is empty and
//! `idle_timeout_ms` (3000, Linux sch_fq's garbage collection age) passed
//! without an arrival; the next packet then starts a new flow (fresh
//! features, the default limit in force).  A 5-tuple that hashes into a
//! queue whose flow is still active joins that flow, which is then marked
//! `shared` (the two share the queue and its limit, as in fq; with 1024
//! queues and a few flows this is rare, and the agent sees it).  The key
//! only identifies a flow, it never ends one: two sparse flows that collide
//! would otherwise restart each other's flow at every packet.  The control
//! socket lists the active flows: those with packets queued or an arrival
//! within `idle_timeout_ms`.
//!
//! **Handshake RTT** (not in paper 001; docs/network/lfq.md says why): a
//! TCP flow whose first packet here is a SYN (or SYN-ACK) gets, at its next
//! packet, `handshake_rtt_s` = the time between the two.  In the direction
//! of the initiator's data that next packet is the handshake's ACK, which
//! leaves the initiator as soon as the SYN-ACK arrives: the time is one
//! round trip from this queue to both ends and back, taken while the flow's
//! queue is empty (its base RTT, plus the other queues' delay).  From a
//! SYN-ACK (the passive side's data) it adds that side's delay before its
//! first byte.  A second SYN before the next packet makes it ambiguous
//! (Karn's rule: which SYN did the ACK answer?), and a flow that did not
//! start with a SYN (not TCP, or seen from its middle) has none; the state
//! then has no `handshake_rtt_s`.  A flow that restarts after idle with the
//! same 5-tuple and no SYN is the same connection resuming (a starved flow in
//! RTO backoff goes quiet for seconds) and keeps the estimate it had.  This
//! is how a router sees a flow's RTT without the reverse direction (passive
//! RTT measurement, e.g. pping, pairs both directions instead).
//!
//! **Features** per flow ([`super::lfq_features`]): queue size, its standard
//! deviation, the limit, incoming and outgoing rate, time since the last
//! loss, each as 10 EWMAs.  A loss is a tail drop of the flow's arrival at
//! this queue (random loss on the link happens before the queue and is not
//! seen by it).
//!
//! Per-5-tuple counters go to summary.json like fq's ([`super::flow_stats`]).
//! Links only (not WiFi queues).

use serde_json::{json, Value};

use super::codel::CodelQueue;
use super::control::{AppliedFlow, FlowSel, FlowState, QdiscState, Scalar, SetApplied, SetParams};
use super::drr::FlowQueues;
use super::fifo::Fifo;
use super::flow_stats::FlowDrop;
use super::lfq_features::{Features, WEIGHTS};
use super::{DropCause, Dropped, Qdisc};
use crate::config;
use crate::flow::{FlowKey, TCP_SYN};
use crate::packet::Packet;
use crate::time::Nanos;

/// One flow of a queue.
#[derive(Debug, Clone)]
pub struct LfqFlow {
    pub key: Option<FlowKey>,
    pub shared: bool,
    pub limit: usize,
    pub started: Nanos,
    pub packets_in: u64,
    pub packets_out: u64,
    pub drops: u64,
    pub feats: Features,
    pub handshake: Handshake,
}

/// A flow's handshake RTT as this queue sees it (module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// The flow's first packet was not a SYN: no estimate.
    Unseen,
    /// Its first packet, a SYN or SYN-ACK, arrived at this instant; waiting for the next.
    Opened(Nanos),
    /// The next packet arrived this long after it.
    Rtt(Nanos),
    /// The SYN came again before any other packet (Karn's rule): no estimate.
    Ambiguous,
}

impl Handshake {
    /// The state after a flow's first packet (`flags`: its TCP flags, None if not TCP).
    pub fn start(flags: Option<u8>, now: Nanos) -> Handshake {
        match flags {
            Some(f) if f & TCP_SYN != 0 => Handshake::Opened(now),
            _ => Handshake::Unseen,
        }
    }

    /// A flow restarted after idle: a new SYN starts a new measurement; otherwise the same 5-tuple
    /// (`resumed`: its previous state) is the same connection resuming and keeps its estimate.
    pub fn or_resumed(self, resumed: Option<Handshake>) -> Handshake {
        match (self, resumed) {
            (Handshake::Unseen, Some(prev @ Handshake::Rtt(_))) => prev,
            (h, _) => h,
        }
    }

    /// Is the next packet's arrival still to be timed?
    pub fn waiting(&self) -> bool {
        matches!(self, Handshake::Opened(_))
    }

    /// A later packet of the flow arrived.
    pub fn on_packet(&mut self, flags: Option<u8>, now: Nanos) {
        if let Handshake::Opened(t) = *self {
            *self = match flags {
                Some(f) if f & TCP_SYN != 0 => Handshake::Ambiguous,
                _ => Handshake::Rtt(now.saturating_sub(t)),
            };
        }
    }

    /// The estimate in seconds, once measured.
    pub fn rtt_s(&self) -> Option<f64> {
        match self {
            Handshake::Rtt(ns) => Some(*ns as f64 / 1e9),
            _ => None,
        }
    }
}

impl LfqFlow {
    fn new(key: Option<FlowKey>, limit: usize, now: Nanos) -> LfqFlow {
        LfqFlow {
            key,
            shared: false,
            limit,
            started: now,
            packets_in: 0,
            packets_out: 0,
            drops: 0,
            feats: Features::new(now),
            handshake: Handshake::Unseen,
        }
    }
}

pub struct Lfq {
    limit: usize,
    default_limit: usize,
    idle: Nanos,
    /// Per queue: its flow, once it has had one.
    fq: FlowQueues<Option<Box<LfqFlow>>>,
    /// Queues that have had a flow, in first-use order (the state's scan).
    touched: Vec<usize>,
    flows_started: u64,
    limit_sets: u64,
}

impl Lfq {
    /// The discipline a validated config describes; `seed` seeds the flow hash.
    pub fn from_config(c: &config::Lfq, seed: u64) -> Self {
        Self {
            limit: c.limit_pkts,
            default_limit: c.default_limit_pkts,
            idle: (c.idle_timeout_ms * 1e6).round() as Nanos,
            fq: FlowQueues::new(c.flows, c.quantum, seed),
            touched: vec![],
            flows_started: 0,
            limit_sets: 0,
        }
    }

    /// The flow of queue `idx` if it is active at `now` (module comment).
    pub fn flow(&self, idx: usize, now: Nanos) -> Option<&LfqFlow> {
        let f = self.fq.vars(idx).as_deref()?;
        let recent = f.feats.last_arrival().is_some_and(|t| now.saturating_sub(t) <= self.idle);
        (recent || self.fq.queue_len(idx) > 0).then_some(f)
    }

    /// The queue a 5-tuple hashes to.
    pub fn queue_of(&self, key: &FlowKey) -> usize {
        self.fq.bucket_of(key)
    }

    pub fn default_limit(&self) -> usize {
        self.default_limit
    }

    fn flow_state(&self, idx: usize, f: &LfqFlow, now: Nanos) -> FlowState {
        let secs = |ns: Nanos| ns as f64 / 1e9;
        let mut extra = vec![
            ("age_s", Scalar::F(secs(now.saturating_sub(f.started)))),
            ("idle_s", Scalar::F(f.feats.last_arrival().map_or(0.0, |t| secs(now.saturating_sub(t))))),
            ("since_loss_s", Scalar::F(f.feats.since_loss_s(now))),
            ("packets_in", Scalar::U(f.packets_in)),
            ("packets_out", Scalar::U(f.packets_out)),
            ("drops", Scalar::U(f.drops)),
        ];
        if let Some(rtt) = f.handshake.rtt_s() {
            extra.push(("handshake_rtt_s", Scalar::F(rtt)));
        }
        FlowState {
            queue: idx,
            key: f.key,
            shared: Some(f.shared),
            limit_pkts: Some(f.limit),
            backlog_pkts: self.fq.queue_len(idx),
            backlog_bytes: self.fq.queues()[idx].bytes(),
            extra,
            features: Some(Box::new(f.feats.snapshot())),
        }
    }
}

impl Qdisc for Lfq {
    fn enqueue(&mut self, mut pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        let (idx, key) = self.fq.classify_key(&mut pkt);
        let (total, qlen) = (self.fq.len(), self.fq.queue_len(idx));
        let (default, idle) = (self.default_limit, self.idle);
        let slot = self.fq.vars_mut(idx);
        let first_use = slot.is_none();
        let f = slot.get_or_insert_with(|| Box::new(LfqFlow::new(key, default, now)));
        let idle_over = f.feats.last_arrival().is_some_and(|t| now.saturating_sub(t) > idle);
        if first_use || (qlen == 0 && idle_over) {
            let resumed = (f.key == key).then_some(f.handshake);
            **f = LfqFlow::new(key, default, now);
            f.handshake = Handshake::start(pkt.tcp_flags(), now).or_resumed(resumed);
            self.flows_started += 1;
            if first_use {
                self.touched.push(idx);
            }
        } else {
            if f.key != key {
                f.shared = true;
            } else if f.handshake.waiting() {
                f.handshake.on_packet(pkt.tcp_flags(), now);
            }
        }
        let why = if total >= self.limit {
            Some(FlowDrop::Overflow)
        } else if qlen >= f.limit {
            Some(FlowDrop::FlowLimit)
        } else {
            None
        };
        f.feats.on_arrival(now, qlen, f.limit, why.is_some());
        f.packets_in += 1;
        if let Some(why) = why {
            f.drops += 1;
            self.fq.stats.on_drop(&pkt, why);
            return Err(Box::new(Dropped { pkt, cause: DropCause::Queue }));
        }
        self.fq.push(idx, pkt, now);
        Ok(())
    }

    fn dequeue(&mut self, now: Nanos, drops: &mut Vec<Dropped>) -> Option<Packet> {
        self.fq.dequeue(now, drops, |flow, src, now, _| {
            let p = src.pop()?;
            if let Some(f) = flow {
                f.packets_out += 1;
                f.feats.on_departure(now);
            }
            Some((p, false))
        })
    }

    fn queues(&self) -> &[Fifo] {
        self.fq.queues()
    }

    fn len(&self) -> usize {
        self.fq.len()
    }

    fn bytes(&self) -> usize {
        self.fq.bytes()
    }

    fn head_enqueued(&self) -> Option<Nanos> {
        self.fq.head_enqueued()
    }

    fn kind(&self) -> &'static str {
        "lfq"
    }

    fn stats_json(&self) -> Option<Value> {
        let params = json!({
            "flow_queues": self.fq.queues().len(),
            "default_limit_pkts": self.default_limit,
            "flows_started": self.flows_started,
            "limit_sets": self.limit_sets,
        });
        Some(self.fq.stats_json("lfq", params))
    }

    fn drain(&mut self) -> Vec<Packet> {
        self.fq.drain()
    }

    fn control_state(&self, now: Nanos, max_flows: usize) -> QdiscState {
        let mut active: Vec<usize> = self.touched.iter().copied().filter(|&i| self.flow(i, now).is_some()).collect();
        active.sort_unstable();
        let mut s = QdiscState::basic("lfq", self.len(), self.bytes());
        s.flows_active = active.len();
        s.flows = Some(
            active.iter().take(max_flows).filter_map(|&i| Some(self.flow_state(i, self.flow(i, now)?, now))).collect(),
        );
        s.weights = Some(&WEIGHTS);
        s.params = vec![
            ("default_limit_pkts", Scalar::U(self.default_limit as u64)),
            ("limit_pkts", Scalar::U(self.limit as u64)),
            ("flow_queues", Scalar::U(self.fq.queues().len() as u64)),
            ("idle_timeout_ms", Scalar::F(self.idle as f64 / 1e6)),
            ("flows_started", Scalar::U(self.flows_started)),
            ("limit_sets", Scalar::U(self.limit_sets)),
        ];
        s
    }

    /// `default_limit_pkts` and `flows` (module comment); all or nothing.
    fn control_set(&mut self, set: &SetParams, now: Nanos) -> Result<SetApplied, String> {
        set.only("lfq", &["default_limit_pkts", "flows"])?;
        let range = |field: String, v: usize| {
            if (1..=self.limit).contains(&v) {
                Ok(())
            } else {
                Err(format!("{field}: must be 1..{} (limit_pkts), got {v}", self.limit))
            }
        };
        if let Some(d) = set.default_limit_pkts {
            range("default_limit_pkts".into(), d)?;
        }
        let mut targets = Vec::with_capacity(set.flows.len());
        for (n, fl) in set.flows.iter().enumerate() {
            range(format!("flows[{n}].limit_pkts"), fl.limit_pkts)?;
            let idx = match fl.sel {
                FlowSel::Queue(i) if i < self.fq.queues().len() => i,
                FlowSel::Queue(i) => {
                    return Err(format!("flows[{n}].queue: {i} is not a queue (0..{})", self.fq.queues().len() - 1))
                }
                FlowSel::Key(k) => self.queue_of(&k),
            };
            if self.flow(idx, now).is_none() {
                let what = match fl.sel {
                    FlowSel::Key(_) => format!("flows[{n}].key: no active flow in its queue {idx}"),
                    FlowSel::Queue(_) => format!("flows[{n}].queue: no active flow in queue {idx}"),
                };
                return Err(what);
            }
            targets.push((idx, fl.limit_pkts));
        }
        let mut applied = SetApplied::default();
        if let Some(d) = set.default_limit_pkts {
            applied.params.push(("default_limit_pkts", Scalar::U(d as u64)));
            applied.params.push(("default_limit_pkts_was", Scalar::U(self.default_limit as u64)));
            self.default_limit = d;
        }
        for (idx, limit) in targets {
            let f = self.fq.vars_mut(idx).as_deref_mut().expect("checked active above");
            applied.flows.push(AppliedFlow { queue: idx, key: f.key, limit_pkts: limit, was: f.limit });
            f.limit = limit;
            self.limit_sets += 1;
        }
        Ok(applied)
    }
}
