// Float32 kernels of the CPU backend, vectorised by the C compiler. Each has
// a Go reference over float64 in the same package; the conformance suite
// compares them.
#include <stddef.h>

void tt_relu(const float *x, float *y, long n);
void tt_relu_bwd(const float *y, const float *dy, float *dx, long n);
void tt_add(float *dst, const float *a, const float *b, long n);
void tt_addto(float *dst, const float *src, long n);
void tt_mul(float *dst, const float *a, const float *b, long n);
void tt_bias_act(float *y, const float *b, long rows, long groups, long m, int relu);
void tt_act_bwd_sum(const float *y, float *dy, float *db, long rows, long groups, long m, int relu, int add);
void tt_sgd(float *p, const float *g, float *buf, long n, float lr, float mom, float damp, float wd, int nesterov, int first);
void tt_adam(float *p, const float *g, float *m, float *v, long n, float lr, float b1, float b2, float eps, float wd,
             int decoupled, float step_size, float bc2_sqrt);
void tt_maxpool2(const float *x, float *y, long planes, long h, long w);
void tt_maxpool2_bwd(const float *x, const float *dy, float *dx, long planes, long h, long w);
void tt_im2col(const float *x, float *col, long ld, long c, long h, long w, long kh, long kw, long stride, long pad,
               long oh, long ow);
void tt_col2im(float *col, float *dx, long ld, long c, long h, long w, long kh, long kw, long stride, long pad,
               long oh, long ow);
void tt_bias_act_pool2(const float *conv, long cs, const float *b, float *y, float *idx, long k, long h, long w,
                       int relu);
void tt_pool2_scatter(const float *dy, const float *y, const float *idx, float *dconv, long cs, float *db, long k,
                      long h, long w, int relu, int add);
extern int tt_portable;
// tt_clone_level names the target_clones version this processor runs:
// "avx512f", "avx2+fma" or "baseline".
const char *tt_clone_level(void);
// tt_has_avx512 reports whether the AVX-512 paths run: the processor has
// AVX-512F and tt_portable is off.
int tt_has_avx512(void);
// tt_linear_packed is a Linear layer's forward, y = x·wᵀ + b then ReLU when
// relu (x [n, in], w [out, in], b [out] or NULL, y [n, out]), on AVX-512
// (packed.c). It returns 0, having done nothing, where AVX-512 is missing.
int tt_linear_packed(const float *x, const float *w, const float *b, float *y, long n, long in, long out, int relu);
// tt_linear_pack packs w [out, in] into p (tt_linear_pack_len floats, 64-byte
// aligned) once for many tt_linear_prepacked calls, which are
// tt_linear_packed without the packing.
// tt_sgemm is Gemm's C = op(A)·op(B) + beta·C for beta 0 (beta1 = 0) or 1,
// alpha 1, on AVX-512; 0 where AVX-512 is missing.
int tt_sgemm(int ta, int tb, long m, long n, long k, const float *a, long lda, const float *b, long ldb, int beta1,
             float *c, long ldc);
long tt_linear_pack_len(long in, long out);
void tt_linear_pack(const float *w, long in, long out, float *p);
int tt_linear_prepacked(const float *x, const float *p, const float *b, float *y, long n, long in, long out,
                        int relu);
