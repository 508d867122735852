// Tree ensemble prediction (forest.go). Plain C at -O3, no fast-math: the
// sums are float32 additions in tree order, as XGBoost's CPU predictor
// makes them (and predictGo, the reference), so margins are theirs bit
// for bit.
#pragma GCC optimize("fp-contract=off")
#include "forest.h"

// ROWS rows go down a tree together: every row takes exactly the tree's
// depth in steps (leaves go to themselves), so the steps of different rows
// are independent and branch-free, and the processor overlaps their loads.
#define ROWS 8

static inline int32_t step(const gb_fnode *tn, int32_t k, const float *xr) {
	const gb_fnode *nd = tn + k;
	float v = xr[nd->feat & 0x7fffffffu];
	uint32_t right = !(v < nd->cond);
	// Missing: not < cond, so right, unless the node's default is left.
	right &= ~((uint32_t)(v != v) & (nd->feat >> 31));
	return nd->left + (int32_t)right;
}

// out[i*ngroup + group[t]] += the leaf of tree t for row i of x (n × nf),
// trees in order for each row; rows in blocks of block rows, so that a
// block's rows stay in cache across the trees. A tree deeper than lockstep
// levels is walked row by row, each row stopping at its leaf, rather than
// every row taking its deepest leaf's steps.
void gb_forest_add(const float *x, long n, long nf, const gb_fnode *nodes, const int64_t *root, const int32_t *depth,
                   const int32_t *group, long ntrees, long ngroup, long block, long lockstep, float *out) {
	for (long i0 = 0; i0 < n; i0 += block) {
		long i1 = i0 + block < n ? i0 + block : n;
		for (long t = 0; t < ntrees; t++) {
			const gb_fnode *tn = nodes + root[t];
			const long d = depth[t], g = group[t];
			long i = i0;
			if (d > lockstep) {
				for (; i < i1; i++) {
					int32_t k = 0;
					while (tn[k].left > k) k = step(tn, k, x + i * nf);
					out[i * ngroup + g] += tn[k].value;
				}
				continue;
			}
			for (; i + ROWS <= i1; i += ROWS) {
				int32_t k[ROWS];
				const float *xr[ROWS];
				for (int j = 0; j < ROWS; j++) {
					k[j] = 0;
					xr[j] = x + (i + j) * nf;
				}
				for (long l = 0; l < d; l++) {
					for (int j = 0; j < ROWS; j++) k[j] = step(tn, k[j], xr[j]);
				}
				for (int j = 0; j < ROWS; j++) out[(i + j) * ngroup + g] += tn[k[j]].value;
			}
			for (; i < i1; i++) {
				int32_t k = 0;
				for (long l = 0; l < d; l++) k = step(tn, k, x + i * nf);
				out[i * ngroup + g] += tn[k].value;
			}
		}
	}
}
