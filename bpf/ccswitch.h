/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Definitions shared by ccswitch's kernel programs.  Structures that cross
 * the kernel/user boundary live in the header of the feature that owns them
 * (monitor.h, switcher.h, pcc.h); this file holds only the common plumbing.
 */
#ifndef CCSWITCH_H
#define CCSWITCH_H

#define CCS_CA_NAME_MAX 16	/* TCP_CA_NAME_MAX */

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif
#ifndef SOL_TCP
#define SOL_TCP 6
#endif
#ifndef TCP_CONGESTION
#define TCP_CONGESTION 13
#endif

#endif /* CCSWITCH_H */
