//! CoDel: Controlled Delay AQM (RFC 8289; Linux include/net/codel_impl.h).
//!
//! CoDel watches the sojourn time of the packets it dequeues.  While sojourn
//! stays below `target` (5 ms) the queue is "good".  Once every packet
//! dequeued for a whole `interval` (100 ms, about a worst-case RTT) has waited
//! longer than `target`, the queue is a standing queue: CoDel enters the
//! dropping state, drops (or, with `ecn`, CE-marks an ECN-capable packet)
//! one packet, and schedules the next drop after interval/sqrt(count), so the
//! drop rate rises until the sojourn falls below target again.  Re-entering
//! the dropping state soon after leaving it resumes near the old count
//! instead of restarting at 1 (the "delta" rule).  A queue holding at most
//! one MTU of bytes is never considered standing.
//!
//! This follows the Linux codel_dequeue() state machine (count is increased
//! before the control law is applied in the dropping loop), with an exact
//! square root instead of Linux's Newton iteration.  Tail drop at
//! `limit_pkts` packets protects memory, as in Linux's `codel` qdisc.
//!
//! The control law lives in [`CodelVars`] (Linux's struct codel_vars: the
//! state of one managed queue) and works on anything that implements
//! [`CodelQueue`], so fq_codel runs one CoDel per flow queue with the same
//! code.  The "at most one MTU" rule looks at [`CodelQueue::backlog`]: the
//! FIFO's bytes for [`Codel`], the whole discipline's bytes for fq_codel
//! (Linux passes `sch->qstats.backlog` there too).

use super::fifo::Fifo;
use super::{DropCause, Dropped, Qdisc};
use crate::packet::Packet;
use crate::time::Nanos;

/// The MAXPACKET of RFC 8289: a queue holding no more than this is never "standing".
pub const MTU_BYTES: usize = 1500;

/// CoDel's parameters, shared by every queue a discipline manages.
#[derive(Debug, Clone, Copy)]
pub struct CodelParams {
    pub target: Nanos,
    pub interval: Nanos,
    /// CE-mark ECN-capable packets instead of dropping them.
    pub ecn: bool,
}

/// The queue CoDel dequeues from.
pub trait CodelQueue {
    /// Take the head packet.
    fn pop(&mut self) -> Option<Packet>;
    /// Bytes still queued (after the pop) for the one-MTU rule.
    fn backlog(&self) -> usize;
}

impl CodelQueue for Fifo {
    fn pop(&mut self) -> Option<Packet> {
        Fifo::pop(self)
    }
    fn backlog(&self) -> usize {
        self.bytes()
    }
}

/// Control state of one CoDel-managed queue (Linux struct codel_vars).
#[derive(Debug, Clone, Default)]
pub struct CodelVars {
    first_above_time: Nanos,
    drop_next: Nanos,
    count: u32,
    lastcount: u32,
    dropping: bool,
    /// CE marks made so far (statistics).
    marks: u64,
}

impl CodelVars {
    fn control_law(&self, prm: &CodelParams, t: Nanos) -> Nanos {
        t + (prm.interval as f64 / (self.count.max(1) as f64).sqrt()) as Nanos
    }

    /// RFC 8289's ok_to_drop for the packet just dequeued (`backlog`: what is left).
    fn should_drop(&mut self, prm: &CodelParams, pkt: Option<&Packet>, backlog: usize, now: Nanos) -> bool {
        let Some(p) = pkt else {
            self.first_above_time = 0;
            return false;
        };
        let sojourn = now.saturating_sub(p.enqueued);
        if sojourn < prm.target || backlog <= MTU_BYTES {
            self.first_above_time = 0;
            return false;
        }
        if self.first_above_time == 0 {
            self.first_above_time = now + prm.interval;
            false
        } else {
            now >= self.first_above_time
        }
    }

    fn mark(&mut self, prm: &CodelParams, p: &mut Packet) -> bool {
        let marked = prm.ecn && p.mark_ce();
        self.marks += marked as u64;
        marked
    }

    /// Linux codel_dequeue(): the next packet of `q` at `now`, after the
    /// drops the control law calls for (pushed to `drops`); the packet may
    /// come back CE-marked instead of dropped.
    pub fn dequeue<Q: CodelQueue>(
        &mut self,
        prm: &CodelParams,
        q: &mut Q,
        now: Nanos,
        drops: &mut Vec<Dropped>,
    ) -> Option<Packet> {
        let mut pkt = q.pop();
        let drop = self.should_drop(prm, pkt.as_ref(), q.backlog(), now);
        let Some(mut p) = pkt.take() else {
            self.dropping = false;
            return None;
        };
        if self.dropping {
            if !drop {
                self.dropping = false;
            } else {
                while self.dropping && now >= self.drop_next {
                    self.count += 1;
                    self.drop_next = self.control_law(prm, self.drop_next);
                    if self.mark(prm, &mut p) {
                        return Some(p);
                    }
                    drops.push(Dropped { pkt: p, cause: DropCause::Aqm });
                    match q.pop() {
                        Some(next) => {
                            if !self.should_drop(prm, Some(&next), q.backlog(), now) {
                                self.dropping = false;
                            }
                            p = next;
                        }
                        None => {
                            self.should_drop(prm, None, 0, now);
                            self.dropping = false;
                            return None;
                        }
                    }
                }
            }
        } else if drop {
            if !self.mark(prm, &mut p) {
                drops.push(Dropped { pkt: p, cause: DropCause::Aqm });
                match q.pop() {
                    Some(next) => {
                        // Updates first_above_time, as Linux does.
                        self.should_drop(prm, Some(&next), q.backlog(), now);
                        p = next;
                    }
                    None => {
                        self.should_drop(prm, None, 0, now);
                        // Enter the dropping state anyway, as Linux does; the
                        // next dequeue of an empty queue leaves it.
                        self.enter_dropping(prm, now);
                        return None;
                    }
                }
            }
            self.enter_dropping(prm, now);
        }
        Some(p)
    }

    fn enter_dropping(&mut self, prm: &CodelParams, now: Nanos) {
        self.dropping = true;
        let delta = self.count.wrapping_sub(self.lastcount);
        self.count = if delta > 1 && now.saturating_sub(self.drop_next) < 16 * prm.interval { delta } else { 1 };
        self.lastcount = self.count;
        self.drop_next = self.control_law(prm, now);
    }

    /// Packets dropped outside the control law (fq_codel's overflow drops)
    /// also raise the drop rate, as Linux's fq_codel_drop() does.
    pub fn add_count(&mut self, n: u32) {
        self.count = self.count.saturating_add(n);
    }

    /// Whether this queue is in CoDel's dropping state.
    pub fn dropping(&self) -> bool {
        self.dropping
    }

    /// CE marks made so far.
    pub fn marks(&self) -> u64 {
        self.marks
    }
}

/// The `codel` discipline: one FIFO under CoDel, tail drop at the limit.
pub struct Codel {
    prm: CodelParams,
    limit: usize,
    q: Fifo,
    vars: CodelVars,
}

impl Codel {
    pub fn new(target: Nanos, interval: Nanos, limit_pkts: usize, ecn: bool) -> Self {
        Self {
            prm: CodelParams { target, interval, ecn },
            limit: limit_pkts,
            q: Fifo::default(),
            vars: CodelVars::default(),
        }
    }

    /// Whether CoDel is in its dropping state (tests, stats).
    pub fn dropping(&self) -> bool {
        self.vars.dropping()
    }
}

impl Qdisc for Codel {
    fn enqueue(&mut self, pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        self.q.push_limited(pkt, now, self.limit)
    }

    fn dequeue(&mut self, now: Nanos, drops: &mut Vec<Dropped>) -> Option<Packet> {
        self.vars.dequeue(&self.prm, &mut self.q, now, drops)
    }

    fn queues(&self) -> &[Fifo] {
        std::slice::from_ref(&self.q)
    }

    fn kind(&self) -> &'static str {
        "codel"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{build, Ecn};
    use crate::time::NS_PER_MS;

    fn pkt(ecn: Ecn) -> Packet {
        Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], 1500, ecn), 0)
    }

    /// Feed packets every `gap` and serve one every `service`: returns (drops, marks, served).
    fn run(ecn: bool, pkt_ecn: Ecn, gap: Nanos, service: Nanos, dur: Nanos) -> (usize, usize, usize, Codel) {
        let mut q = Codel::new(5 * NS_PER_MS, 100 * NS_PER_MS, 10_000, ecn);
        let (mut drops, mut marks, mut served) = (0, 0, 0);
        let mut next_in = 0;
        let mut next_out = 0;
        let mut d = vec![];
        while next_in < dur || next_out < dur {
            if next_in <= next_out {
                q.enqueue(pkt(pkt_ecn), next_in).unwrap();
                next_in += gap;
            } else {
                if let Some(p) = q.dequeue(next_out, &mut d) {
                    served += 1;
                    marks += p.marked as usize;
                }
                drops += d.len();
                assert!(d.iter().all(|x| x.cause == DropCause::Aqm));
                d.clear();
                next_out += service;
            }
        }
        (drops, marks, served, q)
    }

    #[test]
    fn no_drops_while_sojourn_below_target() {
        // Arrivals slower than service: the queue never builds.
        let (drops, marks, _, _) = run(false, Ecn::NotEct, 2 * NS_PER_MS, NS_PER_MS, 2_000 * NS_PER_MS);
        assert_eq!((drops, marks), (0, 0));
    }

    #[test]
    fn drops_a_standing_queue() {
        // 5% overload (1050 packets/s into 1000/s) for 10 s, unresponsive: a
        // pfifo would hold 500 packets (0.5 s) at the end; CoDel's drop rate
        // converges on the excess and keeps the queue short.
        let (drops, marks, served, q) = run(false, Ecn::NotEct, 952_381, NS_PER_MS, 10_000 * NS_PER_MS);
        assert!(drops > 300 && drops < 520, "drops {drops}");
        assert_eq!(marks, 0);
        assert!(served > 9_900);
        assert!(q.len() < 100, "queue {}", q.len());
    }

    #[test]
    fn marks_instead_of_dropping_ect_packets() {
        let (drops, marks, _, _) = run(true, Ecn::Ect0, 952_381, NS_PER_MS, 10_000 * NS_PER_MS);
        assert_eq!(drops, 0);
        assert!(marks > 100, "marks {marks}");
        // Not-ECT traffic is still dropped with ecn enabled.
        let (drops, marks, _, _) = run(true, Ecn::NotEct, 952_381, NS_PER_MS, 10_000 * NS_PER_MS);
        assert!(drops > 100);
        assert_eq!(marks, 0);
    }

    #[test]
    fn tail_drops_at_limit() {
        let mut q = Codel::new(5 * NS_PER_MS, 100 * NS_PER_MS, 2, false);
        assert!(q.enqueue(pkt(Ecn::NotEct), 0).is_ok());
        assert!(q.enqueue(pkt(Ecn::NotEct), 0).is_ok());
        assert_eq!(q.enqueue(pkt(Ecn::NotEct), 0).unwrap_err().cause, DropCause::Queue);
    }
}
