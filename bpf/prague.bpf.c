// SPDX-License-Identifier: GPL-2.0
/*
 * Prague: a scalable (DCTCP-family) congestion control as a BPF
 * tcp_congestion_ops (struct_ops), registered as "prague".
 *
 * L4S (RFC 9330/9331) needs senders whose reaction to ECN marks scales
 * with the marking: a DualPI2 router marks L4S packets at a shallow (~1 ms)
 * queue, often several times per RTT, and expects each mark to cost the
 * sender a little rather than half its window.  This is DCTCP's control law
 * (RFC 8257), which TCP Prague keeps:
 *
 *   alpha   EWMA of the fraction F of delivered segments that were CE-marked,
 *	     measured once per round trip (a round ends when snd_una passes
 *	     the snd_nxt recorded at its start):
 *		alpha <- (1 - g) * alpha + g * F,	g = 1/16
 *	     alpha starts at 1, so the first marks of a new or just-switched
 *	     flow halve it (safe while nothing is known).
 *   marks   on an ACK reporting new CE marks the stack enters CWR and calls
 *	     ssthresh() once; we return cwnd * (1 - alpha/2) and the stack's
 *	     proportional rate reduction (PRR) brings cwnd down to it over the
 *	     next round.  CWR lasts one round, so the reduction happens at most
 *	     once per RTT whatever the number of marks.
 *   growth  Reno: slow start below ssthresh, then +1 segment per RTT.
 *   loss    classic: ssthresh = cwnd / 2 on entering Recovery and on RTO
 *	     (a loss means the router is overloaded or not L4S at all).
 *
 * Feedback.  F must count marked segments, not "ACKs with ECE": with classic
 * RFC 3168 feedback the receiver repeats ECE until the sender's CWR, so one
 * mark looks like a whole window of marks.  Prague therefore asks for
 * Accurate ECN (RFC 9768) with TCP_CONG_NEEDS_ACCECN: requested whatever
 * net.ipv4.tcp_ecn says (which stops at 2 on this kernel, so the flag is
 * the only way); the peer accepts it only if its listener also runs an
 * algorithm with that flag (e.g. prague as that namespace's default).  The
 * ACE field counts CE-marked packets, and the stack folds it into
 * tp->delivered_ce.  If the peer only speaks RFC 3168 ECN, alpha is not
 * meaningful and every ECN reduction is a classic halving (like Reno with
 * ECN).  F is the fraction of segments (tp->delivered_ce / tp->delivered,
 * as in Linux's tcp_dctcp.c); for full-sized segments that is the fraction
 * of bytes.  The AccECN option's byte counters (delivered_ecn_bytes) are
 * not used: they only exist when the peer sends the option.
 *
 * ECN codepoint.  TCP_CONG_NEEDS_ECN makes every packet ECN-capable.  L4S
 * wants ECT(1); this kernel's flags can ask for ECT(1) only on the SYN
 * (TCP_CONG_ECT_1_NEGOTIATION); data segments always carry ECT(0) and a
 * struct_ops program may not write the socket's TOS.  So Prague's data is
 * classified as L4S by DSCP instead: init() sets IP_TOS = PRAGUE_DSCP << 2
 * with bpf_setsockopt (TCP keeps the two ECN bits for itself).  The DSCP
 * stays on the socket if the flow is later switched to another algorithm
 * (release() may not call setsockopt).  docs/l4s-kernel.md has the probes.
 *
 * No ECN at all.  A flow that negotiated no ECN (switched to Prague after
 * a non-ECN handshake, or a peer without ECN) gets no CE feedback, but the
 * kernel's re-initialisation still sets ECT(0) on its packets, so an AQM
 * would mark instead of drop and the marks would go unanswered.  init()
 * then hands the socket to PRAGUE_FALLBACK (reno: drops ECT again).  The
 * kernel refuses a second TCP_CONGESTION change inside one setsockopt, so
 * for a flow that is being *switched* this fails (-EBUSY) and the flow
 * runs Prague as Reno-on-loss; ccswitch's DataPlane refuses such switches.
 *
 * Not implemented (TCP Prague features beyond DCTCP): RTT independence
 * (additive increase scaled to a 25 ms reference RTT), paced chirping,
 * the virtual-RTT floor.  Pacing is the kernel's own (SK_PACING_NEEDED:
 * 2x cwnd/srtt in slow start, 1.2x after), which keeps bursts off the
 * 1 ms L4S step.
 *
 * Flags: TCP_CONG_NEEDS_ECN | TCP_CONG_NEEDS_ACCECN, plus
 * TCP_CONG_NON_RESTRICTED so that prague may be a network namespace's
 * default congestion control (the kernel refuses restricted BPF algorithms
 * there), which is how tools that set -C after connect() get ECN.
 *
 * State lives in icsk_ca_priv (zeroed by the kernel on every init).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ccswitch.h"
#include "prague.h"

char LICENSE[] SEC("license") = "GPL";

#define PRAGUE_ALPHA_SHIFT	20		/* alpha is Q20: 1 << 20 = 1.0 */
#define PRAGUE_ALPHA_ONE	(1ULL << PRAGUE_ALPHA_SHIFT)
#define PRAGUE_G_SHIFT		4		/* g = 1/16 */
#define PRAGUE_MIN_CWND		2U
#define PRAGUE_FALLBACK		"reno"
#ifndef PRAGUE_ECN_FLAGS	/* -D for the probes in docs/l4s-kernel.md */
#define PRAGUE_ECN_FLAGS	(TCP_CONG_NON_RESTRICTED | TCP_CONG_NEEDS_ECN | TCP_CONG_NEEDS_ACCECN)
#endif

#ifndef SOL_IP
#define SOL_IP 0
#endif
#ifndef IP_TOS
#define IP_TOS 1
#endif
#define TCP_CA_CWR_	2
#define TCP_CA_Recovery_ 3

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

struct prague {
	__u64 alpha;		/* Q20 EWMA of the CE fraction */
	__u32 next_seq;		/* snd_nxt when the current round began */
	__u32 old_delivered;	/* tp->delivered at the start of the round */
	__u32 old_delivered_ce;	/* tp->delivered_ce at the start of the round */
	__u32 loss_cwnd;	/* cwnd before the last reduction (for undo) */
	__u32 rounds;		/* rounds measured */
	__u32 ce_rounds;	/* rounds that saw at least one CE mark */
};
_Static_assert(sizeof(struct prague) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "struct prague must fit in icsk_ca_priv");

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct prague *prague_ca(const struct sock *sk)
{
	return (struct prague *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline __u32 max_u32(__u32 a, __u32 b) { return a > b ? a : b; }

static __always_inline bool before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}

static __always_inline bool accecn_feedback(const struct tcp_sock *tp)
{
	return tp->ecn_flags & TCP_ECN_MODE_ACCECN;
}

static __always_inline void prague_new_round(const struct tcp_sock *tp, struct prague *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

SEC("struct_ops/prague_init")
void BPF_PROG(prague_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct prague *ca = prague_ca(sk);
	int tos = PRAGUE_DSCP << 2;

	if (!(tp->ecn_flags & TCP_ECN_MODE_ANY)) {
		/* no ECN feedback on this connection: be a classic flow */
		if (!bpf_setsockopt(sk, SOL_TCP, TCP_CONGESTION, PRAGUE_FALLBACK,
				    sizeof(PRAGUE_FALLBACK)))
			return;
	}
	ca->alpha = PRAGUE_ALPHA_ONE;
	ca->loss_cwnd = 0;
	prague_new_round(tp, ca);
	if (sk->sk_pacing_status == SK_PACING_NONE)
		sk->sk_pacing_status = SK_PACING_NEEDED;
	bpf_setsockopt(sk, SOL_IP, IP_TOS, &tos, sizeof(tos));
}

/* Called once when the stack enters CWR (ECN) or loss recovery. */
SEC("struct_ops/prague_ssthresh")
__u32 BPF_PROG(prague_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct prague *ca = prague_ca(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u64 cut;

	ca->loss_cwnd = cwnd;
	if (!accecn_feedback(tp))
		return max_u32(cwnd >> 1, PRAGUE_MIN_CWND);
	cut = ((__u64)cwnd * ca->alpha) >> (PRAGUE_ALPHA_SHIFT + 1);
	return max_u32(cwnd - (__u32)cut, PRAGUE_MIN_CWND);
}

/* Per ACK: close the round and fold its CE fraction into alpha. */
SEC("struct_ops/prague_in_ack_event")
void BPF_PROG(prague_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct prague *ca = prague_ca(sk);
	__u32 delivered, delivered_ce;
	__u64 alpha;

	if (before(tp->snd_una, ca->next_seq))
		return;
	delivered = tp->delivered - ca->old_delivered;
	delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	alpha = ca->alpha - (ca->alpha >> PRAGUE_G_SHIFT);
	if (delivered_ce && delivered) {
		if (delivered_ce > delivered)
			delivered_ce = delivered;
		alpha += ((__u64)delivered_ce << (PRAGUE_ALPHA_SHIFT - PRAGUE_G_SHIFT)) / delivered;
		ca->ce_rounds++;
	}
	ca->alpha = alpha > PRAGUE_ALPHA_ONE ? PRAGUE_ALPHA_ONE : alpha;
	ca->rounds++;
	prague_new_round(tp, ca);
}

static __always_inline void prague_react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);

	prague_ca(sk)->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = max_u32(tp->snd_cwnd >> 1, PRAGUE_MIN_CWND);
}

SEC("struct_ops/prague_set_state")
void BPF_PROG(prague_set_state, struct sock *sk, __u8 new_state)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;

	/* ssthresh() ran just before with alpha; a loss is a classic halving */
	if (new_state == TCP_CA_Recovery_ &&
	    new_state != BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state))
		prague_react_to_loss(sk);
}

SEC("struct_ops/prague_cwnd_event")
void BPF_PROG(prague_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	/* RTO (tcp_enter_loss called ssthresh() with alpha just before) */
	if (ev == CA_EVENT_LOSS)
		prague_react_to_loss(sk);
}

SEC("struct_ops/prague_cong_avoid")
void BPF_PROG(prague_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops/prague_undo_cwnd")
__u32 BPF_PROG(prague_undo_cwnd, struct sock *sk)
{
	return max_u32(tcp_sk(sk)->snd_cwnd, prague_ca(sk)->loss_cwnd);
}

SEC(".struct_ops")
struct tcp_congestion_ops ccs_prague = {
	.init		= (void *)prague_init,
	.ssthresh	= (void *)prague_ssthresh,
	.in_ack_event	= (void *)prague_in_ack_event,
	.set_state	= (void *)prague_set_state,
	.cwnd_event	= (void *)prague_cwnd_event,
	.cong_avoid	= (void *)prague_cong_avoid,
	.undo_cwnd	= (void *)prague_undo_cwnd,
	.flags		= PRAGUE_ECN_FLAGS,
	.name		= PRAGUE_NAME,
};
