package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The report pairs each of our measurements with PyTorch's and gives medians
// and ratios.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	ours := `{"side":"tempotrain","kind":"gemm","precision":"fp32","n":4096,"tflops":45}
{"side":"tempotrain","kind":"gemm","precision":"fp32","n":4096,"tflops":47}
{"side":"tempotrain","kind":"gemm","precision":"fp32","n":4096,"tflops":46}
{"side":"tempotrain","kind":"train","model":"cnn","precision":"fp32","graph":true,"samples_per_s":300000,"test_accuracy":0.85}
{"side":"tempotrain","kind":"train","model":"cnn","precision":"fp32","samples_per_s":150000,"test_accuracy":0.86}
`
	peer := `not JSON: a warning line
{"side":"pytorch","kind":"gemm","precision":"fp32","n":4096,"tflops":50}
{"side":"pytorch","kind":"train","model":"cnn","precision":"fp32","samples_per_s":200000,"test_accuracy":0.87}
`
	for name, s := range map[string]string{"ours.jsonl": ours, "peer.jsonl": peer} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	if err := writeReport(&b, []string{filepath.Join(dir, "ours.jsonl"), filepath.Join(dir, "peer.jsonl")}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"GEMM TFLOP/s fp32 46.0 50.0 0.92",
		"cnn samples/s (graph) fp32 300000 200000 1.50 0.8500 / 0.8700",
		"cnn samples/s (eager) fp32 150000 200000 0.75 0.8600 / 0.8700",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
