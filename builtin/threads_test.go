package builtin

import (
	"context"
	"testing"

	"github.com/tempotrain/tempotrain/train/trainrt"
)

// TestThreadsFromCPUs: Threads defaults to the rank's CPUs
// (resources_per_worker), a config's own Threads wins, and a rank without
// CPUs gets 1.
func TestThreadsFromCPUs(t *testing.T) {
	for _, tt := range []struct{ cpus, threads, want int }{{4, 0, 4}, {4, 2, 2}, {0, 0, 1}} {
		tc := trainrt.NewContext(context.Background(), trainrt.ContextInfo{WorldSize: 1, Device: -1, CPUs: tt.cpus}, nil, nil, nil)
		c := Config{Threads: tt.threads}
		c.rankThreads(tc)
		c.setDefaults()
		if c.Threads != tt.want {
			t.Errorf("CPUs %d, config threads %d: Threads %d, want %d", tt.cpus, tt.threads, c.Threads, tt.want)
		}
	}
}
