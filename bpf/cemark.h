/* SPDX-License-Identifier: GPL-2.0 */
/* CE marker (cemark.bpf.c): kernel/user contract, mirrored in cemark.py. */
#ifndef CCSWITCH_CEMARK_H
#define CCSWITCH_CEMARK_H

struct cemark_cfg {
	__u32 prob_u32;		/* marking probability * 2^32 (0: off; 2^32 - 1: every skb) */
	__u32 _pad;
};

struct cemark_stats {
	__u64 segs;		/* segments seen */
	__u64 marked_segs;	/* segments set to CE (ECN-capable ones only) */
};

#endif /* CCSWITCH_CEMARK_H */
