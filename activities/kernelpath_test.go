package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/storage"
)

func TestKernelPathChanged(t *testing.T) {
	const a, b = "clones=avx512f packed=avx512 openblas=SkylakeX", "clones=avx2+fma packed=off openblas=Zen"
	for _, tt := range []struct {
		written string
		paths   []string
		want    string // "" or a part of the message
	}{
		{a, []string{a, a}, ""},
		{"", []string{a, b}, ""},  // a checkpoint of an older version
		{a, []string{"", ""}, ""}, // ranks that do not know theirs (GPU, Python)
		{a, []string{b, b}, `checkpoint 7 was written on kernel path "` + a + `"; every rank restores on "` + b + `"`},
		{a, []string{a, b, b}, `; ranks 1, 2 on "` + b + `"`},
		{a, []string{b, a}, `; rank 0 on "` + b + `"`},
	} {
		got := kernelPathChanged(7, tt.written, tt.paths)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("kernelPathChanged(%q, %q) = %q, want %q", tt.written, tt.paths, got, tt.want)
		}
		if got != "" && !strings.Contains(got, "not bit-identical") {
			t.Errorf("%q does not say what it costs", got)
		}
	}
}

// TestRankRestoreOnOtherKernels: a checkpoint records the kernel path of
// the rank that committed it; a group restoring one written on another
// path (another processor kind) tells the workflow so, one written on its
// own path says nothing.
func TestRankRestoreOnOtherKernels(t *testing.T) {
	t.Parallel()
	// The path a report writes into the manifest.
	dir := t.TempDir()
	wf := newFakeWorkflow(1, 1)
	if _, err := runRank(t, newTestActivities(t, wf), rankInput("act-report", dir, "writes", 0, 1, `{"reports":1}`), nil); err != nil {
		t.Fatal(err)
	}
	b, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := storage.NewRun(b, "writes").ListCheckpoints(context.Background())
	if err != nil || len(ms) != 1 {
		t.Fatalf("checkpoints %v, %v", ms, err)
	}
	if got := ms[0].Meta[metaKernelPath]; got != compute.KernelPath() {
		t.Errorf("the manifest's kernel path %q, want this process's %q", got, compute.KernelPath())
	}
	if got := ms[0].Meta["report"]; got != "0" {
		t.Errorf("the user's meta %v lost", ms[0].Meta)
	}

	for _, tt := range []struct {
		name, written string
		want          string
	}{
		{"same-path", compute.KernelPath(), ""},
		{"other-path", "clones=avx512f packed=avx512 openblas=SkylakeX", `checkpoint 1 was written on kernel path "clones=avx512f packed=avx512 openblas=SkylakeX"; every rank restores on "` + compute.KernelPath() + `"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			runName := "kp-" + tt.name
			src := t.TempDir()
			if err := os.WriteFile(filepath.Join(src, "state"), []byte("1"), 0o644); err != nil {
				t.Fatal(err)
			}
			b, err := storage.Open(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			man := storage.Manifest{Seq: 1, Attempt: 1, Meta: map[string]string{metaKernelPath: tt.written, "user": "kept"}}
			if _, err := storage.NewRun(b, runName).CommitCheckpoint(context.Background(), 1, src, man); err != nil {
				t.Fatal(err)
			}
			wf := newFakeWorkflow(2, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := 0; r < 2; r++ {
				wg.Go(func() {
					g := t.Name()
					in := rankInput("act-restore", dir, runName, r, 2, fmt.Sprintf(`{"gate":%q}`, g))
					in.Attempt = 2
					in.Checkpoints = candidates(dir, runName, 1)
					var once sync.Once
					_, errs[r] = runRank(t, newTestActivities(t, wf), in, func(p api.Progress) {
						if p.Phase == api.PhaseTrain {
							once.Do(func() { close(gate(fmt.Sprintf("%s/%d", g, r))) })
						}
					})
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			restoredMu.Lock()
			got := restored[runName+"/0"]
			restoredMu.Unlock()
			if got == nil || got.Seq != 1 {
				t.Fatalf("restored %+v", got)
			}
			wf.mu.Lock()
			defer wf.mu.Unlock()
			if len(wf.restoreds) != 1 {
				t.Fatalf("restored Updates %+v", wf.restoreds)
			}
			kp := wf.restoreds[0].KernelPathChanged
			t.Logf("kernel_path_changed: %q", kp)
			if (tt.want == "") != (kp == "") || !strings.Contains(kp, tt.want) {
				t.Errorf("kernel_path_changed %q, want %q", kp, tt.want)
			}
		})
	}
}
