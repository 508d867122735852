// GEMM on AVX-512: C = op(A)·op(B) (+ C), and a Linear layer's forward
// y = x·wᵀ + b, then ReLU, fused.
//
// OpenBLAS picks its kernels by processor model, and the version Debian
// ships (0.3.21) takes its AVX2 (Haswell) kernel on processors it does not
// know, also where AVX-512 runs at full width: half the processor's
// multiply-add rate. Here op(B) is packed, one block of k at a time, into
// panels of 32 columns (k-major), and a 12×32 kernel keeps 24 accumulators
// of 16 floats in registers, broadcasting op(A)'s values (rows of A, or
// columns when A is transposed). A bias is added when the first block of k
// is stored, a ReLU when the last one is.
//
// Packing costs n·k copies against m·n·k multiply-adds, so the Go side
// calls this only for m of packedMinRows rows or more (blas.go, linear.go);
// a Linear layer whose weights stay packs them once (tt_linear_pack,
// Model.Freeze) and runs any batch size.
#include <stdlib.h>
#include "fast.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define NR 32 // output columns of a panel and of the kernel: two vectors

// pack copies w[0:nr][0:kc] (row stride ldw) to p[kc][NR], zero-padding
// columns nr to NR.
static void pack(const float *restrict w, long ldw, long nr, long kc,
                                                    float *restrict p) {
	for (long k = 0; k < kc; k++) {
		long j = 0;
		for (; j < nr; j++) p[k * NR + j] = w[j * ldw + k];
		for (; j < NR; j++) p[k * NR + j] = 0;
	}
}

// packN copies b[0:kc][0:nr] (row stride ldb: op(B) given as it is) to
// p[kc][NR], zero-padding columns nr to NR.
static void packN(const float *restrict b, long ldb, long nr, long kc, float *restrict p) {
	for (long k = 0; k < kc; k++) {
		long j = 0;
		for (; j < nr; j++) p[k * NR + j] = b[k * ldb + j];
		for (; j < NR; j++) p[k * NR + j] = 0;
	}
}

// kernel multiplies rows [0, mr) of A (element (i, k) at a[i*rs + k*cs];
// UNIT: cs is 1; mr <= MR, rows past mr repeat the last one and are not
// stored) by the kc×NR panel p and stores columns [0, nr) into y (stride
// ldy): adding y's values when addy, else b (NULL: none), and taking the
// ReLU when relu. Inlined with MR and UNIT constants, so the accumulators
// stay in registers.
__attribute__((target("avx512f"), always_inline)) static inline void
kernel(const int MR, const int UNIT, const float *restrict a, long rs, long cs, long mr, const float *restrict p,
       long kc, float *restrict y, long ldy, long nr, const float *restrict b, int addy, int relu) {
	__m512 c0[12], c1[12];
	const float *ar[12];
	for (int i = 0; i < MR; i++) {
		ar[i] = a + (i < mr ? i : mr - 1) * rs;
		c0[i] = _mm512_setzero_ps();
		c1[i] = _mm512_setzero_ps();
	}
	for (long k = 0; k < kc; k++) {
		__m512 b0 = _mm512_load_ps(p + k * NR), b1 = _mm512_load_ps(p + k * NR + 16);
#pragma GCC unroll 12
		for (int i = 0; i < MR; i++) {
			__m512 v = _mm512_set1_ps(UNIT ? ar[i][k] : ar[i][k * cs]);
			c0[i] = _mm512_fmadd_ps(v, b0, c0[i]);
			c1[i] = _mm512_fmadd_ps(v, b1, c1[i]);
		}
	}
	__mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
	__mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
	__m512 add0 = _mm512_setzero_ps(), add1 = _mm512_setzero_ps(), zero = _mm512_setzero_ps();
	if (!addy && b) {
		add0 = _mm512_maskz_loadu_ps(m0, b);
		add1 = _mm512_maskz_loadu_ps(m1, b + 16);
	}
	for (int i = 0; i < MR && i < mr; i++) {
		float *yr = y + i * ldy;
		if (addy) {
			add0 = _mm512_maskz_loadu_ps(m0, yr);
			add1 = _mm512_maskz_loadu_ps(m1, yr + 16);
		}
		__m512 v0 = _mm512_add_ps(c0[i], add0), v1 = _mm512_add_ps(c1[i], add1);
		if (relu) {
			v0 = _mm512_max_ps(v0, zero);
			v1 = _mm512_max_ps(v1, zero);
		}
		_mm512_mask_storeu_ps(yr, m0, v0);
		_mm512_mask_storeu_ps(yr + 16, m1, v1);
	}
}

#define KERNEL(name, MR, UNIT)                                                                                      \
	__attribute__((target("avx512f"))) static void name(const float *a, long rs, long cs, long mr, const float *p, \
	                                                    long kc, float *y, long ldy, long nr, const float *b,        \
	                                                    int addy, int relu) {                                        \
		kernel(MR, UNIT, a, rs, cs, mr, p, kc, y, ldy, nr, b, addy, relu);                                     \
	}
KERNEL(kernel12, 12, 1)
KERNEL(kernel4, 4, 1)
KERNEL(kernel12s, 12, 0)
KERNEL(kernel4s, 4, 0)

// block runs the kernels over rows [0, m) of A and the panels of one block
// of k (kk long) at p: y[m][n] (+)= A·panels, bias when !addy, ReLU when
// relu.
__attribute__((target("avx512f"))) static void block(const float *a, long rs, long cs, long m, const float *p,
                                                     long kk, float *y, long ldy, long n, const float *b, int addy,
                                                     int relu) {
	long panels = (n + NR - 1) / NR;
	for (long i = 0; i < m; i += 12) {
		long mr = m - i < 12 ? m - i : 12;
		for (long j = 0; j < panels; j++) {
			long nr = n - j * NR < NR ? n - j * NR : NR;
			const float *bj = b ? b + j * NR : NULL;
			const float *ai = a + i * rs, *pj = p + j * NR * kk;
			float *yij = y + i * ldy + j * NR;
			if (cs == 1) {
				if (mr <= 4)
					kernel4(ai, rs, 1, mr, pj, kk, yij, ldy, nr, bj, addy, relu);
				else
					kernel12(ai, rs, 1, mr, pj, kk, yij, ldy, nr, bj, addy, relu);
			} else if (mr <= 4)
				kernel4s(ai, rs, cs, mr, pj, kk, yij, ldy, nr, bj, addy, relu);
			else
				kernel12s(ai, rs, cs, mr, pj, kk, yij, ldy, nr, bj, addy, relu);
		}
	}
}

// packBytes is how much of w one block of k holds at most: the panels of a
// block stay in the core's L2 cache while every row of x passes them.
#define packBytes (384 * 1024)

// blockK is the length of the blocks of k: all of in where w's panels fit
// packBytes, else in split evenly into blocks that do (at least 64 long).
static long blockK(long in, long out) {
	long panels = (out + NR - 1) / NR;
	long most = packBytes / (panels * NR * (long)sizeof(float));
	if (most < 64) most = 64;
	if (in <= most) return in;
	long blocks = (in + most - 1) / most;
	return (in + blocks - 1) / blocks;
}

long tt_linear_pack_len(long in, long out) { return (out + NR - 1) / NR * NR * in; }

// The packed layout: blocks of k one after the other, each its panels of
// NR columns one after the other, each panel kk rows of NR floats.
void tt_linear_pack(const float *w, long in, long out, float *p) {
	long panels = (out + NR - 1) / NR, kc = blockK(in, out);
	for (long k0 = 0; k0 < in; k0 += kc) {
		long kk = in - k0 < kc ? in - k0 : kc;
		float *blk = p + k0 * panels * NR;
		for (long j = 0; j < panels; j++) {
			long nr = out - j * NR < NR ? out - j * NR : NR;
			pack(w + j * NR * in + k0, in, nr, kk, blk + j * NR * kk);
		}
	}
}

__attribute__((target("avx512f"))) static void run(const float *x, const float *p, const float *b, float *y, long n,
                                                   long in, long out, int relu) {
	long panels = (out + NR - 1) / NR, kc = blockK(in, out);
	for (long k0 = 0; k0 < in; k0 += kc) {
		long kk = in - k0 < kc ? in - k0 : kc;
		block(x + k0, in, 1, n, p + k0 * panels * NR, kk, y, out, out, b, k0 > 0, relu && k0 + kk >= in);
	}
}

int tt_linear_prepacked(const float *x, const float *p, const float *b, float *y, long n, long in, long out,
                        int relu) {
	if (n < 1 || in < 1 || out < 1 || !tt_has_avx512()) return 0;
	run(x, p, b, y, n, in, out, relu);
	return 1;
}

// Each thread keeps the buffer it packs into (cgo calls run on the calling
// goroutine's thread, one call at a time).
static __thread float *buf;
static __thread long bufLen;

// gemm is y[m][n] = op(A)·op(B) (+ y when addy; + b, then ReLU) with one
// block of k packed at a time into the thread's buffer. op(A)'s element
// (i, k) is a[i*rs + k*cs]; op(B) is b given as [k][n] (ldb) or, when tb,
// as [n][k] (ldb). Returns 0 if the buffer cannot be had.
__attribute__((target("avx512f"))) static int gemm(const float *a, long rs, long cs, int tb, const float *bm,
                                                   long ldb, long m, long n, long k, float *y, long ldy,
                                                   const float *bias, int addy, int relu) {
	long panels = (n + NR - 1) / NR, kc = blockK(k, n);
	long need = panels * NR * kc;
	if (need > bufLen) {
		free(buf);
		buf = aligned_alloc(64, need * sizeof(float));
		if (!buf) {
			bufLen = 0;
			return 0;
		}
		bufLen = need;
	}
	for (long k0 = 0; k0 < k; k0 += kc) {
		long kk = k - k0 < kc ? k - k0 : kc;
		for (long j = 0; j < panels; j++) {
			long nr = n - j * NR < NR ? n - j * NR : NR;
			if (tb)
				pack(bm + j * NR * ldb + k0, ldb, nr, kk, buf + j * NR * kk);
			else
				packN(bm + k0 * ldb + j * NR, ldb, nr, kk, buf + j * NR * kk);
		}
		block(a + k0 * cs, rs, cs, m, buf, kk, y, ldy, n, bias, addy || k0 > 0, relu && k0 + kk >= k);
	}
	return 1;
}

int tt_linear_packed(const float *x, const float *w, const float *b, float *y, long n, long in, long out, int relu) {
	if (n < 1 || in < 1 || out < 1 || !tt_has_avx512()) return 0;
	return gemm(x, in, 1, 1, w, in, n, out, in, y, out, b, 0, relu);
}

int tt_sgemm(int ta, int tb, long m, long n, long k, const float *a, long lda, const float *b, long ldb, int beta1,
             float *c, long ldc) {
	if (m < 1 || n < 1 || k < 1 || !tt_has_avx512()) return 0;
	return gemm(a, ta ? 1 : lda, ta ? lda : 1, tb, b, ldb, m, n, k, c, ldc, NULL, beta1, 0);
}
#else
long tt_linear_pack_len(long in, long out) { return 0; }
void tt_linear_pack(const float *w, long in, long out, float *p) {}
int tt_linear_prepacked(const float *x, const float *p, const float *b, float *y, long n, long in, long out,
                        int relu) {
	return 0;
}
int tt_linear_packed(const float *x, const float *w, const float *b, float *y, long n, long in, long out, int relu) {
	return 0;
}
int tt_sgemm(int ta, int tb, long m, long n, long k, const float *a, long lda, const float *b, long ldb, int beta1,
             float *c, long ldc) {
	return 0;
}
#endif
