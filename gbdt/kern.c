// Hot loops of package gbdt (see kern.h). Plain C compiled with -O3; no
// fast-math and no contraction of a*b+c into FMA, so float results are the
// Go reference's bit for bit.
#pragma GCC optimize("fp-contract=off")
#include <math.h>
#include <string.h>

#include "kern.h"

// Bin of x among the upper bounds u[0..nb-1]: the number of bounds <= x,
// clamped to nb-1; NaN gives nb (the missing code).
static inline long bin_of(const float *u, long nb, float x) {
	if (x != x) return nb;
	if (nb == 0 || x < u[0]) return 0;
	// Branchless: the answer lies in [b-u, b-u+n].
	const float *b = u;
	long n = nb;
	while (n > 1) {
		long h = n >> 1;
		b = b[h] <= x ? b + h : b;
		n -= h;
	}
	long lo = (b - u) + (*b <= x);
	return lo < nb ? lo : nb - 1;
}

#define BIN(NAME, T)                                                                              \
	void NAME(const float *x, long n, long nf, const float *vals, const uint32_t *ptr, T *out) {  \
		for (long i = 0; i < n; i++) {                                                            \
			const float *xi = x + i * nf;                                                         \
			T *oi = out + i * nf;                                                                 \
			for (long f = 0; f < nf; f++) {                                                       \
				oi[f] = (T)bin_of(vals + ptr[f], (long)(ptr[f + 1] - ptr[f]), xi[f]);             \
			}                                                                                     \
		}                                                                                         \
	}
BIN(gb_bin_u8, uint8_t)
BIN(gb_bin_u16, uint16_t)

// Histogram of (g, h) pairs: hist[2*(off[f]+code)] += (g, h) of each row,
// two rows at a time (their codes read in order; each feature's meta[f] =
// off[f] | skip[f] << 32 read once for both: one load where two arrays
// took two, and the pair 15-25% faster than one row at a time). The code
// skip[f] (a feature's most frequent code on this rank when it is frequent
// enough; an out-of-range code for none) is not added to: its slot is the
// node's total minus the feature's other slots, exact since every sum is of
// integers below 2^53 (so the result is bit for bit the plain loop's).
// That halves the work on tables with a dominant value, such as images'
// zero pixels. tot receives the node's (g, h) totals.
#define HIST_PREFETCH 16

// Whether feature f has a skipped code (*k), its slots [*lo, *hi).
static inline int skipped(const uint64_t *meta, const uint32_t *off, long f, long *k, long *lo, long *hi) {
	uint64_t c = meta[f] >> 32;
	*lo = off[f];
	*hi = off[f + 1];
	*k = (long)c;
	return c < (uint64_t)(*hi - *lo);
}
// Prefetches the codes and gradients (W values a row) of the rows
// HIST_PREFETCH and HIST_PREFETCH+1 ahead of i.
#define PREFETCH2(W)                                                                  \
	do {                                                                              \
		long p0 = rows[i + HIST_PREFETCH], p1 = rows[i + HIST_PREFETCH + 1];          \
		__builtin_prefetch(bins + p0 * nf);                                           \
		__builtin_prefetch(gh + (W) * p0);                                            \
		__builtin_prefetch(bins + p1 * nf);                                           \
		__builtin_prefetch(gh + (W) * p1);                                            \
	} while (0)
#define HIST(NAME, T)                                                                                    \
	void NAME(const T *bins, long nf, const uint32_t *rows, long n, const double *gh, const uint32_t *off, \
	          const uint64_t *meta, double *hist, double *tot) {                                         \
		double tg = 0, th = 0;                                                                           \
		long i = 0;                                                                                      \
		for (; i + 1 < n; i += 2) {                                                                      \
			long r0 = rows[i], r1 = rows[i + 1];                                                         \
			if (i + HIST_PREFETCH + 1 < n) PREFETCH2(2);                                                 \
			const T *b0 = bins + r0 * nf, *b1 = bins + r1 * nf;                                          \
			double g0 = gh[2 * r0], h0 = gh[2 * r0 + 1], g1 = gh[2 * r1], h1 = gh[2 * r1 + 1];           \
			tg += g0;                                                                                    \
			th += h0;                                                                                    \
			tg += g1;                                                                                    \
			th += h1;                                                                                    \
			for (long f = 0; f < nf; f++) {                                                              \
				uint64_t mt = meta[f], sk = mt >> 32, o = mt & 0xffffffffu;                              \
				uint64_t c0 = b0[f], c1 = b1[f];                                                         \
				if (c0 != sk) {                                                                          \
					double *s = hist + 2 * (o + c0);                                                     \
					s[0] += g0;                                                                          \
					s[1] += h0;                                                                          \
				}                                                                                        \
				if (c1 != sk) {                                                                          \
					double *s = hist + 2 * (o + c1);                                                     \
					s[0] += g1;                                                                          \
					s[1] += h1;                                                                          \
				}                                                                                        \
			}                                                                                            \
		}                                                                                                \
		for (; i < n; i++) {                                                                             \
			long r = rows[i];                                                                            \
			const T *b = bins + r * nf;                                                                  \
			double g = gh[2 * r], h = gh[2 * r + 1];                                                     \
			tg += g;                                                                                     \
			th += h;                                                                                     \
			for (long f = 0; f < nf; f++) {                                                              \
				uint64_t mt = meta[f];                                                                   \
				uint64_t c = b[f];                                                                       \
				if (c != (mt >> 32)) {                                                                   \
					double *s = hist + 2 * ((mt & 0xffffffffu) + c);                                     \
					s[0] += g;                                                                           \
					s[1] += h;                                                                           \
				}                                                                                        \
			}                                                                                            \
		}                                                                                                \
		for (long f = 0; f < nf; f++) {                                                                  \
			long k, lo, hi;                                                                              \
			if (!skipped(meta, off, f, &k, &lo, &hi)) continue;                                          \
			double sg = 0, sh = 0;                                                                       \
			for (long j = lo; j < hi; j++) {                                                             \
				sg += hist[2 * j];                                                                       \
				sh += hist[2 * j + 1];                                                                   \
			}                                                                                            \
			hist[2 * (lo + k)] = tg - sg;                                                                \
			hist[2 * (lo + k) + 1] = th - sh;                                                            \
		}                                                                                                \
		tot[0] = tg;                                                                                     \
		tot[1] = th;                                                                                     \
	}
HIST(gb_hist_u8, uint8_t)
HIST(gb_hist_u16, uint16_t)

// The same histogram on packed pairs (quantised training): gh[r] is row r's
// g·2^32 + h, g and h integers with every sum of h over rows below 2^32 and
// of |g| below 2^31, so one 64-bit addition adds both and the sums unpack
// exactly (h: the low 32 bits, g: the rest, an arithmetic shift). acc
// (off[nf] slots) is the scratch the rows are added into; hist receives the
// unpacked (g, h) of every slot as doubles, 2 per slot; tot the packed
// total. Half the memory traffic of the double histogram and one add a
// feature instead of two; the skip code is recovered as in HIST.
#define HISTP(NAME, T)                                                                                      \
	void NAME(const T *bins, long nf, const uint32_t *rows, long n, const int64_t *gh, const uint32_t *off, \
	          const uint64_t *meta, int64_t *acc, double *hist, int64_t *tot) {                             \
		long slots = off[nf];                                                                               \
		for (long s = 0; s < slots; s++) acc[s] = 0;                                                        \
		int64_t t = 0;                                                                                      \
		long i = 0;                                                                                         \
		for (; i + 1 < n; i += 2) {                                                                         \
			long r0 = rows[i], r1 = rows[i + 1];                                                            \
			if (i + HIST_PREFETCH + 1 < n) PREFETCH2(1);                                                    \
			const T *b0 = bins + r0 * nf, *b1 = bins + r1 * nf;                                             \
			int64_t v0 = gh[r0], v1 = gh[r1];                                                               \
			t += v0 + v1;                                                                                   \
			for (long f = 0; f < nf; f++) {                                                                 \
				uint64_t mt = meta[f], sk = mt >> 32, o = mt & 0xffffffffu;                                 \
				uint64_t c0 = b0[f], c1 = b1[f];                                                            \
				if (c0 != sk) acc[o + c0] += v0;                                                            \
				if (c1 != sk) acc[o + c1] += v1;                                                            \
			}                                                                                               \
		}                                                                                                   \
		for (; i < n; i++) {                                                                                \
			long r = rows[i];                                                                               \
			const T *b = bins + r * nf;                                                                     \
			int64_t v = gh[r];                                                                              \
			t += v;                                                                                         \
			for (long f = 0; f < nf; f++) {                                                                 \
				uint64_t mt = meta[f];                                                                      \
				uint64_t c = b[f];                                                                          \
				if (c != (mt >> 32)) acc[(mt & 0xffffffffu) + c] += v;                                      \
			}                                                                                               \
		}                                                                                                   \
		for (long f = 0; f < nf; f++) {                                                                     \
			long k, lo, hi;                                                                                 \
			if (!skipped(meta, off, f, &k, &lo, &hi)) continue;                                             \
			int64_t s = 0;                                                                                  \
			for (long j = lo; j < hi; j++) s += acc[j];                                                     \
			acc[lo + k] = t - s;                                                                            \
		}                                                                                                   \
		for (long s = 0; s < slots; s++) {                                                                  \
			int64_t a = acc[s];                                                                             \
			hist[2 * s] = (double)(a >> 32);                                                                \
			hist[2 * s + 1] = (double)(uint32_t)a;                                                          \
		}                                                                                                   \
		*tot = t;                                                                                           \
	}
HISTP(gb_hist_packed_u8, uint8_t)
HISTP(gb_hist_packed_u16, uint16_t)

// Stable partition of rows[0..n) by a split, on one feature's codes in a
// column (col[r] is row r's code; binMatrix keeps a column-major copy for
// this): left rows (code <= split, or missing and dleft) stay in front in
// order, right rows follow in order. Returns the number of left rows. A
// node's rows are ascending, so the reads walk the column forward: on 1M
// rows × 28 features, 30% faster than reading the row-major matrix. (A
// branch-free version, writing each row to both sides and advancing one,
// measured 40% slower: BenchmarkKernels.)
#define PARTCOL(NAME, T)                                                                                        \
	long NAME(const T *col, uint32_t *rows, long n, long split, long miss, int dleft, uint32_t *scratch) {  \
		long nl = 0, nr = 0;                                                                            \
		for (long i = 0; i < n; i++) {                                                                  \
			uint32_t r = rows[i];                                                                       \
			long c = col[r];                                                                            \
			long left = c == miss ? (long)dleft : (long)(c <= split);                                   \
			if (left)                                                                                   \
				rows[nl++] = r;                                                                         \
			else                                                                                        \
				scratch[nr++] = r;                                                                      \
		}                                                                                               \
		for (long i = 0; i < nr; i++) rows[nl + i] = scratch[i];                                        \
		return nl;                                                                                      \
	}
PARTCOL(gb_partition_col_u8, uint8_t)
PARTCOL(gb_partition_col_u16, uint16_t)

// Column-major copy of a row-major code matrix: out[f*n + i] = in[i*nf + f].
#define TRANSPOSE(NAME, T)                                                   \
	void NAME(const T *in, long n, long nf, T *out) {                        \
		for (long i0 = 0; i0 < n; i0 += 64) {                                \
			long i1 = i0 + 64 < n ? i0 + 64 : n;                             \
			for (long f = 0; f < nf; f++)                                    \
				for (long i = i0; i < i1; i++) out[f * n + i] = in[i * nf + f]; \
		}                                                                    \
	}
TRANSPOSE(gb_transpose_u8, uint8_t)
TRANSPOSE(gb_transpose_u16, uint16_t)

static double threshold_l1(double w, double alpha) {
	if (w > alpha) return w - alpha;
	if (w < -alpha) return w + alpha;
	return 0;
}

static double calc_weight(const gb_params *p, double g, double h) {
	if (h < p->mcw || h <= 0) return 0;
	double dw = -threshold_l1(g, p->alpha) / (h + p->lambda);
	if (p->mds != 0 && fabs(dw) > p->mds) dw = copysign(p->mds, dw);
	return dw;
}

static double calc_gain(const gb_params *p, double g, double h) {
	if (h < p->mcw || h <= 0) return 0;
	if (p->mds == 0) {
		double t = threshold_l1(g, p->alpha);
		return t * t / (h + p->lambda);
	}
	double w = calc_weight(p, g, h);
	double ret = -(2 * g * w + (h + p->lambda) * w * w);
	if (p->alpha != 0) ret += p->alpha * fabs(w);
	return ret;
}

// The best split over features feats of a node's histogram (quantised sums,
// real = q / scale): for each feature, every bin boundary with missing values
// right, then (when the node has missing values of the feature) missing left
// with every boundary from "all present values right". The first maximum in
// that order wins, as grow.go's bestLocal. An empty bin repeats the previous
// candidate, which a later equal gain never replaces: it is skipped. (A
// version computing the gains of a feature in a vectorised loop measured no
// faster: the scalar loop skips the divisions of invalid candidates.)
void gb_best_split(const double *hist, const uint32_t *off, const uint32_t *ptr, const int32_t *miss, const int64_t *feats,
                   long nfeats, double gq, double hq, double sg, double sh, const gb_params *p, gb_split *out) {
	// The scales are powers of two: multiplying by the inverse is exact.
	double isg = 1 / sg, ish = 1 / sh;
	double G = gq * isg, H = hq * ish;
	double parent = calc_gain(p, G, H);
	double mcw = p->mcw;
	gb_split best = {0};
#define TRY(F, B, DL, GL, HL)                                                      \
	do {                                                                           \
		double hr_ = hq - (HL);                                                    \
		if ((HL) > 0 && hr_ > 0) {                                                 \
			double HLr = (HL) * ish, HRr = hr_ * ish;                              \
			if (HLr >= mcw && HRr >= mcw) {                                        \
				double GLr = (GL) * isg;                                           \
				double gain = calc_gain(p, GLr, HLr) + calc_gain(p, G - GLr, HRr) - parent; \
				if (!best.ok || gain > best.gain) {                                \
					best.gain = gain;                                              \
					best.feat = (F);                                               \
					best.bin = (B);                                                \
					best.dleft = (DL);                                             \
					best.gl = (GL);                                                \
					best.hl = (HL);                                                \
					best.ok = 1;                                                   \
				}                                                                  \
			}                                                                      \
		}                                                                          \
	} while (0)
	for (long i = 0; i < nfeats; i++) {
		long f = feats[i];
		long o = off[f];
		long nb = (long)(ptr[f + 1] - ptr[f]);
		const double *h = hist + 2 * o;
		double mg = 0, mh = 0;
		if (miss[f] >= 0) {
			mg = h[2 * nb];
			mh = h[2 * nb + 1];
		}
		double gl = 0, hl = 0;
		for (long b = 0; b < nb; b++) {
			if (h[2 * b] == 0 && h[2 * b + 1] == 0) continue;
			gl += h[2 * b];
			hl += h[2 * b + 1];
			TRY(f, b, 0, gl, hl);
		}
		if (mh == 0 && mg == 0) continue;
		gl = mg;
		hl = mh;
		TRY(f, -1, 1, gl, hl);
		for (long b = 0; b < nb - 1; b++) {
			if (h[2 * b] == 0 && h[2 * b + 1] == 0) continue;
			gl += h[2 * b];
			hl += h[2 * b + 1];
			TRY(f, b, 1, gl, hl);
		}
	}
#undef TRY
	*out = best;
}

void gb_sub(double *dst, const double *src, long n) {
	for (long i = 0; i < n; i++) dst[i] -= src[i];
}

// gh[2i], gh[2i+1] = g[i*k+j]·sg, h[i*k+j]·sh rounded to the nearest integer,
// ties to even (rint in the default rounding mode: math.RoundToEven).
void gb_quantise(const double *g, const double *h, long n, long k, long j, double sg, double sh, double *gh) {
	for (long i = 0; i < n; i++) {
		gh[2 * i] = rint(g[i * k + j] * sg);
		gh[2 * i + 1] = rint(h[i * k + j] * sh);
	}
}

// gh[i] = g·2^32 + h with g, h = g[i*k+j]·sg, h[i*k+j]·sh rounded to the
// nearest integer, ties to even (h ≥ 0; see gb_hist_packed_u8).
void gb_quantise_packed(const double *g, const double *h, long n, long k, long j, double sg, double sh, int64_t *gh) {
	for (long i = 0; i < n; i++) {
		int64_t gq = (int64_t)rint(g[i * k + j] * sg);
		int64_t hq = (int64_t)rint(h[i * k + j] * sh);
		gh[i] = gq * 4294967296LL + hq;
	}
}

// out[0], out[1] = the sums over rows of gh[2r], gh[2r+1] (a leaf's rows:
// ascending but scattered, hence the prefetch).
void gb_row_sums(const double *gh, const uint32_t *rows, long n, double *out) {
	double g = 0, h = 0;
	for (long i = 0; i < n; i++) {
		if (i + HIST_PREFETCH < n) __builtin_prefetch(gh + 2 * (long)rows[i + HIST_PREFETCH]);
		long r = rows[i];
		g += gh[2 * r];
		h += gh[2 * r + 1];
	}
	out[0] = g;
	out[1] = h;
}

// AUC's list of this rank's rows, unweighted (auc.go's localList, its Go
// reference): the rows' keys (the order-preserving bits of pred[i*k+cl],
// sketch.go's key) with the label in the low bit, radix-sorted as
// radixSortHi sorts them (a, tmp: n each), then one entry per distinct key
// with its positive and negative counts (ks, ps, ns: n each). Returns the
// number of entries.
static inline uint32_t gb_key(float x) {
	if (x == 0) x = 0;
	uint32_t b;
	memcpy(&b, &x, 4);
	return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// LSD radix passes over a (n elements of T, tmp the other buffer) on the
// digits of bits bits from bit first, the digits' counts already in cnt
// (2^bits a pass); a pass whose digit every element shares is skipped.
// Returns the buffer that holds the sorted elements.
#define RADIX(NAME, T)                                                                            \
	static T *NAME(T *a, T *tmp, long n, uint32_t *cnt, int bits, int first, int passes) {        \
		long D = 1L << bits;                                                                      \
		for (int pass = 0; pass < passes && n > 1; pass++) {                                      \
			int shift = first + bits * pass;                                                      \
			uint32_t *c = cnt + pass * D;                                                         \
			if (c[(a[0] >> shift) & (D - 1)] == (uint32_t)n) continue;                            \
			uint32_t sum = 0;                                                                     \
			for (long d = 0; d < D; d++) {                                                        \
				uint32_t v = c[d];                                                                \
				c[d] = sum;                                                                       \
				sum += v;                                                                         \
			}                                                                                     \
			for (long i = 0; i < n; i++) {                                                        \
				T x = a[i];                                                                       \
				tmp[c[(x >> shift) & (D - 1)]++] = x;                                             \
			}                                                                                     \
			T *t = a;                                                                             \
			a = tmp;                                                                              \
			tmp = t;                                                                              \
		}                                                                                         \
		return a;                                                                                 \
	}
RADIX(gb_radix32, uint32_t)
RADIX(gb_radix64, uint64_t)

// One entry per distinct key of the sorted a (KEY(x) the key, the low bit
// the label) with its positive and negative counts; returns the entries.
#define COMPACT(NAME, T, KEY)                                                     \
	static long NAME(const T *a, long n, uint32_t *ks, uint64_t *ps, uint64_t *ns) { \
		long m = -1;                                                              \
		for (long i = 0; i < n; i++) {                                            \
			T x = a[i];                                                           \
			uint32_t kk = KEY(x);                                                 \
			if (m < 0 || ks[m] != kk) {                                           \
				m++;                                                              \
				ks[m] = kk;                                                       \
				ps[m] = 0;                                                        \
				ns[m] = 0;                                                        \
			}                                                                     \
			uint64_t p = x & 1;                                                   \
			ps[m] += p;                                                           \
			ns[m] += 1 - p;                                                       \
		}                                                                         \
		return m + 1;                                                             \
	}
#define KEY32(x) (((x) >> 1) | 0x80000000u)
#define KEY64(x) ((uint32_t)((x) >> 32))
COMPACT(gb_compact32, uint32_t, KEY32)
COMPACT(gb_compact64, uint64_t, KEY64)

// Predictions in [0, 2) (probabilities: every AUC's) have keys 10xx…: the
// 30 bits below and the label fit 32 bits, which halves the sort's memory
// traffic, and 2 passes of 15 bits on bits 1..30 sort them (25% faster than
// 3 of 10; the low bit, the label, rides along: an entry sums its rows
// whatever their order): gb_auc_rows' sort. Else the 64-bit sort of
// key << 32 | label in 3 passes of 11 bits. cnt is 2^16 counters of scratch.
long gb_auc_local(const float *pred, const float *label, long n, long k, long cl, uint64_t *a, uint64_t *tmp, uint32_t *ks,
                  uint64_t *ps, uint64_t *ns, uint32_t *cnt) {
	enum { B64 = 11, D64 = 1 << B64 };
	uint64_t P;
	switch (gb_auc_rows(pred, label, n, k, cl, (uint32_t *)a, (uint32_t *)tmp, cnt, &P)) {
	case 0:
		return gb_compact32((uint32_t *)a, n, ks, ps, ns);
	case 1:
		return gb_compact32((uint32_t *)tmp, n, ks, ps, ns);
	}
	memset(cnt, 0, sizeof(uint32_t) * 3 * D64);
	for (long i = 0; i < n; i++) {
		float y = label[i];
		uint64_t pos = k > 1 ? (long)y == cl : y >= 0.5f;
		uint64_t x = (uint64_t)gb_key(pred[i * k + cl]) << 32 | pos;
		a[i] = x;
		cnt[(x >> 32) & (D64 - 1)]++;
		cnt[D64 + ((x >> (32 + B64)) & (D64 - 1))]++;
		cnt[2 * D64 + (x >> (32 + 2 * B64))]++;
	}
	return gb_compact64(gb_radix64(a, tmp, n, cnt, B64, 32, 3), n, ks, ps, ns);
}

// Two lists' part of AUC's area (auc.go's partArea, its Go reference, for
// two ranks' lists): merged in key order, area2 += pos·(2·negBelow + neg)
// at each distinct key, in 128 bits (out: hi, lo).
void gb_auc_merge2(const uint32_t *ka, const uint64_t *pa, const uint64_t *na, long la, const uint32_t *kb,
                   const uint64_t *pb, const uint64_t *nb, long lb, uint64_t negBelow, uint64_t *out) {
	unsigned __int128 area = 0;
	long i = 0, j = 0;
	while (i < la || j < lb) {
		uint64_t pos, neg;
		if (j == lb || (i < la && ka[i] < kb[j])) {
			pos = pa[i];
			neg = na[i];
			i++;
		} else if (i == la || kb[j] < ka[i]) {
			pos = pb[j];
			neg = nb[j];
			j++;
		} else {
			pos = pa[i] + pb[j];
			neg = na[i] + nb[j];
			i++;
			j++;
		}
		area += (unsigned __int128)pos * (2 * negBelow + neg);
		negBelow += neg;
	}
	out[0] = (uint64_t)(area >> 64);
	out[1] = (uint64_t)area;
}

// AUC's wire tags (auc.go's appendAUCList, its Go reference): tags[i] =
// pos | neg << 1 for one positive or one negative, else 3; returns the
// number of 3s.
long gb_auc_tags(const uint64_t *pos, const uint64_t *neg, long n, uint8_t *tags) {
	long e = 0;
	for (long i = 0; i < n; i++) {
		uint64_t p = pos[i], q = neg[i];
		int one = (p + q == 1) & (p <= 1);
		tags[i] = one ? (uint8_t)(p | q << 1) : 3;
		e += !one;
	}
	return e;
}

// The inverse for the tags 1 and 2 (decodeAUCLists, its Go reference):
// returns the number of 3s (their pos and neg are left for the caller), or
// -1 - i for an invalid tag at i, or -1 - n - i when keys[i] does not
// exceed keys[i-1].
long gb_auc_untag(const uint8_t *tags, const uint32_t *keys, long n, uint64_t *pos, uint64_t *neg) {
	long e = 0;
	for (long i = 0; i < n; i++) {
		uint8_t t = tags[i];
		if ((uint8_t)(t - 1) < 2) {
			pos[i] = t & 1;
			neg[i] = t >> 1;
		} else if (t == 3) {
			e++;
		} else {
			return -1 - i;
		}
	}
	for (long i = 1; i < n; i++)
		if (keys[i] <= keys[i - 1]) return -1 - n - i;
	return e;
}

// AUC's list of this rank's rows by row (auc.go's localList): the rows'
// x = key << 1 | label sorted by the key (2 passes of 15 bits on bits
// 1..30, the label riding along: see gb_auc_local) and left uncompacted: no entries, no tags on the wire,
// and gb_auc_rows_area merges them as they are. a, tmp: n each; cnt: 2^16.
// Returns 0 when the sorted rows are in a, 1 in tmp, -1 when some key is
// not 10xx… (predictions outside [0, 2): gb_auc_local's 64-bit sort
// instead); P: the positive rows.
long gb_auc_rows(const float *pred, const float *label, long n, long k, long cl, uint32_t *a, uint32_t *tmp, uint32_t *cnt,
                 uint64_t *P) {
	enum { B32 = 15, D32 = 1 << B32 };
	memset(cnt, 0, sizeof(uint32_t) * 2 * D32);
	uint32_t bad = 0;
	uint64_t p = 0;
	for (long i = 0; i < n; i++) {
		float y = label[i];
		uint32_t pos = k > 1 ? (long)y == cl : y >= 0.5f;
		uint32_t key = gb_key(pred[i * k + cl]);
		bad |= (key >> 30) ^ 2;
		uint32_t x = key << 1 | pos;
		a[i] = x;
		p += pos;
		cnt[(x >> 1) & (D32 - 1)]++;
		cnt[D32 + ((x >> (1 + B32)) & (D32 - 1))]++;
	}
	if (bad) return -1;
	*P = p;
	return gb_radix32(a, tmp, n, cnt, B32, 1, 2) == a ? 0 : 1;
}

// Two lists of rows (gb_auc_rows' x, ascending by x >> 1; b may be empty)
// merged by key, and their part of AUC's area (auc.go's aucRowsArea, its Go
// reference): the rows of one key are one entry of pos positives and neg
// negatives, area2 += pos·(2·negBelow + neg), in 128 bits (out: hi, lo).
// Branch-free: the lists' next rows and the labels are coin flips.
void gb_auc_rows_area(const uint32_t *a, long la, const uint32_t *b, long lb, uint64_t negBelow, uint64_t *out) {
	unsigned __int128 area = 0;
	uint64_t nb = negBelow, cp = 0, cn = 0;
	uint32_t ck = 0;
	long i = 0, j = 0;
#define GB_ROW(x)                                                          \
	do {                                                                   \
		uint32_t key = (x) >> 1, pos = (x) & 1;                            \
		int next = key != ck;                                              \
		area += (unsigned __int128)(next ? cp : 0) * (2 * nb + cn);        \
		nb += next ? cn : 0;                                               \
		cp = next ? 0 : cp;                                                \
		cn = next ? 0 : cn;                                                \
		cp += pos;                                                         \
		cn += 1 - pos;                                                     \
		ck = key;                                                          \
	} while (0)
	while (i < la && j < lb) {
		uint32_t xa = a[i], xb = b[j];
		int ta = (xa >> 1) <= (xb >> 1);
		uint32_t x = ta ? xa : xb;
		i += ta;
		j += 1 - ta;
		GB_ROW(x);
	}
	for (; i < la; i++) GB_ROW(a[i]);
	for (; j < lb; j++) GB_ROW(b[j]);
#undef GB_ROW
	area += (unsigned __int128)cp * (2 * nb + cn);
	out[0] = (uint64_t)(area >> 64);
	out[1] = (uint64_t)area;
}

// The first i whose row's key (x >> 1) is below row i-1's, or -1 when the
// rows ascend (decodeAUCLists' check of a list by row; a loop without an
// exit, which the compiler vectorises, then the search when it failed).
long gb_auc_rows_order(const uint32_t *rows, long n) {
	uint32_t bad = 0;
	for (long i = 1; i < n; i++) bad |= (rows[i] >> 1) < (rows[i - 1] >> 1);
	if (!bad) return -1;
	for (long i = 1; i < n; i++)
		if ((rows[i] >> 1) < (rows[i - 1] >> 1)) return i;
	return -1;
}
