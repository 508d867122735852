// Package local starts what every example runs on: a Temporal dev server
// and a worker in the example's own process (app.StartLocal), and a
// storage directory; and runs an example as its test.
package local

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/app"
)

// Quiet is the examples' logger: errors only, to stderr.
func Quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// Start starts a dev server (in memory, no Web UI, a free port) and a
// worker of options w on it. An empty storage becomes a new temporary
// directory named after the example. Stop the Local when done.
func Start(example string, w app.WorkerOptions, storage string) (*app.Local, string, error) {
	if storage == "" {
		d, err := os.MkdirTemp("", "tempotrain-"+example+"-")
		if err != nil {
			return nil, "", err
		}
		storage = d
	}
	l, err := app.StartLocal(app.LocalOptions{Worker: &w, Logger: Quiet()})
	if err != nil {
		return nil, "", err
	}
	return l, storage, nil
}

// Run runs an example's run function as its test does: within timeout,
// what it prints logged, an error failing the test.
func Run[T any](t testing.TB, timeout time.Duration, run func(ctx context.Context, out io.Writer) (T, error)) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	res, err := run(ctx, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// StorageFlag is every example's -storage flag.
func StorageFlag() *string {
	return flag.String("storage", "", "storage path (default: a new temporary directory)")
}

// DataFlag is the -data flag of the examples that read examples/data,
// run from the repository's root.
func DataFlag() *string {
	return flag.String("data", "examples/data", "directory of churn_train.csv and churn_valid.csv")
}
