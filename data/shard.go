package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
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
	src  format.Source

	slots  []format.Slot // features, then the label if any
	nfeat  int
	dicts  []*format.Dict // per slot (categorical)
	pixels int            // bytes per row of an image dataset
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

	batch  *format.Batch
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
		opt.FashionMNISTDir = format.DefaultFashionMNISTDir
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
			s.src.Close()
		}
		return nil, fmt.Errorf("open dataset %s (%s): %w", opt.Name, spec.URI, err)
	}
	return s, nil
}

func (s *Shard) columns() []format.ColumnInfo {
	cols := make([]format.ColumnInfo, s.nfeat)
	for j := range cols {
		cols[j] = format.ColumnInfo{Name: s.slots[j].Name, Kind: s.slots[j].Kind}
	}
	return cols
}

func (s *Shard) batchColumns() []format.ColumnInfo {
	cols := make([]format.ColumnInfo, len(s.slots))
	for j, sl := range s.slots {
		cols[j] = format.ColumnInfo{Name: sl.Name, Kind: sl.Kind}
	}
	return cols
}

func (s *Shard) newBatch(n int) *format.Batch {
	b := &format.Batch{Columns: s.batchColumns(), Num: make([][]float32, len(s.slots)), Cat: make([][]int32, len(s.slots)), Dicts: s.dicts, PixelsPerRow: s.pixels}
	for j, sl := range s.slots {
		if sl.Kind == format.Numeric {
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
func (s *Shard) Columns() []format.ColumnInfo { return s.columns() }

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
func (s *Shard) NextBatch(ctx context.Context) (*format.Batch, error) {
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
	s.batch.Resize(n)
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

// Close stops background reads and releases the data.
func (s *Shard) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.stopPrefetch()
	s.tbl, s.cur, s.order, s.perm = nil, nil, nil, nil
	if s.src != nil {
		return s.src.Close()
	}
	return nil
}

// mix combines two values into a stream id (splitmix64's finaliser).
func mix(a, b uint64) uint64 {
	z := a*0x9e3779b97f4a7c15 + b + 0x632be59bd9b4e019
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
