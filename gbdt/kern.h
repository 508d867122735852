// Hot loops of package gbdt, in C. Each has a Go reference (kern.go's
// fillGo, histGo, partitionGo and sub's loop; grow.go's
// bestLocalGo); kern_test.go compares them bit for bit. The tree walk is
// forest.c, its reference predictGo.
#include <stddef.h>
#include <stdint.h>

// Split finding parameters and result (grow.go's bestLocal).
typedef struct {
	double mcw, lambda, alpha, mds;
} gb_params;

typedef struct {
	double gain, gl, hl;
	long feat, bin;
	int dleft, ok;
} gb_split;

void gb_best_split(const double *hist, const uint32_t *off, const uint32_t *ptr, const int32_t *miss, const int64_t *feats,
                   long nfeats, double g, double h, double sg, double sh, const gb_params *p, gb_split *out);
void gb_sub(double *dst, const double *src, long n);
void gb_bin_u8(const float *x, long n, long nf, const float *vals, const uint32_t *ptr, uint8_t *out);
void gb_bin_u16(const float *x, long n, long nf, const float *vals, const uint32_t *ptr, uint16_t *out);
void gb_hist_u8(const uint8_t *bins, long nf, const uint32_t *rows, long n, const double *gh, const uint32_t *off,
                const uint64_t *meta, double *hist, double *tot);
void gb_hist_u16(const uint16_t *bins, long nf, const uint32_t *rows, long n, const double *gh, const uint32_t *off,
                 const uint64_t *meta, double *hist, double *tot);
long gb_partition_col_u8(const uint8_t *col, uint32_t *rows, long n, long split, long miss, int dleft, uint32_t *scratch);
long gb_partition_col_u16(const uint16_t *col, uint32_t *rows, long n, long split, long miss, int dleft, uint32_t *scratch);
void gb_transpose_u8(const uint8_t *in, long n, long nf, uint8_t *out);
void gb_transpose_u16(const uint16_t *in, long n, long nf, uint16_t *out);
void gb_hist_packed_u8(const uint8_t *bins, long nf, const uint32_t *rows, long n, const int64_t *gh, const uint32_t *off,
                       const uint64_t *meta, int64_t *acc, double *hist, int64_t *tot);
void gb_hist_packed_u16(const uint16_t *bins, long nf, const uint32_t *rows, long n, const int64_t *gh, const uint32_t *off,
                        const uint64_t *meta, int64_t *acc, double *hist, int64_t *tot);
void gb_quantise_packed(const double *g, const double *h, long n, long k, long j, double sg, double sh, int64_t *gh);
void gb_row_sums(const double *gh, const uint32_t *rows, long n, double *out);
void gb_quantise(const double *g, const double *h, long n, long k, long j, double sg, double sh, double *gh);
long gb_auc_local(const float *pred, const float *label, long n, long k, long cl, uint64_t *a, uint64_t *tmp, uint32_t *ks,
                  uint64_t *ps, uint64_t *ns, uint32_t *cnt);
void gb_auc_merge2(const uint32_t *ka, const uint64_t *pa, const uint64_t *na, long la, const uint32_t *kb,
                   const uint64_t *pb, const uint64_t *nb, long lb, uint64_t negBelow, uint64_t *out);
long gb_auc_tags(const uint64_t *pos, const uint64_t *neg, long n, uint8_t *tags);
long gb_auc_untag(const uint8_t *tags, const uint32_t *keys, long n, uint64_t *pos, uint64_t *neg);
long gb_auc_rows(const float *pred, const float *label, long n, long k, long cl, uint32_t *a, uint32_t *tmp, uint32_t *cnt,
                 uint64_t *P);
void gb_auc_rows_area(const uint32_t *a, long la, const uint32_t *b, long lb, uint64_t negBelow, uint64_t *out);
long gb_auc_rows_order(const uint32_t *rows, long n);
