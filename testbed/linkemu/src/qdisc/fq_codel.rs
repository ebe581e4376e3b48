//! fq_codel: Flow Queue CoDel (RFC 8290; Linux net/sched/sch_fq_codel.c).
//!
//! Packets are hashed by 5-tuple into `flows` (1024) FIFO queues, which a
//! deficit round robin with a new-flows and an old-flows list serves, a
//! `quantum` (1514 bytes) per round (see [`super::drr`]: a flow that empties
//! its queue between packets comes back as "new" and is served first, so
//! sparse flows see almost no queueing delay while backlogged flows share the
//! link byte-fairly).  Each queue runs its own CoDel ([`CodelVars`], the same
//! control law as the `codel` discipline; `target` 5 ms, `interval` 100 ms):
//! a flow that keeps a standing queue of its own gets drops (or, with `ecn`,
//! CE marks) and the others do not.  CoDel's "at most one MTU queued" rule
//! looks at the whole discipline's backlog, as in Linux.
//!
//! **Overflow.**  The arriving packet is always queued; if the discipline then
//! holds more than `limit_pkts` (10240) packets, the packet at the *head* of
//! the fattest queue (most bytes) is dropped, and that queue's CoDel count is
//! raised by one so it signals harder (Linux fq_codel_drop()).  So a flow
//! that floods the link loses its own oldest packets; the others keep theirs.
//! Linux drops a batch there (up to 64 packets or half the fat queue's bytes)
//! to amortise its scan of all 1024 queues; here exactly one packet is
//! dropped per arrival over the limit (the queue trait returns one drop per
//! enqueue, and the scan only covers queues that hold packets), i.e. Linux
//! with `drop_batch 1`.  The overflow drop is a [`DropCause::Queue`] drop of
//! an older packet, reported at the arrival instant.
//!
//! **ECN** is off by default here (Linux's fq_codel defaults to `ecn`), for
//! the same behaviour as this emulator's `codel` (off, as Linux's codel) and
//! because the testbed's TCP flows do not negotiate ECN (net.ipv4.tcp_ecn = 2
//! in the namespaces); turn it on to compare with Linux's default.
//!
//! Not modelled: `ce_threshold`, `memory_limit` (32 MB in Linux), external
//! classifiers (tc filters, skb->priority), GSO.  Per-flow statistics for
//! summary.json: [`super::flow_stats`].  Links only (not WiFi queues).

use serde_json::{json, Value};

use super::codel::{CodelParams, CodelVars};
use super::control::{QdiscState, Scalar};
use super::drr::FlowQueues;
use super::fifo::Fifo;
use super::flow_stats::FlowDrop;
use super::{DropCause, Dropped, Qdisc};
use crate::config;
use crate::packet::Packet;
use crate::time::Nanos;

pub struct FqCodel {
    prm: CodelParams,
    limit: usize,
    fq: FlowQueues<CodelVars>,
}

fn ms(v: f64) -> Nanos {
    (v * 1e6) as Nanos
}

impl FqCodel {
    /// The discipline a validated config describes; `seed` seeds the flow hash.
    pub fn from_config(c: &config::FqCodel, seed: u64) -> Self {
        Self {
            prm: CodelParams { target: ms(c.target_ms), interval: ms(c.interval_ms), ecn: c.ecn },
            limit: c.limit_pkts,
            fq: FlowQueues::new(c.flows, c.quantum, seed),
        }
    }

    /// Over the limit: drop the head of the fattest queue (module comment).
    fn drop_from_fattest(&mut self) -> Box<Dropped> {
        let idx = self.fq.fattest().expect("over the limit, so a queue holds packets");
        let pkt = self.fq.drop_head(idx, FlowDrop::Overflow).expect("the fattest queue is not empty");
        self.fq.vars_mut(idx).add_count(1);
        Box::new(Dropped { pkt, cause: DropCause::Queue })
    }

    /// Queues on the [new, old] lists (tests).
    pub fn list_lens(&self) -> [usize; 2] {
        self.fq.list_lens()
    }
}

impl Qdisc for FqCodel {
    fn enqueue(&mut self, mut pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        let idx = self.fq.classify(&mut pkt);
        self.fq.push(idx, pkt, now);
        if self.fq.len() > self.limit {
            return Err(self.drop_from_fattest());
        }
        Ok(())
    }

    fn dequeue(&mut self, now: Nanos, drops: &mut Vec<Dropped>) -> Option<Packet> {
        let prm = self.prm;
        self.fq.dequeue(now, drops, |vars, src, now, drops| {
            let marks = vars.marks();
            let p = vars.dequeue(&prm, src, now, drops)?;
            Some((p, vars.marks() > marks))
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
        "fq_codel"
    }

    fn stats_json(&self) -> Option<Value> {
        Some(self.fq.stats_json("fq_codel", json!({"flow_queues": self.fq.queues().len()})))
    }

    fn drain(&mut self) -> Vec<Packet> {
        self.fq.drain()
    }

    fn control_state(&self, _now: Nanos, max_flows: usize) -> QdiscState {
        let mut s = QdiscState::basic("fq_codel", self.len(), self.bytes());
        s.flows = Some(self.fq.flow_states(None, max_flows));
        s.flows_active = self.fq.active();
        s.params = vec![("limit_pkts", Scalar::U(self.limit as u64))];
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{build, Ecn};
    use crate::time::NS_PER_MS;

    fn pkt(sport: u16, len: usize) -> Packet {
        Packet::from_frame(&build::ipv4_udp_ports([2; 6], [4; 6], len, Ecn::NotEct, sport, 5201), 0)
    }

    fn sport(p: &Packet) -> u16 {
        p.flow_key().unwrap().sport
    }

    fn fq(limit_pkts: usize) -> FqCodel {
        FqCodel::from_config(&config::FqCodel { limit_pkts, ..Default::default() }, 1)
    }

    /// Two ports that hash to different queues with seed 1 (1024 queues).
    fn two_flows() -> (u16, u16) {
        let a = 1000;
        let qa = pkt(a, 100).flow_bucket(1, 1024);
        let b = (1001..).find(|&b| pkt(b, 100).flow_bucket(1, 1024) != qa).unwrap();
        (a, b)
    }

    #[test]
    fn a_new_flow_gets_one_quantum_of_priority() {
        let (a, b) = two_flows();
        let mut q = fq(10_240);
        let mut d = vec![];
        for _ in 0..10 {
            q.enqueue(pkt(a, 1500), 0).unwrap();
        }
        // A uses its first quantum (1514 bytes: two 1500-byte packets), then
        // moves to the old list.
        let order: Vec<u16> = (0..3).map(|_| sport(&q.dequeue(0, &mut d).unwrap())).collect();
        assert_eq!(order, vec![a, a, a]);
        assert_eq!(q.list_lens(), [0, 1]);
        // B arrives with five packets: new, so served at once for one quantum
        // (two packets).  Then both have spent their deficit; the round tops
        // them up in list order (B, then A: B joined old behind A, A was moved
        // behind B when topped up) and they alternate.
        for _ in 0..5 {
            q.enqueue(pkt(b, 1500), NS_PER_MS).unwrap();
        }
        assert_eq!(q.list_lens(), [1, 1]);
        let order: Vec<u16> = (0..6).map(|_| sport(&q.dequeue(NS_PER_MS, &mut d).unwrap())).collect();
        assert_eq!(order, vec![b, b, b, a, b, a]);
        assert!(d.is_empty());
    }

    #[test]
    fn an_emptied_new_flow_goes_through_the_old_list() {
        let (a, b) = two_flows();
        let mut q = fq(10_240);
        let mut d = vec![];
        for _ in 0..10 {
            q.enqueue(pkt(a, 1000), 0).unwrap();
        }
        q.dequeue(0, &mut d);
        q.dequeue(0, &mut d);
        q.dequeue(0, &mut d); // A now on the old list, with 28 bytes of deficit left
        q.enqueue(pkt(b, 100), 0).unwrap();
        assert_eq!(sport(&q.dequeue(0, &mut d).unwrap()), b);
        // B is empty: it moves to the old list (behind A) rather than leaving;
        // A, with deficit left, is served.
        assert_eq!(sport(&q.dequeue(0, &mut d).unwrap()), a);
        assert_eq!(q.list_lens(), [0, 2]);
        // A packet of B now joins B where it is (old list): no second priority.
        q.enqueue(pkt(b, 100), 0).unwrap();
        assert_eq!(q.list_lens(), [0, 2]);
    }

    #[test]
    fn overflow_drops_the_head_of_the_fattest_flow() {
        let (a, b) = two_flows();
        let mut q = fq(4);
        for t in 0..3 {
            q.enqueue(pkt(a, 1500), t).unwrap();
        }
        q.enqueue(pkt(b, 1500), 10).unwrap();
        // B's second packet exceeds the limit: A (4500 bytes) loses its oldest.
        let dropped = q.enqueue(pkt(b, 1500), 11).unwrap_err();
        assert_eq!((sport(&dropped.pkt), dropped.pkt.enqueued, dropped.cause), (a, 0, DropCause::Queue));
        assert_eq!(q.len(), 4);
        let s = q.stats_json().unwrap();
        assert_eq!(s["drops"]["overflow"], 1);
        let fa = s["top_flows"].as_array().unwrap().iter().find(|f| f["sport"] == a).unwrap();
        assert_eq!((fa["packets_in"].as_u64(), fa["drops"]["overflow"].as_u64()), (Some(3), Some(1)));
    }

    #[test]
    fn statistics_count_flows_and_verdicts() {
        let (a, b) = two_flows();
        let mut q = fq(10_240);
        let mut d = vec![];
        q.enqueue(pkt(a, 1000), 0).unwrap();
        q.enqueue(pkt(b, 500), 0).unwrap();
        q.enqueue(Packet::from_frame(&build::arp([4; 6]), 0), 0).unwrap(); // unparsed: queue 0
        assert_eq!(q.len(), 3);
        assert!(q.dequeue(2 * NS_PER_MS, &mut d).is_some());
        let s = q.stats_json().unwrap();
        assert_eq!(s["kind"], "fq_codel");
        assert_eq!((s["flows_seen"].as_u64(), s["max_active_flows"].as_u64()), (Some(2), Some(3)));
        assert_eq!((s["packets_in"].as_u64(), s["packets_out"].as_u64()), (Some(3), Some(1)));
        let top = s["top_flows"].as_array().unwrap();
        assert_eq!(top[0]["sport"], a);
        assert_eq!(top[0]["sojourn_us"]["mean"], 2000.0);
        assert_eq!(top[2]["key"], "unparsed");
        assert_eq!(q.drain().len(), 2);
        assert!(q.is_empty() && q.head_enqueued().is_none());
    }
}
