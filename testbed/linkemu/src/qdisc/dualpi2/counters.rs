//! What DualPI2 did, counted for summary.json's `qdisc_stats` (and the
//! control socket's state, `control.rs`): packets per class, marks and drops
//! per cause, PI updates and p' statistics, lease expiries.

use serde_json::{json, Value};

use super::{DualPi2, C, L};

/// What the discipline did, for summary.json.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// Packets accepted per class [C, L].
    pub packets_in: [u64; 2],
    /// Tail drops at the limit per class [C, L].
    pub limit_drops: [u64; 2],
    /// L packets marked because of the native (step/ramp) AQM.
    pub l_native_marks: u64,
    /// L packets marked because of the coupled probability p_CL.
    pub l_coupled_marks: u64,
    /// L packets dropped in overload.
    pub l_overload_drops: u64,
    /// L packets the L queue wanted to mark but could not (Not-ECT via DSCP): dropped.
    pub l_unmarkable_drops: u64,
    /// Classic ECT packets marked with p_C.
    pub c_marks: u64,
    /// Classic packets dropped with p_C (Not-ECT, or ECT in overload).
    pub c_drops: u64,
    /// Of c_drops: ECT packets dropped because of overload.
    pub c_overload_drops: u64,
    /// PI updates, and those that ended overloaded (k p' > 1).
    pub updates: u64,
    pub overload_updates: u64,
    pub p_sum: f64,
    pub p_max: f64,
    /// Fixed p' values whose lease (`hold_ms`) ran out, handing p' back to the PI controller.
    pub lease_expiries: u64,
    /// PI updates during which p' was fixed through the control socket.
    pub manual_updates: u64,
    /// PI updates whose p' a residual agent scaled (`prob_scale` != 1).
    pub scaled_updates: u64,
    /// k values set with `hold_ms` whose lease ran out, putting the configured k back
    /// (apart from `lease_expiries`: see the control module's comment).
    pub k_lease_expiries: u64,
}

impl DualPi2 {
    /// summary.json's `qdisc_stats`.
    pub(super) fn counters_json(&self) -> Value {
        let c = &self.counters;
        json!({
            "kind": "dualpi2",
            "p_prime": self.p,
            "p_prime_mean": if c.updates > 0 { c.p_sum / c.updates as f64 } else { 0.0 },
            "p_prime_max": c.p_max,
            "pi_updates": c.updates,
            "overload_updates": c.overload_updates,
            "manual_updates": c.manual_updates,
            "scaled_updates": c.scaled_updates,
            "lease_expiries": c.lease_expiries,
            "k_lease_expiries": c.k_lease_expiries,
            "packets_in": {"classic": c.packets_in[C], "l4s": c.packets_in[L]},
            "limit_drops": {"classic": c.limit_drops[C], "l4s": c.limit_drops[L]},
            "l4s_native_marks": c.l_native_marks,
            "l4s_coupled_marks": c.l_coupled_marks,
            "l4s_overload_drops": c.l_overload_drops,
            "l4s_unmarkable_drops": c.l_unmarkable_drops,
            "classic_marks": c.c_marks,
            "classic_drops": c.c_drops,
            "classic_overload_drops": c.c_overload_drops,
        })
    }
}
