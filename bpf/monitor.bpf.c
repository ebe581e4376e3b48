// SPDX-License-Identifier: GPL-2.0
/*
 * ccswitch monitor: per-flow TCP state for every socket of one network
 * namespace, without per-packet capture.
 *
 * Two programs cooperate:
 *
 *  ccs_sockops (sockops, attached to the cgroup v2 root)
 *	Sees connection events of every socket on the host and keeps only
 *	those of the monitored netns (config map; the host-wide cgroup hook
 *	would otherwise mix namespaces).  On ESTABLISHED it subscribes the
 *	socket to RTT, retransmit and state callbacks.  Each RTT callback
 *	carries the ACK's RTT sample (6.10+: args[0] = mrtt_us); successive
 *	samples are folded into a sum of absolute differences, from which the
 *	sampler derives jitter.  On TCP_CLOSE the entry is dropped.
 *
 *  ccs_sample_tracked (iter/bpf_sk_storage_map) -- the sampling pass
 *	Run by user space every tick, in process context.  Walks only the
 *	sockets the monitor tracks: those holding an entry of the socket-local
 *	storage map ccs_flow_sk (created by sockops on ESTABLISHED, freed with
 *	the socket or on TCP_CLOSE).  Writes one struct flow_record each: the
 *	kernel's cumulative counters merged with the sockops RTT state, into
 *	the memory-mapped array ccs_records (the iterator's own output carries
 *	only what does not fit, then the pass's record count).  Its
 *	cost follows the number of tracked sockets, not the size of the
 *	kernel's TCP hash table (262,144 buckets walked by iter/tcp whatever
 *	the number of flows).
 *
 *  ccs_sample (iter/tcp) -- the full walk
 *	Over every socket of the reader's netns (listeners, TIME_WAIT and
 *	request sockets skipped): the same records, and it adopts sockets that
 *	predate the monitor (they never passed ESTABLISHED under it): creates
 *	their storage entry so the tracked pass sees them from then on, and
 *	subscribes them to the callbacks with bpf_setsockopt(
 *	TCP_BPF_SOCK_OPS_CB_FLAGS) (6.13+; older kernels: sampled, no jitter).
 *	User space runs it at start and then every few seconds as a safety net.
 *
 *  ccs_count_tracked (iter/tcp) -- for benchmarks, never loaded by the daemon
 *	The cookie of every socket of the reader's netns that holds a storage
 *	entry, without creating any: counts the tracked set on kernels that
 *	refuse the storage-map iterator (bench/daemon_churn.py).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "ccswitch.h"
#include "monitor.h"

char LICENSE[] SEC("license") = "GPL";

#define TCP_ESTABLISHED_ 1
#define TCP_CLOSE_ 7
#define TCP_LISTEN_ 10
#define CB_FLAGS (BPF_SOCK_OPS_RTT_CB_FLAG | BPF_SOCK_OPS_RETRANS_CB_FLAG | \
		  BPF_SOCK_OPS_STATE_CB_FLAG)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct monitor_config);
} ccs_mon_cfg SEC(".maps");

/* Per-socket monitor state, freed by the kernel with the socket. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct flow_rtt);
} ccs_flow_sk SEC(".maps");

/* Where a sampling pass writes its records, read by user space through mmap.
 * Writing to the iterator's seq_file instead costs a read() per 32 KiB
 * (~136 records), and each read() restarts the storage map's walk by
 * skipping from the head of its bucket (2 buckets on a 2-CPU host): the
 * skips grow with the square of the tracked sockets (~4 of 10 ms at 10,000). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, CCS_RECORD_SLOTS);	/* user space may resize it before load */
	__type(key, __u32);
	__type(value, struct flow_record);
} ccs_records SEC(".maps");

/* Records of the running pass so far.  User space zeroes it before each
 * pass: the program cannot tell a pass's first call, as the last call of a
 * one-socket pass and of an empty pass both come with seq_num 0. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ccs_pass_count SEC(".maps");

/* Scratch record for records beyond CCS_RECORD_SLOTS (the seq_file path):
 * too large for the 512-byte stack together with locals. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flow_record);
} ccs_rec_scratch SEC(".maps");

static __always_inline bool netns_is_monitored(__u64 cookie)
{
	__u32 zero = 0;
	struct monitor_config *cfg = bpf_map_lookup_elem(&ccs_mon_cfg, &zero);

	return cfg && cfg->netns_cookie == cookie;
}

static __always_inline struct flow_rtt *flow_rtt_get(struct bpf_sock *sk)
{
	struct flow_rtt *fr;

	if (!sk)
		return NULL;
	fr = bpf_sk_storage_get(&ccs_flow_sk, sk, NULL, 0);
	if (fr)
		return fr;
	fr = bpf_sk_storage_get(&ccs_flow_sk, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (fr)
		fr->first_seen_ns = bpf_ktime_get_ns();
	return fr;
}

static __always_inline void fold_rtt_sample(struct flow_rtt *fr, __u32 rtt_us)
{
	if (fr->samples) {
		__u32 d = rtt_us > fr->last_rtt_us ? rtt_us - fr->last_rtt_us
						     : fr->last_rtt_us - rtt_us;
		__sync_fetch_and_add(&fr->absdiff_sum_us, d);
	}
	fr->last_rtt_us = rtt_us;
	__sync_fetch_and_add(&fr->samples, 1);
}

SEC("sockops")
int ccs_sockops(struct bpf_sock_ops *skops)
{
	struct flow_rtt *fr;
	struct bpf_sock *sk;
	int op = skops->op;

	if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB &&
	    op != BPF_SOCK_OPS_RTT_CB && op != BPF_SOCK_OPS_RETRANS_CB &&
	    op != BPF_SOCK_OPS_STATE_CB)
		return 1;
	if (!netns_is_monitored(bpf_get_netns_cookie(skops)))
		return 1;
	sk = skops->sk;
	if (!sk)
		return 1;

	switch (op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | CB_FLAGS);
		fr = flow_rtt_get(sk);
		if (fr)
			fr->established_ns = fr->first_seen_ns;
		break;
	case BPF_SOCK_OPS_RTT_CB:
		fr = flow_rtt_get(sk);
		/* args[0]: this ACK's RTT sample in us (kernel >= 6.10); older
		 * kernels pass 0 and we fall back to the smoothed RTT. */
		if (fr)
			fold_rtt_sample(fr, skops->args[0] ? skops->args[0] : skops->srtt_us >> 3);
		break;
	case BPF_SOCK_OPS_RETRANS_CB:
		fr = flow_rtt_get(sk);
		if (fr)
			__sync_fetch_and_add(&fr->retrans_events, 1);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		if (skops->args[1] == TCP_CLOSE_)
			bpf_sk_storage_delete(&ccs_flow_sk, sk);
		break;
	}
	return 1;
}

static __always_inline void fill_addresses(struct flow_record *r, struct sock *sk)
{
	r->family = sk->__sk_common.skc_family;
	r->sport = sk->__sk_common.skc_num;
	r->dport = bpf_ntohs(sk->__sk_common.skc_dport);
	if (r->family == AF_INET) {
		r->saddr[0] = sk->__sk_common.skc_rcv_saddr;
		r->daddr[0] = sk->__sk_common.skc_daddr;
	} else {
		__builtin_memcpy(r->saddr, sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32, 16);
		__builtin_memcpy(r->daddr, sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32, 16);
	}
}

static __always_inline __u64 delivery_rate_Bps(struct tcp_sock *tp)
{
	__u32 interval_us = tp->rate_interval_us;

	/* as tcp_get_info(): delivered segments over the sample's interval */
	if (!interval_us)
		return 0;
	return (__u64)tp->rate_delivered * tp->mss_cache * 1000000ULL / interval_us;
}

static __always_inline void subscribe_callbacks(struct sock *sk, struct tcp_sock *tp)
{
	int flags = tp->bpf_sock_ops_cb_flags;

	if ((flags & CB_FLAGS) == CB_FLAGS)
		return;
	flags |= CB_FLAGS;
	bpf_setsockopt(sk, SOL_TCP, TCP_BPF_SOCK_OPS_CB_FLAGS, &flags, sizeof(flags));
}

/* bpf_ktime_get_ns() costs ~100 ns on these VMs, a third of a record: a pass
 * reads the clock on its first record and then once per TS_REFRESH_RECORDS,
 * so a record's ts_ns is at most ~64 records (~20 us) older than its
 * counters.  Passes of one loaded object run one at a time (one reader). */
#define TS_REFRESH_RECORDS 64
__u64 ccs_pass_ts_ns = 0;

static __always_inline __u64 record_ts_ns(const struct bpf_iter_meta *meta)
{
	if ((meta->seq_num & (TS_REFRESH_RECORDS - 1)) == 0)
		ccs_pass_ts_ns = bpf_ktime_get_ns();
	return ccs_pass_ts_ns;
}

/* The CCA's name (TCP_CA_NAME_MAX = 16 bytes, NUL-padded by the kernel) as two
 * direct 8-byte loads from the trusted ops pointer: a bpf_probe_read_kernel_str
 * call per socket cost ~100 ns of a ~450 ns record. */
static __always_inline void copy_cca_name(char *dst, const struct tcp_congestion_ops *ops)
{
	const __u64 *src = (const __u64 *)ops->name;

	((__u64 *)dst)[0] = src[0];
	((__u64 *)dst)[1] = src[1];
}

/* One record from a full TCP socket and its monitor state (fr may be NULL). */
static __always_inline void fill_record(struct flow_record *r, struct sock *sk, struct tcp_sock *tp,
					struct flow_rtt *fr, __u64 ts_ns)
{
	struct cgroup *cg;

	__builtin_memset(r, 0, sizeof(*r));
	r->cookie = bpf_get_socket_cookie(sk);
	r->netns_cookie = sk->__sk_common.skc_net.net->net_cookie;
	cg = sk->sk_cgrp_data.cgroup;
	if (cg)
		r->cgroup_id = cg->kn->id;
	r->ts_ns = ts_ns;
	fill_addresses(r, sk);
	r->state = sk->__sk_common.skc_state;
	r->ca_state = BPF_CORE_READ_BITFIELD(&tp->inet_conn, icsk_ca_state);
	copy_cca_name(r->cca, tp->inet_conn.icsk_ca_ops);

	r->bytes_acked = tp->bytes_acked;
	r->bytes_sent = tp->bytes_sent;
	r->bytes_retrans = tp->bytes_retrans;
	r->bytes_received = tp->bytes_received;
	r->pacing_rate = sk->sk_pacing_rate;
	r->delivery_rate = delivery_rate_Bps(tp);
	r->srtt_us = tp->srtt_us >> 3;
	r->rttvar_us = tp->mdev_us >> 2;
	r->min_rtt_us = tp->rtt_min.s[0].v;
	r->snd_cwnd = tp->snd_cwnd;
	r->snd_ssthresh = tp->snd_ssthresh;
	r->mss = tp->mss_cache;
	r->delivered = tp->delivered;
	r->delivered_ce = tp->delivered_ce;
	r->lost = tp->lost;
	r->total_retrans = tp->total_retrans;
	r->segs_out = tp->segs_out;
	r->data_segs_out = tp->data_segs_out;
	r->packets_out = tp->packets_out;
	r->write_seq = tp->write_seq;
	r->sndq_bytes = tp->write_seq - tp->snd_una;
	r->cb_flags = tp->bpf_sock_ops_cb_flags;
	r->ecn_flags = tp->ecn_flags;
	r->received_ce = tp->received_ce;
	if (fr) {
		r->rtt_samples = fr->samples;
		r->rtt_absdiff_sum_us = fr->absdiff_sum_us;
		r->last_rtt_us = fr->last_rtt_us;
		r->retrans_events = fr->retrans_events;
		r->established_ns = fr->established_ns;
	}
}

/* One record of the pass: into the next slot of ccs_records, or past the
 * slots (the lookup finds none) into the seq_file.  A record the seq_file
 * had no room for is shown again by the next read() and counted twice, but
 * only past the slots, where user space takes the seq_file's own length. */
static __always_inline void emit_record(struct bpf_iter_meta *meta, struct sock *sk, struct tcp_sock *tp,
					struct flow_rtt *fr)
{
	__u32 slot, zero = 0;
	struct flow_record *r;
	__u64 *count, ts_ns;

	count = bpf_map_lookup_elem(&ccs_pass_count, &zero);
	if (!count)
		return;
	ts_ns = record_ts_ns(meta);
	slot = *count;
	r = bpf_map_lookup_elem(&ccs_records, &slot);
	if (r) {
		fill_record(r, sk, tp, fr, ts_ns);
	} else {
		r = bpf_map_lookup_elem(&ccs_rec_scratch, &zero);
		if (!r)
			return;
		fill_record(r, sk, tp, fr, ts_ns);
		bpf_seq_write(meta->seq, r, sizeof(*r));
	}
	(*count)++;
}

/* The iterator's last call (no socket): the pass's record count ends the stream. */
static __always_inline void end_pass(struct bpf_iter_meta *meta)
{
	__u32 zero = 0;
	__u64 *count = bpf_map_lookup_elem(&ccs_pass_count, &zero);
	__u64 n = count ? *count : 0;

	bpf_seq_write(meta->seq, &n, sizeof(n));
}

SEC("iter/bpf_sk_storage_map")
int ccs_sample_tracked(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct flow_rtt *fr = ctx->value;
	struct sock *sk = ctx->sk;
	struct tcp_sock *tp;

	if (!sk || !fr) {
		if (!sk)
			end_pass(ctx->meta);
		return 0;
	}
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	sk = (struct sock *)tp;
	if (sk->__sk_common.skc_state == TCP_LISTEN_)
		return 0;
	emit_record(ctx->meta, sk, tp, fr);
	return 0;
}

SEC("iter/tcp")
int ccs_sample(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct flow_rtt *fr;
	struct tcp_sock *tp;
	struct sock *sk;

	if (!skc) {
		end_pass(ctx->meta);
		return 0;
	}
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	sk = (struct sock *)tp;
	if (sk->__sk_common.skc_state == TCP_LISTEN_)
		return 0;
	fr = bpf_sk_storage_get(&ccs_flow_sk, sk, NULL, 0);
	if (!fr && sk->__sk_common.skc_state == TCP_ESTABLISHED_) {
		/* predates the monitor: adopt it into the tracked set */
		subscribe_callbacks(sk, tp);
		fr = bpf_sk_storage_get(&ccs_flow_sk, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
		if (fr)
			fr->first_seen_ns = bpf_ktime_get_ns();
	}
	emit_record(ctx->meta, sk, tp, fr);
	return 0;
}

SEC("iter/tcp")
int ccs_count_tracked(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;
	__u64 cookie;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp || !bpf_sk_storage_get(&ccs_flow_sk, (struct sock *)tp, NULL, 0))
		return 0;
	cookie = bpf_get_socket_cookie(tp);
	bpf_seq_write(ctx->meta->seq, &cookie, sizeof(cookie));
	return 0;
}
