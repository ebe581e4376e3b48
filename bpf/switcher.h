/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Switcher: kernel/user contract.
 *
 * User space writes one struct switch_request per socket cookie into
 * `ccs_sw_req`, runs the iter/tcp program `ccs_switch` once, and reads one
 * struct switch_result per cookie from `ccs_sw_res`.  A cookie without a
 * result was not found among the sockets of the netns (closed or foreign).
 */
#ifndef CCSWITCH_SWITCHER_H
#define CCSWITCH_SWITCHER_H

#define CCS_MAX_SWITCH 16384

enum ccs_inherit {
	CCS_INHERIT_LIMITED = 0,	/* connection state only (kernel's tcp_reinit_congestion_control) */
	CCS_INHERIT_FULL = 1,		/* + seed the new algorithm's private state */
};

struct switch_request {
	char cca[16];
	__u32 inherit;			/* enum ccs_inherit */
	__u32 _pad;
};

struct switch_result {
	__s32 err;			/* 0 or -errno from bpf_setsockopt */
	__u32 seeded;			/* 1 when private state was seeded (full) */
	__u64 ts_ns;
	__u32 cwnd_before, cwnd_after;
	__u32 ssthresh_before, ssthresh_after;
	__u32 srtt_us_before, srtt_us_after;
	__u32 min_rtt_us_before, min_rtt_us_after;
	char cca_before[16];
	char cca_after[16];
};

#endif /* CCSWITCH_SWITCHER_H */
