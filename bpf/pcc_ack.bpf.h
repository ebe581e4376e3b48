/* SPDX-License-Identifier: GPL-2.0 */
/*
 * PCC Vivace: what cong_control() does on each ACK (pcc.bpf.c, header
 * comment, "Matching MIs to ACKs" and "Pacing and cwnd").  Credit the ACK
 * to the MI its RTT sample was sent in and complete the MIs it shows to be
 * finished; close the MI being sent once its time is up and open the next
 * (the probes, in PROBING); push the rate to the socket as pacing rate and
 * cwnd.
 */
#ifndef CCSWITCH_PCC_ACK_BPF_H
#define CCSWITCH_PCC_ACK_BPF_H

#include "pcc_defs.bpf.h"
#include "pcc_mi.bpf.h"
#include "pcc_rate.bpf.h"

/* ---- Per-ACK processing --------------------------------------------------- */

/* Credit this ACK to its MI; complete the MIs it shows to be finished. */
static void pcc_account_ack(struct pcc_state *s, const struct rate_sample *rs,
			    __u64 now)
{
	long rtt = rs->rtt_us;
	bool burst_head = false;
	struct pcc_mi *mi;
	__u32 slot;
	__u64 t;
	int i;

	if (rtt >= 0 && (__u64)rtt <= now && !rs->is_retrans) {
		t = now - rtt;			/* send time of the sample */
		burst_head = t != s->last_send_us;
		s->last_send_us = t;
		pcc_update_min_rtt(s, rtt, now);
	} else {
		rtt = -1;			/* Karn: no usable send time */
		t = s->last_send_us;
	}
	if (s->paused || !s->cnt)
		return;

	mi = pcc_mi_find(s, t);
	if (mi) {
		mi->delivered += rs->acked_sacked;
		mi->lost += rs->losses;
		mi->samples++;
		if (rs->is_app_limited)
			mi->app_limited++;
		/* one sample per TSO burst, see pcc.bpf.c */
		if (burst_head && !rs->is_ack_delayed)
			pcc_mi_add_rtt(mi, t, rtt);
	}
	if (rtt < 0)
		return;

	for (i = 0; i < PCC_MI_SLOTS; i++) {
		struct pcc_mi *head;

		if (!s->cnt)
			break;
		slot = s->head & PCC_MI_MASK;
		head = &s->mi[slot];
		if (!head->end_us || t < head->end_us)
			break;
		s->head = (slot + 1) & PCC_MI_MASK;
		s->cnt--;
		pcc_mi_complete(s, slot);
	}
}

/* Close the MI being sent when its time is up; open the next one. */
static void pcc_advance_send(struct pcc_state *s, const struct tcp_sock *tp,
			     __u64 now)
{
	struct pcc_mi *mi;

	if (s->paused)
		return;
	if (s->open) {
		mi = pcc_mi_at(s, s->cnt - 1);
		if (now - mi->start_us < mi->dur_us)
			return;
		mi->end_us = now;
		mi->segs = tp->data_segs_out - mi->segs_start;
		s->open = 0;
		if (s->phase != PCC_PROBING)
			return;		/* wait for its result at this rate */
		if (s->probes_sent >= PCC_PROBES) {
			s->send_rate = s->rate;
			return;		/* wait for the probes' results */
		}
	} else if (s->cnt) {
		return;			/* waiting for results */
	}

	if (s->phase != PCC_PROBING) {
		pcc_mi_open(s, tp, now, s->rate, 0);
	} else if (s->probes_sent < PCC_PROBES) {
		pcc_mi_open(s, tp, now,
			    pcc_probe_rate(s->rate,
					   pcc_probe_is_high(s, s->probes_sent)),
			    s->probes_sent);
		s->probes_sent++;
	}
}

/* cwnd = 2 * rate * srtt + max(1 ms of data, 4 packets), see pcc.bpf.c. */
static __u32 pcc_target_cwnd(const struct tcp_sock *tp,
			     const struct pcc_state *s, __u64 rate)
{
	__u64 bytes_per_ms = rate / (BITS_PER_BYTE * USEC_PER_MSEC);
	__u64 mss = pcc_mss(tp), cwnd, extra;

	cwnd = PCC_CWND_SRTT_MULT * bytes_per_ms * pcc_srtt_us(tp, s) /
	       (USEC_PER_MSEC * mss);
	extra = bytes_per_ms * PCC_CWND_BURST_US / (USEC_PER_MSEC * mss);
	cwnd += pcc_max(extra, PCC_CWND_MIN_EXTRA);
	cwnd = pcc_max(cwnd, PCC_CWND_MIN);
	if (tp->snd_cwnd_clamp)
		cwnd = pcc_min(cwnd, tp->snd_cwnd_clamp);
	return cwnd;
}

/* Push the rate to the socket: pacing rate and cwnd. */
static void pcc_apply_rate(struct sock *sk, const struct pcc_state *s)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 pace = s->send_rate / BITS_PER_BYTE;

	if (sk->sk_max_pacing_rate)
		pace = pcc_min(pace, sk->sk_max_pacing_rate);
	sk->sk_pacing_rate = pace;
	/* for the larger of base and current rate: cwnd must not limit */
	tp->snd_cwnd = pcc_target_cwnd(tp, s, pcc_max(s->send_rate, s->rate));
}

#endif /* CCSWITCH_PCC_ACK_BPF_H */
