// Command storage compares tempotrain's checkpoint storage on S3 (a real
// MinIO on loopback) with its peer, a plain aws-sdk-go-v2 PutObject/GetObject
// loop over the same files, in the same run, and measures how much of the
// upload time the asynchronous mode hides from a training loop.
//
//	go run ./bench/storage                 # 256 MiB checkpoint, 6 rounds
//	go run ./bench/storage -mib 64 -rounds 3
//
// Every number is a median over the rounds; the order of ours and the peers
// rotates from round to round so drift (page cache, MinIO compaction) hits
// all, and every timed step starts after a sync(2): the disk's write-back of
// the step before (MinIO's writes, the files just downloaded) otherwise
// lands on whichever step comes next.
//
//   - upload:   storage.Run.CommitCheckpoint (files hashed with sha256, 16 MiB
//     parts, 4 in flight, manifest last) vs PutObject per file with the
//     SDK's defaults, and vs PutObject with UNSIGNED-PAYLOAD as ours sends
//     (over plain HTTP the default signs the payload: one more sha256 pass).
//   - download: storage.Run.RestoreCheckpoint (sha256 of every file checked)
//     vs GetObject per file copied to a local file; and, to tell transport
//     from verification, storage.S3.Get per file without the check, and
//     this machine's single-core sha256 speed.
//   - async:    per round, one synchronous commit is timed, then a training
//     loop of -reports reports runs, each report followed by "compute"
//     lasting -compute × that time. The loop is blocked only in
//     AsyncCommitter.Submit (snapshot, and waiting for the previous upload)
//     and in the final Wait; hidden share = 1 − blocked per report /
//     synchronous upload time, median over rounds. Compute is a sleep (an
//     accelerator computing, the CPU free) or, with -spin, one busy core.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/storage/miniotest"
)

// Config of one benchmark run.
type Config struct {
	MiB     int     // checkpoint size
	Files   int     // the size is split over this many files
	Rounds  int     // medians over this many rounds
	Reports int     // reports per async training loop
	Compute float64 // compute time between reports, × the sync upload time
	Spin    bool    // busy compute instead of sleep
	Dir     string  // scratch; default a new temp dir
}

// Result holds the medians.
type Result struct {
	OursUp, PeerUp, OursDown, PeerDown time.Duration
	// PeerUnsigned is the peer loop with UNSIGNED-PAYLOAD, as ours sends:
	// over plain HTTP the SDK's default hashes every byte with sha256 to
	// sign it, which the default peer pays and ours does not.
	PeerUnsigned time.Duration
	// OursGet is our transport alone: storage.S3.Get per file into a local
	// file, no sha256; OursDown minus it is the verification.
	OursGet time.Duration
	// SHA256 is this machine's sha256 throughput in MiB/s, single core,
	// measured in the same run: it bounds a verified restore of one file.
	SHA256 float64
	Bytes  int64
	// Async, per snapshot mode: blocked time of the loop per report, the
	// synchronous upload time, and the share of it hidden (medians).
	Async map[string]AsyncResult
}

// AsyncResult is one snapshot mode's async measurement.
type AsyncResult struct {
	Blocked, Sync time.Duration // per report, medians
	Hidden        float64
}

func main() {
	var c Config
	flag.IntVar(&c.MiB, "mib", 256, "checkpoint size in MiB")
	flag.IntVar(&c.Files, "files", 2, "files the checkpoint is split over (the first holds 3/4)")
	flag.IntVar(&c.Rounds, "rounds", 6, "rounds; every number is a median over them (the order rotates with a period of 3)")
	flag.IntVar(&c.Reports, "reports", 4, "reports per async training loop")
	flag.Float64Var(&c.Compute, "compute", 1.5, "compute between reports, as a multiple of the sync upload time")
	flag.BoolVar(&c.Spin, "spin", false, "compute on a busy core instead of sleeping")
	flag.StringVar(&c.Dir, "dir", "", "scratch directory (default: a new temp dir)")
	flag.Parse()
	r, err := Run(context.Background(), c, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/storage:", err)
		os.Exit(1)
	}
	Print(os.Stdout, c, r)
}

// Run starts a MinIO, runs the rounds and returns the medians. Progress goes
// to log.
func Run(ctx context.Context, c Config, log io.Writer) (*Result, error) {
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "tempotrain-bench-storage-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		c.Dir = d
	}
	srv, err := miniotest.Launch(filepath.Join(c.Dir, "minio"))
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	bucket, err := srv.MakeBucket(ctx, "bench")
	if err != nil {
		return nil, err
	}
	b, err := storage.NewS3(ctx, bucket, "runs", storage.S3Config{
		Endpoint: srv.Endpoint, Region: miniotest.Region,
		AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey,
	})
	if err != nil {
		return nil, err
	}
	peer := srv.Client()
	run := storage.NewRun(b, "bench")

	src := filepath.Join(c.Dir, "ckpt")
	files, total, err := writeCheckpoint(src, int64(c.MiB)<<20, c.Files)
	if err != nil {
		return nil, err
	}
	res := &Result{Bytes: total, Async: map[string]AsyncResult{}}
	var oursUp, peerUp, oursDown, peerDown, oursGet, peerUnsigned []time.Duration
	unsigned := s3.WithAPIOptions(func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("Unsigned",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				return next.HandleInitialize(v4.SetPayloadHash(ctx, "UNSIGNED-PAYLOAD"), in)
			}), middleware.After)
	})
	for round := range c.Rounds {
		seq := round + 1
		peerPrefix := fmt.Sprintf("peer/%d/", round)
		steps := []func() error{
			func() error {
				d, err := timed(func() error { _, err := run.CommitCheckpoint(ctx, seq, src, storage.Manifest{}); return err })
				oursUp = append(oursUp, d)
				return err
			},
			func() error {
				d, err := timed(func() error { return peerPut(ctx, peer, bucket, peerPrefix, src, files) })
				peerUp = append(peerUp, d)
				return err
			},
			func() error {
				d, err := timed(func() error { return peerPut(ctx, peer, bucket, "unsigned/", src, files, unsigned) })
				peerUnsigned = append(peerUnsigned, d)
				return err
			},
		}
		rotate(steps, round)
		down := []func() error{
			func() error {
				dst := filepath.Join(c.Dir, fmt.Sprintf("ours-%d", round))
				defer os.RemoveAll(dst)
				d, err := timed(func() error { _, err := run.RestoreCheckpoint(ctx, seq, dst); return err })
				oursDown = append(oursDown, d)
				return err
			},
			func() error {
				dst := filepath.Join(c.Dir, fmt.Sprintf("peer-%d", round))
				defer os.RemoveAll(dst)
				d, err := timed(func() error { return peerGet(ctx, peer, bucket, peerPrefix, dst, files) })
				peerDown = append(peerDown, d)
				return err
			},
			func() error {
				dst := filepath.Join(c.Dir, fmt.Sprintf("get-%d", round))
				defer os.RemoveAll(dst)
				d, err := timed(func() error { return backendGet(ctx, b, fmt.Sprintf("bench/checkpoint_%06d/", seq), dst, files) })
				oursGet = append(oursGet, d)
				return err
			},
		}
		rotate(down, round)
		for _, f := range append(steps, down...) {
			syscall.Sync()
			if err := f(); err != nil {
				return nil, fmt.Errorf("round %d: %w", round, err)
			}
		}
		// Keep MinIO's disk use flat.
		if err := run.DeleteCheckpoint(ctx, seq); err != nil {
			return nil, err
		}
		for _, f := range files {
			peer.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(peerPrefix + f)})
			peer.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("unsigned/" + f)})
		}
		fmt.Fprintf(log, "round %d: up ours %v peer %v, down ours %v peer %v (our transport alone %v)\n",
			round, oursUp[round], peerUp[round], oursDown[round], peerDown[round], oursGet[round])
	}
	res.OursUp, res.PeerUp, res.PeerUnsigned = median(oursUp), median(peerUp), median(peerUnsigned)
	res.OursDown, res.PeerDown, res.OursGet = median(oursDown), median(peerDown), median(oursGet)
	res.SHA256 = sha256Speed()

	for _, mode := range []struct {
		name string
		m    storage.SnapshotMode
	}{{"copy", storage.SnapshotCopy}, {"link", storage.SnapshotLink}} {
		ar, err := asyncLoop(ctx, c, run, src, mode.m, log)
		if err != nil {
			return nil, fmt.Errorf("async %s: %w", mode.name, err)
		}
		res.Async[mode.name] = ar
	}
	return res, nil
}

// rotate turns fs left by round places.
func rotate(fs []func() error, round int) {
	k := round % len(fs)
	rot := append(append([]func() error(nil), fs[k:]...), fs[:k]...)
	copy(fs, rot)
}

// asyncLoop runs c.Rounds training loops of c.Reports reports each. Each
// round first times one synchronous commit, so that compute and the hidden
// share are relative to the upload time of that moment on a shared machine.
func asyncLoop(ctx context.Context, c Config, run *storage.Run, src string, mode storage.SnapshotMode, log io.Writer) (AsyncResult, error) {
	var blocked, syncs []time.Duration
	var hidden []float64
	seq := 1000 * (int(mode) + 1)
	for round := range c.Rounds {
		seq++
		syscall.Sync()
		syncUp, err := timed(func() error { _, err := run.CommitCheckpoint(ctx, seq, src, storage.Manifest{}); return err })
		if err != nil {
			return AsyncResult{}, err
		}
		if err := run.DeleteCheckpoint(ctx, seq); err != nil {
			return AsyncResult{}, err
		}
		compute := time.Duration(c.Compute * float64(syncUp))
		ac := storage.NewAsyncCommitter(ctx, run, c.Dir)
		var total time.Duration
		var committed []int
		for range c.Reports {
			seq++
			// Each report writes its checkpoint into a fresh directory, as
			// train.Context.NewCheckpointDir gives; the link mode relies on it.
			dir := filepath.Join(c.Dir, fmt.Sprintf("report-%d", seq))
			if err := linkTree(src, dir); err != nil {
				return AsyncResult{}, err
			}
			start := time.Now()
			prev, err := ac.Submit(ctx, seq, dir, storage.Manifest{}, mode)
			total += time.Since(start)
			if err != nil {
				return AsyncResult{}, err
			}
			if prev != nil {
				committed = append(committed, prev.Seq)
			}
			os.RemoveAll(dir)
			work(compute, c.Spin)
		}
		start := time.Now()
		last, err := ac.Wait(ctx)
		total += time.Since(start)
		if err != nil {
			return AsyncResult{}, err
		}
		committed = append(committed, last.Seq)
		ac.Close()
		if len(committed) != c.Reports {
			return AsyncResult{}, fmt.Errorf("committed %v, want %d checkpoints", committed, c.Reports)
		}
		for _, s := range committed {
			if err := run.DeleteCheckpoint(ctx, s); err != nil {
				return AsyncResult{}, err
			}
		}
		per := total / time.Duration(c.Reports)
		blocked = append(blocked, per)
		syncs = append(syncs, syncUp)
		hidden = append(hidden, 1-float64(per)/float64(syncUp))
		fmt.Fprintf(log, "async round %d: blocked %v per report; sync upload %v, compute %v\n", round, per, syncUp, compute)
	}
	sort.Float64s(hidden)
	return AsyncResult{Blocked: median(blocked), Sync: median(syncs), Hidden: hidden[len(hidden)/2]}, nil
}

// work stands for a training step: a sleep (the accelerator computes, the
// CPU is free) or one busy core.
func work(d time.Duration, spin bool) {
	if !spin {
		time.Sleep(d)
		return
	}
	end := time.Now().Add(d)
	x := 1.0
	for time.Now().Before(end) {
		for range 10000 {
			x = x*1.0000001 + 1e-9
		}
	}
	_ = x
}

// linkTree makes dst hold src's files (hard links: the benchmark's source
// never changes, and this keeps the setup out of the timing's way).
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		return os.Link(p, to)
	})
}

func writeCheckpoint(dir string, size int64, n int) ([]string, int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, err
	}
	sizes := make([]int64, n)
	sizes[0] = size
	if n > 1 {
		sizes[0] = size * 3 / 4
		for i := 1; i < n; i++ {
			sizes[i] = (size - sizes[0]) / int64(n-1)
		}
		sizes[n-1] += size - sum(sizes)
	}
	var names []string
	buf := make([]byte, 1<<20)
	var seed uint64 = 0x9e3779b97f4a7c15
	for i, s := range sizes {
		name := fmt.Sprintf("part-%d.bin", i)
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return nil, 0, err
		}
		for left := s; left > 0; left -= int64(len(buf)) {
			for j := 0; j+8 <= len(buf); j += 8 { // xorshift: incompressible, cheap
				seed ^= seed << 13
				seed ^= seed >> 7
				seed ^= seed << 17
				for k := range 8 {
					buf[j+k] = byte(seed >> (8 * k))
				}
			}
			if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
				f.Close()
				return nil, 0, err
			}
		}
		if err := f.Close(); err != nil {
			return nil, 0, err
		}
		names = append(names, name)
	}
	return names, size, nil
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

func peerPut(ctx context.Context, c *s3.Client, bucket, prefix, dir string, files []string, opts ...func(*s3.Options)) error {
	for _, name := range files {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(prefix + name), Body: f}, opts...)
		f.Close()
		if err != nil {
			return fmt.Errorf("peer put %s: %w", name, err)
		}
	}
	return nil
}

func peerGet(ctx context.Context, c *s3.Client, bucket, prefix, dir string, files []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range files {
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(prefix + name)})
		if err != nil {
			return fmt.Errorf("peer get %s: %w", name, err)
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err == nil {
			_, err = io.Copy(f, out.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		out.Body.Close()
		if err != nil {
			return fmt.Errorf("peer get %s: %w", name, err)
		}
	}
	return nil
}

// backendGet downloads files through the storage backend's Get alone.
func backendGet(ctx context.Context, b storage.Backend, prefix, dir string, files []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range files {
		rc, err := b.Get(ctx, prefix+name)
		if err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err == nil {
			_, err = io.Copy(f, rc)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		rc.Close()
		if err != nil {
			return fmt.Errorf("get %s: %w", name, err)
		}
	}
	return nil
}

// sha256Speed is the median of three single-core sha256 runs over 64 MiB.
func sha256Speed() float64 {
	buf := make([]byte, 64<<20)
	var ds []time.Duration
	for range 3 {
		d, _ := timed(func() error { sha256.Sum256(buf); return nil })
		ds = append(ds, d)
	}
	return 64 / median(ds).Seconds()
}

func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Print writes the medians and ratios.
func Print(w io.Writer, c Config, r *Result) {
	mbs := func(d time.Duration) float64 { return float64(r.Bytes) / (1 << 20) / d.Seconds() }
	fmt.Fprintf(w, "\ncheckpoint %d MiB in %d files, %d rounds, medians\n", c.MiB, c.Files, c.Rounds)
	fmt.Fprintf(w, "upload    ours %7.1f MiB/s (%v)  peer PutObject %7.1f MiB/s (%v)  ratio %.2f (target >= 0.80)\n",
		mbs(r.OursUp), r.OursUp.Round(time.Millisecond), mbs(r.PeerUp), r.PeerUp.Round(time.Millisecond), r.PeerUp.Seconds()/r.OursUp.Seconds())
	fmt.Fprintf(w, "          peer PutObject with UNSIGNED-PAYLOAD, as ours sends %7.1f MiB/s (%v)  ratio %.2f\n",
		mbs(r.PeerUnsigned), r.PeerUnsigned.Round(time.Millisecond), r.PeerUnsigned.Seconds()/r.OursUp.Seconds())
	fmt.Fprintf(w, "download  ours %7.1f MiB/s (%v)  peer GetObject %7.1f MiB/s (%v)  ratio %.2f (target >= 0.80)\n",
		mbs(r.OursDown), r.OursDown.Round(time.Millisecond), mbs(r.PeerDown), r.PeerDown.Round(time.Millisecond), r.PeerDown.Seconds()/r.OursDown.Seconds())
	fmt.Fprintf(w, "          ours without sum checks (S3.Get per file) %7.1f MiB/s (%v)  ratio %.2f; sha256 on one core here: %.0f MiB/s\n",
		mbs(r.OursGet), r.OursGet.Round(time.Millisecond), r.PeerDown.Seconds()/r.OursGet.Seconds(), r.SHA256)
	compute := "sleep"
	if c.Spin {
		compute = "one busy core"
	}
	for _, mode := range []string{"copy", "link"} {
		a := r.Async[mode]
		fmt.Fprintf(w, "async %-4s blocked %v per report of a %v sync upload: hidden %.1f%% (target >= 90%%; compute = %.1fx upload, %s)\n",
			mode, a.Blocked.Round(time.Millisecond), a.Sync.Round(time.Millisecond), 100*a.Hidden, c.Compute, compute)
	}
}
