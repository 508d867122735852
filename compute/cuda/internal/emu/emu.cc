// The kernels of compute/cuda/kernels/kernels.cu run on the CPU: each CUDA
// thread of a block is a fiber (ucontext) on the calling OS thread, run
// round-robin; __syncthreads switches back to the scheduler, so one round
// brings every thread of the block to the barrier before any passes it.
// Blocks run one after the other. Slow (a context switch per thread and
// barrier), and exact about what the kernels compute.
#include "emu.h"

#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <type_traits>
#include <utility>
#include <vector>

thread_local tt_dim3 tt_emu_block_idx, tt_emu_block_dim, tt_emu_grid_dim;
thread_local tt_dim3 *tt_emu_thread_idx;

#define TT_EMU 1
#include "kernels_cu.h" // a link to ../../kernels/kernels.cu: go build hashes the .h files of a package, so an edited kernel rebuilds the emulator

#include "emu_api.h"

namespace {

// Every kernel parameter is one 64-bit word (kernels.cu's convention);
// tt_word reinterprets it as the parameter's type.
template <typename T> T tt_word(uint64_t w) {
	static_assert(sizeof(T) == 8, "kernel parameters must be 8 bytes (pointer, i64, u64 or double)");
	if constexpr (std::is_pointer<T>::value) {
		return reinterpret_cast<T>(static_cast<uintptr_t>(w));
	} else if constexpr (std::is_same<T, double>::value) {
		double d;
		memcpy(&d, &w, 8);
		return d;
	} else {
		return static_cast<T>(w);
	}
}

template <typename... A, size_t... I> void tt_call(void (*f)(A...), const uint64_t *w, std::index_sequence<I...>) {
	f(tt_word<A>(w[I])...);
}

template <typename... A> void tt_tramp(void (*f)(A...), const uint64_t *w) { tt_call(f, w, std::index_sequence_for<A...>{}); }

template <typename... A> constexpr int tt_arity(void (*)(A...)) { return sizeof...(A); }

struct Entry {
	const char *name;
	void (*tramp)(const uint64_t *);
	int nargs;
};

#define TT_ENTRY(k) {#k, [](const uint64_t *w) { tt_tramp(k, w); }, tt_arity(k)},
const Entry entries[] = {TT_KERNELS(TT_ENTRY)};
const int nentries = sizeof(entries) / sizeof(entries[0]);

const size_t stack_size = 64 << 10;

#if defined(__x86_64__)
// A fiber switch saves the callee-saved registers and the SSE and x87
// control words on the old stack and restores them from the new one: no
// system call, unlike swapcontext (which sets the signal mask each time and
// made the emulator ten times slower).
extern "C" void tt_emu_switch(void **save_sp, void *to_sp);
asm(R"(
	.text
	.globl tt_emu_switch
	.type tt_emu_switch, @function
tt_emu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	subq $8, %rsp
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	ldmxcsr (%rsp)
	fldcw 4(%rsp)
	addq $8, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size tt_emu_switch, .-tt_emu_switch
)");

struct Fiber {
	void *sp;
	tt_dim3 idx;
	bool done;
};

thread_local void *sched_sp;

void fiber_main();

// start lays out a fresh stack as tt_emu_switch leaves one: control words,
// six registers, then the return address fiber_main (entered with the stack
// aligned as after a call).
void start(Fiber &f, char *stack) {
	uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + stack_size) & ~uintptr_t(15);
	uint64_t *sp = reinterpret_cast<uint64_t *>(top);
	*--sp = 0;  // fiber_main never returns
	*--sp = reinterpret_cast<uint64_t>(&fiber_main);
	for (int i = 0; i < 6; i++) *--sp = 0;
	uint32_t words[2] = {0x1f80, 0x037f};  // default MXCSR and x87 control word
	*--sp = 0;
	memcpy(sp, words, 8);
	f.sp = sp;
}

inline void to_fiber(Fiber &f) { tt_emu_switch(&sched_sp, f.sp); }
inline void to_scheduler(Fiber &f) { tt_emu_switch(&f.sp, sched_sp); }
#else
struct Fiber {
	ucontext_t ctx;
	tt_dim3 idx;
	bool done;
};

thread_local ucontext_t sched;

void fiber_main();

void start(Fiber &f, char *stack) {
	getcontext(&f.ctx);
	f.ctx.uc_stack.ss_sp = stack;
	f.ctx.uc_stack.ss_size = stack_size;
	f.ctx.uc_link = nullptr;
	makecontext(&f.ctx, fiber_main, 0);
}

inline void to_fiber(Fiber &f) { swapcontext(&sched, &f.ctx); }
inline void to_scheduler(Fiber &f) { swapcontext(&f.ctx, &sched); }
#endif

thread_local Fiber *cur;
thread_local const Entry *run_entry;
thread_local const uint64_t *run_args;
thread_local std::vector<Fiber> *fibers;
thread_local std::vector<char *> *stacks;

void fiber_main() {
	run_entry->tramp(run_args);
	cur->done = true;
	to_scheduler(*cur);  // never resumed
	abort();
}

}  // namespace

void tt_emu_syncthreads() { to_scheduler(*cur); }

extern "C" int tt_emu_kernel(const char *name, int *nargs) {
	for (int i = 0; i < nentries; i++) {
		if (strcmp(entries[i].name, name) == 0) {
			*nargs = entries[i].nargs;
			return i;
		}
	}
	return -1;
}

extern "C" int tt_emu_launch(int k, unsigned grid, unsigned block, const uint64_t *args, int nargs) {
	if (k < 0 || k >= nentries) return 1;
	if (nargs != entries[k].nargs) return 2;
	if (block == 0 || block > 1024 || grid == 0) return 3;
	if (!fibers) {
		fibers = new std::vector<Fiber>();
		stacks = new std::vector<char *>();
	}
	fibers->resize(block);
	while (stacks->size() < block) stacks->push_back(static_cast<char *>(malloc(stack_size)));
	run_entry = &entries[k];
	run_args = args;
	tt_emu_grid_dim = tt_dim3{grid, 1, 1};
	tt_emu_block_dim = tt_dim3{block, 1, 1};
	for (unsigned b = 0; b < grid; b++) {
		tt_emu_block_idx = tt_dim3{b, 0, 0};
		for (unsigned t = 0; t < block; t++) {
			Fiber &f = (*fibers)[t];
			f.idx = tt_dim3{t, 0, 0};
			f.done = false;
			start(f, (*stacks)[t]);
		}
		for (bool alive = true; alive;) {
			alive = false;
			for (unsigned t = 0; t < block; t++) {
				Fiber &f = (*fibers)[t];
				if (f.done) continue;
				cur = &f;
				tt_emu_thread_idx = &f.idx;
				to_fiber(f);
				alive |= !f.done;
			}
		}
	}
	return 0;
}

namespace {

// round_to keeps the top bits of a float's mantissa, rounding to nearest
// even: what the tensor cores read of an FP32 operand in TF32 (10 bits) or
// BF16 (7 bits) mode.
float round_to(float x, int mantissa) {
	uint32_t u;
	memcpy(&u, &x, 4);
	if ((u & 0x7f800000u) == 0x7f800000u) return x;  // Inf, NaN
	int drop = 23 - mantissa;
	uint32_t half = 1u << (drop - 1), lsb = (u >> drop) & 1;
	u = (u + half - 1 + lsb) & ~((1u << drop) - 1);
	memcpy(&x, &u, 4);
	return x;
}

float operand(float x, int prec) {
	switch (prec) {
	case 1:
		return round_to(x, 10);
	case 2:
		return round_to(x, 7);
	}
	return x;
}

}  // namespace

// cuBLAS's column-major GEMM by its definition: C = alpha·op(A)·op(B) +
// beta·C, op(A) m×k, op(B) k×n, sums in double; beta == 0 does not read C.
extern "C" void tt_emu_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                             float beta, float *C, int ldc, int prec) {
	for (int j = 0; j < n; j++) {
		for (int i = 0; i < m; i++) {
			double acc = 0;
			for (int l = 0; l < k; l++) {
				float a = ta ? A[l + (size_t)i * lda] : A[i + (size_t)l * lda];
				float b = tb ? B[j + (size_t)l * ldb] : B[l + (size_t)j * ldb];
				acc += (double)operand(a, prec) * operand(b, prec);
			}
			float *c = &C[i + (size_t)j * ldc];
			*c = beta == 0 ? (float)(alpha * acc) : (float)(alpha * acc + (double)beta * *c);
		}
	}
}
