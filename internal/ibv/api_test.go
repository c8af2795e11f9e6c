package ibv

import (
	"bytes"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTwinAPI checks that the cgo build and the !cgo twin export the same
// API: the same functions and methods with the same signatures, and the same
// types with the same exported fields.
func TestTwinAPI(t *testing.T) {
	real := exportedAPI(t, map[string]bool{"cgo": true, "linux": true})
	twin := exportedAPI(t, map[string]bool{"linux": true})
	for k, v := range real {
		if w, ok := twin[k]; !ok {
			t.Errorf("the !cgo build lacks %s", v)
		} else if w != v {
			t.Errorf("the builds differ:\n  cgo:  %s\n  !cgo: %s", v, w)
		}
	}
	for k, v := range twin {
		if _, ok := real[k]; !ok {
			t.Errorf("only the !cgo build has %s", v)
		}
	}
	if len(real) < 50 {
		t.Errorf("found only %d exported declarations: is the parser looking at the right files?", len(real))
	}
}

// exportedAPI parses the package's non-test Go files that the tags select
// and returns its exported declarations, keyed by name.
func exportedAPI(t *testing.T, tags map[string]bool) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string]string{}
	str := func(n any) string {
		var b bytes.Buffer
		if err := printer.Fprint(&b, fset, n); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	fields := func(fl *ast.FieldList) string {
		if fl == nil {
			return "()"
		}
		var parts []string
		for _, f := range fl.List {
			n := max(len(f.Names), 1)
			for range n {
				parts = append(parts, str(f.Type))
			}
		}
		return "(" + strings.Join(parts, ", ") + ")"
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || !selected(t, name, tags) {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				key := d.Name.Name
				if d.Recv != nil {
					key = str(d.Recv.List[0].Type) + "." + key
				}
				out[key] = "func " + key + fields(d.Type.Params) + " " + fields(d.Type.Results)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					desc := "type " + ts.Name.Name
					if st, ok := ts.Type.(*ast.StructType); ok {
						var fs []string
						for _, f := range st.Fields.List {
							for _, n := range f.Names {
								if n.IsExported() {
									fs = append(fs, n.Name+" "+str(f.Type))
								}
							}
						}
						slices.Sort(fs)
						desc += " struct{" + strings.Join(fs, "; ") + "}"
					} else {
						desc += " " + str(ts.Type)
					}
					out["type "+ts.Name.Name] = desc
				}
			}
		}
	}
	return out
}

// selected reports whether the build tags select the file, by its
// //go:build line and its _GOOS suffix.
func selected(t *testing.T, name string, tags map[string]bool) bool {
	base := strings.TrimSuffix(name, ".go")
	for _, goos := range []string{"linux", "darwin", "windows", "freebsd"} {
		if strings.HasSuffix(base, "_"+goos) && !tags[goos] {
			return false
		}
	}
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "package ") {
			break
		}
		if constraint.IsGoBuild(line) {
			expr, err := constraint.Parse(line)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return expr.Eval(func(tag string) bool { return tags[tag] })
		}
	}
	return true
}
