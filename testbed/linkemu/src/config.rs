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
//!
//! One module per job, every type re-exported here (users name
//! `crate::config::X`): `root` the root object, parsing and whole-file
//! checks; `link` a direction's rate/trace, delay and loss; `qdisc` the
//! `kind`-tagged discipline and the simple ones; `dualpi2`, `pie` (also
//! fq_pie, fq_dualpi2), `lfq` (also the control socket) and `vdq` the larger
//! disciplines; `wifi` the shared medium; `validate` [`ConfigError`] and the
//! shared range checks; `parse` the tagged objects' serde and error paths.

mod dualpi2;
mod lfq;
mod link;
mod parse;
mod pie;
mod qdisc;
mod root;
#[cfg(test)]
mod test_base;
mod validate;
mod vdq;
mod wifi;
pub use dualpi2::DualPi2;
pub use lfq::{ControlConfig, Lfq};
pub use link::{Bernoulli, Gilbert, LinkConfig, LossConfig, RateSpec};
pub use pie::{FqDualPi2, FqPie, Pie};
pub use qdisc::{Codel, Fq, FqCodel, Pfifo, QdiscConfig};
pub use root::{Config, StatsConfig, TimingConfig};
pub use validate::ConfigError;
pub use vdq::{PolicyRule, VdqCsaqm, VDQ_POLICIES};
pub use wifi::{
    AccessDelay, Aggregation, ConstantDist, Dist, ExponentialDist, LognormalDist, PhyOverheads, UniformDist,
    WifiClient, WifiConfig,
};
