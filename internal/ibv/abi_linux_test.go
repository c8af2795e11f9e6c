//go:build cgo

package ibv

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/xferio/xfer/internal/testutil"
)

// TestABI checks every size, offset and constant of abi_table.h, as the
// package's own ibv_abi.h declares them, against the system's
// <infiniband/verbs.h>. It compiles and runs a C program, so it needs a C
// compiler and libibverbs-dev; without them it skips, or fails with
// XFER_REQUIRE_VERBS=1.
func TestABI(t *testing.T) {
	for _, g := range abiGoConsts() {
		if g.Go != g.C {
			what := "constant"
			if g.Mirror {
				what = "Go/C mirror layout"
			}
			t.Errorf("%s %s: Go %d, C %d", what, g.Name, g.Go, g.C)
		}
	}

	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		testutil.SkipOrFail(t, "no C compiler ("+cc+") to check the ABI against the system headers")
	}
	dir := t.TempDir()
	if !compiles(t, cc, dir, "#include <infiniband/verbs.h>\n") {
		testutil.SkipOrFail(t, "<infiniband/verbs.h> is not installed (apt-get install libibverbs-dev): cannot check the verbs ABI")
	}

	items := abiTable()
	var src bytes.Buffer
	src.WriteString("#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n")
	src.WriteString("int main(void) {\n")
	var checked []abiItem
	for _, it := range items {
		checked = append(checked, it)
		fmt.Fprintf(&src, "\tprintf(\"%%lld\\n\", (long long)(%s));\n", it.Expr)
	}
	src.WriteString("\treturn 0;\n}\n")
	prog := filepath.Join(dir, "abi")
	cfile := prog + ".c"
	if err := os.WriteFile(cfile, src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-o", prog, cfile).CombinedOutput(); err != nil {
		t.Fatalf("compiling the ABI probe against the system headers: %v\n%s", err, out)
	}
	out, err := exec.Command(prog).Output()
	if err != nil {
		t.Fatalf("running the ABI probe: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	i := 0
	for ; sc.Scan(); i++ {
		if i >= len(checked) {
			t.Fatalf("the probe printed more than %d values", len(checked))
		}
		sys, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			t.Fatalf("probe output line %d: %v", i+1, err)
		}
		if it := checked[i]; sys != it.Value {
			t.Errorf("%s: system headers %d, ibv_abi.h %d", it.Expr, sys, it.Value)
		}
	}
	if i != len(checked) {
		t.Fatalf("the probe printed %d values, want %d", i, len(checked))
	}
	t.Logf("checked %d sizes, offsets and constants against the system headers (%d in the table)", len(checked), len(items))
}

func compiles(t *testing.T, cc, dir, src string) bool {
	t.Helper()
	f := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(f, []byte(src+"int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return exec.Command(cc, "-fsyntax-only", f).Run() == nil
}
