//! The configuration of the `dualpi2` qdisc (RFC 9332; algorithm in
//! `qdisc/dualpi2.rs`): fields, Linux sch_dualpi2's defaults, range checks.

use serde::{Deserialize, Serialize};

use super::validate::{non_negative, positive};
use super::ConfigError;

/// DualPI2 (RFC 9332), see `qdisc/dualpi2.rs` for the algorithm.  Defaults
/// are Linux sch_dualpi2's (which follow the RFC's Appendix A).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DualPi2 {
    /// Packets in both queues together before tail drop (Linux: 10000).
    pub limit_pkts: usize,
    /// Classic queue delay target of the PI controller.
    pub target_ms: f64,
    /// PI update interval.
    pub tupdate_ms: f64,
    /// Integral gain: p' += alpha_hz * (qdelay - target) per update (delays in s).
    pub alpha_hz: f64,
    /// Proportional gain: p' += beta_hz * (qdelay - previous qdelay) per update.
    pub beta_hz: f64,
    /// Coupling factor: p_CL = k * p'.
    pub k: f64,
    /// Native L4S AQM: marking starts above this sojourn (a step when equal to l_max_th_ms).
    pub l_min_th_ms: f64,
    /// Native L4S AQM: every packet marked at or above this sojourn (ramp between
    /// the two thresholds); null: equal to l_min_th_ms (a step).
    pub l_max_th_ms: Option<f64>,
    /// The native L4S AQM only marks while the L queue holds at least this many
    /// packets besides the one leaving (RFC 9332's Th_len; Linux's min_qlen_step).
    pub l_min_qlen_pkts: usize,
    /// How packets are sorted into the L queue: "ecn" (ECT(1) and CE) or
    /// "dscp" (the DSCP values in `l_dscp`, whatever their ECN field).
    pub classifier: String,
    /// DSCP values (0..63) that go to the L queue with classifier "dscp".
    pub l_dscp: Vec<u8>,
    /// Scheduler between the queues: "wrr" (Linux's weighted round robin with
    /// credit, C weight `c_weight_pct`) or "tsfifo" (RFC 9332's time-shifted FIFO).
    pub scheduler: String,
    /// WRR: share of the C queue when both queues are backlogged (Linux c_protection: 10).
    pub c_weight_pct: f64,
    /// TS-FIFO: the L queue is served unless the C head has waited tshift longer than the L head.
    pub tshift_ms: f64,
    /// When p_CL would exceed 1 (p_C > 1/k^2): drop instead of marking, in both
    /// queues (RFC 9332 section 4.2.1; Linux drop_overload).  false: cap p' at 1/k
    /// and keep marking, letting the queues grow up to the limit.
    pub drop_on_overload: bool,
}

impl Default for DualPi2 {
    fn default() -> Self {
        Self {
            limit_pkts: 10_000,
            target_ms: 15.0,
            tupdate_ms: 16.0,
            alpha_hz: 0.16,
            beta_hz: 3.2,
            k: 2.0,
            l_min_th_ms: 1.0,
            l_max_th_ms: None,
            l_min_qlen_pkts: 1,
            classifier: "ecn".into(),
            l_dscp: Vec::new(),
            scheduler: "wrr".into(),
            c_weight_pct: 10.0,
            tshift_ms: 50.0,
            drop_on_overload: true,
        }
    }
}

impl DualPi2 {
    pub(super) fn validate(&self, at: &str) -> Result<(), ConfigError> {
        let f = |name: &str| format!("{at}.{name}");
        if self.limit_pkts == 0 || self.limit_pkts > 10_000_000 {
            return Err(ConfigError::new(f("limit_pkts"), "must be 1..10000000"));
        }
        let ms_range = |name: &str, v: f64, lo_open: bool| -> Result<(), ConfigError> {
            let ok = v.is_finite() && v <= 60_000.0 && if lo_open { v > 0.0 } else { v >= 0.0 };
            if ok {
                Ok(())
            } else {
                let lo = if lo_open { "> 0" } else { ">= 0" };
                Err(ConfigError::new(f(name), format!("must be {lo} and <= 60000 (ms), got {v}")))
            }
        };
        ms_range("target_ms", self.target_ms, true)?;
        ms_range("tupdate_ms", self.tupdate_ms, true)?;
        if self.tupdate_ms < 0.1 {
            return Err(ConfigError::new(f("tupdate_ms"), format!("must be >= 0.1 ms, got {}", self.tupdate_ms)));
        }
        positive(&f("alpha_hz"), self.alpha_hz)?;
        non_negative(&f("beta_hz"), self.beta_hz)?;
        if !(self.k.is_finite() && self.k >= 0.5 && self.k <= 64.0) {
            return Err(ConfigError::new(f("k"), format!("must be in [0.5, 64] (RFC 9332 uses 2), got {}", self.k)));
        }
        ms_range("l_min_th_ms", self.l_min_th_ms, false)?;
        if let Some(m) = self.l_max_th_ms {
            ms_range("l_max_th_ms", m, false)?;
            if m < self.l_min_th_ms {
                return Err(ConfigError::new(
                    f("l_max_th_ms"),
                    format!("must be >= l_min_th_ms ({}), got {m}", self.l_min_th_ms),
                ));
            }
        }
        if self.l_min_qlen_pkts > 10_000_000 {
            return Err(ConfigError::new(f("l_min_qlen_pkts"), "must be <= 10000000"));
        }
        match self.classifier.as_str() {
            "ecn" => {
                if !self.l_dscp.is_empty() {
                    return Err(ConfigError::new(
                        f("l_dscp"),
                        "only used with classifier \"dscp\" (remove it or set classifier = \"dscp\")",
                    ));
                }
            }
            "dscp" => {
                if self.l_dscp.is_empty() {
                    return Err(ConfigError::new(
                        f("l_dscp"),
                        "classifier \"dscp\" needs at least one DSCP value (0..63)",
                    ));
                }
                if let Some(d) = self.l_dscp.iter().find(|&&d| d > 63) {
                    return Err(ConfigError::new(f("l_dscp"), format!("DSCP values are 0..63, got {d}")));
                }
            }
            other => {
                return Err(ConfigError::new(
                    f("classifier"),
                    format!("unknown classifier `{other}`, expected `ecn` or `dscp`"),
                ))
            }
        }
        match self.scheduler.as_str() {
            "wrr" | "tsfifo" => {}
            other => {
                return Err(ConfigError::new(
                    f("scheduler"),
                    format!("unknown scheduler `{other}`, expected `wrr` or `tsfifo`"),
                ))
            }
        }
        if !(self.c_weight_pct.is_finite() && (0.0..=100.0).contains(&self.c_weight_pct)) {
            return Err(ConfigError::new(f("c_weight_pct"), format!("must be in [0, 100], got {}", self.c_weight_pct)));
        }
        ms_range("tshift_ms", self.tshift_ms, false)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_base::{err, BASE};
    use super::super::{Config, QdiscConfig};

    #[test]
    fn dualpi2_defaults_and_errors() {
        let dq = |q: &str| BASE.replace(r#"{"kind": "pfifo", "limit_pkts": 50}"#, q);
        let c = Config::from_json(&dq(r#"{"kind": "dualpi2"}"#)).unwrap();
        c.validate().unwrap();
        let QdiscConfig::DualPi2(d) = &c.uplink.qdisc else { panic!() };
        assert_eq!((d.target_ms, d.tupdate_ms, d.alpha_hz, d.beta_hz, d.k), (15.0, 16.0, 0.16, 3.2, 2.0));
        assert_eq!((d.l_min_th_ms, d.l_max_th_ms, d.limit_pkts), (1.0, None, 10_000));
        assert_eq!((d.classifier.as_str(), d.scheduler.as_str(), d.c_weight_pct), ("ecn", "wrr", 10.0));
        assert!(d.drop_on_overload);
        for (q, field) in [
            (r#"{"kind": "dualpi2", "target_ms": 0}"#, "uplink.qdisc.target_ms"),
            (r#"{"kind": "dualpi2", "l_max_th_ms": 0.5}"#, "uplink.qdisc.l_max_th_ms"),
            (r#"{"kind": "dualpi2", "classifier": "dscp"}"#, "uplink.qdisc.l_dscp"),
            (r#"{"kind": "dualpi2", "l_dscp": [40]}"#, "uplink.qdisc.l_dscp"),
            (r#"{"kind": "dualpi2", "classifier": "dscp", "l_dscp": [64]}"#, "uplink.qdisc.l_dscp"),
            (r#"{"kind": "dualpi2", "classifier": "tos"}"#, "uplink.qdisc.classifier"),
            (r#"{"kind": "dualpi2", "scheduler": "fifo"}"#, "uplink.qdisc.scheduler"),
            (r#"{"kind": "dualpi2", "c_weight_pct": 101}"#, "uplink.qdisc.c_weight_pct"),
            (r#"{"kind": "dualpi2", "k": 0}"#, "uplink.qdisc.k"),
            (r#"{"kind": "dualpi2", "alpha": 1}"#, "uplink.qdisc.alpha"),
            (r#"{"kind": "dualpi2", "limit_pkts": 0}"#, "uplink.qdisc.limit_pkts"),
        ] {
            assert_eq!(err(&dq(q)).field, field, "{q}");
        }
        let e = err(&BASE.replace(
            "\"wifi\": null",
            "\"wifi\": {\"clients\": [{\"phy_rate_mbit\": 1}, {\"phy_rate_mbit\": 1}], \"queue\": {\"kind\": \"dualpi2\"}}",
        ));
        assert_eq!(e.field, "wifi.queue.kind", "{e}");
    }
}
