package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Model infos as checkpoints written before ModelInfo moved to api hold
// them: the state blobs of builtin's TestTabularClassification,
// TestCNNOnImageFolder and TestTabularTaskOverride, copied byte for byte.
var existingModelInfos = []struct {
	json string
	want ModelInfo
}{
	{`{"function":"tabular-mlp","model":"tabular-mlp","task":"classification","input":[7],"outputs":3,"hidden":[64,32],"classes":["high","low","mid"],"target_std":1}`,
		ModelInfo{Function: "tabular-mlp", Model: "tabular-mlp", Task: "classification", Input: []int{7}, Outputs: 3, Hidden: []int{64, 32},
			Classes: []string{"high", "low", "mid"}, TargetStd: 1}},
	{`{"function":"mnist-cnn","model":"cnn","task":"classification","input":[3,16,16],"outputs":3,"classes":["bars","dots","flat"],"target_std":1}`,
		ModelInfo{Function: "mnist-cnn", Model: "cnn", Task: "classification", Input: []int{3, 16, 16}, Outputs: 3,
			Classes: []string{"bars", "dots", "flat"}, TargetStd: 1}},
	{`{"function":"tabular-mlp","model":"tabular-mlp","task":"regression","input":[7],"outputs":1,"hidden":[64,32],"target_mean":102.33693400621418,"target_std":35.47308043382691}`,
		ModelInfo{Function: "tabular-mlp", Model: "tabular-mlp", Task: "regression", Input: []int{7}, Outputs: 1, Hidden: []int{64, 32},
			TargetMean: 102.33693400621418, TargetStd: 35.47308043382691}},
}

// An existing checkpoint's model info decodes into ModelInfo unchanged,
// and encodes back to the same bytes.
func TestModelInfoOfExistingCheckpoints(t *testing.T) {
	for _, tt := range existingModelInfos {
		mi, err := ParseModelInfo([]byte(tt.json))
		if err != nil {
			t.Fatalf("%s: %v", tt.json, err)
		}
		if !reflect.DeepEqual(mi, tt.want) {
			t.Errorf("%s decodes to %+v, want %+v", tt.json, mi, tt.want)
		}
		if b, err := json.Marshal(mi); err != nil || string(b) != tt.json {
			t.Errorf("encodes to %s (%v), want %s", b, err, tt.json)
		}
	}
}

// What a model info declares is bounded, and the error names the field and
// its value.
func TestModelInfoCheck(t *testing.T) {
	for _, tt := range []struct {
		json, says string
	}{
		{`{"task":"ranking","input":[3],"outputs":1}`, `task "ranking"`},
		{`{"task":"regression","input":[3],"outputs":2}`, "regression of 2 outputs"},
		{`{"task":"classification","input":[3],"outputs":10000000000,"classes":["a"]}`, "outputs 10000000000"},
		{`{"task":"classification","input":[3],"outputs":3,"classes":["a"]}`, "3 outputs names 1 classes"},
		{`{"task":"regression","input":[],"outputs":1}`, "input shape []"},
		{`{"task":"regression","input":[1,1,1,1,1,1,1,1,1],"outputs":1}`, "input shape [1 1 1 1 1 1 1 1 1]"},
		{`{"task":"regression","input":[0],"outputs":1}`, "input shape [0]"},
		{`{"task":"regression","input":[-4,-4],"outputs":1}`, "input shape [-4 -4]"},
		{`{"task":"regression","input":[65536,65536,65536,65536],"outputs":1}`, "input shape [65536 65536 65536 65536]"},
		{`{"task":"regression","input":[4294967296,4294967296],"outputs":1}`, "input shape [4294967296 4294967296]"},
		{`{"task":"regression","input":[3],"outputs":1,"hidden":[64,0]}`, "hidden[1] = 0"},
		{`{"task":"regression","input":[3],"outputs":1,"hidden":[10000000]}`, "hidden[0] = 10000000"},
		{`{"task":"regression","input":[3],"outputs":1,"hidden":[` + strings.Repeat("1,", 64) + `1]}`, "65 hidden layers"},
		{`{"task":"regression","input":"x","outputs":1}`, "model info: json"},
	} {
		_, err := ParseModelInfo([]byte(tt.json))
		if err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v, want an error saying %q", tt.json, err, tt.says)
		}
	}
}

// FuzzModelInfo: any bytes a checkpoint's model info blob holds either
// fail ParseModelInfo or declare a network within the bounds (so that a
// predictor may allocate what they say), and survive a JSON round trip.
// Nothing panics.
func FuzzModelInfo(f *testing.F) {
	for _, tt := range existingModelInfos {
		f.Add([]byte(tt.json))
	}
	for _, s := range []string{
		// Issue 30's row 2 in this format: sizes that pass a JSON decode
		// and would allocate tens of GB.
		`{"function":"tabular-mlp","model":"tabular-mlp","task":"classification","input":[10000000000],"outputs":10000000000,"hidden":[10000000000],"classes":["a","b"]}`,
		`{"model":"resnet18","task":"classification","input":[3,40000,40000],"outputs":2,"classes":["a","b"]}`,
		`{"model":"mlp","task":"regression","input":[9223372036854775807,2],"outputs":1}`,
		`{"task":"regression","input":[1],"outputs":1,"target_mean":1e308,"target_std":-0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		mi, err := ParseModelInfo(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "model info: ") {
				t.Fatalf("error %q does not say what it is about", err)
			}
			return
		}
		if n := mi.InputValues(); n < 1 || n > MaxModelInputValues {
			t.Fatalf("input %v passed Check with %d values", mi.Input, n)
		}
		if mi.Outputs < 1 || mi.Outputs > MaxModelOutputs || len(mi.Hidden) > MaxModelHiddenLayers {
			t.Fatalf("%+v passed Check", mi)
		}
		for _, h := range mi.Hidden {
			if h < 1 || h > MaxModelHiddenWidth {
				t.Fatalf("hidden %v passed Check", mi.Hidden)
			}
		}
		// Empty lists are left out of the JSON (omitempty): nil once read back.
		if len(mi.Hidden) == 0 {
			mi.Hidden = nil
		}
		if len(mi.Classes) == 0 {
			mi.Classes = nil
		}
		out, err := json.Marshal(mi)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseModelInfo(out)
		if err != nil || !reflect.DeepEqual(back, mi) {
			t.Fatalf("round trip: %+v → %s → %+v, %v", mi, out, back, err)
		}
	})
}
