package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartProcess starts a real shell that prints its banner, then more
// than a pipe holds, then ignores SIGTERM: StartProcess returns the banner,
// the output does not block the process, and the test's end still stops it.
func TestStartProcess(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	old := stopGrace
	stopGrace = 100 * time.Millisecond
	t.Cleanup(func() { stopGrace = old })
	mark := filepath.Join(t.TempDir(), "wrote-all")
	cmd := exec.Command(sh, "-c", `trap "" TERM; echo "listening on 127.0.0.1:1"; head -c 200000 /dev/zero; touch "$0"; exec sleep 60`, mark)
	f := &fakeTB{}
	var got string
	f.run(func(tb testing.TB) {
		got = StartProcess(tb, cmd)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(mark); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Error("the process blocked on its output past the first line")
				break
			}
		}
	})
	if got != "listening on 127.0.0.1:1" || f.failed != "" {
		t.Errorf("first line %q, failed %q", got, f.failed)
	}
	if cmd.ProcessState == nil {
		t.Fatal("the process was not stopped and waited for at the test's end")
	}
}

func TestStartProcessNoLine(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	f := &fakeTB{}
	f.run(func(tb testing.TB) { StartProcess(tb, exec.Command(sh, "-c", "printf half")) })
	if !strings.Contains(f.failed, `printed "half"`) || f.returned {
		t.Errorf("a process that exits before a whole line: failed=%q returned=%v", f.failed, f.returned)
	}
}
