//! The JSON configuration (documented field by field in README.md).
//!
//! Parsing is strict: unknown fields are errors (a typo must not silently
//! fall back to a default), and every error names the field it is about as a
//! dotted path (`uplink.qdisc.limit_pkts: ...`), which `main` prints as a
//! single line before exiting with status 2.  Parsing is in two steps: serde
//! (types, required fields; the path comes from serde_path_to_error), then
//! [`Config::validate`] (ranges and cross-field rules), which also loads the
//! Mahimahi traces so that an unreadable trace is a config error too.
//!
//! A section whose fields all have defaults (`#[serde(default)]` on the
//! struct) keeps them in its `Default` impl: a missing field takes its value
//! from there, so each default is written once.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::trace::Trace;

mod lfq;
mod parse;
mod pie;
mod validate;
mod vdq;
pub use lfq::{ControlConfig, Lfq};
use parse::{path_error, split_tag, sub};
pub use pie::{FqDualPi2, FqPie, Pie};
pub use validate::ConfigError;
use validate::{flow_queues, non_negative, packet_limit, positive, probability};
pub use vdq::{PolicyRule, VdqCsaqm, VDQ_POLICIES};

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

impl Default for QdiscConfig {
    /// pfifo with Linux's default txqueuelen (1000 packets).
    fn default() -> Self {
        QdiscConfig::Pfifo(Pfifo { limit_pkts: 1000 })
    }
}

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

/// A link's rate source after validation.
#[derive(Debug, Clone)]
pub enum RateSpec {
    Unlimited,
    Constant { bps: u64 },
    Trace(Trace),
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

impl LinkConfig {
    fn validate(&self, at: &str) -> Result<(), ConfigError> {
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

    fn validate(&self, at: &str) -> Result<(), ConfigError> {
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
    fn wifi_unsupported(&self) -> Option<&'static str> {
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

impl DualPi2 {
    fn validate(&self, at: &str) -> Result<(), ConfigError> {
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

impl WifiConfig {
    fn validate(&self, at: &str, n_clients: usize) -> Result<(), ConfigError> {
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
    use super::*;

    const BASE: &str = r#"{"client_ifs": ["c1", "c2"], "server_if": "srv", "seed": 3,
        "uplink": {"rate_mbit": 100.0, "delay_ms": 5, "qdisc": {"kind": "pfifo", "limit_pkts": 50}},
        "downlink": {"rate_mbit": null, "trace": null, "delay_ms": 5.0, "loss": {"model": "bernoulli", "p": 0.01},
                     "qdisc": {"kind": "codel", "target_ms": 5, "interval_ms": 100, "limit_pkts": 1000}},
        "wifi": null, "stats": {"dir": "/tmp/x", "interval_ms": 1000, "per_packet": true}}"#;

    fn err(text: &str) -> ConfigError {
        let c = Config::from_json(text);
        let e = match c {
            Err(e) => e,
            Ok(c) => c.validate().unwrap_err(),
        };
        eprintln!("{e}");
        e
    }

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
