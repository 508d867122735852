package format

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"unsafe"

	"github.com/tempotrain/tempotrain/api"
)

// The CSV reader parses bytes directly: no encoding/csv, no string per
// numeric field. A file is cut into chunks of whole records and the chunks
// are parsed in parallel, each into a block of columns with a dictionary of
// its own per categorical column; the blocks are then put in order and
// their codes moved onto the dataset's dictionaries.
//
// Chunks end where a newline lies outside quotes. A valid file (RFC 4180:
// quotes only around whole fields, doubled inside them) is outside quotes
// exactly where the number of quote bytes before is even, so record ends are
// found with bytes.IndexByte and bytes.Count alone, at memory speed, without
// tokenising. For that to hold the parser refuses a quote inside an unquoted
// field (encoding/csv does too, without LazyQuotes).

// csvDialect is how a file is written.
type csvDialect struct {
	delim, quote byte
	header       bool
	names        []string // column names when there is no header
	nulls        [][]byte
	nullFirst    [256]bool // first bytes of the non-empty null markers
	emptyNull    bool      // "" is a null marker (categorical columns)
	stop         [256]bool // bytes that end an unquoted field's scan
}

func newDialect(c api.CSVOptions) *csvDialect {
	d := &csvDialect{delim: c.Delimiter[0], quote: c.Quote[0], header: c.Header == nil || *c.Header, names: c.Columns}
	for _, n := range c.NullValues {
		if n == "" {
			d.emptyNull = true
			continue
		}
		d.nulls = append(d.nulls, []byte(n))
		d.nullFirst[n[0]] = true
	}
	d.stop[d.delim], d.stop['\n'], d.stop[d.quote] = true, true, true
	return d
}

// isNull says whether a field value is a missing-value marker.
func (d *csvDialect) isNull(v []byte) bool {
	if len(v) == 0 {
		return d.emptyNull
	}
	if !d.nullFirst[v[0]] {
		return false
	}
	for _, n := range d.nulls {
		if bytes.Equal(v, n) {
			return true
		}
	}
	return false
}

// recordEnd returns the index just past the first newline at or after from
// that lies outside quotes (buf starts outside quotes), or -1.
func recordEnd(buf []byte, from int, q byte) int {
	parity := bytes.Count(buf[:from], []byte{q}) & 1
	for pos := from; ; {
		k := bytes.IndexByte(buf[pos:], '\n')
		if k < 0 {
			return -1
		}
		nl := pos + k
		parity ^= bytes.Count(buf[pos:nl], []byte{q}) & 1
		if parity == 0 {
			return nl + 1
		}
		pos = nl + 1
	}
}

// lastRecordEnd returns the index just past the last newline of buf that
// lies outside quotes (buf starts outside quotes), or -1.
func lastRecordEnd(buf []byte, q byte) int {
	total := bytes.Count(buf, []byte{q})
	tail := 0
	for lim := len(buf); ; {
		k := bytes.LastIndexByte(buf[:lim], '\n')
		if k < 0 {
			return -1
		}
		tail += bytes.Count(buf[k:lim], []byte{q})
		if (total-tail)&1 == 0 {
			return k + 1
		}
		lim = k
	}
}

// splitRecords cuts buf (whole records) into pieces of about target bytes
// that end at record ends; it returns the end offsets.
func splitRecords(buf []byte, q byte, target int) []int {
	var ends []int
	for start := 0; start < len(buf); {
		if len(buf)-start <= target+target/2 {
			ends = append(ends, len(buf))
			break
		}
		e := recordEnd(buf, start+target, q)
		if e < 0 || e >= len(buf) {
			ends = append(ends, len(buf))
			break
		}
		ends = append(ends, e)
		start = e
	}
	return ends
}

// csvParser turns chunks of one file into blocks. It is read-only once
// built: parse workers share it.
type csvParser struct {
	d         *csvDialect
	file      string // for messages
	nfields   int
	fieldSlot []int   // field index → slot, or -1
	slots     []Slot  // the dataset's slots
	inferred  []bool  // per slot: numeric by inference (for the hint)
	rowBytes  float64 // average bytes of a record, for capacity estimates
}

// parseScratch is one worker's reusable memory.
type parseScratch struct {
	unq []byte
}

// parse parses buf, whole records starting at line, into a block holding
// the slots in want (all when nil).
func (p *csvParser) parse(buf []byte, line int64, want []bool, sc *parseScratch) (*Block, error) {
	est := 16
	if p.rowBytes > 0 {
		est = int(float64(len(buf))/p.rowBytes*1.05) + 16
	}
	blk := newBlock(p.slots, want, est)
	d := p.d
	q, delim := d.quote, d.delim
	n := len(buf)
	i := 0
	for i < n {
		// Blank lines are skipped, as pandas does.
		if c := buf[i]; c == '\n' {
			i++
			line++
			continue
		} else if c == '\r' && (i+1 == n || buf[i+1] == '\n') {
			i += 2
			line++
			continue
		}
		recLine := line
		field := 0
		for {
			var val []byte
			quoted := false
			if i < n && buf[i] == q {
				quoted = true
				start := i + 1
				j := start
				esc := false
				for {
					k := bytes.IndexByte(buf[j:], q)
					if k < 0 {
						return nil, p.errAt(recLine, field, buf[start:min(n, start+40)], "a quoted field is not closed before the end of the file")
					}
					j += k
					if j+1 < n && buf[j+1] == q {
						esc = true
						j += 2
						continue
					}
					break
				}
				val = buf[start:j]
				line += int64(bytes.Count(val, []byte{'\n'}))
				if esc {
					sc.unq = sc.unq[:0]
					for k := 0; k < len(val); k++ {
						sc.unq = append(sc.unq, val[k])
						if val[k] == q {
							k++
						}
					}
					val = sc.unq
				}
				i = j + 1
				if i < n && buf[i] == '\r' && i+1 < n && buf[i+1] == '\n' {
					i++
				}
				if i < n && buf[i] != delim && buf[i] != '\n' {
					return nil, p.errAt(line, field, buf[start-1:min(n, i+1)], fmt.Sprintf("unexpected %q after a closing quote", buf[i]))
				}
			} else {
				start := i
				for i < n && !d.stop[buf[i]] {
					i++
				}
				if i < n && buf[i] == q {
					return nil, p.errAt(recLine, field, buf[start:min(n, i+1)], "a quote inside an unquoted field (quote the whole field, doubling quotes inside it)")
				}
				end := i
				if end > start && buf[end-1] == '\r' && (i == n || buf[i] == '\n') {
					end--
				}
				val = buf[start:end]
			}
			if field < p.nfields {
				if s := p.fieldSlot[field]; s >= 0 && (want == nil || want[s]) {
					// The common case inline: a number (not the label).
					if col := blk.Num[s]; col != nil && !p.slots[s].label {
						if f, ok := parseFloat32(val); ok {
							blk.Num[s] = append(col, f)
							goto stored
						}
					}
					if err := p.store(blk, s, val, quoted, recLine); err != nil {
						return nil, err
					}
				}
			}
		stored:
			field++
			if i < n && buf[i] == delim {
				i++
				if i == n {
					// A record "a,b," at the very end: one more empty field.
					if field < p.nfields {
						if s := p.fieldSlot[field]; s >= 0 && (want == nil || want[s]) {
							if err := p.store(blk, s, nil, false, recLine); err != nil {
								return nil, err
							}
						}
					}
					field++
					break
				}
				continue
			}
			if i < n { // buf[i] == '\n'
				i++
			}
			line++
			break
		}
		if field != p.nfields {
			return nil, &ParseError{File: p.file, Line: recLine, RowGroup: -1,
				Reason: fmt.Sprintf("the record has %d fields, the header %d", field, p.nfields)}
		}
		blk.N++
	}
	return blk, nil
}

func (p *csvParser) errAt(line int64, field int, val []byte, reason string) error {
	col := ""
	if field < p.nfields {
		if s := p.fieldSlot[field]; s >= 0 {
			col = p.slots[s].Name
		}
	}
	return &ParseError{File: p.file, Line: line, RowGroup: -1, Column: col, Value: string(val), Reason: reason}
}

func trimSpace(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// store appends one field's value to slot s.
func (p *csvParser) store(blk *Block, s int, val []byte, quoted bool, line int64) error {
	sl := &p.slots[s]
	if sl.Kind == Numeric {
		f, ok := parseFloat32(val)
		if ok && f != f && sl.label {
			return &ParseError{File: p.file, Line: line, RowGroup: -1, Column: sl.Name, Value: string(val), Reason: "the label is missing (NaN)"}
		}
		if !ok {
			if t := trimSpace(val); len(t) == 0 || p.d.isNull(t) {
				if sl.label {
					return &ParseError{File: p.file, Line: line, RowGroup: -1, Column: sl.Name, Value: string(val), Reason: "the label is missing"}
				}
				f, ok = float32(math.NaN()), true
			} else if f, ok = parseFloat32(t); !ok {
				return &ParseError{File: p.file, Line: line, RowGroup: -1, Column: sl.Name, Value: string(val), Reason: p.numberReason(s, t)}
			}
		}
		blk.Num[s] = append(blk.Num[s], f)
		return nil
	}
	if !quoted && p.d.isNull(val) || quoted && len(val) == 0 && p.d.emptyNull {
		if sl.label {
			return &ParseError{File: p.file, Line: line, RowGroup: -1, Column: sl.Name, Value: string(val), Reason: "the label is missing"}
		}
		blk.Cat[s] = append(blk.Cat[s], -1)
		return nil
	}
	blk.Cat[s] = append(blk.Cat[s], blk.dicts[s].code(val))
	return nil
}

func (p *csvParser) numberReason(s int, v []byte) string {
	reason := "is not a number"
	if _, err := strconv.ParseFloat(unsafe.String(&v[0], len(v)), 32); errors.Is(err, strconv.ErrRange) {
		reason = "is out of float32's range"
	}
	if p.inferred != nil && p.inferred[s] {
		reason += " (the column looked numeric in the file's first rows; list it in categorical to read it as strings)"
	}
	return reason
}

// readRecords splits buf into records of fields (unquoted, unescaped), for
// headers and samples: at most max records; partial says that the last
// record may be cut (buf is a prefix of the file), so it is dropped. lines
// holds each record's line number (from line).
func (d *csvDialect) readRecords(buf []byte, max int, partial bool, line int64) (recs [][]string, lines []int64, end int, err error) {
	q, delim := d.quote, d.delim
	i, n := 0, len(buf)
	for i < n && len(recs) < max {
		if buf[i] == '\n' {
			i++
			line++
			continue
		}
		if buf[i] == '\r' && i+1 < n && buf[i+1] == '\n' {
			i += 2
			line++
			continue
		}
		recStart, recLine := i, line
		var rec []string
		complete := false
		for {
			if i < n && buf[i] == q {
				var f []byte
				j := i + 1
				closed := false
				for j < n {
					if buf[j] == q {
						if j+1 < n && buf[j+1] == q {
							f = append(f, q)
							j += 2
							continue
						}
						closed = true
						break
					}
					if buf[j] == '\n' {
						line++
					}
					f = append(f, buf[j])
					j++
				}
				if !closed {
					if partial {
						return recs, lines, recStart, nil
					}
					return nil, nil, 0, fmt.Errorf("line %d: a quoted field is not closed before the end of the file", recLine)
				}
				i = j + 1
				if i < n && buf[i] == '\r' && i+1 < n && buf[i+1] == '\n' {
					i++
				}
				if i < n && buf[i] != delim && buf[i] != '\n' {
					return nil, nil, 0, fmt.Errorf("line %d: unexpected %q after a closing quote", line, buf[i])
				}
				rec = append(rec, string(f))
			} else {
				start := i
				for i < n && buf[i] != delim && buf[i] != '\n' && buf[i] != q {
					i++
				}
				if i < n && buf[i] == q {
					return nil, nil, 0, fmt.Errorf("line %d: a quote inside an unquoted field", recLine)
				}
				end := i
				if end > start && buf[end-1] == '\r' && (i == n || buf[i] == '\n') {
					end--
				}
				rec = append(rec, string(buf[start:end]))
			}
			if i < n && buf[i] == delim {
				i++
				if i == n {
					rec = append(rec, "")
					break
				}
				continue
			}
			if i < n {
				i++
				complete = true
			}
			line++
			break
		}
		if !complete && partial {
			return recs, lines, recStart, nil
		}
		recs = append(recs, rec)
		lines = append(lines, recLine)
	}
	return recs, lines, i, nil
}

// csvChunk is a run of whole records of one file.
type csvChunk struct {
	seq  int
	buf  []byte
	line int64
	pool *[]byte // buffer to give back after parsing, if pooled
}

// parseStream parses r (whole records from line on) with workers
// goroutines and calls emit with the blocks in order, on the calling
// goroutine. chunkBytes is the size of a read. At most 2·workers+2 chunks
// are in flight, so memory is bounded by that many chunks and their blocks.
func (p *csvParser) parseStream(ctx context.Context, r io.Reader, line int64, want []bool, workers, chunkBytes int, emit func(*Block) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inflight := 2*workers + 2
	sem := make(chan struct{}, inflight)
	work := make(chan csvChunk, workers)
	type result struct {
		seq int
		blk *Block
		err error
	}
	results := make(chan result, inflight)
	pool := sync.Pool{New: func() any { b := make([]byte, 0, chunkBytes+chunkBytes/4); return &b }}

	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sc parseScratch
			for c := range work {
				blk, err := p.parse(c.buf, c.line, want, &sc)
				if c.pool != nil {
					*c.pool = c.buf[:0]
					pool.Put(c.pool)
				}
				results <- result{c.seq, blk, err}
			}
		}()
	}
	readErr := make(chan error, 1)
	go func() {
		defer close(work)
		readErr <- p.chunks(ctx, r, line, chunkBytes, &pool, sem, work)
	}()
	pending := map[int]*Block{}
	next := 0
	// The error reported is the first in the file: chunks before a failed
	// one were all handed out before it, and are all parsed.
	var firstErr error
	errSeq := -1
	fail := func(seq int, err error) {
		if errSeq < 0 || seq < errSeq {
			firstErr, errSeq = err, seq
		}
		cancel()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(results); close(done) }()
	for res := range results {
		if res.err != nil {
			fail(res.seq, res.err)
			<-sem
			continue
		}
		if firstErr != nil {
			<-sem
			continue
		}
		pending[res.seq] = res.blk
		for {
			b, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			if err := emit(b); err != nil {
				fail(next, err)
			}
			next++
			<-sem
			if firstErr != nil {
				break
			}
		}
	}
	<-done
	for range pending {
		<-sem
	}
	if err := <-readErr; firstErr == nil {
		firstErr = err
	}
	return firstErr
}

// chunks reads r into chunks of whole records and sends them to work; sem
// bounds the chunks in flight.
func (p *csvParser) chunks(ctx context.Context, r io.Reader, line int64, chunkBytes int, pool *sync.Pool, sem chan struct{}, work chan<- csvChunk) error {
	q := p.d.quote
	var carry []byte
	seq := 0
	send := func(buf []byte, pb *[]byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case work <- csvChunk{seq: seq, buf: buf, line: line, pool: pb}:
		case <-ctx.Done():
			<-sem
			return ctx.Err()
		}
		seq++
		line += int64(bytes.Count(buf, []byte{'\n'}))
		return nil
	}
	for eof := false; !eof; {
		pb := pool.Get().(*[]byte)
		buf := append((*pb)[:0], carry...)
		// Read until the buffer holds a record end, growing it for a record
		// longer than a chunk.
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			m, err := io.ReadFull(r, buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+m]
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				eof = true
				break
			}
			if err != nil {
				return err
			}
			if lastRecordEnd(buf, q) >= 0 {
				break
			}
		}
		*pb = buf
		if eof {
			carry = nil
			if len(buf) == 0 {
				pool.Put(pb)
				break
			}
			if err := send(buf, pb); err != nil {
				return err
			}
			break
		}
		end := lastRecordEnd(buf, q)
		carry = append(carry[:0], buf[end:]...)
		if err := send(buf[:end], pb); err != nil {
			return err
		}
	}
	return nil
}

// CSVUnit is a run of whole records of a file that a stream reads as one:
// bytes [off, off+size) holding rows records, the first on line line.
type CSVUnit struct {
	Off, Size int64
	Rows      int64
	Line      int64
}

// scanUnits reads r (whole records from offset off, line line on) and cuts
// it into units of about unitBytes, counting records (blank lines are not
// records, as for the parser). It tokenises nothing: it finds newlines
// outside quotes.
func scanUnits(ctx context.Context, r io.Reader, off, line int64, q byte, unitBytes int) ([]CSVUnit, error) {
	var units []CSVUnit
	cur := CSVUnit{Off: off, Line: line}
	buf := make([]byte, min(1<<20, max(64<<10, unitBytes)))
	abs, recStart := off, off
	parity := 0
	var lastByte byte
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := io.ReadFull(r, buf)
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			return nil, err
		}
		b := buf[:m]
		for pos := 0; ; {
			k := bytes.IndexByte(b[pos:], '\n')
			if k < 0 {
				parity ^= bytes.Count(b[pos:], []byte{q}) & 1
				break
			}
			nl := pos + k
			parity ^= bytes.Count(b[pos:nl], []byte{q}) & 1
			pos = nl + 1
			line++
			if parity != 0 {
				continue
			}
			prev := lastByte
			if nl > 0 {
				prev = b[nl-1]
			}
			if n := abs + int64(nl) - recStart; !(n == 0 || n == 1 && prev == '\r') {
				cur.Rows++
			}
			recStart = abs + int64(pos)
			cur.Size = recStart - cur.Off
			if cur.Size >= int64(unitBytes) {
				units = append(units, cur)
				cur = CSVUnit{Off: recStart, Line: line}
			}
		}
		if m > 0 {
			lastByte = b[m-1]
		}
		abs += int64(m)
		if eof {
			break
		}
	}
	if n := abs - recStart; n > 0 && !(n == 1 && lastByte == '\r') {
		cur.Rows++
	}
	cur.Size = abs - cur.Off
	if cur.Size > 0 {
		units = append(units, cur)
	}
	return units, nil
}
