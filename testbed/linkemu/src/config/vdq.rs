//! The configuration of the `vdq_csaqm` qdisc (paper 004's Virtual Dual
//! Queue Core-Stateless AQM with its per-flow packet-value marker; algorithm
//! in `qdisc/vdq_csaqm.rs`, marker and policies in `qdisc/pv_marker.rs`).
//! Defaults are the paper's (section 3): C_v0 = 0.9 C, C_v1 = 0.984 C,
//! qmax_0 = C * 50 ms, qmax_1 = C * 200 ms, D_0 = 1 ms, D_1 = 20 ms,
//! T_update,ctv = 10 ms, every flow Gold.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// The marker's policies (throughput-value functions, `qdisc/pv_marker.rs`).
pub const VDQ_POLICIES: [&str; 3] = ["gold", "silver", "voice"];

/// The steady CTV rule's window (ms), PI gains (alpha, beta) and setpoint (a
/// fraction of l_1) by default (chosen in virtual time, `qdisc/vdq_tests.rs`).
pub const STEADY_DEFAULTS: (f64, f64, f64, f64) = (100.0, 0.001, 0.01, 0.5);

/// One rule of the marker: a flow whose 5-tuple matches every field given gets `policy`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolicyRule {
    pub policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sport: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dport: Option<u16>,
}

/// vdq_csaqm: two physical FIFOs (L4S with strict priority, Classic), two
/// virtual queues, CTVs from the virtual queues' packet-value histograms.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VdqCsaqm {
    /// Bottleneck capacity C, Mbit/s; null: the link's `rate_mbit` (required
    /// when the link has none, e.g. a trace).
    pub rate_mbit: Option<f64>,
    /// Service rate of VQ_0 (L4S) and VQ_1 (both classes) as fractions of C.
    pub vq0_rate: f64,
    pub vq1_rate: f64,
    /// Physical queue sizes as time at C: qmax_0 (L4S), qmax_1 (Classic); vqmax_0 = qmax_0, vqmax_1 = qmax_0 + qmax_1.
    pub qmax0_ms: f64,
    pub qmax1_ms: f64,
    /// Target delays of the virtual queues, D_0 and D_1.
    pub target0_ms: f64,
    pub target1_ms: f64,
    /// CTV recomputation interval T_update,ctv.
    pub tupdate_ms: f64,
    /// `"ecn"`: ECT(1)/CE -> L4S queue; `"dscp"`: DSCPs in `l_dscp` -> L4S queue.
    pub classifier: String,
    pub l_dscp: Vec<u8>,
    /// Classic queue: CE-mark ECT packets below CTV (paper's algorithm); false: drop them
    /// (the paper's setting for BBRv2 in the Classic queue).
    pub classic_ecn: bool,
    /// Policy of flows no rule matches.
    pub default_policy: String,
    /// First matching rule wins.
    pub policies: Vec<PolicyRule>,
    /// Time constant of the marker's per-flow rate measurement (the paper's "short timescale").
    pub rate_window_ms: f64,
    /// A flow's marker state is forgotten after this long without packets.
    pub idle_timeout_ms: f64,
    /// `"paper"`: CTV_i from VQ_i's histogram, 0 while vqlen_i <= l_i (section 3);
    /// `"steady"`: CTV_1 from a PI controller's fraction p, turned into a CTV by the values
    /// that arrived in the last `steady_window_ms` (a deviation, `qdisc/vdq_steady.rs`; CTV_0
    /// keeps the paper's rule unless `steady_l4s_gain` is set).
    pub ctv_rule: String,
    /// steady: the arrival window the CTV is the p-quantile of.
    pub steady_window_ms: f64,
    /// steady: the PI gains per update on e = (vqlen - s l) / l.
    pub steady_alpha: f64,
    pub steady_beta: f64,
    /// steady: s, the VQ length the PI holds, as a fraction of l = C_v1 D_1 (0 < s <= 1;
    /// above l the paper's CTV acts at once as well).
    pub steady_setpoint: f64,
    /// steady: g, VQ_0's shallow cut, the share of the paper's CTV_0 depth cut from the values
    /// that arrived at VQ_0 (0 < g <= 1; 0.1 measured); with it the PI on VQ_1 also holds the
    /// Classic FIFO's sojourn at `steady_setpoint` D_1; null: CTV_0 is the paper's.
    pub steady_l4s_gain: Option<f64>,
}

impl Default for VdqCsaqm {
    fn default() -> Self {
        Self {
            rate_mbit: None,
            vq0_rate: 0.9,
            vq1_rate: 0.984,
            qmax0_ms: 50.0,
            qmax1_ms: 200.0,
            target0_ms: 1.0,
            target1_ms: 20.0,
            tupdate_ms: 10.0,
            classifier: "ecn".into(),
            l_dscp: Vec::new(),
            classic_ecn: true,
            default_policy: "gold".into(),
            policies: Vec::new(),
            rate_window_ms: 100.0,
            idle_timeout_ms: 3000.0,
            ctv_rule: "paper".into(),
            steady_window_ms: STEADY_DEFAULTS.0,
            steady_alpha: STEADY_DEFAULTS.1,
            steady_beta: STEADY_DEFAULTS.2,
            steady_setpoint: STEADY_DEFAULTS.3,
            steady_l4s_gain: None,
        }
    }
}

fn policy_name(field: &str, p: &str) -> Result<(), ConfigError> {
    if VDQ_POLICIES.contains(&p) {
        return Ok(());
    }
    Err(ConfigError::new(field, format!("unknown policy `{p}`, expected one of `gold`, `silver`, `voice`")))
}

impl VdqCsaqm {
    /// `link_rate`: the link's `rate_mbit` (C when `rate_mbit` is null here).
    pub(super) fn validate(&self, at: &str, link_rate: Option<f64>) -> Result<(), ConfigError> {
        let f = |name: &str| format!("{at}.{name}");
        match (self.rate_mbit, link_rate) {
            (Some(r), _) if !(r.is_finite() && r > 0.0 && r <= 1e6) => {
                return Err(ConfigError::new(f("rate_mbit"), format!("must be > 0 and <= 1000000 (Mbit/s), got {r}")));
            }
            (None, None) => {
                return Err(ConfigError::new(
                    f("rate_mbit"),
                    "required: the link has no rate_mbit (trace or unlimited), and the virtual queues need C",
                ));
            }
            _ => {}
        }
        for (name, v) in [("vq0_rate", self.vq0_rate), ("vq1_rate", self.vq1_rate)] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(ConfigError::new(f(name), format!("must be > 0 and <= 1 (fraction of C), got {v}")));
            }
        }
        if self.vq0_rate > self.vq1_rate {
            return Err(ConfigError::new(
                f("vq0_rate"),
                format!("must be <= vq1_rate ({}) (C_v0 <= C_v1 <= C), got {}", self.vq1_rate, self.vq0_rate),
            ));
        }
        for (name, v, lo) in [
            ("qmax0_ms", self.qmax0_ms, 0.1),
            ("qmax1_ms", self.qmax1_ms, 0.1),
            ("target0_ms", self.target0_ms, 0.01),
            ("target1_ms", self.target1_ms, 0.01),
            ("tupdate_ms", self.tupdate_ms, 0.1),
            ("rate_window_ms", self.rate_window_ms, 0.1),
            ("idle_timeout_ms", self.idle_timeout_ms, 1.0),
            ("steady_window_ms", self.steady_window_ms, 1.0),
        ] {
            if !(v.is_finite() && (lo..=60_000.0).contains(&v)) {
                return Err(ConfigError::new(f(name), format!("must be {lo}..60000 (ms), got {v}")));
            }
        }
        match self.classifier.as_str() {
            "ecn" if !self.l_dscp.is_empty() => {
                return Err(ConfigError::new(f("l_dscp"), "only with classifier = \"dscp\""));
            }
            "ecn" => {}
            "dscp" if self.l_dscp.is_empty() => {
                return Err(ConfigError::new(f("l_dscp"), "classifier = \"dscp\" needs at least one DSCP"));
            }
            "dscp" => {}
            c => {
                return Err(ConfigError::new(
                    f("classifier"),
                    format!("unknown classifier `{c}`, expected `ecn`, `dscp`"),
                ));
            }
        }
        if let Some((i, d)) = self.l_dscp.iter().enumerate().find(|(_, &d)| d > 63) {
            return Err(ConfigError::new(format!("{at}.l_dscp[{i}]"), format!("must be 0..63, got {d}")));
        }
        if !["paper", "steady"].contains(&self.ctv_rule.as_str()) {
            return Err(ConfigError::new(
                f("ctv_rule"),
                format!("unknown CTV rule `{}`, expected `paper` or `steady`", self.ctv_rule),
            ));
        }
        for (name, v) in [("steady_alpha", self.steady_alpha), ("steady_beta", self.steady_beta)] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(ConfigError::new(f(name), format!("must be 0..1 (per update), got {v}")));
            }
        }
        for (name, v, what) in [
            ("steady_setpoint", Some(self.steady_setpoint), "a fraction of l_1 = C_v1 D_1"),
            ("steady_l4s_gain", self.steady_l4s_gain, "a share of the paper's CTV_0 cut"),
        ] {
            let Some(v) = v else { continue };
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(ConfigError::new(f(name), format!("must be > 0 and <= 1 ({what}), got {v}")));
            }
        }
        policy_name(&f("default_policy"), &self.default_policy)?;
        for (i, r) in self.policies.iter().enumerate() {
            policy_name(&format!("{at}.policies[{i}].policy"), &r.policy)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, ConfigError, QdiscConfig};

    fn cfg(qdisc: &str, rate: &str) -> Result<Config, ConfigError> {
        let text = r#"{"client_ifs": ["c1"], "server_if": "srv", "uplink": {RATE "qdisc": QDISC}, "downlink": {}}"#;
        let c = Config::from_json(&text.replace("QDISC", qdisc).replace("RATE", rate))?;
        c.validate().map(|_| c)
    }

    #[test]
    fn vdq_csaqm_defaults_are_the_paper_s() {
        let c = cfg(r#"{"kind": "vdq_csaqm"}"#, r#""rate_mbit": 100,"#).unwrap();
        let QdiscConfig::VdqCsaqm(v) = &c.uplink.qdisc else { panic!() };
        assert_eq!((v.vq0_rate, v.vq1_rate, v.qmax0_ms, v.qmax1_ms), (0.9, 0.984, 50.0, 200.0));
        assert_eq!((v.target0_ms, v.target1_ms, v.tupdate_ms), (1.0, 20.0, 10.0));
        assert_eq!((v.classifier.as_str(), v.default_policy.as_str(), v.classic_ecn), ("ecn", "gold", true));
        assert_eq!(v.ctv_rule, "paper");
        let c = cfg(
            r#"{"kind": "vdq_csaqm", "policies": [{"policy": "silver", "src": "10.0.0.1", "dport": 5202}]}"#,
            r#""rate_mbit": 100,"#,
        )
        .unwrap();
        let QdiscConfig::VdqCsaqm(v) = &c.uplink.qdisc else { panic!() };
        assert_eq!(v.policies[0].dport, Some(5202));
    }

    #[test]
    fn vdq_csaqm_errors_name_the_field() {
        let r = r#""rate_mbit": 100,"#;
        for (q, rate, field, words) in [
            (r#"{"kind": "vdq_csaqm"}"#, "", "uplink.qdisc.rate_mbit", "required"),
            (r#"{"kind": "vdq_csaqm", "rate_mbit": 0}"#, r, "uplink.qdisc.rate_mbit", "must be > 0"),
            (r#"{"kind": "vdq_csaqm", "vq1_rate": 1.5}"#, r, "uplink.qdisc.vq1_rate", "must be > 0 and <= 1"),
            (r#"{"kind": "vdq_csaqm", "vq0_rate": 0.99}"#, r, "uplink.qdisc.vq0_rate", "must be <= vq1_rate"),
            (r#"{"kind": "vdq_csaqm", "target0_ms": 0}"#, r, "uplink.qdisc.target0_ms", "must be 0.01..60000"),
            (r#"{"kind": "vdq_csaqm", "qmax1_ms": -1}"#, r, "uplink.qdisc.qmax1_ms", "must be 0.1..60000"),
            (r#"{"kind": "vdq_csaqm", "tupdate_ms": 0}"#, r, "uplink.qdisc.tupdate_ms", "must be 0.1..60000"),
            (r#"{"kind": "vdq_csaqm", "classifier": "tos"}"#, r, "uplink.qdisc.classifier", "unknown classifier"),
            (r#"{"kind": "vdq_csaqm", "ctv_rule": "pi"}"#, r, "uplink.qdisc.ctv_rule", "unknown CTV rule"),
            (r#"{"kind": "vdq_csaqm", "steady_alpha": -1}"#, r, "uplink.qdisc.steady_alpha", "must be 0..1"),
            (r#"{"kind": "vdq_csaqm", "steady_window_ms": 0}"#, r, "uplink.qdisc.steady_window_ms", "1..60000"),
            (r#"{"kind": "vdq_csaqm", "steady_setpoint": 0}"#, r, "uplink.qdisc.steady_setpoint", "> 0 and <= 1"),
            (r#"{"kind": "vdq_csaqm", "steady_l4s_gain": 1.5}"#, r, "uplink.qdisc.steady_l4s_gain", "> 0 and <= 1"),
            (r#"{"kind": "vdq_csaqm", "classifier": "dscp"}"#, r, "uplink.qdisc.l_dscp", "at least one"),
            (r#"{"kind": "vdq_csaqm", "l_dscp": [40]}"#, r, "uplink.qdisc.l_dscp", "only with"),
            (r#"{"kind": "vdq_csaqm", "classifier": "dscp", "l_dscp": [64]}"#, r, "uplink.qdisc.l_dscp[0]", "0..63"),
            (
                r#"{"kind": "vdq_csaqm", "default_policy": "bronze"}"#,
                r,
                "uplink.qdisc.default_policy",
                "unknown policy",
            ),
            (
                r#"{"kind": "vdq_csaqm", "policies": [{"policy": "gold"}, {"policy": "x"}]}"#,
                r,
                "uplink.qdisc.policies[1].policy",
                "unknown policy",
            ),
            (
                r#"{"kind": "vdq_csaqm", "policies": [{"policy": "gold", "port": 1}]}"#,
                r,
                "uplink.qdisc.policies[0].port",
                "unknown field",
            ),
            (
                r#"{"kind": "vdq_csaqm", "policies": [{"policy": "gold", "src": "10.0.0"}]}"#,
                r,
                "uplink.qdisc.policies[0].src",
                "invalid",
            ),
            (r#"{"kind": "vdq_csaqm", "target_ms": 5}"#, r, "uplink.qdisc.target_ms", "unknown field"),
        ] {
            let e = cfg(q, rate).unwrap_err();
            assert_eq!(e.field, field, "{q}: {e}");
            assert!(e.msg.contains(words), "{q}: {e}");
        }
    }

    #[test]
    fn vdq_csaqm_is_not_a_wifi_queue() {
        let text = r#"{"client_ifs": ["c1"], "server_if": "srv", "uplink": {}, "downlink": {},
            "wifi": {"clients": [{"phy_rate_mbit": 100}], "queue": {"kind": "vdq_csaqm", "rate_mbit": 10}}}"#;
        let e = Config::from_json(text).unwrap().validate().unwrap_err();
        assert_eq!(e.field, "wifi.queue.kind", "{e}");
        assert!(e.msg.contains("uplink/downlink qdiscs only"), "{e}");
    }
}
