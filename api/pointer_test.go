package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestParsePointer: what Promote writes reads back; what it cannot have
// written is an error saying what is wrong.
func TestParsePointer(t *testing.T) {
	score := 0.93
	p, err := ParsePointer([]byte(`{"schedule":"nightly","run":"nightly-7","checkpoint":"s3://b/runs/nightly-7/checkpoint_000003","seq":3,"score_attribute":"acc","score":0.93,"time":"2026-11-27T03:00:00Z"}`))
	if err != nil || p.Checkpoint != "s3://b/runs/nightly-7/checkpoint_000003" || p.Seq != 3 || p.Score == nil || *p.Score != score || p.Time.IsZero() {
		t.Errorf("%+v %v", p, err)
	}
	for _, tt := range []struct{ in, want string }{
		{``, "not a pointer file"},
		{`[]`, "not a pointer file"},
		{`{"run":"r"}`, "names no checkpoint"},
		{`{"checkpoint":"/r/checkpoint_000001","seq":-1}`, "seq -1 is negative"},
		{`{"checkpoint":"/r/checkpoint_000001\n"}`, "control characters"},
		{`{"checkpoint":"` + strings.Repeat("a", 5000) + `"}`, "5000 bytes: at most 4096"},
		{`{"checkpoint":"/c","schedule":"` + strings.Repeat("a", MaxPointerBytes) + `"}`, "at most 65536"},
		{`{"checkpoint":"/c","score":1e999}`, "not a pointer file"},
	} {
		if _, err := ParsePointer([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.60s: %v, want %q", tt.in, err, tt.want)
		}
	}
}

// FuzzPointer: ParsePointer never panics, and a pointer it accepts writes
// as JSON that it reads back the same.
func FuzzPointer(f *testing.F) {
	for _, s := range []string{
		`{"schedule":"nightly","run":"nightly-7","checkpoint":"s3://b/runs/nightly-7/checkpoint_000003","seq":3,"score_attribute":"acc","score":0.93,"time":"2026-11-27T03:00:00Z"}`,
		`{"checkpoint":"/runs/r/checkpoint_000001","seq":1,"time":"2026-11-27T03:00:00.123456789+01:00"}`,
		`{"checkpoint":"/runs/r/promoted.json","seq":0,"score":-0}`,
		`{"checkpoint":"/c","seq":9223372036854775807,"score":1e308}`,
		`{"checkpoint":"\u00e9\ud83d\ude00","run":null}`,
		`{"checkpoint":"/c","seq":-1}`,
		`{"checkpoint":` + strings.Repeat("[", 64) + `}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePointer(b)
		if err != nil {
			return
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("%+v does not marshal: %v", p, err)
		}
		back, err := ParsePointer(out)
		if err != nil {
			t.Fatalf("%s reads as %+v, which writes as %s, which does not read: %v", b, p, out, err)
		}
		if !back.Time.Equal(p.Time) {
			t.Fatalf("time %v reads back as %v", p.Time, back.Time)
		}
		back.Time = p.Time // Equal, perhaps not in the same *Location
		if !reflect.DeepEqual(back, p) {
			t.Fatalf("%+v reads back as %+v", p, back)
		}
	})
}
