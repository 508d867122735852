// What kernels.cu needs from CUDA, for compiling it as host C++: the thread
// and block indices of the fiber being run, __syncthreads as a switch back
// to the block's scheduler, __shared__ as one static per OS thread (blocks run
// one at a time on a thread), and internal linkage for the kernels so that
// their names cannot clash with compute/internal/kern's C symbols.
#ifndef TT_EMU_H
#define TT_EMU_H

#include <math.h>
#include <stdint.h>

#include <cmath>

struct tt_dim3 {
	unsigned x, y, z;
};

extern thread_local tt_dim3 tt_emu_block_idx, tt_emu_block_dim, tt_emu_grid_dim;
extern thread_local tt_dim3 *tt_emu_thread_idx;
void tt_emu_syncthreads();

#define blockIdx tt_emu_block_idx
#define blockDim tt_emu_block_dim
#define gridDim tt_emu_grid_dim
#define threadIdx (*tt_emu_thread_idx)
#define __syncthreads() tt_emu_syncthreads()
#define __shared__ static thread_local

#define TT_KERNEL static void
#define TT_DEVICE static inline

using std::exp;
using std::log;
using std::sqrt;

#endif
