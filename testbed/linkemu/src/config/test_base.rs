//! The contract example the section tests edit, and the error an edit gives.

use super::{Config, ConfigError};

pub(super) const BASE: &str = r#"{"client_ifs": ["c1", "c2"], "server_if": "srv", "seed": 3,
    "uplink": {"rate_mbit": 100.0, "delay_ms": 5, "qdisc": {"kind": "pfifo", "limit_pkts": 50}},
    "downlink": {"rate_mbit": null, "trace": null, "delay_ms": 5.0, "loss": {"model": "bernoulli", "p": 0.01},
                 "qdisc": {"kind": "codel", "target_ms": 5, "interval_ms": 100, "limit_pkts": 1000}},
    "wifi": null, "stats": {"dir": "/tmp/x", "interval_ms": 1000, "per_packet": true}}"#;

pub(super) fn err(text: &str) -> ConfigError {
    let c = Config::from_json(text);
    let e = match c {
        Err(e) => e,
        Ok(c) => c.validate().unwrap_err(),
    };
    eprintln!("{e}");
    e
}
