//! Mahimahi packet-delivery traces (Netravali et al., USENIX ATC 2015).
//!
//! A trace file has one integer per line: the time in milliseconds, from the
//! start of the trace, of one delivery opportunity, i.e. the moment the link
//! may deliver one MTU-sized packet (1500 bytes).  Timestamps are
//! non-decreasing; several equal lines mean several opportunities in the same
//! millisecond (12 lines per ms = 12 * 1500 * 8 bit/ms = 144 Mbit/s).  The
//! trace repeats forever with a period equal to its last timestamp, as in
//! Mahimahi's `mm-link`.  Blank lines and lines starting with `#` are ignored.
//!
//! The link ([`crate::link`]) consumes opportunities in order; this module
//! only answers "which is the first opportunity at or after t" and "when is
//! opportunity k", in nanoseconds relative to the trace origin (the start of
//! the emulator).

use std::path::Path;

use crate::time::{Nanos, NS_PER_MS};

#[derive(Debug, Clone)]
pub struct Trace {
    /// Opportunity times within one period, ms, non-decreasing.
    times_ms: Vec<u64>,
    period_ms: u64,
}

impl Trace {
    pub fn from_times(times_ms: Vec<u64>) -> Result<Trace, String> {
        if times_ms.is_empty() {
            return Err("trace has no delivery opportunities".into());
        }
        if let Some(i) = times_ms.windows(2).position(|w| w[1] < w[0]) {
            return Err(format!("line {}: timestamps must not decrease", i + 2));
        }
        let period_ms = *times_ms.last().unwrap();
        if period_ms == 0 {
            return Err("the last timestamp (the trace period) must be > 0".into());
        }
        Ok(Trace { times_ms, period_ms })
    }

    pub fn parse(text: &str) -> Result<Trace, String> {
        let mut times = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let s = line.trim();
            if s.is_empty() || s.starts_with('#') {
                continue;
            }
            let v: u64 = s.parse().map_err(|_| format!("line {}: {s:?} is not a whole number of ms", i + 1))?;
            times.push(v);
        }
        Trace::from_times(times)
    }

    pub fn load(path: &Path) -> Result<Trace, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Trace::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Opportunities per period.
    pub fn len(&self) -> usize {
        self.times_ms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times_ms.is_empty()
    }

    pub fn period(&self) -> Nanos {
        self.period_ms * NS_PER_MS
    }

    /// Average rate in bit/s when each opportunity carries `bytes`.
    pub fn mean_bps(&self, bytes: usize) -> f64 {
        self.len() as f64 * bytes as f64 * 8.0 / (self.period_ms as f64 / 1000.0)
    }

    /// Time of opportunity `k` (counted from 0 over all periods), relative to the origin.
    pub fn time_of(&self, k: u64) -> Nanos {
        let n = self.times_ms.len() as u64;
        ((k / n) * self.period_ms + self.times_ms[(k % n) as usize]) * NS_PER_MS
    }

    /// Index of the first opportunity at or after `t` (relative to the origin).
    pub fn first_at_or_after(&self, t: Nanos) -> u64 {
        let n = self.times_ms.len() as u64;
        let period = self.period();
        // Cycle c holds the opportunities in (c*P, (c+1)*P] (plus c*P itself
        // when the trace starts at 0 ms), so an instant on a period boundary
        // belongs to the cycle that ends there: its last opportunity is at t.
        let cycle = t.saturating_sub(1) / period;
        let within = t - cycle * period;
        let i = self.times_ms.partition_point(|&ms| ms * NS_PER_MS < within) as u64;
        cycle * n + i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_rate() {
        let t = Trace::parse("# comment\n1\n1\n2\n\n4\n").unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t.period(), 4 * NS_PER_MS);
        // 4 packets of 1500 B per 4 ms = 12 Mbit/s.
        assert!((t.mean_bps(1500) - 12e6).abs() < 1.0);
        assert!(Trace::parse("3\n2\n").unwrap_err().contains("line 2"));
        assert!(Trace::parse("1\nx\n").unwrap_err().contains("line 2"));
        assert!(Trace::parse("0\n").is_err());
        assert!(Trace::parse("").is_err());
    }

    #[test]
    fn opportunity_times_wrap_around() {
        let t = Trace::parse("1\n1\n2\n4").unwrap();
        let times: Vec<u64> = (0..8).map(|k| t.time_of(k) / NS_PER_MS).collect();
        assert_eq!(times, vec![1, 1, 2, 4, 5, 5, 6, 8]);
        assert_eq!(t.first_at_or_after(0), 0);
        assert_eq!(t.first_at_or_after(NS_PER_MS), 0);
        assert_eq!(t.first_at_or_after(NS_PER_MS + 1), 2);
        assert_eq!(t.first_at_or_after(3 * NS_PER_MS), 3);
        assert_eq!(t.first_at_or_after(4 * NS_PER_MS), 3);
        assert_eq!(t.first_at_or_after(4 * NS_PER_MS + 1), 4); // next period, 5 ms
        assert_eq!(t.first_at_or_after(41 * NS_PER_MS), 40);
        for k in 0..100 {
            assert_eq!(t.first_at_or_after(t.time_of(k)), k - (k % 4 == 1) as u64);
        }
    }
}
