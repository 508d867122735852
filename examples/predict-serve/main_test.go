package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/examples/internal/local"
)

// TestExample runs the example as `go run ./examples/predict-serve` does
// from the repository root: BatchPredict writes one row per input row
// with the label passed through, and the server answers the one row it is
// sent with the class the example's customer (new, on the basic plan,
// five support calls) should get: churned.
func TestExample(t *testing.T) {
	o := local.Run(t, 3*time.Minute, func(ctx context.Context, out io.Writer) (*outcome, error) {
		return run(ctx, out, "../data", t.TempDir())
	})
	if o.Batch.RowsOut != 100 || len(o.Batch.Files) == 0 {
		t.Fatalf("BatchPredict wrote %d rows in %v, want churn_valid.csv's 100", o.Batch.RowsOut, o.Batch.Files)
	}
	b, err := os.ReadFile(filepath.Join(o.Batch.Output, o.Batch.Files[0]))
	if err != nil {
		t.Fatal(err)
	}
	if head, _, _ := strings.Cut(string(b), "\n"); !strings.HasPrefix(head, "churned,") || !strings.Contains(head, "class") {
		t.Errorf("predictions' header %q, want churned first, then the model's outputs (class among them)", head)
	}
	outs, _ := o.Answer["outputs"].([]any)
	var label any
	for _, x := range outs {
		if m, _ := x.(map[string]any); m["name"] == "label" {
			if d, _ := m["data"].([]any); len(d) == 1 {
				label = d[0]
			}
		}
	}
	if label != "yes" {
		t.Errorf("the server's answer %v: label %v, want yes", o.Answer, label)
	}
}
