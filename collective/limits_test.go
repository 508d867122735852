package collective

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// A peer that announces an enormous AllGather (a bug, or an authenticated
// peer gone bad) fails the operation on every rank instead of making each
// allocate it: the total is bounded by Options.MaxGatherBytes (1 GiB by
// default; it was 1 TiB). Here the bound is 1 MiB and rank 1 gathers 4 MiB:
// had the ranks gone on, each would have allocated 4 MiB. Not parallel: the
// allocation count is the process's.
func TestAllGatherBounded(t *testing.T) {
	if got := (Options{}).withDefaults().MaxGatherBytes; got != DefaultMaxGather || DefaultMaxGather != 1<<30 {
		t.Fatalf("default MaxGatherBytes %d", got)
	}
	comms := newGroup(t, 3, Options{MaxGatherBytes: 1 << 20})
	big := make([]byte, 4<<20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	errs := each(3, func(r int) error {
		in := big[:8]
		if r == 1 {
			in = big
		}
		_, err := comms[r].AllGather(context.Background(), in)
		return err
	})
	runtime.ReadMemStats(&after)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "MaxGatherBytes") {
			t.Errorf("rank %d: %v, want the gather refused for its size", r, err)
		}
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Errorf("the ranks allocated %d KiB for a refused gather", grew>>10)
	}
}

// Region files whose creating process is gone are swept; those of live
// processes, and files that are not regions, stay.
func TestSweepDeadRegions(t *testing.T) {
	t.Parallel()
	if !shmSupported {
		t.Skip("no shared memory links on " + runtime.GOOS)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]bool{ // name: swept
		fmt.Sprintf("%s%d-00112233", shmNamePrefix, dead.Process.Pid): true,
		fmt.Sprintf("%s%d-44556677", shmNamePrefix, os.Getpid()):      false,
		fmt.Sprintf("%s%d-8899aabb", shmNamePrefix, os.Getppid()):     false,
		"another-program-1-00":       false,
		shmNamePrefix + "notapid-00": false,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed := sweepDeadRegions([]string{dir})
	var want []string
	for name, swept := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if swept != os.IsNotExist(err) {
			t.Errorf("%s: swept %v, want %v", name, os.IsNotExist(err), swept)
		}
		if swept {
			want = append(want, filepath.Join(dir, name))
		}
	}
	if !slices.Equal(removed, want) {
		t.Errorf("sweep reported %v, want %v", removed, want)
	}
}
