//! A-MPDU aggregation (header of `wifi.rs`, "Aggregation", "Airtime of an
//! exchange"): the frames a winner pulls from its queue (the AP's queues
//! round robin) up to `max_frames`, `max_bytes` and `max_ppdu_us`, and the
//! PPDU's airtime.

use super::Wifi;
use crate::link::Out;
use crate::packet::{Dir, Packet};
use crate::time::Nanos;

pub(super) struct Aggregate {
    pub(super) pkts: Vec<Packet>,
    pub(super) frames: usize,
    pub(super) client: usize,
    pub(super) dir: Dir,
    /// PPDU duration (preamble + payload).
    pub(super) ppdu: Nanos,
}

impl Wifi {
    fn mpdu_bytes(&self, p: &Packet) -> usize {
        (p.ip_len() + self.mpdu_overhead + 3) & !3
    }

    fn ppdu_time(&self, bytes: usize, bps: f64) -> Nanos {
        self.preamble + (bytes as f64 * 8.0 / bps * 1e9).ceil() as Nanos
    }

    /// Pull frames for contender `c`'s next A-MPDU at `t`.
    pub(super) fn build_aggregate(&mut self, c: usize, t: Nanos, out: &mut Vec<(Dir, Out)>) -> Option<Aggregate> {
        let (dir, client) = if c < self.n {
            (Dir::Up, c)
        } else {
            // Round robin over the clients with a ready downlink queue.
            let n = self.n;
            let pick = (0..n)
                .map(|i| (self.ap_rr + i) % n)
                .find(|&i| self.queue_ready_at(&self.down[i]).is_some_and(|r| r <= t))?;
            self.ap_rr = (pick + 1) % n;
            (Dir::Down, pick)
        };
        let bps = self.phy_bps[dir.index()][client];
        let mut pkts = Vec::new();
        let mut bytes = 0;
        loop {
            if pkts.len() >= self.max_frames {
                break;
            }
            let q = match dir {
                Dir::Up => &mut self.up[client],
                Dir::Down => &mut self.down[client],
            };
            let next = match q.stash.take() {
                Some(p) => Some(p),
                None => q.q.dequeue(t, &mut self.scratch),
            };
            for d in self.scratch.drain(..) {
                let mut pkt = d.pkt;
                pkt.wifi_wait = t.saturating_sub(pkt.wifi_wait);
                out.push((dir, Out::Drop { pkt, cause: d.cause, t }));
            }
            let Some(p) = next else { break };
            let b = self.mpdu_bytes(&p);
            if !pkts.is_empty() && (bytes + b > self.max_bytes || self.ppdu_time(bytes + b, bps) > self.max_ppdu) {
                let q = match dir {
                    Dir::Up => &mut self.up[client],
                    Dir::Down => &mut self.down[client],
                };
                q.stash = Some(p);
                break;
            }
            bytes += b;
            pkts.push(p);
        }
        if pkts.is_empty() {
            return None;
        }
        self.aggregate_frames.record(pkts.len() as Nanos * 1000);
        Some(Aggregate { ppdu: self.ppdu_time(bytes, bps), frames: pkts.len(), pkts, client, dir })
    }
}
