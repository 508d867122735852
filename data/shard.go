package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/tempotrain/tempotrain/api"
)

// ShardOptions place a Shard among the ranks and say how it batches.
type ShardOptions struct {
	// Name of the dataset (its key in FitInput.Datasets); it names the
	// files SaveState writes. Default "train".
	Name string
	// Rank and WorldSize place this shard among the data-parallel ranks.
	// Default: the Comm's, else 0 of 1.
	Rank, WorldSize int
	// Seed and the epoch fix every shuffle. Every rank must use the same.
	Seed uint64
	// BatchSize is the number of rows per batch. Default 32.
	BatchSize int
	// Workers is the number of goroutines that parse and decode. Default
	// GOMAXPROCS.
	Workers int
	// FashionMNISTDir holds Fashion-MNIST's IDX files. Default
	// DefaultFashionMNISTDir.
	FashionMNISTDir string
}

// Shard is one rank's part of a dataset: its rows, batch after batch,
// epoch after epoch, and its position for a checkpoint. A Shard is used by
// one goroutine (the rank's training loop).
type Shard struct {
	name string
	spec api.DatasetSpec
	opt  ShardOptions
	g    group
	src  source

	slots  []slot // features, then the label if any
	nfeat  int
	dicts  []*Dict // per slot (categorical)
	pixels int     // bytes per row of an image dataset
	shape  []int

	memory   bool
	budget   int64
	rowBytes int64
	total    int64   // rows of the dataset
	tbl      *table  // memory mode
	units    []int64 // stream mode: rows of each unit, in file order
	unitOff  []int64 // prefix sums of units
	layout   string  // stream mode: layoutOf(units)
	window   int     // stream mode: rows per shuffle window

	own      LabelInfo // the dataset's label, from Open
	pipeline *Pipeline
	tf       *transform
	tfErr    error // why the identity pipeline cannot make features
	labels   labelMap

	// global, when set (SetGlobalBatchSize), is the rows per step over all
	// ranks; else opt.BatchSize per rank.
	global int

	// The epoch.
	epoch int
	// hist, streaming, are the splits of the epoch before sp (a Seek to
	// another world size or batch size made sp), and consumedBase the rows
	// they consumed.
	hist         []PositionSplit
	consumedBase int64
	sp           split // how the epoch, from sp.start on, is shared (see split)
	rows         int64 // rows this rank gets in sp
	pos          int64 // rows consumed in sp
	// rowsBase is the rows consumed in the epoch before sp started, when
	// a Seek at the same settings started it (Position.Rows).
	rowsBase int64
	local    int64 // batches taken in sp
	batches  int   // batches of the epoch (counted in this split's batches)
	// stepRows is the rows over all ranks of the step of the last batch.
	stepRows int64
	order    []int32 // memory mode: this rank's rows of the epoch
	perm     []int32 // memory mode: the epoch's order of all rows
	wins     []win   // stream mode: this rank's windows of the epoch
	cur      *loaded // stream mode: the window being consumed
	pre      *prefetch
	spare    spareRows

	batch  *Batch
	gsc    gatherScratch
	closed bool
}

// Open opens rank opt.Rank's shard of the dataset spec describes (after
// api's defaults, which Open applies again). It lists and checks the files,
// reads the data into memory or prepares to stream it (spec.Mode), and
// fits the label's classes over all ranks. It is a collective call when
// comm is not nil. Errors that no restart fixes wrap ErrInvalid.
func Open(ctx context.Context, spec api.DatasetSpec, opt ShardOptions, comm Comm) (*Shard, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	if err := spec.Validate("dataset"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	g := group{comm}
	if opt.Name == "" {
		opt.Name = api.TrainDataset
	}
	if comm != nil {
		if opt.WorldSize == 0 {
			opt.WorldSize, opt.Rank = comm.Size(), comm.Rank()
		}
		if opt.WorldSize != comm.Size() || opt.Rank != comm.Rank() {
			return nil, fmt.Errorf("data: open %s: rank %d of %d, but the group says %d of %d", opt.Name, opt.Rank, opt.WorldSize, comm.Rank(), comm.Size())
		}
	}
	if opt.WorldSize == 0 {
		opt.WorldSize = 1
	}
	if opt.BatchSize == 0 {
		opt.BatchSize = 32
	}
	if opt.Workers <= 0 {
		opt.Workers = runtime.GOMAXPROCS(0)
	}
	if opt.FashionMNISTDir == "" {
		opt.FashionMNISTDir = DefaultFashionMNISTDir
	}
	switch {
	case opt.WorldSize < 1 || opt.Rank < 0 || opt.Rank >= opt.WorldSize:
		return nil, fmt.Errorf("data: open %s: rank %d of world size %d", opt.Name, opt.Rank, opt.WorldSize)
	case opt.BatchSize < 1:
		return nil, fmt.Errorf("data: open %s: batch size %d", opt.Name, opt.BatchSize)
	}
	s := &Shard{name: opt.Name, spec: spec, opt: opt, g: g, budget: int64(spec.MemoryBudgetMiB) << 20}
	if err := s.open(ctx); err != nil {
		if s.src != nil {
			s.src.close()
		}
		return nil, fmt.Errorf("open dataset %s (%s): %w", opt.Name, spec.URI, err)
	}
	return s, nil
}

func (s *Shard) open(ctx context.Context) error {
	src, err := openSource(ctx, s.spec, s.opt)
	if err != nil {
		return err
	}
	s.src = src
	s.slots = src.slots()
	s.nfeat = len(s.slots)
	if s.spec.Label != "" || src.fixedClasses() != nil {
		s.nfeat--
	}
	s.dicts = make([]*Dict, len(s.slots))
	for j, sl := range s.slots {
		if sl.kind == Categorical {
			s.dicts[j] = NewDict()
		}
	}
	if c, h, w := src.imageShape(); c > 0 {
		s.pixels = c * h * w
		s.shape = []int{c, h, w}
	}
	// Memory a row costs: its values, its places in the orders of an epoch.
	s.rowBytes = int64(4*len(s.slots)+s.pixels) + 8
	rows, _ := src.estimateRows()
	need := rows * s.rowBytes
	switch s.spec.Mode {
	case "memory":
		if need > s.budget {
			return invalidf("mode memory: the data needs about %d MiB in memory (%d rows × %d bytes), more than memory_budget_mib %d: raise it, or stream (mode stream)",
				need>>20, rows, s.rowBytes, s.spec.MemoryBudgetMiB)
		}
		s.memory = true
	case "stream":
		s.memory = !src.canStream()
	default:
		s.memory = need <= s.budget/2 || !src.canStream()
		if s.memory && need > s.budget {
			return invalidf("the data needs about %d MiB in memory and cannot be streamed; raise memory_budget_mib (%d)", need>>20, s.spec.MemoryBudgetMiB)
		}
	}
	if s.memory {
		if err := s.load(ctx); err != nil {
			return err
		}
	} else {
		if err := s.prepareStream(ctx); err != nil {
			return err
		}
	}
	if s.total == 0 {
		return invalidf("the dataset has no rows")
	}
	if s.spec.Remainder == "drop" && s.total < int64(s.opt.WorldSize) {
		return invalidf("remainder drop: %d rows for %d ranks leaves every rank without rows", s.total, s.opt.WorldSize)
	}
	if err := s.fitLabel(ctx); err != nil {
		return err
	}
	// The identity: categorical features make it fail, later, at Next
	// (until Fit or SetPipeline installs encoders).
	p := newPipeline(s.columns(), s.own, s.imageInfo())
	lm, err := newLabelMap(p.Label, s)
	if err != nil {
		return err
	}
	s.pipeline, s.labels = p, lm
	if s.tf, s.tfErr = p.compile(s.batchColumns(), s.pixels); s.tfErr != nil {
		if !errors.Is(s.tfErr, ErrInvalid) {
			return s.tfErr
		}
		s.tf = &transform{p: p}
	}
	s.batch = s.newBatch(s.opt.BatchSize)
	return s.SetEpoch(0)
}

// load reads everything into memory (mode memory).
func (s *Shard) load(ctx context.Context) error {
	s.tbl = &table{}
	var scratch []int32
	err := s.src.loadAll(ctx, nil, func(b *block) error {
		scratch = b.mergeDicts(s.dicts, scratch)
		s.tbl.add(b)
		if m := s.tbl.memBytes(); m > s.budget {
			return invalidf("the data takes more than memory_budget_mib %d once read (%d MiB after %d rows): raise it, or stream (mode stream)",
				s.spec.MemoryBudgetMiB, m>>20, s.tbl.rows())
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Packed: an epoch's order reads rows all over the table, a row's
	// values in one or two cache lines rather than a line per column
	// (3-5x fewer CPU per row); the memory this takes meanwhile is a chunk
	// of the table: an eighth of the budget, or a block as read (a row
	// group) when larger. A stream packs each window (readWindow).
	s.tbl.pack(min(packChunkBytes, s.budget/8))
	s.total = int64(s.tbl.rows())
	if s.total > math.MaxInt32 {
		return invalidf("%d rows: more than mode memory holds (2^31-1); stream it", s.total)
	}
	return nil
}

// prepareStream finds the units and sizes the windows (mode stream).
func (s *Shard) prepareStream(ctx context.Context) error {
	units, err := s.src.units(ctx, s.g, s.unitTarget())
	if err != nil {
		return err
	}
	s.units = units
	s.unitOff = make([]int64, len(units)+1)
	for i, n := range units {
		s.unitOff[i+1] = s.unitOff[i] + n
	}
	s.total = s.unitOff[len(units)]
	s.layout = layoutOf(units)
	s.window = int(min(int64(math.MaxInt32), max(1, s.budget/windowShare/s.rowBytes)))
	if w := s.spec.ShuffleWindowRows; w > 0 {
		if int64(w)*s.rowBytes > s.budget/windowShare {
			return invalidf("shuffle_window_rows %d takes %d MiB, more than a fifth of memory_budget_mib %d (a window is read while the one before is consumed, and read buffers need room)",
				w, int64(w)*s.rowBytes>>20, s.spec.MemoryBudgetMiB)
		}
		s.window = w
	}
	return nil
}

// windowShare: a shuffle window takes at most budget/windowShare. Two are
// held (the one consumed, the one read ahead into the memory of the one
// before); while a window is read, the columns of the piece being read
// too; CSV units read whole at windows' ends, read buffers, pages being
// decoded and parse outputs take the rest.
const windowShare = 5

// unitTarget is the size of a unit of streaming: rows for row-group
// formats (Parquet groups whole pages up to it), bytes for CSV. Units
// small against a window let a window mix rows from several places of the
// files, and keep CSV units, read whole where a rank's range cuts them, a
// small share of memory.
func (s *Shard) unitTarget() unitTarget {
	w := max(int64(1), s.budget/windowShare/s.rowBytes)
	if r := s.spec.ShuffleWindowRows; r > 0 {
		w = int64(r)
	}
	return unitTarget{rows: max(1, w/8), bytes: int(min(8<<20, max(64<<10, s.budget/32)))}
}

func (s *Shard) columns() []ColumnInfo {
	cols := make([]ColumnInfo, s.nfeat)
	for j := range cols {
		cols[j] = ColumnInfo{Name: s.slots[j].name, Kind: s.slots[j].kind}
	}
	return cols
}

func (s *Shard) batchColumns() []ColumnInfo {
	cols := make([]ColumnInfo, len(s.slots))
	for j, sl := range s.slots {
		cols[j] = ColumnInfo{Name: sl.name, Kind: sl.kind}
	}
	return cols
}

func (s *Shard) newBatch(n int) *Batch {
	b := &Batch{Columns: s.batchColumns(), Num: make([][]float32, len(s.slots)), Cat: make([][]int32, len(s.slots)), Dicts: s.dicts, PixelsPerRow: s.pixels}
	for j, sl := range s.slots {
		if sl.kind == Numeric {
			b.Num[j] = make([]float32, 0, n)
		} else {
			b.Cat[j] = make([]int32, 0, n)
		}
	}
	if s.pixels > 0 {
		b.Pixels = make([]byte, 0, n*s.pixels)
	}
	return b
}

func (s *Shard) imageInfo() *ImageInfo {
	if s.pixels == 0 {
		return nil
	}
	im := s.spec.Image
	return &ImageInfo{Channels: s.shape[0], Height: s.shape[1], Width: s.shape[2], Mean: im.Mean, Std: im.Std}
}

// hasLabel says whether the last slot is a label.
func (s *Shard) hasLabel() bool { return s.nfeat < len(s.slots) }

// Name is the dataset's name.
func (s *Shard) Name() string { return s.name }

// Columns are the raw feature columns, in order (empty for images).
func (s *Shard) Columns() []ColumnInfo { return s.columns() }

// Shape is the shape of one row's features as the pipeline makes them:
// [C, H, W] for images, [Width] for tables.
func (s *Shard) Shape() []int {
	if s.shape != nil {
		return append([]int(nil), s.shape...)
	}
	return []int{s.tf.width}
}

// Width is the number of float32s of one row's features.
func (s *Shard) Width() int { return s.tf.width }

// BatchSize is the number of rows of a full batch (the largest a rank
// takes, under SetGlobalBatchSize).
func (s *Shard) BatchSize() int { return s.opt.BatchSize }

// SetGlobalBatchSize makes every step take g rows over all ranks instead of
// BatchSize rows per rank: rank r takes g/WorldSize of them, one more when r
// < g%WorldSize, and BatchSize becomes g/WorldSize rounded up. It restarts
// epoch 0 (a checkpoint's position is restored after it).
func (s *Shard) SetGlobalBatchSize(g int) error {
	w := s.opt.WorldSize
	if g < w {
		return fmt.Errorf("dataset %s: %w: a global batch of %d rows for %d ranks leaves ranks without rows: it must be at least the world size", s.name, ErrInvalid, g, w)
	}
	s.global = g
	s.opt.BatchSize = (g + w - 1) / w
	s.batch = s.newBatch(s.opt.BatchSize)
	return s.SetEpoch(0)
}

// GlobalBatchSize is the number of rows a whole step takes over all ranks.
func (s *Shard) GlobalBatchSize() int {
	if s.global > 0 {
		return s.global
	}
	return s.opt.BatchSize * s.opt.WorldSize
}

// TotalRows is the number of rows of the whole dataset.
func (s *Shard) TotalRows() int64 { return s.total }

// Len is the number of rows this rank gets per epoch (from the position a
// Seek to another world size or batch size resumed at, then).
func (s *Shard) Len() int64 { return s.rows }

// Steps is the number of batches this rank gets in a whole epoch. With
// remainder pad or drop every rank gets as many.
func (s *Shard) Steps() int { return int(s.splitAt(0).steps(s.opt.Rank)) }

// Left is the number of batches left in the epoch: Next gives that many
// before io.EOF.
func (s *Shard) Left() int { return int(s.sp.steps(s.opt.Rank) - s.local) }

// StepRows is the number of rows all ranks together took in the step of
// the last Next: GlobalBatchSize but in the epoch's last step. A rank whose
// batch of n rows is not StepRows/WorldSize weighs its gradient by
// n·WorldSize/StepRows, so that the mean over ranks is the mean over rows.
func (s *Shard) StepRows() int {
	if s.local == 0 {
		return 0
	}
	return int(s.stepRows)
}

// Streaming says whether the shard streams (else it holds the data in
// memory).
func (s *Shard) Streaming() bool { return !s.memory }

// Label describes the dataset's label as Open found it.
func (s *Shard) Label() LabelInfo { return s.own }

// Pipeline is the pipeline batches go through: the fitted preprocessors
// (Fit, SetPipeline), or the identity.
func (s *Shard) Pipeline() *Pipeline { return s.pipeline }

// SetPipeline makes batches go through p: a pipeline fitted on another
// dataset ("train"), or loaded from a checkpoint. Its label classes replace
// the shard's own, so class numbers agree between datasets.
func (s *Shard) SetPipeline(p *Pipeline) error {
	tf, err := p.compile(s.batchColumns(), s.pixels)
	if err != nil {
		return fmt.Errorf("dataset %s: %w", s.name, err)
	}
	lm, err := newLabelMap(p.Label, s)
	if err != nil {
		return fmt.Errorf("dataset %s: %w", s.name, err)
	}
	s.pipeline, s.tf, s.labels, s.tfErr = p, tf, lm, nil
	return nil
}

// Epoch is the current epoch.
func (s *Shard) Epoch() int { return s.epoch }

// SetEpoch starts epoch e from its first batch: the order of its rows
// depends on (seed, e) only.
func (s *Shard) SetEpoch(e int) error {
	return s.seek(e, 0, nil)
}

// Next fills x (BatchSize·Width float32s at least) with the next batch's
// features, row-major, and y (BatchSize) with its labels (class numbers for
// classification; nothing when the dataset has no label: y may be nil), and
// returns the number of rows. At the end of the epoch it returns 0, io.EOF;
// SetEpoch starts the next. It allocates nothing in the steady state.
func (s *Shard) Next(ctx context.Context, x, y []float32) (int, error) {
	if s.closed {
		return 0, errors.New("data: Next on a closed shard")
	}
	if s.tfErr != nil {
		return 0, fmt.Errorf("dataset %s: %w", s.name, s.tfErr)
	}
	n := int(s.sp.batchAt(s.opt.Rank, s.pos))
	if n <= 0 {
		return 0, io.EOF
	}
	if len(x) < n*s.tf.width {
		return 0, fmt.Errorf("data: Next: x holds %d float32s, a batch of %d rows needs %d", len(x), n, n*s.tf.width)
	}
	if s.hasLabel() && y != nil && len(y) < n {
		return 0, fmt.Errorf("data: Next: y holds %d float32s, want %d", len(y), n)
	}
	if err := s.fill(ctx, n); err != nil {
		return 0, err
	}
	if err := s.tf.apply(s.batch, x); err != nil {
		return 0, fmt.Errorf("dataset %s: %w", s.name, err)
	}
	if s.hasLabel() && y != nil {
		if err := s.labels.fill(s.batch, len(s.slots)-1, y[:n]); err != nil {
			return 0, fmt.Errorf("dataset %s: %w", s.name, err)
		}
	}
	s.took(n)
	return n, nil
}

// took counts a batch of n rows as consumed.
func (s *Shard) took(n int) {
	s.stepRows = s.sp.stepRows(s.opt.Rank, s.pos)
	s.pos += int64(n)
	s.local++
	s.batches++
}

// NextBatch is Next without the pipeline: the raw rows of the next batch
// (features, then the label column), valid until the next call.
func (s *Shard) NextBatch(ctx context.Context) (*Batch, error) {
	n := int(s.sp.batchAt(s.opt.Rank, s.pos))
	if n <= 0 {
		return nil, io.EOF
	}
	if err := s.fill(ctx, n); err != nil {
		return nil, err
	}
	s.took(n)
	return s.batch, nil
}

// fill gathers the next n rows of the epoch into s.batch.
func (s *Shard) fill(ctx context.Context, n int) error {
	s.batch.reset(n)
	if s.memory {
		gather(s.tbl, s.order[s.pos:s.pos+int64(n)], s.batch, 0, nil, &s.gsc)
		return nil
	}
	done := 0
	for done < n {
		if s.cur == nil || s.pos+int64(done) >= s.cur.w.end {
			if err := s.advance(ctx, s.pos+int64(done)); err != nil {
				return err
			}
		}
		off := s.pos + int64(done) - s.cur.w.start
		k := int(min(int64(n-done), s.cur.w.end-s.pos-int64(done)))
		ids := s.cur.perm[off : off+int64(k)]
		gather(s.cur.t, ids, s.batch, done, nil, &s.gsc)
		done += k
	}
	return nil
}

// gather copies rows ids of t into b from row at on, the slots in want
// (all when nil). It goes column by column: the loads of one column do not
// depend on each other, so the processor overlaps their cache misses (a
// row at a time, a row's columns are far apart and the misses queue). sc
// holds each row's block and place in it when t has several blocks.
func gather(t *table, ids []int32, b *Batch, at int, want []bool, sc *gatherScratch) {
	n := len(ids)
	if n == 0 {
		return
	}
	if t.blocks[0].vals != nil {
		gatherPacked(t, ids, b, at, want, sc)
		return
	}
	if len(t.blocks) == 1 {
		blk := t.blocks[0]
		for j := range b.Columns {
			if want != nil && !want[j] {
				continue
			}
			if b.Num[j] != nil {
				gatherOne(b.Num[j][at:at+n], blk.num[j], ids)
			} else {
				gatherOne(b.Cat[j][at:at+n], blk.cat[j], ids)
			}
		}
		if p := b.PixelsPerRow; p > 0 {
			for i, id := range ids {
				d, r := at+i, int(id)
				copy(b.Pixels[d*p:(d+1)*p], blk.px[r*p:(r+1)*p])
			}
		}
		return
	}
	sc.blk, sc.row = grow(sc.blk, n), grow(sc.row, n)
	k := 0
	for i, id := range ids {
		r := int(id)
		if r < t.starts[k] || r >= t.starts[k+1] {
			k = sort.SearchInts(t.starts, r+1) - 1
		}
		sc.blk[i], sc.row[i] = int32(k), int32(r-t.starts[k])
	}
	for j := range b.Columns {
		if want != nil && !want[j] {
			continue
		}
		if b.Num[j] != nil {
			sc.num = sc.num[:0]
			for _, blk := range t.blocks {
				sc.num = append(sc.num, blk.num[j])
			}
			gatherMany(b.Num[j][at:at+n], sc.num, sc.blk, sc.row)
		} else {
			sc.cat = sc.cat[:0]
			for _, blk := range t.blocks {
				sc.cat = append(sc.cat, blk.cat[j])
			}
			gatherMany(b.Cat[j][at:at+n], sc.cat, sc.blk, sc.row)
		}
	}
	if p := b.PixelsPerRow; p > 0 {
		for i := range ids {
			d, r := at+i, int(sc.row[i])
			copy(b.Pixels[d*p:(d+1)*p], t.blocks[sc.blk[i]].px[r*p:(r+1)*p])
		}
	}
	clear(sc.num)
	clear(sc.cat)
}

// gatherPacked is gather from packed blocks (every block of t is): a row
// at a time, its values read from one or two cache lines.
func gatherPacked(t *table, ids []int32, b *Batch, at int, want []bool, sc *gatherScratch) {
	sc.numJ, sc.catJ = sc.numJ[:0], sc.catJ[:0]
	for j := range b.Columns {
		switch {
		case want != nil && !want[j]:
		case b.Num[j] != nil:
			sc.numJ = append(sc.numJ, j)
		default:
			sc.catJ = append(sc.catJ, j)
		}
	}
	w := t.blocks[0].width
	// The rows, one after the other (the random reads), then column by
	// column out of that, packRows rows at a time (in L1).
	sc.stage = grow(sc.stage, packRows*w)
	k, vals := 0, t.blocks[0].vals
	lo, hi := t.starts[0], t.starts[1]
	for c := 0; c < len(ids); c += packRows {
		chunk := ids[c:min(c+packRows, len(ids))]
		m := len(chunk)
		stage := sc.stage[:m*w]
		for i, id := range chunk {
			r := int(id)
			if r < lo || r >= hi {
				k = sort.SearchInts(t.starts, r+1) - 1
				vals, lo, hi = t.blocks[k].vals, t.starts[k], t.starts[k+1]
			}
			r -= lo
			copy(stage[i*w:i*w+w], vals[r*w:r*w+w])
		}
		d := at + c
		for _, j := range sc.numJ {
			col := b.Num[j][d : d+m]
			for i := range col {
				col[i] = math.Float32frombits(stage[i*w+j])
			}
		}
		for _, j := range sc.catJ {
			col := b.Cat[j][d : d+m]
			for i := range col {
				col[i] = int32(stage[i*w+j])
			}
		}
	}
}

// gatherScratch is gather's memory.
type gatherScratch struct {
	blk, row   []int32
	num        [][]float32
	cat        [][]int32
	numJ, catJ []int
	stage      []uint32
}

func gatherOne[T any](dst, src []T, ids []int32) {
	dst = dst[:len(ids)]
	for i, id := range ids {
		dst[i] = src[id]
	}
}

func gatherMany[T any](dst []T, srcs [][]T, blk, row []int32) {
	dst, row = dst[:len(blk)], row[:len(blk)]
	for i, k := range blk {
		dst[i] = srcs[k][row[i]]
	}
}

// Close stops background reads and releases the data.
func (s *Shard) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.stopPrefetch()
	s.tbl, s.cur, s.order, s.perm = nil, nil, nil, nil
	if s.src != nil {
		return s.src.close()
	}
	return nil
}

// splitAt is the split of the epoch from position start of its order
// under the shard's settings.
func (s *Shard) splitAt(start int64) split {
	return newSplit(s.total, start, s.GlobalBatchSize(), s.opt.WorldSize, s.spec.Remainder, s.spec.DropLastBatch)
}

// seek positions the shard at the start of a split of epoch e: in memory,
// the epoch's order from position start on shared among the ranks;
// streaming (start 0), the rows the earlier splits of the epoch, hist,
// left (see streamRest), or the whole epoch when none.
func (s *Shard) seek(e int, start int64, hist []PositionSplit) error {
	if e < 0 {
		return fmt.Errorf("data: epoch %d", e)
	}
	if start < 0 || start > 0 && !s.memory || len(hist) > 0 && s.memory {
		return fmt.Errorf("data: epoch %d from row %d of its order, after %d splits", e, start, len(hist))
	}
	s.stopPrefetch()
	s.spare.put(s.cur)
	s.cur = nil
	s.epoch, s.pos, s.local, s.batches, s.stepRows, s.rowsBase = e, 0, 0, 0, 0, 0
	s.hist, s.consumedBase = nil, 0
	s.sp = s.splitAt(start)
	var rest []sitem
	if len(hist) > 0 {
		var n int64
		rest, n = s.streamRest(e, hist)
		s.hist, s.consumedBase = append([]PositionSplit(nil), hist...), hist[len(hist)-1].Consumed
		s.sp = newSplit(n, 0, s.GlobalBatchSize(), s.opt.WorldSize, s.spec.Remainder, s.spec.DropLastBatch)
	}
	s.rows = s.sp.rows(s.opt.Rank)
	shuffled := *s.spec.Shuffle
	if s.memory {
		n := int(s.total)
		s.perm = grow(s.perm, n)
		perm := s.perm
		for i := range perm {
			perm[i] = int32(i)
		}
		if shuffled {
			shuffle(perm, s.opt.Seed, mix(uint64(e), 0))
		}
		s.order = s.order[:0]
		s.sp.offsets(s.opt.Rank, func(off int64) {
			s.order = append(s.order, perm[(s.sp.start+off)%int64(n)])
		})
	} else if len(hist) > 0 {
		s.wins, _ = s.layoutRank(rest, s.sp, s.opt.Rank, splitKey(e, len(hist)))
	} else {
		s.wins, _ = s.epochWindows(e, s.sp, s.opt.Rank)
	}
	return nil
}

// skipSteps moves past the rank's next k batches (without reading them).
func (s *Shard) skipSteps(k int64) {
	for ; k > 0; k-- {
		b := s.sp.batchAt(s.opt.Rank, s.pos)
		if b <= 0 {
			return
		}
		s.stepRows = s.sp.stepRows(s.opt.Rank, s.pos)
		s.pos += b
		s.local++
		s.batches++
	}
}

// piece is rows [lo, hi) of unit u.
type piece struct {
	u      int
	lo, hi int64
}

// win is a shuffle window of a streaming rank: rows [start, end) of its
// epoch, from pieces, shuffled together (their order drawn from (seed,
// key)). When keep is set the window's rows are those of the pieces' rows
// it lists, in that order (a window of rows that an earlier split of the
// epoch left: see streamRest).
type win struct {
	idx        int
	start, end int64
	pieces     []piece
	keep       []int32
	key        uint64
}

// unitOrder is the order of the units in epoch e: drawn from (seed, e).
func (s *Shard) unitOrder(e int) []int32 {
	order := make([]int32, len(s.units))
	for i := range order {
		order[i] = int32(i)
	}
	if *s.spec.Shuffle {
		shuffle(order, s.opt.Seed, mix(uint64(e), 1))
	}
	return order
}

// epochWindows lays out rank r's rows of epoch e under sp (a split from
// the epoch's start): the units in an order drawn from (seed, e),
// concatenated; the rank's contiguous range of that sequence (wrapping to
// its start for padding); cut into windows. real is how many of the
// range's rows come before the wrap (the others pad).
func (s *Shard) epochWindows(e int, sp split, r int) (wins []win, real int64) {
	// The ranks' contiguous ranges, in rank order (under remainder exact,
	// as share cuts them; pad's wrap to the start).
	lo, n := sp.before(r), sp.rangeRows(r)
	if n > 0 {
		wins = cutWindows(s.piecesOf(s.unitOrder(e), lo, n), int64(s.window))
	}
	for i := range wins {
		wins[i].key = mix(mix(uint64(e), 2), mix(uint64(r), uint64(wins[i].idx)))
	}
	return wins, min(n, max(0, s.total-lo))
}

// piecesOf maps n rows from position lo of the sequence of units in order
// (wrapping around) to pieces.
func (s *Shard) piecesOf(order []int32, lo, n int64) []piece {
	var pieces []piece
	lo %= s.total
	// Find the unit holding position lo.
	i, at := 0, int64(0)
	for at+s.units[order[i]] <= lo {
		at += s.units[order[i]]
		i++
	}
	off := lo - at
	for n > 0 {
		u := int(order[i])
		k := min(s.units[u]-off, n)
		if k > 0 {
			pieces = append(pieces, piece{u: u, lo: off, hi: off + k})
			n -= k
		}
		off = 0
		i = (i + 1) % len(order)
	}
	return pieces
}

// cutWindows cuts a rank's pieces, in order, into shuffle windows of at
// most size rows, at piece boundaries where it can: a piece that does not
// fit in the room a window has left starts the next window, so that a unit
// is read by one window (a Parquet unit's pages decoded once); only a piece
// larger than a window is cut, filling the room left first.
func cutWindows(pieces []piece, size int64) []win {
	var wins []win
	cur := win{}
	var pos int64
	for _, p := range pieces {
		if k := p.hi - p.lo; k <= size && pos-cur.start+k > size {
			cur.end = pos
			wins = append(wins, cur)
			cur = win{idx: len(wins), start: pos}
		}
		for p.lo < p.hi {
			room := size - (pos - cur.start)
			k := min(room, p.hi-p.lo)
			cur.pieces = append(cur.pieces, piece{u: p.u, lo: p.lo, hi: p.lo + k})
			p.lo += k
			pos += k
			if pos-cur.start == size {
				cur.end = pos
				wins = append(wins, cur)
				cur = win{idx: len(wins), start: pos}
			}
		}
	}
	if pos > cur.start {
		cur.end = pos
		wins = append(wins, cur)
	}
	return wins
}

// spareRows keeps the packed rows of the window consumed last for the
// next window read (no new memory to clear and collect per window).
type spareRows struct {
	mu   sync.Mutex
	vals []uint32
}

func (p *spareRows) put(l *loaded) {
	if l == nil || len(l.t.blocks) != 1 || l.t.blocks[0].vals == nil {
		return
	}
	p.mu.Lock()
	p.vals = l.t.blocks[0].vals
	p.mu.Unlock()
}

func (p *spareRows) take() []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.vals
	p.vals = nil
	return v
}

// loaded is a window in memory with its order.
type loaded struct {
	w    win
	t    *table
	perm []int32
}

type prefetch struct {
	idx    int
	cancel context.CancelFunc
	done   chan struct{}
	l      *loaded
	err    error
}

// advance makes the window holding row pos of the epoch current, and
// starts reading the one after it in the background.
func (s *Shard) advance(ctx context.Context, pos int64) error {
	k := sort.Search(len(s.wins), func(i int) bool { return s.wins[i].end > pos })
	if k == len(s.wins) {
		return fmt.Errorf("data: row %d is past the epoch's %d rows", pos, s.rows)
	}
	var l *loaded
	if p := s.pre; p != nil && p.idx == k {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.pre = nil
		if p.err != nil {
			return p.err
		}
		l = p.l
	} else {
		s.stopPrefetch()
		s.spare.put(s.cur)
		s.cur = nil // its memory goes before the next window comes
		var err error
		if l, err = s.loadWindow(ctx, s.wins[k]); err != nil {
			return err
		}
	}
	s.spare.put(s.cur)
	s.cur = l
	if k+1 < len(s.wins) {
		s.startPrefetch(k + 1)
	}
	return nil
}

func (s *Shard) startPrefetch(k int) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &prefetch{idx: k, cancel: cancel, done: make(chan struct{})}
	s.pre = p
	w := s.wins[k]
	go func() {
		defer close(p.done)
		p.l, p.err = s.loadWindow(ctx, w)
	}()
}

func (s *Shard) stopPrefetch() {
	if p := s.pre; p != nil {
		p.cancel()
		<-p.done
		s.pre = nil
	}
}

// loadWindow reads a window's pieces and draws its order from (seed,
// epoch, rank, window): w.key.
func (s *Shard) loadWindow(ctx context.Context, w win) (*loaded, error) {
	t, err := s.readWindow(ctx, w)
	if err != nil {
		return nil, err
	}
	return &loaded{w: w, t: t, perm: s.windowOrder(w)}, nil
}

// windowOrder is the order a window's rows are taken in: indices into its
// pieces' rows.
func (s *Shard) windowOrder(w win) []int32 {
	perm := s.windowPerm(w)
	if w.keep != nil {
		for i, j := range perm {
			perm[i] = w.keep[j]
		}
	}
	return perm
}

// readWindow reads a window's rows into one packed block (as table.pack:
// the window's order reads them at random), in the memory of the window
// consumed last when it is free (spare), each piece packed as soon as it
// is read so that its columns go before the next piece comes. Images stay
// in their blocks.
func (s *Shard) readWindow(ctx context.Context, w win) (*table, error) {
	if s.pixels > 0 {
		return s.readPieces(ctx, w.pieces, nil)
	}
	n, width := int(piecesRows(w.pieces)), len(s.slots)
	buf := s.spare.take()
	if cap(buf) < n*width {
		buf = make([]uint32, max(n, s.window)*width)
	}
	buf = buf[:n*width]
	rc, _ := s.src.(recycler)
	at := 0
	err := s.eachPiece(ctx, w.pieces, nil, func(b *block) {
		if at+b.n <= n {
			b.transpose(buf[at*width:], width)
		}
		at += b.n
		if rc != nil {
			rc.recycle(b)
		}
	})
	if err != nil {
		return nil, err
	}
	if at != n {
		return nil, fmt.Errorf("data: window %d: read %d rows, want %d", w.idx, at, n)
	}
	blk := &block{n: n, num: make([][]float32, width), cat: make([][]int32, width), vals: buf, width: width}
	return &table{blocks: []*block{blk}, starts: []int{0, n}}, nil
}

// recycler is a source that reuses the memory of blocks it read
// (Parquet): recycle gives one back, once nothing uses it.
type recycler interface {
	recycle(b *block)
}

// readPieces reads pieces into a table, their rows in order.
func (s *Shard) readPieces(ctx context.Context, pieces []piece, want []bool) (*table, error) {
	t := &table{}
	err := s.eachPiece(ctx, pieces, want, t.add)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// eachPiece reads pieces and calls fn with their rows in order, in blocks
// whose codes are the dataset's.
func (s *Shard) eachPiece(ctx context.Context, pieces []piece, want []bool, fn func(*block)) error {
	var scratch []int32
	for _, p := range pieces {
		blocks, from, err := s.src.readUnit(ctx, p.u, p.lo, p.hi, want)
		if err != nil {
			return err
		}
		at := from
		for _, b := range blocks {
			scratch = b.mergeDicts(s.dicts, scratch)
			lo, hi := max(p.lo, at), min(p.hi, at+int64(b.n))
			if lo < hi {
				fn(b.slice(int(lo-at), int(hi-at)))
			}
			at += int64(b.n)
		}
		// A source reads the rows asked for, or the unit whole.
		if from > p.lo || at < p.hi || at > s.units[p.u] || at > p.hi && (from != 0 || at != s.units[p.u]) {
			return fmt.Errorf("data: unit %d of the dataset held %d rows when scanned, and rows %d to %d of it were read for rows %d to %d: did a file change?",
				p.u, s.units[p.u], from, at, p.lo, p.hi)
		}
	}
	return nil
}

// scan calls fn with the rows [lo, hi) of the dataset in file order, in
// batches of at most 4096 rows, reading only the slots in want (all when
// nil). Memory stays within a window's.
func (s *Shard) scan(ctx context.Context, lo, hi int64, want []bool, fn func(b *Batch) error) error {
	const step = 4096
	b := s.newBatch(step)
	var sc gatherScratch
	ids := make([]int32, 0, step)
	each := func(t *table, from, to int) error {
		for i := from; i < to; i += step {
			k := min(step, to-i)
			ids = ids[:0]
			for r := i; r < i+k; r++ {
				ids = append(ids, int32(r))
			}
			b.reset(k)
			gather(t, ids, b, 0, want, &sc)
			if err := fn(b); err != nil {
				return err
			}
		}
		return nil
	}
	if lo >= hi {
		return nil
	}
	if s.memory {
		return each(s.tbl, int(lo), int(hi))
	}
	order := make([]int32, len(s.units))
	for i := range order {
		order[i] = int32(i)
	}
	for _, w := range cutWindows(s.piecesOf(order, lo, hi-lo), int64(s.window)) {
		if err := ctx.Err(); err != nil {
			return err
		}
		t, err := s.readPieces(ctx, w.pieces, want)
		if err != nil {
			return err
		}
		if err := each(t, 0, t.rows()); err != nil {
			return err
		}
	}
	return nil
}

// fitShare is this rank's part of the dataset for fitting (labels,
// preprocessors): contiguous, every row in exactly one rank's part. A rank
// alone (no Comm) fits over everything.
func (s *Shard) fitShare() (lo, hi int64) {
	return share(s.total, s.g.rank(), s.g.size())
}

// LabelInfo describes a dataset's label.
type LabelInfo struct {
	// Column is the label column; empty when the dataset has none.
	Column string `json:"column,omitempty"`
	// Task is "classification" or "regression".
	Task string `json:"task,omitempty"`
	// Classes of a classification label, in class-number order: sorted
	// strings, or numbers in increasing order as strconv formats them.
	Classes []string `json:"classes,omitempty"`
	// Numeric says the label column is numeric (Classes are numbers).
	Numeric bool `json:"numeric,omitempty"`
}

// maxClasses bounds the classes of a classification label: a label with
// more distinct values is a regression target or an id.
const maxClasses = 65536

type labelPart struct {
	Strings []string  `json:"s,omitempty"`
	Numbers []float32 `json:"n,omitempty"`
	Rows    int64     `json:"rows"`
	Many    bool      `json:"many,omitempty"`
}

// fitLabel finds the label's classes over all ranks.
func (s *Shard) fitLabel(ctx context.Context) error {
	if fixed := s.src.fixedClasses(); fixed != nil {
		s.own = LabelInfo{Column: "label", Task: "classification", Classes: fixed, Numeric: true}
		return nil
	}
	if !s.hasLabel() {
		return nil
	}
	j := len(s.slots) - 1
	lab := s.slots[j]
	s.own = LabelInfo{Column: lab.name, Task: s.spec.Task, Numeric: lab.kind == Numeric}
	if s.spec.Task != "classification" {
		if lab.kind != Numeric {
			return invalidf("label %q is categorical (strings), but task is regression: a regression label must be numeric", lab.name)
		}
		return nil
	}
	want := make([]bool, len(s.slots))
	want[j] = true
	var part labelPart
	lo, hi := s.fitShare()
	nums := map[float32]struct{}{}
	codes := map[int32]struct{}{}
	err := s.scan(ctx, lo, hi, want, func(b *Batch) error {
		part.Rows += int64(b.N)
		if lab.kind == Numeric {
			for _, v := range b.Num[j][:b.N] {
				nums[v] = struct{}{}
			}
			if len(nums) > maxClasses {
				part.Many = true
				return errStop
			}
		} else {
			for _, c := range b.Cat[j][:b.N] {
				codes[c] = struct{}{}
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		part = labelPart{}
	} else {
		err = nil
	}
	for v := range nums {
		part.Numbers = append(part.Numbers, v)
	}
	for c := range codes {
		part.Strings = append(part.Strings, s.dicts[j].String(c))
	}
	parts, err := gatherJSON(ctx, s.g, part, err)
	if err != nil {
		return err
	}
	allN := map[float32]struct{}{}
	allS := map[string]struct{}{}
	for _, p := range parts {
		if p.Many {
			return invalidf("label %q has more than %d distinct values: a classification label is a class; for a numeric target set task regression", lab.name, maxClasses)
		}
		for _, v := range p.Numbers {
			allN[v] = struct{}{}
		}
		for _, v := range p.Strings {
			allS[v] = struct{}{}
		}
	}
	if lab.kind == Numeric {
		vals := make([]float32, 0, len(allN))
		for v := range allN {
			if v != v {
				return invalidf("label %q has a missing value (NaN)", lab.name)
			}
			vals = append(vals, v)
		}
		sort.Slice(vals, func(a, b int) bool { return vals[a] < vals[b] })
		for _, v := range vals {
			s.own.Classes = append(s.own.Classes, strconv.FormatFloat(float64(v), 'g', -1, 32))
		}
		if len(allN) > maxClasses {
			return invalidf("label %q has more than %d distinct values: a classification label is a class; for a numeric target set task regression", lab.name, maxClasses)
		}
	} else {
		for v := range allS {
			s.own.Classes = append(s.own.Classes, v)
		}
		sort.Strings(s.own.Classes)
	}
	if len(s.own.Classes) < 2 && s.name == api.TrainDataset {
		return invalidf("label %q has one class (%s) in %d rows: a classifier needs at least two (or set task regression)",
			lab.name, strings.Join(quoteAll(s.own.Classes), ", "), s.total)
	}
	return nil
}

var errStop = errors.New("stop")

func quoteAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = strconv.Quote(s)
	}
	return out
}

// mix combines two values into a stream id (splitmix64's finaliser).
func mix(a, b uint64) uint64 {
	z := a*0x9e3779b97f4a7c15 + b + 0x632be59bd9b4e019
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Check makes the checks of Open that need no rank and no data: the spec is
// valid, its files exist (a glob matches some), their format is known and
// their schemas hold the columns the spec names (CSV headers and first
// rows, Parquet footers, image folders). The runtime calls it when a run
// starts, so that a dataset that cannot work fails the run before any rank
// is placed. Errors wrap ErrInvalid when no retry can fix them.
func Check(ctx context.Context, spec api.DatasetSpec) error {
	spec = spec.WithDefaults()
	if err := spec.Validate("dataset"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	src, err := openSource(ctx, spec, ShardOptions{FashionMNISTDir: DefaultFashionMNISTDir})
	if err != nil {
		return err
	}
	return src.close()
}
