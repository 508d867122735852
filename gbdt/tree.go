package gbdt

import "fmt"

// Tree is one regression tree in XGBoost's array layout (the JSON model's
// fields): node i is a leaf when Left[i] == -1, and its value is then
// Cond[i]; otherwise a row goes to Left[i] when its feature Feature[i] is
// < Cond[i], to Right[i] when it is ≥ Cond[i], and to the DefaultLeft[i]
// side when it is missing (NaN). Node 0 is the root; Parent[0] is
// 2147483647 as in XGBoost's files.
type Tree struct {
	Left, Right []int32
	Parent      []int32
	Feature     []uint32
	Cond        []float32
	DefaultLeft []bool
	// Statistics of training: the node's weight (for leaves the leaf value
	// once eta is applied, as XGBoost writes it), its gain when split, and
	// its sum of hessians (cover).
	BaseWeight []float32
	LossChange []float32
	SumHess    []float32

	// splitBin[i] is the last bin of Feature[i] that goes left (-1: none,
	// only missing values may), for prediction on bin codes while
	// training; nil until bound to cuts.
	splitBin []int32
}

const rootParent = 2147483647

// NumNodes is the number of nodes.
func (t *Tree) NumNodes() int { return len(t.Left) }

// IsLeaf reports whether node i is a leaf.
func (t *Tree) IsLeaf(i int) bool { return t.Left[i] < 0 }

// addNode appends a leaf and returns its index.
func (t *Tree) addNode(parent int32) int32 {
	t.Left = append(t.Left, -1)
	t.Right = append(t.Right, -1)
	t.Parent = append(t.Parent, parent)
	t.Feature = append(t.Feature, 0)
	t.Cond = append(t.Cond, 0)
	t.DefaultLeft = append(t.DefaultLeft, false)
	t.BaseWeight = append(t.BaseWeight, 0)
	t.LossChange = append(t.LossChange, 0)
	t.SumHess = append(t.SumHess, 0)
	t.splitBin = append(t.splitBin, 0)
	return int32(len(t.Left) - 1)
}

// leaf returns the leaf that x (one row, all features) reaches.
func (t *Tree) leaf(x []float32) int {
	k := 0
	for t.Left[k] >= 0 {
		v := x[t.Feature[k]]
		switch {
		case v != v:
			if t.DefaultLeft[k] {
				k = int(t.Left[k])
			} else {
				k = int(t.Right[k])
			}
		case v < t.Cond[k]:
			k = int(t.Left[k])
		default:
			k = int(t.Right[k])
		}
	}
	return k
}

func (t *Tree) leafValue(x []float32) float32 { return t.Cond[t.leaf(x)] }

// leafBins returns the leaf that row r of m reaches, deciding on bin codes.
func (t *Tree) leafBins(m *binMatrix, r int) int {
	k := 0
	for t.Left[k] >= 0 {
		if m.goesLeft(r, int(t.Feature[k]), int(t.splitBin[k]), t.DefaultLeft[k]) {
			k = int(t.Left[k])
		} else {
			k = int(t.Right[k])
		}
	}
	return k
}

// bindBins finds, for every split, the bin whose upper bound is its
// condition (or -1 when the condition is the feature's Min): trees trained
// on these cuts always have one.
func (t *Tree) bindBins(c *Cuts) error {
	t.splitBin = make([]int32, len(t.Left))
	for i := range t.Left {
		if t.Left[i] < 0 {
			continue
		}
		f := int(t.Feature[i])
		if f >= len(c.Min) {
			return fmt.Errorf("node %d splits on feature %d, the data has %d", i, f, len(c.Min))
		}
		if t.Cond[i] == c.Min[f] {
			t.splitBin[i] = -1
			continue
		}
		u := c.feature(f)
		b := c.Bin(f, t.Cond[i]) - 1 // the bound equal to Cond is bin b's upper bound
		if b < 0 || b >= len(u) || u[b] != t.Cond[i] {
			if len(u) > 0 && u[len(u)-1] == t.Cond[i] {
				b = len(u) - 1
			} else {
				return fmt.Errorf("node %d: condition %v of feature %d is not one of its cut points", i, t.Cond[i], f)
			}
		}
		t.splitBin[i] = int32(b)
	}
	return nil
}

// check validates the structure (children in range, each node reached
// once, features below nf), so that prediction cannot loop or index out of
// range.
func (t *Tree) check(nf int) error {
	n := len(t.Left)
	if n == 0 {
		return fmt.Errorf("no nodes")
	}
	for _, l := range [][]int{{len(t.Right)}, {len(t.Feature)}, {len(t.Cond)}, {len(t.DefaultLeft)}} {
		if l[0] != n {
			return fmt.Errorf("arrays of different lengths (%d nodes, an array of %d)", n, l[0])
		}
	}
	seen := make([]bool, n)
	stack := []int{0}
	seen[0] = true
	for len(stack) > 0 {
		k := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		l, r := t.Left[k], t.Right[k]
		if l < 0 {
			continue
		}
		if int(t.Feature[k]) >= nf {
			return fmt.Errorf("node %d splits on feature %d, the model has %d", k, t.Feature[k], nf)
		}
		for _, c := range []int32{l, r} {
			if c <= 0 || int(c) >= n || seen[c] {
				return fmt.Errorf("node %d has child %d: out of range or reached twice", k, c)
			}
			seen[c] = true
			stack = append(stack, int(c))
		}
	}
	return nil
}
