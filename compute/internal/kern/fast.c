// Float32 kernels of the CPU backend (see fast.h). Written as plain loops
// that GCC vectorises; target_clones builds AVX-512, AVX2 and baseline
// versions and picks one at load time, so one binary runs on any x86-64.
// sqrtf without errno lets Adam vectorise; no kernel here reads errno.
#pragma GCC optimize("no-math-errno", "no-trapping-math")
#include <math.h>
#include <string.h>
#include "fast.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define CLONES
#endif

CLONES void tt_relu(const float *restrict x, float *y, long n) {
	for (long i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
}

CLONES void tt_relu_bwd(const float *restrict y, const float *dy, float *dx, long n) {
	for (long i = 0; i < n; i++) dx[i] = y[i] > 0 ? dy[i] : 0;
}

CLONES void tt_add(float *dst, const float *a, const float *b, long n) {
	for (long i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

CLONES void tt_addto(float *restrict dst, const float *restrict src, long n) {
	for (long i = 0; i < n; i++) dst[i] += src[i];
}

CLONES void tt_mul(float *dst, const float *a, const float *b, long n) {
	for (long i = 0; i < n; i++) dst[i] = a[i] * b[i];
}

// y [rows, groups, m] += b[groups] broadcast over m (m = 1: a bias per
// column of [rows, groups]), then ReLU when relu.
CLONES void tt_bias_act(float *restrict y, const float *restrict b, long rows, long groups, long m, int relu) {
	if (m == 1) {
		for (long r = 0; r < rows; r++) {
			float *yr = y + r * groups;
			if (relu) {
				for (long j = 0; j < groups; j++) {
					float v = yr[j] + (b ? b[j] : 0);
					yr[j] = v > 0 ? v : 0;
				}
			} else if (b) {
				for (long j = 0; j < groups; j++) yr[j] += b[j];
			}
		}
		return;
	}
	for (long r = 0; r < rows; r++) {
		for (long g = 0; g < groups; g++) {
			float *yp = y + (r * groups + g) * m;
			float bg = b ? b[g] : 0;
			if (relu) {
				for (long i = 0; i < m; i++) {
					float v = yp[i] + bg;
					yp[i] = v > 0 ? v : 0;
				}
			} else if (b) {
				for (long i = 0; i < m; i++) yp[i] += bg;
			}
		}
	}
}

// The backward of tt_bias_act: dy [rows, groups, m] becomes dy ⊙ (y > 0)
// when relu (in place), and db[g] (when db) the sum of dy over rows and m,
// added to db's values when add.
CLONES void tt_act_bwd_sum(const float *restrict y, float *restrict dy, float *restrict db, long rows, long groups,
                           long m, int relu, int add) {
	if (db && !add) memset(db, 0, groups * sizeof(float));
	if (m == 1) {
		for (long r = 0; r < rows; r++) {
			const float *yr = y + r * groups;
			float *dr = dy + r * groups;
			if (relu)
				for (long j = 0; j < groups; j++) dr[j] = yr[j] > 0 ? dr[j] : 0;
			if (db)
				for (long j = 0; j < groups; j++) db[j] += dr[j];
		}
		return;
	}
	for (long r = 0; r < rows; r++) {
		for (long g = 0; g < groups; g++) {
			const float *yp = y + (r * groups + g) * m;
			float *dp = dy + (r * groups + g) * m;
			float s = 0;
			if (relu) {
				for (long i = 0; i < m; i++) {
					float d = yp[i] > 0 ? dp[i] : 0;
					dp[i] = d;
					s += d;
				}
			} else {
				for (long i = 0; i < m; i++) s += dp[i];
			}
			if (db) db[g] += s;
		}
	}
}

CLONES void tt_sgd(float *restrict p, const float *restrict g, float *restrict buf, long n, float lr, float mom,
                   float damp, float wd, int nesterov, int first) {
	if (!buf) {
		for (long i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
		return;
	}
	float keep = 1 - damp;
	if (first) {
		for (long i = 0; i < n; i++) {
			float d = g[i] + wd * p[i];
			buf[i] = d;
			p[i] -= lr * (nesterov ? d + mom * d : d);
		}
		return;
	}
	if (nesterov) {
		for (long i = 0; i < n; i++) {
			float d = g[i] + wd * p[i];
			float b = mom * buf[i] + keep * d;
			buf[i] = b;
			p[i] -= lr * (d + mom * b);
		}
		return;
	}
	for (long i = 0; i < n; i++) {
		float b = mom * buf[i] + keep * (g[i] + wd * p[i]);
		buf[i] = b;
		p[i] -= lr * b;
	}
}

CLONES void tt_adam(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, long n, float lr,
                    float b1, float b2, float eps, float wd, int decoupled, float step_size, float bc2_sqrt) {
	float shrink = 1 - lr * wd;
	for (long i = 0; i < n; i++) {
		float d = g[i];
		float pi = p[i];
		if (decoupled)
			pi *= shrink;
		else
			d += wd * pi;
		float mi = b1 * m[i] + (1 - b1) * d;
		float vi = b2 * v[i] + (1 - b2) * d * d;
		m[i] = mi;
		v[i] = vi;
		p[i] = pi - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
	}
}

// 2×2 windows, stride 2, no padding: x [planes, h, w] → y [planes, h/2, w/2].
CLONES void tt_maxpool2(const float *restrict x, float *restrict y, long planes, long h, long w) {
	long oh = h / 2, ow = w / 2;
	for (long p = 0; p < planes; p++) {
		const float *xp = x + p * h * w;
		float *yp = y + p * oh * ow;
		for (long oy = 0; oy < oh; oy++) {
			const float *r0 = xp + 2 * oy * w, *r1 = r0 + w;
			float *yr = yp + oy * ow;
			for (long ox = 0; ox < ow; ox++) {
				float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
				float m = a;
				m = b > m ? b : m;
				m = c > m ? c : m;
				m = d > m ? d : m;
				yr[ox] = m;
			}
		}
	}
}

// Routes each dy to the first maximum of its window (the one tt_maxpool2
// returns) and writes 0 elsewhere, every element of dx exactly once.
CLONES void tt_maxpool2_bwd(const float *restrict x, const float *restrict dy, float *restrict dx, long planes, long h,
                            long w) {
	long oh = h / 2, ow = w / 2;
	for (long p = 0; p < planes; p++) {
		const float *xp = x + p * h * w;
		const float *dyp = dy + p * oh * ow;
		float *dxp = dx + p * h * w;
		for (long oy = 0; oy < oh; oy++) {
			const float *r0 = xp + 2 * oy * w, *r1 = r0 + w;
			float *d0 = dxp + 2 * oy * w, *d1 = d0 + w;
			const float *g = dyp + oy * ow;
			for (long ox = 0; ox < ow; ox++) {
				float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
				float m = a;
				m = b > m ? b : m;
				m = c > m ? c : m;
				m = d > m ? d : m;
				int ia = a == m;
				int ib = !ia && b == m;
				int ic = !ia && !ib && c == m;
				int id = !ia && !ib && !ic;
				float gv = g[ox];
				d0[2 * ox] = ia ? gv : 0;
				d0[2 * ox + 1] = ib ? gv : 0;
				d1[2 * ox] = ic ? gv : 0;
				d1[2 * ox + 1] = id ? gv : 0;
			}
			// An odd width leaves a last column no window covers.
			if (w & 1) d0[w - 1] = d1[w - 1] = 0;
		}
		if (h & 1) memset(dxp + (h - 1) * w, 0, w * sizeof(float));
	}
}

// Output columns [lo, hi) whose input column ox*stride - pad + kj is in [0, w).
static inline void valid_range(long w, long ow, long stride, long pad, long kj, long *lo, long *hi) {
	long l = 0, d = pad - kj;
	if (d > 0) l = (d + stride - 1) / stride;
	long e = w - 1 + pad - kj;
	long h = e < 0 ? 0 : e / stride + 1;
	if (h > ow) h = ow;
	if (l > h) l = h;
	*lo = l;
	*hi = h;
}

// Output rows oy whose input row oy*stride - pad + ki is in [0, h), as valid_range.
static inline void valid_rows(long h, long oh, long stride, long pad, long ki, long *lo, long *hi) {
	valid_range(h, oh, stride, pad, ki, lo, hi);
}

// Small output planes (ResNet-18's late stages on 28×28 inputs: 7×7 down to
// 1×1) make column-matrix rows of a few elements, where the general paths'
// per-row bounds, memset and memcpy calls cost more than the copying: those
// go through a copy of the plane with its zero border instead (at most
// SMALL_PADDED elements, on the stack), where every row is a plain strided
// gather, or scatter-add.
#define SMALL_PLANE 64
#define SMALL_PADDED 1024

static inline int small_plane(long h, long w, long pad, long oh, long ow) {
	return oh * ow <= SMALL_PLANE && (h + 2 * pad) * (w + 2 * pad) <= SMALL_PADDED;
}

// im2col of a small plane: col[(ch·kh+ki)·kw+kj, oy·ow+ox] = padded[oy·stride+ki, ox·stride+kj],
// the same values as the general path (0 outside the image).
static void im2col_small(const float *restrict x, float *restrict col, long ld, long c, long h, long w, long kh,
                         long kw, long stride, long pad, long oh, long ow) {
	float buf[SMALL_PADDED];
	long pw = w + 2 * pad;
	// The border stays zero from channel to channel; only the interior is rewritten.
	memset(buf, 0, (h + 2 * pad) * pw * sizeof(float));
	for (long ch = 0; ch < c; ch++) {
		const float *plane = x + ch * h * w;
		for (long y = 0; y < h; y++)
			for (long i = 0; i < w; i++) buf[(y + pad) * pw + pad + i] = plane[y * w + i];
		for (long ki = 0; ki < kh; ki++)
			for (long kj = 0; kj < kw; kj++) {
				float *row = col + ((ch * kh + ki) * kw + kj) * ld;
				if (stride == 1 && ow >= 4) // a contiguous run, worth vectorising
					for (long oy = 0; oy < oh; oy++) {
						const float *src = buf + (oy + ki) * pw + kj;
						for (long ox = 0; ox < ow; ox++) row[oy * ow + ox] = src[ox];
					}
				else
					for (long oy = 0; oy < oh; oy++) {
						const float *src = buf + (oy * stride + ki) * pw + kj;
						for (long ox = 0; ox < ow; ox++) row[oy * ow + ox] = src[ox * stride];
					}
			}
	}
}

// col2im of a small plane: the plane, copied into the padded buffer, gets
// each element's contributions in the general path's order (ki, then kj);
// those that fall on the border are dropped with it.
static void col2im_small(const float *restrict col, float *restrict dx, long ld, long c, long h, long w, long kh,
                         long kw, long stride, long pad, long oh, long ow) {
	float buf[SMALL_PADDED];
	long pw = w + 2 * pad;
	for (long ch = 0; ch < c; ch++) {
		float *plane = dx + ch * h * w;
		memset(buf, 0, (h + 2 * pad) * pw * sizeof(float));
		for (long y = 0; y < h; y++)
			for (long i = 0; i < w; i++) buf[(y + pad) * pw + pad + i] = plane[y * w + i];
		for (long ki = 0; ki < kh; ki++)
			for (long kj = 0; kj < kw; kj++) {
				const float *row = col + ((ch * kh + ki) * kw + kj) * ld;
				if (stride == 1 && ow >= 4) // a contiguous run, worth vectorising
					for (long oy = 0; oy < oh; oy++) {
						float *dst = buf + (oy + ki) * pw + kj;
						for (long ox = 0; ox < ow; ox++) dst[ox] += row[oy * ow + ox];
					}
				else
					for (long oy = 0; oy < oh; oy++) {
						float *dst = buf + (oy * stride + ki) * pw + kj;
						for (long ox = 0; ox < ow; ox++) dst[ox * stride] += row[oy * ow + ox];
					}
			}
		for (long y = 0; y < h; y++)
			for (long i = 0; i < w; i++) plane[y * w + i] = buf[(y + pad) * pw + pad + i];
	}
}

void tt_im2col(const float *restrict x, float *restrict col, long ld, long c, long h, long w, long kh, long kw,
               long stride, long pad, long oh, long ow) {
	// With stride 1 and as many output as input columns (a "same"
	// convolution), the rows of a column-matrix row are one contiguous run
	// of the input plane shifted by (ki-pad)·w + (kj-pad): copy the run at
	// once, then zero the columns that wrapped around a row edge.
	if (small_plane(h, w, pad, oh, ow)) {
		im2col_small(x, col, ld, c, h, w, kh, kw, stride, pad, oh, ow);
		return;
	}
	int same = stride == 1 && ow == w;
	for (long ch = 0; ch < c; ch++) {
		const float *plane = x + ch * h * w;
		for (long ki = 0; ki < kh; ki++) {
			long ylo, yhi;
			valid_rows(h, oh, stride, pad, ki, &ylo, &yhi);
			for (long kj = 0; kj < kw; kj++) {
				float *row = col + ((ch * kh + ki) * kw + kj) * ld;
				long lo, hi;
				valid_range(w, ow, stride, pad, kj, &lo, &hi);
				memset(row, 0, ylo * ow * sizeof(float));
				memset(row + yhi * ow, 0, (oh - yhi) * ow * sizeof(float));
				if (same) {
					if (yhi > ylo) {
						const float *src = plane + (ylo + ki - pad) * w + (kj - pad);
						float *dst = row + ylo * ow;
						long n = (yhi - ylo) * w;
						// The run may start before the plane or end after it by
						// |kj-pad| elements; those land in wrapped columns.
						long skip = 0, cut = 0;
						if (src < plane) skip = plane - src;
						if (src + n > plane + h * w) cut = (src + n) - (plane + h * w);
						memcpy(dst + skip, src + skip, (n - skip - cut) * sizeof(float));
						for (long oy = ylo; oy < yhi; oy++) {
							float *d = row + oy * ow;
							for (long ox = 0; ox < lo; ox++) d[ox] = 0;
							for (long ox = hi; ox < ow; ox++) d[ox] = 0;
						}
					}
					continue;
				}
				for (long oy = ylo; oy < yhi; oy++) {
					float *dst = row + oy * ow;
					const float *src = plane + (oy * stride - pad + ki) * w - pad + kj;
					for (long ox = 0; ox < lo; ox++) dst[ox] = 0;
					if (stride == 1)
						memcpy(dst + lo, src + lo, (hi - lo) * sizeof(float));
					else
						for (long ox = lo; ox < hi; ox++) dst[ox] = src[ox * stride];
					for (long ox = hi; ox < ow; ox++) dst[ox] = 0;
				}
			}
		}
	}
}

// col2im's adjoint trick: with stride 1 and ow == w, zero the wrapped
// columns of the (scratch) column matrix, then add each row's valid rows as
// one contiguous run; the zeros land on neighbours' elements and change
// nothing. col is overwritten in that case.
CLONES void tt_col2im(float *restrict col, float *restrict dx, long ld, long c, long h, long w, long kh, long kw,
                      long stride, long pad, long oh, long ow) {
	if (small_plane(h, w, pad, oh, ow)) {
		col2im_small(col, dx, ld, c, h, w, kh, kw, stride, pad, oh, ow);
		return;
	}
	int same = stride == 1 && ow == w;
	for (long ch = 0; ch < c; ch++) {
		float *plane = dx + ch * h * w;
		for (long ki = 0; ki < kh; ki++) {
			long ylo, yhi;
			valid_rows(h, oh, stride, pad, ki, &ylo, &yhi);
			for (long kj = 0; kj < kw; kj++) {
				float *row = col + ((ch * kh + ki) * kw + kj) * ld;
				long lo, hi;
				valid_range(w, ow, stride, pad, kj, &lo, &hi);
				if (same) {
					if (yhi <= ylo) continue;
					for (long oy = ylo; oy < yhi; oy++) {
						float *s = row + oy * ow;
						for (long ox = 0; ox < lo; ox++) s[ox] = 0;
						for (long ox = hi; ox < ow; ox++) s[ox] = 0;
					}
					float *src = row + ylo * ow;
					float *dst = plane + (ylo + ki - pad) * w + (kj - pad);
					long n = (yhi - ylo) * w;
					long skip = 0, cut = 0;
					if (dst < plane) skip = plane - dst;
					if (dst + n > plane + h * w) cut = (dst + n) - (plane + h * w);
					for (long i = skip; i < n - cut; i++) dst[i] += src[i];
					continue;
				}
				for (long oy = ylo; oy < yhi; oy++) {
					const float *src = row + oy * ow;
					float *dst = plane + (oy * stride - pad + ki) * w - pad + kj;
					if (stride == 1)
						for (long ox = lo; ox < hi; ox++) dst[ox] += src[ox];
					else
						for (long ox = lo; ox < hi; ox++) dst[ox * stride] += src[ox];
				}
			}
		}
	}
}

// Fused epilogue of a convolution followed by ReLU and 2×2 max pooling
// (stride 2), for one sample: conv holds k planes of h×w, plane g at
// conv + g*cs; y and idx [k, h/2, w/2] get act(max of each window + b[g])
// and the window position (0..3, row-major) of its first maximum.
static void bias_act_pool2_c(const float *restrict conv, long cs, const float *restrict b, float *restrict y,
                              float *restrict idx, long k, long h, long w, int relu) {
	long oh = h / 2, ow = w / 2;
	for (long g = 0; g < k; g++) {
		const float *cp = conv + g * cs;
		float bg = b ? b[g] : 0;
		float *yp = y + g * oh * ow, *ip = idx + g * oh * ow;
		for (long oy = 0; oy < oh; oy++) {
			const float *r0 = cp + 2 * oy * w, *r1 = r0 + w;
			for (long ox = 0; ox < ow; ox++) {
				float a = r0[2 * ox], bb = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
				// Selects, not branches, so that the loop vectorises.
				float m1 = bb > a ? bb : a, m2 = d > c ? d : c;
				float m = m2 > m1 ? m2 : m1;
				float at = a == m ? 0.f : bb == m ? 1.f : c == m ? 2.f : 3.f;
				float v = m + bg;
				yp[oy * ow + ox] = relu ? (v > 0 ? v : 0) : v;
				ip[oy * ow + ox] = at;
			}
		}
	}
}

// The backward of tt_bias_act_pool2 for one sample: dconv (planes at
// dconv + g*cs, every element written) gets dy at each window's recorded
// maximum when !relu or y > 0, 0 elsewhere; db[g] gets (or, with add, is
// increased by) the sum of what was routed.
static void pool2_scatter_c(const float *restrict dy, const float *restrict y, const float *restrict idx,
                             float *restrict dconv, long cs, float *restrict db, long k, long h, long w, int relu,
                             int add) {
	long oh = h / 2, ow = w / 2;
	for (long g = 0; g < k; g++) {
		float *dp = dconv + g * cs;
		const float *gp = dy + g * oh * ow, *yp = y + g * oh * ow, *ip = idx + g * oh * ow;
		float sum = 0;
		for (long oy = 0; oy < oh; oy++) {
			float *d0 = dp + 2 * oy * w, *d1 = d0 + w;
			for (long ox = 0; ox < ow; ox++) {
				float v = gp[oy * ow + ox];
				if (relu && !(yp[oy * ow + ox] > 0)) v = 0;
				sum += v;
				float q = ip[oy * ow + ox];
				d0[2 * ox] = q == 0 ? v : 0;
				d0[2 * ox + 1] = q == 1 ? v : 0;
				d1[2 * ox] = q == 2 ? v : 0;
				d1[2 * ox + 1] = q == 3 ? v : 0;
			}
			if (w & 1) d0[w - 1] = d1[w - 1] = 0;
		}
		if (h & 1) memset(dp + (h - 1) * w, 0, w * sizeof(float));
		if (db) db[g] = add ? db[g] + sum : sum;
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// AVX-512 versions of the pooling epilogues: one output row (two input rows)
// per iteration, masked loads and stores for the short rows of small images
// (7 or 14 outputs), the stride-2 pairs split and merged with permutes.
__attribute__((target("avx512f"))) static void bias_act_pool2_avx512(const float *restrict conv, long cs,
                                                                      const float *restrict b, float *restrict y,
                                                                      float *restrict idx, long k, long h, long w,
                                                                      int relu) {
	long oh = h / 2, ow = w / 2;
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
	const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1), two = _mm512_set1_ps(2),
	             three = _mm512_set1_ps(3);
	for (long g = 0; g < k; g++) {
		const float *cp = conv + g * cs;
		__m512 bg = _mm512_set1_ps(b ? b[g] : 0);
		float *yp = y + g * oh * ow, *ip = idx + g * oh * ow;
		for (long oy = 0; oy < oh; oy++) {
			const float *r0 = cp + 2 * oy * w, *r1 = r0 + w;
			for (long ox = 0; ox < ow; ox += 16) {
				long n = ow - ox < 16 ? ow - ox : 16; // outputs this round
				__mmask16 mo = (__mmask16)((1u << n) - 1);
				__mmask16 mlo = (__mmask16)(n >= 8 ? 0xffff : (1u << (2 * n)) - 1);
				__mmask16 mhi = (__mmask16)(n > 8 ? (1u << (2 * (n - 8))) - 1 : 0);
				__m512 l0 = _mm512_maskz_loadu_ps(mlo, r0 + 2 * ox), h0 = _mm512_maskz_loadu_ps(mhi, r0 + 2 * ox + 16);
				__m512 l1 = _mm512_maskz_loadu_ps(mlo, r1 + 2 * ox), h1 = _mm512_maskz_loadu_ps(mhi, r1 + 2 * ox + 16);
				__m512 a = _mm512_permutex2var_ps(l0, even, h0), bb = _mm512_permutex2var_ps(l0, odd, h0);
				__m512 c = _mm512_permutex2var_ps(l1, even, h1), d = _mm512_permutex2var_ps(l1, odd, h1);
				__m512 m = _mm512_max_ps(_mm512_max_ps(a, bb), _mm512_max_ps(c, d));
				// The first position holding the maximum: later matches first,
				// earlier ones overwrite them.
				__m512 at = _mm512_mask_mov_ps(three, _mm512_cmp_ps_mask(c, m, _CMP_EQ_OQ), two);
				at = _mm512_mask_mov_ps(at, _mm512_cmp_ps_mask(bb, m, _CMP_EQ_OQ), one);
				at = _mm512_mask_mov_ps(at, _mm512_cmp_ps_mask(a, m, _CMP_EQ_OQ), zero);
				__m512 v = _mm512_add_ps(m, bg);
				if (relu) v = _mm512_mask_mov_ps(zero, _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v);
				_mm512_mask_storeu_ps(yp + oy * ow + ox, mo, v);
				_mm512_mask_storeu_ps(ip + oy * ow + ox, mo, at);
			}
		}
	}
}

__attribute__((target("avx512f"))) static void pool2_scatter_avx512(const float *restrict dy, const float *restrict y,
                                                                     const float *restrict idx, float *restrict dconv,
                                                                     long cs, float *restrict db, long k, long h,
                                                                     long w, int relu, int add) {
	long oh = h / 2, ow = w / 2;
	const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
	const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
	const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1), two = _mm512_set1_ps(2),
	             three = _mm512_set1_ps(3);
	for (long g = 0; g < k; g++) {
		float *dp = dconv + g * cs;
		const float *gp = dy + g * oh * ow, *yp = y + g * oh * ow, *ip = idx + g * oh * ow;
		__m512 sum = zero;
		for (long oy = 0; oy < oh; oy++) {
			float *d0 = dp + 2 * oy * w, *d1 = d0 + w;
			for (long ox = 0; ox < ow; ox += 16) {
				long n = ow - ox < 16 ? ow - ox : 16;
				__mmask16 mo = (__mmask16)((1u << n) - 1);
				__mmask16 mlo = (__mmask16)(n >= 8 ? 0xffff : (1u << (2 * n)) - 1);
				__mmask16 mhi = (__mmask16)(n > 8 ? (1u << (2 * (n - 8))) - 1 : 0);
				__m512 v = _mm512_maskz_loadu_ps(mo, gp + oy * ow + ox);
				if (relu) {
					__m512 yv = _mm512_maskz_loadu_ps(mo, yp + oy * ow + ox);
					v = _mm512_mask_mov_ps(zero, _mm512_cmp_ps_mask(yv, zero, _CMP_GT_OQ), v);
				}
				sum = _mm512_add_ps(sum, v);
				__m512 q = _mm512_maskz_loadu_ps(mo, ip + oy * ow + ox);
				__m512 e0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, zero, _CMP_EQ_OQ), v);
				__m512 o0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, one, _CMP_EQ_OQ), v);
				__m512 e1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, two, _CMP_EQ_OQ), v);
				__m512 o1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, three, _CMP_EQ_OQ), v);
				_mm512_mask_storeu_ps(d0 + 2 * ox, mlo, _mm512_permutex2var_ps(e0, lo, o0));
				_mm512_mask_storeu_ps(d0 + 2 * ox + 16, mhi, _mm512_permutex2var_ps(e0, hi, o0));
				_mm512_mask_storeu_ps(d1 + 2 * ox, mlo, _mm512_permutex2var_ps(e1, lo, o1));
				_mm512_mask_storeu_ps(d1 + 2 * ox + 16, mhi, _mm512_permutex2var_ps(e1, hi, o1));
			}
			if (w & 1) d0[w - 1] = d1[w - 1] = 0;
		}
		if (h & 1) memset(dp + (h - 1) * w, 0, w * sizeof(float));
		float s = _mm512_reduce_add_ps(sum);
		if (db) db[g] = add ? db[g] + s : s;
	}
}

int tt_portable; // tests set it to run the portable paths on any machine

const char *tt_clone_level(void) {
#if defined(__clang__)
	return "baseline"; // no target_clones: CLONES is empty
#else
	// The clone GCC's resolver runs for CLONES' functions.
	if (__builtin_cpu_supports("avx512f")) return "avx512f";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2+fma";
	return "baseline";
#endif
}

int tt_has_avx512(void) {
	static int has = -1;
	if (has < 0) has = __builtin_cpu_supports("avx512f") ? 1 : 0;
	return has && !tt_portable;
}
#define has_avx512 tt_has_avx512
#else
int tt_portable;
const char *tt_clone_level(void) { return "baseline"; }
int tt_has_avx512(void) { return 0; }
#define has_avx512 tt_has_avx512
#define bias_act_pool2_avx512 bias_act_pool2_c
#define pool2_scatter_avx512 pool2_scatter_c
#endif

void tt_bias_act_pool2(const float *conv, long cs, const float *b, float *y, float *idx, long k, long h, long w,
                       int relu) {
	if (has_avx512())
		bias_act_pool2_avx512(conv, cs, b, y, idx, k, h, w, relu);
	else
		bias_act_pool2_c(conv, cs, b, y, idx, k, h, w, relu);
}

void tt_pool2_scatter(const float *dy, const float *y, const float *idx, float *dconv, long cs, float *db, long k,
                      long h, long w, int relu, int add) {
	if (has_avx512())
		pool2_scatter_avx512(dy, y, idx, dconv, cs, db, k, h, w, relu, add);
	else
		pool2_scatter_c(dy, y, idx, dconv, cs, db, k, h, w, relu, add);
}
