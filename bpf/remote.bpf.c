// SPDX-License-Identifier: GPL-2.0
/*
 * remote: a congestion control whose window is decided in user space, as a
 * BPF tcp_congestion_ops (struct_ops), registered as "remote".
 *
 * Paper 003 (Aoki et al., IEICE IA2023-44) moves a learned congestion
 * control (ns3-ai's RL-TCP) off a weak IoT sender onto a remote server: the
 * sender reports its state every step (0.1 s), the server's agent answers
 * with a new cwnd (and ssthresh), the sender applies it.  This file is the
 * sender's kernel half.  The agent's half is user space: a local loop
 * (ccswitch/remote/) reads the state exported here, asks a policy server
 * (`ccswitch policy serve`) and writes the answer into a map.  The contract
 * (maps, structs, units) is remote.h.
 *
 * Applying a decision.  On each ACK that may raise cwnd (cong_avoid(), i.e.
 * in the Open state, as ns-3's IncreaseWindow() that RL-TCP overrides) the
 * socket's decision is looked up by its cookie.  It applies when it is
 *   fresh:  now - stamp_ns <= deadline (remote_cfg, default 300 ms), where
 *           stamp_ns is when the state it answers was read, and
 *   recent: stamp_ns >= the socket's last congestion event (the last
 *           ssthresh() call: loss or ECN), so that a window decided before
 *           a loss is not re-imposed after the stack's recovery cut it;
 * cwnd is then set to the decision, clamped to [cwnd_min, min(cwnd_max,
 * snd_cwnd_clamp)].  As in RL-TCP it is re-imposed on every such ACK while
 * it stays fresh.  Loss recovery itself is the stack's (PRR down to
 * ssthresh()); ssthresh() returns the decision's ssthresh when it has one
 * (RL-TCP's second action), else Reno's cwnd/2.
 *
 * Fallback when no fresh decision exists: Reno-like AIMD starting from the
 * last decided cwnd.  When a socket's decision goes stale, ssthresh is set
 * to the current cwnd (the last decided one, or what recovery left of it),
 * so Reno continues in congestion avoidance: +1 packet per RTT, halving on
 * loss or ECN.  Chosen over holding the last cwnd because a held window is
 * open loop: if the path changes while the agent is unreachable (a
 * competitor arrives, the WiFi rate drops) a held cwnd keeps the queue
 * full for as long as the outage lasts, and one that was decided for a
 * faster path keeps losing.  Chosen over slow start because the last
 * decided cwnd is the best estimate of the path there is: doubling from it
 * overshoots.  AIMD converges to a fair share from wherever it starts,
 * which is the property a flow without its controller needs.  Before the
 * first decision the socket is plain Reno from the initial window (slow
 * start), which also gives the agent its first observations.  A decision
 * that is fresh but older than the last congestion event (REMOTE_WAIT)
 * also gets Reno, without counting as a fallback.  The agent can also
 * release a socket (a decision with cwnd REMOTE_RELEASE): when its server
 * fails a step and it has no local agent it says so at once, and the socket
 * falls back on its next ACK instead of waiting out the deadline, which
 * then only catches an agent that stopped writing altogether.
 *
 * Pacing.  A decision may cap the pacing rate (max_pacing_Bps, bytes/s, up
 * to 4 GB/s: bpf_setsockopt takes it as an int): it is set with
 * SO_MAX_PACING_RATE when a decision with a new value applies and lifted
 * (~0U) when the socket falls back.  The kernel's own
 * pacing (2x cwnd/srtt in slow start, 1.2x after) is on (SK_PACING_NEEDED)
 * and the cap bounds it.  RL-TCP's action space has no pacing: its agent
 * and the baseline agent send 0.
 *
 * Exported state (struct remote_obs, map ccs_remote_obs by cookie), updated
 * on every ACK of new data (pkts_acked()): RL-TCP's state (ns3-ai's
 * time-step env: ssThresh, cWnd, segmentSize, segmentsAcked over the step,
 * the sum of bytesInFlight samples over the step) as cumulative counters
 * that the agent differences over its step (delivered packets for
 * segmentsAcked, inflight_sum/acks for the in-flight samples: the kernel's
 * ack_sample.in_flight is in bytes, mss x packets delivered since the acked
 * packet was sent, so user space divides by mss), plus what a delay-based agent needs (RTT samples,
 * srtt, min RTT, losses, CE marks) and the controller's own bookkeeping
 * (mode, last applied seq, fallbacks).
 *
 * Cookies.  Decisions are keyed by the socket cookie, the id ccswitch uses
 * everywhere.  struct_ops programs cannot call bpf_get_socket_cookie(), so
 * the cookie is read from sk->sk_cookie, which the kernel fills lazily on
 * first use (sock_diag, SO_COOKIE, ccswitch's monitor).  Until it is set the
 * socket is not exported and runs Reno; remote.py asks sock_diag once per
 * step for the namespaces it controls, which sets it for every socket.
 *
 * State: struct remote_ca in icsk_ca_priv (zeroed by the kernel on init).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ccswitch.h"
#include "remote.h"

char LICENSE[] SEC("license") = "GPL";

#ifndef SOL_SOCKET
#define SOL_SOCKET 1
#endif
#ifndef SO_MAX_PACING_RATE
#define SO_MAX_PACING_RATE 47
#endif
#define TCP_CA_Open_ 0

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);	/* RCU-freed: a reader never sees a recycled value */
	__uint(max_entries, REMOTE_MAP_ENTRIES);
	__type(key, __u64);
	__type(value, struct remote_decision);
} ccs_remote_dec SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, REMOTE_MAP_ENTRIES);
	__type(key, __u64);
	__type(value, struct remote_obs);
} ccs_remote_obs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct remote_cfg);
} ccs_remote_cfg SEC(".maps");

struct remote_ca {
	__u64 cookie;		/* 0 until the kernel assigned one */
	__u64 applied_seq;
	__u64 fallbacks;
	__u64 congestion_ns;	/* last ssthresh() call */
	__u64 pacing_Bps;	/* cap currently set; 0 = none */
	__u32 mode;		/* enum remote_mode */
	__u32 loss_cwnd;	/* cwnd before the last reduction (undo) */
};
_Static_assert(sizeof(struct remote_ca) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "struct remote_ca must fit in icsk_ca_priv");

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct remote_ca *remote_ca(const struct sock *sk)
{
	return (struct remote_ca *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline __u32 max_u32(__u32 a, __u32 b) { return a > b ? a : b; }
static __always_inline __u32 min_u32(__u32 a, __u32 b) { return a < b ? a : b; }

static __always_inline struct remote_cfg remote_config(void)
{
	struct remote_cfg out = {
		.deadline_ns = REMOTE_DEFAULT_DEADLINE_NS,
		.cwnd_min = REMOTE_DEFAULT_CWND_MIN,
		.cwnd_max = REMOTE_DEFAULT_CWND_MAX,
	};
	__u32 zero = 0;
	struct remote_cfg *c = bpf_map_lookup_elem(&ccs_remote_cfg, &zero);

	if (c) {
		if (c->deadline_ns)
			out.deadline_ns = c->deadline_ns;
		if (c->cwnd_min)
			out.cwnd_min = c->cwnd_min;
		if (c->cwnd_max)
			out.cwnd_max = c->cwnd_max;
	}
	if (out.cwnd_max < out.cwnd_min)
		out.cwnd_max = out.cwnd_min;
	return out;
}

/* The socket's cookie, cached; 0 while the kernel has not assigned one. */
static __always_inline __u64 remote_cookie(struct sock *sk, struct remote_ca *ca)
{
	if (!ca->cookie)
		ca->cookie = sk->__sk_common.skc_cookie.counter;
	return ca->cookie;
}

static __always_inline __u32 packets_in_flight(const struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

/* The decision to follow now, copied (NULL-free): *out filled, true if one applies. */
static __always_inline bool remote_decision_applies(struct sock *sk, struct remote_ca *ca,
						    const struct remote_cfg *cfg, __u64 now,
						    struct remote_decision *out, bool *stale)
{
	__u64 cookie = remote_cookie(sk, ca);
	struct remote_decision *d;

	*stale = false;
	if (!cookie)
		return false;
	d = bpf_map_lookup_elem(&ccs_remote_dec, &cookie);
	if (!d)
		return false;
	__builtin_memcpy(out, d, sizeof(*out));
	if (!out->seq)
		return false;
	if (out->cwnd == REMOTE_RELEASE) {	/* the agent gave up on this step: fall back now */
		*stale = true;
		return false;
	}
	/* a stamp from the future is garbage: treat it as stale */
	if (out->stamp_ns > now || now - out->stamp_ns > cfg->deadline_ns) {
		*stale = true;
		return false;
	}
	return out->stamp_ns >= ca->congestion_ns;
}

/*
 * bpf_setsockopt() takes SO_MAX_PACING_RATE as an int (filter.c checks the
 * length): bytes/s up to 4 GB/s, ~0U = no cap.  Tried once per new value,
 * also when it fails (no retry on every ACK).
 */
static __always_inline void remote_set_pacing_cap(struct sock *sk, struct remote_ca *ca, __u64 Bps)
{
	int val = (!Bps || Bps >= 0xFFFFFFFFULL) ? (int)~0U : (int)(__u32)Bps;

	if (ca->pacing_Bps == Bps)
		return;
	ca->pacing_Bps = Bps;
	bpf_setsockopt(sk, SOL_SOCKET, SO_MAX_PACING_RATE, &val, sizeof(val));
}

/* A fresh decision: set cwnd (and the pacing cap) from it. */
static __always_inline void remote_apply(struct sock *sk, struct remote_ca *ca,
					 const struct remote_cfg *cfg, const struct remote_decision *d)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 hi = min_u32(cfg->cwnd_max, max_u32(tp->snd_cwnd_clamp, cfg->cwnd_min));

	tp->snd_cwnd = min_u32(max_u32(d->cwnd, cfg->cwnd_min), hi);
	ca->applied_seq = d->seq;
	ca->mode = REMOTE_APPLIED;
	remote_set_pacing_cap(sk, ca, d->max_pacing_Bps);
}

/* No applicable decision: Reno, entered in congestion avoidance from the last decided cwnd. */
static __always_inline void remote_fall_back(struct sock *sk, struct remote_ca *ca, bool stale,
					     __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (ca->mode == REMOTE_APPLIED) {
		/* leaving remote control: congestion avoidance from here */
		tp->snd_ssthresh = max_u32(tp->snd_cwnd, REMOTE_DEFAULT_CWND_MIN);
		if (stale)
			ca->fallbacks++;
	}
	if (ca->mode != REMOTE_START)
		ca->mode = stale ? REMOTE_FALLBACK : REMOTE_WAIT;
	remote_set_pacing_cap(sk, ca, 0);
	tcp_reno_cong_avoid(sk, ack, acked);
}

/* The agent's state, refreshed on every ACK of new data. */
static __always_inline void remote_export(struct sock *sk, struct remote_ca *ca,
					  const struct ack_sample *sample)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 cookie = remote_cookie(sk, ca);
	struct remote_obs *o, fresh = {};

	if (!cookie)
		return;
	o = bpf_map_lookup_elem(&ccs_remote_obs, &cookie);
	if (!o) {
		fresh.cookie = cookie;
		bpf_map_update_elem(&ccs_remote_obs, &cookie, &fresh, BPF_NOEXIST);
		o = bpf_map_lookup_elem(&ccs_remote_obs, &cookie);
		if (!o)
			return;
	}
	o->stamp_ns = bpf_ktime_get_ns();
	o->acks++;
	o->delivered = tp->delivered;
	o->delivered_ce = tp->delivered_ce;
	o->lost = tp->lost;
	o->retrans = tp->total_retrans;
	if (sample->rtt_us > 0) {
		o->rtt_sum_us += sample->rtt_us;
		o->rtt_cnt++;
	}
	o->inflight_sum += sample->in_flight;
	o->applied_seq = ca->applied_seq;
	o->fallbacks = ca->fallbacks;
	o->congestion_ns = ca->congestion_ns;
	o->cwnd = tp->snd_cwnd;
	o->ssthresh = tp->snd_ssthresh;
	o->mss = tp->mss_cache;
	o->inflight = packets_in_flight(tp);
	o->srtt_us = tp->srtt_us >> 3;
	o->min_rtt_us = tp->rtt_min.s[0].v;
	o->ca_state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
	o->mode = ca->mode;
}

SEC("struct_ops/remote_init")
void BPF_PROG(remote_init, struct sock *sk)
{
	struct remote_ca *ca = remote_ca(sk);

	ca->mode = REMOTE_START;
	if (sk->sk_pacing_status == SK_PACING_NONE)
		sk->sk_pacing_status = SK_PACING_NEEDED;
}

SEC("struct_ops/remote_release")
void BPF_PROG(remote_release, struct sock *sk)
{
	__u64 cookie = remote_ca(sk)->cookie;

	if (!cookie)
		return;
	bpf_map_delete_elem(&ccs_remote_obs, &cookie);
	bpf_map_delete_elem(&ccs_remote_dec, &cookie);
}

SEC("struct_ops/remote_cong_avoid")
void BPF_PROG(remote_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct remote_ca *ca = remote_ca(sk);
	struct remote_cfg cfg = remote_config();
	struct remote_decision d = {};
	bool stale;

	if (remote_decision_applies(sk, ca, &cfg, bpf_ktime_get_ns(), &d, &stale))
		remote_apply(sk, ca, &cfg, &d);
	else
		remote_fall_back(sk, ca, stale, ack, acked);
}

/* Loss or ECN: the decision's ssthresh if a fresh one has it, else Reno's halving. */
SEC("struct_ops/remote_ssthresh")
__u32 BPF_PROG(remote_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct remote_ca *ca = remote_ca(sk);
	struct remote_cfg cfg = remote_config();
	struct remote_decision d = {};
	__u64 now = bpf_ktime_get_ns();
	bool stale;
	__u32 out = max_u32(tp->snd_cwnd >> 1, REMOTE_DEFAULT_CWND_MIN);

	if (remote_decision_applies(sk, ca, &cfg, now, &d, &stale) && d.ssthresh)
		out = max_u32(min_u32(d.ssthresh, tp->snd_cwnd), cfg.cwnd_min);
	ca->loss_cwnd = tp->snd_cwnd;
	ca->congestion_ns = now;
	return out;
}

SEC("struct_ops/remote_pkts_acked")
void BPF_PROG(remote_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	remote_export(sk, remote_ca(sk), sample);
}

SEC("struct_ops/remote_undo_cwnd")
__u32 BPF_PROG(remote_undo_cwnd, struct sock *sk)
{
	return max_u32(tcp_sk(sk)->snd_cwnd, remote_ca(sk)->loss_cwnd);
}

SEC(".struct_ops")
struct tcp_congestion_ops ccs_remote = {
	.init		= (void *)remote_init,
	.release	= (void *)remote_release,
	.cong_avoid	= (void *)remote_cong_avoid,
	.ssthresh	= (void *)remote_ssthresh,
	.pkts_acked	= (void *)remote_pkts_acked,
	.undo_cwnd	= (void *)remote_undo_cwnd,
	.name		= REMOTE_NAME,
};
