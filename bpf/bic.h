/* SPDX-License-Identifier: GPL-2.0 */
/*
 * BIC (bic.bpf.c): constants shared with user space (bic.py).
 */
#ifndef CCSWITCH_BIC_H
#define CCSWITCH_BIC_H

#ifndef BIC_NAME	/* -D for renamed test builds */
#define BIC_NAME "bic"
#endif

/* include/net/tcp.h, tcp_congestion_ops.flags: usable as any namespace's default and by unprivileged sockets */
#ifndef TCP_CONG_NON_RESTRICTED
#define TCP_CONG_NON_RESTRICTED	(1U << 0)
#endif

#endif /* CCSWITCH_BIC_H */
