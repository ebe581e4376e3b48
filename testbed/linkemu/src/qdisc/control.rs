//! What the control socket ([`crate::control`]) sees of a queue discipline
//! and may change in it, as plain data.
//!
//! The forwarding loop answers a `state` request by copying numbers into a
//! [`QdiscState`] ([`super::Qdisc::control_state`]): no JSON is built on that
//! thread; the control thread renders it.  A `set` request arrives as
//! [`SetParams`] (already parsed and range-checked where the range does not
//! depend on the discipline) and [`super::Qdisc::control_set`] applies it all
//! or nothing, answering what it applied ([`SetApplied`]) or one line naming
//! the problem.
//!
//! Disciplines without a control surface keep the trait's defaults: their
//! state is kind and backlog, and every `set` is refused.

use crate::flow::FlowKey;

use super::lfq_features::FeatureSnapshot;

/// One named value of a discipline's state (rendered as a JSON scalar).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    U(u64),
    F(f64),
    B(bool),
    S(&'static str),
}

/// One flow of a per-flow discipline (lfq: a flow's queue; fq, fq_codel: a
/// queue holding packets).
#[derive(Debug, Clone)]
pub struct FlowState {
    /// Index of its queue (the hash bucket).
    pub queue: usize,
    /// lfq: the 5-tuple that started the flow; fq, fq_codel: the last one
    /// classified into the queue (None: packets without one, queue 0).
    pub key: Option<FlowKey>,
    /// lfq: another 5-tuple hashed into the same queue while this flow
    /// lived (None: not tracked, fq and fq_codel).
    pub shared: Option<bool>,
    /// Its tail-drop limit in packets (None: no per-flow limit, fq_codel).
    pub limit_pkts: Option<usize>,
    pub backlog_pkts: usize,
    pub backlog_bytes: usize,
    /// Further per-flow numbers (lfq: age, idle time, counters).
    pub extra: Vec<(&'static str, Scalar)>,
    /// lfq's feature averages (paper 001), None for the other disciplines.
    pub features: Option<Box<FeatureSnapshot>>,
}

/// A discipline's state for the control socket.
#[derive(Debug, Clone)]
pub struct QdiscState {
    pub kind: &'static str,
    pub backlog_pkts: usize,
    pub backlog_bytes: usize,
    /// Discipline-specific values (DualPI2: p', k, per-class lengths, ...).
    pub params: Vec<(&'static str, Scalar)>,
    /// Per-flow disciplines: their active flows (at most the request's `max_flows`).
    pub flows: Option<Vec<FlowState>>,
    /// Active flows in all (`flows` may list fewer).
    pub flows_active: usize,
    /// lfq: the weights of the feature averages.
    pub weights: Option<&'static [f64]>,
}

impl QdiscState {
    /// Kind and backlog only (the trait's default).
    pub fn basic(kind: &'static str, backlog_pkts: usize, backlog_bytes: usize) -> QdiscState {
        QdiscState { kind, backlog_pkts, backlog_bytes, params: vec![], flows: None, flows_active: 0, weights: None }
    }
}

/// Which flow a per-flow `set` is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowSel {
    /// A queue index, as `state` lists it.
    Queue(usize),
    /// A 5-tuple: the queue it hashes to.
    Key(FlowKey),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLimit {
    pub sel: FlowSel,
    pub limit_pkts: usize,
}

/// DualPI2's base probability: fixed by the agent, or the PI controller's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BaseProb {
    Auto,
    Fixed(f64),
}

/// The parameters of one `set` request (absent fields are left alone).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetParams {
    /// lfq: the limit of flows that start from now on.
    pub default_limit_pkts: Option<usize>,
    /// lfq: per-flow limits.
    pub flows: Vec<FlowLimit>,
    /// dualpi2: p' override, or "auto".
    pub base_prob: Option<BaseProb>,
    /// dualpi2: a residual agent's factor on the PI controller's p'.
    pub prob_scale: Option<f64>,
    /// dualpi2: coupling factor.
    pub k: Option<f64>,
    /// dualpi2: how long a fixed `base_prob`, a `prob_scale` or a `k` holds without a newer `set`
    /// (a lease: an agent that dies or hangs hands p' back to the PI
    /// controller and k back to the configuration's); None: until "auto" / the next `set`.
    pub hold_ms: Option<f64>,
}

impl SetParams {
    /// Names of the fields present (for "not settable" errors).
    pub fn present(&self) -> Vec<&'static str> {
        let mut v = vec![];
        if self.default_limit_pkts.is_some() {
            v.push("default_limit_pkts");
        }
        if !self.flows.is_empty() {
            v.push("flows");
        }
        if self.base_prob.is_some() {
            v.push("base_prob");
        }
        if self.prob_scale.is_some() {
            v.push("prob_scale");
        }
        if self.k.is_some() {
            v.push("k");
        }
        if self.hold_ms.is_some() {
            v.push("hold_ms");
        }
        v
    }

    /// Err naming the first field present that `kind` cannot set.
    pub fn only(&self, kind: &str, settable: &[&str]) -> Result<(), String> {
        match self.present().into_iter().find(|f| !settable.contains(f)) {
            Some(f) => Err(format!("{f}: not settable on {kind} (settable: {})", settable.join(", "))),
            None => Ok(()),
        }
    }
}

/// One per-flow limit a `set` applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedFlow {
    pub queue: usize,
    pub key: Option<FlowKey>,
    pub limit_pkts: usize,
    /// The limit before.
    pub was: usize,
}

/// What a `set` changed (echoed in the response).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetApplied {
    pub params: Vec<(&'static str, Scalar)>,
    pub flows: Vec<AppliedFlow>,
}
