package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/computetest"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// recorder is the test's trainrt.Reporter: it "commits" rank 0's checkpoints
// by copying them under its own directory, as the runtime's storage would.
type recorder struct {
	dir string
	// stopAfter makes the report of that epoch fail after the commit,
	// as a rank killed right after a checkpoint.
	stopAfter int

	mu      sync.Mutex
	metrics []train.Metrics
	ckpts   []*train.Checkpoint
}

var errInterrupted = errors.New("interrupted by the test")

func (rec *recorder) Report(_ context.Context, m train.Metrics, ck *train.Checkpoint) error {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.metrics = append(rec.metrics, m)
	if ck != nil {
		dst := filepath.Join(rec.dir, fmt.Sprintf("checkpoint_%06d", len(rec.ckpts)+1))
		if err := copyDir(ck.Dir, dst); err != nil {
			return err
		}
		rec.ckpts = append(rec.ckpts, &train.Checkpoint{Dir: dst, Seq: len(rec.ckpts) + 1, Metrics: m, Meta: ck.Meta})
	}
	if rec.stopAfter > 0 && int(m["epoch"]) == rec.stopAfter {
		return errInterrupted
	}
	return nil
}

func (rec *recorder) last() *train.Checkpoint {
	if len(rec.ckpts) == 0 {
		return nil
	}
	return rec.ckpts[len(rec.ckpts)-1]
}

func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// group makes the collective group of one attempt: either real TCP comms,
// handed to the training function through train.Context as the runtime does,
// or other Communicators passed to Run.
type group func(t *testing.T, world int) (real []*collective.Comm, comms []compute.Communicator, abort func())

func fakeGroup(_ *testing.T, world int) ([]*collective.Comm, []compute.Communicator, func()) {
	g := computetest.NewFakeGroup(world)
	c := make([]compute.Communicator, world)
	for r := range c {
		c[r] = g.Rank(r)
	}
	return nil, c, g.Abort
}

// tcpGroup connects world ranks over loopback with the real collective.
func tcpGroup(t *testing.T, world int) ([]*collective.Comm, []compute.Communicator, func()) {
	comms := computetest.ConnectTCP(t, world)
	return comms, nil, func() {
		for _, c := range comms {
			c.Abort()
		}
	}
}

// attempt runs one attempt of a run: world ranks as goroutines, each with
// its own train.Context, resuming from ck when not nil. It returns rank 0's
// recorder and the first error of any rank.
func attempt(t *testing.T, newGroup group, model string, world int, cfg any, ck *train.Checkpoint, stopAfter int) (*recorder, error) {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	real, comms, abort := newGroup(t, world)
	recs := make([]*recorder, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		recs[r] = &recorder{dir: t.TempDir()}
		if r == 0 {
			// Rank 0 fails right after committing the checkpoint; the abort
			// then takes the other ranks down wherever they are.
			recs[r].stopAfter = stopAfter
		}
		info := trainrt.ContextInfo{RunName: t.Name(), Attempt: 1, WorldRank: r, WorldSize: world,
			LocalRank: r, LocalWorldSize: world, Config: raw, Checkpoint: ck, ScratchDir: t.TempDir(), Device: -1}
		var tc *train.Context
		if real != nil {
			tc = trainrt.NewContext(context.Background(), info, real[r], recs[r], nil)
		} else {
			tc = trainrt.NewContext(context.Background(), info, nil, recs[r], nil)
		}
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			if real != nil {
				errs[r] = Func(model)(context.Background(), tc)
			} else {
				errs[r] = Run(context.Background(), tc, comms[r], model, Options{})
			}
			if errs[r] != nil {
				// A rank that fails takes the group down, as a dead process would.
				abort()
			}
		}(r)
	}
	wg.Wait()
	return recs[0], errors.Join(errs...)
}

// needData skips a test without the Fashion-MNIST files, or fails it when
// TEMPOTRAIN_REQUIRE_FASHION_MNIST=1 (CI sets it: there, a missing dataset
// is a broken setup, not a reason to test less).
func needData(t *testing.T) {
	if _, err := os.Stat(filepath.Join(format.DefaultFashionMNISTDir, "train-images-idx3-ubyte.gz")); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_FASHION_MNIST") == "1" {
			t.Fatalf("needs Fashion-MNIST (apt-get install dataset-fashion-mnist; TEMPOTRAIN_REQUIRE_FASHION_MNIST=1): %v", err)
		}
		t.Skipf("needs Fashion-MNIST (apt-get install dataset-fashion-mnist): %v", err)
	}
}

func stateBytes(t *testing.T, ck *train.Checkpoint) []byte {
	t.Helper()
	b, err := ck.ReadFile(CheckpointFile)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// paramsOf returns the parameter tensors of a checkpoint.
func paramsOf(t *testing.T, ck *train.Checkpoint) []compute.StateTensor {
	t.Helper()
	st, err := compute.LoadFile(ck.Path(CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	var ps []compute.StateTensor
	for _, tn := range st.Tensors {
		if len(tn.Name) > 6 && tn.Name[:6] == "param." {
			ps = append(ps, tn)
		}
	}
	return ps
}

func testExactResume(t *testing.T, newGroup group) {
	needData(t)
	cfg := Config{Epochs: 3, BatchSize: 64, LR: 0.05, Seed: 7, TrainLimit: 2048, TestLimit: 512, Schedule: "cosine"}

	full, err := attempt(t, newGroup, "mlp", 2, cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.ckpts) != 3 {
		t.Fatalf("uninterrupted run: %d checkpoints, want 3", len(full.ckpts))
	}

	first, err := attempt(t, newGroup, "mlp", 2, cfg, nil, 1)
	if !errors.Is(err, errInterrupted) {
		t.Fatalf("interrupted attempt: err = %v, want the interruption", err)
	}
	if len(first.ckpts) != 1 {
		t.Fatalf("interrupted attempt: %d checkpoints, want 1", len(first.ckpts))
	}
	second, err := attempt(t, newGroup, "mlp", 2, cfg, first.last(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.ckpts) != 2 || int(second.metrics[0]["epoch"]) != 2 {
		t.Fatalf("resumed attempt: %d checkpoints, first report of epoch %v; want 2 from epoch 2", len(second.ckpts), second.metrics[0]["epoch"])
	}

	// Parameters, optimizer state and generator state: the whole file.
	want, got := stateBytes(t, full.last()), stateBytes(t, second.last())
	if !bytes.Equal(want, got) {
		wp, gp := paramsOf(t, full.last()), paramsOf(t, second.last())
		for i := range wp {
			for j := range wp[i].Data {
				if wp[i].Data[j] != gp[i].Data[j] {
					t.Fatalf("resumed run differs: %s[%d] = %v, uninterrupted %v", wp[i].Name, j, gp[i].Data[j], wp[i].Data[j])
				}
			}
		}
		t.Fatal("resumed run's state differs from the uninterrupted run's (not in the parameters)")
	}
	// The epoch-1 checkpoints agree too, and training moved the parameters.
	if !bytes.Equal(stateBytes(t, full.ckpts[0]), stateBytes(t, first.ckpts[0])) {
		t.Fatal("same seed, same world size: epoch-1 checkpoints differ")
	}
	if bytes.Equal(stateBytes(t, full.ckpts[0]), stateBytes(t, full.ckpts[2])) {
		t.Fatal("epochs 1 and 3 have the same state")
	}
	for i, m := range second.metrics {
		if w := full.metrics[i+1]; m["train_loss"] != w["train_loss"] || m["test_accuracy"] != w["test_accuracy"] {
			t.Fatalf("epoch %d metrics: resumed %v, uninterrupted %v", i+2, m, w)
		}
	}
}

func TestExactResumeFakeGroup(t *testing.T) {
	t.Parallel()
	testExactResume(t, fakeGroup)
}

// Issue 4 item 7: 2 ranks over the real TCP collective, 3 epochs of
// mnist-mlp interrupted after epoch 1 and resumed, end bit-identical to an
// uninterrupted run.
func TestExactResumeTCP(t *testing.T) {
	t.Parallel()
	testExactResume(t, tcpGroup)
}

// The runtime puts a CPU model's gradients in memory the ranks share when
// they run on one host (collective.AllocShared): the gradients' all-reduces
// run the direct algorithm, flat and in buckets, and training ends with the
// bits of the ring over TCP (3 ranks, where the order of additions shows).
func TestGradientsInSharedMemory(t *testing.T) {
	t.Parallel()
	needData(t)
	if runtime.GOOS != "linux" {
		t.Skip("shared memory between ranks is implemented on Linux only")
	}
	for _, buckets := range []string{"off", "on"} {
		t.Run("buckets "+buckets, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Epochs: 1, BatchSize: 64, LR: 0.05, Seed: 7, TrainLimit: 1024, TestLimit: 256,
				Buckets: buckets, BucketKiB: 128}
			var direct, ring atomic.Int64
			count := func(_ context.Context, op collective.OpInfo) {
				if op.Op == "allreduce" && op.Err == nil {
					if op.Direct {
						direct.Add(1)
					} else {
						ring.Add(1)
					}
				}
			}
			withOptions := func(o collective.Options) group {
				return func(t *testing.T, world int) ([]*collective.Comm, []compute.Communicator, func()) {
					comms := computetest.Connect(t, world, o)
					return comms, nil, func() {
						for _, c := range comms {
							c.Abort()
						}
					}
				}
			}
			shared, err := attempt(t, withOptions(collective.Options{Transport: collective.TransportSHM, Observer: count}), "mlp", 3, cfg, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if direct.Load() == 0 {
				t.Fatalf("no direct all-reduce (%d over the ring): the gradients are not in shared memory", ring.Load())
			}
			t.Logf("%d direct all-reduces, %d over the ring", direct.Load(), ring.Load())
			overTCP, err := attempt(t, withOptions(collective.Options{Transport: collective.TransportTCP}), "mlp", 3, cfg, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(stateBytes(t, shared.last()), stateBytes(t, overTCP.last())) {
				t.Fatal("training with shared gradients ended with other bits than over TCP")
			}
		})
	}
}
