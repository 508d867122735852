package python

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/internal/freeport"
	"github.com/tempotrain/tempotrain/train"
)

// Options configure the Python runner of a worker.
type Options struct {
	// CacheDir holds the embedded tempotrain package and fetched working
	// directories, by digest. Default: $TEMPOTRAIN_CACHE_DIR, else the
	// user's cache directory's "tempotrain", else the temp dir's.
	CacheDir string
	// KillGrace is how long a cancelled rank's process group has between
	// SIGTERM and SIGKILL. Default 800ms: the rank answers its
	// cancellation about a second after it (activities' grace), and the
	// process must be gone by then.
	KillGrace time.Duration
	// Threads, when positive, sets OMP_NUM_THREADS (torch's intra-op
	// threads) of every Python rank unless its env sets it.
	Threads int
	// Interpreter replaces the spec's default "python3" (a worker whose
	// torch lives in another interpreter). A spec that names its own
	// interpreter keeps it.
	Interpreter string
}

// Register makes this process's workers run Python training functions
// (api.PythonFunc). Call it only in a worker meant to: it runs whatever
// code a Fit input names.
func Register(o Options) error {
	return train.Register(api.PythonFunc, Func(o))
}

// Func returns the training function that runs a rank's Python process.
func Func(o Options) train.Func {
	if o.CacheDir == "" {
		o.CacheDir = defaultCacheDir()
	}
	if o.KillGrace <= 0 {
		o.KillGrace = 800 * time.Millisecond
	}
	return func(ctx context.Context, tc *train.Context) error {
		return run(ctx, tc, o)
	}
}

func defaultCacheDir() string {
	if d := os.Getenv("TEMPOTRAIN_CACHE_DIR"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "tempotrain")
	}
	return filepath.Join(os.TempDir(), "tempotrain-cache")
}

// run is one rank's Python process, from the working directory to its
// exit.
func run(ctx context.Context, tc *train.Context, o Options) error {
	spec := tc.Python()
	if spec == nil {
		return train.NonRetryable(fmt.Errorf("train_func %q needs the run's \"python\" spec (entrypoint, working_dir, ...)", api.PythonFunc))
	}
	pkgDir, err := packageDir(o.CacheDir)
	if err != nil {
		return fmt.Errorf("python: the tempotrain package: %w", err)
	}
	workDir, err := workingDir(ctx, spec, o.CacheDir)
	if err != nil {
		return err
	}
	target, _ := api.SplitEntrypoint(spec.Entrypoint)
	if api.IsScript(target) {
		if fi, err := os.Stat(filepath.Join(workDir, target)); err != nil || !fi.Mode().IsRegular() {
			return train.NonRetryable(fmt.Errorf("python.entrypoint %q: no file %s in the working directory %s", spec.Entrypoint, target, workDir))
		}
	}
	addr, port, err := masterAddr(ctx, tc)
	if err != nil {
		return fmt.Errorf("python: agree on MASTER_ADDR/MASTER_PORT: %w", err)
	}
	interp := spec.Interpreter
	if interp == "" || (interp == "python3" && o.Interpreter != "") {
		interp = o.Interpreter
	}
	if interp == "" {
		interp = "python3"
	}
	env := rankEnv(tc, spec, pkgDir, workDir, addr, port, o.Threads)
	p, err := start(ctx, tc, procSpec{interpreter: interp, dir: workDir, env: env, killGrace: o.KillGrace})
	if err != nil {
		return err
	}
	return p.wait(ctx, spec.Entrypoint)
}

// workingDir returns the local directory the function runs in.
func workingDir(ctx context.Context, spec *api.PythonSpec, cacheDir string) (string, error) {
	w := spec.WorkingDir
	if w == "" {
		d, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("python: the worker's directory: %w", err)
		}
		return d, nil
	}
	dir, err := Fetch(ctx, w, spec.WorkingDirSHA256, filepath.Join(cacheDir, "working_dir"), DefaultMaxWorkingDir)
	if err != nil {
		// A digest that does not match, a missing object or a bad archive
		// will not mend on a restart.
		return "", train.NonRetryable(fmt.Errorf("python: %w", err))
	}
	return dir, nil
}

// rankEnv is the process's environment: the worker's, less what the
// runtime sets, then the spec's, then torch's.
func rankEnv(tc *train.Context, spec *api.PythonSpec, pkgDir, workDir, addr string, port, threads int) []string {
	set := map[string]string{
		"RANK":                  strconv.Itoa(tc.WorldRank()),
		"WORLD_SIZE":            strconv.Itoa(tc.WorldSize()),
		"LOCAL_RANK":            strconv.Itoa(tc.LocalRank()),
		"LOCAL_WORLD_SIZE":      strconv.Itoa(tc.LocalWorldSize()),
		"GROUP_RANK":            strconv.Itoa(tc.NodeRank()),
		"NODE_RANK":             strconv.Itoa(tc.NodeRank()),
		"MASTER_ADDR":           addr,
		"MASTER_PORT":           strconv.Itoa(port),
		"TEMPOTRAIN_CHANNEL_FD": "3",
		"PYTHONUNBUFFERED":      "1",
	}
	if c := tc.Comm(); c != nil && c.Timeout() > 0 {
		// torch's collectives give up when the group's own do
		// (collective_timeout), not after gloo's 30 minutes.
		set["TEMPOTRAIN_PG_TIMEOUT_S"] = strconv.FormatFloat(c.Timeout().Seconds(), 'f', -1, 64)
	}
	pp := []string{pkgDir, workDir}
	if old := os.Getenv("PYTHONPATH"); old != "" {
		pp = append(pp, old)
	}
	set["PYTHONPATH"] = strings.Join(pp, string(os.PathListSeparator))
	if ds := tc.Devices(); len(ds) > 0 {
		ids := make([]string, len(ds))
		for i, d := range ds {
			ids[i] = strconv.Itoa(d)
		}
		set["CUDA_VISIBLE_DEVICES"] = strings.Join(ids, ",")
	}
	if c := tc.CPUs(); c > 0 {
		threads = c // the rank's resources_per_worker CPU
	}
	if _, ok := spec.Env["OMP_NUM_THREADS"]; !ok && threads > 0 {
		set["OMP_NUM_THREADS"] = strconv.Itoa(threads)
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; ok || strings.HasPrefix(k, "TEMPOTRAIN_") {
			continue
		}
		if _, ok := spec.Env[k]; ok {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

// masterAddr is rank 0's host and a free port there, which rank 0 picks
// and broadcasts to the group: torch's rendezvous (MASTER_ADDR,
// MASTER_PORT, init_method env://).
func masterAddr(ctx context.Context, tc *train.Context) (string, int, error) {
	const max = 255
	buf := make([]byte, 3+max)
	if tc.WorldRank() == 0 {
		host := tc.Host()
		if len(host) > max {
			return "", 0, fmt.Errorf("advertise host %q is longer than %d bytes", host, max)
		}
		port, err := freeport.Pick("")
		if err != nil {
			return "", 0, err
		}
		binary.BigEndian.PutUint16(buf, uint16(port))
		buf[2] = byte(len(host))
		copy(buf[3:], host)
	}
	if c := tc.Comm(); c != nil && tc.WorldSize() > 1 {
		if err := c.Broadcast(ctx, buf, 0); err != nil {
			return "", 0, err
		}
	}
	port := int(binary.BigEndian.Uint16(buf))
	host := string(buf[3 : 3+int(buf[2])])
	if port == 0 || host == "" {
		return "", 0, errors.New("rank 0 sent no address")
	}
	return host, port, nil
}
