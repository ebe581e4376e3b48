//! Queue disciplines: the pluggable queue in front of each bottleneck.
//!
//! A link ([`crate::link`]) hands every packet that survived random loss to
//! [`Qdisc::enqueue`] and, whenever its transmitter is free, asks
//! [`Qdisc::dequeue`] for the next packet to put on the wire.  Both calls carry
//! the current (virtual or real) time, so a discipline can timestamp packets on
//! the way in and compute their sojourn on the way out, which is all CoDel,
//! PIE and DualPI2 (RFC 9332) need.
//!
//! Verdicts:
//! * `enqueue` may refuse a packet ([`DropCause::Queue`] for overflow, or an
//!   AQM verdict for disciplines that decide at enqueue, as PIE does), or
//!   take it and give up an older one instead (fq_codel drops the head of
//!   its fattest flow);
//! * `dequeue` may drop any number of packets before it returns one (reported
//!   through the `drops` vector, as CoDel does), and may mark the one it
//!   returns CE with [`Packet::mark_ce`] (which refuses Not-ECT packets; the
//!   discipline then drops instead).  Classifiers read [`Packet::ecn`]
//!   (DualPI2 puts ECT(1) and CE into its L4S queue).
//! * Disciplines with a periodic control loop (DualPI2 updates its PI
//!   controller every 16 ms, PIE and fq_pie their drop probabilities every
//!   15 ms) report the instant of their next update with
//!   `next_timer` and get `on_timer` at that instant; the link folds it into
//!   its own event schedule.
//!
//! Every discipline keeps its packets in [`fifo::Fifo`]s (enqueue timestamps,
//! byte count, tail drop at a packet limit) and shows them through
//! [`Qdisc::queues`], from which the trait derives `len`, `bytes` and
//! `head_enqueued`.
//!
//! Adding a discipline: implement the trait in a new file, add a variant to
//! [`crate::config::QdiscConfig`] and a line to [`build`].
//!
//! Fair-queuing disciplines (fq_codel, fq, lfq, fq_pie) keep one FIFO per
//! flow queue ([`drr::FlowQueues`], shared by all), override `len`, `bytes` and
//! `head_enqueued` (which would otherwise walk all 1024 queues), tag each
//! packet with its flow ([`Packet::flow`]) and report per-flow counters
//! through `stats_json` ([`flow_stats`]).
//!
//! lfq is fq with a per-flow limit an agent changes at run time and the
//! per-flow features of paper 001 ([`lfq`], [`lfq_features`]).
//!
//! PIE (RFC 8033) decides at enqueue; its controller ([`pie::PieVars`]) runs
//! once in `pie` and once per flow queue in `fq_pie` ([`fq_pie`]); their
//! virtual-time tests are in `pie_tests.rs`.
//!
//! The control socket ([`crate::control`]) reads a discipline through
//! `control_state` and changes it through `control_set` ([`control`]: plain
//! data, no JSON on the forwarding thread); disciplines without run-time
//! parameters keep the defaults (kind and backlog; every set refused).
//!
//! VDQ-CSAQM (paper 004) marks each packet with a value at enqueue
//! ([`pv_marker`]: per-flow rate and policy) and drops or marks by
//! congestion threshold values computed from two virtual queues
//! ([`vdq_vq`]) over an L4S and a Classic FIFO ([`vdq_csaqm`]); its
//! virtual-time tests are in `vdq_tests.rs` (their harness: `vdq_sim.rs`).
//!
//! fq_dualpi2 (paper 000) hashes flows into pairs of an L4S and a Classic
//! FIFO ([`drr::FlowQueues`] with two FIFOs per slot), each pair coupled
//! through its own PIE controller ([`pie::PieVars`]) and DualPI2's WRR
//! credit ([`dualpi2::WrrCredit`]); its virtual-time tests are in
//! `fq_dualpi2_tests.rs`.
//!
//! Dual-queue disciplines (DualPI2, VDQ-CSAQM, fq_dualpi2) tag each packet with its class
//! ([`Packet::class`]) at enqueue, so the statistics can be kept per class,
//! and report their per-class lengths and base probability (`class_lens`,
//! `base_prob`) for intervals.csv and their counters (`stats_json`) for
//! summary.json.

pub mod codel;
pub mod control;
pub mod drr;
pub mod dualpi2;
pub mod fifo;
pub mod flow_stats;
pub mod fq;
pub mod fq_codel;
pub mod fq_dualpi2;
#[cfg(test)]
mod fq_dualpi2_tests;
pub mod fq_pie;
#[cfg(test)]
mod fq_tests;
pub mod lfq;
pub mod lfq_features;
#[cfg(test)]
mod lfq_tests;
pub mod pfifo;
pub mod pie;
#[cfg(test)]
mod pie_tests;
pub mod pv_marker;
pub mod vdq_csaqm;
#[cfg(test)]
mod vdq_sim;
pub mod vdq_steady;
#[cfg(test)]
mod vdq_tests;
pub mod vdq_vq;

use self::control::{QdiscState, SetApplied, SetParams};
use self::fifo::Fifo;
use crate::config::QdiscConfig;
use crate::packet::Packet;
use crate::time::Nanos;

/// Why a packet was dropped (the emulator's drop taxonomy; see `stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropCause {
    /// Queue full (tail drop at enqueue).
    Queue,
    /// Dropped by an AQM's control law (CoDel, later DualPI2).
    Aqm,
    /// Random loss model of the link.
    Loss,
    /// Frame larger than the MTU (a GSO super-packet: offloads not disabled).
    Oversize,
    /// A WiFi station or AP queue was full.
    WifiQueue,
    /// A WiFi aggregate exceeded the retry limit after collisions.
    WifiRetry,
    /// The kernel refused the frame on the way out (send() failed).
    TxError,
}

impl DropCause {
    pub const ALL: [DropCause; 7] = [
        DropCause::Queue,
        DropCause::Aqm,
        DropCause::Loss,
        DropCause::Oversize,
        DropCause::WifiQueue,
        DropCause::WifiRetry,
        DropCause::TxError,
    ];
    pub fn name(self) -> &'static str {
        match self {
            DropCause::Queue => "queue",
            DropCause::Aqm => "aqm",
            DropCause::Loss => "loss",
            DropCause::Oversize => "oversize",
            DropCause::WifiQueue => "wifi_queue",
            DropCause::WifiRetry => "wifi_retry",
            DropCause::TxError => "tx_error",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A packet the discipline gave up on, and why.
#[derive(Debug)]
pub struct Dropped {
    pub pkt: Packet,
    pub cause: DropCause,
}

pub trait Qdisc: Send {
    /// Offer `pkt` at `now`.  The discipline owns it afterwards, or hands it
    /// back inside `Err` with the reason it refused it; a discipline that
    /// drops from the head (fq_codel) keeps `pkt` and hands back the older
    /// packet it dropped to make room.
    fn enqueue(&mut self, pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>>;

    /// The next packet to transmit at `now`, if any.  Packets the discipline
    /// drops on the way are pushed to `drops`.  The returned packet may have
    /// been marked CE ([`Packet::marked`]).  None means the queue is empty
    /// (a discipline that holds packets back must use `next_timer`).
    fn dequeue(&mut self, now: Nanos, drops: &mut Vec<Dropped>) -> Option<Packet>;

    /// The FIFOs holding the queued packets (one, or one per class).
    fn queues(&self) -> &[Fifo];

    /// Packets currently queued.
    fn len(&self) -> usize {
        self.queues().iter().map(Fifo::len).sum()
    }

    /// Bytes currently queued (IP lengths).
    fn bytes(&self) -> usize {
        self.queues().iter().map(Fifo::bytes).sum()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Enqueue instant of the packet that has waited longest (WiFi
    /// aggregation uses it to decide when a station stops waiting for more).
    fn head_enqueued(&self) -> Option<Nanos> {
        self.queues().iter().filter_map(Fifo::head_enqueued).min()
    }

    /// Instant of the next internal update (periodic controllers), if any.
    fn next_timer(&self) -> Option<Nanos> {
        None
    }

    /// Called at (or after) the instant `next_timer` announced; must move
    /// `next_timer` past `now`.
    fn on_timer(&mut self, _now: Nanos) {}

    /// Short name for logs and the summary ("pfifo", "codel", "dualpi2", "fq_codel", "fq", "lfq", "pie", "fq_pie",
    /// "vdq_csaqm", "fq_dualpi2").
    fn kind(&self) -> &'static str;

    /// Packets per class [Classic, L4S] of a dual-queue discipline (None: single queue).
    fn class_lens(&self) -> Option<[usize; 2]> {
        None
    }

    /// Base drop/mark probability of a PI controller (DualPI2's p', PIE's p), if
    /// any; intervals.csv's `p_prime`.
    fn base_prob(&self) -> Option<f64> {
        None
    }

    /// The discipline's own counters for summary.json, if it keeps any.
    fn stats_json(&self) -> Option<serde_json::Value> {
        None
    }

    /// The control socket's `state` at `now` (listing at most `max_flows`
    /// flows); the default: kind and backlog.  Must be cheap: it runs on the
    /// forwarding thread.
    fn control_state(&self, _now: Nanos, _max_flows: usize) -> QdiscState {
        QdiscState::basic(self.kind(), self.len(), self.bytes())
    }

    /// Apply the control socket's `set` at `now`, all or nothing; Err: one
    /// line naming the field at fault.  The default refuses everything.
    fn control_set(&mut self, set: &SetParams, _now: Nanos) -> Result<SetApplied, String> {
        let field = set.present().first().copied().unwrap_or("set");
        Err(format!(
            "{field}: {} has no parameters settable at run time (lfq: default_limit_pkts, flows; dualpi2: base_prob, prob_scale, k, hold_ms)",
            self.kind()
        ))
    }

    /// Take every queued packet without AQM verdicts (shutdown accounting).
    fn drain(&mut self) -> Vec<Packet> {
        let mut v = Vec::new();
        let mut scratch = Vec::new();
        while !self.is_empty() {
            match self.dequeue(Nanos::MAX / 2, &mut scratch) {
                Some(p) => v.push(p),
                None => break,
            }
        }
        v.extend(scratch.into_iter().map(|d| d.pkt));
        v
    }
}

/// Instantiate the discipline a config describes; `seed` feeds its random
/// stream (DualPI2's and PIE's drop/mark draws) and its flow hash (fq_codel,
/// fq, lfq, fq_pie).
pub fn build(cfg: &QdiscConfig, seed: u64) -> Box<dyn Qdisc> {
    match cfg {
        QdiscConfig::Pfifo(p) => Box::new(pfifo::Pfifo::new(p.limit_pkts)),
        QdiscConfig::Codel(c) => Box::new(codel::Codel::new(
            (c.target_ms * 1e6) as Nanos,
            (c.interval_ms * 1e6) as Nanos,
            c.limit_pkts,
            c.ecn,
        )),
        QdiscConfig::DualPi2(d) => Box::new(dualpi2::DualPi2::new(dualpi2::Params::from_config(d), seed)),
        QdiscConfig::FqCodel(f) => Box::new(fq_codel::FqCodel::from_config(f, seed)),
        QdiscConfig::Fq(f) => Box::new(fq::Fq::from_config(f, seed)),
        QdiscConfig::Lfq(f) => Box::new(lfq::Lfq::from_config(f, seed)),
        QdiscConfig::Pie(p) => Box::new(pie::Pie::from_config(p, seed)),
        QdiscConfig::FqPie(f) => Box::new(fq_pie::FqPie::from_config(f, seed)),
        QdiscConfig::VdqCsaqm(v) => Box::new(vdq_csaqm::VdqCsaqm::from_config(v, seed)),
        QdiscConfig::FqDualPi2(f) => Box::new(fq_dualpi2::FqDualPi2::from_config(f, seed)),
    }
}
