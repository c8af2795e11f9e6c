package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// TestPause pauses a real process that spins on a CPU: once Pause returns,
// its threads all read as stopped and it gets no more CPU time; SIGCONT
// runs it again.
func TestPause(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	cmd := exec.Command(sh, "-c", `while :; do :; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	Pause(t, cmd.Process)
	if states, err := threadStates(cmd.Process.Pid); err != nil || states != "T" {
		t.Fatalf("after Pause: thread states %q, %v; want T", states, err)
	}
	before := cpuTicks(t, cmd.Process.Pid)
	time.Sleep(200 * time.Millisecond)
	if after := cpuTicks(t, cmd.Process.Pid); after != before {
		t.Errorf("a paused process ran: utime+stime %d then %d ticks", before, after)
	}
	cmd.Process.Signal(syscall.SIGCONT)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if states, _ := threadStates(cmd.Process.Pid); !paused(states) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still stopped 10 s after SIGCONT")
		}
	}
}

// TestPaused: the states that make a group stop.
func TestPaused(t *testing.T) {
	for states, want := range map[string]bool{
		"T": true, "TTS": true, "TDS": true, "tS": true,
		"": false, "S": false, "SS": false, "TR": false, "RT": false, "D": false,
	} {
		if got := paused(states); got != want {
			t.Errorf("paused(%q) = %v, want %v", states, got, want)
		}
	}
}

// cpuTicks reads utime+stime, in clock ticks, from /proc/PID/stat.
func cpuTicks(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	// After the state (field 3) come fields 4 on; utime and stime are 14, 15.
	u, _ := strconv.ParseInt(f[14-3], 10, 64)
	s, _ := strconv.ParseInt(f[15-3], 10, 64)
	return u + s
}
