// SPDX-License-Identifier: GPL-2.0
/*
 * ccswitch switcher: change the congestion control of chosen live sockets.
 *
 * An iter/tcp program, so bpf_setsockopt(TCP_CONGESTION) runs in process
 * context with the socket locked by the iterator (sockops callbacks run in
 * softirq and cannot safely re-initialise an algorithm there).  The kernel's
 * tcp_set_congestion_control() -> tcp_reinit_congestion_control() keeps the
 * connection state (cwnd, ssthresh, srtt, min RTT): that is "limited"
 * inheritance.  For "full" inheritance into ccswitch's own PCC, the old
 * algorithm's delivery rate and min RTT are left in the socket's `ccs_pcc_seed`
 * storage before the switch; PCC's init() consumes them (see pcc.h).
 * The iterator only sees sockets of the reader's network namespace.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "ccswitch.h"
#include "switcher.h"
#include "pcc.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CCS_MAX_SWITCH);
	__type(key, __u64);
	__type(value, struct switch_request);
} ccs_sw_req SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CCS_MAX_SWITCH);
	__type(key, __u64);
	__type(value, struct switch_result);
} ccs_sw_res SEC(".maps");

/* Shared with pcc.bpf.o: user space hands this object pcc's map fd (reuse).
 * Named apart from pcc.bpf.o's ccs_pcc_seed on purpose: a switcher opened
 * without that fd creates this map itself, and a private copy under the same
 * name would be found by pcc.py's lookup by name instead of the registered
 * PCC's map. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct pcc_seed);
} ccs_sw_seed SEC(".maps");

/* pcc.bpf.c's init() reads the seed; only our own PCC is seedable. */
static __always_inline bool is_pcc(const char *name)
{
	return name[0] == 'p' && name[1] == 'c' && name[2] == 'c' && name[3] == 0;
}

static __always_inline __u64 delivery_rate_bps(struct tcp_sock *tp)
{
	__u32 interval_us = tp->rate_interval_us;

	if (!interval_us)
		return 0;
	return (__u64)tp->rate_delivered * tp->mss_cache * 8000000ULL / interval_us;
}

static __always_inline bool seed_pcc(struct sock *sk, struct tcp_sock *tp)
{
	struct pcc_seed *seed;
	__u64 rate = delivery_rate_bps(tp);
	__u32 srtt = tp->srtt_us >> 3;

	/* no delivery-rate sample yet: fall back to cwnd over srtt */
	if (!rate && srtt)
		rate = (__u64)tp->snd_cwnd * tp->mss_cache * 8000000ULL / srtt;
	if (!rate)
		return false;
	seed = bpf_sk_storage_get(&ccs_sw_seed, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!seed)
		return false;
	seed->rate_bps = rate;
	seed->min_rtt_us = tp->rtt_min.s[0].v;
	seed->valid = 1;
	return true;
}

static __always_inline void snapshot(struct switch_result *res, struct tcp_sock *tp, bool after)
{
	if (after) {
		res->cwnd_after = tp->snd_cwnd;
		res->ssthresh_after = tp->snd_ssthresh;
		res->srtt_us_after = tp->srtt_us >> 3;
		res->min_rtt_us_after = tp->rtt_min.s[0].v;
		bpf_probe_read_kernel_str(res->cca_after, 16, tp->inet_conn.icsk_ca_ops->name);
	} else {
		res->cwnd_before = tp->snd_cwnd;
		res->ssthresh_before = tp->snd_ssthresh;
		res->srtt_us_before = tp->srtt_us >> 3;
		res->min_rtt_us_before = tp->rtt_min.s[0].v;
		bpf_probe_read_kernel_str(res->cca_before, 16, tp->inet_conn.icsk_ca_ops->name);
	}
}

SEC("iter/tcp")
int ccs_switch(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct switch_request *req;
	struct switch_result res = {};
	struct tcp_sock *tp;
	struct sock *sk;
	char name[16];
	__u64 cookie;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	sk = (struct sock *)tp;
	cookie = bpf_get_socket_cookie(sk);
	req = bpf_map_lookup_elem(&ccs_sw_req, &cookie);
	if (!req)
		return 0;
	__builtin_memcpy(name, req->cca, sizeof(name));
	name[15] = 0;

	snapshot(&res, tp, false);
	if (req->inherit == CCS_INHERIT_FULL && is_pcc(name))
		res.seeded = seed_pcc(sk, tp);
	res.err = bpf_setsockopt(sk, SOL_TCP, TCP_CONGESTION, name, sizeof(name));
	if (res.err && res.seeded) {
		bpf_sk_storage_delete(&ccs_sw_seed, sk);
		res.seeded = 0;
	}
	snapshot(&res, tp, true);
	res.ts_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&ccs_sw_res, &cookie, &res, BPF_ANY);
	return 0;
}
