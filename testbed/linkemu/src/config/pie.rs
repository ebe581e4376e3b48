//! The configuration of the `pie` and `fq_pie` qdiscs (RFC 8033; Linux
//! sch_pie / sch_fq_pie; algorithm in `qdisc/pie.rs` and `qdisc/fq_pie.rs`),
//! and of `fq_dualpi2` (paper 000's hashed pairs of L4S and Classic queues
//! under a coupled PIE; `qdisc/fq_dualpi2.rs`).  Defaults are Linux's; the
//! controller fields are shared by all three.

use serde::{Deserialize, Serialize};

use super::validate::{flow_queues, packet_limit};
use super::ConfigError;

/// pie: one FIFO under RFC 8033's PI controller, drop (or mark) at enqueue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Pie {
    /// Queue delay the controller aims at (Linux: 15 ms).
    pub target_ms: f64,
    /// Interval of the drop probability update (Linux: 15 ms).
    pub tupdate_ms: f64,
    /// Integral gain, Hz: p += alpha * (qdelay - target) per update, delays in s
    /// (Linux: 0.125, its `alpha 2` in sixteenths), before RFC 8033's auto-tuning.
    pub alpha: f64,
    /// Proportional gain, Hz: p += beta * (qdelay - previous qdelay) per update (Linux: 1.25).
    pub beta: f64,
    /// Burst allowance: no early drop for this long of dequeuing after the
    /// controller last rested (Linux: 150 ms, fixed; FreeBSD's max_burst).
    pub max_burst_ms: f64,
    /// Packets queued before tail drop (Linux: 1000).
    pub limit_pkts: usize,
    /// CE-mark ECN-capable packets instead of dropping them while p <= 10 % (Linux: off).
    pub ecn: bool,
    /// Scale the drop probability by packet size / MTU (Linux: off).
    pub bytemode: bool,
}

impl Default for Pie {
    fn default() -> Self {
        Self {
            target_ms: 15.0,
            tupdate_ms: 15.0,
            alpha: 0.125,
            beta: 1.25,
            max_burst_ms: 150.0,
            limit_pkts: 1000,
            ecn: false,
            bytemode: false,
        }
    }
}

/// fq_pie: fq_codel's per-flow queues and DRR, a PIE controller per queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FqPie {
    /// Flow queues the 5-tuples hash into (Linux: 1024).
    pub flows: usize,
    /// Bytes per queue per DRR round (Linux: the device MTU + Ethernet header, 1514).
    pub quantum: usize,
    /// PIE of every flow queue (as `pie`).
    pub target_ms: f64,
    pub tupdate_ms: f64,
    pub alpha: f64,
    pub beta: f64,
    pub max_burst_ms: f64,
    /// Packets in all queues together; beyond it the arriving packet is dropped (Linux: 10240).
    pub limit_pkts: usize,
    pub ecn: bool,
    /// With `ecn`: mark instead of dropping while the flow's p <= this percentage (Linux: 10).
    pub ecn_prob_pct: f64,
    pub bytemode: bool,
}

impl Default for FqPie {
    fn default() -> Self {
        let p = Pie::default();
        Self {
            flows: 1024,
            quantum: 1514,
            target_ms: p.target_ms,
            tupdate_ms: p.tupdate_ms,
            alpha: p.alpha,
            beta: p.beta,
            max_burst_ms: p.max_burst_ms,
            limit_pkts: 10_240,
            ecn: false,
            ecn_prob_pct: 10.0,
            bytemode: false,
        }
    }
}

/// fq_dualpi2: `flows` / 2 pairs of a Classic and an L4S FIFO (5-tuple hash
/// picks the pair, a non-zero ECN field the L4S FIFO), DRR between the
/// pairs, a PIE controller per pair giving p' (p_C = p'^2, p_CL = k p').
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FqDualPi2 {
    /// FIFOs in all, two per pair (paper 000: 6, i.e. 3 pairs); even.
    pub flows: usize,
    /// Bytes per pair per DRR round (fq_pie's 1514).
    pub quantum: usize,
    /// The PIE controller of each pair (as `pie`), on its Classic queue's delay.
    pub target_ms: f64,
    pub tupdate_ms: f64,
    pub alpha: f64,
    pub beta: f64,
    pub max_burst_ms: f64,
    /// Packets in all queues together; beyond it the arriving packet is dropped (fq_pie's 10240).
    pub limit_pkts: usize,
    /// Coupling factor: p_CL = k p' (paper 000 and RFC 9332: 2).
    pub k: f64,
    /// The L4S queue's native AQM: mark a packet whose sojourn exceeds this (a step; RFC 9332: 1 ms).
    pub l_min_th_ms: f64,
    /// Share of a pair's bytes its Classic queue gets when both its queues are
    /// backlogged (DualPI2's WRR "C protection", Linux: 10); the L queue has
    /// precedence otherwise.
    pub c_weight_pct: f64,
    /// When k p' > 1: L4S packets are dropped with p'^2 before marking (as `dualpi2`); false: p' capped at 1/k.
    pub drop_on_overload: bool,
}

impl Default for FqDualPi2 {
    fn default() -> Self {
        let p = Pie::default();
        Self {
            flows: 6,
            quantum: 1514,
            target_ms: p.target_ms,
            tupdate_ms: p.tupdate_ms,
            alpha: p.alpha,
            beta: p.beta,
            max_burst_ms: p.max_burst_ms,
            limit_pkts: 10_240,
            k: 2.0,
            l_min_th_ms: 1.0,
            c_weight_pct: 10.0,
            drop_on_overload: true,
        }
    }
}

/// The controller fields both share; ranges as Linux / tc accept them
/// (alpha and beta: tc's 0..32 sixteenths).
fn controller(at: &str, target: f64, tupdate: f64, alpha: f64, beta: f64, burst: f64) -> Result<(), ConfigError> {
    let f = |name: &str| format!("{at}.{name}");
    if !(target.is_finite() && target > 0.0 && target <= 60_000.0) {
        return Err(ConfigError::new(f("target_ms"), format!("must be > 0 and <= 60000 (ms), got {target}")));
    }
    if !(tupdate.is_finite() && (0.1..=60_000.0).contains(&tupdate)) {
        return Err(ConfigError::new(f("tupdate_ms"), format!("must be 0.1..60000 (ms), got {tupdate}")));
    }
    if !(alpha.is_finite() && alpha > 0.0 && alpha <= 2.0) {
        return Err(ConfigError::new(f("alpha"), format!("must be > 0 and <= 2 (Hz; Linux 0.125), got {alpha}")));
    }
    if !(beta.is_finite() && (0.0..=2.0).contains(&beta)) {
        return Err(ConfigError::new(f("beta"), format!("must be 0..2 (Hz; Linux 1.25), got {beta}")));
    }
    if !(burst.is_finite() && (0.0..=60_000.0).contains(&burst)) {
        return Err(ConfigError::new(f("max_burst_ms"), format!("must be 0..60000 (ms), got {burst}")));
    }
    Ok(())
}

impl Pie {
    pub(super) fn validate(&self, at: &str) -> Result<(), ConfigError> {
        controller(at, self.target_ms, self.tupdate_ms, self.alpha, self.beta, self.max_burst_ms)?;
        packet_limit(&format!("{at}.limit_pkts"), self.limit_pkts)
    }
}

impl FqPie {
    pub(super) fn validate(&self, at: &str) -> Result<(), ConfigError> {
        flow_queues(at, self.flows, self.quantum)?;
        controller(at, self.target_ms, self.tupdate_ms, self.alpha, self.beta, self.max_burst_ms)?;
        packet_limit(&format!("{at}.limit_pkts"), self.limit_pkts)?;
        let e = self.ecn_prob_pct;
        if !(e.is_finite() && (0.0..=100.0).contains(&e)) {
            return Err(ConfigError::new(format!("{at}.ecn_prob_pct"), format!("must be 0..100 (%), got {e}")));
        }
        Ok(())
    }
}

impl FqDualPi2 {
    pub(super) fn validate(&self, at: &str) -> Result<(), ConfigError> {
        let f = |name: &str| format!("{at}.{name}");
        if !(2..=65_536).contains(&self.flows) || self.flows % 2 != 0 {
            return Err(ConfigError::new(
                f("flows"),
                format!("must be even, 2..65536 (pairs of an L4S and a Classic queue; default 6), got {}", self.flows),
            ));
        }
        flow_queues(at, self.flows, self.quantum)?;
        controller(at, self.target_ms, self.tupdate_ms, self.alpha, self.beta, self.max_burst_ms)?;
        packet_limit(&f("limit_pkts"), self.limit_pkts)?;
        if !(self.k.is_finite() && (0.5..=64.0).contains(&self.k)) {
            return Err(ConfigError::new(f("k"), format!("must be in [0.5, 64] (paper 000 uses 2), got {}", self.k)));
        }
        let l = self.l_min_th_ms;
        if !(l.is_finite() && (0.0..=60_000.0).contains(&l)) {
            return Err(ConfigError::new(f("l_min_th_ms"), format!("must be 0..60000 (ms), got {l}")));
        }
        let c = self.c_weight_pct;
        if !(c.is_finite() && (0.0..=100.0).contains(&c)) {
            return Err(ConfigError::new(f("c_weight_pct"), format!("must be 0..100 (%), got {c}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, ConfigError, QdiscConfig};

    fn cfg(qdisc: &str) -> Result<Config, ConfigError> {
        let text = r#"{"client_ifs": ["c1"], "server_if": "srv", "uplink": {"qdisc": QDISC}, "downlink": {}}"#;
        let c = Config::from_json(&text.replace("QDISC", qdisc))?;
        c.validate().map(|_| c)
    }

    #[test]
    fn pie_and_fq_pie_defaults_are_linux_s() {
        let c = cfg(r#"{"kind": "pie"}"#).unwrap();
        let QdiscConfig::Pie(p) = &c.uplink.qdisc else { panic!() };
        assert_eq!((p.target_ms, p.tupdate_ms, p.alpha, p.beta, p.max_burst_ms), (15.0, 15.0, 0.125, 1.25, 150.0));
        assert_eq!((p.limit_pkts, p.ecn, p.bytemode), (1000, false, false));
        let c = cfg(r#"{"kind": "fq_pie", "flows": 6, "ecn": true}"#).unwrap();
        let QdiscConfig::FqPie(f) = &c.uplink.qdisc else { panic!() };
        assert_eq!((f.flows, f.quantum, f.limit_pkts, f.ecn, f.ecn_prob_pct), (6, 1514, 10_240, true, 10.0));
        assert_eq!((f.target_ms, f.tupdate_ms, f.alpha, f.beta, f.max_burst_ms), (15.0, 15.0, 0.125, 1.25, 150.0));
    }

    #[test]
    fn pie_and_fq_pie_errors_name_the_field() {
        for (q, field, words) in [
            (r#"{"kind": "pie", "target_ms": 0}"#, "uplink.qdisc.target_ms", "must be > 0"),
            (r#"{"kind": "pie", "tupdate_ms": 0.01}"#, "uplink.qdisc.tupdate_ms", "must be 0.1..60000"),
            (r#"{"kind": "pie", "alpha": 0}"#, "uplink.qdisc.alpha", "must be > 0 and <= 2"),
            (r#"{"kind": "pie", "alpha": 3}"#, "uplink.qdisc.alpha", "must be > 0 and <= 2"),
            (r#"{"kind": "pie", "beta": -1}"#, "uplink.qdisc.beta", "must be 0..2"),
            (r#"{"kind": "pie", "max_burst_ms": -5}"#, "uplink.qdisc.max_burst_ms", "must be 0..60000"),
            (r#"{"kind": "pie", "limit_pkts": 0}"#, "uplink.qdisc.limit_pkts", "must be 1..10000000"),
            (r#"{"kind": "pie", "ecn": "yes"}"#, "uplink.qdisc.ecn", "invalid type"),
            (r#"{"kind": "pie", "alpha_hz": 0.1}"#, "uplink.qdisc.alpha_hz", "unknown field"),
            (r#"{"kind": "pie", "ecn_prob_pct": 20}"#, "uplink.qdisc.ecn_prob_pct", "unknown field"),
            (r#"{"kind": "pie", "flows": 16}"#, "uplink.qdisc.flows", "unknown field"),
            (r#"{"kind": "fq_pie", "flows": 0}"#, "uplink.qdisc.flows", "must be 1..65536"),
            (r#"{"kind": "fq_pie", "quantum": 100}"#, "uplink.qdisc.quantum", "must be 256..1048576"),
            (r#"{"kind": "fq_pie", "ecn_prob_pct": 101}"#, "uplink.qdisc.ecn_prob_pct", "must be 0..100"),
            (r#"{"kind": "fq_pie", "beta": 2.5}"#, "uplink.qdisc.beta", "must be 0..2"),
            (r#"{"kind": "fq_pie", "limit_pkts": 20000000}"#, "uplink.qdisc.limit_pkts", "must be 1..10000000"),
            (r#"{"kind": "fq_pie", "flow_limit_pkts": 100}"#, "uplink.qdisc.flow_limit_pkts", "unknown field"),
            (r#"{"kind": "fq-pie"}"#, "uplink.qdisc.kind", "`pie`, `fq_pie`"),
        ] {
            let e = cfg(q).unwrap_err();
            assert_eq!(e.field, field, "{q}: {e}");
            assert!(e.msg.contains(words), "{q}: {e}");
        }
    }

    #[test]
    fn fq_dualpi2_defaults_and_errors() {
        let c = cfg(r#"{"kind": "fq_dualpi2"}"#).unwrap();
        let QdiscConfig::FqDualPi2(f) = &c.uplink.qdisc else { panic!() };
        assert_eq!((f.flows, f.quantum, f.limit_pkts, f.k, f.l_min_th_ms), (6, 1514, 10_240, 2.0, 1.0));
        assert_eq!((f.target_ms, f.tupdate_ms, f.alpha, f.beta, f.max_burst_ms), (15.0, 15.0, 0.125, 1.25, 150.0));
        assert_eq!((f.c_weight_pct, f.drop_on_overload), (10.0, true));
        for (q, field, words) in [
            (r#"{"kind": "fq_dualpi2", "flows": 5}"#, "uplink.qdisc.flows", "must be even"),
            (r#"{"kind": "fq_dualpi2", "flows": 0}"#, "uplink.qdisc.flows", "must be even"),
            (r#"{"kind": "fq_dualpi2", "quantum": 100}"#, "uplink.qdisc.quantum", "must be 256..1048576"),
            (r#"{"kind": "fq_dualpi2", "alpha": 3}"#, "uplink.qdisc.alpha", "must be > 0 and <= 2"),
            (r#"{"kind": "fq_dualpi2", "k": 0.1}"#, "uplink.qdisc.k", "must be in [0.5, 64]"),
            (r#"{"kind": "fq_dualpi2", "l_min_th_ms": -1}"#, "uplink.qdisc.l_min_th_ms", "must be 0..60000"),
            (r#"{"kind": "fq_dualpi2", "c_weight_pct": 120}"#, "uplink.qdisc.c_weight_pct", "must be 0..100"),
            (r#"{"kind": "fq_dualpi2", "limit_pkts": 0}"#, "uplink.qdisc.limit_pkts", "must be 1..10000000"),
            (r#"{"kind": "fq_dualpi2", "ecn": true}"#, "uplink.qdisc.ecn", "unknown field"),
        ] {
            let e = cfg(q).unwrap_err();
            assert_eq!(e.field, field, "{q}: {e}");
            assert!(e.msg.contains(words), "{q}: {e}");
        }
    }

    #[test]
    fn pie_and_fq_pie_are_not_wifi_queues() {
        for kind in ["pie", "fq_pie", "fq_dualpi2"] {
            let text = r#"{"client_ifs": ["c1"], "server_if": "srv", "uplink": {}, "downlink": {},
                "wifi": {"clients": [{"phy_rate_mbit": 100}], "queue": {"kind": "KIND"}}}"#;
            let e = Config::from_json(&text.replace("KIND", kind)).unwrap().validate().unwrap_err();
            assert_eq!(e.field, "wifi.queue.kind", "{e}");
            assert!(e.msg.contains("uplink/downlink qdiscs only"), "{e}");
        }
    }
}
