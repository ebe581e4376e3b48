/* SPDX-License-Identifier: GPL-2.0 */
/*
 * PCC Vivace: the rate decision, online gradient ascent on the utility
 * (pcc.bpf.c, header comment, "Phases").  Probe rates and the random order
 * within each pair, the step size (confidence amplifier, dynamic change
 * boundary), one decision function per phase (STARTING, PROBING, MOVING),
 * and pcc_mi_complete(), which turns a finished MI into its utility and
 * verdicts and lets the phase decide.
 */
#ifndef CCSWITCH_PCC_RATE_BPF_H
#define CCSWITCH_PCC_RATE_BPF_H

#include "pcc_defs.bpf.h"
#include "pcc_utility.bpf.h"
#include "pcc_mi.bpf.h"

/* ---- Rate control ------------------------------------------------------------ */

static __always_inline __u64 pcc_probe_rate(__u64 rate, bool high)
{
	__u64 f = high ? PCC_PERMILLE + PCC_EPS_PERMILLE :
			 PCC_PERMILLE - PCC_EPS_PERMILLE;

	return pcc_clamp_rate(rate * f / PCC_PERMILLE);
}

/* Is probe p (0..3) the high one of its pair? */
static __always_inline bool pcc_probe_is_high(const struct pcc_state *s,
					      __u32 p)
{
	bool high_first = (s->plan >> (p >> 1)) & 1;

	return ((p & 1) == 0) == high_first;
}

static void pcc_enter_probing(struct pcc_state *s)
{
	s->phase = PCC_PROBING;
	s->plan = bpf_get_prandom_u32() & 3;
	s->probes_sent = 0;
	s->probes_done = 0;
	s->probes_congested = 0;
	s->tainted = 0;
	s->tau = 0;
	s->omega_k = 0;
	pcc_mi_forget_all(s);
	s->send_rate = s->rate;
}

/* Confidence amplifier m(tau) */
static __always_inline __u64 pcc_amplifier(__u32 tau)
{
	return pcc_min(1 + (__u64)tau, PCC_AMP_MAX);
}

/* Dynamic change boundary omega = omega0 + k * delta, per mille */
static __always_inline __u64 pcc_change_bound(__u32 k)
{
	return pcc_min(PCC_OMEGA0_PERMILLE + (__u64)k * PCC_OMEGA_DELTA_PERMILLE,
		       PCC_OMEGA_MAX_PERMILLE);
}

/*
 * One gradient-ascent step from the base rate; grad is the utility gradient
 * (Q16 utility per Mbit/s), its sign the direction.
 */
static void pcc_take_step(struct pcc_state *s, __s64 grad)
{
	__u64 rate = s->rate, g = pcc_min(pcc_abs(grad), 1ULL << 36);
	__u64 step, bound;

	/* theta0 * |gamma|, Mbit/s Q16 -> bit/s */
	step = ((g * PCC_THETA0_X1000) >> PCC_FP_SHIFT) *
	       (USEC_PER_SEC / PCC_PERMILLE);
	step = pcc_max(step, rate * PCC_MIN_STEP_PERMILLE / PCC_PERMILLE);
	step *= pcc_amplifier(s->tau);

	bound = rate * pcc_change_bound(s->omega_k) / PCC_PERMILLE;
	if (step > bound) {
		step = bound;
		s->omega_k++;
	} else {
		s->omega_k = 0;
	}
	s->tau++;
	if (grad >= 0)
		rate += step;
	else
		rate = rate > step ? rate - step : 0;
	s->rate = pcc_clamp_rate(rate);
}

/* STARTING: double the rate while utility grows and the queue does not. */
static void pcc_starting_decide(struct pcc_state *s, const struct pcc_mi *mi,
				__s64 u, bool no_up)
{
	if (u > s->prev_util && !no_up) {
		s->prev_rate = mi->rate;
		s->prev_util = u;
		s->rate = pcc_clamp_rate(mi->rate * 2);
		pcc_mi_forget_all(s);
		return;
	}
	s->rate = pcc_clamp_rate(s->prev_rate);
	pcc_enter_probing(s);
}

/* PROBING: record a probe; decide once all four are in. */
static void pcc_probing_decide(struct pcc_state *s, const struct pcc_mi *mi,
			       __s64 u, bool congested, bool usable)
{
	__s64 d0, d1, uh0, ul0, uh1, ul1, grad;
	__u64 dx;

	if (!usable)
		s->tainted = 1;
	if (congested)
		s->probes_congested++;
	s->probe_util[mi->probe & (PCC_PROBES - 1)] = u;
	if (++s->probes_done < PCC_PROBES)
		return;
	if (s->tainted) {
		pcc_enter_probing(s);
		return;
	}
	uh0 = s->probe_util[pcc_probe_is_high(s, 0) ? 0 : 1];
	ul0 = s->probe_util[pcc_probe_is_high(s, 0) ? 1 : 0];
	uh1 = s->probe_util[pcc_probe_is_high(s, 2) ? 2 : 3];
	ul1 = s->probe_util[pcc_probe_is_high(s, 2) ? 3 : 2];
	d0 = uh0 - ul0;
	d1 = uh1 - ul1;
	dx = pcc_mbps_q16(pcc_probe_rate(s->rate, true)) -
	     pcc_mbps_q16(pcc_probe_rate(s->rate, false));
	grad = pcc_div_q16((d0 >> 1) + (d1 >> 1), pcc_max(dx, 1));
	if (s->probes_congested >= PCC_PROBES) {
		/* even r(1-eps) made the queue grow: down, whatever the pairs say */
		grad = -(__s64)pcc_max(pcc_abs(grad), PCC_FP_ONE);
	} else if (!((d0 > 0 && d1 > 0) || (d0 < 0 && d1 < 0))) {
		pcc_enter_probing(s);		/* inconclusive: probe again */
		return;
	}
	/* the base rate's utility, interpolated from the four probes */
	s->prev_rate = s->rate;
	s->prev_util = (uh0 >> 2) + (ul0 >> 2) + (uh1 >> 2) + (ul1 >> 2);
	s->tau = 0;
	s->omega_k = 0;
	pcc_take_step(s, grad);
	s->phase = PCC_MOVING;
	pcc_mi_forget_all(s);
}

/* MOVING: keep going while utility improves in the direction of movement. */
static void pcc_moving_decide(struct pcc_state *s, const struct pcc_mi *mi,
			      __s64 u, bool no_up)
{
	__s64 du = u - s->prev_util, dx, grad;

	dx = (__s64)pcc_mbps_q16(mi->rate) - (__s64)pcc_mbps_q16(s->prev_rate);
	if (dx != 0 && du > 0 && !(dx > 0 && no_up)) {
		grad = pcc_div_q16(du, pcc_abs(dx));
		if (dx < 0)
			grad = -grad;
		s->prev_rate = mi->rate;
		s->prev_util = u;
		s->rate = mi->rate;
		pcc_take_step(s, grad);
		pcc_mi_forget_all(s);
		return;
	}
	/* utility got worse (or up is barred): back to the better point */
	s->rate = pcc_clamp_rate(s->prev_rate);
	pcc_enter_probing(s);
}

/* An MI is complete: compute its utility and let the phase decide. */
PCC_SUBPROG int pcc_mi_complete(struct pcc_state *s, __u32 slot)
{
	struct pcc_mi *mi;
	bool usable, congested, no_up;
	__s64 grad, u;
	__u64 loss;

	if (!s)
		return 0;
	mi = &s->mi[slot & PCC_MI_MASK];
	grad = pcc_mi_rtt_gradient(mi);
	loss = pcc_mi_loss_q16(mi);
	u = pcc_utility(mi->rate, grad, loss);
	usable = pcc_mi_usable(mi, loss);
	congested = pcc_mi_congested(mi, grad, loss);
	/* an MI that may not make the rate go up */
	no_up = congested || pcc_mi_send_limited(mi, s->mss);
	pcc_update_burst(s, mi);

	pcc_dbg("pcc mi id=%u ph=%u pr=%u", s->port, s->phase, mi->probe);
	pcc_dbg("pcc    rate=%llu t=%llu", mi->rate / 1000, mi->start_us / 1000);
	pcc_dbg("pcc    n=%u raw=%lld grad=%lld", mi->n, mi->raw_slope, grad);
	pcc_dbg("pcc    dlv=%u lost=%u u=%lld", mi->delivered, mi->lost, u >> 6);
	pcc_dbg("pcc    dur=%llu segs=%u y0=%u", mi->end_us - mi->start_us,
		mi->segs, mi->y0);

	if (usable && pcc_rate_unreachable(s, mi)) {
		/* the target carries no information: take what was sent */
		pcc_dbg("pcc unreachable id=%u rate=%llu ratio=%u", s->port,
			s->rate, s->sent_ratio_q16);
		s->rate = pcc_clamp_rate((s->rate * s->sent_ratio_q16) >>
					 PCC_FP_SHIFT);
		s->sent_ratio_q16 = PCC_FP_ONE;
		pcc_enter_probing(s);
		return 0;
	}

	switch (s->phase) {
	case PCC_STARTING:
		if (!usable)
			pcc_mi_forget_all(s);	/* repeat at the same rate */
		else
			pcc_starting_decide(s, mi, u, no_up);
		break;
	case PCC_PROBING:
		pcc_probing_decide(s, mi, u, congested,
				   usable && (congested || !no_up));
		break;
	default:
		if (!usable)
			pcc_mi_forget_all(s);	/* repeat at the same rate */
		else
			pcc_moving_decide(s, mi, u, no_up);
		break;
	}
	return 0;
}

#endif /* CCSWITCH_PCC_RATE_BPF_H */
