package data

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrPositionMismatch is returned by Seek and RestoreState for a saved
// position taken under other settings (world size, batch size, seed, files,
// mode): the exact batches that followed it cannot be reproduced. The error
// says what differs; a caller may start the saved epoch over instead
// (SetEpoch).
var ErrPositionMismatch = errors.New("saved data position does not match this dataset")

// Position is where a shard is in its epochs: what a checkpoint saves to
// resume mid-epoch. The order of an epoch's rows is a function of (seed,
// epoch) and of the settings below, not of a generator's state, so the
// position is the epoch and how far into it the ranks are; Seek recomputes
// the order and, streaming, reads only the shuffle window the position
// falls in. Every rank is at the same position (with remainder pad or drop
// every rank takes as many batches), so rank 0's position resumes every
// rank.
//
// A shard of another world size or batch size (global, or per rank) seeks
// to the position too: it shares the rest of the epoch among its ranks,
// every row still seen once. In memory, the rows the ranks consumed are a
// prefix of the epoch's order, Consumed rows long (see split); streaming,
// what each rank left of its range (see streamRest), which Splits, the
// epoch's earlier splits, let any rank replay.
type Position struct {
	Dataset string `json:"dataset"`
	Epoch   int    `json:"epoch"`
	// Batches consumed in the epoch (after a Seek that re-split the epoch
	// among another world size or batch size: counted in the new batches,
	// the whole ones that Consumed rows make); Rows is the rank's rows
	// consumed in the epoch (since such a Seek, after one).
	Batches int   `json:"batches"`
	Rows    int64 `json:"rows"`
	// Consumed is the number of rows of the epoch's order the ranks
	// consumed together (padding included; at least TotalRows at the
	// epoch's end). A position saved before it existed has 0: Seek then
	// finds it from Batches and the settings.
	Consumed int64 `json:"consumed,omitempty"`
	// Splits, streaming, are the splits of the epoch that Seeks to other
	// world sizes or batch sizes ended, oldest first (none for an epoch
	// taken under one).
	Splits []PositionSplit `json:"splits,omitempty"`
	// Settings under which the position holds.
	Settings PositionSettings `json:"settings"`
}

// PositionSettings are what an epoch's order depends on besides (seed,
// epoch).
type PositionSettings struct {
	WorldSize int `json:"world_size"`
	// BatchSize is the rows of a rank's whole batch (the largest, under a
	// global batch); GlobalBatchSize, when set, the rows of a step over all
	// ranks (Shard.SetGlobalBatchSize), else BatchSize·WorldSize.
	BatchSize       int    `json:"batch_size"`
	GlobalBatchSize int    `json:"global_batch_size,omitempty"`
	Seed            uint64 `json:"seed"`
	Shuffle         bool   `json:"shuffle"`
	Remainder       string `json:"remainder"`
	DropLastBatch   bool   `json:"drop_last_batch,omitempty"`
	// Mode is "memory" or "stream"; WindowRows, Units and Layout shape a
	// stream. Layout names how the stream is cut (streamLayout) and digests
	// the units' rows: a position saved before units followed Parquet pages
	// and windows followed units (no layout) is refused rather than
	// misread.
	Mode       string `json:"mode"`
	WindowRows int    `json:"window_rows,omitempty"`
	Units      int    `json:"units,omitempty"`
	Layout     string `json:"layout,omitempty"`
	TotalRows  int64  `json:"total_rows"`
	// Files is a digest of the files' names and sizes.
	Files string `json:"files"`
}

func (s *Shard) settings() PositionSettings {
	ps := PositionSettings{
		WorldSize: s.opt.WorldSize, BatchSize: s.opt.BatchSize, GlobalBatchSize: s.global, Seed: s.opt.Seed, Shuffle: *s.spec.Shuffle,
		Remainder: s.spec.Remainder, DropLastBatch: s.spec.DropLastBatch, Mode: "memory", TotalRows: s.total,
		Files: s.src.Digest(),
	}
	if !s.memory {
		ps.Mode, ps.WindowRows, ps.Units, ps.Layout = "stream", s.window, len(s.units), s.layout
	}
	return ps
}

// streamLayout names the way a stream is cut into units and windows; it
// changes when that way does. v2: Parquet units at page boundaries, windows
// cut at unit boundaries.
const streamLayout = "v2"

// layoutOf is a stream's Layout: streamLayout and a digest of its units'
// rows.
func layoutOf(units []int64) string {
	h := sha256.New()
	var b [8]byte
	for _, n := range units {
		binary.LittleEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
	}
	return streamLayout + "/" + hex.EncodeToString(h.Sum(nil)[:8])
}

// RowsPerStep is the rows of a step over all ranks.
func (ps PositionSettings) RowsPerStep() int { return ps.global() }

// global is the rows of a step over all ranks.
func (ps PositionSettings) global() int {
	if ps.GlobalBatchSize > 0 {
		return ps.GlobalBatchSize
	}
	return ps.BatchSize * ps.WorldSize
}

// Position returns the shard's position.
func (s *Shard) Position() Position {
	return Position{Dataset: s.name, Epoch: s.epoch, Batches: s.batches, Rows: s.rowsBase + s.pos,
		Consumed: s.consumedBase + s.sp.consumed(s.opt.Rank, s.local), Splits: s.hist, Settings: s.settings()}
}

// Seek moves the shard to a saved position: the next batch is the one that
// followed it. A position taken under other settings is
// ErrPositionMismatch, naming what differs, except another world size or
// batch size: the shard then shares the rest of the epoch, from the rows
// consumed, among its ranks and batches (see split, streamRest), so that
// every row of the epoch is still taken once over all ranks.
func (s *Shard) Seek(p Position) error {
	now := s.settings()
	resplit := p.Settings.WorldSize != now.WorldSize || p.Settings.global() != now.global()
	if diff := diffSettings(p.Settings, now, p.Settings.Mode == now.Mode); diff != "" {
		return fmt.Errorf("dataset %s: %w: %s", s.name, ErrPositionMismatch, diff)
	}
	if p.Batches < 0 || p.Epoch < 0 || p.Consumed < 0 || p.Settings.WorldSize < 1 || p.Settings.global() < p.Settings.WorldSize ||
		s.memory && len(p.Splits) > 0 || !ascending(p.Splits, p.Consumed) {
		return fmt.Errorf("dataset %s: %w: epoch %d, batch %d, %d rows consumed by %d ranks %d a step, after %d splits", s.name, ErrPositionMismatch,
			p.Epoch, p.Batches, p.Consumed, p.Settings.WorldSize, p.Settings.global(), len(p.Splits))
	}
	consumed := p.Consumed
	if consumed == 0 && p.Batches > 0 && len(p.Splits) == 0 {
		// Saved before positions said: the epoch's split from its start.
		set := p.Settings
		old := newSplit(s.total, 0, set.global(), set.WorldSize, set.Remainder, set.DropLastBatch)
		consumed = old.consumed(0, int64(p.Batches))
	}
	var err error
	switch {
	case resplit && s.memory:
		err = s.seek(p.Epoch, consumed, nil)
	case resplit:
		hist := append(append([]PositionSplit(nil), p.Splits...), PositionSplit{WorldSize: p.Settings.WorldSize, RowsPerStep: p.Settings.global(), Consumed: consumed})
		err = s.seek(p.Epoch, 0, hist)
	case s.memory:
		if err = s.seek(p.Epoch, consumed, nil); err == nil {
			s.batches, s.rowsBase = p.Batches, p.Rows
		}
		return err
	case len(p.Splits) == 0:
		// This rank's rows of the epoch, as before.
		if err = s.seek(p.Epoch, 0, nil); err == nil {
			s.skipSteps(int64(p.Batches))
			s.batches = p.Batches
		}
		return err
	default:
		// The same split, after the earlier ones.
		if err = s.seek(p.Epoch, 0, p.Splits); err == nil {
			// Whole steps but, at the end, a last one of other rows: a
			// step begun is one taken.
			base, g := p.Splits[len(p.Splits)-1].Consumed, int64(now.global())
			s.skipSteps((consumed - base + g - 1) / g)
			s.batches = p.Batches
		}
		return err
	}
	if err != nil {
		return err
	}
	// Re-split: the batches of the new size that the rows consumed make.
	if s.Left() == 0 {
		s.batches = s.Steps()
	} else {
		s.batches = int(consumed / int64(s.GlobalBatchSize()))
	}
	return nil
}

// ascending says whether the rows consumed at the ends of splits, then
// now, never go back.
func ascending(splits []PositionSplit, now int64) bool {
	var at int64
	for _, sp := range splits {
		if sp.Consumed < at || sp.WorldSize < 1 || sp.RowsPerStep < sp.WorldSize {
			return false
		}
		at = sp.Consumed
	}
	return now >= at
}

// diffSettings says how the settings a position was saved under differ
// from the shard's; resplit: the world size and batch size may differ.
func diffSettings(saved, now PositionSettings, resplit bool) string {
	var d []string
	add := func(what string, a, b any) {
		if a != b {
			d = append(d, fmt.Sprintf("%s %v saved, %v now", what, a, b))
		}
	}
	if !resplit {
		add("world size", saved.WorldSize, now.WorldSize)
		add("batch size", saved.BatchSize, now.BatchSize)
		add("global batch size", saved.global(), now.global())
	}
	add("seed", saved.Seed, now.Seed)
	add("shuffle", saved.Shuffle, now.Shuffle)
	add("remainder", saved.Remainder, now.Remainder)
	add("drop_last_batch", saved.DropLastBatch, now.DropLastBatch)
	add("mode", saved.Mode, now.Mode)
	add("shuffle window rows", saved.WindowRows, now.WindowRows)
	add("units", saved.Units, now.Units)
	if saved.Layout != now.Layout {
		switch {
		case saved.Mode != now.Mode:
		case saved.Layout == "":
			d = append(d, fmt.Sprintf("the stream was cut by an older version (units not at Parquet page boundaries, windows not at unit boundaries), now %s: this version cannot resume it mid-epoch (a checkpoint taken at an epoch's end resumes)", now.Layout))
		default:
			d = append(d, fmt.Sprintf("stream layout %s saved, %s now (the units the files are cut into differ)", saved.Layout, now.Layout))
		}
	}
	add("total rows", saved.TotalRows, now.TotalRows)
	if saved.Files != now.Files {
		d = append(d, "the files (names or sizes) differ")
	}
	return strings.Join(d, "; ")
}

// StateFile is the file SaveState writes for the dataset name.
func StateFile(name string) string { return "data_" + name + ".json" }

// SaveState writes the shard's position into a checkpoint directory
// (data_<name>.json).
func (s *Shard) SaveState(dir string) error {
	b, err := json.MarshalIndent(s.Position(), "", " ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, StateFile(s.name)), b)
}

// RestoreState seeks to the position SaveState wrote in dir. A directory
// without one is an error wrapping fs.ErrNotExist (start from the
// beginning).
func (s *Shard) RestoreState(dir string) error {
	p, err := ReadPosition(dir, s.name)
	if err != nil {
		return fmt.Errorf("dataset %s: restore position: %w", s.name, err)
	}
	return s.Seek(p)
}

// ReadPosition reads the position of the dataset name that SaveState
// wrote in dir.
func ReadPosition(dir, name string) (Position, error) {
	var p Position
	b, err := os.ReadFile(filepath.Join(dir, StateFile(name)))
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: %w", StateFile(name), err)
	}
	return p, nil
}
