//go:build cgo

package ibv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/xferio/xfer/internal/cabi/cabitest"
	"github.com/xferio/xfer/internal/testutil"
)

// TestABI checks every size, offset and constant of abi_table.h, as the
// package's own ibv_abi.h declares them, against the system's
// <infiniband/verbs.h>. It compiles and runs a C program, so it needs a C
// compiler and libibverbs-dev; without them it skips, or fails with
// XFER_REQUIRE_VERBS=1.
func TestABI(t *testing.T) {
	cabitest.CheckConsts(t, abiGoConsts())
	cc, err := cabitest.CC()
	if err != nil {
		testutil.SkipOrFail(t, err.Error()+" to check the ABI against the system headers")
	}
	dir := t.TempDir()
	if !compiles(t, cc, dir, "#include <infiniband/verbs.h>\n") {
		testutil.SkipOrFail(t, "<infiniband/verbs.h> is not installed (apt-get install libibverbs-dev): cannot check the verbs ABI")
	}
	items := abiTable()
	prelude := "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n"
	if err := cabitest.CheckSystem(t, cc, dir, prelude, nil, items, "system headers", "ibv_abi.h"); err != nil {
		t.Fatal(err)
	}
	t.Logf("checked %d sizes, offsets and constants against the system headers", len(items))
}

func compiles(t *testing.T, cc, dir, src string) bool {
	t.Helper()
	f := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(f, []byte(src+"int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return exec.Command(cc, "-fsyntax-only", f).Run() == nil
}
