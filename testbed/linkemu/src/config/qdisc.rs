//! The queue discipline of a link or of the WiFi queues: the `kind`-tagged
//! choice, the simple disciplines (pfifo, codel, fq_codel, fq) with their
//! Linux defaults, and the checks every kind goes through.  The larger ones
//! keep their own files (`dualpi2.rs`, `lfq.rs`, `pie.rs`, `vdq.rs`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::parse::{split_tag, sub};
use super::validate::{flow_queues, packet_limit, positive};
use super::{ConfigError, DualPi2, FqDualPi2, FqPie, Lfq, Pie, VdqCsaqm};

/// Queue discipline: `{"kind": "pfifo" | "codel" | "dualpi2" | "fq_codel" | "fq" | "lfq" | "pie" | "fq_pie" |
/// "vdq_csaqm" | "fq_dualpi2", ...}`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind")]
pub enum QdiscConfig {
    #[serde(rename = "pfifo")]
    Pfifo(Pfifo),
    #[serde(rename = "codel")]
    Codel(Codel),
    #[serde(rename = "dualpi2")]
    DualPi2(DualPi2),
    #[serde(rename = "fq_codel")]
    FqCodel(FqCodel),
    #[serde(rename = "fq")]
    Fq(Fq),
    #[serde(rename = "lfq")]
    Lfq(Lfq),
    #[serde(rename = "pie")]
    Pie(Pie),
    #[serde(rename = "fq_pie")]
    FqPie(FqPie),
    #[serde(rename = "vdq_csaqm")]
    VdqCsaqm(VdqCsaqm),
    #[serde(rename = "fq_dualpi2")]
    FqDualPi2(FqDualPi2),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pfifo {
    pub limit_pkts: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Codel {
    pub target_ms: f64,
    pub interval_ms: f64,
    pub limit_pkts: usize,
    /// Mark ECN-capable packets instead of dropping them (Linux codel: off by default).
    pub ecn: bool,
}

/// fq_codel (RFC 8290), see `qdisc/fq_codel.rs`.  Defaults are Linux
/// sch_fq_codel's, except `ecn` (off here, on in Linux).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FqCodel {
    /// Flow queues the 5-tuples hash into (Linux: 1024, at most 65536).
    pub flows: usize,
    /// Bytes a queue may send per round of the deficit round robin (Linux: the
    /// device MTU + Ethernet header, 1514).
    pub quantum: usize,
    /// CoDel target and interval of every flow queue.
    pub target_ms: f64,
    pub interval_ms: f64,
    /// Packets in all queues together; beyond it the fattest queue loses its head.
    pub limit_pkts: usize,
    /// CE-mark ECN-capable packets instead of dropping them (Linux: on; here off,
    /// like `codel`: the testbed's TCP flows do not negotiate ECN by default).
    pub ecn: bool,
}

impl Default for FqCodel {
    fn default() -> Self {
        Self { flows: 1024, quantum: 1514, target_ms: 5.0, interval_ms: 100.0, limit_pkts: 10_240, ecn: false }
    }
}

/// fq: per-flow queues as fq_codel's, no AQM, a static per-flow limit (`qdisc/fq.rs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Fq {
    /// Flow queues the 5-tuples hash into.
    pub flows: usize,
    /// Bytes per queue per round.
    pub quantum: usize,
    /// Packets one flow queue holds before it tail-drops (Linux sch_fq's flow_limit: 100).
    pub flow_limit_pkts: usize,
    /// Packets in all queues together before any arrival is tail-dropped.
    pub limit_pkts: usize,
}

impl Default for Fq {
    fn default() -> Self {
        Self { flows: 1024, quantum: 1514, flow_limit_pkts: 100, limit_pkts: 10_240 }
    }
}

impl<'de> Deserialize<'de> for QdiscConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let kinds = ["pfifo", "codel", "dualpi2", "fq_codel", "fq", "lfq", "pie", "fq_pie", "vdq_csaqm", "fq_dualpi2"];
        let (tag, v) = split_tag::<D::Error>(Value::deserialize(d)?, "kind", &kinds)?;
        Ok(match tag.as_str() {
            "pfifo" => QdiscConfig::Pfifo(sub(v)?),
            "codel" => QdiscConfig::Codel(sub(v)?),
            "dualpi2" => QdiscConfig::DualPi2(sub(v)?),
            "fq_codel" => QdiscConfig::FqCodel(sub(v)?),
            "fq" => QdiscConfig::Fq(sub(v)?),
            "lfq" => QdiscConfig::Lfq(sub(v)?),
            "pie" => QdiscConfig::Pie(sub(v)?),
            "fq_pie" => QdiscConfig::FqPie(sub(v)?),
            "fq_dualpi2" => QdiscConfig::FqDualPi2(sub(v)?),
            _ => QdiscConfig::VdqCsaqm(sub(v)?),
        })
    }
}

impl Default for Codel {
    /// RFC 8289 / Linux codel: 5 ms target, 100 ms interval, 1000 packets, no ECN.
    fn default() -> Self {
        Self { target_ms: 5.0, interval_ms: 100.0, limit_pkts: 1000, ecn: false }
    }
}

impl Default for QdiscConfig {
    /// pfifo with Linux's default txqueuelen (1000 packets).
    fn default() -> Self {
        QdiscConfig::Pfifo(Pfifo { limit_pkts: 1000 })
    }
}

impl QdiscConfig {
    /// This config as the link with rate `link_rate_mbit` runs it: a
    /// vdq_csaqm without its own `rate_mbit` takes the link's.
    pub fn for_link(&self, link_rate_mbit: Option<f64>) -> QdiscConfig {
        let mut q = self.clone();
        if let QdiscConfig::VdqCsaqm(v) = &mut q {
            v.rate_mbit = v.rate_mbit.or(link_rate_mbit);
        }
        q
    }

    pub(super) fn validate(&self, at: &str) -> Result<(), ConfigError> {
        match self {
            QdiscConfig::Pfifo(p) => {
                if p.limit_pkts == 0 || p.limit_pkts > 10_000_000 {
                    return Err(ConfigError::new(format!("{at}.limit_pkts"), "must be 1..10000000"));
                }
            }
            QdiscConfig::Codel(c) => {
                positive(&format!("{at}.target_ms"), c.target_ms)?;
                positive(&format!("{at}.interval_ms"), c.interval_ms)?;
                if c.limit_pkts == 0 || c.limit_pkts > 10_000_000 {
                    return Err(ConfigError::new(format!("{at}.limit_pkts"), "must be 1..10000000"));
                }
            }
            QdiscConfig::DualPi2(q) => q.validate(at)?,
            QdiscConfig::FqCodel(q) => {
                flow_queues(at, q.flows, q.quantum)?;
                positive(&format!("{at}.target_ms"), q.target_ms)?;
                positive(&format!("{at}.interval_ms"), q.interval_ms)?;
                packet_limit(&format!("{at}.limit_pkts"), q.limit_pkts)?;
            }
            QdiscConfig::Fq(q) => {
                flow_queues(at, q.flows, q.quantum)?;
                packet_limit(&format!("{at}.limit_pkts"), q.limit_pkts)?;
                if q.flow_limit_pkts == 0 || q.flow_limit_pkts > q.limit_pkts {
                    return Err(ConfigError::new(
                        format!("{at}.flow_limit_pkts"),
                        format!("must be 1..limit_pkts ({}), got {}", q.limit_pkts, q.flow_limit_pkts),
                    ));
                }
            }
            QdiscConfig::Lfq(q) => q.validate(at)?,
            QdiscConfig::Pie(q) => q.validate(at)?,
            QdiscConfig::FqPie(q) => q.validate(at)?,
            QdiscConfig::FqDualPi2(q) => q.validate(at)?,
            // Needs the link's rate: checked by LinkConfig::validate.
            QdiscConfig::VdqCsaqm(_) => {}
        }
        Ok(())
    }

    /// Disciplines the WiFi queues cannot run, with the reason.
    pub(super) fn wifi_unsupported(&self) -> Option<&'static str> {
        match self {
            QdiscConfig::DualPi2(_) => Some(
                "dualpi2 is supported on uplink/downlink qdiscs only (WiFi queues have no timer for its PI controller)",
            ),
            QdiscConfig::Pie(_) | QdiscConfig::FqPie(_) | QdiscConfig::FqDualPi2(_) => Some(
                "pie, fq_pie and fq_dualpi2 are supported on uplink/downlink qdiscs only (WiFi queues have no timer \
                 for the drop probability update); use pfifo or codel here",
            ),
            QdiscConfig::FqCodel(_) | QdiscConfig::Fq(_) | QdiscConfig::Lfq(_) => Some(
                "fq_codel, fq and lfq are supported on uplink/downlink qdiscs only (the WiFi hop's drop accounting \
                 assumes the refused packet is the arriving one); use pfifo or codel here",
            ),
            QdiscConfig::VdqCsaqm(_) => Some(
                "vdq_csaqm is supported on uplink/downlink qdiscs only (its virtual queues need the link's \
                 capacity and a timer); use pfifo or codel here",
            ),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_base::{err, BASE};
    use super::super::{Config, QdiscConfig};

    #[test]
    fn fair_queuing_defaults_and_errors() {
        let q = |q: &str| BASE.replace(r#"{"kind": "pfifo", "limit_pkts": 50}"#, q);
        let c = Config::from_json(&q(r#"{"kind": "fq_codel"}"#)).unwrap();
        c.validate().unwrap();
        let QdiscConfig::FqCodel(f) = &c.uplink.qdisc else { panic!() };
        assert_eq!((f.flows, f.quantum, f.limit_pkts, f.ecn), (1024, 1514, 10_240, false));
        assert_eq!((f.target_ms, f.interval_ms), (5.0, 100.0));
        let c = Config::from_json(&q(r#"{"kind": "fq", "flow_limit_pkts": 1000}"#)).unwrap();
        c.validate().unwrap();
        let QdiscConfig::Fq(f) = &c.uplink.qdisc else { panic!() };
        assert_eq!((f.flows, f.quantum, f.flow_limit_pkts, f.limit_pkts), (1024, 1514, 1000, 10_240));
        let QdiscConfig::Fq(f) = Config::from_json(&q(r#"{"kind": "fq"}"#)).unwrap().uplink.qdisc else { panic!() };
        assert_eq!(f.flow_limit_pkts, 100);
        for (text, field, words) in [
            (r#"{"kind": "fq_codel", "flows": 0}"#, "uplink.qdisc.flows", "must be 1..65536"),
            (r#"{"kind": "fq_codel", "flows": 70000}"#, "uplink.qdisc.flows", "must be 1..65536"),
            (r#"{"kind": "fq_codel", "quantum": 100}"#, "uplink.qdisc.quantum", "must be 256..1048576 bytes"),
            (r#"{"kind": "fq_codel", "target_ms": 0}"#, "uplink.qdisc.target_ms", "positive"),
            (r#"{"kind": "fq_codel", "interval_ms": -1}"#, "uplink.qdisc.interval_ms", "positive"),
            (r#"{"kind": "fq_codel", "limit_pkts": 0}"#, "uplink.qdisc.limit_pkts", "must be 1..10000000"),
            (r#"{"kind": "fq_codel", "ecn": 1}"#, "uplink.qdisc.ecn", "invalid type"),
            (r#"{"kind": "fq_codel", "flow_limit_pkts": 100}"#, "uplink.qdisc.flow_limit_pkts", "unknown field"),
            (r#"{"kind": "fq", "flow_limit_pkts": 0}"#, "uplink.qdisc.flow_limit_pkts", "must be 1..limit_pkts"),
            (r#"{"kind": "fq", "flow_limit_pkts": 200, "limit_pkts": 100}"#, "uplink.qdisc.flow_limit_pkts", "(100)"),
            (r#"{"kind": "fq", "quantum": 2000000}"#, "uplink.qdisc.quantum", "must be 256..1048576"),
            (r#"{"kind": "fq", "target_ms": 5}"#, "uplink.qdisc.target_ms", "unknown field"),
            (
                r#"{"kind": "fq_codl"}"#,
                "uplink.qdisc.kind",
                "expected one of `pfifo`, `codel`, `dualpi2`, `fq_codel`, `fq`, `lfq`, `pie`, `fq_pie`",
            ),
        ] {
            let e = err(&q(text));
            assert_eq!(e.field, field, "{text}: {e}");
            assert!(e.msg.contains(words), "{text}: {e}");
        }
        for kind in ["fq_codel", "fq"] {
            let e = err(&BASE.replace(
                "\"wifi\": null",
                &format!(
                    "\"wifi\": {{\"clients\": [{{\"phy_rate_mbit\": 1}}, {{\"phy_rate_mbit\": 1}}], \
                     \"queue\": {{\"kind\": \"{kind}\"}}}}"
                ),
            ));
            assert_eq!(e.field, "wifi.queue.kind", "{e}");
            assert!(e.msg.contains("uplink/downlink qdiscs only"), "{e}");
        }
    }
}
