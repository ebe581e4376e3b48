//! DualPI2's parameters in the emulator's units (nanoseconds, probabilities,
//! the classifier's DSCP set), from the `dualpi2` config section
//! (`config/dualpi2.rs`): which packets go to the L queue ([`Classifier`]),
//! which scheduler serves the two queues ([`Scheduler`]), and the rest of
//! [`Params`] (meanings in the header of `dualpi2.rs`).

use crate::config;
use crate::time::Nanos;

/// Which packets go to the L queue.
#[derive(Debug, Clone)]
pub enum Classifier {
    /// ECT(1) and CE (RFC 9331's L4S identifier).
    Ecn,
    /// The DSCPs marked true.
    Dscp(Box<[bool; 64]>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scheduler {
    /// Weighted round robin with credit; C weight in percent.
    Wrr { c_weight_pct: f64 },
    /// Time-shifted FIFO.
    TsFifo { tshift: Nanos },
}

/// Every parameter, in the emulator's units (see the header of `dualpi2.rs`).
#[derive(Debug, Clone)]
pub struct Params {
    pub limit_pkts: usize,
    pub target: Nanos,
    pub tupdate: Nanos,
    pub alpha_hz: f64,
    pub beta_hz: f64,
    pub k: f64,
    pub l_min_th: Nanos,
    pub l_max_th: Nanos,
    pub l_min_qlen: usize,
    pub classifier: Classifier,
    pub scheduler: Scheduler,
    pub drop_on_overload: bool,
}

fn ms(v: f64) -> Nanos {
    (v * 1e6).round() as Nanos
}

impl Params {
    pub fn from_config(c: &config::DualPi2) -> Params {
        let classifier = if c.classifier == "dscp" {
            let mut set = Box::new([false; 64]);
            for &d in &c.l_dscp {
                set[(d & 63) as usize] = true;
            }
            Classifier::Dscp(set)
        } else {
            Classifier::Ecn
        };
        let scheduler = if c.scheduler == "tsfifo" {
            Scheduler::TsFifo { tshift: ms(c.tshift_ms) }
        } else {
            Scheduler::Wrr { c_weight_pct: c.c_weight_pct }
        };
        Params {
            limit_pkts: c.limit_pkts,
            target: ms(c.target_ms),
            tupdate: ms(c.tupdate_ms).max(1),
            alpha_hz: c.alpha_hz,
            beta_hz: c.beta_hz,
            k: c.k,
            l_min_th: ms(c.l_min_th_ms),
            l_max_th: ms(c.l_max_th_ms.unwrap_or(c.l_min_th_ms)),
            l_min_qlen: c.l_min_qlen_pkts,
            classifier,
            scheduler,
            drop_on_overload: c.drop_on_overload,
        }
    }
}

impl Default for Params {
    /// RFC 9332 / Linux defaults.
    fn default() -> Self {
        Params::from_config(&config::DualPi2::default())
    }
}
