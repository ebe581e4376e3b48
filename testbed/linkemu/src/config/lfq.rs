//! The configuration of the `lfq` qdisc and of the control socket, through
//! which an agent sets lfq's per-flow limits at run time.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::validate::{flow_queues, packet_limit};
use super::ConfigError;

/// lfq: fq's per-flow queues with a per-flow limit settable at run time and
/// paper 001's per-flow features (`qdisc/lfq.rs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Lfq {
    /// Flow queues the 5-tuples hash into.
    pub flows: usize,
    /// Bytes per queue per round.
    pub quantum: usize,
    /// Limit of a flow when it starts (the control socket changes it per flow).
    pub default_limit_pkts: usize,
    /// Packets in all queues together before any arrival is tail-dropped;
    /// also the largest per-flow limit.
    pub limit_pkts: usize,
    /// A queue's flow is over once the queue is empty and this long passed
    /// without an arrival (Linux sch_fq's garbage collection age, 3 s).
    pub idle_timeout_ms: f64,
}

impl Default for Lfq {
    fn default() -> Self {
        Self { flows: 1024, quantum: 1514, default_limit_pkts: 100, limit_pkts: 10_240, idle_timeout_ms: 3000.0 }
    }
}

impl Lfq {
    pub(super) fn validate(&self, at: &str) -> Result<(), ConfigError> {
        flow_queues(at, self.flows, self.quantum)?;
        packet_limit(&format!("{at}.limit_pkts"), self.limit_pkts)?;
        if self.default_limit_pkts == 0 || self.default_limit_pkts > self.limit_pkts {
            return Err(ConfigError::new(
                format!("{at}.default_limit_pkts"),
                format!("must be 1..limit_pkts ({}), got {}", self.limit_pkts, self.default_limit_pkts),
            ));
        }
        let t = self.idle_timeout_ms;
        if !(t.is_finite() && t > 0.0 && t <= 3_600_000.0) {
            return Err(ConfigError::new(
                format!("{at}.idle_timeout_ms"),
                format!("must be > 0 and <= 3600000, got {t}"),
            ));
        }
        Ok(())
    }
}

/// The control socket (`control.rs`): absent, no socket.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlConfig {
    /// Path of the UNIX stream socket (a stale socket there is replaced).
    pub socket: PathBuf,
}

/// sun_path holds 108 bytes including the terminating NUL.
const SUN_PATH_MAX: usize = 107;

impl ControlConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let f = "control.socket";
        let len = self.socket.as_os_str().len();
        if len == 0 {
            return Err(ConfigError::new(f, "must not be empty"));
        }
        if len > SUN_PATH_MAX {
            return Err(ConfigError::new(
                f,
                format!("is {len} bytes long; a UNIX socket path holds at most {SUN_PATH_MAX}"),
            ));
        }
        let parent = match self.socket.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !parent.is_dir() {
            return Err(ConfigError::new(f, format!("folder {} does not exist", parent.display())));
        }
        match std::fs::symlink_metadata(&self.socket) {
            Ok(m) if !std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => Err(ConfigError::new(
                f,
                format!("{} exists and is not a socket (refusing to replace it)", self.socket.display()),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, QdiscConfig};

    const BASE: &str = r#"{"client_ifs": ["c1"], "server_if": "srv",
        "uplink": {"qdisc": QDISC}, "downlink": {}, CONTROL}"#;

    fn cfg(qdisc: &str, control: &str) -> Result<Config, super::ConfigError> {
        let c = Config::from_json(&BASE.replace("QDISC", qdisc).replace(", CONTROL", control))?;
        c.validate().map(|_| c)
    }

    #[test]
    fn lfq_defaults_and_errors() {
        let c = cfg(r#"{"kind": "lfq"}"#, "").unwrap();
        let QdiscConfig::Lfq(l) = &c.uplink.qdisc else { panic!() };
        assert_eq!((l.flows, l.quantum, l.default_limit_pkts, l.limit_pkts), (1024, 1514, 100, 10_240));
        assert_eq!(l.idle_timeout_ms, 3000.0);
        assert!(c.control.is_none());
        for (q, field, words) in [
            (r#"{"kind": "lfq", "default_limit_pkts": 0}"#, "uplink.qdisc.default_limit_pkts", "must be 1..limit_pkts"),
            (
                r#"{"kind": "lfq", "default_limit_pkts": 200, "limit_pkts": 100}"#,
                "uplink.qdisc.default_limit_pkts",
                "(100)",
            ),
            (r#"{"kind": "lfq", "flows": 0}"#, "uplink.qdisc.flows", "must be 1..65536"),
            (r#"{"kind": "lfq", "idle_timeout_ms": 0}"#, "uplink.qdisc.idle_timeout_ms", "must be > 0"),
            (r#"{"kind": "lfq", "flow_limit_pkts": 10}"#, "uplink.qdisc.flow_limit_pkts", "unknown field"),
        ] {
            let e = cfg(q, "").unwrap_err();
            assert_eq!(e.field, field, "{q}: {e}");
            assert!(e.msg.contains(words), "{q}: {e}");
        }
    }

    #[test]
    fn control_socket_errors_name_the_field() {
        let dir = std::env::temp_dir();
        let ok = format!(r#", "control": {{"socket": "{}/linkemu-cfg-test.sock"}}"#, dir.display());
        assert!(cfg(r#"{"kind": "lfq"}"#, &ok).unwrap().control.is_some());
        let long = format!(r#", "control": {{"socket": "/tmp/{}"}}"#, "x".repeat(120));
        for (control, words) in [
            (r#", "control": {"socket": ""}"#, "must not be empty"),
            (r#", "control": {"socket": "/nonexistent/dir/x.sock"}"#, "does not exist"),
            (r#", "control": {"socket": "/etc/passwd"}"#, "is not a socket"),
            (r#", "control": {"path": "/tmp/x.sock"}"#, "unknown field"),
            (long.as_str(), "at most 107"),
        ] {
            let e = cfg(r#"{"kind": "pfifo", "limit_pkts": 10}"#, control).unwrap_err();
            assert!(e.field.starts_with("control."), "{control}: {e}");
            assert!(e.msg.contains(words), "{control}: {e}");
        }
    }
}
