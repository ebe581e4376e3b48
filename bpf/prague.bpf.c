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
 *	     once per RTT whatever the number of marks.  The fraction of a
 *	     segment in cwnd * alpha/2 is carried to the next reduction (TCP
 *	     Prague's unbiased arithmetic): Linux's DCTCP truncates it, which
 *	     cuts nothing at all while cwnd * alpha < 2 (17 segments at 9 %
 *	     marks, Prague's state in the 1-1 phase of docs/l4s.md's runs
 *	     before this was carried: most of its "reductions" were 0).
 *   growth  Reno: slow start below ssthresh, then +1 segment per RTT
 *	     (scaled below the reference RTT: "RTT independence" below).
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
 * RTT independence (TCP Prague's "rate" RTT scaling; tunable, default on).
 * DCTCP's law gives a window W = 2/p for a CE-marking probability p, so
 * a rate r = W/R = 2/(p R): a flow at a short RTT R takes more than its
 * share from flows at longer RTTs, and DualPI2's coupling (p_L = k p',
 * p_C = p'^2, RFC 9332), which equalises *windows* with Reno at k = 2,
 * gives the L4S flow RTT_C / RTT_L / 1.22 times the classic rate, ~2-3x at
 * a 5 ms base RTT (the C flow's RTT includes the 15 ms C queue; measured
 * 1.9:1 against CUBIC before this, 1:1.3 with it: docs/l4s.md, "Prague
 * fidelity").  TCP
 * Prague (draft-briscoe-iccrg-prague-congestion-control, "reduced RTT
 * dependence"; the L4S team's tcp_prague.c, RTT_CONTROL_RATE with
 * prague_rtt_target = 25 ms) makes a flow whose RTT R is below a reference
 * RTT T behave, in rate, like a flow at RTT T:
 *
 *   additive increase  (R/T)^2 segment per round instead of 1, i.e.
 *		(R/T)^2 / cwnd per newly delivered segment.  The rate cwnd/R
 *		then grows by 1/T^2 per unit time, as a flow at RTT T grows.
 *		Only segments that were not CE-marked count (Prague's AI
 *		"proportional to the non-marked packets"), and the increase
 *		continues while the stack is in CWR: on an L4S path a flow is
 *		marked nearly every round, and DCTCP's "no increase in the
 *		round after a mark" would leave it with almost none.  In CWR the
 *		increase goes to ssthresh (the window the stack's PRR is bringing
 *		cwnd to, and sets cwnd to when CWR ends), in Open to cwnd.
 *   reduction	at most one ECN reduction per T (marks inside T of the last
 *		reduction enter CWR without a cut), and
 *   alpha	updated once per max(R, T), over all segments delivered in it,
 *		so alpha is still the marked fraction and the reduction per T
 *		is cwnd alpha/2.
 *
 * Per unit time the window then gains (1-p) R/T^2 and loses W p/(2T), so
 * W = 2 (1-p) R / (p T) and r = 2 (1-p) / (p T) whatever R (< T): the
 * "r = 1/p - 1" law of tcp_prague.c, scaled to T.  A flow at R >= T is
 * unchanged (DCTCP).  Scaling starts prague_cfg.rtt_transition (4) rounds
 * after slow start (short flows keep their short-RTT agility) and stops in
 * loss recovery (no increase there; a loss still halves the window).
 * Modes (prague_cfg.rtt_scaling, as tcp_prague's prague_rtt_scaling):
 * 0 none (DCTCP's RTT-dependent law as before; the reductions' carried
 * fraction applies in every mode), 1 rate (default;
 * T = rtt_target_us, default 25 ms), 3 additive (T' = T + R: behave as a
 * flow with T of extra RTT); 2 (tcp_prague's "scalable") is not implemented
 * and behaves as 1.  The tunables live in .data.tunables, read on every ACK:
 * ccswitch.bpf.prague sets them when it registers prague (and can change
 * them on a running registration).
 *
 * Reductions made without us.  On this kernel (6.18) the stack now and then
 * enters CWR (or loss recovery) without running ssthresh() or set_state():
 * snd_ssthresh then holds the low 32 bits of a kernel text address
 * (0x81104010 in every case seen), above TCP_INFINITE_SSTHRESH, and the
 * stack's PRR turns it into a window of ~10^9 segments on the same ACK: the
 * whole send buffer leaves at once and the queue behind it overflows.  Seen
 * in 1 of 300 to 1 of 1500 CWR entries of a sub-ms RTT flow at 5 % marks,
 * always in a softirq run on a context switch (docs/l4s-kernel.md has the
 * trace).  The BPF programs cannot stop the burst of that ACK, only what
 * follows: every hook that runs per ACK first checks for an ssthresh no
 * congestion control could have set, and redoes the reduction the stack
 * missed (prague_repair_foreign_reduction; counted in prague_stats.repairs).
 *
 * Not implemented (TCP Prague features beyond the above): paced chirping,
 * the fractional window below 2 segments and its pacing, the +-3 % pacing
 * variation per RTT.  Pacing is the kernel's own (SK_PACING_NEEDED: 2x
 * cwnd/srtt in slow start, 1.2x after), which keeps bursts off the 1 ms
 * L4S step.
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
#define PRAGUE_AI_SHIFT		16		/* additive increase in Q16 segments */
#define PRAGUE_AI_ONE		(1U << PRAGUE_AI_SHIFT)
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
#define TCP_CA_Open_	0
#define TCP_CA_Disorder_ 1
#define TCP_CA_CWR_	2
#define TCP_CA_Recovery_ 3
#define TCP_INFINITE_SSTHRESH_	0x7fffffffU	/* no legitimate ssthresh is above it */
#define PRAGUE_SANE_CWND	(1U << 20)	/* segments; a window above it was not made by anyone */

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

/* Reductions the stack made without us, repaired (header; user space reads it) */
struct prague_stats prague_stats SEC(".data.stats");

/* RTT independence tunables (prague.h); user space may rewrite them at any time */
struct prague_tunables prague_cfg SEC(".data.tunables") = {
	.rtt_scaling	= PRAGUE_RTT_SCALING_RATE,
	.rtt_target_us	= PRAGUE_RTT_TARGET_US,
	.rtt_transition	= PRAGUE_RTT_TRANSITION,
};

struct prague {
	__u64 alpha;		/* Q20 EWMA of the CE fraction */
	__u64 alpha_stamp;	/* tp->tcp_mstamp of the last alpha update */
	__u64 cut_stamp;	/* tp->tcp_mstamp of the last ECN reduction */
	__u32 next_seq;		/* snd_nxt when the current round began */
	__u32 old_delivered;	/* tp->delivered at the start of the round */
	__u32 old_delivered_ce;	/* tp->delivered_ce at the start of the round */
	__u32 loss_cwnd;	/* cwnd before the last reduction (for undo) */
	__u32 rounds;		/* rounds measured */
	__u32 ce_rounds;	/* rounds that saw at least one CE mark */
	__u32 ca_rounds;	/* alpha updates outside slow start (RTT scaling starts after a few) */
	__u32 ack_delivered;	/* tp->delivered at the previous ACK */
	__u32 ack_delivered_ce;	/* tp->delivered_ce at the previous ACK */
	__u32 ai_frac;		/* additive increase not yet applied, Q16 segments */
	__u32 cut_frac;		/* reduction not yet applied, Q20 segments */
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

static __always_inline __u8 prague_ca_state(const struct sock *sk)
{
	const struct inet_connection_sock *icsk = (const struct inet_connection_sock *)sk;

	return BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
}

/* Slow start as the stack means it: cwnd below ssthresh outside a reduction
 * (in CWR the stack's PRR keeps cwnd near or below ssthresh on purpose). */
static __always_inline bool prague_in_slow_start(const struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	return tp->snd_cwnd < tp->snd_ssthresh && prague_ca_state(sk) != TCP_CA_CWR_;
}

static __always_inline __u32 prague_srtt_us(const struct tcp_sock *tp)
{
	return tp->srtt_us >> 3;
}

/* The reference RTT T this flow scales to (0: no scaling). */
static __always_inline __u32 prague_target_us(const struct tcp_sock *tp)
{
	__u32 mode = prague_cfg.rtt_scaling, target = prague_cfg.rtt_target_us;

	if (mode == PRAGUE_RTT_SCALING_NONE || !target)
		return 0;
	if (mode == PRAGUE_RTT_SCALING_ADDITIVE)
		return target + prague_srtt_us(tp);
	return target;
}

/* RTT independent now: scaling on, out of slow start for a few rounds, R < T. */
static __always_inline bool prague_rtt_indep(const struct sock *sk, const struct prague *ca)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	__u32 target = prague_target_us(tp), srtt = prague_srtt_us(tp);

	return target && srtt && srtt < target && srtt <= PRAGUE_MAX_SCALED_RTT_US &&
	       ca->ca_rounds >= prague_cfg.rtt_transition && !prague_in_slow_start(sk);
}

/* Whether at least T has passed since `stamp` (always true when not scaling). */
static __always_inline bool prague_target_elapsed(const struct sock *sk, const struct prague *ca, __u64 stamp)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	if (!prague_rtt_indep(sk, ca))
		return true;
	return tp->tcp_mstamp - stamp >= prague_target_us(tp);
}

/*
 * RTT-independent additive increase for `segs` newly delivered segments that
 * were not CE-marked: (R/T)^2 / cwnd each, accumulated in Q16.  In Open (or
 * Disorder) it raises cwnd; in CWR it raises ssthresh, the window PRR is
 * bringing cwnd to and that cwnd takes when CWR ends.  Nothing in loss
 * recovery, nor when the flow is not using its window.
 */
static __always_inline void prague_scaled_ai(struct sock *sk, struct prague *ca, __u32 segs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 srtt = prague_srtt_us(tp), target = prague_target_us(tp), cwnd = tp->snd_cwnd, n;
	__u8 state = prague_ca_state(sk);
	__u64 scale, inc;

	if (!segs || !cwnd || !target || state > TCP_CA_CWR_ ||
	    !BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited))
		return;
	scale = ((__u64)srtt * srtt << PRAGUE_AI_SHIFT) / ((__u64)target * target);
	inc = (__u64)segs * scale / cwnd + ca->ai_frac;
	if (inc > ((__u64)64 << PRAGUE_AI_SHIFT))
		inc = (__u64)64 << PRAGUE_AI_SHIFT;
	ca->ai_frac = (__u32)inc & (PRAGUE_AI_ONE - 1);
	n = (__u32)(inc >> PRAGUE_AI_SHIFT);
	if (!n)
		return;
	if (state == TCP_CA_CWR_) {
		tp->snd_ssthresh = tp->snd_ssthresh + n;
	} else {
		cwnd += n;
		tp->snd_cwnd = cwnd < tp->snd_cwnd_clamp ? cwnd : tp->snd_cwnd_clamp;
	}
}

/*
 * The stack entered a reduction without calling ssthresh() (header): its
 * snd_ssthresh is above TCP_INFINITE_SSTHRESH, or the window is beyond any a
 * flow could have grown.  Redo what ssthresh() would have returned from the
 * window the reduction started at (prior_cwnd): the ECN cut in CWR, a
 * halving in loss recovery; and bring the window down to it (in CWR the
 * stack's PRR goes on from there, in Open cwnd <= ssthresh as usual).
 */
static __always_inline void prague_repair_foreign_reduction(struct sock *sk, struct prague *ca)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 from = tp->prior_cwnd, ssthresh;

	if (tp->snd_ssthresh <= TCP_INFINITE_SSTHRESH_ && tp->snd_cwnd <= PRAGUE_SANE_CWND)
		return;
	__sync_fetch_and_add(&prague_stats.repairs, 1);
	if (!from || from > PRAGUE_SANE_CWND)
		from = ca->loss_cwnd && ca->loss_cwnd <= PRAGUE_SANE_CWND ? ca->loss_cwnd : PRAGUE_MIN_CWND;
	if (prague_ca_state(sk) == TCP_CA_CWR_ && accecn_feedback(tp))
		ssthresh = from - (__u32)(((__u64)from * ca->alpha) >> (PRAGUE_ALPHA_SHIFT + 1));
	else
		ssthresh = from >> 1;
	ssthresh = max_u32(ssthresh, PRAGUE_MIN_CWND);
	if (tp->snd_ssthresh > TCP_INFINITE_SSTHRESH_)
		tp->snd_ssthresh = ssthresh;
	if (tp->snd_cwnd > tp->snd_ssthresh)
		tp->snd_cwnd = tp->snd_ssthresh;
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
	ca->alpha_stamp = tp->tcp_mstamp;
	ca->ack_delivered = tp->delivered;
	ca->ack_delivered_ce = tp->delivered_ce;
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

	if (!accecn_feedback(tp)) {
		ca->loss_cwnd = cwnd;
		return max_u32(cwnd >> 1, PRAGUE_MIN_CWND);
	}
	/* RTT independence: at most one reduction per reference RTT; marks
	 * inside it enter CWR for a round without a cut (a loss is halved in
	 * set_state/cwnd_event whatever this returns) */
	if (!prague_target_elapsed(sk, ca, ca->cut_stamp))
		return max_u32(cwnd, PRAGUE_MIN_CWND);
	ca->loss_cwnd = cwnd;
	ca->cut_stamp = tp->tcp_mstamp;
	/* cwnd alpha / 2, with the fraction of a segment carried to the next
	 * reduction: truncating it (as Linux's DCTCP does) cuts nothing at all
	 * while cwnd alpha < 2, e.g. 17 segments at 10 % marks */
	cut = (((__u64)cwnd * ca->alpha) >> 1) + ca->cut_frac;
	ca->cut_frac = (__u32)(cut & (PRAGUE_ALPHA_ONE - 1));
	cut >>= PRAGUE_ALPHA_SHIFT;
	return max_u32(cwnd - (__u32)cut, PRAGUE_MIN_CWND);
}

/* Per ACK: the RTT-independent additive increase; at the end of a round
 * (of at least T when RTT-independent) fold its CE fraction into alpha. */
SEC("struct_ops/prague_in_ack_event")
void BPF_PROG(prague_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct prague *ca = prague_ca(sk);
	__u32 delivered, delivered_ce;
	__u64 alpha;

	prague_repair_foreign_reduction(sk, ca);
	delivered = tp->delivered - ca->ack_delivered;
	delivered_ce = tp->delivered_ce - ca->ack_delivered_ce;
	ca->ack_delivered = tp->delivered;
	ca->ack_delivered_ce = tp->delivered_ce;
	if (prague_rtt_indep(sk, ca) && delivered > delivered_ce)
		prague_scaled_ai(sk, ca, delivered - delivered_ce);

	if (before(tp->snd_una, ca->next_seq) || !prague_target_elapsed(sk, ca, ca->alpha_stamp))
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
	ca->alpha_stamp = tp->tcp_mstamp;
	ca->rounds++;
	if (!prague_in_slow_start(sk) && ca->ca_rounds < 0xffff)
		ca->ca_rounds++;
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
	prague_repair_foreign_reduction(sk, prague_ca(sk));
	/* RTO (tcp_enter_loss called ssthresh() with alpha just before) */
	if (ev == CA_EVENT_LOSS)
		prague_react_to_loss(sk);
}

SEC("struct_ops/prague_cong_avoid")
void BPF_PROG(prague_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	/* RTT-independent: the increase is per ACK in in_ack_event */
	if (prague_rtt_indep(sk, prague_ca(sk)))
		return;
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
