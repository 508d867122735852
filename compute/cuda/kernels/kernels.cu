// Kernels of tempotrain's CUDA backend (compute/cuda). Each one mirrors a
// CPU kernel of compute/internal/kern and is checked against the same float64
// reference by compute/computetest (on a GPU, and on the CPU through the
// emulator in compute/cuda/internal/emu, which compiles this file as C++).
//
// Conventions, which the Go side (compute/cuda/internal/gpu/kernels.go) and
// the emulator rely on:
//   - every parameter is 8 bytes: a pointer, i64 (long long), u64 or double,
//     so that the launcher passes an array of 64-bit words;
//   - grids and blocks are one-dimensional; element-wise kernels loop with a
//     grid stride, reductions use one block per channel or row of exactly
//     TT_RED threads and only __syncthreads (no warp intrinsics), which keeps
//     their sums in a fixed order: the same bits on every run;
//   - index arithmetic is 32-bit: the host refuses tensors of 2^31 elements
//     or more.
//
// Regenerate the PTX after any change: go generate ./compute/cuda (gen.sh).

#ifndef TT_EMU
#define TT_KERNEL extern "C" __global__ void
#define TT_DEVICE static __device__ __forceinline__
#endif

typedef long long i64;
typedef unsigned long long u64;

// Threads of a reduction block; the host launches reductions with exactly this.
#define TT_RED 256

#define TT_FOR(i, n) for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < (int)(n); i += (int)(blockDim.x * gridDim.x))

// tt_block_sum returns the sum of v over the block (every thread gets it).
// sh holds TT_RED doubles; the tree has a fixed shape, so the order of the
// additions never changes.
TT_DEVICE double tt_block_sum(double v, double *sh) {
	int t = threadIdx.x;
	sh[t] = v;
	__syncthreads();
	for (int s = TT_RED / 2; s > 0; s >>= 1) {
		if (t < s) sh[t] += sh[t + s];
		__syncthreads();
	}
	double r = sh[0];
	__syncthreads();
	return r;
}

// ---- element-wise -------------------------------------------------------

TT_KERNEL tt_fill(float *y, i64 n, double v) {
	float f = (float)v;
	TT_FOR(i, n) y[i] = f;
}

TT_KERNEL tt_copy(float *y, const float *x, i64 n) {
	TT_FOR(i, n) y[i] = x[i];
}

// y may alias a or b.
TT_KERNEL tt_add(float *y, const float *a, const float *b, i64 n) {
	TT_FOR(i, n) y[i] = a[i] + b[i];
}

TT_KERNEL tt_addto(float *y, const float *x, i64 n) {
	TT_FOR(i, n) y[i] += x[i];
}

TT_KERNEL tt_mul(float *y, const float *a, const float *b, i64 n) {
	TT_FOR(i, n) y[i] = a[i] * b[i];
}

// y may alias x; NaN maps to 0 as on the CPU.
TT_KERNEL tt_relu(const float *x, float *y, i64 n) {
	TT_FOR(i, n) {
		float v = x[i];
		y[i] = v > 0 ? v : 0.f;
	}
}

// dx may alias dy.
TT_KERNEL tt_relu_bwd(const float *y, const float *dy, float *dx, i64 n) {
	TT_FOR(i, n) dx[i] = y[i] > 0 ? dy[i] : 0.f;
}

// splitmix64's finaliser over (seed, i): kern.Hash64, bit for bit.
TT_DEVICE u64 tt_hash64(u64 seed, u64 i) {
	u64 z = seed + (i + 1) * 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

// kern.DropoutMask: element i is 0 when the top 24 bits of Hash64(seed, i)
// fall under thr = p·2^24, else keep = 1/(1-p) (rounded to float by the host
// as by the CPU).
TT_KERNEL tt_dropout_mask(float *m, i64 n, u64 seed, u64 thr, double keep) {
	float k = (float)keep;
	TT_FOR(i, n) m[i] = (tt_hash64(seed, (u64)i) >> 40) < thr ? 0.f : k;
}

// kern.BiasAct in place: y [rows, groups, m] += b[group] (b may be null),
// then max(·, 0) when relu.
TT_KERNEL tt_bias_act(float *y, const float *b, i64 rows, i64 groups, i64 m, i64 relu) {
	int g = (int)groups, mm = (int)m;
	TT_FOR(i, rows * groups * m) {
		float v = y[i];
		if (b) v += b[i / mm % g];
		if (relu && v < 0) v = 0;
		y[i] = v;
	}
}

// kern.ActBackwardSum, one block per group: with relu, dy = 0 where
// !(y > 0) (in place); db[group] = the sum of dy over rows and m (db may be
// null: masking only).
TT_KERNEL tt_act_bwd_sum(const float *y, float *dy, float *db, i64 rows, i64 groups, i64 m, i64 relu) {
	__shared__ double sh[TT_RED];
	int g = blockIdx.x, mm = (int)m, cnt = (int)(rows * m);
	double acc = 0;
	for (int e = threadIdx.x; e < cnt; e += TT_RED) {
		int r = e / mm, k = e - r * mm;
		int i = (r * (int)groups + g) * mm + k;
		float v = dy[i];
		if (relu && !(y[i] > 0)) {
			v = 0;
			dy[i] = 0;
		}
		acc += v;
	}
	if (!db) return; // uniform across the block: no thread waits at a barrier alone
	acc = tt_block_sum(acc, sh);
	if (threadIdx.x == 0) db[g] = (float)acc;
}

// out[r] = Σ_c a[r, c] (add: out[r] += ...), one block per row.
TT_KERNEL tt_rowsum(const float *a, float *out, i64 rows, i64 cols, i64 add) {
	__shared__ double sh[TT_RED];
	int r = blockIdx.x, c = (int)cols;
	const float *row = a + (i64)r * cols;
	double acc = 0;
	for (int e = threadIdx.x; e < c; e += TT_RED) acc += row[e];
	acc = tt_block_sum(acc, sh);
	if (threadIdx.x == 0) out[r] = add ? out[r] + (float)acc : (float)acc;
}

// ---- convolution ------------------------------------------------------------
//
// A convolution of a group of n samples is one GEMM over the group's columns:
// col [C·KH·KW, n·P] (P = OH·OW; column j·P + p is output pixel p of sample
// j), conv [K, n·P] = w [K, C·KH·KW] · col. The kernels below move between
// that layout and NCHW tensors.

// col[(c·KH + ki)·KW + kj, j·P + oy·OW + ox] = x[j, c, oy·S - pad + ki, ox·S - pad + kj] (0 outside).
TT_KERNEL tt_im2col(const float *x, float *col, i64 n, i64 C, i64 H, i64 W, i64 KH, i64 KW, i64 S, i64 pad, i64 OH, i64 OW) {
	int P = (int)(OH * OW), ld = (int)n * P, kw = (int)KW, kh = (int)KH, ow = (int)OW;
	int h = (int)H, w = (int)W, s = (int)S, pd = (int)pad, ch = (int)C;
	TT_FOR(e, C * KH * KW * n * OH * OW) {
		int r = e / ld, q = e - r * ld;
		int j = q / P, p = q - j * P;
		int oy = p / ow, ox = p - oy * ow;
		int kj = r % kw, t = r / kw, ki = t % kh, c = t / kh;
		int iy = oy * s - pd + ki, ix = ox * s - pd + kj;
		col[e] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? x[((j * ch + c) * h + iy) * w + ix] : 0.f;
	}
}

// im2col's adjoint as a gather: dx[j, c, iy, ix] = Σ over (ki, kj) of the
// column entries that read it, in the CPU's order (ki, then kj).
TT_KERNEL tt_col2im(const float *dcol, float *dx, i64 n, i64 C, i64 H, i64 W, i64 KH, i64 KW, i64 S, i64 pad, i64 OH, i64 OW) {
	int P = (int)(OH * OW), ld = (int)n * P, kw = (int)KW, kh = (int)KH, ow = (int)OW, oh = (int)OH;
	int h = (int)H, w = (int)W, s = (int)S, pd = (int)pad, ch = (int)C;
	TT_FOR(e, n * C * H * W) {
		int ix = e % w, t = e / w;
		int iy = t % h;
		t /= h;
		int c = t % ch, j = t / ch;
		float acc = 0;
		for (int ki = 0; ki < kh; ki++) {
			int ty = iy + pd - ki;
			if (ty < 0 || ty % s) continue;
			int oy = ty / s;
			if (oy >= oh) continue;
			for (int kj = 0; kj < kw; kj++) {
				int tx = ix + pd - kj;
				if (tx < 0 || tx % s) continue;
				int ox = tx / s;
				if (ox >= ow) continue;
				acc += dcol[(i64)((c * kh + ki) * kw + kj) * ld + j * P + oy * ow + ox];
			}
		}
		dx[e] = acc;
	}
}

// y [n, K, P] = act(conv [K, n·P] + b[K]) (b may be null): kern.BiasAct's
// formula, with the transposition into NCHW.
TT_KERNEL tt_conv_out(const float *conv, const float *b, float *y, i64 n, i64 K, i64 P, i64 relu) {
	int p_ = (int)P, k_ = (int)K, ld = (int)(n * P);
	TT_FOR(e, n * K * P) {
		int p = e % p_, t = e / p_;
		int k = t % k_, j = t / k_;
		float v = conv[k * ld + j * p_ + p];
		if (b) v += b[k];
		if (relu && v < 0) v = 0;
		y[e] = v;
	}
}

// kern.BiasActPool2 over conv [K, n·OH·OW]: y, idx [n, K, OH/2, OW/2]; the
// first maximum of each 2×2 window (row-major), then + b, then ReLU.
TT_KERNEL tt_conv_pool_out(const float *conv, const float *b, float *y, float *idx, i64 n, i64 K, i64 OH, i64 OW, i64 relu) {
	int ow = (int)OW, ph = (int)(OH / 2), pw = (int)(OW / 2), k_ = (int)K;
	int P = (int)(OH * OW), ld = (int)n * P;
	TT_FOR(e, n * K * (OH / 2) * (OW / 2)) {
		int px = e % pw, t = e / pw;
		int py = t % ph;
		t /= ph;
		int k = t % k_, j = t / k_;
		const float *cp = conv + k * ld + j * P + 2 * py * ow + 2 * px;
		float m = cp[0];
		int at = 0;
		if (cp[1] > m) m = cp[1], at = 1;
		if (cp[ow] > m) m = cp[ow], at = 2;
		if (cp[ow + 1] > m) m = cp[ow + 1], at = 3;
		if (b) m += b[k];
		if (relu && !(m > 0)) m = 0;
		y[e] = m;
		idx[e] = (float)at;
	}
}

// dyT [K, n·P] = dy [n, K, P], masked by the activation (y > 0) when relu:
// the convolution output's gradient in the GEMM layout.
TT_KERNEL tt_conv_dy_t(const float *y, const float *dy, float *dyT, i64 n, i64 K, i64 P, i64 relu) {
	int p_ = (int)P, ld = (int)(n * P), k_ = (int)K;
	TT_FOR(e, K * n * P) {
		int k = e / ld, q = e - k * ld;
		int j = q / p_, p = q - j * p_;
		int src = (j * k_ + k) * p_ + p;
		float v = dy[src];
		if (relu && !(y[src] > 0)) v = 0;
		dyT[e] = v;
	}
}

// kern.Pool2Scatter into the GEMM layout: dT [K, n·OH·OW] holds dy (masked
// by y > 0 when relu) at each window's recorded maximum and 0 elsewhere,
// every element written.
TT_KERNEL tt_pool2_scatter_t(const float *dy, const float *y, const float *idx, float *dT, i64 n, i64 K, i64 OH, i64 OW, i64 relu) {
	int ow = (int)OW, ph = (int)(OH / 2), pw = (int)(OW / 2), k_ = (int)K;
	int P = (int)(OH * OW), ld = (int)n * P;
	TT_FOR(e, K * n * OH * OW) {
		int k = e / ld, q = e - k * ld;
		int j = q / P, p = q - j * P;
		int oy = p / ow, ox = p - oy * ow;
		int py = oy >> 1, px = ox >> 1;
		float v = 0;
		if (py < ph && px < pw) {
			int o = ((j * k_ + k) * ph + py) * pw + px;
			if ((int)idx[o] == (oy & 1) * 2 + (ox & 1)) {
				v = dy[o];
				if (relu && !(y[o] > 0)) v = 0;
			}
		}
		dT[e] = v;
	}
}

// ---- pooling ----------------------------------------------------------------

// tt_window_argmax is kern.maxIndex: the plane index of the first maximum of
// window (oy, ox), rows then columns, padding never chosen; -1 if the window
// holds no input.
TT_DEVICE int tt_window_argmax(const float *xp, int h, int w, int kh, int kw, int s, int pd, int oy, int ox) {
	int best = -1;
	float m = 0;
	for (int i = 0; i < kh; i++) {
		int iy = oy * s - pd + i;
		if (iy < 0 || iy >= h) continue;
		for (int j = 0; j < kw; j++) {
			int ix = ox * s - pd + j;
			if (ix < 0 || ix >= w) continue;
			float v = xp[iy * w + ix];
			if (best < 0 || v > m) best = iy * w + ix, m = v;
		}
	}
	return best;
}

// x [planes, H, W] → y [planes, OH, OW].
TT_KERNEL tt_maxpool(const float *x, float *y, i64 planes, i64 H, i64 W, i64 KH, i64 KW, i64 S, i64 pad, i64 OH, i64 OW) {
	int h = (int)H, w = (int)W, oh = (int)OH, ow = (int)OW;
	TT_FOR(e, planes * OH * OW) {
		int ox = e % ow, t = e / ow;
		int oy = t % oh, pl = t / oh;
		const float *xp = x + (i64)pl * h * w;
		int best = tt_window_argmax(xp, h, w, (int)KH, (int)KW, (int)S, (int)pad, oy, ox);
		y[e] = best < 0 ? 0.f : xp[best];
	}
}

// The windows (oy, ox) that contain input row iy lie in [lo, hi].
TT_DEVICE void tt_windows(int iy, int pd, int k, int s, int out, int *lo, int *hi) {
	int a = iy + pd - k + 1; // oy·s ≥ a
	*lo = a <= 0 ? 0 : (a + s - 1) / s;
	int b = (iy + pd) / s; // oy·s ≤ iy + pd
	*hi = b < out - 1 ? b : out - 1;
}

// MaxPool's backward as a gather: dx[iy, ix] sums dy over the windows whose
// first maximum is (iy, ix), in the CPU's order (oy, then ox).
TT_KERNEL tt_maxpool_bwd(const float *x, const float *dy, float *dx, i64 planes, i64 H, i64 W, i64 KH, i64 KW, i64 S, i64 pad, i64 OH, i64 OW) {
	int h = (int)H, w = (int)W, oh = (int)OH, ow = (int)OW, kh = (int)KH, kw = (int)KW, s = (int)S, pd = (int)pad;
	TT_FOR(e, planes * H * W) {
		int ix = e % w, t = e / w;
		int iy = t % h, pl = t / h;
		const float *xp = x + (i64)pl * h * w;
		const float *dyp = dy + (i64)pl * oh * ow;
		int ylo, yhi, xlo, xhi;
		tt_windows(iy, pd, kh, s, oh, &ylo, &yhi);
		tt_windows(ix, pd, kw, s, ow, &xlo, &xhi);
		float acc = 0;
		for (int oy = ylo; oy <= yhi; oy++)
			for (int ox = xlo; ox <= xhi; ox++)
				if (tt_window_argmax(xp, h, w, kh, kw, s, pd, oy, ox) == iy * w + ix) acc += dyp[oy * ow + ox];
		dx[e] = acc;
	}
}

// Average pooling counting padding as zeros (kern.AvgPool).
TT_KERNEL tt_avgpool(const float *x, float *y, i64 planes, i64 H, i64 W, i64 KH, i64 KW, i64 S, i64 pad, i64 OH, i64 OW) {
	int h = (int)H, w = (int)W, oh = (int)OH, ow = (int)OW, kh = (int)KH, kw = (int)KW, s = (int)S, pd = (int)pad;
	float inv = 1 / (float)(kh * kw);
	TT_FOR(e, planes * OH * OW) {
		int ox = e % ow, t = e / ow;
		int oy = t % oh, pl = t / oh;
		const float *xp = x + (i64)pl * h * w;
		float sum = 0;
		for (int i = 0; i < kh; i++) {
			int iy = oy * s - pd + i;
			if (iy < 0 || iy >= h) continue;
			for (int j = 0; j < kw; j++) {
				int ix = ox * s - pd + j;
				if (ix >= 0 && ix < w) sum += xp[iy * w + ix];
			}
		}
		y[e] = sum * inv;
	}
}

// kern.AvgPoolBackward as a gather, in the CPU's order.
TT_KERNEL tt_avgpool_bwd(const float *dy, float *dx, i64 planes, i64 H, i64 W, i64 KH, i64 KW, i64 S, i64 pad, i64 OH, i64 OW) {
	int h = (int)H, w = (int)W, oh = (int)OH, ow = (int)OW, kh = (int)KH, kw = (int)KW, s = (int)S, pd = (int)pad;
	float inv = 1 / (float)(kh * kw);
	TT_FOR(e, planes * H * W) {
		int ix = e % w, t = e / w;
		int iy = t % h, pl = t / h;
		const float *dyp = dy + (i64)pl * oh * ow;
		int ylo, yhi, xlo, xhi;
		tt_windows(iy, pd, kh, s, oh, &ylo, &yhi);
		tt_windows(ix, pd, kw, s, ow, &xlo, &xhi);
		float acc = 0;
		for (int oy = ylo; oy <= yhi; oy++)
			for (int ox = xlo; ox <= xhi; ox++) acc += dyp[oy * ow + ox] * inv;
		dx[e] = acc;
	}
}

// ---- batch norm -------------------------------------------------------------
// x [n, c, s]; one block per channel for the statistics, sums in double.

TT_KERNEL tt_bn_train(const float *x, const float *gamma, const float *beta, float *y, float *mean, float *invstd,
                      float *rmean, float *rvar, i64 n, i64 c, i64 s, double momentum, double eps) {
	__shared__ double sh[TT_RED];
	int ch = blockIdx.x, ss = (int)s, cc = (int)c, cnt = (int)(n * s);
	double sum = 0;
	for (int e = threadIdx.x; e < cnt; e += TT_RED) {
		int i = e / ss, k = e - i * ss;
		sum += x[(i * cc + ch) * ss + k];
	}
	double mu = tt_block_sum(sum, sh) / cnt;
	double sq = 0;
	for (int e = threadIdx.x; e < cnt; e += TT_RED) {
		int i = e / ss, k = e - i * ss;
		double d = x[(i * cc + ch) * ss + k] - mu;
		sq += d * d;
	}
	sq = tt_block_sum(sq, sh);
	double var = sq / cnt;
	double is = 1 / sqrt(var + eps);
	if (threadIdx.x == 0) {
		mean[ch] = (float)mu;
		invstd[ch] = (float)is;
		double unbiased = cnt > 1 ? sq / (cnt - 1) : var;
		rmean[ch] = (float)((1 - momentum) * rmean[ch] + momentum * mu);
		rvar[ch] = (float)((1 - momentum) * rvar[ch] + momentum * unbiased);
	}
	float scale = (float)is * gamma[ch];
	float shift = beta[ch] - (float)mu * scale;
	for (int e = threadIdx.x; e < cnt; e += TT_RED) {
		int i = e / ss, k = e - i * ss;
		int o = (i * cc + ch) * ss + k;
		y[o] = x[o] * scale + shift;
	}
}

TT_KERNEL tt_bn_eval(const float *x, const float *gamma, const float *beta, const float *rmean, const float *rvar, float *y,
                     i64 n, i64 c, i64 s, double eps) {
	int ss = (int)s, cc = (int)c;
	TT_FOR(e, n * c * s) {
		int ch = e / ss % cc;
		float scale = (float)(1 / sqrt((double)rvar[ch] + eps)) * gamma[ch];
		float shift = beta[ch] - rmean[ch] * scale;
		y[e] = x[e] * scale + shift;
	}
}

// kern.BatchNormBackward. dx may alias dy: every read of dy in the sums is
// done before the block's first write (the barriers in tt_block_sum).
TT_KERNEL tt_bn_bwd(const float *x, const float *gamma, const float *dy, const float *mean, const float *invstd, float *dx,
                    float *dgamma, float *dbeta, i64 n, i64 c, i64 s) {
	__shared__ double sh[TT_RED];
	int ch = blockIdx.x, ss = (int)s, cc = (int)c, cnt = (int)(n * s);
	double mu = mean[ch], is = invstd[ch];
	double sdy = 0, sdyx = 0;
	for (int e = threadIdx.x; e < cnt; e += TT_RED) {
		int i = e / ss, k = e - i * ss;
		int o = (i * cc + ch) * ss + k;
		double g = dy[o];
		sdy += g;
		sdyx += g * (x[o] - mu) * is;
	}
	sdy = tt_block_sum(sdy, sh);
	sdyx = tt_block_sum(sdyx, sh);
	if (threadIdx.x == 0) {
		dbeta[ch] = (float)sdy;
		dgamma[ch] = (float)sdyx;
	}
	double k = gamma[ch] * is / cnt;
	float a = (float)(k * cnt), b = (float)(-k * sdy), cx = (float)(-k * sdyx * is), m = (float)mu;
	for (int e = threadIdx.x; e < cnt; e += TT_RED) {
		int i = e / ss, kk = e - i * ss;
		int o = (i * cc + ch) * ss + kk;
		dx[o] = a * dy[o] + b + cx * (x[o] - m);
	}
}

// ---- loss -------------------------------------------------------------------

// kern.SoftmaxCrossEntropy in one block: each thread takes whole rows; stats
// [2] = {summed loss, rows whose first maximum logit is the label}; dl may be
// null.
TT_KERNEL tt_softmax_xent(const float *logits, const float *labels, float *dl, float *stats, i64 n, i64 c) {
	__shared__ double sh[TT_RED];
	int cc = (int)c;
	double inv = 1.0 / (double)n, loss = 0, correct = 0;
	for (int i = threadIdx.x; i < (int)n; i += TT_RED) {
		const float *row = logits + (i64)i * cc;
		int label = (int)labels[i];
		float mx = row[0];
		int arg = 0;
		for (int j = 1; j < cc; j++)
			if (row[j] > mx) mx = row[j], arg = j;
		if (arg == label) correct += 1;
		double sum = 0;
		for (int j = 0; j < cc; j++) sum += exp((double)(row[j] - mx));
		loss += log(sum) + (double)mx - (double)row[label];
		if (!dl) continue;
		float *d = dl + (i64)i * cc;
		double scale = inv / sum;
		for (int j = 0; j < cc; j++) d[j] = (float)(exp((double)(row[j] - mx)) * scale);
		d[label] -= (float)inv;
	}
	loss = tt_block_sum(loss, sh);
	correct = tt_block_sum(correct, sh);
	if (threadIdx.x == 0) {
		stats[0] = (float)loss;
		stats[1] = (float)correct;
	}
}

// ---- optimizers (kern's tt_sgd and tt_adam, in float as there) -------------

TT_KERNEL tt_sgd(float *p, const float *g, float *buf, i64 n, double lr_, double mom_, double damp_, double wd_, i64 nesterov, i64 first) {
	float lr = (float)lr_, mom = (float)mom_, wd = (float)wd_, keep = 1 - (float)damp_;
	TT_FOR(i, n) {
		float d = g[i] + wd * p[i];
		if (!buf) {
			p[i] -= lr * d;
			continue;
		}
		float b;
		if (first) {
			b = d;
		} else {
			b = mom * buf[i] + keep * d;
		}
		buf[i] = b;
		p[i] -= lr * (nesterov ? d + mom * b : b);
	}
}

TT_KERNEL tt_adam(float *p, const float *g, float *m, float *v, i64 n, double lr_, double b1_, double b2_, double eps_, double wd_,
                  i64 decoupled, double step_size_, double bc2_sqrt_) {
	float lr = (float)lr_, b1 = (float)b1_, b2 = (float)b2_, eps = (float)eps_, wd = (float)wd_;
	float step_size = (float)step_size_, bc2_sqrt = (float)bc2_sqrt_;
	float shrink = 1 - lr * wd;
	TT_FOR(i, n) {
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

// Every kernel, for the emulator's launch table (the Go list in
// internal/gpu/kernels.go is checked against this file's PTX).
#define TT_KERNELS(X)                                                                                                           \
	X(tt_fill) X(tt_copy) X(tt_add) X(tt_addto) X(tt_mul) X(tt_relu) X(tt_relu_bwd) X(tt_dropout_mask) X(tt_bias_act)        \
	    X(tt_act_bwd_sum) X(tt_rowsum) X(tt_im2col) X(tt_col2im) X(tt_conv_out) X(tt_conv_pool_out) X(tt_conv_dy_t)             \
	        X(tt_pool2_scatter_t) X(tt_maxpool) X(tt_maxpool_bwd) X(tt_avgpool) X(tt_avgpool_bwd) X(tt_bn_train) X(tt_bn_eval) \
	            X(tt_bn_bwd) X(tt_softmax_xent) X(tt_sgd) X(tt_adam)
