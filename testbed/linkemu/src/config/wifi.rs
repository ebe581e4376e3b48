//! The shared-medium WiFi hop of the client side (`wifi`): stations and
//! their PHY rates, A-MPDU aggregation, EDCA access with its optional extra
//! deferral distribution, PHY/MAC overheads, the per-station queue.
//! Defaults follow 802.11n/ac at 5 GHz (AC_BE).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::parse::{split_tag, sub};
use super::validate::{non_negative, positive};
use super::{ConfigError, QdiscConfig};

/// The shared-medium WiFi model of the client side (see `wifi.rs` and README).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WifiConfig {
    /// One entry per client, in client order.
    pub clients: Vec<WifiClient>,
    #[serde(default)]
    pub aggregation: Aggregation,
    #[serde(default)]
    pub access_delay_us: AccessDelay,
    #[serde(default)]
    pub phy: PhyOverheads,
    /// Queue of each station (uplink) and of the AP per station (downlink).
    #[serde(default = "wifi_queue")]
    pub queue: QdiscConfig,
}

fn wifi_queue() -> QdiscConfig {
    QdiscConfig::default()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WifiClient {
    /// PHY rate between this client and the AP, both directions (Mbit/s).
    pub phy_rate_mbit: f64,
    /// Uplink PHY rate if different from `phy_rate_mbit`.
    #[serde(default)]
    pub uplink_phy_rate_mbit: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Aggregation {
    /// MPDUs per A-MPDU (802.11n/ac Block Ack window: 64; 802.11ax: 256).
    pub max_frames: usize,
    /// A-MPDU length limit (802.11n: 65,535 B; ac: 1,048,575 B; ax: 6,500,631 B).
    pub max_bytes: usize,
    /// How long a station may hold its first frame to aggregate more (0: contend at once).
    pub max_wait_us: f64,
    /// PPDU duration limit (aPPDUMaxTime, 5.484 ms for HT/VHT/HE).
    pub max_ppdu_us: f64,
}

impl Default for Aggregation {
    fn default() -> Self {
        Self { max_frames: 64, max_bytes: 65_535, max_wait_us: 0.0, max_ppdu_us: 5484.0 }
    }
}

/// EDCA channel access (802.11-2020 10.23.2) plus an optional extra random deferral.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessDelay {
    /// aSlotTime (9 us for OFDM PHYs at 5 GHz).
    pub slot_us: f64,
    /// AIFS = aSIFSTime + AIFSN * aSlotTime (AC_BE: 16 + 3 * 9 = 43 us).
    pub aifs_us: f64,
    pub cw_min: u32,
    pub cw_max: u32,
    /// Transmission attempts after the first before an aggregate is dropped
    /// (dot11ShortRetryLimit = 7).
    pub retry_limit: u32,
    /// Model simultaneous backoff expiry as a collision (both transmissions lost).
    pub collisions: bool,
    /// Extra random deferral per access (traffic outside the emulated BSS,
    /// interference, power save); null: none.
    pub extra: Option<Dist>,
}

impl Default for AccessDelay {
    fn default() -> Self {
        Self { slot_us: 9.0, aifs_us: 43.0, cw_min: 15, cw_max: 1023, retry_limit: 7, collisions: true, extra: None }
    }
}

/// A distribution of microseconds: `{"dist": "constant" | "uniform" | "exponential" | "lognormal", ...}`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "dist")]
pub enum Dist {
    #[serde(rename = "constant")]
    Constant(ConstantDist),
    #[serde(rename = "uniform")]
    Uniform(UniformDist),
    #[serde(rename = "exponential")]
    Exponential(ExponentialDist),
    #[serde(rename = "lognormal")]
    Lognormal(LognormalDist),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConstantDist {
    pub us: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UniformDist {
    pub min_us: f64,
    pub max_us: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExponentialDist {
    pub mean_us: f64,
}

/// exp(N(ln(median_us), sigma^2)).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LognormalDist {
    pub median_us: f64,
    pub sigma: f64,
}

impl<'de> Deserialize<'de> for Dist {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let kinds = ["constant", "uniform", "exponential", "lognormal"];
        let (tag, v) = split_tag::<D::Error>(Value::deserialize(d)?, "dist", &kinds)?;
        Ok(match tag.as_str() {
            "constant" => Dist::Constant(sub(v)?),
            "uniform" => Dist::Uniform(sub(v)?),
            "exponential" => Dist::Exponential(sub(v)?),
            _ => Dist::Lognormal(sub(v)?),
        })
    }
}

/// Per-transmission PHY/MAC overheads.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PhyOverheads {
    /// PHY preamble + PLCP header duration (VHT: 20 us legacy + 16-20 us VHT fields).
    pub preamble_us: f64,
    /// aSIFSTime (16 us at 5 GHz).
    pub sifs_us: f64,
    /// Block Ack frame duration at a basic rate (32 B at 24 Mbit/s + 20 us preamble).
    pub block_ack_us: f64,
    /// Bytes each MPDU adds to the IP packet on air: QoS MAC header 26 + LLC/SNAP 8
    /// + FCS 4 + A-MPDU delimiter 4 (before padding to 4 bytes).
    pub mpdu_overhead_bytes: usize,
}

impl Default for PhyOverheads {
    fn default() -> Self {
        Self { preamble_us: 40.0, sifs_us: 16.0, block_ack_us: 32.0, mpdu_overhead_bytes: 42 }
    }
}

impl WifiConfig {
    pub(super) fn validate(&self, at: &str, n_clients: usize) -> Result<(), ConfigError> {
        if self.clients.len() != n_clients {
            return Err(ConfigError::new(
                format!("{at}.clients"),
                format!("has {} entries but client_ifs has {n_clients}", self.clients.len()),
            ));
        }
        for (i, c) in self.clients.iter().enumerate() {
            positive(&format!("{at}.clients[{i}].phy_rate_mbit"), c.phy_rate_mbit)?;
            if let Some(u) = c.uplink_phy_rate_mbit {
                positive(&format!("{at}.clients[{i}].uplink_phy_rate_mbit"), u)?;
            }
        }
        let a = &self.aggregation;
        if a.max_frames == 0 {
            return Err(ConfigError::new(format!("{at}.aggregation.max_frames"), "must be >= 1"));
        }
        if a.max_bytes < 1600 {
            return Err(ConfigError::new(format!("{at}.aggregation.max_bytes"), "must be >= 1600 (one full frame)"));
        }
        non_negative(&format!("{at}.aggregation.max_wait_us"), a.max_wait_us)?;
        positive(&format!("{at}.aggregation.max_ppdu_us"), a.max_ppdu_us)?;
        let d = &self.access_delay_us;
        positive(&format!("{at}.access_delay_us.slot_us"), d.slot_us)?;
        non_negative(&format!("{at}.access_delay_us.aifs_us"), d.aifs_us)?;
        if d.cw_min > d.cw_max || d.cw_max > 65_535 {
            return Err(ConfigError::new(format!("{at}.access_delay_us.cw_max"), "need cw_min <= cw_max <= 65535"));
        }
        if let Some(x) = &d.extra {
            let f = format!("{at}.access_delay_us.extra");
            match x {
                Dist::Constant(c) => non_negative(&format!("{f}.us"), c.us)?,
                Dist::Uniform(u) => {
                    non_negative(&format!("{f}.min_us"), u.min_us)?;
                    non_negative(&format!("{f}.max_us"), u.max_us)?;
                    if u.max_us < u.min_us {
                        return Err(ConfigError::new(format!("{f}.max_us"), "must be >= min_us"));
                    }
                }
                Dist::Exponential(e) => non_negative(&format!("{f}.mean_us"), e.mean_us)?,
                Dist::Lognormal(l) => {
                    positive(&format!("{f}.median_us"), l.median_us)?;
                    non_negative(&format!("{f}.sigma"), l.sigma)?;
                }
            }
        }
        let p = &self.phy;
        non_negative(&format!("{at}.phy.preamble_us"), p.preamble_us)?;
        non_negative(&format!("{at}.phy.sifs_us"), p.sifs_us)?;
        non_negative(&format!("{at}.phy.block_ack_us"), p.block_ack_us)?;
        if let Some(why) = self.queue.wifi_unsupported() {
            return Err(ConfigError::new(format!("{at}.queue.kind"), why));
        }
        self.queue.validate(&format!("{at}.queue"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_base::BASE;
    use super::super::Config;

    #[test]
    fn wifi_defaults_follow_80211() {
        let c = Config::from_json(&BASE.replace(
            "\"wifi\": null",
            "\"wifi\": {\"clients\": [{\"phy_rate_mbit\": 300}, {\"phy_rate_mbit\": 150}]}",
        ))
        .unwrap();
        c.validate().unwrap();
        let w = c.wifi.unwrap();
        assert_eq!(w.access_delay_us.slot_us, 9.0);
        assert_eq!(w.access_delay_us.aifs_us, 43.0);
        assert_eq!((w.access_delay_us.cw_min, w.access_delay_us.cw_max), (15, 1023));
        assert_eq!(w.aggregation.max_frames, 64);
        assert_eq!(w.aggregation.max_bytes, 65_535);
    }
}
