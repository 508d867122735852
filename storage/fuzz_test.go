package storage

// Fuzz tests of every parser of what another process wrote: checkpoint
// manifests, run.json, metrics (metrics.jsonl, its local index, segment
// objects and their names), checkpoint URIs and storage paths. Each runs as a
// plain test over its seeds; CI fuzzes each for a few seconds:
//
//	go test -run '^$' -fuzz '^FuzzManifest$' -fuzztime 5s ./storage
//
// and so on for FuzzRunState, FuzzMetricsFile, FuzzMetricsSegments,
// FuzzSegmentName, FuzzLocalMetricsIndex, FuzzCheckpointURI, FuzzStoragePath.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func FuzzManifest(f *testing.F) {
	good := Manifest{Version: 1, Seq: 3, Attempt: 2, Bytes: 5,
		Files:   []FileEntry{{Path: "a/b.bin", Size: 2, SHA256: sha([]byte("ab")), CRC32C: "0a0b0c0d"}, {Path: "c", Size: 3, SHA256: sha([]byte("abc"))}},
		Metrics: map[string]float64{"loss": math.NaN(), "up": math.Inf(1), "acc": 0.5},
		Meta:    map[string]string{"kind": "gbdt"}, Time: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)}
	data, _ := json.Marshal(good)
	f.Add(data, 3)
	f.Add(data, 4)
	f.Add([]byte(`{"version":1,"seq":1,"files":[],"bytes":0}`), 1)
	f.Add([]byte(`{"version":1,"seq":1,"files":[{"path":"../x","size":1,"sha256":"00"}],"bytes":1}`), 1)
	f.Add([]byte(`{"version":1,"seq":1,"files":[{"path":"a","size":9223372036854775807,"sha256":"`+sha(nil)+`"},{"path":"b","size":2,"sha256":"`+sha(nil)+`"}],"bytes":-9223372036854775807}`), 1)
	f.Add([]byte(`{"version":1,"seq":1,"metrics":{"x":"NaN","y":"-Inf","z":1e400}}`), 1)
	f.Add([]byte(`{"version":2}`), 0)
	f.Add([]byte(`[`), 0)
	f.Fuzz(func(t *testing.T, data []byte, seq int) {
		m, err := parseManifest(data, seq)
		if err != nil {
			return
		}
		// What parses is what a restore may act on: paths inside the
		// checkpoint, sorted, sizes that add up.
		var total int64
		for i, e := range m.Files {
			if !validRelPath(e.Path) || e.Path == ManifestFile || e.Size < 0 {
				t.Fatalf("accepted file %+v", e)
			}
			if i > 0 && m.Files[i-1].Path >= e.Path {
				t.Fatalf("accepted unsorted files %v", m.Files)
			}
			if got, ok := m.File(e.Path); !ok || got != e {
				t.Fatalf("File(%q) = %+v, %v", e.Path, got, ok)
			}
			total += e.Size
		}
		if total != m.Bytes || m.Bytes < 0 || m.Seq != seq {
			t.Fatalf("accepted %+v for seq %d", m, seq)
		}
		// It writes back to what it read.
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := parseManifest(again, seq)
		if err != nil {
			t.Fatalf("re-reading %s: %v", again, err)
		}
		if !sameManifest(m, m2) {
			t.Fatalf("round trip changed %+v into %+v", m, m2)
		}
	})
}

func sameManifest(a, b Manifest) bool {
	if len(a.Metrics) != len(b.Metrics) || !a.Time.Equal(b.Time) {
		return false
	}
	for k, v := range a.Metrics {
		w, ok := b.Metrics[k]
		if !ok || v != w && !(math.IsNaN(v) && math.IsNaN(w)) {
			return false
		}
	}
	a.Metrics, b.Metrics, a.Time, b.Time = nil, nil, time.Time{}, time.Time{}
	if len(a.Files) == 0 && len(b.Files) == 0 {
		a.Files, b.Files = nil, nil
	}
	if len(a.Meta) == 0 && len(b.Meta) == 0 {
		a.Meta, b.Meta = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

func FuzzRunState(f *testing.F) {
	f.Add([]byte(`{"version":1,"name":"demo","status":"running","attempts":2,"reports":10,"checkpoints":[{"seq":3}],"kept":[1,2]}`))
	f.Add([]byte(`{"attempts":`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"attempts":"x"}`))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		b := newMem()
		put(t, b, "r/"+StateFile, data)
		r := NewRun(b, "r")
		var m map[string]any
		found, err := r.LoadState(ctx, &m)
		if jerr := json.Unmarshal(data, new(map[string]any)); (err == nil) != (jerr == nil) {
			t.Fatalf("LoadState: %v; json: %v", err, jerr)
		}
		if err != nil {
			wantErrIs(t, err, ErrCorrupt)
			return
		}
		if !found {
			t.Fatal("not found")
		}
		var st testState
		if _, err := r.LoadState(ctx, &st); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatal(err)
		}
		// What loads saves and loads back the same.
		if err := r.SaveState(ctx, m); err != nil {
			t.Fatal(err)
		}
		var m2 map[string]any
		if _, err := r.LoadState(ctx, &m2); err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip: %v, %v: %v", m, m2, err)
		}
	})
}

// FuzzMetricsFile: any metrics.jsonl (a run from before segments, or one a
// crash or another program left) reads back as its valid lines or as
// ErrCorrupt, and takes the next report, on a backend that appends in place
// (local) and on one that cannot (segments).
func FuzzMetricsFile(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n{\"a\":2}\n"), true)
	f.Add([]byte("{\"a\":1}\n{\"a\":"), false)
	f.Add([]byte("{\"a\":1}\nnot json\n{\"a\":2}\n"), true)
	f.Add([]byte("\n\n"), false)
	f.Add([]byte(""), true)
	f.Add([]byte("[1,2]\r\n\"x\"\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, local bool) {
		ctx := context.Background()
		var b Backend = memAfter{newMem()}
		if local {
			l, err := NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			b = l
		}
		put(t, b, "r/"+MetricsFile, data)
		r := NewRun(b, "r")
		got, err := r.ReadMetrics(ctx)
		whole := data[:bytes.LastIndexByte(data, '\n')+1]
		lines := bytes.Split(whole, []byte("\n"))
		lines = lines[:len(lines)-1]
		valid := true
		for _, l := range lines {
			valid = valid && json.Valid(l)
		}
		if valid != (err == nil) {
			t.Fatalf("ReadMetrics: %v, but lines valid = %v", err, valid)
		}
		if err != nil {
			wantErrIs(t, err, ErrCorrupt)
		} else if len(got) != len(lines) {
			t.Fatalf("%d reports from %d lines", len(got), len(lines))
		}
		next := json.RawMessage(`{"next":true}`)
		if err := r.AppendMetrics(ctx, len(lines), []json.RawMessage{next}); err != nil {
			t.Fatalf("append after %d lines: %v", len(lines), err)
		}
		if err := r.AppendMetrics(ctx, len(lines), []json.RawMessage{next}); err != nil {
			t.Fatalf("retried append: %v", err)
		}
		if !valid {
			return
		}
		got, err = r.ReadMetrics(ctx)
		if err != nil || len(got) != len(lines)+1 || string(got[len(lines)]) != string(next) {
			t.Fatalf("after the append: %d reports, %v", len(got), err)
		}
	})
}

// FuzzMetricsSegments: segment objects with any names and contents, beside
// any metrics.jsonl: reading never panics, and when it succeeds the next
// report appends after what it read.
func FuzzMetricsSegments(f *testing.F) {
	f.Add(segmentName(0, 1), []byte("{}\n{}\n"), segmentName(2, 2), []byte("[]\n"), []byte(""), false)
	f.Add(segmentName(0, 999), bytes.Repeat([]byte("1\n"), 1000), segmentName(1000, 1000), []byte("2\n"), []byte(""), true)
	f.Add(segmentName(2, 4), []byte("1\n2\n3\n"), segmentName(5, 5), []byte("4\n"), []byte("0\n0\n0\n"), true)
	f.Add(segmentName(0, 1), []byte("{}\n{"), segmentName(3, 3), []byte("{}\n"), []byte("{}\n"), false)
	f.Add("000000000001-000000000002.jsonl", []byte("1\n"), "x", []byte("1\n"), []byte("1\n{"), true)
	f.Add(segmentName(0, 1200), bytes.Repeat([]byte("1\n"), 1201), segmentName(990, 999), bytes.Repeat([]byte("3\n"), 10), []byte("0\n"), false)
	f.Fuzz(func(t *testing.T, name1 string, data1 []byte, name2 string, data2 []byte, file []byte, after bool) {
		ctx := context.Background()
		mem := newMem()
		var b Backend = mem
		if after {
			b = memAfter{mem}
		}
		for _, o := range []struct {
			name string
			data []byte
		}{{name1, data1}, {name2, data2}} {
			if validKey("r/metrics/"+o.name) == nil {
				put(t, b, "r/metrics/"+o.name, o.data)
			}
		}
		if len(file) > 0 {
			put(t, b, "r/"+MetricsFile, file)
		}
		r := NewRun(b, "r")
		got, err := r.ReadMetrics(ctx)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ReadMetrics: %v", err)
			}
			_ = r.AppendMetrics(ctx, 0, reports(0, 3)) // must not panic
			return
		}
		for _, l := range got {
			if !json.Valid(l) {
				t.Fatalf("read %q", l)
			}
		}
		n := len(got)
		if n > 5000 {
			return
		}
		if err := r.AppendMetrics(ctx, n, reports(n, n+1010)); err != nil {
			t.Fatalf("append at %d: %v", n, err)
		}
		got, err = r.ReadMetrics(ctx)
		if err != nil || len(got) != n+1010 {
			t.Fatalf("after appending 1010 to %d: %d reports, %v", n, len(got), err)
		}
		for i, l := range got[n:] {
			if string(l) != string(report(n+i)) {
				t.Fatalf("report %d is %s", n+i, l)
			}
		}
	})
}

func FuzzSegmentName(f *testing.F) {
	f.Add(segmentName(0, 0))
	f.Add(segmentName(1000, 1999))
	f.Add("999999999999-000000000000.jsonl")
	f.Add("000000000001-000000000002.jsonl")
	f.Add("+00000000001-000000000000.jsonl")
	f.Add("00000000000a-000000000000.jsonl")
	f.Fuzz(func(t *testing.T, name string) {
		first, last, ok := parseSegmentName(name)
		if !ok {
			return
		}
		if first < 0 || first > last || last >= maxMetricsReports || segmentName(first, last) != name {
			t.Fatalf("%q parsed as %d..%d", name, first, last)
		}
	})
}

// FuzzLocalMetricsIndex: whatever state a crash or another program left
// metrics.idx in beside any metrics.jsonl (no index, a foreign file, the
// index of an older version of the file, one whose last entries never
// reached the disk), the next append goes right after the last whole line of
// metrics.jsonl, and the index ends up exact. (An index forged to carry the
// file's inode, size and modification time is taken at its word.)
func FuzzLocalMetricsIndex(f *testing.F) {
	f.Add([]byte("{}\n{}\n"), []byte{}, true, uint16(9), true)
	f.Add([]byte("{}\n{}\n{"), []byte{}, false, uint16(1), true)
	f.Add([]byte("{}\n{}\n"), make([]byte, 16), false, uint16(1), true)
	f.Add([]byte("{}\n{}\n"), make([]byte, 5), false, uint16(0), false)
	f.Add([]byte("00000\n"), binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 3), 6), true, uint16(0), false)
	f.Add([]byte("1\n2\n"), []byte("ttmidx1\ngarbage!"), true, uint16(0), true)
	f.Fuzz(func(t *testing.T, file, garbage []byte, foreign bool, keep uint16, current bool) {
		ctx := context.Background()
		b, err := NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		put(t, b, "r/"+MetricsFile, file)
		m := filepath.Join(b.Root(), "r", MetricsFile)
		whole := file[:bytes.LastIndexByte(file, '\n')+1]
		n := bytes.Count(whole, []byte("\n"))
		index := garbage
		if !foreign {
			// The index of this file (or, not current, of what it was
			// before its last write), of which only keep entries reached
			// the disk, then as many zeros as garbage has bytes.
			mf, err := os.Open(m)
			if err != nil {
				t.Fatal(err)
			}
			stamp, err := stampOf(mf)
			mf.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !current {
				stamp.size--
			}
			index = stamp.header()
			for i, c := range whole {
				if c == '\n' && int(keep) > 0 {
					index = binary.LittleEndian.AppendUint64(index, uint64(i+1))
					keep--
				}
			}
			index = append(index, make([]byte, len(garbage))...)
		}
		if err := os.WriteFile(filepath.Join(b.Root(), "r", metricsIndexFile), index, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := NewRun(b, "r").AppendMetrics(ctx, n, []json.RawMessage{json.RawMessage(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(m)
		if err != nil || string(raw) != string(whole)+"{\"n\":1}\n" {
			t.Fatalf("metrics.jsonl %q (%v), want %q and the new line", raw, err, whole)
		}
		idx, _ := os.ReadFile(filepath.Join(b.Root(), "r", metricsIndexFile))
		want := metricsIndexHeader
		for i, c := range raw {
			if c == '\n' {
				if len(idx) < want+8 || binary.LittleEndian.Uint64(idx[want:]) != uint64(i+1) {
					t.Fatalf("index %x does not end line %d at %d", idx, n, i+1)
				}
				want += 8
			}
		}
		if len(idx) != want {
			t.Fatalf("index of %d bytes, want %d", len(idx), want)
		}
	})
}

func FuzzCheckpointURI(f *testing.F) {
	for _, s := range []string{
		"/data/runs/demo/checkpoint_000003", "/data/runs/demo/checkpoint_000003/", "/demo/checkpoint_1234567",
		"file:///data/demo/checkpoint_000001", "s3://b/p/q/demo/checkpoint_000010", "s3://b/checkpoint_000010",
		"/data/../checkpoint_000001", "//checkpoint_000001", "s3://checkpoint_000001", " s3://b/r/checkpoint_000002 ",
		"/data/runs/demo/checkpoint_99999999999999999999", "/a/b/checkpoint_-00001",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		storagePath, run, seq, err := splitCheckpointURI(uri)
		if err != nil {
			return
		}
		if seq < 0 || run == "." || run == ".." || strings.Contains(run, "/") {
			t.Fatalf("split(%q) = %q, %q, %d", uri, storagePath, run, seq)
		}
		if !strings.HasSuffix(strings.TrimRight(strings.TrimSpace(uri), "/"), "/"+CheckpointDir(seq)) {
			t.Fatalf("split(%q): seq %d is not its last element", uri, seq)
		}
		// Where the storage path opens (without touching anything), the
		// checkpoint's URI as the run names it splits back the same.
		var b Backend
		if strings.HasPrefix(storagePath, "s3://") {
			bucket, prefix, err := parseS3Path(storagePath)
			if err != nil {
				return
			}
			b = &S3{bucket: bucket, prefix: prefix}
		} else if b, err = Open(context.Background(), storagePath); err != nil {
			return
		}
		if run == "" && !strings.HasPrefix(storagePath, "s3://") || validKey(NewRun(b, run).key(CheckpointDir(seq))) != nil {
			return
		}
		u := NewRun(b, run).CheckpointURI(seq)
		s2, r2, seq2, err := splitCheckpointURI(u)
		if err != nil || r2 != run || seq2 != seq {
			t.Fatalf("split(%q) = %q %q %d; its URI %q splits to %q %q %d %v", uri, storagePath, run, seq, u, s2, r2, seq2, err)
		}
	})
}

func FuzzStoragePath(f *testing.F) {
	for _, s := range []string{
		"s3://bucket/prefix", "s3://bucket", "s3://bucket/", "s3:///prefix", "s3://b//x", "s3://b/./x", "s3://Bucket_1/a/b",
		"s3://b?x/y", "/data/runs", "file:///data/runs", "file://host/data", "relative/dir", "gs://b/x", " /trimmed ", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if strings.HasPrefix(strings.TrimSpace(p), "s3://") {
			// (Open would load the AWS config; the parsing is what matters.)
			bucket, prefix, err := parseS3Path(strings.TrimSpace(p))
			if err != nil {
				wantErrIs(t, err, ErrMisconfigured)
				return
			}
			if bucket == "" || strings.ContainsAny(bucket, "/?#% ") || !utf8.ValidString(bucket) ||
				prefix != "" && (validKey(prefix) != nil || strings.HasPrefix(prefix, "/") || strings.HasSuffix(prefix, "/")) {
				t.Fatalf("parseS3Path(%q) = %q, %q", p, bucket, prefix)
			}
			s := &S3{bucket: bucket, prefix: prefix}
			b2, p2, err := parseS3Path(s.URI(""))
			if err != nil || b2 != bucket || p2 != prefix {
				t.Fatalf("parseS3Path(%q) = %q %q; its URI %q parses to %q %q %v", p, bucket, prefix, s.URI(""), b2, p2, err)
			}
			return
		}
		b, err := Open(context.Background(), p)
		if err != nil {
			wantErrIs(t, err, ErrMisconfigured)
			return
		}
		l, ok := b.(*Local)
		if !ok || !filepath.IsAbs(l.Root()) || filepath.Clean(l.Root()) != l.Root() || l.URI("") != l.Root() {
			t.Fatalf("Open(%q) = %#v", p, b)
		}
		if got := l.URI("a/b"); got != filepath.Join(l.Root(), "a", "b") {
			t.Fatalf("URI %q", got)
		}
	})
}
