package doccheck

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/api"
)

// FieldDoc is one field of the Fit input: its path in the JSON
// ("run.failure.max_failures", "datasets.NAME.uri", "preprocessors[].type"),
// its JSON type, and its doc comment in package api.
type FieldDoc struct {
	Path, Type, Doc string
}

// apiFieldDocs reads package api's sources: "Type.Field" to the field's
// doc comment. A field without one shares the comment of the field before
// it (MinWorkers and MaxWorkers).
func apiFieldDocs(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(root, "api", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			prev := ""
			for _, fld := range st.Fields.List {
				doc := prev
				if fld.Doc != nil {
					doc = oneLine(fld.Doc.Text())
				} else if fld.Comment != nil {
					doc = oneLine(fld.Comment.Text())
				}
				for _, name := range fld.Names {
					out[ts.Name.Name+"."+name.Name] = doc
				}
				prev = doc
			}
			return false
		})
	}
	return out
}

// oneLine joins a comment's lines; an indented example block keeps its
// words, its spacing collapsed.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// fitInputFields walks api.FitInput by reflection, every JSON field at
// every depth, in declaration order.
func fitInputFields(t *testing.T) []FieldDoc {
	docs := apiFieldDocs(t)
	var out []FieldDoc
	var walk func(typ reflect.Type, prefix string, seen map[reflect.Type]bool)
	walk = func(typ reflect.Type, prefix string, seen map[reflect.Type]bool) {
		seen = maps(seen, typ)
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			path := prefix + name
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			doc, ok := docs[typ.Name()+"."+f.Name]
			if !ok {
				t.Errorf("api.%s.%s: no doc comment found in api/*.go", typ.Name(), f.Name)
			}
			out = append(out, FieldDoc{Path: path, Type: jsonType(ft), Doc: doc})
			switch {
			case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[api.Duration]() && !seen[ft]:
				walk(ft, path+".", seen)
			case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct && !seen[ft.Elem()]:
				walk(ft.Elem(), path+".NAME.", seen)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && !seen[ft.Elem()]:
				walk(ft.Elem(), path+"[].", seen)
			}
		}
	}
	walk(reflect.TypeFor[api.FitInput](), "", nil)
	return out
}

func maps(m map[reflect.Type]bool, add reflect.Type) map[reflect.Type]bool {
	out := map[reflect.Type]bool{add: true}
	for k := range m {
		out[k] = true
	}
	return out
}

// jsonType names a field's type as it is written in JSON.
func jsonType(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[api.Duration]():
		return `duration ("30s")`
	case t == reflect.TypeFor[json.RawMessage]():
		return "any JSON"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "int"
	case reflect.Float64, reflect.Float32:
		return "number"
	case reflect.Struct:
		return "object"
	case reflect.Interface:
		return "number or string"
	case reflect.Map:
		return "object of " + jsonType(t.Elem())
	case reflect.Slice:
		return "list of " + jsonType(t.Elem())
	case reflect.Pointer:
		return jsonType(t.Elem())
	}
	return t.String()
}

// TestFitInputDoc: docs/fit-input.md's generated table has a row for
// every field of the Fit input, with its doc comment.
func TestFitInputDoc(t *testing.T) {
	var b strings.Builder
	b.WriteString("| field | type | meaning (from package api) |\n|---|---|---|\n")
	for _, f := range fitInputFields(t) {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.Path, f.Type, cell(f.Doc))
	}
	checkGenerated(t, "docs/fit-input.md", "fields", b.String())
}

// TestFitInputFieldsWalked: the walk reaches the depths the doc needs (a
// map's values, a list's elements, a pointer's struct, nested configs).
func TestFitInputFieldsWalked(t *testing.T) {
	got := map[string]bool{}
	for _, f := range fitInputFields(t) {
		got[f.Path] = true
	}
	for _, want := range []string{"train_func", "scaling.min_workers", "run.failure.max_failures", "run.checkpoint.async_upload",
		"datasets.NAME.uri", "datasets.NAME.csv.delimiter", "datasets.NAME.image.width", "preprocessors[].type",
		"preprocessors[].steps", "python.entrypoint", "python.working_dir_sha256"} {
		if !got[want] {
			t.Errorf("the walk of api.FitInput has no %s", want)
		}
	}
	if got["preprocessors[].steps[].type"] {
		t.Error("the walk recursed into preprocessors[].steps (a chain's steps are preprocessors again)")
	}
}
