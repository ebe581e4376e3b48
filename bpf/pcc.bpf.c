// SPDX-License-Identifier: GPL-2.0
/*
 * PCC Vivace as a BPF tcp_congestion_ops (struct_ops), for Linux 6.10+.
 *
 * PCC Vivace (Dong et al., "PCC Vivace: Online-Learning Congestion Control",
 * NSDI 2018) is a rate-based congestion controller.  It does not react to
 * individual signals (one loss, one RTT sample) but runs small experiments:
 * it sends at a chosen rate for a "monitor interval" (MI), measures what
 * happened to the packets of that MI, condenses the outcome into a single
 * number, the utility, and moves the rate in the direction in which the
 * utility grows (online gradient ascent).
 *
 * Utility of an MI sent at rate x:
 *
 *	u(x) = x^0.9 - 900 * x * dRTT/dT - 11.35 * x * L
 *
 * x is the MI's sending rate in Mbit/s (1 Mbit = 10^6 bit), dRTT/dT the RTT
 * gradient over the MI (least-squares slope of the MI's RTT samples against
 * their send times, us per us, i.e. dimensionless) and L the fraction of the
 * MI's packets that were lost.  x^0.9 rewards throughput with diminishing
 * returns (this concavity is what makes competing senders converge to a
 * fair share), the second term punishes a growing queue, the third losses.
 *
 * Phases (pcc_state.phase):
 *
 *   STARTING  Like slow start: every MI doubles the rate as long as the
 *	       utility grows.  When an MI's utility is not larger than the
 *	       previous one's (or the MI saw the queue grow), the rate falls
 *	       back to the previous, better rate and PCC enters PROBING.  The
 *	       phase begins with a virtual previous MI at half the initial rate
 *	       with utility 0 (the utility of not sending), so an initial rate
 *	       that is already too high is halved at once instead of doubled.
 *
 *   PROBING   Four MIs in two pairs, one at r*(1+eps) and one at r*(1-eps)
 *	       per pair (eps = 5%), the order within each pair random, so that
 *	       periodic noise or a competing sender's probes cannot line up
 *	       with ours.  If both pairs agree which side is better, the
 *	       utility gradient
 *		   gamma = (u(r(1+eps)) - u(r(1-eps))) / (2 * eps * r)
 *	       (averaged over the pairs) gives the first step and PCC enters
 *	       MOVING.  If they disagree the result is noise: probe again at r.
 *
 *   MOVING    One MI per step, step size
 *		   delta_r = m(tau) * max(theta0 * |gamma|, 1% of r)
 *	       with theta0 = 1 Mbit/s per (utility per Mbit/s) and the
 *	       confidence amplifier m(tau) = 1 + tau (at most 16), tau = number
 *	       of steps already taken in this direction.  The step is capped by
 *	       the dynamic change boundary omega * r, omega = omega0 + k * delta
 *	       (omega0 = 5%, delta = 2.5%, at most 50%), k = number of
 *	       consecutive steps that hit the cap; k is reset by a step that
 *	       does not hit it and on every change of direction.  After each
 *	       step the new MI's utility is compared with the previous point's
 *	       (after probing: the base rate, utility interpolated from the
 *	       four probes).  While utility keeps growing in the direction of
 *	       movement, the gradient between the two points gives the next
 *	       step; otherwise the rate returns to the previous (better) point,
 *	       amplifier and boundary are reset, and PCC probes again.
 *
 * Matching MIs to ACKs.  struct_ops has no per-packet send hook, so MIs are
 * opened and closed from cong_control(), i.e. on ACK arrival: an MI covers
 * the send-time window [start_us, end_us) and is closed at the first ACK
 * after its planned length.  Every ACK carries rs->rtt_us, the RTT of the
 * most recently sent packet it (s)acked, whose send time therefore is
 * tcp_mstamp - rtt_us.  The ACK's newly delivered (rs->acked_sacked) and
 * newly lost (rs->losses) packets and its RTT sample are credited to the MI
 * whose window contains that send time (ACKs without a usable sample, e.g.
 * for retransmissions (Karn), go to the MI of the last timed ACK).  An MI is
 * complete once a packet sent after its end has been (s)acked.  In STARTING
 * and MOVING the next MI starts only when the previous one is complete (the
 * packets in between are sent at the old rate and not measured), so every
 * decision rests on the MI sent just before; the four probes of PROBING are
 * sent back to back and evaluated together.
 *
 * RTT samples and TSO bursts.  TCP hands a paced burst to the device as one
 * TSO skb: all its packets share one send time and their RTTs grow along the
 * burst by its own serialisation, not by queueing.  Only the first ACK of
 * each burst (the first sample with a new send time, not delayed-ACK, not a
 * retransmission) enters the regression; it sees the queue the burst met.
 * On paths with a min RTT below 512 us (tcp_tso_rtt_log, e.g. veth) the
 * kernel builds bursts of up to 64 KB, limited only by cwnd - inflight,
 * which is why cwnd is bounded by what the rate needs (below): at such
 * RTTs 2 * rate * srtt is small next to the 1 ms of data added to it.
 *
 * MI length: max(srtt, 10 ms, 10 packets, ~8 RTT samples), at most 1 s,
 * the samples counted in bursts of the size observed in recent MIs.  The
 * paper uses about one RTT.  On the veth test bed the RTT is 50-100 us plus
 * queueing; an MI of one such RTT holds a handful of packets and its
 * regression would see only timer and scheduling jitter (tens to hundreds
 * of us, which at x = 50 would swing u by thousands).  10 ms holds ~40
 * packets at 50 Mbit/s; a 5% rate error then moves the queue by ~0.5 ms,
 * well above the jitter, and a four-MI probe completes in ~50 ms.
 *
 * Noise filtering of the RTT gradient:
 *  - negative gradients count as 0 (as in the authors' PCC-Uspace code):
 *    draining a queue is not rewarded.  Rewarding it (the bare formula)
 *    made every overshoot end in a dive far below capacity, costing ~10%
 *    of throughput on the test bed;
 *  - a slope counts only if the regression is significant, t^2 =
 *    (n-2) * SSreg / SSres >= 4: a delay spike at the end of an MI
 *    (scheduling on a busy host) gives a slope but a poor fit;
 *  - a tolerance of 0.03 is subtracted (soft threshold), so queue growth
 *    slower than 3% of the rate is ignored and faster growth is penalised
 *    continuously rather than all-or-nothing.
 *
 * Congestion guards (implementation safety nets, not in the paper):
 *  - an MI whose queue grew (or, lacking RTT samples, lost >= 10%) or that
 *    was sent well below its target rate (< 85%: sender starved of CPU or
 *    data, or held back by cwnd/TSQ) may never make the rate go up;
 *  - if all four probes saw the queue grow, even r(1-eps) is too fast:
 *    PCC steps down whatever the (then noise-dominated) pairs say;
 *  - if the sent/target ratio, averaged over ~4 MIs, falls below 92%, the
 *    target is unreachable (e.g. local qdisc backpressure keeps the queue
 *    flat, so the gradient shows nothing): the rate is set to what was
 *    actually sent and PCC probes again.
 *
 * Fixed point (no floating point in BPF):
 *   rates        u64 bit/s for pacing; Mbit/s as Q16 (x * 2^16) for utility
 *   utility      s64 Q16
 *   x^0.9        exp2(0.9 * log2(x)): log2 by normalise-and-square (16
 *		  branch-free iterations), 2^f for f in [0, 1) by a degree-7
 *		  Taylor polynomial in Q30; relative error < 1e-4 for x >= 1
 *   gradients    RTT gradient Q16 (dimensionless), utility gradient Q16
 *		  utility per Mbit/s
 *   fractions    per mille (eps, omega, steps) or Q16 (loss, ratios)
 *   regression   sums of t, t^2, y, y^2, t*y with t = send time - MI start
 *		  and y = RTT - first RTT of the MI, both clamped to 2^20 us,
 *		  at most 1024 samples: every sum and product fits in s64
 * Signed divisions are done on magnitudes (clang 14 cannot emit BPF sdiv).
 *
 * Pacing and cwnd.  The rate is enforced with sk->sk_pacing_rate; the
 * socket is switched to SK_PACING_NEEDED so TCP paces internally without
 * the fq qdisc.  cwnd = 2 * rate * srtt + max(1 ms of data, 4 packets),
 * i.e. twice what the rate keeps in flight (as the authors' PCC-Kernel
 * does) plus room for ACK jitter and delayed ACKs: it never limits the
 * paced rate, yet keeps TSO bursts short.  With only rate * srtt, RTT
 * samples above srtt (WiFi aggregation: 3 ms srtt, 8 ms spikes on paper
 * 002's emulated link) left the sender cwnd-limited at ~88% of its target,
 * the "unreachable" guard below then set the rate to what was sent, and
 * the next MIs fell short again: a spiral down to 40-50% of the link.
 *
 * State.  icsk_ca_priv (104 bytes) cannot hold four MIs with regression
 * sums, so everything lives in the socket-local storage map ccs_pcc_state,
 * created in init() and deleted in release().
 *
 * Initial rate.  With a valid seed in ccs_pcc_seed ("full" inheritance, see
 * pcc.h) PCC starts in PROBING at seed->rate_bps with seed->min_rtt_us as
 * its RTT baseline (used until srtt is known), and deletes the seed.
 * Otherwise it starts in STARTING at max(cwnd * mss / max(srtt, 10 ms), last
 * delivery-rate sample): on a live connection switched from another CCA
 * that is what the flow already achieves, so it does not collapse; on a
 * fresh connection (whose only delivery sample is the SYN, ignored) it is
 * one initial window per minimum MI, as the starting phase doubles per MI,
 * not per RTT (a 60 us handshake RTT would turn IW10 into 2 Gbit/s).
 *
 * Loss, RTO, idle, app-limited.  Losses act only through the utility:
 * ssthresh() reduces nothing and undo_cwnd() restores the rate-based cwnd.
 * On an RTO (TCP_CA_Loss) the MIs in flight are meaningless: they are
 * dropped, the rate is halved as a safety net (not in the paper) and
 * measurement pauses until the loss state ends, then PCC probes.  An MI
 * with mostly app-limited samples or fewer than 4 packets decides nothing
 * (the rate is kept), and a restart after an idle period discards the MIs
 * in flight.
 *
 * Other simplifications: the utility uses the MI's target rate rather than
 * the measured sending rate (pacing makes them equal, and MIs that fall
 * short are guarded above); losses detected on an ACK are credited to the
 * MI of that ACK's sample; no latency-trend tolerance beyond the per-MI
 * filter; decisions are not pipelined.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ccswitch.h"
#include "pcc.h"

#ifndef PCC_NAME	/* -D for renamed test builds (tests/test_struct_ops_cleanup.py) */
#define PCC_NAME "pcc"
#endif

char _license[] SEC("license") = "GPL";

/*
 * The implementation, one job per file, each including the ones it builds on
 * (this order is also the order of the code in the object):
 */
#include "pcc_defs.bpf.h"	/* tunables, state, maps, integer helpers */
#include "pcc_utility.bpf.h"	/* fixed-point x^0.9, the utility function */
#include "pcc_mi.bpf.h"		/* MI ring, RTT regression, per-MI verdicts */
#include "pcc_rate.bpf.h"	/* gradient ascent: the decision per phase */
#include "pcc_ack.bpf.h"	/* per ACK: credit MIs, open the next, pace */
#include "pcc_init.bpf.h"	/* initial state, the inheritance seed */

/* ---- tcp_congestion_ops ------------------------------------------------------ */

SEC("struct_ops/pcc_init")
void BPF_PROG(pcc_init, struct sock *sk)
{
	struct pcc_state *s;

	if (sk->sk_pacing_status == SK_PACING_NONE)
		sk->sk_pacing_status = SK_PACING_NEEDED;
	s = bpf_sk_storage_get(&ccs_pcc_state, sk, 0,
			       BPF_SK_STORAGE_GET_F_CREATE);
	if (!s)
		return;		/* cong_control() tries again */
	pcc_state_init(sk, s);
	pcc_apply_rate(sk, s);
}

SEC("struct_ops/pcc_release")
void BPF_PROG(pcc_release, struct sock *sk)
{
	bpf_sk_storage_delete(&ccs_pcc_state, sk);
}

SEC("struct_ops/pcc_cong_control")
void BPF_PROG(pcc_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 now = tp->tcp_mstamp;
	struct pcc_state *s;

	s = pcc_get_state(sk, true);
	if (!s)
		return;
	if (sk->sk_pacing_status == SK_PACING_NONE)
		sk->sk_pacing_status = SK_PACING_NEEDED;
	s->last_ack_us = now;
	s->mss = pcc_mss(tp);
	pcc_account_ack(s, rs, now);
	pcc_advance_send(s, tp, now);
	pcc_apply_rate(sk, s);
}

/* PCC reacts to loss through its utility only: no multiplicative decrease. */
SEC("struct_ops/pcc_ssthresh")
__u32 BPF_PROG(pcc_ssthresh, struct sock *sk)
{
	return tcp_sk(sk)->snd_ssthresh;
}

/* After an undone (spurious) loss episode: back to the rate-based cwnd. */
SEC("struct_ops/pcc_undo_cwnd")
__u32 BPF_PROG(pcc_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct pcc_state *s = pcc_get_state(sk, false);

	if (!s)
		return pcc_max(tp->snd_cwnd, tp->prior_cwnd);
	return pcc_target_cwnd(tp, s, pcc_max(s->send_rate, s->rate));
}

SEC("struct_ops/pcc_set_state")
void BPF_PROG(pcc_set_state, struct sock *sk, __u8 new_state)
{
	struct pcc_state *s = pcc_get_state(sk, false);

	if (!s)
		return;
	if (new_state == TCP_CA_Loss) {
		/* RTO: the MIs in flight are meaningless; halve, then wait */
		if (!s->paused) {
			s->rate = pcc_clamp_rate(s->rate / 2);
			s->send_rate = s->rate;
		}
		s->paused = 1;
		pcc_mi_forget_all(s);
		pcc_dbg("pcc rto id=%u rate=%llu", s->port, s->rate);
	} else if (s->paused) {
		s->paused = 0;
		pcc_enter_probing(s);
	}
}

SEC("struct_ops/pcc_cwnd_event")
void BPF_PROG(pcc_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	struct pcc_state *s;

	if (event != CA_EVENT_TX_START)
		return;
	/*
	 * Sending resumes with nothing in flight.  With pacing on a
	 * microsecond-RTT path that happens between any two bursts, so only
	 * an idle period (no ACK for longer than the MI floor) invalidates
	 * the MIs in flight.
	 */
	s = pcc_get_state(sk, false);
	if (!s || s->paused)
		return;
	if (bpf_ktime_get_ns() / 1000 - s->last_ack_us < PCC_MI_MIN_US)
		return;
	if (s->phase == PCC_STARTING)
		pcc_mi_forget_all(s);
	else
		pcc_enter_probing(s);
}

SEC(".struct_ops")
struct tcp_congestion_ops ccs_pcc = {
	.init		= (void *)pcc_init,
	.release	= (void *)pcc_release,
	.cong_control	= (void *)pcc_cong_control,
	.ssthresh	= (void *)pcc_ssthresh,
	.undo_cwnd	= (void *)pcc_undo_cwnd,
	.set_state	= (void *)pcc_set_state,
	.cwnd_event	= (void *)pcc_cwnd_event,
	.name		= PCC_NAME,
};
