package storage

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"
)

// A run's reports are lines of JSON, report i on line i, in one of two
// layouts:
//
//	{run}/metrics.jsonl    one file, appended in place (local storage; and
//	                       every run written before segments existed)
//	{run}/metrics/{last:012d}-{first:012d}.jsonl
//	                       segments: reports first..last, one object each
//	                       (S3, and any backend that cannot append in place)
//
// Local storage appends to metrics.jsonl and keeps beside it metrics.idx, the
// offset after each line (see Local.appendMetrics), so that an append reads a
// few bytes wherever the file ends instead of the whole file. Other backends
// have no append: each call writes one segment object holding its new lines
// (split where a chunk of metricsChunk reports ends), and learns what is
// stored by listing the segments of the chunk of the report before its
// first, and after: on S3 one ListObjectsV2 that starts after the previous
// chunk's keys. Segments are named by their last report so that keys sort by
// it. Merges keep a chunk to a few segments: ten trailing segments of under
// 10 reports become one, then ten of under 100, and a complete chunk becomes
// one segment; a long run holds about one object per metricsChunk reports,
// and no append lists, reads or writes more than one chunk's worth,
// however many reports the run holds. An old metrics.jsonl on such a backend
// is copied into segments (and deleted) by the first append that finds no
// segment where it expected one.
//
// Readers (ScanMetrics, ReadMetrics) read metrics.jsonl if there is one, then
// the segments after it, so every layout, and a mix left by an interrupted
// migration or merge, reads back as one sequence.

const (
	// segmentDir holds a run's metric segments.
	segmentDir = "metrics/"
	// metricsChunk reports make one chunk: a segment never crosses a chunk's
	// end, and a complete chunk is merged into one segment.
	metricsChunk = 1000
	// maxMetricsReports bounds report indexes: segment names have 12 digits.
	maxMetricsReports = 1_000_000_000_000
	// maxChunkSegments bounds the segments of a chunk being filled (see
	// mergeTail).
	maxChunkSegments = 30
	// mergeParallelism is how many segments a merge reads at once: small
	// objects, where a request's latency is all the cost.
	mergeParallelism = 16
	// maxMetricsLine bounds one report's line. A report crosses Temporal
	// (2 MB payloads), so anything longer is not what the runtime wrote.
	maxMetricsLine = 64 << 20
)

// errLineTooLong is what scanLines returns for a line over maxMetricsLine.
var errLineTooLong = fmt.Errorf("a line is longer than %d bytes: %w", maxMetricsLine, ErrCorrupt)

// segment is one segment object: reports first..last.
type segment struct {
	key         string // backend key
	first, last int
}

// segmentName is the object name, in segmentDir, of reports first..last.
func segmentName(first, last int) string {
	return fmt.Sprintf("%012d-%012d.jsonl", last, first)
}

// parseSegmentName reads a name segmentName wrote: 12 digits of the last
// report, '-', 12 digits of the first, ".jsonl", with first <= last.
func parseSegmentName(name string) (first, last int, ok bool) {
	if len(name) != 31 || name[12] != '-' || name[25:] != ".jsonl" {
		return 0, 0, false
	}
	last, ok1 := parseDigits(name[:12])
	first, ok2 := parseDigits(name[13:25])
	if !ok1 || !ok2 || first > last {
		return 0, 0, false
	}
	return first, last, true
}

func parseDigits(s string) (int, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// afterLister is implemented by backends that list from a key on (S3's
// StartAfter), so that finding the newest segments does not list them all.
type afterLister interface {
	// listAfter is List restricted to keys greater than startAfter.
	listAfter(ctx context.Context, prefix, startAfter string) ([]ObjectInfo, error)
}

// localMetrics is implemented by backends that append metrics in place.
type localMetrics interface {
	// appendMetrics stores lines (compact JSON, no newline) as reports
	// first.. of the run under runPrefix, like AppendMetrics. handled is false
	// when the run holds segments, which the caller then appends to.
	appendMetrics(ctx context.Context, runPrefix string, first int, lines [][]byte) (handled bool, err error)
}

// AppendMetrics stores lines so that report i is line i; lines[0] is report
// firstIndex. Reports already stored are skipped, so a retried call never
// writes a report twice. A torn last line (a crash mid-append) is cut off.
// firstIndex past the last stored report leaves reports missing and is an
// error.
//
// It costs what the new lines cost, however many reports the run holds
// (see the layout above): local storage appends to metrics.jsonl, other
// backends write a segment object.
func (r *Run) AppendMetrics(ctx context.Context, firstIndex int, lines []json.RawMessage) error {
	if firstIndex < 0 {
		return fmt.Errorf("run %s: append metrics: first index %d < 0", r.URI(), firstIndex)
	}
	if firstIndex > maxMetricsReports-len(lines) {
		return fmt.Errorf("run %s: append metrics: reports %d.. past the limit of %d reports", r.URI(), firstIndex, maxMetricsReports)
	}
	compact := make([][]byte, len(lines))
	for i, l := range lines {
		var b bytes.Buffer
		if err := json.Compact(&b, l); err != nil {
			return fmt.Errorf("run %s: append metrics: report %d is not JSON: %w", r.URI(), firstIndex+i, err)
		}
		if b.Len() > maxMetricsLine {
			return fmt.Errorf("run %s: append metrics: report %d is %d bytes, over the limit of %d", r.URI(), firstIndex+i, b.Len(), maxMetricsLine)
		}
		compact[i] = b.Bytes()
	}
	if lm, ok := r.b.(localMetrics); ok {
		handled, err := lm.appendMetrics(ctx, r.prefix, firstIndex, compact)
		if err != nil {
			return fmt.Errorf("run %s: append metrics: %w", r.URI(), err)
		}
		if handled {
			return nil
		}
	}
	if err := r.appendSegments(ctx, firstIndex, compact); err != nil {
		return fmt.Errorf("run %s: append metrics: %w", r.URI(), err)
	}
	return nil
}

// appendSegments is AppendMetrics on the segment layout.
func (r *Run) appendSegments(ctx context.Context, first int, lines [][]byte) error {
	// One listing: the segments from the start of the chunk of report
	// first-1 on, which hold report first-1 if it is stored (and anything
	// after it), and every segment of the chunks this call may merge.
	at := max(first-1, 0)
	from := at / metricsChunk * metricsChunk
	segs, err := r.segmentsFrom(ctx, from)
	if err != nil {
		return err
	}
	have, ok := coverage(segs, first)
	if !ok || len(segs) == 0 {
		// A run written before segments existed keeps its reports in
		// metrics.jsonl: move them into segments, then look again. (With
		// no segment at all this is a new run, or one with such a file.)
		migrated, err := r.migrateMetricsFile(ctx)
		if err != nil {
			return err
		}
		if migrated {
			if segs, err = r.segmentsFrom(ctx, from); err != nil {
				return err
			}
			have, ok = coverage(segs, first)
		}
	}
	if !ok {
		n, err := r.storedSegmentReports(ctx)
		if err != nil {
			return err
		}
		return fmt.Errorf("reports %d..%d would leave a gap: %s holds %d reports",
			first, first+len(lines)-1, r.b.URI(r.key(strings.TrimSuffix(segmentDir, "/"))), n)
	}
	end := first + len(lines)
	if len(lines) == 0 {
		return nil
	}
	// Write what is new, one segment per chunk it touches, in order, so that
	// a call cut short leaves a prefix of them.
	for a := max(have, first); a < end; {
		b := min(end, (a/metricsChunk+1)*metricsChunk)
		var buf bytes.Buffer
		for _, l := range lines[a-first : b-first] {
			buf.Write(l)
			buf.WriteByte('\n')
		}
		key := r.key(segmentDir + segmentName(a, b-1))
		if err := r.b.Put(ctx, key, bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
			return err
		}
		segs = append(segs, segment{key: key, first: a, last: b - 1})
		a = b
	}
	// Merge: every complete chunk into one segment, and in the chunk being
	// filled runs of small segments (mergeTail), so that a chunk never
	// holds more than about maxChunkSegments segments and no append, merge
	// or read has many to fetch. (Done on every call, so a call cut short
	// before its merges has them done by its retry.)
	have = max(have, end)
	for c := at / metricsChunk; c <= (end-1)/metricsChunk; c++ {
		lo, hi := c*metricsChunk, (c+1)*metricsChunk-1
		var in []segment
		for _, s := range segs {
			if s.first >= lo && s.last <= hi {
				in = append(in, s)
			}
		}
		if have > hi {
			err = r.mergeChunk(ctx, lo, hi, in)
		} else {
			err = r.mergeTail(ctx, lo, in)
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			// A damaged segment stays as it is, for readers to report;
			// anything else (the store unreachable) is worth the retry.
			return err
		}
	}
	return nil
}

// mergeChunk makes the complete chunk lo..hi one segment, given in, its
// segments, and deletes the others.
func (r *Run) mergeChunk(ctx context.Context, lo, hi int, in []segment) error {
	for _, s := range in {
		if s.first == lo && s.last == hi {
			// Merged already; delete what a merge cut short left.
			var old []string
			for _, o := range in {
				if o.key != s.key {
					old = append(old, o.key)
				}
			}
			return deleteKeys(ctx, r.b, old)
		}
	}
	chain := cover(in, lo)
	if len(chain) == 0 || chain[len(chain)-1].last < hi {
		return nil // not complete after all
	}
	_, err := r.merge(ctx, chain, in)
	return err
}

// mergeTail merges the trailing segments of the chunk starting at lo, given
// in, its segments: ten of under 10 reports into one, ten of 10 to 99 into
// one; so a report is read again at most twice before its chunk is complete.
// Should sizes alternate so that neither run reaches ten, more than
// maxChunkSegments segments get those of under 100 at the end merged.
func (r *Run) mergeTail(ctx context.Context, lo int, in []segment) error {
	chain := cover(in, lo)
	// tail is where the trailing run of segments whose sizes keep takes
	// starts; merge merges the run from i on.
	tail := func(keep func(n int) bool) int {
		i := len(chain)
		for i > 0 && keep(chain[i-1].last-chain[i-1].first+1) {
			i--
		}
		return i
	}
	merge := func(i int) error {
		m, err := r.merge(ctx, chain[i:], chain[i:])
		if err != nil {
			return err
		}
		chain = append(chain[:i], m)
		return nil
	}
	if i := tail(func(n int) bool { return n < 10 }); len(chain)-i >= 10 {
		if err := merge(i); err != nil {
			return err
		}
	}
	if i := tail(func(n int) bool { return 10 <= n && n < 100 }); len(chain)-i >= 10 {
		if err := merge(i); err != nil {
			return err
		}
	}
	if len(chain) > maxChunkSegments {
		if i := tail(func(n int) bool { return n < 100 }); len(chain)-i >= 2 {
			return merge(i)
		}
	}
	return nil
}

// merge writes one segment holding the reports of chain (segments that
// follow each other without a gap), then deletes the segments of drop.
func (r *Run) merge(ctx context.Context, chain, drop []segment) (segment, error) {
	lo, hi := chain[0].first, chain[len(chain)-1].last
	m := segment{key: r.key(segmentDir + segmentName(lo, hi)), first: lo, last: hi}
	if len(chain) > 1 || chain[0].key != m.key {
		parts := make([][][]byte, len(chain))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(mergeParallelism)
		for i, s := range chain {
			g.Go(func() error {
				lines, err := r.readSegment(gctx, s)
				parts[i] = lines
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return m, err
		}
		var buf bytes.Buffer
		pos := lo
		for i, s := range chain {
			for _, l := range parts[i][pos-s.first:] {
				buf.Write(l)
				buf.WriteByte('\n')
			}
			pos = s.last + 1
		}
		if err := r.b.Put(ctx, m.key, bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
			return m, err
		}
	}
	var old []string
	for _, s := range drop {
		if s.key != m.key {
			old = append(old, s.key)
		}
	}
	return m, deleteKeys(ctx, r.b, old)
}

// coverage is how far the stored reports reach from report first-1 on,
// given segs, every segment whose last report is at or after first-1. ok is
// false when report first-1 is missing (first > 0): appending at first would
// leave a gap.
func coverage(segs []segment, first int) (have int, ok bool) {
	if first > 0 {
		have = -1
		for _, s := range segs {
			if s.first <= first-1 && first-1 <= s.last {
				have = max(have, s.last+1)
			}
		}
		if have < 0 {
			return 0, false
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].first < segs[j].first })
	for _, s := range segs {
		if s.first <= have && s.last >= have {
			have = s.last + 1
		}
	}
	return have, true
}

// segmentsFrom lists the segments whose last report is at or after at.
func (r *Run) segmentsFrom(ctx context.Context, at int) ([]segment, error) {
	dir := r.key(segmentDir)
	if al, ok := r.b.(afterLister); ok {
		after := ""
		if at > 0 {
			// Past every name starting with the 12 digits of at-1.
			after = dir + fmt.Sprintf("%012d~", at-1)
		}
		objs, err := al.listAfter(ctx, dir, after)
		if err != nil {
			return nil, err
		}
		return r.parseSegments(objs, at), nil
	}
	// Without StartAfter, list chunk by chunk (a chunk is a 9-digit prefix of
	// the last report) from at's on. Every chunk up to the last report has a
	// segment ending in it, so the first empty one ends the search.
	var out []segment
	for c := at / metricsChunk; ; c++ {
		objs, err := r.b.List(ctx, dir+fmt.Sprintf("%09d", c))
		if err != nil {
			return nil, err
		}
		segs := r.parseSegments(objs, 0)
		if len(segs) == 0 {
			return out, nil
		}
		for _, s := range segs {
			if s.last >= at {
				out = append(out, s)
			}
		}
	}
}

// parseSegments keeps the segments among objs whose last report is at or
// after at; other names are not segments and are ignored.
func (r *Run) parseSegments(objs []ObjectInfo, at int) []segment {
	dir := r.key(segmentDir)
	var out []segment
	for _, o := range objs {
		name, ok := strings.CutPrefix(o.Key, dir)
		if !ok {
			continue
		}
		if first, last, ok := parseSegmentName(name); ok && last >= at {
			out = append(out, segment{key: o.Key, first: first, last: last})
		}
	}
	return out
}

// storedSegmentReports counts the reports the segments hold from report 0 on
// (for an error message).
func (r *Run) storedSegmentReports(ctx context.Context) (int, error) {
	objs, err := r.b.List(ctx, r.key(segmentDir))
	if err != nil {
		return 0, err
	}
	have, _ := coverage(r.parseSegments(objs, 0), 0)
	return have, nil
}

// cover picks, from segs, segments that hold reports from..., in order and
// without a gap, as far as they reach: each starts at or before the report
// after the one before it ends.
func cover(segs []segment, from int) []segment {
	s := append([]segment(nil), segs...)
	sort.Slice(s, func(i, j int) bool {
		if s[i].first != s[j].first {
			return s[i].first < s[j].first
		}
		return s[i].last > s[j].last
	})
	var out []segment
	pos := from
	for _, seg := range s {
		if seg.last < pos {
			continue
		}
		if seg.first > pos {
			break
		}
		out = append(out, seg)
		pos = seg.last + 1
	}
	return out
}

// readSegment reads the lines of a segment, checking that it holds exactly
// its reports, each a line of JSON. A segment that is gone (merged away
// meanwhile) is ErrNotFound.
func (r *Run) readSegment(ctx context.Context, s segment) ([][]byte, error) {
	rc, err := r.b.Get(ctx, s.key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	want := s.last - s.first + 1
	var lines [][]byte
	torn, err := scanLines(rc, func(line []byte) error {
		if len(lines) == want {
			return fmt.Errorf("segment %s holds more than its %d reports: %w", r.b.URI(s.key), want, ErrCorrupt)
		}
		if !json.Valid(line) {
			return fmt.Errorf("segment %s: report %d is not JSON: %w", r.b.URI(s.key), s.first+len(lines), ErrCorrupt)
		}
		lines = append(lines, bytes.Clone(line))
		return nil
	})
	if err != nil {
		if errors.Is(err, errLineTooLong) {
			return nil, fmt.Errorf("segment %s: %w", r.b.URI(s.key), err)
		}
		return nil, err
	}
	if torn > 0 || len(lines) != want {
		return nil, fmt.Errorf("segment %s holds %d whole lines and %d more bytes, want its %d reports: %w",
			r.b.URI(s.key), len(lines), torn, want, ErrCorrupt)
	}
	return lines, nil
}

// migrateMetricsFile moves the reports of metrics.jsonl, if the run has one,
// into segments (one per chunk), then deletes it. A torn last line is left
// out. It reports whether there was a file.
func (r *Run) migrateMetricsFile(ctx context.Context) (bool, error) {
	key := r.key(MetricsFile)
	objs, err := r.b.List(ctx, key)
	if err != nil {
		return false, err
	}
	found := false
	for _, o := range objs {
		found = found || o.Key == key
	}
	if !found {
		return false, nil
	}
	rc, err := r.b.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	n, start := 0, 0
	flush := func() error {
		if n == start {
			return nil
		}
		k := r.key(segmentDir + segmentName(start, n-1))
		if err := r.b.Put(ctx, k, bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
			return err
		}
		buf.Reset()
		start = n
		return nil
	}
	_, err = scanLines(rc, func(line []byte) error {
		buf.Write(line)
		buf.WriteByte('\n')
		n++
		if n%metricsChunk == 0 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return false, fmt.Errorf("move %s into segments: %w", r.b.URI(key), err)
	}
	if err := r.b.Delete(ctx, key); err != nil {
		return false, err
	}
	return true, r.b.Delete(ctx, r.key(metricsIndexFile))
}

// ReadMetrics returns every report line, in order (none for a run with no
// metrics). A torn last line of metrics.jsonl is left out; a line that is not
// JSON, a damaged segment or reports missing between segments are ErrCorrupt.
func (r *Run) ReadMetrics(ctx context.Context) ([]json.RawMessage, error) {
	var out []json.RawMessage
	err := r.ScanMetrics(ctx, func(_ int, line json.RawMessage) error {
		out = append(out, line)
		return nil
	})
	return out, err
}

// ScanMetrics calls fn with every report line in order, index from 0, without
// holding them all in memory. An error from fn ends the scan and is returned
// as is.
func (r *Run) ScanMetrics(ctx context.Context, fn func(index int, line json.RawMessage) error) error {
	var fnErr error
	call := func(i int, line []byte) error {
		if err := fn(i, json.RawMessage(bytes.Clone(line))); err != nil {
			fnErr = err
			return err
		}
		return nil
	}
	pos, err := r.scanMetricsFile(ctx, call)
	if err == nil {
		err = r.scanSegments(ctx, pos, call)
	}
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("run %s: read metrics: %w", r.URI(), err)
	}
	return nil
}

// scanMetricsFile reads metrics.jsonl, if any, and returns how many reports
// it holds.
func (r *Run) scanMetricsFile(ctx context.Context, fn func(int, []byte) error) (int, error) {
	key := r.key(MetricsFile)
	rc, err := r.b.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n := 0
	_, err = scanLines(rc, func(line []byte) error {
		if !json.Valid(line) {
			return fmt.Errorf("%s line %d is not JSON: %w", r.b.URI(key), n+1, ErrCorrupt)
		}
		if err := fn(n, line); err != nil {
			return err
		}
		n++
		return nil
	})
	if errors.Is(err, errLineTooLong) {
		err = fmt.Errorf("%s line %d: %w", r.b.URI(key), n+1, err)
	}
	return n, err
}

// scanSegments reads the segments from report pos on. A segment merged away
// while it reads is found again in a new listing.
func (r *Run) scanSegments(ctx context.Context, pos int, fn func(int, []byte) error) error {
	for retry := 0; ; retry++ {
		objs, err := r.b.List(ctx, r.key(segmentDir))
		if err != nil {
			return err
		}
		segs := r.parseSegments(objs, pos)
		pick := cover(segs, pos)
		reach := pos
		if len(pick) > 0 {
			reach = pick[len(pick)-1].last + 1
		}
		for _, s := range segs {
			if s.first > reach {
				return fmt.Errorf("reports %d..%d are missing: the next segment is %s: %w", reach, s.first-1, r.b.URI(s.key), ErrCorrupt)
			}
		}
		gone := false
		for _, s := range pick {
			lines, err := r.readSegment(ctx, s)
			if errors.Is(err, ErrNotFound) && retry < 3 {
				gone = true
				break
			}
			if err != nil {
				return err
			}
			for _, l := range lines[pos-s.first:] {
				if err := fn(pos, l); err != nil {
					return err
				}
				pos++
			}
		}
		if !gone {
			return nil
		}
	}
}

// scanLines calls fn with each newline-terminated line of r (without the
// newline) and returns the length of what follows the last newline (a torn
// line). fn's line is valid only until it returns.
func scanLines(r io.Reader, fn func(line []byte) error) (torn int, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == bufio.ErrBufferFull:
			long = append(long, chunk...)
			if len(long) > maxMetricsLine {
				return 0, errLineTooLong
			}
			continue
		case err == io.EOF:
			return len(long) + len(chunk), nil
		case err != nil:
			return 0, err
		}
		line := chunk[:len(chunk)-1]
		if long != nil {
			long = append(long, line...)
			line, long = long, nil
		}
		if len(line) > maxMetricsLine {
			return 0, errLineTooLong
		}
		if err := fn(line); err != nil {
			return 0, err
		}
	}
}
