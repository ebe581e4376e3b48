//! Per-class active flow counts of DualPI2, for the control socket's state
//! (`l4s_flows`, `classic_flows`; issue 14: an agent that sets k needs the
//! flow mix, since the per-flow L:C balance and the k that evens it depend on
//! how many flows of each class share the link).
//!
//! **Definition.**  A flow is a 5-tuple ([`crate::flow`]); it is *active* at
//! `now` when a packet of it arrived at the queue (accepted or tail-dropped at
//! the limit) within the last [`ACTIVE_WINDOW`] (200 ms: several RTTs of the
//! emulated paths, so a window-limited flow between two bursts still counts,
//! and four control intervals of 50 ms, so a flow that stopped leaves the
//! count within a few agent steps).  Its class is that of its latest packet
//! (a flow that switches ECN codepoint moves class).  Packets without a
//! 5-tuple (not IP) are not counted.
//!
//! **Cost.**  One hash-map update per arrival; stale flows are swept at every
//! PI update (16 ms), so the map holds the flows of the last ~216 ms.  At most
//! [`MAX_FLOWS`] flows are tracked (memory stays bounded under a port scan);
//! arrivals of further new flows are counted in `untracked_arrivals`, not as
//! flows.

use std::collections::HashMap;

use crate::flow::FlowKey;
use crate::time::{Nanos, NS_PER_MS};

/// A flow with no arrival for this long is no longer active.
pub const ACTIVE_WINDOW: Nanos = 200 * NS_PER_MS;
/// Flows tracked at once.
pub const MAX_FLOWS: usize = 4096;

#[derive(Debug, Default)]
pub struct ActiveFlows {
    /// Per 5-tuple: time of its latest arrival and its class (0: C, 1: L).
    last: HashMap<FlowKey, (Nanos, usize)>,
    /// Arrivals of new flows refused because MAX_FLOWS were tracked.
    pub untracked_arrivals: u64,
}

impl ActiveFlows {
    /// A packet of flow `key` arrived at `now` for class `class` (0: C, 1: L).
    pub fn on_arrival(&mut self, key: Option<FlowKey>, class: usize, now: Nanos) {
        let Some(key) = key else { return };
        if let Some(e) = self.last.get_mut(&key) {
            *e = (now, class);
            return;
        }
        if self.last.len() >= MAX_FLOWS {
            self.sweep(now);
            if self.last.len() >= MAX_FLOWS {
                self.untracked_arrivals += 1;
                return;
            }
        }
        self.last.insert(key, (now, class));
    }

    /// Forget the flows no longer active at `now`.
    pub fn sweep(&mut self, now: Nanos) {
        let from = now.saturating_sub(ACTIVE_WINDOW);
        self.last.retain(|_, (t, _)| *t >= from);
    }

    /// Active flows at `now`, [C, L].
    pub fn counts(&self, now: Nanos) -> [usize; 2] {
        let from = now.saturating_sub(ACTIVE_WINDOW);
        let mut n = [0, 0];
        for &(t, class) in self.last.values() {
            if t >= from {
                n[class] += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{build, Ecn, Packet};
    use crate::qdisc::control::Scalar;
    use crate::qdisc::dualpi2::{DualPi2, Params};
    use crate::qdisc::Qdisc;

    fn pkt(ecn: Ecn, sport: u16) -> Packet {
        Packet::from_frame(&build::ipv4_udp_ports([2; 6], [4; 6], 1500, ecn, sport, 5201), 0)
    }

    fn flows(q: &DualPi2, now: Nanos) -> (Scalar, Scalar) {
        let s = q.control_state(now, 0);
        let get = |name: &str| s.params.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no {name}")).1;
        (get("l4s_flows"), get("classic_flows"))
    }

    #[test]
    fn two_l4s_and_three_classic_flows_then_one_goes_silent() {
        let mut q = DualPi2::new(Params::default(), 1);
        let mut drops = Vec::new();
        assert_eq!(flows(&q, 0), (Scalar::U(0), Scalar::U(0)));
        // Every ms for 300 ms (virtual time): L flows on ports 1-2 (ECT(1)), C flows on 3-5 (Not-ECT and ECT(0)),
        // the queue served as fast as it fills, the PI timer on its grid.  Flow 5 stops at 100 ms.
        let mut t: Nanos = 0;
        for ms in 0..300u64 {
            t = ms * NS_PER_MS;
            q.on_timer(t);
            for (sport, ecn) in [(1, Ecn::Ect1), (2, Ecn::Ect1), (3, Ecn::NotEct), (4, Ecn::Ect0), (5, Ecn::Ect0)] {
                if sport == 5 && ms >= 100 {
                    continue;
                }
                q.enqueue(pkt(ecn, sport), t).unwrap();
            }
            while q.dequeue(t, &mut drops).is_some() {}
            if ms == 99 {
                assert_eq!(flows(&q, t), (Scalar::U(2), Scalar::U(3)), "2 L + 3 C");
            }
        }
        // Flow 5's last packet arrived at 99 ms: active until 299 ms, gone after.
        assert_eq!(flows(&q, t), (Scalar::U(2), Scalar::U(3)), "at {t}: 99 ms + 200 ms window");
        assert_eq!(flows(&q, t + NS_PER_MS), (Scalar::U(2), Scalar::U(2)), "flow 5 went silent 201 ms ago");
        // The sweep at the PI updates forgot it too (the map holds the last ~216 ms only).
        q.on_timer(t + 16 * NS_PER_MS);
        assert_eq!(q.active.last.len(), 4);
        // Everyone silent for longer than the window: none active.
        assert_eq!(flows(&q, t + ACTIVE_WINDOW + NS_PER_MS), (Scalar::U(0), Scalar::U(0)));
        // A flow that changes codepoint moves class; packets without a 5-tuple are not flows.
        let t2 = t + 10 * NS_PER_MS;
        q.enqueue(pkt(Ecn::Ect0, 1), t2).unwrap();
        q.enqueue(Packet::from_frame(&build::arp([4; 6]), 0), t2).unwrap();
        assert_eq!(flows(&q, t2), (Scalar::U(1), Scalar::U(3)));
    }

    #[test]
    fn the_map_is_bounded() {
        let mut a = ActiveFlows::default();
        let key = |i: usize| pkt(Ecn::Ect1, i as u16 + 1).flow_key();
        for i in 0..MAX_FLOWS + 10 {
            a.on_arrival(key(i), 1, 0);
        }
        assert_eq!((a.counts(0), a.untracked_arrivals), ([0, MAX_FLOWS], 10));
        // Once the old ones are stale, new flows take their place.
        a.on_arrival(key(MAX_FLOWS + 20), 0, ACTIVE_WINDOW + 1);
        assert_eq!((a.counts(ACTIVE_WINDOW + 1), a.untracked_arrivals), ([1, 0], 10));
    }
}
