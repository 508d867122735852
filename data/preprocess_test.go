package data

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/data/format"
)

// newComms connects n ranks over loopback TCP, as the runtime does.
func newComms(t *testing.T, n int) []*collective.Comm {
	t.Helper()
	lns := make([]net.Listener, n)
	peers := make([]string, n)
	for r := range n {
		ln, err := collective.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[r], peers[r] = ln, ln.Addr().String()
	}
	comms := make([]*collective.Comm, n)
	errs := eachRank(n, func(r int) error {
		var err error
		comms[r], err = collective.Connect(context.Background(), lns[r], peers, collective.Options{
			Rank: r, Size: n, Token: "data-test", Timeout: time.Minute, Transport: collective.TransportTCP})
		return err
	})
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: connect: %v", r, err)
		}
	}
	return comms
}

func eachRank(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

// fitPre is a chain that exercises every preprocessor and a second pass
// (the scaler reads x after the imputer rewrote it).
var fitPre = []api.PreprocessorSpec{
	{Type: "simple_imputer", Columns: []string{"x"}, Strategy: "mean"},
	{Type: "simple_imputer", Columns: []string{"city"}, Strategy: "most_frequent"},
	{Type: "chain", Steps: []api.PreprocessorSpec{
		{Type: "standard_scaler", Columns: []string{"x", "id"}},
		{Type: "min_max_scaler", Columns: []string{"w"}},
	}},
	{Type: "one_hot_encoder", Columns: []string{"city"}, MaxCategories: 4},
	{Type: "ordinal_encoder", Columns: []string{"band"}},
	{Type: "concatenator", Exclude: []string{"w"}},
}

// fitTable writes a table with every kind of column over several files:
// id, x (missing values), w, city (missing), band (categorical), y.
func fitTable(t *testing.T, dir, format string, n int) string {
	t.Helper()
	tbl := newTestTable(n)
	var b strings.Builder
	b.WriteString("id,x,w,city,band,y\n")
	bands := []string{"low", "mid", "high"}
	for i := range n {
		x := "NA"
		if !math.IsNaN(tbl.x[i]) {
			x = fmt.Sprint(tbl.x[i] * 1e3) // large values: variance from sums would lose digits
		}
		fmt.Fprintf(&b, "%d,%s,%g,%s,%s,%d\n", i, x, 1e6+float64(i%101)*0.5, csvQuote(tbl.city[i]), bands[(i*7)%3], tbl.y[i])
	}
	lines := strings.SplitAfter(b.String(), "\n")
	header, rows := lines[0], lines[1:len(lines)-1]
	for f := range 3 {
		lo, hi := share(int64(len(rows)), f, 3)
		body := header + strings.Join(rows[lo:hi], "")
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%d.csv", f)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "p*.csv")
}

// TestDistributedFitEqualsSingle fits the same preprocessors on one
// process and on 2, 3 and 4 ranks connected by real loopback collective
// groups, in memory and streaming: every rank gets the same pipeline,
// bit for bit; counts, minima, maxima, fill values from counts and
// categories equal the single-process fit exactly, means and deviations to
// 1e-12 relative.
func TestDistributedFitEqualsSingle(t *testing.T) {
	t.Parallel()
	uri := fitTable(t, t.TempDir(), "csv", 1999)
	for _, mode := range []string{"memory", "stream"} {
		spec := api.DatasetSpec{URI: uri, Label: "y", Mode: mode, Categorical: []string{"band"}}
		if mode == "stream" {
			spec.MemoryBudgetMiB, spec.ShuffleWindowRows = 1, 300
		}
		single := mustOpen(t, spec, ShardOptions{}, nil)
		want, err := single.Fit(context.Background(), fitPre)
		if err != nil {
			t.Fatal(err)
		}
		if want.Width() != 2+4+1 {
			t.Fatalf("features %v, want x, id, 4 cities, band", want.Features)
		}
		for _, n := range []int{2, 3, 4} {
			comms := newComms(t, n)
			got := make([]*Pipeline, n)
			errs := eachRank(n, func(r int) error {
				s, err := Open(context.Background(), spec, ShardOptions{}, comms[r])
				if err != nil {
					return err
				}
				defer s.Close()
				got[r], err = s.Fit(context.Background(), fitPre)
				return err
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("%s, %d ranks, rank %d: %v", mode, n, r, err)
				}
			}
			j0, _ := json.Marshal(got[0])
			for r := 1; r < n; r++ {
				if jr, _ := json.Marshal(got[r]); !bytes.Equal(j0, jr) {
					t.Fatalf("%s, %d ranks: ranks 0 and %d fitted different pipelines:\n%s\n%s", mode, n, r, j0, jr)
				}
			}
			samePipeline(t, fmt.Sprintf("%s, %d ranks", mode, n), got[0], want)
		}
	}
}

// samePipeline compares fitted states: exact but for means and deviations.
func samePipeline(t *testing.T, what string, got, want *Pipeline) {
	t.Helper()
	if !slices.Equal(got.Features, want.Features) || len(got.Steps) != len(want.Steps) {
		t.Fatalf("%s: features %v, want %v", what, got.Features, want.Features)
	}
	close := func(name string, a, b []float64) {
		t.Helper()
		if len(a) != len(b) {
			t.Fatalf("%s: %s %v, want %v", what, name, a, b)
		}
		for i := range a {
			if d := math.Abs(a[i] - b[i]); d > 1e-12*math.Abs(b[i]) {
				t.Errorf("%s: %s[%d] = %.17g, single process %.17g (relative %.2g)", what, name, i, a[i], b[i], d/math.Abs(b[i]))
			}
		}
	}
	for i, g := range got.Steps {
		w := want.Steps[i]
		close(fmt.Sprintf("step %d mean", i), g.Mean, w.Mean)
		close(fmt.Sprintf("step %d std", i), g.Std, w.Std)
		if !slices.Equal(g.Min, w.Min) || !slices.Equal(g.Max, w.Max) || !slices.Equal(g.Count, w.Count) ||
			!slices.EqualFunc(g.Categories, w.Categories, slices.Equal) || g.Type != w.Type {
			t.Errorf("%s: step %d: %+v, single process %+v", what, i, g, w)
		}
		if w.Strategy == "mean" {
			var gf, wf []float64
			for k := range g.Fill {
				gf, wf = append(gf, g.Fill[k].(float64)), append(wf, w.Fill[k].(float64))
			}
			close(fmt.Sprintf("step %d fill", i), gf, wf)
		} else if fmt.Sprint(g.Fill) != fmt.Sprint(w.Fill) {
			t.Errorf("%s: step %d fill %v, single process %v", what, i, g.Fill, w.Fill)
		}
	}
}

// TestFitValues checks fitted values against what they must be, computed
// here, and against scikit-learn when it is installed (Debian's
// python3-sklearn under /usr/bin/python3).
func TestFitValues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "v.csv")
	os.WriteFile(p, []byte("a,b,c,y\n1,10,red,0\n2,,blue,1\n4,30,red,0\n,40,,1\n8,50,green,0\n"), 0o644)
	s := mustOpen(t, api.DatasetSpec{URI: p, Label: "y"}, ShardOptions{}, nil)
	pl, err := s.Fit(context.Background(), []api.PreprocessorSpec{
		{Type: "standard_scaler", Columns: []string{"a"}},
		{Type: "min_max_scaler", Columns: []string{"b"}},
		{Type: "simple_imputer", Columns: []string{"c"}, Strategy: "constant", FillValue: "none"},
		{Type: "one_hot_encoder", Columns: []string{"c"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// a: 1 2 4 8 → mean 3.75, population std sqrt(((2.75)²+(1.75)²+(.25)²+(4.25)²)/4).
	st := pl.Steps[0]
	if st.Mean[0] != 3.75 || math.Abs(st.Std[0]-math.Sqrt((7.5625+3.0625+0.0625+18.0625)/4)) > 1e-15 || st.Count[0] != 4 {
		t.Errorf("standard_scaler: %+v", st)
	}
	if mm := pl.Steps[1]; mm.Min[0] != 10 || mm.Max[0] != 50 || mm.Count[0] != 4 {
		t.Errorf("min_max_scaler: %+v", mm)
	}
	if oh := pl.Steps[3]; !slices.Equal(oh.Categories[0], []string{"blue", "green", "none", "red"}) {
		t.Errorf("one_hot_encoder categories %v, want the sorted values with the imputer's fill", oh.Categories)
	}
	want := []string{"a", "b", "c=blue", "c=green", "c=none", "c=red"}
	if !slices.Equal(pl.Features, want) {
		t.Errorf("features %v, want %v", pl.Features, want)
	}
	sklearnCheck(t, p, pl)
}

const sklearnScript = `
import json, sys
import pandas as pd
from sklearn.preprocessing import StandardScaler, MinMaxScaler, OneHotEncoder
from sklearn.impute import SimpleImputer
df = pd.read_csv(sys.argv[1])
ss = StandardScaler().fit(df[["a"]])
mm = MinMaxScaler().fit(df[["b"]])
c = SimpleImputer(strategy="constant", fill_value="none").fit_transform(df[["c"]].astype(object))
oh = OneHotEncoder().fit(c)
print(json.dumps({"mean": ss.mean_.tolist(), "std": ss.scale_.tolist(), "min": mm.data_min_.tolist(), "max": mm.data_max_.tolist(),
                  "cats": [list(map(str, x)) for x in oh.categories_]}))
`

func sklearnCheck(t *testing.T, csvPath string, pl *Pipeline) {
	t.Helper()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Logf("no %s: scikit-learn comparison skipped", python)
		return
	}
	out, err := exec.Command(python, "-c", sklearnScript, csvPath).Output()
	if err != nil {
		t.Logf("scikit-learn comparison skipped: %v", err)
		return
	}
	var sk struct {
		Mean, Std, Min, Max []float64
		Cats                [][]string
	}
	if err := json.Unmarshal(out, &sk); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if !slices.Equal(sk.Mean, pl.Steps[0].Mean) || !slices.Equal(sk.Std, pl.Steps[0].Std) ||
		!slices.Equal(sk.Min, pl.Steps[1].Min) || !slices.Equal(sk.Max, pl.Steps[1].Max) ||
		!slices.EqualFunc(sk.Cats, pl.Steps[3].Categories, slices.Equal) {
		t.Errorf("scikit-learn fitted %+v; we fitted %+v", sk, pl.Steps)
	}
}

// TestPipelineApplyStandalone: a pipeline saved as JSON and loaded again
// applies to a batch built by hand (as a predictor would), without any
// dataset or collective, exactly as the shard applied it; unknown
// categories encode as zeros (one-hot) or -1 (ordinal), missing ones as
// the imputer's fill.
func TestPipelineApplyStandalone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	uri := fitTable(t, dir, "csv", 400)
	no := false
	s := mustOpen(t, api.DatasetSpec{URI: uri, Label: "y", Categorical: []string{"band"}, Shuffle: &no, Remainder: "exact"}, ShardOptions{BatchSize: 400}, nil)
	pl, err := s.Fit(context.Background(), fitPre)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 400*s.Width())
	y := make([]float32, 400)
	n, err := s.Next(context.Background(), x, y)
	if err != nil || n != 400 {
		t.Fatal(n, err)
	}
	if err := pl.Save(dir); err != nil {
		t.Fatal(err)
	}
	back, err := LoadPipeline(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The rows read again, by hand, columns in another order plus one more.
	cols := []format.ColumnInfo{{Name: "extra", Kind: format.Numeric}, {Name: "band", Kind: format.Categorical}, {Name: "city", Kind: format.Categorical}, {Name: "w", Kind: format.Numeric}, {Name: "x", Kind: format.Numeric}, {Name: "id", Kind: format.Numeric}}
	b := format.NewBatch(cols, 2)
	b.Reset(2)
	lines, _ := os.ReadFile(filepath.Join(dir, "p0.csv"))
	recs, err := csv.NewReader(bytes.NewReader(lines)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	recs = recs[1:] // the header
	for _, rec := range recs {
		for k, v := range rec {
			if slices.Contains(api.DefaultNullValues, v) {
				rec[k] = "<nil>" // a missing value, as the reader sees it
			}
		}
	}
	for i, rec := range recs[:2] { // id,x,w,city,band,y
		num := func(v string) float64 {
			if v == "<nil>" {
				return math.NaN()
			}
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
		b.SetNumber(5, i, num(rec[0]))
		b.SetNumber(4, i, num(rec[1]))
		b.SetNumber(3, i, num(rec[2]))
		if rec[3] != "<nil>" {
			b.SetString(2, i, rec[3])
		}
		b.SetString(1, i, rec[4])
	}
	got := make([]float32, 2*back.Width())
	if err := back.Apply(b, got); err != nil {
		t.Fatal(err)
	}
	w := s.Width()
	if !slices.Equal(got, x[:2*w]) {
		t.Fatalf("standalone apply:\n%v\nthe shard gave\n%v", got, x[:2*w])
	}
	// Unknown and missing categories.
	b.SetString(2, 0, "atlantis")
	b.Cat[2][1] = -1
	b.SetString(1, 0, "ultra")
	if err := back.Apply(b, got); err != nil {
		t.Fatal(err)
	}
	oh := slices.IndexFunc(back.Steps, func(st Step) bool { return st.Type == "one_hot_encoder" })
	city := slices.Index(back.Features, "city="+back.Steps[oh].Categories[0][0])
	fill := back.Steps[1].Fill[0].(string)
	fillAt := slices.Index(back.Features, "city="+fill)
	for k := range 4 {
		if got[city+k] != 0 {
			t.Errorf("unknown city: one-hot %v, want zeros", got[city:city+4])
		}
	}
	if fillAt >= 0 && got[w+fillAt] != 1 {
		t.Errorf("missing city: one-hot %v, want the most frequent (%q) set", got[w+city:w+city+4], fill)
	}
	if band := slices.Index(back.Features, "band"); got[band] != -1 {
		t.Errorf("unknown band: %v, want -1", got[band])
	}
	// A batch lacking a column says which.
	err = back.Apply(format.NewBatch(cols[2:], 1), got)
	wantErr(t, err, true, `no column "band"`)
}

// TestLabelClasses: string labels are numbered in sorted order; a dataset
// given the training pipeline numbers its classes the same, and a class
// the training data never had is an error.
func TestLabelClasses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tr := filepath.Join(dir, "train.csv")
	va := filepath.Join(dir, "valid.csv")
	os.WriteFile(tr, []byte("a,y\n1,dog\n2,cat\n3,emu\n4,cat\n"), 0o644)
	os.WriteFile(va, []byte("a,y\n5,emu\n6,cat\n"), 0o644)
	no := false
	train := mustOpen(t, api.DatasetSpec{URI: tr, Label: "y", Shuffle: &no}, ShardOptions{BatchSize: 4}, nil)
	if got := train.Label().Classes; !slices.Equal(got, []string{"cat", "dog", "emu"}) {
		t.Fatalf("classes %v", got)
	}
	x, y := make([]float32, 4), make([]float32, 4)
	train.Next(context.Background(), x, y)
	if !slices.Equal(y, []float32{1, 0, 2, 0}) {
		t.Fatalf("labels %v, want [1 0 2 0]", y)
	}
	valid := mustOpen(t, api.DatasetSpec{URI: va, Label: "y", Shuffle: &no}, ShardOptions{Name: "valid", BatchSize: 4}, nil)
	if got := valid.Label().Classes; !slices.Equal(got, []string{"cat", "emu"}) {
		t.Fatalf("valid's own classes %v", got)
	}
	if err := valid.SetPipeline(train.Pipeline()); err != nil {
		t.Fatal(err)
	}
	n, _ := valid.Next(context.Background(), x, y)
	if !slices.Equal(y[:n], []float32{2, 0}) {
		t.Fatalf("valid labels %v, want train's numbers [2 0]", y[:n])
	}
	os.WriteFile(va, []byte("a,y\n5,yak\n6,cat\n"), 0o644)
	bad := mustOpen(t, api.DatasetSpec{URI: va, Label: "y", Shuffle: &no}, ShardOptions{Name: "valid", BatchSize: 4}, nil)
	bad.SetPipeline(train.Pipeline())
	_, err := bad.Next(context.Background(), x, y)
	wantErr(t, err, true, `label "y": value "yak" is not among the 3 classes`)
}
