package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// memBackend is an in-memory Backend; its keys are kept sorted, so that
// listing costs what it returns.
type memBackend struct {
	mu   sync.Mutex
	objs map[string][]byte
	keys []string // sorted
}

func newMem() *memBackend { return &memBackend{objs: map[string][]byte{}} }

func (m *memBackend) URI(key string) string { return "mem:///" + key }

func (m *memBackend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := validKey(key); err != nil {
		return err
	}
	data, err := io.ReadAll(newExactReader(r, size))
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[key]; !ok {
		i := sort.SearchStrings(m.keys, key)
		m.keys = slices.Insert(m.keys, i, key)
	}
	m.objs[key] = data
	return nil
}

func (m *memBackend) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objs[key]
	if !ok {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (m *memBackend) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	return m.list(prefix, ""), nil
}

// list returns the objects with prefix whose keys are after startAfter.
func (m *memBackend) list(prefix, startAfter string) []ObjectInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	from := max(prefix, startAfter)
	var out []ObjectInfo
	for i := sort.SearchStrings(m.keys, from); i < len(m.keys) && strings.HasPrefix(m.keys[i], prefix); i++ {
		if k := m.keys[i]; k > startAfter || startAfter == "" {
			out = append(out, ObjectInfo{Key: k, Size: int64(len(m.objs[k]))})
		}
	}
	return out
}

func (m *memBackend) Delete(ctx context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[key]; ok {
		delete(m.objs, key)
		i := sort.SearchStrings(m.keys, key)
		m.keys = slices.Delete(m.keys, i, i+1)
	}
	return nil
}

// memAfter is a memBackend that lists from a key, like S3.
type memAfter struct{ *memBackend }

func (m memAfter) listAfter(ctx context.Context, prefix, startAfter string) ([]ObjectInfo, error) {
	return m.list(prefix, startAfter), nil
}

// counter counts what crosses a backend: requests, bytes read and written,
// keys listed.
type counter struct {
	mu                            sync.Mutex
	requests, read, written, keys int64
}

type cost struct{ requests, read, written, keys int64 }

func (c *counter) add(req, read, written, keys int64) {
	c.mu.Lock()
	c.requests += req
	c.read += read
	c.written += written
	c.keys += keys
	c.mu.Unlock()
}

func (c *counter) now() cost {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cost{c.requests, c.read, c.written, c.keys}
}

func (a cost) minus(b cost) cost {
	return cost{a.requests - b.requests, a.read - b.read, a.written - b.written, a.keys - b.keys}
}

// counting wraps a backend (hiding its optional fast paths) and counts.
type counting struct {
	Backend
	c *counter
}

func (b counting) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	b.c.add(1, 0, int64(len(data)), 0)
	return b.Backend.Put(ctx, key, bytes.NewReader(data), size)
}

func (b counting) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := b.Backend.Get(ctx, key)
	if err != nil {
		b.c.add(1, 0, 0, 0)
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	b.c.add(1, int64(len(data)), 0, 0)
	return io.NopCloser(bytes.NewReader(data)), err
}

func (b counting) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	objs, err := b.Backend.List(ctx, prefix)
	b.c.add(1, 0, 0, int64(len(objs)))
	return objs, err
}

func (b counting) Delete(ctx context.Context, key string) error {
	b.c.add(1, 0, 0, 0)
	return b.Backend.Delete(ctx, key)
}

// countingAfter is counting over a backend that lists from a key.
type countingAfter struct{ counting }

func (b countingAfter) listAfter(ctx context.Context, prefix, startAfter string) ([]ObjectInfo, error) {
	objs, err := b.Backend.(afterLister).listAfter(ctx, prefix, startAfter)
	b.c.add(1, 0, 0, int64(len(objs)))
	return objs, err
}

// report is a line like the runtime's (api.ReportRecord), about 120 bytes.
func report(i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"index":%d,"attempt":1,"time":"2025-06-01T12:00:00.123456Z","metrics":{"epoch":%d,"loss":0.%06d,"accuracy":0.9}}`, i, i/100, i))
}

func reports(i, j int) []json.RawMessage {
	var out []json.RawMessage
	for k := i; k < j; k++ {
		out = append(out, report(k))
	}
	return out
}

// wantReports checks that r holds reports 0..n-1 in order, as report wrote
// them (or metricsLines).
func wantReports(t *testing.T, r *Run, n int) {
	t.Helper()
	got, err := r.ReadMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d reports, want %d", len(got), n)
	}
	for i, l := range got {
		var v struct {
			Index  *int
			Report *int
		}
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatalf("line %d %s: %v", i, l, err)
		}
		if !(v.Index != nil && *v.Index == i || v.Report != nil && *v.Report == i) {
			t.Fatalf("line %d is %s", i, l)
		}
	}
}

// TestMetricsAppendCostIsBounded appends one report at a time to a backend
// without in-place append, counting what each append lists, reads and
// writes: it must not grow with the reports stored. (Before segments, append
// n read and rewrote all n reports: these 5000 appends moved 1.5 GB.)
func TestMetricsAppendCostIsBounded(t *testing.T) {
	t.Parallel()
	const n = 5000
	lineLen := int64(len(report(n)) + 1)
	for _, after := range []bool{true, false} {
		name := map[bool]string{true: "listing from a key (S3)", false: "plain List"}[after]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := &counter{}
			var b Backend = counting{newMem(), c}
			if after {
				b = countingAfter{counting{memAfter{newMem()}, c}}
			}
			r := NewRun(b, "run")
			costs := make([]cost, n)
			for i := range n {
				before := c.now()
				if err := r.AppendMetrics(ctx, i, reports(i, i+1)); err != nil {
					t.Fatal(err)
				}
				costs[i] = c.now().minus(before)
			}
			// Appends that merge nothing: one listing of a few keys (the
			// chunk's segments) and the line. (A plain List has no
			// StartAfter: it lists the chunk and the next, empty one, and
			// the one before when the append starts a chunk.)
			maxReq := map[bool]int64{true: 2, false: 4}[after]
			const maxKeys = 40
			var most cost
			for i, k := range costs {
				line := int64(len(report(i)) + 1)
				if k.read > metricsChunk*lineLen || k.written > (metricsChunk+1)*lineLen || k.keys > maxKeys || k.requests > 3*maxKeys {
					t.Fatalf("append %d: %d requests, %d keys listed, %d bytes read and %d written: more than a chunk's worth", i, k.requests, k.keys, k.read, k.written)
				}
				if k.written == line && (k.read != 0 || k.requests > maxReq+int64(max(1-i, 0))) {
					t.Fatalf("append %d of one %d-byte line, no merge: %d requests, read %d bytes; want at most %d requests, no read", i, line, k.requests, k.read, maxReq)
				}
				most = cost{max(most.requests, k.requests), max(most.read, k.read), max(most.written, k.written), max(most.keys, k.keys)}
			}
			// What merges add, per report, is the same late in the run as
			// early: a few times the line (each report is read again at
			// most three times: into a segment of 10, of 100, the chunk).
			mean := func(from, to int) cost {
				var s cost
				for _, k := range costs[from:to] {
					s = cost{s.requests + k.requests, s.read + k.read, s.written + k.written, s.keys + k.keys}
				}
				d := int64(to - from)
				return cost{s.requests / d, s.read / d, s.written / d, s.keys / d}
			}
			early, late := mean(1000, 2000), mean(n-1000, n)
			t.Logf("per append, reports 1000..1999: %+v; %d..%d: %+v; the most: %+v (a line is %d bytes)", early, n-1000, n-1, late, most, lineLen)
			if late.read+late.written > early.read+early.written+lineLen || late.read+late.written > 8*lineLen {
				t.Fatalf("appends moved %d bytes each late in the run, %d early", late.read+late.written, early.read+early.written)
			}
			wantReports(t, r, n)
			keys := listKeys(t, b, "run/")
			if len(keys) != n/metricsChunk {
				t.Fatalf("objects %v: want one per complete chunk", keys)
			}
		})
	}
}

// TestMetricsSegmentsKeepEveryReportOnce appends batches of random sizes,
// across chunk ends, with retries of whole and partial calls: every report
// is stored once, in order.
func TestMetricsSegmentsKeepEveryReportOnce(t *testing.T) {
	t.Parallel()
	for _, after := range []bool{true, false} {
		t.Run(fmt.Sprint("after=", after), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var b Backend = newMem()
			if after {
				b = memAfter{newMem()}
			}
			r := NewRun(b, "run")
			rng := rand.New(rand.NewPCG(1, 2))
			next := 0
			for next < 3500 {
				k := 1 + rng.IntN(150)
				if err := r.AppendMetrics(ctx, next, reports(next, next+k)); err != nil {
					t.Fatal(err)
				}
				switch rng.IntN(4) {
				case 0: // the same call again
					if err := r.AppendMetrics(ctx, next, reports(next, next+k)); err != nil {
						t.Fatal(err)
					}
				case 1: // a call overlapping the last one
					back := rng.IntN(next + 1)
					if err := r.AppendMetrics(ctx, back, reports(back, next+k+3)); err != nil {
						t.Fatal(err)
					}
					k += 3
				}
				next += k
			}
			wantReports(t, r, next)
			// A gap is refused, naming how many reports there are.
			err := r.AppendMetrics(ctx, next+1, reports(next+1, next+2))
			contains(t, err, "gap", fmt.Sprintf("holds %d reports", next))
			// Complete chunks are one object each.
			for c := 0; c < next/metricsChunk; c++ {
				objs, _ := b.List(ctx, fmt.Sprintf("run/metrics/%09d", c))
				if len(objs) != 1 || objs[0].Key != "run/metrics/"+segmentName(c*metricsChunk, (c+1)*metricsChunk-1) {
					t.Fatalf("chunk %d: %v", c, objs)
				}
			}
		})
	}
}

// TestMetricsChunkStaysFewSegments: whatever the sizes of the appends, the
// chunk being filled holds at most about maxChunkSegments segments, so that
// listing it and merging it stay cheap.
func TestMetricsChunkStaysFewSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, sizes := range map[string][]int{
		"ones": {1}, "alternating 15 and 1": {15, 1}, "tens": {10}, "alternating 99 and 9": {99, 9},
		"alternating 1, 10, 100": {1, 10, 100}, "threes": {3},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := memAfter{newMem()}
			r := NewRun(b, "run")
			next := 0
			for i := 0; next < 2500; i++ {
				k := sizes[i%len(sizes)]
				if err := r.AppendMetrics(ctx, next, reports(next, next+k)); err != nil {
					t.Fatal(err)
				}
				next += k
				objs, _ := b.List(ctx, fmt.Sprintf("run/metrics/%09d", next/metricsChunk))
				if len(objs) > maxChunkSegments+1 {
					t.Fatalf("after report %d, chunk %d holds %d segments", next-1, next/metricsChunk, len(objs))
				}
			}
			wantReports(t, r, next)
		})
	}
}

// TestMetricsRetryAfterPartialAppend: RecordRun is retried after an append
// that stored part of its reports (one of two segments, or the segments
// but not the merge): the retry stores the rest, nothing twice.
func TestMetricsRetryAfterPartialAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	local, _ := NewLocal(t.TempDir())
	rec := &recorder{Backend: local}
	r := NewRun(rec, "run")
	if err := r.AppendMetrics(ctx, 0, reports(0, 990)); err != nil {
		t.Fatal(err)
	}
	// 990..1019 is two segments (the chunk ends at 999); the second fails.
	second := "run/metrics/" + segmentName(1000, 1019)
	rec.failPut = func(key string) error {
		if key == second {
			return errors.New("injected")
		}
		return nil
	}
	contains(t, r.AppendMetrics(ctx, 990, reports(990, 1020)), "injected")
	// The merge of chunk 0 fails.
	rec.failPut = func(key string) error {
		if strings.HasSuffix(key, segmentName(0, 999)) {
			return errors.New("merge injected")
		}
		return nil
	}
	contains(t, r.AppendMetrics(ctx, 990, reports(990, 1020)), "merge injected")
	wantReports(t, r, 1020)
	rec.failPut = nil
	if err := r.AppendMetrics(ctx, 990, reports(990, 1020)); err != nil {
		t.Fatal(err)
	}
	wantReports(t, r, 1020)
	eq(t, "objects", listKeys(t, local, "run/"), []string{"run/metrics/" + segmentName(0, 999), "run/metrics/" + segmentName(1000, 1019)})
	// A retry of a call that completed writes nothing.
	before := len(rec.events())
	if err := r.AppendMetrics(ctx, 990, reports(990, 1020)); err != nil {
		t.Fatal(err)
	}
	if ev := rec.events()[before:]; len(ev) != 0 {
		t.Fatalf("a retry of a completed append wrote %v", ev)
	}
}

// TestMetricsFileMovesIntoSegments: a run written before segments (one
// metrics.jsonl, torn last line) goes on in segments on a backend that
// cannot append, and reads back whole.
func TestMetricsFileMovesIntoSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, first := range []int{2500, 0, 1200} {
		t.Run(fmt.Sprint("first append at ", first), func(t *testing.T) {
			t.Parallel()
			b := memAfter{newMem()}
			var old bytes.Buffer
			for _, l := range reports(0, 2500) {
				old.Write(l)
				old.WriteByte('\n')
			}
			old.WriteString(`{"index":2500,"att`)
			put(t, b, "run/metrics.jsonl", old.Bytes())
			r := NewRun(b, "run")
			wantReports(t, r, 2500) // readable as it is
			if err := r.AppendMetrics(ctx, first, reports(first, 2510)); err != nil {
				t.Fatal(err)
			}
			wantReports(t, r, 2510)
			eq(t, "objects", listKeys(t, b, "run/"), []string{
				"run/metrics/" + segmentName(0, 999), "run/metrics/" + segmentName(1000, 1999),
				"run/metrics/" + segmentName(2000, 2499), "run/metrics/" + segmentName(2500, 2509)})
		})
	}
}

// TestScanMetricsAcrossAMerge: a reader that listed the segments of a chunk
// the writer then merges finds the merged one.
func TestScanMetricsAcrossAMerge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := newMem()
	r := NewRun(mem, "run")
	for i := 0; i < 999; i += 9 {
		if err := r.AppendMetrics(ctx, i, reports(i, i+9)); err != nil {
			t.Fatal(err)
		}
	}
	// The reader lists 111 segments; when it fetches the third, the writer
	// has merged them all.
	b := &mergeOnGet{memBackend: mem}
	b.merge = func() {
		if err := NewRun(mem, "run").AppendMetrics(ctx, 999, reports(999, 1000)); err != nil {
			t.Error(err)
		}
	}
	got, err := NewRun(b, "run").ReadMetrics(ctx)
	if err != nil || len(got) < 999 {
		t.Fatalf("%d reports, %v", len(got), err)
	}
	if n := len(listKeys(t, mem, "run/")); n != 1 {
		t.Fatalf("%d objects, want the merged chunk", n)
	}
}

type mergeOnGet struct {
	*memBackend
	gets  int
	merge func()
}

func (m *mergeOnGet) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	m.gets++
	if m.gets == 3 {
		m.merge()
	}
	return m.memBackend.Get(ctx, key)
}

func TestReadMetricsRefusesDamagedSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		objs map[string]string
		want string
	}{
		{"gap", map[string]string{segmentName(0, 1): "{}\n{}\n", segmentName(3, 3): "{}\n"}, "reports 2..2 are missing"},
		{"not from 0", map[string]string{segmentName(1, 1): "{}\n"}, "reports 0..0 are missing"},
		{"short", map[string]string{segmentName(0, 2): "{}\n{}\n"}, "holds 2 whole lines"},
		{"long", map[string]string{segmentName(0, 0): "{}\n{}\n"}, "more than its 1 reports"},
		{"torn", map[string]string{segmentName(0, 1): "{}\n{"}, "1 more bytes"},
		{"not JSON", map[string]string{segmentName(0, 1): "{}\nnope\n"}, "report 1 is not JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newMem()
			for k, v := range tc.objs {
				put(t, b, "r/metrics/"+k, []byte(v))
			}
			put(t, b, "r/metrics/not-a-segment.txt", []byte("ignored"))
			_, err := NewRun(b, "r").ReadMetrics(ctx)
			wantErrIs(t, err, ErrCorrupt)
			contains(t, err, tc.want)
		})
	}
}

// TestLocalMetricsAppendCostIsBounded: on local storage an append reads a
// few bytes of metrics.idx and metrics.jsonl and writes its lines and their
// offsets, however long the file (before: it read the whole file, and a file
// over 256 MB was refused as corrupt). Measured both by the backend and by
// the kernel's count of the bytes this process read and wrote (rchar,
// wchar), so the test runs alone.
func TestLocalMetricsAppendCostIsBounded(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{10_000, 100_000} {
		b, _ := NewLocal(t.TempDir())
		r := NewRun(b, "run")
		// A run written before the index: its first append reads the file
		// once to index it.
		var old bytes.Buffer
		for _, l := range reports(0, n) {
			old.Write(l)
			old.WriteByte('\n')
		}
		put(t, b, "run/metrics.jsonl", old.Bytes())
		if err := r.AppendMetrics(ctx, n, reports(n, n+1)); err != nil {
			t.Fatal(err)
		}
		if got := b.metricsRead.Load(); got < int64(old.Len()) {
			t.Fatalf("indexing read %d bytes of %d", got, old.Len())
		}
		const appends = 20
		read0, written0 := b.metricsRead.Load(), b.metricsWritten.Load()
		io0, ioOK := procIO(t)
		for i := n + 1; i < n+1+appends; i++ {
			if err := r.AppendMetrics(ctx, i, reports(i, i+1)); err != nil {
				t.Fatal(err)
			}
		}
		io1, _ := procIO(t)
		read := (b.metricsRead.Load() - read0) / appends
		written := (b.metricsWritten.Load() - written0) / appends
		line := int64(len(report(n)) + 1)
		t.Logf("%d reports (%d bytes): an append reads %d bytes and writes %d (the line: %d)", n, old.Len(), read, written, line)
		if read > 64 || written > line+8+metricsIndexHeader {
			t.Fatalf("%d reports: an append read %d bytes and wrote %d; want at most 64 and %d", n, read, written, line+8+metricsIndexHeader)
		}
		if ioOK {
			kr, kw := (io1.rchar-io0.rchar)/appends, (io1.wchar-io0.wchar)/appends
			t.Logf("kernel: %d bytes read, %d written per append", kr, kw)
			if kr > 4096 || kw > 4096 {
				t.Fatalf("%d reports: the process read %d and wrote %d bytes per append", n, kr, kw)
			}
		}
		wantReports(t, r, n+1+appends)
	}
}

type ioCounts struct{ rchar, wchar int64 }

func procIO(t *testing.T) (ioCounts, bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Logf("no /proc/self/io: %v", err)
		return ioCounts{}, false
	}
	var c ioCounts
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "rchar":
			c.rchar = n
		case "wchar":
			c.wchar = n
		}
	}
	return c, true
}

// TestLocalMetricsOver256MB: a metrics.jsonl past 256 MB (sparse here) takes
// appends; before, reading it whole refused it as corrupt and the run ended
// in a storage error.
func TestLocalMetricsOver256MB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := NewLocal(t.TempDir())
	r := NewRun(b, "run")
	if err := r.AppendMetrics(ctx, 0, reports(0, 1)); err != nil {
		t.Fatal(err)
	}
	// Grow the file to 300 MB: a hole, then the end of a line, indexed.
	p := filepath.Join(b.Root(), "run", MetricsFile)
	const size = 300 << 20
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("\n"), size-1); err != nil {
		t.Fatal(err)
	}
	stamp, err := stampOf(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	x, err := os.OpenFile(filepath.Join(b.Root(), "run", metricsIndexFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := binary.Write(x, binary.LittleEndian, int64(size)); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if err := writeAt(filepath.Join(b.Root(), "run", metricsIndexFile), stamp.header(), 0); err != nil {
		t.Fatal(err)
	}
	read0 := b.metricsRead.Load()
	if err := r.AppendMetrics(ctx, 2, reports(2, 3)); err != nil {
		t.Fatalf("append to a %d-byte metrics.jsonl: %v", size, err)
	}
	if read := b.metricsRead.Load() - read0; read > 64 {
		t.Fatalf("the append read %d bytes", read)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := size + int64(len(report(2))) + 1; st.Size() != want {
		t.Fatalf("metrics.jsonl is %d bytes, want %d", st.Size(), want)
	}
}

// TestLocalMetricsIndexRecovers: whatever state an interrupted or foreign
// write left metrics.jsonl and metrics.idx in, appends go on where the file's
// whole lines end, and readers see every report once.
func TestLocalMetricsIndexRecovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lines := func(i, j int) string {
		var s strings.Builder
		for _, l := range reports(i, j) {
			s.Write(l)
			s.WriteByte('\n')
		}
		return s.String()
	}
	for _, tc := range []struct {
		name string
		// damage changes the run's files after reports 0..4 were appended.
		damage func(t *testing.T, metrics, index string)
		have   int // reports the run holds after it
	}{
		{"no index (a run from before it)", func(t *testing.T, m, x string) { os.Remove(x) }, 5},
		{"lines past the index (died between the writes)", func(t *testing.T, m, x string) { appendFile(t, m, lines(5, 7)) }, 7},
		{"torn last line", func(t *testing.T, m, x string) { appendFile(t, m, `{"index":5,"att`) }, 5},
		{"lines and a torn one past the index", func(t *testing.T, m, x string) { appendFile(t, m, lines(5, 6)+`{"ind`) }, 6},
		{"file replaced", func(t *testing.T, m, x string) { replaceFile(t, m, lines(0, 3)) }, 3},
		{"file replaced by a longer one", func(t *testing.T, m, x string) { replaceFile(t, m, lines(0, 9)) }, 9},
		{"file truncated in place", func(t *testing.T, m, x string) { os.Truncate(m, int64(len(lines(0, 2)))) }, 2},
		{"index garbage", func(t *testing.T, m, x string) { os.WriteFile(x, randBytes(3, 100), 0o644) }, 5},
		{"index cut mid-entry", func(t *testing.T, m, x string) { st, _ := os.Stat(x); os.Truncate(x, st.Size()-3) }, 5},
		{"index zeroed tail (power cut)", func(t *testing.T, m, x string) { appendFile(t, x, string(make([]byte, 16))) }, 5},
		{"index empty", func(t *testing.T, m, x string) { os.Truncate(x, 0) }, 5},
		{"both gone", func(t *testing.T, m, x string) { os.Remove(m); os.Remove(x) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, _ := NewLocal(t.TempDir())
			r := NewRun(b, "run")
			if err := r.AppendMetrics(ctx, 0, reports(0, 5)); err != nil {
				t.Fatal(err)
			}
			m := filepath.Join(b.Root(), "run", MetricsFile)
			x := filepath.Join(b.Root(), "run", metricsIndexFile)
			tc.damage(t, m, x)
			// The retry of the last call, then the next one, then a gap.
			if err := r.AppendMetrics(ctx, min(tc.have, 4), reports(min(tc.have, 4), tc.have+1)); err != nil {
				t.Fatal(err)
			}
			if err := r.AppendMetrics(ctx, tc.have+1, reports(tc.have+1, tc.have+3)); err != nil {
				t.Fatal(err)
			}
			contains(t, r.AppendMetrics(ctx, tc.have+4, reports(tc.have+4, tc.have+5)), "gap", fmt.Sprintf("holds %d reports", tc.have+3))
			wantReports(t, r, tc.have+3)
			raw, _ := os.ReadFile(m)
			if string(raw) != lines(0, tc.have+3) {
				t.Fatalf("metrics.jsonl is\n%s", raw)
			}
			// The index now describes the file exactly.
			idx, _ := os.ReadFile(x)
			var ends []int64
			for i, c := range raw {
				if c == '\n' {
					ends = append(ends, int64(i+1))
				}
			}
			if len(idx) != metricsIndexHeader+8*len(ends) {
				t.Fatalf("index of %d bytes for %d lines", len(idx), len(ends))
			}
			for i, e := range ends {
				if got := int64(binary.LittleEndian.Uint64(idx[metricsIndexHeader+8*i:])); got != e {
					t.Fatalf("index entry %d is %d, want %d", i, got, e)
				}
			}
		})
	}
}

func writeAt(p string, b []byte, off int64) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, off); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func appendFile(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func replaceFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p+".new", []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
}

// TestLocalMetricsDefersToSegments: a local run that holds segments (written
// through a wrapping backend) goes on in segments, and both read back.
func TestLocalMetricsDefersToSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := NewLocal(t.TempDir())
	if err := NewRun(b, "run").AppendMetrics(ctx, 0, reports(0, 3)); err != nil {
		t.Fatal(err)
	}
	if err := NewRun(&recorder{Backend: b}, "run").AppendMetrics(ctx, 3, reports(3, 6)); err != nil {
		t.Fatal(err)
	}
	if err := NewRun(b, "run").AppendMetrics(ctx, 6, reports(6, 8)); err != nil {
		t.Fatal(err)
	}
	wantReports(t, NewRun(b, "run"), 8)
	keys := listKeys(t, b, "run/")
	sort.Strings(keys)
	eq(t, "files", keys, []string{"run/metrics/" + segmentName(0, 2), "run/metrics/" + segmentName(3, 5), "run/metrics/" + segmentName(6, 7)})
}

// countingS3 counts the requests and listed keys of an S3 backend, keeping
// its StartAfter listing.
type countingS3 struct {
	*S3
	c *counter
}

func (b countingS3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	b.c.add(1, 0, size, 0)
	return b.S3.Put(ctx, key, r, size)
}

func (b countingS3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	b.c.add(1, 0, 0, 0)
	return b.S3.Get(ctx, key)
}

func (b countingS3) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	objs, err := b.S3.List(ctx, prefix)
	b.c.add(1, 0, 0, int64(len(objs)))
	return objs, err
}

func (b countingS3) listAfter(ctx context.Context, prefix, startAfter string) ([]ObjectInfo, error) {
	objs, err := b.S3.listAfter(ctx, prefix, startAfter)
	b.c.add(1, 0, 0, int64(len(objs)))
	return objs, err
}

// TestMetricsOnMinIO: segments on a real S3 server: batches of every size
// across chunk ends, retried calls, a run written before segments; an
// append that merges nothing is one ListObjectsV2 returning a few keys and
// one PutObject of its lines.
func TestMetricsOnMinIO(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s3b := newS3(t, sharedMinio(t), S3Config{})
	c := &counter{}
	b := countingS3{s3b, c}
	r := NewRun(b, "run")
	rng := rand.New(rand.NewPCG(3, 4))
	next := 0
	for next < 2300 {
		k := 1 + rng.IntN(60)
		before := c.now()
		if err := r.AppendMetrics(ctx, next, reports(next, next+k)); err != nil {
			t.Fatal(err)
		}
		cost := c.now().minus(before)
		var size int64
		for _, l := range reports(next, next+k) {
			size += int64(len(l) + 1)
		}
		merged := cost.written != size
		if next > 0 && (!merged && cost.requests != 2 || cost.keys > 40 || cost.requests > 80) {
			t.Fatalf("append of reports %d..%d: %d requests listing %d keys (merged: %v), want a listing of a few keys and a put", next, next+k-1, cost.requests, cost.keys, merged)
		}
		if rng.IntN(3) == 0 { // RecordRun retried after it stored the reports
			before := c.now()
			if err := r.AppendMetrics(ctx, next, reports(next, next+k)); err != nil {
				t.Fatal(err)
			}
			if cost := c.now().minus(before); cost.written != 0 {
				t.Fatalf("retried append wrote %d bytes", cost.written)
			}
		}
		next += k
	}
	wantReports(t, r, next)
	keys := listKeys(t, s3b, "run/")
	if len(keys) < 3 || keys[0] != "run/metrics/"+segmentName(0, 999) || keys[1] != "run/metrics/"+segmentName(1000, 1999) || strings.Contains(keys[2], "-000000001") {
		t.Fatalf("objects %v: want chunks 0 and 1 merged", keys)
	}
	contains(t, r.AppendMetrics(ctx, next+1, reports(next+1, next+2)), "gap", fmt.Sprintf("holds %d reports", next))

	// A run from before segments: metrics.jsonl, torn at the end.
	var old bytes.Buffer
	for _, l := range reports(0, 1500) {
		old.Write(l)
		old.WriteByte('\n')
	}
	old.WriteString(`{"index":1500,"at`)
	put(t, s3b, "old/metrics.jsonl", old.Bytes())
	o := NewRun(b, "old")
	wantReports(t, o, 1500)
	if err := o.AppendMetrics(ctx, 1500, reports(1500, 1510)); err != nil {
		t.Fatal(err)
	}
	wantReports(t, o, 1510)
	eq(t, "objects", listKeys(t, s3b, "old/"), []string{
		"old/metrics/" + segmentName(0, 999), "old/metrics/" + segmentName(1000, 1499), "old/metrics/" + segmentName(1500, 1509)})
}
