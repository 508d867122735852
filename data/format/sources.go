package format

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/tempotrain/tempotrain/api"
)

// Options are what a reader needs besides the spec.
type Options struct {
	// Workers bounds the goroutines that parse and decode (0 or 1: one).
	Workers int
	// FashionMNISTDir holds Fashion-MNIST's IDX files (for
	// "fashion-mnist:" URIs).
	FashionMNISTDir string
}

// UnitTarget is how large a unit of streaming should be.
type UnitTarget struct {
	Rows  int64 // row-group formats
	Bytes int   // CSV
}

// Source reads one dataset's files in one format: it lists units (runs of
// rows a stream reads one at a time) and reads rows of a unit, or every
// row. It knows nothing of ranks: the caller shares the units out.
type Source interface {
	// Slots are the columns kept: features in order, then the label.
	Slots() []Slot
	// FixedClasses are the classes of an image dataset (its folders), nil
	// for tables.
	FixedClasses() []string
	// ImageShape is C, H, W of an image dataset, zeros for tables.
	ImageShape() (c, h, w int)
	// EstimateRows is the number of rows, exact or estimated.
	EstimateRows() (int64, bool)
	// CanStream says whether units can be read one by one.
	CanStream() bool
	// Units cuts the data into units of streaming and returns their rows,
	// in file order. A Scanner's units may be found by several processes
	// instead (ScanFile, SetUnits).
	Units(ctx context.Context, t UnitTarget) ([]int64, error)
	// ReadUnit reads rows [lo, hi) of unit u: blocks in row order, with
	// local dictionaries, of rows [from, from+their rows) of the unit, a
	// range that holds [lo, hi); only the slots in want (all when nil).
	// Parquet and images read [lo, hi) (from == lo), Parquet decoding only
	// the pages that hold those rows; CSV parses the unit whole (from 0).
	ReadUnit(ctx context.Context, u int, lo, hi int64, want []bool) (blocks []*Block, from int64, err error)
	// LoadAll reads every row in file order.
	LoadAll(ctx context.Context, want []bool, emit func(*Block) error) error
	// Digest identifies the files (names and sizes).
	Digest() string
	Close() error
}

// Recycler is a Source that reuses the memory of blocks it read
// (Parquet): Recycle gives one back, once nothing uses it.
type Recycler interface {
	Recycle(b *Block)
}

// Scanner is a Source whose units are found by scanning its files (CSV:
// record ends), a file at a time, so that processes may share the scan:
// each scans some files, and every one sets the units of all.
type Scanner interface {
	Source
	// Files is the number of files.
	Files() int
	// ScanFile finds the units of file i.
	ScanFile(ctx context.Context, i int, t UnitTarget) ([]CSVUnit, error)
	// SetUnits sets the units, per file, and returns their rows in file
	// order (what Units returns).
	SetUnits(byFile [][]CSVUnit) []int64
}

// Open lists the files of spec and opens the format's source.
func Open(ctx context.Context, spec api.DatasetSpec, opt Options) (Source, error) {
	if strings.HasPrefix(spec.URI, api.FashionMNISTScheme) {
		return openIDX(spec, opt)
	}
	files, err := listFiles(ctx, spec.URI, spec.Format)
	if err != nil {
		return nil, err
	}
	format := spec.Format
	if format == "" {
		if format, err = formatOfFiles(spec.URI, files); err != nil {
			return nil, err
		}
		// A directory listed before the format was known may hold other
		// files too: keep the format's.
		files = slices.DeleteFunc(files, func(f *fileRef) bool { return !keepExt(f.rel, format) })
	}
	switch format {
	case "csv":
		return openCSV(ctx, spec, opt, files)
	case "parquet":
		return openParquet(ctx, spec, opt, files)
	case "images":
		return openImages(ctx, spec, opt, files)
	}
	return nil, invalidf("%s: format %q cannot be read from files", spec.URI, format)
}

// formatOfFiles infers the format from the files' extensions.
func formatOfFiles(uri string, files []*fileRef) (string, error) {
	counts := map[string]int{}
	for _, f := range files {
		ext := strings.ToLower(filepath.Ext(f.rel))
		for format, exts := range extensions {
			if slices.Contains(exts, ext) {
				counts[format]++
			}
		}
	}
	switch {
	case counts["parquet"] > 0 && counts["csv"] == 0:
		return "parquet", nil
	case counts["csv"] > 0 && counts["parquet"] == 0:
		return "csv", nil
	case counts["images"] > 0 && counts["csv"] == 0 && counts["parquet"] == 0:
		return "images", nil
	}
	return "", invalidf("%s: cannot tell the format from the files (%d csv, %d parquet, %d images, of %d): set format",
		uri, counts["csv"], counts["parquet"], counts["images"], len(files))
}

// selectSlots picks a table's slots from its columns (names, kinds from the
// file or inferred) as the spec says: features (default all but the label),
// then the label. It returns the slots and each slot's column index.
func selectSlots(spec api.DatasetSpec, file string, names []string, kinds []Kind) ([]Slot, []int, error) {
	index := make(map[string]int, len(names))
	for i, n := range names {
		if _, dup := index[n]; dup {
			return nil, nil, invalidf("%s: column %q appears twice", file, n)
		}
		index[n] = i
	}
	missing := func(role, name string) error {
		return invalidf("%s: no %s column %q; the columns there are %s", file, role, name, listColumns(names))
	}
	for _, c := range spec.Categorical {
		if _, ok := index[c]; !ok {
			return nil, nil, missing("categorical", c)
		}
	}
	features := spec.Features
	if len(features) == 0 {
		for _, n := range names {
			if n != spec.Label {
				features = append(features, n)
			}
		}
	}
	var slots []Slot
	var cols []int
	add := func(role, name string, label bool) error {
		i, ok := index[name]
		if !ok {
			return missing(role, name)
		}
		k := kinds[i]
		forced := slices.Contains(spec.Categorical, name)
		if forced {
			k = Categorical
		}
		slots = append(slots, Slot{Name: name, Kind: k, label: label, forced: forced})
		cols = append(cols, i)
		return nil
	}
	for _, f := range features {
		if err := add("feature", f, false); err != nil {
			return nil, nil, err
		}
	}
	if spec.Label != "" {
		if err := add("label", spec.Label, true); err != nil {
			return nil, nil, err
		}
	}
	if len(slots) == 0 {
		return nil, nil, invalidf("%s: no columns to read", file)
	}
	return slots, cols, nil
}

// parallel runs fn(0..n-1) on at most workers goroutines. After a failure
// it starts no more tasks and returns the error of the lowest index that
// failed (tasks start in index order, so every lower one ran): the same
// error whatever the timing.
func parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	if n == 1 || workers <= 1 {
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		mu     sync.Mutex
		next   int
		first  error
		failed = -1
		wg     sync.WaitGroup
	)
	for range min(n, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if failed >= 0 || next >= n {
					mu.Unlock()
					return
				}
				if err := ctx.Err(); err != nil {
					if failed < 0 {
						first, failed = err, next
					}
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				if err := fn(i); err != nil {
					mu.Lock()
					if failed < 0 || i < failed {
						first, failed = err, i
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}
