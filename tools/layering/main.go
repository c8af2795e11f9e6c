// Command layering measures how the module's files use each other.
//
// A file uses another when it names something defined there, in its own
// package or in one it imports. Each file is placed above the files it uses;
// where a cycle makes that impossible, some use must point back up. The
// command orders the files so that as few uses as it can find point back up
// (strongly connected components first, then a greedy feedback-arc-set order
// improved by moving single files), and prints:
//
//	files, uses, levels (the longest chain of uses once back uses are cut),
//	back-pointing uses (all, and those made by a root-package file),
//	pairs of root files that use each other both ways,
//	the root package's and cmd/xfer's non-test lines.
//
// Usage, from the module root:
//
//	go run ./tools/layering [-v] [-tests] [packages]
//
// -v lists every back-pointing use (with the first names it is made of) and every two-way pair of root files.
// The packages default to ./... ; test files are left out unless -tests.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

func main() {
	verbose := flag.Bool("v", false, "list the back-pointing uses and the two-way pairs of root files")
	tests := flag.Bool("tests", false, "count test files too")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./tools/layering [-v] [-tests] [packages]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	patterns := flag.Args()
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	if err := run(patterns, *tests, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "layering:", err)
		os.Exit(1)
	}
}

func run(patterns []string, tests, verbose bool) error {
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	cfg := &packages.Config{
		Mode:  packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedModule,
		Tests: tests,
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return err
	}
	if n := packages.PrintErrors(pkgs); n > 0 {
		return fmt.Errorf("%d errors loading packages", n)
	}
	rel := func(p string) string {
		if r, err := filepath.Rel(cwd, p); err == nil {
			return filepath.ToSlash(r)
		}
		return p
	}
	var module string
	g := newGraph()
	seen := map[string]bool{}
	why := map[[2]string][]string{} // the first names each use is made of
	for _, p := range pkgs {
		if p.Module != nil && module == "" {
			module = p.Module.Path
		}
		for _, f := range p.Syntax {
			name := rel(p.Fset.Position(f.Pos()).Filename)
			if seen[name] || (!tests && strings.HasSuffix(name, "_test.go")) || !strings.HasSuffix(name, ".go") {
				continue
			}
			seen[name] = true
			g.node(name)
			uses(p.Fset, p.TypesInfo, f, func(obj types.Object) {
				if obj.Pkg() == nil || module == "" || !inModule(obj.Pkg().Path(), module) {
					return
				}
				pos := p.Fset.Position(obj.Pos())
				if !pos.IsValid() {
					// Declared in a package loaded from export data: find
					// it in the loaded packages instead.
					pos = declPos(pkgs, obj)
				}
				if !pos.IsValid() {
					return
				}
				def := rel(pos.Filename)
				if def != name && strings.HasSuffix(def, ".go") && (tests || !strings.HasSuffix(def, "_test.go")) {
					g.edge(name, def)
					k := [2]string{name, def}
					if len(why[k]) < 4 && !slices.Contains(why[k], obj.Name()) {
						why[k] = append(why[k], obj.Name())
					}
				}
			})
		}
	}
	order := g.order()
	pos := map[string]int{}
	for i, n := range order {
		pos[n] = i
	}
	var back [][2]string
	for u, vs := range g.out {
		for v := range vs {
			if pos[v] < pos[u] {
				back = append(back, [2]string{u, v})
			}
		}
	}
	sort.Slice(back, func(i, j int) bool { return back[i][0]+back[i][1] < back[j][0]+back[j][1] })
	rootBack := 0
	for _, b := range back {
		if isRoot(b[0]) {
			rootBack++
		}
	}
	var twoWay [][2]string
	for u, vs := range g.out {
		for v := range vs {
			if u < v && isRoot(u) && isRoot(v) && g.out[v][u] {
				twoWay = append(twoWay, [2]string{u, v})
			}
		}
	}
	sort.Slice(twoWay, func(i, j int) bool { return twoWay[i][0]+twoWay[i][1] < twoWay[j][0]+twoWay[j][1] })
	fmt.Printf("files %d, uses %d, levels %d\n", len(g.out), g.edges(), g.levels(pos))
	fmt.Printf("back-pointing uses %d (from a root file: %d)\n", len(back), rootBack)
	fmt.Printf("root files using each other both ways: %d pairs\n", len(twoWay))
	fmt.Printf("non-test lines: root %d, cmd/xfer %d\n", lines(cwd, "."), lines(cwd, "cmd/xfer"))
	if verbose {
		for _, b := range back {
			fmt.Printf("back  %s -> %s (%s)\n", b[0], b[1], strings.Join(why[b], ", "))
		}
		for _, p := range twoWay {
			fmt.Printf("both  %s <-> %s\n", p[0], p[1])
		}
	}
	return nil
}

// uses calls fn for every object an identifier of f refers to, and for the
// type of every method receiver and embedded field's origin.
func uses(fset *token.FileSet, info *types.Info, f *ast.File, fn func(types.Object)) {
	ast.Inspect(f, func(n ast.Node) bool {
		id, ok := n.(*ast.Ident)
		if !ok {
			return true
		}
		if obj := info.Uses[id]; obj != nil {
			if v, ok := obj.(*types.Var); ok && v.Origin() != nil {
				obj = v.Origin()
			}
			if fnc, ok := obj.(*types.Func); ok && fnc.Origin() != nil {
				obj = fnc.Origin()
			}
			fn(obj)
		}
		return true
	})
}

func declPos(pkgs []*packages.Package, obj types.Object) token.Position {
	for _, p := range pkgs {
		if p.Types == nil || p.Types.Path() != obj.Pkg().Path() {
			continue
		}
		if o := p.Types.Scope().Lookup(obj.Name()); o != nil && o.Pos().IsValid() {
			return p.Fset.Position(o.Pos())
		}
	}
	return token.Position{}
}

func inModule(path, module string) bool {
	return path == module || strings.HasPrefix(path, module+"/")
}

func isRoot(file string) bool { return !strings.Contains(file, "/") }

// lines counts the lines of the non-test Go files directly in dir.
func lines(root, dir string) int {
	names, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			n++
		}
		f.Close()
	}
	return n
}
