//! DualPI2 through the control socket (paper 000's agent sets the base
//! probability and the coupling each control interval).
//!
//! **State**: p' (`base_prob`), whether the PI controller or the agent sets
//! it (`pi`: "auto" / "manual"), p_C = p'^2, p_CL = k p', `k`, the PI target
//! and the last PI input (`qdelay_ms`: the larger head sojourn at the last
//! update), per class [classic, l4s] the length in packets and bytes and the
//! sojourn of its head packet now (`*_delay_ms`), whether ECN is off
//! because of overload, and the counters of summary.json's `qdisc_stats`
//! (marks and drops per cause, PI updates), `k_config` (the configuration's
//! k) and `k_hold_left_ms` (what is left of a lease on k, -1 when none),
//! and per class the active flows (`classic_flows`, `l4s_flows`: 5-tuples
//! with an arrival in the last `flow_window_ms` = 200 ms; `active_flows.rs`).
//!
//! **Set**: `base_prob` = a number fixes p' (0..1; 0..1/k without
//! drop_on_overload, where the PI controller caps it there) and pauses the
//! PI controller: it keeps running its update every tupdate (so `qdelay_ms`
//! stays current and the derivative term has a fresh previous value when
//! it resumes) but leaves p' alone; `base_prob` = "auto" resumes it from the
//! p' in place.  With `hold_ms` the fixed value is a lease: unless another
//! `set` renews it, the first PI update at or after `hold_ms` resumes the
//! controller (counted in `lease_expiries`), so a router agent that dies or
//! hangs leaves plain DualPI2 behind, not a frozen p'.
//!
//! `k` (0.5..64, as the config) changes the coupling at once; without
//! drop_on_overload a p' above the new 1/k is lowered to it.  Without
//! `hold_ms` the new k stays until the next `set` with a k.  With `hold_ms`
//! (alone with k, or beside a p' or a factor, which then get the same lease)
//! k is leased too: unless another `set` carrying a k renews it (a `set`
//! without k leaves the lease running), the first PI update at or after
//! `hold_ms` puts the configuration's k back (`k_config`), before that
//! update's PI step, so p' is capped with it.  These count in their own
//! `k_lease_expiries` (state and summary.json), not in `lease_expiries`: an
//! agent that sends a factor and k with one lease and then goes quiet loses
//! both at the same update, and `lease_expiries` keeps meaning what it meant
//! (p' handed back to the PI controller), so runs before and after compare.
//! An expiry counts even if the leased k equalled the configured one (the
//! counter says how often an agent's k lease ran out).
//!
//! `prob_scale` (1/16..16) is a residual agent's factor: the PI controller
//! keeps integrating its own p' (`pi_base_prob`) from the queue delay, and the
//! p' applied is that times the factor (capped like p'), from now until the
//! next `set`; 1 is the PI controller alone.  It ends a fixed `base_prob`;
//! `base_prob` (a number or "auto") resets it to 1.  With `hold_ms` it is a
//! lease like a fixed p' (the factor falls back to 1).  Because the PI
//! integrator stays in the loop, a residual agent shapes how p' moves, but the
//! queue delay it settles at is still the PI target's.

use super::{active_flows, Classifier, DualPi2, Scheduler, C, L};
use crate::qdisc::control::{BaseProb, QdiscState, Scalar, SetApplied, SetParams};
use crate::qdisc::Qdisc;
use crate::time::Nanos;

fn ms(ns: Nanos) -> f64 {
    ns as f64 / 1e6
}

impl DualPi2 {
    pub(super) fn state_for_control(&self, now: Nanos) -> QdiscState {
        let c = &self.counters;
        let mut s = QdiscState::basic("dualpi2", self.len(), self.bytes());
        let flows = self.active.counts(now);
        s.params = vec![
            ("base_prob", Scalar::F(self.p)),
            ("pi", Scalar::S(if self.manual { "manual" } else { "auto" })),
            ("pi_base_prob", Scalar::F(self.p_pi)),
            ("prob_scale", Scalar::F(self.scale)),
            (
                "hold_left_ms",
                Scalar::F(match (self.manual, self.manual_until, self.scale_until) {
                    (true, Some(until), _) | (false, _, Some(until)) => ms(until.saturating_sub(now)),
                    _ => -1.0,
                }),
            ),
            ("p_c", Scalar::F(self.p_c())),
            ("p_cl", Scalar::F(self.p_cl().min(1.0))),
            ("k", Scalar::F(self.prm.k)),
            ("k_config", Scalar::F(self.k_conf)),
            ("k_hold_left_ms", Scalar::F(self.k_until.map_or(-1.0, |until| ms(until.saturating_sub(now))))),
            ("overloaded", Scalar::B(self.overloaded())),
            ("target_ms", Scalar::F(ms(self.prm.target))),
            ("tupdate_ms", Scalar::F(ms(self.prm.tupdate))),
            ("qdelay_ms", Scalar::F(ms(self.q_prev))),
            ("classic_pkts", Scalar::U(self.q[C].len() as u64)),
            ("l4s_pkts", Scalar::U(self.q[L].len() as u64)),
            ("classic_bytes", Scalar::U(self.q[C].bytes() as u64)),
            ("l4s_bytes", Scalar::U(self.q[L].bytes() as u64)),
            ("classic_delay_ms", Scalar::F(ms(self.head_delay(C, now)))),
            ("l4s_delay_ms", Scalar::F(ms(self.head_delay(L, now)))),
            ("classic_flows", Scalar::U(flows[C] as u64)),
            ("l4s_flows", Scalar::U(flows[L] as u64)),
            ("flow_window_ms", Scalar::F(ms(active_flows::ACTIVE_WINDOW))),
            ("limit_pkts", Scalar::U(self.prm.limit_pkts as u64)),
            ("classifier", Scalar::S(if matches!(self.prm.classifier, Classifier::Ecn) { "ecn" } else { "dscp" })),
            (
                "scheduler",
                Scalar::S(if matches!(self.prm.scheduler, Scheduler::Wrr { .. }) { "wrr" } else { "tsfifo" }),
            ),
            ("drop_on_overload", Scalar::B(self.prm.drop_on_overload)),
            ("pi_updates", Scalar::U(c.updates)),
            ("manual_updates", Scalar::U(c.manual_updates)),
            ("scaled_updates", Scalar::U(c.scaled_updates)),
            ("lease_expiries", Scalar::U(c.lease_expiries)),
            ("k_lease_expiries", Scalar::U(c.k_lease_expiries)),
            ("overload_updates", Scalar::U(c.overload_updates)),
            ("classic_packets_in", Scalar::U(c.packets_in[C])),
            ("l4s_packets_in", Scalar::U(c.packets_in[L])),
            ("classic_limit_drops", Scalar::U(c.limit_drops[C])),
            ("l4s_limit_drops", Scalar::U(c.limit_drops[L])),
            ("classic_marks", Scalar::U(c.c_marks)),
            ("classic_drops", Scalar::U(c.c_drops)),
            ("classic_overload_drops", Scalar::U(c.c_overload_drops)),
            ("l4s_native_marks", Scalar::U(c.l_native_marks)),
            ("l4s_coupled_marks", Scalar::U(c.l_coupled_marks)),
            ("l4s_overload_drops", Scalar::U(c.l_overload_drops)),
            ("l4s_unmarkable_drops", Scalar::U(c.l_unmarkable_drops)),
        ];
        s
    }

    /// `base_prob`, `prob_scale`, `k` and their lease `hold_ms` (module comment); all or nothing.
    pub(super) fn set_from_control(&mut self, set: &SetParams, now: Nanos) -> Result<SetApplied, String> {
        set.only("dualpi2", &["base_prob", "prob_scale", "k", "hold_ms"])?;
        if let Some(k) = set.k {
            if !(k.is_finite() && (0.5..=64.0).contains(&k)) {
                return Err(format!("k: must be in [0.5, 64] (RFC 9332 uses 2), got {k}"));
            }
        }
        let k_after = set.k.unwrap_or(self.prm.k);
        let ceiling = if self.prm.drop_on_overload { 1.0 } else { (1.0 / k_after).min(1.0) };
        if let Some(BaseProb::Fixed(p)) = set.base_prob {
            if !(p.is_finite() && (0.0..=ceiling).contains(&p)) {
                let why = if self.prm.drop_on_overload { "" } else { " (1/k: drop_on_overload is off)" };
                return Err(format!("base_prob: must be in [0, {ceiling}]{why}, got {p}"));
            }
        }
        let mut applied = SetApplied::default();
        if let Some(k) = set.k {
            applied.params.push(("k_was", Scalar::F(self.prm.k)));
            self.prm.k = k;
            self.k_until = set.hold_ms.map(|h| now + (h * 1e6) as Nanos);
            applied.params.push(("k", Scalar::F(k)));
            if let Some(h) = set.hold_ms {
                applied.params.push(("k_hold_ms", Scalar::F(h)));
            }
            self.p = self.p.min(self.p_ceiling());
            self.p_pi = self.p_pi.min(self.p_ceiling());
        }
        if set.base_prob.is_some() {
            self.scale = 1.0;
            self.scale_until = None;
        }
        match set.base_prob {
            Some(BaseProb::Fixed(p)) => {
                applied.params.push(("base_prob_was", Scalar::F(self.p)));
                self.p = p;
                self.p_pi = p;
                self.manual = true;
                self.manual_until = set.hold_ms.map(|h| now + (h * 1e6) as Nanos);
                if let Some(h) = set.hold_ms {
                    applied.params.push(("hold_ms", Scalar::F(h)));
                }
            }
            Some(BaseProb::Auto) => {
                self.manual = false;
                self.manual_until = None;
            }
            None => {}
        }
        if let Some(f) = set.prob_scale {
            applied.params.push(("prob_scale_was", Scalar::F(self.scale)));
            self.manual = false;
            self.manual_until = None;
            self.scale = f;
            self.scale_until = set.hold_ms.map(|h| now + (h * 1e6) as Nanos);
            self.p = (self.p_pi * f).clamp(0.0, self.p_ceiling());
            applied.params.push(("prob_scale", Scalar::F(f)));
            if let Some(h) = set.hold_ms {
                applied.params.push(("hold_ms", Scalar::F(h)));
            }
        }
        applied.params.push(("base_prob", Scalar::F(self.p)));
        applied.params.push(("pi", Scalar::S(if self.manual { "manual" } else { "auto" })));
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{build, Ecn, Packet};
    use crate::qdisc::dualpi2::Params;

    fn get(s: &[(&'static str, Scalar)], name: &str) -> Scalar {
        s.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no {name}")).1
    }

    #[test]
    fn a_fixed_base_prob_holds_until_auto() {
        let mut q = DualPi2::new(Params::default(), 1);
        // A standing Classic queue 100 ms old: the PI controller would raise p'.
        for i in 0..50 {
            q.enqueue(Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], 1500, Ecn::NotEct), 0), i).unwrap();
        }
        let set = |p: BaseProb| SetParams { base_prob: Some(p), ..Default::default() };
        let a = q.set_from_control(&set(BaseProb::Fixed(0.05)), 0).unwrap();
        assert_eq!(get(&a.params, "base_prob"), Scalar::F(0.05));
        let mut t = 0;
        for _ in 0..20 {
            t += 16_000_000;
            q.on_timer(t);
        }
        let s = q.state_for_control(t);
        assert_eq!((get(&s.params, "base_prob"), get(&s.params, "pi")), (Scalar::F(0.05), Scalar::S("manual")));
        assert_eq!(get(&s.params, "p_c"), Scalar::F(0.05 * 0.05));
        assert_eq!(get(&s.params, "classic_pkts"), Scalar::U(50));
        assert!(matches!(get(&s.params, "qdelay_ms"), Scalar::F(d) if d > 300.0), "{s:?}");
        q.set_from_control(&set(BaseProb::Auto), t).unwrap();
        q.on_timer(t + 16_000_000);
        assert!(q.p_prime() > 0.05, "the PI controller resumed: p' = {}", q.p_prime());
        // k changes the coupling at once.
        let a = q.set_from_control(&SetParams { k: Some(4.0), ..Default::default() }, t).unwrap();
        assert_eq!(get(&a.params, "k_was"), Scalar::F(2.0));
        assert_eq!(q.p_cl(), 4.0 * q.p_prime());
    }

    #[test]
    fn prob_scale_multiplies_the_pi_controllers_p_which_keeps_integrating() {
        // Two identical queues with a standing Classic backlog: one PI alone, one with a factor of 0.5.
        let standing = || {
            let mut q = DualPi2::new(Params::default(), 1);
            for i in 0..50 {
                q.enqueue(Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], 1500, Ecn::NotEct), 0), i).unwrap();
            }
            q
        };
        let (mut alone, mut scaled) = (standing(), standing());
        let hold = SetParams { prob_scale: Some(0.5), hold_ms: Some(200.0), ..Default::default() };
        let a = scaled.set_from_control(&hold, 0).unwrap();
        assert_eq!((get(&a.params, "prob_scale_was"), get(&a.params, "prob_scale")), (Scalar::F(1.0), Scalar::F(0.5)));
        let mut t = 0;
        for _ in 0..10 {
            t += 16_000_000;
            alone.on_timer(t);
            scaled.on_timer(t);
        }
        // The integrator is the same as PI alone's (the queue did not move: no service here) ...
        let s = scaled.state_for_control(t);
        assert_eq!(get(&s.params, "pi_base_prob"), Scalar::F(alone.p_prime()));
        // ... and the p' applied is half of it.
        assert!((scaled.p_prime() - 0.5 * alone.p_prime()).abs() < 1e-12, "{} {}", scaled.p_prime(), alone.p_prime());
        assert!(alone.p_prime() > 0.01);
        assert!(matches!(get(&s.params, "hold_left_ms"), Scalar::F(h) if (30.0..=40.0).contains(&h)), "{s:?}");
        // The lease runs out at the first update at or after 200 ms: the factor falls back to 1.
        for _ in 0..3 {
            t += 16_000_000;
            alone.on_timer(t);
            scaled.on_timer(t);
        }
        assert_eq!(scaled.p_prime(), alone.p_prime());
        assert_eq!(get(&scaled.state_for_control(t).params, "prob_scale"), Scalar::F(1.0));
        assert_eq!(scaled.counters.lease_expiries, 1);
        assert_eq!(scaled.counters.scaled_updates, 11); // the first timer only starts the PI grid
                                                        // A fixed p' resets the factor; a factor ends a fixed p'.
        scaled.set_from_control(&SetParams { prob_scale: Some(2.0), ..Default::default() }, t).unwrap();
        scaled
            .set_from_control(&SetParams { base_prob: Some(BaseProb::Fixed(0.02)), ..Default::default() }, t)
            .unwrap();
        let s = scaled.state_for_control(t);
        assert_eq!((get(&s.params, "prob_scale"), get(&s.params, "pi")), (Scalar::F(1.0), Scalar::S("manual")));
        scaled.set_from_control(&SetParams { prob_scale: Some(2.0), ..Default::default() }, t).unwrap();
        assert_eq!(get(&scaled.state_for_control(t).params, "pi"), Scalar::S("auto"));
        assert!((scaled.p_prime() - 0.04).abs() < 1e-12, "2 x the integrator's 0.02: {}", scaled.p_prime());
    }

    #[test]
    fn a_lease_that_is_not_renewed_hands_p_back_to_the_pi_controller() {
        let mut q = DualPi2::new(Params::default(), 1);
        for i in 0..50 {
            q.enqueue(Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], 1500, Ecn::NotEct), 0), i).unwrap();
        }
        let lease =
            |p: f64| SetParams { base_prob: Some(BaseProb::Fixed(p)), hold_ms: Some(50.0), ..Default::default() };
        let a = q.set_from_control(&lease(0.01), 0).unwrap();
        assert_eq!(get(&a.params, "hold_ms"), Scalar::F(50.0));
        // Renewed every 32 ms (two PI updates): p' stays the agent's.
        let mut t = 0;
        for _ in 0..10 {
            t += 16_000_000;
            q.on_timer(t);
            t += 16_000_000;
            q.on_timer(t);
            q.set_from_control(&lease(0.01), t).unwrap();
        }
        assert_eq!((q.p_prime(), q.counters.lease_expiries), (0.01, 0));
        assert!(matches!(get(&q.state_for_control(t).params, "hold_left_ms"), Scalar::F(h) if (h - 50.0).abs() < 1e-9));
        // The agent goes quiet: the first update at or after 50 ms resumes the PI controller,
        // which raises p' for the standing 100+ ms queue.
        for _ in 0..3 {
            t += 16_000_000;
            q.on_timer(t);
        }
        assert_eq!(q.counters.lease_expiries, 0, "48 ms < 50 ms: still the agent's");
        t += 16_000_000;
        q.on_timer(t);
        assert_eq!((q.counters.lease_expiries, q.manual), (1, false));
        assert!(q.p_prime() > 0.01, "PI resumed: p' = {}", q.p_prime());
        assert_eq!(get(&q.state_for_control(t).params, "hold_left_ms"), Scalar::F(-1.0));
    }

    #[test]
    fn a_k_lease_restores_the_configured_k_at_the_first_update_at_or_after_it() {
        let mut q = DualPi2::new(Params::default(), 1);
        q.on_timer(0); // starts the PI grid: updates at 16, 32, ... ms
        let lease = |k: f64| SetParams { k: Some(k), hold_ms: Some(50.0), ..Default::default() };
        let a = q.set_from_control(&lease(3.0), 0).unwrap();
        assert_eq!((get(&a.params, "k"), get(&a.params, "k_hold_ms")), (Scalar::F(3.0), Scalar::F(50.0)));
        let s = q.state_for_control(0);
        assert_eq!(
            (get(&s.params, "k_hold_left_ms"), get(&s.params, "hold_left_ms")),
            (Scalar::F(50.0), Scalar::F(-1.0))
        );
        assert_eq!(get(&s.params, "k_config"), Scalar::F(2.0));
        let mut t = 0;
        for _ in 0..3 {
            t += 16_000_000;
            q.on_timer(t);
        }
        assert_eq!((q.params().k, q.counters.k_lease_expiries), (3.0, 0), "48 ms < 50 ms: still the agent's");
        assert_eq!(get(&q.state_for_control(t).params, "k_hold_left_ms"), Scalar::F(2.0));
        t += 16_000_000;
        q.on_timer(t);
        assert_eq!((q.params().k, q.counters.k_lease_expiries, q.counters.lease_expiries), (2.0, 1, 0));
        let s = q.state_for_control(t);
        assert_eq!((get(&s.params, "k"), get(&s.params, "k_hold_left_ms")), (Scalar::F(2.0), Scalar::F(-1.0)));
        assert_eq!(get(&s.params, "k_lease_expiries"), Scalar::U(1));
        assert_eq!(q.stats_json().unwrap()["k_lease_expiries"], 1);
        // Renewed every 32 ms: k stays the agent's; a set without k does not renew it.
        for _ in 0..10 {
            q.set_from_control(&lease(4.0), t).unwrap();
            t += 16_000_000;
            q.on_timer(t);
            t += 16_000_000;
            q.on_timer(t);
        }
        assert_eq!((q.params().k, q.counters.k_lease_expiries), (4.0, 1));
        q.set_from_control(&SetParams { prob_scale: Some(0.5), hold_ms: Some(500.0), ..Default::default() }, t)
            .unwrap();
        t += 32_000_000;
        q.on_timer(t);
        assert_eq!((q.params().k, q.counters.k_lease_expiries), (2.0, 2), "the factor's set left k's lease alone");
        assert_eq!((q.scale, q.counters.lease_expiries), (0.5, 0));
        // k without hold_ms is permanent, and ends a lease in place.
        q.set_from_control(&lease(3.0), t).unwrap();
        q.set_from_control(&SetParams { k: Some(1.5), ..Default::default() }, t).unwrap();
        assert_eq!(get(&q.state_for_control(t).params, "k_hold_left_ms"), Scalar::F(-1.0));
        for _ in 0..100 {
            t += 16_000_000;
            q.on_timer(t);
        }
        assert_eq!((q.params().k, q.counters.k_lease_expiries), (1.5, 2));
    }

    #[test]
    fn a_restored_k_caps_p_without_drop_on_overload() {
        let mut q = DualPi2::new(Params { drop_on_overload: false, ..Params::default() }, 1);
        q.on_timer(0);
        q.set_from_control(&SetParams { k: Some(1.0), hold_ms: Some(10.0), ..Default::default() }, 0).unwrap();
        q.set_from_control(&SetParams { base_prob: Some(BaseProb::Fixed(0.8)), ..Default::default() }, 0).unwrap();
        q.on_timer(16_000_000);
        // k = 2 again before the update: the fixed p' is held at 1/k.
        assert_eq!((q.params().k, q.p_prime(), q.counters.k_lease_expiries), (2.0, 0.5, 1));
        assert_eq!(get(&q.state_for_control(16_000_000).params, "pi"), Scalar::S("manual"));
    }

    #[test]
    fn out_of_range_or_foreign_fields_change_nothing() {
        let mut q = DualPi2::new(Params::default(), 1);
        let e = q.control_set(&SetParams { base_prob: Some(BaseProb::Fixed(1.5)), ..Default::default() }, 0);
        assert_eq!(e.unwrap_err(), "base_prob: must be in [0, 1], got 1.5");
        let bad = SetParams { base_prob: Some(BaseProb::Fixed(0.1)), k: Some(100.0), ..Default::default() };
        assert!(q.control_set(&bad, 0).unwrap_err().starts_with("k: must be in [0.5, 64]"));
        assert_eq!((q.p_prime(), q.params().k, q.manual), (0.0, 2.0, false));
        let e = q.control_set(&SetParams { default_limit_pkts: Some(5), ..Default::default() }, 0).unwrap_err();
        assert_eq!(e, "default_limit_pkts: not settable on dualpi2 (settable: base_prob, prob_scale, k, hold_ms)");
        // Without drop_on_overload p' stays within 1/k.
        let mut q = DualPi2::new(Params { drop_on_overload: false, ..Params::default() }, 1);
        let e = q.control_set(&SetParams { base_prob: Some(BaseProb::Fixed(0.6)), ..Default::default() }, 0);
        assert!(e.unwrap_err().contains("[0, 0.5] (1/k: drop_on_overload is off)"));
    }
}
