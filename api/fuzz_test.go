package api

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzFitInput: any JSON a user or the Web UI sends either fails Validate
// with an *InvalidInputError naming a field, or is an input that survives a
// JSON round trip still valid. Nothing panics.
func FuzzFitInput(f *testing.F) {
	for _, s := range []string{
		`{"train_func":"mnist-mlp","scaling":{"num_workers":2},"run":{"storage_path":"/tmp/runs"}}`,
		`{"train_func":"f","scaling":{"min_workers":2,"max_workers":4,"last_call":"3s"},"run":{"storage_path":"s3://b/p","name":"x","failure":{"max_failures":-1,"heartbeat_timeout":"10s"}}}`,
		`{"train_func":"tabular-mlp","scaling":{"num_workers":1},"run":{"storage_path":"/r"},"datasets":{"train":{"uri":"/d/*.csv","label":"y","categorical":["c"]}},"preprocessors":[{"type":"standard_scaler","columns":["a"]}]}`,
		`{"train_func":"f","scaling":{"num_workers":0}}`,
		`{"config":{"a":1},"train_func":"f","scaling":{"num_workers":1},"run":{"storage_path":"/r","checkpoint":{"num_to_keep":2,"score_attribute":"acc","score_order":"min"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var in FitInput
		if json.Unmarshal(b, &in) != nil {
			return
		}
		in = in.WithDefaults()
		err := in.Validate()
		if err != nil {
			var iie *InvalidInputError
			if !errors.As(err, &iie) || iie.Field == "" {
				t.Fatalf("Validate error %v names no field", err)
			}
			return
		}
		out, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var back FitInput
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("a valid input does not read back: %v\n%s", err, out)
		}
		if err := back.WithDefaults().Validate(); err != nil {
			t.Fatalf("a valid input is invalid after a round trip: %v\n%s", err, out)
		}
	})
}

// FuzzDuration: a Duration that parses prints as something that parses to
// the same value.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{`"1s"`, `"1h30m"`, `"0"`, `1000000000`, `"-5m"`, `""`, `null`, `"9999999h"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Duration
		if d.UnmarshalJSON(b) != nil {
			return
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back Duration
		if err := back.UnmarshalJSON(out); err != nil || back != d {
			t.Fatalf("%s -> %v -> %s -> %v, %v", b, d, out, back, err)
		}
	})
}
