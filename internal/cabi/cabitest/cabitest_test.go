package cabitest

import (
	"testing"

	"github.com/xferio/xfer/internal/cabi"
)

// TestCheckSystem runs the probe on items whose values the C compiler
// knows, so that the check is exercised on hosts without the bindings'
// system headers (where their TestABI skips).
func TestCheckSystem(t *testing.T) {
	cc, err := CC()
	if err != nil {
		t.Skip(err)
	}
	items := []cabi.Item{{Expr: "sizeof(char)", Value: 1}, {Expr: "CHAR_BIT", Value: 8}}
	prelude := "#include <limits.h>\n#include <stdio.h>\n"
	if err := CheckSystem(t, cc, t.TempDir(), prelude, nil, items, "limits.h", "the table"); err != nil {
		t.Fatal(err)
	}
	if err := CheckSystem(t, cc, t.TempDir(), "#include <no-such-header.h>\n", nil, items, "x", "y"); err == nil {
		t.Error("a probe that does not compile: no error")
	}
}

func TestNotLinked(t *testing.T) { NotLinked(t, "libxfer-no-such-library") }
