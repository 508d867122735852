// C side of compute/cuda's driver (driver.go): the hot path (kernel launch,
// copies, graph capture and update) in one call each, every call first
// making the backend's context current (goroutines move between OS threads,
// and a CUDA context is current per thread), and cuBLAS loaded with dlopen:
// the GPU machines have CUDA 13's libcublas.so.13, this build machine 11.8's,
// so the binary links none.
#ifndef TT_SHIM_H
#define TT_SHIM_H

#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TT_MAX_ARGS 16

static CUresult tt_ctx(uintptr_t ctx) {
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS) return r;
	if (cur == (CUcontext)ctx) return CUDA_SUCCESS;
	return cuCtxSetCurrent((CUcontext)ctx);
}

#define TT_CTX(ctx)                                  \
	do {                                         \
		CUresult r_ = tt_ctx(ctx);           \
		if (r_ != CUDA_SUCCESS) return r_;   \
	} while (0)

static const char *tt_error_name(int r) {
	const char *s = NULL;
	cuGetErrorName((CUresult)r, &s);
	return s ? s : "CUDA_ERROR_UNKNOWN_CODE";
}

static const char *tt_error_string(int r) {
	const char *s = NULL;
	cuGetErrorString((CUresult)r, &s);
	return s ? s : "";
}

static CUresult tt_stream_create(uintptr_t ctx, uintptr_t *stream) {
	TT_CTX(ctx);
	// Non-blocking: no implicit ordering with the legacy default stream,
	// which would also break stream capture.
	return cuStreamCreate((CUstream *)stream, CU_STREAM_NON_BLOCKING);
}

static CUresult tt_stream_destroy(uintptr_t ctx, uintptr_t stream) {
	TT_CTX(ctx);
	return cuStreamDestroy((CUstream)stream);
}

static CUresult tt_sync(uintptr_t ctx, uintptr_t stream) {
	TT_CTX(ctx);
	return cuStreamSynchronize((CUstream)stream);
}

static CUresult tt_module_load(uintptr_t ctx, const char *ptx, uintptr_t *mod, char *log, size_t loglen) {
	TT_CTX(ctx);
	CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {log, (void *)(uintptr_t)loglen};
	return cuModuleLoadDataEx((CUmodule *)mod, ptx, 2, opts, vals);
}

static CUresult tt_module_function(uintptr_t ctx, uintptr_t mod, const char *name, uintptr_t *fn) {
	TT_CTX(ctx);
	return cuModuleGetFunction((CUfunction *)fn, (CUmodule)mod, name);
}

static CUresult tt_module_unload(uintptr_t ctx, uintptr_t mod) {
	TT_CTX(ctx);
	return cuModuleUnload((CUmodule)mod);
}

static CUresult tt_host_alloc(uintptr_t ctx, size_t bytes, void **p) {
	TT_CTX(ctx);
	return cuMemHostAlloc(p, bytes, 0);
}

static CUresult tt_host_free(uintptr_t ctx, void *p) {
	TT_CTX(ctx);
	return cuMemFreeHost(p);
}

static CUresult tt_htod_async(uintptr_t ctx, uintptr_t stream, uintptr_t dst, const void *src, size_t n) {
	TT_CTX(ctx);
	return cuMemcpyHtoDAsync((CUdeviceptr)dst, src, n, (CUstream)stream);
}

// tt_htod_sync copies from pageable memory after the stream's earlier work.
static CUresult tt_htod_sync(uintptr_t ctx, uintptr_t stream, uintptr_t dst, const void *src, size_t n) {
	TT_CTX(ctx);
	CUresult r = cuStreamSynchronize((CUstream)stream);
	if (r != CUDA_SUCCESS) return r;
	return cuMemcpyHtoD((CUdeviceptr)dst, src, n);
}

static CUresult tt_dtoh(uintptr_t ctx, uintptr_t stream, void *dst, uintptr_t src, size_t n) {
	TT_CTX(ctx);
	CUresult r = cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, n, (CUstream)stream);
	if (r != CUDA_SUCCESS) return r;
	return cuStreamSynchronize((CUstream)stream);
}

static CUresult tt_event_create(uintptr_t ctx, uintptr_t *ev) {
	TT_CTX(ctx);
	return cuEventCreate((CUevent *)ev, CU_EVENT_DISABLE_TIMING);
}

static CUresult tt_event_record(uintptr_t ctx, uintptr_t ev, uintptr_t stream) {
	TT_CTX(ctx);
	return cuEventRecord((CUevent)ev, (CUstream)stream);
}

static CUresult tt_event_sync(uintptr_t ctx, uintptr_t ev) {
	TT_CTX(ctx);
	return cuEventSynchronize((CUevent)ev);
}

static CUresult tt_event_destroy(uintptr_t ctx, uintptr_t ev) {
	TT_CTX(ctx);
	return cuEventDestroy((CUevent)ev);
}

static CUresult tt_launch(uintptr_t ctx, uintptr_t stream, uintptr_t fn, unsigned grid, unsigned block, const uint64_t *args,
                          int nargs) {
	void *params[TT_MAX_ARGS];
	if (nargs > TT_MAX_ARGS) return CUDA_ERROR_INVALID_VALUE;
	TT_CTX(ctx);
	for (int i = 0; i < nargs; i++) params[i] = (void *)&args[i];
	return cuLaunchKernel((CUfunction)fn, grid, 1, 1, block, 1, 1, 0, (CUstream)stream, params, NULL);
}

// ---- graphs ----------------------------------------------------------------

static CUresult tt_capture_begin(uintptr_t ctx, uintptr_t stream) {
	TT_CTX(ctx);
	// Relaxed: cuMemAlloc and friends stay legal on other threads while a
	// step is captured.
	return cuStreamBeginCapture((CUstream)stream, CU_STREAM_CAPTURE_MODE_RELAXED);
}

// tt_capture_last returns the node of the work last captured on a linear
// stream: the one node the next captured work would depend on.
static CUresult tt_capture_last(uintptr_t ctx, uintptr_t stream, uintptr_t *node) {
	TT_CTX(ctx);
	CUstreamCaptureStatus st;
	cuuint64_t id;
	CUgraph g;
	const CUgraphNode *deps = NULL;
	size_t n = 0;
	CUresult r = cuStreamGetCaptureInfo_v2((CUstream)stream, &st, &id, &g, &deps, &n);
	if (r != CUDA_SUCCESS) return r;
	if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	if (n != 1) return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
	*node = (uintptr_t)deps[0];
	return CUDA_SUCCESS;
}

// tt_capture_end ends the capture and instantiates it. The graph itself is
// kept: its node handles are how tt_graph_set names the nodes to update.
static CUresult tt_capture_end(uintptr_t ctx, uintptr_t stream, uintptr_t *graph, uintptr_t *exec) {
	TT_CTX(ctx);
	CUgraph g = NULL;
	CUresult r = cuStreamEndCapture((CUstream)stream, &g);
	if (r != CUDA_SUCCESS) return r;
	r = cuGraphInstantiateWithFlags((CUgraphExec *)exec, g, 0);
	if (r != CUDA_SUCCESS) {
		cuGraphDestroy(g);
		return r;
	}
	*graph = (uintptr_t)g;
	return CUDA_SUCCESS;
}

static CUresult tt_graph_launch(uintptr_t ctx, uintptr_t exec, uintptr_t stream) {
	TT_CTX(ctx);
	return cuGraphLaunch((CUgraphExec)exec, (CUstream)stream);
}

static CUresult tt_graph_set(uintptr_t ctx, uintptr_t exec, uintptr_t node, uintptr_t fn, unsigned grid, unsigned block,
                             const uint64_t *args, int nargs) {
	void *params[TT_MAX_ARGS];
	if (nargs > TT_MAX_ARGS) return CUDA_ERROR_INVALID_VALUE;
	TT_CTX(ctx);
	for (int i = 0; i < nargs; i++) params[i] = (void *)&args[i];
	CUDA_KERNEL_NODE_PARAMS p;
	memset(&p, 0, sizeof p);
	p.func = (CUfunction)fn;
	p.gridDimX = grid;
	p.gridDimY = p.gridDimZ = 1;
	p.blockDimX = block;
	p.blockDimY = p.blockDimZ = 1;
	p.kernelParams = params;
	return cuGraphExecKernelNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, &p);
}

static CUresult tt_graph_destroy(uintptr_t ctx, uintptr_t exec, uintptr_t graph) {
	TT_CTX(ctx);
	CUresult r = cuGraphExecDestroy((CUgraphExec)exec);
	CUresult r2 = cuGraphDestroy((CUgraph)graph);
	return r != CUDA_SUCCESS ? r : r2;
}

// ---- cuBLAS, loaded at run time ----------------------------------------------
//
// The enum values are cuBLAS's stable ABI (cublas_api.h, library_types.h):
// CUBLAS_OP_N 0, CUBLAS_OP_T 1, CUDA_R_32F 0, CUBLAS_COMPUTE_32F 68,
// CUBLAS_COMPUTE_32F_FAST_16BF 75, CUBLAS_COMPUTE_32F_FAST_TF32 77,
// CUBLAS_GEMM_DEFAULT -1, CUBLAS_DEFAULT_MATH 0, CUBLAS_TF32_TENSOR_OP_MATH 3.

typedef int (*tt_blas_create_t)(void **);
typedef int (*tt_blas_destroy_t)(void *);
typedef int (*tt_blas_set_stream_t)(void *, CUstream);
typedef int (*tt_blas_set_math_t)(void *, int);
typedef int (*tt_blas_set_ws_t)(void *, void *, size_t);
typedef int (*tt_blas_version_t)(void *, int *);
typedef int (*tt_blas_gemm_ex_t)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                                 const void *, void *, int, int, int, int);

static struct {
	void *lib;
	tt_blas_create_t create;
	tt_blas_destroy_t destroy;
	tt_blas_set_stream_t set_stream;
	tt_blas_set_math_t set_math;
	tt_blas_set_ws_t set_ws;
	tt_blas_version_t version;
	tt_blas_gemm_ex_t gemm_ex;
} tt_blas;

// tt_blas_open loads cuBLAS from path (a file, or a name for the dynamic
// loader's search), after lt (its libcublasLt, when given) so that a
// library outside the loader's path finds it. 0, or -1 with err set.
static int tt_blas_open(const char *lt, const char *path, char *err, size_t errlen) {
	if (lt && *lt && !dlopen(lt, RTLD_NOW | RTLD_GLOBAL)) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
#define TT_SYM(field, type, name)                                                  \
	tt_blas.field = (type)dlsym(h, name);                                      \
	if (!tt_blas.field) {                                                      \
		snprintf(err, errlen, "%s has no symbol %s", path, name);         \
		dlclose(h);                                                        \
		return -1;                                                         \
	}
	TT_SYM(create, tt_blas_create_t, "cublasCreate_v2")
	TT_SYM(destroy, tt_blas_destroy_t, "cublasDestroy_v2")
	TT_SYM(set_stream, tt_blas_set_stream_t, "cublasSetStream_v2")
	TT_SYM(set_math, tt_blas_set_math_t, "cublasSetMathMode")
	TT_SYM(version, tt_blas_version_t, "cublasGetVersion_v2")
	TT_SYM(gemm_ex, tt_blas_gemm_ex_t, "cublasGemmEx")
#undef TT_SYM
	// Optional (cuBLAS 11.4 and later): a workspace of our own keeps cuBLAS
	// from allocating while a graph is captured.
	tt_blas.set_ws = (tt_blas_set_ws_t)dlsym(h, "cublasSetWorkspace_v2");
	tt_blas.lib = h;
	return 0;
}

// tt_blas_create returns a handle on the backend's stream, with ws as its
// workspace, and the library's version (major·10000 + minor·100 + patch).
static int tt_blas_create(uintptr_t ctx, uintptr_t stream, uintptr_t ws, size_t wsbytes, uintptr_t *handle, int *version) {
	CUresult cr = tt_ctx(ctx);
	if (cr != CUDA_SUCCESS) return 1000 + (int)cr;
	void *h = NULL;
	int r = tt_blas.create(&h);
	if (r) return r;
	if ((r = tt_blas.set_stream(h, (CUstream)stream)) != 0 ||
	    (tt_blas.set_ws && ws && (r = tt_blas.set_ws(h, (void *)ws, wsbytes)) != 0) || (r = tt_blas.version(h, version)) != 0) {
		tt_blas.destroy(h);
		return r;
	}
	*handle = (uintptr_t)h;
	return 0;
}

static int tt_blas_destroy(uintptr_t ctx, uintptr_t handle) {
	CUresult cr = tt_ctx(ctx);
	if (cr != CUDA_SUCCESS) return 1000 + (int)cr;
	return tt_blas.destroy((void *)handle);
}

// tt_blas_gemm is cublasGemmEx on float32 matrices; prec 0 FP32, 1 TF32,
// 2 BF16 (operands rounded for the tensor cores, float32 accumulation).
static int tt_blas_gemm(uintptr_t ctx, uintptr_t handle, int ta, int tb, int m, int n, int k, float alpha, uintptr_t A, int lda,
                        uintptr_t B, int ldb, float beta, uintptr_t C, int ldc, int prec) {
	CUresult cr = tt_ctx(ctx);
	if (cr != CUDA_SUCCESS) return 1000 + (int)cr;
	int compute = prec == 1 ? 77 : prec == 2 ? 75 : 68;
	int r = tt_blas.set_math((void *)handle, prec == 1 ? 3 : 0);
	if (r) return r;
	return tt_blas.gemm_ex((void *)handle, ta, tb, m, n, k, &alpha, (const void *)A, 0, lda, (const void *)B, 0, ldb, &beta,
	                       (void *)C, 0, ldc, compute, -1);
}

#endif
