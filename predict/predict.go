package predict

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
)

// Datatypes of tensors, as the Open Inference Protocol names them.
const (
	FP32  = "FP32"
	INT64 = "INT64"
	BYTES = "BYTES"
)

// Tensor is one named input or output: Shape's first dimension is the batch.
// Exactly one of FP32, INT64 and Bytes holds the data, row-major, as Datatype
// says.
type Tensor struct {
	Name     string    `json:"name"`
	Datatype string    `json:"datatype"`
	Shape    []int     `json:"shape"`
	FP32     []float32 `json:"-"`
	INT64    []int64   `json:"-"`
	Bytes    []string  `json:"-"`
}

// Rows is the batch dimension of t (0 for a scalar).
func (t *Tensor) Rows() int {
	if len(t.Shape) == 0 {
		return 0
	}
	return t.Shape[0]
}

// Len is the number of elements Shape says t holds; -1 if a dimension is
// negative or their product does not fit an int (Check refuses such a
// tensor).
func (t *Tensor) Len() int {
	n, ok := shapeLen(t.Shape)
	if !ok {
		return -1
	}
	return n
}

// shapeLen is the product of shape's dimensions, ok false if one is
// negative or the product does not fit an int.
func shapeLen(shape []int) (n int, ok bool) {
	n = 1
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d == 0 {
			n = 0 // a later dimension can no longer overflow it
			continue
		}
		if n > math.MaxInt/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// dataLen is the number of elements t's data holds.
func (t *Tensor) dataLen() int {
	switch t.Datatype {
	case FP32:
		return len(t.FP32)
	case INT64:
		return len(t.INT64)
	case BYTES:
		return len(t.Bytes)
	}
	return -1
}

// Batch is the input of Predict: named tensors with the same batch size.
type Batch struct {
	Inputs []Tensor
}

// Rows is the batch size (of the first input).
func (b *Batch) Rows() int {
	if len(b.Inputs) == 0 {
		return 0
	}
	return b.Inputs[0].Rows()
}

// Input returns the input named name.
func (b *Batch) Input(name string) (*Tensor, bool) {
	for i := range b.Inputs {
		if b.Inputs[i].Name == name {
			return &b.Inputs[i], true
		}
	}
	return nil, false
}

// TensorSpec describes one input or output a model takes or gives. A -1 in
// Shape is any size (the batch dimension is always -1).
type TensorSpec struct {
	Name     string `json:"name"`
	Datatype string `json:"datatype"`
	Shape    []int  `json:"shape"`
}

// Metadata describes a loaded model.
type Metadata struct {
	// Name of the model: the training function or model kind.
	Name string `json:"name"`
	// Format of the checkpoint it came from (Meta "format").
	Format string `json:"format"`
	// Checkpoint is the URI it was loaded from.
	Checkpoint string       `json:"checkpoint,omitempty"`
	Inputs     []TensorSpec `json:"inputs"`
	Outputs    []TensorSpec `json:"outputs"`
}

// Predictor applies a model (and the preprocessors it was trained with) to
// batches.
type Predictor interface {
	Metadata() Metadata
	// Predict returns the outputs for b, one row per input row, in the
	// order Metadata lists them.
	Predict(ctx context.Context, b Batch) ([]Tensor, error)
	// Close releases what the predictor holds (device memory, files).
	Close() error
}

// ErrInvalidInput is a batch that does not match the model's inputs (a
// missing input, a wrong datatype or shape); the message names the input.
var ErrInvalidInput = errors.New("invalid input")

// ErrUnknownFormat is a checkpoint whose format no registered constructor reads.
var ErrUnknownFormat = errors.New("unknown checkpoint format")

// Check checks b against specs: every input present, with its datatype, a
// shape that matches (-1 matches any size), data of the length its shape
// says, and one batch size for all. Inputs not in specs are an error too.
func Check(specs []TensorSpec, b Batch) error {
	rows := -1
	seen := map[string]bool{}
	for _, s := range specs {
		t, ok := b.Input(s.Name)
		if !ok {
			return fmt.Errorf("%w: missing input %q (the model takes %s)", ErrInvalidInput, s.Name, specNames(specs))
		}
		seen[s.Name] = true
		// First of all the shape against the data present: a product that
		// wraps can equal the data's length, and rows of no elements cost
		// no bytes, yet a predictor sizes its outputs by them.
		n, ok := shapeLen(t.Shape)
		if !ok {
			return fmt.Errorf("%w: input %q has shape %v, whose number of elements does not fit an int", ErrInvalidInput, s.Name, t.Shape)
		}
		if n == 0 && t.Rows() > 0 {
			return fmt.Errorf("%w: input %q has shape %v: %d rows of no elements", ErrInvalidInput, s.Name, t.Shape, t.Rows())
		}
		if t.Datatype != s.Datatype {
			return fmt.Errorf("%w: input %q has datatype %s, the model takes %s", ErrInvalidInput, s.Name, t.Datatype, s.Datatype)
		}
		if !shapeMatches(s.Shape, t.Shape) {
			return fmt.Errorf("%w: input %q has shape %v, the model takes %v", ErrInvalidInput, s.Name, t.Shape, s.Shape)
		}
		if dn := t.dataLen(); dn != n {
			return fmt.Errorf("%w: input %q has shape %v (%d elements) but %d data elements", ErrInvalidInput, s.Name, t.Shape, n, dn)
		}
		if rows >= 0 && t.Rows() != rows {
			return fmt.Errorf("%w: input %q has %d rows, other inputs %d", ErrInvalidInput, s.Name, t.Rows(), rows)
		}
		rows = t.Rows()
	}
	for _, t := range b.Inputs {
		if !seen[t.Name] {
			return fmt.Errorf("%w: unknown input %q (the model takes %s)", ErrInvalidInput, t.Name, specNames(specs))
		}
	}
	return nil
}

func shapeMatches(spec, got []int) bool {
	if len(spec) != len(got) {
		return false
	}
	for i := range spec {
		if spec[i] != -1 && spec[i] != got[i] {
			return false
		}
	}
	return true
}

func specNames(specs []TensorSpec) string {
	var n []string
	for _, s := range specs {
		n = append(n, fmt.Sprintf("%s %s%v", s.Name, s.Datatype, s.Shape))
	}
	return strings.Join(n, ", ")
}

// Constructor builds a Predictor from a checkpoint downloaded to dir, whose
// manifest meta is meta.
type Constructor func(ctx context.Context, dir string, meta map[string]string) (Predictor, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Constructor{}
)

// Register makes Load read checkpoints whose Meta "format" is format. A
// training function writes the format into its checkpoints' Meta; a name
// already taken is an error.
func Register(format string, c Constructor) error {
	if strings.TrimSpace(format) == "" || c == nil {
		return fmt.Errorf("predict.Register(%q): empty format or nil constructor", format)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, ok := registry[format]; ok {
		return fmt.Errorf("predict.Register(%q): format already registered", format)
	}
	registry[format] = c
	return nil
}

// MustRegister is Register that panics on error, for package init.
func MustRegister(format string, c Constructor) {
	if err := Register(format, c); err != nil {
		panic(err)
	}
}

// Formats lists the registered formats, sorted.
func Formats() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	var out []string
	for f := range registry {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// MetaFormat is the key of a checkpoint's Meta that names its format.
const MetaFormat = "format"

// Load opens the committed checkpoint at uri ("/runs/r/checkpoint_000003",
// "s3://bucket/runs/r/checkpoint_000003"), downloads it with every file's sum
// checked, and builds the Predictor its format calls for. A checkpoint that
// does not exist or is not committed is storage.ErrNotFound, one whose files
// fail their sums storage.ErrCorrupt, an unknown format ErrUnknownFormat.
//
// A uri ending in .json is an XGBoost JSON model file instead (a path,
// file:///path or s3://bucket/key; what XGBoost's save_model writes, or a
// gbdt checkpoint's model.json): its Predictor takes one input, "features"
// FP32 [-1, num_feature] (LoadXGBoost). A file that does not exist is
// storage.ErrNotFound.
func Load(ctx context.Context, uri string) (Predictor, error) {
	if isPointer(uri) {
		return loadPointer(ctx, uri)
	}
	if isModelFile(uri) {
		return loadModelFile(ctx, uri)
	}
	sc, err := storage.OpenCheckpoint(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("predict: open checkpoint %s: %w", uri, err)
	}
	dir, err := os.MkdirTemp("", "tempotrain-predict-")
	if err != nil {
		return nil, err
	}
	if err := sc.Download(ctx, dir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("predict: download checkpoint %s: %w", uri, err)
	}
	p, err := LoadDir(ctx, dir, sc.Manifest.Meta)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("predict: checkpoint %s: %w", uri, err)
	}
	return &loaded{Predictor: p, dir: dir, uri: uri}, nil
}

// LoadDir builds a Predictor from a checkpoint already in a local directory
// (a train.Checkpoint's Dir, with its Meta).
func LoadDir(ctx context.Context, dir string, meta map[string]string) (Predictor, error) {
	format := meta[MetaFormat]
	registryMu.RLock()
	c, ok := registry[format]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownFormat, format, strings.Join(Formats(), ", "))
	}
	return c(ctx, dir, meta)
}

// loaded owns the download directory of a Load.
type loaded struct {
	Predictor
	dir, uri string
}

func (l *loaded) Metadata() Metadata {
	m := l.Predictor.Metadata()
	m.Checkpoint = l.uri
	return m
}

func (l *loaded) Close() error {
	err := l.Predictor.Close()
	if rerr := os.RemoveAll(l.dir); err == nil {
		err = rerr
	}
	return err
}

// isPointer says whether uri names a schedule's pointer file
// ({storage}/{schedule}/promoted.json or last.json) or a search's
// ({storage}/{tune}/best.json), which Load follows to
// the checkpoint it names.
func isPointer(uri string) bool {
	base := uri[strings.LastIndexAny(uri, "/")+1:]
	return base == api.PromotedFile || base == api.LastFile || base == api.BestFile
}

// loadPointer loads the checkpoint a pointer file names.
func loadPointer(ctx context.Context, uri string) (Predictor, error) {
	b, err := storage.ReadURI(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("predict: %s: %w", uri, err)
	}
	p, err := api.ParsePointer(b)
	if err != nil {
		return nil, fmt.Errorf("predict: %s: %w", uri, err)
	}
	if isPointer(p.Checkpoint) {
		return nil, fmt.Errorf("predict: %s points at another pointer, %s", uri, p.Checkpoint)
	}
	return Load(ctx, p.Checkpoint)
}
