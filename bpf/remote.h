/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Contract between the `remote` congestion control (remote.bpf.c) and the
 * user-space agent that decides its windows (bpf/remote.py, ccswitch/remote/).
 *
 * Three maps, all owned by remote.bpf.o; user space reaches them through the
 * object that registered `remote` (or by name, see remote.py):
 *
 *   ccs_remote_dec   HASH  u64 socket cookie -> struct remote_decision
 *                    written by user space, read by the kernel on every ACK;
 *                    deleted by the kernel when the socket releases `remote`
 *   ccs_remote_obs   HASH  u64 socket cookie -> struct remote_obs
 *                    written by the kernel (the agent's state), read by user
 *                    space; created once the socket has a cookie, deleted on
 *                    release
 *   ccs_remote_cfg   ARRAY [1] -> struct remote_cfg, written by user space;
 *                    zero fields mean the defaults below
 *
 * Times are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns() in the kernel,
 * time.monotonic_ns() in Python): the same clock on one host.  The decision's
 * stamp_ns is the time at which the observation it answers was read, so the
 * deadline bounds the whole control loop (read, ask, compute, write), not only
 * the server's part.
 */
#ifndef CCSWITCH_REMOTE_H
#define CCSWITCH_REMOTE_H

#ifndef REMOTE_NAME	/* -D for renamed test builds */
#define REMOTE_NAME "remote"
#endif

#define REMOTE_DEFAULT_DEADLINE_NS	300000000ULL	/* 300 ms: three RL-TCP steps of 100 ms */
#define REMOTE_DEFAULT_CWND_MIN		2U		/* packets */
#define REMOTE_DEFAULT_CWND_MAX		65535U		/* packets (the kernel's clamp is lower) */
#define REMOTE_MAP_ENTRIES		65536

/* struct remote_obs.mode, what the socket's cwnd followed on its last ACK */
enum remote_mode {
	REMOTE_START    = 0,	/* no decision yet: Reno from the initial window */
	REMOTE_APPLIED  = 1,	/* a fresh decision set cwnd */
	REMOTE_FALLBACK = 2,	/* decisions went stale (deadline): Reno AIMD from the last decided cwnd */
	REMOTE_WAIT     = 3,	/* decision older than the last congestion event, or withdrawn: Reno until a newer one */
};

/*
 * A decision with cwnd REMOTE_RELEASE (and seq > 0) is a release: the agent
 * had no decision for this step (server late or gone, no local agent), so
 * the socket falls back now (REMOTE_FALLBACK, counted) instead of at the
 * deadline.  The deadline stays as the backstop for an agent that stopped
 * writing altogether.
 */
#define REMOTE_RELEASE			0U

struct remote_decision {
	__u64 seq;		/* per socket, increasing; 0 never applies */
	__u64 stamp_ns;		/* when the observation this answers was read (CLOCK_MONOTONIC) */
	__u64 max_pacing_Bps;	/* SO_MAX_PACING_RATE, bytes/s; 0 (or >= 2^32 - 1) = no cap */
	__u32 cwnd;		/* packets, clamped to [cwnd_min, min(cwnd_max, snd_cwnd_clamp)]; REMOTE_RELEASE = fall back now */
	__u32 ssthresh;		/* packets to use at the next loss/ECN reduction; 0 = Reno's cwnd/2 */
};

struct remote_obs {
	__u64 cookie;
	__u64 stamp_ns;		/* last update (an ACK of new data) */
	/* cumulative counters: the agent takes differences over its step */
	__u64 acks;		/* ACKs of new data seen */
	__u64 delivered;	/* tp->delivered, packets */
	__u64 delivered_ce;	/* tp->delivered_ce, packets */
	__u64 lost;		/* tp->lost, packets */
	__u64 retrans;		/* tp->total_retrans, packets */
	__u64 rtt_sum_us;	/* sum of the ACKs' RTT samples */
	__u64 rtt_cnt;		/* number of RTT samples */
	__u64 inflight_sum;	/* sum over ACKs of ack_sample.in_flight, in BYTES (RL-TCP's bytesInFlight sum) */
	__u64 applied_seq;	/* seq of the last decision applied */
	__u64 fallbacks;	/* times the decision went stale (REMOTE_APPLIED -> REMOTE_FALLBACK) */
	__u64 congestion_ns;	/* last loss/ECN reduction (ssthresh() call) */
	/* instantaneous */
	__u32 cwnd;		/* packets */
	__u32 ssthresh;		/* packets */
	__u32 mss;		/* bytes */
	__u32 inflight;		/* packets in flight at the last ACK */
	__u32 srtt_us;
	__u32 min_rtt_us;
	__u32 ca_state;		/* TCP_CA_Open .. TCP_CA_Loss */
	__u32 mode;		/* enum remote_mode */
};

struct remote_cfg {
	__u64 deadline_ns;	/* decision age after which the socket falls back; 0 = default */
	__u32 cwnd_min;		/* 0 = default */
	__u32 cwnd_max;		/* 0 = default */
};

#endif /* CCSWITCH_REMOTE_H */
