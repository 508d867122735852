package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"

	"github.com/parquet-go/parquet-go"
	pqenc "github.com/parquet-go/parquet-go/encoding"
	"github.com/parquet-go/parquet-go/format"

	"github.com/tempotrain/tempotrain/api"
)

// The Parquet reader is github.com/parquet-go/parquet-go (see doc.go for
// the comparison with apache/arrow-go): column chunks are read page by page
// and each page's values are converted straight from the decoded buffer
// (page.Data()), dictionary pages through their dictionary once per page.
// The columns of a row group are read in parallel.

// pqSource reads Parquet files.
type pqSource struct {
	files    []*fileRef
	metas    []*pqMeta
	slotsv   []slot
	unitList []pqUnit
	workers  int
	// prefetch bounds the bytes of a row group fetched from S3 in one GET:
	// an eighth of the memory budget, at most maxPrefetch.
	prefetch int64

	mu   sync.Mutex
	open map[int]*pqOpen // a few open files, least recently used out
	tick int64
}

// pqMeta is what a file's footer says that the reads need.
type pqMeta struct {
	rgRows []int64
	cols   []pqCol // per slot
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
	pf, err := parquet.OpenFile(ra, f.size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
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

func (s *pqSource) close() error {
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

func openParquet(ctx context.Context, spec api.DatasetSpec, opt ShardOptions, files []*fileRef) (source, error) {
	s := &pqSource{files: files, workers: opt.Workers, open: map[int]*pqOpen{},
		prefetch: min(maxPrefetch, int64(spec.MemoryBudgetMiB)<<20/8)}
	var firstKinds []Kind
	var slotCols []int
	for i, f := range files {
		pf, closer, err := s.openFile(ctx, i)
		if err != nil {
			s.close()
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
				if n == sl.name {
					k = c
					break
				}
			}
			if k < 0 {
				closer()
				return nil, invalidf("schemas differ: %s has column %q, %s has not (its columns are %s)", files[0].uri, sl.name, f.uri, listColumns(names))
			}
			if kinds[k] != firstKinds[slotCols[j]] {
				closer()
				return nil, invalidf("schemas differ: column %q is %s in %s, %s in %s", sl.name, firstKinds[slotCols[j]], files[0].uri, kinds[k], f.uri)
			}
			c := leaves[k]
			if !c.Leaf() || c.MaxRepetitionLevel() > 0 {
				closer()
				return nil, invalidf("%s: column %q is nested or repeated (a list, map or struct): only flat columns can be read", f.uri, sl.name)
			}
			pc := pqCol{leaf: c.Index(), kind: c.Type().Kind(), maxDef: c.MaxDefinitionLevel(), name: sl.name}
			switch pc.kind {
			case parquet.Int96:
				closer()
				return nil, invalidf("%s: column %q is INT96 (a legacy timestamp): not supported", f.uri, sl.name)
			case parquet.FixedLenByteArray:
				if sl.kind == Numeric {
					closer()
					return nil, invalidf("%s: column %q is FIXED_LEN_BYTE_ARRAY: not supported as a number", f.uri, sl.name)
				}
			}
			if lt := c.Type().LogicalType(); lt != nil {
				if d, ok := lt.Value.(*format.DecimalType); ok {
					if pc.kind != parquet.Int32 && pc.kind != parquet.Int64 {
						closer()
						return nil, invalidf("%s: column %q is a DECIMAL stored as %s: only INT32 and INT64 decimals are supported", f.uri, sl.name, pc.kind)
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

func (s *pqSource) slots() []slot             { return s.slotsv }
func (s *pqSource) fixedClasses() []string    { return nil }
func (s *pqSource) imageShape() (c, h, w int) { return 0, 0, 0 }
func (s *pqSource) canStream() bool           { return true }

func (s *pqSource) estimateRows() (int64, bool) {
	var n int64
	for _, m := range s.metas {
		for _, r := range m.rgRows {
			n += r
		}
	}
	return n, true
}

func (s *pqSource) units(_ context.Context, _ group, t unitTarget) ([]int64, error) {
	s.unitList = s.unitList[:0]
	var rows []int64
	for i, m := range s.metas {
		for g, n := range m.rgRows {
			for lo := int64(0); lo < n; lo += t.rows {
				hi := min(n, lo+t.rows)
				s.unitList = append(s.unitList, pqUnit{file: i, rg: g, lo: lo, hi: hi})
				rows = append(rows, hi-lo)
			}
		}
	}
	return rows, nil
}

func (s *pqSource) loadAll(ctx context.Context, want []bool, emit func(*block) error) error {
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

func (s *pqSource) readUnit(ctx context.Context, u int, want []bool) ([]*block, error) {
	b, err := s.read(ctx, s.unitList[u], want)
	if err != nil {
		return nil, err
	}
	return []*block{b}, nil
}

// read reads rows [lo, hi) of a row group, its columns in parallel.
func (s *pqSource) read(ctx context.Context, u pqUnit, want []bool) (*block, error) {
	pf, err := s.acquire(ctx, u.file)
	if err != nil {
		return nil, err
	}
	defer s.release(u.file)
	n := int(u.hi - u.lo)
	blk := newBlock(s.slotsv, want, n)
	blk.n = n
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
	err = parallel(ctx, len(idx), s.workers, func(k int) error {
		j := idx[k]
		return s.readColumn(chunks[m.cols[j].leaf], ra, m.cols[j], u, blk, j)
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

// readColumn reads slot j's values of rows [u.lo, u.hi) into blk.
func (s *pqSource) readColumn(cc parquet.ColumnChunk, ra io.ReaderAt, c pqCol, u pqUnit, blk *block, j int) error {
	f := s.files[u.file]
	var pages parquet.Pages
	if fc, ok := cc.(*parquet.FileColumnChunk); ok && ra != nil {
		pages = fc.PagesFrom(ra)
	} else {
		pages = cc.Pages()
	}
	defer pages.Close()
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
	sl slot
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

// page appends the first take rows of p.
func (cv *pqConverter) page(p parquet.Page, take int, blk *block, j int) error {
	var nums []float32
	var codes []int32
	if d := p.Dictionary(); d != nil {
		if d != cv.dict {
			cv.dict = d
			dd := d.Page().Data()
			var err error
			if cv.sl.kind == Numeric {
				cv.dictNums, err = cv.toNums(&dd, cv.dictNums[:0])
			} else {
				cv.dictCodes, err = cv.toCodes(&dd, cv.dictCodes[:0])
			}
			if err != nil {
				return err
			}
		}
		data := p.Data()
		ix := data.Int32()
		if cv.sl.kind == Numeric {
			cv.nums = cv.nums[:0]
			for _, k := range ix {
				cv.nums = append(cv.nums, cv.dictNums[k])
			}
			nums = cv.nums
		} else {
			cv.codes = cv.codes[:0]
			for _, k := range ix {
				cv.codes = append(cv.codes, cv.dictCodes[k])
			}
			codes = cv.codes
		}
	} else if cv.c.kind == parquet.Boolean {
		// Boolean pages are bit-packed with an offset: read them as values.
		vals := make([]parquet.Value, take)
		n, err := p.Values().ReadValues(vals)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		cv.nums, cv.codes = cv.nums[:0], cv.codes[:0]
		for _, v := range vals[:n] {
			if v.IsNull() {
				continue
			}
			x := float32(0)
			if v.Boolean() {
				x = 1
			}
			if cv.sl.kind == Numeric {
				cv.nums = append(cv.nums, x)
			} else {
				cv.codes = append(cv.codes, cv.ld.code(strconv.AppendBool(cv.tmp[:0], v.Boolean())))
			}
		}
		nums, codes = cv.nums, cv.codes
	} else {
		data := p.Data()
		var err error
		if cv.sl.kind == Numeric {
			cv.nums, err = cv.toNums(&data, cv.nums[:0])
			nums = cv.nums
		} else {
			cv.codes, err = cv.toCodes(&data, cv.codes[:0])
			codes = cv.codes
		}
		if err != nil {
			return err
		}
	}
	// Rows: a value each, or a null where the definition level is short.
	defs := p.DefinitionLevels()
	if cv.c.maxDef == 0 || len(defs) == 0 {
		if cv.sl.kind == Numeric {
			if len(nums) < take {
				return cv.short(len(nums), take)
			}
			blk.num[j] = append(blk.num[j], nums[:take]...)
		} else {
			if len(codes) < take {
				return cv.short(len(codes), take)
			}
			blk.cat[j] = append(blk.cat[j], codes[:take]...)
		}
		return nil
	}
	v := 0
	max := byte(cv.c.maxDef)
	for r := 0; r < take; r++ {
		if defs[r] != max {
			if cv.sl.label {
				return &ParseError{Row: int64(r), Column: cv.sl.name, Reason: "the label is missing (null)"}
			}
			if cv.sl.kind == Numeric {
				blk.num[j] = append(blk.num[j], float32(math.NaN()))
			} else {
				blk.cat[j] = append(blk.cat[j], -1)
			}
			continue
		}
		if cv.sl.kind == Numeric {
			if v >= len(nums) {
				return cv.short(v, take)
			}
			blk.num[j] = append(blk.num[j], nums[v])
		} else {
			if v >= len(codes) {
				return cv.short(v, take)
			}
			blk.cat[j] = append(blk.cat[j], codes[v])
		}
		v++
	}
	return nil
}

func (cv *pqConverter) short(have, want int) error {
	return &ParseError{Column: cv.sl.name, Reason: fmt.Sprintf("a page holds %d values for %d rows", have, want)}
}

// toNums converts plain values to float32.
func (cv *pqConverter) toNums(d *pqenc.Values, out []float32) ([]float32, error) {
	scale := 1.0
	if cv.c.scale > 0 {
		scale = math.Pow10(-cv.c.scale)
	}
	switch d.Kind() {
	case pqenc.Double:
		for _, v := range d.Double() {
			out = append(out, float32(v))
		}
	case pqenc.Float:
		out = append(out, d.Float()...)
	case pqenc.Int32:
		for _, v := range d.Int32() {
			out = append(out, float32(float64(v)*scale))
		}
	case pqenc.Int64:
		for _, v := range d.Int64() {
			out = append(out, float32(float64(v)*scale))
		}
	default:
		return nil, &ParseError{Column: cv.sl.name, Reason: fmt.Sprintf("values of type %s are not numbers", d.Kind())}
	}
	return out, nil
}

// toCodes converts plain values to codes of the chunk's dictionary
// (numbers as strconv formats them).
func (cv *pqConverter) toCodes(d *pqenc.Values, out []int32) ([]int32, error) {
	switch d.Kind() {
	case pqenc.ByteArray:
		vals, offs := d.ByteArray()
		for k := 0; k+1 < len(offs); k++ {
			out = append(out, cv.ld.code(vals[offs[k]:offs[k+1]]))
		}
	case pqenc.FixedLenByteArray:
		vals, size := d.FixedLenByteArray()
		for k := 0; k+size <= len(vals); k += size {
			out = append(out, cv.ld.code(vals[k:k+size]))
		}
	case pqenc.Int32:
		for _, v := range d.Int32() {
			out = append(out, cv.ld.code(strconv.AppendInt(cv.tmp[:0], int64(v), 10)))
		}
	case pqenc.Int64:
		for _, v := range d.Int64() {
			out = append(out, cv.ld.code(strconv.AppendInt(cv.tmp[:0], v, 10)))
		}
	case pqenc.Float:
		for _, v := range d.Float() {
			out = append(out, cv.ld.code(strconv.AppendFloat(cv.tmp[:0], float64(v), 'g', -1, 32)))
		}
	case pqenc.Double:
		for _, v := range d.Double() {
			out = append(out, cv.ld.code(strconv.AppendFloat(cv.tmp[:0], v, 'g', -1, 64)))
		}
	default:
		return nil, &ParseError{Column: cv.sl.name, Reason: fmt.Sprintf("values of type %s cannot be categories", d.Kind())}
	}
	return out, nil
}

func (s *pqSource) digest() string { return digestFiles(s.files) }
