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

use super::fifo::Fifo;
use super::{DropCause, Dropped, Qdisc};
use crate::packet::Packet;
use crate::time::Nanos;

/// The MAXPACKET of RFC 8289: a queue holding no more than this is never "standing".
pub const MTU_BYTES: usize = 1500;

pub struct Codel {
    target: Nanos,
    interval: Nanos,
    limit: usize,
    ecn: bool,
    q: Fifo,
    // Control state.
    first_above_time: Nanos,
    drop_next: Nanos,
    count: u32,
    lastcount: u32,
    dropping: bool,
}

impl Codel {
    pub fn new(target: Nanos, interval: Nanos, limit_pkts: usize, ecn: bool) -> Self {
        Self {
            target,
            interval,
            limit: limit_pkts,
            ecn,
            q: Fifo::default(),
            first_above_time: 0,
            drop_next: 0,
            count: 0,
            lastcount: 0,
            dropping: false,
        }
    }

    fn control_law(&self, t: Nanos) -> Nanos {
        t + (self.interval as f64 / (self.count.max(1) as f64).sqrt()) as Nanos
    }

    /// RFC 8289's ok_to_drop for the packet just dequeued.
    fn should_drop(&mut self, pkt: Option<&Packet>, now: Nanos) -> bool {
        let Some(p) = pkt else {
            self.first_above_time = 0;
            return false;
        };
        let sojourn = now.saturating_sub(p.enqueued);
        if sojourn < self.target || self.q.bytes() <= MTU_BYTES {
            self.first_above_time = 0;
            return false;
        }
        if self.first_above_time == 0 {
            self.first_above_time = now + self.interval;
            false
        } else {
            now >= self.first_above_time
        }
    }
}

impl Qdisc for Codel {
    fn enqueue(&mut self, pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        self.q.push_limited(pkt, now, self.limit)
    }

    fn dequeue(&mut self, now: Nanos, drops: &mut Vec<Dropped>) -> Option<Packet> {
        let mut pkt = self.q.pop();
        let drop = self.should_drop(pkt.as_ref(), now);
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
                    self.drop_next = self.control_law(self.drop_next);
                    if self.ecn && p.mark_ce() {
                        return Some(p);
                    }
                    drops.push(Dropped { pkt: p, cause: DropCause::Aqm });
                    match self.q.pop() {
                        Some(next) => {
                            if !self.should_drop(Some(&next), now) {
                                self.dropping = false;
                            }
                            p = next;
                        }
                        None => {
                            self.should_drop(None, now);
                            self.dropping = false;
                            return None;
                        }
                    }
                }
            }
        } else if drop {
            if !(self.ecn && p.mark_ce()) {
                drops.push(Dropped { pkt: p, cause: DropCause::Aqm });
                match self.q.pop() {
                    Some(next) => {
                        // Updates first_above_time, as Linux does.
                        self.should_drop(Some(&next), now);
                        p = next;
                    }
                    None => {
                        self.should_drop(None, now);
                        // Enter the dropping state anyway, as Linux does; the
                        // next dequeue of an empty queue leaves it.
                        self.enter_dropping(now);
                        return None;
                    }
                }
            }
            self.enter_dropping(now);
        }
        Some(p)
    }

    fn queues(&self) -> &[Fifo] {
        std::slice::from_ref(&self.q)
    }

    fn kind(&self) -> &'static str {
        "codel"
    }
}

impl Codel {
    fn enter_dropping(&mut self, now: Nanos) {
        self.dropping = true;
        let delta = self.count.wrapping_sub(self.lastcount);
        self.count = if delta > 1 && now.saturating_sub(self.drop_next) < 16 * self.interval { delta } else { 1 };
        self.lastcount = self.count;
        self.drop_next = self.control_law(now);
    }

    /// Whether CoDel is in its dropping state (tests, stats).
    pub fn dropping(&self) -> bool {
        self.dropping
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
