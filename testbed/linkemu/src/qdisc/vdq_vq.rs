//! One virtual queue of VDQ-CSAQM (paper 004, section 3; the discipline is
//! [`super::vdq_csaqm`]): a FIFO of packet records (coded value v, size in
//! bits) served at C_vi, with the histogram H_IN of the bits it holds per
//! coded value, from which the congestion threshold value (CTV) is computed.
//!
//! * **Arrival**: the record (v, ps) is appended; vqlen += ps; H_IN(v) += ps.
//! * **Service** of `bits`: records are removed from the head, the last one
//!   partly if needed (its size decreased, "instead of dropping all packet
//!   information"); H_IN and vqlen follow.  Fractions of a bit are carried
//!   over to the next service.
//! * **CTV**: with l = C_vi * D_i, CTV = 0 if vqlen <= l; else the smallest
//!   v with sum_{j >= v} H_IN(j) <= l (accumulating from V_max = 65535
//!   down).  The CTV is a u32: 65536 means even the highest-valued bits
//!   exceed l (every packet is then acted upon).  The scan uses 256-code
//!   block sums, so an update costs at most 256 + 256 steps.

use std::collections::VecDeque;

const BLOCK: usize = 256;
const CODES: usize = 1 << 16;

/// Bits per coded packet value (0..=65535), with 256-code block sums so a
/// scan from either end costs at most 256 + 256 steps.  Shared by the
/// virtual queues and the steady CTV rule's arrival window
/// ([`super::vdq_steady`]).
pub struct ValueHistogram {
    hist: Vec<u64>,
    blocks: Vec<u64>,
    total: u64,
}

impl Default for ValueHistogram {
    fn default() -> Self {
        ValueHistogram { hist: vec![0; CODES], blocks: vec![0; CODES / BLOCK], total: 0 }
    }
}

impl ValueHistogram {
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Add (or, negative, remove) `bits` of value v.
    pub fn add(&mut self, v: u16, bits: i64) {
        let h = &mut self.hist[v as usize];
        *h = h.wrapping_add_signed(bits);
        let b = &mut self.blocks[v as usize / BLOCK];
        *b = b.wrapping_add_signed(bits);
        self.total = self.total.wrapping_add_signed(bits);
    }

    /// The smallest v whose tail sum_{j >= v} fits `l` bits (65536: not even
    /// the top value's bits fit; 0: everything fits).
    pub fn tail_cut(&self, l: u64) -> u32 {
        let mut acc = 0u64;
        for b in (0..self.blocks.len()).rev() {
            if acc + self.blocks[b] <= l {
                acc += self.blocks[b];
                continue;
            }
            for v in (b * BLOCK..(b + 1) * BLOCK).rev() {
                if acc + self.hist[v] > l {
                    return v as u32 + 1;
                }
                acc += self.hist[v];
            }
        }
        0
    }

    /// The smallest v' with sum_{j < v'} >= `bits`: a threshold below which
    /// at least `bits` of the histogram lie (0 when `bits` is 0; `bits` past
    /// the total counts as the total: one above the highest value held).
    pub fn head_cut(&self, bits: u64) -> u32 {
        let bits = bits.min(self.total);
        if bits == 0 {
            return 0;
        }
        let mut acc = 0u64;
        for b in 0..self.blocks.len() {
            if acc + self.blocks[b] < bits {
                acc += self.blocks[b];
                continue;
            }
            for v in b * BLOCK..(b + 1) * BLOCK {
                acc += self.hist[v];
                if acc >= bits {
                    return v as u32 + 1;
                }
            }
        }
        unreachable!("the block sums add up to the total")
    }

    #[cfg(test)]
    pub fn is_zero(&self) -> bool {
        self.total == 0 && self.hist.iter().all(|&h| h == 0) && self.blocks.iter().all(|&b| b == 0)
    }
}

pub struct VirtualQueue {
    /// (coded value, bits left) from the oldest.
    records: VecDeque<(u16, u64)>,
    hist: ValueHistogram,
    carry: f64,
    /// Service rate C_vi, bit/s.
    pub rate_bps: f64,
    /// vqmax_i, bits.
    pub max_bits: u64,
    /// l_i = C_vi * D_i, bits.
    pub threshold_bits: u64,
}

impl VirtualQueue {
    pub fn new(rate_bps: f64, max_bits: u64, threshold_bits: u64) -> VirtualQueue {
        VirtualQueue {
            records: VecDeque::new(),
            hist: ValueHistogram::default(),
            carry: 0.0,
            rate_bps,
            max_bits,
            threshold_bits,
        }
    }

    pub fn len_bits(&self) -> u64 {
        self.hist.total()
    }

    /// Room for `bits` more (vqlen + ps <= vqmax).
    pub fn fits(&self, bits: u64) -> bool {
        self.len_bits() + bits <= self.max_bits
    }

    pub fn push(&mut self, v: u16, bits: u64) {
        self.records.push_back((v, bits));
        self.hist.add(v, bits as i64);
    }

    /// Remove `bits` (fractional) from the head.
    pub fn serve(&mut self, bits: f64) {
        self.carry += bits;
        let mut whole = self.carry.floor();
        self.carry -= whole;
        while whole >= 1.0 {
            let Some(&mut (v, ref mut left)) = self.records.front_mut() else {
                self.carry = 0.0; // an empty VQ banks no service
                return;
            };
            let take = (*left as f64).min(whole) as u64;
            *left -= take;
            whole -= take as f64;
            if *left == 0 {
                self.records.pop_front();
            }
            self.hist.add(v, -(take as i64));
        }
    }

    /// The CTV from the histogram (module comment).
    pub fn ctv(&self) -> u32 {
        if self.len_bits() <= self.threshold_bits {
            return 0;
        }
        self.hist.tail_cut(self.threshold_bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctv_keeps_the_highest_values_that_fit_the_threshold() {
        let mut q = VirtualQueue::new(1e6, 1_000_000, 30_000);
        for v in [100u16, 200, 300, 400] {
            q.push(v, 12_000);
        }
        // 48000 bits > 30000: 400 and 300 fit (24000), 200 would exceed: CTV = 201.
        assert_eq!(q.ctv(), 201);
        q.serve(12_000.0 + 6_000.0); // 100 gone, 200 half gone: 30000 left, all of it fits
        assert_eq!(q.len_bits(), 30_000);
        assert_eq!(q.ctv(), 0);
        q.push(65535, 40_000);
        assert_eq!(q.ctv(), 65536, "even the top value exceeds l");
        q.serve(0.4);
        q.serve(0.6);
        assert_eq!(q.len_bits(), 69_999);
        q.serve(1e9);
        assert_eq!((q.len_bits(), q.records.len()), (0, 0));
        assert!(q.hist.is_zero());
    }

    #[test]
    fn head_cut_is_the_low_quantile_threshold() {
        let mut h = ValueHistogram::default();
        assert_eq!(h.head_cut(1), 0, "empty");
        h.add(10, 100);
        h.add(300, 100);
        h.add(60_000, 200);
        assert_eq!(h.head_cut(0), 0);
        assert_eq!(h.head_cut(1), 11, "the lowest value's bits reach 1");
        assert_eq!(h.head_cut(100), 11);
        assert_eq!(h.head_cut(101), 301, "crosses a block");
        assert_eq!(h.head_cut(400), 60_001);
        assert_eq!(h.head_cut(10_000), 60_001, "past the total: above the highest value held");
        assert_eq!(h.tail_cut(200), 301, "values >= 301 hold the top 200 bits");
        assert_eq!(h.tail_cut(299), 301);
        assert_eq!(h.tail_cut(300), 11);
        assert_eq!(h.tail_cut(400), 0, "everything fits");
    }

    #[test]
    fn ctv_scan_crosses_blocks() {
        let mut q = VirtualQueue::new(1e6, u64::MAX, 1000);
        q.push(1000, 600);
        q.push(700, 300);
        q.push(5, 500);
        assert_eq!(q.ctv(), 6);
        q.push(600, 200);
        assert_eq!(q.ctv(), 601);
    }
}
