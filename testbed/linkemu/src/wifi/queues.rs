//! The WiFi hop's queues: each station's uplink queue and the AP's downlink
//! queue per client ([`TxQueue`], a qdisc plus the frame that did not fit into
//! the last aggregate), frames entering them, their lengths, when a
//! contender has a frame ready (`max_wait` aggregation), and every packet
//! still inside at shutdown.

use super::access::Contender;
use super::Wifi;
use crate::link::Out;
use crate::packet::{Dir, Packet};
use crate::qdisc::{DropCause, Dropped, Qdisc};
use crate::time::Nanos;

/// A queue plus the one packet the driver may have pulled from it that did
/// not fit into the previous aggregate.
pub(super) struct TxQueue {
    pub(super) q: Box<dyn Qdisc>,
    pub(super) stash: Option<Packet>,
}

impl TxQueue {
    fn is_empty(&self) -> bool {
        self.stash.is_none() && self.q.is_empty()
    }
    fn len(&self) -> usize {
        self.stash.is_some() as usize + self.q.len()
    }
    fn bytes(&self) -> usize {
        self.stash.as_ref().map_or(0, |p| p.ip_len()) + self.q.bytes()
    }
    fn head_enqueued(&self) -> Option<Nanos> {
        match &self.stash {
            Some(p) => Some(p.enqueued),
            None => self.q.head_enqueued(),
        }
    }
}

impl Wifi {
    /// Packets queued for `client` in `dir` (station queue up, AP queue down).
    pub fn queue_len(&self, dir: Dir, client: usize) -> usize {
        let q = match dir {
            Dir::Up => &self.up[client],
            Dir::Down => &self.down[client],
        };
        q.len() + self.cont_for(dir, client).retry.as_ref().map_or(0, |a| a.pkts.len())
    }

    fn cont_for(&self, dir: Dir, client: usize) -> &Contender {
        match dir {
            Dir::Up => &self.cont[client],
            Dir::Down => &self.cont[self.ap()],
        }
    }

    /// Uplink: a client hands a frame to its WiFi interface.
    pub fn enqueue_up(&mut self, client: usize, pkt: Packet, now: Nanos, out: &mut Vec<(Dir, Out)>) {
        self.enqueue(Dir::Up, client, pkt, now, out);
    }

    /// Downlink: the AP has a frame for `client`.
    pub fn enqueue_down(&mut self, client: usize, pkt: Packet, now: Nanos, out: &mut Vec<(Dir, Out)>) {
        self.enqueue(Dir::Down, client, pkt, now, out);
    }

    pub(super) fn enqueue(&mut self, dir: Dir, client: usize, mut pkt: Packet, now: Nanos, out: &mut Vec<(Dir, Out)>) {
        // wifi_wait temporarily holds the instant the packet entered the WiFi hop.
        pkt.wifi_wait = now;
        let saved_enqueued = pkt.enqueued;
        let q = match dir {
            Dir::Up => &mut self.up[client],
            Dir::Down => &mut self.down[client],
        };
        if let Err(d) = q.q.enqueue(pkt, now) {
            let Dropped { mut pkt, cause } = *d;
            pkt.wifi_wait = 0;
            pkt.enqueued = saved_enqueued;
            let cause = if cause == DropCause::Queue { DropCause::WifiQueue } else { cause };
            out.push((dir, Out::Drop { pkt, cause, t: now }));
            return;
        }
        self.process(now, out);
    }

    /// A queue is ready to contend: it has frames, and it either has a full
    /// aggregate or its oldest frame has waited `max_wait`.
    pub(super) fn queue_ready_at(&self, q: &TxQueue) -> Option<Nanos> {
        if q.is_empty() {
            return None;
        }
        if self.max_wait == 0 || q.len() >= self.max_frames || q.bytes() >= self.max_bytes {
            return Some(0);
        }
        q.head_enqueued().map(|t| t + self.max_wait)
    }

    /// When contender `c` will have something to send (Some(0): now).
    pub(super) fn ready_at(&self, c: usize) -> Option<Nanos> {
        if self.cont[c].retry.is_some() {
            return Some(0);
        }
        if c < self.n {
            self.queue_ready_at(&self.up[c])
        } else {
            self.down.iter().filter_map(|q| self.queue_ready_at(q)).min()
        }
    }

    pub fn queue_lens(&self, dir: Dir) -> Vec<u64> {
        (0..self.n).map(|c| self.queue_len(dir, c) as u64).collect()
    }

    /// Every packet still inside (shutdown accounting), with its direction.
    pub fn drain(&mut self) -> Vec<(Dir, Packet)> {
        let mut v = Vec::new();
        if let Some(x) = self.busy.take() {
            for (_, a) in x.txs {
                v.extend(a.pkts.into_iter().map(|p| (a.dir, p)));
            }
        }
        for k in &mut self.cont {
            if let Some(a) = k.retry.take() {
                v.extend(a.pkts.into_iter().map(|p| (a.dir, p)));
            }
        }
        let mut scratch = Vec::new();
        for (dir, qs) in [(Dir::Up, &mut self.up), (Dir::Down, &mut self.down)] {
            for q in qs.iter_mut() {
                if let Some(p) = q.stash.take() {
                    v.push((dir, p));
                }
                while let Some(p) = q.q.dequeue(Nanos::MAX / 2, &mut scratch) {
                    v.push((dir, p));
                }
            }
        }
        v
    }
}
