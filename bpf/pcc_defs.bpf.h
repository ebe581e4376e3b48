/* SPDX-License-Identifier: GPL-2.0 */
/*
 * PCC Vivace (pcc.bpf.c, whose header comment explains the algorithm): what
 * every other part uses -- the tunables, the per-socket state with its ring
 * of monitor intervals (MIs), the two socket-storage maps, and small integer
 * helpers (min/max, signed division on magnitudes, Q16 conversions, packets
 * a rate sends in an interval).
 *
 * Like the other pcc_*.bpf.h, included by pcc.bpf.c only: all of it is
 * compiled into the one object pcc.bpf.o.
 */
#ifndef CCSWITCH_PCC_DEFS_BPF_H
#define CCSWITCH_PCC_DEFS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "pcc.h"

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
#define PCC_MI_MIN_US		10000ULL	/* MI floor, see pcc.bpf.c header */
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
#define PCC_INIT_RTT_FLOOR_US	PCC_MI_MIN_US	/* see pcc.bpf.c, "Initial rate" */
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

#endif /* CCSWITCH_PCC_DEFS_BPF_H */
