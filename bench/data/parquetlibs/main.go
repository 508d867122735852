// Command parquetlibs measures the two Go Parquet libraries on the same
// files, to choose the one package data reads Parquet with:
// github.com/parquet-go/parquet-go and github.com/apache/arrow-go/v18. It is
// a module of its own so that arrow-go stays out of tempotrain's go.mod.
//
//	cd bench/data/parquetlibs && go run . [-rows 1000000] [-rounds 5] [-procs 1]
//
// It writes one table (28 DOUBLE columns, 2 string columns, an INT64 label;
// Snappy; row groups of 128Ki rows) twice, once with each library
// (parquet-go: plain doubles, dictionary strings; arrow-go: its defaults,
// dictionary pages for every column), then reads each file with each
// library as package data does: every column of every row group into
// float32 columns, strings into dictionary codes, on -procs cores. It
// prints medians of wall time and CPU time.
package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	aparquet "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	afile "github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"
)

const nf = 28

var (
	nrows  = flag.Int("rows", 1000000, "rows of the table")
	rg     = flag.Int("rg", 131072, "rows per row group")
	rounds = flag.Int("rounds", 5, "rounds; medians over them")
	procs  = flag.Int("procs", 1, "GOMAXPROCS while reading")
	dir    = flag.String("dir", "", "scratch directory (default: a new temp dir)")
)

func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func gen() ([][]float64, [][]string, []int64) {
	r := rand.New(rand.NewPCG(1, 2))
	f := make([][]float64, nf)
	for j := range f {
		f[j] = make([]float64, *nrows)
		for i := range f[j] {
			f[j][i] = float64(float32(r.NormFloat64()*float64(j+1) + float64(j)))
		}
	}
	c := make([][]string, 2)
	for j := range c {
		c[j] = make([]string, *nrows)
		for i := range c[j] {
			c[j][i] = fmt.Sprintf("c%d_%d", j, r.IntN(10*(j*9+1)))
		}
	}
	y := make([]int64, *nrows)
	for i := range y {
		y[i] = int64(r.IntN(2))
	}
	return f, c, y
}

func writeArrow(path string, f [][]float64, c [][]string, y []int64) {
	var fields []arrow.Field
	for j := 0; j < nf; j++ {
		fields = append(fields, arrow.Field{Name: fmt.Sprintf("f%d", j), Type: arrow.PrimitiveTypes.Float64})
	}
	fields = append(fields, arrow.Field{Name: "c0", Type: arrow.BinaryTypes.String}, arrow.Field{Name: "c1", Type: arrow.BinaryTypes.String}, arrow.Field{Name: "y", Type: arrow.PrimitiveTypes.Int64})
	sc := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	for j := 0; j < nf; j++ {
		b.Field(j).(*array.Float64Builder).AppendValues(f[j], nil)
	}
	b.Field(nf).(*array.StringBuilder).AppendValues(c[0], nil)
	b.Field(nf+1).(*array.StringBuilder).AppendValues(c[1], nil)
	b.Field(nf+2).(*array.Int64Builder).AppendValues(y, nil)
	rec := b.NewRecordBatch()
	out, _ := os.Create(path)
	props := aparquet.NewWriterProperties(aparquet.WithCompression(compress.Codecs.Snappy), aparquet.WithMaxRowGroupLength(int64(*rg)))
	w, err := pqarrow.NewFileWriter(sc, out, props, pqarrow.DefaultWriterProps())
	if err != nil {
		panic(err)
	}
	if err := w.Write(rec); err != nil {
		panic(err)
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
}

func writePGo(path string, f [][]float64, c [][]string, y []int64) {
	g := parquet.Group{}
	for j := 0; j < nf; j++ {
		g[fmt.Sprintf("f%d", j)] = parquet.Compressed(parquet.Leaf(parquet.DoubleType), &parquet.Snappy)
	}
	g["c0"] = parquet.Compressed(parquet.Encoded(parquet.String(), &parquet.RLEDictionary), &parquet.Snappy)
	g["c1"] = parquet.Compressed(parquet.Encoded(parquet.String(), &parquet.RLEDictionary), &parquet.Snappy)
	g["y"] = parquet.Compressed(parquet.Int(64), &parquet.Snappy)
	schema := parquet.NewSchema("t", g)
	out, _ := os.Create(path)
	w := parquet.NewGenericWriter[any](out, schema, parquet.MaxRowsPerRowGroup(int64(*rg)))
	// columns are in sorted name order in a Group
	cols := schema.Columns()
	idx := map[string]int{}
	for i, p := range cols {
		idx[p[0]] = i
	}
	rows := make([]parquet.Row, 0, 1024)
	for i := 0; i < *nrows; i++ {
		row := make(parquet.Row, len(cols))
		for j := 0; j < nf; j++ {
			k := idx[fmt.Sprintf("f%d", j)]
			row[k] = parquet.DoubleValue(f[j][i]).Level(0, 0, k)
		}
		row[idx["c0"]] = parquet.ByteArrayValue([]byte(c[0][i])).Level(0, 0, idx["c0"])
		row[idx["c1"]] = parquet.ByteArrayValue([]byte(c[1][i])).Level(0, 0, idx["c1"])
		row[idx["y"]] = parquet.Int64Value(y[i]).Level(0, 0, idx["y"])
		rows = append(rows, row)
		if len(rows) == cap(rows) {
			if _, err := w.WriteRows(rows); err != nil {
				panic(err)
			}
			rows = rows[:0]
		}
	}
	if _, err := w.WriteRows(rows); err != nil {
		panic(err)
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	out.Close()
}

type dict struct {
	m    map[string]int32
	vals []string
}

func (d *dict) code(b []byte) int32 {
	if c, ok := d.m[string(b)]; ok {
		return c
	}
	c := int32(len(d.vals))
	d.m[string(b)] = c
	d.vals = append(d.vals, string(b))
	return c
}

func readPGo(path string) int {
	fh, _ := os.Open(path)
	defer fh.Close()
	st, _ := fh.Stat()
	pf, err := parquet.OpenFile(fh, st.Size())
	if err != nil {
		panic(err)
	}
	cols := pf.Schema().Columns()
	dicts := map[int]*dict{}
	total := 0
	var f64 []float64
	for _, g := range pf.RowGroups() {
		n := int(g.NumRows())
		for ci, cc := range g.ColumnChunks() {
			name := cols[ci][0]
			pages := cc.Pages()
			var outF []float32
			var outC []int32
			isStr := name == "c0" || name == "c1"
			if isStr {
				outC = make([]int32, 0, n)
				if dicts[ci] == nil {
					dicts[ci] = &dict{m: map[string]int32{}}
				}
			} else {
				outF = make([]float32, 0, n)
			}
			for {
				p, err := pages.ReadPage()
				if err == io.EOF {
					break
				}
				if err != nil {
					panic(err)
				}
				data := p.Data()
				switch {
				case isStr:
					d := dicts[ci]
					if pd := p.Dictionary(); pd != nil {
						// map dictionary once
						dv := pd.Page().Data()
						vals, offs := dv.ByteArray()
						tr := make([]int32, pd.Len())
						for k := range tr {
							tr[k] = d.code(vals[offs[k]:offs[k+1]])
						}
						for _, ix := range data.Int32() {
							outC = append(outC, tr[ix])
						}
					} else {
						vals, offs := data.ByteArray()
						for k := 0; k+1 < len(offs); k++ {
							outC = append(outC, d.code(vals[offs[k]:offs[k+1]]))
						}
					}
				case p.Dictionary() != nil:
					dd := p.Dictionary().Page().Data()
					var tr []float32
					if name == "y" {
						for _, v := range dd.Int64() {
							tr = append(tr, float32(v))
						}
					} else {
						for _, v := range dd.Double() {
							tr = append(tr, float32(v))
						}
					}
					for _, ix := range data.Int32() {
						outF = append(outF, tr[ix])
					}
				case name == "y":
					for _, v := range data.Int64() {
						outF = append(outF, float32(v))
					}
				default:
					f64 = data.Double()
					for _, v := range f64 {
						outF = append(outF, float32(v))
					}
				}
				parquet.Release(p)
			}
			pages.Close()
			if isStr {
				total += len(outC)
			} else {
				total += len(outF)
			}
		}
	}
	return total
}

func readArrow(path string) int {
	r, err := afile.OpenParquetFile(path, false)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	sc := r.MetaData().Schema
	dicts := map[int]*dict{}
	total := 0
	f64 := make([]float64, 8192)
	i64 := make([]int64, 8192)
	ba := make([]aparquet.ByteArray, 8192)
	for gi := 0; gi < r.NumRowGroups(); gi++ {
		g := r.RowGroup(gi)
		n := int(g.NumRows())
		for ci := 0; ci < sc.NumColumns(); ci++ {
			cr, err := g.Column(ci)
			if err != nil {
				panic(err)
			}
			switch c := cr.(type) {
			case *afile.Float64ColumnChunkReader:
				out := make([]float32, 0, n)
				for {
					_, k, err := c.ReadBatch(8192, f64, nil, nil)
					if err != nil {
						panic(err)
					}
					if k == 0 {
						break
					}
					for _, v := range f64[:k] {
						out = append(out, float32(v))
					}
				}
				total += len(out)
			case *afile.Int64ColumnChunkReader:
				out := make([]float32, 0, n)
				for {
					_, k, err := c.ReadBatch(8192, i64, nil, nil)
					if err != nil {
						panic(err)
					}
					if k == 0 {
						break
					}
					for _, v := range i64[:k] {
						out = append(out, float32(v))
					}
				}
				total += len(out)
			case *afile.ByteArrayColumnChunkReader:
				if dicts[ci] == nil {
					dicts[ci] = &dict{m: map[string]int32{}}
				}
				d := dicts[ci]
				out := make([]int32, 0, n)
				defl := make([]int16, 8192)
				for {
					_, k, err := c.ReadBatch(8192, ba, defl, nil)
					if err != nil {
						panic(err)
					}
					if k == 0 {
						break
					}
					for _, v := range ba[:k] {
						out = append(out, d.code(v))
					}
				}
				total += len(out)
			default:
				panic(fmt.Sprintf("%T", cr))
			}
		}
	}
	return total
}

func med(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func main() {
	flag.Parse()
	if *dir == "" {
		d, err := os.MkdirTemp("", "parquetlibs-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	runtime.GOMAXPROCS(*procs)
	f, c, y := gen()
	writePGo(*dir+"/pgo.parquet", f, c, y)
	writeArrow(*dir+"/arrow.parquet", f, c, y)
	f, c, y = nil, nil, nil
	runtime.GC()
	names := map[string]string{"pgo": "parquet-go", "arrow": "arrow-go"}
	for _, file := range []string{"pgo", "arrow"} {
		p := *dir + "/" + file + ".parquet"
		st, _ := os.Stat(p)
		for _, lib := range []string{"parquet-go", "arrow-go"} {
			var ws, cs []time.Duration
			for round := 0; round < *rounds; round++ {
				runtime.GC()
				t0, c0 := time.Now(), cpu()
				var n int
				if lib == "parquet-go" {
					n = readPGo(p)
				} else {
					n = readArrow(p)
				}
				ws = append(ws, time.Since(t0))
				cs = append(cs, cpu()-c0)
				if n != *nrows*(nf+3) {
					panic(n)
				}
			}
			w, cp := med(ws), med(cs)
			fmt.Printf("file written by %-10s (%5.1f MiB) read by %-10s: %7.0f ms wall  %7.0f ms CPU  %5.2f Mrows/s  %5.2f Mrows/CPU-s\n", names[file], float64(st.Size())/(1<<20), lib, w.Seconds()*1000, cp.Seconds()*1000, float64(*nrows)/w.Seconds()/1e6, float64(*nrows)/cp.Seconds()/1e6)
		}
	}
}
