//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/tempotrain/tempotrain/compute/cuda/internal/gpu"
)

// cuError is a CUDA driver API error.
type cuError struct {
	call string
	code C.CUresult
}

func (e *cuError) Error() string {
	s := fmt.Sprintf("%s: %s", e.call, C.GoString(C.tt_error_name(C.int(e.code))))
	if d := C.GoString(C.tt_error_string(C.int(e.code))); d != "" {
		s += " (" + d + ")"
	}
	return s
}

func check(call string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &cuError{call, r}
}

// blasError is a cuBLAS status.
type blasError struct {
	call   string
	status int
}

var blasStatus = map[int]string{1: "NOT_INITIALIZED", 3: "ALLOC_FAILED", 7: "INVALID_VALUE", 8: "ARCH_MISMATCH",
	11: "MAPPING_ERROR", 13: "EXECUTION_FAILED", 14: "INTERNAL_ERROR", 15: "NOT_SUPPORTED", 16: "LICENSE_ERROR"}

func (e *blasError) Error() string {
	if e.status >= 1000 {
		return (&cuError{e.call, C.CUresult(e.status - 1000)}).Error()
	}
	if s, ok := blasStatus[e.status]; ok {
		return fmt.Sprintf("%s: CUBLAS_STATUS_%s", e.call, s)
	}
	return fmt.Sprintf("%s: cuBLAS status %d", e.call, e.status)
}

func blasCheck(call string, r C.int) error {
	if r == 0 {
		return nil
	}
	return &blasError{call, int(r)}
}

// stage is a pinned host buffer that uploads go through, so that they are
// asynchronous; its event says when the device has read it.
type stage struct {
	p     unsafe.Pointer
	size  int
	ev    C.uintptr_t
	inUse bool
}

const (
	stages         = 4
	maxStagedBytes = 16 << 20 // larger uploads copy synchronously from pageable memory
	blasWorkspace  = 32 << 20 // cuBLAS's recommendation for Hopper
)

// driver is gpu.Driver on the CUDA driver API: the device's primary context
// (shared with cuBLAS, which uses the runtime API), one non-blocking stream,
// the kernels' module, a cuBLAS handle on that stream.
type driver struct {
	dev     cu.Device
	ordinal int
	name    string
	ctx     C.uintptr_t
	stream  C.uintptr_t
	mod     C.uintptr_t
	fns     [gpu.NumKernels]C.uintptr_t
	blas    C.uintptr_t
	ws      uintptr
	sms     int
	stage   [stages]stage
	next    int
	graphs  map[gpu.Graph]C.uintptr_t // exec → its graph
	closed  bool
}

// withCtx runs f on a locked OS thread with the backend's context current,
// for calls through gorgonia.org/cu (which use the calling thread's context).
func (d *driver) withCtx(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(*(*cu.CUContext)(unsafe.Pointer(&d.ctx))); err != nil {
		return fmt.Errorf("set context: %w", err)
	}
	return f()
}

func newDriver(ordinal int) (d *driver, err error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("count GPUs: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("GPU %d: %w (this machine has %d)", ordinal, ErrNoDevice, n)
	}
	d = &driver{dev: cu.Device(ordinal), ordinal: ordinal, name: fmt.Sprintf("cuda:%d", ordinal), graphs: map[gpu.Graph]C.uintptr_t{}}
	major, minor, err := d.dev.ComputeCapability()
	if err != nil {
		return nil, fmt.Errorf("%s: compute capability: %w", d.name, err)
	}
	ptx, ok := ptxFor(major)
	if !ok {
		return nil, fmt.Errorf("%s: compute capability %d.%d: compute/cuda's PTX targets sm_80 (8.0 or newer)", d.name, major, minor)
	}
	if d.sms, err = d.dev.Attribute(cu.MultiprocessorCount); err != nil {
		return nil, fmt.Errorf("%s: multiprocessor count: %w", d.name, err)
	}
	pctx, err := d.dev.RetainPrimaryCtx()
	if err != nil {
		return nil, fmt.Errorf("%s: retain primary context: %w", d.name, err)
	}
	d.ctx = *(*C.uintptr_t)(unsafe.Pointer(&pctx))
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Close())
		}
	}()
	if err := check("cuStreamCreate", C.tt_stream_create(d.ctx, &d.stream)); err != nil {
		return d, fmt.Errorf("%s: %w", d.name, err)
	}
	if err := d.load(ptx); err != nil {
		return d, fmt.Errorf("%s: %w", d.name, err)
	}
	for k := range d.stage {
		if err := check("cuEventCreate", C.tt_event_create(d.ctx, &d.stage[k].ev)); err != nil {
			return d, fmt.Errorf("%s: %w", d.name, err)
		}
	}
	if err := d.openBLAS(); err != nil {
		return d, fmt.Errorf("%s: %w", d.name, err)
	}
	return d, nil
}

func (d *driver) load(ptx string) error {
	cptx := C.CString(ptx)
	defer C.free(unsafe.Pointer(cptx))
	log := make([]byte, 8192)
	if r := C.tt_module_load(d.ctx, cptx, &d.mod, (*C.char)(unsafe.Pointer(&log[0])), C.size_t(len(log))); r != C.CUDA_SUCCESS {
		return fmt.Errorf("load the kernels' PTX: %w: %s", check("cuModuleLoadDataEx", r), C.GoString((*C.char)(unsafe.Pointer(&log[0]))))
	}
	for k, name := range gpu.KernelNames {
		cs := C.CString(name)
		r := C.tt_module_function(d.ctx, d.mod, cs, &d.fns[k])
		C.free(unsafe.Pointer(cs))
		if err := check("cuModuleGetFunction "+name, r); err != nil {
			return err
		}
	}
	return nil
}

// blasOpen loads cuBLAS into shim.h's table of its functions (tt_blas_open).
// It lives in this file because that table is static: every cgo preamble
// that includes shim.h gets its own copy, and the functions that call
// cuBLAS (tt_blas_create, tt_blas_gemm, tt_blas_destroy) are called from
// this file. Loaded from another file's preamble, this one's table stayed
// NULL and the first cublasCreate jumped to address 0 (seen on an H200;
// TestShimIncludedOnce keeps shim.h in this file alone).
func blasOpen(lt, path string) (msg string, ok bool) {
	cp, clt := C.CString(path), C.CString(lt)
	defer C.free(unsafe.Pointer(cp))
	defer C.free(unsafe.Pointer(clt))
	buf := make([]byte, 1024)
	if C.tt_blas_open(clt, cp, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf))) == 0 {
		return "", true
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), false
}

func (d *driver) openBLAS() error {
	if err := loadCuBLAS(); err != nil {
		return err
	}
	ws, err := d.Alloc(blasWorkspace)
	if err != nil {
		return fmt.Errorf("cuBLAS workspace: %w", err)
	}
	d.ws = ws
	var version C.int
	if err := blasCheck("cublasCreate", C.tt_blas_create(d.ctx, d.stream, C.uintptr_t(ws), blasWorkspace, &d.blas, &version)); err != nil {
		return err
	}
	return nil
}

func (d *driver) Name() string { return d.name }

// MaxBlocks: 16 blocks of 256 threads per multiprocessor fill it twice
// over (2048 threads each).
func (d *driver) MaxBlocks() int { return 16 * d.sms }

func (d *driver) Alloc(bytes int) (uintptr, error) {
	var p cu.DevicePtr
	err := d.withCtx(func() (err error) {
		p, err = cu.MemAlloc(int64(bytes))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cuMemAlloc %d bytes: %w", bytes, err)
	}
	return uintptr(p), nil
}

func (d *driver) Free(p uintptr) error {
	return d.withCtx(func() error { return cu.MemFree(cu.DevicePtr(p)) })
}

func (d *driver) AllocHost(bytes int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.tt_host_alloc(d.ctx, C.size_t(max(bytes, 1)), &p)); err != nil {
		return nil, err
	}
	return p, nil
}

func (d *driver) FreeHost(p unsafe.Pointer) error {
	return check("cuMemFreeHost", C.tt_host_free(d.ctx, p))
}

// Upload stages src in pinned memory and copies it asynchronously; a stage
// is reused once the device has read it, so the host runs up to four
// uploads ahead.
func (d *driver) Upload(dst uintptr, src unsafe.Pointer, bytes int) error {
	if bytes > maxStagedBytes {
		return check("cuMemcpyHtoD", C.tt_htod_sync(d.ctx, d.stream, C.uintptr_t(dst), src, C.size_t(bytes)))
	}
	s := &d.stage[d.next]
	d.next = (d.next + 1) % stages
	if s.inUse {
		if err := check("cuEventSynchronize", C.tt_event_sync(d.ctx, s.ev)); err != nil {
			return err
		}
		s.inUse = false
	}
	if s.size < bytes {
		if s.p != nil {
			if err := d.FreeHost(s.p); err != nil {
				return err
			}
			s.p, s.size = nil, 0
		}
		p, err := d.AllocHost(max(bytes, 1<<20))
		if err != nil {
			return err
		}
		s.p, s.size = p, max(bytes, 1<<20)
	}
	copy(unsafe.Slice((*byte)(s.p), bytes), unsafe.Slice((*byte)(src), bytes))
	if err := check("cuMemcpyHtoDAsync", C.tt_htod_async(d.ctx, d.stream, C.uintptr_t(dst), s.p, C.size_t(bytes))); err != nil {
		return err
	}
	s.inUse = true
	return check("cuEventRecord", C.tt_event_record(d.ctx, s.ev, d.stream))
}

func (d *driver) CopyHtoD(dst uintptr, src unsafe.Pointer, bytes int) error {
	return check("cuMemcpyHtoDAsync", C.tt_htod_async(d.ctx, d.stream, C.uintptr_t(dst), src, C.size_t(bytes)))
}

func (d *driver) Download(dst unsafe.Pointer, src uintptr, bytes int) error {
	return check("cuMemcpyDtoH", C.tt_dtoh(d.ctx, d.stream, dst, C.uintptr_t(src), C.size_t(bytes)))
}

func (d *driver) Launch(k gpu.Kernel, grid, block uint32, args []uint64) error {
	var a *C.uint64_t
	if len(args) > 0 {
		a = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	return check("cuLaunchKernel "+k.String(), C.tt_launch(d.ctx, d.stream, d.fns[k], C.uint(grid), C.uint(block), a, C.int(len(args))))
}

func (d *driver) Gemm(g *gpu.GemmOp) error {
	return blasCheck("cublasGemmEx", C.tt_blas_gemm(d.ctx, d.blas, cbool(g.TransA), cbool(g.TransB), C.int(g.M), C.int(g.N), C.int(g.K),
		C.float(g.Alpha), C.uintptr_t(g.A), C.int(g.LDA), C.uintptr_t(g.B), C.int(g.LDB), C.float(g.Beta), C.uintptr_t(g.C), C.int(g.LDC),
		C.int(g.Precision)))
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

func (d *driver) Synchronize() error {
	return check("cuStreamSynchronize", C.tt_sync(d.ctx, d.stream))
}

func (d *driver) BeginCapture() error {
	return check("cuStreamBeginCapture", C.tt_capture_begin(d.ctx, d.stream))
}

func (d *driver) LastNode() (gpu.Node, error) {
	var n C.uintptr_t
	if err := check("cuStreamGetCaptureInfo", C.tt_capture_last(d.ctx, d.stream, &n)); err != nil {
		return 0, err
	}
	return gpu.Node(n), nil
}

func (d *driver) EndCapture() (gpu.Graph, error) {
	var g, exec C.uintptr_t
	if err := check("cuStreamEndCapture/cuGraphInstantiate", C.tt_capture_end(d.ctx, d.stream, &g, &exec)); err != nil {
		return 0, err
	}
	d.graphs[gpu.Graph(exec)] = g
	return gpu.Graph(exec), nil
}

func (d *driver) LaunchGraph(g gpu.Graph) error {
	return check("cuGraphLaunch", C.tt_graph_launch(d.ctx, C.uintptr_t(g), d.stream))
}

func (d *driver) SetKernelParams(g gpu.Graph, n gpu.Node, k gpu.Kernel, grid, block uint32, args []uint64) error {
	var a *C.uint64_t
	if len(args) > 0 {
		a = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	return check("cuGraphExecKernelNodeSetParams "+k.String(),
		C.tt_graph_set(d.ctx, C.uintptr_t(g), C.uintptr_t(n), d.fns[k], C.uint(grid), C.uint(block), a, C.int(len(args))))
}

func (d *driver) DestroyGraph(g gpu.Graph) error {
	graph, ok := d.graphs[g]
	if !ok {
		return fmt.Errorf("destroy graph %#x: not this device's", uintptr(g))
	}
	delete(d.graphs, g)
	return check("cuGraphExecDestroy", C.tt_graph_destroy(d.ctx, C.uintptr_t(g), graph))
}

func (d *driver) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	if d.stream != 0 {
		errs = append(errs, d.Synchronize())
	}
	if d.blas != 0 {
		errs = append(errs, blasCheck("cublasDestroy", C.tt_blas_destroy(d.ctx, d.blas)))
	}
	if d.ws != 0 {
		errs = append(errs, d.Free(d.ws))
	}
	for k := range d.stage {
		s := &d.stage[k]
		if s.p != nil {
			errs = append(errs, d.FreeHost(s.p))
		}
		if s.ev != 0 {
			errs = append(errs, check("cuEventDestroy", C.tt_event_destroy(d.ctx, s.ev)))
		}
	}
	if d.mod != 0 {
		errs = append(errs, check("cuModuleUnload", C.tt_module_unload(d.ctx, d.mod)))
	}
	if d.stream != 0 {
		errs = append(errs, check("cuStreamDestroy", C.tt_stream_destroy(d.ctx, d.stream)))
	}
	if d.ctx != 0 {
		errs = append(errs, d.dev.ReleasePrimaryCtx())
	}
	return errors.Join(errs...)
}
