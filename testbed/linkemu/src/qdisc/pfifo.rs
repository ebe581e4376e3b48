//! pfifo: first in, first out, tail drop beyond `limit` packets.
//!
//! The discipline of paper 002's testbed (Table 4: MikroTik, PFIFO, 50
//! packets) and of Linux's `pfifo` qdisc: a packet arriving to a queue that
//! already holds `limit` packets is dropped; nothing else is ever dropped or
//! marked.  The limit counts packets regardless of their size.

use super::fifo::Fifo;
use super::{Dropped, Qdisc};
use crate::packet::Packet;
use crate::time::Nanos;

pub struct Pfifo {
    limit: usize,
    q: Fifo,
}

impl Pfifo {
    pub fn new(limit_pkts: usize) -> Self {
        Self { limit: limit_pkts, q: Fifo::with_capacity(limit_pkts.min(4096)) }
    }
}

impl Qdisc for Pfifo {
    fn enqueue(&mut self, pkt: Packet, now: Nanos) -> Result<(), Box<Dropped>> {
        self.q.push_limited(pkt, now, self.limit)
    }

    fn dequeue(&mut self, _now: Nanos, _drops: &mut Vec<Dropped>) -> Option<Packet> {
        self.q.pop()
    }

    fn queues(&self) -> &[Fifo] {
        std::slice::from_ref(&self.q)
    }

    fn kind(&self) -> &'static str {
        "pfifo"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{build, Ecn};
    use crate::qdisc::DropCause;

    fn pkt(n: u8) -> Packet {
        Packet::from_frame(&build::ipv4_udp([2, 0, 0, 0, 0, n], [2, 0, 0, 0, 0, 9], 1000, Ecn::NotEct), 0)
    }

    #[test]
    fn drops_beyond_limit_and_keeps_order() {
        let mut q = Pfifo::new(3);
        for i in 0..5 {
            let r = q.enqueue(pkt(i), 10 * i as u64);
            if i < 3 {
                assert!(r.is_ok());
            } else {
                let d = r.unwrap_err();
                assert_eq!(d.cause, DropCause::Queue);
                assert_eq!(d.pkt.dst_mac()[5], i);
            }
        }
        assert_eq!(q.len(), 3);
        assert_eq!(q.bytes(), 3000);
        let mut drops = vec![];
        for i in 0..3 {
            let p = q.dequeue(100, &mut drops).unwrap();
            assert_eq!(p.dst_mac()[5], i);
            assert_eq!(p.enqueued, 10 * i as u64);
        }
        assert!(q.dequeue(100, &mut drops).is_none());
        assert!(drops.is_empty());
        // Room again after draining.
        assert!(q.enqueue(pkt(7), 200).is_ok());
    }
}
