// The emulator's C interface to emu.go.
#ifndef TT_EMU_API_H
#define TT_EMU_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// tt_emu_kernel returns the index of the kernel named name (and its number of
// parameters), or -1.
int tt_emu_kernel(const char *name, int *nargs);
// tt_emu_launch runs kernel k to completion; 0, or 1 (no such kernel), 2
// (wrong number of arguments), 3 (bad grid or block).
int tt_emu_launch(int k, unsigned grid, unsigned block, const uint64_t *args, int nargs);
// tt_emu_sgemm is cublasGemmEx on float32 matrices; prec: 0 FP32, 1 TF32,
// 2 BF16 operands.
void tt_emu_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc, int prec);

#ifdef __cplusplus
}
#endif

#endif
