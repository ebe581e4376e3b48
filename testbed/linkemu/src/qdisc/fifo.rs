//! Fifo: the timestamped packet queue every discipline is built on.
//!
//! A FIFO of packets that stamps each one with its enqueue instant (the
//! sojourn clock CoDel and DualPI2 read, and the age WiFi aggregation waits
//! on) and keeps the byte count of what it holds (IP lengths).
//! [`Fifo::push_limited`] adds the tail drop of pfifo and CoDel: a packet
//! arriving to a queue that already holds `limit` packets is handed back as
//! a [`DropCause::Queue`] drop.

use std::collections::VecDeque;

use super::{DropCause, Dropped};
use crate::packet::Packet;
use crate::time::Nanos;

#[derive(Default)]
pub struct Fifo {
    q: VecDeque<Packet>,
    bytes: usize,
}

impl Fifo {
    pub fn with_capacity(pkts: usize) -> Self {
        Self { q: VecDeque::with_capacity(pkts), bytes: 0 }
    }

    /// Append `pkt`, stamped with its enqueue instant `now`.
    pub fn push(&mut self, mut pkt: Packet, now: Nanos) {
        pkt.enqueued = now;
        self.bytes += pkt.ip_len();
        self.q.push_back(pkt);
    }

    /// [`Fifo::push`] unless the queue already holds `limit` packets (tail drop).
    pub fn push_limited(&mut self, pkt: Packet, now: Nanos, limit: usize) -> Result<(), Box<Dropped>> {
        if self.q.len() >= limit {
            return Err(Box::new(Dropped { pkt, cause: DropCause::Queue }));
        }
        self.push(pkt, now);
        Ok(())
    }

    pub fn pop(&mut self) -> Option<Packet> {
        let p = self.q.pop_front()?;
        self.bytes -= p.ip_len();
        Some(p)
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Bytes queued (IP lengths).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Enqueue instant of the head packet.
    pub fn head_enqueued(&self) -> Option<Nanos> {
        self.q.front().map(|p| p.enqueued)
    }

    /// Take every queued packet, oldest first.
    pub fn take_all(&mut self) -> impl Iterator<Item = Packet> + '_ {
        self.bytes = 0;
        self.q.drain(..)
    }
}
