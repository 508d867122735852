package format

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/parquet-go/parquet-go"
	pqenc "github.com/parquet-go/parquet-go/encoding"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/tempotrain/tempotrain/api"
)

// The Parquet reader is github.com/parquet-go/parquet-go (see doc.go for
// the comparison with apache/arrow-go): column chunks are read page by page
// and each page's values are converted straight from the decoded buffer
// (page.Data()), dictionary pages through their dictionary once per page.
// The columns of a row group are read in parallel.
//
// A page is decoded whole (decompressed, its levels and values decoded)
// whatever rows of it are wanted, so a stream's units follow the pages:
// units cuts a row group where every column read starts a page (the offset
// index says where), and a read of rows [lo, hi) seeks straight to the page
// holding lo (the offset index again) and stops after the page holding
// hi-1. Each page is then decoded by one unit, once per epoch on a rank
// (TestParquetDecodesPagesOnce), unless a window or a rank's range cuts
// the unit in it.

// pqSource reads Parquet files.
type pqSource struct {
	files    []*fileRef
	metas    []*pqMeta
	slotsv   []Slot
	unitList []pqUnit
	workers  int
	// prefetch bounds the bytes of a row group fetched from S3 in one GET:
	// an eighth of the memory budget, at most maxPrefetch.
	prefetch int64
	// pageRead, when set (tests), is called for every data page decoded:
	// file, row group, leaf column, and the page's number in its chunk (-1
	// when the row group has no usable offset index).
	pageRead func(file, rg, leaf, page int)

	mu   sync.Mutex
	open map[int]*pqOpen // a few open files, least recently used out
	// checked holds the column chunks whose page headers checkPages
	// walked, and what it found.
	checked map[[3]int]error
	tick    int64
	// spare is a block of every slot given back (Recycle) for the next
	// read of all slots to fill.
	spare *Block
}

// newBlock makes an empty block for n rows of the slots in want: the spare
// one when it holds every slot and room enough.
func (s *pqSource) newBlock(want []bool, n int) *Block {
	if want == nil {
		s.mu.Lock()
		b := s.spare
		s.spare = nil
		s.mu.Unlock()
		if b != nil && b.N >= n {
			for j, sl := range s.slotsv {
				if sl.Kind == Numeric {
					b.Num[j] = b.Num[j][:0]
				} else {
					b.Cat[j] = b.Cat[j][:0]
					b.dicts[j] = &localDict{}
				}
			}
			return b
		}
	}
	return newBlock(s.slotsv, want, n)
}

// Recycle gives back a block that read returned, once nothing uses it: a
// stream's window reads its pieces one after the other into the same
// memory rather than new memory to clear and collect per piece.
func (s *pqSource) Recycle(b *Block) {
	full := len(b.Num) == len(s.slotsv)
	for j, sl := range s.slotsv {
		if !full || sl.Kind == Numeric && b.Num[j] == nil || sl.Kind != Numeric && b.Cat[j] == nil {
			return
		}
	}
	r := &Block{N: cap(b.Num[0]) + cap(b.Cat[0]), Num: b.Num, Cat: b.Cat, dicts: make([]*localDict, len(s.slotsv))}
	for j := range s.slotsv {
		r.N = min(r.N, cap(b.Num[j])+cap(b.Cat[j]))
	}
	s.mu.Lock()
	if s.spare == nil || s.spare.N < r.N {
		s.spare = r
	}
	s.mu.Unlock()
}

// pqMeta is what a file's footer says that the reads need.
type pqMeta struct {
	rgRows []int64
	cols   []pqCol // per slot
	// indexed[g]: every slot's column chunk in row group g has an offset
	// index that units checked; reads seek with it. Set by units.
	indexed []bool
}

type pqCol struct {
	leaf   int // column chunk index
	kind   parquet.Kind
	maxDef int
	scale  int // decimal scale
	name   string
}

type pqUnit struct {
	file, rg int
	lo, hi   int64
}

type pqOpen struct {
	f     *parquet.File
	close func() error
	used  int64
	refs  int
}

// maxOpenParquet bounds the files kept open between reads.
const maxOpenParquet = 8

func (s *pqSource) openFile(ctx context.Context, i int) (*parquet.File, func() error, error) {
	f := s.files[i]
	ra, closer, err := f.readerAt(ctx, 1<<20, 16)
	if err != nil {
		return nil, nil, err
	}
	var pf *parquet.File
	err = pqCheckFooter(ra, f.size)
	if err == nil {
		pf, err = parquet.OpenFile(ra, f.size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	}
	if err != nil {
		closer()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, invalidf("%s: not a readable Parquet file: %v", f.uri, err)
	}
	return pf, closer, nil
}

// acquire returns file i open; release gives it back.
func (s *pqSource) acquire(ctx context.Context, i int) (*parquet.File, error) {
	s.mu.Lock()
	s.tick++
	if o, ok := s.open[i]; ok {
		o.used, o.refs = s.tick, o.refs+1
		s.mu.Unlock()
		return o.f, nil
	}
	s.mu.Unlock()
	pf, closer, err := s.openFile(ctx, i)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.open[i]; ok { // opened meanwhile
		closer()
		o.used, o.refs = s.tick, o.refs+1
		return o.f, nil
	}
	for len(s.open) >= maxOpenParquet {
		old, at := -1, int64(0)
		for k, o := range s.open {
			if o.refs == 0 && (old < 0 || o.used < at) {
				old, at = k, o.used
			}
		}
		if old < 0 {
			break
		}
		s.open[old].close()
		delete(s.open, old)
	}
	s.open[i] = &pqOpen{f: pf, close: closer, used: s.tick, refs: 1}
	return pf, nil
}

func (s *pqSource) release(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.open[i]; ok {
		o.refs--
	}
}

func (s *pqSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, o := range s.open {
		o.close()
		delete(s.open, k)
	}
	return nil
}

// pqColumns lists a file's top-level columns: names, kinds and leaves.
func pqColumns(pf *parquet.File) (names []string, kinds []Kind, leaves []*parquet.Column) {
	for _, c := range pf.Root().Columns() {
		names = append(names, c.Name())
		leaves = append(leaves, c)
		k := Numeric
		if c.Leaf() {
			switch c.Type().Kind() {
			case parquet.ByteArray, parquet.FixedLenByteArray:
				k = Categorical
			}
		}
		kinds = append(kinds, k)
	}
	return names, kinds, leaves
}

func openParquet(ctx context.Context, spec api.DatasetSpec, opt Options, files []*fileRef) (Source, error) {
	s := &pqSource{files: files, workers: opt.Workers, open: map[int]*pqOpen{},
		prefetch: min(maxPrefetch, int64(spec.MemoryBudgetMiB)<<20/8)}
	var firstKinds []Kind
	var slotCols []int
	for i, f := range files {
		pf, closer, err := s.openFile(ctx, i)
		if err != nil {
			s.Close()
			return nil, err
		}
		names, kinds, leaves := pqColumns(pf)
		if i == 0 {
			firstKinds = kinds
			s.slotsv, slotCols, err = selectSlots(spec, f.uri, names, kinds)
			if err != nil {
				closer()
				return nil, err
			}
		}
		m := &pqMeta{}
		for _, g := range pf.RowGroups() {
			m.rgRows = append(m.rgRows, g.NumRows())
		}
		for j, sl := range s.slotsv {
			k := -1
			for c, n := range names {
				if n == sl.Name {
					k = c
					break
				}
			}
			if k < 0 {
				closer()
				return nil, invalidf("schemas differ: %s has column %q, %s has not (its columns are %s)", files[0].uri, sl.Name, f.uri, listColumns(names))
			}
			if kinds[k] != firstKinds[slotCols[j]] {
				closer()
				return nil, invalidf("schemas differ: column %q is %s in %s, %s in %s", sl.Name, firstKinds[slotCols[j]], files[0].uri, kinds[k], f.uri)
			}
			c := leaves[k]
			if !c.Leaf() || c.MaxRepetitionLevel() > 0 {
				closer()
				return nil, invalidf("%s: column %q is nested or repeated (a list, map or struct): only flat columns can be read", f.uri, sl.Name)
			}
			pc := pqCol{leaf: c.Index(), kind: c.Type().Kind(), maxDef: c.MaxDefinitionLevel(), name: sl.Name}
			switch pc.kind {
			case parquet.Int96:
				closer()
				return nil, invalidf("%s: column %q is INT96 (a legacy timestamp): not supported", f.uri, sl.Name)
			case parquet.FixedLenByteArray:
				if sl.Kind == Numeric {
					closer()
					return nil, invalidf("%s: column %q is FIXED_LEN_BYTE_ARRAY: not supported as a number", f.uri, sl.Name)
				}
			}
			if lt := c.Type().LogicalType(); lt != nil {
				if d, ok := lt.Value.(*format.DecimalType); ok {
					if pc.kind != parquet.Int32 && pc.kind != parquet.Int64 {
						closer()
						return nil, invalidf("%s: column %q is a DECIMAL stored as %s: only INT32 and INT64 decimals are supported", f.uri, sl.Name, pc.kind)
					}
					pc.scale = int(d.Scale)
				}
			}
			m.cols = append(m.cols, pc)
		}
		closer()
		s.metas = append(s.metas, m)
	}
	return s, nil
}

func (s *pqSource) Slots() []Slot             { return s.slotsv }
func (s *pqSource) FixedClasses() []string    { return nil }
func (s *pqSource) ImageShape() (c, h, w int) { return 0, 0, 0 }
func (s *pqSource) CanStream() bool           { return true }

func (s *pqSource) EstimateRows() (int64, bool) {
	var n int64
	for _, m := range s.metas {
		for _, r := range m.rgRows {
			n += r
		}
	}
	return n, true
}

// Units cuts every row group into units at page boundaries: the rows
// where a page starts in every column read (from the column chunks' offset
// indexes; a row group without them is one run). Consecutive runs are
// grouped into units of at most t.rows rows; a run larger than that is a
// unit alone, never sliced, since a slice would decode its pages whole
// again: each page is in exactly one unit.
func (s *pqSource) Units(ctx context.Context, t UnitTarget) ([]int64, error) {
	s.unitList = s.unitList[:0]
	var rows []int64
	for i, m := range s.metas {
		bounds, err := s.pageBounds(ctx, i)
		if err != nil {
			return nil, err
		}
		for g, n := range m.rgRows {
			b := bounds[g]
			lo := int64(0)
			emit := func(hi int64) {
				s.unitList = append(s.unitList, pqUnit{file: i, rg: g, lo: lo, hi: hi})
				rows = append(rows, hi-lo)
				lo = hi
			}
			for k := 1; k < len(b); k++ {
				if b[k]-lo > t.Rows && b[k-1] > lo {
					emit(b[k-1])
				}
			}
			if lo < n {
				emit(n)
			}
		}
	}
	return rows, nil
}

// pageBounds returns, for each row group of file i, the rows where every
// slot's column starts a page, in increasing order, from 0 to the row
// group's rows; {0, rows} where some column has no offset index (or one
// that does not hold together). It records which row groups reads may seek
// with the index (pqMeta.indexed).
func (s *pqSource) pageBounds(ctx context.Context, i int) ([][]int64, error) {
	m := s.metas[i]
	pf, err := s.acquire(ctx, i)
	if err != nil {
		return nil, err
	}
	defer s.release(i)
	md := pf.Metadata()
	if len(md.RowGroups) != len(m.rgRows) {
		return nil, invalidf("%s: %d row groups, %d when opened: did the file change?", s.files[i].uri, len(md.RowGroups), len(m.rgRows))
	}
	m.indexed = make([]bool, len(m.rgRows))
	out := make([][]int64, len(m.rgRows))
	var buf []byte
	for g, n := range m.rgRows {
		// Streaming sizes its splits and windows by the rows the footer
		// declares: the pages are checked to hold them first.
		for j := range m.cols {
			if err := s.checkPages(pqUnit{file: i, rg: g}, m.cols[j], nil); err != nil {
				return nil, invalidf("%s: row group %d, column %q: %v", s.files[i].uri, g, m.cols[j].name, err)
			}
		}
		var common map[int64]int // row → columns starting a page there
		ok := n > 0
		for j := 0; j < len(m.cols) && ok; j++ {
			cc := &md.RowGroups[g].Columns[m.cols[j].leaf]
			var firsts []int64
			if firsts, buf, err = readOffsetIndex(pf, cc, n, buf); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("%s: row group %d, column %q: %w", s.files[i].uri, g, m.cols[j].name, err)
			}
			if firsts == nil {
				ok = false
				break
			}
			if common == nil {
				common = make(map[int64]int, len(firsts))
			}
			for _, r := range firsts {
				common[r]++
			}
		}
		b := []int64{0}
		if ok {
			for r, c := range common {
				if c == len(m.cols) && r > 0 {
					b = append(b, r)
				}
			}
			slices.Sort(b)
		}
		if n > 0 {
			b = append(b, n)
		}
		out[g], m.indexed[g] = b, ok
	}
	return out, nil
}

// readOffsetIndex reads a column chunk's offset index (without keeping it
// in pf, so that a read seeks with it only where it held together here)
// and returns the first row of each page; nil when the chunk has none, or
// one that does not hold together (rows not increasing from 0 below n,
// pages outside the chunk: a writer's bug, read without the index).
func readOffsetIndex(pf *parquet.File, cc *format.ColumnChunk, n int64, buf []byte) ([]int64, []byte, error) {
	off, length := cc.OffsetIndexOffset, int64(cc.OffsetIndexLength)
	if off <= 0 || length <= 0 || off > pf.Size()-length || length > maxFooterBytes {
		return nil, buf, nil
	}
	if int64(cap(buf)) < length {
		buf = make([]byte, length)
	}
	buf = buf[:length]
	if _, err := pf.ReadAt(buf, off); err != nil {
		return nil, buf, err
	}
	// Checked first: parquet-go's decoder allocates the page locations
	// from the count the index declares.
	if n, err := thriftCheck(buf); err != nil || n != len(buf) {
		return nil, buf, nil
	}
	var oi format.OffsetIndex
	if err := thrift.Unmarshal(&thrift.CompactProtocol{}, buf, &oi); err != nil {
		return nil, buf, nil
	}
	md := &cc.MetaData
	start := md.DataPageOffset
	if md.DictionaryPageOffset > 0 && md.DictionaryPageOffset < start {
		start = md.DictionaryPageOffset
	}
	end := start + md.TotalCompressedSize
	pages := oi.PageLocations
	if len(pages) == 0 || pages[0].FirstRowIndex != 0 {
		return nil, buf, nil
	}
	firsts := make([]int64, len(pages))
	for k, p := range pages {
		if k > 0 && (p.FirstRowIndex <= pages[k-1].FirstRowIndex || p.Offset <= pages[k-1].Offset) ||
			p.FirstRowIndex >= n || p.Offset < start || p.Offset+int64(p.CompressedPageSize) > end {
			return nil, buf, nil
		}
		firsts[k] = p.FirstRowIndex
	}
	return firsts, buf, nil
}

func (s *pqSource) LoadAll(ctx context.Context, want []bool, emit func(*Block) error) error {
	for i, m := range s.metas {
		for g, n := range m.rgRows {
			if n == 0 {
				continue
			}
			b, err := s.read(ctx, pqUnit{file: i, rg: g, lo: 0, hi: n}, want)
			if err != nil {
				return err
			}
			if err := emit(b); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *pqSource) ReadUnit(ctx context.Context, u int, lo, hi int64, want []bool) ([]*Block, int64, error) {
	r := s.unitList[u]
	b, err := s.read(ctx, pqUnit{file: r.file, rg: r.rg, lo: r.lo + lo, hi: r.lo + hi}, want)
	if err != nil {
		return nil, 0, err
	}
	return []*Block{b}, lo, nil
}

// read reads rows [lo, hi) of a row group, its columns in parallel.
func (s *pqSource) read(ctx context.Context, u pqUnit, want []bool) (*Block, error) {
	pf, err := s.acquire(ctx, u.file)
	if err != nil {
		return nil, err
	}
	defer s.release(u.file)
	rg := pf.RowGroups()[u.rg]
	chunks := rg.ColumnChunks()
	m := s.metas[u.file]
	var idx []int
	for j := range s.slotsv {
		if want == nil || want[j] {
			idx = append(idx, j)
		}
	}
	// From S3, the row group's column chunks come in one ranged GET when
	// they are small enough, rather than block by block.
	var ra io.ReaderAt
	if f := s.files[u.file]; f.bucket != nil {
		if ra, err = s.prefetchChunks(ctx, pf, u, idx); err != nil {
			return nil, err
		}
	}
	// The pages are checked to hold the row group's rows before a block
	// of them is allocated: the footer alone declares them.
	for _, j := range idx {
		if err := s.checkPages(u, m.cols[j], ra); err != nil {
			return nil, invalidf("%s: row group %d, column %q: %v", s.files[u.file].uri, u.rg, m.cols[j].name, err)
		}
	}
	n := int(u.hi - u.lo)
	blk := s.newBlock(want, n)
	blk.N = n
	indexed := m.indexed != nil && m.indexed[u.rg]
	err = parallel(ctx, len(idx), s.workers, func(k int) error {
		j := idx[k]
		return s.readColumn(chunks[m.cols[j].leaf], ra, m.cols[j], u, indexed, blk, j)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return blk, nil
}

// maxPrefetch bounds the bytes of a row group prefetched in one GET.
const maxPrefetch = 64 << 20

// prefetchChunks fetches the byte range that holds the column chunks of
// the slots idx in u's row group, and returns a ReaderAt that serves it
// from memory (and the rest of the file as before); nil when the range is
// larger than s.prefetch.
func (s *pqSource) prefetchChunks(ctx context.Context, pf *parquet.File, u pqUnit, idx []int) (io.ReaderAt, error) {
	rg := pf.Metadata().RowGroups[u.rg]
	lo, hi := int64(-1), int64(0)
	for _, j := range idx {
		md := rg.Columns[s.metas[u.file].cols[j].leaf].MetaData
		start := md.DataPageOffset
		if md.DictionaryPageOffset > 0 && md.DictionaryPageOffset < start {
			start = md.DictionaryPageOffset
		}
		if lo < 0 || start < lo {
			lo = start
		}
		hi = max(hi, start+md.TotalCompressedSize)
	}
	f := s.files[u.file]
	if lo < 0 || hi-lo > s.prefetch || hi > f.size {
		return nil, nil
	}
	buf := make([]byte, hi-lo)
	if err := f.readRange(ctx, lo, buf); err != nil {
		return nil, err
	}
	return &rangeReaderAt{off: lo, data: buf, rest: pf}, nil
}

// rangeReaderAt serves [off, off+len(data)) from memory, the rest from
// rest.
type rangeReaderAt struct {
	off  int64
	data []byte
	rest io.ReaderAt
}

func (r *rangeReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.off && off+int64(len(p)) <= r.off+int64(len(r.data)) {
		return copy(p, r.data[off-r.off:]), nil
	}
	return r.rest.ReadAt(p, off)
}

// readColumn reads slot j's values of rows [u.lo, u.hi) into blk. In a
// row group whose offset indexes units checked (indexed), it seeks straight
// to the page holding u.lo; without, parquet-go reaches it by decoding the
// pages before.
func (s *pqSource) readColumn(cc parquet.ColumnChunk, ra io.ReaderAt, c pqCol, u pqUnit, indexed bool, blk *Block, j int) error {
	f := s.files[u.file]
	fc, _ := cc.(*parquet.FileColumnChunk)
	var pages parquet.Pages
	if fc != nil && ra != nil {
		pages = fc.PagesFrom(ra)
	} else {
		pages = cc.Pages()
	}
	defer pages.Close()
	page := -1 // the number of the next page read, for pageRead
	if indexed && fc != nil && (u.lo > 0 || s.pageRead != nil) {
		// The index goes into the chunk, where SeekToRow finds it.
		oi, err := fc.OffsetIndex()
		if err != nil {
			return fmt.Errorf("%s: row group %d, column %q: offset index: %w", f.uri, u.rg, c.name, err)
		}
		page = sort.Search(oi.NumPages(), func(k int) bool { return oi.FirstRowIndex(k) > u.lo }) - 1
	}
	if u.lo > 0 {
		if err := pages.SeekToRow(u.lo); err != nil {
			return fmt.Errorf("%s: row group %d, column %q: seek to row %d: %w", f.uri, u.rg, c.name, u.lo, err)
		}
	}
	sl := s.slotsv[j]
	cv := pqConverter{c: c, sl: sl, ld: blk.dicts[j]}
	row := u.lo
	for need := u.hi - u.lo; need > 0; {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return invalidf("%s: row group %d, column %q: the pages end at row %d, the row group has %d", f.uri, u.rg, c.name, row, u.hi)
		}
		if err != nil {
			return invalidf("%s: row group %d, column %q: %v", f.uri, u.rg, c.name, err)
		}
		if s.pageRead != nil {
			s.pageRead(u.file, u.rg, c.leaf, page)
			if page >= 0 {
				page++
			}
		}
		take := min(p.NumRows(), need)
		err = cv.page(p, int(take), blk, j)
		parquet.Release(p)
		if err != nil {
			var pe *ParseError
			if errors.As(err, &pe) {
				pe.File, pe.RowGroup, pe.Row = f.uri, u.rg, row+pe.Row
			}
			return err
		}
		row += take
		need -= take
	}
	return nil
}

// pqConverter turns pages of one column into a block's values.
type pqConverter struct {
	c  pqCol
	sl Slot
	ld *localDict
	// scratch: the non-null values of a page, or of its dictionary
	nums  []float32
	codes []int32
	// the dictionary converted last, and its values
	dict      parquet.Dictionary
	dictNums  []float32
	dictCodes []int32
	tmp       []byte
}

// page appends the first take rows of p, converting only their values.
func (cv *pqConverter) page(p parquet.Page, take int, blk *Block, j int) error {
	// Rows: a value each, or a null where the definition level is short.
	defs := p.DefinitionLevels()
	nulls := cv.c.maxDef > 0 && len(defs) > 0
	vals := take // the values of the first take rows
	if nulls {
		if len(defs) < take {
			return cv.short(len(defs), take)
		}
		vals = 0
		for _, d := range defs[:take] {
			if int(d) == cv.c.maxDef {
				vals++
			}
		}
	}
	// Without nulls the values go straight into the block; with, into
	// scratch, then spread over the rows.
	nums, codes := cv.nums[:0], cv.codes[:0]
	if !nulls {
		nums, codes = blk.Num[j], blk.Cat[j]
	}
	had := len(nums) + len(codes)
	if d := p.Dictionary(); d != nil {
		if d != cv.dict {
			cv.dict = d
			dd := d.Page().Data()
			var err error
			if cv.sl.Kind == Numeric {
				cv.dictNums, err = cv.toNums(&dd, cv.dictNums[:0], math.MaxInt)
			} else {
				cv.dictCodes, err = cv.toCodes(&dd, cv.dictCodes[:0], math.MaxInt)
			}
			if err != nil {
				return err
			}
		}
		data := p.Data()
		ix := data.Int32()
		ix = ix[:min(vals, len(ix))]
		if cv.sl.Kind == Numeric {
			for _, k := range ix {
				nums = append(nums, cv.dictNums[k])
			}
		} else {
			for _, k := range ix {
				codes = append(codes, cv.dictCodes[k])
			}
		}
	} else if cv.c.kind == parquet.Boolean {
		// Boolean pages are bit-packed with an offset: read them as values.
		bv := make([]parquet.Value, take)
		n, err := p.Values().ReadValues(bv)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for _, v := range bv[:n] {
			if v.IsNull() {
				continue
			}
			x := float32(0)
			if v.Boolean() {
				x = 1
			}
			if cv.sl.Kind == Numeric {
				nums = append(nums, x)
			} else {
				codes = append(codes, cv.ld.code(strconv.AppendBool(cv.tmp[:0], v.Boolean())))
			}
		}
	} else {
		data := p.Data()
		var err error
		if cv.sl.Kind == Numeric {
			nums, err = cv.toNums(&data, nums, vals)
		} else {
			codes, err = cv.toCodes(&data, codes, vals)
		}
		if err != nil {
			return err
		}
	}
	if !nulls {
		if got := len(nums) + len(codes) - had; got < take {
			return cv.short(got, take)
		}
		if cv.sl.Kind == Numeric {
			blk.Num[j] = nums
		} else {
			blk.Cat[j] = codes
		}
		return nil
	}
	cv.nums, cv.codes = nums, codes
	v := 0
	max := byte(cv.c.maxDef)
	for r := 0; r < take; r++ {
		if defs[r] != max {
			if cv.sl.label {
				return &ParseError{Row: int64(r), Column: cv.sl.Name, Reason: "the label is missing (null)"}
			}
			if cv.sl.Kind == Numeric {
				blk.Num[j] = append(blk.Num[j], float32(math.NaN()))
			} else {
				blk.Cat[j] = append(blk.Cat[j], -1)
			}
			continue
		}
		if cv.sl.Kind == Numeric {
			if v >= len(nums) {
				return cv.short(v, take)
			}
			blk.Num[j] = append(blk.Num[j], nums[v])
		} else {
			if v >= len(codes) {
				return cv.short(v, take)
			}
			blk.Cat[j] = append(blk.Cat[j], codes[v])
		}
		v++
	}
	return nil
}

func (cv *pqConverter) short(have, want int) error {
	return &ParseError{Column: cv.sl.Name, Reason: fmt.Sprintf("a page holds %d values for %d rows", have, want)}
}

// first is the first n values of v (all when fewer).
func first[T any](v []T, n int) []T { return v[:min(n, len(v))] }

// toNums converts the first n plain values to float32.
func (cv *pqConverter) toNums(d *pqenc.Values, out []float32, n int) ([]float32, error) {
	scale := 1.0
	if cv.c.scale > 0 {
		scale = math.Pow10(-cv.c.scale)
	}
	switch d.Kind() {
	case pqenc.Double:
		for _, v := range first(d.Double(), n) {
			out = append(out, float32(v))
		}
	case pqenc.Float:
		out = append(out, first(d.Float(), n)...)
	case pqenc.Int32:
		for _, v := range first(d.Int32(), n) {
			out = append(out, float32(float64(v)*scale))
		}
	case pqenc.Int64:
		for _, v := range first(d.Int64(), n) {
			out = append(out, float32(float64(v)*scale))
		}
	default:
		return nil, &ParseError{Column: cv.sl.Name, Reason: fmt.Sprintf("values of type %s are not numbers", d.Kind())}
	}
	return out, nil
}

// toCodes converts the first n plain values to codes of the chunk's
// dictionary (numbers as strconv formats them).
func (cv *pqConverter) toCodes(d *pqenc.Values, out []int32, n int) ([]int32, error) {
	switch d.Kind() {
	case pqenc.ByteArray:
		vals, offs := d.ByteArray()
		for k := 0; k+1 < len(offs) && k < n; k++ {
			out = append(out, cv.ld.code(vals[offs[k]:offs[k+1]]))
		}
	case pqenc.FixedLenByteArray:
		vals, size := d.FixedLenByteArray()
		for k, i := 0, 0; k+size <= len(vals) && i < n; k, i = k+size, i+1 {
			out = append(out, cv.ld.code(vals[k:k+size]))
		}
	case pqenc.Int32:
		for _, v := range first(d.Int32(), n) {
			out = append(out, cv.ld.code(strconv.AppendInt(cv.tmp[:0], int64(v), 10)))
		}
	case pqenc.Int64:
		for _, v := range first(d.Int64(), n) {
			out = append(out, cv.ld.code(strconv.AppendInt(cv.tmp[:0], v, 10)))
		}
	case pqenc.Float:
		for _, v := range first(d.Float(), n) {
			out = append(out, cv.ld.code(strconv.AppendFloat(cv.tmp[:0], float64(v), 'g', -1, 32)))
		}
	case pqenc.Double:
		for _, v := range first(d.Double(), n) {
			out = append(out, cv.ld.code(strconv.AppendFloat(cv.tmp[:0], v, 'g', -1, 64)))
		}
	default:
		return nil, &ParseError{Column: cv.sl.Name, Reason: fmt.Sprintf("values of type %s cannot be categories", d.Kind())}
	}
	return out, nil
}

func (s *pqSource) Digest() string { return digestFiles(s.files) }
