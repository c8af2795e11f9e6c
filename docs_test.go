package xfer_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// exampleMarker is the comment that must stand on the line before every Go
// code block in the Markdown files: it names the Example function whose
// body the block shows, e.g. <!-- example: kv/example_test.go Example -->.
var exampleMarker = regexp.MustCompile(`^<!-- example: (\S+) (Example\w*) -->$`)

// TestDocsCodeIsExamples: every Go block in README.md and docs/ is the body
// of an Example function, verbatim, and that Example has an Output comment,
// so `go test` compiles and runs what the docs show.
func TestDocsCodeIsExamples(t *testing.T) {
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, file := range files {
		for _, b := range goBlocks(t, file) {
			blocks++
			if b.file == "" {
				t.Errorf("%s:%d: a Go block without an <!-- example: FILE ExampleName --> line before it: make it an Example function and name it", file, b.line)
				continue
			}
			body, hasOutput, err := exampleBody(b.file, b.fn)
			if err != nil {
				t.Errorf("%s:%d: %v", file, b.line, err)
				continue
			}
			if !hasOutput {
				t.Errorf("%s:%d: %s in %s has no // Output: comment, so go test does not run it", file, b.line, b.fn, b.file)
			}
			if body != b.text {
				t.Errorf("%s:%d: the block differs from the body of %s in %s; paste the body again.\n%s", file, b.line, b.fn, b.file, firstDiff(b.text, body))
			}
		}
	}
	if blocks == 0 {
		t.Fatal("no Go blocks found in README.md and docs/: the test checks nothing")
	}
}

type goBlock struct {
	line     int    // of the opening fence
	file, fn string // the example it shows
	text     string
}

func goBlocks(t *testing.T, path string) []goBlock {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []goBlock
	var cur *goBlock
	var buf strings.Builder
	prev := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &goBlock{line: n}
			if m := exampleMarker.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
				cur.file, cur.fn = m[1], m[2]
			}
			buf.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.text = buf.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			buf.WriteString(line)
			buf.WriteByte('\n')
		}
		prev = line
	}
	return out
}

// exampleBody returns the statements of function fn in file, as written,
// one tab of indentation less, and whether it has an Output comment.
func exampleBody(file, fn string) (string, bool, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return "", false, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return "", false, err
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != fn || fd.Recv != nil {
			continue
		}
		open := fset.Position(fd.Body.Lbrace).Offset
		end := fset.Position(fd.Body.Rbrace).Offset
		inner := strings.TrimPrefix(string(src[open+1:end]), "\n")
		var b strings.Builder
		for _, l := range strings.SplitAfter(inner, "\n") {
			b.WriteString(strings.TrimPrefix(l, "\t"))
		}
		return b.String(), strings.Contains(inner, "// Output:"), nil
	}
	return "", false, fmt.Errorf("no function %s in %s", fn, file)
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the block:\n  docs:    %q\n  example: %q", i+1, gl, wl)
		}
	}
	return "(they differ in trailing lines)"
}
