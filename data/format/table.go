package format

import (
	"fmt"
	"math"
	"sync"
)

// Kind is the kind of a column's values.
type Kind uint8

const (
	// Numeric values are float32; NaN is missing.
	Numeric Kind = iota
	// Categorical values are strings, held as codes into a Dict; -1 is
	// missing.
	Categorical
)

func (k Kind) String() string {
	switch k {
	case Numeric:
		return "numeric"
	case Categorical:
		return "categorical"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// MarshalText writes "numeric" or "categorical".
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads "numeric" or "categorical".
func (k *Kind) UnmarshalText(b []byte) error {
	switch string(b) {
	case "numeric":
		*k = Numeric
	case "categorical":
		*k = Categorical
	default:
		return fmt.Errorf("column kind %q: want numeric or categorical", b)
	}
	return nil
}

// ColumnInfo names a column and its kind.
type ColumnInfo struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
}

// Dict numbers the distinct strings of a categorical column in the order
// they are first seen. It is safe for concurrent use.
type Dict struct {
	mu   sync.RWMutex
	m    map[string]int32
	vals []string
}

// NewDict returns an empty dictionary.
func NewDict() *Dict { return &Dict{m: make(map[string]int32)} }

// Code returns the code of s, adding it if new.
func (d *Dict) Code(s string) int32 {
	d.mu.RLock()
	c, ok := d.m[s]
	d.mu.RUnlock()
	if ok {
		return c
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.m[s]; ok {
		return c
	}
	c = int32(len(d.vals))
	d.m[s] = c
	d.vals = append(d.vals, s)
	return c
}

// Lookup returns the code of s, if present.
func (d *Dict) Lookup(s string) (int32, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	c, ok := d.m[s]
	return c, ok
}

// String returns the string of a code.
func (d *Dict) String(code int32) string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.vals[code]
}

// Len is the number of distinct strings.
func (d *Dict) Len() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.vals)
}

// StringsFrom appends the strings of codes [from, Len()) to dst.
func (d *Dict) StringsFrom(dst []string, from int) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if from < len(d.vals) {
		dst = append(dst, d.vals[from:]...)
	}
	return dst
}

// merge adds a chunk's local dictionary and returns the translation of its
// codes to d's.
func (d *Dict) merge(l *localDict, trans []int32) []int32 {
	trans = trans[:0]
	if len(l.vals) == 0 {
		return trans
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range l.vals {
		c, ok := d.m[s]
		if !ok {
			c = int32(len(d.vals))
			d.m[s] = c
			d.vals = append(d.vals, s)
		}
		trans = append(trans, c)
	}
	return trans
}

// localDict is a Dict for one goroutine (a parse worker's chunk).
type localDict struct {
	m    map[string]int32
	vals []string
}

func (l *localDict) code(b []byte) int32 {
	if c, ok := l.m[string(b)]; ok {
		return c
	}
	if l.m == nil {
		l.m = make(map[string]int32)
	}
	s := string(b)
	c := int32(len(l.vals))
	l.m[s] = c
	l.vals = append(l.vals, s)
	return c
}

// Batch is raw rows, column by column, as they come from a file: the input
// of a Pipeline. A predictor builds one with NewBatch and Set*; a Shard
// fills its own.
type Batch struct {
	// Columns are the batch's columns (shared, read-only).
	Columns []ColumnInfo
	// N is the number of rows.
	N int
	// Num[j] holds numeric column j's values (NaN: missing); nil for a
	// categorical column.
	Num [][]float32
	// Cat[j] holds categorical column j's codes into Dicts[j] (-1:
	// missing); nil for a numeric column.
	Cat   [][]int32
	Dicts []*Dict
	// Pixels holds N images of PixelsPerRow bytes each (image datasets;
	// Columns is then empty).
	Pixels       []byte
	PixelsPerRow int
}

// NewBatch returns a batch of columns with room for capacity rows and a
// dictionary of its own for each categorical column.
func NewBatch(cols []ColumnInfo, capacity int) *Batch {
	b := &Batch{Columns: cols, Num: make([][]float32, len(cols)), Cat: make([][]int32, len(cols)), Dicts: make([]*Dict, len(cols))}
	for j, c := range cols {
		if c.Kind == Numeric {
			b.Num[j] = make([]float32, 0, capacity)
		} else {
			b.Cat[j] = make([]int32, 0, capacity)
			b.Dicts[j] = NewDict()
		}
	}
	return b
}

// Reset sets the batch to n rows, every value missing.
func (b *Batch) Reset(n int) {
	b.N = n
	for j := range b.Columns {
		if b.Columns[j].Kind == Numeric {
			b.Num[j] = grow(b.Num[j], n)
			for i := range b.Num[j] {
				b.Num[j][i] = float32(math.NaN())
			}
		} else {
			b.Cat[j] = grow(b.Cat[j], n)
			for i := range b.Cat[j] {
				b.Cat[j][i] = -1
			}
		}
	}
}

// Column returns the index of the named column, or -1.
func (b *Batch) Column(name string) int {
	for j, c := range b.Columns {
		if c.Name == name {
			return j
		}
	}
	return -1
}

// SetNumber sets numeric column j of row i.
func (b *Batch) SetNumber(j, i int, v float64) { b.Num[j][i] = float32(v) }

// SetString sets categorical column j of row i.
func (b *Batch) SetString(j, i int, s string) { b.Cat[j][i] = b.Dicts[j].Code(s) }

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Block is a run of rows in memory, column by column: what one read of a
// file piece yields. Columns are the dataset's slots (features, then the
// label); codes are into the dataset's dictionaries once merged.
type Block struct {
	N   int
	Num [][]float32 // per slot; nil for categorical slots
	Cat [][]int32   // per slot; nil for numeric slots
	Px  []byte      // image datasets: n × pixels per row
	// dicts are the chunk's own dictionaries until the block is merged
	// into the dataset's (then nil).
	dicts []*localDict
	// Vals, in a packed block (package data packs a stream's window), holds its
	// rows row-major: row r's slot j at Vals[r*Width+j], a float32's bits
	// or a code; Num and Cat are then nil.
	Vals  []uint32
	Width int
}

// Slot is a column the dataset keeps: a feature, or the label (last).
type Slot struct {
	Name  string
	Kind  Kind
	label bool
	// forced: categorical because the spec says so.
	forced bool
}

// newBlock makes an empty block for the slots in want (all when nil).
func newBlock(slots []Slot, want []bool, capRows int) *Block {
	b := &Block{Num: make([][]float32, len(slots)), Cat: make([][]int32, len(slots)), dicts: make([]*localDict, len(slots))}
	for j, s := range slots {
		if want != nil && !want[j] {
			continue
		}
		if s.Kind == Numeric {
			b.Num[j] = make([]float32, 0, capRows)
		} else {
			b.Cat[j] = make([]int32, 0, capRows)
			b.dicts[j] = &localDict{}
		}
	}
	return b
}

// MemBytes is the memory the block's values take.
func (b *Block) MemBytes() int64 {
	var n int64
	for j := range b.Num {
		n += int64(cap(b.Num[j]))*4 + int64(cap(b.Cat[j]))*4
	}
	return n + int64(cap(b.Px)) + int64(cap(b.Vals))*4
}

// Slice keeps rows [lo, hi) of the block (sharing memory).
func (b *Block) Slice(lo, hi int) *Block {
	if lo == 0 && hi == b.N {
		return b
	}
	s := &Block{N: hi - lo, Num: make([][]float32, len(b.Num)), Cat: make([][]int32, len(b.Cat)), dicts: b.dicts, Width: b.Width}
	if b.Vals != nil {
		s.Vals = b.Vals[lo*b.Width : hi*b.Width : hi*b.Width]
	}
	for j := range b.Num {
		if b.Num[j] != nil {
			s.Num[j] = b.Num[j][lo:hi:hi]
		}
		if b.Cat[j] != nil {
			s.Cat[j] = b.Cat[j][lo:hi:hi]
		}
	}
	if b.Px != nil {
		per := len(b.Px) / max(b.N, 1)
		s.Px = b.Px[lo*per : hi*per : hi*per]
	}
	return s
}

// MergeDicts moves the block's local codes onto the dataset's dictionaries.
func (b *Block) MergeDicts(dicts []*Dict, scratch []int32) []int32 {
	for j, l := range b.dicts {
		if l == nil || b.Cat[j] == nil {
			continue
		}
		scratch = dicts[j].merge(l, scratch)
		codes := b.Cat[j]
		for i, c := range codes {
			if c >= 0 {
				codes[i] = scratch[c]
			}
		}
	}
	b.dicts = nil
	return scratch
}

// Resize sizes the batch's columns to n rows, keeping what they hold.
func (b *Batch) Resize(n int) {
	b.N = n
	for j := range b.Columns {
		if b.Num[j] != nil || b.Columns[j].Kind == Numeric {
			b.Num[j] = grow(b.Num[j], n)
		} else {
			b.Cat[j] = grow(b.Cat[j], n)
		}
	}
	if b.PixelsPerRow > 0 {
		b.Pixels = grow(b.Pixels, n*b.PixelsPerRow)
	}
}
