//! Channel access on the shared medium (header of `wifi.rs`, "Channel
//! access", "Collisions", "Extra access delay"): each contender's EDCA
//! countdown (AIFS, backoff slots, extra deferral) and its freezing, the
//! event loop of the medium, and an exchange from its start (the winners,
//! or a collision) to its end (delivery, or retry with a doubled CW).

use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};

use super::aggregation::Aggregate;
use super::{us, Wifi};
use crate::config::Dist;
use crate::link::Out;
use crate::packet::Dir;
use crate::qdisc::DropCause;
use crate::time::Nanos;

#[derive(Default)]
pub(super) struct Contender {
    /// Remaining backoff slots; None: not contending.
    pub(super) slots: Option<u32>,
    /// Remaining extra deferral.
    pub(super) extra: Nanos,
    pub(super) cw: u32,
    pub(super) retries: u32,
    /// When this contender started (or resumed) waiting for the medium.
    pub(super) ready_at: Nanos,
    /// When the current access attempt began (for the access-delay statistic).
    pub(super) attempt_since: Nanos,
    /// Aggregate that collided and waits for its retransmission.
    pub(super) retry: Option<Aggregate>,
}

pub(super) struct Exchange {
    pub(super) txs: Vec<(usize, Aggregate)>,
    collided: bool,
    /// End of the PPDU (successful exchange: delivery).
    deliver_at: Nanos,
    delivered: bool,
    /// End of the exchange (medium idle again).
    end: Nanos,
}

impl Wifi {
    fn draw_extra(&mut self) -> Nanos {
        let Some(d) = &self.extra else { return 0 };
        let v = match d {
            Dist::Constant(c) => c.us,
            Dist::Uniform(u) => {
                if u.max_us > u.min_us {
                    self.rng.random_range(u.min_us..u.max_us)
                } else {
                    u.min_us
                }
            }
            Dist::Exponential(e) => {
                if e.mean_us > 0.0 {
                    Exp::new(1.0 / e.mean_us).map(|x| x.sample(&mut self.rng)).unwrap_or(0.0)
                } else {
                    0.0
                }
            }
            Dist::Lognormal(l) => {
                LogNormal::new(l.median_us.ln(), l.sigma).map(|x| x.sample(&mut self.rng)).unwrap_or(l.median_us)
            }
        };
        us(v.max(0.0))
    }

    /// Start contention for every contender that has become ready by `now`.
    fn arm(&mut self, now: Nanos) {
        for c in 0..=self.n {
            if self.cont[c].slots.is_some() {
                continue;
            }
            if self.ready_at(c).is_some_and(|r| r <= now) {
                let cw = self.cont[c].cw;
                let slots = self.rng.random_range(0..=cw);
                let extra = self.draw_extra();
                let k = &mut self.cont[c];
                k.slots = Some(slots);
                k.extra = extra;
                k.ready_at = now;
                if k.retries == 0 {
                    k.attempt_since = now;
                }
            }
        }
    }

    /// When contender `c`'s countdown ends, if it is contending and the medium is idle.
    fn fire_time(&self, c: usize) -> Option<Nanos> {
        let k = &self.cont[c];
        let slots = k.slots?;
        let start = self.idle_since.max(k.ready_at);
        Some(start + self.aifs + k.extra + slots as Nanos * self.slot)
    }

    /// Instant of the next thing the medium has to do.
    pub fn next_event(&self) -> Option<Nanos> {
        if let Some(x) = &self.busy {
            return Some(if x.delivered || x.collided { x.end } else { x.deliver_at });
        }
        let mut next: Option<Nanos> = None;
        for c in 0..=self.n {
            let t = if self.cont[c].slots.is_some() {
                self.fire_time(c)
            } else {
                // Waiting for its aggregate to fill.
                self.ready_at(c).map(|t| t.max(self.idle_since))
            };
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }

    /// Do everything due at or before `now`.
    pub fn process(&mut self, now: Nanos, out: &mut Vec<(Dir, Out)>) {
        loop {
            if let Some(x) = &mut self.busy {
                if !x.delivered && !x.collided && x.deliver_at <= now {
                    x.delivered = true;
                    let t = x.deliver_at;
                    for (_, agg) in &mut x.txs {
                        for mut p in agg.pkts.drain(..) {
                            p.wifi_wait = t.saturating_sub(p.wifi_wait);
                            out.push((agg.dir, Out::Depart { pkt: p, t }));
                        }
                    }
                }
                let x = self.busy.as_ref().unwrap();
                if (x.delivered || x.collided) && x.end <= now {
                    self.finish_exchange(out);
                    continue;
                }
                return;
            }
            self.arm(now);
            // Earliest countdown end among contenders.
            let mut first: Option<(Nanos, usize)> = None;
            for c in 0..=self.n {
                if let Some(t) = self.fire_time(c) {
                    if first.is_none_or(|(ft, _)| t < ft) {
                        first = Some((t, c));
                    }
                }
            }
            let Some((t0, c0)) = first else { return };
            if t0 > now {
                return;
            }
            let winners: Vec<usize> = if self.collisions {
                (0..=self.n).filter(|&c| self.fire_time(c).is_some_and(|t| t < t0 + self.slot)).collect()
            } else {
                vec![c0]
            };
            self.start_exchange(t0, winners, out);
        }
    }

    fn start_exchange(&mut self, t0: Nanos, winners: Vec<usize>, out: &mut Vec<(Dir, Out)>) {
        // Everybody else freezes its countdown.
        for c in 0..=self.n {
            if winners.contains(&c) {
                continue;
            }
            let start = self.idle_since.max(self.cont[c].ready_at);
            let (aifs, slot) = (self.aifs, self.slot);
            let k = &mut self.cont[c];
            let Some(slots) = k.slots else { continue };
            if t0 > start + aifs {
                let mut e = t0 - start - aifs;
                if e < k.extra {
                    k.extra -= e;
                } else {
                    e -= k.extra;
                    k.extra = 0;
                    k.slots = Some(slots - ((e / slot) as u32).min(slots));
                }
            }
        }
        let mut txs = Vec::with_capacity(winners.len());
        for &c in &winners {
            self.cont[c].slots = None;
            let agg = match self.cont[c].retry.take() {
                Some(a) => a,
                None => match self.build_aggregate(c, t0, out) {
                    Some(a) => a,
                    None => continue, // an AQM dropped everything it held
                },
            };
            if self.cont[c].retries == 0 {
                self.access_delay.record(t0.saturating_sub(self.cont[c].attempt_since));
            }
            txs.push((c, agg));
        }
        if txs.is_empty() {
            return;
        }
        let collided = txs.len() > 1;
        let ppdu = txs.iter().map(|(_, a)| a.ppdu).max().unwrap();
        let end = t0 + ppdu + self.sifs_ba;
        let share = end - t0;
        self.busy_ns += share;
        for (_, a) in &txs {
            let ca = &mut self.clients[a.client];
            ca.airtime[a.dir.index()] += share / txs.len() as Nanos;
            if collided {
                ca.collisions[a.dir.index()] += 1;
            }
        }
        if collided {
            self.collision_events += 1;
        }
        self.busy = Some(Exchange { txs, collided, deliver_at: t0 + ppdu, delivered: false, end });
    }

    fn finish_exchange(&mut self, out: &mut Vec<(Dir, Out)>) {
        let x = self.busy.take().unwrap();
        self.idle_since = x.end;
        for (c, agg) in x.txs {
            let k = &mut self.cont[c];
            if x.collided {
                k.retries += 1;
                k.cw = (2 * k.cw + 1).min(self.cw_max);
                if k.retries > self.retry_limit {
                    k.retries = 0;
                    k.cw = self.cw_min;
                    for mut p in agg.pkts {
                        p.wifi_wait = x.end.saturating_sub(p.wifi_wait);
                        out.push((agg.dir, Out::Drop { pkt: p, cause: DropCause::WifiRetry, t: x.end }));
                    }
                } else {
                    k.retry = Some(agg);
                }
            } else {
                k.retries = 0;
                k.cw = self.cw_min;
                let ca = &mut self.clients[agg.client];
                ca.aggregates[agg.dir.index()] += 1;
                ca.frames[agg.dir.index()] += agg.frames as u64;
            }
        }
    }
}
