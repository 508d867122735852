package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/storage"
)

//go:embed torch_peer.py
var torchPeerScript string

// systemPython is Debian's Python, with python3-torch and python3-xgboost.
const systemPython = "/usr/bin/python3"

// peer is a Python process of this benchmark (torch_peer.py,
// xgb_peer.py): it prints "ready VERSION" once loaded, then answers one
// command a line.
type peer struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stdout  *bufio.Reader
	stderr  bytes.Buffer
	version string
}

// startPeer writes script to dir and runs it with python and args, one
// thread in every pool its libraries might use.
func startPeer(python, dir, name, script string, args ...string) (*peer, error) {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return nil, err
	}
	p := &peer{name: name, cmd: exec.Command(python, append([]string{path}, args...)...)}
	p.cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "MKL_NUM_THREADS=1")
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.stdout = bufio.NewReader(out)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	line, err := p.readLine()
	if err != nil {
		p.close()
		return nil, err
	}
	v, ok := strings.CutPrefix(line, "ready ")
	if !ok {
		p.close()
		return nil, fmt.Errorf("%s said %q", name, line)
	}
	p.version = v
	return p, nil
}

func (p *peer) readLine() (string, error) {
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: %v: %s", p.name, err, strings.TrimSpace(p.stderr.String()))
	}
	return strings.TrimSpace(line), nil
}

// command sends cmd and returns the answer's line.
func (p *peer) command(cmd string) (string, error) {
	if _, err := fmt.Fprintln(p.stdin, cmd); err != nil {
		return "", fmt.Errorf("%s: %v: %s", p.name, err, strings.TrimSpace(p.stderr.String()))
	}
	return p.readLine()
}

// numbers sends cmd and parses the answer as two numbers.
func (p *peer) numbers(cmd string) (float64, float64, error) {
	line, err := p.command(cmd)
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(line)
	if len(f) == 2 {
		a, err1 := strconv.ParseFloat(f[0], 64)
		b, err2 := strconv.ParseFloat(f[1], 64)
		if err1 == nil && err2 == nil {
			return a, b, nil
		}
	}
	return 0, 0, fmt.Errorf("%s %s: %q", p.name, cmd, line)
}

func (p *peer) close() error {
	p.stdin.Close()
	return p.cmd.Wait()
}

// torchPeer is torch_peer.py: PyTorch running a built-in model with a
// checkpoint's parameters.
type torchPeer struct {
	*peer
	dir     string
	rows    int
	classes int
}

// checkpointModel reads the parameters of the committed checkpoint of a
// built-in Fashion-MNIST model (mlp, cnn) at uri, into a model of its kind
// built for maxBatch rows.
func checkpointModel(ctx context.Context, uri string, maxBatch int) (*compute.Model, string, error) {
	sc, err := storage.OpenCheckpoint(ctx, uri)
	if err != nil {
		return nil, "", err
	}
	file := sc.Manifest.Meta["file"]
	if file == "" {
		file = "state.ttstate"
	}
	b, err := sc.ReadFile(ctx, file)
	if err != nil {
		return nil, "", err
	}
	st, err := compute.ReadState(bytes.NewReader(b))
	if err != nil {
		return nil, "", err
	}
	name := string(st.Blobs["model"])
	if name != "mlp" && name != "cnn" {
		return nil, "", fmt.Errorf("checkpoint %s holds model %q; the PyTorch peer knows mlp and cnn", uri, name)
	}
	m, err := compute.NewModel(name, compute.CPU(), maxBatch, 0)
	if err != nil {
		return nil, "", err
	}
	if err := m.Load(st); err != nil {
		return nil, "", err
	}
	return m, name, nil
}

// startTorch exports the parameters of the checkpoint at uri and rows
// images px (float32 pixels in [0, 255], rows × 784) to dir, and starts
// PyTorch on them with batches of batch rows, one thread.
func startTorch(ctx context.Context, python, uri, dir string, px []float32, rows, batch int) (*torchPeer, error) {
	m, name, err := checkpointModel(ctx, uri, 1)
	if err != nil {
		return nil, err
	}
	type param struct {
		Name   string `json:"name"`
		Shape  []int  `json:"shape"`
		Offset int    `json:"offset"`
	}
	var params []param
	var flat []float32
	for _, p := range m.Params() {
		params = append(params, param{Name: p.Name, Shape: p.Shape, Offset: len(flat)})
		flat = append(flat, p.W.Data()...)
	}
	job, _ := json.Marshal(map[string]any{"model": name, "params": params, "rows": rows, "batch": batch,
		"input": m.InShape(), "mean": format.FashionMNISTMean, "std": format.FashionMNISTStd})
	for file, b := range map[string][]byte{"job.json": job, "weights.bin": f32Bytes(flat), "x.bin": f32Bytes(px[:rows*784])} {
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
			return nil, err
		}
	}
	pp, err := startPeer(python, dir, "torch_peer.py", torchPeerScript, dir)
	if err != nil {
		return nil, err
	}
	return &torchPeer{peer: pp, dir: dir, rows: rows, classes: m.OutShape()[0]}, nil
}

// check runs every image once and returns PyTorch's logits and
// probabilities (rows × classes).
func (p *torchPeer) check() (logits, probs []float32, err error) {
	if line, err := p.command("check"); err != nil || line != "ok" {
		return nil, nil, fmt.Errorf("torch_peer.py check: %q %v", line, err)
	}
	if logits, err = readF32(filepath.Join(p.dir, "logits.bin")); err != nil {
		return nil, nil, err
	}
	if probs, err = readF32(filepath.Join(p.dir, "probs.bin")); err != nil {
		return nil, nil, err
	}
	if len(logits) != p.rows*p.classes || len(probs) != p.rows*p.classes {
		return nil, nil, fmt.Errorf("torch_peer.py wrote %d logits and %d probabilities, want %d", len(logits), len(probs), p.rows*p.classes)
	}
	return logits, probs, nil
}

// round times one pass of PyTorch over every image: seconds of wall time
// and of processor time.
func (p *torchPeer) round() (wall, cpu float64, err error) { return p.numbers("round") }

// cpuSeconds is this process's user and system time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func readF32(path string) ([]float32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// maxDiff is the largest |a[i] - b[i]|.
func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}
