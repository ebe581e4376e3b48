// SPDX-License-Identifier: GPL-2.0
/*
 * CE marker: a tc (clsact) program that sets CE on ECN-capable packets with
 * a fixed probability, independently of any queue.  This kernel has no
 * marking qdisc (no red, fq_codel, pie, dualpi2), so this is how tests and
 * experiments produce real CE marks on the kernel's receive path without
 * the emulator: the receiver's TCP sees CE, feeds it back (classic ECE or
 * AccECN's ACE counter) and the sender's delivered_ce counts it.
 *
 * One Bernoulli trial per skb: a GSO/GRO skb of n segments is marked as a
 * whole (bpf_skb_ecn_set_ce on the outer header; segmentation copies it),
 * so the expected fraction of marked segments is still `prob`, with more
 * variance than per-packet marking.  Not-ECT packets are never touched.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "cemark.h"

char LICENSE[] SEC("license") = "GPL";

#define TC_ACT_OK_ 0

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cemark_cfg);
} ccs_cemark_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cemark_stats);
} ccs_cemark_stats SEC(".maps");

SEC("tc")
int ccs_cemark(struct __sk_buff *skb)
{
	__u32 zero = 0, segs = skb->gso_segs ? skb->gso_segs : 1;
	struct cemark_cfg *cfg = bpf_map_lookup_elem(&ccs_cemark_cfg, &zero);
	struct cemark_stats *st = bpf_map_lookup_elem(&ccs_cemark_stats, &zero);

	if (!cfg || !st)
		return TC_ACT_OK_;
	__sync_fetch_and_add(&st->segs, segs);
	if (cfg->prob_u32 && bpf_get_prandom_u32() < cfg->prob_u32 &&
	    bpf_skb_ecn_set_ce(skb) == 1)
		__sync_fetch_and_add(&st->marked_segs, segs);
	return TC_ACT_OK_;
}
