package data

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Position is where a shard is in its epochs: what a checkpoint saves to
// resume mid-epoch. The order of an epoch's rows is a function of (seed,
// epoch) and of the settings below, not of a generator's state, so the
// position is the epoch and the batches consumed; Seek recomputes the
// order and, streaming, reads only the shuffle window the position falls in.
// Every rank is at the same position (with remainder pad or drop every rank
// takes as many batches), so rank 0's position resumes every rank.
type Position struct {
	Dataset string `json:"dataset"`
	Epoch   int    `json:"epoch"`
	// Batches consumed in the epoch; Rows is this rank's rows in them.
	Batches int   `json:"batches"`
	Rows    int64 `json:"rows"`
	// Settings under which the position holds.
	Settings PositionSettings `json:"settings"`
}

// PositionSettings are what an epoch's order depends on besides (seed,
// epoch).
type PositionSettings struct {
	WorldSize     int    `json:"world_size"`
	BatchSize     int    `json:"batch_size"`
	Seed          uint64 `json:"seed"`
	Shuffle       bool   `json:"shuffle"`
	Remainder     string `json:"remainder"`
	DropLastBatch bool   `json:"drop_last_batch,omitempty"`
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
		WorldSize: s.opt.WorldSize, BatchSize: s.opt.BatchSize, Seed: s.opt.Seed, Shuffle: *s.spec.Shuffle,
		Remainder: s.spec.Remainder, DropLastBatch: s.spec.DropLastBatch, Mode: "memory", TotalRows: s.total,
		Files: s.src.digest(),
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

// Position returns the shard's position.
func (s *Shard) Position() Position {
	return Position{Dataset: s.name, Epoch: s.epoch, Batches: s.batches, Rows: s.pos, Settings: s.settings()}
}

// Seek moves the shard to a saved position: the next batch is the one that
// followed it. A position taken under other settings is
// ErrPositionMismatch, naming what differs.
func (s *Shard) Seek(p Position) error {
	now := s.settings()
	if diff := diffSettings(p.Settings, now); diff != "" {
		return fmt.Errorf("dataset %s: %w: %s", s.name, ErrPositionMismatch, diff)
	}
	if p.Batches < 0 || p.Epoch < 0 {
		return fmt.Errorf("dataset %s: %w: epoch %d, batch %d", s.name, ErrPositionMismatch, p.Epoch, p.Batches)
	}
	rows := min(int64(p.Batches)*int64(s.opt.BatchSize), s.rowsPerRank(s.opt.Rank))
	if err := s.seek(p.Epoch, rows); err != nil {
		return err
	}
	s.batches = p.Batches
	return nil
}

func diffSettings(saved, now PositionSettings) string {
	var d []string
	add := func(what string, a, b any) {
		if a != b {
			d = append(d, fmt.Sprintf("%s %v saved, %v now", what, a, b))
		}
	}
	add("world size", saved.WorldSize, now.WorldSize)
	add("batch size", saved.BatchSize, now.BatchSize)
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
	b, err := os.ReadFile(filepath.Join(dir, StateFile(s.name)))
	if err != nil {
		return fmt.Errorf("dataset %s: restore position: %w", s.name, err)
	}
	var p Position
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("dataset %s: restore position: %w", s.name, err)
	}
	return s.Seek(p)
}

// digestFiles hashes files' names and sizes.
func digestFiles(files []*fileRef) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00", f.uri, f.size)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
