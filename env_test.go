package xfer_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestOnlyCommandsReadEnvironment keeps configuration explicit: the library
// reads no environment variables, so an engine does what its Config says.
// Commands (cmd/, and the helper programs in tools/) map variables such as
// XFER_<KEY> and XFER_DEVICE onto Config. Test plumbing reads its own:
// internal/testutil the test device variables, internal/cabi/cabitest the
// C compiler ($CC) its ABI checks build with.
func TestOnlyCommandsReadEnvironment(t *testing.T) {
	calls := map[string]bool{"os.Getenv": true, "os.LookupEnv": true, "os.Environ": true, "syscall.Getenv": true}
	allowed := []string{"cmd/", "tools/", "internal/testutil/", "internal/cabi/cabitest/"}
	fset := token.NewFileSet()
	paths := goSources(t, false)
	if len(paths) < 50 {
		t.Fatalf("found only %d Go files: the walk is broken", len(paths))
	}
next:
	for _, path := range paths {
		slash := filepath.ToSlash(path)
		for _, a := range allowed {
			if strings.HasPrefix(slash, a) {
				continue next
			}
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && calls[x.Name+"."+sel.Sel.Name] {
				t.Errorf("%s: %s.%s: only commands read the environment; take the value in a Config", fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
			}
			return true
		})
	}
}
