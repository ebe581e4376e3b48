//! fq_pie: Flow Queue PIE (Linux net/sched/sch_fq_pie.c, after RFC 8290's
//! flow queuing and RFC 8033's PIE).
//!
//! Packets are hashed by 5-tuple into `flows` (1024) FIFO queues served by
//! fq_codel's deficit round robin with its new and old lists, a `quantum`
//! (1514 bytes) per round ([`super::drr`]: a flow whose queue empties between
//! its packets comes back as new and is served first).  Each queue has its
//! own PIE controller ([`PieVars`], the code of the `pie` discipline): its
//! own drop probability, updated every `tupdate` (15 ms) from the sojourn of
//! the last packet that left *that* queue (0 if it emptied it), its own
//! burst allowance and derandomisation sum.  The drop decision is made at
//! enqueue from the arriving packet's queue: its probability, its delay, and
//! the 2-MTU rule on its own backlog, so a flow that never queues 2 MTU of
//! its own is never dropped early, however loaded the link.  With `ecn`,
//! ECN-capable packets are CE-marked instead while the queue's p <=
//! `ecn_prob_pct` (10 %), as Linux.
//!
//! **Overflow.**  Linux's rule: an arrival when all queues together hold
//! `limit_pkts` (10240) packets is tail-dropped, whatever its flow (unlike
//! fq_codel, which takes the arrival and drops the head of the fattest
//! queue); it clears that queue's derandomisation sum.  Linux's
//! `memory_limit` only counts (`overmemory`), it never drops; not modelled.
//!
//! **Updates.**  Linux's timer runs pie_calculate_probability() on every
//! queue, in rounds of at most 2048.  Here one timer event updates every
//! queue whose controller is not at rest (holding packets, or with a
//! probability, delay or burst state to decay); for a resting, empty queue
//! the update changes nothing, so skipping it is exact and keeps the cost
//! proportional to the active flows.
//!
//! Per-flow statistics ([`super::flow_stats`]): PIE drops count as `aqm`,
//! limit drops as `overflow`; CE marks are counted when made (at enqueue).
//! Not modelled: external classifiers, `dq_rate_estimator`, GSO.  Links only
//! (the WiFi queues have no timer).

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use serde_json::{json, Value};

use super::codel::CodelQueue;
use super::control::{QdiscState, Scalar};
use super::drr::FlowQueues;
use super::fifo::Fifo;
use super::flow_stats::FlowDrop;
use super::pie::{tick, PieParams, PieVars, Verdict};
use super::{DropCause, Dropped, Qdisc};
use crate::config;
use crate::packet::Packet;
use crate::time::Nanos;

/// The per-queue state: its PIE controller, and whether the timer visits it.
#[derive(Default)]
pub struct FlowPie {
    pub pie: PieVars,
    awake: bool,
}

pub struct FqPie {
    prm: PieParams,
    limit: usize,
    fq: FlowQueues<FlowPie>,
    /// Queues whose controller the timer updates (not at rest, or holding packets).
    awake: Vec<usize>,
    next_update: Nanos,
    rng: Pcg64Mcg,
    updates: u64,
    prob_max: f64,
}

impl FqPie {
    /// The discipline a validated config describes; `seed` seeds the flow hash and the drop draws.
    pub fn from_config(c: &config::FqPie, seed: u64) -> Self {
        Self {
            prm: PieParams::from_fq_config(c),
            limit: c.limit_pkts,
            fq: FlowQueues::new(c.flows, c.quantum, seed),
            awake: Vec::new(),
            next_update: 0,
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0xf9_91e0_2020_0001),
            updates: 0,
            prob_max: 0.0,
        }
    }

    /// The PIE controller of queue `idx`.
    pub fn pie(&self, idx: usize) -> &PieVars {
        &self.fq.vars(idx).pie
    }

    pub fn pie_mut(&mut self, idx: usize) -> &mut PieVars {
        self.wake(idx);
        &mut self.fq.vars_mut(idx).pie
    }

    /// Controllers the timer visits (tests).
    pub fn awake(&self) -> usize {
        self.awake.len()
    }

    fn wake(&mut self, idx: usize) {
        let v = self.fq.vars_mut(idx);
        if !v.awake {
            v.awake = true;
            self.awake.push(idx);
        }
    }

    /// One update of every awake controller; those left resting with an empty queue fall asleep.
    fn update_all(&mut self) {
        let (prm, fq) = (&self.prm, &mut self.fq);
        let mut prob_max = self.prob_max;
        self.awake.retain(|&i| {
            let (backlog, empty) = (fq.queues()[i].bytes(), fq.queue_len(i) == 0);
            let v = fq.vars_mut(i);
            v.pie.update(prm, backlog);
            prob_max = prob_max.max(v.pie.prob());
            v.awake = !(empty && v.pie.at_rest());
            v.awake
        });
        self.prob_max = prob_max;
        self.updates += 1;
    }
}

impl Qdisc for FqPie {
    fn enqueue(&mut self, mut pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        let idx = self.fq.classify(&mut pkt);
        self.wake(idx);
        if self.fq.len() >= self.limit {
            self.fq.vars_mut(idx).pie.refused();
            self.fq.stats.on_drop(&pkt, FlowDrop::Overflow);
            return Err(Box::new(Dropped { pkt, cause: DropCause::Queue }));
        }
        let backlog = self.fq.queues()[idx].bytes();
        match self.fq.vars_mut(idx).pie.verdict(&self.prm, backlog, &mut pkt, &mut self.rng) {
            Verdict::Drop => {
                self.fq.stats.on_drop(&pkt, FlowDrop::Aqm);
                return Err(Box::new(Dropped { pkt, cause: DropCause::Aqm }));
            }
            Verdict::Mark => self.fq.stats.on_mark(&pkt),
            Verdict::Enqueue => {}
        }
        self.fq.push(idx, pkt, now);
        Ok(())
    }

    fn dequeue(&mut self, now: Nanos, drops: &mut Vec<Dropped>) -> Option<Packet> {
        self.fq.dequeue(now, drops, |v, src, now, _| {
            let p = src.pop()?;
            v.pie.on_dequeue(now.saturating_sub(p.enqueued), src.flow_bytes(), now);
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

    fn next_timer(&self) -> Option<Nanos> {
        Some(self.next_update)
    }

    fn on_timer(&mut self, now: Nanos) {
        if tick(&mut self.next_update, self.prm.tupdate, now) {
            self.update_all();
        }
    }

    fn kind(&self) -> &'static str {
        "fq_pie"
    }

    fn stats_json(&self) -> Option<Value> {
        let extra = json!({"flow_queues": self.fq.queues().len(), "updates": self.updates, "prob_max": self.prob_max});
        Some(self.fq.stats_json("fq_pie", extra))
    }

    fn drain(&mut self) -> Vec<Packet> {
        self.fq.drain()
    }

    fn control_state(&self, _now: Nanos, max_flows: usize) -> QdiscState {
        let mut flows = self.fq.flow_states(None, max_flows);
        for f in &mut flows {
            let v = &self.fq.vars(f.queue).pie;
            f.extra = vec![
                ("prob", Scalar::F(v.prob())),
                ("qdelay_ms", Scalar::F(v.qdelay() as f64 / 1e6)),
                ("burst_allowance_ms", Scalar::F(v.burst_left(&self.prm) as f64 / 1e6)),
            ];
        }
        let p = &self.prm;
        let mut s = QdiscState::basic("fq_pie", self.len(), self.bytes());
        s.flows = Some(flows);
        s.flows_active = self.fq.active();
        s.params = vec![
            ("limit_pkts", Scalar::U(self.limit as u64)),
            ("flow_queues", Scalar::U(self.fq.queues().len() as u64)),
            ("target_ms", Scalar::F(p.target as f64 / 1e6)),
            ("tupdate_ms", Scalar::F(p.tupdate as f64 / 1e6)),
            ("alpha", Scalar::F(p.alpha)),
            ("beta", Scalar::F(p.beta)),
            ("ecn", Scalar::B(p.ecn)),
            ("ecn_prob_pct", Scalar::F(p.ecn_prob * 100.0)),
            ("bytemode", Scalar::B(p.bytemode)),
            ("updates", Scalar::U(self.updates)),
            ("prob_max", Scalar::F(self.prob_max)),
        ];
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{build, Ecn};
    use crate::time::NS_PER_MS;

    fn pkt(sport: u16, ecn: Ecn) -> Packet {
        Packet::from_frame(&build::ipv4_udp_ports([2; 6], [4; 6], 1500, ecn, sport, 5201), 0)
    }

    fn fq_pie(json: &str) -> FqPie {
        FqPie::from_config(&serde_json::from_str(json).unwrap(), 1)
    }

    /// Two ports in different queues (seed 1, 1024 queues) and their queues.
    fn two_flows() -> [(u16, usize); 2] {
        let a = 3000;
        let qa = pkt(a, Ecn::NotEct).flow_bucket(1, 1024);
        let b = (3001..).find(|&b| pkt(b, Ecn::NotEct).flow_bucket(1, 1024) != qa).unwrap();
        [(a, qa), (b, pkt(b, Ecn::NotEct).flow_bucket(1, 1024))]
    }

    #[test]
    fn the_limit_tail_drops_the_arrival_not_the_fattest_head() {
        let [(a, qa), (b, _)] = two_flows();
        let mut q = fq_pie(r#"{"limit_pkts": 4}"#);
        for t in 0..3 {
            q.enqueue(pkt(a, Ecn::NotEct), t).unwrap();
        }
        q.enqueue(pkt(b, Ecn::NotEct), 10).unwrap();
        // fq_codel would keep B's packet and drop A's oldest; Linux fq_pie refuses B's.
        let d = q.enqueue(pkt(b, Ecn::NotEct), 11).unwrap_err();
        assert_eq!((d.pkt.flow_key().unwrap().sport, d.pkt.enqueued, d.cause), (b, 0, DropCause::Queue));
        assert_eq!((q.len(), q.queues()[qa].len()), (4, 3));
        let s = q.stats_json().unwrap();
        assert_eq!((s["kind"].as_str(), s["drops"]["overflow"].as_u64()), (Some("fq_pie"), Some(1)));
        let fb = s["top_flows"].as_array().unwrap().iter().find(|f| f["sport"] == b).unwrap();
        assert_eq!(fb["drops"]["overflow"], 1);
    }

    #[test]
    fn each_queue_has_its_own_probability() {
        // A keeps a standing queue (40 packets, each out 1.2 ms apart: its head
        // waits ~48 ms); B sends one packet per 10 ms that leaves at once.
        let [(a, qa), (b, qb)] = two_flows();
        let mut q = fq_pie("{}");
        let mut d = vec![];
        let step = 1_200_000;
        let mut t = 0;
        while t < 3_000 * NS_PER_MS {
            for _ in 0..2 {
                if q.queues()[qa].len() < 40 {
                    let _ = q.enqueue(pkt(a, Ecn::NotEct), t); // PIE may refuse it
                }
            }
            if t % (10 * NS_PER_MS) < step {
                q.enqueue(pkt(b, Ecn::NotEct), t).unwrap();
            }
            if q.next_timer().unwrap() <= t {
                q.on_timer(t);
            }
            q.dequeue(t, &mut d);
            t += step;
        }
        assert!(d.is_empty());
        // A's p climbs (qdelay ~48 ms > 15 ms); B's qdelay is 0 or 1.2 ms: its p stays 0.
        assert!(q.pie(qa).prob() > 0.05, "A: {}", q.pie(qa).prob());
        assert_eq!(q.pie(qb).prob(), 0.0);
        assert!(q.pie(qa).qdelay() > 40 * NS_PER_MS);
        // The state lists both (B with one packet queued) with their
        // probabilities; max_flows caps the list.
        q.enqueue(pkt(b, Ecn::NotEct), t).unwrap();
        let s = q.control_state(t, 1024);
        assert_eq!(s.flows_active, 2);
        let flows = s.flows.unwrap();
        let prob = |i: usize| flows.iter().find(|f| f.queue == i).map(|f| f.extra[0]);
        assert_eq!(prob(qa), Some(("prob", Scalar::F(q.pie(qa).prob()))));
        assert_eq!(prob(qb), Some(("prob", Scalar::F(0.0))));
        assert_eq!(q.control_state(t, 1).flows.unwrap().len(), 1);
        // Once A stops and drains, its p decays to 0 and both controllers fall asleep.
        while q.dequeue(t, &mut d).is_some() {}
        for _ in 0..2_000 {
            t += 15 * NS_PER_MS;
            q.on_timer(t);
        }
        assert_eq!((q.pie(qa).prob(), q.awake()), (0.0, 0));
    }

    #[test]
    fn ecn_marks_are_counted_per_flow_at_enqueue() {
        let [(a, qa), _] = two_flows();
        let mut q = fq_pie(r#"{"ecn": true, "max_burst_ms": 0}"#);
        // A standing queue of 10 packets, one in and one out per ms (each
        // waits 10 ms > target/2), p fixed at 5 % (<= 10 %): hits are marks.
        for i in 0..10 {
            q.enqueue(pkt(a, Ecn::Ect0), i * NS_PER_MS).unwrap();
        }
        q.pie_mut(qa).set_prob(0.05);
        let mut marks = 0;
        for i in 10..2_010 {
            q.enqueue(pkt(a, Ecn::Ect0), i * NS_PER_MS).unwrap();
            marks += q.dequeue(i * NS_PER_MS, &mut vec![]).unwrap().marked as u64;
        }
        let s = q.stats_json().unwrap();
        assert_eq!(s["drops"]["aqm"], 0);
        assert!(marks > 20, "{marks}");
        // Counted when made: the ten packets still queued may carry marks too.
        let counted = s["ecn_marks"].as_u64().unwrap();
        assert!(counted >= marks && counted <= marks + 10, "{counted} vs {marks}");
    }
}
