/* SPDX-License-Identifier: GPL-2.0 */
/*
 * PCC Vivace: a socket's state from its start (pcc.bpf.c, header comment,
 * "State" and "Initial rate").  The initial rate without a seed; the "full"
 * inheritance seed in ccs_pcc_seed (written by the switcher, pcc.h), carried
 * into the state and deleted; and pcc_get_state(), the callbacks' way to the
 * state (cong_control() creates it when init() could not).
 */
#ifndef CCSWITCH_PCC_INIT_BPF_H
#define CCSWITCH_PCC_INIT_BPF_H

#include "pcc_defs.bpf.h"
#include "pcc_rate.bpf.h"

/* ---- Initialisation --------------------------------------------------------- */

/* Initial rate without a seed, see pcc.bpf.c. */
static __u64 pcc_initial_rate(const struct tcp_sock *tp)
{
	__u64 mss = pcc_mss(tp), rtt, rate, dlv = 0;
	__u32 cwnd = tp->snd_cwnd ? tp->snd_cwnd : 10;

	rtt = pcc_max(tp->srtt_us >> 3, PCC_INIT_RTT_FLOOR_US);
	rate = (__u64)cwnd * mss * BITS_PER_BYTE * USEC_PER_SEC / rtt;
	/* a fresh connection's only delivery sample is the SYN: ignore it */
	if (tp->delivered >= PCC_LIVE_MIN_DELIVERED &&
	    tp->rate_interval_us > 0 && tp->rate_delivered > 0)
		dlv = (__u64)tp->rate_delivered * mss * BITS_PER_BYTE *
		      USEC_PER_SEC / tp->rate_interval_us;
	return pcc_clamp_rate(pcc_max(rate, dlv));
}

static void pcc_state_init(struct sock *sk, struct pcc_state *s)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct pcc_seed *seed;

	__builtin_memset(s, 0, sizeof(*s));
	s->port = sk->__sk_common.skc_num;
	s->mss = pcc_mss(tp);
	s->burst_x16 = 16;
	s->sent_ratio_q16 = PCC_FP_ONE;
	s->min_rtt_us = tp->srtt_us >> 3;
	s->min_rtt_stamp = tp->tcp_mstamp;

	seed = bpf_sk_storage_get(&ccs_pcc_seed, sk, 0, 0);
	if (seed && seed->valid && seed->rate_bps) {
		/* "full" inheritance: skip the starting phase */
		s->rate = pcc_clamp_rate(seed->rate_bps);
		if (seed->min_rtt_us)
			s->min_rtt_us = seed->min_rtt_us;
		pcc_enter_probing(s);
	} else {
		s->rate = pcc_initial_rate(tp);
		s->phase = PCC_STARTING;
		/* virtual previous MI: half the rate, utility 0 */
		s->prev_rate = pcc_clamp_rate(s->rate / 2);
		s->prev_util = 0;
		s->send_rate = s->rate;
	}
	if (seed)
		bpf_sk_storage_delete(&ccs_pcc_seed, sk);
	pcc_dbg("pcc init id=%u rate=%llu phase=%u", s->port, s->rate, s->phase);
}

static struct pcc_state *pcc_get_state(struct sock *sk, bool create)
{
	struct pcc_state *s;

	s = bpf_sk_storage_get(&ccs_pcc_state, sk, 0, 0);
	if (s || !create)
		return s;
	s = bpf_sk_storage_get(&ccs_pcc_state, sk, 0,
			       BPF_SK_STORAGE_GET_F_CREATE);
	if (s)
		pcc_state_init(sk, s);
	return s;
}

#endif /* CCSWITCH_PCC_INIT_BPF_H */
