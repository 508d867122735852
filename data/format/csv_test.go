package format

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/api"
)

func dialect(mut func(*api.CSVOptions)) *csvDialect {
	o := api.DatasetSpec{URI: "/x.csv"}.WithDefaults().CSV
	if mut != nil {
		mut(&o)
	}
	return newDialect(o)
}

// parseBytes reads a whole CSV file from memory as the reader does, every
// column as strings (categorical), chunk bytes at a time on workers
// goroutines, and returns the header and the records ("<nil>" for a
// missing value).
func parseBytes(d *csvDialect, data []byte, chunk, workers int) ([]string, [][]string, error) {
	h, _, err := d.readHead(data, true, false)
	if err != nil {
		return nil, nil, err
	}
	slots := make([]Slot, len(h.names))
	cols := make([]int, len(h.names))
	for k, n := range h.names {
		slots[k] = Slot{Name: n, Kind: Categorical}
		cols[k] = k
	}
	p := newCSVParser(d, "mem.csv", len(h.names), slots, cols, 0)
	var recs [][]string
	dicts := make([]*Dict, len(slots))
	for k := range dicts {
		dicts[k] = NewDict()
	}
	var scratch []int32
	err = p.parseStream(context.Background(), bytes.NewReader(data[h.start:]), h.line, nil, workers, chunk, func(b *Block) error {
		scratch = b.MergeDicts(dicts, scratch)
		for r := range b.N {
			rec := make([]string, len(slots))
			for k := range slots {
				if c := b.Cat[k][r]; c < 0 {
					rec[k] = "<nil>"
				} else {
					rec[k] = dicts[k].String(c)
				}
			}
			recs = append(recs, rec)
		}
		return nil
	})
	return h.names, recs, err
}

func TestCSVDialects(t *testing.T) {
	t.Parallel()
	noNulls := func(o *api.CSVOptions) { o.NullValues = []string{} }
	tests := []struct {
		name  string
		mut   func(*api.CSVOptions)
		in    string
		head  []string
		recs  [][]string
		error string
	}{
		{"plain", nil, "a,b\n1,2\n3,4\n", []string{"a", "b"}, [][]string{{"1", "2"}, {"3", "4"}}, ""},
		{"no final newline", nil, "a,b\n1,2\n3,4", nil, [][]string{{"1", "2"}, {"3", "4"}}, ""},
		{"CRLF", nil, "a,b\r\n1,2\r\n3,4\r\n", []string{"a", "b"}, [][]string{{"1", "2"}, {"3", "4"}}, ""},
		{"CRLF after quotes", nil, "a,b\r\n\"1\",\"2\"\r\n", nil, [][]string{{"1", "2"}}, ""},
		{"BOM", nil, "\xef\xbb\xbfa,b\n1,2\n", []string{"a", "b"}, [][]string{{"1", "2"}}, ""},
		{"blank lines", nil, "a,b\n\n1,2\r\n\r\n3,4\n\n", nil, [][]string{{"1", "2"}, {"3", "4"}}, ""},
		{"quoted delimiter, newline, quote", noNulls, "a,b\n\"x,y\",\"line1\nline2\"\n\"say \"\"hi\"\"\",\n", nil,
			[][]string{{"x,y", "line1\nline2"}, {`say "hi"`, ""}}, ""},
		{"quoted CRLF kept", noNulls, "a\n\"p\r\nq\"\n", nil, [][]string{{"p\r\nq"}}, ""},
		{"empty quoted", noNulls, "a,b\n\"\",x\n", nil, [][]string{{"", "x"}}, ""},
		{"semicolon", func(o *api.CSVOptions) { o.Delimiter = ";" }, "a;b\n1,5;2\n", []string{"a", "b"}, [][]string{{"1,5", "2"}}, ""},
		{"tab", func(o *api.CSVOptions) { o.Delimiter = "\t" }, "a\tb\nx y\tz\n", nil, [][]string{{"x y", "z"}}, ""},
		{"single quote", func(o *api.CSVOptions) { o.Quote = "'" }, "a,b\n'x,y',\"z\"\n", nil, [][]string{{"x,y", `"z"`}}, ""},
		{"nulls", nil, "a,b,c\nNA,,null\nN/A,x,\n", nil, [][]string{{"<nil>", "<nil>", "<nil>"}, {"<nil>", "x", "<nil>"}}, ""},
		{"custom nulls", func(o *api.CSVOptions) { o.NullValues = []string{"-", "?"} }, "a,b\n-,NA\n?,\n", nil,
			[][]string{{"<nil>", "NA"}, {"<nil>", ""}}, ""},
		{"no header", func(o *api.CSVOptions) { f := false; o.Header = &f }, "1,2\n3,4\n", []string{"c0", "c1"}, [][]string{{"1", "2"}, {"3", "4"}}, ""},
		{"no header, named", func(o *api.CSVOptions) { f := false; o.Header = &f; o.Columns = []string{"u", "v"} }, "1,2\n", []string{"u", "v"}, [][]string{{"1", "2"}}, ""},
		{"trailing delimiter at EOF", noNulls, "a,b\n1,", nil, [][]string{{"1", ""}}, ""},
		{"too few fields", nil, "a,b,c\n1,2,3\n4,5\n", nil, nil, "mem.csv:3: the record has 2 fields, the header 3"},
		{"too many fields", nil, "a,b\n1,2\n\n4,5,6\n", nil, nil, "mem.csv:4: the record has 3 fields, the header 2"},
		{"bare quote", nil, "a,b\n1,2\nx\"y,3\n", nil, nil, `mem.csv:3: column "a": value "x\"": a quote inside an unquoted field`},
		{"text after quote", nil, "a,b\n\"x\"y,2\n", nil, nil, `unexpected 'y' after a closing quote`},
		{"unterminated quote", nil, "a,b\n1,2\n\"open,3\n4,5\n", nil, nil, "mem.csv:3: column \"a\": value \"open,3\\n4,5\\n\": a quoted field is not closed"},
		{"line numbers count quoted newlines", nil, "a,b\n\"1\n2\n3\",x\n1,2,3\n", nil, nil, "mem.csv:5: the record has 3 fields"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, chunk := range []int{1, 3, 1 << 20} {
				head, recs, err := parseBytes(dialect(tc.mut), []byte(tc.in), chunk, 2)
				if tc.error != "" {
					if err == nil || !strings.Contains(err.Error(), tc.error) {
						t.Fatalf("chunk %d: err = %v, want %q", chunk, err, tc.error)
					}
					if !errors.Is(err, ErrInvalid) {
						t.Fatalf("chunk %d: %v is not ErrInvalid", chunk, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("chunk %d: %v", chunk, err)
				}
				if tc.head != nil && !slices.Equal(head, tc.head) {
					t.Errorf("chunk %d: header %q, want %q", chunk, head, tc.head)
				}
				if !slices.EqualFunc(recs, tc.recs, slices.Equal) {
					t.Errorf("chunk %d: records %q, want %q", chunk, recs, tc.recs)
				}
			}
		})
	}
}

func TestParseFloat32(t *testing.T) {
	check := func(s string) {
		t.Helper()
		want, err := strconv.ParseFloat(s, 32)
		got, ok := parseFloat32([]byte(s))
		if err != nil {
			if ok {
				t.Fatalf("parseFloat32(%q) = %v, strconv fails: %v", s, got, err)
			}
			return
		}
		if !ok || math.Float32bits(got) != math.Float32bits(float32(want)) && !(got != got && want != want) {
			t.Fatalf("parseFloat32(%q) = %v (%v), strconv %v", s, got, ok, float32(want))
		}
	}
	for _, s := range []string{"0", "-0", "+1", "1.", ".5", "1e10", "1E-10", "-1.5e+3", "123456789012345678", "1234567890123456789012",
		"3.4028235e38", "3.4028236e38", "1e39", "1e-46", "1.17549435e-38", "1.4e-45", "0.000000000000000000000000000001",
		"16777217", "0.1", "nan", "NaN", "inf", "-Infinity", "1e", "e5", "1.2.3", "--1", "", "-", ".", "0x1p-2", "1_000",
		"9007199254740993", "1e22", "1e23", "4.7019774e-38", "33554431", "33554433"} {
		check(s)
	}
	// Random decimals of every length, and float32s written shortest.
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		var b []byte
		if r.IntN(2) == 0 {
			b = strconv.AppendFloat(b, float64(math.Float32frombits(r.Uint32())), 'g', -1, 32)
		} else {
			if r.IntN(3) == 0 {
				b = append(b, '-')
			}
			for range 1 + r.IntN(12) {
				b = append(b, byte('0'+r.IntN(10)))
			}
			if r.IntN(2) == 0 {
				b = append(b, '.')
				for range r.IntN(12) {
					b = append(b, byte('0'+r.IntN(10)))
				}
			}
			if r.IntN(4) == 0 {
				b = append(b, 'e')
				b = strconv.AppendInt(b, int64(r.IntN(90)-45), 10)
			}
		}
		check(string(b))
	}
	if n := testing.AllocsPerRun(100, func() { parseFloat32([]byte("1.234567890123456789e-3")) }); n != 0 {
		t.Errorf("the slow path allocates %v times", n)
	}
}

func TestScanUnitsCountsRecords(t *testing.T) {
	t.Parallel()
	d := dialect(nil)
	var b strings.Builder
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		switch r.IntN(10) {
		case 0:
			b.WriteString("\n") // blank
		case 1:
			b.WriteString("\"multi\nline\",2\r\n")
		default:
			b.WriteString(strconv.Itoa(i) + ",x\n")
		}
	}
	b.WriteString("last,1") // no newline
	data := []byte(b.String())
	_, recs, err := parseBytes(d, append([]byte("a,b\n"), data...), 4096, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, unit := range []int{1, 100, 4096, 1 << 20} {
		units, err := scanUnits(context.Background(), bytes.NewReader(data), 4, 2, '"', unit)
		if err != nil {
			t.Fatal(err)
		}
		var rows, size int64
		for i, u := range units {
			if u.Off != 4+size {
				t.Fatalf("unit size %d: unit %d starts at %d, want %d", unit, i, u.Off, 4+size)
			}
			size += u.Size
			rows += u.Rows
			// Each unit parses alone to its row count, from its line.
			p := newCSVParser(d, "m", 2, []Slot{{Name: "a", Kind: Categorical}, {Name: "b", Kind: Categorical}}, []int{0, 1}, 0)
			blk, err := p.parse(data[u.Off-4:u.Off-4+u.Size], u.Line, nil, &parseScratch{})
			if err != nil {
				t.Fatalf("unit size %d: unit %d (line %d): %v", unit, i, u.Line, err)
			}
			if int64(blk.N) != u.Rows {
				t.Fatalf("unit size %d: unit %d parses to %d rows, scanned %d", unit, i, blk.N, u.Rows)
			}
		}
		if size != int64(len(data)) || rows != int64(len(recs)) {
			t.Fatalf("unit size %d: units cover %d bytes and %d rows, want %d and %d", unit, size, rows, len(data), len(recs))
		}
	}
}

// FuzzCSV feeds arbitrary bytes to the CSV reader: it must not crash; the
// records must not depend on how the input is cut into chunks; the scan of
// record ends must count what the parser parses; and where encoding/csv
// reads the input too (no '\r', the same field count everywhere), the
// records must be the same.
//
//	go test ./data -run '^$' -fuzz FuzzCSV -fuzztime 30s
func FuzzCSV(f *testing.F) {
	for _, s := range []string{"a,b\n1,2\n", "a,b\r\n\"x,\"\"y\"\"\",\n\n", "x\n\"\n\"\n", "\xef\xbb\xbfa\n1", "a,b\n1,2,3\n", "a\n\"", "a,b\n,\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(fuzzCSV)
}

func fuzzCSV(t *testing.T, data []byte) {
	{
		d := dialect(func(o *api.CSVOptions) { o.NullValues = []string{} })
		head, whole, err := parseBytes(d, data, 1<<20, 1)
		_, small, err2 := parseBytes(d, data, 7, 3)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("whole: %v; in chunks of 7: %v", err, err2)
		}
		if err != nil {
			if err.Error() != err2.Error() {
				t.Fatalf("errors differ with the chunking: %v / %v", err, err2)
			}
			return
		}
		if !slices.EqualFunc(whole, small, slices.Equal) {
			t.Fatalf("records differ with the chunking:\n%q\n%q", whole, small)
		}
		h, _, _ := d.readHead(data, true, false)
		units, err := scanUnits(context.Background(), bytes.NewReader(data[h.start:]), h.start, h.line, '"', 5)
		if err != nil {
			t.Fatal(err)
		}
		var rows int64
		for _, u := range units {
			rows += u.Rows
		}
		if rows != int64(len(whole)) {
			t.Fatalf("scan counts %d records, the parser %d", rows, len(whole))
		}
		if bytes.ContainsRune(data, '\r') || bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
			return
		}
		r := csv.NewReader(bytes.NewReader(data))
		ref, err := r.ReadAll()
		if err != nil || len(ref) == 0 {
			return
		}
		if !slices.Equal(ref[0], head) {
			t.Fatalf("header %q, encoding/csv %q", head, ref[0])
		}
		for i := range ref[1:] {
			if i >= len(whole) || !slices.Equal(ref[1+i], whole[i]) {
				t.Fatalf("record %d: encoding/csv %q, ours %q", i, ref[1+i], whole)
			}
		}
		if len(whole) != len(ref)-1 {
			t.Fatalf("%d records, encoding/csv %d", len(whole), len(ref)-1)
		}
	}
}
