// Package emu is a gpu.Driver that runs compute/cuda's kernels on the CPU:
// kernels.cu is compiled as C++ with CUDA's thread and block indices
// emulated by fibers (emu.cc), device memory is host memory, GEMMs follow
// cuBLAS's column-major definition (with TF32 and BF16 operand rounding), and
// stream capture records a list of nodes that a graph launch replays. It lets
// the CUDA backend's Go code and kernels be tested on machines without a GPU
// (go test ./compute/cuda/...); it says nothing about speed, nor about the
// CUDA driver, PTX JIT or cuBLAS themselves, which only a GPU run checks.
//
// Device memory comes filled with NaN bytes, so a kernel that reads what
// nothing wrote shows up in the results; GEMM and copy operands are checked
// to lie inside one allocation.
package emu

/*
#cgo CXXFLAGS: -std=c++17 -O2 -Wall
#include <stdlib.h>
#include <string.h>
#include "emu_api.h"

// Device addresses cross from Go as integers.
static void emu_free(uintptr_t p) { free((void *)p); }
static void emu_to_dev(uintptr_t dst, const void *src, size_t n) { memcpy((void *)dst, src, n); }
static void emu_to_host(void *dst, uintptr_t src, size_t n) { memcpy(dst, (const void *)src, n); }
static void emu_sgemm(int ta, int tb, int m, int n, int k, float alpha, uintptr_t A, int lda, uintptr_t B, int ldb, float beta,
                      uintptr_t C, int ldc, int prec) {
	tt_emu_sgemm(ta, tb, m, n, k, alpha, (const float *)A, lda, (const float *)B, ldb, beta, (float *)C, ldc, prec);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sort"
	"unsafe"

	"github.com/tempotrain/tempotrain/compute/cuda/internal/gpu"
)

// Driver is the emulated device. It is not safe for concurrent use (as a
// stream is not); separate Drivers may run in parallel.
type Driver struct {
	// Blocks is MaxBlocks: few, since every thread costs a fiber switch.
	Blocks int

	kidx   [gpu.NumKernels]C.int
	allocs map[uintptr]int
	cap    *graph
	graphs map[gpu.Graph]*graph
	nextG  gpu.Graph
	closed bool
}

type nodeKind int

const (
	nKernel nodeKind = iota
	nGemm
	nCopy
)

type node struct {
	kind        nodeKind
	k           gpu.Kernel
	grid, block uint32
	args        []uint64
	gemm        gpu.GemmOp
	dst         uintptr
	src         unsafe.Pointer
	bytes       int
}

type graph struct{ nodes []node }

var _ gpu.Driver = (*Driver)(nil)

// New returns an emulated device with every kernel of gpu.KernelNames.
func New() (*Driver, error) {
	d := &Driver{Blocks: 2, allocs: map[uintptr]int{}, graphs: map[gpu.Graph]*graph{}}
	for k, name := range gpu.KernelNames {
		cs := C.CString(name)
		var nargs C.int
		d.kidx[k] = C.tt_emu_kernel(cs, &nargs)
		C.free(unsafe.Pointer(cs))
		if d.kidx[k] < 0 {
			return nil, fmt.Errorf("emu: kernels.cu has no kernel %s", name)
		}
	}
	return d, nil
}

func (d *Driver) Name() string   { return "emu" }
func (d *Driver) MaxBlocks() int { return d.Blocks }

func (d *Driver) Alloc(bytes int) (uintptr, error) {
	size := (max(bytes, 1) + 255) &^ 255
	p := C.aligned_alloc(256, C.size_t(size))
	if p == nil {
		return 0, fmt.Errorf("emu: out of memory for %d bytes", bytes)
	}
	C.memset(p, 0xff, C.size_t(size)) // NaN in every float
	d.allocs[uintptr(p)] = size
	return uintptr(p), nil
}

func (d *Driver) Free(p uintptr) error {
	if _, ok := d.allocs[p]; !ok {
		return fmt.Errorf("emu: free of %#x, not an allocation", p)
	}
	delete(d.allocs, p)
	C.emu_free(C.uintptr_t(p))
	return nil
}

func (d *Driver) AllocHost(bytes int) (unsafe.Pointer, error) {
	p := C.malloc(C.size_t(max(bytes, 1)))
	if p == nil {
		return nil, fmt.Errorf("emu: out of host memory for %d bytes", bytes)
	}
	return p, nil
}

func (d *Driver) FreeHost(p unsafe.Pointer) error {
	C.free(p)
	return nil
}

// inside checks that [p, p+bytes) lies in one allocation.
func (d *Driver) inside(what string, p uintptr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	bases := make([]uintptr, 0, len(d.allocs))
	for b := range d.allocs {
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	i := sort.Search(len(bases), func(i int) bool { return bases[i] > p }) - 1
	if i < 0 || p+uintptr(bytes) > bases[i]+uintptr(d.allocs[bases[i]]) {
		return fmt.Errorf("emu: %s [%#x, +%d) is not inside one allocation", what, p, bytes)
	}
	return nil
}

func (d *Driver) Upload(dst uintptr, src unsafe.Pointer, bytes int) error {
	if d.cap != nil {
		return errors.New("emu: Upload while capturing (use CopyHtoD from pinned memory)")
	}
	if err := d.inside("upload destination", dst, bytes); err != nil {
		return err
	}
	C.emu_to_dev(C.uintptr_t(dst), src, C.size_t(bytes))
	return nil
}

func (d *Driver) CopyHtoD(dst uintptr, src unsafe.Pointer, bytes int) error {
	return d.do(node{kind: nCopy, dst: dst, src: src, bytes: bytes})
}

func (d *Driver) Download(dst unsafe.Pointer, src uintptr, bytes int) error {
	if d.cap != nil {
		return errors.New("emu: Download while capturing")
	}
	if err := d.inside("download source", src, bytes); err != nil {
		return err
	}
	C.emu_to_host(dst, C.uintptr_t(src), C.size_t(bytes))
	return nil
}

func (d *Driver) Launch(k gpu.Kernel, grid, block uint32, args []uint64) error {
	return d.do(node{kind: nKernel, k: k, grid: grid, block: block, args: append([]uint64(nil), args...)})
}

func (d *Driver) Gemm(g *gpu.GemmOp) error {
	return d.do(node{kind: nGemm, gemm: *g})
}

// do runs n, or appends it to the graph being captured.
func (d *Driver) do(n node) error {
	if d.cap != nil {
		d.cap.nodes = append(d.cap.nodes, n)
		return nil
	}
	return d.run(&n)
}

func (d *Driver) run(n *node) error {
	switch n.kind {
	case nKernel:
		var a *C.uint64_t
		if len(n.args) > 0 {
			a = (*C.uint64_t)(unsafe.Pointer(&n.args[0]))
		}
		if r := C.tt_emu_launch(d.kidx[n.k], C.uint(n.grid), C.uint(n.block), a, C.int(len(n.args))); r != 0 {
			return fmt.Errorf("emu: launch %s with %d arguments on %d×%d threads: error %d", n.k, len(n.args), n.grid, n.block, int(r))
		}
	case nGemm:
		return d.gemm(&n.gemm)
	case nCopy:
		if err := d.inside("copy destination", n.dst, n.bytes); err != nil {
			return err
		}
		C.emu_to_dev(C.uintptr_t(n.dst), n.src, C.size_t(n.bytes))
	}
	return nil
}

func (d *Driver) gemm(g *gpu.GemmOp) error {
	if g.M < 0 || g.N < 0 || g.K < 0 {
		return fmt.Errorf("emu: gemm %dx%dx%d", g.M, g.N, g.K)
	}
	if g.M == 0 || g.N == 0 {
		return nil
	}
	// Column-major extents: op(A) is M×K, stored K×M when transposed.
	rowsA, colsA := g.M, g.K
	if g.TransA {
		rowsA, colsA = g.K, g.M
	}
	rowsB, colsB := g.K, g.N
	if g.TransB {
		rowsB, colsB = g.N, g.K
	}
	if g.LDA < max(rowsA, 1) || g.LDB < max(rowsB, 1) || g.LDC < max(g.M, 1) {
		return fmt.Errorf("emu: gemm leading dimensions %d %d %d too small for %dx%d, %dx%d, %dx%d",
			g.LDA, g.LDB, g.LDC, rowsA, colsA, rowsB, colsB, g.M, g.N)
	}
	for _, m := range []struct {
		what       string
		p          uintptr
		ld, r, col int
	}{{"gemm A", g.A, g.LDA, rowsA, colsA}, {"gemm B", g.B, g.LDB, rowsB, colsB}, {"gemm C", g.C, g.LDC, g.M, g.N}} {
		if m.r == 0 || m.col == 0 {
			continue
		}
		if err := d.inside(m.what, m.p, ((m.col-1)*m.ld+m.r)*4); err != nil {
			return err
		}
	}
	C.emu_sgemm(cb(g.TransA), cb(g.TransB), C.int(g.M), C.int(g.N), C.int(g.K), C.float(g.Alpha),
		C.uintptr_t(g.A), C.int(g.LDA), C.uintptr_t(g.B), C.int(g.LDB),
		C.float(g.Beta), C.uintptr_t(g.C), C.int(g.LDC), C.int(g.Precision))
	return nil
}

func cb(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

func (d *Driver) Synchronize() error { return nil }

func (d *Driver) BeginCapture() error {
	if d.cap != nil {
		return errors.New("emu: capture already begun")
	}
	d.cap = &graph{}
	return nil
}

func (d *Driver) LastNode() (gpu.Node, error) {
	if d.cap == nil || len(d.cap.nodes) == 0 {
		return 0, errors.New("emu: no captured node")
	}
	return gpu.Node(len(d.cap.nodes) - 1), nil
}

func (d *Driver) EndCapture() (gpu.Graph, error) {
	if d.cap == nil {
		return 0, errors.New("emu: no capture to end")
	}
	d.nextG++
	d.graphs[d.nextG] = d.cap
	d.cap = nil
	return d.nextG, nil
}

func (d *Driver) LaunchGraph(g gpu.Graph) error {
	gr, ok := d.graphs[g]
	if !ok {
		return fmt.Errorf("emu: no graph %d", g)
	}
	for i := range gr.nodes {
		if err := d.run(&gr.nodes[i]); err != nil {
			return fmt.Errorf("graph node %d: %w", i, err)
		}
	}
	return nil
}

func (d *Driver) SetKernelParams(g gpu.Graph, n gpu.Node, k gpu.Kernel, grid, block uint32, args []uint64) error {
	gr, ok := d.graphs[g]
	if !ok || int(n) >= len(gr.nodes) || gr.nodes[n].kind != nKernel {
		return fmt.Errorf("emu: graph %d has no kernel node %d", g, n)
	}
	nd := &gr.nodes[n]
	if nd.k != k {
		return fmt.Errorf("emu: node %d runs %s, not %s", n, nd.k, k)
	}
	nd.grid, nd.block, nd.args = grid, block, append(nd.args[:0], args...)
	return nil
}

func (d *Driver) DestroyGraph(g gpu.Graph) error {
	if _, ok := d.graphs[g]; !ok {
		return fmt.Errorf("emu: no graph %d", g)
	}
	delete(d.graphs, g)
	return nil
}

// Allocations counts live device allocations (tests check Close frees
// them).
func (d *Driver) Allocations() int { return len(d.allocs) }

func (d *Driver) Close() error {
	if d.closed {
		return errors.New("emu: closed twice")
	}
	d.closed = true
	return nil
}
