//! Histograms of time values: one counting structure ([`Binned`]: counts
//! per bin plus the exact count, sum and maximum, in nanoseconds) over two bin
//! layouts ([`Bins`]):
//!
//! * [`Histogram`], log-linear (HdrHistogram's layout, 6 significant bits):
//!   values below 128 us are exact, larger ones fall into buckets 1/64 of
//!   their power of two wide, so a percentile is off by at most 1.6 % (and at
//!   most 1 us below 128 us).  Recording is O(1) with no allocation (the
//!   2,304 counters are allocated up front), a percentile is one pass over
//!   them, which keeps the per-interval statistics cheap enough for the
//!   forwarding thread.
//! * [`FineHistogram`], linear 0.1 ms bins for per-class queue delays.
//!
//! A quantile is found by walking the counts up to its rank and reporting the
//! bin's representative value (its midpoint), capped at the exact maximum.

use crate::time::Nanos;

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS; // 64
const EXACT: u64 = 2 * SUB; // 0..128 exact
const MAX_EXP: u32 = 40; // values up to 2^41 us (25 days)
const BUCKETS: usize = (EXACT + (MAX_EXP as u64 - SUB_BITS as u64) * SUB) as usize;

fn index(us: u64) -> usize {
    if us < EXACT {
        return us as usize;
    }
    let k = 63 - us.leading_zeros(); // >= 7
    if k > MAX_EXP {
        return BUCKETS - 1;
    }
    let shift = k - SUB_BITS;
    let sub = (us >> shift) - SUB;
    (EXACT + (k as u64 - SUB_BITS as u64 - 1) * SUB + sub) as usize
}

/// Smallest value (us) of bucket `i`.
fn lower(i: usize) -> u64 {
    let i = i as u64;
    if i < EXACT {
        return i;
    }
    let g = (i - EXACT) / SUB; // 0 for k = 7
    let sub = (i - EXACT) % SUB;
    (SUB + sub) << (g + 1)
}

/// Representative value (us) of bucket `i`: its midpoint.
fn middle(i: usize) -> f64 {
    if (i as u64) < EXACT {
        return i as f64;
    }
    let lo = lower(i) as f64;
    let width = (lower(i + 1) - lower(i)) as f64;
    lo + (width - 1.0) / 2.0
}

/// Where a value falls: the bin layout of one kind of histogram.
pub trait Bins {
    /// Name shown by `Debug`.
    const NAME: &'static str;
    /// Bins allocated up front (recording into them never allocates).
    const PREALLOCATED: usize;
    /// Bin of a value in nanoseconds.
    fn bin(ns: Nanos) -> usize;
    /// Value (us) a quantile falling into bin `i` reports, before the cap at the maximum.
    fn representative_us(i: usize) -> f64;
}

/// The log-linear layout of [`Histogram`] (see the module comment).
#[derive(Clone, Debug, Default)]
pub struct LogLinear;

impl Bins for LogLinear {
    const NAME: &'static str = "Histogram";
    const PREALLOCATED: usize = BUCKETS + 1;
    fn bin(ns: Nanos) -> usize {
        index(ns / 1000)
    }
    fn representative_us(i: usize) -> f64 {
        middle(i)
    }
}

/// The 0.1 ms linear layout of [`FineHistogram`].
#[derive(Clone, Debug, Default)]
pub struct Linear01Ms;

impl Bins for Linear01Ms {
    const NAME: &'static str = "FineHistogram";
    const PREALLOCATED: usize = 0;
    fn bin(ns: Nanos) -> usize {
        ((ns / FINE_BIN_NS) as usize).min(FINE_MAX_BINS - 1)
    }
    fn representative_us(i: usize) -> f64 {
        (i as f64 + 0.5) * FINE_BIN_NS as f64 / 1000.0
    }
}

/// Counts per bin of layout `B`, with the exact count, sum and maximum.
#[derive(Clone)]
pub struct Binned<B: Bins> {
    counts: Vec<u64>,
    count: u64,
    sum_ns: u128,
    max_ns: Nanos,
    layout: std::marker::PhantomData<B>,
}

/// Log-linear microsecond histogram (1.6 % precision, fixed 2,304 bins).
pub type Histogram = Binned<LogLinear>;

/// A linear histogram with 0.1 ms bins (the resolution paper 004 reports
/// sojourn times at), for per-class queue delays: every percentile is within
/// 50 us of the true value (the bin's midpoint is reported), mean and max are
/// exact.  Storage grows with the largest value seen (8 bytes per 0.1 ms: 1.2
/// KB for a 15 ms queue), up to 60 s; larger values share the last bin.
pub type FineHistogram = Binned<Linear01Ms>;

/// Bin width of [`FineHistogram`], ns.
pub const FINE_BIN_NS: Nanos = 100_000;
const FINE_MAX_BINS: usize = 600_000;

impl<B: Bins> std::fmt::Debug for Binned<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}(n={}, mean={:.1}us, max={}ns)", B::NAME, self.count, self.mean_us(), self.max_ns)
    }
}

impl<B: Bins> Default for Binned<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: Bins> Binned<B> {
    pub fn new() -> Self {
        Self { counts: vec![0; B::PREALLOCATED], count: 0, sum_ns: 0, max_ns: 0, layout: std::marker::PhantomData }
    }

    pub fn record(&mut self, ns: Nanos) {
        let i = B::bin(ns);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        self.count += 1;
        self.sum_ns += ns as u128;
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn clear(&mut self) {
        if self.count > 0 {
            self.counts.fill(0);
            self.count = 0;
            self.sum_ns = 0;
            self.max_ns = 0;
        }
    }

    pub fn mean_us(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64 / 1000.0
        }
    }

    pub fn max_us(&self) -> f64 {
        self.max_ns as f64 / 1000.0
    }

    /// The q-quantile (0 < q <= 1) in microseconds: the representative value
    /// of its bin, at most the maximum (0 when empty).
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return B::representative_us(i).min(self.max_us());
            }
        }
        self.max_us()
    }

    /// {"count", "mean", "p50", "p90", "p99", "max"} in microseconds.
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!({
            "count": self.count,
            "mean": round1(self.mean_us()),
            "p50": round1(self.quantile_us(0.50)),
            "p90": round1(self.quantile_us(0.90)),
            "p99": round1(self.quantile_us(0.99)),
            "max": round1(self.max_us()),
        })
    }
}

pub fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fine_histogram_has_0_1_ms_resolution() {
        let mut h = FineHistogram::default();
        for v in 0..100_000u64 {
            h.record(v * 300); // 0 .. 30 ms uniformly
        }
        for q in [0.5, 0.9, 0.99] {
            let want = q * 30_000.0;
            assert!((h.quantile_us(q) - want).abs() <= 50.0, "q{q}: {}", h.quantile_us(q));
        }
        assert_eq!(h.max_us(), 29_999.7);
        h.clear();
        assert_eq!((h.count(), h.quantile_us(0.9)), (0, 0.0));
        h.record(15_030_000);
        assert_eq!(h.quantile_us(0.9), 15_030.0); // capped at the max
        h.record(120_000_000_000); // 120 s: last bin
        assert_eq!(h.max_us(), 120_000_000.0);
    }

    #[test]
    fn buckets_are_contiguous() {
        for i in 0..BUCKETS - 1 {
            assert_eq!(index(lower(i)), i, "bucket {i}");
            assert_eq!(index(lower(i + 1) - 1), i, "end of bucket {i}");
        }
    }

    #[test]
    fn quantiles_within_precision() {
        let mut h = Histogram::new();
        for v in 1..=100_000u64 {
            h.record(v * 1000); // 1..100000 us
        }
        for q in [0.5, 0.9, 0.99] {
            let want = q * 100_000.0;
            let got = h.quantile_us(q);
            assert!((got / want - 1.0).abs() < 0.016, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.max_us(), 100_000.0);
        assert!((h.mean_us() - 50_000.5).abs() < 1e-6);
        let mut e = Histogram::new();
        assert_eq!(e.quantile_us(0.99), 0.0);
        e.record(57_000);
        assert_eq!(e.quantile_us(0.5), 57.0);
        e.clear();
        assert_eq!(e.count(), 0);
    }
}
