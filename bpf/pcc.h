/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Contract between the switcher and PCC for "full" inheritance.
 *
 * Before switching a socket to pcc with inherit=full, the switcher stores a
 * seed in the socket-local storage map `ccs_pcc_seed` (BPF_MAP_TYPE_SK_STORAGE,
 * owned by pcc.bpf.o, shared with the switcher by map fd).  pcc's init() reads
 * and deletes it: a valid seed starts PCC in its rate-control (probing) phase
 * at rate_bps with min_rtt_us as its RTT baseline, instead of slow start.
 */
#ifndef CCSWITCH_PCC_H
#define CCSWITCH_PCC_H

struct pcc_seed {
	__u64 rate_bps;		/* starting sending rate, bits/s (old CCA's delivery rate) */
	__u32 min_rtt_us;	/* RTT baseline */
	__u32 valid;		/* 1 when written by the switcher */
};

#endif /* CCSWITCH_PCC_H */
