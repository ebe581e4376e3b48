//! LFQ's per-flow features (paper 001, "LFQ: Online Learning of Per-flow
//! Queuing Policies using Deep Reinforcement Learning", section III).
//!
//! The agent that sizes each flow's buffer sees six features per flow, each
//! as [`K`] = 10 exponentially weighted moving averages (EWMAs) with
//! different weights, so it gets both a fast and a slow view without keeping
//! any window of samples:
//!
//! | feature | sample | taken |
//! |---|---|---|
//! | `queue_pkts` | packets in the flow's queue (before the arrival) | each arrival |
//! | `queue_std_pkts` | sqrt of the EWMA of (mean_k - q)^2, mean_k being average k just updated | each arrival |
//! | `limit_pkts` | the flow's current limit (the paper's "maximum buffer size") | each arrival |
//! | `in_rate_pps` | 1 / (EWMA of inter-arrival times) | each arrival but the flow's first |
//! | `out_rate_pps` | 1 / (EWMA of inter-departure times) | each departure but the flow's first |
//! | `since_loss_s` | time since the flow's last drop (since its start before any) | each arrival, after its verdict |
//! | `empty_frac` | 1 if the arrival finds the flow's queue empty, else 0 (not in paper 001) | each arrival |
//!
//! **`empty_frac`** is ours, not the paper's: the share of the flow's arrivals
//! that find its queue empty.  Paper 001 reports that the learned limit is
//! about twice as large for NewReno as for BIC; a router can only learn that
//! if it sees which flows need the buffer.  After a drop a sender shrinks its
//! window by its own factor (Reno 1/2, BIC 0.2, CUBIC 0.3); with a limit L
//! below what that factor needs (Reno: the BDP B; BIC: B / 4), the queue
//! runs dry for (B - L) / (B + L) of Reno's sawtooth, and the flow's share of
//! the link goes unused for that long.  So with the limit it tells the
//! agent both the CCA's need and what a short buffer costs.  A queue that
//! hovers between 0 and 1 packet at the full rate also reads as empty (the
//! packet in service has left the qdisc); that is the boundary where the
//! limit is just enough, so it errs towards a slightly larger limit.
//!
//! **Weights.**  Average k (0..9) has weight w_k = 2^-(k+5), i.e. 1/32 ...
//! 1/16384: it remembers about the last 32 ... 16384 samples.  These are the
//! weights of the authors' code (CN-TU/reinforcement-learning-for-per-flow-
//! buffer-sizing, `rl-net.cc`: `initialCurrentValue = 1/16`, halved before
//! each use); the text of the paper we have lost the exponents.
//!
//! **Rates and the guard against tiny samples** (the paper: averaging rates
//! directly is unstable, so the inter-arrival / inter-departure times are
//! averaged and the average inverted; to avoid dividing by averages of too
//! few samples, the rate of weight w is reported only once at least 1/w
//! samples went into it, else 0).  So `in_rate_pps[k]` is 0 until the flow
//! has had 2^(k+5) inter-arrival samples (and when the average is 0).  The
//! authors' code requires that many arrivals *and* departures for both rates;
//! here each rate counts its own samples.
//!
//! **Initialisation.**  Each average starts at its first sample (the
//! authors' start at 0, which biases a freshly unguarded rate average by
//! e^-1 ~ 37 % towards 0: at n = 1/w samples (1 - w)^n of the initial value
//! is left).
//!
//! **Units.**  Raw units (packets, packets/s, seconds); the authors feed the
//! network queue sizes / 100, rates / 10000 and times / 10 s; an agent that
//! wants their scaling divides by those.  Times are the emulator's (virtual
//! or CLOCK_MONOTONIC) nanoseconds converted to seconds.
//!
//! Cost: 7 x 10 multiply-adds per packet (arrival) or 10 (departure).

use crate::time::Nanos;

/// Averages per feature.
pub const K: usize = 10;

/// Weight of average k: 2^-(k+5).
pub const WEIGHTS: [f64; K] = [
    1.0 / 32.0,
    1.0 / 64.0,
    1.0 / 128.0,
    1.0 / 256.0,
    1.0 / 512.0,
    1.0 / 1024.0,
    1.0 / 2048.0,
    1.0 / 4096.0,
    1.0 / 8192.0,
    1.0 / 16384.0,
];

/// Samples average k needs before its rate is reported (1 / w_k).
fn min_samples(k: usize) -> u64 {
    1u64 << (k + 5)
}

fn secs(ns: Nanos) -> f64 {
    ns as f64 / 1e9
}

/// K EWMAs of one sample stream.
#[derive(Debug, Clone, Copy, Default)]
struct Ewma {
    v: [f64; K],
    n: u64,
}

impl Ewma {
    fn push(&mut self, x: f64) {
        if self.n == 0 {
            self.v = [x; K];
        } else {
            for (v, w) in self.v.iter_mut().zip(WEIGHTS) {
                *v += w * (x - *v);
            }
        }
        self.n += 1;
    }

    /// 1 / average, guarded (module comment).
    fn inverted(&self) -> [f64; K] {
        let mut out = [0.0; K];
        for (k, o) in out.iter_mut().enumerate() {
            if self.n >= min_samples(k) && self.v[k] > 0.0 {
                *o = 1.0 / self.v[k];
            }
        }
        out
    }
}

/// The features as the control socket reports them (K values each, weight order).
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureSnapshot {
    pub queue_pkts: [f64; K],
    pub queue_std_pkts: [f64; K],
    pub limit_pkts: [f64; K],
    pub in_rate_pps: [f64; K],
    pub out_rate_pps: [f64; K],
    pub since_loss_s: [f64; K],
    pub empty_frac: [f64; K],
}

impl FeatureSnapshot {
    /// (name, values): the paper's six in its order, then ours.
    pub fn named(&self) -> [(&'static str, &[f64; K]); 7] {
        [
            ("queue_pkts", &self.queue_pkts),
            ("queue_std_pkts", &self.queue_std_pkts),
            ("limit_pkts", &self.limit_pkts),
            ("in_rate_pps", &self.in_rate_pps),
            ("out_rate_pps", &self.out_rate_pps),
            ("since_loss_s", &self.since_loss_s),
            ("empty_frac", &self.empty_frac),
        ]
    }
}

/// The feature state of one flow.
#[derive(Debug, Clone)]
pub struct Features {
    queue: Ewma,
    /// EWMA of (mean_k - q)^2 per k (its own update rule, see `on_arrival`).
    queue_var: [f64; K],
    limit: Ewma,
    arrival: Ewma,
    departure: Ewma,
    since_loss: Ewma,
    empty: Ewma,
    last_arrival: Option<Nanos>,
    last_departure: Option<Nanos>,
    last_loss: Nanos,
}

impl Features {
    /// A flow that starts at `now` (its "last loss" until it has one).
    pub fn new(now: Nanos) -> Features {
        Features {
            queue: Ewma::default(),
            queue_var: [0.0; K],
            limit: Ewma::default(),
            arrival: Ewma::default(),
            departure: Ewma::default(),
            since_loss: Ewma::default(),
            empty: Ewma::default(),
            last_arrival: None,
            last_departure: None,
            last_loss: now,
        }
    }

    /// A packet of the flow arrived at `now`, finding `queue_pkts` packets in
    /// its queue and the limit `limit_pkts`; `dropped`: refused (full).
    pub fn on_arrival(&mut self, now: Nanos, queue_pkts: usize, limit_pkts: usize, dropped: bool) {
        let q = queue_pkts as f64;
        self.queue.push(q);
        for ((var, mean), w) in self.queue_var.iter_mut().zip(self.queue.v).zip(WEIGHTS) {
            let d = mean - q;
            *var += w * (d * d - *var);
        }
        self.limit.push(limit_pkts as f64);
        self.empty.push(if queue_pkts == 0 { 1.0 } else { 0.0 });
        if let Some(t) = self.last_arrival {
            self.arrival.push(secs(now.saturating_sub(t)));
        }
        self.last_arrival = Some(now);
        if dropped {
            self.last_loss = now;
        }
        self.since_loss.push(secs(now.saturating_sub(self.last_loss)));
    }

    /// A packet of the flow left its queue at `now`.
    pub fn on_departure(&mut self, now: Nanos) {
        if let Some(t) = self.last_departure {
            self.departure.push(secs(now.saturating_sub(t)));
        }
        self.last_departure = Some(now);
    }

    /// Instant of the flow's last arrival (None before its first).
    pub fn last_arrival(&self) -> Option<Nanos> {
        self.last_arrival
    }

    /// Seconds from the flow's last drop (its start before any) to `now`.
    pub fn since_loss_s(&self, now: Nanos) -> f64 {
        secs(now.saturating_sub(self.last_loss))
    }

    pub fn snapshot(&self) -> FeatureSnapshot {
        FeatureSnapshot {
            queue_pkts: self.queue.v,
            queue_std_pkts: self.queue_var.map(f64::sqrt),
            limit_pkts: self.limit.v,
            in_rate_pps: self.arrival.inverted(),
            out_rate_pps: self.departure.inverted(),
            since_loss_s: self.since_loss.v,
            empty_frac: self.empty.v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_halve_from_one_32nd() {
        for (k, w) in WEIGHTS.iter().enumerate() {
            assert_eq!(*w, 1.0 / min_samples(k) as f64);
        }
    }

    #[test]
    fn rates_are_guarded_until_one_over_w_samples() {
        // Arrivals every 1 ms: average k reports 1000 pps once 2^(k+5)
        // inter-arrival samples are in, 0 before.
        let mut f = Features::new(0);
        for i in 0..=64u64 {
            f.on_arrival(i * 1_000_000, 0, 100, false);
        }
        let s = f.snapshot();
        assert!((s.in_rate_pps[0] - 1000.0).abs() < 1e-6 && (s.in_rate_pps[1] - 1000.0).abs() < 1e-6, "{s:?}");
        assert!(s.in_rate_pps[2..].iter().all(|&r| r == 0.0), "{s:?}");
        assert!(s.out_rate_pps.iter().all(|&r| r == 0.0));
        // A constant queue has no spread; the limit average is the limit.
        assert_eq!(s.queue_std_pkts, [0.0; K]);
        assert_eq!(s.limit_pkts, [100.0; K]);
    }

    #[test]
    fn queue_spread_and_loss_clock() {
        // The queue alternates 0, 10: mean 5, standard deviation 5 (the fast
        // averages wobble around both by about w * 10).
        let mut f = Features::new(0);
        for i in 0..100_000u64 {
            f.on_arrival(i * 1000, (i % 2 * 10) as usize, 50, false);
        }
        let s = f.snapshot();
        for k in 0..K {
            assert!((s.queue_pkts[k] - 5.0).abs() < 0.2, "{k}: {s:?}");
            assert!((s.queue_std_pkts[k] - 5.0).abs() < 0.3, "{k}: {s:?}");
        }
        // No loss yet: the sample is the flow's age (0.1 s at the end).
        assert!((f.since_loss_s(100_000_000) - 0.1).abs() < 1e-9);
        f.on_arrival(100_000_000, 10, 50, true);
        assert_eq!(f.since_loss_s(100_000_000), 0.0);
        assert_eq!(f.since_loss_s(100_500_000), 0.0005);
    }

    #[test]
    fn empty_frac_is_the_share_of_arrivals_finding_the_queue_empty() {
        // One arrival in four finds the queue empty: every average settles
        // at 1/4 (the fast ones wobble by about w), after starting at the
        // first sample (empty: 1).
        let mut f = Features::new(0);
        f.on_arrival(0, 0, 50, false);
        assert_eq!(f.snapshot().empty_frac, [1.0; K]);
        for i in 1..200_000u64 {
            f.on_arrival(i * 1000, if i % 4 == 0 { 0 } else { 3 }, 50, false);
        }
        let s = f.snapshot();
        for k in 0..K {
            assert!((s.empty_frac[k] - 0.25).abs() < 0.05, "{k}: {s:?}");
        }
        // A standing queue drives it to 0, fastest average first.
        for i in 0..64u64 {
            f.on_arrival(200_000_000 + i * 1000, 5, 50, false);
        }
        let s = f.snapshot();
        assert!(s.empty_frac[0] < 0.04 && s.empty_frac[9] > 0.24, "{s:?}");
    }
}
