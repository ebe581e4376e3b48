/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Monitor: kernel/user contract.
 *
 * `struct flow_record` is what the sampling iterator (iter/tcp) writes, one
 * per TCP socket of the monitored network namespace, per run.  All counters
 * are cumulative since the socket was created; the user-space sampler turns
 * two consecutive records into one per-interval FlowSample.  The Python
 * mirror (bpf/monitor.py: FLOW_RECORD_DTYPE) is checked against this
 * struct's BTF by tests/test_bpf_contract.py, so change both together.
 *
 * `struct flow_rtt` is what the sockops program keeps per socket from the
 * per-ACK RTT callback: the jitter estimate is the mean absolute difference
 * of successive RTT samples, sum(|rtt_i - rtt_{i-1}|) / (samples - 1).
 */
#ifndef CCSWITCH_MONITOR_H
#define CCSWITCH_MONITOR_H

#define CCS_MAX_FLOWS 65536

/* Records a sampling pass writes into the memory-mapped array ccs_records
 * (16,384 x 240 B = 3.75 MiB of kernel memory; user space maps it read-only
 * and may set another size before load: Monitor(record_slots=N)).
 * Records beyond it go through the iterator's seq_file as before.  The pass's
 * seq_file stream then holds those overflow records and ends with the pass's
 * record count (__u64). */
#define CCS_RECORD_SLOTS 16384

struct flow_rtt {
	__u64 samples;		/* RTT samples seen by BPF_SOCK_OPS_RTT_CB */
	__u64 absdiff_sum_us;	/* sum of |rtt_i - rtt_{i-1}|, microseconds */
	__u32 last_rtt_us;	/* latest RTT sample */
	__u32 retrans_events;	/* BPF_SOCK_OPS_RETRANS_CB calls */
	__u64 first_seen_ns;	/* bpf_ktime_get_ns() when the monitor first saw it */
	__u64 established_ns;	/* when it became ESTABLISHED under the monitor; 0 = before */
};

struct monitor_config {
	__u64 netns_cookie;	/* only sockets of this netns are monitored */
};

struct flow_record {
	__u64 cookie;		/* socket cookie: the flow id */
	__u64 netns_cookie;
	__u64 cgroup_id;	/* cgroup v2 id of the owning cgroup */
	__u64 ts_ns;		/* bpf_ktime_get_ns() at sampling */
	__u64 bytes_acked;	/* payload bytes acknowledged (RFC 4898 HCThruOctetsAcked) */
	__u64 bytes_sent;	/* payload bytes sent, retransmissions included */
	__u64 bytes_retrans;	/* payload bytes retransmitted */
	__u64 bytes_received;	/* payload bytes received (for receiving sockets) */
	__u64 pacing_rate;	/* sk_pacing_rate, bytes/s (~0 = unlimited) */
	__u64 delivery_rate;	/* latest delivery-rate sample, bytes/s */
	__u64 rtt_samples;	/* from struct flow_rtt */
	__u64 rtt_absdiff_sum_us;
	__u64 established_ns;	/* from struct flow_rtt; lets a new flow's first interval count */
	__u32 saddr[4];		/* network byte order; IPv4 in saddr[0] */
	__u32 daddr[4];
	__u32 srtt_us;
	__u32 rttvar_us;
	__u32 min_rtt_us;
	__u32 last_rtt_us;
	__u32 snd_cwnd;		/* segments */
	__u32 snd_ssthresh;	/* segments (0x7fffffff = infinite) */
	__u32 mss;
	__u32 delivered;	/* segments delivered */
	__u32 delivered_ce;	/* segments delivered that the peer reported CE-marked */
	__u32 lost;		/* segments marked lost, total */
	__u32 total_retrans;	/* segments retransmitted, total */
	__u32 segs_out;
	__u32 data_segs_out;
	__u32 retrans_events;
	__u32 packets_out;	/* in flight (not yet acked) */
	__u32 sndq_bytes;	/* write_seq - snd_una: queued + in flight */
	__u32 write_seq;	/* wraps; the sampler diffs it mod 2^32 */
	__u32 cb_flags;		/* bpf_sock_ops_cb_flags */
	__u16 family;
	__u16 sport;		/* host byte order */
	__u16 dport;		/* host byte order */
	__u8 state;		/* TCP_ESTABLISHED = 1, ... */
	__u8 ca_state;		/* TCP_CA_Open = 0, ..., TCP_CA_Loss = 4 */
	char cca[16];		/* current congestion control */
	/* appended for ECN (issue 6); older fields keep their offsets */
	__u32 ecn_flags;	/* tcp_sock.ecn_flags: bit 0 RFC 3168 mode, bit 4 AccECN mode
				 * (both = AccECN negotiation pending), bit 3 ECT seen */
	__u32 received_ce;	/* segments received CE-marked (receiver side, AccECN's ACE count) */
};

#endif /* CCSWITCH_MONITOR_H */
