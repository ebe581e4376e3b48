//! The root object of the JSON file: the interfaces, the seed, the two links,
//! the optional WiFi hop, statistics, timing and control socket; parsing the
//! whole file and the checks that span sections (client counts, names).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::parse::path_error;
use super::validate::positive;
use super::{ConfigError, ControlConfig, LinkConfig, WifiConfig};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Router-side veth ends towards the clients, in client index order.
    pub client_ifs: Vec<String>,
    /// Router-side veth end towards the server.
    pub server_if: String,
    /// Seed of every random process (loss, WiFi backoff, access delay).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Clients -> server.
    pub uplink: LinkConfig,
    /// Server -> clients.
    pub downlink: LinkConfig,
    #[serde(default)]
    pub wifi: Option<WifiConfig>,
    /// Extra one-way delay (ms) per client, added to every downlink frame
    /// delivered to that client after the downlink link and WiFi hop, i.e. to
    /// the ACKs of its uplink flows (paper 004 mixes 5 ms and 40 ms RTTs this
    /// way, with netem on the receiver's ACKs).  Empty: 0 for every client;
    /// otherwise one value per `client_ifs` entry.
    #[serde(default)]
    pub client_delay_ms: Vec<f64>,
    #[serde(default)]
    pub stats: Option<StatsConfig>,
    /// Largest IP packet forwarded; bigger frames are dropped as "oversize".
    #[serde(default = "default_mtu")]
    pub mtu: usize,
    #[serde(default)]
    pub timing: TimingConfig,
    /// The control socket (`control.rs`); absent: none.
    #[serde(default)]
    pub control: Option<ControlConfig>,
}

fn default_seed() -> u64 {
    1
}
fn default_mtu() -> usize {
    1500
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsConfig {
    /// Output folder (created if missing).
    pub dir: PathBuf,
    #[serde(default = "interval_ms")]
    pub interval_ms: f64,
    /// Also write packets.csv (one row per packet).
    #[serde(default)]
    pub per_packet: bool,
}

fn interval_ms() -> f64 {
    1000.0
}

/// How the real-time loop waits (see runtime.rs).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimingConfig {
    /// Sleep until this long before the next event, then spin.
    pub spin_us: f64,
    /// Largest share of wall time spent spinning (per 100 ms window); beyond
    /// it the loop only sleeps.
    pub spin_budget: f64,
    /// Never sleep (one core at 100%; use with sched_fifo_priority 0, see runtime.rs).
    pub busy_poll: bool,
    /// SCHED_FIFO priority of the forwarding thread (0: stay SCHED_OTHER).
    pub sched_fifo_priority: i32,
}

impl Default for TimingConfig {
    fn default() -> Self {
        Self { spin_us: 50.0, spin_budget: 0.25, busy_poll: false, sched_fifo_priority: 10 }
    }
}

impl Config {
    /// Parse JSON text; errors carry the dotted path of the offending field.
    pub fn from_json(text: &str) -> Result<Config, ConfigError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let cfg: Config = serde_path_to_error::deserialize(de).map_err(path_error)?;
        Ok(cfg)
    }

    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new("", format!("cannot read config {}: {e}", path.display())))?;
        Config::from_json(&text)
    }

    /// Range and cross-field checks.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.client_ifs.is_empty() {
            return Err(ConfigError::new("client_ifs", "needs at least one interface"));
        }
        for (i, name) in self.client_ifs.iter().enumerate() {
            check_ifname(&format!("client_ifs[{i}]"), name)?;
            if self.client_ifs[..i].contains(name) {
                return Err(ConfigError::new(format!("client_ifs[{i}]"), format!("{name:?} listed twice")));
            }
        }
        check_ifname("server_if", &self.server_if)?;
        if self.client_ifs.contains(&self.server_if) {
            return Err(ConfigError::new("server_if", "is also listed in client_ifs"));
        }
        if self.client_ifs.len() > u16::MAX as usize {
            return Err(ConfigError::new("client_ifs", "too many clients"));
        }
        if !(68..=65_535).contains(&self.mtu) {
            return Err(ConfigError::new("mtu", "must be 68..65535"));
        }
        self.uplink.validate("uplink")?;
        self.downlink.validate("downlink")?;
        if let Some(w) = &self.wifi {
            w.validate("wifi", self.client_ifs.len())?;
        }
        if !self.client_delay_ms.is_empty() && self.client_delay_ms.len() != self.client_ifs.len() {
            return Err(ConfigError::new(
                "client_delay_ms",
                format!("needs one value per client ({}), got {}", self.client_ifs.len(), self.client_delay_ms.len()),
            ));
        }
        for (i, &d) in self.client_delay_ms.iter().enumerate() {
            if !(d.is_finite() && (0.0..=60_000.0).contains(&d)) {
                return Err(ConfigError::new(
                    format!("client_delay_ms[{i}]"),
                    format!("must be 0..60000 (ms), got {d}"),
                ));
            }
        }
        if let Some(s) = &self.stats {
            positive("stats.interval_ms", s.interval_ms)?;
            if s.dir.as_os_str().is_empty() {
                return Err(ConfigError::new("stats.dir", "must not be empty"));
            }
        }
        let t = &self.timing;
        if !(t.spin_us.is_finite() && t.spin_us >= 0.0 && t.spin_us <= 100_000.0) {
            return Err(ConfigError::new("timing.spin_us", "must be 0..100000"));
        }
        if !(t.spin_budget.is_finite() && (0.0..=1.0).contains(&t.spin_budget)) {
            return Err(ConfigError::new("timing.spin_budget", "must be in [0, 1]"));
        }
        if !(0..=99).contains(&t.sched_fifo_priority) {
            return Err(ConfigError::new("timing.sched_fifo_priority", "must be 0..99"));
        }
        if let Some(c) = &self.control {
            c.validate()?;
        }
        Ok(())
    }
}

fn check_ifname(field: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > 15 || name.contains('/') || name.contains(char::is_whitespace) {
        return Err(ConfigError::new(field, format!("{name:?} is not a valid interface name")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_base::{err, BASE};
    use super::super::{Codel, LossConfig, Pfifo, QdiscConfig};
    use super::*;

    #[test]
    fn parses_the_contract_example() {
        let c = Config::from_json(BASE).unwrap();
        c.validate().unwrap();
        assert_eq!(c.seed, 3);
        assert!(matches!(c.uplink.qdisc, QdiscConfig::Pfifo(Pfifo { limit_pkts: 50 })));
        assert!(matches!(&c.downlink.loss, Some(LossConfig::Bernoulli(b)) if b.p == 0.01));
        assert!(matches!(&c.downlink.qdisc, QdiscConfig::Codel(Codel { ecn: false, .. })));
        assert!(c.stats.unwrap().per_packet);
    }

    #[test]
    fn errors_name_the_field() {
        let e = err(&BASE.replace("\"limit_pkts\": 50", "\"limit_pkts\": \"x\""));
        assert_eq!(e.field, "uplink.qdisc.limit_pkts", "{e}");
        assert!(e.msg.contains("invalid type"), "{e}");
        let e = err(&BASE.replace("\"limit_pkts\": 50", "\"limit\": 50"));
        assert_eq!(e.field, "uplink.qdisc.limit", "{e}");
        let e = err(&BASE.replace("\"kind\": \"pfifo\", ", ""));
        assert_eq!(e.field, "uplink.qdisc.kind", "{e}");
        assert!(e.msg.contains("missing"), "{e}");
        let e = err(&BASE.replace("\"rate_mbit\": 100.0", "\"rate_mbit\": -1"));
        assert_eq!(e.field, "uplink.rate_mbit");
        let e = err(&BASE.replace("\"delay_ms\": 5,", "\"delay_ms\": 5, \"dealy\": 1,"));
        assert_eq!(e.field, "uplink.dealy", "{e}");
        assert!(e.msg.contains("unknown field"), "{e}");
        let e = err(&BASE.replace("\"p\": 0.01", "\"p\": 1.5"));
        assert_eq!(e.field, "downlink.loss.p");
        let e = err(&BASE.replace("\"server_if\": \"srv\",", ""));
        assert_eq!(e.field, "server_if", "{e}");
        let e = err(&BASE.replace(
            "\"wifi\": null",
            "\"wifi\": {\"clients\": [{\"phy_rate_mbit\": 1}, {\"phy_rate_mbit\": 1}],\
             \"access_delay_us\": {\"extra\": {\"dist\": \"uniform\", \"min_us\": 1, \"max\": 2}}}",
        ));
        assert_eq!(e.field, "wifi.access_delay_us.extra.max", "{e}");
        let e = err(&BASE.replace("\"wifi\": null", "\"wifi\": {\"clients\": [{\"phy_rate_mbit\": 300}]}"));
        assert_eq!(e.field, "wifi.clients");
        let e = err(&BASE.replace("\"trace\": null", "\"trace\": \"/nonexistent/trace\""));
        assert_eq!(e.field, "downlink.trace");
        let e = err(&BASE.replace("[\"c1\", \"c2\"]", "[\"c1\", \"c1\"]"));
        assert_eq!(e.field, "client_ifs[1]");
        let e = err(&BASE.replace("\"kind\": \"pfifo\"", "\"kind\": \"red\""));
        assert_eq!(e.field, "uplink.qdisc.kind");
        assert!(e.to_string().starts_with("uplink.qdisc.kind: unknown kind `red`"), "{e}");
    }
}
