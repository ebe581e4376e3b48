/* SPDX-License-Identifier: GPL-2.0 */
/*
 * PCC Vivace: the utility of an MI (pcc.bpf.c, header comment),
 *
 *	u(x) = x^0.9 - 900 * x * dRTT/dT - 11.35 * x * L,
 *
 * in Q16 fixed point: log2 by normalise-and-square, 2^f by a Taylor
 * polynomial, x^0.9 = exp2(0.9 * log2(x)).  log2, exp2 and the utility are
 * global subprograms (PCC_SUBPROG): the verifier checks each once.
 */
#ifndef CCSWITCH_PCC_UTILITY_BPF_H
#define CCSWITCH_PCC_UTILITY_BPF_H

#include "pcc_defs.bpf.h"

/* ---- Fixed-point log2 / exp2 / x^0.9 --------------------------------------- */

/* log2(v) in Q16, v > 0. */
PCC_SUBPROG __s64 pcc_log2_q16(__u64 v)
{
	__u32 p = pcc_fls64(v) - 1;	/* integer part */
	__u64 m;			/* mantissa in [1, 2), Q30 */
	__s64 frac = 0;
	int i;

	if (!v)
		return -(64LL << PCC_FP_SHIFT);
	m = p >= 30 ? v >> (p - 30) : v << (30 - p);
	/* squaring doubles log2(m); passing 2 yields the next fraction bit */
	for (i = 1; i <= PCC_FP_SHIFT; i++) {
		__u64 bit;

		m = (m * m) >> 30;
		bit = m >> 31;			/* m in [1, 4): 1 iff m >= 2 */
		m >>= bit;
		frac |= bit << (PCC_FP_SHIFT - i);
	}
	return ((__s64)p << PCC_FP_SHIFT) + frac;
}

/* 2^y for y in Q16, result in Q16 (saturates at 2^46, 0 below 2^-16). */
PCC_SUBPROG __u64 pcc_exp2_q16(__s64 y)
{
	__s64 ip = y >> PCC_FP_SHIFT;			/* floor(y) */
	__u64 f = (__u64)(y & (PCC_FP_ONE - 1)) << 14;	/* fraction, Q30 */
	__u64 p;

	if (ip > 30)
		return 1ULL << 46;
	if (ip < -PCC_FP_SHIFT)
		return 0;
	/* 2^f = e^(f ln 2): Taylor series to degree 7, Horner, Q30 */
	p = 16377;					/* ln2^7 / 7! */
	p = 165394 + ((p * f) >> 30);			/* ln2^6 / 6! */
	p = 1431680 + ((p * f) >> 30);			/* ln2^5 / 5! */
	p = 10327387 + ((p * f) >> 30);			/* ln2^4 / 4! */
	p = 59597083 + ((p * f) >> 30);			/* ln2^3 / 3! */
	p = 257941248 + ((p * f) >> 30);		/* ln2^2 / 2! */
	p = 744261118 + ((p * f) >> 30);		/* ln2 */
	p = (1ULL << 30) + ((p * f) >> 30);		/* 2^f in [1, 2) */
	/* times 2^ip, Q30 -> Q16 */
	if (ip >= 14)
		return p << (ip - 14);
	return p >> (14 - ip);
}

/* x^0.9 for x in Q16, result in Q16. */
static __always_inline __u64 pcc_pow09_q16(__u64 x_q16)
{
	__s64 lg;

	if (!x_q16)
		return 0;
	lg = pcc_log2_q16(x_q16) - ((__s64)PCC_FP_SHIFT << PCC_FP_SHIFT);
	return pcc_exp2_q16((lg * PCC_EXPONENT_Q16) >> PCC_FP_SHIFT);
}

/* u = x^0.9 - 900 x dRTT/dT - 11.35 x L, all Q16 */
PCC_SUBPROG __s64 pcc_utility(__u64 rate, __s64 grad_q16, __u64 loss_q16)
{
	__u64 x = pcc_mbps_q16(rate);
	__s64 u = pcc_pow09_q16(x);

	u -= (((__s64)x * grad_q16) >> PCC_FP_SHIFT) * PCC_LAT_COEF;
	u -= (__s64)(((x * loss_q16) >> PCC_FP_SHIFT) * PCC_LOSS_COEF_X100 / 100);
	return u;
}

#endif /* CCSWITCH_PCC_UTILITY_BPF_H */
