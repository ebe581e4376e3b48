//! Time: nanosecond instants and the injectable clock.
//!
//! The emulator core ([`crate::engine::Engine`]) never reads a clock itself:
//! every call takes the current instant as an argument, and every packet it
//! emits carries the *ideal* instant at which it is due.  The core is therefore
//! a discrete-event simulation that can be driven by
//!
//! * [`VirtualClock`] in unit tests: time only moves when the test says so,
//!   results are exact and reproducible, a 60 s scenario runs in milliseconds;
//! * [`MonotonicClock`] (CLOCK_MONOTONIC) in the real emulator
//!   ([`crate::runtime`]): the loop reads the clock, feeds the packets that
//!   arrived (stamped by the kernel) and advances the core to "now".
//!
//! Instants are `u64` nanoseconds on CLOCK_MONOTONIC (or since the start of a
//! virtual run); 2^64 ns is 584 years, so overflow is not a concern.

use std::cell::Cell;

/// An instant or a duration in nanoseconds.
pub type Nanos = u64;

pub const NS_PER_US: u64 = 1_000;
pub const NS_PER_MS: u64 = 1_000_000;
pub const NS_PER_S: u64 = 1_000_000_000;

/// A source of "now".
pub trait Clock {
    fn now(&self) -> Nanos;
}

/// CLOCK_MONOTONIC, the clock of the real emulator.
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now(&self) -> Nanos {
        read_clock(libc::CLOCK_MONOTONIC)
    }
}

/// A clock that only moves when told to (unit tests, simulations).
#[derive(Debug, Default)]
pub struct VirtualClock {
    t: Cell<Nanos>,
}

impl VirtualClock {
    pub fn new(start: Nanos) -> Self {
        Self { t: Cell::new(start) }
    }
    /// Move to `t` (never backwards).
    pub fn set(&self, t: Nanos) {
        assert!(t >= self.t.get(), "virtual time cannot go backwards");
        self.t.set(t);
    }
    pub fn advance(&self, d: Nanos) {
        self.t.set(self.t.get() + d);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Nanos {
        self.t.get()
    }
}

/// `clock_gettime(id)` in nanoseconds.
pub fn read_clock(id: libc::clockid_t) -> Nanos {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid, writable timespec.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * NS_PER_S + ts.tv_nsec as u64
}

/// Converts kernel packet timestamps (CLOCK_REALTIME, as SO_TIMESTAMPNS gives
/// them) to CLOCK_MONOTONIC.  The offset between the two clocks only changes
/// when the wall clock is stepped; [`RealtimeToMono::refresh`] re-reads it
/// (cheap: two vDSO calls), so a step is absorbed within one loop iteration.
#[derive(Debug, Clone, Copy)]
pub struct RealtimeToMono {
    /// monotonic - realtime, in ns (as i128 to allow either sign).
    offset: i128,
}

impl RealtimeToMono {
    pub fn new() -> Self {
        let mut s = Self { offset: 0 };
        s.refresh();
        s
    }
    pub fn refresh(&mut self) {
        let rt = read_clock(libc::CLOCK_REALTIME) as i128;
        let mono = read_clock(libc::CLOCK_MONOTONIC) as i128;
        self.offset = mono - rt;
    }
    pub fn to_mono(&self, realtime_ns: Nanos) -> Nanos {
        (realtime_ns as i128 + self.offset).max(0) as Nanos
    }

    /// The CLOCK_MONOTONIC arrival instant of a frame read at `read_at`
    /// (monotonic) whose kernel timestamp is `kernel_ts`, or None if the
    /// timestamp is implausible.  Usually the kernel stamped the frame with
    /// CLOCK_REALTIME when it entered the backlog, but a TCP segment keeps the
    /// CLOCK_MONOTONIC "earliest departure time" its sender's stack put in
    /// skb->tstamp (EDT, Linux >= 4.20) when it crosses a veth into another
    /// namespace, and AF_PACKET reports that value as is.  The two clocks are
    /// decades apart, so which one it is can be told reliably; an arrival
    /// must lie in the past and not too far (`MAX_AGE`).
    pub fn arrival(&self, kernel_ts: Nanos, read_at: Nanos) -> Option<Nanos> {
        const MAX_AGE: Nanos = 10 * NS_PER_S;
        const MAX_AHEAD: Nanos = NS_PER_S; // EDT may be slightly in the future
        let plausible = |t: Nanos| t <= read_at + MAX_AHEAD && t + MAX_AGE >= read_at;
        let rt = self.to_mono(kernel_ts);
        if plausible(rt) {
            return Some(rt.min(read_at));
        }
        if plausible(kernel_ts) {
            return Some(kernel_ts.min(read_at));
        }
        None
    }
}

impl Default for RealtimeToMono {
    fn default() -> Self {
        Self::new()
    }
}

/// Transmission time of `bits` at `bps`, carrying the sub-nanosecond remainder
/// in `carry` so that a long run of packets takes exactly bits/bps seconds.
pub fn tx_time(bits: u64, bps: u64, carry: &mut u64) -> Nanos {
    let num = bits as u128 * NS_PER_S as u128 + *carry as u128;
    let t = num / bps as u128;
    *carry = (num % bps as u128) as u64;
    t as Nanos
}

/// A component unit tests drive in virtual time with [`simulate`]: it has
/// events of its own (`next_event`, handled by `process`) and takes timed
/// arrivals (`arrive`).
#[cfg(test)]
pub(crate) trait Simulated {
    type Arrival;
    type Out;
    fn arrival_time(a: &Self::Arrival) -> Nanos;
    fn next_event(&self) -> Option<Nanos>;
    fn process(&mut self, now: Nanos, out: &mut Vec<Self::Out>);
    fn arrive(&mut self, a: &Self::Arrival, now: Nanos, out: &mut Vec<Self::Out>);
}

/// Run `s` in virtual time up to `until`: always jump to the earlier of its
/// next event and the next arrival (sorted by time); at each instant its
/// own events are processed before the arrivals of that instant.  Returns
/// everything it emitted.
#[cfg(test)]
pub(crate) fn simulate<S: Simulated>(s: &mut S, arrivals: &[S::Arrival], until: Nanos) -> Vec<S::Out> {
    let mut out = vec![];
    let mut i = 0;
    loop {
        let next_arrival = arrivals.get(i).map(S::arrival_time);
        let t = match (next_arrival, s.next_event()) {
            (Some(a), Some(e)) => a.min(e),
            (Some(a), None) => a,
            (None, Some(e)) => e,
            (None, None) => break,
        };
        if t > until {
            break;
        }
        s.process(t, &mut out);
        while i < arrivals.len() && S::arrival_time(&arrivals[i]) == t {
            s.arrive(&arrivals[i], t, &mut out);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_time_is_exact_over_many_packets() {
        let mut carry = 0;
        // 1500 bytes at 7 Mbit/s: 1714285.714... ns each.
        let total: u64 = (0..7000).map(|_| tx_time(12_000, 7_000_000, &mut carry)).sum();
        assert_eq!(total, 12_000 * 7000 * NS_PER_S / 7_000_000);
    }

    #[test]
    fn virtual_clock_moves_only_forward() {
        let c = VirtualClock::new(5);
        c.advance(10);
        assert_eq!(c.now(), 15);
        c.set(20);
        assert_eq!(c.now(), 20);
    }

    #[test]
    fn monotonic_clock_advances() {
        let c = MonotonicClock;
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        let conv = RealtimeToMono::new();
        let m = conv.to_mono(read_clock(libc::CLOCK_REALTIME));
        assert!(m.abs_diff(c.now()) < NS_PER_S);
        // A realtime stamp 1 ms old, a monotonic (EDT) one, and garbage.
        let now = c.now();
        let rt = read_clock(libc::CLOCK_REALTIME) - NS_PER_MS;
        assert!(conv.arrival(rt, now).unwrap().abs_diff(now - NS_PER_MS) < NS_PER_MS);
        assert_eq!(conv.arrival(now - 5000, now), Some(now - 5000));
        assert_eq!(conv.arrival(now + 5000, now), Some(now));
        assert_eq!(conv.arrival(12345, now), None);
    }
}
