/* SPDX-License-Identifier: GPL-2.0 */
/*
 * PCC Vivace: monitor-interval bookkeeping (pcc.bpf.c, header comment,
 * "Matching MIs to ACKs" to "Congestion guards").  The RTT baseline and the
 * length of the next MI; the ring of outstanding MIs (open one, find the MI
 * a send time belongs to); each MI's RTT regression and its noise-filtered
 * gradient; and the verdicts on a finished MI that the rate decision rests
 * on: loss, usable, congested, sent short of its target, target out of
 * reach (plus the TSO burst size the MI length is measured in).
 */
#ifndef CCSWITCH_PCC_MI_BPF_H
#define CCSWITCH_PCC_MI_BPF_H

#include "pcc_defs.bpf.h"

/* ---- RTT and MI length ------------------------------------------------------ */

/* Smoothed RTT in us; before TCP has one, the RTT baseline, then 1 ms. */
static __always_inline __u64 pcc_srtt_us(const struct tcp_sock *tp,
					 const struct pcc_state *s)
{
	__u32 srtt = tp->srtt_us >> 3;

	if (srtt)
		return srtt;
	if (s->min_rtt_us)
		return s->min_rtt_us;
	return PCC_DEFAULT_RTT_US;
}

static __always_inline void pcc_update_min_rtt(struct pcc_state *s, __u32 rtt,
					       __u64 now)
{
	rtt = rtt ? rtt : 1;
	if (!s->min_rtt_us || rtt <= s->min_rtt_us ||
	    now - s->min_rtt_stamp > PCC_MIN_RTT_WIN_US) {
		s->min_rtt_us = rtt;
		s->min_rtt_stamp = now;
	}
}

/*
 * Length of the next MI: max(srtt, MI floor, 10 packets, ~8 RTT samples at
 * the burst size seen lately), at most 1 s.  See pcc.bpf.c's header comment.
 */
static __u64 pcc_mi_duration(const struct tcp_sock *tp,
			     const struct pcc_state *s, __u64 rate)
{
	__u64 d = pcc_max(pcc_srtt_us(tp, s), PCC_MI_MIN_US);
	__u64 pkts;

	pkts = pcc_max(PCC_MI_MIN_PKTS,
		       (PCC_MI_MIN_SAMPLES * s->burst_x16) >> 4);
	d = pcc_max(d, pkts * pcc_mss(tp) * BITS_PER_BYTE * USEC_PER_SEC /
		       pcc_max(rate, 1));
	return pcc_min(d, PCC_MI_MAX_US);
}

/* ---- Monitor intervals ------------------------------------------------------- */

static __always_inline struct pcc_mi *pcc_mi_at(struct pcc_state *s, __u32 i)
{
	return &s->mi[(s->head + i) & PCC_MI_MASK];
}

static __always_inline void pcc_mi_forget_all(struct pcc_state *s)
{
	s->head = 0;
	s->cnt = 0;
	s->open = 0;
}

static void pcc_mi_open(struct pcc_state *s, const struct tcp_sock *tp,
			__u64 now, __u64 rate, __u32 probe)
{
	struct pcc_mi *mi;

	if (s->cnt >= PCC_MI_SLOTS) {		/* cannot happen; stay safe */
		s->head = (s->head + 1) & PCC_MI_MASK;
		s->cnt--;
	}
	mi = pcc_mi_at(s, s->cnt);
	__builtin_memset(mi, 0, sizeof(*mi));
	mi->rate = rate;
	mi->start_us = now;
	mi->dur_us = pcc_mi_duration(tp, s, rate);
	mi->probe = probe;
	mi->segs_start = tp->data_segs_out;
	/* at most about one sample per packet */
	mi->decim = pcc_pkts_in(rate, mi->dur_us, pcc_mss(tp)) /
		    PCC_REG_SAMPLES_MAX + 1;
	s->cnt++;
	s->open = 1;
	s->send_rate = rate;
}

/* The outstanding MI whose send window contains send time t, or NULL. */
static struct pcc_mi *pcc_mi_find(struct pcc_state *s, __u64 t)
{
	int i;

	for (i = 0; i < PCC_MI_SLOTS; i++) {
		struct pcc_mi *mi;

		if (i >= s->cnt)
			break;
		mi = pcc_mi_at(s, i);
		if (t < mi->start_us)
			continue;
		if (!mi->end_us || t < mi->end_us)
			return mi;
	}
	return NULL;
}

/* Add an RTT sample (send time t) to the MI's regression sums. */
static void pcc_mi_add_rtt(struct pcc_mi *mi, __u64 t, __u32 rtt)
{
	__s64 x, y;

	if (mi->n >= PCC_REG_SAMPLES_MAX)
		return;
	if (mi->seen++ % mi->decim)
		return;
	if (!mi->n)
		mi->y0 = rtt;
	x = t - mi->start_us;
	if (x >= PCC_REG_CLAMP)
		x = PCC_REG_CLAMP - 1;
	y = (__s64)rtt - (__s64)mi->y0;
	if (y >= PCC_REG_CLAMP)
		y = PCC_REG_CLAMP - 1;
	if (y <= -PCC_REG_CLAMP)
		y = -PCC_REG_CLAMP + 1;
	mi->n++;
	mi->st += x;
	mi->stt += x * x;
	mi->sy += y;
	mi->syy += y * y;
	mi->sty += x * y;
}

/*
 * RTT gradient of an MI, Q16, after noise filtering (pcc.bpf.c header): the
 * least-squares slope minus the tolerance if it is positive, exceeds the
 * tolerance and is significant; 0 otherwise.
 */
PCC_SUBPROG __s64 pcc_mi_rtt_gradient(struct pcc_mi *mi)
{
	__u64 n, sxx, syy, ssreg, ssres;
	__s64 sxy, slope;
	__u32 b, sh = 0;

	if (!mi)
		return 0;
	mi->raw_slope = 0;
	n = mi->n;
	if (n < PCC_REG_MIN_SAMPLES)
		return 0;
	/* centred sums; n <= 2^10 and |t|, |y| < 2^20 keep them in s64 */
	sxx = (__u64)mi->stt - (__u64)(mi->st * mi->st) / n;
	sxy = mi->sty - pcc_sdiv(mi->st * mi->sy, n);
	syy = (__u64)mi->syy - (__u64)(mi->sy * mi->sy) / n;
	if ((__s64)sxx <= 0 || (__s64)syy < 0)
		return 0;
	/* scale down so that the squares below fit in 60 bits */
	b = pcc_fls64(pcc_max(pcc_max(sxx, syy), pcc_abs(sxy)));
	if (b > 30)
		sh = b - 30;
	sxx >>= sh;
	syy >>= sh;
	sxy = pcc_sshr(sxy, sh);
	if (!sxx)
		return 0;
	slope = pcc_sdiv(sxy << PCC_FP_SHIFT, sxx);
	if (slope > PCC_GRAD_MAX_Q16)
		slope = PCC_GRAD_MAX_Q16;
	if (slope < -PCC_GRAD_MAX_Q16)
		slope = -PCC_GRAD_MAX_Q16;
	mi->raw_slope = slope;
	if (slope <= PCC_GRAD_TOL_Q16)
		return 0;		/* draining, flat, or within tolerance */
	ssreg = (__u64)(sxy * sxy) / sxx;
	ssres = syy > ssreg ? syy - ssreg : 0;
	if ((n - 2) * ssreg < PCC_GRAD_T2 * ssres)
		return 0;		/* not significant */
	return slope - PCC_GRAD_TOL_Q16;
}

static __always_inline __u64 pcc_mi_loss_q16(const struct pcc_mi *mi)
{
	__u64 tot = (__u64)mi->delivered + mi->lost;

	return tot ? ((__u64)mi->lost << PCC_FP_SHIFT) / tot : 0;
}

/* Track the packets per RTT sample, i.e. the size of TSO bursts. */
static __always_inline void pcc_update_burst(struct pcc_state *s,
					     const struct pcc_mi *mi)
{
	__u64 b;

	if (mi->n < 2 || !mi->segs)
		return;
	b = ((__u64)mi->segs << 4) / mi->n;
	b = pcc_min(pcc_max(b, 16), 64 << 4);
	s->burst_x16 = (s->burst_x16 + b) >> 1;
}

/*
 * Can the MI be used for a decision?  It needs a few packets, must not be
 * mostly app-limited, and needs an RTT gradient -- unless heavy loss speaks
 * for itself.
 */
static __always_inline bool pcc_mi_usable(const struct pcc_mi *mi,
					  __u64 loss_q16)
{
	if (mi->delivered + mi->lost < PCC_MI_MIN_ACCT_PKTS)
		return false;
	if (mi->app_limited * 2 > mi->samples)
		return false;
	return mi->n >= PCC_REG_MIN_SAMPLES || loss_q16 >= PCC_LOSS_HEAVY_Q16;
}

/*
 * Was the MI sent into a growing queue?  Without RTT samples (in heavy loss
 * recovery most ACKs are for retransmissions) heavy loss counts instead.
 */
static __always_inline bool pcc_mi_congested(const struct pcc_mi *mi,
					     __s64 grad, __u64 loss_q16)
{
	if (mi->n < PCC_REG_MIN_SAMPLES)
		return loss_q16 >= PCC_LOSS_HEAVY_Q16;
	return grad > 0;
}

/* Did the sender fall well short of the MI's target rate? */
static __always_inline bool pcc_mi_send_limited(const struct pcc_mi *mi,
						__u32 mss)
{
	__u64 expect = pcc_pkts_in(mi->rate, mi->end_us - mi->start_us, mss);

	return (__u64)mi->segs * 100 < expect * PCC_SEND_MIN_PCT;
}

/* Average sent/target over the last MIs; true once the target is out of reach. */
static __always_inline bool pcc_rate_unreachable(struct pcc_state *s,
						 const struct pcc_mi *mi)
{
	__u64 expect = pcc_pkts_in(mi->rate, mi->end_us - mi->start_us, s->mss);
	__u64 r;

	if (!expect)
		return false;
	r = pcc_min(((__u64)mi->segs << PCC_FP_SHIFT) / expect, 2 * PCC_FP_ONE);
	s->sent_ratio_q16 = (3 * (__u64)s->sent_ratio_q16 + r) >> 2;
	return s->sent_ratio_q16 < PCC_SEND_RATIO_MIN_Q16;
}

#endif /* CCSWITCH_PCC_MI_BPF_H */
