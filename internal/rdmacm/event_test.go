package rdmacm

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestEventStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{EventConnectRequest.String(), "RDMA_CM_EVENT_CONNECT_REQUEST"},
		{EventTimewaitExit.String(), "RDMA_CM_EVENT_TIMEWAIT_EXIT"},
		{EventType(99).String(), "RDMA_CM_EVENT_99"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// TestEventABI checks the event numbers against enum rdma_cm_event_type of
// <rdma/rdma_cma.h> (librdmacm-dev), which the kernel's events follow. The
// package does not need the header; without it (or a C compiler) the test
// skips.
func TestEventABI(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip("no C compiler to check the rdma_cm event numbers")
	}
	names := eventNames[:]
	var src bytes.Buffer
	src.WriteString("#include <stdio.h>\n#include <rdma/rdma_cma.h>\nint main(void) {\n")
	for _, n := range names {
		fmt.Fprintf(&src, "\tprintf(\"%%d\\n\", (int)RDMA_CM_EVENT_%s);\n", n)
	}
	src.WriteString("\treturn 0;\n}\n")
	prog := filepath.Join(t.TempDir(), "eventabi")
	if err := os.WriteFile(prog+".c", src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-o", prog, prog+".c").CombinedOutput(); err != nil {
		if bytes.Contains(out, []byte("rdma_cma.h")) {
			t.Skip("<rdma/rdma_cma.h> is not installed (apt-get install librdmacm-dev): the event numbers are not checked")
		}
		t.Fatalf("compiling the event probe: %v\n%s", err, out)
	}
	out, err := exec.Command(prog).Output()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for i, n := range names {
		if !sc.Scan() {
			t.Fatal("the probe printed too little")
		}
		if got, _ := strconv.Atoi(sc.Text()); got != i {
			t.Errorf("RDMA_CM_EVENT_%s: system header %d, package %d", n, got, i)
		}
	}
}
