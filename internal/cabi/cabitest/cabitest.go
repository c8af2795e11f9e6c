// Package cabitest is the test half of package cabi: the checks that the
// cgo bindings' tests (internal/ibv, internal/cuda) run on their ABI
// tables and on the binaries they build.
package cabitest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/cabi"
)

// CheckConsts fails tb for each pair of consts whose Go and C values
// differ.
func CheckConsts(tb testing.TB, consts []cabi.Const) {
	tb.Helper()
	for _, g := range consts {
		if g.Go != g.C {
			what := "constant"
			if g.Mirror {
				what = "Go/C mirror layout"
			}
			tb.Errorf("%s %s: Go %d, C %d", what, g.Name, g.Go, g.C)
		}
	}
}

// CC returns the C compiler ($CC, else cc), or an error when there is
// none.
func CC() (string, error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return cc, fmt.Errorf("no C compiler (%s)", cc)
	}
	return cc, nil
}

// CheckSystem compiles with cc (and flags) and runs, in dir, a C program
// that includes prelude and prints each item's expression, and fails tb
// for each item whose value, with the system's headers (named sys in the
// message), differs from the binding's own (named own). A program that
// does not compile is an error with the compiler's output; the caller
// decides whether that skips or fails.
func CheckSystem(tb testing.TB, cc, dir, prelude string, flags []string, items []cabi.Item, sys, own string) error {
	tb.Helper()
	var src bytes.Buffer
	src.WriteString(prelude)
	src.WriteString("int main(void) {\n")
	for _, it := range items {
		fmt.Fprintf(&src, "\tprintf(\"%%lld\\n\", (long long)(%s));\n", it.Expr)
	}
	src.WriteString("\treturn 0;\n}\n")
	prog := filepath.Join(dir, "abi")
	cfile := prog + ".c"
	if err := os.WriteFile(cfile, src.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	args := append(append([]string{}, flags...), "-o", prog, cfile)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("compiling the ABI probe against %s: %w\n%s", sys, err, out)
	}
	out, err := exec.Command(prog).Output()
	if err != nil {
		tb.Fatalf("running the ABI probe: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	i := 0
	for ; sc.Scan(); i++ {
		if i >= len(items) {
			tb.Fatalf("the probe printed more than %d values", len(items))
		}
		v, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			tb.Fatalf("probe output line %d: %v", i+1, err)
		}
		if it := items[i]; v != it.Value {
			tb.Errorf("%s: %s %d, %s %d", it.Expr, sys, v, own, it.Value)
		}
	}
	if i != len(items) {
		tb.Fatalf("the probe printed %d values, want %d", i, len(items))
	}
	return nil
}

// NotLinked fails tb when the running test binary links (DT_NEEDED) a
// library whose name contains any of names: the bindings open their
// libraries at run time, so the binary starts without them.
func NotLinked(tb testing.TB, names ...string) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range libs {
		for _, n := range names {
			if strings.Contains(l, n) {
				tb.Errorf("the test binary links %s (DT_NEEDED: %v)", l, libs)
				break
			}
		}
	}
	tb.Logf("DT_NEEDED: %v", libs)
}
