package format

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/tempotrain/tempotrain/api"
)

// csvSource reads CSV files.
type csvSource struct {
	d        *csvDialect
	files    []*fileRef
	start    []int64 // each file's first data byte (after BOM and header)
	line     []int64 // and its line
	names    []string
	slotsv   []Slot
	fields   []int // slot → field
	parsers  []*csvParser
	workers  int
	unitList []csvUnitRef
}

type csvUnitRef struct {
	File int
	CSVUnit
}

// sampleBytes is how much of the first file type inference reads.
const sampleBytes = 1 << 20

// sampleRows is the most records type inference looks at.
const sampleRows = 1000

// csvHead is what the start of a file says.
type csvHead struct {
	names       []string
	start, line int64 // the first data byte and its line
	sample      [][]string
	sampleBytes int
}

// readHead parses the start of a file: its header (or first record, to
// count the fields) and, with sample, up to sampleRows records after it.
// complete says head is the whole file; ok false says the first record is
// cut short (read more).
func (d *csvDialect) readHead(head []byte, complete, sample bool) (h csvHead, ok bool, err error) {
	body := bytes.TrimPrefix(head, []byte("\xef\xbb\xbf"))
	bom := len(head) - len(body)
	recs, _, end, err := d.readRecords(body, 1, !complete, 1)
	if err != nil {
		return h, false, err
	}
	if len(recs) == 0 {
		if complete {
			return h, false, errors.New("the file is empty: no header, no rows")
		}
		return h, false, nil
	}
	h.names = recs[0]
	h.start, h.line = int64(bom+end), 2
	if !d.header {
		h.start, h.line = int64(bom), 1
		if len(d.names) > 0 {
			if len(d.names) != len(h.names) {
				return h, false, fmt.Errorf("csv.columns names %d columns, the first record has %d fields", len(d.names), len(h.names))
			}
			h.names = d.names
		} else {
			h.names = make([]string, len(recs[0]))
			for k := range h.names {
				h.names[k] = fmt.Sprintf("c%d", k)
			}
		}
	}
	if sample {
		recs, _, used, err := d.readRecords(head[h.start:], sampleRows, !complete, h.line)
		if err != nil {
			return h, false, err
		}
		h.sample, h.sampleBytes = recs, used
	}
	return h, true, nil
}

// inferKinds: a column is numeric when every value of the sample that is
// not missing parses as a number.
func (d *csvDialect) inferKinds(h csvHead) []Kind {
	kinds := make([]Kind, len(h.names))
	for k := range kinds {
		for _, rec := range h.sample {
			if k >= len(rec) {
				continue
			}
			v := trimSpace([]byte(rec[k]))
			if len(v) == 0 || d.isNull(v) {
				continue
			}
			if _, ok := parseFloat32(v); !ok {
				// A number out of float32's range is still a number (and an
				// error when read).
				if _, err := strconv.ParseFloat(string(v), 64); err != nil {
					kinds[k] = Categorical
					break
				}
			}
		}
	}
	return kinds
}

func openCSV(ctx context.Context, spec api.DatasetSpec, opt Options, files []*fileRef) (Source, error) {
	s := &csvSource{d: newDialect(spec.CSV), files: files, workers: opt.Workers}
	var first csvHead
	for i, f := range files {
		n := int64(sampleBytes)
		if i > 0 {
			n = 64 << 10
		}
		var h csvHead
		for {
			head := make([]byte, min(n, f.size))
			if err := f.readRange(ctx, 0, head); err != nil {
				return nil, err
			}
			var ok bool
			var err error
			h, ok, err = s.d.readHead(head, int64(len(head)) == f.size, i == 0)
			if err != nil {
				return nil, invalidf("%s: %v", f.uri, err)
			}
			if ok {
				break
			}
			n *= 4 // a first record longer than what was read
		}
		if i == 0 {
			first, s.names = h, h.names
		} else if !slices.Equal(h.names, s.names) {
			what := "columns"
			if !s.d.header {
				what = "fields"
			}
			return nil, invalidf("schemas differ: %s has %s %s, %s has %s", files[0].uri, what, listColumns(s.names), f.uri, listColumns(h.names))
		}
		s.start = append(s.start, h.start)
		s.line = append(s.line, h.line)
	}
	kinds := s.d.inferKinds(first)
	slots, cols, err := selectSlots(spec, files[0].uri, s.names, kinds)
	if err != nil {
		return nil, err
	}
	s.slotsv, s.fields = slots, cols
	rowBytes := 0.0
	if len(first.sample) > 0 {
		rowBytes = float64(first.sampleBytes) / float64(len(first.sample))
	}
	for _, f := range files {
		s.parsers = append(s.parsers, newCSVParser(s.d, f.uri, len(s.names), slots, cols, rowBytes))
	}
	return s, nil
}

// newCSVParser makes the parser of one file of nfields fields whose
// column cols[j] is slot j.
func newCSVParser(d *csvDialect, file string, nfields int, slots []Slot, cols []int, rowBytes float64) *csvParser {
	p := &csvParser{d: d, file: file, nfields: nfields, fieldSlot: make([]int, nfields), slots: slots, rowBytes: rowBytes, inferred: make([]bool, len(slots))}
	for k := range p.fieldSlot {
		p.fieldSlot[k] = -1
	}
	for j, c := range cols {
		p.fieldSlot[c] = j
		p.inferred[j] = !slots[j].forced && slots[j].Kind == Numeric
	}
	return p
}

func (s *csvSource) Slots() []Slot             { return s.slotsv }
func (s *csvSource) FixedClasses() []string    { return nil }
func (s *csvSource) ImageShape() (c, h, w int) { return 0, 0, 0 }
func (s *csvSource) CanStream() bool           { return true }
func (s *csvSource) Close() error              { return nil }
func (s *csvSource) dataBytes(file int) int64  { return s.files[file].size - s.start[file] }

func (s *csvSource) EstimateRows() (int64, bool) {
	var bytes int64
	for i := range s.files {
		bytes += s.dataBytes(i)
	}
	rb := s.parsers[0].rowBytes
	if rb <= 0 {
		return 0, false
	}
	return int64(float64(bytes)/rb) + 1, false
}

// openData streams file i from its first data byte.
func (s *csvSource) openData(ctx context.Context, i int) (io.ReadCloser, error) {
	rc, err := s.files[i].open(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, rc, s.start[i]); err != nil {
		rc.Close()
		return nil, fmt.Errorf("%s: skip the header: %w", s.files[i].uri, err)
	}
	return rc, nil
}

func (s *csvSource) LoadAll(ctx context.Context, want []bool, emit func(*Block) error) error {
	for i := range s.files {
		rc, err := s.openData(ctx, i)
		if err != nil {
			return err
		}
		err = s.parsers[i].parseStream(ctx, rc, s.line[i], want, s.workers, 1<<20, emit)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// Units scans every file for record ends.
func (s *csvSource) Units(ctx context.Context, t UnitTarget) ([]int64, error) {
	byFile := make([][]CSVUnit, len(s.files))
	for i := range s.files {
		us, err := s.ScanFile(ctx, i, t)
		if err != nil {
			return nil, err
		}
		byFile[i] = us
	}
	return s.SetUnits(byFile), nil
}

func (s *csvSource) Files() int { return len(s.files) }

// ScanFile scans file i for record ends, cutting units of about t.Bytes.
func (s *csvSource) ScanFile(ctx context.Context, i int, t UnitTarget) ([]CSVUnit, error) {
	rc, err := s.openData(ctx, i)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return scanUnits(ctx, rc, s.start[i], s.line[i], s.d.quote, t.Bytes)
}

func (s *csvSource) SetUnits(byFile [][]CSVUnit) []int64 {
	s.unitList = s.unitList[:0]
	var rows []int64
	for i, us := range byFile {
		for _, u := range us {
			s.unitList = append(s.unitList, csvUnitRef{File: i, CSVUnit: u})
			rows = append(rows, u.Rows)
		}
	}
	return rows
}

// ReadUnit parses the unit whole: a record's place is known only from the
// unit's start.
func (s *csvSource) ReadUnit(ctx context.Context, u int, _, _ int64, want []bool) ([]*Block, int64, error) {
	ref := s.unitList[u]
	buf := make([]byte, ref.Size)
	if err := s.files[ref.File].readRange(ctx, ref.Off, buf); err != nil {
		return nil, 0, err
	}
	p := s.parsers[ref.File]
	ends := splitRecords(buf, s.d.quote, max(64<<10, len(buf)/max(1, s.workers)))
	starts := make([]int, len(ends))
	lines := make([]int64, len(ends))
	line := ref.Line
	for k := range ends {
		if k > 0 {
			starts[k] = ends[k-1]
		}
		lines[k] = line
		line += int64(bytes.Count(buf[starts[k]:ends[k]], []byte{'\n'}))
	}
	blocks := make([]*Block, len(ends))
	err := parallel(ctx, len(ends), s.workers, func(k int) error {
		var sc parseScratch
		b, err := p.parse(buf[starts[k]:ends[k]], lines[k], want, &sc)
		blocks[k] = b
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return blocks, 0, nil
}

func (s *csvSource) Digest() string { return digestFiles(s.files) }
