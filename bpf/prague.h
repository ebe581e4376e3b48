/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Prague (prague.bpf.c): constants shared with user space.
 *
 * Kernel facts probed on Linux 6.18 (docs/l4s-kernel.md has the commands):
 * struct_ops tcp_congestion_ops.flags accepts bits 0..4, i.e. the AccECN
 * negotiation flags below are present; bit 5 is rejected (-EINVAL).  These
 * are #defines in include/net/tcp.h, so they are not in vmlinux.h/BTF.
 */
#ifndef CCSWITCH_PRAGUE_H
#define CCSWITCH_PRAGUE_H

#ifndef PRAGUE_NAME	/* -D for renamed test builds (tests/test_struct_ops_cleanup.py) */
#define PRAGUE_NAME "prague"
#endif

/* include/net/tcp.h, tcp_congestion_ops.flags */
#define TCP_CONG_NON_RESTRICTED		(1U << 0)
#define TCP_CONG_NEEDS_ECN		(1U << 1)	/* ECT on every packet, negotiate ECN */
#define TCP_CONG_NEEDS_ACCECN		(1U << 2)	/* negotiate AccECN whatever the sysctl */
#define TCP_CONG_ECT_1_NEGOTIATION	(1U << 3)	/* ECT(1) instead of ECT(0) on the SYN (only) */
#define TCP_CONG_NO_FALLBACK_RFC3168	(1U << 4)

/* tcp_sock.ecn_flags (include/net/tcp.h) */
#define TCP_ECN_MODE_RFC3168		(1U << 0)
#define TCP_ECN_QUEUE_CWR		(1U << 1)
#define TCP_ECN_DEMAND_CWR		(1U << 2)
#define TCP_ECN_SEEN			(1U << 3)
#define TCP_ECN_MODE_ACCECN		(1U << 4)
#define TCP_ECN_MODE_ANY		(TCP_ECN_MODE_RFC3168 | TCP_ECN_MODE_ACCECN)

/*
 * DSCP that marks Prague's packets as L4S for a DualPI2 classifying by DSCP
 * (the data packets of this kernel carry ECT(0), not ECT(1): see
 * docs/l4s-kernel.md).  The IP TOS byte is DSCP << 2 | ECN; TCP keeps the two
 * ECN bits under its own control.  Value: the CS5 (40) class is not the
 * NQB (45) DSCP of RFC 9956, which means "does not build a queue", not
 * "responds to L4S marks" (a Prague flow builds a shallow queue).
 */
#define PRAGUE_DSCP 40

/*
 * RTT independence (prague.bpf.c header): the tunables, one struct alone in
 * the object's section .data.tunables (the libbpf map of that name), read on
 * every ACK.  bpf/prague.py PragueTunables mirrors the layout.
 */
#define PRAGUE_RTT_SCALING_NONE		0	/* DCTCP: RTT-dependent */
#define PRAGUE_RTT_SCALING_RATE		1	/* rate of a flow at the reference RTT (default) */
#define PRAGUE_RTT_SCALING_SCALABLE	2	/* tcp_prague's; not implemented: same as RATE */
#define PRAGUE_RTT_SCALING_ADDITIVE	3	/* as a flow with the reference RTT added to its own */

#define PRAGUE_RTT_TARGET_US		25000	/* reference RTT T (tcp_prague's prague_rtt_target) */
#define PRAGUE_RTT_TRANSITION		4	/* rounds after slow start before scaling starts */
#define PRAGUE_MAX_SCALED_RTT_US	100000	/* no scaling above (tcp_prague's MAX_SCALED_RTT) */

struct prague_tunables {
	__u32 rtt_scaling;	/* PRAGUE_RTT_SCALING_* */
	__u32 rtt_target_us;	/* reference RTT T, us; 0 = no scaling */
	__u32 rtt_transition;	/* rounds */
};

/* Counters user space reads (prague.bpf.c header, "Reductions made without us") */
struct prague_stats {
	__u64 repairs;		/* reductions the stack entered without ssthresh(), redone */
};

#endif /* CCSWITCH_PRAGUE_H */
