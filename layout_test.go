package xfer_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/xferio/xfer"

// TestPackageBoundaries is the linter rule that keeps the layers apart:
// only internal/sys talks to the OS through x/sys/unix, only internal/ibv
// imports "C", internal/wire uses the standard library only, and
// dependencies point one way (cmd → xfer → transport → mem → internal);
// the transports (tcp, shm, verbs) import each other never, and the control
// stream they compose (which they all may import) imports none of them.
func TestPackageBoundaries(t *testing.T) {
	imports := map[string]map[string]bool{} // package dir → imports (non-test files)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if imports[dir] == nil {
			imports[dir] = map[string]bool{}
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			imports[dir][p] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// What each layer may import from this module, by path prefix.
	allowed := map[string][]string{
		"internal/sys":  {},
		"internal/wire": {},
		"internal/ibv":  {"internal/sys"},
		"mem":           {"internal/sys"},
		"transport":     {"transport", "internal/", "mem"},
		"xfertest":      {"", "internal/sys"},
		".":             {"transport", "mem", "internal/"},
		"cmd":           {"", "mem", "transport", "internal/", "kv"},
	}
	for dir, ims := range imports {
		for im := range ims {
			if im == "golang.org/x/sys/unix" && dir != "internal/sys" {
				t.Errorf("%s imports x/sys/unix: only internal/sys may", dir)
			}
			if im == "C" && dir != "internal/ibv" {
				t.Errorf("%s imports \"C\": only internal/ibv may", dir)
			}
			if dir == "internal/wire" && strings.Contains(im, ".") {
				t.Errorf("internal/wire imports %s: it must use the standard library only", im)
			}
			rel, ok := strings.CutPrefix(im, module)
			if !ok {
				continue
			}
			rel = strings.TrimPrefix(rel, "/")
			if !allowedImport(allowed, dir, rel) {
				t.Errorf("%s imports %s: against the layering", dir, im)
			}
			if from, to := transportOf(dir), transportOf(rel); from != "" && to != "" && from != to && to != "stream" {
				t.Errorf("%s imports %s: transports are siblings; what they share belongs in transport or transport/stream", dir, im)
			}
		}
	}
}

// transportOf names the transport package (tcp, shm, verbs) that dir lies
// in, or "". The control stream they all compose (transport/stream) is none
// of them, and imports none of them.
func transportOf(dir string) string {
	rest, ok := strings.CutPrefix(dir, "transport/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	switch name {
	case "tcp", "shm", "verbs", "stream":
		return name
	}
	return ""
}

func allowedImport(allowed map[string][]string, dir, rel string) bool {
	layer := dir
	for k := range allowed {
		if k != "." && (dir == k || strings.HasPrefix(dir, k+"/")) && len(k) > 0 {
			layer = k
		}
	}
	prefixes, ok := allowed[layer]
	if !ok {
		return true // services (kv, connector) may use the public API and below
	}
	for _, p := range prefixes {
		switch {
		case p == "" && rel == "":
			return true // the root package
		case p != "" && (rel == strings.TrimSuffix(p, "/") || strings.HasPrefix(rel, p)):
			return true
		}
	}
	return false
}
