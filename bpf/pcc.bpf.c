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

/* ---- Constants (all tunables in one place) ------------------------------ */

#define USEC_PER_SEC		1000000ULL
#define USEC_PER_MSEC		1000ULL
#define BITS_PER_BYTE		8ULL

#define PCC_FP_SHIFT		16		/* Q16 fixed point */
#define PCC_FP_ONE		(1LL << PCC_FP_SHIFT)
#define PCC_PERMILLE		1000ULL

/* Utility u = x^0.9 - 900 * x * dRTT/dT - 11.35 * x * L */
#define PCC_EXPONENT_Q16	58982		/* 0.9 */
#define PCC_LAT_COEF		900		/* RTT-gradient coefficient */
#define PCC_LOSS_COEF_X100	1135		/* loss coefficient 11.35, x100 */

/* Rate control */
#define PCC_EPS_PERMILLE	50		/* probing step eps = 5% */
#define PCC_THETA0_X1000	1000		/* theta0 = 1 Mbit/s per utility/(Mbit/s) */
#define PCC_AMP_MAX		16		/* cap of the confidence amplifier */
#define PCC_OMEGA0_PERMILLE	50		/* change boundary omega0 = 5% */
#define PCC_OMEGA_DELTA_PERMILLE 25		/* omega grows by 2.5% per hit */
#define PCC_OMEGA_MAX_PERMILLE	500		/* never change more than 50% */
#define PCC_MIN_STEP_PERMILLE	10		/* smallest step: 1% of the rate */
#define PCC_RATE_MIN_BPS	200000ULL		/* 200 kbit/s */
#define PCC_RATE_MAX_BPS	100000000000ULL		/* 100 Gbit/s */

/* Monitor intervals */
#define PCC_MI_SLOTS		4		/* MI ring size, a power of 2 */
#define PCC_MI_MASK		(PCC_MI_SLOTS - 1)
#define PCC_PROBES		4		/* two pairs of probes */
#define PCC_MI_MIN_US		10000ULL	/* MI floor, see header comment */
#define PCC_MI_MAX_US		1000000ULL	/* MI cap (keeps sums in range) */
#define PCC_MI_MIN_PKTS		10ULL		/* MI holds at least 10 packets */
#define PCC_MI_MIN_SAMPLES	8ULL		/* ... and about 8 RTT samples */
#define PCC_MI_MIN_ACCT_PKTS	4		/* fewer delivered+lost: no decision */

/* RTT-gradient regression and noise filter */
#define PCC_REG_SAMPLES_MAX	1024		/* samples per MI in the regression */
#define PCC_REG_MIN_SAMPLES	4		/* fewer: no gradient */
#define PCC_REG_CLAMP		(1LL << 20)	/* |t|, |rtt - rtt0| clamp, us */
#define PCC_GRAD_T2		4		/* significance: t^2 >= 4 */
#define PCC_GRAD_TOL_Q16	1966		/* tolerance 0.03, subtracted */
#define PCC_GRAD_MAX_Q16	(4LL << PCC_FP_SHIFT)	/* slope clamp: 4 */

/* Congestion guards */
#define PCC_LOSS_HEAVY_Q16	6554		/* 10% loss: congested without RTT */
#define PCC_SEND_MIN_PCT	85		/* MI sent < 85% of target: no rise */
#define PCC_SEND_RATIO_MIN_Q16	60293		/* < 92% over ~4 MIs: unreachable */

/* cwnd = PCC_CWND_SRTT_MULT * rate * srtt + max(rate * 1 ms, 4 packets) */
#define PCC_CWND_SRTT_MULT	2	/* as PCC-Kernel; see "Pacing and cwnd" */
#define PCC_CWND_BURST_US	1000ULL
#define PCC_CWND_MIN_EXTRA	4
#define PCC_CWND_MIN		4

/* Initial rate and RTT */
#define PCC_INIT_RTT_FLOOR_US	PCC_MI_MIN_US	/* see "Initial rate" above */
#define PCC_LIVE_MIN_DELIVERED	20		/* delivered packets of a live flow */
#define PCC_DEFAULT_RTT_US	1000		/* before any RTT sample */
#define PCC_MIN_RTT_WIN_US	(10 * USEC_PER_SEC)

/* ---- Types -------------------------------------------------------------- */

enum pcc_phase {
	PCC_STARTING = 0,
	PCC_PROBING  = 1,
	PCC_MOVING   = 2,
};

struct pcc_mi {
	__u64 rate;		/* target rate, bit/s */
	__u64 start_us;		/* send-time window [start_us, end_us) */
	__u64 end_us;		/* 0 while the MI is being sent */
	__u64 dur_us;		/* planned length */
	__s64 st, stt, sy, syy, sty; /* regression sums (t, y in us) */
	__s64 raw_slope;	/* unfiltered RTT gradient, Q16 (diagnostics) */
	__u32 n;		/* samples in the regression */
	__u32 seen;		/* samples offered (for decimation) */
	__u32 decim;		/* use one of every decim samples */
	__u32 y0;		/* reference RTT: the MI's first sample, us */
	__u32 delivered;	/* packets (s)acked */
	__u32 lost;		/* packets marked lost */
	__u32 samples;		/* ACKs credited */
	__u32 app_limited;	/* of which app-limited */
	__u32 probe;		/* probe index 0..3 (PROBING only) */
	__u32 segs_start;	/* tp->data_segs_out when the MI opened */
	__u32 segs;		/* data segments sent during the MI */
	__u32 pad;
};

struct pcc_state {
	struct pcc_mi mi[PCC_MI_SLOTS];	/* ring of outstanding MIs */
	__u32 head;		/* oldest outstanding MI */
	__u32 cnt;		/* outstanding MIs */
	__u32 open;		/* the newest MI is still being sent */
	__u32 phase;		/* enum pcc_phase */
	__u32 paused;		/* in TCP_CA_Loss: no measurement */
	__u32 mss;		/* tp->mss_cache (for global functions) */
	__u64 rate;		/* base (decided) rate, bit/s */
	__u64 send_rate;	/* rate currently paced, bit/s */
	/* STARTING / MOVING: the previous point */
	__u64 prev_rate;
	__s64 prev_util;
	/* PROBING */
	__s64 probe_util[PCC_PROBES];
	__u32 plan;		/* bit p set: pair p sends its high probe first */
	__u32 probes_sent;
	__u32 probes_done;
	__u32 probes_congested;	/* probes that saw the queue grow */
	__u32 tainted;		/* a probe could not be used */
	/* MOVING */
	__u32 tau;		/* steps taken in this direction */
	__u32 omega_k;		/* consecutive steps that hit the boundary */
	/* measurement bookkeeping */
	__u32 min_rtt_us;	/* RTT baseline */
	__u64 min_rtt_stamp;
	__u64 last_send_us;	/* send time of the last timed sample */
	__u64 last_ack_us;	/* time of the last ACK */
	__u32 burst_x16;	/* packets per RTT sample (TSO burst), x16 */
	__u32 sent_ratio_q16;	/* sent / target packets, EWMA over MIs */
	__u32 port;		/* local port (diagnostics) */
	__u32 pad;
};

/* ---- Maps ----------------------------------------------------------------- */

/* "full" inheritance seed, written by the switcher, see pcc.h */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct pcc_seed);
} ccs_pcc_seed SEC(".maps");

/* per-socket PCC state */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct pcc_state);
} ccs_pcc_state SEC(".maps");

/*
 * Global (non-inlined) BPF function: the verifier checks it once on its own
 * instead of at every call site, which keeps verification small.
 */
#define PCC_SUBPROG __attribute__((noinline))

/* Build with -DPCC_DEBUG for per-MI traces in /sys/kernel/tracing/trace_pipe */
#ifdef PCC_DEBUG
#define pcc_dbg(fmt, args...) bpf_printk(fmt, ##args)
#else
#define pcc_dbg(fmt, args...) do { } while (0)
#endif

/* ---- Small helpers -------------------------------------------------------- */

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline __u64 pcc_min(__u64 a, __u64 b) { return a < b ? a : b; }
static __always_inline __u64 pcc_max(__u64 a, __u64 b) { return a > b ? a : b; }
static __always_inline __u64 pcc_abs(__s64 a) { return a < 0 ? -(__u64)a : (__u64)a; }

/* a / b for signed a and b > 0, rounding toward zero (no BPF sdiv). */
static __always_inline __s64 pcc_sdiv(__s64 a, __u64 b)
{
	__u64 q;

	if (!b)
		return 0;
	q = pcc_abs(a) / b;
	return a < 0 ? -(__s64)q : (__s64)q;
}

/* v >> sh on the magnitude, keeping the sign. */
static __always_inline __s64 pcc_sshr(__s64 v, __u32 sh)
{
	__u64 a = pcc_abs(v) >> sh;

	return v < 0 ? -(__s64)a : (__s64)a;
}

/* num * 2^16 / den for signed num and den > 0, without overflow. */
static __always_inline __s64 pcc_div_q16(__s64 num, __u64 den)
{
	__u64 a = pcc_abs(num), q;

	if (!den)
		return 0;
	if (a < (1ULL << 47))
		q = (a << PCC_FP_SHIFT) / den;
	else
		q = a / pcc_max(den >> PCC_FP_SHIFT, 1);
	if (q > (1ULL << 48))
		q = 1ULL << 48;
	return num < 0 ? -(__s64)q : (__s64)q;
}

/* Position of the most significant bit, counting from 1; 0 for 0. */
static __always_inline __u32 pcc_fls64(__u64 x)
{
	__u32 r = 0;

	if (!x)
		return 0;
	if (x >> 32) { x >>= 32; r += 32; }
	if (x >> 16) { x >>= 16; r += 16; }
	if (x >> 8)  { x >>= 8;  r += 8; }
	if (x >> 4)  { x >>= 4;  r += 4; }
	if (x >> 2)  { x >>= 2;  r += 2; }
	if (x >> 1)  { x >>= 1;  r += 1; }
	return r + 1;
}

/* bit/s -> Mbit/s, Q16 */
static __always_inline __u64 pcc_mbps_q16(__u64 rate_bps)
{
	return (rate_bps << PCC_FP_SHIFT) / USEC_PER_SEC;
}

static __always_inline __u64 pcc_clamp_rate(__u64 rate)
{
	return pcc_min(pcc_max(rate, PCC_RATE_MIN_BPS), PCC_RATE_MAX_BPS);
}

static __always_inline __u32 pcc_mss(const struct tcp_sock *tp)
{
	__u32 mss = tp->mss_cache;

	return mss ? mss : 1460;
}

/* Packets a rate sends in dur_us. */
static __always_inline __u64 pcc_pkts_in(__u64 rate, __u64 dur_us, __u32 mss)
{
	return rate * dur_us / (BITS_PER_BYTE * USEC_PER_SEC * pcc_max(mss, 1));
}

/* ---- Fixed-point log2 / exp2 / x^0.9 --------------------------------------- */

/* log2(v) in Q16, v > 0. */
PCC_SUBPROG __s64 pcc_log2_q16(__u64 v)
{
	__u32 p = pcc_fls64(v) - 1;	/* integer part */
	__u64 m;			/* mantissa in [1, 2), Q30 */
	__s64 frac = 0;
	int i;

	if (!v)
		return -(64LL << PCC_FP_SHIFT);
	m = p >= 30 ? v >> (p - 30) : v << (30 - p);
	/* squaring doubles log2(m); passing 2 yields the next fraction bit */
	for (i = 1; i <= PCC_FP_SHIFT; i++) {
		__u64 bit;

		m = (m * m) >> 30;
		bit = m >> 31;			/* m in [1, 4): 1 iff m >= 2 */
		m >>= bit;
		frac |= bit << (PCC_FP_SHIFT - i);
	}
	return ((__s64)p << PCC_FP_SHIFT) + frac;
}

/* 2^y for y in Q16, result in Q16 (saturates at 2^46, 0 below 2^-16). */
PCC_SUBPROG __u64 pcc_exp2_q16(__s64 y)
{
	__s64 ip = y >> PCC_FP_SHIFT;			/* floor(y) */
	__u64 f = (__u64)(y & (PCC_FP_ONE - 1)) << 14;	/* fraction, Q30 */
	__u64 p;

	if (ip > 30)
		return 1ULL << 46;
	if (ip < -PCC_FP_SHIFT)
		return 0;
	/* 2^f = e^(f ln 2): Taylor series to degree 7, Horner, Q30 */
	p = 16377;					/* ln2^7 / 7! */
	p = 165394 + ((p * f) >> 30);			/* ln2^6 / 6! */
	p = 1431680 + ((p * f) >> 30);			/* ln2^5 / 5! */
	p = 10327387 + ((p * f) >> 30);			/* ln2^4 / 4! */
	p = 59597083 + ((p * f) >> 30);			/* ln2^3 / 3! */
	p = 257941248 + ((p * f) >> 30);		/* ln2^2 / 2! */
	p = 744261118 + ((p * f) >> 30);		/* ln2 */
	p = (1ULL << 30) + ((p * f) >> 30);		/* 2^f in [1, 2) */
	/* times 2^ip, Q30 -> Q16 */
	if (ip >= 14)
		return p << (ip - 14);
	return p >> (14 - ip);
}

/* x^0.9 for x in Q16, result in Q16. */
static __always_inline __u64 pcc_pow09_q16(__u64 x_q16)
{
	__s64 lg;

	if (!x_q16)
		return 0;
	lg = pcc_log2_q16(x_q16) - ((__s64)PCC_FP_SHIFT << PCC_FP_SHIFT);
	return pcc_exp2_q16((lg * PCC_EXPONENT_Q16) >> PCC_FP_SHIFT);
}

/* u = x^0.9 - 900 x dRTT/dT - 11.35 x L, all Q16 */
PCC_SUBPROG __s64 pcc_utility(__u64 rate, __s64 grad_q16, __u64 loss_q16)
{
	__u64 x = pcc_mbps_q16(rate);
	__s64 u = pcc_pow09_q16(x);

	u -= (((__s64)x * grad_q16) >> PCC_FP_SHIFT) * PCC_LAT_COEF;
	u -= (__s64)(((x * loss_q16) >> PCC_FP_SHIFT) * PCC_LOSS_COEF_X100 / 100);
	return u;
}

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
 * the burst size seen lately), at most 1 s.  See the header comment.
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
 * RTT gradient of an MI, Q16, after noise filtering (see header): the
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
		/* one sample per TSO burst, see header */
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

/* cwnd = 2 * rate * srtt + max(1 ms of data, 4 packets), see header. */
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

/* ---- Initialisation --------------------------------------------------------- */

/* Initial rate without a seed, see header. */
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
