package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/builtin"
)

// TestMLPConfig: the flags make a config tabular-mlp knows every field of,
// and bad flags are refused naming their value.
func TestMLPConfig(t *testing.T) {
	m := mlpFlags{epochs: 3, batch: 64, lr: 0.01, optimizer: "adam", hidden: "32, 16"}
	cfg, err := m.config(2)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(cfg)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var tc builtin.TabularConfig
	if err := dec.Decode(&tc); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if tc.Epochs != 3 || tc.BatchSize != 64 || tc.BatchSemantics != builtin.GlobalBatch || tc.Optimizer != "adam" ||
		tc.LR != 0.01 || len(tc.Hidden) != 2 || tc.Hidden[0] != 32 || tc.Hidden[1] != 16 || tc.Momentum != nil {
		t.Fatalf("config %s decodes to %+v", b, tc)
	}
	for _, bad := range []struct {
		m    mlpFlags
		want string
	}{
		{mlpFlags{batch: 64, optimizer: "sgd", hidden: "32,x"}, `"x"`},
		{mlpFlags{batch: 64, optimizer: "sgd", hidden: "0"}, `"0"`},
		{mlpFlags{batch: 64, optimizer: "rmsprop", hidden: "8"}, `"rmsprop"`},
		{mlpFlags{batch: 1, optimizer: "sgd", hidden: "8"}, "-batch 1"},
	} {
		if _, err := bad.m.config(2); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: error %v, want one naming %s", bad.m, err, bad.want)
		}
	}
}

// TestMLPBothSides runs the job's two sides on a small table: Fit of
// tabular-mlp (runChild: the dev server in this process) and mlp_e2e.py,
// the same config; both write a model and reach the same accuracy on the
// valid rows, within what different initial weights and orders give.
func TestMLPBothSides(t *testing.T) {
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import torch, pandas").Run(); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_TORCH") == "1" {
			t.Fatalf("needs %s with torch and pandas (TEMPOTRAIN_REQUIRE_TORCH=1): %v", python, err)
		}
		t.Skipf("needs %s with torch and pandas (apt-get install python3-torch python3-pandas): %v", python, err)
	}
	dir := t.TempDir()
	trainCSV, validCSV := filepath.Join(dir, "train.csv"), filepath.Join(dir, "valid.csv")
	if err := writeCSV(trainCSV, 6000, 1); err != nil {
		t.Fatal(err)
	}
	if err := writeCSV(validCSV, 3000, 2); err != nil {
		t.Fatal(err)
	}
	m := mlpFlags{epochs: 4, batch: 64, lr: 0.05, optimizer: "sgd", hidden: "32"}
	cfg, err := m.config(2)
	if err != nil {
		t.Fatal(err)
	}
	cj, _ := json.Marshal(cfg)

	script := filepath.Join(dir, "mlp_e2e.py")
	if err := os.WriteFile(script, []byte(mlpScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg["threads"] = 1
	pj, _ := json.Marshal(cfg)
	model := filepath.Join(dir, "model.pt")
	var peer mlpPeer
	if _, err := timed(exec.Command(python, script, trainCSV, validCSV, "label", string(pj), model), &peer); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(model); err != nil || st.Size() == 0 {
		t.Fatalf("the peer's model %s: %v", model, err)
	}

	ours, err := runChild(&flags{child: "ours", fn: builtin.TabularMLP, train: trainCSV, valid: validCSV,
		out: filepath.Join(dir, "runs"), config: string(cj), world: 2})
	if err != nil {
		t.Fatal(err)
	}
	if ours.Model == "" || ours.Metrics["epoch"] != 4 {
		t.Fatalf("ours: model %q after epoch %v, want a checkpoint after epoch 4", ours.Model, ours.Metrics["epoch"])
	}
	oa, pa := ours.Metrics["valid_accuracy"], peer.ValidAccuracy
	t.Logf("valid accuracy: ours %.4f, PyTorch %.4f; valid loss ours %.4f, PyTorch %.4f", oa, pa, ours.Metrics["valid_loss"], peer.ValidLoss)
	if pa < 0.7 || oa < 0.7 || math.Abs(oa-pa) > 0.03 {
		t.Fatalf("valid accuracy: ours %.4f, PyTorch %.4f: want both above 0.7 and within 0.03", oa, pa)
	}
	if d := math.Abs(ours.Metrics["valid_loss"] - peer.ValidLoss); d > 0.05 {
		t.Fatalf("valid loss: ours %.4f, PyTorch %.4f: differ by %.4f", ours.Metrics["valid_loss"], peer.ValidLoss, d)
	}
}
