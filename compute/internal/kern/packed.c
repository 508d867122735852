// A Linear layer's forward on AVX-512: y = x·wᵀ + b, then ReLU.
//
// OpenBLAS picks its kernels by processor model, and the version Debian
// ships (0.3.21) takes its AVX2 (Haswell) kernel on processors it does not
// know, also where AVX-512 runs at full width: half the processor's
// multiply-add rate. This is the one product of the forward pass that can
// use it without OpenBLAS: w is packed once per call into panels of 32
// output columns (k-major), and a 12×32 kernel keeps 24 accumulators of 16
// floats in registers, broadcasting x's values. The bias is added when the
// first block of k is stored, the ReLU when the last one is.
//
// Packing w costs out·in copies against n·out·in multiply-adds, so the Go
// side calls this only for batches of packedMinRows rows or more (linear.go).
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

// kernel multiplies rows [0, mr) of x (stride ldx; mr <= MR, rows past mr
// repeat the last one and are not stored) by the kc×NR panel p and stores
// columns [0, nr) into y (stride ldy): adding b (NULL: none) when first,
// adding y's values otherwise, and taking the ReLU when last && relu.
// Inlined with MR a constant, so the accumulators stay in registers.
__attribute__((target("avx512f"), always_inline)) static inline void kernel(const int MR, const float *restrict x,
                                                                            long ldx, long mr, const float *restrict p,
                                                                            long kc, float *restrict y, long ldy,
                                                                            long nr, const float *restrict b,
                                                                            int first, int last, int relu) {
	__m512 c0[12], c1[12];
	const float *xr[12];
	for (int i = 0; i < MR; i++) {
		xr[i] = x + (i < mr ? i : mr - 1) * ldx;
		c0[i] = _mm512_setzero_ps();
		c1[i] = _mm512_setzero_ps();
	}
	for (long k = 0; k < kc; k++) {
		__m512 b0 = _mm512_load_ps(p + k * NR), b1 = _mm512_load_ps(p + k * NR + 16);
#pragma GCC unroll 12
		for (int i = 0; i < MR; i++) {
			__m512 a = _mm512_set1_ps(xr[i][k]);
			c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
			c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
		}
	}
	__mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
	__mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
	__m512 add0 = _mm512_setzero_ps(), add1 = _mm512_setzero_ps(), zero = _mm512_setzero_ps();
	if (first && b) {
		add0 = _mm512_maskz_loadu_ps(m0, b);
		add1 = _mm512_maskz_loadu_ps(m1, b + 16);
	}
	for (int i = 0; i < MR && i < mr; i++) {
		float *yr = y + i * ldy;
		if (!first) {
			add0 = _mm512_maskz_loadu_ps(m0, yr);
			add1 = _mm512_maskz_loadu_ps(m1, yr + 16);
		}
		__m512 v0 = _mm512_add_ps(c0[i], add0), v1 = _mm512_add_ps(c1[i], add1);
		if (last && relu) {
			v0 = _mm512_max_ps(v0, zero);
			v1 = _mm512_max_ps(v1, zero);
		}
		_mm512_mask_storeu_ps(yr, m0, v0);
		_mm512_mask_storeu_ps(yr + 16, m1, v1);
	}
}

__attribute__((target("avx512f"))) static void kernel12(const float *x, long ldx, long mr, const float *p, long kc,
                                                        float *y, long ldy, long nr, const float *b, int first,
                                                        int last, int relu) {
	kernel(12, x, ldx, mr, p, kc, y, ldy, nr, b, first, last, relu);
}

__attribute__((target("avx512f"))) static void kernel4(const float *x, long ldx, long mr, const float *p, long kc,
                                                       float *y, long ldy, long nr, const float *b, int first,
                                                       int last, int relu) {
	kernel(4, x, ldx, mr, p, kc, y, ldy, nr, b, first, last, relu);
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
		int first = k0 == 0, last = k0 + kk >= in;
		const float *blk = p + k0 * panels * NR;
		for (long i = 0; i < n; i += 12) {
			long mr = n - i < 12 ? n - i : 12;
			for (long j = 0; j < panels; j++) {
				long nr = out - j * NR < NR ? out - j * NR : NR;
				const float *bj = b ? b + j * NR : NULL;
				if (mr <= 4)
					kernel4(x + i * in + k0, in, mr, blk + j * NR * kk, kk, y + i * out + j * NR, out, nr, bj,
					        first, last, relu);
				else
					kernel12(x + i * in + k0, in, mr, blk + j * NR * kk, kk, y + i * out + j * NR, out, nr, bj,
					         first, last, relu);
			}
		}
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

int tt_linear_packed(const float *x, const float *w, const float *b, float *y, long n, long in, long out, int relu) {
	if (n < 1 || in < 1 || out < 1 || !tt_has_avx512()) return 0;
	long need = tt_linear_pack_len(in, out);
	if (need > bufLen) {
		free(buf);
		buf = aligned_alloc(64, need * sizeof(float));
		if (!buf) {
			bufLen = 0;
			return 0;
		}
		bufLen = need;
	}
	tt_linear_pack(w, in, out, buf);
	run(x, buf, b, y, n, in, out, relu);
	return 1;
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
#endif
