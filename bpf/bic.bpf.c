// SPDX-License-Identifier: GPL-2.0
/*
 * BIC: Binary Increase Congestion control (Xu, Harfoush, Rhee, INFOCOM 2004)
 * as a BPF tcp_congestion_ops (struct_ops), registered as "bic".
 *
 * Why it is here.  Paper 001 (LFQ) runs its flows with NewReno or BIC, and
 * the kernels this project runs on are built without tcp_bic.  CUBIC, BIC's
 * successor, is not a faithful stand-in for a buffer-sizing experiment:
 * Linux's CUBIC leaves slow start by HyStart as soon as the RTT grows, before
 * the queue overflows, where BIC (like NewReno) doubles until a loss.  So a
 * static buffer fills to its limit under BIC and far less under CUBIC
 * (docs/network/lfq.md).  Only the paper-001 reproduction uses it
 * (testbed/lfq_reproduction.py, sender "paper"); the daemon never picks it.
 *
 * The algorithm.  After a loss at window W_max the window is cut to
 * beta * W_max (beta = 0.8).  In congestion avoidance BIC searches for the
 * window of the last loss by binary search, then probes beyond it:
 *
 *   below W_max  the step per RTT is half the distance to W_max
 *		  (dist = (W_max - cwnd) / B, B = 4 "binary search" divisions
 *		  of the gap), at most S_max = 16 segments (additive increase
 *		  while far away) and, within one segment, a small step
 *		  (cwnd / smooth_part per ACK: the window lingers near W_max);
 *   above W_max  "max probing", the mirror image: slow just above W_max,
 *		  growing to S_max segments per RTT once B - 1 steps past it.
 *   small windows  at or below low_window = 14 segments BIC is Reno
 *		  (+1 segment per RTT, halve on loss): fair to Reno where
 *		  Reno can fill the path.
 *   fast convergence  if a loss comes before the window regained the
 *		  previous W_max, the new W_max is set below the window at the
 *		  loss ((1 + beta) / 2), giving bandwidth back to new flows.
 *   slow start   standard (doubling per RTT until ssthresh or a loss), no
 *		  HyStart.  After an RTO the search state is forgotten, and
 *		  the step is capped at 1 segment per 20 ACKed while no W_max
 *		  is known.
 *
 * The step is applied as "one segment per cnt segments ACKed"
 * (tcp_cong_avoid_ai), so cnt = cwnd / step.  The constants are the paper's
 * and Linux tcp_bic.c's module defaults.  Linux's tcp_bic also divides cnt by
 * an estimate of the segments per ACK; since Linux 3.18 the increase already
 * counts ACKed segments, not ACKs, so that correction is left out here.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ccswitch.h"
#include "bic.h"

char LICENSE[] SEC("license") = "GPL";

#define BIC_BETA_SCALE		1024
#define BIC_BETA		819	/* 0.8 in BIC_BETA_SCALE: the window kept after a loss */
#define BIC_B			4	/* binary-search divisions of the gap to W_max */
#define BIC_MAX_INCREMENT	16	/* S_max: the largest step, segments per RTT */
#define BIC_LOW_WINDOW		14	/* at or below: Reno */
#define BIC_SMOOTH_PART		20	/* near W_max: 1 segment per (cwnd * 20 / B) ACKed */
#define BIC_FIRST_PROBE_CNT	20	/* while no W_max is known: at most 1 segment per 20 ACKed */
#define TCP_CA_Loss_		4

extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

struct bic {
	__u32 cnt;		/* segments ACKed per one-segment increase */
	__u32 last_max_cwnd;	/* W_max: the window of the last loss (0: none known) */
};
_Static_assert(sizeof(struct bic) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "struct bic must fit in icsk_ca_priv");

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct bic *bic_ca(const struct sock *sk)
{
	return (struct bic *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline void bic_forget(struct bic *ca)
{
	ca->cnt = 0;
	ca->last_max_cwnd = 0;
}

/* Grow only while the window limits the sender (include/net/tcp.h's rule). */
static __always_inline bool bic_cwnd_limited(const struct tcp_sock *tp)
{
	if (tp->snd_cwnd < tp->snd_ssthresh)
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited);
}

/* Segments ACKed per one-segment increase below W_max: the binary search. */
static __always_inline __u32 bic_cnt_searching(__u32 cwnd, __u32 w_max)
{
	__u32 dist = (w_max - cwnd) / BIC_B;

	if (dist > BIC_MAX_INCREMENT)
		return cwnd / BIC_MAX_INCREMENT;	/* far below: additive increase */
	if (dist <= 1)
		return cwnd * BIC_SMOOTH_PART / BIC_B;	/* at W_max: linger */
	return cwnd / dist;				/* halve the gap per RTT */
}

/* Segments ACKed per one-segment increase at or above W_max: max probing. */
static __always_inline __u32 bic_cnt_probing(__u32 cwnd, __u32 w_max)
{
	if (cwnd < w_max + BIC_B)
		return cwnd * BIC_SMOOTH_PART / BIC_B;	/* just past it: slowly */
	if (cwnd < w_max + BIC_MAX_INCREMENT * (BIC_B - 1))
		return cwnd * (BIC_B - 1) / (cwnd - w_max);
	return cwnd / BIC_MAX_INCREMENT;		/* well past it: S_max per RTT */
}

static __always_inline __u32 bic_cnt(const struct bic *ca, __u32 cwnd)
{
	__u32 cnt;

	if (cwnd <= BIC_LOW_WINDOW)
		return cwnd;				/* Reno */
	cnt = cwnd < ca->last_max_cwnd ? bic_cnt_searching(cwnd, ca->last_max_cwnd)
				       : bic_cnt_probing(cwnd, ca->last_max_cwnd);
	if (ca->last_max_cwnd == 0 && cnt > BIC_FIRST_PROBE_CNT)
		cnt = BIC_FIRST_PROBE_CNT;
	return cnt ? cnt : 1;
}

SEC("struct_ops/bic_init")
void BPF_PROG(bic_init, struct sock *sk)
{
	bic_forget(bic_ca(sk));
}

SEC("struct_ops/bic_cong_avoid")
void BPF_PROG(bic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bic *ca = bic_ca(sk);

	if (!bic_cwnd_limited(tp))
		return;
	if (tp->snd_cwnd < tp->snd_ssthresh) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	ca->cnt = bic_cnt(ca, tp->snd_cwnd);
	tcp_cong_avoid_ai(tp, ca->cnt, acked);
}

SEC("struct_ops/bic_ssthresh")
__u32 BPF_PROG(bic_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bic *ca = bic_ca(sk);
	__u32 cwnd = tp->snd_cwnd;

	/* fast convergence: a loss below the last W_max sets the next one lower */
	if (cwnd < ca->last_max_cwnd)
		ca->last_max_cwnd = cwnd * (BIC_BETA_SCALE + BIC_BETA) / (2 * BIC_BETA_SCALE);
	else
		ca->last_max_cwnd = cwnd;
	if (cwnd <= BIC_LOW_WINDOW)
		return cwnd / 2 > 2 ? cwnd / 2 : 2;
	cwnd = cwnd * BIC_BETA / BIC_BETA_SCALE;
	return cwnd > 2 ? cwnd : 2;
}

SEC("struct_ops/bic_set_state")
void BPF_PROG(bic_set_state, struct sock *sk, __u8 new_state)
{
	if (new_state == TCP_CA_Loss_)	/* RTO: start the search afresh */
		bic_forget(bic_ca(sk));
}

SEC("struct_ops/bic_undo_cwnd")
__u32 BPF_PROG(bic_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops ccs_bic = {
	.init		= (void *)bic_init,
	.ssthresh	= (void *)bic_ssthresh,
	.cong_avoid	= (void *)bic_cong_avoid,
	.set_state	= (void *)bic_set_state,
	.undo_cwnd	= (void *)bic_undo_cwnd,
	.flags		= TCP_CONG_NON_RESTRICTED,
	.name		= BIC_NAME,
};
