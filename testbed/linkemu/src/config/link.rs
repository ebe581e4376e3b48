//! One direction of the bottleneck (`uplink`, `downlink`): rate or trace,
//! delay, random loss and the qdisc, and the rate source they resolve to.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::parse::{split_tag, sub};
use super::validate::{non_negative, positive, probability};
use super::{ConfigError, QdiscConfig};
use crate::trace::Trace;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Constant rate in Mbit/s (10^6 bit/s) of IP bytes; null: no rate limit
    /// (unless `trace` is given).
    #[serde(default)]
    pub rate_mbit: Option<f64>,
    /// Mahimahi trace (one line per 1-ms-resolution delivery opportunity).
    #[serde(default)]
    pub trace: Option<PathBuf>,
    /// Bytes one trace delivery opportunity carries (Mahimahi: one 1500-byte packet).
    #[serde(default = "default_trace_bytes")]
    pub trace_bytes_per_opportunity: usize,
    /// One-way propagation delay added after the bottleneck.
    #[serde(default)]
    pub delay_ms: f64,
    #[serde(default)]
    pub loss: Option<LossConfig>,
    #[serde(default)]
    pub qdisc: QdiscConfig,
    /// Bytes added to each packet's IP length when charging it to the rate
    /// (e.g. 14 for Ethernet headers, 38 for Ethernet framing on the wire).
    #[serde(default)]
    pub overhead_bytes: usize,
}

fn default_trace_bytes() -> usize {
    1500
}

/// Random loss: `{"model": "bernoulli", ...}` or `{"model": "gilbert", ...}`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "model")]
pub enum LossConfig {
    #[serde(rename = "bernoulli")]
    Bernoulli(Bernoulli),
    #[serde(rename = "gilbert")]
    Gilbert(Gilbert),
}

/// Each packet lost independently with probability `p`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bernoulli {
    pub p: f64,
}

/// Gilbert-Elliott: a good and a bad state with their own loss probabilities;
/// per packet the state moves good->bad with `p_gb` and bad->good with `p_bg`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gilbert {
    pub p_gb: f64,
    pub p_bg: f64,
    #[serde(default)]
    pub loss_good: f64,
    #[serde(default = "one")]
    pub loss_bad: f64,
}

impl<'de> Deserialize<'de> for LossConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (tag, v) = split_tag::<D::Error>(Value::deserialize(d)?, "model", &["bernoulli", "gilbert"])?;
        Ok(match tag.as_str() {
            "bernoulli" => LossConfig::Bernoulli(sub(v)?),
            _ => LossConfig::Gilbert(sub(v)?),
        })
    }
}

fn one() -> f64 {
    1.0
}

/// A link's rate source after validation.
#[derive(Debug, Clone)]
pub enum RateSpec {
    Unlimited,
    Constant { bps: u64 },
    Trace(Trace),
}

impl LinkConfig {
    pub(super) fn validate(&self, at: &str) -> Result<(), ConfigError> {
        if self.rate_mbit.is_some() && self.trace.is_some() {
            return Err(ConfigError::new(format!("{at}.trace"), "give either rate_mbit or trace, not both"));
        }
        if let Some(r) = self.rate_mbit {
            positive(&format!("{at}.rate_mbit"), r)?;
            if r * 1e6 > 1e12 {
                return Err(ConfigError::new(format!("{at}.rate_mbit"), "must be <= 1,000,000 (1 Tbit/s)"));
            }
        }
        non_negative(&format!("{at}.delay_ms"), self.delay_ms)?;
        if self.delay_ms > 100_000.0 {
            return Err(ConfigError::new(format!("{at}.delay_ms"), "must be <= 100000"));
        }
        if self.trace_bytes_per_opportunity == 0 {
            return Err(ConfigError::new(format!("{at}.trace_bytes_per_opportunity"), "must be > 0"));
        }
        if self.overhead_bytes > 65_535 {
            return Err(ConfigError::new(format!("{at}.overhead_bytes"), "must be <= 65535"));
        }
        match &self.loss {
            None => {}
            Some(LossConfig::Bernoulli(b)) => probability(&format!("{at}.loss.p"), b.p)?,
            Some(LossConfig::Gilbert(g)) => {
                probability(&format!("{at}.loss.p_gb"), g.p_gb)?;
                probability(&format!("{at}.loss.p_bg"), g.p_bg)?;
                probability(&format!("{at}.loss.loss_good"), g.loss_good)?;
                probability(&format!("{at}.loss.loss_bad"), g.loss_bad)?;
                if g.p_gb + g.p_bg == 0.0 {
                    return Err(ConfigError::new(format!("{at}.loss.p_bg"), "p_gb and p_bg cannot both be 0"));
                }
            }
        }
        self.qdisc.validate(&format!("{at}.qdisc"))?;
        if let QdiscConfig::VdqCsaqm(q) = &self.qdisc {
            q.validate(&format!("{at}.qdisc"), self.rate_mbit)?;
        }
        self.rate_spec(at)?;
        Ok(())
    }

    /// The rate source; loads and checks the trace file.
    pub fn rate_spec(&self, at: &str) -> Result<RateSpec, ConfigError> {
        if let Some(path) = &self.trace {
            let t = Trace::load(path).map_err(|e| ConfigError::new(format!("{at}.trace"), e))?;
            return Ok(RateSpec::Trace(t));
        }
        Ok(match self.rate_mbit {
            None => RateSpec::Unlimited,
            Some(r) => RateSpec::Constant { bps: ((r * 1e6).round() as u64).max(1) },
        })
    }
}
