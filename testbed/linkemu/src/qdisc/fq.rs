//! fq: per-flow fair queuing with a static per-flow limit and no AQM.
//!
//! The baseline the fair-queuing papers compare fq_codel with: the same
//! per-flow queues and scheduler as fq_codel ([`super::drr`]: 5-tuple hash
//! into `flows` (1024) queues, deficit round robin with a `quantum` of 1514
//! bytes, new flows served first once), but each queue is a plain FIFO that
//! tail-drops an arriving packet once it holds `flow_limit_pkts` packets (100,
//! Linux sch_fq's flow_limit; the papers also use 1000).  On top, the whole
//! discipline holds at most `limit_pkts` (10240) packets; an arrival beyond
//! that is tail-dropped too (Linux sch_fq's plimit check, which comes first).
//! Nothing is dropped or marked at dequeue, so a flow that keeps its queue
//! full sits at `flow_limit_pkts` of queueing delay (its share of the link)
//! while the other flows keep theirs short.
//!
//! Unlike Linux sch_fq (one queue per socket, found in a tree; pacing;
//! 2-MTU quantum and 10-MTU initial quantum) flows are hashed into a fixed
//! number of queues as in fq_codel, so two flows may share a queue and its
//! limit (summary.json's `shared_queues` counts such queues); no pacing.
//! Both drops are [`DropCause::Queue`] drops of the arriving packet, told
//! apart in the per-flow statistics (`flow_limit` vs `overflow`,
//! [`super::flow_stats`]).  Links only (not WiFi queues).

use serde_json::{json, Value};

use super::codel::CodelQueue;
use super::control::{QdiscState, Scalar};
use super::drr::FlowQueues;
use super::fifo::Fifo;
use super::flow_stats::FlowDrop;
use super::{DropCause, Dropped, Qdisc};
use crate::config;
use crate::packet::Packet;
use crate::time::Nanos;

pub struct Fq {
    limit: usize,
    flow_limit: usize,
    fq: FlowQueues<()>,
}

impl Fq {
    /// The discipline a validated config describes; `seed` seeds the flow hash.
    pub fn from_config(c: &config::Fq, seed: u64) -> Self {
        Self { limit: c.limit_pkts, flow_limit: c.flow_limit_pkts, fq: FlowQueues::new(c.flows, c.quantum, seed) }
    }

    /// Which limit, if any, refuses a packet for queue `idx`.
    fn over_limit(&self, idx: usize) -> Option<FlowDrop> {
        if self.fq.len() >= self.limit {
            Some(FlowDrop::Overflow)
        } else if self.fq.queue_len(idx) >= self.flow_limit {
            Some(FlowDrop::FlowLimit)
        } else {
            None
        }
    }
}

impl Qdisc for Fq {
    fn enqueue(&mut self, mut pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        let idx = self.fq.classify(&mut pkt);
        if let Some(why) = self.over_limit(idx) {
            self.fq.stats.on_drop(&pkt, why);
            return Err(Box::new(Dropped { pkt, cause: DropCause::Queue }));
        }
        self.fq.push(idx, pkt, now);
        Ok(())
    }

    fn dequeue(&mut self, now: Nanos, drops: &mut Vec<Dropped>) -> Option<Packet> {
        self.fq.dequeue(now, drops, |_, src, _, _| src.pop().map(|p| (p, false)))
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
        "fq"
    }

    fn stats_json(&self) -> Option<Value> {
        Some(self.fq.stats_json("fq", json!({"flow_queues": self.fq.queues().len()})))
    }

    fn drain(&mut self) -> Vec<Packet> {
        self.fq.drain()
    }

    fn control_state(&self, _now: Nanos, max_flows: usize) -> QdiscState {
        let mut s = QdiscState::basic("fq", self.len(), self.bytes());
        s.flows = Some(self.fq.flow_states(Some(self.flow_limit), max_flows));
        s.flows_active = self.fq.active();
        s.params =
            vec![("flow_limit_pkts", Scalar::U(self.flow_limit as u64)), ("limit_pkts", Scalar::U(self.limit as u64))];
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{build, Ecn};

    fn pkt(sport: u16) -> Packet {
        Packet::from_frame(&build::ipv4_udp_ports([2; 6], [4; 6], 1500, Ecn::NotEct, sport, 5201), 0)
    }

    /// Three ports in three different queues (seed 1, 1024 queues).
    fn three_flows() -> [u16; 3] {
        let mut ports: Vec<u16> = vec![];
        let mut used = vec![];
        for p in 2000.. {
            let b = pkt(p).flow_bucket(1, 1024);
            if !used.contains(&b) {
                used.push(b);
                ports.push(p);
            }
            if ports.len() == 3 {
                break;
            }
        }
        [ports[0], ports[1], ports[2]]
    }

    fn fq(flow_limit_pkts: usize, limit_pkts: usize) -> Fq {
        Fq::from_config(&config::Fq { flow_limit_pkts, limit_pkts, ..Default::default() }, 1)
    }

    #[test]
    fn the_per_flow_limit_tail_drops_only_the_flow_over_it() {
        // A offers 150 packets to a 100-packet flow limit, B 60: A loses its
        // last 50 arrivals, B nothing.
        let [a, b, _] = three_flows();
        let mut q = fq(100, 10_240);
        let mut refused = vec![];
        for i in 0..150u64 {
            if let Err(d) = q.enqueue(pkt(a), i) {
                refused.push(d.pkt.enqueued);
            }
            if i < 60 {
                assert!(q.enqueue(pkt(b), i).is_ok());
            }
        }
        assert_eq!(refused.len(), 50);
        assert_eq!(q.len(), 160);
        let s = q.stats_json().unwrap();
        assert_eq!((s["drops"]["flow_limit"].as_u64(), s["drops"]["overflow"].as_u64()), (Some(50), Some(0)));
        let flow = |p: u16| s["top_flows"].as_array().unwrap().iter().find(|f| f["sport"] == p).unwrap().clone();
        assert_eq!(flow(a)["drops"]["flow_limit"], 50);
        assert_eq!(flow(b)["drops"]["flow_limit"], 0);
        // The queue that was full takes packets again once served.
        let mut d = vec![];
        while q.dequeue(0, &mut d).is_some_and(|p| p.flow_key().unwrap().sport != a) {}
        assert!(q.enqueue(pkt(a), 200).is_ok());
        assert!(d.is_empty());
    }

    #[test]
    fn the_overall_limit_refuses_any_flow() {
        let [a, b, c] = three_flows();
        let mut q = fq(100, 120);
        for _ in 0..100 {
            q.enqueue(pkt(a), 0).unwrap();
        }
        for _ in 0..20 {
            q.enqueue(pkt(b), 0).unwrap();
        }
        let d = q.enqueue(pkt(c), 0).unwrap_err();
        assert_eq!(d.cause, DropCause::Queue);
        assert_eq!(q.stats_json().unwrap()["drops"]["overflow"], 1);
        // Served in turns of a quantum: 1514 bytes, spent by the second
        // 1500-byte packet (a deficit of 14 bytes still allows one more).
        let mut drops = vec![];
        let order: Vec<u16> = (0..6).map(|_| q.dequeue(0, &mut drops).unwrap().flow_key().unwrap().sport).collect();
        assert_eq!(order, vec![a, a, b, b, a, b]);
    }
}
