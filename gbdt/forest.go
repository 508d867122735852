package gbdt

/*
#cgo CFLAGS: -O3
#include "forest.h"
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// Forest is a model's trees laid out once for prediction (forest.c): every
// tree's nodes renumbered breadth first so that a node's children are
// adjacent, leaves made to point to themselves, and each row walked down a
// tree in exactly the tree's depth in steps, eight rows at a time, without
// a branch on the data (a branch the data decides at every node is one
// the processor mispredicts often). It is package gbdt's one tree walk:
// PredictMargin lays a Forest out on every call, package predict once per
// model. The margins are the Go reference walk's (predictGo) bit for bit:
// the same leaves added in the same order, in float32, to the same base
// margin. A Forest is safe for concurrent use.
type Forest struct {
	nodes  []C.gb_fnode
	root   []int64
	depth  []int32
	group  []int32
	base   float32 // the base margin of every output group
	nf, k  int
	block  int
	ntrees int
}

// lockstepDepth bounds the depth of the trees a Forest walks in lockstep:
// every row takes as many steps in such a tree as its deepest leaf is
// deep. Deeper trees (lossguide without max_depth can grow them) are
// walked row by row, each row stopping at its own leaf.
const lockstepDepth = 64

// maxTreeNodes bounds a tree's nodes: node indices are int32.
const maxTreeNodes = math.MaxInt32

// NewForest lays out the trees of m for prediction.
func NewForest(m *Model) (*Forest, error) {
	if len(m.TreeInfo) != len(m.Trees) {
		return nil, fmt.Errorf("gbdt: model has %d trees and %d tree_info entries", len(m.Trees), len(m.TreeInfo))
	}
	f, err := layout(m.Trees, m.TreeInfo, m.NumFeature, m.NumGroups())
	if err != nil {
		return nil, err
	}
	f.base = baseMargin(m.Objective, m.BaseScore)
	return f, nil
}

// layout lays out trees (trees[i] for output group groups[i]) over nf
// features and k groups. It checks what the walk relies on (children and
// features in range, groups below k), so that no tree can make it read or
// write out of bounds or loop.
func layout(trees []*Tree, groups []int, nf, k int) (*Forest, error) {
	if nf < 0 || nf >= 1<<31 || k < 1 {
		return nil, fmt.Errorf("gbdt: forest of %d features and %d output groups", nf, k)
	}
	f := &Forest{nf: nf, k: k, ntrees: len(trees), root: make([]int64, 0, len(trees)),
		depth: make([]int32, 0, len(trees)), group: make([]int32, 0, len(trees))}
	for t, tr := range trees {
		if groups[t] < 0 || groups[t] >= k {
			return nil, fmt.Errorf("gbdt: tree %d is for group %d, the model has %d", t, groups[t], k)
		}
		root := len(f.nodes)
		d, err := f.add(tr)
		if err != nil {
			return nil, fmt.Errorf("gbdt: tree %d: %w", t, err)
		}
		f.root = append(f.root, int64(root))
		f.depth = append(f.depth, int32(d))
		f.group = append(f.group, int32(groups[t]))
	}
	// A block of rows of about 16 KB stays in L1 across the trees; at least
	// 8 rows (one step group), at most 64.
	f.block = min(64, max(8, 16384/max(4*f.nf, 1)/8*8))
	return f, nil
}

// add appends tree tr breadth first and returns its depth. A tree whose
// walk would visit more nodes than it has (a cycle) is refused, so the
// walk ends and the layout takes at most the tree's size.
func (f *Forest) add(tr *Tree) (int, error) {
	n := len(tr.Left)
	switch {
	case n == 0:
		return 0, fmt.Errorf("no nodes")
	case n > maxTreeNodes:
		return 0, fmt.Errorf("%d nodes, at most %d", n, maxTreeNodes)
	case len(tr.Right) < n || len(tr.Feature) < n || len(tr.Cond) < n || len(tr.DefaultLeft) < n:
		return 0, fmt.Errorf("arrays of different lengths (%d nodes, right %d, feature %d, cond %d, default_left %d)",
			n, len(tr.Right), len(tr.Feature), len(tr.Cond), len(tr.DefaultLeft))
	}
	base := len(f.nodes)
	nan := C.float(float32(math.NaN()))
	type item struct {
		src, depth int
	}
	queue := []item{{0, 0}}
	f.nodes = append(f.nodes, C.gb_fnode{})
	depth := 0
	for at := 0; at < len(queue); at++ {
		it := queue[at]
		dst := base + at
		depth = max(depth, it.depth)
		s := it.src
		if tr.Left[s] < 0 {
			f.nodes[dst] = C.gb_fnode{left: C.int32_t(at - 1), feat: 0, cond: nan, value: C.float(tr.Cond[s])}
			continue
		}
		l, r := int(tr.Left[s]), int(tr.Right[s])
		if l >= n || r < 0 || r >= n {
			return 0, fmt.Errorf("node %d has children %d and %d, the tree has %d nodes", s, l, r, n)
		}
		if len(queue)+2 > n {
			return 0, fmt.Errorf("node %d: the tree's walk reaches more than its %d nodes (a cycle)", s, n)
		}
		feat := tr.Feature[s]
		if int64(feat) >= int64(f.nf) {
			return 0, fmt.Errorf("node %d splits on feature %d, the model has %d", s, feat, f.nf)
		}
		if tr.DefaultLeft[s] {
			feat |= 1 << 31
		}
		// Children go to the next two slots of the queue.
		f.nodes[dst] = C.gb_fnode{left: C.int32_t(len(queue)), feat: C.uint32_t(feat), cond: C.float(tr.Cond[s])}
		queue = append(queue, item{l, it.depth + 1}, item{r, it.depth + 1})
		f.nodes = append(f.nodes, C.gb_fnode{}, C.gb_fnode{})
	}
	return depth, nil
}

// Margins writes the margins of rows rows of x (rows × the model's
// features, NaN missing) into out (rows × NumGroups): the base margin plus
// the leaves of each group's trees, as PredictMargin returns them.
func (f *Forest) Margins(x []float32, rows int, out []float32) {
	f.check(x, rows, out)
	for i := range out {
		out[i] = f.base
	}
	f.addTo(x, rows, out)
}

func (f *Forest) check(x []float32, rows int, out []float32) {
	if rows < 0 || len(x) != rows*f.nf || len(out) != rows*f.k {
		panic(fmt.Sprintf("gbdt: forest of %d features, %d groups given %d values for %d rows, %d outputs", f.nf, f.k, len(x), rows, len(out)))
	}
}

// addTo adds every tree's leaf to out[i*k+group] for each row i of x,
// trees in order.
func (f *Forest) addTo(x []float32, rows int, out []float32) {
	f.check(x, rows, out)
	if rows == 0 || f.ntrees == 0 {
		return
	}
	var dummy float32
	xp := (*C.float)(unsafe.Pointer(&dummy)) // a model without features has only leaves: no step reads past x[0]
	if f.nf > 0 {
		xp = (*C.float)(unsafe.Pointer(&x[0]))
	}
	C.gb_forest_add(xp, C.long(rows), C.long(f.nf), &f.nodes[0], (*C.int64_t)(unsafe.Pointer(&f.root[0])),
		(*C.int32_t)(unsafe.Pointer(&f.depth[0])), (*C.int32_t)(unsafe.Pointer(&f.group[0])), C.long(f.ntrees),
		C.long(f.k), C.long(f.block), C.long(lockstepDepth), (*C.float)(unsafe.Pointer(&out[0])))
}
